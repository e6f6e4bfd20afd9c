//! From the model of a run to a [`Report`](crate::report::Report): symbolization of every location with samples
//! (once, for every source), then per source the accounting and the tables, and the process table.

mod aggregate;
mod cache;
#[cfg(test)]
mod hostile;
mod lines;
pub mod offcpu;
mod stacks;
pub mod symbolize;

use std::time::{Duration, Instant};

use ntprofile::{IntervalUnit, ProfileSource};

use crate::report::{ProcessReport, RunInfo, SourceReport};
use crate::symbols::Kallsyms;
use crate::tree::Tracker;
use aggregate::Inputs;
pub use cache::SymbolCache;
use symbolize::Symbolizers;

/// A source of the run: what it sampled and how often.
#[derive(Clone, Copy, Debug)]
pub struct SourceInfo {
    /// The source.
    pub source: ProfileSource,
    /// Its effective interval.
    pub interval: u32,
    /// Its jitter, percent.
    pub jitter: u32,
}

/// How the root processes ended, as the recorder saw them: (process index, `exit status N` / `killed by
/// signal N`).
pub type Endings = Vec<(u32, String)>;

/// Build the per-source reports and the process table. Returns them with the time spent symbolizing and the
/// notes on the objects that could not be read in full.
pub fn build(
    tracker: &Tracker,
    sources: &[SourceInfo],
    kallsyms: Option<&Kallsyms>,
    duration_s: f64,
    bucket_log2: u32,
    endings: &Endings,
    cache: &SymbolCache,
) -> (Vec<ProcessReport>, Vec<SourceReport>, Duration, Vec<String>) {
    let t0 = Instant::now();
    let stacks = tracker.stacks.locs.len();
    let mut used_stack = vec![false; stacks];
    for s in &tracker.sources {
        for &(_, stack) in s.counts.keys() {
            used_stack[stack as usize] = true;
        }
    }
    let mut used_module = vec![false; tracker.modules.list.len()];
    for (i, _) in used_stack.iter().enumerate().filter(|(_, u)| **u) {
        for loc in tracker.stacks.frames(i as u32) {
            used_module[loc.module as usize] = true;
        }
    }
    let symbols = Symbolizers::open(
        &tracker.modules.list,
        &used_module,
        kallsyms,
        &tracker.jit,
        cache,
    );
    let located: Vec<_> = tracker
        .stacks
        .locs
        .iter()
        .zip(&used_stack)
        .map(|(loc, &u)| u.then(|| symbols.locate(loc.module, loc.offset)))
        .collect();
    let input = Inputs {
        tracker,
        symbols: &symbols,
        located: &located,
        bucket_size: 1u64 << bucket_log2.min(63),
    };
    let mut callers = stacks::Callers::new(tracker, &symbols, &located);
    let reports = tracker
        .sources
        .iter()
        .enumerate()
        .map(|(i, counts)| {
            let tables = aggregate::tables(&input, counts);
            let mut r = match sources.get(i) {
                Some(info) => source_report(info, tables, duration_s),
                // The off-CPU sources come after the sampled ones.
                None => off_cpu_report(i == sources.len(), tables),
            };
            if tracker.call_graph.is_some() {
                (r.stacks, r.locations) = callers.tables(counts);
                let fp = tracker.call_graph == Some(crate::options::CallGraph::Fp);
                let ended: Vec<bool> = r
                    .stacks
                    .iter()
                    .map(|s| r.chain_end(s, fp) == Some(crate::report::FP_ENDED_FRAME))
                    .collect();
                for (stack, ended) in r.stacks.iter_mut().zip(ended) {
                    stack.fp_chain_ended = ended;
                }
            }
            r
        })
        .collect();
    let spent = t0.elapsed();
    let notes = symbols.notes();
    (process_table(tracker, endings), reports, spent, notes)
}

