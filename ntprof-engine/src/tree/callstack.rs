//! Call stacks: each sample's frames (the sampled location, then its callers) located in the model of its
//! process and interned, so that the counts stay keyed by (image, stack id) and nothing is allocated per sample
//! once a stack has been seen.
//!
//! Frames come from the kernel's callchain (`-g`, `--call-graph fp`: frame pointers, walked by the kernel) or
//! from unwinding the sample's user stack copy with the modules' CFI (`--call-graph dwarf`, [`crate::unwind`]).
//! A caller is stored at its return address − 1 (inside the call instruction), so that it symbolizes to the
//! calling function and line. A walk that ends where no executable mapping holds the next address, that runs out
//! of stack copy, or that reaches the frame limit is *truncated*: its stack is kept as far as it is known and
//! marked, never completed with a guess.

use std::collections::HashMap;

use super::hash::FastMap;
use super::space::{Module, ModuleKind};
use super::{Loc, Tracker};
use crate::options::CallGraph;
use crate::unwind::{ProcessUnwinder, UnwindFiles};

/// What a sample brings for its stack: the callchain bytes, the user registers, the user stack copy.
pub type Walk<'a> = (&'a [u8], Option<ntprofile::UserRegs>, &'a [u8]);

/// The marker of a truncated stack, after its last frame in the interning key.
const TRUNCATED: Loc = Loc {
    module: u32::MAX,
    offset: u64::MAX,
};

/// Interned stacks.
#[derive(Default)]
pub struct Stacks {
    /// The sampled location of each stack id (its first frame).
    pub locs: Vec<Loc>,
    /// Each stack id's frames: a range of `frames` (the sampled location first, then its callers, outward).
    ranges: Vec<(u32, u32)>,
    /// Whether each stack's walk was cut short.
    truncated: Vec<bool>,
    frames: Vec<Loc>,
    ids: FastMap<Box<[Loc]>, u32>,
}

impl Stacks {
    /// The id of the one-frame stack `loc` (a run without call stacks).
    pub fn intern(&mut self, loc: Loc) -> u32 {
        self.intern_frames(&[loc], false)
    }

    /// The id of the stack `frames` (first the sampled location), `truncated` when its walk was cut short.
    pub fn intern_frames(&mut self, frames: &[Loc], truncated: bool) -> u32 {
        let key_len = frames.len() + usize::from(truncated);
        // The key is the frames, with the marker after them when truncated: look it up without allocating.
        let found = if truncated {
            let mut key = Vec::with_capacity(key_len);
            key.extend_from_slice(frames);
            key.push(TRUNCATED);
            self.ids.get(key.as_slice()).copied().ok_or(key)
        } else {
            self.ids.get(frames).copied().ok_or_else(|| frames.to_vec())
        };
        match found {
            Ok(id) => id,
            Err(key) => {
                let id = self.locs.len() as u32;
                self.locs.push(frames[0]);
                let start = self.frames.len() as u32;
                self.frames.extend_from_slice(frames);
                self.ranges.push((start, self.frames.len() as u32));
                self.truncated.push(truncated);
                self.ids.insert(key.into_boxed_slice(), id);
                id
            }
        }
    }

    /// The frames of stack `id`: the sampled location first, then its callers.
    pub fn frames(&self, id: u32) -> &[Loc] {
        let (a, b) = self.ranges[id as usize];
        &self.frames[a as usize..b as usize]
    }

    /// Whether stack `id`'s walk was cut short.
    pub fn truncated(&self, id: u32) -> bool {
        self.truncated[id as usize]
    }
}

/// The DWARF unwinders of the processes (built when a process's first stack copy arrives, kept up to date with
/// its mappings, dropped at exec and exit), the files' unwind sections, and scratch buffers.
#[derive(Default)]
pub struct Unwinding {
    files: UnwindFiles,
    processes: HashMap<u32, ProcessUnwinder>,
    addrs: Vec<u64>,
    locs: Vec<Loc>,
    /// Stacks whose walk was cut short, over the run.
    pub truncated: u64,
    /// Walks, over the run.
    pub walks: u64,
}

impl Unwinding {
    /// Process `p` mapped `[start, end)` of `module` at file offset `pgoff`.
    pub fn mapped(&mut self, p: u32, start: u64, end: u64, pgoff: u64, module: &Module) {
        if let Some(u) = self.processes.get_mut(&p) {
            add(u, &mut self.files, start, end, pgoff, module);
        }
    }

    /// Process `p` replaced its image or exited.
    pub fn forget(&mut self, p: u32) {
        self.processes.remove(&p);
    }
}

