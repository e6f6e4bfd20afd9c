//! The engine: the entry points that start and stop profiles and change intervals, over streams of perf events
//! and the consumer thread. It turns the `perf` layer's errno into an `NtStatus`, once, here.
//!
//! Where each part lives:
//! - this file: the entry points (`start`, `stop` — the barrier —, `sync`, `set_interval`, `set_jitter`) and
//!   the engine's table of streams and started profiles;
//! - `stream`: streams (growing to more CPUs, period changes and re-opening);
//! - `open`: opening a stream's events (stable passes over the threads, ring mapping);
//! - `threads`: the consumer and jitter thread lifecycles;
//! - `consumer`: the consumer thread's loop (requests, the stop barrier's ack) and the request link to it;
//! - `dispatch`: a stream's drain, the hot path (decode → match → increment, statistics);
//! - `cadence`: how long the consumer sleeps between timed drains;
//! - `jitter`: the helper thread (period draws; the events of threads a per-thread stream sees created);
//! - `follow`: what the consumer passes to the helper thread about a per-thread stream's threads, and what
//!   those threads ran before their events were opened;
//! - `mode`: the layout of a stream's events (per thread, or per thread and processor) chosen from the budgets;
//! - `counters`: what is counted into (`Counts`, counter storage, statistics);
//! - `index`: the range index that finds the profiles a sample belongs to.
//!
//! API calls serialize on one mutex here (the control path); the consumer thread never takes it, and the
//! jitter thread takes only the lock of the stream it works on.

mod cadence;
pub(crate) mod consumer;
pub(crate) mod counters;
mod dispatch;
mod follow;
pub(crate) mod index;
mod jitter;
pub(crate) mod mode;
mod open;
#[doc(hidden)]
pub mod replay;
pub(crate) mod stream;
mod threads;

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;

use crate::affinity::{Affinity, CpuSet, online_cpus};
use crate::perf::event;
use crate::source::{self, ProfileSource};
use crate::status::NtStatus;
use consumer::Msg;
pub(crate) use counters::{Counts, ProfileId, StreamId};
pub(crate) use stream::StreamKey;
use stream::{SharedStream, Stream};
use threads::Threads;

/// Started profiles allowed per online processor (NT's limit).
pub const STARTED_PER_CPU: usize = 8192;

/// The engine's tables, under its lock.
pub(crate) struct Engine {
    threads: Option<Threads>,
    /// Live [`ThreadsPin`]s: the threads stay while one exists, even with no stream.
    pins: usize,
    streams: Vec<SharedStream>,
    /// The stream of every started profile.
    started: BTreeMap<ProfileId, StreamId>,
    next_stream: u64,
}

static ENGINE: Mutex<Engine> = Mutex::new(Engine {
    threads: None,
    pins: 0,
    streams: Vec::new(),
    started: BTreeMap::new(),
    next_stream: 1,
});

/// Lock the engine.
pub(crate) fn lock() -> MutexGuard<'static, Engine> {
    // A panic while holding the lock leaves the tables consistent at every await point; keep going.
    ENGINE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps the library's threads running while it lives (see [`pin_threads`]).
#[must_use]
pub(crate) struct ThreadsPin(());

impl Drop for ThreadsPin {
    fn drop(&mut self) {
        let mut eng = lock();
        eng.pins = eng.pins.saturating_sub(1);
        eng.shutdown_if_idle();
    }
}

/// Start the library's threads now if they do not run, and keep them running until the pin is dropped (a stream
/// that closes meanwhile does not stop them); returns the pin and the threads' ids.
///
/// Why: a sampler of the calling process follows the threads created after it (`inherit`). Threads the engine
/// started later, from a caller's thread that carries the sampler's events, would inherit them and be sampled.
/// Started before the sampler's events open (and skipped by them), and kept while the sampler lives, they never
/// are. While pinned with no stream they sleep without a timer.
///
/// # Errors
/// Those of starting the threads: `STATUS_INSUFFICIENT_RESOURCES`, `STATUS_INTERNAL_ERROR`.
pub(crate) fn pin_threads() -> Result<(ThreadsPin, Vec<crate::perf::sys::Tid>), NtStatus> {
    let mut eng = lock();
    if eng.threads.is_none() {
        // The same invariant as in `start`: no stream exists while there are no threads.
        debug_assert!(eng.streams.is_empty());
        eng.threads = Some(Threads::spawn()?);
    }
    eng.pins += 1;
    let own = eng
        .threads
        .as_ref()
        .map(Threads::own_tids)
        .unwrap_or_default();
    Ok((ThreadsPin(()), own))
}

/// The started-profile limit now: 8192 × online processors.
pub fn started_limit() -> usize {
    STARTED_PER_CPU * online_cpus().len()
}

/// True when the profile is started.
pub(crate) fn is_started(profile: ProfileId) -> bool {
    lock().started.contains_key(&profile)
}

