//! The per-thread layout: for each thread, its sampling event on any processor, without `inherit`, owning a small
//! ring that only this thread writes; a `dummy` event of the thread redirected into that ring, which tells of the
//! threads it creates (`PERF_RECORD_FORK`) and of its exit (`PERF_RECORD_EXIT`); and for each thread of the
//! start, one counting event with `inherit` (no ring), whose count takes in every thread it creates from the
//! moment that thread exists.
//!
//! Threads created after the start are opened as they appear: the consumer hands the fork records to the
//! library's helper thread, which opens the new thread's sampling event (and scans the thread list for threads
//! created before their creator was observed). What such a thread ran before its event was opened is the
//! difference between the counting events and the sampling events, reported as lost: every sample is counted,
//! counted outside, or reported as lost, and no ring is written from two processors at once.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use super::{CpuRing, EXIT_WAIT_MS, Opened, Pass, RESCAN_LIMIT, map_ring, watermark_for};
use crate::affinity::CpuSet;
use crate::engine::mode::Plan;
use crate::perf::event::{self, EventParams};
use crate::perf::ring::Ring;
use crate::perf::sys::Tid;
use crate::perf::thread_events;
use crate::status::NtStatus;
use crate::target::Target;

/// A thread's own events in the per-thread layout: its sampling event (which owns its ring), its task-record
/// event, and the bytes of the ring's mapping.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadEvents {
    pub(crate) sampling: RawFd,
    pub(crate) records: RawFd,
    pub(crate) ring_bytes: usize,
}

/// Open a per-thread stream's events for the threads of `scan` (less `skip`), then for the threads created while
/// they were opened. `Ok(None)`: the process lives on but none of its threads could be observed (it is exiting):
/// scan again.
pub(super) fn open_per_thread(
    params: &mut EventParams,
    target: &Target,
    scan: &[Tid],
    skip: &[Tid],
    plan: Plan,
) -> Result<Option<Opened>, NtStatus> {
    let cpus = crate::affinity::online_cpus();
    let mut pass = Pass::new(params, &cpus, target, plan);
    for &tid in scan.iter().filter(|t| !skip.contains(t)) {
        if let Err(status) = pass.observe_per_thread(tid, true) {
            return Err(pass.failed(status));
        }
    }
    // Threads created meanwhile get their own sampling event, and no counter: the counter of a creator opened
    // before them takes them in already, and every event is enabled at once when the profile starts, so
    // nothing of them runs unobserved before that.
    if let Err(status) = pass.observe_new(skip) {
        return Err(pass.failed(status));
    }
    if target.has_exited() {
        return Ok(Some(Opened::nothing()));
    }
    if pass.rings.is_empty() {
        if let Target::Process(p) = target
            && p.exited_within(EXIT_WAIT_MS)
        {
            return Ok(Some(Opened::nothing()));
        }
        return Ok(None);
    }
    Ok(Some(pass.finish()))
}

/// Open the sampling events of threads of a started per-thread stream that appeared after its start (`born`,
/// and whatever the thread list holds beyond `known`), each with a ring of `pages` data pages at most, fewer as
/// threads are added (`rings`: the stream's ring-memory target and the bytes its rings hold; see
/// [`Pass::later_pages`]) and when locked memory is short. Threads in `known` or `skip`, and threads that exited meanwhile, are left out.
pub(crate) fn open_later(
    params: &mut EventParams,
    target: &Target,
    born: &[Tid],
    known: &std::collections::BTreeMap<Tid, ThreadEvents>,
    skip: &[Tid],
    pages: usize,
    rings: (u64, u64),
) -> Result<Opened, NtStatus> {
    let plan = Plan {
        mode: crate::engine::mode::EventMode::PerThread,
        pages,
    };
    let cpus = CpuSet::new();
    let mut pass = Pass::new(params, &cpus, target, plan);
    pass.known = known.keys().copied().collect();
    pass.later_rings = Some(rings);
    for &tid in born {
        if !skip.contains(&tid) && !pass.known.contains(&tid) {
            pass.observe_per_thread(tid, false)?;
        }
    }
    pass.observe_new(skip)?;
    Ok(pass.finish())
}

