//! Streams: the perf events of one (source, target, kernel-or-not), grown to more CPUs, and their period
//! changed in place or by re-opening. How the events are opened (stable passes over the threads, ring mapping)
//! is in `open`.
//!
//! A stream is shared (`Arc<Mutex<Stream>>`) between the engine, which creates, grows and removes it under its
//! own lock, and the jitter thread, which re-draws its period under the stream's lock only. Lock order: the
//! engine's lock, then a stream's; the jitter thread takes no other lock, and the consumer thread none.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::consumer::{ConsumerLink, Msg};
use super::counters::StreamId;
use super::dispatch::CpuRing;
use super::mode::EventMode;
use super::open::{Opened, RING_PAGES, ThreadEvents, open_cpus, open_later, watermark_for};
use crate::affinity::CpuSet;
use crate::perf::event::{self, EventParams};
use crate::perf::sys::Tid;
use crate::source::ProfileSource;
use crate::status::NtStatus;
use crate::target::Target;

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

/// The perf events of one (source, target, kernel-or-not), in one of the layouts of `mode` (for a process, by
/// default one event per (thread × CPU) with `inherit` + `inherit_thread`, all events of a CPU writing into one
/// ring through `PERF_EVENT_IOC_SET_OUTPUT`; in the per-thread layout, each thread's own events, those of threads
/// created later opened by the helper thread as they appear). It opens when its first profile starts, grows when a
/// started profile needs more CPUs, and closes when its last profile stops. Its period is the source's interval,
/// shared, as in NT.
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
    /// How its events are laid out (`None` until some are opened).
    pub(super) mode: Option<EventMode>,
    /// Bytes of its rings' mappings.
    pub(super) ring_bytes: usize,
    /// Its rings.
    pub(super) rings: usize,
    /// A per-thread stream: its threads and their sampling events, for the threads created later.
    pub(super) follow: Option<Follow>,
}

/// What a per-thread stream keeps to open the events of threads created after its start and close those of
/// threads that exited.
pub(crate) struct Follow {
    /// Every thread with events of its own, and those events.
    pub(super) known: BTreeMap<Tid, ThreadEvents>,
    /// The inherited counting events of the threads of the start.
    pub(super) counters: Vec<RawFd>,
    /// Data pages of a new thread's ring: the size of the start's, smaller as threads are added so that the
    /// rings stay within `ring_target` bytes (and one-page rings beyond it).
    pub(super) pages: usize,
    pub(super) ring_target: u64,
    /// The stream's base period, which the consumer divides the counters' excess by (shared with it).
    pub(super) period: Arc<AtomicU64>,
}

