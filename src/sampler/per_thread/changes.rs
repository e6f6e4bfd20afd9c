//! A per-thread sampler's threads that come and go, at the end of each read: the rings of threads that exited
//! closed, the events of tasks born opened (with what they did before, `late`), the thread lists read again when
//! due, and what late tasks ran unobserved reported as lost.

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nix::errno::Errno;

use super::{GAP_INTERVAL, PerThread, SWEEP_INTERVAL};
use crate::perf::records::SampleRecord;
use crate::perf::sys;
use crate::sampler::CpuRing;
use crate::sampler::follow::Follow;
use crate::sampler::wait::WaitSet;

/// A look in `/proc`: whether it follows child processes not followed yet, and what it found (the threads of
/// the processes it listed).
struct Look {
    children: bool,
    live: HashSet<u32>,
    listed: HashSet<u32>,
}

impl Look {
    fn new(children: bool) -> Look {
        Look {
            children,
            live: HashSet::new(),
            listed: HashSet::new(),
        }
    }
}

impl PerThread {
    /// The end of a read: close the rings of threads that exited, open the events of tasks born (and, when due,
    /// of threads found by reading the thread lists again: `lost` says a ring dropped records, which may have
    /// been fork records), then report what late tasks ran unobserved. Records go to `deliver` (false: stop at
    /// once, the process forked in it).
    pub(in crate::sampler) fn end_read(
        &mut self,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
        follow: &mut Follow,
        lost: bool,
        deliver: &mut dyn FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        self.ended.sort_unstable();
        self.ended.dedup();
        while let Some(index) = self.ended.pop() {
            if !self.close(index, rings, waits, deliver) {
                return false;
            }
        }
        if !self.close_vanished_delivering(rings, waits, deliver) {
            return false;
        }
        let born = std::mem::take(&mut self.born);
        for &(pid, tid, new_process) in &born {
            if !self.open_late(pid, tid, new_process, rings, waits, deliver) {
                return false;
            }
            // A new process may have created threads and processes before its events opened: their fork records
            // never reach a ring.
            let mut look = Look::new(follow.follows_children());
            if new_process && !self.explore(&[pid], &mut look, rings, waits, follow, deliver) {
                return false;
            }
        }
        self.born = born;
        self.born.clear();
        // Relaxed: see `observe`.
        if lost
            || self.sweep_due.swap(false, Ordering::Relaxed)
            || self.last_sweep.elapsed() >= SWEEP_INTERVAL
        {
            self.last_sweep = Instant::now();
            // After a drop, fork records of processes may have been among the records lost.
            let children = lost && follow.follows_children();
            if !self.sweep(children, rings, waits, follow, deliver) {
                return false;
            }
        }
        // Reading every count costs a system call per thread. A task runs unobserved only until its events open,
        // so the counts are read when tasks were found late (or a ring dropped records: fork records may have been
        // among them, and their tasks may have ended unobserved), at most every 250 ms while the tasks run, and
        // at each read once they stopped (disabled, or every followed process exited), when they are final.
        // Relaxed: see `observe`.
        self.gap_due |= lost;
        let stopped = !self.enabled.load(Ordering::Relaxed) || follow.all_exited();
        if stopped || (self.gap_due && self.last_gap.elapsed() >= GAP_INTERVAL) {
            self.last_gap = Instant::now();
            self.gap_due = false;
            let gap = self.gap();
            if gap > self.gap_reported {
                let record = SampleRecord::Lost {
                    lost: gap - self.gap_reported,
                    time: sys::monotonic_ns(),
                };
                self.gap_reported = gap;
                if !deliver(&record) {
                    return false;
                }
            }
        }
        true
    }

    /// Open the events of a task found late and tell what it had before (`late`).
    fn open_late(
        &mut self,
        pid: u32,
        tid: u32,
        new_process: bool,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
        deliver: &mut dyn FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        if self.observed.contains(&tid) || (Some(pid) == self.me && self.own.contains(&tid)) {
            return true;
        }
        let time = sys::monotonic_ns();
        self.gap_due = true;
        match self.observe(pid, tid, false, rings, waits) {
            Ok(true) => self.late.announce(pid, tid, new_process, time, deliver),
            Ok(false) => true,
            Err(_) => {
                // No descriptor or locked memory left for it now: what it runs is reported lost through the
                // counts, and the next scan of its process tries again.
                self.unobserved += 1;
                true
            }
        }
    }

