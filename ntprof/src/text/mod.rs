//! The text report: a header (what ran, the sources, the accounting, why a profile is empty), the process
//! summary, then per source the commands, kernrate's module table, the top functions with share and bar, and
//! the hottest source lines with their text.
//!
//! A pure function of the [`Report`], so that `ntprof report FILE.json` renders a saved run the same way.

mod escape;
pub mod names;
mod offcpu;
mod processes;
mod source;
pub mod stacks;

use std::fmt::Write;

use crate::report::{Report, SourceReport};

/// Width of the bar at a 100 % share.
const BAR_WIDTH: f64 = 30.0;

/// How wide the report may be: a terminal's columns (`Some`: names cut to fit, in the middle, never two different
/// ones alike), or no limit (`None`: every name whole, as in a file or a pipe).
pub type Width = Option<usize>;

/// The most characters a section's names may take: what is left of `width` after `used` columns, at least `min`
/// (`None`: no limit).
fn cap(width: Width, used: usize, min: usize) -> Option<usize> {
    width.map(|w| w.saturating_sub(used).max(min))
}

fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

fn bar(share: f64) -> String {
    let n = (share.clamp(0.0, 1.0) * BAR_WIDTH).round() as usize;
    "#".repeat(n)
}

/// Shorten `s` to at most `max` characters, keeping its end (the informative part of paths and names).
fn tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        s.to_string()
    } else {
        let skip = n - (max - 1);
        format!("…{}", s.chars().skip(skip).collect::<String>())
    }
}

/// Shorten `s` to at most `max` characters, keeping its start.
fn head(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max - 1).collect::<String>())
    }
}

fn interval_text(s: &SourceReport) -> String {
    if s.interval_unit == "100ns" {
        format!(
            "{} x 100 ns ({} us)",
            s.interval,
            f64::from(s.interval) / 10.0
        )
    } else {
        format!("{} events", s.interval)
    }
}

/// Render the report; `top` functions and `top` lines per source, their names fitted to `width`.
pub fn render(report: &Report, top: usize, width: Width) -> String {
    let mut out = String::new();
    header(&mut out, report);
    processes::render(&mut out, report);
    for s in report.sources.iter().filter(|s| !s.is_off_cpu()) {
        source::render(&mut out, s, top, width);
        source::render_expected(&mut out, s, &report.run.expected, width);
    }
    offcpu::render(&mut out, report, top, width);
    // Empty bars and text leave trailing blanks.
    let mut trimmed: String = out
        .lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect();
    trimmed.shrink_to_fit();
    trimmed
}

