//! Opening a stream's events: one per (thread × CPU) in stable passes over the threads (a pass in which a thread
//! appeared is done again), the first event of each CPU owning the CPU's ring and the others redirected into
//! it, the rings mapped within the locked-memory budget; an exited process gets a stream with no event.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use super::dispatch::{CpuRing, TaskFilter};
use super::mode::{self, Budget, EventMode, Plan};

mod filtered;
mod per_thread;
use crate::affinity::CpuSet;
use crate::perf::event::{self, EventParams};
use crate::perf::ring::{Ring, SampleLayout};
use crate::perf::sys::{self, Tid};
use crate::status::NtStatus;
use crate::target::Target;
pub(crate) use per_thread::{ThreadEvents, open_later};

/// Data pages per ring (a power of two): 64 pages = 256 KiB, shrunk step by step when the locked-memory budget
/// (`perf_event_mlock_kb` per CPU plus `RLIMIT_MEMLOCK`) is short.
pub(crate) const RING_PAGES: usize = 64;
/// How many times a start re-scans the thread list looking for threads created meanwhile.
pub(super) const RESCAN_LIMIT: usize = 64;

/// Open the events of `target` on `cpus`: one per (thread × CPU), the first of each CPU owning the CPU's ring,
/// the others redirected into it.
///
/// A pass is sound only when no thread appeared while it ran: a thread created during the pass by a thread
/// already instrumented inherits that thread's events, and opening its own events as well would count it twice.
/// So a pass scans the threads, opens every event, and scans again; if a new thread showed up, the whole pass is
/// discarded (closing a parent event also removes its inherited children) and done again. After a stable pass,
/// every thread is observed exactly once: those of the scan by their own events, later ones through
/// inheritance from their creator. Under a storm of thread creation that never settles, the last pass adds the
/// newcomers one by one instead (each is then observed at least once).
///
/// A process that has exited is still a process (NT keeps its object while a handle names it): its stream opens
/// with no event at all and counts nothing. The pidfd is asked after the pass, so that a process that exited
/// while the pass ran gets the same empty stream, whatever events were opened before its exit (closed here:
/// their thread ids might already name a newer process that reused them). A pass in which some processor got
/// no event although the process lives on (every thread listed ended meanwhile: the process is exiting, or a
/// thread that `exec`s took over the first thread's id) waits a moment for the exit, then scans again.
pub(super) fn open_cpus(
    params: &mut EventParams,
    target: &Target,
    cpus: &CpuSet,
    skip: &[Tid],
    keep_mode: Option<EventMode>,
) -> Result<Opened, NtStatus> {
    let mut plan: Option<Plan> = None;
    let mut lost_unsupported = false;
    for attempt in 0..RESCAN_LIMIT {
        let last = attempt + 1 == RESCAN_LIMIT;
        let scan = target.threads()?;
        let chosen = match plan {
            Some(p) => p,
            None => *plan.insert(plan_for(target, &scan, cpus, skip, keep_mode)?),
        };
        let per_thread = chosen.mode == EventMode::PerThread;
        params.sample_cpu = per_thread;
        // Only (thread × processor) events are inherited: per-thread events are opened for each thread as it
        // appears (an inherited event could not own its ring), and processor-wide ones have no task.
        params.inherit_threads = chosen.mode == EventMode::ThreadCpu;
        // Every layout counts its rings' drops from the events as well as from the Lost records: a ring still
        // full when its writers stop (the target exits, the profile stops) gets no Lost record for its last drops.
        params.read_lost = !lost_unsupported;
        if chosen.mode == EventMode::CpuFiltered {
            return filtered::open_filtered(params, target, cpus, skip, chosen);
        }
        if per_thread {
            match per_thread::open_per_thread(params, target, &scan, skip, chosen) {
                Ok(Some(opened)) => return Ok(opened),
                Ok(None) => continue,
                Err(NtStatus::INSUFFICIENT_RESOURCES)
                    if keep_mode.is_none() && mode::forced_mode().is_none() =>
                {
                    // Per-thread rings chosen from an estimate of the locked-memory budget (other processes of
                    // the user share it) that ran short: (thread × processor) events, when the descriptors
                    // allow them.
                    if let Ok(other) = mode::choose(
                        scan.len().max(1) as u64,
                        cpus.len() as u64,
                        Some(EventMode::ThreadCpu),
                        &Budget::now(),
                    ) {
                        let _ = mode::take_shortfall();
                        plan = Some(other);
                        continue;
                    }
                    return Err(NtStatus::INSUFFICIENT_RESOURCES);
                }
                Err(status) => return Err(status),
            }
        }
        let mut pass = Pass::new(&mut *params, cpus, target, chosen);
        let observed = scan
            .iter()
            .filter(|t| !skip.contains(t))
            .try_for_each(|&tid| pass.observe(tid));
        lost_unsupported |= pass.lost_unsupported;
        if let Err(status) = observed {
            return Err(pass.failed(status));
        }
        let fresh: Vec<Tid> = target
            .threads()?
            .into_iter()
            .filter(|t| !skip.contains(t) && scan.binary_search(t).is_err())
            .collect();
        if !fresh.is_empty() && !last {
            continue;
        }
        for tid in fresh {
            if let Err(status) = pass.observe(tid) {
                return Err(pass.failed(status));
            }
        }
        if target.has_exited() {
            return Ok(Opened::nothing());
        }
        if pass.complete() {
            return Ok(pass.finish());
        }
        if let Target::Process(p) = target
            && p.exited_within(EXIT_WAIT_MS)
        {
            return Ok(Opened::nothing());
        }
    }
    // Passes kept finding the process alive with none of its threads observable: a passing state (its threads
    // come and go faster than they can be listed), never a fault of the handle.
    Err(NtStatus::INSUFFICIENT_RESOURCES)
}

