//! The off-CPU watcher's loop: read the switch sampler, pair each thread's switch-out with its next switch-in
//! (records of all rings put in time order first), attach to the interval where the thread waited (the switch
//! sample just before the switch-out, or the `/proc` reading made while it waited), and hand it over.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use ntprofile::{
    BlockedThreadReader, CallchainContext, SampleRecord, Sampler, UserRegs, sampler_clock_ns,
};

use super::{Interval, Mechanism, Wait, WatchStats};
use crate::symbols::{KERNEL_MODULE, Kallsyms};
use crate::waits::syscalls;

/// A switch sample counts for a switch-out that follows it within this many nanoseconds (the kernel writes
/// the two back to back).
const SAMPLE_SLACK_NS: u64 = 1_000_000;

/// Unprivileged: the rounds' period while switches come. The watcher is not woken per record (each wake-up
/// took a CPU from the profiled threads): it reads its rings this often, and the threads still switched out
/// then are read from `/proc`.
const ACTIVE_ROUND: Duration = Duration::from_millis(1);
/// Unprivileged: the longest period, reached by doubling while rounds find no record (an idle command costs
/// next to nothing).
const IDLE_ROUND: Duration = Duration::from_millis(32);
/// Unprivileged: a thread is read once it has been switched out this long (a shorter wait is nearly always over
/// before a reading ends, and reading it would only take the CPU from the threads it waits for).
const READ_AFTER_NS: u64 = 100_000;

/// Where a thread waited (from a switch sample or a reading).
#[derive(Clone, Debug)]
struct Place {
    wait: Wait,
    chain: Vec<u64>,
    regs: Option<UserRegs>,
    stack: Vec<u8>,
}

/// A record copied out of the ring.
#[derive(Clone, Debug)]
struct Rec {
    time: u64,
    pid: u32,
    tid: u32,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Out { preempt: bool },
    In,
    Sample(Place),
}

/// A reading of a blocked thread: valid for the wait that holds `[t0, t1]`.
struct Capture {
    t0: u64,
    t1: u64,
    place: Place,
}

#[derive(Default)]
struct Thread {
    /// The open interval: switch-out time, preempted, where.
    out: Option<(u64, bool, Option<Place>)>,
    /// The last switch sample, with its time.
    sample: Option<(u64, Place)>,
    /// Readings not yet matched with their interval.
    captures: Vec<Capture>,
}

/// The watcher's state.
pub(super) struct Watch {
    sampler: Sampler,
    mechanism: Mechanism,
    stack_bytes: usize,
    tx: Sender<Interval>,
    stop: Arc<AtomicBool>,
    done_until: Arc<AtomicU64>,
    reader: BlockedThreadReader,
    kallsyms: Option<Kallsyms>,
    threads: HashMap<u32, Thread>,
    pending: Vec<Rec>,
    /// Unprivileged: the threads switched out now (their last record is a switch-out), by thread: process,
    /// switch-out time, read already.
    waiting: HashMap<u32, (u32, u64, bool)>,
    stats: WatchStats,
}

impl Watch {
    pub(super) fn new(
        sampler: Sampler,
        mechanism: Mechanism,
        stack_bytes: usize,
        tx: Sender<Interval>,
        stop: Arc<AtomicBool>,
        done_until: Arc<AtomicU64>,
    ) -> Watch {
        // The kernel chain of a switch sample names the system call; its symbols need the same privilege.
        let kallsyms = (mechanism == Mechanism::SwitchSamples)
            .then(Kallsyms::load)
            .and_then(Result::ok);
        Watch {
            sampler,
            mechanism,
            stack_bytes,
            tx,
            stop,
            done_until,
            reader: BlockedThreadReader::new(),
            kallsyms,
            threads: HashMap::new(),
            pending: Vec::new(),
            waiting: HashMap::new(),
            stats: WatchStats::default(),
        }
    }

    /// Watch until stopped; returns the counts.
    pub(super) fn run(mut self) -> WatchStats {
        let mut timeout = match self.mechanism {
            Mechanism::SwitchRecordsProc => {
                // The watcher yields to the profiled threads: a reading made late is only a wait less named,
                // a CPU taken from them is time they wait (and time the report would count).
                let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
                ACTIVE_ROUND
            }
            Mechanism::SwitchSamples => Duration::from_millis(50),
        };
        loop {
            // Relaxed: a plain flag; the records are read after it either way.
            let stopping = self.stop.load(Ordering::Relaxed);
            if stopping {
                let _ = self.sampler.disable();
            } else {
                let _ = self.sampler.wait(timeout);
            }
            let cutoff = if stopping {
                u64::MAX
            } else {
                sampler_clock_ns()
            };
            let first_new = self.pending.len();
            self.read();
            if self.mechanism == Mechanism::SwitchRecordsProc && !stopping {
                timeout = if self.pending.len() > first_new {
                    ACTIVE_ROUND
                } else {
                    (timeout * 2).min(IDLE_ROUND)
                };
                self.read_blocked(first_new);
            }
            self.apply(cutoff);
            // Release: the intervals up to the cutoff were sent before the session can see it.
            self.done_until.store(cutoff, Ordering::Release);
            if stopping {
                self.stats.lost = self.sampler.stats().lost;
                return self.stats;
            }
        }
    }

