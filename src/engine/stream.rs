//! Streams and their opening: the perf events of one (source, target, kernel-or-not), opened thread by thread
//! and CPU by CPU in stable passes, their rings mapped within the locked-memory budget, and their period
//! changed in place or by re-opening.
//!
//! A stream is shared (`Arc<Mutex<Stream>>`) between the engine, which creates, grows and removes it under its
//! own lock, and the jitter thread, which re-draws its period under the stream's lock only. Lock order: the
//! engine's lock, then a stream's; the jitter thread takes no other lock, and the consumer thread none.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use nix::errno::Errno;

use super::consumer::{ConsumerLink, Msg};
use super::counters::StreamId;
use super::dispatch::CpuRing;
use crate::affinity::CpuSet;
use crate::perf::event::{self, EventParams};
use crate::perf::ring::{Ring, SampleLayout};
use crate::perf::sys::{self, Tid};
use crate::source::ProfileSource;
use crate::status::NtStatus;
use crate::target::Target;

/// Data pages per ring (a power of two): 64 pages = 256 KiB, shrunk step by step when the locked-memory budget
/// (`perf_event_mlock_kb` per CPU plus `RLIMIT_MEMLOCK`) is short.
pub(crate) const RING_PAGES: usize = 64;
/// How many times a start re-scans the thread list looking for threads created meanwhile.
const RESCAN_LIMIT: usize = 64;

/// What makes two profiles share a stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StreamKey {
    /// The profile source.
    pub(crate) source: ProfileSource,
    /// Who is observed.
    pub(crate) target: Target,
    /// Kernel addresses are sampled too (`exclude_kernel = 0`).
    pub(crate) kernel: bool,
}

/// A stream, shared by the engine and the jitter thread.
pub(super) type SharedStream = Arc<Mutex<Stream>>;

/// Lock a stream (a panic under its lock leaves its fields consistent: keep going).
pub(super) fn lock(stream: &Mutex<Stream>) -> MutexGuard<'_, Stream> {
    stream.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The perf events of one (source, target, kernel-or-not): for the current process one event per (thread × CPU)
/// with `inherit` + `inherit_thread`, all events of a CPU writing into one ring through
/// `PERF_EVENT_IOC_SET_OUTPUT`. It opens when its first profile starts, grows when a started profile needs more
/// CPUs, and closes when its last profile stops. Its period is the source's interval, shared, as in NT.
pub(crate) struct Stream {
    pub(super) id: StreamId,
    pub(super) key: StreamKey,
    pub(super) params: EventParams,
    pub(super) cpus: CpuSet,
    /// Every event descriptor of the stream (ring owners and redirected ones).
    pub(super) fds: Vec<OwnedFd>,
    /// Started profiles on this stream.
    pub(super) profiles: usize,
    /// The threads whose events were opened directly (the others are covered by inheritance).
    pub(super) tids: Vec<Tid>,
    /// When the jitter thread draws this stream's next period (`None`: the period is fixed).
    pub(super) jitter_next: Option<Instant>,
    /// The first half of an antithetic pair of draws, waiting for its mirror.
    pub(super) jitter_pair: Option<f64>,
    /// The engine removed the stream (the consumer has unmapped its rings): the jitter thread leaves it alone.
    pub(super) removed: bool,
}

impl Stream {
    /// A stream with no event yet, with the event parameters of `key` at the source's interval now.
    ///
    /// # Errors
    /// `STATUS_NOT_SUPPORTED` for a source without a perf event.
    pub(super) fn new(id: StreamId, key: StreamKey) -> Result<Stream, NtStatus> {
        let source = key.source;
        let params = EventParams {
            spec: source.perf_event().ok_or(NtStatus::NOT_SUPPORTED)?,
            period: source.period_for(crate::source::effective_interval(source)),
            exclude_kernel: !key.kernel,
            sample_tid: false,
            // Per-thread events follow the threads created later; per-CPU (global) ones see every task.
            inherit_threads: !key.target.is_global(),
            wakeup_watermark: watermark_for(RING_PAGES),
            // Hardware events start at the most precise level and step down (`open_precise`).
            precise_ip: if source.is_hardware() {
                event::MAX_PRECISE_IP
            } else {
                0
            },
        };
        Ok(Stream {
            id,
            key,
            params,
            cpus: CpuSet::new(),
            fds: Vec::new(),
            profiles: 0,
            tids: Vec::new(),
            jitter_next: None,
            jitter_pair: None,
            removed: false,
        })
    }

