//! The process summary: every process of the run in the order it appeared, indented under its parent, with its
//! pid, parent, how it ended, its samples, its commands and the part of its command line that tells it apart
//! from the processes that ran the same command. Every process with samples (or with a descendant that has some)
//! is listed, however many there are; processes without a sample are summed up in one line.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use super::{head, pct};
use crate::report::{ProcessReport, Report};

/// The widest command line shown; a longer one is cut in the middle, so that both of its ends show.
const LINE_WIDTH: usize = 64;
/// At most this many commands are named in the line that sums up the processes without samples.
const FOLDED_NAMES: usize = 6;

/// A process's cgroup and container, after its command: `  cgroup /PATH` and `container ID` (the first 12
/// hex digits, as the runtimes' listings show it) where the path names one; nothing when unknown.
fn cgroup_label(p: &ProcessReport) -> String {
    let mut label = String::new();
    if let Some(c) = &p.cgroup {
        let _ = write!(label, "  cgroup {}", super::escape::printable(c));
    }
    if let Some(id) = &p.container_id {
        let _ = write!(label, " container {}", id.get(..12).unwrap_or(id));
    }
    label
}

/// Render the process summary (nothing for a run without processes).
pub fn render(out: &mut String, report: &Report) {
    let procs = &report.processes;
    if procs.is_empty() || report.run.mode == "kernel" {
        return;
    }
    let first = report.sources.first();
    // Samples by process id, looked up once each (not a search of the source's list per process).
    let by_id: HashMap<u32, (u64, f64)> = first
        .map(|s| {
            s.processes
                .iter()
                .map(|p| (p.process, (p.counted + p.outside, p.share)))
                .collect()
        })
        .unwrap_or_default();
    let samples = |id: u32| by_id.get(&id).copied().unwrap_or((0, 0.0));
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
    let lines = distinct_lines(procs);
    let folded = without_samples(report);
    let fold = folded.iter().filter(|&&f| f).count() >= 2;
    let shown: Vec<&ProcessReport> = procs
        .iter()
        .filter(|p| !(fold && folded[p.id as usize]))
        .collect();
    for p in &shown {
        let depth = depth(report, p.id).min(8);
        let (n, share) = samples(p.id);
        let chain = p.commands.join(" → ");
        let line = match &lines[p.id as usize] {
            Some(l) => format!("  [{}]", super::escape::printable(l)),
            None => String::new(),
        };
        // A process in a container: its own pid there (its perf map and jitdump are named with it).
        let ns = p
            .ns_pid
            .map(|n| format!("  (pid {n} in its namespace)"))
            .unwrap_or_default();
        let line = line + &cgroup_label(p);
        let _ = writeln!(
            out,
            "  {:>8} {:>8} {:>9} {:>7}  {:<19} {}{chain}{ns}{line}",
            p.pid,
            p.ppid,
            n,
            pct(share),
            head(&p.ended, 19),
            "  ".repeat(depth)
        );
    }
    if fold {
        let names = folded_names(procs.iter().filter(|p| folded[p.id as usize]));
        let n = procs.len() - shown.len();
        let _ = writeln!(
            out,
            "  {:>8} {:>8} {:>9}          … {n} more processes with 0 samples ({names})",
            "", "", 0
        );
    }
}

/// Per process (by `id`): true when it has no sample in any source and no descendant that has one, and is not
/// one of the run's first processes (the command, the attached processes: they have no parent in the report).
fn without_samples(report: &Report) -> Vec<bool> {
    let procs = &report.processes;
    let mut has = vec![false; procs.len()];
    for s in &report.sources {
        for p in &s.processes {
            if p.counted + p.outside > 0
                && let Some(h) = has.get_mut(p.process as usize)
            {
                *h = true;
            }
        }
    }
    // A process comes after its parent: going backwards, each passes its mark up before the parent is seen.
    for p in procs.iter().rev() {
        if has[p.id as usize]
            && let Some(parent) = p.parent
            && (parent as usize) < has.len()
        {
            has[parent as usize] = true;
        }
    }
    procs
        .iter()
        .map(|p| !has[p.id as usize] && p.parent.is_some())
        .collect()
}

