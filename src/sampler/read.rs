//! Reading a sampler: every ring drained once, each record decided (a `cpu-filtered` or `per-thread` sampler's
//! followed processes), counted and handed to the caller; then the records held for a fork record, and a
//! per-thread sampler's threads that came and went.

use std::ops::ControlFlow;

use super::{CpuRing, SampleRecord, Sampler, SamplerStats, follow, forked, per_thread};
use crate::error::Error;
use crate::perf::sampler_decode::decode_record;
use crate::perf::sys;

impl Sampler {
    /// Drains every ring once, calling `f` for each record: the records of one ring in ring order, the rings
    /// one after the other (order records across rings by `time`). A record's borrowed parts (call chain,
    /// stack copy, names) live only during the call of `f`. No allocation per record. Returns the number of
    /// records delivered.
    ///
    /// A `cpu-filtered` sampler ([`event_usage`](Self::event_usage)) delivers only its targets' records. A
    /// record of a process it does not know yet (a child whose fork record is in a ring not read yet) is copied
    /// into a buffer the sampler reuses, and comes after the rings' records, at the end of this read or of the
    /// next one, once the fork record was read; otherwise it is dropped. A child it starts to follow takes a
    /// pidfd (to see its exit) and an entry in a table.
    ///
    /// A record handed to `f` is consumed even if `f` panics: the panic goes on to the caller, and the next
    /// `read` starts with the record after it (`stats()` counts each record once).
    ///
    /// Lost records: every record the kernel could not write is counted in a `Lost` record, from the kernel's
    /// own Lost records and, where the kernel counts them per event (Linux 6.0 and later), from those counts,
    /// read when a ring was nearly full: a `Lost` record then comes at the end of its ring's records, with the
    /// drops no earlier `Lost` record reported.
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child, also when `f` itself forked: the child's `read` returns
    /// at once without touching the rings again (they are not mapped in the child).
    pub fn read(&mut self, mut f: impl FnMut(&SampleRecord<'_>)) -> Result<usize, Error> {
        self.check_owner()?;
        let Sampler {
            rings,
            scratch,
            format,
            stats,
            events_count_lost,
            no_loss_free,
            follow,
            per_thread,
            waits,
            ..
        } = self;
        let mut delivered = 0usize;
        let generation = sys::fork_generation();
        let mut any_lost = false;
        for (index, r) in rings.iter_mut().enumerate() {
            let CpuRing { ring, lost, .. } = r;
            let mut saw_lost = false;
            let drained = ring.drain_words(scratch, |words| {
                let record = match decode_record(words, *format) {
                    None => return ControlFlow::Continue(()),
                    Some(SampleRecord::Lost { lost: n, time }) => {
                        saw_lost = true;
                        match lost.add_record(n) {
                            0 => return ControlFlow::Continue(()),
                            added => SampleRecord::Lost { lost: added, time },
                        }
                    }
                    Some(record) => record,
                };
                if let Some(follow) = follow.as_mut() {
                    let verdict = follow.decide(&record);
                    // A per-thread sampler opens the tasks born and closes the rings of threads that exited from
                    // the fork and exit records, delivered or not.
                    if let Some(pt) = per_thread.as_mut()
                        && pt.note(index, &record, |pid| follow.follows(pid))
                            == per_thread::Note::Skip
                    {
                        return ControlFlow::Continue(());
                    }
                    match verdict {
                        follow::Verdict::Deliver => {}
                        follow::Verdict::Hold => {
                            follow.hold(words);
                            return ControlFlow::Continue(());
                        }
                        follow::Verdict::Drop => return ControlFlow::Continue(()),
                    }
                }
                count(stats, &record);
                delivered += 1;
                f(&record);
                ControlFlow::Continue(())
            });
            if drained.forked {
                return Err(forked());
            }
            any_lost |= saw_lost;
            let free = drained.size.saturating_sub(drained.used);
            // A ring nothing was written into since the last read dropped nothing (its fill only grows between
            // reads, from empty), nor did one with room for the largest record all along.
            if *events_count_lost && (saw_lost || (drained.used > 0 && free < *no_loss_free)) {
                let added = lost.add_event_counts();
                if added > 0 {
                    let record = SampleRecord::Lost {
                        lost: added,
                        time: sys::monotonic_ns(),
                    };
                    count(stats, &record);
                    delivered += 1;
                    f(&record);
                    if sys::fork_generation() != ring.generation() {
                        return Err(forked());
                    }
                }
            }
        }
        // The records held for a fork record not read yet, now that every ring was read once.
        // Records delivered after the pass; false once the process forked in `f` (this is the child).
        let mut deliver = |record: &SampleRecord<'_>| {
            count(stats, record);
            delivered += 1;
            f(record);
            sys::fork_generation() == generation
        };
        if let Some(follow) = follow.as_mut() {
            if !follow.end_pass(&mut deliver) {
                return Err(forked());
            }
            // A per-thread sampler's threads that came and went.
            if let Some(pt) = per_thread.as_mut()
                && !pt.end_read(rings, &waits.0, follow, any_lost, &mut deliver)
            {
                return Err(forked());
            }
        }
        Ok(delivered)
    }
}

/// Count a delivered record into the statistics.
fn count(stats: &mut SamplerStats, record: &SampleRecord<'_>) {
    stats.records += 1;
    match record {
        SampleRecord::Sample(_) => stats.samples += 1,
        SampleRecord::Lost { lost, .. } => stats.lost += lost,
        SampleRecord::Throttle {
            throttled: true, ..
        } => stats.throttled += 1,
        SampleRecord::Throttle {
            throttled: false, ..
        } => stats.unthrottled += 1,
        _ => {}
    }
}
