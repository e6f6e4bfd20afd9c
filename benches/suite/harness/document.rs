//! The `BENCHMARKS.md` writer: the targets' checks computed from the results, the document around the sections,
//! and what limits each figure.

use std::fmt::Write as _;

use super::stats::{fmt_ns, fmt_spread, median_of, spread};
use super::{Config, Key, Results, Sampler};

/// The checks of the suite's targets, computed from the results (Markdown bullet list).
pub fn checks(res: &Results) -> String {
    let mut s = String::new();
    for t in [1u32, 2, 8] {
        cost_checks(res, t, &mut s);
    }
    attribution_checks(res, &mut s);
    s
}

fn key(threads: u32, rate: u64, sampler: Sampler) -> Key {
    Key {
        threads,
        rate,
        sampler,
    }
}

fn mark(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The cost targets at 10 kHz with `t` threads (against `perf record`, and the consumer's cost per sample), when
/// both ntprofile and `perf record` ran there.
fn cost_checks(res: &Results, t: u32, s: &mut String) {
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

/// Attribution within 2 σ at every rate (ntprofile), and against profil()/sprofil() at equal run time.
fn attribution_checks(res: &Results, s: &mut String) {
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
         \"Benchmarks\" section and in `benches/suite/harness/`.\n\n## Machine\n\n",
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

/// The line that opens the section another benchmark (the `ntprof` recorder's) writes into `BENCHMARKS.md`.
pub const RECORDER_BEGIN: &str = "<!-- recorder:begin -->";
/// The line that closes it.
pub const RECORDER_END: &str = "<!-- recorder:end -->";
/// The sections other benchmarks write into `BENCHMARKS.md`, each between its two marker lines: the recorder's
/// (`cargo bench --bench recorder`) and the call stacks' (`cargo bench --bench stacks`).
pub const KEPT_SECTIONS: &[(&str, &str)] = &[
    (RECORDER_BEGIN, RECORDER_END),
    ("<!-- stacks:begin -->", "<!-- stacks:end -->"),
    // Written by hand from `examples/many_threads.rs` and `examples/consumer_rate.rs` runs.
    ("<!-- many-threads:begin -->", "<!-- many-threads:end -->"),
];

/// `new`, the regenerated `BENCHMARKS.md`, with the other benchmarks' sections of `old` (the file it replaces)
/// kept: for each pair of [`KEPT_SECTIONS`], the lines from its begin marker to its end marker, both included,
/// appended after a blank line, in that order. This suite does not measure those sections and must not erase
/// them. A section without both markers, in order, is not in `old`, and nothing is appended for it.
pub fn keep_recorder_section(old: &str, new: String) -> String {
    let lines: Vec<&str> = old.lines().collect();
    let mut out = new;
    for (open, close) in KEPT_SECTIONS {
        let Some(begin) = lines.iter().position(|l| l.trim() == *open) else {
            continue;
        };
        let Some(end) = lines[begin..].iter().position(|l| l.trim() == *close) else {
            continue;
        };
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
        for line in &lines[begin..=begin + end] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
