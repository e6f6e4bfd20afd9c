//! Putting the kernel's records in time order before they are applied.
//!
//! The sampler's rings are per CPU and are read one after the other, so a sample read from one ring may be newer
//! than a mapping (or fork, or exec) still unread in another. Every read round therefore copies its records
//! here, sorts them by time, and applies only those older than a clock reading taken *before* the round began:
//! anything older than that moment was already in its ring when the round read it. Newer records wait for the
//! next round. Buffers are reused from round to round: no allocation per record in the steady state.

use ntprofile::SampleRecord;

/// One record of the kernel, owned: names live in the round's byte arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A sample of source `source` (index among the run's sources).
    Sample {
        /// The source.
        source: u8,
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// The sampled instruction address.
        ip: u64,
        /// The address is in the kernel.
        kernel: bool,
        /// The callchain (`-g`): a range of the arena holding its addresses (8 bytes each, little-endian,
        /// innermost first; kernel and user frames, the kernel's context markers removed).
        chain: (u32, u32),
        /// The user registers (`--call-graph dwarf`).
        regs: Option<ntprofile::UserRegs>,
        /// The user stack copy (`--call-graph dwarf`): a range of the arena.
        stack: (u32, u32),
    },
    /// An executable mapping.
    Mmap {
        /// Process.
        pid: u32,
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
        /// File offset of the start.
        pgoff: u64,
        /// The file's inode (0 for anonymous memory).
        ino: u64,
        /// The file's device, as `stat` gives it.
        dev: u64,
        /// The file name: a range of the arena.
        name: (u32, u32),
    },
    /// A command name: set by an exec (`exec`) or by the process itself.
    Comm {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// Set by an exec.
        exec: bool,
        /// The name: a range of the arena.
        name: (u32, u32),
    },
    /// A new process (pid != ppid) or thread.
    Fork {
        /// The new task's process.
        pid: u32,
        /// Its parent's process.
        ppid: u32,
        /// The new task.
        tid: u32,
    },
    /// A task ended (pid == tid: the process).
    Exit {
        /// Process.
        pid: u32,
        /// Its parent's process at the exit (the kernel's record names it).
        ppid: u32,
        /// Thread.
        tid: u32,
    },
    /// Records the kernel dropped in source `source`'s rings.
    Lost {
        /// The source.
        source: u8,
        /// How many.
        lost: u64,
    },
    /// An off-CPU interval of a thread (`--off-cpu`), at its switch-in.
    OffCpu {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// Its switch-out time.
        start: u64,
        /// The thread was preempted.
        preempt: bool,
        /// What it waited in.
        wait: crate::waits::Wait,
        /// The user frames of a frame-pointer chain: a range of the arena (8 bytes each, innermost first).
        chain: (u32, u32),
        /// The user registers at its kernel entry.
        regs: Option<ntprofile::UserRegs>,
        /// The user stack copy: a range of the arena.
        stack: (u32, u32),
    },
    /// The kernel throttled (or unthrottled) source `source`.
    Throttle {
        /// The source.
        source: u8,
        /// Throttled (true) or unthrottled.
        throttled: bool,
    },
}

/// A record with its time.
#[derive(Clone, Copy, Debug)]
struct Timed {
    time: u64,
    event: Event,
}

/// The records read but not yet applied, and their names.
#[derive(Default)]
pub struct Order {
    pending: Vec<Timed>,
    names: Vec<u8>,
    /// Spare buffers for the records held back from a round.
    spare: Vec<Timed>,
    spare_names: Vec<u8>,
}

impl Order {
    fn name(&mut self, bytes: &[u8]) -> (u32, u32) {
        let start = self.names.len() as u32;
        self.names.extend_from_slice(bytes);
        (start, self.names.len() as u32)
    }

