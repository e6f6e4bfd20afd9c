//! `ntprof demo`: profile the bundled workload over ntprof's own text and report by function.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ntprofile::{
    IntervalUnit, NtStatus, Profile, ProfileSource, ProfileStats, query_interval, set_interval,
};

use crate::args::DemoOptions;
use crate::sources::unit_name;
use crate::symbols::{Function, Symbolizer, executable_mapping_containing};
use crate::workload::{self, WorkerReport};

/// A status with a hint for the statuses a first run is likely to meet.
fn explain(call: &str, err: ntprofile::Error) -> String {
    let status = err.status();
    let hint = match status {
        NtStatus::PRIVILEGE_NOT_HELD => {
            "\n  perf_event_open was refused: profiling your own process needs\n  \
             /proc/sys/kernel/perf_event_paranoid <= 2, and no seccomp filter blocking perf_event_open"
        }
        NtStatus::NOT_SUPPORTED => "\n  the source cannot be sampled here: see 'ntprof sources'",
        NtStatus::INSUFFICIENT_RESOURCES => {
            "\n  out of descriptors or perf ring memory \
             (see /proc/sys/kernel/perf_event_mlock_kb and ulimit -l)"
        }
        _ => "",
    };
    format!("{call} failed: {err}{hint}")
}

/// Describe an interval value of `source`.
fn describe_interval(source: ProfileSource, interval: u32) -> String {
    match source.interval_unit() {
        IntervalUnit::Time100ns => {
            format!(
                "{interval} x 100 ns = {:.3} ms",
                f64::from(interval) / 10_000.0
            )
        }
        IntervalUnit::Events => format!("{interval} {} between samples", unit_name(source)),
    }
}

/// What the workload run produced.
struct Run {
    wall: Duration,
    workers: [WorkerReport; 2],
}

