//! What cannot be profiled says why: `ntprof attach` to a kernel thread (pid 2), to a zombie, to pid 1 as an
//! unprivileged user and to one's own process that made itself non-dumpable (`tests/c/undumpable.c`); and with
//! `--off-cpu`, unprivileged, the readings of such a process are reported as refused, not as late.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::{is_root, ntprof_command, run_bounded, run_ok, u};

use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

/// `undumpable`, in a directory everyone can enter (the unprivileged runs must reach it).
fn undumpable() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ntprof-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/undumpable.c");
        common::gcc(
            &["-O2", "-g", "-o", "undumpable", src.to_str().unwrap()],
            &dir,
        );
        dir.join("undumpable")
    })
}

/// `ntprof attach --pid PID --duration 1` (unprivileged through setpriv when asked): it must fail with status 1;
/// its standard error.
fn attach_fails(pid: u32, unprivileged: bool) -> String {
    let out: Output = run_bounded(
        ntprof_command(unprivileged).args([
            "attach",
            "-q",
            "--pid",
            &pid.to_string(),
            "--duration",
            "1",
        ]),
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("attach --pid {pid}: {err}");
    assert_eq!(out.status.code(), Some(1), "attach --pid {pid}: {err}");
    err
}

#[test]
fn attach_to_a_kernel_thread_says_so_and_names_the_kernel_profile() {
    let err = attach_fails(2, false);
    assert!(err.contains("pid 2 is a kernel thread"), "{err}");
    assert!(err.contains("ntprof record --kernel"), "{err}");
}

#[test]
fn attach_to_a_zombie_says_it_has_exited_and_not_been_reaped() {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    let t0 = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_default()
        .rsplit_once(')')
        .is_some_and(|(_, r)| r.starts_with(" Z"))
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "never a zombie");
        std::thread::sleep(Duration::from_millis(2));
    }
    let err = attach_fails(pid, false);
    child.wait().expect("reap");
    assert!(
        err.contains(&format!(
            "pid {pid} has exited and not been reaped (zombie)"
        )),
        "{err}"
    );
}

#[test]
fn attach_to_pid_1_unprivileged_gives_the_permission_reason() {
    // pid 1 may be this user's own in a container; the privileged path is the one to drop.
    if !common::root_or_skip("the refusal is of root's pid 1 to a user without privilege") {
        return;
    }
    let err = attach_fails(1, true);
    assert!(err.contains("not allowed to profile process 1"), "{err}");
    assert!(err.contains("another user"), "{err}");
}

#[test]
fn attach_to_ones_own_undumpable_process_says_it_is_not_dumpable() {
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(undumpable());
        c
    } else {
        Command::new(undumpable())
    };
    let mut child = cmd.arg("200").spawn().expect("start undumpable");
    // setpriv execs the program in the same process: wait until it has made itself non-dumpable (its /proc
    // files then belong to root).
    let pid = child.id();
    let t0 = Instant::now();
    loop {
        use std::os::unix::fs::MetadataExt;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let owner = std::fs::metadata(format!("/proc/{pid}/environ")).map(|m| m.uid());
        if comm.trim() == "undumpable" && owner.is_ok_and(|uid| uid == 0) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "never non-dumpable");
        std::thread::sleep(Duration::from_millis(5));
    }
    let err = attach_fails(pid, true);
    let _ = child.kill();
    let _ = child.wait();
    assert!(err.contains("made itself non-dumpable"), "{err}");
}

#[test]
fn unprivileged_off_cpu_readings_of_an_undumpable_process_are_refused_not_late() {
    // Ten naps of 30 ms: the watcher (nice 19) reads most of them while they last, and each such reading is
    // refused. On a loaded machine it may get a processor only after a nap (3 of 10 refused were seen at load
    // average 9), so a run with no refusal is made again, up to three times.
    let mut tries = Vec::new();
    for _ in 0..3 {
        let out = run_ok(
            ntprof_command(true)
                .args(["record", "-q", "--off-cpu", "--format", "json", "--"])
                .arg(undumpable())
                .arg("10"),
            LIMIT,
        );
        let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
        let off = &report["off_cpu"];
        assert_eq!(off["mechanism"], "switch-records+proc");
        let denied = u(&off["denied"]);
        let limits: Vec<String> = off["limits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect();
        println!(
            "denied {denied} of {} readings; {limits:#?}",
            u(&off["reads"])
        );
        if denied == 0 {
            tries.push(u(&off["reads"]));
            continue;
        }
        assert!(
            limits
                .iter()
                .any(|l| l.contains("refused, not late") && l.contains("non-dumpable")),
            "{limits:?}"
        );
        return;
    }
    panic!("no reading of the ten naps was refused in three runs (readings: {tries:?})");
}
