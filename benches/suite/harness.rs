//! The benchmark suite's harness: runs the C workload (`workload.c`, built here with gcc) under every sampler at
//! equal rates, in interleaved rounds, and writes `BENCHMARKS.md`.
//!
//! Shared by the bench binary (`cargo bench --bench suite`, the full run or `-- --quick`) and the smoke test
//! (`tests/bench_smoke.rs`, a few seconds in `cargo test`).
//!
//! What is measured, per run (one process per run; the harness reads its children's CPU time from
//! `getrusage(RUSAGE_CHILDREN)`):
//! - *rate achieved*: samples ÷ CPU seconds of the workload threads;
//! - *lost*: as the sampler reports it (ntprofile: `SamplesLost`; perf: `Total Lost Samples`; the timer: its
//!   overruns; `profil()`/`sprofil()` cannot tell);
//! - *thread cost per sample*: (CPU of the workload threads − the same in the round's unprofiled runs) ÷ samples;
//! - *consumer / recorder per sample*: ntprofile: the consumer thread's own CPU time up to the stop (its
//!   schedstat) and its wake-ups (context switches); perf: `perf record`'s own CPU (the job's CPU less the
//!   workload process's); `perf report`'s CPU is shown apart;
//! - *whole job per sample*: (CPU of everything the configuration ran − the unprofiled job's) ÷ samples: the
//!   workload process and its consumer, or `perf record` + workload + `perf report`, or `ntprof record`;
//! - *attribution error*: the share of each hot function's samples against its share of the iterations, in
//!   percentage points, and in binomial standard deviations σ = √(p(1−p)/N), N = samples in the four functions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Hot functions in the workload.
pub const NFUNC: usize = 4;

/// A sampler of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sampler {
    /// ntprofile in-process, `ProfileTime` (the `cpu-clock` event).
    Ntprofile,
    /// ntprofile in-process on the `task-clock` event (a registered source): the candidate for `ProfileTime`.
    NtprofileTask,
    /// `ntprof record` on the unmodified workload.
    NtprofRecord,
    /// `perf record -e cpu-clock` + `perf report`.
    Perf,
    /// A POSIX CPU-time timer per thread with a SIGPROF handler.
    Timer,
    /// glibc `profil()`.
    Profil,
    /// glibc `sprofil()`.
    Sprofil,
}

impl Sampler {
    /// Its name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            Sampler::Ntprofile => "ntprofile (cpu-clock)",
            Sampler::NtprofileTask => "ntprofile (task-clock)",
            Sampler::NtprofRecord => "ntprof record",
            Sampler::Perf => "perf record",
            Sampler::Timer => "SIGPROF CPU timer",
            Sampler::Profil => "glibc profil()",
            Sampler::Sprofil => "glibc sprofil()",
        }
    }

    /// The workload's mode for an in-process sampler; `plain` for the external ones.
    fn mode(self) -> &'static str {
        match self {
            Sampler::Ntprofile => "ntprofile",
            Sampler::NtprofileTask => "ntprofile-task",
            Sampler::Timer => "timer",
            Sampler::Profil => "profil",
            Sampler::Sprofil => "sprofil",
            Sampler::Perf | Sampler::NtprofRecord => "plain",
        }
    }

    /// glibc's samplers run at their fixed rate only (the clock tick rate glibc reports, 100 Hz).
    fn fixed_rate(self) -> bool {
        matches!(self, Sampler::Profil | Sampler::Sprofil)
    }
}

/// One group of runs: a thread count and the rates to run its samplers at.
#[derive(Clone, Debug)]
pub struct Group {
    /// Workload threads.
    pub threads: u32,
    /// Requested rates (Hz); `profil()`/`sprofil()` run once per round at their own rate.
    pub rates: Vec<u64>,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Rounds (each configuration once per round, interleaved).
    pub rounds: usize,
    /// Workload iterations per run (split among the threads).
    pub iters: u64,
    /// Thread counts and rates.
    pub groups: Vec<Group>,
    /// Samplers to run (those not available here are skipped with a note).
    pub samplers: Vec<Sampler>,
    /// Where `libntprofile.so` is.
    pub lib_dir: PathBuf,
    /// The repository root (for `include/` and the workload's source).
    pub repo: PathBuf,
    /// The `ntprof` binary, when `ntprof record` is to be measured.
    pub ntprof: Option<PathBuf>,
    /// A label for the run ("full", "quick", "smoke").
    pub label: String,
}

/// What one run reported.
#[derive(Clone, Debug, Default)]
pub struct RunOut {
    /// CPU of the workload threads (ns).
    pub work_ns: f64,
    /// CPU of the workload process (ns).
    pub proc_ns: f64,
    /// CPU of the whole job: every process the configuration ran, including a report step (ns).
    pub job_ns: f64,
    /// CPU of the report step alone (`perf report`), ns.
    pub report_ns: f64,
    /// Wall time of the sampler's start and stop calls (ns; in-process samplers).
    pub start_ns: f64,
    /// See `start_ns`.
    pub stop_ns: f64,
    /// A second start and stop of the same profile in the same process (ntprofile; 0 otherwise), ns.
    pub start2_ns: f64,
    /// See `start2_ns`.
    pub stop2_ns: f64,
    /// CPU time of ntprofile's consumer thread up to the stop (schedstat), ns.
    pub cons_ns: f64,
    /// Its context switches (wake-ups) up to the stop.
    pub cons_switches: f64,
    /// Every sample taken (None: the sampler cannot tell).
    pub samples: Option<f64>,
    /// Lost samples (None: the sampler cannot tell).
    pub lost: Option<f64>,
    /// Throttle events.
    pub throttled: Option<f64>,
    /// Samples per hot function.
    pub hot: [f64; NFUNC],
    /// Iterations per hot function (the truth).
    pub truth: [f64; NFUNC],
}

impl RunOut {
    fn hot_total(&self) -> f64 {
        self.hot.iter().sum()
    }

    /// The samples a per-sample cost divides by: every sample when the sampler tells, else those in the hot
    /// functions (profil/sprofil; the hot functions hold over 99.8 % of the workload's CPU time).
    pub fn sample_count(&self) -> f64 {
        self.samples.unwrap_or_else(|| self.hot_total())
    }

