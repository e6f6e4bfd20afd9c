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
//!
//! Where each part lives: this file holds what is run and what comes out (samplers, configurations, one run's
//! figures, the results); `runners` runs the workload under each peer and parses what each reports; `rounds`
//! the interleaved rounds of the comparison; `sections` the highest rate without loss and the start and stop
//! latency; `replay` the consumer's hot path replayed (time and instructions); `stats` medians, spreads and
//! ratios; `tables` the comparison's Markdown tables; `document` the targets' checks and `BENCHMARKS.md`.

mod document;
mod replay;
mod rounds;
mod runners;
mod sections;
mod stats;
mod tables;

use std::collections::BTreeMap;
use std::path::PathBuf;

// The harness's entry points: the bench binary (`main.rs`) and the smoke test (`tests/bench_smoke.rs`) each use
// a part of them.
#[allow(unused_imports)]
pub use document::{checks, document, keep_recorder_section};
#[allow(unused_imports)]
pub use replay::{REPLAY_CASES, record_ips, replay_child, replay_ranges, replay_section};
#[allow(unused_imports)]
pub use rounds::run;
#[allow(unused_imports)]
pub use runners::{build_workload, perf_available};
#[allow(unused_imports)]
pub use sections::{latency, loss_at_max};
#[allow(unused_imports)]
pub use stats::spread;

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
    pub(crate) fn mode(self) -> &'static str {
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
    pub(crate) fn fixed_rate(self) -> bool {
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