fn header(out: &mut String, report: &Report) {
    let run = &report.run;
    let what = match run.mode.as_str() {
        "kernel" => "the kernel and its modules (system-wide)".to_string(),
        _ if run.command.is_empty() => "-".to_string(),
        _ => escape::printable(&run.command.join(" ")),
    };
    let _ = writeln!(out, "ntprof {}: {what}", run.mode);
    if let Some(pid) = run.pid {
        let _ = write!(out, "  pid {pid}, ");
    } else {
        out.push_str("  ");
    }
    let _ = write!(out, "ran {:.3} s", run.duration_s);
    let _ = match (run.exit_status, run.ended_by.as_str()) {
        (Some(st), _) if st > 128 => write!(out, ", killed by signal {} (status {st})", st - 128),
        (Some(st), _) => write!(out, ", exited with status {st}"),
        (None, "duration") => write!(out, ", ended after --duration"),
        (None, "interrupted") => write!(out, ", ended by Ctrl-C"),
        (None, "process-exited") => write!(out, ", ended when the process exited"),
        (None, "hangup") => write!(out, ", ended by a hang-up of the terminal (SIGHUP)"),
        (None, other) => write!(out, ", ended: {other}"),
    };
    if run.exit_status.is_some() && run.ended_by == "hangup" {
        out.push_str(" after a hang-up of the terminal (SIGHUP)");
    }
    let _ = writeln!(out, "; started {}", run.started_at);
    let cpus = match &run.cpus {
        None => "all".to_string(),
        Some(list) => list
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
    };
    let addresses = if run.bucket_log2 == 0 {
        "addresses exact".to_string()
    } else {
        format!(
            "addresses in {}-byte buckets",
            1u64 << run.bucket_log2.min(63)
        )
    };
    let tree = match (run.mode.as_str(), run.follow_children) {
        ("kernel", _) => "every process",
        _ if run.cgroup.is_some() => "every process of the cgroup",
        (_, true) => "children followed",
        (_, false) => "children not followed (--no-inherit)",
    };
    let _ = write!(
        out,
        "  {addresses}; processors {cpus}; {tree}; symbolized in {:.1} ms",
        run.symbolize_ms
    );
    if run.recorder_cpu_ms > 0.0 {
        let _ = write!(out, "; recording used {:.1} ms of CPU", run.recorder_cpu_ms);
    }
    out.push('\n');
    if let Some(e) = &run.events {
        // What the layout costs where it is not plain from its name.
        let meaning = match e.mode.as_str() {
            "cpu-filtered" => {
                " (one event per processor for every task, only the recorded processes' records kept)"
            }
            "per-thread" => {
                " (one event and ring per thread; what a task ran before its events opened is counted as lost)"
            }
            _ => "",
        };
        let _ = writeln!(
            out,
            "  perf events: {}, {} descriptors, {} rings ({} KiB){meaning}",
            e.mode,
            e.descriptors,
            e.rings,
            e.ring_bytes / 1024
        );
    }
    if let Some(c) = &run.cgroup {
        let how = match c.mechanism.as_str() {
            "kernel-filter" => "the kernel's cgroup filter on processor-wide events".to_string(),
            "following" => format!(
                "its processes followed with their trees, cgroup.procs read every {} ms",
                c.rescan_ms
            ),
            other => other.to_string(),
        };
        // The kernel's filter counts no leaver: a task that leaves is simply no longer sampled.
        let left = match c.mechanism.as_str() {
            "following" => format!(", {} left", c.left),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  cgroup: {} ({how}); {} processes at the start, {} joined{left}",
            c.path, c.at_start, c.joined
        );
    }
    for s in report.sources.iter().filter(|s| !s.is_off_cpu()) {
        let st = &s.stats;
        let jitter = if s.jitter_percent > 0 {
            format!(", jitter +-{}%", s.jitter_percent)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  source {} ({:#x}): interval {}, {:.0} samples/s{jitter}; samples {} = counted {} + outside {} + lost {}; \
             throttled {}",
            s.name,
            s.value,
            interval_text(s),
            s.achieved_rate_hz,
            st.counted + st.outside + st.lost,
            st.counted,
            st.outside,
            st.lost,
            st.throttled
        );
    }
    for why in &run.explanations {
        let _ = writeln!(out, "  why: {why}");
    }
    for note in &run.notes {
        let _ = writeln!(out, "  note: {note}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::*;

    pub(crate) fn sample_report() -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            tool: "ntprof 0.1.0".into(),
            run: RunInfo {
                mode: "record".into(),
                command: vec!["./prog".into(), "-x".into()],
                pid: Some(42),
                duration_s: 2.0,
                started_at: "2026-01-01T00:00:00Z".into(),
                exit_status: Some(139),
                ended_by: "exited".into(),
                cpus: None,
                bucket_log2: 4,
                module_poll_ms: 0.0,
                executable: Some("/tmp/prog".into()),
                follow_children: true,
                explanations: vec!["a reason".into()],
                jit: Vec::new(),
                window: None,
                cgroup: None,
                symbolize_ms: 1.5,
                call_graph: None,
                recorder_cpu_ms: 12.5,
                recorder_rounds: 0,
                events: None,
                notes: vec!["a note".into()],
                expected: vec![Expectation {
                    function: "hot".into(),
                    percent: 50.0,
                }],
            },
            processes: vec![ProcessReport {
                id: 0,
                pid: 42,
                ns_pid: None,
                ppid: 1,
                parent: None,
                command: "prog".into(),
                commands: vec!["sh".into(), "prog".into()],
                command_line: vec!["./prog".into(), "-x".into()],
                started_ms: 0.0,
                ended_ms: Some(2000.0),
                ended: "killed by signal 11".into(),
                cgroup: None,
                container_id: None,
            }],
            sources: vec![SourceReport {
                name: "Timer".into(),
                value: 0,
                interval: 10000,
                interval_unit: "100ns".into(),
                sample_value: 1_000_000,
                sample_unit: "nanoseconds".into(),
                achieved_rate_hz: 1000.0,
                jitter_percent: 0,
                stats: Stats {
                    counted: 1900,
                    outside: 100,
                    lost: 3,
                    throttled: 0,
                },
                commands: vec![CommandReport {
                    command: "prog".into(),
                    processes: 1,
                    samples: 2000,
                    share: 1.0,
                }],
                processes: vec![ProcessSamples {
                    process: 0,
                    pid: 42,
                    counted: 1900,
                    outside: 100,
                    share: 1.0,
                }],
                modules: vec![ModuleReport {
                    name: "prog".into(),
                    path: "/tmp/prog".into(),
                    build_id: None,
                    start: 0x1000,
                    end: 0x2000,
                    file_offset: 0x1000,
                    bias: 0,
                    samples: 1900,
                    share: 0.95,
                    profiled_from_ms: 0.0,
                    names: vec!["symtab".into()],
                    unnamed: None,
                }],
                functions: vec![FunctionReport {
                    command: "prog".into(),
                    module: "prog".into(),
                    name: "hot".into(),
                    address: 0x1100,
                    size: 64,
                    file: Some("prog.c".into()),
                    line: Some(3),
                    samples: 1200,
                    share: 0.6,
                }],
                lines: vec![LineReport {
                    command: "prog".into(),
                    module: "prog".into(),
                    function: "hot".into(),
                    file: "/src/prog.c".into(),
                    line: 4,
                    samples: 900,
                    share: 0.45,
                    text: Some("    x = x * 31;".into()),
                }],
                buckets: vec![],
                stacks: vec![],
                locations: vec![],
            }],
            off_cpu: None,
        }
    }

    #[test]
    fn renders_every_part() {
        let text = render(&sample_report(), 10, Some(80));
        for want in [
            "ntprof record: ./prog -x",
            "pid 42",
            "killed by signal 11 (status 139)",
            "samples 2003 = counted 1900 + outside 100 + lost 3",
            "interval 10000 x 100 ns (1000 us), 1000 samples/s",
            "symbolized in 1.5 ms; recording used 12.5 ms of CPU",
            "note: a note",
            "why: a reason",
            "1 process (Timer samples):",
            "killed by signal 11 sh → prog  [./prog -x]",
            "(outside every module)",
            "60.0%",
            "##################", // 60 % of 30
            "prog.c:4",
            "x = x * 31;",
            // --expect hot=50 against 1200 of 2000 samples: +10 points, 10 / sqrt(0.25 / 2000) = 8.94 sigma.
            "Designed against measured",
            "+10.0 pts    +8.94",
            "largest deviation 10.0 points (8.94 standard deviations of a share of 2000 samples)",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn long_names_that_share_their_start_print_apart_in_the_tables() {
        let mut report = crate::output::fixture::report();
        let source = &mut report.sources[0];
        let (top, second) = (
            "v8::internal::compiler::GraphReducer::ReduceTop()",
            "v8::internal::compiler::GraphReducer::Reduce(v8::internal::compiler::Node*)",
        );
        source.functions[0].name = top.into();
        source.functions[1].name = second.into();
        source.lines[0].function = top.into();
        source.lines[1].function = second.into();
        let text = render(&report, 10, Some(80));
        let row = |name: &str, table: &str| -> String {
            let at = text.find(table).expect(&text);
            let rows = &text[at..];
            let rows = &rows[..rows.find("\n\n").unwrap_or(rows.len())];
            rows.lines()
                .find(|l| l.contains(name))
                .unwrap_or_else(|| panic!("no row with {name:?} in\n{text}"))
                .to_string()
        };
        let shown = |line: String| -> String {
            line.split_whitespace()
                .find(|w| w.starts_with("v8::"))
                .unwrap()
                .to_string()
        };
        let a = shown(row("ReduceTop", "Function"));
        let b = shown(row("::Reduce ", "Function"));
        assert_ne!(a, b, "{text}");
        let a = shown(row("ReduceTop", "Line"));
        let b = shown(row("::Reduce ", "Line"));
        assert_ne!(a, b, "{text}");
    }
}
