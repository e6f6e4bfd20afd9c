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

/// The shortest sleep between timed drains while samples flow: at very high rates the consumer drains at least
/// this often, so that a ring keeps most of its space free for a moment when the consumer is not scheduled.
pub(crate) const DRAIN_INTERVAL_MS: i32 = 20;
/// The longest sleep between timed drains while samples flow: counts in a caller's buffer are at most this late
/// (live statistics and `Sync` drain first, so they are never late). Between the two bounds the sleep is tuned to
/// the rate: long enough that a drain reads about `DRAIN_TARGET_DIVISOR`-th of the fullest ring. Each wake-up
/// costs tens of microseconds on a VM; at 10 kHz a 20 ms cadence spent about 300 ns per sample on wake-ups alone,
/// 100 ms spends about a fifth of that.
pub(crate) const BUSY_DRAIN_INTERVAL_MS: i32 = 100;
/// The longest sleep when passes find nothing (an idle process with started profiles): the timeout doubles
/// from `BUSY_DRAIN_INTERVAL_MS` up to this while rings stay empty, and drops back at the first record. An idle
/// profile should not cost 50 wake-ups a second.
pub(crate) const IDLE_DRAIN_INTERVAL_MS: i32 = 200;
/// A timed drain aims to find the fullest ring at most this fraction full (1/8), well under the wake-up watermark
/// (1/4 of the ring, set at open), so that the watermark only wakes the consumer when the rate jumps.
const DRAIN_TARGET_DIVISOR: u64 = 8;

/// How full the fullest ring of a pass was: bytes read from it, and its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fill {
    pub bytes: u64,
    pub ring_bytes: u64,
}

impl Fill {
    /// Keep the fuller of two (compared as fractions of their rings).
    fn max(self, other: Fill) -> Fill {
        if u128::from(other.bytes) * u128::from(self.ring_bytes.max(1))
            > u128::from(self.bytes) * u128::from(other.ring_bytes.max(1))
        {
            other
        } else {
            self
        }
    }
}

/// The busy sleep (ms) after a pass whose fullest ring had `fill` after `elapsed_ms` since the previous pass:
/// the time that ring takes to fill to 1/`DRAIN_TARGET_DIVISOR` at the observed rate, within
/// [`DRAIN_INTERVAL_MS`, `BUSY_DRAIN_INTERVAL_MS`].
pub(crate) fn busy_timeout(fill: Fill, elapsed_ms: u64) -> i32 {
    let target = fill.ring_bytes / DRAIN_TARGET_DIVISOR;
    let ms = elapsed_ms
        .max(1)
        .saturating_mul(target)
        .checked_div(fill.bytes)
        .unwrap_or(u64::MAX);
    ms.clamp(DRAIN_INTERVAL_MS as u64, BUSY_DRAIN_INTERVAL_MS as u64) as i32
}

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
    /// The fullest ring seen by the drains since the consumer last took it (`take_fill`).
    fill: Fill,
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
            fill,
            ..
        } = self;
        let mut records = 0;
        for r in rings.iter_mut() {
            let (bytes, ring_bytes) = r.ring.fill();
            *fill = fill.max(Fill { bytes, ring_bytes });
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

/// A stream drained outside the consumer thread, by the same code: the engine of the unstable replay entry
/// point (`engine::replay`), which feeds recorded ring contents through decode → match → increment.
pub(crate) struct ReplayStream(StreamDispatch);

impl ReplayStream {
    /// A stream of `rings` (CPU, ring) with `profiles` started on it (each counting on the given CPUs).
    pub(crate) fn new(
        rings: Vec<(usize, Ring)>,
        profiles: &[(Arc<Counts>, CpuSet)],
    ) -> ReplayStream {
        let mut s = StreamDispatch {
            id: StreamId(0),
            rings: rings
                .into_iter()
                .map(|(cpu, ring)| CpuRing { cpu, ring, fd: -1 })
                .collect(),
            active: Vec::new(),
            index: RangeIndex::default(),
            stale: false,
            fill: Fill::default(),
        };
        for (counts, cpus) in profiles {
            s.active.push(Active {
                counts: counts.clone(),
                layout: counts.layout,
                buf: counts.storage.buf(),
                cpus: cpus.clone(),
                pending: ProfileStats::default(),
                seen: 0,
            });
        }
        s.rebuild_index();
        ReplayStream(s)
    }

    /// Drain every ring, as the consumer's pass does; returns the records read.
    pub(crate) fn drain(&mut self) -> u64 {
        self.0.drain()
    }

    /// The stream's rings, to rewind them.
    pub(crate) fn rings_mut(&mut self) -> impl Iterator<Item = &mut Ring> {
        self.0.rings.iter_mut().map(|r| &mut r.ring)
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
        let mut timeout = BUSY_DRAIN_INTERVAL_MS;
        let mut last_pass = std::time::Instant::now();
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
            let mut fill = Fill::default();
            for s in self.streams.iter_mut() {
                records += s.drain();
                fill = fill.max(std::mem::take(&mut s.fill));
            }
            let now = std::time::Instant::now();
            let elapsed_ms = now.duration_since(last_pass).as_millis() as u64;
            last_pass = now;
            timeout = if records > 0 {
                busy_timeout(fill, elapsed_ms)
            } else {
                (timeout * 2).clamp(BUSY_DRAIN_INTERVAL_MS, IDLE_DRAIN_INTERVAL_MS)
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
                        fill: Fill::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 256 * 1024;

    #[test]
    fn busy_timeout_is_tuned_to_the_rate_within_its_bounds() {
        // 10 kHz of 16-byte samples on one CPU: 100 ms fill 16 KB, far under 1/8 of a 256 KB ring: the longest
        // busy sleep.
        let f = Fill {
            bytes: 16_000,
            ring_bytes: RING,
        };
        assert_eq!(busy_timeout(f, 100), BUSY_DRAIN_INTERVAL_MS);
        // 1/8 of the ring in 20 ms (about 100 kHz): aim for 20 ms.
        let f = Fill {
            bytes: RING / 8,
            ring_bytes: RING,
        };
        assert_eq!(busy_timeout(f, 20), 20);
        // 1/8 of the ring in 60 ms: 60 ms.
        assert_eq!(busy_timeout(f, 60), 60);
        // Faster than the floor allows, or a one-page ring: the floor (the watermark wakes earlier).
        let f = Fill {
            bytes: 4096,
            ring_bytes: 4096,
        };
        assert_eq!(busy_timeout(f, 5), DRAIN_INTERVAL_MS);
        // Nothing read: the longest busy sleep.
        assert_eq!(busy_timeout(Fill::default(), 0), BUSY_DRAIN_INTERVAL_MS);
    }

    #[test]
    fn the_fuller_ring_is_kept_as_a_fraction() {
        let small_full = Fill {
            bytes: 2048,
            ring_bytes: 4096,
        };
        let big_less = Fill {
            bytes: 8192,
            ring_bytes: RING,
        };
        assert_eq!(small_full.max(big_less), small_full);
        assert_eq!(big_less.max(small_full), small_full);
        assert_eq!(Fill::default().max(big_less), big_less);
    }
}