    /// Largest error of a function's share of samples against its share of iterations, in percentage points.
    pub fn error_pp(&self) -> f64 {
        attribution(&self.hot, &self.truth).0
    }
}

/// (largest |error| in percentage points, largest |error| in binomial σ) of `hot` against `truth`.
pub fn attribution(hot: &[f64; NFUNC], truth: &[f64; NFUNC]) -> (f64, f64) {
    let n: f64 = hot.iter().sum();
    let t: f64 = truth.iter().sum();
    if n == 0.0 || t == 0.0 {
        return (f64::NAN, f64::NAN);
    }
    let mut worst = (0.0f64, 0.0f64);
    for i in 0..NFUNC {
        let p = truth[i] / t;
        let share = hot[i] / n;
        let sigma = (p * (1.0 - p) / n).sqrt();
        worst.0 = worst.0.max((share - p).abs() * 100.0);
        worst.1 = worst.1.max((share - p).abs() / sigma);
    }
    worst
}

fn parse_workload(text: &str) -> Result<RunOut, String> {
    let mut kv = BTreeMap::new();
    for f in text.split_whitespace() {
        if let Some((k, v)) = f.split_once('=') {
            kv.insert(
                k.to_string(),
                v.parse::<f64>().map_err(|e| format!("{f}: {e}"))?,
            );
        }
    }
    let get = |k: &str| {
        kv.get(k)
            .copied()
            .ok_or_else(|| format!("workload output lacks {k}: {text}"))
    };
    let opt = |k: &str| get(k).map(|v| if v < 0.0 { None } else { Some(v) });
    let mut out = RunOut {
        work_ns: get("work_ns")?,
        proc_ns: get("proc_ns")?,
        start_ns: get("start_ns")?,
        stop_ns: get("stop_ns")?,
        start2_ns: get("start2_ns")?,
        stop2_ns: get("stop2_ns")?,
        cons_ns: get("cons_ns")?,
        cons_switches: get("cons_switches")?,
        samples: opt("samples")?,
        lost: opt("lost")?,
        throttled: opt("throttled")?,
        ..RunOut::default()
    };
    for i in 0..NFUNC {
        out.hot[i] = get(&format!("hot{i}"))?;
        out.truth[i] = get(&format!("truth{i}"))?;
    }
    Ok(out)
}

/// CPU time (user + system, ns) of every waited-for child so far.
fn children_cpu_ns() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    tv(r.ru_utime) + tv(r.ru_stime)
}

fn output(cmd: &mut Command) -> Result<std::process::Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} {:?} failed ({}): {}{}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// Build the workload into `dir`.
pub fn build_workload(cfg: &Config, dir: &Path) -> Result<PathBuf, String> {
    let exe = dir.join("workload");
    // The library's SONAME is `libntprofile.so.<major>`, which the program records; cargo writes only
    // `libntprofile.so`: the scratch directory gets the SONAME as a symlink and is the program's rpath.
    let soname = dir.join(format!(
        "libntprofile.so.{}",
        env!("CARGO_PKG_VERSION_MAJOR")
    ));
    if std::fs::symlink_metadata(&soname).is_err() {
        std::os::unix::fs::symlink(cfg.lib_dir.join("libntprofile.so"), &soname)
            .map_err(|e| format!("{soname:?}: {e}"))?;
    }
    let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
    rpath.push(dir);
    output(
        Command::new("gcc")
            // Warnings are shown, not fatal: a newer gcc's new warning must not stop the suite or its smoke test.
            .args(["-O2", "-g", "-Wall", "-Wextra", "-I"])
            .arg(cfg.repo.join("include"))
            .arg(cfg.repo.join("benches/suite/workload.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&cfg.lib_dir)
            .arg("-lntprofile")
            .arg(rpath)
            .arg("-lpthread"),
    )?;
    Ok(exe)
}

/// Whether `perf record` works here.
pub fn perf_available(dir: &Path) -> bool {
    Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(dir.join("probe.data"))
        .args(["--", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Parse `perf report --stdio -n --sort sym`: (samples per hot function, every sample, lost).
fn parse_perf_report(text: &str) -> Result<([f64; NFUNC], f64, f64), String> {
    let mut hot = [0.0; NFUNC];
    let mut total = 0.0;
    let mut lost = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Total Lost Samples:") {
            lost = rest.trim().parse::<f64>().ok();
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[0].ends_with('%') {
            continue;
        }
        let n: f64 = f[1]
            .parse()
            .map_err(|_| format!("perf report line: {line}"))?;
        total += n;
        let sym = f[f.len() - 1];
        if let Some(i) = sym
            .strip_prefix("hot")
            .and_then(|d| d.parse::<usize>().ok())
            && i < NFUNC
        {
            hot[i] += n;
        }
    }
    Ok((hot, total, lost.unwrap_or(0.0)))
}

/// Parse `ntprof record`'s text report: (samples per hot function, every sample, lost). It reads
/// `samples N = counted C + outside O + lost L` and the function table's rows (`samples share% function module`).
fn parse_ntprof(text: &str) -> Result<([f64; NFUNC], f64, f64), String> {
    let mut hot = [0.0; NFUNC];
    let mut totals = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = f.iter().position(|w| *w == "samples")
            && f.get(i + 2) == Some(&"=")
            && totals.is_none()
        {
            let num = |k: &str| {
                f.iter()
                    .position(|w| *w == k)
                    .and_then(|j| f.get(j + 1))
                    .and_then(|v| v.trim_end_matches([';', ',']).parse::<f64>().ok())
            };
            if let (Some(c), Some(o), Some(l)) = (num("counted"), num("outside"), num("lost")) {
                totals = Some((c + o, l));
            }
        }
        if f.len() >= 4
            && f[1].ends_with('%')
            && let Some(i) = f[2]
                .strip_prefix("hot")
                .and_then(|d| d.parse::<usize>().ok())
            && i < NFUNC
            && let Ok(n) = f[0].parse::<f64>()
        {
            hot[i] += n;
        }
    }
    let (total, lost) = totals.ok_or_else(|| {
        format!(
            "no `samples N = counted …` line in ntprof's report: {}",
            text.lines().take(5).collect::<Vec<_>>().join(" / ")
        )
    })?;
    Ok((hot, total, lost))
}

/// Everything needed to run configurations.
struct Runner<'a> {
    cfg: &'a Config,
    exe: PathBuf,
    dir: PathBuf,
    seed: u64,
}

impl Runner<'_> {
    fn workload_args(&self, mode: &str, rate: u64, threads: u32) -> Vec<String> {
        vec![
            mode.to_string(),
            rate.to_string(),
            threads.to_string(),
            self.cfg.iters.to_string(),
            self.seed.to_string(),
        ]
    }

    fn run(&self, sampler: Option<Sampler>, rate: u64, threads: u32) -> Result<RunOut, String> {
        let mode = sampler.map_or("plain", Sampler::mode);
        let args = self.workload_args(mode, rate, threads);
        match sampler {
            Some(Sampler::Perf) => {
                let data = self.dir.join("perf.data");
                let before = children_cpu_ns();
                let out = output(
                    Command::new("perf")
                        .args(["record", "-q", "-e", "cpu-clock", "-c"])
                        .arg((1_000_000_000 / rate).to_string())
                        .arg("-o")
                        .arg(&data)
                        .arg("--")
                        .arg(&self.exe)
                        .args(&args),
                )?;
                let mid = children_cpu_ns();
                let rep = output(
                    Command::new("perf")
                        .args(["report", "--stdio", "-n", "--sort", "sym", "-i"])
                        .arg(&data),
                )?;
                let after = children_cpu_ns();
                let mut r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
                let (hot, total, lost) = parse_perf_report(&String::from_utf8_lossy(&rep.stdout))?;
                r.hot = hot;
                r.samples = Some(total);
                r.lost = Some(lost);
                r.job_ns = after - before;
                r.report_ns = after - mid;
                let _ = std::fs::remove_file(&data);
                Ok(r)
            }
            Some(Sampler::NtprofRecord) => {
                let ntprof = self.cfg.ntprof.as_ref().ok_or("no ntprof binary")?;
                let before = children_cpu_ns();
                // Its report follows the program's output on stdout; ProfileTime's interval is in 100 ns units.
                let out = output(
                    Command::new(ntprof)
                        .args(["record", "-q", "-i"])
                        .arg((10_000_000 / rate).max(1).to_string())
                        .arg("--")
                        .arg(&self.exe)
                        .args(&args),
                )?;
                let after = children_cpu_ns();
                let text = String::from_utf8_lossy(&out.stdout);
                let line = text
                    .lines()
                    .find(|l| l.starts_with("work_ns="))
                    .ok_or("no workload line in ntprof's output")?;
                let mut r = parse_workload(line)?;
                let (hot, total, lost) = parse_ntprof(&text)?;
                r.hot = hot;
                r.samples = Some(total);
                r.lost = Some(lost);
                r.job_ns = after - before;
                Ok(r)
            }
            _ => {
                let before = children_cpu_ns();
                let out = output(Command::new(&self.exe).args(&args))?;
                let after = children_cpu_ns();
                let mut r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
                r.job_ns = after - before;
                Ok(r)
            }
        }
    }
}

/// A configuration: sampler at a requested rate with a thread count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Workload threads.
    pub threads: u32,
    /// Requested rate (Hz; 100 for glibc's samplers).
    pub rate: u64,
    /// The sampler.
    pub sampler: Sampler,
}