/// Start the profile, run the workload on two threads (one created before the start, one after), stop.
fn run_workload(profile: &Profile, unit: u64, seconds: f64) -> Result<Run, String> {
    // Thread 1 exists before the profile starts: it waits for its deadline.
    let (tx, rx) = mpsc::channel::<Instant>();
    let early = thread::Builder::new()
        .name("demo-early".into())
        .spawn(move || match rx.recv() {
            Ok(deadline) => workload::work(unit, deadline, 0x2545_F491_4F6C_DD1D),
            Err(_) => WorkerReport::default(),
        })
        .map_err(|e| format!("cannot create a worker thread: {e}"))?;

    if let Err(status) = profile.start() {
        drop(tx);
        let _ = early.join();
        return Err(explain("NtStartProfile", status));
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(seconds);
    let _ = tx.send(deadline);
    // Thread 2 is created after the start: the profile must follow it too.
    let late = thread::Builder::new()
        .name("demo-late".into())
        .spawn(move || workload::work(unit, deadline, 0x9E37_79B9_7F4A_7C15))
        .map_err(|e| format!("cannot create a worker thread: {e}"));
    let late_report = late.map(|h| h.join());
    let early_report = early.join();
    let wall = t0.elapsed();
    profile.stop().map_err(|s| explain("NtStopProfile", s))?;
    let early_report = early_report.map_err(|_| "the early worker thread panicked".to_string())?;
    let late_report = late_report?.map_err(|_| "the late worker thread panicked".to_string())?;
    Ok(Run {
        wall,
        workers: [early_report, late_report],
    })
}

/// Samples of one function.
struct Row {
    function: Function,
    samples: u64,
    designed: Option<f64>,
}

/// Aggregate the nonzero buckets by function. A bucket is symbolized at its start address, so a bucket that
/// straddles two functions counts for the first.
fn aggregate(profile: &Profile, counts: &[u32], sym: &Symbolizer) -> Vec<Row> {
    let designed: HashMap<u64, f64> = workload::designed()
        .iter()
        .filter_map(|d| Some((sym.file_address(d.addr as u64)?, d.share)))
        .collect();
    let mut by_function: HashMap<Function, u64> = HashMap::new();
    for (index, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let (start, _end) = profile.bucket_range(index);
        *by_function.entry(sym.function(start)).or_default() += u64::from(count);
    }
    let mut rows: Vec<Row> = by_function
        .into_iter()
        .map(|(function, samples)| {
            let designed = function.start.and_then(|s| designed.get(&s).copied());
            Row {
                function,
                samples,
                designed,
            }
        })
        .collect();
    // Every demo function appears, even with no sample.
    for d in workload::designed() {
        let start = sym.file_address(d.addr as u64);
        if !rows
            .iter()
            .any(|r| r.function.start.is_some() && r.function.start == start)
        {
            let function = sym.function(d.addr as u64);
            rows.push(Row {
                function,
                samples: 0,
                designed: Some(d.share),
            });
        }
    }
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.function.name.cmp(&b.function.name))
    });
    rows
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Run the demo. `emit` receives the report piece by piece (the header before the workload runs).
pub fn run(opts: &DemoOptions, emit: &mut dyn FnMut(&str)) -> Result<(), String> {
    let source = opts.source;
    let support = source.support();
    if !support.is_supported() {
        return Err(format!(
            "source {} ({:#x}) cannot be sampled here: {}",
            source.name(),
            source.to_raw(),
            support.reason()
        ));
    }

    let anchor = workload::designed()[0].addr as u64;
    let mapping = executable_mapping_containing(anchor)?;
    let sym = Symbolizer::new(mapping)?;
    let mapping = sym.mapping().clone();

    let requested = opts.interval;
    if let Some(i) = requested {
        set_interval(source, i);
    }
    let interval = query_interval(source);

    let profile = Profile::builder()
        .range(mapping.start as usize, mapping.size() as usize)
        .bucket_size(opts.bucket)
        .source(source)
        .build()
        .map_err(|s| explain("NtCreateProfile", s))?;
    let layout = profile.layout();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "ntprof demo: 2 threads (one created before NtStartProfile, one after), {} s",
        opts.seconds
    );
    let _ = writeln!(
        out,
        "  range     {:#x}-{:#x} ({} bytes, {} at file offset {:#x} of {})",
        layout.base,
        layout.end(),
        layout.size,
        mapping.perms,
        mapping.offset,
        if mapping.path.is_empty() {
            "?"
        } else {
            &mapping.path
        }
    );
    let _ = writeln!(
        out,
        "  buckets   {} bytes (BucketSize {}), {} counters",
        1u64 << layout.bucket_size,
        layout.bucket_size,
        layout.counters_needed
    );
    let perf_name = source.perf_event().map_or("-", |e| e.name);
    let _ = write!(
        out,
        "  source    {} ({:#x}, perf {}), interval {}",
        source.name(),
        source.to_raw(),
        perf_name,
        describe_interval(source, interval)
    );
    match requested {
        Some(r) if r != interval => {
            let _ = writeln!(
                out,
                " (requested {r}, clamped into [{}, {}])",
                source.min_interval(),
                source.limits().max
            );
        }
        _ => out.push('\n'),
    }
    emit(&out);

    let unit = workload::calibrate();
    let run = run_workload(&profile, unit, opts.seconds)?;
    let counts = profile.counts();
    let stats: ProfileStats = profile.stats();
    let rows = aggregate(&profile, &counts, &sym);

    let mut out = String::new();
    let bucket_sum: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let total = stats.counted.max(bucket_sum);
    let _ = writeln!(
        out,
        "\n  {:>8} {:>8} {:>9}  function",
        "samples", "percent", "designed"
    );
    for row in rows.iter().take(opts.top) {
        let designed = row.designed.map_or(String::new(), |d| format!("{d:.1}%"));
        let _ = writeln!(
            out,
            "  {:>8} {:>7.2}% {:>9}  {}",
            row.samples,
            percent(row.samples, total),
            designed,
            row.function.name
        );
    }
    if rows.len() > opts.top {
        let rest: u64 = rows.iter().skip(opts.top).map(|r| r.samples).sum();
        let _ = writeln!(
            out,
            "  {:>8} {:>7.2}% {:>9}  ({} more functions; --top to show them)",
            rest,
            percent(rest, total),
            "",
            rows.len() - opts.top
        );
    }

    let _ = writeln!(
        out,
        "\n  statistics  counted {}, outside {}, lost {}, throttled {}",
        stats.counted, stats.outside, stats.lost, stats.throttled
    );
    if bucket_sum != stats.counted {
        let _ = writeln!(
            out,
            "  WARNING     the buckets add up to {bucket_sum}, the statistics say {} counted",
            stats.counted
        );
    }
    // The timer samples CPU time: what the workers ran predicts the number of samples.
    let cpu: Option<f64> = run
        .workers
        .iter()
        .map(|w| w.cpu.map(|c| c.as_secs_f64()))
        .sum();
    if source.interval_unit() == IntervalUnit::Time100ns && interval > 0 {
        let per_second = 10_000_000.0 / f64::from(interval);
        let _ = match cpu {
            Some(cpu) => writeln!(
                out,
                "  expected    about {:.0} samples in the demo functions \
                 (the workers ran {cpu:.2} s of CPU time)",
                cpu * per_second
            ),
            None => {
                let wall: f64 = run.workers.iter().map(|w| w.elapsed.as_secs_f64()).sum();
                writeln!(
                    out,
                    "  expected    at most about {:.0} samples in the demo functions \
                     ({wall:.2} thread-seconds of wall time)",
                    wall * per_second
                )
            }
        };
    }
    let demo_samples: u64 = rows
        .iter()
        .filter(|r| r.designed.is_some())
        .map(|r| r.samples)
        .sum();
    let deviation = rows
        .iter()
        .filter_map(|r| r.designed.map(|d| (percent(r.samples, total) - d).abs()))
        .fold(0.0f64, f64::max);
    let _ = writeln!(
        out,
        "  demo        demo_alpha + demo_beta + demo_gamma: {:.1}% of the counted samples\n  \
         deviation   largest distance from a designed share: {deviation:.1} points",
        percent(demo_samples, total)
    );
    let _ = writeln!(
        out,
        "  workers     early thread {} rounds, late thread {} rounds; wall time {:.2} s",
        run.workers[0].rounds,
        run.workers[1].rounds,
        run.wall.as_secs_f64()
    );
    if source.interval_unit() != IntervalUnit::Time100ns {
        let _ = writeln!(
            out,
            "  note        the designed shares are shares of CPU time; {} counts events",
            source.name()
        );
    }
    let _ = writeln!(
        out,
        "  note        percent = share of the counted samples; a bucket that straddles two\n  \
         {:10}  functions is counted for the function at its start address",
        ""
    );
    emit(&out);
    Ok(())
}
