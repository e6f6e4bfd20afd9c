//! Hardening tests: regressions for defects found under attack (each test fails on the code before its fix),
//! fault injection at the kernel boundary, and a concurrent stress test.
//!
//! Many of these tests change process-wide state (the descriptor limit, the source-support cache, `fork`), so
//! each such test re-runs itself alone in a fresh process of this same binary (see [`isolated`]): what one test
//! does to its process never reaches another.

#[path = "../common/mod.rs"]
mod common;
mod faults;
mod nt_lost;
mod regressions;
mod stress;

use std::ffi::c_void;
use std::process::Command;

use ntprofile::NtStatus;

/// `NtCurrentProcess()`.
pub const CURRENT_PROCESS: *mut c_void = usize::MAX as *mut c_void;

/// The environment variable naming the one test a child process of this binary runs.
const ISOLATED: &str = "NTPROFILE_HARDENING_ISOLATED";

/// Run `body` as test `name` (its full path in this binary, `module::function`) alone in a fresh process: the
/// test binary runs itself with `--exact name`, and the child, seeing its name in the environment, runs the
/// body. The parent asserts that the child passed and shows its output.
pub fn isolated(name: &str, body: impl FnOnce()) {
    if std::env::var(ISOLATED).as_deref() == Ok(name) {
        body();
        return;
    }
    isolated_with(name, &[]);
}

/// [`isolated`] with extra environment variables for the child (e.g. `LD_PRELOAD`).
pub fn isolated_with(name: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ISOLATED, name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "isolated test {name} failed ({})",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "isolated test {name} did not run (no such test?)"
    );
}

/// The status of a raw return value.
pub fn st(raw: i32) -> NtStatus {
    NtStatus(raw)
}

/// Set the soft and hard `RLIMIT_NOFILE` (the process is an isolated child: nothing else depends on it).
pub fn set_nofile(soft: u64, hard: u64) {
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, soft, hard)
        .expect("setrlimit RLIMIT_NOFILE");
}

/// Take every free descriptor (below the soft limit); dropping the result frees them.
pub fn exhaust_descriptors() -> Vec<std::fs::File> {
    let mut held = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return held,
            Err(e) => panic!("open /dev/null: {e}"),
        }
    }
}

/// True in the child process that runs test `name` (see [`isolated`]).
pub fn is_isolated_child(name: &str) -> bool {
    std::env::var(ISOLATED).as_deref() == Ok(name)
}

/// Snapshots of the process for leak checks, shared with the other leak tests.
pub use common::{Snapshot, snapshot};
