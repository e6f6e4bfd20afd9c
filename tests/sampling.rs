//! Kernel-touching tests of sampling with `ProfileSource::Time` (the `cpu-clock` software event: no hardware PMU
//! needed): which threads and processors count, the stop barrier, accumulation across restarts, one sample in
//! every matching profile, the error statuses, and interval changes on running profiles.
//!
//! Every profile here is a profile of this test process, so it sees every thread of it, including the threads
//! of other tests in this file; and the interval is per source and process-wide. Every test that samples or
//! touches the interval therefore holds `common::serial()`, and each test spins in its own hot function, which lives
//! alone in its own linker section so that its address range is exact (see [`hot_fn!`]).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ntprofile::{NtStatus, Profile, ProfileSource};

// ---------------------------------------------------------------------------------------------------------
// Hot functions with exact address ranges.
// ---------------------------------------------------------------------------------------------------------

/// A hot function alone in its own section, and the section's bounds.
///
/// A function's size is not available at run time, and a guessed range (its address plus N bytes) may hold
/// other code that some thread runs. Instead each hot function is put in a section of its own whose name is a C
/// identifier, so the linker defines `__start_<name>` and `__stop_<name>` around exactly that function (and its
/// alignment padding), in debug and release builds alike. The body is a xorshift chain in a `while` loop: plain
/// shifts and xors, no calls (no iterator `next`, no `black_box`, nothing that debug builds leave out of line),
/// so every sample of a thread spinning in it lands inside the section. The salt makes every body different, so
/// that no two are merged into one address.
macro_rules! hot_fn {
    ($name:ident, $section:literal, $salt:expr) => {
        impl Hot {
            #[allow(non_upper_case_globals)]
            const $name: Hot = {
                // The function and its section's range (tests/common), declared inside this constant so that
                // every invocation gets its own.
                hot_in_section!(hot, section, $section, $salt);
                Hot {
                    f: hot,
                    bounds: || {
                        let (start, size) = section();
                        (start, start + size)
                    },
                    name: stringify!($name),
                }
            };
        }
    };
}

/// A hot function and its exact range.
#[derive(Clone, Copy)]
struct Hot {
    f: fn(u64, u64) -> u64,
    bounds: fn() -> (usize, usize),
    name: &'static str,
}

impl Hot {
    /// `[start, end)` of the function's own section; checked to hold the function and nothing large.
    fn range(self) -> (usize, usize) {
        let (start, end) = (self.bounds)();
        let f = self.f as *const () as usize;
        assert!(
            start <= f && f < end,
            "{}: {f:#x} outside its section [{start:#x}, {end:#x})",
            self.name
        );
        assert!(
            end - start < 4096,
            "{}: section of {} bytes holds more than the function",
            self.name,
            end - start
        );
        (start, end)
    }

    /// A profile over exactly this function, 16-byte buckets, every CPU unless `cpus` says otherwise.
    fn profile(self, cpus: Option<&[usize]>) -> Profile {
        self.profile_bs(4, cpus)
    }

    fn profile_bs(self, bucket_size: u32, cpus: Option<&[usize]>) -> Profile {
        let (start, end) = self.range();
        let b = Profile::builder()
            .range(start, end - start)
            .bucket_size(bucket_size)
            .source(ProfileSource::Time);
        let b = match cpus {
            Some(c) => b.cpus(c.iter().copied()),
            None => b.all_cpus(),
        };
        b.build().expect("build a ProfileTime profile")
    }
}

hot_fn!(hot_pre, "ntp_s_pre", 0x01);
hot_fn!(hot_post, "ntp_s_post", 0x02);
hot_fn!(hot_cpu0, "ntp_s_cpu0", 0x03);
hot_fn!(hot_cpu1, "ntp_s_cpu1", 0x04);
hot_fn!(hot_acct_a, "ntp_s_acct_a", 0x05);
hot_fn!(hot_acct_b, "ntp_s_acct_b", 0x06);
hot_fn!(hot_restart, "ntp_s_restart", 0x08);
hot_fn!(hot_dup, "ntp_s_dup", 0x09);
hot_fn!(hot_rate, "ntp_s_rate", 0x0a);

/// Iterations per call of a hot function: a fraction of a millisecond in release builds, a few in debug builds,
/// so a spinner notices its stop flag quickly and spends almost all its time inside the section.
const CHUNK: u64 = 100_000;

// ---------------------------------------------------------------------------------------------------------
// Spinning threads, their CPU time, serialization.
// ---------------------------------------------------------------------------------------------------------