/// One round's run of a configuration, with the round's unprofiled baseline of its group.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The run.
    pub run: RunOut,
    /// The unprofiled runs' workload-thread CPU (mean of the two around the group), ns.
    pub base_work: f64,
    /// Their job CPU, ns.
    pub base_job: f64,
}

impl Measured {
    /// Samples per CPU second of the workload threads.
    pub fn rate(&self) -> f64 {
        self.run.sample_count() / (self.run.work_ns / 1e9)
    }
    /// Extra CPU of the profiled threads per sample (ns).
    pub fn thread_cost(&self) -> f64 {
        (self.run.work_ns - self.base_work) / self.run.sample_count()
    }
    /// CPU of the consumer (in-process) or the recorder (perf record, without the report) per sample (ns).
    pub fn side_cost(&self, sampler: Sampler) -> f64 {
        let side = match sampler {
            Sampler::Perf => self.run.job_ns - self.run.report_ns - self.run.proc_ns,
            Sampler::NtprofRecord => self.run.job_ns - self.run.proc_ns,
            // The consumer thread's own CPU time while the workload ran (its schedstat, read before the stop).
            _ => self.run.cons_ns,
        };
        side / self.run.sample_count()
    }
    /// The report step per sample (ns; perf only).
    pub fn report_cost(&self) -> f64 {
        self.run.report_ns / self.run.sample_count()
    }
    /// Extra CPU of the whole job per sample (ns).
    pub fn job_cost(&self) -> f64 {
        (self.run.job_ns - self.base_job) / self.run.sample_count()
    }
}

