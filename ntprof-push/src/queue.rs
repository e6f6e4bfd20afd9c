//! The push queue: windows are handed to a background thread through a bounded queue, so that the recorder
//! never waits for a backend. A full queue drops its oldest window (counted); a failed push is retried with
//! exponential backoff while the backend may still take it.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Client, PushError, Target, Window};

/// How the queue holds and retries windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Windows waiting at most (the one being pushed not counted); at least 1.
    pub capacity: usize,
    /// Attempts per window before it is given up (at least 1).
    pub attempts: u32,
    /// Wait before the first retry; doubled after each failure.
    pub first_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// Time limit of one push, connecting included.
    pub timeout: Duration,
}

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig {
            capacity: 16,
            attempts: 5,
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
        }
    }
}

/// What became of the windows submitted so far. `submitted == sent + dropped + failed + pending`, where pending
/// are those queued or being pushed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Windows handed to [`Pusher::submit`].
    pub submitted: u64,
    /// Windows the backend accepted.
    pub sent: u64,
    /// Windows dropped unsent: the oldest of a full queue, and those still waiting when [`Pusher::finish`]
    /// ran out of time.
    pub dropped: u64,
    /// Windows given up: refused for good, or not accepted after every attempt.
    pub failed: u64,
    /// Attempts repeated after a failure.
    pub retries: u64,
    /// The last failure, as the backend or the transport put it.
    pub last_error: Option<String>,
}

struct State {
    queue: VecDeque<Window>,
    stats: Stats,
    in_flight: bool,
    /// No more windows will come: push what is queued, then stop.
    closing: bool,
    /// Stop now: what is queued or being retried is dropped.
    abort: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic on the push thread cannot leave the state half-updated (each update is a few assignments),
        // so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Pushes windows to one target from a background thread.
pub struct Pusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    capacity: usize,
}

impl Pusher {
    /// Starts the push thread for `target`.
    pub fn start(target: Target, config: QueueConfig) -> Pusher {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                stats: Stats::default(),
                in_flight: false,
                closing: false,
                abort: false,
            }),
            wake: Condvar::new(),
        });
        let capacity = config.capacity.max(1);
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ntprof-push".into())
            .spawn(move || run(&worker, Client::new(target, config.timeout), &config))
            .expect("cannot start the push thread");
        Pusher {
            shared,
            thread: Some(thread),
            capacity,
        }
    }

    /// Queues a window and returns at once; when the queue is full its oldest window is dropped and counted.
    pub fn submit(&self, window: Window) {
        let mut s = self.shared.lock();
        s.stats.submitted += 1;
        if s.closing {
            s.stats.dropped += 1;
            return;
        }
        if s.queue.len() >= self.capacity {
            s.queue.pop_front();
            s.stats.dropped += 1;
        }
        s.queue.push_back(window);
        drop(s);
        self.shared.wake.notify_all();
    }

    /// The counts so far.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// Pushes what is queued for at most `grace`, then drops the rest (counted) and stops the thread. A push
    /// under way when the grace runs out ends within the push timeout.
    pub fn finish(mut self, grace: Duration) -> Stats {
        self.stop(grace)
    }

    fn stop(&mut self, grace: Duration) -> Stats {
        let deadline = Instant::now() + grace;
        let mut s = self.shared.lock();
        s.closing = true;
        self.shared.wake.notify_all();
        while !s.queue.is_empty() || s.in_flight {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self
                .shared
                .wake
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        s.abort = true;
        let left = s.queue.len() as u64;
        s.queue.clear();
        s.stats.dropped += left;
        drop(s);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.lock().stats.clone()
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop(Duration::ZERO);
        }
    }
}

/// The push thread: takes the oldest window, pushes it until accepted, refused for good, out of attempts, or
/// aborted.
fn run(shared: &Shared, mut client: Client, config: &QueueConfig) {
    loop {
        let window = {
            let mut s = shared.lock();
            loop {
                if s.abort {
                    return;
                }
                if let Some(w) = s.queue.pop_front() {
                    s.in_flight = true;
                    break w;
                }
                if s.closing {
                    return;
                }
                s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
            }
        };
        let mut backoff = config.first_backoff;
        let mut attempt = 1;
        loop {
            let result = client.push(&window);
            let mut s = shared.lock();
            match result {
                Ok(()) => {
                    s.stats.sent += 1;
                    break;
                }
                Err(e) if e.is_retryable() && attempt < config.attempts.max(1) && !s.abort => {
                    s.stats.retries += 1;
                    s.stats.last_error = Some(e.to_string());
                    let until = Instant::now() + backoff;
                    while !s.abort && Instant::now() < until {
                        let left = until.saturating_duration_since(Instant::now());
                        s = shared
                            .wake
                            .wait_timeout(s, left)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    if s.abort {
                        s.stats.dropped += 1;
                        break;
                    }
                    backoff = (backoff * 2).min(config.max_backoff);
                    attempt += 1;
                }
                Err(e) => {
                    note_failure(&mut s, &e);
                    break;
                }
            }
        }
        let mut s = shared.lock();
        s.in_flight = false;
        drop(s);
        shared.wake.notify_all();
    }
}

fn note_failure(s: &mut State, e: &PushError) {
    s.stats.failed += 1;
    s.stats.last_error = Some(e.to_string());
}
