//! Waiting for a sampler's rings without holding the sampler: the epoll set over its events and an eventfd
//! that wakes a waiter, shared (`Arc`) between the sampler and its [`SamplerWaker`]s.
//!
//! The wait needs nothing the reading needs (no ring, no statistics), so a caller that shares a sampler between
//! threads behind a lock (the C API does) waits outside that lock: the other calls go on meanwhile, and closing
//! the sampler ends the wait at once.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use crate::perf::sys::{self, Epoll, Waker};

/// The epoll token of the eventfd (the events' tokens are their indices).
const WAKER_TOKEN: u64 = u64::MAX;
/// The bit of the tokens of the rings a per-thread sampler adds and removes as threads come and go (the rest of
/// the token is the descriptor): any wake-up of one (data or hang-up) is something to read.
const RING_TOKEN: u64 = 1 << 62;

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    /// A ring reached its watermark, or every target exited.
    Ready,
    /// The timeout passed.
    Timeout,
    /// [`SamplerWaker::wake`] cut it short.
    Woken,
    /// The sampler was closed (the C API's `NtClose`).
    Closed,
    /// A per-thread sampler's wait reached its cap (`WaitSet::with_cap`): the sampler looks whether a ring holds
    /// anything (a fork record wakes nobody), and waits on if not.
    Capped,
}

/// The events a sampler waits on, and what wakes a waiter.
pub(super) struct WaitSet {
    epoll: Epoll,
    waker: Waker,
    /// Every event descriptor, by token, then the pidfds of the target processes (a `cpu-filtered` sampler's:
    /// its events never hang up), all owned by the sampler, which outlives every wait on them.
    fds: Vec<RawFd>,
    /// How many of `fds` are events (the others are pidfds).
    events: usize,
    /// Per descriptor: it reported `EPOLLHUP` (and left the epoll set).
    hup: Vec<AtomicBool>,
    /// How many descriptors hung up.
    hung_up: AtomicUsize,
    /// The events follow tasks (a global sampler's per-CPU events never hang up).
    per_task: bool,
    /// The sampler was closed: every wait ends at once, now and later.
    closed: AtomicBool,
    /// A `SamplerWaker::wake` not yet seen by a wait.
    woken: AtomicBool,
    /// A ring became readable, seen by a poll that was not a wait's (`targets_exited`).
    ready: AtomicBool,
    /// A wait ends (`Capped`) after this long at most: a per-thread sampler's fork records, which wake nobody (a
    /// ring's watermark counts bytes), are read within it, and the new tasks' events opened.
    cap: Option<Duration>,
}

impl WaitSet {
    /// The epoll set over the events `fds` and the pidfds `exits` (each with its index as token, the pidfds
    /// after the events) and the eventfd. A pidfd that polls readable (its process exited) ends a wait as a
    /// hang-up does, and leaves the set.
    pub(super) fn new(fds: Vec<RawFd>, per_task: bool, exits: &[RawFd]) -> Result<WaitSet, Errno> {
        let epoll = Epoll::new()?;
        let waker = Waker::new()?;
        epoll.add(waker.fd_raw(), WAKER_TOKEN)?;
        let events = fds.len();
        let mut fds = fds;
        fds.extend_from_slice(exits);
        for (i, &fd) in fds.iter().enumerate() {
            epoll.add(fd, i as u64)?;
        }
        let hup = fds.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(WaitSet {
            epoll,
            waker,
            fds,
            events,
            hup,
            hung_up: AtomicUsize::new(0),
            per_task,
            closed: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            cap: None,
        })
    }

    /// Every wait ends after `cap` at most (`Capped`, unless it ended otherwise).
    pub(super) fn with_cap(self, cap: Duration) -> WaitSet {
        WaitSet {
            cap: Some(cap),
            ..self
        }
    }

    /// Watch the ring of a per-thread sampler's thread (edge-triggered: its hang-up wakes one wait, and the
    /// sampler then reads the thread's exit record and removes it).
    pub(super) fn add_ring(&self, fd: RawFd) -> Result<(), Errno> {
        self.epoll.add_edge(fd, RING_TOKEN | fd as u64)
    }

