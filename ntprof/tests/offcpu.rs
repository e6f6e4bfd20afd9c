//! `--off-cpu`: a designed program (`tests/c/waits.c`: CPU, a sleep, a blocking pipe read and a mutex wait of
//! PHASE ms each, in distinct functions) recorded with and without frame pointers, under `-g` and
//! `--call-graph dwarf`, as root (switch samples) and as an unprivileged user (switch records and /proc): the
//! off-CPU time under each function is at least its design and at most the time the function took (the
//! program measures it), the CPU phase has none, the wait kinds are the system calls, and pprof reads the
//! `off_cpu` sample type.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{inclusive_ns, is_root, ntprof_command, run_bounded, run_ok, source};

use serde_json::Value;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
const LIMIT: Duration = Duration::from_secs(120);
/// Milliseconds of each phase.
const PHASE_MS: u64 = 300;

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    // In the system's temporary directory, readable by everyone: the unprivileged runs (as nobody) must reach
    // the programs, and a checkout may lie under a directory only its owner can enter.
    D.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ntprof-offcpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        dir
    })
}

/// The designed program, with frame pointers or without.
fn waits(frame_pointers: bool) -> PathBuf {
    static FP: OnceLock<PathBuf> = OnceLock::new();
    static NOFP: OnceLock<PathBuf> = OnceLock::new();
    let (cell, name, flag) = if frame_pointers {
        (&FP, "waits_fp", "-fno-omit-frame-pointer")
    } else {
        (&NOFP, "waits_nofp", "-fomit-frame-pointer")
    };
    cell.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/waits.c");
        // -fno-ipa-icf: the two sleeping functions must stay two.
        common::gcc(
            &[
                "-O2",
                "-g",
                flag,
                "-fno-ipa-icf",
                "-pthread",
                "-o",
                name,
                src.to_str().unwrap(),
            ],
            dir(),
        );
        dir().join(name)
    })
    .clone()
}

/// `ntprof ARGS` (as nobody with `unprivileged` when we are root): its JSON report on standard output.
fn record(args: &[&str], unprivileged: bool) -> Value {
    record_with_stderr(args, unprivileged).0
}

/// `ntprof ARGS` as [`record`]: its JSON report and its standard error (the command's too).
fn record_with_stderr(args: &[&str], unprivileged: bool) -> (Value, String) {
    let out = run_ok(ntprof_command(unprivileged).args(args), LIMIT);
    (
        serde_json::from_slice(&out.stdout).expect("a JSON report"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The milliseconds `waits.c` says `function` lasted (its line `FUNCTION MS ms` on standard error).
fn measured_ms(stderr: &str, function: &str) -> f64 {
    stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix(function)?
                .strip_prefix(' ')?
                .strip_suffix(" ms")
        })
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("waits.c printed no time for {function}: {stderr}"))
}

