//! What a new user met (clamps and options that did nothing, perf's spellings, stacks that looked whole, a
//! report that does not read pprof): each is said, refused or marked, before or after the run.
//!
//! The text report is written with `-o FILE` so that these tests read it whatever stream carries it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::gcc;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

/// The programs of `tests/new_user`, built once per test binary.
fn programs() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/new_user/leaf.c");
        let dir = common::build_dir("new-user");
        let out = dir.join("leaf_nofp");
        gcc(
            &[
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-o",
                out.to_str().unwrap(),
                src.to_str().unwrap(),
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

fn scratch(name: &str) -> PathBuf {
    let p = programs().join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn notes(report: &Value) -> Vec<String> {
    report["run"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// `-F` above what the kernel allows runs at the kernel's floor: the report says the rate used and why, and
/// that such a rate slows the program; a rate the kernel grants gets neither note.
#[test]
fn a_clamped_rate_is_said_with_its_reason_and_its_cost() {
    let json = scratch("clamped.json");
    let out = ntprof(&[
        "record",
        "-q",
        "-F",
        "1000000",
        "--json",
        json.to_str().unwrap(),
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = read_json(&json);
    let used = report["sources"][0]["interval"].as_u64().unwrap();
    assert!(used > 10, "the kernel granted 1 µs here: nothing to test");
    let n = notes(&report);
    let clamp = n
        .iter()
        .find(|n| n.starts_with("Timer: asked to sample every 1 µs (1000000 Hz)"))
        .unwrap_or_else(|| panic!("no note on the clamp: {n:#?}"));
    let used_text = format!("sampled every {} µs", used as f64 / 10.0);
    assert!(
        clamp.contains(&used_text) && clamp.contains("kernel"),
        "{clamp}"
    );
    assert!(
        n.iter().any(|n| n.contains("slow the program down")),
        "{n:#?}"
    );

    let out = ntprof(&[
        "record",
        "-q",
        "-F",
        "1000",
        "--json",
        json.to_str().unwrap(),
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let n = notes(&read_json(&json));
    assert!(
        !n.iter()
            .any(|n| n.contains("asked to sample") || n.contains("slow the program")),
        "{n:#?}"
    );
}

/// perf's event names are aliases of the sources, `-e` included; one that needs a PMU is refused with the
/// reason where none exists.
#[test]
fn perf_event_names_and_e_select_sources() {
    let json = scratch("events.json");
    let out = ntprof(&[
        "record",
        "-q",
        "-e",
        "cpu-clock",
        "--event",
        "page-faults",
        "--json",
        json.to_str().unwrap(),
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let names: Vec<String> = read_json(&json)["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["Timer", "page-faults"]);

    let out = ntprof(&[
        "record",
        "-q",
        "-e",
        "cycles",
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    let err = stderr(&out);
    if ntprofile::ProfileSource::TotalCycles
        .support()
        .is_supported()
    {
        assert_eq!(out.status.code(), Some(0), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("TotalCycles") && err.contains("PMU"), "{err}");
        assert!(!err.contains("unexpected argument"), "{err}");
    }
}

/// `--call-tree` without call stacks is refused (record: before the command runs; report: naming the file),
/// and the options that do nothing stay out of every subcommand's help.
#[test]
fn options_that_would_do_nothing_are_refused_or_kept_out_of_the_help() {
    let witness = scratch("ran");
    let touch = format!("touch {}", witness.display());
    let out = ntprof(&["record", "-q", "--call-tree", "--", "sh", "-c", &touch]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("-g"), "{}", stderr(&out));
    assert!(!witness.exists(), "the command ran");

    let json = scratch("flat.json");
    let out = ntprof(&[
        "record",
        "-q",
        "--json",
        json.to_str().unwrap(),
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = ntprof(&["report", "--call-tree", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("flat.json has none") && stderr(&out).contains("--call-graph dwarf"),
        "{}",
        stderr(&out)
    );

    for sub in ["record", "attach", "top"] {
        let help = ntprof(&[sub, "--help"]);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.contains("--call-graph"), "{sub}: {text}");
        assert!(
            !text.contains("--poll-ms") && !text.contains("--jitter"),
            "{sub}: {text}"
        );
    }
    let out = ntprof(&[
        "record",
        "-q",
        "--poll-ms",
        "5",
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--poll-ms 5 does nothing"),
        "{}",
        stderr(&out)
    );
}

/// A frame-pointer stack that ends at no entry (a program built without frame pointers) carries the same
/// `[fp chain ended]` frame in the folded stacks, the pprof profile, the JSON stacks and the text report, which
/// names the likely cause once.
#[test]
fn an_ended_fp_chain_is_marked_in_every_format() {
    let prog = programs().join("leaf_nofp");
    let (folded, json, text) = (scratch("s.folded"), scratch("s.json"), scratch("s.txt"));
    let pprof = scratch("s.pb.gz");
    let out = ntprof(&[
        "record",
        "-q",
        "-g",
        "--format",
        "folded",
        "-o",
        folded.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--pprof",
        pprof.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let folded = std::fs::read_to_string(&folded).unwrap();
    let leaf: Vec<&str> = folded.lines().filter(|l| l.contains("leaf_loop")).collect();
    assert!(!leaf.is_empty(), "{folded}");
    for line in &leaf {
        assert!(
            line.contains(";[fp chain ended];") || line.contains(";[truncated];"),
            "a stack that lost its callers reads as whole: {line}"
        );
    }
    let report = read_json(&json);
    let stacks = report["sources"][0]["stacks"].as_array().unwrap();
    assert!(
        stacks.iter().any(|s| s["fp_chain_ended"] == true),
        "{stacks:#?}"
    );
    let unzipped = Command::new("gzip")
        .arg("-dc")
        .arg(&pprof)
        .output()
        .unwrap();
    assert!(unzipped.status.success(), "gzip -dc {}", pprof.display());
    let bytes = unzipped.stdout;
    assert!(
        bytes.windows(16).any(|w| w == b"[fp chain ended]"),
        "the pprof profile has no [fp chain ended] frame"
    );
    let out = ntprof(&[
        "report",
        "-o",
        text.to_str().unwrap(),
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&text).unwrap();
    assert!(text.contains("[fp chain ended]"), "{text}");
    assert_eq!(
        text.matches("cut the chain: try --call-graph dwarf")
            .count(),
        1,
        "{text}"
    );
}

/// `report` reads JSON: a pprof profile gets an error that says so and what reads it, not a UTF-8 complaint.
#[test]
fn report_of_a_pprof_profile_says_what_it_reads() {
    let pprof = scratch("r.pb.gz");
    let out = ntprof(&[
        "record",
        "-q",
        "--pprof",
        pprof.to_str().unwrap(),
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = ntprof(&["report", pprof.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not a JSON profile") && err.contains("ntprof diff"),
        "{err}"
    );
    assert!(!err.contains("UTF-8"), "{err}");
}

/// `--off-cpu` turns on frame-pointer stacks by default: where the CPU samples' end early (a program built
/// without frame pointers) the notes say how much, and the fix; a stack that passed an entry is whole in every
/// source (the waits' stacks, unwound from a copy with CFI, reach `_start`).
#[test]
fn off_cpu_fp_stacks_that_end_early_are_explained() {
    let json = scratch("off.json");
    let out = ntprof(&[
        "record",
        "-q",
        "--off-cpu",
        "--json",
        json.to_str().unwrap(),
        "-o",
        "/dev/null",
        "--",
        programs().join("leaf_nofp").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = read_json(&json);
    // Whether a stack ended early, read from its frames: a whole walk reaches a thread's or program's entry
    // (a program and a libc built with frame pointers reach one; see below for this one).
    let origin = |f: &str| {
        f.starts_with("__libc_start")
            || f.starts_with("clone")
            || f.contains("thread_start")
            || [
                "_start",
                "start_thread",
                "__clone",
                "__clone3",
                "__GI___clone3",
            ]
            .contains(&f)
    };
    let mut ended = false;
    for s in report["sources"].as_array().unwrap().iter() {
        let cpu = s["interval_unit"] != "switch";
        for stack in s["stacks"].as_array().unwrap() {
            // Whole when any frame is an entry (a stripped program's `_start` above it has no name).
            let passed = stack["frames"].as_array().unwrap().iter().any(|l| {
                let loc = &s["locations"][l.as_u64().unwrap() as usize];
                loc["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| origin(f["function"].as_str().unwrap()))
            });
            let early = stack["truncated"] == false && !passed;
            assert_eq!(stack["fp_chain_ended"] == true, early, "{stack}");
            ended |= early && cpu;
        }
    }
    // The program keeps no frame pointer: a frame-pointer walk from its hot leaf cannot reach main.
    assert!(ended, "no CPU sample's stack ended early: {report:#}");
    let n = notes(&report);
    let note = n
        .iter()
        .find(|n| n.contains("of the CPU samples have a frame-pointer stack"));
    assert_eq!(note.is_some(), ended, "{n:#?}");
    if let Some(note) = note {
        assert!(note.contains("--call-graph dwarf"), "{note}");
    }
}
