//! Off-CPU intervals applied to the model (`--off-cpu`): each one's nanoseconds counted under its stack — the
//! wait kind as a `[wait]` frame on top of the user frames it blocked at — in one of two extra sources, the
//! voluntary waits (`off_cpu`) and the preemptions (`preempted`), and totalled per thread and per wait kind.

use std::collections::BTreeMap;

use super::hash::FastMap;
use super::space::{Module, ModuleKind};
use super::{Loc, SourceCounts, Tracker, callstack::Walk};
use crate::waits::{Wait, syscalls};

/// The name of the module of the wait frames.
pub const WAIT_MODULE: &str = "[wait]";
/// The wait frame's offset for a thread off CPU outside a system call.
const NO_SYSCALL: u64 = 1 << 32;
/// The wait frame's offset for a wait that was over before it could be read.
const UNREAD: u64 = (1 << 32) | 1;
/// The wait frame's offset for a system call the kernel's chain does not name.
const SOME_SYSCALL: u64 = (1 << 32) | 2;
/// The wait frame's offset for a preemption placed at the thread's last CPU sample.
const LAST_SAMPLE: u64 = (1 << 32) | 3;

/// The wait frame's offset for `wait`.
pub fn wait_key(wait: Wait) -> u64 {
    match wait {
        Wait::Syscall(nr) => nr,
        Wait::NoSyscall => NO_SYSCALL,
        Wait::Unread => UNREAD,
        Wait::SomeSyscall => SOME_SYSCALL,
        Wait::LastSample => LAST_SAMPLE,
    }
}

/// The name of a wait frame's offset: the system call, or what is known.
pub fn wait_name(key: u64) -> String {
    match key {
        NO_SYSCALL => "[no system call]".to_string(),
        UNREAD => "[wait not read]".to_string(),
        SOME_SYSCALL => "[system call]".to_string(),
        LAST_SAMPLE => "[last CPU sample]".to_string(),
        nr => match syscalls::name(nr) {
            Some(name) => name.to_string(),
            None => format!("syscall {nr}"),
        },
    }
}

/// One thread's off-CPU time.
#[derive(Clone, Debug, Default)]
pub struct ThreadWaits {
    /// Its process (index in the model).
    pub process: u32,
    /// Its name, when it could be read.
    pub name: String,
    /// Voluntary off-CPU nanoseconds.
    pub voluntary_ns: u64,
    /// Preempted nanoseconds.
    pub preempted_ns: u64,
    /// Intervals.
    pub waits: u64,
    /// Nanoseconds of waits whose place was not read.
    pub unread_ns: u64,
}

/// The off-CPU time of the run.
#[derive(Debug)]
pub struct Waits {
    /// The index of the voluntary source in [`Tracker::sources`].
    pub voluntary: usize,
    /// The index of the preempted source.
    pub preempted: usize,
    /// The `[wait]` module.
    module: u32,
    /// By (pid, tid).
    pub threads: BTreeMap<(u32, u32), ThreadWaits>,
    /// By (wait key, preempted): (nanoseconds, intervals).
    pub kinds: BTreeMap<(u64, bool), (u64, u64)>,
    /// Nanoseconds of intervals before the run's start, not counted.
    pub before_start_ns: u64,
    /// Waits counted with a stack (their blocked thread's, or a sample's), and of those the truncated ones:
    /// apart from the CPU samples' (a wait's stack is always unwound from a copy, whatever `-g` mode).
    pub stacks: (u64, u64),
    /// By thread: where it was last seen running (a user-space CPU sample), and when its last voluntary wait
    /// ended; a preemption not read is placed there.
    running: FastMap<u32, Running>,
}

/// A thread's last user-space CPU sample and the end of its last voluntary wait.
#[derive(Clone, Copy, Debug, Default)]
struct Running {
    /// The sample's time, process and stack (`None` before the first sample).
    sample: Option<(u64, u32, u32)>,
    /// The end of its last voluntary wait.
    voluntary_end: u64,
}

impl Waits {
    /// A new window: the totals back to zero (where each thread last ran stays: a preemption read in the
    /// window is placed with it).
    pub(super) fn start_window(&mut self) {
        self.threads.clear();
        self.kinds.clear();
        self.before_start_ns = 0;
        self.stacks = (0, 0);
    }

    /// Thread `tid` of process `p` was sampled in user space at `time`, at `stack`.
    pub(super) fn ran(&mut self, tid: u32, time: u64, p: u32, stack: u32) {
        self.running.entry(tid).or_default().sample = Some((time, p, stack));
    }

    /// The stack of thread `tid`'s last user-space sample in process `p`, if taken since its last voluntary
    /// wait (the stretch of running that a preemption at `start` cut).
    fn last_sample(&self, tid: u32, p: u32, start: u64) -> Option<u32> {
        let r = self.running.get(&tid)?;
        let (at, process, stack) = r.sample?;
        (process == p && at >= r.voluntary_end && at <= start).then_some(stack)
    }
}