fn add(
    u: &mut ProcessUnwinder,
    files: &mut UnwindFiles,
    start: u64,
    end: u64,
    pgoff: u64,
    m: &Module,
) {
    // A file's unwind tables are read from the very file that was mapped (none when it could not be
    // checked: its frames are then walked by frame pointers only).
    let path = match (&m.kind, &m.object) {
        (ModuleKind::File, Some(Ok(o))) => o.open_path().to_string_lossy().into_owned(),
        _ => String::new(),
    };
    u.add_mapping(files, start, end, pgoff, &path);
}

/// True when the frames before a user address were kernel frames (the user address is where the kernel was
/// entered).
fn previous_kernel_done(before: &[u64]) -> bool {
    before.last().is_some_and(|&a| is_kernel_address(a))
}

/// A kernel address (the upper half of the x86-64 address space).
fn is_kernel_address(addr: u64) -> bool {
    addr >> 63 == 1
}

impl Tracker {
    /// Intern the stack of a sample of process `p` whose sampled location is `leaf`.
    pub(super) fn intern_walk(
        &mut self,
        p: u32,
        leaf: Loc,
        ip: u64,
        kernel: bool,
        walk: Walk<'_>,
    ) -> u32 {
        let (chain, regs, stack) = walk;
        let mut addrs = std::mem::take(&mut self.unwinding.addrs);
        let mut locs = std::mem::take(&mut self.unwinding.locs);
        addrs.clear();
        locs.clear();
        locs.push(leaf);
        let mut truncated = false;
        // The callchain: kernel frames, then (frame-pointer mode) user frames. Its first address is the sampled
        // one; the first user address after kernel frames is where user space entered the kernel (not a return
        // address).
        addrs.extend(
            chain
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())),
        );
        // A blocked thread read from /proc brings registers and a stack copy whatever the mode: unwound with CFI.
        let dwarf = matches!(self.call_graph, Some(CallGraph::Dwarf(_))) || regs.is_some();
        let mut previous_kernel = kernel;
        for (i, &addr) in addrs.iter().enumerate() {
            let in_kernel = is_kernel_address(addr);
            if i == 0 && addr == ip {
                continue;
            }
            if dwarf && !in_kernel {
                break; // the user part comes from the stack copy
            }
            // The first address of a context is an instruction pointer, the others return addresses.
            let first_of_context = i == 0 || in_kernel != previous_kernel;
            previous_kernel = in_kernel;
            let at = if first_of_context {
                addr
            } else {
                addr.wrapping_sub(1)
            };
            match self.locate_in(p, at, in_kernel, true) {
                Some(loc) => locs.push(loc),
                // A kernel stack is complete at the system call or interrupt entry; the user space it came from
                // is not profiled (a --kernel run knows no process's mappings).
                None if kernel && !in_kernel && previous_kernel_done(&addrs[..i]) => break,
                None => {
                    truncated = true;
                    break;
                }
            }
        }
        if !dwarf && !truncated && addrs.len() >= usize::from(u16::MAX).min(127) {
            truncated = true; // the kernel's frame limit
        }
        if dwarf && !truncated {
            match regs {
                Some(regs) => {
                    self.unwinding.walks += 1;
                    let mut frames = Vec::new();
                    std::mem::swap(&mut frames, &mut addrs);
                    frames.clear();
                    let cut = self.unwinder(p).unwind(regs, stack, &mut frames);
                    truncated |= cut;
                    // A kernel sample: its user part starts at the user ip (not a return address).
                    for (i, &addr) in frames.iter().enumerate() {
                        if i == 0 && !kernel {
                            continue; // the sampled location itself
                        }
                        let at = if i == 0 { addr } else { addr.wrapping_sub(1) };
                        match self.locate_in(p, at, false, true) {
                            Some(loc) => locs.push(loc),
                            None => {
                                truncated = true;
                                break;
                            }
                        }
                    }
                    addrs = frames;
                }
                // No user registers: a kernel thread, or a sample the kernel could not copy the stack of.
                None => truncated = !kernel,
            }
        }
        if truncated {
            self.unwinding.truncated += 1;
        }
        let id = self.stacks.intern_frames(&locs, truncated);
        self.unwinding.addrs = addrs;
        self.unwinding.locs = locs;
        id
    }

    /// The unwinder of process `p`, built from its mappings on first use.
    fn unwinder(&mut self, p: u32) -> &mut ProcessUnwinder {
        let Tracker {
            unwinding,
            processes,
            modules,
            ..
        } = self;
        unwinding.processes.entry(p).or_insert_with(|| {
            let mut u = ProcessUnwinder::new();
            for (start, map) in processes.list[p as usize].space.iter() {
                let m = &modules.list[map.module as usize];
                add(&mut u, &mut unwinding.files, start, map.end, map.pgoff, m);
            }
            u
        })
    }
}