    /// Open the stream's events on `missing` CPUs (not yet covered) for the threads alive now, skipping the
    /// library's own threads `own`; returns the new rings for the consumer.
    pub(super) fn open_more(
        &mut self,
        missing: &CpuSet,
        own: &[Tid],
    ) -> Result<Vec<CpuRing>, NtStatus> {
        let Opened { fds, rings, tids } =
            open_cpus(&mut self.params, &self.key.target, missing, own)?;
        // A thread is observed directly only if it has its own events on every CPU of the stream.
        self.tids = if self.fds.is_empty() {
            tids
        } else {
            self.tids
                .iter()
                .copied()
                .filter(|t| tids.binary_search(t).is_ok())
                .collect()
        };
        self.fds.extend(fds);
        self.cpus = self.cpus.union(missing);
        Ok(rings)
    }

    /// Give the stream's events the sample period `period`.
    ///
    /// `PERF_EVENT_IOC_PERIOD` changes only the event it is called on, never the copies that threads created
    /// later inherited from it (the kernel's ioctl does not walk an event's children, unlike ENABLE/DISABLE).
    /// So when a per-thread stream has threads it did not open events for, it is re-opened: new events with
    /// the new period for every thread alive now (a stable pass, as at start), new rings added to the
    /// consumer, the old events disabled (their inherited copies with them) and the new ones enabled, then the
    /// old rings drained into the started profiles and dropped. Otherwise (every thread has its own events, or
    /// a per-CPU global stream, which has no inherited copies) the ioctl reaches every event. If a re-open fails
    /// (descriptors short: both sets exist for a moment), the ioctl is applied to the events opened directly.
    pub(super) fn apply_period(&mut self, period: u64, link: &ConsumerLink, own: &[Tid]) {
        if self.has_inherited_threads(own) && self.reopen(period, link, own).is_ok() {
            return;
        }
        for fd in &self.fds {
            // A descriptor whose thread exited answers ESRCH or nothing; the others take the new period.
            let _ = event::set_period(fd.as_fd(), period);
        }
    }

    /// True when the stream observes a thread through inheritance only (created after its events opened).
    fn has_inherited_threads(&self, own: &[Tid]) -> bool {
        if self.key.target.is_global() {
            return false;
        }
        match self.key.target.threads() {
            Ok(now) => now
                .iter()
                .any(|t| !own.contains(t) && self.tids.binary_search(t).is_err()),
            Err(_) => false,
        }
    }

