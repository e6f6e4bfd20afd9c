//! The consumer thread: waits on the rings and a wake-up eventfd, decodes samples, walks the started profiles
//! of each stream and increments their counters.
//!
//! The started profiles of a stream are owned by this thread. API calls publish changes (a stream's rings, a
//! profile started or stopped) through a lock-free queue and wait for an acknowledgement, so the thread never
//! takes a lock that an API call holds, and a stopped profile's buffer is never touched after the ack: the
//! ack is the barrier of `NtStopProfile`. The hot path (decode → match → increment) allocates nothing; only the
//! control messages (rare) allocate.

use std::os::fd::RawFd;
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender, bounded};

use super::counters::{CounterBuf, Counts, ProfileId, ProfileStats, StreamId};
use super::index::RangeIndex;
use crate::affinity::CpuSet;
use crate::buckets::BucketLayout;
use crate::perf::ring::{Record, Ring};
use crate::perf::sys::{EMPTY_EVENT, EPOLLHUP, Epoll, Waker};
use crate::status::NtStatus;

/// The way to the consumer thread: its request queue and its wake-up eventfd. Held by the engine and cloned into
/// the jitter thread (which sends the rings of re-opened streams).
#[derive(Clone)]
pub(crate) struct ConsumerLink {
    tx: Sender<Msg>,
    waker: Arc<Waker>,
}

impl ConsumerLink {
    /// The link over request queue `tx` and eventfd `waker`.
    pub(crate) fn new(tx: Sender<Msg>, waker: Arc<Waker>) -> ConsumerLink {
        ConsumerLink { tx, waker }
    }

    /// Send a request to the consumer and wait for its ack.
    pub(crate) fn request(&self, make: impl FnOnce(Sender<()>) -> Msg) -> Result<(), NtStatus> {
        let (ack, done) = bounded(1);
        self.tx
            .send(make(ack))
            .map_err(|_| NtStatus::INTERNAL_ERROR)?;
        self.waker.wake();
        // A consumer that died drops the ack sender: recv fails rather than hanging.
        done.recv().map_err(|_| NtStatus::INTERNAL_ERROR)
    }

    /// Ask the consumer to leave its loop (no ack: the caller joins the thread).
    pub(crate) fn exit(&self) {
        let _ = self.tx.send(Msg::Exit);
        self.waker.wake();
    }
}

/// How long the consumer sleeps without a wake-up before it drains anyway while samples flow: counts in a
/// caller's buffer are at most this late (the ring's watermark wakes it earlier under load).
pub(crate) const DRAIN_INTERVAL_MS: i32 = 20;
/// The longest sleep when passes find nothing (an idle process with started profiles): the timeout doubles
/// from `DRAIN_INTERVAL_MS` up to this while rings stay empty, and drops back at the first record. Each wake-up
/// costs tens of microseconds on a VM; an idle profile should not cost 50 of them a second.
pub(crate) const IDLE_DRAIN_INTERVAL_MS: i32 = 200;

/// The epoll token of the wake-up eventfd.
const WAKER_TOKEN: u64 = u64::MAX;

/// One CPU's mapped ring of a stream, handed to the consumer, which reads and finally unmaps it.
pub(crate) struct CpuRing {
    pub cpu: usize,
    pub ring: Ring,
    /// The descriptor that owns the ring, for epoll (owned by the API side until `RemoveStream` is acked).
    pub fd: RawFd,
}

/// A request to the consumer. Every request that carries an ack is answered after it took effect.
pub(crate) enum Msg {
    /// Rings of a stream (new, or grown by more CPUs).
    AddRings {
        stream: StreamId,
        rings: Vec<CpuRing>,
        ack: Sender<()>,
    },
    /// Drain and drop every ring of the stream whose owning descriptor is not in `keep` (the rings of events
    /// that were just replaced); the API side closes those descriptors after the ack.
    RetireRings {
        stream: StreamId,
        keep: Vec<RawFd>,
        ack: Sender<()>,
    },
    /// Start counting for a profile on a stream, on these CPUs.
    Publish {
        stream: StreamId,
        counts: Arc<Counts>,
        cpus: CpuSet,
        ack: Sender<()>,
    },
    /// Drain the stream's rings (so every sample taken before the request counts), then stop counting for the
    /// profile and forget its buffer.
    Unpublish {
        stream: StreamId,
        profile: ProfileId,
        ack: Sender<()>,
    },
    /// Drain the stream's rings and unmap them; the API side closes the descriptors after the ack.
    RemoveStream { stream: StreamId, ack: Sender<()> },
    /// Drain everything now (live reads that want fresh counts).
    Sync { ack: Sender<()> },
    /// Leave the loop.
    Exit,
}

