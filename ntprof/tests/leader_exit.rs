//! A process whose main thread ends with `pthread_exit` while its workers go on (`tests/c/leader_exit.c`: two
//! workers burn CPU in `lib_burn` of `libburn.so`, then sleep in `worker_nap`): the process is listed once, the
//! workers' samples are named (none outside every module), and their off-CPU stacks are whole (the sleep under
//! `worker_nap` under `worker_main`) — recorded as root and as an unprivileged user, and attached to after the
//! main thread ended.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::{function_samples, ntprof_command, run_ok, u};

use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(180);
/// Each worker's sleep in `worker_nap`, ms.
const NAP_MS: u64 = 300;

/// The program and its library, in a directory everyone can enter (the unprivileged runs must reach them).
fn program() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ntprof-leader-exit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
        let s = |f: &str| src.join(f).to_str().unwrap().to_string();
        common::gcc(
            &[
                "-O2",
                "-g",
                "-fPIC",
                "-shared",
                "-o",
                "libburn.so",
                &s("libburn.c"),
            ],
            &dir,
        );
        common::gcc(
            &[
                "-O2",
                "-g",
                "-pthread",
                "-o",
                "leader_exit",
                &s("leader_exit.c"),
                "-L.",
                "-lburn",
                "-Wl,-rpath,$ORIGIN",
            ],
            &dir,
        );
        dir.join("leader_exit")
    })
}

/// Nanoseconds of the `off_cpu` stacks that have `function` on them.
fn off_cpu_ns(report: &Value, function: &str) -> u64 {
    let s = common::source(report, "off_cpu");
    let locations = s["locations"].as_array().unwrap();
    s["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| {
            st["frames"].as_array().unwrap().iter().any(|l| {
                let loc = &locations[u(l) as usize];
                loc["function"] == function
                    || loc["frames"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f["function"] == function)
            })
        })
        .map(|st| u(&st["samples"]))
        .sum()
}

/// The checks every run shares: the process listed once, the CPU samples named, nothing outside.
fn check_cpu(report: &Value, pid: Option<u64>, what: &str) -> (u64, u64) {
    let procs = report["processes"].as_array().unwrap();
    let pid = pid.unwrap_or_else(|| u(&procs[0]["pid"]));
    let listed = procs.iter().filter(|p| u(&p["pid"]) == pid).count();
    assert_eq!(
        listed, 1,
        "{what}: process {pid} listed {listed} times: {procs:?}"
    );
    let timer = &report["sources"][0];
    let outside = u(&timer["stats"]["outside"]);
    let total = u(&timer["stats"]["counted"]) + outside;
    let burn = function_samples(timer, "lib_burn");
    println!("{what}: {burn} of {total} samples in lib_burn, {outside} outside every module");
    assert!(total >= 200, "{what}: only {total} samples");
    assert!(
        outside * 100 <= total,
        "{what}: {outside} of {total} samples outside every module"
    );
    // The workers spend their CPU time in lib_burn but for the loop's clock reads (vDSO) and the start.
    assert!(
        burn * 10 >= total * 9,
        "{what}: lib_burn has {burn} of {total} samples"
    );
    (burn, total)
}

fn record(unprivileged: bool) {
    let what = if unprivileged { "unprivileged" } else { "root" };
    let out = run_ok(
        ntprof_command(unprivileged)
            .args(["record", "-q", "--off-cpu", "--format", "json", "--"])
            .arg(program())
            .args(["1", &NAP_MS.to_string()]),
        LIMIT,
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let pid = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("pid=")?.trim().parse::<u64>().ok())
        .expect("the program's pid line");
    check_cpu(&report, Some(pid), what);
    // Two workers each slept NAP_MS in worker_nap, called by worker_main: the whole stack, as long as designed.
    let design = 2.0 * NAP_MS as f64 * 1e6;
    let nap = off_cpu_ns(&report, "worker_nap") as f64;
    let whole = off_cpu_ns(&report, "worker_main") as f64;
    println!(
        "{what}: worker_nap {:.1} ms off CPU (designed {:.0} ms), under worker_main {:.1} ms",
        nap / 1e6,
        design / 1e6,
        whole / 1e6
    );
    assert!(
        (nap - design).abs() <= 0.10 * design,
        "{what}: worker_nap blocked {:.1} ms, designed {:.0} ms",
        nap / 1e6,
        design / 1e6
    );
    assert!(whole >= nap, "{what}: worker_nap's stacks lack worker_main");
}

#[test]
fn a_process_whose_main_thread_exited_is_one_process_with_named_samples_as_root() {
    if !common::root_or_skip("the privileged off-CPU mechanism") {
        return;
    }
    record(false);
}

#[test]
fn a_process_whose_main_thread_exited_is_one_process_with_named_samples_unprivileged() {
    record(true);
}

/// Attached to after its main thread ended: the mappings are read through a live worker (the process's own
/// `/proc/PID/maps` is empty then).
#[test]
fn attach_after_the_main_thread_exited_names_the_workers_samples() {
    let mut child = Command::new(program())
        .args(["4", "10"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start leader_exit");
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .expect("pid line");
    let pid: u32 = line.trim().strip_prefix("pid=").unwrap().parse().unwrap();
    // The main thread is a zombie once its stat says Z (the workers then start burning).
    let t0 = Instant::now();
    loop {
        let stat =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.starts_with(" Z"))
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the main thread never exited"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ntprof")).args([
            "attach",
            "-q",
            "--pid",
            &pid.to_string(),
            "--duration",
            "1.5",
            "--format",
            "json",
        ]),
        LIMIT,
    );
    let _ = child.kill();
    let _ = child.wait();
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    check_cpu(&report, Some(u64::from(pid)), "attach");
}
