//! The jitter thread: redraws the sample period of jittered streams (an extension: periodic workloads cannot
//! alias with a sampler whose period keeps changing).
//!
//! It is a thread of the library created by the consumer thread (which has no perf event, so this one inherits
//! none), and it is never observed. It works under the engine lock like an API call, but only takes it with
//! `try_lock`, so that an API call holding the lock while it stops the threads never waits for it.

use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError};

use super::{ENGINE, Engine};
use crate::source::{self, IntervalUnit};

/// The loop: wake on a request or when the next draw is due; return when the channel is dropped.
pub(super) fn run(wake: Receiver<()>) {
    let mut rng = seed();
    let mut wait = Duration::from_secs(1);
    loop {
        match wake.recv_timeout(wait) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        wait = match ENGINE.try_lock() {
            Ok(mut eng) => eng.jitter_tick(Instant::now(), &mut rng),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                p.into_inner().jitter_tick(Instant::now(), &mut rng)
            }
            // Busy with an API call: come back shortly.
            Err(std::sync::TryLockError::WouldBlock) => Duration::from_millis(2),
        };
    }
}

impl Engine {
    /// Draw a new period for every jittered stream whose window is over; returns the time to the next draw.
    ///
    /// A window lasts 16 periods on average (at least 10 ms, random in length): a new period restarts the
    /// running one (the kernel sets
    /// `period_left` to 0), wasting half a period on average, so windows are long and timers are sped up by
    /// half a period per window to make up for it. The sample *rate* is drawn uniformly in `[1 - j, 1 + j]`
    /// times the base rate, in antithetic pairs (a draw `1 + d` is followed by `1 - d`), so the mean rate is the
    /// interval's over every two windows, not only on average, while the phase still moves at random.
    pub(super) fn jitter_tick(&mut self, now: Instant, rng: &mut u64) -> Duration {
        let mut next = Duration::from_secs(1);
        for si in 0..self.streams.len() {
            let s = &self.streams[si];
            let Some(due) = s.jitter_next else { continue };
            let percent = source::jitter_percent(s.key.source);
            if percent == 0 || s.profiles == 0 {
                continue;
            }
            let base = s.params.period;
            let time_based = s.key.source.interval_unit() == IntervalUnit::Time100ns;
            let window = if time_based {
                Duration::from_nanos(base.saturating_mul(16)).max(Duration::from_millis(20))
            } else {
                Duration::from_millis(20)
            };
            if now >= due {
                let j = f64::from(percent) / 100.0;
                let d = match self.streams[si].jitter_pair.take() {
                    Some(d) => -d,
                    None => {
                        let d = j * (2.0 * next_unit(rng) - 1.0);
                        self.streams[si].jitter_pair = Some(d);
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
                self.apply_period(si, period);
                // The window's length is random too (0.5 to 1.5 times): a redraw restarts the running period, and
                // redraws at a fixed spacing would restart it at a fixed phase of a periodic workload.
                let this_window = window.mul_f64(0.5 + next_unit(rng));
                self.streams[si].jitter_next = Some(now + this_window);
                next = next.min(this_window);
            } else {
                next = next.min(due - now);
            }
        }
        next
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
