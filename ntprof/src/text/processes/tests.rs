//! The process table's command lines, their summary, and its cost.

use super::*;
use crate::report::ProcessSamples;

fn v(s: &str) -> Vec<String> {
    s.split(' ').map(String::from).collect()
}

fn process(id: u32, command: &str, line: &str) -> ProcessReport {
    ProcessReport {
        id,
        pid: 100 + id,
        ns_pid: None,
        ppid: 1,
        parent: None,
        command: command.into(),
        commands: vec![command.into()],
        command_line: if line.is_empty() { Vec::new() } else { v(line) },
        started_ms: 0.0,
        ended_ms: None,
        ended: "exited".into(),
        cgroup: None,
        container_id: None,
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
