//! Following the process tree: the kernel's records applied, in time order, to a model of every process (its
//! images and its executable mappings), and each sample resolved at once to (image, module, address in the
//! module) and counted.
//!
//! Counts are kept by (image, stack): a *stack* is an interned sequence of locations, the sampled instruction
//! first and, with call stacks (`-g`, `--call-graph`), its callers after it ([`callstack`]).

pub mod callstack;
pub mod cgroup;
mod filter;
pub mod hash;
pub mod jit;
pub mod jitdump;
pub mod mapped;
pub mod order;
pub mod procs;
pub mod space;
mod threads;
pub mod wait;
mod window;

use hash::FastMap;

use order::{Event, name_of};
use procs::Processes;
use space::{Map, Module, ModuleKind, Modules, ProcMap, Space, is_anonymous, module_name};

/// A location: a module and an address relative to it (a file offset, or a runtime address for memory without
/// a file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    /// The module.
    pub module: u32,
    /// The address in it.
    pub offset: u64,
}

pub use callstack::Stacks;
pub use filter::Filter;

/// What one source counted.
#[derive(Default)]
pub struct SourceCounts {
    /// Samples by (image, stack).
    pub counts: FastMap<(u32, u32), u64>,
    /// Samples in no (selected) module, by image (`u32::MAX`: of no known process).
    pub outside: FastMap<u32, u64>,
    /// Every sample of the source.
    pub samples: u64,
    /// Records the kernel reported lost.
    pub lost: u64,
    /// Throttle records.
    pub throttled: u64,
}

/// The model of the run.
pub struct Tracker {
    /// The processes and their images.
    pub processes: Processes,
    /// The modules.
    pub modules: Modules,
    /// The stacks.
    pub stacks: Stacks,
    /// One per source.
    pub sources: Vec<SourceCounts>,
    /// Which modules are profiled.
    pub filter: Filter,
    /// Ranges valid in every process (kernel modules, `--range`): (start, end, module), sorted.
    fixed: Vec<(u64, u64, u32)>,
    /// Follow the processes the targets create.
    follow: bool,
    /// Read `/proc/PID/maps` for a process first seen in a sample (its creation was not reported).
    read_unknown: bool,
    /// Address granularity mask (`--bucket`): offsets are rounded down with it.
    mask: u64,
    /// Processes whose mappings had to be read from `/proc` because no record announced them.
    pub late_processes: u32,
    /// When the profiled program started running, sampler clock (ns).
    pub run_start_ns: u64,
    /// How call stacks are recorded (`None`: one frame per sample).
    pub call_graph: Option<crate::options::CallGraph>,
    /// The DWARF unwinders of the processes, and the walks' scratch buffers.
    pub unwinding: callstack::Unwinding,
    /// The off-CPU time (`--off-cpu`), `None` without.
    pub waits: Option<wait::Waits>,
    /// The processes' jitdump files and the samples they are to name.
    pub jit: jitdump::JitState,
    /// Command lines read as soon as their exec record was read, before the record is applied (by then a
    /// short process may be gone, and its arguments with it): by (pid, time of the exec).
    exec_lines: FastMap<(u32, u64), Vec<String>>,
    /// Processes whose command line was still empty when their exec was applied (the kernel reports the exec
    /// before it has set the new program's arguments up): (process, its image then, the program's name). Read
    /// again each round until found, or the process exits or execs again.
    lines_wanted: Vec<(u32, u32, Vec<u8>)>,
    /// The files of mapped objects, opened as their processes see them ([`mapped`]).
    pub mapped: mapped::MappedFiles,
    /// Where each process (by index) finds its files, and its pid in its own namespace.
    pub places: FastMap<u32, mapped::Place>,
    /// The places of pids as their records were read (before they are applied).
    read_places: FastMap<u32, mapped::Place>,
    roots: crate::files::Roots,
}