/// The commands of the folded processes, the most frequent first: `sh ×20, pyenv ×18, env`.
fn folded_names<'a>(procs: impl Iterator<Item = &'a ProcessReport>) -> String {
    let mut order: HashMap<&str, usize> = HashMap::new();
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for p in procs {
        let i = *order.entry(p.command.as_str()).or_insert_with(|| {
            counts.push((&p.command, 0));
            counts.len() - 1
        });
        counts[i].1 += 1;
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let mut names: Vec<String> = counts
        .iter()
        .take(FOLDED_NAMES)
        .map(|&(c, n)| {
            if n > 1 {
                format!("{c} ×{n}")
            } else {
                c.to_string()
            }
        })
        .collect();
    if counts.len() > FOLDED_NAMES {
        names.push("…".into());
    }
    names.join(", ")
}

/// Per process (by `id`), the command line as the table shows it: the arguments that tell it apart from the
/// other processes that ran the same command (see [`distinct`]), or, when nothing does, the whole line; cut
/// in the middle to [`LINE_WIDTH`]. `None` when its line is unknown.
pub fn distinct_lines(procs: &[ProcessReport]) -> Vec<Option<String>> {
    let mut peers: HashMap<&str, Peers> = HashMap::new();
    for p in procs.iter().filter(|p| !p.command_line.is_empty()) {
        peers
            .entry(p.command.as_str())
            .or_default()
            .add(&p.command_line);
    }
    procs
        .iter()
        .map(|p| {
            if p.command_line.is_empty() {
                return None;
            }
            let line = distinct(&p.command_line, &peers[p.command.as_str()])
                .unwrap_or_else(|| whole(&p.command_line));
            Some(middle(&line, LINE_WIDTH))
        })
        .collect()
}

/// The lines of the processes that ran one command: how many there are, and on how many lines each argument
/// is (counted once per line), so that telling one line apart costs its own length, not the group's.
#[derive(Default)]
struct Peers<'a> {
    lines: usize,
    has: HashMap<&'a str, usize>,
}

impl<'a> Peers<'a> {
    fn add(&mut self, line: &'a [String]) {
        self.lines += 1;
        let mut seen = HashSet::new();
        for arg in line {
            if seen.insert(arg.as_str()) {
                *self.has.entry(arg).or_default() += 1;
            }
        }
    }
}

/// The arguments of `line` that most of its `peers` (the lines of the processes that ran the same command,
/// `line` among them) do not have, in order and each value once, with the option before each when it is a shared option taking
/// that value (`-o x.o`), the program's file name first, and `…` for each run of arguments left out. `None`
/// when no argument tells it apart (a single process, or peers with the same line).
fn distinct(line: &[String], peers: &Peers<'_>) -> Option<String> {
    if peers.lines < 2 {
        return None;
    }
    // Shared: on the lines of more than half the peers.
    let shared = |arg: &String| peers.has.get(arg.as_str()).copied().unwrap_or(0) * 2 > peers.lines;
    let mut keep: Vec<bool> = line.iter().map(|a| !shared(a)).collect();
    if !keep.iter().skip(1).any(|&k| k) {
        return None;
    }
    // A value shown once is not shown again (`cc1 … x.c … -dumpbase x.c`).
    let mut shown = HashSet::new();
    for i in 1..line.len() {
        if keep[i] && !shown.insert(line[i].as_str()) {
            keep[i] = false;
        }
    }
    let mut show = keep.clone();
    for i in 1..line.len() {
        if keep[i]
            && !keep[i - 1]
            && i > 1
            && line[i - 1].starts_with('-')
            && !line[i].starts_with('-')
        {
            show[i - 1] = true;
        }
    }
    let program = if keep[0] {
        line[0].clone()
    } else {
        file_name(&line[0]).to_string()
    };
    let mut out = vec![program];
    for (arg, &s) in line.iter().zip(&show).skip(1) {
        if s {
            out.push(arg.clone());
        } else if out.last().map(String::as_str) != Some("…") {
            out.push("…".into());
        }
    }
    Some(out.join(" "))
}

/// The whole line; when it is too long to show, with the program's file name for its path.
fn whole(line: &[String]) -> String {
    let all = line.join(" ");
    if all.chars().count() <= LINE_WIDTH {
        return all;
    }
    let mut parts = vec![file_name(&line[0]).to_string()];
    parts.extend(line[1..].iter().cloned());
    parts.join(" ")
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `s` in at most `max` characters: cut in the middle (`…`), so that its start and its end both show.
fn middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(1);
    let front = keep - keep / 2;
    let back = keep / 2;
    let start: String = s.chars().take(front).collect();
    let end: String = s.chars().skip(n - back).collect();
    format!("{start}…{end}")
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

#[cfg(test)]
mod tests;
