//! Streams, the consumer thread's lifecycle, start, stop (the barrier) and interval changes.
//!
//! A *stream* is the set of perf events of one (source, target, kernel-or-not): for the current process one
//! event per (thread × CPU) with `inherit` + `inherit_thread`, all events of a CPU writing into one ring through
//! `PERF_EVENT_IOC_SET_OUTPUT`. It opens when its first profile starts, grows when a started profile needs more
//! CPUs, and closes when its last profile stops. Its period is the source's interval, shared, as in NT.
//!
//! API calls serialize on one mutex here (the control path); the consumer thread never takes it.

pub(crate) mod consumer;
#[allow(unsafe_code)]
pub(crate) mod counters;
pub(crate) mod fork;
pub(crate) mod index;
mod jitter;
#[doc(hidden)]
pub mod replay;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crossbeam::channel::{Sender, bounded, unbounded};

use crate::affinity::{CpuSet, online_cpus};
use crate::perf::event::{self, EventParams};
use crate::perf::ring::{Ring, SampleLayout};
use crate::perf::sys::{Waker, gettid};
use crate::profile::ProfileCore;
use crate::source::{self, ProfileSource};
use crate::status::NtStatus;
use crate::target::Target;
use consumer::{Consumer, Msg, RingIn};

/// Data pages per ring (a power of two): 64 pages = 256 KiB, shrunk step by step when the locked-memory budget
/// (`perf_event_mlock_kb` per CPU plus `RLIMIT_MEMLOCK`) is short.
pub(crate) const RING_PAGES: usize = 64;
/// How many times a start re-scans the thread list looking for threads created meanwhile.
const RESCAN_LIMIT: usize = 64;
/// Started profiles allowed per online processor (NT's limit).
pub const STARTED_PER_CPU: usize = 8192;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct StreamKey {
    source: ProfileSource,
    target: Target,
    kernel: bool,
}

struct Stream {
    id: u64,
    key: StreamKey,
    params: EventParams,
    cpus: CpuSet,
    /// Every event descriptor of the stream (ring owners and redirected ones).
    fds: Vec<OwnedFd>,
    /// Started profiles on this stream.
    profiles: usize,
    /// The threads whose events were opened directly (the others are covered by inheritance).
    tids: Vec<i32>,
    /// When the jitter thread draws this stream's next period (`None`: the period is fixed).
    jitter_next: Option<std::time::Instant>,
    /// The first half of an antithetic pair of draws, waiting for its mirror.
    jitter_pair: Option<f64>,
}

struct ConsumerHandle {
    tx: Sender<Msg>,
    waker: Arc<Waker>,
    thread: JoinHandle<()>,
    tid: i32,
    /// The jitter thread: its tid (never observed) and its wake-up channel (dropping it stops the thread).
    jitter: Option<(i32, Sender<()>)>,
}

pub(crate) struct Engine {
    consumer: Option<ConsumerHandle>,
    streams: Vec<Stream>,
    /// Stream id of every started profile, by profile id.
    started: BTreeMap<u64, u64>,
    next_stream: u64,
}

static ENGINE: Mutex<Engine> = Mutex::new(Engine {
    consumer: None,
    streams: Vec::new(),
    started: BTreeMap::new(),
    next_stream: 1,
});

pub(crate) fn lock() -> MutexGuard<'static, Engine> {
    // A panic while holding the lock leaves the tables consistent at every await point; keep going.
    ENGINE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Block every signal in a thread of the library: process-directed signals are for the program's threads.
fn block_signals() {
    let _ = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&nix::sys::signal::SigSet::all()),
        None,
    );
}

/// The started-profile limit now: 8192 × online processors.
pub fn started_limit() -> usize {
    STARTED_PER_CPU * online_cpus().len()
}

/// True when the profile is started.
pub(crate) fn is_started(profile: u64) -> bool {
    lock().started.contains_key(&profile)
}

/// Number of started profiles in this process.
pub fn started_count() -> usize {
    lock().started.len()
}

