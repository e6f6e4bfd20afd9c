//! The demo workload: three functions whose CPU time is split 50% / 30% / 20% by construction.
//!
//! Each function runs the same loop (a dependent multiply-xor-rotate chain: one iteration costs the same in all
//! three, and nothing can vectorize it) with a different constant, so the compiler cannot merge them into one
//! symbol. A round calls them with 5, 3 and 2 units of iterations; a worker runs whole rounds until its deadline,
//! so the split holds exactly in iterations, whatever the scheduler does. Each round's length is varied
//! pseudo-randomly around 10 ms so that the round never beats in step with a fixed sampling period.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// A demo function and its designed share of the workload's CPU time, in percent.
pub struct Designed {
    /// The function's address in this process.
    pub addr: usize,
    /// Designed share, percent.
    pub share: f64,
}

/// The three demo functions with their designed shares (they add up to 100).
pub fn designed() -> [Designed; 3] {
    [
        Designed {
            addr: demo_alpha as *const () as usize,
            share: 50.0,
        },
        Designed {
            addr: demo_beta as *const () as usize,
            share: 30.0,
        },
        Designed {
            addr: demo_gamma as *const () as usize,
            share: 20.0,
        },
    ]
}

/// Units of iterations per round given to alpha, beta and gamma: 5 : 3 : 2.
const ROUND_UNITS: [u64; 3] = [5, 3, 2];
/// Nominal length of a round.
const ROUND: Duration = Duration::from_millis(10);

#[inline(always)]
fn chain(mut x: u64, iterations: u64, k: u64) -> u64 {
    for i in 0..iterations {
        x = (x ^ i).wrapping_mul(k).rotate_left(23);
    }
    x
}

/// 50% of the workload.
#[inline(never)]
pub fn demo_alpha(x: u64, iterations: u64) -> u64 {
    chain(x, iterations, 0x9E37_79B9_7F4A_7C15)
}

/// 30% of the workload.
#[inline(never)]
pub fn demo_beta(x: u64, iterations: u64) -> u64 {
    chain(x, iterations, 0xC2B2_AE3D_27D4_EB4F)
}

/// 20% of the workload.
#[inline(never)]
pub fn demo_gamma(x: u64, iterations: u64) -> u64 {
    chain(x, iterations, 0x1656_67B1_9E37_79F9)
}

/// Iterations of the loop in one unit (a tenth of a nominal round), measured on this machine. Runs before the
/// profile starts.
pub fn calibrate() -> u64 {
    let mut n: u64 = 1 << 16;
    loop {
        let t = Instant::now();
        black_box(demo_alpha(black_box(1), black_box(n)));
        let took = t.elapsed();
        if took >= Duration::from_millis(20) || n >= 1 << 40 {
            let per_unit = ROUND.as_secs_f64() / 10.0;
            return ((n as f64) * per_unit / took.as_secs_f64().max(1e-9)).max(1.0) as u64;
        }
        n *= 4;
    }
}

/// What one worker did.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkerReport {
    /// Whole rounds run.
    pub rounds: u64,
    /// Iterations run in alpha, beta, gamma.
    pub iterations: [u64; 3],
    /// Wall time from start to the end of the last round.
    pub elapsed: Duration,
    /// CPU time the thread ran meanwhile, when the kernel reports it (`/proc/thread-self/schedstat`).
    pub cpu: Option<Duration>,
}

/// The CPU time this thread has run so far: the first field of `/proc/thread-self/schedstat` (nanoseconds).
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        text.split_whitespace().next()?.parse().ok()?,
    ))
}

/// Run whole rounds until `deadline`.
///
/// The unit follows the thread's CPU time per round (what the timer samples): sampling itself costs the sampled
/// thread CPU time, a lot of it at the shortest intervals, and a round calibrated without sampling could then
/// last far longer than planned and overrun the deadline. Being preempted costs no CPU time and leaves the unit
/// alone. Without a CPU clock the unit only shrinks, on wall time.
pub fn work(mut unit: u64, deadline: Instant, seed: u64) -> WorkerReport {
    let start = Instant::now();
    let cpu_start = thread_cpu_time();
    let mut report = WorkerReport::default();
    let mut rng = seed | 1;
    let mut acc = seed;
    let mut round_start = (start, cpu_start);
    while round_start.0 < deadline {
        // xorshift64: a round between 0.75 and 1.25 nominal rounds.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let u = (unit * (768 + (rng % 512)) / 1024).max(1);
        let its = ROUND_UNITS.map(|k| k * u);
        acc = demo_alpha(acc, its[0]);
        acc = demo_beta(acc, its[1]);
        acc = demo_gamma(acc, its[2]);
        for (total, n) in report.iterations.iter_mut().zip(its) {
            *total += n;
        }
        report.rounds += 1;

        let now = (Instant::now(), thread_cpu_time());
        // What this round's 10·u iterations should have taken, and what they took.
        let planned = ROUND.as_secs_f64() * u as f64 / unit as f64;
        let wanted = match (now.1, round_start.1) {
            (Some(end), Some(begin)) => {
                let took = end.saturating_sub(begin).as_secs_f64().max(1e-6);
                // Half-way to the unit that would have taken `planned`, at most a factor 2 per round.
                let ideal = unit as f64 * planned / took;
                (unit as f64 + ideal) / 2.0
            }
            _ => {
                let took = (now.0 - round_start.0).as_secs_f64().max(1e-6);
                if took > 2.0 * planned {
                    unit as f64 * planned / took
                } else {
                    unit as f64
                }
            }
        };
        unit = (wanted.clamp(unit as f64 / 2.0, unit as f64 * 2.0) as u64).max(1);
        round_start = now;
    }
    black_box(acc);
    report.elapsed = start.elapsed();
    report.cpu = thread_cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    report
}
