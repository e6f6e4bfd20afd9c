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
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, Sender};

use super::counters::CounterBuf;
use super::index::RangeIndex;
use crate::affinity::CpuSet;
use crate::buckets::BucketLayout;
use crate::perf::ring::{Record, Ring};
use crate::perf::sys::{EMPTY_EVENT, EPOLLHUP, Epoll, Waker};
use crate::profile::{ProfileCore, ProfileStats};

/// How long the consumer sleeps without a wake-up before it drains anyway (keeps live counts fresh and
/// catches rings whose poll readiness was already reported).
pub(crate) const DRAIN_INTERVAL_MS: i32 = 20;

/// The epoll token of the wake-up eventfd.
const WAKER_TOKEN: u64 = u64::MAX;

/// One mapped ring handed to the consumer.
pub(crate) struct RingIn {
    pub cpu: usize,
    pub ring: Ring,
    /// The descriptor that owns the ring, for epoll (owned by the API side until `RemoveStream` is acked).
    pub fd: RawFd,
}

/// A request to the consumer. Every request that carries an ack is answered after it took effect.
pub(crate) enum Msg {
    /// Rings of a stream (new, or grown by more CPUs).
    AddRings {
        stream: u64,
        rings: Vec<RingIn>,
        ack: Sender<()>,
    },
    /// Start counting for a profile on a stream, on these CPUs.
    Publish {
        stream: u64,
        core: Arc<ProfileCore>,
        cpus: CpuSet,
        ack: Sender<()>,
    },
    /// Drain the stream's rings (so every sample taken before the request counts), then stop counting for the
    /// profile and forget its buffer.
    Unpublish {
        stream: u64,
        profile: u64,
        ack: Sender<()>,
    },
    /// Drain the stream's rings and unmap them; the API side closes the descriptors after the ack.
    RemoveStream { stream: u64, ack: Sender<()> },
    /// Jitter (or stop jittering) a stream's period.
    Jitter {
        stream: u64,
        jitter: JitterSpec,
        ack: Sender<()>,
    },
    /// Drain everything now (live reads that want fresh counts).
    Sync { ack: Sender<()> },
    /// Leave the loop.
    Exit,
}

/// How to jitter a stream's period.
pub(crate) struct JitterSpec {
    /// Every event descriptor of the stream (kept open by the API side until the stream's removal is acked).
    pub fds: Vec<RawFd>,
    /// The source's period (ns for timers, events otherwise).
    pub base: u64,
    /// ± percent of the sample *rate*; 0 restores the base period.
    pub percent: u32,
    /// The period is time (ns): the window compensation applies.
    pub time_based: bool,
}

/// A stream whose period the consumer re-draws.
struct JitterState {
    spec: JitterSpec,
    /// Time between two draws.
    window: Duration,
    next: Instant,
}

impl JitterState {
    fn new(spec: JitterSpec) -> JitterState {
        // Long windows (many periods each) keep the rate loss of a re-draw small: changing the period restarts
        // the current period (the kernel sets `period_left` to 0), wasting on average half a period per window.
        let window = if spec.time_based {
            Duration::from_nanos(spec.base.saturating_mul(16)).max(Duration::from_millis(20))
        } else {
            Duration::from_millis(20)
        };
        JitterState {
            spec,
            window,
            next: Instant::now(),
        }
    }

    /// Draw a new period if the window is over: the sample *rate* is uniform in `[1 - j, 1 + j]` times the base
    /// rate, so the mean rate is the base rate; timers are sped up by half a period per window to make up for
    /// the restart.
    fn tick(&mut self, now: Instant, rng: &mut u64) {
        if now < self.next {
            return;
        }
        self.next = now + self.window;
        let j = f64::from(self.spec.percent) / 100.0;
        let u = 1.0 + j * (2.0 * next_unit(rng) - 1.0);
        let comp = if self.spec.time_based {
            1.0 + self.spec.base as f64 / (2.0 * self.window.as_nanos() as f64)
        } else {
            1.0
        };
        let period = ((self.spec.base as f64) / (u * comp)).round().max(1.0) as u64;
        for &fd in &self.spec.fds {
            let _ = crate::perf::event::set_period_raw(fd, period);
        }
    }
}