/// The perf events behind started profile `profile` (`None` when it is not started, or its process has
/// exited and holds no event).
pub(crate) fn usage(profile: ProfileId) -> Option<mode::EventUsage> {
    let eng = lock();
    let sid = *eng.started.get(&profile)?;
    let shared = eng.find(sid)?;
    let s = stream::lock(&shared);
    Some(mode::EventUsage {
        mode: s.mode?,
        descriptors: s.fds.len(),
        rings: s.rings,
        ring_bytes: s.ring_bytes,
        threads: s.tids.len(),
    })
}

/// Number of started profiles in this process.
pub fn started_count() -> usize {
    lock().started.len()
}

/// `NtStartProfile`'s work: open or grow the stream `key`, publish `counts` to the consumer on the processors
/// of `affinity`, enable the events.
pub(crate) fn start(
    counts: &Arc<Counts>,
    key: StreamKey,
    affinity: &Affinity,
) -> Result<(), NtStatus> {
    let mut eng = lock();
    if eng.started.contains_key(&counts.id) {
        return Err(NtStatus::PROFILING_NOT_STOPPED);
    }
    if eng.started.len() >= started_limit() {
        return Err(NtStatus::PROFILING_AT_LIMIT);
    }
    let cpus = affinity.effective(&online_cpus());
    if eng.threads.is_none() {
        // Invariant: the threads are created only while no stream exists, so they never inherit an event.
        debug_assert!(eng.streams.is_empty());
        eng.threads = Some(Threads::spawn()?);
    }
    let result = eng.start_on(counts, key, cpus);
    eng.shutdown_if_idle();
    result
}

/// `NtStopProfile`'s work, the barrier: disable (if it was the stream's last profile), drain every ring of the
/// stream, unpublish, and return only when the consumer can no longer touch the buffer.
pub(crate) fn stop(profile: ProfileId) -> Result<(), NtStatus> {
    let mut eng = lock();
    let stream = eng
        .started
        .remove(&profile)
        .ok_or(NtStatus::PROFILING_NOT_STARTED)?;
    let result = eng.unpublish(stream, profile);
    eng.shutdown_if_idle();
    result
}

/// Ask the consumer to drain every ring now, so that live reads see every sample taken before the call.
pub(crate) fn sync() -> Result<(), NtStatus> {
    let eng = lock();
    match &eng.threads {
        None => Ok(()),
        Some(t) => t.link.request(|ack| Msg::Sync { ack }),
    }
}

