//! Helpers shared by the integration tests (each test file is a crate of its own and says `mod common;`; the
//! tests in folders say `#[path = "../common/mod.rs"] mod common;`).
//! The helpers for building C programs are in `cbuild.rs`, included only by the tests that need them.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub mod skip;
#[allow(unused_imports)] // Only the tests with a requirement skip.
pub use skip::skip;

/// Held by every test of a test binary that samples this process or changes a process-wide setting (a source's
/// interval or jitter), so that such tests never overlap. One per test binary (each is a process of its own).
static SERIAL: Mutex<()> = Mutex::new(());

/// Take the test binary's serial lock (a test that panicked while holding it does not poison the others).
#[allow(dead_code)] // not every test crate that includes this module samples
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `NtCurrentProcess()`, the pseudo-handle `(HANDLE)-1`.
#[allow(dead_code)] // only the tests that call the C exports need it
pub fn current_process() -> *mut std::ffi::c_void {
    std::ptr::without_provenance_mut(usize::MAX)
}

/// `section_range!(range, "sec")` defines `fn range() -> (base, size)`: the exact extent of linker section
/// `sec`, from the `__start_sec` / `__stop_sec` symbols the linker provides for a section whose name is a C
/// identifier. Only the symbols' addresses are taken.
#[macro_export]
macro_rules! section_range {
    ($range:ident, $sec:literal) => {
        fn $range() -> (usize, usize) {
            unsafe extern "C" {
                #[link_name = concat!("__start_", $sec)]
                static START: u8;
                #[link_name = concat!("__stop_", $sec)]
                static STOP: u8;
            }
            let (start, end) = (&raw const START as usize, &raw const STOP as usize);
            (start, end - start)
        }
    };
}

/// `hot_in_section!(hot, range, "sec", salt)` defines `fn hot(x: u64, n: u64) -> u64`, `n` rounds of a
/// xorshift chain with no call in its loop (so every sample of a thread spinning in it lands inside it, in
/// debug and release builds alike), alone in linker section `sec`, and `fn range()` as `section_range!`.
/// Distinct salts keep the linker from folding two such functions into one.
#[macro_export]
macro_rules! hot_in_section {
    ($hot:ident, $range:ident, $sec:literal, $salt:expr) => {
        #[inline(never)]
        #[unsafe(link_section = $sec)]
        fn $hot(mut x: u64, n: u64) -> u64 {
            let mut i = 0u64;
            while i < n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x ^= $salt;
                i += 1;
            }
            x
        }
        $crate::section_range!($range, $sec);
    };
}

/// Nanoseconds on `clock` (a thread's CPU clock, `CLOCK_THREAD_CPUTIME_ID`, ...).
#[allow(dead_code)] // not every test crate that includes this module reads a clock
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What a leak would change: the process's open descriptors (and what they are), threads and memory mappings.
#[allow(dead_code)] // only the leak and hardening tests take snapshots
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Open descriptors and what they are (`readlink /proc/self/fd/N`). The descriptor of the listing itself is
    /// in every snapshot alike (same lowest free number, same target).
    pub fds: std::collections::BTreeMap<i32, String>,
    /// Threads (`/proc/self/task`).
    pub threads: usize,
    /// Memory mappings that name what they map (`/proc/self/maps` lines with a path: files, the perf rings
    /// `anon_inode:[perf_event]`, `[heap]`, `[stack]`). Unnamed anonymous mappings are left out: glibc makes and
    /// keeps them as threads come and go (its cache of thread stacks, malloc arenas), more of them when a loaded
    /// machine lets the short-lived threads of two cycles overlap, and reuses them; they are not the library's.
    /// (Seen once in a loaded run: 73 mappings after twenty sampler cycles against 72 before, nothing else
    /// different.)
    pub maps: usize,
}

/// The process now, as a [`Snapshot`].
#[allow(dead_code)] // only the leak and hardening tests take snapshots
pub fn snapshot() -> Snapshot {
    let mut fds = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let entry = entry.unwrap();
        let fd: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
        // A descriptor may vanish between the listing and the readlink (the listing's own, once closed).
        if let Ok(target) = std::fs::read_link(entry.path()) {
            fds.insert(fd, target.to_string_lossy().into_owned());
        }
    }
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    let maps = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| line.split_whitespace().nth(5).is_some())
        .count();
    Snapshot { fds, threads, maps }
}

