//! Side-by-side cost of sampling: ntprofile against `perf record` (same event, same period) and glibc
//! `profil()` (its fixed 100 Hz), on the same workload, in one run, reported as ratios (these machines are
//! shared and noisy, so only ratios of interleaved runs mean anything).
//!
//! Run: `cargo bench --bench compare` (needs `perf` for the perf column; skipped with a note without it).
//!
//! The workload runs in a child process (this same binary, in a child mode), so every configuration pays the
//! same process start and the children's CPU time can be read from `getrusage(RUSAGE_CHILDREN)`:
//! - *thread cost per sample*: (workload thread CPU time with sampling − without) / samples — what the profiled
//!   thread pays for each sample;
//! - *whole job*: CPU time of everything the measurement needs (workload + our consumer thread, against
//!   workload + `perf record` + `perf report`), per sample.

use std::process::Command;
use std::time::Instant;

use ntprofile::{Profile, ProfileSource};

/// Workload iterations (about 1 s of CPU on the project's machines).
const ITERS: u64 = 1_600_000_000;
/// Sampling period for the ntprofile / perf comparison: 100 µs (interval 1000).
const INTERVAL: u32 = 1000;
/// Rounds (each configuration once per round, interleaved).
const REPS: usize = 9;

#[inline(never)]
fn work(iters: u64) -> u64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..iters {
        x = x.rotate_left(7) ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    }
    x
}

