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
mod tests {
    use super::*;
    use crate::report::ProcessSamples;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    fn process(id: u32, command: &str, line: &str) -> ProcessReport {
        ProcessReport {
            id,
            pid: 100 + id,
            ppid: 1,
            parent: None,
            command: command.into(),
            commands: vec![command.into()],
            command_line: if line.is_empty() { Vec::new() } else { v(line) },
            started_ms: 0.0,
            ended_ms: None,
            ended: "exited".into(),
        }
    }

    #[test]
    fn compilers_show_their_source_files() {
        let cc1 = |f: &str, tmp: &str| {
            format!(
                "/usr/lib/gcc/x86_64-linux-gnu/12/cc1 -quiet -imultiarch x86_64-linux-gnu {f}.c -quiet -dumpdir \
                 {f}. -dumpbase {f}.c -dumpbase-ext .c -mtune=generic -march=x86-64 -g -O2 -Wall -o {tmp}"
            )
        };
        let procs = vec![
            process(0, "make", "make -j2"),
            process(1, "cc", "cc -O2 -g -Wall -c alpha.c -o alpha.o"),
            process(2, "cc", "cc -O2 -g -Wall -c beta.c -o beta.o"),
            process(3, "cc1", &cc1("alpha", "/tmp/ccA.s")),
            process(4, "cc1", &cc1("beta", "/tmp/ccB.s")),
            process(5, "cc", "cc -O2 -g -Wall -c gamma.c -o gamma.o"),
            process(6, "cc", "cc -o prog alpha.o beta.o gamma.o"),
            process(7, "as", ""),
        ];
        let lines = distinct_lines(&procs);
        assert_eq!(lines[0].as_deref(), Some("make -j2"));
        assert_eq!(lines[1].as_deref(), Some("cc … -c alpha.c -o alpha.o"));
        assert_eq!(
            lines[3].as_deref(),
            Some("cc1 … alpha.c … -dumpdir alpha. … -o /tmp/ccA.s")
        );
        assert_eq!(
            lines[6].as_deref(),
            Some("cc -o prog alpha.o beta.o gamma.o")
        );
        assert_eq!(lines[7], None);
    }

    #[test]
    fn processes_without_samples_fold_into_one_line() {
        // The shell (root) runs a busy program and four short ones; one short one ran a child that has samples.
        let mut report = crate::output::fixture::report();
        let mut procs = vec![process(0, "sh", "sh -c x")];
        for (id, command) in [
            (1, "busy"),
            (2, "env"),
            (3, "pyenv"),
            (4, "pyenv"),
            (5, "pyenv"),
            (6, "hot"),
        ] {
            let mut p = process(id, command, "");
            p.parent = Some(if id == 6 { 5 } else { 0 });
            procs.push(p);
        }
        report.processes = procs;
        let samples = |process: u32, counted: u64| crate::report::ProcessSamples {
            process,
            pid: 100 + process,
            counted,
            outside: 0,
            share: 0.5,
        };
        report.sources[0].processes = vec![samples(1, 500), samples(2, 0), samples(6, 500)];
        assert_eq!(
            without_samples(&report),
            [false, false, true, true, true, false, false]
        );
        let mut out = String::new();
        render(&mut out, &report);
        assert!(out.contains("7 processes"), "{out}");
        assert!(
            out.contains("… 3 more processes with 0 samples (pyenv ×2, env)"),
            "{out}"
        );
        for pid in [102, 103, 104] {
            assert!(!out.contains(&format!(" {pid} ")), "{pid} listed:\n{out}");
        }
        for pid in [100, 101, 105, 106] {
            assert!(
                out.contains(&format!(" {pid} ")),
                "{pid} not listed:\n{out}"
            );
        }
        // A single process without samples keeps its row.
        report.sources[0].processes.push(samples(3, 1));
        report.sources[0].processes.push(samples(4, 1));
        let mut out = String::new();
        render(&mut out, &report);
        assert!(
            !out.contains("with 0 samples") && out.contains(" 102 "),
            "{out}"
        );
    }

