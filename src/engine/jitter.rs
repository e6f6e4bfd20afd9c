//! The jitter thread: redraws the sample period of jittered streams (an extension: periodic workloads cannot
//! alias with a sampler whose period keeps changing). It is also the helper of per-thread streams: it opens the
//! events of the threads the consumer saw created (fork records, passed on as [`TaskNote`]s) and closes those of
//! threads that exited, under the stream's lock.
//!
//! It is a thread of the library created by the consumer thread (which has no perf event, so this one inherits
//! none), and it is never observed. It takes no global lock: the engine hands it each jittered stream (a weak
//! reference) and the way to the consumer, and it works on one stream at a time under that stream's own lock.
//! A stream the engine removed is marked so under the same lock, and the jitter thread then forgets it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, never, select};

use super::consumer::{ConsumerLink, Msg};
use super::follow::{NOTES_CAPACITY, TaskNote};
use super::stream::{self, Stream};
use crate::perf::sys::Tid;
use crate::source::{self, IntervalUnit};

/// A request to the jitter thread.
pub(super) enum JitterMsg {
    /// The consumer to send re-opened rings to, and the library's own threads (never observed).
    Init { link: ConsumerLink, own: Vec<Tid> },
    /// A stream whose next draw is due (its `jitter_next`): watch it from now on.
    Watch(Weak<std::sync::Mutex<Stream>>),
    /// A started per-thread stream: follow its threads from now on (and scan its thread list once now).
    Follow(Weak<std::sync::Mutex<Stream>>),
}

/// How often the helper looks at the streams it follows when no note comes: a dropped note (a full queue) is
/// made up for by a scan of their thread lists within this time.
const FOLLOW_POLL: Duration = Duration::from_millis(50);
/// How often the helper scans the thread lists of the streams it follows anyway: a thread created without a fork
/// record read (a full ring dropped it) gets its events, and one gone without an exit record has them closed,
/// within this time. A scan reads the process's thread list: about a millisecond for 1,000 threads.
const SWEEP: Duration = Duration::from_millis(500);

/// The loop: wake on a request, on a note about a followed stream's threads, or when the next draw is due;
/// return when the request channel is dropped.
pub(super) fn run(
    requests: Receiver<JitterMsg>,
    notes: Receiver<TaskNote>,
    overflow: Arc<AtomicBool>,
) {
    let mut rng = seed();
    let mut wait = Duration::from_secs(1);
    let mut consumer: Option<(ConsumerLink, Vec<Tid>)> = None;
    let mut watched: Vec<Weak<std::sync::Mutex<Stream>>> = Vec::new();
    let mut followed: Vec<Weak<std::sync::Mutex<Stream>>> = Vec::new();
    let mut scan_now: Vec<Weak<std::sync::Mutex<Stream>>> = Vec::new();
    let mut batch: Vec<TaskNote> = Vec::new();
    let mut last_sweep = Instant::now();
    // Once the consumer is gone its notes end: stop waiting on them (a closed channel is always ready).
    let mut notes = Some(notes);
    let closed = never();
    loop {
        let timeout = if followed.is_empty() {
            wait
        } else {
            wait.min(FOLLOW_POLL)
        };
        select! {
            recv(requests) -> msg => match msg {
                Ok(JitterMsg::Init { link, own }) => consumer = Some((link, own)),
                Ok(JitterMsg::Watch(s)) => {
                    if !watched.iter().any(|w| w.ptr_eq(&s)) {
                        watched.push(s);
                    }
                }
                Ok(JitterMsg::Follow(s)) => {
                    if !followed.iter().any(|w| w.ptr_eq(&s)) {
                        followed.push(s.clone());
                    }
                    scan_now.push(s);
                }
                Err(_) => return,
            },
            recv(notes.as_ref().unwrap_or(&closed)) -> note => match note {
                Ok(n) => batch.push(n),
                Err(_) => notes = None,
            },
            default(timeout) => {}
        }
        if let Some(rx) = &notes {
            batch.extend(rx.try_iter().take(NOTES_CAPACITY));
        }
        let Some((link, own)) = &consumer else {
            continue;
        };
        // Relaxed: the flag only asks for a scan of the thread lists (the kernel's state).
        let mut scan_all = overflow.swap(false, Ordering::Relaxed);
        if !followed.is_empty() && last_sweep.elapsed() >= SWEEP {
            scan_all = true;
        }
        if scan_all {
            last_sweep = Instant::now();
        }
        if !batch.is_empty() || scan_all || !scan_now.is_empty() {
            followed.retain(|w| {
                let Some(shared) = w.upgrade() else {
                    return false;
                };
                let mut s = stream::lock(&shared);
                if s.removed {
                    return false;
                }
                let scan = scan_all || scan_now.iter().any(|n| n.ptr_eq(w));
                s.follow_threads(&batch, scan, link, own);
                true
            });
            batch.clear();
            scan_now.clear();
        }
        let now = Instant::now();
        let mut next = Duration::from_secs(1);
        watched.retain(|w| {
            let Some(shared) = w.upgrade() else {
                return false;
            };
            let mut s = stream::lock(&shared);
            if s.removed || s.jitter_next.is_none() {
                return false;
            }
            next = next.min(s.jitter_tick(now, &mut rng, link, own));
            true
        });
        wait = next;
    }
}

