//! 4. Aliasing and jitter.

use super::*;
use crate::common::clock_ns;
use crate::faults::{Pin, Realtime};
use crate::interval::RaiseOnDrop;

// ---------------------------------------------------------------------------------------------------------
// 4. Aliasing and jitter.
// ---------------------------------------------------------------------------------------------------------

/// The periodic workload: a 4 ms cycle, 3 ms in `phase_a` then 1 ms in `phase_b`.
const CYCLE: Duration = Duration::from_millis(4);
const A_PART: Duration = Duration::from_millis(3);
/// Monitor windows for the phase-locking statistic.
const LOCK_WINDOW: Duration = Duration::from_millis(50);

/// What one run of the periodic workload measured.
#[derive(Debug)]
struct PeriodicRun {
    /// Samples in phase_a and in phase_b.
    a: u64,
    b: u64,
    /// A's share of the samples.
    share: f64,
    /// A's share of the thread's CPU time in the two phases (the truth a CPU-time sampler should find).
    truth: f64,
    /// A's share of the wall time in the two phases (equal to `truth` when the thread has a CPU to itself).
    truth_wall: f64,
    /// (share - truth) / sqrt(truth (1 - truth) / n).
    z: f64,
    /// Every sample of the stream per second of the workload thread's CPU time.
    rate: f64,
    /// The workload thread's CPU time over the run's wall time (1: never off its CPU).
    on_cpu: f64,
    /// The workload ran under SCHED_FIFO.
    realtime: bool,
    /// The same per wall second.
    rate_wall: f64,
    /// Dispersion of A's share across the monitor windows: chi-square per window against independent samples
    /// with A's overall share (about 1 when samples are independent, up to the samples per window when every
    /// window is all-A or all-B, i.e. the sampler is phase-locked to the workload).
    dispersion: f64,
    windows: usize,
}

/// The run's z against the share's measured variance: the binomial variance times the dispersion (at least 1).
fn over_dispersed_z(r: &PeriodicRun) -> f64 {
    r.z / r.dispersion.max(1.0).sqrt()
}

/// A jittered run is fair: not phase-locked, and A's share within 3 standard deviations of the truth.
///
/// Within a jitter window the period is fixed, so samples there are not independent: the windows' chi-square
/// (the dispersion, about 2 with 50 % jitter) measures how much more the share varies than a binomial one.
/// The share is tested against that measured variance, and the dispersion itself must stay below the
/// phase-locked level, so the correction can never hide aliasing. Phase locking fails at once; a share off
/// the truth may be the load (a run at load average 7 gave 0.661 for 0.750, not phase-locked: dispersion 0.67),
/// so up to three runs are made and one must be fair — a sampler that aliases is phase-locked in every run.
fn assert_jittered_share_is_fair(duration: Duration, late: bool, label: &str) -> PeriodicRun {
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = periodic_run(duration, late);
        println!(
            "{label}jitter 50 %: A {} B {}, share {:.3} vs truth {:.3} (wall {:.3}), z {:.2}, {:.1} samples per \
             CPU-s ({:.1}/s wall), dispersion {:.2} over {} windows, on CPU {:.0} % (SCHED_FIFO {})",
            r.a,
            r.b,
            r.share,
            r.truth,
            r.truth_wall,
            r.z,
            r.rate,
            r.rate_wall,
            r.dispersion,
            r.windows,
            r.on_cpu * 100.0,
            r.realtime
        );
        assert!(
            r.dispersion <= LOCKED_DISPERSION,
            "{label}with jitter the samples are still phase-locked (dispersion {:.2})",
            r.dispersion
        );
        if over_dispersed_z(&r).abs() <= 3.0 {
            return r;
        }
        seen.push(format!(
            "share {:.3} for the truth {:.3} (z {:.2}, {:.2} for the measured dispersion {:.2})",
            r.share,
            r.truth,
            r.z,
            over_dispersed_z(&r),
            r.dispersion
        ));
    }
    panic!(
        "{label}with jitter A's share must match the truth in one of three runs: {}",
        seen.join("; ")
    );
}

/// Chi-square per window of the windows' (a, n) counts against a binomial with the pooled share.
fn dispersion(windows: &[(u64, u64)]) -> f64 {
    let (sa, sn) = windows
        .iter()
        .fold((0u64, 0u64), |(sa, sn), &(a, n)| (sa + a, sn + n));
    if sn == 0 {
        return 0.0;
    }
    let p = sa as f64 / sn as f64;
    if p <= 0.0 || p >= 1.0 {
        // Every sample on one side for the whole run: as locked as it gets.
        return f64::INFINITY;
    }
    let used: Vec<&(u64, u64)> = windows.iter().filter(|w| w.1 > 0).collect();
    let chi: f64 = used
        .iter()
        .map(|&&(a, n)| {
            let n = n as f64;
            (a as f64 - n * p).powi(2) / (n * p * (1.0 - p))
        })
        .sum();
    chi / used.len().max(1) as f64
}

