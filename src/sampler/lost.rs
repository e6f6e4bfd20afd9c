//! The records a ring lost, counted exactly: from the kernel's `PERF_RECORD_LOST` records and, where the kernel
//! has it (Linux 6.0 and later), from each event's own count of the records it could not write
//! (`PERF_FORMAT_LOST`), which holds even when no Lost record could be written after them (the ring stayed
//! full until sampling ended).
//!
//! Both count the same drops (the kernel adds one to both at once), the Lost records late and possibly never,
//! the events' counts at once: what a ring reported so far is the larger of the two totals, and only its growth
//! is handed to the caller, as `Lost` records, so that no drop is reported twice.

use std::os::fd::RawFd;

use crate::perf::sampler_event::{LOST_RECORD_BYTES, SamplerEventParams, max_sample_bytes};
use crate::perf::sys;

/// The largest side-band record: an `mmap2` record with a file name of `PATH_MAX` bytes, its fixed fields and
/// its `sample_id_all` trailer.
const MAX_SIDEBAND_RECORD_BYTES: usize = 4096 + 128;

/// Bytes of the largest record events opened with `params` write plus a Lost record: a ring with more free space
/// than this at a read lost nothing since the read before (its fill only grows between two reads), so its
/// events' drop counts need no system call.
pub(super) fn no_loss_free_bytes(params: &SamplerEventParams) -> u64 {
    let sideband = if params.sideband {
        MAX_SIDEBAND_RECORD_BYTES
    } else {
        0
    };
    (max_sample_bytes(params).max(sideband) + LOST_RECORD_BYTES) as u64
}

/// The lost-record accounting of one ring.
#[derive(Debug, Default)]
pub(super) struct RingLost {
    /// The descriptors of every event that writes into the ring (its owner and the redirected ones).
    pub(super) fds: Vec<RawFd>,
    /// The sum of the kernel's Lost records read from the ring.
    records: u64,
    /// The drops reported to the caller so far.
    reported: u64,
    /// The ring's Lost records are not counted, the events' counts alone are: a per-thread ring that also holds
    /// a task-record event's fork and exit records, whose drops are not the sampler's events' (see `per_thread`).
    events_only: bool,
}

impl RingLost {
    pub(super) fn new(fds: Vec<RawFd>) -> RingLost {
        RingLost {
            fds,
            ..RingLost::default()
        }
    }

    /// The accounting of a ring whose Lost records also count another event's drops: the events `fds` count
    /// theirs.
    pub(super) fn events_only(fds: Vec<RawFd>) -> RingLost {
        RingLost {
            fds,
            events_only: true,
            ..RingLost::default()
        }
    }

    /// A kernel Lost record of `lost` drops: the drops it adds to what was reported (0 when the events' counts
    /// reported them already, or count them alone).
    pub(super) fn add_record(&mut self, lost: u64) -> u64 {
        if self.events_only {
            return 0;
        }
        self.records = self.records.saturating_add(lost);
        self.advance(self.records)
    }

    /// The events' own counts of the records they could not write: the drops they add to what was reported.
    pub(super) fn add_event_counts(&mut self) -> u64 {
        let mut total = 0u64;
        for &fd in &self.fds {
            // A descriptor that cannot be read (never expected) adds nothing: the Lost records still count.
            if let Ok((_, lost)) = sys::read_count_and_lost(fd) {
                total = total.saturating_add(lost);
            }
        }
        self.advance(total)
    }

    fn advance(&mut self, total: u64) -> u64 {
        let added = total.saturating_sub(self.reported);
        self.reported = self.reported.max(total);
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events' counts first, then the kernel's late Lost record for the same drops: reported once; a record
    /// that covers more than the counts said reports the rest.
    #[test]
    fn a_drop_is_reported_once_whichever_count_sees_it_first() {
        let mut l = RingLost::new(Vec::new());
        assert_eq!(l.advance(5), 5);
        assert_eq!(l.add_record(3), 0);
        assert_eq!(l.add_record(2), 0);
        assert_eq!(l.add_record(4), 4);
        assert_eq!(l.advance(9), 0);
        assert_eq!(l.advance(10), 1);
        assert_eq!(l.reported, 10);
    }
}