/// Every measurement of a run of the suite.
#[derive(Debug, Default)]
pub struct Results {
    /// Per configuration, one entry per round.
    pub runs: BTreeMap<Key, Vec<Measured>>,
    /// Samplers skipped, with the reason.
    pub skipped: Vec<(Sampler, String)>,
    /// Wall time of the whole run (s).
    pub seconds: f64,
    /// Load average before and after.
    pub load: (String, String),
    /// Rounds done.
    pub rounds: usize,
    /// Runs that failed, with the reason.
    pub failures: Vec<String>,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Run the suite.
pub fn run(cfg: &Config, progress: bool) -> Result<Results, String> {
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("ntprofile-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let result = run_in(cfg, &dir, progress, started);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(cfg: &Config, dir: &Path, progress: bool, started: Instant) -> Result<Results, String> {
    let exe = build_workload(cfg, dir)?;
    let mut res = Results {
        load: (loadavg(), String::new()),
        ..Results::default()
    };
    let mut samplers = cfg.samplers.clone();
    if samplers.contains(&Sampler::Perf) && !perf_available(dir) {
        samplers.retain(|s| *s != Sampler::Perf);
        res.skipped
            .push((Sampler::Perf, "`perf record` does not run here".into()));
    }
    if samplers.contains(&Sampler::NtprofRecord) && cfg.ntprof.is_none() {
        samplers.retain(|s| *s != Sampler::NtprofRecord);
        res.skipped.push((
            Sampler::NtprofRecord,
            "no `ntprof` binary with `record` found".into(),
        ));
    }
    for round in 0..cfg.rounds {
        let runner = Runner {
            cfg,
            exe: exe.clone(),
            dir: dir.to_path_buf(),
            seed: 1 + round as u64,
        };
        for g in &cfg.groups {
            // Every configuration of the group once, in an order rotated by the round, between two unprofiled
            // runs that give the group its baseline for this round.
            let mut keys: Vec<Key> = Vec::new();
            for &s in &samplers {
                if s.fixed_rate() {
                    keys.push(Key {
                        threads: g.threads,
                        rate: 100,
                        sampler: s,
                    });
                } else {
                    for &rate in &g.rates {
                        keys.push(Key {
                            threads: g.threads,
                            rate,
                            sampler: s,
                        });
                    }
                }
            }
            let n = keys.len().max(1);
            keys.rotate_left(round * 7 % n);
            let before = runner.run(None, 100, g.threads)?;
            let mut done = Vec::new();
            for k in keys {
                // A peer that fails (glibc's samplers are not all thread-safe) is noted, not fatal.
                match runner.run(Some(k.sampler), k.rate, g.threads) {
                    Ok(r) => done.push((k, r)),
                    // Without the scratch directory's path: the report names nothing outside the repository.
                    Err(e) => res.failures.push(format!(
                        "round {}: {} at {} Hz, {} thread(s): {}",
                        round + 1,
                        k.sampler.name(),
                        k.rate,
                        k.threads,
                        e.replace(&format!("{}/", dir.display()), "")
                    )),
                }
            }
            let after = runner.run(None, 100, g.threads)?;
            for (k, r) in done {
                res.runs.entry(k).or_default().push(Measured {
                    run: r,
                    base_work: (before.work_ns + after.work_ns) / 2.0,
                    base_job: (before.job_ns + after.job_ns) / 2.0,
                });
            }
        }
        res.rounds = round + 1;
        if progress {
            eprintln!(
                "round {}/{} done ({:.0} s)",
                round + 1,
                cfg.rounds,
                started.elapsed().as_secs_f64()
            );
        }
    }
    res.load.1 = loadavg();
    res.seconds = started.elapsed().as_secs_f64();
    Ok(res)
}

/// Median, low and high of a set of values (NaNs dropped).
pub fn spread(v: impl IntoIterator<Item = f64>) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Some((m, v[0], v[v.len() - 1]))
}

fn fmt_spread(s: Option<(f64, f64, f64)>, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some((m, lo, hi)) if (hi - lo).abs() < 1e-9 => format!("{m:.digits$}"),
        Some((m, lo, hi)) => format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"),
    }
}

fn fmt_ns(s: Option<(f64, f64, f64)>) -> String {
    match s {
        None => "–".into(),
        Some((m, lo, hi)) => {
            let f = |x: f64| {
                if x.abs() >= 1e4 {
                    format!("{:.1} µs", x / 1e3)
                } else if x.abs() >= 1e3 {
                    format!("{:.2} µs", x / 1e3)
                } else {
                    format!("{x:.0} ns")
                }
            };
            format!("{} ({}–{})", f(m), f(lo), f(hi))
        }
    }
}

impl Results {
    /// Pooled attribution error of a configuration over its rounds: (pp, σ, samples in the hot functions).
    pub fn pooled_error(&self, k: &Key) -> Option<(f64, f64, f64)> {
        let runs = self.runs.get(k)?;
        let mut hot = [0.0; NFUNC];
        let mut truth = [0.0; NFUNC];
        for m in runs {
            for i in 0..NFUNC {
                hot[i] += m.run.hot[i];
                truth[i] += m.run.truth[i];
            }
        }
        let (pp, z) = attribution(&hot, &truth);
        Some((pp, z, hot.iter().sum()))
    }

    /// Per-round ratio of a cost of `a` to the same cost of `b` (same threads, rate, round).
    pub fn ratio(
        &self,
        a: &Key,
        b: &Key,
        cost: impl Fn(&Measured, Sampler) -> f64,
    ) -> Option<(f64, f64, f64)> {
        let (ra, rb) = (self.runs.get(a)?, self.runs.get(b)?);
        spread(
            ra.iter()
                .zip(rb)
                .map(|(x, y)| cost(x, a.sampler) / cost(y, b.sampler)),
        )
    }