/// Run the periodic workload on this thread for `duration` under one profile per phase.
///
/// The truth is A's share of the thread's CPU time in the two phases, read around each phase with
/// `CLOCK_THREAD_CPUTIME_ID` next to `Instant`: the cpu-clock timer counts the thread's CPU time, so time the
/// thread spent preempted inside a phase would make a wall-clock truth wrong. When the thread keeps its CPU the
/// two agree; both are reported.
fn periodic_run(duration: Duration, late: bool) -> PeriodicRun {
    let pa = profile_over(phase_a_range(), ProfileSource::Time).expect("build A");
    let pb = profile_over(phase_b_range(), ProfileSource::Time).expect("build B");
    let done = AtomicBool::new(false);
    pa.start().expect("start A");
    pb.start().expect("start B");
    let (wall, cpu, elapsed, windows, realtime) = std::thread::scope(|sc| {
        // The monitor reads both profiles every LOCK_WINDOW from another thread (on the other CPU), so that
        // the workload thread is never blocked and its phase never disturbed.
        let finished = RaiseOnDrop(&done);
        let monitor = sc.spawn(|| {
            let mut windows = Vec::new();
            let mut last = (pa.stats().counted, pb.stats().counted);
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(LOCK_WINDOW);
                let now = (pa.stats().counted, pb.stats().counted);
                windows.push((now.0 - last.0, now.0 - last.0 + now.1 - last.1));
                last = now;
            }
            windows
        });
        // Deadlines advance in fixed steps from the start: the workload's period is exactly 4 ms. The phases
        // are timed on the wall clock and on the thread's CPU clock, each read once per phase boundary.
        let work = || {
            let _pin = Pin::here();
            let rt = Realtime::try_enter();
            let start = Instant::now();
            let cpu_start = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
            let (mut wall, mut cpu) = ([Duration::ZERO; 2], [0u64; 2]);
            let (mut t, mut c) = (start, cpu_start);
            let mut x = 3u64;
            let cycles = (duration.as_micros() / CYCLE.as_micros()) as u32;
            for k in 0..cycles {
                let a_end = start + CYCLE * k + A_PART;
                let b_end = start + CYCLE * (k + 1);
                for (phase, until) in [(0, a_end), (1, b_end)] {
                    x = if phase == 0 {
                        phase_a(x, until)
                    } else {
                        phase_b(x, until)
                    };
                    let (t2, c2) = (Instant::now(), clock_ns(libc::CLOCK_THREAD_CPUTIME_ID));
                    wall[phase] += t2 - t;
                    cpu[phase] += c2 - c;
                    (t, c) = (t2, c2);
                }
            }
            black_box(x);
            let realtime = rt.is_some();
            drop(rt);
            (wall, cpu, (t - start, c - cpu_start), realtime)
        };
        // `late`: the workload runs on a thread created after the start (observed through inheritance).
        let (wall, cpu, elapsed, realtime) = if late {
            sc.spawn(work).join().expect("late workload thread")
        } else {
            work()
        };
        drop(finished);
        (
            wall,
            cpu,
            elapsed,
            monitor.join().expect("monitor"),
            realtime,
        )
    });
    pa.stop().expect("stop A");
    pb.stop().expect("stop B");
    let (sa, sb) = (pa.stats(), pb.stats());
    let (a, b) = (sa.counted, sb.counted);
    assert!(
        a + b >= 100,
        "the periodic workload got only {a} + {b} samples in {:?}",
        elapsed.0
    );
    let n = (a + b) as f64;
    let share = a as f64 / n;
    let truth = cpu[0] as f64 / (cpu[0] + cpu[1]) as f64;
    let truth_wall = wall[0].as_secs_f64() / (wall[0] + wall[1]).as_secs_f64();
    let z = (share - truth) / (truth * (1.0 - truth) / n).sqrt();
    // Every sample of the stream (A's counted and outside) is a sample of this process while A was started:
    // the workload thread's, and a few of the monitor's.
    let all = (sa.counted + sa.outside) as f64;
    let rate = all * 1e9 / elapsed.1 as f64;
    let on_cpu = elapsed.1 as f64 / elapsed.0.as_nanos() as f64;
    let rate_wall = all / elapsed.0.as_secs_f64();
    // The first window holds the start; the last is cut short by the end.
    let used = if windows.len() > 2 {
        &windows[1..windows.len() - 1]
    } else {
        &windows[..]
    };
    PeriodicRun {
        a,
        b,
        share,
        truth,
        truth_wall,
        z,
        rate,
        on_cpu,
        realtime,
        rate_wall,
        dispersion: dispersion(used),
        windows: used.len(),
    }
}

/// Samples per window in the no-jitter run must spread at least this much more than independent samples do.
const LOCKED_DISPERSION: f64 = 3.0;