impl Tracker {
    /// A model for `sources` sources; `follow`: children are followed; `read_unknown`: a process first seen in
    /// a sample has its mappings read from `/proc`; `bucket_log2`: address granularity (0: exact).
    pub fn new(
        sources: usize,
        follow: bool,
        read_unknown: bool,
        bucket_log2: u32,
        filter: Filter,
    ) -> Tracker {
        Tracker {
            processes: Processes::default(),
            modules: Modules::default(),
            stacks: Stacks::default(),
            sources: (0..sources).map(|_| SourceCounts::default()).collect(),
            filter,
            fixed: Vec::new(),
            follow,
            read_unknown,
            mask: !((1u64 << bucket_log2.min(63)) - 1),
            late_processes: 0,
            run_start_ns: 0,
            call_graph: None,
            unwinding: callstack::Unwinding::default(),
            waits: None,
            jit: jitdump::JitState::default(),
            exec_lines: FastMap::default(),
            lines_wanted: Vec::new(),
            mapped: mapped::MappedFiles::default(),
            places: FastMap::default(),
            read_places: FastMap::default(),
            roots: crate::files::Roots::default(),
        }
    }

    /// Read again the command lines that were not set up yet when their exec was applied.
    pub fn read_wanted_lines(&mut self) {
        let processes = &mut self.processes;
        self.lines_wanted.retain(|(p, image, comm)| {
            let process = &processes.list[*p as usize];
            if process.exit_ns.is_some() || process.images.last() != Some(image) {
                return false;
            }
            let line = procs::exec_cmdline(process.pid, comm);
            let found = line.is_some();
            processes.list[*p as usize].cmdline = line;
            !found
        });
    }

    /// An exec record of process `pid` (to program `comm`, at `time`) was just read: its command line is read
    /// now, while the process is most likely still running that program, and kept for when the record is
    /// applied. False when it could not be read yet (see [`wants_lines`](Self::wants_lines)).
    pub fn exec_read(&mut self, pid: u32, time: u64, comm: &[u8]) -> bool {
        match procs::exec_cmdline(pid, comm) {
            Some(line) => {
                self.exec_lines.insert((pid, time), line);
                true
            }
            None => false,
        }
    }

    /// True while some running process's command line is still to be read (each round reads it again).
    pub fn wants_lines(&self) -> bool {
        !self.lines_wanted.is_empty()
    }

    /// Add a range valid in every process (a kernel module, a `--range`).
    pub fn add_fixed(&mut self, name: &str, path: &str, kind: ModuleKind, start: u64, end: u64) {
        let wanted = match kind {
            ModuleKind::Range => true,
            _ => self.filter.wanted(name, path),
        };
        let module = self
            .modules
            .intern(kind.clone(), path, (0, start), || Module {
                name: name.to_string(),
                path: path.to_string(),
                kind,
                first: (start, end, 0),
                mapped_ns: 0,
                wanted,
                object: None,
            });
        self.fixed.push((start, end, module));
        self.fixed.sort_unstable();
    }

    /// A process present from the start (the profiled command, an attached process) with the mappings it has.
    pub fn add_process(
        &mut self,
        pid: u32,
        ppid: u32,
        comm: &str,
        maps: &[ProcMap],
        time: u64,
    ) -> u32 {
        let p = self.processes.add(pid, ppid, comm, time, Space::default());
        // Its threads now (the main thread may have ended already, with pthread_exit); a process that cannot
        // be read any more keeps its main thread alone, whose exit then ends it.
        let live = procs::live_threads(pid);
        if !live.is_empty() {
            let threads = &mut self.processes.list[p as usize].threads;
            threads.clear();
            threads.extend(live);
        }
        let place = self.place_now(pid);
        self.places.insert(p, place);
        for m in maps {
            let len = m.end - m.start;
            self.map(
                p,
                m.start,
                len,
                m.pgoff,
                (m.dev, m.inode),
                m.path.as_bytes(),
                0,
            );
        }
        self.processes.list[p as usize].cmdline =
            Some(procs::cmdline(pid)).filter(|c| !c.is_empty());
        self.processes.list[p as usize].cgroup = cgroup::cgroup_of(pid);
        p
    }