/// `NtStartProfile`'s work: open or grow the stream, publish the profile to the consumer, enable the events.
pub(crate) fn start(core: &Arc<ProfileCore>) -> Result<(), NtStatus> {
    let mut eng = lock();
    if eng.started.contains_key(&core.id) {
        return Err(NtStatus::PROFILING_NOT_STOPPED);
    }
    if eng.started.len() >= started_limit() {
        return Err(NtStatus::PROFILING_AT_LIMIT);
    }
    let cpus = core.affinity.effective(&online_cpus());
    let key = StreamKey {
        source: core.source,
        target: core.target.clone(),
        kernel: core.wants_kernel(),
    };
    eng.ensure_consumer()?;
    let result = eng.start_on(core, key, cpus);
    eng.shutdown_if_idle();
    result
}

/// `NtStopProfile`'s work, the barrier: disable (if it was the stream's last profile), drain every ring of the
/// stream, unpublish, and return only when the consumer can no longer touch the buffer.
pub(crate) fn stop(core: &ProfileCore) -> Result<(), NtStatus> {
    let mut eng = lock();
    let stream = eng
        .started
        .remove(&core.id)
        .ok_or(NtStatus::PROFILING_NOT_STARTED)?;
    let result = eng.unpublish(stream, core.id);
    eng.shutdown_if_idle();
    result
}

/// Ask the consumer to drain every ring now, so that live reads see every sample taken before the call.
pub(crate) fn sync() -> Result<(), NtStatus> {
    let eng = lock();
    if eng.consumer.is_none() {
        return Ok(());
    }
    eng.request(|ack| Msg::Sync { ack })
}

/// `NtSetIntervalProfile`'s work: store the clamped interval and re-program every running stream of the source
/// at once (`PERF_EVENT_IOC_PERIOD` reaches inherited children too). Returns the effective interval.
pub(crate) fn set_interval(source: ProfileSource, interval: u32) -> u32 {
    let mut eng = lock();
    let effective = source::store_interval(source, interval);
    let period = source.period_for(effective);
    for si in 0..eng.streams.len() {
        let s = &mut eng.streams[si];
        if s.key.source != source || s.params.period == period {
            continue;
        }
        s.params.period = period;
        if s.jitter_next.is_some() {
            // The jitter thread owns the period of a jittered stream: it re-draws around the new base now.
            s.jitter_next = Some(std::time::Instant::now());
            eng.wake_jitter();
        } else {
            eng.apply_period(si, period);
        }
    }
    effective
}

