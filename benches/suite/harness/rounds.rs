//! The comparison: every sampler at every rate, once per round in an order rotated each round, each group of
//! runs between two unprofiled runs that give the round its baseline.

use std::path::Path;
use std::time::Instant;

use super::runners::{Runner, build_workload, perf_available};
use super::{Config, Group, Key, Measured, Results, Sampler};

pub(super) fn loadavg() -> String {
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

pub(super) fn run_in(
    cfg: &Config,
    dir: &Path,
    progress: bool,
    started: Instant,
) -> Result<Results, String> {
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
            run_group(&runner, g, &samplers, round, &mut res)?;
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

/// One group of one round: every configuration of the group once, in an order rotated by the round, between two
/// unprofiled runs that give the group its baseline for this round. A peer's failed run is noted in `res`.
fn run_group(
    runner: &Runner<'_>,
    g: &Group,
    samplers: &[Sampler],
    round: usize,
    res: &mut Results,
) -> Result<(), String> {
    let mut keys = group_keys(g, samplers);
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
                e.replace(&format!("{}/", runner.dir.display()), "")
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
    Ok(())
}

/// The configurations of a group: each sampler at each of the group's rates (glibc's at their fixed rate).
fn group_keys(g: &Group, samplers: &[Sampler]) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::new();
    for &s in samplers {
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
    keys
}