    /// Stop watching a ring added by [`add_ring`](Self::add_ring), before its descriptor closes.
    pub(super) fn remove_ring(&self, fd: RawFd) {
        self.epoll.remove(fd);
    }

    /// True when the events follow tasks and every one of them hung up.
    pub(super) fn all_hung_up(&self) -> bool {
        // Relaxed: a count, read to decide whether to wait; the flag swap in `poll` counts each descriptor once.
        self.per_task && self.hung_up.load(Ordering::Relaxed) >= self.events
    }

    /// One epoll wait of up to `timeout_ms`: takes hung-up descriptors out of the set. Returns (a ring became
    /// readable, a descriptor hung up, the eventfd is readable). A poll that is not a wait's (`waiting` false)
    /// passes a readable ring on to a wait running meanwhile (the kernel reports it to one poll only).
    pub(super) fn poll(&self, timeout_ms: i32, waiting: bool) -> (bool, bool, bool) {
        let mut events = [sys::EMPTY_EVENT; 32];
        let n = self.epoll.wait(&mut events, timeout_ms);
        let (mut ready, mut hung, mut woken) = (false, false, false);
        for ev in &events[..n] {
            if ev.u64 == WAKER_TOKEN {
                woken = true;
                continue;
            }
            if ev.u64 & RING_TOKEN != 0 {
                ready = true;
                continue;
            }
            let index = ev.u64 as usize;
            if ev.events & sys::EPOLLHUP != 0 || index >= self.events {
                if let (Some(flag), Some(&fd)) = (self.hup.get(index), self.fds.get(index))
                    && !flag.swap(true, Ordering::Relaxed)
                {
                    self.epoll.remove(fd);
                    if index < self.events {
                        // Relaxed: see `all_hung_up`.
                        self.hung_up.fetch_add(1, Ordering::Relaxed);
                    }
                    hung = true;
                }
            } else {
                ready = true;
            }
        }
        if !waiting && (ready || hung) {
            // Release: pairs with the Acquire swap in `wait`, which then returns Ready.
            self.ready.store(true, Ordering::Release);
            self.waker.wake();
        }
        (ready, hung, woken)
    }

    /// Wait until a ring is readable, every target exited, a wake-up, a close, or the timeout.
    pub(super) fn wait(&self, timeout: Duration) -> WaitEnd {
        let deadline = Instant::now().checked_add(timeout);
        let capped = self.cap.and_then(|c| Instant::now().checked_add(c));
        loop {
            // Acquire (each flag): pairs with the Release store of whoever set it, before its eventfd write.
            if self.closed.load(Ordering::Acquire) {
                return WaitEnd::Closed;
            }
            if self.woken.swap(false, Ordering::Acquire) {
                return WaitEnd::Woken;
            }
            if self.ready.swap(false, Ordering::Acquire) || self.all_hung_up() {
                return WaitEnd::Ready;
            }
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            let to_cap = capped.map_or(Duration::MAX, |c| {
                c.saturating_duration_since(Instant::now())
            });
            // Round up to a whole millisecond so that a short timeout still waits.
            let ms =
                i32::try_from(left.min(to_cap).as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX);
            let (ready, hung, woken) = self.poll(ms, true);
            if woken && !self.closed.load(Ordering::Acquire) {
                // A close leaves the eventfd readable, so that every waiter sees it; a wake-up is for one.
                self.waker.clear();
            }
            if ready || hung {
                return WaitEnd::Ready;
            }
            if !woken && (left.is_zero() || deadline.is_some_and(|d| Instant::now() >= d)) {
                return WaitEnd::Timeout;
            }
            if !woken && capped.is_some_and(|c| Instant::now() >= c) {
                return WaitEnd::Capped;
            }
        }
    }