#[test]
fn fixed_period_aliases_and_jitter_cures_it() {
    let _g = serial();
    let s = ProfileSource::Time;
    let _restore = Restore::to(s, TIME_DEFAULT_INTERVAL);
    let (ra, rb) = (phase_a_range(), phase_b_range());
    println!(
        "phase_a [{:#x}, +{}), phase_b [{:#x}, +{})",
        ra.0, ra.1, rb.0, rb.1
    );
    assert!(
        ra.0 + ra.1 <= rb.0 || rb.0 + rb.1 <= ra.0,
        "the two ranges must not overlap"
    );
    assert_eq!(set_interval(s, 40_000), 40_000, "4 ms");
    set_jitter(s, 0).expect("jitter off");
    assert_eq!(
        ntprofile::source::jitter_percent(s),
        0,
        "no jitter for the first run"
    );

    // Without jitter the sampler fires at a fixed phase of the workload's cycle, which drifts only when the
    // thread is descheduled (the cpu-clock timer pauses while the wall-clock deadlines go on). A's share is
    // then whatever fraction of the run the phase spent inside A: usually far from the truth, but a random walk
    // of the phase can by chance spend about 75 % of the run inside A. So a single run's share cannot be
    // required to be wrong. What is always true of a phase-locked sampler, wherever its total lands, is that
    // its samples come in runs: a 50 ms window (12 samples) is nearly all-A or all-B, far more spread than
    // independent samples (dispersion about 1). A run shows aliasing when it shows mis-attribution (|z| > 4)
    // or phase locking (dispersion > LOCKED_DISPERSION).
    //
    // Both need the thread to keep its CPU: on a machine so busy that the thread is descheduled every few
    // milliseconds, every deschedule moves the phase at random and the fixed period does not alias at all. The
    // workload therefore runs pinned and, where permitted, under SCHED_FIFO (see `Realtime`); a run in which
    // the thread still spent less than 90 % of the wall time on its CPU and showed no aliasing is void. Up to
    // three runs are made; the majority of the runs that are not void must alias, and at least one run must
    // not be void (a machine too busy to show aliasing fails the test: it cannot show that jitter cures it).
    let (mut aliased, mut valid, mut runs) = (0, 0, 0);
    while runs < 3 {
        let r = periodic_run(Duration::from_millis(2_000), false);
        runs += 1;
        let misattributed = r.z.abs() > 4.0;
        let locked = r.dispersion > LOCKED_DISPERSION;
        let disturbed = r.on_cpu < 0.9;
        println!(
            "no jitter, run {runs}: A {} B {}, share {:.3} vs truth {:.3} (wall {:.3}), z {:.1}, {:.0} \
             samples per CPU-s ({:.0}/s wall), dispersion {:.2} over {} windows, on CPU {:.0} % (SCHED_FIFO \
             {}): misattributed {misattributed}, phase-locked {locked}",
            r.a,
            r.b,
            r.share,
            r.truth,
            r.truth_wall,
            r.z,
            r.rate,
            r.rate_wall,
            r.dispersion,
            r.windows,
            r.on_cpu * 100.0,
            r.realtime
        );
        if misattributed || locked {
            aliased += 1;
            valid += 1;
        } else if !disturbed {
            valid += 1;
        }
        if valid > 0 && aliased * 2 > valid && (runs > 1 || aliased == valid) {
            // A clear first run is enough; later runs only settle a first run that looked fair or was void.
            break;
        }
    }
    assert!(
        valid > 0,
        "the machine is too busy to show aliasing: the workload thread was descheduled in every run"
    );
    assert!(
        aliased * 2 > valid,
        "the fixed period aliased in only {aliased} of {valid} valid runs ({runs} made)"
    );

    assert_eq!(
        NtStatus(NtprofileSetSourceJitter(0, 50)),
        NtStatus::SUCCESS,
        "jitter 50 % through the C export"
    );
    assert_eq!(ntprofile::source::jitter_percent(s), 50);
    assert_eq!(
        set_jitter(s, 91).map_err(|e| e.status()),
        Err(NtStatus::INVALID_PARAMETER),
        "above 90 %"
    );
    let r = assert_jittered_share_is_fair(Duration::from_millis(3_000), false, "");
    assert!(
        (212.5..=287.5).contains(&r.rate),
        "the jittered mean rate {:.1} per CPU-second must stay within 15 % of 250",
        r.rate
    );
    // The same on a thread created after the start: its events are inherited copies, which a period change
    // does not reach, so the library re-opens the stream for it; it must be jittered all the same.
    let r = assert_jittered_share_is_fair(Duration::from_millis(3_000), true, "late thread: ");
    assert!(
        (212.5..=287.5).contains(&r.rate),
        "late thread: the jittered mean rate {:.1} per CPU-second must stay within 15 % of 250",
        r.rate
    );
    set_jitter(s, 0).expect("jitter off");
    assert_eq!(ntprofile::source::jitter_percent(s), 0);
}
