//! Following the threads of a per-thread stream (`EventMode::PerThread`), the parts the consumer thread holds:
//! the notes it passes to the helper thread (a thread created or exited, read from a ring's fork and exit
//! records), and the count of what threads ran before their own sampling event was opened.
//!
//! A per-thread stream's sampling events are not inherited (each owns a ring only its thread writes), so a thread
//! created after the start is sampled only once the helper thread has opened its event, a moment after its fork
//! record was read. What it ran meanwhile is measured by the counting events with `inherit` opened for the
//! threads of the start: their count takes in every thread they create from the moment it exists, so their
//! excess over the sampling events' counts, divided by the period, is the samples that were never taken. The
//! consumer reports those as lost at every drain that settles the statistics: every sample is counted, counted
//! outside, or reported as lost.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam::channel::Sender;

use super::counters::StreamId;
use crate::perf::sys;

/// How many notes wait for the helper thread at most; past that a note is dropped and the helper scans the thread
/// lists of the streams it follows instead (nothing is missed, it costs a scan).
pub(crate) const NOTES_CAPACITY: usize = 4096;

/// What the consumer read in a per-thread stream's rings about its threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskNote {
    /// A fork record: thread `tid` of process `pid` was created (by a thread of the stream).
    Born {
        stream: StreamId,
        pid: u32,
        tid: u32,
    },
    /// An exit record: thread `tid` of the stream exited.
    Died { stream: StreamId, tid: u32 },
}

/// The consumer's way to the helper thread: a bounded queue (sending never blocks nor allocates) and the flag
/// that tells the helper a note was dropped.
#[derive(Clone)]
pub(crate) struct Notes {
    tx: Sender<TaskNote>,
    overflow: Arc<AtomicBool>,
}

impl Notes {
    pub(crate) fn new(tx: Sender<TaskNote>, overflow: Arc<AtomicBool>) -> Notes {
        Notes { tx, overflow }
    }

    /// Pass a note on; a full queue (or no helper thread) asks for a scan instead.
    pub(crate) fn send(&self, note: TaskNote) {
        if self.tx.try_send(note).is_err() {
            self.rescan();
        }
    }

    /// Ask the helper for a scan of the followed streams' thread lists (a note was dropped, by the queue or by a
    /// full ring).
    pub(crate) fn rescan(&self) {
        // Relaxed: the flag only asks the helper for a scan of the thread lists, which reads the kernel's state,
        // not memory this thread wrote.
        self.overflow.store(true, Ordering::Relaxed);
    }
}

/// The samples a per-thread stream's threads ran before their sampling events were opened (see the module's
/// documentation).
pub(crate) struct Gap {
    /// The inherited counting events of the threads of the start.
    counters: Vec<RawFd>,
    /// The stream's base period (events, or nanoseconds for a timer).
    period: Arc<AtomicU64>,
    /// The final counts of sampling events already closed (their threads exited).
    retired: u64,
    /// The excess of the counters over the sampling events already accounted for, and the part of it below
    /// one period not yet reported.
    seen: u64,
    residue: u64,
}

impl Gap {
    pub(crate) fn new(counters: Vec<RawFd>, period: Arc<AtomicU64>) -> Gap {
        Gap {
            counters,
            period,
            retired: 0,
            seen: 0,
            residue: 0,
        }
    }

    /// Keep the final count of a sampling event whose ring is dropped (its thread exited).
    pub(crate) fn retire(&mut self, count: u64) {
        self.retired += count;
    }

    /// The samples never taken since the last call: the counters' excess over the sampling events' counts
    /// `sampling` (and those retired) grown since, in periods. A counter whose read fails adds nothing.
    pub(crate) fn settle(&mut self, sampling: impl Iterator<Item = u64>) -> u64 {
        let counted: u64 = self
            .counters
            .iter()
            .filter_map(|&fd| sys::read_count(fd).ok())
            .sum();
        let sampled: u64 = sampling.sum();
        let excess = counted.saturating_sub(sampled + self.retired);
        let new = excess.saturating_sub(self.seen);
        self.seen = self.seen.max(excess);
        // Relaxed: the period is a value of its own; nothing else is read through it.
        let period = self.period.load(Ordering::Relaxed).max(1);
        self.residue += new;
        let missed = self.residue / period;
        self.residue %= period;
        missed
    }
}
