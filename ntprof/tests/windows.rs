//! Runs cut into windows (`--every SECONDS`, `--keep N`, `--output DIR/`): the windows cover the run without a
//! gap or an overlap, each written as JSON and pprof named by its start time; together they keep the designed
//! split of a program whose two functions share its time 60 : 40 by construction, with call stacks in each;
//! off-CPU time and JIT names work per window; `--keep` removes only the run's own oldest files; `attach`
//! windows end with `--duration`; the options that cannot go together are refused before anything runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{function_samples, inclusive_ns, run_bounded, run_ok, source, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
/// Generous: the machine may be shared and loaded.
const LIMIT: Duration = Duration::from_secs(240);

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| common::build_dir("windows"))
}

/// `split SECONDS`: CPU time 60 % in exe_hot, 40 % in lib_hot (libsplit.so), by construction.
fn split() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
        let s = |f: &str| src.join(f).to_str().unwrap().to_string();
        let d = dir().to_str().unwrap().to_string();
        common::gcc_shared(&format!("{d}/libsplit.so"), &s("libsplit.c"), dir());
        common::gcc(
            &[
                "-O2",
                "-g",
                "-fno-omit-frame-pointer",
                "-I",
                src.to_str().unwrap(),
                "-o",
                "split",
                &s("split.c"),
                "-L.",
                "-lsplit",
                "-Wl,-rpath,$ORIGIN",
            ],
            dir(),
        );
        dir().join("split")
    })
    .clone()
}

/// The windows in `folder`, oldest first: (file stem, JSON report).
fn windows_in(folder: &Path) -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> = std::fs::read_dir(folder)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".json")?.to_string();
            let json = std::fs::read(folder.join(&name)).ok()?;
            let report: Value = serde_json::from_slice(&json).ok()?;
            report["run"]["window"]
                .is_object()
                .then_some((stem, report))
        })
        .collect();
    v.sort_by_key(|(_, r)| u(&r["run"]["window"]["index"]));
    v
}

/// The checks every run's windows pass: numbered from 0 without a hole, each ending where the next starts,
/// only the last marked last, each written as JSON and pprof under its start time, nothing lost.
fn check_cover(folder: &Path, windows: &[(String, Value)], first_index: u64) {
    assert!(!windows.is_empty(), "no window in {}", folder.display());
    for (i, (stem, r)) in windows.iter().enumerate() {
        let w = &r["run"]["window"];
        assert_eq!(u(&w["index"]), first_index + i as u64, "{stem}");
        let start = w["start"].as_str().unwrap();
        // 2026-11-26T12:00:01.250123456Z -> 2026-11-26T12-00-01.250Z
        let expected = format!("{}Z", &start[..23].replace(':', "-"));
        assert_eq!(stem, &expected, "named by its start time");
        let pprof = std::fs::read(folder.join(format!("{stem}.pb.gz"))).unwrap();
        assert_eq!(&pprof[..2], &[0x1f, 0x8b], "{stem}.pb.gz is gzipped");
        assert!(u(&w["end_unix_ns"]) >= u(&w["start_unix_ns"]), "{w}");
        let last = i + 1 == windows.len();
        assert_eq!(w["last"].as_bool(), Some(last), "{stem}: {w}");
        if !last {
            let next = &windows[i + 1].1["run"]["window"];
            assert_eq!(
                w["end_unix_ns"], next["start_unix_ns"],
                "window {i} ends where the next starts"
            );
        }
        for s in r["sources"].as_array().unwrap() {
            assert_eq!(u(&s["stats"]["lost"]), 0, "{stem}: {}", s["name"]);
        }
    }
}

/// The CPU time `split` says it used (its last line on stderr: `split: done (…) after S s of CPU`), in ms.
fn split_cpu_ms(stderr: &str) -> f64 {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("split: done ("))
        .filter_map(|l| l.split(" after ").nth(1)?.strip_suffix(" s of CPU"))
        .find_map(|s| s.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no CPU time from split in:\n{stderr}"))
        * 1000.0
}