/// A started profile as the consumer sees it.
struct Active {
    counts: Arc<Counts>,
    layout: BucketLayout,
    buf: CounterBuf,
    cpus: CpuSet,
    /// Not yet published to `counts.stats`: samples matched, samples seen on its CPUs, lost, throttled.
    pending: ProfileStats,
    seen: u64,
}

/// The consumer's side of a stream: its rings, and the started profiles its samples are dispatched to.
struct StreamDispatch {
    id: StreamId,
    rings: Vec<CpuRing>,
    active: Vec<Active>,
    index: RangeIndex,
    /// The started profiles changed since the index was built: rebuild it before matching the next sample.
    stale: bool,
}

impl StreamDispatch {
    /// The set of started profiles changed. The index is rebuilt lazily, before the next sample is matched:
    /// a burst of starts or stops with no sample in between costs one rebuild, not one per call.
    fn rebuild_index(&mut self) {
        self.stale = true;
    }

    /// Drain every ring of the stream to empty and publish the statistics; returns the records read. The hot
    /// path.
    fn drain(&mut self) -> u64 {
        if self.stale {
            if !self.rings.iter().any(|r| r.ring.has_data()) {
                // Nothing to match: keep the rebuild for later. Never drain with a stale index (its slots
                // would not match `active`).
                return 0;
            }
            let ranges: Vec<(u64, u64)> = self
                .active
                .iter()
                .map(|a| (a.layout.base, a.layout.end()))
                .collect();
            self.index = RangeIndex::build(&ranges);
            self.stale = false;
        }
        let StreamDispatch {
            rings,
            active,
            index,
            ..
        } = self;
        let mut records = 0;
        for r in rings.iter_mut() {
            let cpu = r.cpu;
            let (mut samples, mut lost, mut throttled) = (0u64, 0u64, 0u64);
            records += r.ring.drain(|rec| match rec {
                Record::Sample { ip, .. } => {
                    samples += 1;
                    for &slot in index.lookup(ip) {
                        let a = &mut active[slot as usize];
                        if a.cpus.contains(cpu)
                            && let Some(i) = a.layout.index(ip)
                        {
                            a.buf.increment(i);
                            a.pending.counted += 1;
                        }
                    }
                }
                Record::Lost(n) => lost += n,
                Record::Throttle => throttled += 1,
                Record::Unthrottle | Record::Other => {}
            });
            if samples | lost | throttled != 0 {
                for a in active.iter_mut().filter(|a| a.cpus.contains(cpu)) {
                    a.seen += samples;
                    a.pending.lost += lost;
                    a.pending.throttled += throttled;
                }
            }
        }
        for a in active.iter_mut() {
            if a.seen | a.pending.lost | a.pending.throttled != 0 {
                a.pending.outside = a.seen - a.pending.counted;
                a.counts.stats.add(&a.pending);
                a.pending = ProfileStats::default();
                a.seen = 0;
            }
        }
        records
    }
}

/// The consumer's state and loop.
pub(crate) struct Consumer {
    rx: Receiver<Msg>,
    waker: Arc<Waker>,
    epoll: Epoll,
    streams: Vec<StreamDispatch>,
}

impl Consumer {
    pub(crate) fn new(rx: Receiver<Msg>, waker: Arc<Waker>) -> Result<Consumer, nix::errno::Errno> {
        let epoll = Epoll::new()?;
        epoll.add(waker.fd_raw(), WAKER_TOKEN)?;
        Ok(Consumer {
            rx,
            waker,
            epoll,
            streams: Vec::new(),
        })
    }