    #[test]
    fn every_process_with_samples_is_listed() {
        // `make -j2` of a project: 100 compilers with samples under make, and 30 shells without.
        let mut report = crate::output::fixture::report();
        let mut procs = vec![process(0, "make", "make -j2")];
        for id in 1..=130 {
            let mut p = process(id, if id <= 100 { "cc1" } else { "sh" }, "");
            p.parent = Some(0);
            procs.push(p);
        }
        report.processes = procs;
        report.sources[0].processes = (1..=100)
            .map(|id| crate::report::ProcessSamples {
                process: id,
                pid: 100 + id,
                counted: 10,
                outside: 0,
                share: 0.01,
            })
            .collect();
        let mut out = String::new();
        render(&mut out, &report);
        for pid in 100..=200 {
            assert!(
                out.contains(&format!(" {pid} ")),
                "{pid} not listed:\n{out}"
            );
        }
        assert!(!out.contains("more processes)"), "{out}");
        assert!(
            out.contains("… 30 more processes with 0 samples (sh ×30)"),
            "{out}"
        );
    }

    #[test]
    fn identical_peers_show_their_whole_line_cut_in_the_middle() {
        let long = format!("python3 -m pool --workers 4 --config {}", "x".repeat(80));
        let procs = vec![process(0, "python3", &long), process(1, "python3", &long)];
        let lines = distinct_lines(&procs);
        let l = lines[0].as_deref().unwrap();
        assert_eq!(l.chars().count(), LINE_WIDTH, "{l}");
        assert!(
            l.starts_with("python3 -m pool") && l.ends_with("xxxx") && l.contains('…'),
            "{l}"
        );
        let collect2 = format!(
            "/usr/lib/gcc/x86_64-linux-gnu/12/collect2 -plugin {} crtn.o",
            "y".repeat(60)
        );
        let lines = distinct_lines(&[process(0, "collect2", &collect2)]);
        let l = lines[0].as_deref().unwrap();
        assert!(
            l.starts_with("collect2 -plugin yyy") && l.ends_with("yyy crtn.o"),
            "{l}"
        );
        assert_eq!(middle("abcdef", 6), "abcdef");
        assert_eq!(middle("abcdefgh", 5), "ab…gh");
    }

    /// The summary of a fork storm: `n` processes of one command, each with its own argument and a sample.
    fn storm(n: u32) -> Report {
        let mut report = crate::text::tests::sample_report();
        let one = report.sources[0].processes[0].clone();
        report.processes = (0..n)
            .map(|i| process(i, "worker", &format!("worker --job {i} --queue main -v")))
            .collect();
        report.sources[0].processes = (0..n)
            .map(|i| ProcessSamples {
                process: i,
                pid: 100 + i,
                ..one.clone()
            })
            .collect();
        report
    }

    /// This thread's processor time (user + system): unlike the wall clock, it does not grow while the thread
    /// waits for a processor on a loaded machine.
    fn thread_cpu() -> std::time::Duration {
        use nix::sys::resource::{UsageWho, getrusage};
        let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage(RUSAGE_THREAD)");
        let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
        std::time::Duration::from_micros(us(u.user_time()) + us(u.system_time()))
    }

    /// The least processor time of five renderings of `report`.
    fn fastest(report: &Report) -> std::time::Duration {
        (0..5)
            .map(|_| {
                let t = thread_cpu();
                let mut out = String::new();
                render(&mut out, report);
                assert!(out.contains("worker --job"), "{out}");
                thread_cpu().saturating_sub(t)
            })
            .min()
            .unwrap_or_default()
    }

    #[test]
    fn the_summary_of_many_processes_costs_about_their_number() {
        // Four times the processes: about four times the processor time when the cost is linear, 16 when it is
        // quadratic; the bound is twice the linear ratio. Both sizes are far past the processor's caches: with
        // 4,000 against 32,000 the ratio of the linear cost swung from 13 to 22 with cache effects, and a
        // wall-clock ratio of 35.8 was seen at load average 12. Seen here: 4.7 to 4.9 at load average 14.
        let small = fastest(&storm(16000));
        let large = fastest(&storm(64000));
        let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
        assert!(
            ratio < 8.0,
            "16000 processes: {small:?}, 64000: {large:?} (ratio {ratio:.1})"
        );
    }
}
