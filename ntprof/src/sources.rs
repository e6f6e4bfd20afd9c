//! `ntprof sources`: every profile source, whether it can be sampled here, its intervals and its perf event.

use std::fmt::Write;

use ntprofile::{IntervalUnit, ProfileSource, query_interval};

/// The unit of a source's interval, as printed.
pub fn unit_name(source: ProfileSource) -> &'static str {
    match source.interval_unit() {
        IntervalUnit::Time100ns => "100ns",
        IntervalUnit::Events => "events",
    }
}

fn sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unreadable".to_string())
}

/// The listing.
pub fn run() -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "perf_event_paranoid = {}, perf_event_max_sample_rate = {}",
        sysctl("perf_event_paranoid"),
        sysctl("perf_event_max_sample_rate")
    );
    let _ = writeln!(
        out,
        "{:<9} {:<26} {:<4} {:>8} {:>11} {:>8} {:<6}  {:<23} support",
        "value", "name", "here", "min", "max", "current", "unit", "perf event"
    );
    for &source in ProfileSource::ALL {
        let support = source.support();
        let event = source.perf_event().map_or("-", |e| e.name);
        let _ = writeln!(
            out,
            "{:<9} {:<26} {:<4} {:>8} {:>11} {:>8} {:<6}  {:<23} {}",
            format!("{:#04x}", source.to_raw()),
            source.name(),
            if support.is_supported() { "yes" } else { "no" },
            source.min_interval(),
            source.limits().max,
            query_interval(source),
            unit_name(source),
            event,
            support.reason()
        );
    }
    let _ = writeln!(
        out,
        "\ncurrent = what NtQueryIntervalProfile returns (0 for a source not supported here).\n\
         NtSetIntervalProfile clamps a new interval into [min, max]; the Timer's min follows\n\
         perf_event_max_sample_rate and the 10 us cpu-clock floor.\n\
         context-switches and cpu-migrations are sampled in the kernel: each sample counts at the user\n\
         address where the thread entered the kernel. They need the privilege to sample the kernel\n\
         (CAP_PERFMON, CAP_SYS_ADMIN or perf_event_paranoid <= 1); without it they are refused (\"no\")."
    );
    Ok(out)
}
