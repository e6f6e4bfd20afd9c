//! What a run's sampling rate was and cost: the rate used when the kernel's limits clamped the one asked for
//! (`-F 1000000` runs at the kernel's floor), a warning when the rate slows the program down, and the kernel's
//! throttling of a rate that took too much CPU time (what perf prints as throttling).

use ntprofile::{IntervalUnit, ProfileSource};

use super::session::Session;

/// Above this many time samples a second of each thread's CPU time, the samples slow the program noticeably:
/// a sample costs the sampled thread the kernel's timer interrupt path, 1–3 µs on bare metal and 14–16 µs in a
/// virtual machine (two VM exits, as measured for this project), so 10 kHz costs 1.5 % to 16 %, and more costs more.
const SLOW_HZ: f64 = 10_000.0;

/// A sample rate of a time source's interval (100 ns units).
fn hz(interval: u32) -> f64 {
    1e7 / f64::from(interval.max(1))
}

/// An interval as time, or as events.
fn interval_text(source: ProfileSource, interval: u32) -> String {
    match source.interval_unit() {
        IntervalUnit::Time100ns => {
            format!(
                "every {} µs ({:.0} Hz)",
                f64::from(interval) / 10.0,
                hz(interval)
            )
        }
        IntervalUnit::Events => format!("every {interval} events"),
    }
}

/// Why the kernel cannot sample `source` as often as `asked`, when `used` is its floor here.
fn floor_reason(source: ProfileSource, used: u32) -> String {
    if source.interval_unit() != IntervalUnit::Time100ns {
        return format!("{used} is the source's smallest interval");
    }
    let rate = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    match rate {
        Some(rate) if 10_000_000u64.div_ceil(rate.max(1)) >= u64::from(used) => format!(
            "the kernel allows at most {rate} samples a second (kernel.perf_event_max_sample_rate; root can \
             raise it, and the kernel lowers it when samples take too much CPU time)"
        ),
        _ => format!(
            "the kernel's timer events fire at most every {} µs",
            f64::from(source.limits().min) / 10.0
        ),
    }
}

/// The notes on the sampling rate of every source of the run.
pub fn rate_notes(session: &Session) -> Vec<String> {
    let mut out = Vec::new();
    for (i, (info, counts)) in session
        .infos
        .iter()
        .zip(&session.tracker.sources)
        .enumerate()
    {
        let (source, used) = (info.source, info.interval);
        let name = source.name();
        if let Some(asked) = session
            .asked
            .get(i)
            .copied()
            .flatten()
            .filter(|&a| a != used)
        {
            let why = if asked < used {
                floor_reason(source, used)
            } else {
                format!("{used} is the source's largest interval")
            };
            out.push(format!(
                "{name}: asked to sample {}, sampled {} instead: {why}",
                interval_text(source, asked),
                interval_text(source, used)
            ));
        }
        if source.interval_unit() == IntervalUnit::Time100ns && hz(used) > SLOW_HZ {
            out.push(format!(
                "{name}: {:.0} samples a second slow the program down: each sample interrupts the thread (1-3 \
                 µs on bare metal, about 15 µs in a virtual machine), so the program ran slower than it runs \
                 alone; perf's default is 4000 Hz (-F 4000), ntprof's 1000 Hz",
                hz(used)
            ));
        }
        if counts.throttled > 0 {
            out.push(format!(
                "{name}: the kernel throttled sampling {} time{}: the samples took more CPU time than \
                 kernel.perf_cpu_time_max_percent allows, so some were not taken; a lower rate (-F, -i) avoids it",
                counts.throttled,
                if counts.throttled == 1 { "" } else { "s" }
            ));
        }
    }
    out
}