    /// The process `pid` now; one not seen before is added (its creation was not reported: a process of a
    /// global profile, or one created before an attach), with its mappings from `/proc` when `read_unknown`.
    fn process(&mut self, pid: u32, time: u64) -> u32 {
        if let Some(p) = self.processes.get(pid) {
            return p;
        }
        let comm = procs::comm(pid).unwrap_or_else(|| procs::unknown_comm(pid));
        // Its parent, while it still runs (else from its exit record, `Processes::adopt`).
        let ppid = procs::parent_pid(pid).unwrap_or(0);
        let maps = if self.read_unknown {
            self.late_processes += 1;
            space::read_executable_maps(pid).unwrap_or_default()
        } else {
            Vec::new()
        };
        self.add_process(pid, ppid, &comm, &maps, time)
    }

    /// Add a mapping to process `p`.
    #[allow(clippy::too_many_arguments)]
    fn map(
        &mut self,
        p: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        id: (u64, u64),
        name: &[u8],
        time: u64,
    ) {
        let path = String::from_utf8_lossy(name);
        let pid = self.processes.list[p as usize].pid;
        let (kind, key_path, display) = if is_anonymous(&path) {
            (
                ModuleKind::Anon { pid },
                String::new(),
                jit::ANON_MODULE.to_string(),
            )
        } else if path.starts_with('[') {
            (ModuleKind::Special, path.to_string(), path.to_string())
        } else {
            (ModuleKind::File, path.to_string(), module_name(&path))
        };
        let wanted = self.filter.wanted(&display, &path);
        let end = addr.wrapping_add(len);
        let object = (kind == ModuleKind::File).then(|| self.object(p, (addr, end), &path, id));
        let module = self.modules.intern(kind.clone(), &key_path, id, || Module {
            name: display,
            path: if key_path.is_empty() {
                "//anon".into()
            } else {
                key_path.clone()
            },
            kind,
            first: (addr, end, pgoff),
            mapped_ns: time,
            wanted,
            object: object.clone(),
        });
        let m = &mut self.modules.list[module as usize];
        if matches!(m.object, Some(Err(_))) && matches!(object, Some(Ok(_))) {
            m.object = object; // an earlier process of the file was gone before it could be opened
        }
        self.processes.list[p as usize]
            .space
            .insert(addr, Map { end, pgoff, module });
        self.unwinding
            .mapped(p, addr, end, pgoff, &self.modules.list[module as usize]);
        let object = self.modules.list[module as usize].object.clone();
        self.jit_mapped(p, &path, time, object.as_ref());
    }

    /// Apply one record.
    pub fn apply(&mut self, time: u64, event: &Event, names: &[u8]) {
        match *event {
            Event::Sample {
                source,
                pid,
                tid,
                ip,
                kernel,
                chain,
                regs,
                stack,
            } => {
                let chain = name_of(names, chain);
                let stack = name_of(names, stack);
                self.sample(source, (pid, tid), ip, kernel, time, (chain, regs, stack))
            }
            Event::Mmap {
                pid,
                addr,
                len,
                pgoff,
                ino,
                dev,
                name,
            } => {
                let p = self.process(pid, time);
                self.map(p, addr, len, pgoff, (dev, ino), name_of(names, name), time);
            }
            Event::Comm {
                pid,
                tid,
                exec,
                name,
            } => {
                if pid != tid && !exec {
                    return; // a thread's name
                }
                let raw = name_of(names, name);
                let comm = String::from_utf8_lossy(raw).into_owned();
                let p = self.process(pid, time);
                if exec {
                    self.processes.exec(p, &comm);
                    self.unwinding.forget(p);
                    cgroup::exec_read(&mut self.processes.list[p as usize]);
                    // The full command line: as read when the record was read, else now if the process
                    // still runs this image.
                    let line = self
                        .exec_lines
                        .remove(&(pid, time))
                        .or_else(|| procs::exec_cmdline(pid, raw));
                    self.lines_wanted.retain(|w| w.0 != p);
                    if line.is_none() {
                        self.lines_wanted
                            .push((p, self.processes.image(p), raw.to_vec()));
                    }
                    self.processes.list[p as usize].cmdline = line;
                } else {
                    self.processes.rename(p, &comm);
                }
            }
            Event::Fork { pid, ppid, tid } => {
                if pid == ppid {
                    // A thread: the process lives until its last thread exits.
                    if let Some(p) = self.processes.get(pid) {
                        self.processes.thread_started(p, tid);
                    }
                    return;
                }
                if !self.follow {
                    self.processes.not_followed.push(pid);
                    return;
                }
                if let Some(p) = self.processes.get(pid)
                    && self.processes.list[p as usize].start_ns == time
                {
                    return; // reported twice
                }
                self.processes.fork(ppid, pid, time);
            }
            Event::Exit { pid, ppid, tid } => {
                // A thread ended (`pid == tid`: the main thread, which may end before the others); the process
                // ends with its last thread.
                if let Some(p) = self.processes.get(pid) {
                    self.processes.adopt(p, ppid);
                }
                if let Some(p) = self.processes.get(pid)
                    && self.processes.thread_exited(p, tid)
                {
                    if let Some(old) = self.processes.exit(p, time) {
                        self.unwinding.forget(old);
                    }
                }
            }
            Event::Lost { source, lost } => self.sources[source as usize].lost += lost,
            Event::OffCpu {
                pid,
                tid,
                start,
                preempt,
                wait,
                chain,
                regs,
                stack,
            } => {
                let walk = (name_of(names, chain), regs, name_of(names, stack));
                self.off_cpu(pid, tid, (start, time), preempt, wait, walk);
            }
            Event::Throttle { source, throttled } => {
                if throttled {
                    self.sources[source as usize].throttled += 1;
                }
            }
        }
    }

