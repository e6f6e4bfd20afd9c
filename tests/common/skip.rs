//! Skips that are counted, never passed off as passes: a test that lacks what it needs (root, two processors,
//! a tool) calls [`skip`], which fails the test with the reason when `CI=true` (CI provides everything) and
//! otherwise prints `SKIPPED: …` and appends the reason to one file per `cargo test` run under
//! `target/test-skips/`. Every test binary that holds this module prints, as it exits, the run's skips so far on
//! one line (`N skipped so far in this test run: …`), so the last binary's line, at the end of `cargo test`,
//! lists them all.
//!
//! Shared by the test crates of the workspace (`#[path]`-included): the root's `tests/common`, ntprof's, and
//! the engine's unit tests.

#![allow(dead_code)] // Each test crate uses what it needs of it.

use std::io::Write;
use std::path::PathBuf;

/// Whether this is a CI run (`CI=true` or `CI=1`), where a missing requirement is a failure rather than a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Skip the calling test for `reason` (what is missing and how to provide it): a panic in CI; otherwise a
/// `SKIPPED` line and an entry in this run's skip file. The caller returns right after.
#[track_caller]
pub fn skip(reason: &str) {
    // The harness runs each test on a thread named after it.
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if in_ci() {
        panic!("{test}: {reason} (CI=true: a test that cannot run is a failure)");
    }
    eprintln!("SKIPPED: {test}: {reason}");
    if let Some(file) = run_file() {
        let _ = std::fs::create_dir_all(file.parent().unwrap());
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
        {
            // One write per line (O_APPEND): lines of tests running at once do not mix.
            let mut line = format!("{test}: {reason}").replace('\n', " ");
            line.push('\n');
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// This run's skip file: `target/test-skips/PID-START.txt`, keyed by the `cargo` this test binary runs under
/// (the nearest ancestor named so: a helper process a test starts counts with its test) and its start time
/// (pids are reused), or by the parent where there is none; `None` where the target folder is unknown.
fn run_file() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // target/<profile>/deps/<binary>
    let target = exe.parent()?.parent()?.parent()?;
    // (pid, ppid, start time) of a process, from /proc/PID/stat: the command (field 2) may hold spaces but
    // ends at the last ')'; the ppid is field 4, the start time field 22.
    let stat = |pid: u32| -> Option<(String, u32, String)> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, rest) = s.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some((
            comm,
            fields.get(1)?.parse().ok()?,
            fields.get(19)?.to_string(),
        ))
    };
    let parent = std::os::unix::process::parent_id();
    let (mut pid, mut key) = (parent, None);
    for _ in 0..8 {
        let Some((comm, ppid, start)) = stat(pid) else {
            break;
        };
        if pid == parent {
            key = Some(format!("{pid}-{start}"));
        }
        if comm == "cargo" {
            key = Some(format!("{pid}-{start}"));
            break;
        }
        if ppid <= 1 {
            break;
        }
        pid = ppid;
    }
    Some(target.join("test-skips").join(format!("{}.txt", key?)))
}

/// Print this run's skips so far, if any, on one line (at the exit of every test binary holding this module).
extern "C" fn print_skips() {
    let Some(text) = run_file().and_then(|f| std::fs::read_to_string(f).ok()) else {
        return;
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    if !lines.is_empty() {
        eprintln!(
            "{} skipped so far in this test run (CI=true fails them): {}",
            lines.len(),
            lines.join("; ")
        );
    }
}

unsafe extern "C" {
    /// The C library's `atexit(3)`: registering a function that lives as long as the process (any `fn`) is
    /// sound.
    safe fn atexit(f: extern "C" fn()) -> i32;
}

extern "C" fn register_print_skips() {
    atexit(print_skips);
}

// Registers `print_skips` at load, before main: every test binary that holds this module reports the skips at
// its exit, whether or not one of its own tests skipped.
// SAFETY: `.init_array` holds pointers to functions of no arguments that the loader calls once before main;
// this one only registers an exit handler.
// Not under Miri, which runs no loader constructors' C calls (atexit is a foreign function to it).
#[cfg(not(miri))]
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER: extern "C" fn() = register_print_skips;