/// Jitter `source`'s sample period by up to ± `percent` % (0 turns it off): successive periods are drawn at
/// random so that periodic workloads cannot alias with the sampler, and the mean sample rate stays the
/// interval's. Applies at once to running profiles of the source.
///
/// # Errors
/// `STATUS_INVALID_PARAMETER` for more than [`source::MAX_JITTER_PERCENT`]; `STATUS_NOT_SUPPORTED` for a
/// source that cannot be sampled here.
pub(crate) fn set_jitter(source: ProfileSource, percent: u32) -> Result<(), NtStatus> {
    if percent > source::MAX_JITTER_PERCENT {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    source.support().status().ok()?;
    let mut eng = lock();
    source::store_jitter(source, percent);
    for si in 0..eng.streams.len() {
        if eng.streams[si].key.source == source {
            eng.schedule_jitter(si);
        }
    }
    Ok(())
}

/// The perf period streams of `source` use now (for tests and the listing).
pub fn stream_period(source: ProfileSource) -> Option<u64> {
    lock()
        .streams
        .iter()
        .find(|s| s.key.source == source)
        .map(|s| s.params.period)
}

impl Engine {
    /// Give stream `si`'s events the sample period `period`.
    ///
    /// `PERF_EVENT_IOC_PERIOD` changes only the event it is called on, never the copies that threads created
    /// later inherited from it (the kernel's ioctl does not walk an event's children, unlike ENABLE/DISABLE).
    /// So when a per-thread stream has threads it did not open events for, it is re-opened: new events with
    /// the new period for every thread alive now (a stable pass, as at start), new rings added to the
    /// consumer, the old events disabled (their inherited copies with them) and the new ones enabled, then the
    /// old rings drained into the started profiles and dropped. Otherwise (every thread has its own events, or
    /// a per-CPU global stream, which has no inherited copies) the ioctl reaches every event. If a re-open fails
    /// (descriptors short: both sets exist for a moment), the ioctl is applied to the events opened directly.
    fn apply_period(&mut self, si: usize, period: u64) {
        if self.has_inherited_threads(si) && self.reopen_stream(si, period).is_ok() {
            return;
        }
        for fd in &self.streams[si].fds {
            // A descriptor whose thread exited answers ESRCH or nothing; the others take the new period.
            let _ = event::set_period(fd.as_fd(), period);
        }
    }

    /// Threads of this library that are never observed: the consumer and the jitter thread.
    fn own_tids(&self) -> Vec<i32> {
        match &self.consumer {
            Some(c) => std::iter::once(c.tid)
                .chain(c.jitter.as_ref().map(|j| j.0))
                .collect(),
            None => Vec::new(),
        }
    }

    /// True when stream `si` observes a thread through inheritance only (created after its events opened).
    fn has_inherited_threads(&self, si: usize) -> bool {
        let s = &self.streams[si];
        if s.key.target.is_global() {
            return false;
        }
        let own = self.own_tids();
        match s.key.target.threads() {
            Ok(now) => now
                .iter()
                .any(|t| !own.contains(t) && s.tids.binary_search(t).is_err()),
            Err(_) => false,
        }
    }

    /// Replace stream `si`'s events by a fresh set with sample period `period` for the threads alive now (see
    /// `apply_period`). The stream's base period (`params.period`) is kept.
    fn reopen_stream(&mut self, si: usize, period: u64) -> Result<(), NtStatus> {
        let own = self.own_tids();
        let s = &mut self.streams[si];
        let cpus = s.cpus.clone();
        let base = std::mem::replace(&mut s.params.period, period);
        let opened = open_cpus(&mut s.params, &s.key.target, &cpus, &own);
        s.params.period = base;
        let Opened { fds, rings, tids } = opened?;
        let sid = s.id;
        let keep: Vec<RawFd> = rings.iter().map(|r| r.fd).collect();
        self.request(|ack| Msg::AddRings {
            stream: sid,
            rings,
            ack,
        })?;
        let old = std::mem::replace(&mut self.streams[si].fds, fds);
        self.streams[si].tids = tids;
        for fd in &old {
            let _ = event::disable(fd.as_fd());
        }
        if self.streams[si].profiles > 0 {
            for fd in &self.streams[si].fds {
                let _ = event::enable(fd.as_fd());
            }
        }
        let result = self.request(|ack| Msg::RetireRings {
            stream: sid,
            keep,
            ack,
        });
        // The consumer has drained and unmapped the old rings: the old descriptors can close.
        drop(old);
        result
    }

    /// Bring stream `si` in line with its source's jitter setting: a jittered source gets a draw now; a source
    /// whose jitter was turned off gets its base period back on every event.
    fn schedule_jitter(&mut self, si: usize) {
        let s = &mut self.streams[si];
        if source::jitter_percent(s.key.source) > 0 {
            s.jitter_next = Some(std::time::Instant::now());
            self.wake_jitter();
        } else if s.jitter_next.take().is_some() {
            let base = s.params.period;
            self.apply_period(si, base);
        }
    }

    fn wake_jitter(&self) {
        if let Some((_, wake)) = self.consumer.as_ref().and_then(|c| c.jitter.as_ref()) {
            let _ = wake.try_send(());
        }
    }

    /// In a forked child: the consumer thread does not exist here and the rings are not mapped. Forget the
    /// thread (never join or detach it), close this process's copies of the event descriptors, and forget
    /// every started profile. The rings' bookkeeping lived in the consumer's memory and is simply abandoned.
    fn forget_after_fork(&mut self) {
        if let Some(c) = self.consumer.take() {
            let ConsumerHandle {
                tx,
                waker,
                thread,
                jitter,
                ..
            } = c;
            std::mem::forget(thread);
            drop((tx, waker, jitter));
        }
        self.streams.clear();
        self.started.clear();
    }

    fn ensure_consumer(&mut self) -> Result<(), NtStatus> {
        if self.consumer.is_some() {
            return Ok(());
        }
        // Invariant: the consumer is created only while no stream exists, so it never inherits an event.
        debug_assert!(self.streams.is_empty());
        let waker = Arc::new(Waker::new().map_err(NtStatus::from_errno)?);
        let (tx, rx) = unbounded();
        let consumer = Consumer::new(rx, waker.clone()).map_err(NtStatus::from_errno)?;
        let (tid_tx, tid_rx) = bounded(2);
        let (wake_tx, wake_rx) = bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("ntprofile-consumer".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                block_signals();
                let _ = tid_tx.send(Some(gettid()));
                // The jitter thread is created here, by a thread that has no event: it inherits none.
                let jitter = std::thread::Builder::new()
                    .name("ntprofile-jitter".into())
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        block_signals();
                        let _ = tid_tx.send(Some(gettid()));
                        jitter::run(wake_rx);
                    });
                consumer.run();
                // The API side dropped the jitter thread's channel before asking us to exit.
                if let Ok(j) = jitter {
                    let _ = j.join();
                }
            })
            .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
        let tid = tid_rx
            .recv()
            .ok()
            .flatten()
            .ok_or(NtStatus::INTERNAL_ERROR)?;
        // Without a jitter thread (it could not be created), jitter is simply not applied.
        let jitter_tid = tid_rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .ok()
            .flatten();
        self.consumer = Some(ConsumerHandle {
            tx,
            waker,
            thread,
            tid,
            jitter: jitter_tid.map(|t| (t, wake_tx)),
        });
        Ok(())
    }

    /// Stop the consumer thread when no stream is left (so an idle process keeps no thread of ours).
    fn shutdown_if_idle(&mut self) {
        if !self.streams.is_empty() {
            return;
        }
        if let Some(c) = self.consumer.take() {
            // First the jitter thread's channel (it stops, never waiting for the engine lock we hold), then the
            // consumer, which joins it.
            let tids: Vec<i32> = std::iter::once(c.tid)
                .chain(c.jitter.as_ref().map(|j| j.0))
                .collect();
            drop(c.jitter);
            let _ = c.tx.send(Msg::Exit);
            c.waker.wake();
            let _ = c.thread.join();
            // A join returns when the kernel clears the thread's tid, a moment before the thread is released:
            // wait (briefly) until it is gone from /proc, so that no thread of ours outlives the call.
            for tid in tids {
                let path = format!("/proc/self/task/{tid}");
                for _ in 0..2000 {
                    if std::fs::metadata(&path).is_err() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_micros(5));
                }
            }
        }
    }

    /// Send a request to the consumer and wait for its ack.
    fn request(&self, make: impl FnOnce(Sender<()>) -> Msg) -> Result<(), NtStatus> {
        let c = self.consumer.as_ref().ok_or(NtStatus::INTERNAL_ERROR)?;
        let (ack, done) = bounded(1);
        c.tx.send(make(ack)).map_err(|_| NtStatus::INTERNAL_ERROR)?;
        c.waker.wake();
        // A consumer that died drops the ack sender: recv fails rather than hanging.
        done.recv().map_err(|_| NtStatus::INTERNAL_ERROR)
    }

    fn start_on(
        &mut self,
        core: &Arc<ProfileCore>,
        key: StreamKey,
        cpus: CpuSet,
    ) -> Result<(), NtStatus> {
        let own = self.own_tids();
        let si = match self.streams.iter().position(|s| s.key == key) {
            Some(i) => i,
            None => {
                let source = key.source;
                let params = EventParams {
                    spec: source.perf_event().ok_or(NtStatus::NOT_SUPPORTED)?,
                    period: source.period_for(source::effective_interval(source)),
                    exclude_kernel: !key.kernel,
                    sample_tid: false,
                    // Per-thread events follow the threads created later; per-CPU (global) ones see every task.
                    inherit_threads: !key.target.is_global(),
                    wakeup_watermark: RING_PAGES * crate::perf::ring::page_size() / 4,
                    // Hardware events start at the most precise level and step down (`open_precise`).
                    precise_ip: if source.is_hardware() { 3 } else { 0 },
                };
                let id = self.next_stream;
                self.next_stream += 1;
                self.streams.push(Stream {
                    id,
                    key,
                    params,
                    cpus: CpuSet::new(),
                    fds: Vec::new(),
                    profiles: 0,
                    tids: Vec::new(),
                    jitter_next: None,
                    jitter_pair: None,
                });
                self.streams.len() - 1
            }
        };
        let sid = self.streams[si].id;
        let missing: CpuSet =
            CpuSet::from_cpus(cpus.iter().filter(|c| !self.streams[si].cpus.contains(*c)));
        let first_new = self.streams[si].fds.len();
        if !missing.is_empty() {
            let s = &mut self.streams[si];
            let opened = open_cpus(&mut s.params, &s.key.target, &missing, &own);
            let Opened { fds, rings, tids } = match opened {
                Ok(v) => v,
                Err(e) => {
                    if self.streams[si].profiles == 0 && self.streams[si].fds.is_empty() {
                        self.streams.remove(si);
                    }
                    return Err(e);
                }
            };
            let s = &mut self.streams[si];
            // A thread is observed directly only if it has its own events on every CPU of the stream.
            s.tids = if s.fds.is_empty() {
                tids
            } else {
                s.tids
                    .iter()
                    .copied()
                    .filter(|t| tids.binary_search(t).is_ok())
                    .collect()
            };
            s.fds.extend(fds);
            s.cpus = s.cpus.union(&missing);
            if let Err(e) = self.request(|ack| Msg::AddRings {
                stream: sid,
                rings,
                ack,
            }) {
                self.drop_stream_if_unused(si);
                return Err(e);
            }
        }
        if !missing.is_empty() {
            self.schedule_jitter(si);
        }
        if let Err(e) = self.request(|ack| Msg::Publish {
            stream: sid,
            core: core.clone(),
            cpus,
            ack,
        }) {
            self.drop_stream_if_unused(si);
            return Err(e);
        }
        // Enable only after the profile is published, so that its first samples count.
        let mut failed = None;
        for fd in &self.streams[si].fds[first_new..] {
            if let Err(errno) = event::enable(fd.as_fd())
                && errno != libc::ESRCH
            {
                failed = Some(NtStatus::from_errno(errno));
            }
        }
        self.streams[si].profiles += 1;
        self.started.insert(core.id, sid);
        if let Some(status) = failed {
            self.started.remove(&core.id);
            let _ = self.unpublish(sid, core.id);
            return Err(status);
        }
        Ok(())
    }

    fn drop_stream_if_unused(&mut self, si: usize) {
        if self.streams[si].profiles == 0 {
            let sid = self.streams[si].id;
            let _ = self.request(|ack| Msg::RemoveStream { stream: sid, ack });
            self.streams.remove(si);
        }
    }

    fn unpublish(&mut self, sid: u64, profile: u64) -> Result<(), NtStatus> {
        let Some(si) = self.streams.iter().position(|s| s.id == sid) else {
            return Err(NtStatus::INTERNAL_ERROR);
        };
        let last = self.streams[si].profiles == 1;
        if last {
            for fd in &self.streams[si].fds {
                let _ = event::disable(fd.as_fd());
            }
        }
        let result = self.request(|ack| Msg::Unpublish {
            stream: sid,
            profile,
            ack,
        });
        self.streams[si].profiles -= 1;
        if last {
            let removed = self.request(|ack| Msg::RemoveStream { stream: sid, ack });
            // Dropping the stream closes its descriptors; the consumer has unmapped the rings.
            self.streams.remove(si);
            return result.and(removed);
        }
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
fn open_cpus(
    params: &mut EventParams,
    target: &Target,
    cpus: &CpuSet,
    skip: &[i32],
) -> Result<Opened, NtStatus> {
    for attempt in 0..RESCAN_LIMIT {
        let mut pass = Pass::new(&mut *params, cpus, target);
        let scan = target.threads()?;
        for &tid in scan.iter().filter(|t| !skip.contains(t)) {
            pass.observe(tid)?;
        }
        let fresh: Vec<i32> = target
            .threads()?
            .into_iter()
            .filter(|t| !skip.contains(t) && scan.binary_search(t).is_err())
            .collect();
        if fresh.is_empty() || attempt + 1 == RESCAN_LIMIT {
            for tid in fresh {
                pass.observe(tid)?;
            }
            return pass.finish();
        }
    }
    Err(NtStatus::INTERNAL_ERROR)
}

/// What a successful pass opened.
struct Opened {
    /// Every event descriptor.
    fds: Vec<OwnedFd>,
    /// One ring per CPU.
    rings: Vec<RingIn>,
    /// The threads observed directly, sorted.
    tids: Vec<i32>,
}

/// One attempt at opening a stream's events on some CPUs.
struct Pass<'a> {
    params: &'a mut EventParams,
    cpus: Vec<usize>,
    layout: SampleLayout,
    fds: Vec<OwnedFd>,
    rings: Vec<RingIn>,
    owner: Vec<Option<usize>>,
    /// EACCES/EPERM mean "may not profile that process" for another process, a missing privilege otherwise.
    other_process: bool,
    /// The soft descriptor limit was already raised once by this pass.
    raised_nofile: bool,
    /// Threads observed on every CPU of the pass.
    tids: Vec<i32>,
}

