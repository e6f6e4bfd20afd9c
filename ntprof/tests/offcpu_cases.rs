//! `--off-cpu` cases beyond the designed program (`tests/c/offcpu_cases.c`): preemptions without privilege are
//! placed at the thread's last CPU sample, a wait that its process's exit ends keeps its stack, and the
//! unprivileged watcher yields to the profiled threads (low priority, rounds instead of a wake-up per switch).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{inclusive_ns, ntprof_command, run_ok, source};

use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    // Readable by everyone: the unprivileged runs (as nobody) must reach the programs.
    D.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ntprof-offcpu-cases-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        dir
    })
}

/// A C program of the tests, built once.
fn program(cell: &'static OnceLock<PathBuf>, src: &str, name: &str) -> PathBuf {
    cell.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
        common::gcc(
            &["-O2", "-g", "-pthread", "-o", name, src.to_str().unwrap()],
            dir(),
        );
        dir().join(name)
    })
    .clone()
}

fn cases() -> PathBuf {
    static C: OnceLock<PathBuf> = OnceLock::new();
    program(&C, "tests/c/offcpu_cases.c", "offcpu_cases")
}

fn record(args: &[&str], unprivileged: bool) -> (Value, String) {
    let out = run_ok(ntprof_command(unprivileged).args(args), LIMIT);
    (
        serde_json::from_slice(&out.stdout).expect("a JSON report"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Nanoseconds of the wait kind `kind` (preempted or not).
fn kind_ns(report: &Value, kind: &str, preempted: bool) -> u64 {
    report["off_cpu"]["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kind"] == kind && k["preempted"] == preempted)
        .map(|k| common::u(&k["ns"]))
        .sum()
}

#[test]
fn preemptions_without_privilege_are_placed_at_the_last_cpu_sample() {
    // Two threads spin on one CPU for 600 ms: each is preempted by the other, never blocks.
    let prog = cases();
    let (report, _) = record(
        &[
            "record",
            "-q",
            "--off-cpu",
            "--format",
            "json",
            "--",
            prog.to_str().unwrap(),
            "preempt",
        ],
        true,
    );
    assert_eq!(report["off_cpu"]["mechanism"], "switch-records+proc");
    let preempted = common::u(&report["off_cpu"]["preempted_ns"]);
    assert!(preempted > 100_000_000, "preempted {preempted} ns");
    let unread = kind_ns(&report, "[wait not read]", true);
    let placed = kind_ns(&report, "[last CPU sample]", true);
    let src = source(&report, "preempted");
    let spinning = inclusive_ns(src, "spin_until");
    println!(
        "preempted {} ms: at the last sample {} ms (in spin_until {} ms), not read {} ms",
        preempted / 1_000_000,
        placed / 1_000_000,
        spinning / 1_000_000,
        unread / 1_000_000
    );
    // Each spinning thread runs for whole time slices between preemptions, each sampled many times; a
    // preemption whose stretch of running had no sample (the first moments of a thread) stays unread.
    assert!(
        unread * 5 < preempted,
        "{unread} of {preempted} preempted ns not read"
    );
    assert!(
        spinning * 10 >= preempted * 8,
        "{spinning} of {preempted} ns in spin_until"
    );
}

#[test]
fn a_wait_ended_by_the_process_exit_keeps_its_stack() {
    // A thread waits on a condition until its process exits 300 ms in; on one CPU it runs again (to die) only
    // after the process's exit record.
    let prog = cases();
    for unprivileged in [false, true] {
        let (report, _) = record(
            &[
                "record",
                "-q",
                "--off-cpu",
                "--format",
                "json",
                "--",
                prog.to_str().unwrap(),
                "exitwait",
            ],
            unprivileged,
        );
        let waited = inclusive_ns(source(&report, "off_cpu"), "worker_waits");
        println!(
            "{}: worker_waits {} ms",
            report["off_cpu"]["mechanism"],
            waited / 1_000_000
        );
        assert!(
            waited > 200_000_000,
            "{}: worker_waits blocked {waited} ns",
            report["off_cpu"]["mechanism"]
        );
    }
}

#[test]
fn the_unprivileged_watcher_yields_to_the_profiled_threads() {
    // Its thread runs at nice 19, as the profiled program sees it from /proc.
    let prog = cases();
    let out = run_ok(
        ntprof_command(true).args([
            "record",
            "-q",
            "--off-cpu",
            "--",
            prog.to_str().unwrap(),
            "nice",
        ]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("watcher nice 19"), "{text}");

    // It is not woken at each switch: in 1 ms rounds it reads at most the threads switched out then (two
    // here), while a ping-pong of short waits switches thousands of times.
    static P: OnceLock<PathBuf> = OnceLock::new();
    let pingpong = program(&P, "../benches/offcpu/pingpong.c", "pingpong");
    let (report, _) = record(
        &[
            "record",
            "-q",
            "--off-cpu",
            "--format",
            "json",
            "--",
            pingpong.to_str().unwrap(),
            "5000",
            "5",
        ],
        true,
    );
    let off = &report["off_cpu"];
    let (reads, switches) = (common::u(&off["reads"]), common::u(&off["switches"]));
    let ms = report["run"]["duration_s"].as_f64().unwrap() * 1e3;
    println!("{switches} switch-outs in {ms:.0} ms, {reads} readings");
    // About 20,000 by design; fewer on a loaded machine, where a thread is often still runnable when its
    // partner writes (8,191 seen at load average 12).
    assert!(switches >= 5_000, "{switches} switch-outs");
    // Two threads per round, a round per millisecond, and the rounds after the command's end.
    let most = 2.0 * (ms + 100.0);
    assert!(
        (reads as f64) <= most,
        "{reads} readings in {ms:.0} ms (at most {most:.0})"
    );
}

#[test]
fn a_vfork_wait_has_one_name_in_both_mechanisms() {
    let prog = cases();
    for unprivileged in [false, true] {
        let (report, _) = record(
            &[
                "record",
                "-q",
                "--off-cpu",
                "--format",
                "json",
                "--",
                prog.to_str().unwrap(),
                "vfork",
            ],
            unprivileged,
        );
        let mechanism = &report["off_cpu"]["mechanism"];
        let kinds: Vec<&str> = report["off_cpu"]["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["kind"].as_str().unwrap())
            .collect();
        println!("{mechanism}: {kinds:?}");
        let clone = kind_ns(&report, "clone", false);
        assert!(
            clone > 150_000_000,
            "{mechanism}: clone {clone} ns, kinds {kinds:?}"
        );
        for other in ["vfork", "clone3", "fork"] {
            assert!(!kinds.contains(&other), "{mechanism}: {kinds:?}");
        }
    }
}

#[test]
fn truncated_off_cpu_stacks_have_their_own_note() {
    // Four sleeps 2000 calls deep: the 8192-byte copy of the blocked stack holds a part of it. (One wait whose
    // stack was read while blocked is enough; a single one was missed once on a loaded machine, when the reader
    // came after the thread had woken: "1 switch-outs seen" and no note.)
    let prog = cases();
    let (report, _) = record(
        &[
            "record",
            "-q",
            "--off-cpu",
            "--format",
            "json",
            "--",
            prog.to_str().unwrap(),
            "deep",
        ],
        true,
    );
    let notes: Vec<&str> = report["run"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let cpu = &source(&report, "Timer")["stats"];
    let samples = common::u(&cpu["counted"]) + common::u(&cpu["outside"]);
    // The CPU samples' note, if any, counts CPU samples only (not nanoseconds off CPU).
    for n in notes
        .iter()
        .filter(|n| n.contains("call stacks are truncated"))
    {
        let of: u64 = n
            .split(" of ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(of <= samples, "{n} ({samples} CPU samples)");
    }
    let off = notes
        .iter()
        .find(|n| n.contains("off-CPU waits have a truncated stack"))
        .unwrap_or_else(|| panic!("{notes:?}"));
    assert!(off.contains("--call-graph dwarf,SIZE"), "{off}");
    assert!(!off.contains("try --call-graph dwarf"), "{off}");
}

#[test]
fn processes_of_one_command_wait_apart_in_the_graph_and_together_in_top_stacks() {
    // Two children of one command sleep at the same place, 200 and 300 ms.
    let prog = cases();
    let out = run_ok(
        ntprof_command(false).args([
            "record",
            "-q",
            "--off-cpu",
            "--format",
            "folded",
            "--",
            prog.to_str().unwrap(),
            "twins",
        ]),
        LIMIT,
    );
    let folded = String::from_utf8_lossy(&out.stdout);
    // The flame graph's towers (the folded stacks it is drawn from): one per child, each named `cmd [pid]`.
    let towers: Vec<&str> = folded
        .lines()
        .filter(|l| l.starts_with("off_cpu;") && l.contains(";twin_sleep;"))
        .collect();
    assert_eq!(towers.len(), 2, "{folded}");
    for t in &towers {
        let child = t.split(';').nth(2).unwrap();
        assert!(
            child.starts_with("offcpu_cases [") && child.ends_with(']'),
            "{t}"
        );
    }
    // The text's top stacks: one row for the two processes.
    let out = run_ok(
        ntprof_command(false).args([
            "record",
            "-q",
            "--off-cpu",
            "--",
            prog.to_str().unwrap(),
            "twins",
        ]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let top = text
        .split("Top stacks blocked")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let top = top.split("\n\n").next().unwrap();
    let rows: Vec<&str> = top.lines().filter(|l| l.contains("twin_sleep")).collect();
    assert_eq!(rows.len(), 1, "{top}");
    assert!(rows[0].contains("offcpu_cases (2 processes)"), "{top}");
}