/// `NtSetIntervalProfile`'s work: store the clamped interval and re-program every running stream of the source
/// at once (`PERF_EVENT_IOC_PERIOD` reaches inherited children too). Returns the effective interval.
pub(crate) fn set_interval(source: ProfileSource, interval: u32) -> u32 {
    let eng = lock();
    let effective = source::store_interval(source, interval);
    let period = source.period_for(effective);
    let Some(threads) = &eng.threads else {
        return effective; // no stream runs
    };
    let own = threads.own_tids();
    for shared in &eng.streams {
        let mut s = stream::lock(shared);
        if s.key.source != source || s.params.period == period {
            continue;
        }
        s.params.period = period;
        if s.jitter_next.is_some() {
            // The jitter thread owns the period of a jittered stream: it re-draws around the new base now.
            s.jitter_next = Some(std::time::Instant::now());
            threads.watch_jitter(shared);
        } else {
            s.apply_period(period, &threads.link, &own);
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
    let eng = lock();
    source::store_jitter(source, percent);
    if let Some(threads) = &eng.threads {
        for shared in &eng.streams {
            let mut s = stream::lock(shared);
            if s.key.source == source {
                schedule_jitter(threads, shared, &mut s);
            }
        }
    }
    Ok(())
}

/// The perf period streams of `source` use now (for tests and the listing).
pub fn stream_period(source: ProfileSource) -> Option<u64> {
    lock()
        .streams
        .iter()
        .map(|s| stream::lock(s))
        .find(|s| s.key.source == source)
        .map(|s| s.params.period)
}

/// Bring a stream in line with its source's jitter setting: a jittered source gets a draw now; a source whose
/// jitter was turned off gets its base period back on every event.
fn schedule_jitter(threads: &Threads, shared: &SharedStream, s: &mut Stream) {
    if source::jitter_percent(s.key.source) > 0 {
        s.jitter_next = Some(std::time::Instant::now());
        threads.watch_jitter(shared);
    } else if s.jitter_next.take().is_some() {
        let base = s.params.period;
        s.apply_period(base, &threads.link, &threads.own_tids());
    }
}

impl Engine {
    /// In a forked child: the consumer and jitter threads do not exist here and the rings are not mapped.
    /// Forget the threads (never join or detach them), close this process's copies of the event descriptors,
    /// and forget every started profile. The rings' bookkeeping lived in the consumer's memory and is simply
    /// abandoned.
    pub(crate) fn forget_after_fork(&mut self) {
        if let Some(t) = self.threads.take() {
            t.forget();
        }
        self.streams.clear();
        self.started.clear();
        // The child's samplers are dead; their pins are forgotten, never dropped.
        self.pins = 0;
    }

    /// Stop the threads when no stream and no pin is left (so an idle process keeps no thread of ours).
    fn shutdown_if_idle(&mut self) {
        if self.streams.is_empty()
            && self.pins == 0
            && let Some(t) = self.threads.take()
        {
            t.shutdown();
        }
    }

    fn request(
        &self,
        make: impl FnOnce(crossbeam::channel::Sender<()>) -> Msg,
    ) -> Result<(), NtStatus> {
        let t = self.threads.as_ref().ok_or(NtStatus::INTERNAL_ERROR)?;
        t.link.request(make)
    }

    fn find(&self, sid: StreamId) -> Option<SharedStream> {
        self.streams
            .iter()
            .find(|s| stream::lock(s).id == sid)
            .cloned()
    }

    /// Take stream `sid` out of the table (marked removed under its lock, so the jitter thread leaves it).
    fn remove(&mut self, sid: StreamId) {
        self.streams.retain(|s| {
            let mut g = stream::lock(s);
            if g.id == sid {
                g.removed = true;
                false
            } else {
                true
            }
        });
    }

    fn start_on(
        &mut self,
        counts: &Arc<Counts>,
        key: StreamKey,
        cpus: CpuSet,
    ) -> Result<(), NtStatus> {
        let own = self
            .threads
            .as_ref()
            .ok_or(NtStatus::INTERNAL_ERROR)?
            .own_tids();
        let existing = self
            .streams
            .iter()
            .find(|s| stream::lock(s).key == key)
            .cloned();
        let shared = match existing {
            Some(s) => s,
            None => {
                let id = StreamId(self.next_stream);
                self.next_stream += 1;
                let s = Arc::new(Mutex::new(Stream::new(id, key)?));
                self.streams.push(s.clone());
                s
            }
        };
        let mut s = stream::lock(&shared);
        let sid = s.id;
        let missing: CpuSet = CpuSet::from_cpus(cpus.iter().filter(|c| !s.cpus.contains(*c)));
        let first_new = s.fds.len();
        if !missing.is_empty() {
            let rings = match s.open_more(&missing, &own) {
                Ok(rings) => rings,
                Err(e) => {
                    if s.profiles == 0 && s.fds.is_empty() {
                        drop(s);
                        self.remove(sid);
                    }
                    return Err(e);
                }
            };
            if let Err(e) = self.request(|ack| Msg::AddRings {
                stream: sid,
                rings,
                ack,
            }) {
                drop(s);
                self.drop_stream_if_unused(sid);
                return Err(e);
            }
            if let Some(f) = &s.follow
                && first_new == 0
                && let Err(e) = self.request(|ack| Msg::Follow {
                    stream: sid,
                    counters: f.counters.clone(),
                    period: f.period.clone(),
                    ack,
                })
            {
                drop(s);
                self.drop_stream_if_unused(sid);
                return Err(e);
            }
            if let Some(threads) = &self.threads {
                schedule_jitter(threads, &shared, &mut s);
            }
        }
        if let Err(e) = self.request(|ack| Msg::Publish {
            stream: sid,
            counts: counts.clone(),
            cpus,
            ack,
        }) {
            drop(s);
            self.drop_stream_if_unused(sid);
            return Err(e);
        }
        // Enable only after the profile is published, so that its first samples count.
        let mut failed = None;
        for fd in &s.fds[first_new..] {
            if let Err(errno) = event::enable(fd.as_fd())
                && errno != Errno::ESRCH
            {
                failed = Some(NtStatus::from(errno));
            }
        }
        s.profiles += 1;
        let follow = s.follow.is_some() && first_new == 0 && s.profiles == 1;
        drop(s);
        if follow && let Some(threads) = &self.threads {
            // Threads created since the start's last scan of the thread list, before the events were enabled,
            // wrote no fork record: the helper looks for them at once, and follows the stream from now on.
            threads.follow(&shared);
        }
        self.started.insert(counts.id, sid);
        if let Some(status) = failed {
            self.started.remove(&counts.id);
            let _ = self.unpublish(sid, counts.id);
            return Err(status);
        }
        Ok(())
    }

    fn drop_stream_if_unused(&mut self, sid: StreamId) {
        let Some(shared) = self.find(sid) else { return };
        if stream::lock(&shared).profiles == 0 {
            let _ = self.request(|ack| Msg::RemoveStream { stream: sid, ack });
            self.remove(sid);
        }
    }

    fn unpublish(&mut self, sid: StreamId, profile: ProfileId) -> Result<(), NtStatus> {
        let shared = self.find(sid).ok_or(NtStatus::INTERNAL_ERROR)?;
        let mut s = stream::lock(&shared);
        let last = s.profiles == 1;
        if last {
            for fd in &s.fds {
                let _ = event::disable(fd.as_fd());
            }
        }
        let result = self.request(|ack| Msg::Unpublish {
            stream: sid,
            profile,
            ack,
        });
        s.profiles -= 1;
        if last {
            let removed = self.request(|ack| Msg::RemoveStream { stream: sid, ack });
            s.removed = true;
            drop(s);
            // Dropping the stream closes its descriptors; the consumer has unmapped the rings.
            self.remove(sid);
            return result.and(removed);
        }
        result
    }
}