    /// Resolve and count one sample.
    fn sample(
        &mut self,
        source: u8,
        (pid, tid): (u32, u32),
        ip: u64,
        kernel: bool,
        time: u64,
        walk: callstack::Walk<'_>,
    ) {
        let p = self.process(pid, time);
        let image = self.processes.image(p);
        let loc = self.locate(p, ip, kernel);
        let stack = match (loc, self.call_graph) {
            (Some(loc), Some(_)) => Some(self.intern_walk(p, loc, ip, kernel, walk)),
            (Some(loc), None) => Some(self.stacks.intern(loc)),
            (None, _) => None,
        };
        if let (Some(w), Some(stack), false) = (self.waits.as_mut(), stack, kernel) {
            w.ran(tid, time, p, stack);
        }
        let counts = &mut self.sources[source as usize];
        counts.samples += 1;
        match stack {
            Some(stack) => {
                *counts.counts.entry((image, stack)).or_insert(0) += 1;
                self.jit_sample((source, image, stack), time, ip);
            }
            None => *counts.outside.entry(image).or_insert(0) += 1,
        }
    }

    /// The location of `ip` in process `p`: a fixed range, else its mapping; `None`: outside.
    fn locate(&self, p: u32, ip: u64, kernel: bool) -> Option<Loc> {
        self.locate_in(p, ip, kernel, false)
    }

    /// The location of `ip` in process `p`. A sampled address (`caller` false) in a module `--module` does not
    /// select is outside, and its offset is rounded to `--bucket`; a caller is located wherever it is, exactly.
    fn locate_in(&self, p: u32, ip: u64, kernel: bool, caller: bool) -> Option<Loc> {
        let mask = if caller { u64::MAX } else { self.mask };
        let i = self.fixed.partition_point(|&(s, _, _)| s <= ip);
        if let Some(&(start, end, module)) = i.checked_sub(1).and_then(|i| self.fixed.get(i))
            && ip < end
            && start <= ip
        {
            let m = &self.modules.list[module as usize];
            let offset = match m.kind {
                ModuleKind::Range => ip - start,
                _ => ip,
            };
            return Some(Loc {
                module,
                offset: offset & mask,
            });
        }
        if kernel {
            return None;
        }
        let (start, map) = self.processes.list[p as usize].space.find(ip)?;
        let m = &self.modules.list[map.module as usize];
        if !caller && !m.wanted {
            return None;
        }
        let offset = match m.kind {
            ModuleKind::File | ModuleKind::Special => ip - start + map.pgoff,
            _ => ip,
        };
        Some(Loc {
            module: map.module,
            offset: offset & mask,
        })
    }
}