    /// The Markdown tables.
    pub fn tables(&self) -> String {
        let mut s = String::new();
        let threads: Vec<u32> = {
            let mut t: Vec<u32> = self.runs.keys().map(|k| k.threads).collect();
            t.dedup();
            t
        };
        for t in threads {
            let _ = writeln!(
                s,
                "\n### {t} workload thread{}\n",
                if t == 1 { "" } else { "s" }
            );
            s.push_str(
                "| sampler | requested | rate achieved (Hz) | lost | thread cost / sample | consumer or recorder / sample | report / sample | whole job / sample | error pp (pooled; median per run) | error σ (pooled) | start | stop |\n\
                 |---|---|---|---|---|---|---|---|---|---|---|---|\n",
            );
            let mut keys: Vec<&Key> = self.runs.keys().filter(|k| k.threads == t).collect();
            keys.sort_by_key(|k| (k.rate, k.sampler));
            for k in keys {
                let runs = &self.runs[k];
                let lost = if runs.iter().any(|m| m.run.lost.is_none()) {
                    "cannot tell".to_string()
                } else {
                    fmt_spread(spread(runs.iter().filter_map(|m| m.run.lost)), 0)
                };
                let (pp, z, n) = self.pooled_error(k).unwrap_or((f64::NAN, f64::NAN, 0.0));
                let per_run = spread(runs.iter().map(|m| m.run.error_pp()));
                let inproc = matches!(k.sampler, Sampler::Ntprofile | Sampler::NtprofileTask);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} (N={:.0}); {} | {:.1} | {} | {} |",
                    k.sampler.name(),
                    if k.sampler.fixed_rate() {
                        "fixed".to_string()
                    } else {
                        k.rate.to_string()
                    },
                    fmt_spread(spread(runs.iter().map(Measured::rate)), 0),
                    lost,
                    fmt_ns(spread(runs.iter().map(Measured::thread_cost))),
                    if matches!(
                        k.sampler,
                        Sampler::Timer | Sampler::Profil | Sampler::Sprofil
                    ) {
                        "none".to_string()
                    } else if inproc {
                        format!(
                            "{}; {:.0} wake-ups",
                            fmt_ns(spread(runs.iter().map(|m| m.side_cost(k.sampler)))),
                            median_of(spread(runs.iter().map(|m| m.run.cons_switches)))
                        )
                    } else {
                        fmt_ns(spread(runs.iter().map(|m| m.side_cost(k.sampler))))
                    },
                    if k.sampler == Sampler::Perf {
                        fmt_ns(spread(runs.iter().map(Measured::report_cost)))
                    } else {
                        "–".into()
                    },
                    fmt_ns(spread(runs.iter().map(Measured::job_cost))),
                    pp,
                    n,
                    fmt_spread(per_run, 2),
                    z,
                    if inproc || k.sampler == Sampler::Timer {
                        fmt_ns(spread(runs.iter().map(|m| m.run.start_ns)))
                    } else {
                        "–".into()
                    },
                    if inproc {
                        fmt_ns(spread(runs.iter().map(|m| m.run.stop_ns)))
                    } else {
                        "–".into()
                    },
                );
            }
        }
        s
    }

    /// The ratio table against `perf record` at every rate both ran.
    pub fn ratios(&self) -> String {
        let mut s = String::from(
            "| threads | rate (Hz) | sampler | thread cost ÷ perf record's | whole job ÷ (perf record + perf report)'s |\n|---|---|---|---|---|\n",
        );
        let mut any = false;
        for k in self.runs.keys() {
            if !matches!(
                k.sampler,
                Sampler::Ntprofile | Sampler::NtprofileTask | Sampler::NtprofRecord
            ) {
                continue;
            }
            let p = Key {
                sampler: Sampler::Perf,
                ..*k
            };
            if !self.runs.contains_key(&p) {
                continue;
            }
            any = true;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                k.threads,
                k.rate,
                k.sampler.name(),
                fmt_spread(self.ratio(k, &p, |m, _| m.thread_cost()), 2),
                fmt_spread(self.ratio(k, &p, |m, _| m.job_cost()), 2),
            );
        }
        if any { s } else { String::new() }
    }
}