impl Stream {
    /// Act on the notes of `batch` that concern this per-thread stream: open the events of the threads created
    /// (of the target's process; with `scan`, of every thread of the target without one), then drain and close
    /// those of the threads that exited. A thread whose event cannot be opened (descriptors or locked memory
    /// short) is not sampled: what it runs is counted as lost through the stream's inherited counters.
    fn follow_threads(&mut self, batch: &[TaskNote], scan: bool, link: &ConsumerLink, own: &[Tid]) {
        let (sid, pid) = (self.id, self.key.target.pid() as u32);
        let born: Vec<Tid> = batch
            .iter()
            .filter_map(|n| match *n {
                TaskNote::Born {
                    stream,
                    pid: p,
                    tid,
                } if stream == sid && p == pid => Some(Tid(tid as i32)),
                _ => None,
            })
            .collect();
        if (scan || !born.is_empty())
            && let Ok(rings) = self.open_born(&born, own)
            && !rings.is_empty()
        {
            let _ = link.request(|ack| Msg::AddRings {
                stream: sid,
                rings,
                ack,
            });
        }
        let mut died: Vec<Tid> = batch
            .iter()
            .filter_map(|n| match *n {
                TaskNote::Died { stream, tid } if stream == sid => Some(Tid(tid as i32)),
                _ => None,
            })
            .collect();
        if scan {
            // Threads whose exit record never came: dropped by a full ring, or a thread whose event was opened
            // as it was exiting (after the kernel's last word on its events).
            died.extend(self.vanished());
        }
        let fds = self.events_of(&died);
        if !fds.is_empty()
            && link
                .request(|ack| Msg::DropRings {
                    stream: sid,
                    fds: fds.clone(),
                    ack,
                })
                .is_ok()
        {
            self.close_events(&died);
        }
    }
}

impl Stream {
    /// Draw a new period if the stream's window is over; returns the time to its next draw.
    ///
    /// A window lasts 16 periods on average (at least 10 ms, random in length): a new period restarts the
    /// running one (the kernel sets `period_left` to 0), wasting half a period on average, so windows are long
    /// and timers are sped up by half a period per window to make up for it. The sample *rate* is drawn
    /// uniformly in `[1 - j, 1 + j]` times the base rate, in antithetic pairs (a draw `1 + d` is followed by
    /// `1 - d`), so the mean rate is the interval's over every two windows, not only on average, while the
    /// phase still moves at random.
    fn jitter_tick(
        &mut self,
        now: Instant,
        rng: &mut u64,
        link: &ConsumerLink,
        own: &[Tid],
    ) -> Duration {
        let idle = Duration::from_secs(1);
        let Some(due) = self.jitter_next else {
            return idle;
        };
        let percent = source::jitter_percent(self.key.source);
        if percent == 0 || self.profiles == 0 {
            return idle;
        }
        if now < due {
            return due - now;
        }
        let base = self.params.period;
        let time_based = self.key.source.interval_unit() == IntervalUnit::Time100ns;
        let window = if time_based {
            Duration::from_nanos(base.saturating_mul(16)).max(Duration::from_millis(20))
        } else {
            Duration::from_millis(20)
        };
        let j = f64::from(percent) / 100.0;
        let d = match self.jitter_pair.take() {
            Some(d) => -d,
            None => {
                let d = j * (2.0 * next_unit(rng) - 1.0);
                self.jitter_pair = Some(d);
                d
            }
        };
        let u = 1.0 + d;
        let comp = if time_based {
            1.0 + base as f64 / (2.0 * window.as_nanos() as f64)
        } else {
            1.0
        };
        let period = ((base as f64) / (u * comp)).round().max(1.0) as u64;
        self.apply_period(period, link, own);
        // The window's length is random too (0.5 to 1.5 times): a redraw restarts the running period, and
        // redraws at a fixed spacing would restart it at a fixed phase of a periodic workload.
        let this_window = window.mul_f64(0.5 + next_unit(rng));
        self.jitter_next = Some(now + this_window);
        this_window
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9E37_79B9_7F4A_7C15);
    t | 1
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