/// The layout of a stream's events for the threads `scan` (less `skip`) on `cpus`: the stream's own when it
/// has one (`keep`), else chosen from the budgets now; the soft descriptor limit raised to the hard one when
/// the layout needs more than the soft one leaves. Fails at once, before any event is opened, when nothing
/// fits (the reason is kept for the error's detail).
fn plan_for(
    target: &Target,
    scan: &[Tid],
    cpus: &CpuSet,
    skip: &[Tid],
    keep: Option<EventMode>,
) -> Result<Plan, NtStatus> {
    let ncpus = cpus.len() as u64;
    if target.is_global() {
        return Ok(Plan {
            mode: EventMode::Cpu,
            pages: 0,
        });
    }
    let threads = scan.iter().filter(|t| !skip.contains(t)).count().max(1) as u64;
    let budget = Budget::now();
    let plan =
        mode::choose(threads, ncpus, keep.or_else(mode::forced_mode), &budget).map_err(|why| {
            mode::set_shortfall(why);
            NtStatus::INSUFFICIENT_RESOURCES
        })?;
    let need = mode::descriptors(plan.mode, threads, ncpus);
    if budget.open + need + threads / 8 + 16 > budget.soft {
        sys::raise_nofile_limit();
    }
    Ok(plan)
}

/// How long a pass that found no thread to observe waits for the process to finish exiting before scanning
/// again.
pub(super) const EXIT_WAIT_MS: u16 = 10;

/// What a successful pass opened.
pub(super) struct Opened {
    /// Every event descriptor.
    pub(super) fds: Vec<OwnedFd>,
    /// One ring per CPU, or per thread.
    pub(super) rings: Vec<CpuRing>,
    /// The threads observed directly, sorted.
    pub(super) tids: Vec<Tid>,
    /// How the events are laid out (`None`: nothing was opened).
    pub(super) mode: Option<EventMode>,
    /// Bytes of the rings' mappings.
    pub(super) ring_bytes: usize,
    /// Per thread: the inherited counting events of the threads of the start.
    pub(super) counters: Vec<RawFd>,
    /// Per thread: each thread's own events.
    pub(super) thread_fds: Vec<(Tid, ThreadEvents)>,
    /// Per thread: the data pages of the last ring mapped (the size for threads opened later).
    pub(super) pages: usize,
}

impl Opened {
    /// The events of a process that has exited: none.
    fn nothing() -> Opened {
        Opened {
            fds: Vec::new(),
            rings: Vec::new(),
            tids: Vec::new(),
            mode: None,
            ring_bytes: 0,
            counters: Vec::new(),
            thread_fds: Vec::new(),
            pages: 0,
        }
    }
}

/// One attempt at opening a stream's events on some CPUs.
struct Pass<'a> {
    params: &'a mut EventParams,
    cpus: Vec<usize>,
    layout: SampleLayout,
    fds: Vec<OwnedFd>,
    rings: Vec<CpuRing>,
    /// Per CPU of the pass: the index of its ring owner in `fds` and of its ring in `rings`.
    owner: Vec<Option<(usize, usize)>>,
    /// Who is observed.
    target: &'a Target,
    /// EACCES/EPERM mean "may not profile that process" for another process, a missing privilege otherwise.
    other_process: bool,
    /// The soft descriptor limit was already raised once by this pass.
    raised_nofile: bool,
    /// Threads observed on every CPU of the pass.
    tids: Vec<Tid>,
    /// The layout of the events.
    plan: Plan,
    /// Bytes of the rings mapped so far.
    ring_bytes: usize,
    /// The kernel refused `PERF_FORMAT_LOST` (before 6.0): the events were opened without it.
    lost_unsupported: bool,
    /// Processor-wide filtered events: the task their rings' samples must come from.
    filter: Option<TaskFilter>,
    /// Per thread: the inherited counting events opened, each thread's sampling event, and the threads tried.
    counters: Vec<RawFd>,
    thread_fds: Vec<(Tid, ThreadEvents)>,
    known: std::collections::BTreeSet<Tid>,
    /// Per thread, threads created after the start: the stream's ring-memory target and the bytes its rings held
    /// before this pass.
    later_rings: Option<(u64, u64)>,
}