    /// Replace the stream's events by a fresh set with sample period `period` for the threads alive now (see
    /// `apply_period`). The stream's base period (`params.period`) is kept.
    fn reopen(&mut self, period: u64, link: &ConsumerLink, own: &[Tid]) -> Result<(), NtStatus> {
        let cpus = self.cpus.clone();
        let base = std::mem::replace(&mut self.params.period, period);
        let opened = open_cpus(&mut self.params, &self.key.target, &cpus, own);
        self.params.period = base;
        let Opened { fds, rings, tids } = opened?;
        let sid = self.id;
        let keep: Vec<RawFd> = rings.iter().map(|r| r.fd).collect();
        link.request(|ack| Msg::AddRings {
            stream: sid,
            rings,
            ack,
        })?;
        let old = std::mem::replace(&mut self.fds, fds);
        self.tids = tids;
        for fd in &old {
            let _ = event::disable(fd.as_fd());
        }
        if self.profiles > 0 {
            for fd in &self.fds {
                let _ = event::enable(fd.as_fd());
            }
        }
        let result = link.request(|ack| Msg::RetireRings {
            stream: sid,
            keep,
            ack,
        });
        // The consumer has drained and unmapped the old rings: the old descriptors can close.
        drop(old);
        result
    }
}

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
fn open_cpus(
    params: &mut EventParams,
    target: &Target,
    cpus: &CpuSet,
    skip: &[Tid],
) -> Result<Opened, NtStatus> {
    for attempt in 0..RESCAN_LIMIT {
        let last = attempt + 1 == RESCAN_LIMIT;
        let mut pass = Pass::new(&mut *params, cpus, target);
        let scan = target.threads()?;
        for &tid in scan.iter().filter(|t| !skip.contains(t)) {
            pass.observe(tid)?;
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
            pass.observe(tid)?;
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

/// How long a pass that found no thread to observe waits for the process to finish exiting before scanning
/// again.
const EXIT_WAIT_MS: u16 = 10;

/// What a successful pass opened.
struct Opened {
    /// Every event descriptor.
    fds: Vec<OwnedFd>,
    /// One ring per CPU.
    rings: Vec<CpuRing>,
    /// The threads observed directly, sorted.
    tids: Vec<Tid>,
}

impl Opened {
    /// The events of a process that has exited: none.
    fn nothing() -> Opened {
        Opened {
            fds: Vec::new(),
            rings: Vec::new(),
            tids: Vec::new(),
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
    owner: Vec<Option<usize>>,
    /// Who is observed.
    target: &'a Target,
    /// EACCES/EPERM mean "may not profile that process" for another process, a missing privilege otherwise.
    other_process: bool,
    /// The soft descriptor limit was already raised once by this pass.
    raised_nofile: bool,
    /// Threads observed on every CPU of the pass.
    tids: Vec<Tid>,
}

impl<'a> Pass<'a> {
    fn new(params: &'a mut EventParams, cpus: &CpuSet, target: &'a Target) -> Pass<'a> {
        let cpus: Vec<usize> = cpus.iter().collect();
        let owner = vec![None; cpus.len()];
        let layout = SampleLayout {
            tid: params.sample_tid,
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
        }
    }

    /// Open thread `tid`'s event on every CPU of the pass.
    fn observe(&mut self, tid: Tid) -> Result<(), NtStatus> {
        for ci in 0..self.cpus.len() {
            let cpu = self.cpus[ci];
            let mut interrupted = 0;
            let fd = loop {
                let opened = if self.fds.is_empty() {
                    event::open_precise(self.params, tid, cpu)
                } else {
                    event::open(self.params, tid, cpu)
                };
                match opened {
                    Ok(fd) => break fd,
                    Err(Errno::ESRCH) => return Ok(()), // the thread exited meanwhile
                    Err(Errno::EINTR) if interrupted < 3 => interrupted += 1, // try again
                    Err(Errno::EMFILE) if !self.raised_nofile && sys::raise_nofile_limit() => {
                        self.raised_nofile = true; // and try this CPU again
                    }
                    // Whatever the kernel answers for a thread of a process that has exited meanwhile (a
                    // shortage excepted: that is reported as one), there is nothing left to observe.
                    Err(errno)
                        if !crate::source::is_transient_errno(errno)
                            && self.target.has_exited() =>
                    {
                        return Ok(());
                    }
                    Err(Errno::EACCES | Errno::EPERM) if self.other_process => {
                        return Err(NtStatus::ACCESS_DENIED);
                    }
                    Err(errno) => return Err(NtStatus::from(errno)),
                }
            };
            let fd = match self.owner[ci] {
                None => {
                    let (ring, fd) = match self.map_owner(fd, tid, cpu)? {
                        Some(mapped) => mapped,
                        None => return Ok(()), // the thread exited meanwhile
                    };
                    self.rings.push(CpuRing {
                        cpu,
                        ring,
                        fd: fd.as_raw_fd(),
                    });
                    self.owner[ci] = Some(self.fds.len());
                    fd
                }
                Some(o) => {
                    event::set_output(fd.as_fd(), self.fds[o].as_fd())?;
                    fd
                }
            };
            self.fds.push(fd);
        }
        self.tids.push(tid);
        Ok(())
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
        Opened {
            fds: self.fds,
            rings: self.rings,
            tids: self.tids,
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