fn thread_cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).expect("clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// CPU time (user + system, ns) of every waited-for child so far.
fn children_cpu_ns() -> u64 {
    let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("rusage");
    let tv =
        |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000;
    tv(r.user_time()) + tv(r.system_time())
}

/// CPU time (ns) of this process's consumer thread, from its schedstat.
fn consumer_cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for e in dir.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        // The kernel keeps 15 bytes of a thread name: "ntprofile-consu".
        if comm.trim_end().starts_with("ntprofile-cons") {
            let s = std::fs::read_to_string(p.join("schedstat")).unwrap_or_default();
            return s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

unsafe extern "C" {
    /// glibc `profil(3)`.
    fn profil(buf: *mut u16, bufsiz: usize, offset: usize, scale: u32) -> i32;
}

/// Child modes: run the workload under one kind of sampling and print `thread_ns samples consumer_ns`.
fn child(mode: &str) {
    let base = work as *const () as usize;
    let (thread_ns, samples, consumer_ns) = match mode {
        "plain" => {
            let t0 = thread_cpu_ns();
            std::hint::black_box(work(ITERS));
            (thread_cpu_ns() - t0, 0, 0)
        }
        "ntprofile" | "ntprofile-100hz" => {
            let interval = if mode == "ntprofile" {
                INTERVAL
            } else {
                100_000
            };
            ntprofile::set_interval(ProfileSource::Time, interval);
            let p = Profile::builder()
                .range(base, 4096)
                .bucket_size(4)
                .build()
                .expect("create");
            p.start().expect("start");
            let t0 = thread_cpu_ns();
            std::hint::black_box(work(ITERS));
            let dt = thread_cpu_ns() - t0;
            let consumer = consumer_cpu_ns();
            p.stop().expect("stop");
            let s = p.stats();
            (dt, s.counted + s.outside, consumer)
        }
        "profil" => {
            let mut buf = vec![0u16; 2048];
            // scale 0x10000: one 16-bit counter per 2 bytes of text, from `base`.
            // SAFETY: `buf` outlives the profiling, which is turned off (scale 0) before it is dropped.
            unsafe { profil(buf.as_mut_ptr(), buf.len() * 2, base, 0x10000) };
            let t0 = thread_cpu_ns();
            std::hint::black_box(work(ITERS));
            let dt = thread_cpu_ns() - t0;
            // SAFETY: scale 0 turns profiling off.
            unsafe { profil(buf.as_mut_ptr(), 0, 0, 0) };
            (dt, buf.iter().map(|c| u64::from(*c)).sum(), 0)
        }
        other => panic!("unknown child mode {other}"),
    };
    println!("{thread_ns} {samples} {consumer_ns}");
}

struct Run {
    thread_ns: u64,
    samples: u64,
    consumer_ns: u64,
    /// CPU of everything the configuration ran (children), plus its report step.
    job_ns: u64,
}

fn run(mode: &str, perf: Option<&str>) -> Option<Run> {
    let exe = std::env::current_exe().ok()?;
    let before = children_cpu_ns();
    let out = match perf {
        None => Command::new(&exe)
            .env("NTPROF_BENCH_CHILD", mode)
            .output()
            .ok()?,
        Some(data) => Command::new("perf")
            .args([
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-c",
                &(u64::from(INTERVAL) * 100).to_string(),
            ])
            .args(["-o", data, "--"])
            .arg(&exe)
            .env("NTPROF_BENCH_CHILD", mode)
            .output()
            .ok()?,
    };
    if !out.status.success() {
        return None;
    }
    if let Some(data) = perf {
        // The report is part of the job: perf's samples are not a histogram until it has run.
        let rep = Command::new("perf")
            .args(["report", "-q", "--stdio", "-i", data])
            .output()
            .ok()?;
        if !rep.status.success() {
            return None;
        }
    }
    let job_ns = children_cpu_ns() - before;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut f = text
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(0));
    let (thread_ns, samples, consumer_ns) = (f.next()?, f.next()?, f.next()?);
    Some(Run {
        thread_ns,
        samples,
        consumer_ns,
        job_ns,
    })
}

/// Samples of a run: counted by ntprofile or profil, or (perf, whose count needs its report parsed) the
/// thread's CPU time over the period.
fn samples(r: &Run) -> f64 {
    if r.samples > 0 {
        r.samples as f64
    } else {
        r.thread_ns as f64 / (f64::from(INTERVAL) * 100.0)
    }
}

/// One round of every configuration, with its own baseline.
struct Round {
    base: f64,
    base_job: f64,
    ntp: Run,
    perf: Option<Run>,
    ntp100: Run,
    prof: Run,
}

impl Round {
    /// What the profiled thread paid per sample (ns).
    fn per_sample(&self, r: &Run) -> f64 {
        (r.thread_ns as f64 - self.base) / samples(r)
    }

    /// What the whole job cost per sample (ns of CPU).
    fn job_per_sample(&self, r: &Run) -> f64 {
        (r.job_ns as f64 - self.base_job) / samples(r)
    }

    /// The profiled thread's overhead, in percent.
    fn overhead(&self, r: &Run) -> f64 {
        (r.thread_ns as f64 - self.base) / self.base * 100.0
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if let Ok(mode) = std::env::var("NTPROF_BENCH_CHILD") {
        child(&mode);
        return;
    }
    // `cargo test --benches` runs benches with `--bench`-less arguments; only measure under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("compare: run with `cargo bench --bench compare`");
        return;
    }
    let have_perf = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let data = std::env::temp_dir().join(format!("ntprof-bench-{}.data", std::process::id()));
    let data = data.to_string_lossy().into_owned();
    let started = Instant::now();
    // Rounds: each configuration once, between two unprofiled runs that give the round its own baseline, so a
    // slow drift of the machine cancels out of the round's ratios. Reported: the median over the rounds, and
    // the spread.
    let mut rounds: Vec<Round> = Vec::new();
    for _ in 0..REPS {
        let before = run("plain", None);
        let ntp = run("ntprofile", None);
        let perf = if have_perf {
            run("plain", Some(&data))
        } else {
            None
        };
        let ntp100 = run("ntprofile-100hz", None);
        let prof = run("profil", None);
        let after = run("plain", None);
        if let (Some(b), Some(a), Some(ntp), Some(ntp100), Some(prof)) =
            (before, after, ntp, ntp100, prof)
        {
            rounds.push(Round {
                base: (b.thread_ns + a.thread_ns) as f64 / 2.0,
                base_job: (b.job_ns + a.job_ns) as f64 / 2.0,
                ntp,
                perf,
                ntp100,
                prof,
            });
        }
    }
    let _ = std::fs::remove_file(&data);
    assert!(!rounds.is_empty(), "no complete round");
    let stat = |v: Vec<f64>| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        (median(v), lo, hi)
    };
    let base = median(rounds.iter().map(|r| r.base).collect());
    println!(
        "workload: {ITERS} iterations, {:.3} s of thread CPU unprofiled; {} rounds, each between two unprofiled runs",
        base / 1e9,
        rounds.len()
    );
    let (ntp_cost, ..) = stat(rounds.iter().map(|r| r.per_sample(&r.ntp)).collect());
    println!(
        "ntprofile @100 µs: {:.0} samples, profiled thread pays {:.2} µs/sample, consumer {:.0} ns/sample",
        median(rounds.iter().map(|r| samples(&r.ntp)).collect()),
        ntp_cost / 1e3,
        median(
            rounds
                .iter()
                .map(|r| r.ntp.consumer_ns as f64 / samples(&r.ntp))
                .collect()
        )
    );
    let with_perf: Vec<&Round> = rounds.iter().filter(|r| r.perf.is_some()).collect();
    if !with_perf.is_empty() {
        let perf_of = |r: &Round| r.perf.as_ref().map(|p| r.per_sample(p)).unwrap_or(f64::NAN);
        let (perf_cost, ..) = stat(with_perf.iter().map(|r| perf_of(r)).collect());
        println!(
            "perf record @100 µs: profiled thread pays {:.2} µs/sample",
            perf_cost / 1e3
        );
        let (m, lo, hi) = stat(
            with_perf
                .iter()
                .map(|r| r.per_sample(&r.ntp) / perf_of(r))
                .collect(),
        );
        println!(
            "  ratio, profiled thread (ntprofile / perf record): {m:.2} (rounds {lo:.2}..{hi:.2})"
        );
        let (m, lo, hi) = stat(
            with_perf
                .iter()
                .map(|r| {
                    r.job_per_sample(&r.ntp)
                        / r.perf
                            .as_ref()
                            .map(|p| r.job_per_sample(p))
                            .unwrap_or(f64::NAN)
                })
                .collect(),
        );
        println!(
            "  ratio, whole job per sample (workload+consumer / workload+perf record+perf report): {m:.2} \
             (rounds {lo:.2}..{hi:.2})"
        );
    } else {
        println!("perf record: not available (install linux-perf for this column)");
    }
    // At 100 Hz the per-sample cost is below the run-to-run noise of a 1 s workload: report each
    // configuration's overhead on the profiled thread instead, and what it delivers (samples).
    let (prof_over, plo, phi) = stat(rounds.iter().map(|r| r.overhead(&r.prof)).collect());
    let (n100_over, nlo, nhi) = stat(rounds.iter().map(|r| r.overhead(&r.ntp100)).collect());
    println!(
        "glibc profil() @100 Hz: {:.0} samples (16-bit counters), thread overhead {prof_over:+.2} % ({plo:+.2}..{phi:+.2})",
        median(rounds.iter().map(|r| samples(&r.prof)).collect())
    );
    println!(
        "ntprofile @100 Hz: {:.0} samples, thread overhead {n100_over:+.2} % ({nlo:+.2}..{nhi:+.2}); \
         ntprofile @10 kHz: {:+.2} %",
        median(rounds.iter().map(|r| samples(&r.ntp100)).collect()),
        median(rounds.iter().map(|r| r.overhead(&r.ntp)).collect())
    );
    println!("(measured in {:.1} s)", started.elapsed().as_secs_f64());
}