/// Three standard deviations of a share `p` measured from `n` samples, in points, and 2 points of skid.
fn margin(p: f64, n: u64) -> f64 {
    3.0 * (p * (1.0 - p) / n as f64).sqrt() * 100.0 + 2.0
}

#[test]
fn windows_cover_the_run_and_keep_the_designed_split() {
    let out = dir().join("cover/");
    let _ = std::fs::remove_dir_all(&out);
    let run = run_ok(
        Command::new(NTPROF)
            .args(["record", "-q", "-g", "--every", "1", "--output"])
            .arg(&out)
            .arg("--")
            .arg(split())
            .arg("3"),
        LIMIT,
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    let windows = windows_in(&out);
    assert!(
        windows.len() >= 3,
        "3 s of CPU in windows of 1 s: {} windows\n{stderr}",
        windows.len()
    );
    check_cover(&out, &windows, 0);
    assert!(
        stderr.contains(&format!("{} windows of 1 s", windows.len())),
        "the summary counts the windows: {stderr}"
    );
    let last = &windows.last().unwrap().1["run"];
    assert_eq!(last["ended_by"], "exited");
    assert_eq!(last["exit_status"], 0);
    let (mut exe, mut lib, mut all) = (0, 0, 0);
    for (stem, r) in &windows {
        let s = source(r, "Timer");
        let (e, l) = (
            function_samples(s, "exe_hot"),
            function_samples(s, "lib_hot"),
        );
        let n = u(&s["stats"]["counted"]) + u(&s["stats"]["outside"]);
        // One thread sampled every millisecond of its CPU time: a window holds its own samples, not the run's.
        let secs = r["run"]["duration_s"].as_f64().unwrap();
        assert!(
            n as f64 <= secs * 1000.0 * 1.1 + 20.0,
            "{stem}: {n} samples in {secs:.3} s"
        );
        if n >= 200 {
            // A full window holds the split too, and its call stacks.
            let share = e as f64 / (e + l) as f64;
            assert!(
                (share - 0.6).abs() * 100.0 <= margin(0.6, e + l),
                "{stem}: exe_hot {e}, lib_hot {l}"
            );
            let stacks = s["stacks"].as_array().unwrap();
            assert!(
                !stacks.is_empty(),
                "{stem}: -g gives each window its stacks"
            );
        }
        (exe, lib, all) = (exe + e, lib + l, all + n);
    }
    let share = exe as f64 / (exe + lib) as f64;
    assert!(
        (share - 0.6).abs() * 100.0 <= margin(0.6, exe + lib),
        "all windows: exe_hot {exe}, lib_hot {lib} of {all}"
    );
    assert!(
        exe + lib >= all * 9 / 10,
        "the designed functions hold the samples: {} of {all}",
        exe + lib
    );
    // Every sample of the run is in one window: together the windows hold one sample per millisecond of the
    // program's CPU time, which it prints itself at the end (the kernel's CLOCK_PROCESS_CPUTIME_ID, a count
    // independent of the sampling). Per-task cpu-clock events keep the part of a period a switch interrupts,
    // so the samples are that CPU time in milliseconds, plus at most 2 for the loader's time before `main` and
    // the exit; less by the kernel time charged to the program that is not sampled as its own, chiefly the
    // sampling interrupts themselves (about 15 us each on these virtual machines, 1.5 % at 1 ms), and by the
    // periods a late timer interrupt missed (the kernel forwards a late timer past them: one sample for
    // several), which grows with the host's contention: 0.9 % short was measured at a load average of 16 on 2
    // processors, 4.3 % at load 5 with two builds beside it (no sample lost, no steal time): 6 % at most. Cuts
    // that drop the samples of one 100 ms round each lose 10 % of a run of 3 s in 1 s windows.
    let cpu_ms = split_cpu_ms(&stderr);
    let low = 0.94 * cpu_ms;
    assert!(
        // Above by 1 % at most: 0.4 % over was measured on a loaded machine (a timer restarted on each
        // switch back with at least 10 us left gives a period short now and then).
        (low..=cpu_ms * 1.01 + 2.0).contains(&(all as f64)),
        "{all} samples in {} windows for {cpu_ms:.1} ms of CPU time (at least {low:.0}):\n{stderr}",
        windows.len()
    );
    // A window reads back like any profile (its pprof too).
    let first = out.join(format!("{}.pb.gz", windows[0].0));
    let last = out.join(format!("{}.pb.gz", windows.last().unwrap().0));
    let diff = run_ok(
        Command::new(NTPROF).arg("diff").arg(&first).arg(&last),
        LIMIT,
    );
    assert!(
        String::from_utf8_lossy(&diff.stdout).contains("exe_hot"),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
}

#[test]
fn keep_removes_only_the_runs_own_oldest_windows() {
    let out = dir().join("keep");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    // A user's files, one named like a window: never removed.
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    std::fs::write(out.join("2020-01-01T00-00-00.000Z.json"), "{}").unwrap();
    run_ok(
        Command::new(NTPROF)
            .args(["record", "-q", "--every", "0.5", "--keep", "2", "--output"])
            .arg(&out)
            .arg("--")
            .arg(split())
            .arg("2.5"),
        LIMIT,
    );
    let windows = windows_in(&out);
    assert_eq!(windows.len(), 2, "the newest 2 kept");
    let total = u(&windows[1].1["run"]["window"]["index"]) + 1;
    assert!(total >= 4, "2.5 s of CPU in windows of 0.5 s: {total}");
    check_cover(&out, &windows, total - 2);
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names.len(),
        6,
        "2 windows x 2 files and the user's 2: {names:?}"
    );
    assert!(names.contains(&"notes.txt".to_string()), "{names:?}");
    assert!(
        names.contains(&"2020-01-01T00-00-00.000Z.json".to_string()),
        "{names:?}"
    );
}

#[test]
fn attach_windows_end_with_the_duration() {
    let mut child = Command::new(split()).arg("60").spawn().unwrap();
    let out = dir().join("attach/");
    let _ = std::fs::remove_dir_all(&out);
    let run = run_bounded(
        Command::new(NTPROF)
            .args([
                "attach",
                "-q",
                "--duration",
                "3",
                "--every",
                "1",
                "--output",
            ])
            .arg(&out)
            .arg("--pid")
            .arg(child.id().to_string()),
        LIMIT,
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let windows = windows_in(&out);
    assert!(
        (3..=5).contains(&windows.len()),
        "{} windows",
        windows.len()
    );
    check_cover(&out, &windows, 0);
    let last = &windows.last().unwrap().1["run"];
    assert_eq!(last["ended_by"], "duration");
    assert_eq!(last["mode"], "attach");
    let named = windows
        .iter()
        .filter(|(_, r)| function_samples(source(r, "Timer"), "exe_hot") > 0)
        .count();
    assert!(named >= windows.len() - 1, "exe_hot in {named} windows");
}

#[test]
fn off_cpu_time_is_counted_per_window_and_in_full_over_the_run() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/waits.c");
    common::gcc(
        &[
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-ipa-icf",
            "-pthread",
            "-o",
            "waits_windows",
            src.to_str().unwrap(),
        ],
        dir(),
    );
    let out = dir().join("offcpu/");
    let _ = std::fs::remove_dir_all(&out);
    let run = run_ok(
        Command::new(NTPROF)
            .args(["record", "-q", "--off-cpu", "--every", "0.5", "--output"])
            .arg(&out)
            .arg("--")
            .arg(dir().join("waits_windows"))
            .arg("600"),
        LIMIT,
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    let windows = windows_in(&out);
    check_cover(&out, &windows, 0);
    // The nap's wait, summed over the windows: at least its design less 5 %, at most what the program measured.
    let took: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("nap ")?.strip_suffix(" ms")?.parse().ok())
        .unwrap_or_else(|| panic!("no time for nap: {stderr}"));
    let mut nap_ns = 0.0;
    let mut with_waits = 0;
    for (_, r) in &windows {
        let v = source(r, "off_cpu");
        let ns: u64 = v["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| u(&f["samples"]))
            .sum();
        with_waits += usize::from(ns > 0);
        nap_ns += inclusive_ns(v, "nap") as f64;
    }
    assert!(with_waits >= 2, "waits in {with_waits} windows");
    assert!(
        nap_ns >= 600e6 * 0.95 && nap_ns <= took * 1e6 * 1.01,
        "nap: {:.1} ms off CPU over the windows, designed 600, measured {took}",
        nap_ns / 1e6
    );
}

#[test]
fn options_that_cannot_go_together_are_refused_before_anything_runs() {
    let marker = dir().join("ran");
    let cmd = format!("touch {}", marker.display());
    let cases: [(&[&str], &str); 6] = [
        (&["--every", "1"], "--output DIR/"),
        (&["--every", "1", "--output", "x.json"], "end it with '/'"),
        (&["--keep", "2", "--output", "w/"], "--every"),
        (
            &["--every", "1", "--output", "w/", "--json", "a.json"],
            "drop --json",
        ),
        (&["--output", "w/"], "add --every"),
        (&["--every", "0.1", "--output", "w/"], "0.5 to 86400"),
    ];
    for (args, says) in cases {
        let _ = std::fs::remove_file(&marker);
        let out = run_bounded(
            Command::new(NTPROF)
                .arg("record")
                .args(args)
                .args(["--", "sh", "-c", &cmd])
                .current_dir(dir()),
            LIMIT,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!marker.exists(), "{args:?}: the command ran");
    }
}

/// JIT code is named in every window: node writes its jitdump file as it compiles, and each window's report
/// names its samples from it (by time), as a whole run's report does.
#[test]
fn jit_code_is_named_in_each_window() {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "node is required by this test and is missing or broken (install it: apt-get install nodejs)"
    );
    let work = dir().join("jit");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let script = work.join("hot.js");
    std::fs::write(
        &script,
        "function hotLoop(n) { let x = 0; for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003; return x; }\n\
         let s = 0; const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };\n\
         while (cpu() < 3e6) s += hotLoop(1000000);\n\
         console.log(s);\n",
    )
    .unwrap();
    let out = work.join("w/");
    let run = run_ok(
        Command::new(NTPROF)
            .current_dir(&work)
            .args(["record", "-q", "--every", "1", "--output"])
            .arg(&out)
            .args(["--", "node", "--perf-prof", "--perf-basic-prof"])
            .arg(&script),
        LIMIT,
    );
    let windows = windows_in(&out);
    check_cover(&out, &windows, 0);
    // Mid-run the runtime's dump may lack its newest code loads (it writes them buffered), so a window's JIT code
    // is named by time or from the perf map: either way, by the function.
    let mut named_windows = 0;
    for (stem, r) in &windows {
        let s = source(r, "Timer");
        let (mut hot, mut jit) = (0, 0);
        for f in s["functions"].as_array().unwrap() {
            if f["module"].as_str().unwrap().starts_with("[JIT] pid ") {
                jit += u(&f["samples"]);
                if f["name"].as_str().unwrap().contains("hotLoop") {
                    hot += u(&f["samples"]);
                }
            }
        }
        if jit >= 50 {
            assert!(
                hot * 10 >= jit * 9,
                "{stem}: hotLoop {hot} of {jit} JIT samples"
            );
            assert!(
                !r["run"]["jit"].as_array().unwrap().is_empty(),
                "{stem}: how its JIT code was named: {}",
                r["run"]
            );
            named_windows += 1;
        }
    }
    assert!(
        named_windows >= 2,
        "JIT code named in {named_windows} windows of {}: {}",
        windows.len(),
        String::from_utf8_lossy(&run.stderr)
    );
    for entry in std::fs::read_dir(&work).unwrap() {
        let name = entry.unwrap().file_name();
        if name.to_string_lossy().starts_with("jit-") {
            let _ = std::fs::remove_file(work.join(name));
        }
    }
}
