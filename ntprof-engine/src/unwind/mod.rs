//! Call stacks from copies of the user stack (`--call-graph dwarf`): DWARF CFI unwinding.
//!
//! A sample taken with a user stack copy carries the user registers (ip, sp, bp) and the bytes of the stack from
//! sp upward, as the kernel copied them when the sample was taken. A [`ProcessUnwinder`] knows the executable
//! mappings of one process; it finds each frame's caller by the module's call frame information
//! (`.eh_frame`, through `.eh_frame_hdr`; or `.debug_frame`), reading memory **only from the stack copy**. So
//! code built without frame pointers (most distribution libraries, libc included) is walked, and nothing is read
//! from the live process.
//!
//! The unwinding rules are framehop's x86-64 unwinder (the one samply uses): the CFI of each module is indexed
//! once, and evaluated rules are cached per address across samples. The unwind sections of a file are read once
//! ([`UnwindFiles`]) and shared, by `Arc`, by every process that maps the file.
//!
//! **Never a wrong caller.** A walk stops, and the stack is marked truncated, when the copy runs out (the
//! next frame is beyond the bytes the kernel copied), when a return address lies in no executable mapping of
//! the process, when the walk does not advance, or at the frame limit. It ends complete only where the CFI says
//! the stack ends (`_start`, a thread's start routine: the return address is undefined there).
//!
//! **Addresses.** The first address of a walk is the sampled instruction pointer; every other one is a return
//! address, which points after the call instruction: look it up at `address - 1` for its function and line
//! (the return address may be the first byte of another line or function). Kernel callchains (frame pointers)
//! follow the same convention.
//!
//! **Signal frames.** A signal handler returns into the kernel's signal-return trampoline (glibc's
//! `__restore_rt`), whose CFI the unwinder cannot evaluate. When a return address is that trampoline (its code,
//! `mov $15, %rax; syscall`, read from the file), the walk reads the interrupted context from the `ucontext` the
//! kernel saved on the stack (in the copy) and goes on from the interrupted instruction. To keep the one
//! convention, the trampoline is given as its address + 1 and the interrupted instruction as its address + 1, so
//! that `address - 1` is each one exactly.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};

use crate::symbols::{Mapping, load_bias};

mod sections;

pub use sections::{Bytes, UnwindSections};

pub use ntprofile::UserRegs;

/// The deepest walk, in frames (perf's default `kernel.perf_event_max_stack` is 127; a user-space stack copy of
/// 64 KiB rarely holds more than a few hundred frames).
pub const MAX_FRAMES: usize = 1024;

/// Unwind sections of files, read once per file, and framehop modules, built once per (file, mapping).
#[derive(Default)]
pub struct UnwindFiles {
    files: HashMap<PathBuf, Option<Arc<UnwindSections>>>,
    modules: HashMap<(PathBuf, u64, u64, u64), Option<Module<Bytes>>>,
}

impl UnwindFiles {
    /// The unwind sections of `path` (`None` when it cannot be read or is not an object).
    pub fn sections(&mut self, path: &Path) -> Option<Arc<UnwindSections>> {
        self.files
            .entry(path.to_path_buf())
            .or_insert_with(|| UnwindSections::read(path).ok().map(Arc::new))
            .clone()
    }

    /// The module for an executable mapping `[start, end)` of `path` at file offset `pgoff`.
    fn module(&mut self, path: &Path, start: u64, end: u64, pgoff: u64) -> Option<Module<Bytes>> {
        let key = (path.to_path_buf(), start, end, pgoff);
        if let Some(m) = self.modules.get(&key) {
            return m.clone();
        }
        let module = self.sections(path).and_then(|s| {
            if !s.has_cfi() {
                return None;
            }
            let mapping = Mapping {
                start,
                end,
                perms: "r-xp".to_string(),
                offset: pgoff,
                path: String::new(),
            };
            let bias = load_bias(&mapping, s.segments.iter().copied())?;
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: s.text.clone(),
                got_svma: s.got.clone(),
                eh_frame_svma: s.eh_frame.as_ref().map(|e| e.svma.clone()),
                eh_frame: s.eh_frame.as_ref().map(|e| e.data.clone()),
                eh_frame_hdr_svma: s.eh_frame_hdr.as_ref().map(|e| e.svma.clone()),
                eh_frame_hdr: s.eh_frame_hdr.as_ref().map(|e| e.data.clone()),
                debug_frame: s.debug_frame.clone(),
                ..ExplicitModuleSectionInfo::default()
            };
            Some(Module::new(
                path.display().to_string(),
                start..end,
                bias,
                info,
            ))
        });
        self.modules.insert(key, module.clone());
        module
    }
}

/// The unwinder of one process: its executable mappings, and a cache of evaluated rules.
pub struct ProcessUnwinder {
    unwinder: UnwinderX86_64<Bytes>,
    cache: CacheX86_64,
    /// Executable regions (file-backed or anonymous, e.g. JIT code), by start: end.
    regions: BTreeMap<u64, u64>,
    /// The file-backed regions' unwind sections and load bias, by start.
    files: BTreeMap<u64, (u64, Arc<UnwindSections>)>,
    /// Starts of the regions that have a framehop module.
    modules: Vec<u64>,
}