/// xorshift64*: a uniform draw in [0, 1).
fn next_unit(state: &mut u64) -> f64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

/// A started profile as the consumer sees it.
struct Active {
    core: Arc<ProfileCore>,
    layout: BucketLayout,
    buf: CounterBuf,
    cpus: CpuSet,
    /// Not yet published to `core.stats`: samples matched, samples seen on its CPUs, lost, throttled.
    pending: ProfileStats,
    seen: u64,
}

struct CRing {
    cpu: usize,
    ring: Ring,
    fd: RawFd,
}

struct CStream {
    id: u64,
    rings: Vec<CRing>,
    active: Vec<Active>,
    index: RangeIndex,
    jitter: Option<JitterState>,
}

impl CStream {
    fn rebuild_index(&mut self) {
        let ranges: Vec<(u64, u64)> = self
            .active
            .iter()
            .map(|a| (a.layout.base, a.layout.end()))
            .collect();
        self.index = RangeIndex::build(&ranges);
    }

    /// Drain every ring of the stream to empty and publish the statistics. The hot path.
    fn drain(&mut self) {
        let CStream {
            rings,
            active,
            index,
            ..
        } = self;
        for r in rings.iter_mut() {
            let cpu = r.cpu;
            let (mut samples, mut lost, mut throttled) = (0u64, 0u64, 0u64);
            r.ring.drain(|rec| match rec {
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
                a.core.stats.add(&a.pending);
                a.pending = ProfileStats::default();
                a.seen = 0;
            }
        }
    }
}

/// The consumer's state and loop.
pub(crate) struct Consumer {
    rx: Receiver<Msg>,
    waker: Arc<Waker>,
    epoll: Epoll,
    streams: Vec<CStream>,
    rng: u64,
}

impl Consumer {
    pub(crate) fn new(rx: Receiver<Msg>, waker: Arc<Waker>) -> Result<Consumer, i32> {
        let epoll = Epoll::new()?;
        epoll.add(waker.fd_raw(), WAKER_TOKEN)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        Ok(Consumer {
            rx,
            waker,
            epoll,
            streams: Vec::new(),
            rng: seed | 1,
        })
    }

    /// The loop: wait, drain every ring, then answer requests. Returns on `Exit` or when every sender is gone.
    pub(crate) fn run(mut self) {
        let mut events = [EMPTY_EVENT; 64];
        loop {
            let n = self.epoll.wait(&mut events, DRAIN_INTERVAL_MS);
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
            let now = Instant::now();
            for s in self.streams.iter_mut() {
                s.drain();
                if let Some(j) = s.jitter.as_mut() {
                    j.tick(now, &mut self.rng);
                }
            }
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

    fn stream(&mut self, id: u64) -> Option<&mut CStream> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::AddRings { stream, rings, ack } => {
                if self.stream(stream).is_none() {
                    self.streams.push(CStream {
                        id: stream,
                        rings: Vec::new(),
                        active: Vec::new(),
                        index: RangeIndex::default(),
                        jitter: None,
                    });
                }
                for r in rings {
                    // A failed registration only loses the early wake-up; the timed drain still reads the ring.
                    let _ = self.epoll.add(r.fd, r.fd as u64);
                    if let Some(s) = self.stream(stream) {
                        s.rings.push(CRing {
                            cpu: r.cpu,
                            ring: r.ring,
                            fd: r.fd,
                        });
                    }
                }
                let _ = ack.send(());
            }
            Msg::Publish {
                stream,
                core,
                cpus,
                ack,
            } => {
                if let Some(s) = self.stream(stream) {
                    s.drain(); // samples taken before the start do not belong to the new profile
                    let layout = core.layout;
                    let buf = core.storage.buf();
                    s.active.push(Active {
                        core,
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
                    s.active.retain(|a| a.core.id != profile);
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
            Msg::Jitter {
                stream,
                jitter,
                ack,
            } => {
                if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    if jitter.percent == 0 {
                        for &fd in &jitter.fds {
                            let _ = crate::perf::event::set_period_raw(fd, jitter.base);
                        }
                        s.jitter = None;
                    } else {
                        let mut state = JitterState::new(jitter);
                        state.tick(Instant::now(), &mut self.rng);
                        s.jitter = Some(state);
                    }
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