impl<'a> Pass<'a> {
    fn new(params: &'a mut EventParams, cpus: &CpuSet, target: &Target) -> Pass<'a> {
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
            other_process: matches!(target, Target::Process(_)),
            raised_nofile: false,
            tids: Vec::new(),
        }
    }

    /// Open thread `tid`'s event on every CPU of the pass.
    fn observe(&mut self, tid: i32) -> Result<(), NtStatus> {
        for (ci, &cpu) in self.cpus.iter().enumerate() {
            let fd = loop {
                let opened = if self.fds.is_empty() {
                    event::open_precise(self.params, tid, cpu)
                } else {
                    event::open(self.params, tid, cpu)
                };
                match opened {
                    Ok(fd) => break fd,
                    Err(libc::ESRCH) => return Ok(()), // the thread exited meanwhile
                    Err(libc::EMFILE) if !self.raised_nofile && raise_nofile_limit() => {
                        self.raised_nofile = true; // and try this CPU again
                    }
                    Err(libc::EACCES | libc::EPERM) if self.other_process => {
                        return Err(NtStatus::ACCESS_DENIED);
                    }
                    Err(errno) => return Err(NtStatus::from_errno(errno)),
                }
            };
            match self.owner[ci] {
                None => {
                    let ring = map_ring(&fd, self.layout)?;
                    self.rings.push(RingIn {
                        cpu,
                        ring,
                        fd: fd.as_raw_fd(),
                    });
                    self.owner[ci] = Some(self.fds.len());
                }
                Some(o) => {
                    event::set_output(fd.as_fd(), self.fds[o].as_fd())
                        .map_err(NtStatus::from_errno)?;
                }
            }
            self.fds.push(fd);
        }
        self.tids.push(tid);
        Ok(())
    }