/// Check one run of the designed program against what the kernel's switch times guarantee, on a loaded machine
/// too: each waiting function lasts at least PHASE_MS from inside it (the program's design) and the thread is
/// off the CPU for nearly all of it, so its voluntary off-CPU time and its preempted time (runnable, waiting for
/// a CPU) add up to at least PHASE_MS less 5 % (the instructions around the wait, timer slack); the voluntary
/// time within a call never exceeds the time the call took, which the program measures (`stderr`); a machine
/// under load makes waits longer, never shorter. The CPU phase blocked for less than 10 % of PHASE_MS; the wait
/// kinds are the system calls.
fn check(report: &Value, stderr: &str, mechanism: &str, what: &str) {
    let off = &report["off_cpu"];
    assert_eq!(off["mechanism"], mechanism, "{what}");
    let v = source(report, "off_cpu");
    let preempted = source(report, "preempted");
    let design = PHASE_MS as f64 * 1e6;
    let mut row = Vec::new();
    // The helper thread slept twice PHASE_MS under helper_sleep.
    for (f, times) in [
        ("nap", 1.0),
        ("pipe_wait", 1.0),
        ("lock_wait", 1.0),
        ("helper_sleep", 2.0),
    ] {
        let ns = inclusive_ns(v, f) as f64;
        let pre = inclusive_ns(preempted, f) as f64;
        let took = measured_ms(stderr, f) * 1e6;
        row.push(format!(
            "{f} {:.1} ms (+{:.1} preempted) of {:.1} ms",
            ns / 1e6,
            pre / 1e6,
            took / 1e6
        ));
        assert!(
            took >= times * design,
            "{what}: {f} took {:.1} ms, designed {PHASE_MS} ms",
            took / 1e6
        );
        assert!(
            ns + pre >= 0.95 * times * design,
            "{what}: {f} blocked {:.1} ms and was preempted {:.1} ms, designed {} ms",
            ns / 1e6,
            pre / 1e6,
            times * PHASE_MS as f64
        );
        // 1 ms: the program's clock readings are taken a few instructions outside the switches.
        assert!(
            ns <= took + 1e6,
            "{what}: {f} blocked {:.1} ms, longer than the {:.1} ms it took",
            ns / 1e6,
            took / 1e6
        );
    }
    let burn = inclusive_ns(v, "burn_cpu") as f64;
    assert!(
        burn < 0.10 * design,
        "{what}: burn_cpu blocked {:.1} ms",
        burn / 1e6
    );
    let kinds: Vec<&str> = off["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["preempted"] == false && common::u(&k["ns"]) as f64 > 0.5 * design)
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    for k in ["clock_nanosleep", "read", "futex"] {
        assert!(kinds.contains(&k), "{what}: wait kinds {kinds:?}");
    }
    let threads = off["threads"].as_array().unwrap();
    assert!(
        threads.iter().any(|t| t["name"] == "helper"),
        "{what}: {threads:?}"
    );
    println!("{what}: {}", row.join(", "));
}

fn designed(frame_pointers: bool, unprivileged: bool) {
    // As root: the privileged mechanism (switch samples); as another user the test would try the other one.
    if !unprivileged && !common::root_or_skip("the privileged mechanism, switch samples") {
        return;
    }
    let program = waits(frame_pointers);
    let phase = PHASE_MS.to_string();
    let mechanism = if unprivileged || !is_root() {
        "switch-records+proc"
    } else {
        "switch-samples"
    };
    for mode in ["-g", "--call-graph=dwarf"] {
        let (report, stderr) = record_with_stderr(
            &[
                "record",
                "-q",
                "--off-cpu",
                mode,
                "--format",
                "json",
                "--",
                program.to_str().unwrap(),
                &phase,
            ],
            unprivileged,
        );
        let what = format!(
            "{} {mode} {}",
            program.file_name().unwrap().to_string_lossy(),
            if unprivileged {
                "unprivileged"
            } else {
                "as we are"
            }
        );
        check(&report, &stderr, mechanism, &what);
    }
}

#[test]
fn designed_waits_with_frame_pointers_as_root() {
    designed(true, false);
}

#[test]
fn designed_waits_without_frame_pointers_as_root() {
    designed(false, false);
}

#[test]
fn designed_waits_with_frame_pointers_unprivileged() {
    designed(true, true);
}

#[test]
fn designed_waits_without_frame_pointers_unprivileged() {
    designed(false, true);
}

/// The text report has the Off-CPU section, and a run without --off-cpu whose command mostly waited points to
/// it.
#[test]
fn text_section_and_the_why_line() {
    let program = waits(false);
    let out = run_bounded(
        Command::new(NTPROF).args([
            "record",
            "-q",
            "--off-cpu",
            "--",
            program.to_str().unwrap(),
            "100",
        ]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "Off-CPU time (",
        "voluntary",
        "helper",
        "clock_nanosleep",
        "Top stacks blocked (voluntary)",
        "pipe_wait",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
    // A sleeper without --off-cpu: the why line points to it.
    let out = run_bounded(
        Command::new(NTPROF).args(["record", "-q", "--", "sleep", "0.3"]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--off-cpu"), "{text}");
}

/// pprof reads the off_cpu sample type: `-sample_index=off_cpu -top` lists the waiting functions.
#[test]
fn pprof_reads_the_off_cpu_sample_type() {
    let Some(pprof) = common::pprof() else {
        return;
    };
    let program = waits(false);
    let pb = dir().join("waits.pb.gz");
    let out = run_bounded(
        Command::new(NTPROF)
            .args(["record", "-q", "--off-cpu", "--call-graph=dwarf", "--pprof"])
            .arg(&pb)
            .args(["--", program.to_str().unwrap(), &PHASE_MS.to_string()]),
        LIMIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let top = run_bounded(
        Command::new(&pprof)
            .args(["-top", "-cum", "-nodecount=100", "-sample_index=off_cpu"])
            .arg(&pb),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        top.status.success(),
        "pprof: {}",
        String::from_utf8_lossy(&top.stderr)
    );
    println!("{text}");
    // Rows: flat flat% sum% cum cum% name; cum in ms or s.
    let cum_ms = |name: &str| -> f64 {
        text.lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() >= 6 && w[5..].join(" ") == name).then(|| w[3].to_string())
            })
            .next()
            .map_or(0.0, |v| {
                if let Some(ms) = v.strip_suffix("ms") {
                    ms.parse().unwrap_or(0.0)
                } else if let Some(s) = v.strip_suffix('s') {
                    s.parse::<f64>().unwrap_or(0.0) * 1e3
                } else {
                    0.0
                }
            })
    };
    for f in ["nap", "pipe_wait", "lock_wait"] {
        let ms = cum_ms(f);
        assert!(
            (ms - PHASE_MS as f64).abs() <= 0.10 * PHASE_MS as f64,
            "{f}: {ms} ms in pprof"
        );
    }
}

/// `attach --off-cpu`: a shell that sleeps in a loop, attached for a second — its waits for its `sleep`
/// children (wait4) and theirs (clock_nanosleep) are counted, no more than the attach's length per thread.
#[test]
fn attach_counts_the_waits_of_a_running_tree() {
    let mut child = Command::new("sh")
        .args(["-c", "while :; do sleep 0.05; done"])
        .spawn()
        .expect("sh");
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id().to_string();
    let report = record(
        &[
            "attach",
            "-q",
            "--off-cpu",
            "--pid",
            &pid,
            "--duration",
            "1",
            "--format",
            "json",
        ],
        false,
    );
    let _ = child.kill();
    let _ = child.wait();
    let off = &report["off_cpu"];
    let kinds: Vec<&str> = off["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"wait4"), "{kinds:?}");
    assert!(
        kinds.contains(&"clock_nanosleep") || kinds.contains(&"nanosleep"),
        "{kinds:?}"
    );
    let shell = off["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"].as_u64() == Some(u64::from(child.id())))
        .expect("the shell's thread");
    let ms = common::u(&shell["voluntary_ns"]) as f64 / 1e6;
    // Mostly waiting for its children during the 1 s attach: never more than the attach.
    assert!(ms > 500.0 && ms < 1100.0, "the shell waited {ms:.1} ms");
}

/// The Off-CPU section names C++ functions as the CPU tables do, without parameter lists and template return
/// types; JSON keeps the full names.
#[test]
fn cpp_names_in_the_off_cpu_section_are_short() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/waits_cpp.cpp");
    let out = dir().join("waits_cpp");
    let built = Command::new("g++")
        .args(["-O1", "-g", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("g++");
    assert!(built.success(), "g++ failed");
    let program = out.to_str().unwrap();
    let run = run_ok(
        Command::new(NTPROF).args(["record", "-q", "--off-cpu", "--", program]),
        LIMIT,
    );
    let text = String::from_utf8_lossy(&run.stdout);
    let section = &text[text.find("Off-CPU time (").expect("an Off-CPU section")..];
    for want in [
        "  Waiter::nap\n",
        "  run<int>\n",
        "<- Waiter::nap <- run<int> <- main",
    ] {
        assert!(section.contains(want), "{want:?} missing from:\n{section}");
    }
    // No parameter list and no template return type. (A class's own template arguments stay: a preemption
    // inside the vector's allocation is named `std::_Vector_base<int, std::allocator<int> >::_M_allocate`, as
    // one quiet run showed.)
    for full in ["Waiter::nap(", "run<int>(", "int run<int>"] {
        assert!(!section.contains(full), "{full:?} in:\n{section}");
    }
    let report = record(
        &[
            "record",
            "-q",
            "--off-cpu",
            "--format",
            "json",
            "--",
            program,
        ],
        false,
    );
    let json = report.to_string();
    assert!(json.contains("Waiter::nap(std::vector<int, std::allocator<int> > const&, int)"));
}
