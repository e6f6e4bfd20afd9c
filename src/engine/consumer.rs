//! The consumer thread: its loop (wait on the rings and a wake-up eventfd, drain every stream, answer requests)
//! and the request link to it. What a drain does is in `dispatch`; how long the loop sleeps, in `cadence`.
//!
//! The started profiles of a stream are owned by this thread. API calls publish changes (a stream's rings, a
//! profile started or stopped) through a lock-free queue and wait for an acknowledgement, so the thread never
//! takes a lock that an API call holds, and a stopped profile's buffer is never touched after the ack: the
//! ack is the barrier of `NtStopProfile`. The hot path (decode → match → increment) allocates nothing; only the
//! control messages (rare) allocate.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crossbeam::channel::{Receiver, Sender, bounded};

use super::cadence::{
    BUSY_DRAIN_INTERVAL_MS, FOLLOW_DRAIN_INTERVAL_MS, Fill, IDLE_DRAIN_INTERVAL_MS, busy_timeout,
};
use super::counters::{Counts, ProfileId, StreamId};
use super::dispatch::{Active, CpuRing, StreamDispatch};
use super::follow::{Gap, Notes};
use crate::affinity::CpuSet;
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

/// The epoll token of the wake-up eventfd.
const WAKER_TOKEN: u64 = u64::MAX;

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
    /// A per-thread stream's rings are read: pass its fork and exit records to the helper thread, and count what
    /// its threads ran before their events were opened from the stream's inherited `counters` (with the stream's
    /// base `period`).
    Follow {
        stream: StreamId,
        counters: Vec<RawFd>,
        period: Arc<AtomicU64>,
        ack: Sender<()>,
    },
    /// Drain, then unmap, the rings of these descriptors (sampling events of exited threads); the helper closes
    /// the descriptors after the ack.
    DropRings {
        stream: StreamId,
        fds: Vec<RawFd>,
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

/// The consumer's state and loop.
pub(crate) struct Consumer {
    rx: Receiver<Msg>,
    waker: Arc<Waker>,
    epoll: Epoll,
    streams: Vec<StreamDispatch>,
    /// The way to the helper thread for per-thread streams' fork and exit records.
    notes: Notes,
}

impl Consumer {
    pub(crate) fn new(
        rx: Receiver<Msg>,
        waker: Arc<Waker>,
        notes: Notes,
    ) -> Result<Consumer, nix::errno::Errno> {
        let epoll = Epoll::new()?;
        epoll.add(waker.fd_raw(), WAKER_TOKEN)?;
        Ok(Consumer {
            rx,
            waker,
            epoll,
            streams: Vec::new(),
            notes,
        })
    }

    /// The loop: wait, drain every ring, then answer requests. Returns on `Exit` or when every sender is gone.
    pub(crate) fn run(mut self) {
        let mut events = [EMPTY_EVENT; 64];
        let mut timeout = BUSY_DRAIN_INTERVAL_MS;
        let mut last_pass = std::time::Instant::now();
        loop {
            // With no stream (the threads kept for a sampler, `engine::pin_threads`) there is nothing to drain on
            // a timer: sleep until a request wakes us.
            let n = self.epoll.wait(
                &mut events,
                if self.streams.is_empty() { -1 } else { timeout },
            );
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
            if self.streams.iter().any(|s| s.notes.is_some()) {
                timeout = timeout.min(FOLLOW_DRAIN_INTERVAL_MS);
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

    fn stream(&mut self, id: StreamId) -> Option<&mut StreamDispatch> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    /// Carry out a request, then acknowledge it (the ack is sent only once the request took effect).
    fn handle(&mut self, msg: Msg) {
        let ack = match msg {
            Msg::AddRings { stream, rings, ack } => {
                self.add_rings(stream, rings);
                ack
            }
            Msg::RetireRings { stream, keep, ack } => {
                self.retire_rings(stream, &keep);
                ack
            }
            Msg::Follow {
                stream,
                counters,
                period,
                ack,
            } => {
                let notes = self.notes.clone();
                if let Some(s) = self.stream(stream) {
                    s.notes = Some(notes);
                    s.gap = Some(Gap::new(counters, period));
                }
                ack
            }
            Msg::DropRings { stream, fds, ack } => {
                self.drop_rings(stream, &fds);
                ack
            }
            Msg::Publish {
                stream,
                counts,
                cpus,
                ack,
            } => {
                self.publish(stream, counts, cpus);
                ack
            }
            Msg::Unpublish {
                stream,
                profile,
                ack,
            } => {
                self.unpublish(stream, profile);
                ack
            }
            Msg::RemoveStream { stream, ack } => {
                self.remove_stream(stream);
                ack
            }
            Msg::Sync { ack } => {
                for s in self.streams.iter_mut() {
                    s.drain_exact();
                }
                ack
            }
            Msg::Exit => return,
        };
        let _ = ack.send(());
    }

    /// Watch and read the rings of a stream (new, or grown by more CPUs).
    fn add_rings(&mut self, stream: StreamId, rings: Vec<CpuRing>) {
        if self.stream(stream).is_none() {
            self.streams.push(StreamDispatch::new(stream));
        }
        if rings.iter().any(|r| r.cpu.is_none())
            && let Some(s) = self.stream(stream)
        {
            let top = crate::affinity::online_cpus().iter().max().unwrap_or(0);
            s.size_cpu_counts(top + 1);
        }
        for r in rings {
            // A failed registration only loses the early wake-up; the timed drain still reads the ring.
            let _ = self.epoll.add(r.fd, r.fd as u64);
            if let Some(s) = self.stream(stream) {
                s.rings.push(r);
            }
        }
    }

    /// Drain, then unmap, the rings of a stream whose descriptor is not in `keep`.
    fn retire_rings(&mut self, stream: StreamId, keep: &[RawFd]) {
        if let Some(pos) = self.streams.iter().position(|s| s.id == stream) {
            let s = &mut self.streams[pos];
            s.drain_exact(); // the old events are disabled: this is their last word
            let (kept, retired): (Vec<CpuRing>, Vec<CpuRing>) =
                s.rings.drain(..).partition(|r| keep.contains(&r.fd));
            s.rings = kept;
            for r in &retired {
                self.epoll.remove(r.fd);
            }
            drop(retired); // unmaps before the API side closes the descriptors
        }
    }

    /// Drain the rings of `fds` (reading their events' lost counts), keep their events' final counts, and unmap
    /// them.
    fn drop_rings(&mut self, stream: StreamId, fds: &[RawFd]) {
        let Some(pos) = self.streams.iter().position(|s| s.id == stream) else {
            return;
        };
        let s = &mut self.streams[pos];
        for r in s.rings.iter_mut().filter(|r| fds.contains(&r.fd)) {
            r.settle = true;
        }
        s.drain();
        let (gone, kept): (Vec<CpuRing>, Vec<CpuRing>) = s.rings.drain(..).partition(|r| r.settle);
        s.rings = kept;
        for r in &gone {
            if let Some(g) = s.gap.as_mut() {
                g.retire(r.sampled());
            }
            self.epoll.remove(r.fd);
        }
        drop(gone); // unmaps before the helper closes the descriptors
    }

    /// Start counting for a profile on a stream.
    fn publish(&mut self, stream: StreamId, counts: Arc<Counts>, cpus: CpuSet) {
        if let Some(s) = self.stream(stream) {
            s.drain_exact(); // samples taken before the start do not belong to the new profile
            s.active.push(Active::new(counts, cpus));
            s.rebuild_index();
        }
    }

    /// Drain a stream, then stop counting for a profile (its buffer is not touched after this).
    fn unpublish(&mut self, stream: StreamId, profile: ProfileId) {
        if let Some(s) = self.stream(stream) {
            s.drain_exact();
            s.active.retain(|a| a.counts.id != profile);
            s.rebuild_index();
        }
    }

    /// Drain a stream, then unmap its rings and forget it.
    fn remove_stream(&mut self, stream: StreamId) {
        if let Some(pos) = self.streams.iter().position(|s| s.id == stream) {
            let mut s = self.streams.swap_remove(pos);
            s.drain_exact();
            for r in &s.rings {
                self.epoll.remove(r.fd);
            }
            drop(s); // unmaps the rings before the API side closes the descriptors
        }
    }
}
