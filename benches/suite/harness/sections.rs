//! The sections measured apart from the comparison: the highest rate without loss with every CPU busy, the
//! consumer over long runs, and the start and stop latency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;

use super::Config;
use super::runners::{Runner, build_workload, output, parse_workload};
use super::stats::{fmt_ns, spread};

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
