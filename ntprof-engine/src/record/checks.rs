//! The checks of a run's sources and processors, made before anything starts.

use ntprofile::ProfileSource;

use super::{EXIT_USAGE, Failure};
use crate::options::ProfileOptions;

/// Check the options that concern sources and processors; returns the distinct sources in order.
pub fn check_sources(opts: &ProfileOptions) -> Result<Vec<ProfileSource>, Failure> {
    if let Some(list) = &opts.cpus {
        let online = ntprofile::affinity::online_cpus();
        let offline: Vec<String> = list
            .0
            .iter()
            .filter(|c| !online.contains(**c))
            .map(usize::to_string)
            .collect();
        if !offline.is_empty() {
            let on: Vec<String> = online.iter().map(|c| c.to_string()).collect();
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "--cpus: processor {} is not online (online: {})",
                    offline.join(", "),
                    on.join(",")
                ),
            ));
        }
    }
    if opts.jitter > 0 {
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "--jitter {}: 'record' and 'attach' sample with a fixed period, which cannot be jittered; the \
                 period jitter is the library's, for NT profiles (NtSetJitter). Drop --jitter",
                opts.jitter
            ),
        ));
    }
    if let Some(hz) = opts.freq {
        if opts.intervals.iter().any(|i| i.source.is_none()) {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "-F {hz} and --interval N both set the interval of the time sources: give one of them (or \
                     --interval SOURCE=N for a source that counts events)"
                ),
            ));
        }
        if !opts
            .sources
            .iter()
            .any(|s| s.interval_unit() == ntprofile::IntervalUnit::Time100ns)
        {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "-F {hz} sets how often time sources are sampled, and no source of this run is one: give \
                     --interval N (events per sample) instead"
                ),
            ));
        }
    }
    if let Some(source) = opts.interval_for_unused_source() {
        let n = source.name();
        return Err(Failure::new(
            EXIT_USAGE,
            format!("--interval {n}=...: {n} is not a source of this run (add --source {n})"),
        ));
    }
    let mut unique: Vec<ProfileSource> = Vec::new();
    for &s in &opts.sources {
        if !unique.contains(&s) {
            unique.push(s);
        }
    }
    for &source in &unique {
        let support = source.support();
        if !support.is_supported() {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "source {} ({:#x}) cannot be sampled on this machine: {}.\n  \
                     Fix: pick a source that 'ntprof sources' lists as available here (Timer, task-clock, \
                     page-faults, ...)",
                    source.name(),
                    source.to_raw(),
                    support.reason()
                ),
            ));
        }
    }
    Ok(unique)
}
