//! The process summary: every process of the run in the order it appeared, indented under its parent, with its
//! pid, parent, how it ended, its samples and its commands.

use std::fmt::Write;

use super::{head, pct};
use crate::report::Report;

/// At most this many processes are listed (or `--top`, if larger); the rest are summed up in one line.
const LISTED: usize = 40;

/// Render the process summary (nothing for a run without processes).
pub fn render(out: &mut String, report: &Report, top: usize) {
    let procs = &report.processes;
    if procs.is_empty() || report.run.mode == "kernel" {
        return;
    }
    let first = report.sources.first();
    let samples = |id: u32| {
        first
            .and_then(|s| s.processes.iter().find(|p| p.process == id))
            .map_or((0, 0.0), |p| (p.counted + p.outside, p.share))
    };
    let _ = writeln!(
        out,
        "\n  {} process{}{}:",
        procs.len(),
        if procs.len() == 1 { "" } else { "es" },
        first.map_or(String::new(), |s| format!(" ({} samples)", s.name))
    );
    let _ = writeln!(
        out,
        "  {:>8} {:>8} {:>9} {:>7}  {:<19} command",
        "pid", "parent", "samples", "share", "ended"
    );
    let limit = procs.len().min(LISTED.max(top));
    for p in procs.iter().take(limit) {
        let depth = depth(report, p.id).min(8);
        let (n, share) = samples(p.id);
        let chain = p.commands.join(" → ");
        let line = if p.command_line.is_empty() {
            String::new()
        } else {
            format!("  [{}]", head(&p.command_line.join(" "), 60))
        };
        let _ = writeln!(
            out,
            "  {:>8} {:>8} {:>9} {:>7}  {:<19} {}{chain}{line}",
            p.pid,
            p.ppid,
            n,
            pct(share),
            head(&p.ended, 19),
            "  ".repeat(depth)
        );
    }
    if procs.len() > limit {
        let rest: u64 = procs.iter().skip(limit).map(|p| samples(p.id).0).sum();
        let _ = writeln!(
            out,
            "  {:>8} {:>8} {:>9}          ({} more processes)",
            "",
            "",
            rest,
            procs.len() - limit
        );
    }
}

/// How many ancestors of process `id` are in the report.
fn depth(report: &Report, id: u32) -> usize {
    let mut d = 0;
    let mut cur = report.processes.get(id as usize).and_then(|p| p.parent);
    while let Some(parent) = cur {
        d += 1;
        if d > 64 {
            break;
        }
        cur = report.processes.get(parent as usize).and_then(|p| p.parent);
    }
    d
}