    /// Copy the ring's records.
    fn read(&mut self) {
        let Watch {
            sampler,
            pending,
            kallsyms,
            stats,
            ..
        } = self;
        let _ = sampler.read(|r| match *r {
            SampleRecord::Switch {
                pid,
                tid,
                time,
                out,
                preempt,
                ..
            } => {
                if out {
                    stats.switches += 1;
                }
                pending.push(Rec {
                    time,
                    pid,
                    tid,
                    kind: if out { Kind::Out { preempt } } else { Kind::In },
                });
            }
            SampleRecord::Sample(ref s) => {
                let mut wait = Wait::NoSyscall;
                let mut chain = Vec::new();
                for (context, addr) in s.frames() {
                    match context {
                        CallchainContext::Kernel => {
                            let Some(sym) = kallsyms
                                .as_ref()
                                .and_then(|k| k.lookup(KERNEL_MODULE, addr))
                            else {
                                continue;
                            };
                            if let Some(nr) = syscalls::of_entry(&sym.name).map(syscalls::wait_kind)
                            {
                                // The innermost helper, unless the entry itself is on the chain.
                                if !matches!(wait, Wait::Syscall(_))
                                    || syscalls::is_exact_entry(&sym.name)
                                {
                                    wait = Wait::Syscall(nr);
                                }
                            } else if wait == Wait::NoSyscall
                                && syscalls::is_syscall_entry(&sym.name)
                            {
                                wait = Wait::SomeSyscall;
                            }
                        }
                        // The user part is unwound from the stack copy when there is one.
                        CallchainContext::User if s.regs.is_none() => chain.push(addr),
                        CallchainContext::User | CallchainContext::Guest => {}
                    }
                }
                pending.push(Rec {
                    time: s.time,
                    pid: s.pid,
                    tid: s.tid,
                    kind: Kind::Sample(Place {
                        wait,
                        chain,
                        regs: s.regs,
                        stack: s.stack.to_vec(),
                    }),
                });
            }
            _ => {}
        });
    }

    /// Read, now, each thread switched out for at least [`READ_AFTER_NS`] and not read yet in this wait.
    fn read_blocked(&mut self, first_new: usize) {
        let mut new: Vec<&Rec> = self.pending[first_new..].iter().collect();
        new.sort_by_key(|r| r.time);
        for r in new {
            match r.kind {
                Kind::Out { .. } => {
                    self.waiting.insert(r.tid, (r.pid, r.time, false));
                }
                Kind::In => {
                    self.waiting.remove(&r.tid);
                }
                Kind::Sample(_) => {}
            }
        }
        let now = sampler_clock_ns();
        let due: Vec<(u32, u32)> = self
            .waiting
            .iter()
            .filter(|(_, w)| !w.2 && now.saturating_sub(w.1) >= READ_AFTER_NS)
            .map(|(&tid, &(pid, _, _))| (tid, pid))
            .collect();
        let mut stack = vec![0u8; self.stack_bytes];
        for (tid, pid) in due {
            let t0 = sampler_clock_ns();
            let read = self.reader.read(pid, tid, &mut stack);
            let t1 = sampler_clock_ns();
            self.stats.reads += 1;
            match read {
                Ok(Some(b)) => {
                    let place = Place {
                        wait: b
                            .syscall
                            .map_or(Wait::NoSyscall, |nr| Wait::Syscall(syscalls::wait_kind(nr))),
                        chain: Vec::new(),
                        regs: Some(b.regs),
                        stack: stack[..b.stack_len].to_vec(),
                    };
                    self.threads
                        .entry(tid)
                        .or_default()
                        .captures
                        .push(Capture { t0, t1, place });
                }
                Ok(None) => self.stats.missed += 1,
                Err(e) => {
                    // Gone (its last switch-out was its exit), or not readable (a refusal of the kernel: the
                    // process made itself non-dumpable): no reading of this wait will succeed.
                    if e.status() == ntprofile::NtStatus::ACCESS_DENIED {
                        self.stats.denied += 1;
                    } else {
                        self.stats.refused += 1;
                    }
                    self.waiting.remove(&tid);
                    continue;
                }
            }
            if let Some(w) = self.waiting.get_mut(&tid) {
                w.2 = true;
            }
        }
    }

    /// Pair the records older than `cutoff`, in time order, and send the finished intervals.
    fn apply(&mut self, cutoff: u64) {
        self.pending.sort_by_key(|r| r.time);
        let ready = self.pending.partition_point(|r| r.time < cutoff);
        let recs: Vec<Rec> = self.pending.drain(..ready).collect();
        for r in recs {
            let t = self.threads.entry(r.tid).or_default();
            match r.kind {
                Kind::Sample(place) => t.sample = Some((r.time, place)),
                Kind::Out { preempt } => {
                    let place = match t.sample.take() {
                        Some((at, place)) if at <= r.time && r.time - at <= SAMPLE_SLACK_NS => {
                            Some(place)
                        }
                        _ => None,
                    };
                    t.out = Some((r.time, preempt, place));
                }
                Kind::In => {
                    let Some((start, preempt, sampled)) = t.out.take() else {
                        self.stats.unpaired += 1;
                        continue;
                    };
                    let end = r.time;
                    let read = t
                        .captures
                        .iter()
                        .position(|c| start <= c.t0 && c.t1 <= end)
                        .map(|i| t.captures.swap_remove(i).place);
                    t.captures.retain(|c| c.t0 >= end);
                    let place = sampled.or(read);
                    let interval = match place {
                        Some(p) => Interval {
                            pid: r.pid,
                            tid: r.tid,
                            start,
                            end,
                            preempt,
                            wait: p.wait,
                            chain: p.chain,
                            regs: p.regs,
                            stack: p.stack,
                        },
                        None => Interval {
                            pid: r.pid,
                            tid: r.tid,
                            start,
                            end,
                            preempt,
                            wait: Wait::Unread,
                            chain: Vec::new(),
                            regs: None,
                            stack: Vec::new(),
                        },
                    };
                    if self.tx.send(interval).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