    /// Look in `/proc` at the processes `pids`: open the events of their threads not observed yet, and with
    /// `look.children` follow their child processes not followed yet (their fork records never reached a ring)
    /// and look at those in turn. `look` gets the threads found and the processes listed.
    fn explore(
        &mut self,
        pids: &[u32],
        look: &mut Look,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
        follow: &mut Follow,
        deliver: &mut dyn FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        let mut queue = pids.to_vec();
        while let Some(pid) = queue.pop() {
            let tids = match crate::perf::proc::thread_ids(Some(pid as i32)) {
                Ok(tids) => tids,
                // Gone: every thread of it is.
                Err(Errno::ENOENT | Errno::ESRCH) => Vec::new(),
                // Not readable now (no descriptor left): its threads stay as they are until the next scan.
                Err(_) => continue,
            };
            look.listed.insert(pid);
            let known = self.tasks.iter().any(|t| t.0 == pid);
            for tid in tids.into_iter().map(|t| t.0 as u32) {
                look.live.insert(tid);
                if !self.open_late(pid, tid, !known, rings, waits, deliver) {
                    return false;
                }
            }
            if look.children {
                for child in crate::perf::proc::child_processes(pid) {
                    if !follow.follows(child) {
                        follow.adopt_child(child);
                        queue.push(child);
                    }
                }
            }
        }
        true
    }

    /// Read the thread lists of the followed processes (and, `children`, look for child processes not followed,
    /// after a drop): open the threads missed, and mark the threads gone (their rings close after the next read
    /// drained them).
    fn sweep(
        &mut self,
        children: bool,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
        follow: &mut Follow,
        deliver: &mut dyn FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        let mut look = Look::new(children);
        if !self.explore(
            &follow.live_pids(),
            &mut look,
            rings,
            waits,
            follow,
            deliver,
        ) {
            return false;
        }
        self.vanished = self
            .tasks
            .iter()
            .filter(|t| {
                !look.live.contains(&t.1) && (look.listed.contains(&t.0) || !follow.follows(t.0))
            })
            .map(|t| t.1)
            .collect();
        for pid in self.tasks.iter().map(|t| t.0).collect::<HashSet<_>>() {
            if !follow.follows(pid) {
                self.late.forget(pid);
            }
        }
        true
    }

    /// Close the rings of threads found gone by the last scan (drained since), without delivering anything.
    pub(super) fn close_vanished(&mut self, rings: &mut Vec<CpuRing>, waits: &WaitSet) {
        self.close_vanished_delivering(rings, waits, &mut |_| true);
    }

    fn close_vanished_delivering(
        &mut self,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
        deliver: &mut dyn FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        for tid in std::mem::take(&mut self.vanished) {
            if let Some(index) = self.tasks.iter().position(|t| t.1 == tid)
                && !self.close(index, rings, waits, deliver)
            {
                return false;
            }
        }
        true
    }

    /// Close ring `index` (its thread exited and the ring was drained): the drops its event counted and no Lost
    /// record reported are handed on, its count kept for the gap.
    fn close(
        &mut self,
        index: usize,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
        deliver: &mut dyn FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        if index >= self.tasks.len() {
            return true;
        }
        let fd = self.events.swap_remove(index);
        let records = self.task_records.swap_remove(index);
        let (_, tid) = self.tasks.swap_remove(index);
        let mut ring = rings.swap_remove(index);
        self.observed.remove(&tid);
        if let Ok((count, _)) = sys::read_count_and_lost(fd.as_raw_fd()) {
            self.retired = self.retired.saturating_add(count);
        } else if let Ok(count) = sys::read_count(fd.as_raw_fd()) {
            self.retired = self.retired.saturating_add(count);
        }
        let dropped = if self.params.read_lost {
            ring.lost.add_event_counts()
        } else {
            0
        };
        waits.remove_ring(fd.as_raw_fd());
        // The mapping goes first, then the descriptor (a mapping holds its own reference to the buffer).
        drop(ring);
        drop(records);
        drop(fd);
        if dropped > 0 {
            let record = SampleRecord::Lost {
                lost: dropped,
                time: sys::monotonic_ns(),
            };
            return deliver(&record);
        }
        true
    }

    /// Samples the late tasks' unobserved time would have given: what the counters counted less what the
    /// sampling events counted, in sample periods. The counters are read first: whatever runs while the sampling
    /// events are read then adds to them only, so the difference never counts a sample that was taken.
    fn gap(&self) -> u64 {
        if self.counters.is_empty() || self.params.period == 0 {
            return 0;
        }
        let counted: u64 = self
            .counters
            .iter()
            .filter_map(|c| sys::read_count(c.as_raw_fd()).ok())
            .fold(0, u64::saturating_add);
        let sampled: u64 = self
            .events
            .iter()
            .filter_map(|e| sys::read_count(e.as_raw_fd()).ok())
            .fold(self.retired, u64::saturating_add);
        counted.saturating_sub(sampled) / self.params.period
    }
}