// Held by every test that samples or changes the interval (see the module docs).
use common::serial;

/// Sets ProfileTime's interval for the test and restores the previous one when dropped (also on a panic).
struct IntervalGuard {
    previous: u32,
}

impl IntervalGuard {
    fn set(interval: u32) -> IntervalGuard {
        let previous = ntprofile::query_interval(ProfileSource::Time);
        assert_ne!(previous, 0, "ProfileTime must be supported here");
        ntprofile::set_interval(ProfileSource::Time, interval);
        IntervalGuard { previous }
    }
}

impl Drop for IntervalGuard {
    fn drop(&mut self) {
        ntprofile::set_interval(ProfileSource::Time, self.previous);
    }
}

/// ProfileTime's effective sampling period now, in nanoseconds (the interval is in 100 ns units).
fn period_ns() -> u64 {
    u64::from(ntprofile::query_interval(ProfileSource::Time)) * 100
}

/// CPU time of a thread of this process (`CLOCK_THREAD_CPUTIME_ID` of that thread), in nanoseconds.
fn thread_cpu_ns(thread: libc::pthread_t) -> u64 {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `thread` is a live thread of this process (its JoinHandle is held); `clock` is a valid out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(thread, &mut clock) };
    assert_eq!(rc, 0, "pthread_getcpuclockid");
    common::clock_ns(clock)
}

/// A thread spinning in one hot function until dropped (dropping also stops it when an assertion fails, so a
/// failing test does not leave threads burning CPU under the next test).
struct Spinner {
    ctl: Arc<SpinControl>,
    handle: Option<JoinHandle<u64>>,
}

/// Shared between a spinner and the test.
#[derive(Default)]
struct SpinControl {
    stop: AtomicBool,
    pause: AtomicBool,
    paused: AtomicBool,
    calls: AtomicU64,
}