impl Tracker {
    /// The frame pointer of a thread whose registers came without it: the lowest slot of the stack copy that
    /// starts a frame-pointer chain — each link a saved frame pointer above it followed by a return address
    /// into executable code of the process — of at least two links (a zero in a slot after a return address is too common to end a chain of one). The system-call wrappers
    /// that run above it keep no frame, so the innermost such chain is the blocked function's; a wrapper that
    /// saved the register has CFI that restores it anyway. 0 when none is found.
    fn recover_frame_pointer(&self, p: u32, sp: u64, stack: &[u8]) -> u64 {
        let word = |addr: u64| -> Option<u64> {
            let at = usize::try_from(addr.checked_sub(sp)?).ok()?;
            let b = stack.get(at..at.checked_add(8)?)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let is_code = |ra: u64| ra > 1 && self.locate_in(p, ra - 1, false, true).is_some();
        // Links with a return address into code; the last link's saved value may be anything (the caller of
        // the outermost frame-pointer function need not keep a frame pointer).
        let chain_from = |mut at: u64| -> bool {
            let mut links = 0;
            while links < 3 {
                let (Some(next), Some(ra)) = (word(at), word(at + 8)) else {
                    break;
                };
                if !is_code(ra) {
                    break;
                }
                links += 1;
                if next <= at || next - at > 1 << 20 {
                    break;
                }
                at = next;
            }
            links >= 2
        };
        let end = sp + stack.len() as u64;
        let mut at = sp;
        while at + 16 <= end {
            if chain_from(at) {
                return at;
            }
            at += 8;
        }
        0
    }

    /// Count off-CPU time from now on: two sources after the others, and the `[wait]` module.
    pub fn enable_waits(&mut self) {
        let voluntary = self.sources.len();
        self.sources.push(SourceCounts::default());
        self.sources.push(SourceCounts::default());
        let module = self
            .modules
            .intern(ModuleKind::Special, WAIT_MODULE, (0, 0), || Module {
                name: WAIT_MODULE.to_string(),
                path: WAIT_MODULE.to_string(),
                kind: ModuleKind::Special,
                first: (0, 0, 0),
                mapped_ns: 0,
                wanted: true,
                object: None,
            });
        self.waits = Some(Waits {
            voluntary,
            preempted: voluntary + 1,
            module,
            threads: BTreeMap::new(),
            kinds: BTreeMap::new(),
            before_start_ns: 0,
            stacks: (0, 0),
            running: FastMap::default(),
        });
    }

    /// Count the off-CPU interval `[start, end)` of thread `tid` of `pid`.
    pub(super) fn off_cpu(
        &mut self,
        pid: u32,
        tid: u32,
        (start, end): (u64, u64),
        preempt: bool,
        mut wait: Wait,
        walk: Walk<'_>,
    ) {
        let Some(w) = self.waits.as_mut() else {
            return;
        };
        if !preempt {
            w.running.entry(tid).or_default().voluntary_end = end;
        }
        // Time before the run's start (the command's first instruction, the attach) is not counted.
        let from = start.max(self.run_start_ns);
        w.before_start_ns += from.saturating_sub(start).min(end.saturating_sub(start));
        if end <= from {
            return;
        }
        let ns = end - from;
        let module = w.module;
        let src = if preempt { w.preempted } else { w.voluntary };
        // The process it blocked in: still kept when its exit ended the wait.
        let p = match self.processes.at(pid, start) {
            Some(p) => p,
            None => self.process(pid, end),
        };
        let image = self.processes.image(p);
        let (chain, regs, stack_copy) = walk;
        // A thread read from /proc comes without its frame pointer, which the CFI of frame-pointer code needs.
        let regs = regs.map(|r| match r.bp {
            0 => ntprofile::UserRegs {
                bp: self.recover_frame_pointer(p, r.sp, stack_copy),
                ..r
            },
            _ => r,
        });
        let walk = (chain, regs, stack_copy);
        let leaf_ip = regs.map(|r| r.ip).or_else(|| {
            chain
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        });
        let wait_loc = Loc {
            module,
            offset: wait_key(wait),
        };
        let sampled = match (preempt, wait, self.waits.as_ref()) {
            (true, Wait::Unread, Some(w)) => w.last_sample(tid, p, start),
            _ => None,
        };
        let stack = if let Some(id) = sampled {
            wait = Wait::LastSample;
            let frames: Vec<Loc> = std::iter::once(Loc {
                module,
                offset: wait_key(wait),
            })
            .chain(self.stacks.frames(id).iter().copied())
            .collect();
            let truncated = self.stacks.truncated(id);
            self.stacks.intern_frames(&frames, truncated)
        } else {
            match leaf_ip.and_then(|ip| Some((ip, self.locate_in(p, ip, false, true)?))) {
                Some((ip, leaf)) => {
                    // Counted apart from the CPU samples' truncated walks.
                    let cut_before = self.unwinding.truncated;
                    let id = self.intern_walk(p, leaf, ip, false, walk);
                    self.unwinding.truncated = cut_before;
                    let mut frames = Vec::with_capacity(self.stacks.frames(id).len() + 1);
                    frames.push(wait_loc);
                    frames.extend_from_slice(self.stacks.frames(id));
                    let truncated = self.stacks.truncated(id);
                    self.stacks.intern_frames(&frames, truncated)
                }
                None => self.stacks.intern_frames(&[wait_loc], leaf_ip.is_some()),
            }
        };
        if leaf_ip.is_some()
            && let Some(w) = self.waits.as_mut()
        {
            w.stacks.0 += 1;
            w.stacks.1 += u64::from(self.stacks.truncated(stack));
        }
        let counts = &mut self.sources[src];
        counts.samples += ns;
        *counts.counts.entry((image, stack)).or_insert(0) += ns;
        let Some(w) = self.waits.as_mut() else {
            return;
        };
        let k = w.kinds.entry((wait_key(wait), preempt)).or_insert((0, 0));
        k.0 += ns;
        k.1 += 1;
        let t = w.threads.entry((pid, tid)).or_insert_with(|| ThreadWaits {
            process: p,
            name: std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default(),
            ..ThreadWaits::default()
        });
        t.waits += 1;
        if preempt {
            t.preempted_ns += ns;
        } else {
            t.voluntary_ns += ns;
        }
        if wait == Wait::Unread {
            t.unread_ns += ns;
        }
    }
}
