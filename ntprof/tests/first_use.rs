//! What a first-time user meets: side-band records read from every processor whatever `--cpus` samples, the
//! README's sample output against a real run, command lines with newlines, cut frame-pointer chains, perf's
//! spellings (`-F`, `-p`, a command without `--`), options checked before the command runs, and the wording of
//! reports.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{gcc, source, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

/// The C programs of `tests/first_use`, built once per test binary.
fn programs() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/first_use");
        let dir = common::build_dir("first-use");
        let d = dir.to_str().unwrap();
        let s = |f: &str| src.join(f).to_str().unwrap().to_string();
        gcc(
            &[
                "-O2",
                "-g",
                "-pthread",
                "-o",
                &format!("{d}/other_cpu"),
                &s("other_cpu.c"),
            ],
            &dir,
        );
        gcc(
            &[
                "-O2",
                "-g",
                "-fno-omit-frame-pointer",
                "-o",
                &format!("{d}/qsort_fp"),
                &s("qsort_fp.c"),
            ],
            &dir,
        );
        dir
    })
}

fn ntprof(args: &[&str]) -> Output {
    common::run_bounded(Command::new(NTPROF).args(args), Duration::from_secs(120))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not the JSON report ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The program starts (exec, loader, libc's mapping, its thread's creation) on the last processor and works on
/// processor 0: `--cpus 0` samples processor 0 only, yet knows every mapping, so every sample is counted in a
/// module and libc is among them.
#[test]
fn cpus_limits_the_samples_not_the_side_band() {
    let prog = programs().join("other_cpu");
    if online_cpus() < 2 {
        eprintln!(
            "one processor online: the program starts and works on processor 0 (no other to start on)"
        );
    }
    let out = ntprof(&[
        "record",
        "--cpus",
        "0",
        "--format",
        "json",
        "-i",
        "2000",
        "--",
        prog.to_str().unwrap(),
        "start",
    ]);
    let report = json_of(&out);
    let s = source(&report, "Timer");
    let st = &s["stats"];
    let (counted, outside) = (u(&st["counted"]), u(&st["outside"]));
    let samples = counted + outside + u(&st["lost"]);
    eprintln!("samples {samples} = counted {counted} + outside {outside}");
    assert!(samples >= 100, "too few samples: {st}");
    assert_eq!(outside, 0, "samples outside every known module: {st}");
    let modules: Vec<&str> = s["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(
        modules.iter().any(|m| m.starts_with("libc.so")),
        "libc missing from the modules {modules:?}"
    );
    assert!(modules.contains(&"other_cpu"), "{modules:?}");
}

/// A scratch file path in this test binary's build directory.
fn scratch(name: &str) -> PathBuf {
    let p = programs().join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// `ntprof record CMD ARGS` without `--` runs the command, as perf does: every word from the command's on is
/// the command's, options included.
#[test]
fn record_runs_a_command_given_without_double_dash() {
    let out = ntprof(&["record", "--format", "json", "sh", "-c", "exit 7", "-x"]);
    assert_eq!(out.status.code(), Some(7), "stderr: {}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    assert_eq!(
        report["run"]["command"],
        serde_json::json!(["sh", "-c", "exit 7", "-x"])
    );
    // An option ntprof does not know, before any command, is still a usage error, not a command.
    let out = ntprof(&["record", "--no-such-option", "true"]);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
}

/// `-F HZ` / `--freq HZ` sample time sources HZ times a second: the interval is 1/HZ s in 100 ns units;
/// given with a bare `--interval`, or with no time source, it is a usage error.
#[test]
fn freq_sets_the_interval_of_time_sources() {
    for flag in ["-F", "--freq"] {
        let report = json_of(&ntprof(&[
            "record", flag, "400", "--format", "json", "--", "true",
        ]));
        assert_eq!(
            u(&source(&report, "Timer")["interval"]),
            25_000,
            "{flag} 400"
        );
    }
    let report = json_of(&ntprof(&[
        "record",
        "-F",
        "400",
        "-s",
        "Timer,page-faults",
        "--format",
        "json",
        "--",
        "true",
    ]));
    assert_eq!(u(&source(&report, "Timer")["interval"]), 25_000);
    let faults = u(&source(&report, "page-faults")["interval"]);
    assert_ne!(faults, 25_000, "page-faults keeps its own interval");
    for bad in [
        &["record", "-F", "400", "-i", "100", "--", "true"][..],
        &["record", "-F", "400", "-s", "page-faults", "--", "true"],
        &["record", "-F", "0", "--", "true"],
    ] {
        let out = ntprof(bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
    }
}

/// `record -p PID` is perf's spelling of `attach --pid PID`.
#[test]
fn record_p_attaches_to_a_running_process() {
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id().to_string();
    let out = ntprof(&[
        "record",
        "-p",
        &pid,
        "--duration",
        "0.3",
        "--format",
        "json",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    let report = json_of(&out);
    assert_eq!(report["run"]["mode"], "attach");
    assert_eq!(u(&report["run"]["pid"]), u64::from(child.id()));
    // With a command as well, it is a usage error.
    let out = ntprof(&["record", "-p", &pid, "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
}

/// Options that cannot be honoured fail before the command runs: `--jitter` (the sampler's period is fixed)
/// and a `--module` that names no file.
#[test]
fn jitter_and_unknown_modules_are_refused_before_the_command_runs() {
    for (args, said) in [
        (&["--jitter", "20"][..], "--jitter 20"),
        (&["--module", "nosuch.so"], "--module nosuch.so"),
        (&["--module", "/no/such/dir/libx.so"], "no such file"),
    ] {
        let witness = scratch("ran");
        let mut argv = vec!["record"];
        argv.extend_from_slice(args);
        let touch = format!("touch {}", witness.display());
        argv.extend_from_slice(&["--", "sh", "-c", &touch]);
        let out = ntprof(&argv);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}: a report was printed");
        assert!(!witness.exists(), "{args:?}: the command ran");
    }
    // A module that exists passes the check, by file name or by path, and so does the command's own name.
    let out = ntprof(&[
        "record",
        "--module",
        "libc.so.6",
        "--module",
        "true",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `--quiet` (no progress) belongs to the commands that record; `report` has no progress and no such option.
#[test]
fn report_has_no_quiet_option() {
    let help = ntprof(&["report", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("--format"), "{text}");
    assert!(!text.contains("--quiet"), "{text}");
    let rec = String::from_utf8_lossy(&ntprof(&["record", "--help"]).stdout).into_owned();
    assert!(
        rec.contains("--quiet") && rec.contains("--freq") && rec.contains("--pid"),
        "{rec}"
    );
}

/// A command line with newlines (a `sh -c` or `python3 -c` script) is one line of the header and one row of
/// the process table, its newlines escaped; the JSON report keeps the real string.
#[test]
fn multi_line_command_lines_are_escaped_in_text_and_kept_in_json() {
    let script = "x=1\ny=2\nexit 0";
    let json = scratch("multi_line.json");
    let out = ntprof(&[
        "record",
        "--json",
        json.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let escaped = "x=1\\ny=2\\nexit 0";
    let header = text.lines().next().unwrap();
    assert_eq!(header, format!("ntprof record: sh -c {escaped}"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("[sh -c {escaped}]"))),
        "no process row with the escaped line:\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("y=2") || l.starts_with("exit 0")),
        "a raw newline of the command line:\n{text}"
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["run"]["command"][2], script);

    // The case as it was met: a `python3 -c` script with a loop, the process table's row included.
    let script = "import sys\nfor i in range(3):\n    pass\nsys.exit(0)";
    let out = ntprof(&["record", "--", "python3", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let escaped = "import sys\\nfor i in range(3):\\n    pass\\nsys.exit(0)";
    assert_eq!(
        text.lines().next().unwrap(),
        format!("ntprof record: python3 -c {escaped}"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("[python3 -c {escaped}]"))),
        "no process row with the escaped line:\n{text}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("for i")
            || l.starts_with("    pass")
            || l.starts_with("sys.exit")),
        "a raw newline of the command line:\n{text}"
    );
}

/// `ntprof sources` gives each source that cannot be sampled one clear reason, not an error and its OS text
/// twice over.
#[test]
fn sources_give_one_reason_each() {
    let out = ntprof(&["sources"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines().filter(|l| l.starts_with("0x")) {
        assert!(!line.contains("os error"), "{line}");
        assert!(
            line.matches('(').count() <= 1,
            "more than one parenthesis: {line}"
        );
    }
}

/// A frame-pointer chain that ends in code built without frame pointers (the comparator libc's qsort calls) is
/// not shown as a complete stack (`[root]`): its outermost caller is `[fp chain ended]`, and the report says
/// that `--call-graph dwarf` walks such code.
#[test]
fn fp_chains_that_end_in_libc_are_marked_possibly_cut() {
    let prog = programs().join("qsort_fp");
    let out = ntprof(&["record", "-g", "--call-tree", "--", prog.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let called_from = &text[text.find("Called from").expect("a Called from section")..];
    let compare = &called_from[called_from
        .find("slow_compare")
        .expect("slow_compare's callers")..];
    let callers: Vec<&str> = compare
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect();
    assert!(!callers.is_empty(), "{called_from}");
    assert!(
        !callers.iter().any(|l| l.trim_end().ends_with("[root]")),
        "a frame-pointer chain that ended in libc reads as complete:\n{called_from}"
    );
    assert!(
        callers.iter().any(|l| l.contains("[fp chain ended]")
            || l.contains("[truncated]")
            || l.contains("msort")),
        "{called_from}"
    );
    if callers.iter().any(|l| l.contains("[fp chain ended]")) {
        assert!(called_from.contains("--call-graph dwarf"), "{called_from}");
    }
}

/// Notes count in words that agree with the number: "1 process ... was", never "process(es)".
#[test]
fn notes_use_singular_and_plural() {
    let mut sh = Command::new("sh")
        .args(["-c", "sleep 30 & wait"])
        .spawn()
        .unwrap();
    let pid = sh.id();
    // Attach once the shell's one child is running (its children list in /proc names it).
    let children = format!("/proc/{pid}/task/{pid}/children");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&children)
        .ok()
        .is_none_or(|c| c.trim().is_empty())
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the shell started no child"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = ntprof(&["attach", "--pid", &pid.to_string(), "--duration", "0.3"]);
    let kids = std::fs::read_to_string(&children).unwrap_or_default();
    for k in kids.split_whitespace() {
        let _ = Command::new("kill").arg(k).status();
    }
    let _ = sh.kill();
    let _ = sh.wait();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("(es)") && !text.contains("(s) "), "{text}");
    assert!(
        text.contains(
            "note: 1 process the attached process had started before the attach was profiled too"
        ),
        "{text}"
    );
}