    /// Copy one record of source `source`'s sampler.
    pub fn push(&mut self, source: u8, record: &SampleRecord<'_>) {
        let (time, event) = match *record {
            SampleRecord::Sample(ref s) => {
                let start = self.names.len() as u32;
                for (context, addr) in s.frames() {
                    if context != ntprofile::CallchainContext::Guest {
                        self.names.extend_from_slice(&addr.to_le_bytes());
                    }
                }
                let chain = (start, self.names.len() as u32);
                let stack = if s.regs.is_some() {
                    self.name(s.stack)
                } else {
                    (0, 0)
                };
                (
                    s.time,
                    Event::Sample {
                        source,
                        pid: s.pid,
                        tid: s.tid,
                        ip: s.ip,
                        kernel: s.kernel,
                        chain,
                        regs: s.regs,
                        stack,
                    },
                )
            }
            SampleRecord::Mmap(ref m) => {
                let name = self.name(m.filename);
                (
                    m.time,
                    Event::Mmap {
                        pid: m.pid,
                        addr: m.addr,
                        len: m.len,
                        pgoff: m.pgoff,
                        ino: m.ino,
                        dev: super::mapped::device(m.maj, m.min),
                        name,
                    },
                )
            }
            SampleRecord::Comm {
                pid,
                tid,
                time,
                comm,
                exec,
            } => {
                let name = self.name(comm);
                (
                    time,
                    Event::Comm {
                        pid,
                        tid,
                        exec,
                        name,
                    },
                )
            }
            SampleRecord::Fork {
                pid,
                ppid,
                tid,
                time,
                ..
            } => (time, Event::Fork { pid, ppid, tid }),
            SampleRecord::Exit {
                pid,
                ppid,
                tid,
                time,
                ..
            } => (time, Event::Exit { pid, ppid, tid }),
            SampleRecord::Lost { lost, time } => (time, Event::Lost { source, lost }),
            SampleRecord::Throttle { time, throttled } => {
                (time, Event::Throttle { source, throttled })
            }
            // Switch records are the off-CPU watcher's: they come here as intervals (`push_interval`).
            SampleRecord::Switch { .. } => return,
        };
        self.pending.push(Timed { time, event });
    }

    /// Copy one off-CPU interval, ordered at its end (the thread runs again in the address space it blocked in).
    pub fn push_interval(&mut self, i: &crate::waits::Interval) {
        let start = self.names.len() as u32;
        for addr in &i.chain {
            self.names.extend_from_slice(&addr.to_le_bytes());
        }
        let chain = (start, self.names.len() as u32);
        let stack = self.name(&i.stack);
        self.pending.push(Timed {
            time: i.end,
            event: Event::OffCpu {
                pid: i.pid,
                tid: i.tid,
                start: i.start,
                preempt: i.preempt,
                wait: i.wait,
                chain,
                regs: i.regs,
                stack,
            },
        });
    }

    /// Apply, in time order, every pending record older than `cutoff` (all of them with `u64::MAX`); hold back
    /// the others. `apply` gets each record's time, the record, and the arena its names index.
    pub fn drain(&mut self, cutoff: u64, mut apply: impl FnMut(u64, &Event, &[u8])) {
        // Stable: the records of one ring keep their order where times are equal.
        self.pending.sort_by_key(|t| t.time);
        let ready = self.pending.partition_point(|t| t.time < cutoff);
        for t in &self.pending[..ready] {
            apply(t.time, &t.event, &self.names);
        }
        // Keep the rest, with their names moved into a fresh arena.
        self.spare.clear();
        self.spare_names.clear();
        for t in &self.pending[ready..] {
            let mut t = *t;
            let mut rename = |(a, b): (u32, u32)| {
                let start = self.spare_names.len() as u32;
                self.spare_names
                    .extend_from_slice(&self.names[a as usize..b as usize]);
                (start, self.spare_names.len() as u32)
            };
            match &mut t.event {
                Event::Mmap { name, .. } | Event::Comm { name, .. } => *name = rename(*name),
                Event::Sample { chain, stack, .. } | Event::OffCpu { chain, stack, .. } => {
                    *chain = rename(*chain);
                    *stack = rename(*stack);
                }
                _ => {}
            }
            self.spare.push(t);
        }
        std::mem::swap(&mut self.pending, &mut self.spare);
        std::mem::swap(&mut self.names, &mut self.spare_names);
    }

    /// Records waiting for a later round.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.pending.len()
    }
}

/// The bytes of a name range.
pub fn name_of(names: &[u8], (a, b): (u32, u32)) -> &[u8] {
    &names[a as usize..b as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_applied_in_time_order_and_newer_ones_wait() {
        let mut o = Order::default();
        let comm = SampleRecord::Comm {
            pid: 1,
            tid: 1,
            time: 30,
            comm: b"gzip",
            exec: true,
        };
        o.push(0, &comm);
        o.push(0, &SampleRecord::Lost { lost: 2, time: 10 });
        o.push(
            0,
            &SampleRecord::Exit {
                pid: 1,
                ppid: 0,
                tid: 1,
                ptid: 0,
                time: 20,
            },
        );
        let mut seen = Vec::new();
        o.drain(25, |time, e, _| seen.push((time, *e)));
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [10, 20]);
        assert_eq!(o.held(), 1);
        let mut names = Vec::new();
        o.drain(u64::MAX, |time, e, arena| {
            if let Event::Comm { name, .. } = e {
                names.push((
                    time,
                    String::from_utf8_lossy(name_of(arena, *name)).into_owned(),
                ));
            }
        });
        assert_eq!(names, [(30, "gzip".to_string())]);
        assert_eq!(o.held(), 0);
    }
}