    /// The loop: wait, drain every ring, then answer requests. Returns on `Exit` or when every sender is gone.
    pub(crate) fn run(mut self) {
        let mut events = [EMPTY_EVENT; 64];
        let mut timeout = DRAIN_INTERVAL_MS;
        loop {
            let n = self.epoll.wait(&mut events, timeout);
            for ev in &events[..n] {
                let (token, flags) = (ev.u64, ev.events);
                if token == WAKER_TOKEN {
                    self.waker.clear();
                } else if flags & EPOLLHUP != 0 {
                    // The ring's owning thread is gone: its poll stays readable forever. Stop watching it; the
                    // timed drain still empties the ring (its data stays readable).
                    self.epoll.remove(token as RawFd);
                }
            }
            let mut records = 0;
            for s in self.streams.iter_mut() {
                records += s.drain();
            }
            timeout = if records > 0 {
                DRAIN_INTERVAL_MS
            } else {
                (timeout * 2).min(IDLE_DRAIN_INTERVAL_MS)
            };
            loop {
                match self.rx.try_recv() {
                    Ok(Msg::Exit) => return,
                    Ok(msg) => self.handle(msg),
                    Err(crossbeam::channel::TryRecvError::Empty) => break,
                    Err(crossbeam::channel::TryRecvError::Disconnected) => return,
                }
            }
        }
    }

    fn stream(&mut self, id: StreamId) -> Option<&mut StreamDispatch> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::AddRings { stream, rings, ack } => {
                if self.stream(stream).is_none() {
                    self.streams.push(StreamDispatch {
                        id: stream,
                        rings: Vec::new(),
                        active: Vec::new(),
                        index: RangeIndex::default(),
                        stale: false,
                    });
                }
                for r in rings {
                    // A failed registration only loses the early wake-up; the timed drain still reads the ring.
                    let _ = self.epoll.add(r.fd, r.fd as u64);
                    if let Some(s) = self.stream(stream) {
                        s.rings.push(r);
                    }
                }
                let _ = ack.send(());
            }
            Msg::RetireRings { stream, keep, ack } => {
                if let Some(pos) = self.streams.iter().position(|s| s.id == stream) {
                    let s = &mut self.streams[pos];
                    s.drain(); // the old events are disabled: this is their last word
                    let (kept, retired): (Vec<CpuRing>, Vec<CpuRing>) =
                        s.rings.drain(..).partition(|r| keep.contains(&r.fd));
                    s.rings = kept;
                    for r in &retired {
                        self.epoll.remove(r.fd);
                    }
                    drop(retired); // unmaps before the API side closes the descriptors
                }
                let _ = ack.send(());
            }
            Msg::Publish {
                stream,
                counts,
                cpus,
                ack,
            } => {
                if let Some(s) = self.stream(stream) {
                    s.drain(); // samples taken before the start do not belong to the new profile
                    let layout = counts.layout;
                    let buf = counts.storage.buf();
                    s.active.push(Active {
                        counts,
                        layout,
                        buf,
                        cpus,
                        pending: ProfileStats::default(),
                        seen: 0,
                    });
                    s.rebuild_index();
                }
                let _ = ack.send(());
            }
            Msg::Unpublish {
                stream,
                profile,
                ack,
            } => {
                if let Some(s) = self.stream(stream) {
                    s.drain();
                    s.active.retain(|a| a.counts.id != profile);
                    s.rebuild_index();
                }
                let _ = ack.send(());
            }
            Msg::RemoveStream { stream, ack } => {
                if let Some(pos) = self.streams.iter().position(|s| s.id == stream) {
                    let mut s = self.streams.swap_remove(pos);
                    s.drain();
                    for r in &s.rings {
                        self.epoll.remove(r.fd);
                    }
                    drop(s); // unmaps the rings before the API side closes the descriptors
                }
                let _ = ack.send(());
            }
            Msg::Sync { ack } => {
                for s in self.streams.iter_mut() {
                    s.drain();
                }
                let _ = ack.send(());
            }
            Msg::Exit => {}
        }
    }
}