impl Pass<'_> {
    /// Open thread `tid`'s sampling event and map its ring; with `counter`, its inherited counting event too. A
    /// thread that exits meanwhile is skipped (nothing of it is kept).
    pub(super) fn observe_per_thread(&mut self, tid: Tid, counter: bool) -> Result<(), NtStatus> {
        let Some((ring, fd)) = self.map_thread_ring(tid)? else {
            return Ok(());
        };
        let Some(records) = self.open_with(|_| thread_events::open_task_records(tid))? else {
            return Ok(());
        };
        match event::set_output(records.as_fd(), fd.as_fd()) {
            Ok(()) => {}
            // The thread exited between the opens: its events are dead.
            Err(Errno::ESRCH | Errno::ENOENT) => return Ok(()),
            Err(errno) => return Err(NtStatus::from(errno)),
        }
        if counter {
            let Some(c) =
                self.open_with(|pass| thread_events::open_inherited_counter(pass.params, tid))?
            else {
                return Ok(());
            };
            self.counters.push(c.as_raw_fd());
            self.fds.push(c);
        }
        let ring_bytes = ring.map_len();
        self.ring_bytes += ring_bytes;
        let mut cpu_ring = CpuRing::new(None, ring, fd.as_raw_fd(), self.lost_fds(&fd));
        // The ring's Lost records count the task records it dropped too; the sampling event's own count is of
        // samples alone.
        cpu_ring.samples_lost_from_event = self.params.read_lost;
        self.rings.push(cpu_ring);
        let events = ThreadEvents {
            sampling: fd.as_raw_fd(),
            records: records.as_raw_fd(),
            ring_bytes,
        };
        self.thread_fds.push((tid, events));
        self.fds.push(records);
        self.fds.push(fd);
        self.tids.push(tid);
        self.known.insert(tid);
        Ok(())
    }

    /// Open the sampling events of the threads of the target not observed yet (less `skip`), scanning again
    /// until a scan finds none (or [`RESCAN_LIMIT`] scans: a storm of thread creation is followed from the
    /// threads' fork records then).
    fn observe_new(&mut self, skip: &[Tid]) -> Result<(), NtStatus> {
        for _ in 0..RESCAN_LIMIT {
            let fresh: Vec<Tid> = self
                .target
                .threads()?
                .into_iter()
                .filter(|t| !skip.contains(t) && !self.known.contains(t))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for tid in fresh {
                // Tried once: one that exited meanwhile is not tried again.
                self.known.insert(tid);
                self.observe_per_thread(tid, false)?;
            }
        }
        Ok(())
    }

    /// Thread `tid`'s sampling event and its ring of the plan's size, or smaller when locked memory is short (the
    /// event is then opened again with a watermark of a quarter of the ring that could be mapped: the kernel
    /// caps a watermark at the ring's size, and a ring that wakes the consumer only when full loses samples).
    /// `None`: the thread exited meanwhile.
    fn map_thread_ring(&mut self, tid: Tid) -> Result<Option<(Ring, OwnedFd)>, NtStatus> {
        let mut pages = self.later_pages();
        loop {
            self.params.wakeup_watermark = watermark_for(pages);
            let Some(fd) = self.open_event(tid, None)? else {
                return Ok(None);
            };
            let (ring, got) = map_ring(&fd, self.layout, pages)?;
            if got == pages {
                return Ok(Some((ring, fd)));
            }
            pages = got;
        }
    }

    /// The data pages of the next thread's ring: the plan's; for a thread created after the start, the size that
    /// would fit twice as many threads as the stream has within its ring-memory target (so the rings shrink as
    /// threads are added), and the smallest once its rings fill the target.
    fn later_pages(&self) -> usize {
        let Some((target, held)) = self.later_rings else {
            return self.plan.pages.max(1);
        };
        if held + self.ring_bytes as u64 >= target {
            return 1;
        }
        let threads = self.known.len().max(1) as u64;
        self.plan
            .pages
            .min(crate::engine::mode::per_thread_pages_within(
                2 * threads,
                target,
            ))
            .max(1)
    }
}