fn source_report(info: &SourceInfo, t: aggregate::Tables, duration_s: f64) -> SourceReport {
    let (interval_unit, sample_value, sample_unit) = match info.source.interval_unit() {
        IntervalUnit::Time100ns => ("100ns", u64::from(info.interval) * 100, "nanoseconds"),
        IntervalUnit::Events => ("events", u64::from(info.interval), "events"),
    };
    let total = t.stats.counted + t.stats.outside;
    SourceReport {
        name: info.source.name().to_string(),
        value: info.source.to_raw(),
        interval: info.interval,
        interval_unit: interval_unit.to_string(),
        sample_value,
        sample_unit: sample_unit.to_string(),
        achieved_rate_hz: if duration_s > 0.0 {
            total as f64 / duration_s
        } else {
            0.0
        },
        jitter_percent: info.jitter,
        stats: t.stats,
        commands: t.commands,
        processes: t.processes,
        modules: t.modules,
        functions: t.functions,
        lines: t.lines,
        buckets: t.buckets,
        stacks: Vec::new(),
        locations: Vec::new(),
    }
}

/// The report of an off-CPU source (`voluntary`: `off_cpu`, else `preempted`): its samples are nanoseconds.
fn off_cpu_report(voluntary: bool, t: aggregate::Tables) -> SourceReport {
    let info = SourceInfo {
        source: ProfileSource::Time,
        interval: 1,
        jitter: 0,
    };
    SourceReport {
        name: if voluntary { "off_cpu" } else { "preempted" }.to_string(),
        value: 0,
        interval_unit: crate::report::OFF_CPU_UNIT.to_string(),
        sample_value: 1,
        sample_unit: "nanoseconds".to_string(),
        achieved_rate_hz: 0.0,
        ..source_report(&info, t, 0.0)
    }
}

/// Every process of the run, in the order it appeared.
fn process_table(t: &Tracker, endings: &Endings) -> Vec<ProcessReport> {
    let ms = |ns: u64| ns.saturating_sub(t.run_start_ns) as f64 / 1e6;
    t.processes
        .list
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let i = i as u32;
            let ended = match endings.iter().find(|(p, _)| *p == i) {
                Some((_, how)) => how.clone(),
                None if p.exit_ns.is_some() => "exited".to_string(),
                None => "running".to_string(),
            };
            ProcessReport {
                id: i,
                pid: p.pid,
                ns_pid: t.places.get(&i).and_then(|place| place.ns_pid),
                ppid: p.ppid,
                parent: p.parent,
                command: t.processes.comm(i).to_string(),
                commands: t.processes.chain(i),
                command_line: p.cmdline.clone().unwrap_or_default(),
                started_ms: ms(p.start_ns),
                ended_ms: p.exit_ns.map(ms),
                ended,
                container_id: p
                    .cgroup
                    .as_deref()
                    .and_then(crate::tree::cgroup::container_id)
                    .map(str::to_string),
                cgroup: p.cgroup.clone(),
            }
        })
        .collect()
}

/// A RunInfo with the fields every mode fills the same way.
pub fn run_info(mode: &str, command: Vec<String>, pid: Option<u32>, started_at: String) -> RunInfo {
    RunInfo {
        mode: mode.to_string(),
        command,
        pid,
        duration_s: 0.0,
        started_at,
        exit_status: None,
        ended_by: String::new(),
        cpus: None,
        bucket_log2: 0,
        module_poll_ms: 0.0,
        executable: None,
        follow_children: true,
        symbolize_ms: 0.0,
        call_graph: None,
        recorder_cpu_ms: 0.0,
        recorder_rounds: 0,
        events: None,
        notes: Vec::new(),
        expected: Vec::new(),
        explanations: Vec::new(),
        jit: Vec::new(),
        window: None,
        cgroup: None,
    }
}

/// Now as RFC 3339 in UTC (`2026-01-31T12:34:56Z`), from the system clock.
pub fn now_rfc3339() -> String {
    rfc3339(unix_now_ns(), false)
}

/// Now, nanoseconds since the Unix epoch (the system clock; 0 before 1970).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// `unix_ns` (nanoseconds since the Unix epoch) as RFC 3339 in UTC: `2026-01-31T12:34:56Z`, or with
/// `nanos` `2026-01-31T12:34:56.123456789Z`.
pub fn rfc3339(unix_ns: u64, nanos: bool) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm, written out).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let frac = if nanos {
        format!(".{:09}", unix_ns % 1_000_000_000)
    } else {
        String::new()
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_is_well_formed() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'), "{s}");
    }

    #[test]
    fn offsets_are_named() {
        assert_eq!(symbolize::module_offset_name("prog", 0x1234), "prog+0x1234");
    }
}