impl<'a> Pass<'a> {
    fn new(params: &'a mut EventParams, cpus: &CpuSet, target: &'a Target, plan: Plan) -> Pass<'a> {
        let cpus: Vec<usize> = cpus.iter().collect();
        let owner = vec![None; cpus.len()];
        let layout = SampleLayout {
            tid: params.sample_tid,
            user_ip: params.user_ip,
            cpu: params.sample_cpu,
        };
        Pass {
            params,
            cpus,
            layout,
            fds: Vec::new(),
            rings: Vec::new(),
            owner,
            target,
            other_process: matches!(target, Target::Process(_)),
            raised_nofile: false,
            tids: Vec::new(),
            plan,
            ring_bytes: 0,
            lost_unsupported: false,
            filter: None,
            counters: Vec::new(),
            thread_fds: Vec::new(),
            known: std::collections::BTreeSet::new(),
            later_rings: None,
        }
    }

    /// The status of a pass that failed; a shortage of descriptors or ring memory keeps its reason for the
    /// error's detail.
    fn failed(&self, status: NtStatus) -> NtStatus {
        if status == NtStatus::INSUFFICIENT_RESOURCES && mode::take_shortfall().is_none() {
            let budget = Budget::now();
            let threads = (self.tids.len() as u64 + 1).max(1);
            mode::set_shortfall(format!(
                "the {} layout ran out after {} threads ({} descriptors open, RLIMIT_NOFILE {}/{}; {} KiB of \
                 rings mapped): {}",
                self.plan.mode.name(),
                self.tids.len(),
                budget.open,
                budget.soft,
                budget.hard,
                self.ring_bytes / 1024,
                mode::choose(
                    threads,
                    self.cpus.len() as u64,
                    Some(self.plan.mode),
                    &budget
                )
                .err()
                .unwrap_or_else(|| {
                    "threads appeared or other descriptors were opened meanwhile; \
                        raise the hard RLIMIT_NOFILE (ulimit -Hn) or RLIMIT_MEMLOCK (ulimit -l)"
                        .to_string()
                })
            ));
        }
        status
    }

    /// Open thread `tid`'s events on every CPU of the pass.
    fn observe(&mut self, tid: Tid) -> Result<(), NtStatus> {
        for ci in 0..self.cpus.len() {
            let cpu = self.cpus[ci];
            let Some(fd) = self.open_event(tid, Some(cpu))? else {
                return Ok(()); // the thread exited meanwhile
            };
            let fd = match self.owner[ci] {
                None => {
                    let (ring, fd) = match self.map_owner(fd, tid, cpu)? {
                        Some(mapped) => mapped,
                        None => return Ok(()), // the thread exited meanwhile
                    };
                    self.ring_bytes += ring.map_len();
                    let mut cpu_ring =
                        CpuRing::new(Some(cpu), ring, fd.as_raw_fd(), self.lost_fds(&fd));
                    cpu_ring.filter = self.filter.clone();
                    self.owner[ci] = Some((self.fds.len(), self.rings.len()));
                    self.rings.push(cpu_ring);
                    fd
                }
                Some((o, r)) => {
                    event::set_output(fd.as_fd(), self.fds[o].as_fd())?;
                    if self.params.read_lost {
                        self.rings[r].lost_fds.push(fd.as_raw_fd());
                    }
                    fd
                }
            };
            self.fds.push(fd);
        }
        self.tids.push(tid);
        Ok(())
    }

    /// The lost count to read for a sampling event: the event itself when it was opened with
    /// `PERF_FORMAT_LOST`, else none.
    fn lost_fds(&self, fd: &OwnedFd) -> Vec<std::os::fd::RawFd> {
        if self.params.read_lost {
            vec![fd.as_raw_fd()]
        } else {
            Vec::new()
        }
    }

    /// Open thread `tid`'s sampling event on `cpu` (`None`: any CPU); `None` when the thread exited meanwhile
    /// (or its process did).
    fn open_event(&mut self, tid: Tid, cpu: Option<usize>) -> Result<Option<OwnedFd>, NtStatus> {
        // The first open steps the precision down on EINVAL; an EINVAL that turns out to be the kernel's refusal
        // of `PERF_FORMAT_LOST` starts that over from here.
        let precise = self.params.precise_ip;
        self.open_with(|pass| {
            loop {
                let opened = if pass.fds.is_empty() {
                    event::open_precise_on(pass.params, tid, cpu)
                } else {
                    event::open_on_cpu(pass.params, tid, cpu)
                };
                match opened {
                    // A kernel before 6.0 has no PERF_FORMAT_LOST: Lost records alone count the drops.
                    Err(Errno::EINVAL) if pass.params.read_lost => {
                        pass.params.read_lost = false;
                        pass.params.precise_ip = precise;
                        pass.lost_unsupported = true;
                    }
                    other => return other,
                }
            }
        })
    }

    /// Open one of a thread's events with `open`, trying again on EINTR and once more after raising the soft
    /// descriptor limit on EMFILE; `None` when the thread exited meanwhile (or its process did).
    fn open_with(
        &mut self,
        mut open: impl FnMut(&mut Self) -> Result<OwnedFd, Errno>,
    ) -> Result<Option<OwnedFd>, NtStatus> {
        let mut interrupted = 0;
        loop {
            match open(self) {
                Ok(fd) => return Ok(Some(fd)),
                Err(Errno::ESRCH) => return Ok(None), // the thread exited meanwhile
                Err(Errno::EINTR) if interrupted < 3 => interrupted += 1, // try again
                Err(Errno::EMFILE) if !self.raised_nofile && sys::raise_nofile_limit() => {
                    self.raised_nofile = true; // and try again
                }
                // Whatever the kernel answers for a thread of a process that has exited meanwhile (a shortage
                // excepted: that is reported as one), there is nothing left to observe.
                Err(errno)
                    if !crate::source::is_transient_errno(errno) && self.target.has_exited() =>
                {
                    return Ok(None);
                }
                Err(Errno::EACCES | Errno::EPERM) if self.other_process => {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                Err(errno) => return Err(NtStatus::from(errno)),
            }
        }
    }

    /// Map the ring of a CPU's first event. The ring may come out smaller than [`RING_PAGES`] (locked memory is
    /// short); the kernel caps a wake-up watermark at the ring's size, so a watermark chosen for the full size
    /// would wake the consumer only once the small ring is full, and samples would be lost. So when the ring is
    /// smaller than the watermark was chosen for, the event is opened again with a watermark of a quarter of
    /// the ring that could be mapped, and that size is mapped. `None`: the thread exited meanwhile.
    fn map_owner(
        &mut self,
        mut fd: OwnedFd,
        tid: Tid,
        cpu: usize,
    ) -> Result<Option<(Ring, OwnedFd)>, NtStatus> {
        let mut pages = RING_PAGES;
        loop {
            let (ring, got) = map_ring(&fd, self.layout, pages)?;
            let watermark = watermark_for(got);
            if self.params.wakeup_watermark <= watermark {
                return Ok(Some((ring, fd)));
            }
            drop(ring);
            drop(fd);
            self.params.wakeup_watermark = watermark;
            pages = got;
            fd = match event::open(self.params, tid, cpu) {
                Ok(fd) => fd,
                Err(Errno::ESRCH) => return Ok(None),
                Err(errno) => return Err(NtStatus::from(errno)),
            };
        }
    }

    /// True when every processor of the pass has its ring (some thread was observed on each).
    fn complete(&self) -> bool {
        self.rings.len() == self.cpus.len()
    }

    fn finish(mut self) -> Opened {
        self.tids.sort_unstable();
        let pages = self.rings.last().map_or(self.plan.pages, |r| {
            r.ring.map_len() / crate::perf::ring::page_size() - 1
        });
        Opened {
            fds: self.fds,
            rings: self.rings,
            tids: self.tids,
            mode: Some(self.plan.mode),
            ring_bytes: self.ring_bytes,
            counters: self.counters,
            thread_fds: self.thread_fds,
            pages,
        }
    }
}

/// The wake-up watermark for a ring of `pages` data pages: a quarter of it, so that the consumer drains a ring
/// well before it fills.
pub(crate) fn watermark_for(pages: usize) -> usize {
    pages * crate::perf::ring::page_size() / 4
}

/// Map a ring within the locked-memory budget, `pages` data pages at most: halve the size on EPERM/ENOMEM down
/// to one page, then fail with `STATUS_INSUFFICIENT_RESOURCES`. Returns the ring and its data pages.
fn map_ring(
    fd: &OwnedFd,
    layout: SampleLayout,
    mut pages: usize,
) -> Result<(Ring, usize), NtStatus> {
    loop {
        match Ring::map(fd.as_fd(), pages, layout) {
            Ok(ring) => return Ok((ring, pages)),
            Err(Errno::EPERM | Errno::ENOMEM) if pages > 1 => pages /= 2,
            Err(Errno::EPERM | Errno::ENOMEM) => return Err(NtStatus::INSUFFICIENT_RESOURCES),
            Err(errno) => return Err(NtStatus::from(errno)),
        }
    }
}
