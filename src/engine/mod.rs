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

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
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
    /// The consumer is jittering this stream's period.
    jittered: bool,
}

struct ConsumerHandle {
    tx: Sender<Msg>,
    waker: Arc<Waker>,
    thread: JoinHandle<()>,
    tid: i32,
}

pub(crate) struct Engine {
    consumer: Option<ConsumerHandle>,
    streams: Vec<Stream>,
    /// (profile id, stream id) of every started profile.
    started: Vec<(u64, u64)>,
    next_stream: u64,
}

static ENGINE: Mutex<Engine> = Mutex::new(Engine {
    consumer: None,
    streams: Vec::new(),
    started: Vec::new(),
    next_stream: 1,
});

pub(crate) fn lock() -> MutexGuard<'static, Engine> {
    // A panic while holding the lock leaves the tables consistent at every await point; keep going.
    ENGINE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The started-profile limit now: 8192 × online processors.
pub fn started_limit() -> usize {
    STARTED_PER_CPU * online_cpus().len()
}

/// True when the profile is started.
pub(crate) fn is_started(profile: u64) -> bool {
    lock().started.iter().any(|(p, _)| *p == profile)
}

/// Number of started profiles in this process.
pub fn started_count() -> usize {
    lock().started.len()
}

/// `NtStartProfile`'s work: open or grow the stream, publish the profile to the consumer, enable the events.
pub(crate) fn start(core: &Arc<ProfileCore>) -> Result<(), NtStatus> {
    let mut eng = lock();
    if eng.started.iter().any(|(p, _)| *p == core.id) {
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
    let pos = eng
        .started
        .iter()
        .position(|(p, _)| *p == core.id)
        .ok_or(NtStatus::PROFILING_NOT_STARTED)?;
    let (_, stream) = eng.started.remove(pos);
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
        if s.jittered {
            // The consumer owns the period of a jittered stream: it re-draws around the new base at once.
            eng.send_jitter(si);
        } else {
            for fd in &s.fds {
                // A descriptor whose thread exited answers ESRCH or nothing; the others take the new period.
                let _ = event::set_period(fd.as_fd(), period);
            }
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
            eng.send_jitter(si);
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
    /// Tell the consumer how to jitter stream `si`'s period (every descriptor, the base period, the percent);
    /// a percent of 0 turns jitter off and restores the base period.
    fn send_jitter(&mut self, si: usize) {
        let s = &self.streams[si];
        let percent = source::jitter_percent(s.key.source);
        if percent == 0 && !s.jittered {
            return;
        }
        let fds = s.fds.iter().map(|f| f.as_raw_fd()).collect();
        let (stream, base) = (s.id, s.params.period);
        let time_based = s.key.source.interval_unit() == source::IntervalUnit::Time100ns;
        let jitter = consumer::JitterSpec {
            fds,
            base,
            percent,
            time_based,
        };
        if self
            .request(|ack| Msg::Jitter {
                stream,
                jitter,
                ack,
            })
            .is_ok()
        {
            self.streams[si].jittered = percent != 0;
        }
    }

    /// In a forked child: the consumer thread does not exist here and the rings are not mapped. Forget the
    /// thread (never join or detach it), close this process's copies of the event descriptors, and forget
    /// every started profile. The rings' bookkeeping lived in the consumer's memory and is simply abandoned.
    fn forget_after_fork(&mut self) {
        if let Some(c) = self.consumer.take() {
            let ConsumerHandle {
                tx, waker, thread, ..
            } = c;
            std::mem::forget(thread);
            drop(tx);
            drop(waker);
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
        let (tid_tx, tid_rx) = bounded(1);
        let thread = std::thread::Builder::new()
            .name("ntprofile-consumer".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                // Process-directed signals are for the program's threads, not for ours.
                let _ = nix::sys::signal::pthread_sigmask(
                    nix::sys::signal::SigmaskHow::SIG_BLOCK,
                    Some(&nix::sys::signal::SigSet::all()),
                    None,
                );
                let _ = tid_tx.send(gettid());
                consumer.run();
            })
            .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
        let tid = tid_rx.recv().map_err(|_| NtStatus::INTERNAL_ERROR)?;
        self.consumer = Some(ConsumerHandle {
            tx,
            waker,
            thread,
            tid,
        });
        Ok(())
    }

    /// Stop the consumer thread when no stream is left (so an idle process keeps no thread of ours).
    fn shutdown_if_idle(&mut self) {
        if !self.streams.is_empty() {
            return;
        }
        if let Some(c) = self.consumer.take() {
            let _ = c.tx.send(Msg::Exit);
            c.waker.wake();
            let _ = c.thread.join();
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
        let consumer_tid = self.consumer.as_ref().map(|c| c.tid).unwrap_or(-1);
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
                    jittered: false,
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
            let opened = open_cpus(&mut s.params, &s.key.target, &missing, consumer_tid);
            let (fds, rings) = match opened {
                Ok(v) => v,
                Err(e) => {
                    if self.streams[si].profiles == 0 && self.streams[si].fds.is_empty() {
                        self.streams.remove(si);
                    }
                    return Err(e);
                }
            };
            let s = &mut self.streams[si];
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
            self.send_jitter(si);
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
        self.started.push((core.id, sid));
        if let Some(status) = failed {
            self.started.pop();
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
    skip_tid: i32,
) -> Result<(Vec<OwnedFd>, Vec<RingIn>), NtStatus> {
    for attempt in 0..RESCAN_LIMIT {
        let mut pass = Pass::new(&mut *params, cpus, target);
        let scan = target.threads()?;
        for &tid in scan.iter().filter(|t| **t != skip_tid) {
            pass.observe(tid)?;
        }
        let fresh: Vec<i32> = target
            .threads()?
            .into_iter()
            .filter(|t| *t != skip_tid && scan.binary_search(t).is_err())
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
        Ok(())
    }

    fn finish(self) -> Result<(Vec<OwnedFd>, Vec<RingIn>), NtStatus> {
        if self.rings.len() != self.cpus.len() {
            // No thread could be observed at all (the target is gone).
            return Err(NtStatus::INVALID_HANDLE);
        }
        Ok((self.fds, self.rings))
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