impl Stream {
    /// A stream with no event yet, with the event parameters of `key` at the source's interval now.
    ///
    /// # Errors
    /// `STATUS_NOT_SUPPORTED` for a source without a perf event.
    pub(super) fn new(id: StreamId, key: StreamKey) -> Result<Stream, NtStatus> {
        let source = key.source;
        let spec = source.perf_event().ok_or(NtStatus::NOT_SUPPORTED)?;
        // An event sampled in the kernel (context switches, migrations, tracepoints) gives no sample at all with
        // `exclude_kernel`: a user-space stream takes them in the kernel and counts each at the user address
        // where the thread entered the kernel (its user ip). A stream that reaches the kernel keeps the kernel
        // address. Creating such a profile needs the privilege to sample the kernel (`Support`).
        let user_entry = !key.kernel && spec.sampled_in_kernel() && event::USER_IP_MASK != 0;
        let params = EventParams {
            spec,
            period: source.period_for(crate::source::effective_interval(source)),
            exclude_kernel: !key.kernel && !user_entry,
            user_ip: user_entry,
            read_lost: false,
            sample_tid: false,
            sample_cpu: false,
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
            mode: None,
            ring_bytes: 0,
            rings: 0,
            follow: None,
        })
    }

    /// Open the stream's events on `missing` CPUs (not yet covered) for the threads alive now, skipping the
    /// library's own threads `own`; returns the new rings for the consumer.
    pub(super) fn open_more(
        &mut self,
        missing: &CpuSet,
        own: &[Tid],
    ) -> Result<Vec<CpuRing>, NtStatus> {
        // Per-thread events run on every processor: a per-thread stream covers them all from its first start.
        let missing = if self.mode == Some(EventMode::PerThread) {
            return Ok(Vec::new());
        } else {
            missing.clone()
        };
        let Opened {
            fds,
            rings,
            tids,
            mode,
            ring_bytes,
            counters,
            thread_fds,
            pages,
        } = open_cpus(&mut self.params, &self.key.target, &missing, own, self.mode)?;
        if mode == Some(EventMode::PerThread) {
            self.follow = Some(Follow {
                known: thread_fds.into_iter().collect(),
                counters,
                pages,
                ring_target: super::mode::per_thread_ring_target(&super::mode::Budget::now()),
                period: Arc::new(AtomicU64::new(self.params.period)),
            });
        }
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
        self.ring_bytes += ring_bytes;
        self.rings += rings.len();
        if mode == Some(EventMode::PerThread) {
            self.cpus = crate::affinity::online_cpus();
        } else {
            self.cpus = self.cpus.union(&missing);
        }
        self.mode = self.mode.or(mode);
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
        if let Some(f) = &self.follow {
            // Relaxed: a value read at the consumer's next settling drain, which orders nothing else.
            f.period.store(self.params.period, Ordering::Relaxed);
        }
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
        // Per-processor events (global or filtered) have no inherited copies, nor has a per-thread stream (each
        // of its threads has its own sampling event).
        if self.key.target.is_global()
            || matches!(
                self.mode,
                Some(EventMode::CpuFiltered | EventMode::PerThread)
            )
        {
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
        let opened = open_cpus(&mut self.params, &self.key.target, &cpus, own, self.mode);
        self.params.period = base;
        let Opened {
            fds,
            rings,
            tids,
            ring_bytes,
            ..
        } = opened?;
        self.ring_bytes = ring_bytes;
        self.rings = rings.len();
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

    /// Open the sampling events of threads of this per-thread stream created after its start: `born` (from
    /// fork records) and any other thread of the target without one (less `own`, the library's threads); they
    /// are enabled at once when the stream is started. Returns the new rings for the consumer (none for another
    /// layout, or a stream the engine removed).
    pub(super) fn open_born(
        &mut self,
        born: &[Tid],
        own: &[Tid],
    ) -> Result<Vec<CpuRing>, NtStatus> {
        let Some(follow) = &self.follow else {
            return Ok(Vec::new());
        };
        if self.removed || self.key.target.has_exited() {
            return Ok(Vec::new());
        }
        let opened = open_later(
            &mut self.params,
            &self.key.target,
            born,
            &follow.known,
            own,
            follow.pages,
            (follow.ring_target, self.ring_bytes as u64),
        )?;
        if self.profiles > 0 {
            for fd in &opened.fds {
                let _ = event::enable(fd.as_fd());
            }
        }
        if let Some(f) = &mut self.follow {
            f.known.extend(opened.thread_fds);
        }
        self.fds.extend(opened.fds);
        self.ring_bytes += opened.ring_bytes;
        self.rings += opened.rings.len();
        Ok(opened.rings)
    }

    /// The sampling events of the threads `died` (exited) of this per-thread stream, for the consumer to drain
    /// and unmap their rings before [`close_events`](Self::close_events) closes them.
    pub(super) fn events_of(&self, died: &[Tid]) -> Vec<RawFd> {
        let Some(f) = &self.follow else {
            return Vec::new();
        };
        died.iter()
            .filter_map(|t| f.known.get(t).map(|e| e.sampling))
            .collect()
    }

    /// The threads with events of their own that are no longer in the target's thread list.
    pub(super) fn vanished(&self) -> Vec<Tid> {
        let (Some(f), Ok(now)) = (&self.follow, self.key.target.threads()) else {
            return Vec::new();
        };
        f.known
            .keys()
            .filter(|t| now.binary_search(t).is_err())
            .copied()
            .collect()
    }

    /// Close the events of the exited threads `died` (their rings already unmapped by the consumer).
    pub(super) fn close_events(&mut self, died: &[Tid]) {
        let Some(f) = &mut self.follow else {
            return;
        };
        let gone: Vec<ThreadEvents> = died.iter().filter_map(|t| f.known.remove(t)).collect();
        let fds: Vec<RawFd> = gone.iter().flat_map(|e| [e.sampling, e.records]).collect();
        self.fds.retain(|fd| !fds.contains(&fd.as_raw_fd()));
        self.rings = self.rings.saturating_sub(gone.len());
        let bytes: usize = gone.iter().map(|e| e.ring_bytes).sum();
        self.ring_bytes = self.ring_bytes.saturating_sub(bytes);
    }
}