impl Default for ProcessUnwinder {
    fn default() -> Self {
        ProcessUnwinder::new()
    }
}

impl ProcessUnwinder {
    /// An unwinder that knows no mapping yet.
    pub fn new() -> ProcessUnwinder {
        ProcessUnwinder {
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            regions: BTreeMap::new(),
            files: BTreeMap::new(),
            modules: Vec::new(),
        }
    }

    /// Remove the regions overlapping `[start, end)` (a new mapping replaces what it overlaps).
    fn unmap(&mut self, start: u64, end: u64) {
        let overlapping: Vec<u64> = self
            .regions
            .range(..end)
            .filter(|&(_, &e)| e > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            self.regions.remove(&s);
            self.files.remove(&s);
            if let Some(i) = self.modules.iter().position(|&m| m == s) {
                self.modules.swap_remove(i);
                self.unwinder.remove_module(s);
            }
        }
    }

    /// An executable mapping `[start, end)` at file offset `pgoff` of `path` (a file path; anything else,
    /// `//anon`, `[vdso]`, a JIT's anonymous code, is a region without unwind information: walks may pass
    /// through it only by its frame pointers).
    pub fn add_mapping(
        &mut self,
        files: &mut UnwindFiles,
        start: u64,
        end: u64,
        pgoff: u64,
        path: &str,
    ) {
        if start >= end {
            return;
        }
        self.unmap(start, end);
        self.regions.insert(start, end);
        if path.starts_with('/') {
            if let Some(module) = files.module(Path::new(path), start, end, pgoff) {
                self.unwinder.add_module(module);
                self.modules.push(start);
            }
            if let Some(sections) = files.sections(Path::new(path)) {
                let mapping = Mapping {
                    start,
                    end,
                    perms: "r-xp".to_string(),
                    offset: pgoff,
                    path: String::new(),
                };
                if let Some(bias) = load_bias(&mapping, sections.segments.iter().copied()) {
                    self.files.insert(start, (bias, sections));
                }
            }
        }
    }

    /// Walk the stack of a sample: `regs` as the sample's user registers, `stack` the copy of the stack from
    /// `regs.sp` upward. Appends the instruction pointer and then each return address to `out` (at most
    /// [`MAX_FRAMES`] in all) and returns true when the walk is truncated (see the module documentation).
    pub fn unwind(&mut self, regs: UserRegs, stack: &[u8], out: &mut Vec<u64>) -> bool {
        let sp = regs.sp;
        let read = |addr: u64| -> Result<u64, ()> {
            let offset = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack
                .get(offset..offset.checked_add(8).ok_or(())?)
                .ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut read_stack = read;
        let mut state = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut frame = FrameAddress::from_instruction_pointer(regs.ip);
        out.push(regs.ip);
        let mut count = 1;
        loop {
            let ret = match self.unwinder.unwind_frame(
                frame,
                &mut state,
                &mut self.cache,
                &mut read_stack,
            ) {
                Ok(Some(ret)) => ret,
                Ok(None) => return false,
                Err(_) => return true,
            };
            if !self.regions.is_empty() && !is_code(&self.regions, ret.wrapping_sub(1)) {
                return true;
            }
            if count + 2 > MAX_FRAMES {
                return true;
            }
            if self.is_sigreturn(ret) {
                // The handler returned into the trampoline: the ucontext is at the stack pointer now, its
                // mcontext (sigcontext) 40 bytes in: rbp at 10, rsp at 15, rip at 16 eight-byte words.
                let uc = state.sp().wrapping_add(40);
                let (Ok(bp), Ok(sp), Ok(ip)) = (read(uc + 80), read(uc + 120), read(uc + 128))
                else {
                    out.push(ret + 1);
                    return true;
                };
                if !is_code(&self.regions, ip) {
                    out.push(ret + 1);
                    return true;
                }
                out.push(ret + 1);
                out.push(ip + 1);
                count += 2;
                state = UnwindRegsX86_64::new(ip, sp, bp);
                frame = FrameAddress::from_instruction_pointer(ip);
                continue;
            }
            let Some(next) = FrameAddress::from_return_address(ret) else {
                return true;
            };
            out.push(ret);
            count += 1;
            frame = next;
        }
    }

    /// True when `addr` (a return address) is the signal-return trampoline of its module.
    fn is_sigreturn(&self, addr: u64) -> bool {
        let Some((&start, (bias, sections))) = self.files.range(..=addr).next_back() else {
            return false;
        };
        addr < self.regions.get(&start).copied().unwrap_or(0)
            && sections.is_sigreturn(addr.wrapping_sub(*bias))
    }
}

fn is_code(regions: &BTreeMap<u64, u64>, addr: u64) -> bool {
    regions
        .range(..=addr)
        .next_back()
        .is_some_and(|(_, &end)| addr < end)
}

#[cfg(test)]
mod tests;