/// A command running `program` without privilege: as root, through `setpriv` to uid/gid 65534 (nobody) with no
/// supplementary group and no capability (inheritable or in the bounding set); otherwise the program directly
/// (the caller is already unprivileged).
#[allow(dead_code)] // only the tests of privilege denial drop privilege
pub fn unprivileged_command(program: &std::path::Path) -> std::process::Command {
    if nix::unistd::geteuid().is_root() {
        let mut c = std::process::Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(program);
        c
    } else {
        std::process::Command::new(program)
    }
}

/// Check the figures the find-function examples print (`ffi/find_function.c` and `examples/find_function.rs` print
/// the same two lines):
/// "function: example_target C counted in its own profile (O outside it); in the program's code I in
/// example_target's buckets, E elsewhere" — the program's samples land in the function's buckets;
/// "library: PATH [BASE, +SIZE) C counted in libm, O outside it" — and the library's in libm.
#[allow(dead_code)] // only the tests of the find-function examples
pub fn check_find_function_figures(out: &str) {
    let numbers = |prefix: &str| -> Vec<u64> {
        let line = out
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line:\n{out}"));
        line.split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let f = numbers("function:");
    let (inside, elsewhere) = (f[f.len() - 2], f[f.len() - 1]);
    assert!(inside > 1000 && elsewhere * 50 <= inside, "{f:?}");
    let l = numbers("library:");
    let (counted, outside) = (l[l.len() - 2], l[l.len() - 1]);
    assert!(counted > 1000 && counted >= 2 * outside, "{l:?}");
}

/// Run a helper process (this test binary run again for one ignored test) to its end; panic with its output unless
/// it succeeded. Returns its stdout, its stderr and the `key value` pairs of its `RESULT key value` lines (libtest
/// may print "test helper_process ... " just before the first result, on the same line).
#[allow(dead_code)] // only the tests that start helper processes
pub fn run_helper_process(
    mut command: std::process::Command,
) -> (String, String, std::collections::HashMap<String, String>) {
    let out = command.output().expect("run the helper process");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "helper failed ({:?}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    let results = stdout
        .lines()
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    (stdout, stderr, results)
}

/// Reap every child of this process that has exited or exits within 10 s: their exit codes (a signal as 128 + n).
#[allow(dead_code)] // only the tests that fork ask
pub fn reap_children() -> Vec<i32> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of this process, without blocking.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) };
        if pid > 0 {
            out.push(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        } else if pid == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        } else {
            return out;
        }
    }
}

/// Wait until process `pid` (single-threaded) sleeps in `read(2)` (system call 0 on x86-64, per
/// `/proc/PID/syscall`), 30 s at the most; panics naming `what` otherwise. A program that waits for a line on
/// its standard input has then finished its start-up (the loader's page faults, its first calls): events enabled
/// after this see none of it, whatever the order they are enabled in.
#[allow(dead_code)] // only the tests that compare two events of a waiting program ask
pub fn wait_blocked_in_read(pid: u32, what: &str) {
    let path = format!("/proc/{pid}/syscall");
    let start = std::time::Instant::now();
    let mut last = String::new();
    while start.elapsed() < std::time::Duration::from_secs(30) {
        last = std::fs::read_to_string(&path).unwrap_or_else(|e| e.to_string());
        if last.split_whitespace().next() == Some("0") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("{what} never blocked reading its standard input: {path} says {last:?}");
}

/// Build the C test program `src` (a path under the crate's root) into `out` with gcc (`-O1 -Wall -pthread`),
/// runnable by every user; panic with gcc's output when it fails.
#[allow(dead_code)] // only the tests that run a C program of their own
pub fn build_c_program(src: &str, out: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let src = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(src);
    let built = std::process::Command::new("gcc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(out)
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An independent counting event of the user-space page faults of process `pid` and its descendants, created
/// disabled, for checking a sampler's samples + lost against what the kernel counted.
#[allow(dead_code)] // only the tests that check loss against page faults ask
pub fn page_fault_counter(pid: u32) -> perf_event::Counter {
    perf_event::Builder::new(perf_event::events::Software::PAGE_FAULTS)
        .observe_pid(pid as i32)
        .any_cpu()
        .inherit(true)
        .exclude_kernel(true)
        .exclude_hv(true)
        .enabled(false)
        .build()
        .expect("an independent counter of the process's page faults")
}
