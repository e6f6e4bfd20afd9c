//! The Off-CPU section of the text report (`--off-cpu`): how the time was recorded, the totals per process and
//! per thread, voluntary waits apart from preemptions, the wait kinds (system calls), the functions most time
//! was spent blocked under (inclusive), and the top blocking stacks, innermost first.

use std::collections::HashMap;
use std::fmt::Write;

use super::head;
use super::names::display_name;
use super::stacks::expanded;
use crate::report::{Report, SourceReport};

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// Render the Off-CPU section, `top` rows per table.
pub fn render(out: &mut String, report: &Report, top: usize, width: super::Width) {
    let Some(o) = &report.off_cpu else {
        return;
    };
    let _ = writeln!(
        out,
        "\nOff-CPU time ({}): voluntary {}, preempted {}; stack not read for {}",
        o.mechanism,
        ms(o.voluntary_ns),
        ms(o.preempted_ns),
        ms(o.unread_ns)
    );
    for l in &o.limits {
        let _ = writeln!(out, "  limit: {l}");
    }
    let _ = writeln!(
        out,
        "\n  {:>8}  {:<24} {:>12} {:>12}",
        "pid", "process", "voluntary", "preempted"
    );
    for p in o.processes.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:>8}  {:<24} {:>12} {:>12}",
            p.pid,
            head(&p.command, 24),
            ms(p.voluntary_ns),
            ms(p.preempted_ns)
        );
    }
    let _ = writeln!(
        out,
        "\n  {:>8}  {:<24} {:>12} {:>12} {:>8}",
        "tid", "thread", "voluntary", "preempted", "waits"
    );
    for t in o.threads.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:>8}  {:<24} {:>12} {:>12} {:>8}",
            t.tid,
            head(&format!("{} ({})", t.name, t.pid), 24),
            ms(t.voluntary_ns),
            ms(t.preempted_ns),
            t.waits
        );
    }
    let _ = writeln!(
        out,
        "\n  {:<24} {:>12} {:>8}  kind",
        "wait", "time", "waits"
    );
    for k in o.kinds.iter().take(top) {
        let how = if k.preempted {
            "preempted"
        } else {
            "voluntary"
        };
        let _ = writeln!(
            out,
            "  {:<24} {:>12} {:>8}  {how}",
            head(&k.kind, 24),
            ms(k.ns),
            k.waits
        );
    }
    for source in report.sources.iter().filter(|s| s.is_off_cpu()) {
        blocking(out, source, top, width);
    }
}

/// The functions with the most off-CPU time below them, and the top stacks, of one off-CPU source.
fn blocking(out: &mut String, source: &SourceReport, top: usize, width: super::Width) {
    let total = source.stats.counted + source.stats.outside;
    if total == 0 || source.stacks.is_empty() {
        return;
    }
    let what = if source.name == "off_cpu" {
        "blocked (voluntary)"
    } else {
        "preempted"
    };
    let mut inclusive: HashMap<&str, u64> = HashMap::new();
    for stack in &source.stacks {
        let mut seen: Vec<&str> = Vec::new();
        for f in expanded(source, stack) {
            if !seen.contains(&f) {
                seen.push(f);
                *inclusive.entry(f).or_insert(0) += stack.samples;
            }
        }
    }
    let mut rows: Vec<(&str, u64)> = inclusive.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let _ = writeln!(
        out,
        "\n  Time {what} under each function (inclusive), of {}:",
        ms(total)
    );
    let cap = super::cap(width, 24, 90);
    let texts = super::names::fit_all(rows.iter().take(top).map(|r| r.0), 90, cap);
    for (f, ns) in rows.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:>12} {:>6.1}%  {}",
            ms(*ns),
            *ns as f64 * 100.0 / total as f64,
            texts[f]
        );
    }
    let _ = writeln!(
        out,
        "\n  Top stacks {what}, the wait first, then its callers outward:"
    );
    // One row per command and stack, its processes together (the processes of one command that waited at
    // the same place are one row, not one per pid).
    let mut grouped: Vec<(String, bool, Vec<u32>, u64)> = Vec::new();
    let mut index: HashMap<(String, bool), usize> = HashMap::new();
    for stack in &source.stacks {
        let mut frames: Vec<_> = expanded(source, stack)
            .into_iter()
            .map(display_name)
            .collect();
        frames.reverse();
        let key = format!("{}\n{}", stack.command, frames.join(" <- "));
        match index.get(&(key.clone(), stack.truncated)) {
            Some(&at) => {
                let g = &mut grouped[at];
                g.3 += stack.samples;
                if !g.2.contains(&stack.pid) {
                    g.2.push(stack.pid);
                }
            }
            None => {
                index.insert((key.clone(), stack.truncated), grouped.len());
                grouped.push((key, stack.truncated, vec![stack.pid], stack.samples));
            }
        }
    }
    grouped.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| a.0.cmp(&b.0)));
    for (i, (key, truncated, pids, ns)) in grouped.iter().take(top.min(10)).enumerate() {
        let (command, frames) = key.split_once('\n').unwrap_or((key, ""));
        let trunc = if *truncated { " <- [truncated]" } else { "" };
        let who = match pids.as_slice() {
            [pid] => format!("{pid}"),
            many => format!("{} processes", many.len()),
        };
        let _ = writeln!(
            out,
            "  #{:<2} {:>12} {:>6.1}%  {command} ({who}): {frames}{trunc}",
            i + 1,
            ms(*ns),
            *ns as f64 * 100.0 / total as f64,
        );
    }
}
