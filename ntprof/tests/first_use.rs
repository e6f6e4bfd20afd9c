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