/// The highest rate without loss, every CPU busy: the workload on as many threads as CPUs for `seconds`, under
/// ntprofile (and `perf record`, when it runs here) at the kernel's maximum rate, halving the rate while samples
/// are lost. Returns Markdown.
pub fn loss_at_max(cfg: &Config, seconds: u64) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("ntprofile-suite-loss-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let exe = build_workload(cfg, &dir)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100_000);
    let mut s = format!(
        "{cpus} workload threads (one per CPU) for {seconds} s of wall time each, ntprofile in-process \
         (`ProfileTime`), starting at the kernel's maximum ({max} Hz) and halving while samples are lost:\n\n\
         | requested (Hz) | rate achieved per CPU-second (Hz) | samples | lost | throttle events | CPU busy |\n|---|---|---|---|---|---|\n"
    );
    let runner = Runner {
        cfg,
        exe,
        dir: dir.clone(),
        seed: 99,
    };
    let mut rate = max;
    let mut verdict = String::new();
    for _ in 0..5 {
        let args = runner.workload_args("ntprofile", rate, cpus);
        let mut args = args;
        args[3] = format!("{seconds}s");
        let out = output(Command::new(&runner.exe).args(&args))?;
        let r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
        let samples = r.samples.unwrap_or(0.0);
        let lost = r.lost.unwrap_or(0.0);
        let busy = r.work_ns / (seconds as f64 * 1e9 * f64::from(cpus)) * 100.0;
        let _ = writeln!(
            s,
            "| {rate} | {:.0} | {samples:.0} | {lost:.0} | {:.0} | {busy:.0} % |",
            samples / (r.work_ns / 1e9),
            r.throttled.unwrap_or(0.0)
        );
        if lost == 0.0 {
            verdict = format!(
                "\nHighest rate with zero lost samples: **{rate} Hz requested, {:.0} Hz achieved per CPU-second**, \
                 {} throttle events.\n",
                samples / (r.work_ns / 1e9),
                r.throttled.unwrap_or(0.0)
            );
            break;
        }
        rate /= 2;
    }
    s.push_str(&verdict);
    // The consumer in a long run at 10 kHz and at the maximum, every CPU busy: its CPU per sample once the
    // per-run work (thread start, control messages) is spread over many samples.
    let _ = writeln!(
        s,
        "\nThe consumer over the same {seconds}-s runs, {cpus} threads (its wake-ups are timed, about 10 a second \
         of wall time, so its CPU per sample falls as the sampled threads get more of the CPUs):\n\n\
         | requested (Hz) | samples | consumer CPU / sample | consumer wake-ups | per wake-up |\n|---|---|---|---|---|"
    );
    for rate in [10_000, max] {
        let mut args = runner.workload_args("ntprofile", rate, cpus);
        args[3] = format!("{seconds}s");
        let out = output(Command::new(&runner.exe).args(&args))?;
        let r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
        let samples = r.samples.unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {rate} | {samples:.0} | {:.0} ns | {:.0} | {:.1} µs |",
            r.cons_ns / samples.max(1.0),
            r.cons_switches,
            r.cons_ns / r.cons_switches.max(1.0) / 1e3
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(s)
}

/// Start and stop latency of ntprofile in-process with `threads` threads alive (each measured by the workload
/// around `NtStartProfile` / `NtStopProfile`, the stop with its drain). Returns Markdown.
pub fn latency(cfg: &Config, threads: &[u32], rounds: usize) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("ntprofile-suite-lat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let exe = build_workload(cfg, &dir)?;
    let mut s = String::from(
        "ntprofile in-process at 1 kHz; the workload's threads are all alive (blocked) across the starts and \
         stops. Each run is a fresh process: the first start includes the library's first-use work (the consumer \
         thread, the source probe); the second start and stop are of the same profile in the same process. Wall \
         time, so on a loaded machine it includes waiting for a CPU (the stop waits for the consumer's ack). \
         Median (min–max) over the rounds:\n\n\
         | threads | first start (NtStartProfile) | stop (NtStopProfile, with the drain) | second start | second stop |\n|---|---|---|---|---|\n",
    );
    let mut rows: BTreeMap<u32, [Vec<f64>; 4]> = BTreeMap::new();
    for round in 0..rounds {
        for &t in threads {
            let runner = Runner {
                cfg,
                exe: exe.clone(),
                dir: dir.clone(),
                seed: round as u64 + 1,
            };
            let mut args = runner.workload_args("ntprofile", 1000, t);
            args[3] = (u64::from(t) * 200_000).to_string();
            let out = output(Command::new(&runner.exe).args(&args))?;
            let r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
            let e = rows.entry(t).or_default();
            e[0].push(r.start_ns);
            e[1].push(r.stop_ns);
            e[2].push(r.start2_ns);
            e[3].push(r.stop2_ns);
        }
    }
    for (t, [start, stop, start2, stop2]) in rows {
        let _ = writeln!(
            s,
            "| {t} | {} | {} | {} | {} |",
            fmt_ns(spread(start)),
            fmt_ns(spread(stop)),
            fmt_ns(spread(start2)),
            fmt_ns(spread(stop2))
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(s)
}

/// The replay configurations: (profiles, overlapping).
pub const REPLAY_CASES: [(usize, bool); 5] = [
    (1, true),
    (10, true),
    (10, false),
    (1000, true),
    (1000, false),
];

/// The replay's profile ranges (shared with `benches/replay.rs`).
#[path = "replay_ranges.rs"]
mod replay_ranges;
pub use replay_ranges::replay_ranges;

#[inline(never)]
fn replay_spin(n: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..n {
        x = x.rotate_left(5) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x = std::hint::black_box(x);
    }
    x
}

/// Record about `samples` real samples of this thread (every 20 µs of CPU); synthetic IPs over a 256-byte
/// function when perf events are unavailable. Returns the IPs.
pub fn record_ips(samples: u64) -> (Vec<u64>, bool) {
    use ntprofile::engine::replay::Recording;
    let pages = ((samples * 16).div_ceil(4096) * 2).next_power_of_two() as usize;
    let mut ips = Vec::new();
    let mut real = false;
    for _ in 0..20 {
        let Ok(rec) = Recording::record(20_000, pages, || {
            std::hint::black_box(replay_spin(20_000_000));
        }) else {
            break;
        };
        real = true;
        ips.extend(rec.ips());
        if ips.len() as u64 >= samples {
            break;
        }
    }
    // Keep the samples of the spinning function's neighbourhood (a few land in the C library or the loader: a
    // range over them all would span gigabytes).
    let f = replay_spin as *const () as u64;
    ips.retain(|&ip| ip.wrapping_sub(f) < 4096);
    if ips.is_empty() {
        real = false;
        ips = (0..samples).map(|i| f + (i * 4) % 256).collect();
    }
    ips.truncate(samples as usize);
    (ips, real)
}

/// Child mode of the suite binary under callgrind: replay `ips` through `n` profiles `repeats` times.
pub fn replay_child(ips_file: &Path, n: usize, overlapping: bool, repeats: u32) {
    use ntprofile::engine::replay::{Recording, Replay};
    let text = std::fs::read_to_string(ips_file).expect("ips file");
    let ips: Vec<u64> = text
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let rec = Recording::from_ips(&ips);
    let mut r = Replay::new(&rec, &replay_ranges(&ips, n, overlapping)).expect("replay");
    let mut total = 0;
    for _ in 0..repeats {
        total += r.run();
    }
    assert_eq!(total, ips.len() as u64 * u64::from(repeats));
}

fn callgrind_ir(exe: &Path, args: &[String], dir: &Path) -> Option<f64> {
    let mut file = std::ffi::OsString::from("--callgrind-out-file=");
    file.push(dir.join("callgrind.out"));
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(file)
        .arg(exe)
        .args(args)
        .output()
        .ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!(
            "callgrind {args:?}: {}\n{}",
            out.status,
            err.lines().rev().take(12).collect::<Vec<_>>().join("\n")
        );
        return None;
    }
    err.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
}

/// ns per sample (timed in-process, median of rounds) and instructions per sample (callgrind: the difference
/// between 3 and 1 replays of the recording, so that setup cancels) for every replay case. Returns Markdown.
pub fn replay_section(samples: u64) -> String {
    use ntprofile::engine::replay::{Recording, Replay};
    let (ips, real) = record_ips(samples);
    let dir = std::env::temp_dir().join(format!("ntprofile-suite-replay-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let ips_file = dir.join("ips.txt");
    let _ = std::fs::write(
        &ips_file,
        ips.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let exe = std::env::current_exe().ok();
    let have_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut s = format!(
        "{} samples {}, fed through the consumer's drain (decode → match → increment, statistics) by the \
         unstable replay entry point (`ntprofile::engine::replay`). Time: median (min–max) of 15 timed replays \
         in this process; instructions: `valgrind --tool=callgrind`, (3 replays − 1 replay) ÷ 2 ÷ samples.\n\n\
         | started profiles | ranges | ns / sample | instructions / sample |\n|---|---|---|---|\n",
        ips.len(),
        if real {
            "recorded from a real ring (cpu-clock, one every 20 µs of a spinning thread)"
        } else {
            "synthesized (perf events unavailable)"
        }
    );
    let rec = Recording::from_ips(&ips);
    for (n, overlapping) in REPLAY_CASES {
        let mut r = Replay::new(&rec, &replay_ranges(&ips, n, overlapping)).expect("replay");
        let reps = if n >= 1000 && overlapping { 3 } else { 15 };
        let times: Vec<f64> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(r.run());
                t.elapsed().as_nanos() as f64 / ips.len() as f64
            })
            .collect();
        let instr = match (&exe, have_valgrind) {
            (Some(exe), true) => {
                let a = |reps: u32| {
                    vec![
                        "--replay-child".to_string(),
                        ips_file.to_string_lossy().into_owned(),
                        n.to_string(),
                        overlapping.to_string(),
                        reps.to_string(),
                    ]
                };
                match (
                    callgrind_ir(exe, &a(1), &dir),
                    callgrind_ir(exe, &a(3), &dir),
                ) {
                    (Some(one), Some(three)) => {
                        format!("{:.1}", (three - one) / 2.0 / ips.len() as f64)
                    }
                    _ => "callgrind failed".into(),
                }
            }
            _ => "valgrind not installed".into(),
        };
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {instr} |",
            if overlapping {
                "overlapping"
            } else {
                "disjoint"
            },
            fmt_ns(spread(times))
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    s
}

fn median_of(v: Option<(f64, f64, f64)>) -> f64 {
    v.map_or(f64::NAN, |x| x.0)
}

/// The checks of the suite's targets, computed from the results (Markdown bullet list).
pub fn checks(res: &Results) -> String {
    let mut s = String::new();
    let key = |threads, rate, sampler| Key {
        threads,
        rate,
        sampler,
    };
    let mark = |ok: bool| if ok { "met" } else { "**not met**" };
    for t in [1u32, 2, 8] {
        let ntp = key(t, 10_000, Sampler::Ntprofile);
        let perf = key(t, 10_000, Sampler::Perf);
        if res.runs.contains_key(&ntp) && res.runs.contains_key(&perf) {
            let thread = res.ratio(&ntp, &perf, |m, _| m.thread_cost());
            let job = res.ratio(&ntp, &perf, |m, _| m.job_cost());
            let _ = writeln!(
                s,
                "- 10 kHz, {t} thread(s): thread cost ntprofile ÷ perf record = {} (target ≤ 0.90: {}); whole job \
                 ÷ (perf record + report) = {} (target ≤ 0.33: {})",
                fmt_spread(thread, 2),
                mark(median_of(thread) <= 0.90),
                fmt_spread(job, 2),
                mark(median_of(job) <= 0.33)
            );
            let rec = key(t, 10_000, Sampler::NtprofRecord);
            if res.runs.contains_key(&rec) {
                let job = res.ratio(&rec, &perf, |m, _| m.job_cost());
                let _ = writeln!(
                    s,
                    "- 10 kHz, {t} thread(s): whole job ntprof record ÷ (perf record + report) = {} (target ≤ 0.40: {})",
                    fmt_spread(job, 2),
                    mark(median_of(job) <= 0.40)
                );
            }
            let task = key(t, 10_000, Sampler::NtprofileTask);
            if res.runs.contains_key(&task) {
                let r = res.ratio(&task, &ntp, |m, _| m.thread_cost());
                let _ = writeln!(
                    s,
                    "- 10 kHz, {t} thread(s): thread cost task-clock ÷ cpu-clock (both ntprofile) = {}",
                    fmt_spread(r, 2)
                );
            }
            let consumer = spread(
                res.runs[&ntp]
                    .iter()
                    .map(|m| m.side_cost(Sampler::Ntprofile)),
            );
            let _ = writeln!(
                s,
                "- 10 kHz, {t} thread(s): consumer per sample, all its CPU time ÷ samples = {} with {:.0} wake-ups \
                 per run (target ≤ 100 ns: {})",
                fmt_ns(consumer),
                median_of(spread(res.runs[&ntp].iter().map(|m| m.run.cons_switches))),
                mark(median_of(consumer) <= 100.0)
            );
            let slow = key(t, 100, Sampler::Ntprofile);
            if let Some(low) = res.runs.get(&slow) {
                // Same round, same run length: what the 10 kHz run's consumer spent beyond the 100 Hz run's
                // (thread start, control messages and timed wake-ups are the same in both), per extra sample.
                let marginal = spread(res.runs[&ntp].iter().zip(low).map(|(h, l)| {
                    (h.run.cons_ns - l.run.cons_ns) / (h.run.sample_count() - l.run.sample_count())
                }));
                let _ = writeln!(
                    s,
                    "- 10 kHz, {t} thread(s): consumer's marginal cost per sample (10 kHz run − 100 Hz run of the \
                     same round) = {}",
                    fmt_ns(marginal)
                );
            }
        }
    }
    // Attribution within 2 σ at every rate (ntprofile), and against profil()/sprofil() at equal run time.
    let mut worst: Option<(f64, Key)> = None;
    for k in res.runs.keys().filter(|k| k.sampler == Sampler::Ntprofile) {
        if let Some((_, z, _)) = res.pooled_error(k)
            && worst.is_none_or(|(w, _)| z > w)
        {
            worst = Some((z, *k));
        }
    }
    if let Some((z, k)) = worst {
        let _ = writeln!(
            s,
            "- attribution, ntprofile: largest pooled error {z:.1} σ (at {} Hz, {} thread(s)) (target ≤ 2 σ at every \
             rate: {})",
            k.rate,
            k.threads,
            mark(z <= 2.0)
        );
    }
    for t in [1u32, 2, 8] {
        let at = |rate, sampler| {
            res.runs
                .get(&key(t, rate, sampler))
                .map(|r| median_of(spread(r.iter().map(|m| m.run.error_pp()))))
        };
        if let (Some(n100), Some(n10k), Some(p), Some(sp)) = (
            at(100, Sampler::Ntprofile),
            at(10_000, Sampler::Ntprofile),
            at(100, Sampler::Profil),
            at(100, Sampler::Sprofil),
        ) {
            let _ = writeln!(
                s,
                "- attribution at equal run time, {t} thread(s), median per-run error: ntprofile {n10k:.2} pp at 10 kHz \
                 ({n100:.2} pp at 100 Hz) against profil() {p:.2} pp and sprofil() {sp:.2} pp at their 100 Hz \
                 (smaller: {})",
                mark(n10k < p && n10k < sp)
            );
        }
    }
    s
}

/// `BENCHMARKS.md`.
pub fn document(
    cfg: &Config,
    res: &Results,
    machine: &str,
    loss: &str,
    latency: &str,
    replay: &str,
) -> String {
    let mut s = String::from(
        "# Benchmarks\n\nGenerated by `cargo bench --bench suite` (the `--quick` variant writes the same tables from \
         fewer rounds); do not edit by hand. How each figure is measured is described in the README's \
         \"Benchmarks\" section and in `benches/suite/harness.rs`.\n\n## Machine\n\n",
    );
    s.push_str(machine);
    let _ = writeln!(
        s,
        "- load average (1, 5, 15 min) at the start: {}; at the end: {} — the machine was shared, so absolute \
         times are noisy; ratios are taken within each round and instruction counts do not depend on load\n\
         - run: {} ({} rounds, {} workload iterations per run, configurations interleaved in an order rotated each \
         round, each group of runs between two unprofiled runs that give the round its baseline); {:.0} s",
        res.load.0, res.load.1, cfg.label, res.rounds, cfg.iters, res.seconds
    );
    for (sm, why) in &res.skipped {
        let _ = writeln!(s, "- not measured: {} — {why}", sm.name());
    }
    for f in &res.failures {
        let _ = writeln!(s, "- failed run (left out of the figures): {f}");
    }
    s.push_str("\n## Targets\n\n");
    s.push_str(&checks(res));
    s.push_str(
        "\n## Every sampler at equal rates\n\nMedian (min–max) over the rounds. *Thread cost*: extra CPU of the \
         workload threads per sample. *Consumer or recorder*: ntprofile's consumer thread, or `perf record`'s own \
         process (its report apart). *Whole job*: extra CPU of everything the configuration ran, per sample. \
         *Error*: the largest difference between a hot function's share of samples and its share of the work, \
         pooled over the rounds (pp, and in binomial σ with N the pooled samples in the hot functions), and the \
         median of the per-run errors. glibc's `profil()` and `sprofil()` run at their fixed rate (the 100 Hz \
         clock tick glibc reports) and cannot tell lost samples or samples outside their ranges (their cost is \
         divided by the samples in the hot functions, which hold over 99.8 % of the CPU time). The SIGPROF timer's \
         lost samples are its overruns: POSIX CPU-time timers expire on the scheduler tick, which caps its rate.\n",
    );
    s.push_str(&res.tables());
    let ratios = res.ratios();
    if !ratios.is_empty() {
        s.push_str("\n## Ratios against perf record (per round, same rate and threads)\n\n");
        s.push_str(&ratios);
    }
    s.push_str("\n## Highest rate without loss\n\n");
    s.push_str(loss);
    s.push_str("\n## Start and stop latency\n\n");
    s.push_str(latency);
    s.push_str("\n## The consumer's hot path, replayed\n\n");
    s.push_str(replay);
    s.push_str(LIMITS);
    s
}

/// What limits each figure (the reasoning behind the tables above).
const LIMITS: &str = "
## What limits each figure

- **Cost on the profiled threads.** Every `cpu-clock` or `task-clock` sample is an hrtimer interrupt on the
  sampled thread's CPU and the re-arming of that timer; in a virtual machine both are VM exits. That path is the
  kernel's, the same for ntprofile and `perf record`, so the ratio between them stays near 1: the bytes written
  per sample (16 for ntprofile's IP-only records, more for perf's IP, TID, time and period) are a small part of
  it. The rows at the kernel's maximum rate, where sampling is most of the CPU time, measure it best; at 10 kHz
  the extra CPU is a few per cent of a run and the rounds' spread shows the machine's noise. `task-clock`
  samples through the same hrtimer code as `cpu-clock` (only how the count advances differs), so it costs the
  same within the noise (the ratio rows above): switching `ProfileTime` to it would buy nothing measurable
  here (on the per-CPU streams of system-wide profiles it would measure the same thing as `cpu-clock`). Getting under the kernel's timer path needs a different source:
  a hardware PMU's overflow interrupt (no timer to re-arm; none on this machine), or fewer samples. POSIX
  CPU-time timers and glibc's `profil()`/`sprofil()` are cheaper per sample only because they cannot go fast:
  they expire on the scheduler tick (the timer's achieved rate and overruns above show the tick rate).
- **The consumer.** Its CPU is nearly all timed wake-ups (about 10 a second of wall time while samples flow,
  tens of microseconds each on this VM, see the long runs) plus the replayed per-sample cost (nanoseconds). Per
  sample it is below 100 ns when the sampled threads run for most of the wall time; on a loaded machine, where
  they get a fraction of a CPU, the same wake-ups are spread over fewer samples. Fewer wake-ups would need a
  longer cadence (counts in the caller's buffer later than 100 ms) or wake-ups left to the ring's watermark alone.
- **Lost samples.** Each CPU's ring is 256 KiB (16,384 IP-only samples); at the kernel's maximum rate the
  consumer drains it at least every 20 ms (2,000 samples), and the watermark wakes it at a quarter full. The
  rate is limited first by the kernel: `kernel.perf_event_max_sample_rate`, `cpu-clock`'s 10 µs hrtimer floor,
  and its throttling when sampling takes more than `kernel.perf_cpu_time_max_percent` of a CPU.
- **Attribution error.** Binomial: it shrinks as 1/√N with the samples taken, so at equal run time a sampler
  that reaches 10 kHz is ten times as precise as one held to 100 Hz. glibc's `sprofil()` also updates its
  counters from a signal handler that is not safe against two threads at once.
- **Start and stop.** A start opens one event per thread and CPU (with `inherit` for threads created later),
  maps one ring per CPU and redirects the other events to it; it grows with the threads. A stop disables,
  drains and acknowledges through the consumer thread, so on a loaded machine it includes waiting for that
  thread to be scheduled.
- **Whole job.** `perf record` starts by reading the system's symbols and mappings and `perf report` parses
  everything recorded: a large fixed cost that dominates short runs, plus several microseconds per sample.
  ntprofile's whole job is the profiled threads' cost plus the consumer's; `ntprof record` adds symbolization
  once per run.
";

/// The directory holding the `libntprofile.so` of this build: `NTPROFILE_LIB_DIR`, else the `deps/` folder the
/// running binary is in (cargo builds every crate type of the library for a bench or an integration test), else
/// its parent. `None` when neither holds it.
pub fn built_lib_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("NTPROFILE_LIB_DIR") {
        return Some(PathBuf::from(d));
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("directory").to_path_buf();
    [deps.clone(), deps.parent().unwrap_or(&deps).to_path_buf()]
        .into_iter()
        .find(|d| d.join("libntprofile.so").is_file())
}