impl Spinner {
    /// Start spinning in `hot`, pinned to `cpu` if given; returns once the thread runs (and is pinned).
    fn spawn(hot: Hot, cpu: Option<usize>) -> Spinner {
        let ctl = Arc::new(SpinControl::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let handle = {
            let ctl = ctl.clone();
            thread::Builder::new()
                .name(format!("spin-{}", hot.name))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let mut set = nix::sched::CpuSet::new();
                        set.set(cpu).expect("cpu number");
                        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                            .expect("pin");
                        // SAFETY: sched_getcpu has no preconditions.
                        assert_eq!(
                            unsafe { libc::sched_getcpu() },
                            cpu as i32,
                            "pinned thread runs elsewhere"
                        );
                    }
                    ready_tx.send(()).unwrap();
                    let mut x = 0x9e37_79b9_7f4a_7c15u64;
                    while !ctl.stop.load(Ordering::Relaxed) {
                        if ctl.pause.load(Ordering::SeqCst) {
                            // Out of the hot function and asleep: no more samples in its range.
                            ctl.paused.store(true, Ordering::SeqCst);
                            while ctl.pause.load(Ordering::SeqCst)
                                && !ctl.stop.load(Ordering::Relaxed)
                            {
                                thread::sleep(Duration::from_millis(1));
                            }
                            ctl.paused.store(false, Ordering::SeqCst);
                            continue;
                        }
                        x = (hot.f)(x, CHUNK);
                        ctl.calls.fetch_add(1, Ordering::Relaxed);
                    }
                    x
                })
                .expect("spawn a spinner")
        };
        ready_rx.recv().expect("spinner started");
        Spinner {
            ctl,
            handle: Some(handle),
        }
    }

    fn cpu_ns(&self) -> u64 {
        use std::os::unix::thread::JoinHandleExt;
        thread_cpu_ns(self.handle.as_ref().unwrap().as_pthread_t())
    }

    fn calls(&self) -> u64 {
        self.ctl.calls.load(Ordering::Relaxed)
    }

    /// Leave the hot function and sleep; returns once the thread is out of it.
    fn pause(&self) {
        self.ctl.pause.store(true, Ordering::SeqCst);
        while !self.ctl.paused.load(Ordering::SeqCst) {
            thread::yield_now();
        }
    }

    fn resume(&self) {
        self.ctl.pause.store(false, Ordering::SeqCst);
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Let the spinners run for at least `wall`, and on until each has had at least `cpu` of CPU time since the call
/// (on a loaded machine they share the processors with other work), but never longer than 20 s.
fn run_for(spinners: &[&Spinner], wall: Duration, cpu: Duration) {
    let start = Instant::now();
    let base: Vec<u64> = spinners.iter().map(|s| s.cpu_ns()).collect();
    let cpu = cpu.as_nanos() as u64;
    loop {
        thread::sleep(Duration::from_millis(10));
        let enough_cpu = spinners
            .iter()
            .zip(&base)
            .all(|(s, &b)| s.cpu_ns() - b >= cpu);
        if (start.elapsed() >= wall && enough_cpu) || start.elapsed() > Duration::from_secs(20) {
            return;
        }
    }
}

fn total(counts: &[u32]) -> u64 {
    counts.iter().map(|&c| u64::from(c)).sum()
}

fn online_cpus() -> usize {
    ntprofile::affinity::online_cpus().len()
}

/// The ranges the other tests rely on: each hot function starts its section, and no two sections overlap.
#[test]
fn hot_function_ranges_are_exact_and_disjoint() {
    let all = [
        Hot::hot_pre,
        Hot::hot_post,
        Hot::hot_cpu0,
        Hot::hot_cpu1,
        Hot::hot_acct_a,
        Hot::hot_acct_b,
        Hot::hot_restart,
        Hot::hot_dup,
        Hot::hot_rate,
    ];
    let mut ranges: Vec<(usize, usize, &str)> = all
        .iter()
        .map(|h| {
            let (start, end) = h.range();
            assert_eq!(
                h.f as *const () as usize, start,
                "{} does not start its section",
                h.name
            );
            (start, end, h.name)
        })
        .collect();
    ranges.sort();
    for w in ranges.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "{} and {} overlap: {:x?}",
            w[0].2,
            w[1].2,
            w
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// a. Which threads and which processors count.
// ---------------------------------------------------------------------------------------------------------

/// A thread that existed before `start()` and one created after it are both counted.
#[test]
fn threads_before_and_after_start_are_counted() {
    let _serial = serial();
    let _interval = IntervalGuard::set(1000);
    let period = period_ns();

    let pre = Spinner::spawn(Hot::hot_pre, None);
    let p_pre = Hot::hot_pre.profile(None);
    let p_post = Hot::hot_post.profile(None);
    p_pre.start().unwrap();
    p_post.start().unwrap();
    let pre_cpu0 = pre.cpu_ns();
    // Created after start: covered only through the inherited events.
    let post = Spinner::spawn(Hot::hot_post, None);
    run_for(
        &[&pre, &post],
        Duration::from_millis(300),
        Duration::from_millis(150),
    );
    // CPU time while both profiles were surely started (the post thread's clock starts at its creation).
    let (pre_cpu, post_cpu) = (pre.cpu_ns() - pre_cpu0, post.cpu_ns());
    p_pre.stop().unwrap();
    p_post.stop().unwrap();
    drop((pre, post));

    let (s_pre, s_post) = (p_pre.stats(), p_post.stats());
    let (c_pre, c_post) = (total(&p_pre.counts()), total(&p_post.counts()));
    let (e_pre, e_post) = (pre_cpu / period, post_cpu / period);
    eprintln!(
        "pre-existing thread: {c_pre} counted (~{e_pre} expected from its CPU time) {s_pre:?}"
    );
    eprintln!("thread created after start: {c_post} counted (~{e_post} expected) {s_post:?}");
    // Each counted sample increments exactly one counter of the profile.
    assert_eq!(c_pre, s_pre.counted);
    assert_eq!(c_post, s_post.counted);
    // The threads spin in their function all the time: nearly all their CPU time while the profiles were
    // started shows up as samples in it (90%: the kernel-mode share of that time is never sampled; the exact
    // accounting is `stop_is_a_barrier_and_every_sample_is_accounted_for`).
    assert!(
        e_pre > 1000 && e_post > 1000,
        "the spinners got too little CPU: {e_pre}, {e_post}"
    );
    assert!(
        c_pre * 10 >= e_pre * 9,
        "pre-existing thread under-counted: {c_pre} of ~{e_pre}"
    );
    assert!(
        c_post * 10 >= e_post * 9,
        "thread created after start under-counted: {c_post} of ~{e_post}"
    );
}

/// A profile on CPU 0 only does not count a thread pinned to CPU 1, and does count one pinned to CPU 0.
#[test]
fn affinity_selects_processors() {
    if online_cpus() < 2 {
        common::skip(&format!(
            "needs 2 online processors, this machine has {}",
            online_cpus()
        ));
        return;
    }
    let _serial = serial();
    let _interval = IntervalGuard::set(1000);

    let on1 = Spinner::spawn(Hot::hot_cpu1, Some(1));
    let on0 = Spinner::spawn(Hot::hot_cpu0, Some(0));
    // The profile under test: CPU 0 only, over the function that runs on CPU 1.
    let cpu1_fn_on_cpu0 = Hot::hot_cpu1.profile(Some(&[0]));
    // The controls: the same kind of thread on CPU 0 is counted, and the CPU-1 thread is sampled on CPU 1.
    let cpu0_fn_on_cpu0 = Hot::hot_cpu0.profile(Some(&[0]));
    let cpu1_fn_on_cpu1 = Hot::hot_cpu1.profile(Some(&[1]));
    // The same through a KAFFINITY mask: bit 0 only.
    let (start, end) = Hot::hot_cpu1.range();
    let cpu1_fn_mask_cpu0 = Profile::builder()
        .range(start, end - start)
        .bucket_size(4)
        .affinity_mask(0b01)
        .build()
        .unwrap();

    // CPU-0-only profiles first: the stream opens on CPU 0 alone, then grows to CPU 1.
    cpu1_fn_on_cpu0.start().unwrap();
    cpu1_fn_mask_cpu0.start().unwrap();
    cpu0_fn_on_cpu0.start().unwrap();
    cpu1_fn_on_cpu1.start().unwrap();
    let calls0 = (on0.calls(), on1.calls());
    run_for(
        &[&on0, &on1],
        Duration::from_millis(300),
        Duration::from_millis(150),
    );
    for p in [
        &cpu1_fn_on_cpu0,
        &cpu1_fn_mask_cpu0,
        &cpu0_fn_on_cpu0,
        &cpu1_fn_on_cpu1,
    ] {
        p.stop().unwrap();
    }
    let calls1 = (on0.calls(), on1.calls());
    drop((on0, on1));

    let under_test = cpu1_fn_on_cpu0.stats();
    let under_test_mask = cpu1_fn_mask_cpu0.stats();
    let control0 = cpu0_fn_on_cpu0.stats();
    let control1 = cpu1_fn_on_cpu1.stats();
    eprintln!(
        "CPU-1 function, profile on CPU 0: {under_test:?}; by mask 0b01: {under_test_mask:?}"
    );
    eprintln!("CPU-0 function, profile on CPU 0: {control0:?}");
    eprintln!("CPU-1 function, profile on CPU 1: {control1:?}");
    assert!(
        calls1.0 > calls0.0 && calls1.1 > calls0.1,
        "both spinners kept running"
    );

    assert_eq!(
        total(&cpu1_fn_on_cpu0.counts()),
        0,
        "a thread on CPU 1 counted by a CPU-0 profile"
    );
    assert_eq!(under_test.counted, 0);
    assert_eq!(
        total(&cpu1_fn_mask_cpu0.counts()),
        0,
        "a thread on CPU 1 counted by a mask-0b01 profile"
    );
    assert_eq!(under_test_mask.counted, 0);
    // The CPU-0 profiles were live: they saw the CPU-0 spinner's samples (outside their range).
    assert!(under_test.outside > 1000, "{under_test:?}");
    assert!(under_test_mask.outside > 1000, "{under_test_mask:?}");
    assert!(
        control0.counted > 1000,
        "the thread on CPU 0 was not counted: {control0:?}"
    );
    assert!(
        control1.counted > 1000,
        "the thread on CPU 1 was not sampled: {control1:?}"
    );
    assert_eq!(total(&cpu0_fn_on_cpu0.counts()), control0.counted);
    assert_eq!(total(&cpu1_fn_on_cpu1.counts()), control1.counted);
}

// ---------------------------------------------------------------------------------------------------------
// b. The stop barrier and the accounting of every sample.
// ---------------------------------------------------------------------------------------------------------

/// After `stop()` returns the counts and statistics no longer change, whether the stream closed with it or
/// another profile keeps it running; and counted + outside + lost is every sample the kernel took.
#[test]
fn stop_is_a_barrier_and_every_sample_is_accounted_for() {
    let _serial = serial();
    let _interval = IntervalGuard::set(1000);
    let period = period_ns();

    let a = Spinner::spawn(Hot::hot_acct_a, None);
    let b = Spinner::spawn(Hot::hot_acct_b, None);
    // One profile over both functions (their sections may lie in any order, with other code between them: the
    // accounting does not care what the range holds).
    let (ra, rb) = (Hot::hot_acct_a.range(), Hot::hot_acct_b.range());
    let (lo, hi) = (ra.0.min(rb.0), ra.1.max(rb.1));
    let p = Profile::builder()
        .range(lo, hi - lo)
        .bucket_size(31)
        .all_cpus()
        .build()
        .unwrap();

    let before_start = (a.cpu_ns(), b.cpu_ns());
    let t0 = Instant::now();
    p.start().unwrap();
    let start_took = t0.elapsed();
    let after_start = (a.cpu_ns(), b.cpu_ns());
    run_for(
        &[&a, &b],
        Duration::from_millis(400),
        Duration::from_millis(200),
    );
    let before_stop = (a.cpu_ns(), b.cpu_ns());
    let t1 = Instant::now();
    p.stop().unwrap();
    let stop_took = t1.elapsed();
    let after_stop = (a.cpu_ns(), b.cpu_ns());

    let stats = p.stats();
    let counts = p.counts();

    // The kernel's number, measured independently of the library. A ProfileTime sample is a cpu-clock hrtimer
    // that fires every `period` ns while the thread runs (its phase is kept across context switches), and is
    // kept only when it interrupts user mode (exclude_kernel). The spinners run in user mode nearly all the time,
    // so each produces about CPU time / period samples. Sampling is enabled somewhere inside start() and
    // disabled somewhere inside stop(): the spinners' CPU time from after start() to before stop() gives a lower
    // bound, from before start() to after stop() an upper bound.
    //
    // (This bound cannot be exact for a timer: the kernel keeps no count of the expiries it drops in kernel
    // mode. The exact check, equality with the kernel's own count, is on the count path: tests/accounting.rs.
    // Losses inside the library are caught exactly here by `lost == 0` and by the barrier comparison below.)
    //
    // Tolerance, below: the spinners' CPU time includes some kernel-mode time (context switches, scheduler
    // ticks, the wake-ups of the library's consumer thread and of other work on this 2-CPU machine) whose timer
    // expiries are dropped by exclude_kernel. Measured on this VM: `perf record -e cpu-clock -c 100000` of a
    // spinner under load found 0.5-1.1% of its samples in the kernel while its all-mode sample count matched
    // CPU time / period within 0.3%; in this test, counted + outside + lost came out 1-2.5% below the lower
    // bound, the same at 50 µs, 100 µs and 1 ms periods (so it is not a loss that grows with the sample rate),
    // and once, in a full-suite run on the loaded 2-CPU machine, just past 5% (more preemption, more kernel
    // time on the spinners' clocks). Hence 7%. Above: 3%, for clock granularity; a sample counted twice would
    // be far outside either. Plus a
    // few samples per thread: each spinner's timer may be a period out of phase on each CPU at each end, and the
    // other threads of the process (the harness, this thread while it sleeps, tests blocked on SERIAL) spend
    // next to no time in user mode: 5 samples each for up to 8 threads. The consumer thread is never profiled.
    let cpu_inner = (before_stop.0 - after_start.0) + (before_stop.1 - after_start.1);
    let cpu_outer = (after_stop.0 - before_start.0) + (after_stop.1 - before_start.1);
    let (expect_lo, expect_hi) = (cpu_inner / period, cpu_outer / period);
    let seen = stats.counted + stats.outside + stats.lost;
    eprintln!(
        "period {period} ns, start {start_took:?}, stop {stop_took:?}; {stats:?}; counted+outside+lost = {seen}; \
         expected {expect_lo}..={expect_hi} (spinner CPU {:.1}..{:.1} ms)",
        cpu_inner as f64 / 1e6,
        cpu_outer as f64 / 1e6
    );
    assert_eq!(stats.lost, 0, "samples lost at a 100 µs period");
    assert_eq!(stats.throttled, 0, "the kernel throttled a 100 µs period");
    assert_eq!(total(&counts), stats.counted);
    assert!(
        expect_lo > 2000,
        "the spinners got too little CPU time: {expect_lo} periods"
    );
    let slack_per_thread = 5;
    let lo_bound = expect_lo * 93 / 100 - 2 * slack_per_thread;
    let hi_bound = expect_hi * 103 / 100 + 8 * slack_per_thread;
    assert!(
        (lo_bound..=hi_bound).contains(&seen),
        "counted + outside + lost = {seen}, the kernel produced {expect_lo}..={expect_hi} (bounds {lo_bound}..={hi_bound})"
    );
    // Both spinners are in the range, so nearly every sample counted.
    assert!(stats.counted * 100 >= seen * 95, "{stats:?}");

    // The stream closed with the stop: the workload runs on and nothing changes.
    let calls = a.calls() + b.calls();
    thread::sleep(Duration::from_millis(200));
    assert!(a.calls() + b.calls() > calls, "the workload kept running");
    assert_eq!(p.stats(), stats, "statistics changed after stop");
    assert_eq!(p.counts(), counts, "counts changed after stop");

    // The barrier, exactly. The workload pauses (leaves the hot function and sleeps) right before stop(), so
    // its last samples are still in the rings (the consumer drains them on a 20 ms timer or at a watermark):
    // stop() itself must drain them. q is compared with r, an identical profile started with it that stays
    // started long enough for the timed drains to have counted everything.
    a.pause();
    b.pause();
    let q = Hot::hot_acct_a.profile(None);
    let r = Hot::hot_acct_a.profile(None);
    q.start().unwrap();
    r.start().unwrap();
    a.resume();
    b.resume();
    run_for(
        &[&a, &b],
        Duration::from_millis(300),
        Duration::from_millis(200),
    );
    a.pause();
    b.pause();
    q.stop().unwrap();
    let (q_stats, q_counts) = (q.stats(), q.counts());
    thread::sleep(Duration::from_millis(100));
    let (r_stats, r_counts) = (r.stats(), r.counts());
    eprintln!("q at its stop {q_stats:?}; r 100 ms later {r_stats:?}");
    assert!(q_stats.counted > 1000, "{q_stats:?}");
    assert_eq!(
        q_counts, r_counts,
        "stop() returned before every sample taken before it was counted"
    );
    assert_eq!(q_stats.counted, r_stats.counted);

    // And the stopped profile stays frozen while its stream runs on for the other one.
    a.resume();
    b.resume();
    run_for(
        &[&a, &b],
        Duration::from_millis(300),
        Duration::from_millis(200),
    );
    let (q_stats2, q_counts2, r_live) = (q.stats(), q.counts(), r.stats());
    r.stop().unwrap();
    drop((a, b));
    eprintln!("r after 200 more ms {r_live:?}");
    assert!(
        r_live.counted >= r_stats.counted + 1000,
        "the stream went on sampling: {r_live:?}"
    );
    assert_eq!(
        q_stats2, q_stats,
        "a stopped profile's statistics changed while its stream ran on"
    );
    assert_eq!(
        q_counts2, q_counts,
        "a stopped profile's counts changed while its stream ran on"
    );
    assert_eq!(p.stats(), stats);
}

// ---------------------------------------------------------------------------------------------------------
// c. Accumulation across restarts, clear.
// ---------------------------------------------------------------------------------------------------------

/// Counts accumulate across start/stop/start (never go down), `clear()` zeroes them, and the profile keeps
/// counting after a clear.
#[test]
fn restart_accumulates_and_clear_zeroes() {
    let _serial = serial();
    let _interval = IntervalGuard::set(1000);
    let spinner = Spinner::spawn(Hot::hot_restart, None);
    let p = Hot::hot_restart.profile(None);

    let mut previous = p.counts();
    assert_eq!(total(&previous), 0, "a new profile starts at zero");
    for round in 0..3 {
        p.start().unwrap();
        run_for(
            &[&spinner],
            Duration::from_millis(75),
            Duration::from_millis(40),
        );
        let live = p.counts();
        run_for(
            &[&spinner],
            Duration::from_millis(75),
            Duration::from_millis(40),
        );
        p.stop().unwrap();
        let now = p.counts();
        for (i, ((&before, &mid), &after)) in previous.iter().zip(&live).zip(&now).enumerate() {
            assert!(
                before <= mid && mid <= after,
                "round {round}: counter {i} went down: {before} {mid} {after}"
            );
        }
        assert!(
            total(&now) >= total(&previous) + 300,
            "round {round}: {} after {}",
            total(&now),
            total(&previous)
        );
        assert_eq!(total(&now), p.stats().counted, "round {round}");
        previous = now;
    }

    let stats_before_clear = p.stats();
    p.clear();
    assert!(
        p.counts().iter().all(|&c| c == 0),
        "clear left {:?}",
        p.counts()
    );
    assert_eq!(
        p.stats(),
        stats_before_clear,
        "clear zeroes the counters only"
    );

    p.start().unwrap();
    run_for(
        &[&spinner],
        Duration::from_millis(100),
        Duration::from_millis(50),
    );
    p.stop().unwrap();
    drop(spinner);
    let after = p.counts();
    let stats = p.stats();
    assert!(
        total(&after) > 300,
        "counting resumed after clear: {}",
        total(&after)
    );
    assert_eq!(total(&after), stats.counted - stats_before_clear.counted);
}

// ---------------------------------------------------------------------------------------------------------
// d. One sample counts in every matching profile.
// ---------------------------------------------------------------------------------------------------------

/// Two profiles over the same range with the same bucket size count every sample identically; a third with
/// 4× larger buckets counts the same samples, its buckets being the sums of the fine ones.
#[test]
fn one_sample_counts_in_every_matching_profile() {
    let _serial = serial();
    let _interval = IntervalGuard::set(1000);
    let p1 = Hot::hot_dup.profile_bs(2, None);
    let p2 = Hot::hot_dup.profile_bs(2, None);
    let coarse = Hot::hot_dup.profile_bs(4, None);
    p1.start().unwrap();
    p2.start().unwrap();
    coarse.start().unwrap();
    // The function runs only while all three are started.
    let spinner = Spinner::spawn(Hot::hot_dup, None);
    run_for(
        &[&spinner],
        Duration::from_millis(300),
        Duration::from_millis(150),
    );
    drop(spinner);
    p1.stop().unwrap();
    p2.stop().unwrap();
    coarse.stop().unwrap();

    let (c1, c2, cc) = (p1.counts(), p2.counts(), coarse.counts());
    eprintln!(
        "fine {} / {} / coarse {}; fine buckets {:?}",
        total(&c1),
        total(&c2),
        total(&cc),
        c1
    );
    assert!(total(&c1) > 1000, "too few samples: {}", total(&c1));
    assert_eq!(c1, c2, "identical profiles counted differently");
    assert_eq!(p1.stats().counted, p2.stats().counted);
    assert_eq!(cc.len(), c1.len().div_ceil(4));
    for (i, &c) in cc.iter().enumerate() {
        let fine: u64 = c1.iter().skip(4 * i).take(4).map(|&v| u64::from(v)).sum();
        assert_eq!(
            u64::from(c),
            fine,
            "coarse bucket {i} is not the sum of its four fine buckets"
        );
    }
    // The samples are spread over the loop's instructions, not all in one bucket.
    assert!(c1.iter().filter(|&&c| c > 0).count() >= 2, "{c1:?}");
}

// ---------------------------------------------------------------------------------------------------------
// e. Errors.
// ---------------------------------------------------------------------------------------------------------

#[test]
fn errors() {
    let _serial = serial();
    let _interval = IntervalGuard::set(1000);
    let (start, end) = Hot::hot_dup.range();
    let builder = || Profile::builder().range(start, end - start).bucket_size(4);

    // Start twice; stop when not started (never started, and already stopped).
    let p = builder().build().unwrap();
    assert_eq!(
        p.stop().map_err(|e| e.status()),
        Err(NtStatus::PROFILING_NOT_STARTED)
    );
    p.start().unwrap();
    assert_eq!(
        p.start().map_err(|e| e.status()),
        Err(NtStatus::PROFILING_NOT_STOPPED)
    );
    assert!(
        p.is_started(),
        "a failed second start left the profile started"
    );
    p.stop().unwrap();
    assert_eq!(
        p.stop().map_err(|e| e.status()),
        Err(NtStatus::PROFILING_NOT_STARTED)
    );
    p.start().unwrap();
    p.stop().unwrap();

    // Bucket sizes outside 2..=31.
    for bs in [0, 1, 32, 33, u32::MAX] {
        assert_eq!(
            builder().bucket_size(bs).build().unwrap_err(),
            NtStatus::INVALID_PARAMETER,
            "bucket size {bs}"
        );
    }
    assert!(builder().bucket_size(2).build().is_ok());
    assert!(builder().bucket_size(31).build().is_ok());
    // An empty KAFFINITY, and CPU numbers that are not online.
    assert_eq!(
        builder().affinity_mask(0).build().unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    assert_eq!(
        builder().cpus([4096]).build().unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    assert_eq!(
        builder().cpus([]).build().unwrap_err(),
        NtStatus::INVALID_PARAMETER
    );
    // A range that wraps past the top of the address space.
    assert_eq!(
        Profile::builder()
            .range(usize::MAX - 15, 32)
            .bucket_size(4)
            .build()
            .unwrap_err(),
        NtStatus::BUFFER_OVERFLOW
    );

    // A source with no perf event: not supported, interval 0, set ignored.
    let unsupported = ProfileSource::LoadInstructions;
    assert_eq!(
        builder().source(unsupported).build().unwrap_err(),
        NtStatus::NOT_SUPPORTED
    );
    assert_eq!(ntprofile::query_interval(unsupported), 0);
    assert_eq!(ntprofile::set_interval(unsupported, 5000), 0);
    assert_eq!(ntprofile::query_interval(unsupported), 0);
    // A hardware source answers consistently with the probe (no PMU on this project's VMs: not supported).
    let cycles = ProfileSource::TotalCycles;
    if !cycles.support().is_supported() {
        assert_eq!(
            builder().source(cycles).build().unwrap_err(),
            NtStatus::NOT_SUPPORTED
        );
        assert_eq!(ntprofile::query_interval(cycles), 0);
    }

    // The interval clamps into [minimum, maximum]. The minimum, computed here from the kernel's limits: the
    // cpu-clock hrtimer floor of 10 µs (100 units) and 1 / perf_event_max_sample_rate, rounded up.
    let rate: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let min = 10_000_000u64.div_ceil(rate.max(1)).max(100) as u32;
    assert_eq!(ntprofile::set_interval(ProfileSource::Time, 1), min);
    assert_eq!(ntprofile::query_interval(ProfileSource::Time), min);
    assert_eq!(ntprofile::set_interval(ProfileSource::Time, 0), min);
    assert_eq!(
        ntprofile::set_interval(ProfileSource::Time, u32::MAX),
        ntprofile::source::TIME_MAX_INTERVAL
    );
    assert_eq!(
        ntprofile::query_interval(ProfileSource::Time),
        ntprofile::source::TIME_MAX_INTERVAL
    );
    assert_eq!(ntprofile::set_interval(ProfileSource::Time, 12_345), 12_345);
    assert_eq!(ntprofile::query_interval(ProfileSource::Time), 12_345);
}

// ---------------------------------------------------------------------------------------------------------
// f. An interval change reaches running profiles.
// ---------------------------------------------------------------------------------------------------------

/// Lowering the interval from 10000 (1 ms) to 1000 (100 µs) on a running profile gives about 10× the samples
/// per CPU-second.
#[test]
fn interval_change_applies_to_running_profiles() {
    let _serial = serial();
    let _interval = IntervalGuard::set(10_000);
    assert_eq!(ntprofile::query_interval(ProfileSource::Time), 10_000);
    let spinner = Spinner::spawn(Hot::hot_rate, None);
    let p = Hot::hot_rate.profile(None);
    p.start().unwrap();
    assert_eq!(
        ntprofile::engine::stream_period(ProfileSource::Time),
        Some(1_000_000)
    );

    let window = |p: &Profile| {
        let (s0, c0) = (p.stats().counted, spinner.cpu_ns());
        run_for(
            &[&spinner],
            Duration::from_millis(300),
            Duration::from_millis(150),
        );
        let (s1, c1) = (p.stats().counted, spinner.cpu_ns());
        (s1 - s0, c1 - c0)
    };
    let (slow_n, slow_cpu) = window(&p);
    assert_eq!(ntprofile::set_interval(ProfileSource::Time, 1000), 1000);
    assert_eq!(
        ntprofile::engine::stream_period(ProfileSource::Time),
        Some(100_000)
    );
    let (fast_n, fast_cpu) = window(&p);
    p.stop().unwrap();
    drop(spinner);

    let slow_rate = slow_n as f64 / (slow_cpu as f64 / 1e9);
    let fast_rate = fast_n as f64 / (fast_cpu as f64 / 1e9);
    let ratio = fast_rate / slow_rate;
    eprintln!(
        "interval 10000: {slow_n} samples in {:.1} ms CPU ({slow_rate:.0}/s); interval 1000: {fast_n} in {:.1} ms \
         ({fast_rate:.0}/s); ratio {ratio:.2}",
        slow_cpu as f64 / 1e6,
        fast_cpu as f64 / 1e6
    );
    assert!(slow_n > 100 && fast_n > 1000, "too few samples to compare");
    assert!(
        (8.0..=12.0).contains(&ratio),
        "sample rate ratio {ratio:.2}, expected about 10"
    );
}