    /// What a wait would return at once, without waiting: closed, woken, or a ring or hang-up seen meanwhile.
    fn pending_end(&self) -> Option<WaitEnd> {
        // Acquire (each flag): see `wait`.
        if self.closed.load(Ordering::Acquire) {
            Some(WaitEnd::Closed)
        } else if self.woken.swap(false, Ordering::Acquire) {
            Some(WaitEnd::Woken)
        } else if self.ready.swap(false, Ordering::Acquire) || self.all_hung_up() {
            Some(WaitEnd::Ready)
        } else {
            None
        }
    }

    fn wake(&self) {
        // Release: see `wait`.
        self.woken.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn close(&self) {
        // Release: see `wait`.
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// Wait on several sets at once, as [`WaitSet::wait`] waits on one: until one of them would have ended its
/// wait. Their epoll descriptors are polled together; a set that polls readable is then polled (without
/// waiting) as its own wait would, so that hang-ups are taken and wake-ups cleared the same way.
pub(super) fn wait_any(sets: &[&WaitSet], timeout: Duration) -> WaitEnd {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    if let [one] = sets {
        return one.wait(timeout);
    }
    let deadline = Instant::now().checked_add(timeout);
    let capped = sets
        .iter()
        .filter_map(|s| s.cap)
        .min()
        .and_then(|c| Instant::now().checked_add(c));
    loop {
        if let Some(end) = sets.iter().find_map(|s| s.pending_end()) {
            return end;
        }
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        let to_cap = capped.map_or(Duration::MAX, |c| {
            c.saturating_duration_since(Instant::now())
        });
        let ms = i32::try_from(left.min(to_cap).as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX);
        let mut fds: Vec<PollFd<'_>> = sets
            .iter()
            .map(|s| PollFd::new(s.epoll.as_fd(), PollFlags::POLLIN))
            .collect();
        let n = poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        )
        .unwrap_or(0);
        let readable: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        let (mut ready, mut woken) = (false, false);
        for (set, _) in sets.iter().zip(readable).filter(|(_, r)| n > 0 && *r) {
            let (r, hung, w) = set.poll(0, true);
            if w && !set.closed.load(Ordering::Acquire) {
                set.waker.clear();
            }
            // A perf event reports a readable ring to one poll only: the poll of the epoll descriptor may
            // have taken it, and the epoll wait then sees nothing. Readable with nothing but the eventfd is
            // a wake-up; readable otherwise is a ring.
            ready |= r || hung || !w;
            woken |= w;
        }
        if ready {
            return WaitEnd::Ready;
        }
        if !woken && (left.is_zero() || deadline.is_some_and(|d| Instant::now() >= d)) {
            return WaitEnd::Timeout;
        }
        if !woken && capped.is_some_and(|c| Instant::now() >= c) {
            return WaitEnd::Capped;
        }
    }
}

/// Cuts short a [`Sampler::wait`](super::Sampler::wait) from another thread (or a signal-free shutdown path):
/// the wait running now, or else the next one, returns `Ok(false)` at once. Made by
/// [`Sampler::waker`](super::Sampler::waker); cheap to clone, `Send` and `Sync`, and harmless once the sampler is
/// dropped.
#[derive(Clone)]
pub struct SamplerWaker(pub(super) Arc<WaitSet>);

impl std::fmt::Debug for SamplerWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerWaker").finish_non_exhaustive()
    }
}

impl SamplerWaker {
    /// End the wait running now (or the next one) early: it returns `Ok(false)`, as on a timeout.
    pub fn wake(&self) {
        self.0.wake();
    }

    /// Close: every wait, now and later, ends at once with [`WaitEnd::Closed`] (the C API's `NtClose`).
    pub(crate) fn close(&self) {
        self.0.close();
    }

    /// True once [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: see `WaitSet::wait`.
        self.0.closed.load(Ordering::Acquire)
    }

    /// Wait as [`Sampler::wait`](super::Sampler::wait) does once its rings were found below their watermark,
    /// without the sampler: the caller prepared it with `Sampler::prepare_wait`.
    pub(crate) fn wait(&self, timeout: Duration) -> WaitEnd {
        self.0.wait(timeout)
    }
}