    fn finish(mut self) -> Result<Opened, NtStatus> {
        if self.rings.len() != self.cpus.len() {
            // No thread could be observed at all (the target is gone).
            return Err(NtStatus::INVALID_HANDLE);
        }
        self.tids.sort_unstable();
        Ok(Opened {
            fds: self.fds,
            rings: self.rings,
            tids: self.tids,
        })
    }
}

/// Raise the soft `RLIMIT_NOFILE` toward the hard limit (doubling, at least +1024). True if it went up.
fn raise_nofile_limit() -> bool {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return false;
    };
    if soft >= hard {
        return false;
    }
    let want = soft
        .saturating_mul(2)
        .max(soft.saturating_add(1024))
        .min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok()
}

/// Map a ring within the locked-memory budget: halve the size on EPERM/ENOMEM down to one page, then fail with
/// `STATUS_INSUFFICIENT_RESOURCES`.
fn map_ring(fd: &OwnedFd, layout: SampleLayout) -> Result<Ring, NtStatus> {
    let mut pages = RING_PAGES;
    loop {
        match Ring::map(fd.as_fd(), pages, layout) {
            Ok(ring) => return Ok(ring),
            Err(libc::EPERM | libc::ENOMEM) if pages > 1 => pages /= 2,
            Err(libc::EPERM | libc::ENOMEM) => return Err(NtStatus::INSUFFICIENT_RESOURCES),
            Err(errno) => return Err(NtStatus::from_errno(errno)),
        }
    }
}
