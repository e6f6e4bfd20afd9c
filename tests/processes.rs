//! Profiles of other processes and of the whole system, through the C exports (`NtOpenProcess`,
//! `NtCreateProfile`, `NtCreateProfileEx`, `NtStartProfile`, `NtStopProfile`, `NtClose`,
//! `NtprofileQueryStatistics`), as a C program would call them.
//!
//! The profiled programs are `ffi/targets/spin.c`, built here with gcc into a temporary directory. It is linked
//! without PIE and with its text at an unusual address (0x2d5a0000), so every process running it has the same
//! addresses (needed by the global profile) and no other non-PIE program on the machine runs code there; each of
//! its hot functions sits alone in a section of its own and the program prints every section's bounds, so counts
//! are attributed per function without guessing sizes.
//!
//! Checks that must run in another process re-execute this test binary with [`HELPER_ENV`] naming a mode (see
//! [`helper_process`]): the unprivileged caller (under `setpriv`, as `nobody`, every capability dropped) and the
//! descriptor-starved caller (`RLIMIT_NOFILE` = 64), so this process is never crippled.
//!
//! The ProfileTime interval is process-wide: every test holds [`SERIAL`] (through [`Serial`]), sets the interval
//! it needs and restores the default 10000 when done, also on a panic.

use std::collections::HashMap;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtCreateProfileEx, NtOpenProcess, NtQueryIntervalProfile,
    NtSetIntervalProfile, NtStartProfile, NtStopProfile, NtprofileQueryStatistics,
};
use ntprofile::{NtStatus, ProfileStats};

// ---------------------------------------------------------------------------------------------------------
// Constants and small helpers.
// ---------------------------------------------------------------------------------------------------------

/// `HANDLE`.
type Handle = *mut c_void;

/// `NtCurrentProcess()`, the pseudo-handle `(HANDLE)-1`.
fn current_process() -> Handle {
    std::ptr::without_provenance_mut(usize::MAX)
}

/// `ProfileTime`.
const PROFILE_TIME: u32 = 0;
/// `PROCESS_QUERY_INFORMATION`.
const PROCESS_QUERY_INFORMATION: u32 = 0x0400;
/// ProfileTime's default interval (1 ms), restored after every test.
const DEFAULT_INTERVAL: u32 = 10_000;
/// The interval the sampling tests use: 100 µs.
const TEST_INTERVAL: u32 = 1_000;
/// The text segment address `spin` is linked at.
const SPIN_TEXT: u64 = 0x2d5a_0000;
/// The kernel half of the x86-64 address space, as a profile range.
const KERNEL_BASE: u64 = 0xFFFF_8000_0000_0000;
const KERNEL_SIZE: u64 = (1u64 << 47) - 1;
/// The environment variable naming a helper mode of this binary.
const HELPER_ENV: &str = "NTPROFILE_PROCESSES_HELPER";

fn status(raw: i32) -> NtStatus {
    NtStatus(raw)
}

/// Print a measured figure (visible with `--nocapture`).
fn note(text: impl AsRef<str>) {
    println!("[processes] {}", text.as_ref());
}

// ---------------------------------------------------------------------------------------------------------
// Serialization and the interval.
// ---------------------------------------------------------------------------------------------------------

/// Held by every test: they sample, change the process-wide interval or fork.
static SERIAL: Mutex<()> = Mutex::new(());

/// The serial lock plus ProfileTime's interval for the test; dropping it restores the default interval first,
/// then releases the lock.
struct Serial {
    _lock: MutexGuard<'static, ()>,
}

impl Serial {
    fn with_interval(interval: u32) -> Serial {
        let lock = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(
            status(NtSetIntervalProfile(interval, PROFILE_TIME)),
            NtStatus::SUCCESS
        );
        Serial { _lock: lock }
    }

    /// The effective sample period in nanoseconds (the interval after the run-time clamp).
    fn period_ns(&self) -> f64 {
        let mut interval = 0u32;
        assert_eq!(
            status(NtQueryIntervalProfile(PROFILE_TIME, &mut interval)),
            NtStatus::SUCCESS
        );
        assert!(interval > 0, "ProfileTime must be supported here");
        f64::from(interval) * 100.0
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        NtSetIntervalProfile(DEFAULT_INTERVAL, PROFILE_TIME);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Profiles and process handles through the exports.
// ---------------------------------------------------------------------------------------------------------

/// `CLIENT_ID`.
#[repr(C)]
struct ClientId {
    unique_process: usize,
    unique_thread: usize,
}

/// `GROUP_AFFINITY`.
#[repr(C)]
#[derive(Clone, Copy)]
struct GroupAffinity {
    mask: usize,
    group: u16,
    reserved: [u16; 3],
}

impl GroupAffinity {
    fn new(mask: usize, group: u16) -> GroupAffinity {
        GroupAffinity {
            mask,
            group,
            reserved: [0; 3],
        }
    }

    fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&(self.mask as u64).to_ne_bytes());
        b[8..10].copy_from_slice(&self.group.to_ne_bytes());
        for (i, r) in self.reserved.iter().enumerate() {
            b[10 + 2 * i..12 + 2 * i].copy_from_slice(&r.to_ne_bytes());
        }
        b
    }
}

/// A process handle from `NtOpenProcess`; closed on drop.
struct ProcessHandle {
    handle: Handle,
    open: bool,
}

impl ProcessHandle {
    fn open(pid: u32) -> Result<ProcessHandle, NtStatus> {
        let mut handle: Handle = std::ptr::null_mut();
        let mut cid = ClientId {
            unique_process: pid as usize,
            unique_thread: 0,
        };
        let s = status(NtOpenProcess(
            &mut handle,
            PROCESS_QUERY_INFORMATION,
            std::ptr::null_mut(),
            (&raw mut cid).cast(),
        ));
        if s != NtStatus::SUCCESS {
            return Err(s);
        }
        assert!(
            !handle.is_null(),
            "NtOpenProcess succeeded with a NULL handle"
        );
        Ok(ProcessHandle { handle, open: true })
    }

    fn close(&mut self) -> NtStatus {
        assert!(self.open, "closed twice");
        self.open = false;
        status(NtClose(self.handle))
    }
}

impl Drop for ProcessHandle {
    fn drop(&mut self) {
        if self.open {
            NtClose(self.handle);
        }
    }
}

/// A profile created through the exports, with the caller-owned counter buffer it writes into. Dropping it
/// closes the handle (which stops the profile) before the buffer is freed.
struct CProfile {
    handle: Handle,
    open: bool,
    base: u64,
    bucket_size: u32,
    counters: Box<[AtomicU32]>,
}

impl CProfile {
    fn buffer(count: usize) -> Box<[AtomicU32]> {
        (0..count).map(|_| AtomicU32::new(0)).collect()
    }

    /// `NtCreateProfile` over `[base, base + size)` with `(KAFFINITY)-1` (every processor).
    fn create(
        process: Handle,
        base: u64,
        size: u64,
        bucket_size: u32,
    ) -> Result<CProfile, NtStatus> {
        let count = size.div_ceil(1u64 << bucket_size).max(1) as usize;
        let counters = CProfile::buffer(count);
        let mut handle: Handle = std::ptr::null_mut();
        let s = status(NtCreateProfile(
            &mut handle,
            process,
            base as usize as *mut c_void,
            size as usize,
            bucket_size,
            counters.as_ptr() as *mut u32,
            (count * 4) as u32,
            PROFILE_TIME,
            usize::MAX,
        ));
        CProfile::made(s, handle, base, bucket_size, counters)
    }

    /// `NtCreateProfileEx` over `[base, base + size)` with `groups.len()` records at `groups` (any address).
    fn create_ex(
        process: Handle,
        base: u64,
        size: u64,
        bucket_size: u32,
        group_count: u16,
        groups: *const c_void,
    ) -> Result<CProfile, NtStatus> {
        let count = size.div_ceil(1u64 << bucket_size).max(1) as usize;
        let counters = CProfile::buffer(count);
        let mut handle: Handle = std::ptr::null_mut();
        let s = status(NtCreateProfileEx(
            &mut handle,
            process,
            base as usize as *mut c_void,
            size as usize,
            bucket_size,
            counters.as_ptr() as *mut u32,
            (count * 4) as u32,
            PROFILE_TIME,
            group_count,
            groups as *mut c_void,
        ));
        CProfile::made(s, handle, base, bucket_size, counters)
    }

    fn made(
        s: NtStatus,
        handle: Handle,
        base: u64,
        bucket_size: u32,
        counters: Box<[AtomicU32]>,
    ) -> Result<CProfile, NtStatus> {
        if s != NtStatus::SUCCESS {
            return Err(s);
        }
        Ok(CProfile {
            handle,
            open: true,
            base,
            bucket_size,
            counters,
        })
    }

    fn start(&self) -> NtStatus {
        status(NtStartProfile(self.handle))
    }

    fn stop(&self) -> NtStatus {
        status(NtStopProfile(self.handle))
    }

    fn close(&mut self) -> NtStatus {
        assert!(self.open, "closed twice");
        self.open = false;
        status(NtClose(self.handle))
    }

    /// `NtprofileQueryStatistics` (while started it first drains the rings, so the counters are current too).
    fn stats(&self) -> ProfileStats {
        let mut stats = ProfileStats::default();
        assert_eq!(
            status(NtprofileQueryStatistics(self.handle, &mut stats)),
            NtStatus::SUCCESS
        );
        stats
    }

    fn counts(&self) -> Vec<u32> {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// The sum of the buckets that start inside `[start, stop)`.
    fn count_in(&self, (start, stop): (u64, u64)) -> u64 {
        self.counts()
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let bucket = self.base + ((*i as u64) << self.bucket_size);
                start <= bucket && bucket < stop
            })
            .map(|(_, c)| u64::from(*c))
            .sum()
    }

    fn total(&self) -> u64 {
        self.counts().iter().map(|c| u64::from(*c)).sum()
    }
}

impl Drop for CProfile {
    fn drop(&mut self) {
        if self.open {
            NtClose(self.handle);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The target program.
// ---------------------------------------------------------------------------------------------------------

/// A directory under /tmp, mode 0755 (so that `nobody` can run what is built into it), removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "ntprofile-processes-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).expect("create the temporary directory");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod 0755 the temporary directory");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Build `ffi/targets/spin.c` into `dir` (non-PIE, text at [`SPIN_TEXT`]), mode 0755.
fn build_spin(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("ffi/targets/spin.c");
    let out = dir.join("spin");
    let result = Command::new("gcc")
        .args([
            "-O2",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            "-no-pie",
            // One copy of each hot function, in its own section, with no cold part split off elsewhere.
            "-fno-reorder-blocks-and-partition",
            &format!("-Wl,-Ttext-segment={SPIN_TEXT:#x}"),
            "-o",
        ])
        .arg(&out)
        .arg(&source)
        .output()
        .expect("run gcc");
    assert!(
        result.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).expect("chmod spin");
    out
}

/// A running `spin`: its hot-function ranges, its stdin (the go byte) and stdout (the truth line).
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    ranges: HashMap<String, (u64, u64)>,
    reaped: bool,
}

fn parse_hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("not a hex number: {text:?}"))
}

impl Target {
    /// Start `spin` with `args` and read its ranges up to its "ready" line.
    fn spawn(spin: &Path, args: &[&str]) -> Target {
        let mut child = Command::new(spin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn spin");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut target = Target {
            child,
            stdin,
            stdout,
            ranges: HashMap::new(),
            reaped: false,
        };
        loop {
            let mut line = String::new();
            let n = target.stdout.read_line(&mut line).expect("read spin");
            assert!(n > 0, "spin {args:?} ended before it was ready");
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ready", ..] => break,
                ["range", name, start, stop, entry] => {
                    let (start, stop, entry) =
                        (parse_hex(start), parse_hex(stop), parse_hex(entry));
                    assert!(
                        start <= entry && entry < stop && stop - start < 4096,
                        "{name}: entry {entry:#x} and section [{start:#x}, {stop:#x})"
                    );
                    target.ranges.insert(name.to_string(), (start, stop));
                }
                _ => panic!("unexpected line from spin: {line:?}"),
            }
        }
        target
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn range(&self, name: &str) -> (u64, u64) {
        self.ranges[name]
    }

    /// Let the target start working.
    fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(b"g").expect("write the go byte");
        stdin.flush().expect("flush the go byte");
    }

    /// Wait for the end; the fields of its "truth" line.
    fn finish(&mut self) -> HashMap<String, u64> {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("read spin");
        let exit = self.child.wait().expect("wait for spin");
        self.reaped = true;
        assert!(exit.success(), "spin failed: {exit:?}, output {rest:?}");
        let line = rest
            .lines()
            .find(|l| l.starts_with("truth "))
            .unwrap_or_else(|| panic!("no truth line in {rest:?}"));
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
            .collect()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The smallest range covering `names`.
fn span(target: &Target, names: &[&str]) -> (u64, u64) {
    let start = names
        .iter()
        .map(|n| target.range(n).0)
        .min()
        .expect("names");
    let stop = names
        .iter()
        .map(|n| target.range(n).1)
        .max()
        .expect("names");
    (start, stop)
}

// ---------------------------------------------------------------------------------------------------------
// Helper processes (this binary re-executed).
// ---------------------------------------------------------------------------------------------------------

/// The arguments that make this test binary run only [`helper_process`].
const HELPER_ARGS: [&str; 5] = [
    "--exact",
    "helper_process",
    "--ignored",
    "--nocapture",
    "--test-threads=1",
];

/// Run a helper command; its `RESULT key value` lines.
fn run_helper(mut command: Command) -> HashMap<String, String> {
    let out = command.output().expect("run the helper process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "helper failed ({:?}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    let results: HashMap<String, String> = stdout
        .lines()
        // libtest may print "test helper_process ... " just before the first result, on the same line.
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    assert!(
        !results.is_empty(),
        "the helper reported nothing (did it run?):\n{stdout}\n{stderr}"
    );
    results
}

fn result_status(results: &HashMap<String, String>, key: &str) -> NtStatus {
    let text = results
        .get(key)
        .unwrap_or_else(|| panic!("helper result {key} missing: {results:?}"));
    NtStatus(parse_hex(text) as u32 as i32)
}

fn result_u64(results: &HashMap<String, String>, key: &str) -> u64 {
    results
        .get(key)
        .unwrap_or_else(|| panic!("helper result {key} missing: {results:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("helper result {key} is not a number: {results:?}"))
}

fn report(key: &str, value: impl std::fmt::Display) {
    println!("RESULT {key} {value}");
}

fn report_status(key: &str, s: NtStatus) {
    report(key, format_args!("{:#010x}", s.as_u32()));
}

/// The entry point of the helper processes: does nothing unless [`HELPER_ENV`] names a mode.
#[test]
#[ignore = "entry point of the helper processes the other tests of this file start"]
fn helper_process() {
    match std::env::var(HELPER_ENV).as_deref() {
        Ok("unprivileged") => helper_unprivileged(),
        Ok("nofile") => helper_nofile(),
        Ok(other) => panic!("unknown helper mode {other:?}"),
        Err(_) => {}
    }
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| panic!("{name} not set")))
}

fn env_u32(name: &str) -> u32 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} not set"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// `CapEff` of this process.
fn effective_caps() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = text
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .expect("CapEff line");
    parse_hex(line.trim_start_matches("CapEff:").trim())
}

/// Open `pid`, create a profile of it and start it; the first status that is not a success (or success).
fn open_create_start(pid: u32) -> (NtStatus, &'static str) {
    let mut process = match ProcessHandle::open(pid) {
        Ok(p) => p,
        Err(s) => return (s, "open"),
    };
    let result = match CProfile::create(process.handle, SPIN_TEXT, 0x10000, 4) {
        Err(s) => (s, "create"),
        Ok(mut profile) => {
            let s = profile.start();
            if s == NtStatus::SUCCESS {
                profile.stop();
            }
            profile.close();
            (s, "start")
        }
    };
    process.close();
    result
}

/// Run as `nobody` without capabilities: what may not be profiled is refused, the own child is profiled.
fn helper_unprivileged() {
    let spin = env_path("NTPROFILE_PROCESSES_SPIN");
    let root_pid = env_u32("NTPROFILE_PROCESSES_ROOT_PID");
    report("uid", nix::unistd::getuid());
    report("euid", nix::unistd::geteuid());
    report("capeff", format_args!("{:#x}", effective_caps()));

    // A global profile needs the system-profile privilege.
    let global = CProfile::create(std::ptr::null_mut(), SPIN_TEXT, 0x10000, 4).err();
    report_status("global", global.unwrap_or(NtStatus::SUCCESS));
    // A kernel range, even of this process, needs CAP_PERFMON or paranoid <= 1.
    let kernel = CProfile::create(current_process(), KERNEL_BASE, KERNEL_SIZE, 31).err();
    report_status("kernel_range", kernel.unwrap_or(NtStatus::SUCCESS));

    // Root's processes: pid 1 and one the test started as root.
    for (key, pid) in [("pid1", 1), ("root_child", root_pid)] {
        let (s, stage) = open_create_start(pid);
        report_status(key, s);
        report(&format!("{key}_stage"), stage);
    }

    // A process that no longer exists: a child of ours, reaped.
    let mut gone = Command::new(&spin)
        .arg("exit")
        .spawn()
        .expect("spawn spin exit");
    let gone_pid = gone.id();
    gone.wait().expect("wait spin exit");
    assert!(
        !Path::new(&format!("/proc/{gone_pid}")).exists(),
        "pid {gone_pid} was reused at once"
    );
    report_status(
        "gone",
        ProcessHandle::open(gone_pid)
            .err()
            .unwrap_or(NtStatus::SUCCESS),
    );
    report_status(
        "pid_beyond_max",
        ProcessHandle::open(i32::MAX as u32)
            .err()
            .unwrap_or(NtStatus::SUCCESS),
    );

    // Our own child can be profiled.
    let mut target = Target::spawn(&spin, &["run", "a", "300"]);
    let own = ProcessHandle::open(target.pid());
    report_status(
        "own_open",
        own.as_ref().err().copied().unwrap_or(NtStatus::SUCCESS),
    );
    let Ok(mut own) = own else { return };
    let range = target.range("hot_a");
    let profile = CProfile::create(own.handle, range.0, range.1 - range.0, 2);
    report_status(
        "own_create",
        profile.as_ref().err().copied().unwrap_or(NtStatus::SUCCESS),
    );
    let Ok(mut profile) = profile else { return };
    let mut interval = 0u32;
    NtQueryIntervalProfile(PROFILE_TIME, &mut interval);
    report("period_ns", u64::from(interval) * 100);
    report_status("own_start", profile.start());
    target.go();
    let truth = target.finish();
    report_status("own_stop", profile.stop());
    report("own_count", profile.count_in(range));
    report("own_truth_ns", truth["ns"]);
    report_status("own_close", profile.close());
    report_status("own_close_process", own.close());
}

/// Open descriptors of this process now.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .count()
}

/// With `RLIMIT_NOFILE` = 64 (soft and hard): starting a profile of a 200-thread process fails cleanly.
fn helper_nofile() {
    let pid = env_u32("NTPROFILE_PROCESSES_PID");
    let base = u64::from(env_u32("NTPROFILE_PROCESSES_BASE"));
    let size = u64::from(env_u32("NTPROFILE_PROCESSES_SIZE"));
    // Soft limit 64; the hard limit 64 too unless the test asks for room to raise it.
    let hard: u64 = std::env::var("NTPROFILE_PROCESSES_HARD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 64, hard)
        .expect("setrlimit RLIMIT_NOFILE 64");
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("getrlimit");
    report("limit_soft", soft);
    report("limit_hard", hard);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("list the target's threads")
        .count();
    report("threads", threads);
    let fds_before = open_fds();
    report("fds_before", fds_before);
    let mut process = ProcessHandle::open(pid).expect("NtOpenProcess of the target");
    let fds_opened = open_fds();
    report("fds_opened", fds_opened);
    let mut profile =
        CProfile::create(process.handle, base, size, 2).expect("NtCreateProfile of the target");
    let s = profile.start();
    report_status("start", s);
    report("fds_after_start", open_fds());
    let (soft_now, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("getrlimit");
    report("limit_soft_after_start", soft_now);
    if s == NtStatus::SUCCESS {
        profile.stop();
    }
    // A second attempt fails the same way and leaks nothing either.
    let again = profile.start();
    report_status("start_again", again);
    if again == NtStatus::SUCCESS {
        profile.stop();
    }
    report("fds_after_second_start", open_fds());
    report_status("close_profile", profile.close());
    report_status("close_process", process.close());
    report("fds_after_close", open_fds());
}

// ---------------------------------------------------------------------------------------------------------
// Hot functions of this test process, each alone in its own section.
// ---------------------------------------------------------------------------------------------------------

/// A xorshift chain: no call in the loop, so a thread spinning in it has every sample inside the section.
#[inline(never)]
#[unsafe(link_section = "ntp_proc_cpu")]
fn hot_cpu(mut x: u64, n: u64) -> u64 {
    let mut i = 0u64;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x ^= 0x3131;
        i += 1;
    }
    x
}

/// The same with another salt, in another section.
#[inline(never)]
#[unsafe(link_section = "ntp_proc_fork")]
fn hot_fork(mut x: u64, n: u64) -> u64 {
    let mut i = 0u64;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x ^= 0x4242;
        i += 1;
    }
    x
}

unsafe extern "C" {
    static __start_ntp_proc_cpu: u8;
    static __stop_ntp_proc_cpu: u8;
    static __start_ntp_proc_fork: u8;
    static __stop_ntp_proc_fork: u8;
}

/// A section's bounds, checked to hold its function.
fn section(start: *const u8, stop: *const u8, f: fn(u64, u64) -> u64) -> (u64, u64) {
    let (start, stop, entry) = (start as u64, stop as u64, f as *const () as u64);
    assert!(
        start <= entry && entry < stop && stop - start < 4096,
        "entry {entry:#x} and section [{start:#x}, {stop:#x})"
    );
    (start, stop)
}

fn cpu_range() -> (u64, u64) {
    // Only the addresses of the linker-defined symbols are taken, never their contents.
    section(
        &raw const __start_ntp_proc_cpu,
        &raw const __stop_ntp_proc_cpu,
        hot_cpu,
    )
}

fn fork_range() -> (u64, u64) {
    section(
        &raw const __start_ntp_proc_fork,
        &raw const __stop_ntp_proc_fork,
        hot_fork,
    )
}

/// Spin in `f` for `d` of wall-clock time.
fn spin_wall(f: fn(u64, u64) -> u64, d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 0x1234_5678u64;
    while Instant::now() < end {
        x = f(x, 20_000);
    }
    std::hint::black_box(x)
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut t = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to our own local.
    let rc = unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

// ---------------------------------------------------------------------------------------------------------
// 1. Another process, by pid.
// ---------------------------------------------------------------------------------------------------------

/// A parent profiles its child through `NtOpenProcess`: two hot functions with a designed 75/25 split (measured
/// exactly by the child) are counted in proportion, within 3 binomial sigma; a thread the child creates only
/// after the profile started is counted too; stop and close succeed after the child exited and leave the
/// counts alone.
#[test]
fn profiles_a_child_process_by_pid_including_a_late_thread() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let dir = TempDir::new("pid");
    let spin = build_spin(&dir.path);
    let mut target = Target::spawn(&spin, &["split", "600"]);

    let mut process = ProcessHandle::open(target.pid()).expect("NtOpenProcess of the child");
    let (start, stop) = span(&target, &["hot_a", "hot_b", "hot_c"]);
    let mut profile =
        CProfile::create(process.handle, start, stop - start, 2).expect("NtCreateProfile");
    assert_eq!(profile.start(), NtStatus::SUCCESS);
    // Only now does the child create its second thread.
    target.go();
    let truth = target.finish();
    // The child has exited (and been reaped): stop and close must still succeed.
    assert_eq!(
        profile.stop(),
        NtStatus::SUCCESS,
        "NtStopProfile after the child exited"
    );
    let stats = profile.stats();
    let after_stop = profile.counts();
    let a = profile.count_in(target.range("hot_a"));
    let b = profile.count_in(target.range("hot_b"));
    let c = profile.count_in(target.range("hot_c"));
    assert_eq!(profile.close(), NtStatus::SUCCESS, "NtClose of the profile");
    assert_eq!(
        profile.counts(),
        after_stop,
        "the counts changed after the stop"
    );
    assert_eq!(
        process.close(),
        NtStatus::SUCCESS,
        "NtClose of the process handle"
    );

    let (ta, tb, tc) = (truth["a"] as f64, truth["b"] as f64, truth["c"] as f64);
    let p = ta / (ta + tb);
    let n = (a + b) as f64;
    let measured = a as f64 / n.max(1.0);
    let sigma = (p * (1.0 - p) / n.max(1.0)).sqrt();
    let expected_ab = (ta + tb) / period;
    let expected_c = tc / period;
    note(format!(
        "child by pid: truth a {:.1} ms b {:.1} ms c {:.1} ms ({} chunks); counts a {a} b {b} c {c}; \
         {stats:?}; share of a {measured:.4} vs true {p:.4}: {:.2} sigma (sigma {sigma:.4}); \
         a+b {:.0}% and c {:.0}% of time/period",
        ta / 1e6,
        tb / 1e6,
        tc / 1e6,
        truth["chunks"],
        (measured - p).abs() / sigma,
        100.0 * n / expected_ab,
        100.0 * c as f64 / expected_c,
    ));
    assert!(
        n >= 0.5 * expected_ab,
        "hot_a + hot_b counted {n}, expected about {expected_ab:.0}"
    );
    assert!(
        (measured - p).abs() <= 3.0 * sigma,
        "share of hot_a {measured:.4}, truth {p:.4}, beyond 3 sigma ({sigma:.4})"
    );
    assert!(
        c as f64 >= 0.5 * expected_c,
        "the thread created after the start ran hot_c for {:.1} ms but only {c} samples were counted \
         (expected about {expected_c:.0})",
        tc / 1e6
    );
    assert_eq!(
        stats.counted,
        a + b + c,
        "every counted sample is in one function"
    );
}

// ---------------------------------------------------------------------------------------------------------
// 2. An unprivileged caller.
// ---------------------------------------------------------------------------------------------------------

/// As `nobody` with no capability (setpriv): a global profile is STATUS_PRIVILEGE_NOT_HELD, root's processes
/// are STATUS_ACCESS_DENIED, a pid that does not exist is STATUS_INVALID_CID, and its own child is profiled.
#[test]
fn unprivileged_caller_gets_the_nt_denials_and_profiles_its_own_child() {
    // Serialized like the others (it profiles); the helper process keeps its own default interval.
    let _serial = Serial::with_interval(DEFAULT_INTERVAL);
    let dir = TempDir::new("unpriv");
    let spin = build_spin(&dir.path);
    let helper = dir.path.join("processes-helper");
    std::fs::copy(std::env::current_exe().expect("current_exe"), &helper)
        .expect("copy the test binary");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Everything nobody needs: the directory (and /tmp above it) searchable, the programs readable and executable.
    for path in [
        dir.path.parent().expect("parent"),
        &dir.path,
        &spin,
        &helper,
    ] {
        let mode = std::fs::metadata(path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o005, 0o005, "{} is mode {mode:o}", path.display());
    }
    // A process of root's that nobody may not profile.
    let root_target = Target::spawn(&spin, &["run", "a", "0"]);

    let as_root = nix::unistd::geteuid().is_root();
    let mut command = if as_root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&helper);
        c
    } else {
        // Already unprivileged (the helper checks that it holds no capability).
        Command::new(&helper)
    };
    command
        .args(HELPER_ARGS)
        .current_dir(&dir.path)
        .env(HELPER_ENV, "unprivileged")
        .env("NTPROFILE_PROCESSES_SPIN", &spin)
        .env(
            "NTPROFILE_PROCESSES_ROOT_PID",
            root_target.pid().to_string(),
        );
    let r = run_helper(command);
    note(format!("unprivileged helper: {r:?}"));
    drop(root_target);

    if as_root {
        assert_eq!(r["uid"], "65534", "setpriv did not drop to nobody");
        assert_eq!(r["euid"], "65534");
    }
    assert_eq!(r["capeff"], "0x0", "the helper still holds capabilities");
    assert_eq!(
        result_status(&r, "global"),
        NtStatus::PRIVILEGE_NOT_HELD,
        "global profile without the privilege"
    );
    assert_eq!(
        result_status(&r, "kernel_range"),
        NtStatus::PRIVILEGE_NOT_HELD,
        "kernel range without CAP_PERFMON at perf_event_paranoid 2"
    );
    if as_root {
        for key in ["pid1", "root_child"] {
            assert_eq!(
                result_status(&r, key),
                NtStatus::ACCESS_DENIED,
                "{key}: nobody profiling a root process (failed at {})",
                r[&format!("{key}_stage")]
            );
        }
    }
    assert_eq!(
        result_status(&r, "gone"),
        NtStatus::INVALID_CID,
        "reaped pid"
    );
    assert_eq!(
        result_status(&r, "pid_beyond_max"),
        NtStatus::INVALID_CID,
        "pid 2^31-1"
    );
    for key in [
        "own_open",
        "own_create",
        "own_start",
        "own_stop",
        "own_close",
        "own_close_process",
    ] {
        assert_eq!(result_status(&r, key), NtStatus::SUCCESS, "{key}");
    }
    let count = result_u64(&r, "own_count");
    let truth_ns = result_u64(&r, "own_truth_ns") as f64;
    let expected = truth_ns / result_u64(&r, "period_ns") as f64;
    assert!(
        count > 0 && count as f64 >= 0.5 * expected,
        "nobody's own child spun {:.0} ms in the range: {count} samples counted of ~{expected:.0}",
        truth_ns / 1e6
    );
}

// ---------------------------------------------------------------------------------------------------------
// 3. Global profiles.
// ---------------------------------------------------------------------------------------------------------

/// A global profile (Process = NULL) over the text of `spin` counts two processes running it, each in its own
/// function; a global profile of the kernel half counts a system-call-heavy loop.
#[test]
fn global_profile_counts_two_processes_and_the_kernel() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let dir = TempDir::new("global");
    let spin = build_spin(&dir.path);
    let privileged = ntprofile::target::has_system_profile_privilege();
    if !privileged {
        // Without the privilege the only correct answer is the refusal (the unprivileged test covers it too).
        let refused = CProfile::create(std::ptr::null_mut(), SPIN_TEXT, 0x10000, 4).err();
        assert_eq!(refused, Some(NtStatus::PRIVILEGE_NOT_HELD));
        note("global: not privileged here, only the refusal was checked");
        return;
    }

    // Two processes of the same non-PIE program, one in hot_a, the other in hot_b.
    let mut first = Target::spawn(&spin, &["run", "a", "300"]);
    let mut second = Target::spawn(&spin, &["run", "b", "300"]);
    assert_eq!(
        first.ranges, second.ranges,
        "a non-PIE program has one layout"
    );
    let (start, stop) = span(&first, &["hot_a", "hot_b", "hot_c", "hot_t"]);
    let mut profile = CProfile::create(std::ptr::null_mut(), start, stop - start, 2)
        .expect("global NtCreateProfile");
    assert_eq!(profile.start(), NtStatus::SUCCESS);
    first.go();
    second.go();
    let (truth_a, truth_b) = (first.finish()["ns"] as f64, second.finish()["ns"] as f64);
    assert_eq!(profile.stop(), NtStatus::SUCCESS);
    let a = profile.count_in(first.range("hot_a"));
    let b = profile.count_in(first.range("hot_b"));
    let others = profile.total() - a - b;
    let stats = profile.stats();
    assert_eq!(profile.close(), NtStatus::SUCCESS);
    let (expected_a, expected_b) = (truth_a / period, truth_b / period);
    note(format!(
        "global, two processes: hot_a {a} (expected ~{expected_a:.0}), hot_b {b} (expected ~{expected_b:.0}), \
         elsewhere in the text {others}; {stats:?}"
    ));
    assert!(
        a as f64 >= 0.5 * expected_a,
        "the first process's hot_a: {a} of ~{expected_a:.0}"
    );
    assert!(
        b as f64 >= 0.5 * expected_b,
        "the second process's hot_b: {b} of ~{expected_b:.0}"
    );
    assert!(
        a as f64 <= 1.5 * expected_a && b as f64 <= 1.5 * expected_b,
        "more samples than CPU time: nothing else runs this text"
    );

    // The kernel half of the address space: 65536 buckets of 2 GiB; a loop of reads from /dev/zero.
    let mut kernel = CProfile::create(std::ptr::null_mut(), KERNEL_BASE, KERNEL_SIZE, 31)
        .expect("global kernel-range NtCreateProfile");
    assert_eq!(kernel.counters.len(), 65536);
    let zero = std::fs::File::open("/dev/zero").expect("open /dev/zero");
    let mut chunk = vec![0u8; 64 * 1024];
    let system_time = || {
        let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
            .expect("getrusage");
        let t = usage.system_time();
        Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
    };
    assert_eq!(kernel.start(), NtStatus::SUCCESS);
    let sys_before = system_time();
    let end = Instant::now() + Duration::from_millis(300);
    let mut reads = 0u64;
    while Instant::now() < end {
        let n = nix::unistd::read(&zero, &mut chunk).expect("read /dev/zero");
        assert_eq!(n, chunk.len());
        reads += 1;
    }
    let sys = system_time() - sys_before;
    assert_eq!(kernel.stop(), NtStatus::SUCCESS);
    let counts = kernel.counts();
    let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
    let busy: Vec<(usize, u32)> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(i, c)| (i, *c))
        .collect();
    let kstats = kernel.stats();
    assert_eq!(kernel.close(), NtStatus::SUCCESS);
    let expected = sys.as_nanos() as f64 / period;
    note(format!(
        "global kernel range: {reads} reads of 64 KiB, {:.1} ms of system time (~{expected:.0} samples); \
         counted {total} in buckets {busy:?}; {kstats:?}",
        sys.as_secs_f64() * 1e3
    ));
    assert!(
        total as f64 >= 0.5 * expected,
        "kernel range counted {total}, the loop alone spent ~{expected:.0} periods in the kernel"
    );
    assert!(
        busy.iter().all(|(i, _)| *i >= 0x8000),
        "kernel samples below the top half of the kernel range: {busy:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// 4. NtCreateProfileEx: processor checks, and pinned profiles.
// ---------------------------------------------------------------------------------------------------------

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).expect("CPU number");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("sched_setaffinity");
}

/// Run `hot_cpu` on a thread pinned to `cpu` for 300 ms of its CPU time; checks it never left the CPU.
fn spin_pinned(cpu: usize) -> Duration {
    std::thread::spawn(move || {
        pin_to(cpu);
        let start = thread_cpu();
        let mut x = 7u64;
        while thread_cpu() - start < Duration::from_millis(300) {
            x = hot_cpu(x, 20_000);
            assert_eq!(nix::sched::sched_getcpu().expect("sched_getcpu"), cpu);
        }
        std::hint::black_box(x);
        thread_cpu() - start
    })
    .join()
    .expect("pinned spinner")
}

/// NtCreateProfileEx: an empty mask, an offline processor, a group that does not exist and non-zero Reserved
/// words are STATUS_INVALID_PARAMETER; a misaligned array STATUS_DATATYPE_MISALIGNMENT; an unreadable one
/// STATUS_ACCESS_VIOLATION; GroupCount 0 is fine. Two profiles pinned to CPU 0 and CPU 1 over one function
/// count only the samples taken on their own processor.
#[test]
fn create_profile_ex_checks_processors_and_pinned_profiles_count_only_their_cpu() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let (start, stop) = cpu_range();
    let size = stop - start;
    let ex = |records: &[GroupAffinity]| {
        CProfile::create_ex(
            current_process(),
            start,
            size,
            2,
            records.len() as u16,
            records.as_ptr().cast(),
        )
        .map(drop)
        .err()
        .unwrap_or(NtStatus::SUCCESS)
    };
    let online = ntprofile::affinity::online_cpus();
    assert!(
        online.len() >= 2 && online.contains(0) && online.contains(1),
        "needs CPUs 0 and 1"
    );
    assert!(online.iter().all(|c| c < 64), "group 1 must not exist");
    let online_mask = online.group_mask(0);
    let offline_bit = if online_mask & (1 << 5) == 0 {
        5
    } else {
        (!online_mask).trailing_zeros()
    };
    assert!(offline_bit < 64, "every CPU of group 0 is online");
    let offline = 1usize << offline_bit;

    let mut reserved = GroupAffinity::new(1, 0);
    reserved.reserved = [0, 1, 0];
    let cases: [(&str, Vec<GroupAffinity>, NtStatus); 7] = [
        (
            "empty mask",
            vec![GroupAffinity::new(0, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "offline CPU",
            vec![GroupAffinity::new(offline, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "online and offline CPU",
            vec![GroupAffinity::new(1 | offline, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "group 1",
            vec![GroupAffinity::new(1, 1)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "second record bad",
            vec![GroupAffinity::new(1, 0), GroupAffinity::new(0, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        ("reserved word", vec![reserved], NtStatus::INVALID_PARAMETER),
        (
            "two good records of one group",
            vec![GroupAffinity::new(1, 0), GroupAffinity::new(2, 0)],
            NtStatus::SUCCESS,
        ),
    ];
    for (what, records, want) in &cases {
        assert_eq!(ex(records), *want, "{what}");
    }

    // Alignment: 2 bytes off is misaligned, 4 bytes off (not 8) is aligned enough.
    #[repr(C, align(16))]
    struct Raw([u8; 64]);
    let mut raw = Raw([0; 64]);
    let record = GroupAffinity::new(1, 0).to_bytes();
    raw.0[2..18].copy_from_slice(&record);
    let misaligned = CProfile::create_ex(
        current_process(),
        start,
        size,
        2,
        1,
        raw.0[2..].as_ptr().cast(),
    );
    assert_eq!(
        misaligned.err(),
        Some(NtStatus::DATATYPE_MISALIGNMENT),
        "GroupAffinity 2 bytes off"
    );
    let mut raw = Raw([0; 64]);
    raw.0[4..20].copy_from_slice(&record);
    let four = CProfile::create_ex(
        current_process(),
        start,
        size,
        2,
        1,
        raw.0[4..].as_ptr().cast(),
    );
    assert!(
        four.is_ok(),
        "GroupAffinity 4-byte aligned: {:?}",
        four.err()
    );
    drop(four);

    // Unreadable: a PROT_NONE page, and an array whose second record runs into it.
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .expect("sysconf")
        .expect("page size") as usize;
    let len = std::num::NonZeroUsize::new(2 * page).expect("non-zero");
    // SAFETY: a fresh anonymous private mapping that nothing else references; unmapped below.
    let map = unsafe {
        nix::sys::mman::mmap_anonymous(
            None,
            len,
            nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
            nix::sys::mman::MapFlags::MAP_PRIVATE,
        )
    }
    .expect("mmap");
    let first_page = map.as_ptr().cast::<u8>();
    // SAFETY: the second page of the mapping above.
    let second_page = unsafe { first_page.add(page) };
    // SAFETY: the last 16 bytes of the first page, which is mapped read-write and ours alone.
    unsafe { std::ptr::copy_nonoverlapping(record.as_ptr(), second_page.sub(16), 16) };
    // SAFETY: changes the protection of our own mapping's second page, which nothing references.
    unsafe {
        nix::sys::mman::mprotect(
            std::ptr::NonNull::new(second_page.cast()).expect("non-null"),
            page,
            nix::sys::mman::ProtFlags::PROT_NONE,
        )
    }
    .expect("mprotect PROT_NONE");
    let unreadable =
        CProfile::create_ex(current_process(), start, size, 2, 1, second_page.cast()).err();
    // SAFETY: the pointer stays inside the first page.
    let straddling_ptr = unsafe { second_page.sub(16) };
    let straddling =
        CProfile::create_ex(current_process(), start, size, 2, 2, straddling_ptr.cast()).err();
    let one_readable =
        CProfile::create_ex(current_process(), start, size, 2, 1, straddling_ptr.cast());
    // SAFETY: unmaps exactly the mapping made above; no reference into it remains.
    unsafe { nix::sys::mman::munmap(map, 2 * page) }.expect("munmap");
    assert_eq!(
        unreadable,
        Some(NtStatus::ACCESS_VIOLATION),
        "PROT_NONE GroupAffinity"
    );
    assert_eq!(
        straddling,
        Some(NtStatus::ACCESS_VIOLATION),
        "second record on a PROT_NONE page"
    );
    assert!(
        one_readable.is_ok(),
        "the readable record alone: {:?}",
        one_readable.err()
    );
    drop(one_readable);

    // GroupCount 0: every active processor (the pointer is not looked at).
    let all = CProfile::create_ex(current_process(), start, size, 2, 0, std::ptr::null());
    assert!(all.is_ok(), "GroupCount 0: {:?}", all.err());
    drop(all);

    // Two profiles over hot_cpu, one pinned to CPU 0, one to CPU 1.
    let on0 = [GroupAffinity::new(1, 0)];
    let on1 = [GroupAffinity::new(2, 0)];
    let mut p0 = CProfile::create_ex(current_process(), start, size, 2, 1, on0.as_ptr().cast())
        .expect("profile on CPU 0");
    let mut p1 = CProfile::create_ex(current_process(), start, size, 2, 1, on1.as_ptr().cast())
        .expect("profile on CPU 1");
    assert_eq!(p0.start(), NtStatus::SUCCESS);
    assert_eq!(p1.start(), NtStatus::SUCCESS);
    let cpu0_time = spin_pinned(0);
    p0.stats(); // drain
    let (c0_first, c1_first) = (p0.total(), p1.total());
    let cpu1_time = spin_pinned(1);
    assert_eq!(p0.stop(), NtStatus::SUCCESS);
    assert_eq!(p1.stop(), NtStatus::SUCCESS);
    let (c0, c1) = (p0.total(), p1.total());
    let (s0, s1) = (p0.stats(), p1.stats());
    assert_eq!(p0.close(), NtStatus::SUCCESS);
    assert_eq!(p1.close(), NtStatus::SUCCESS);
    let expected0 = cpu0_time.as_nanos() as f64 / period;
    let expected1 = cpu1_time.as_nanos() as f64 / period;
    note(format!(
        "pinned: on CPU 0 for {cpu0_time:?} (~{expected0:.0}): CPU-0 profile {c0_first}, CPU-1 profile \
         {c1_first}; then on CPU 1 for {cpu1_time:?} (~{expected1:.0}): CPU-0 profile {}, CPU-1 profile {}; \
         {s0:?} {s1:?}",
        c0 - c0_first,
        c1 - c1_first
    ));
    assert!(
        c0_first as f64 >= 0.5 * expected0,
        "the CPU-0 profile counted {c0_first} of ~{expected0:.0} while a thread spun on CPU 0"
    );
    assert_eq!(
        c1_first, 0,
        "the CPU-1 profile counted samples taken on CPU 0"
    );
    assert_eq!(
        c0, c0_first,
        "the CPU-0 profile counted samples taken on CPU 1"
    );
    assert!(
        (c1 - c1_first) as f64 >= 0.5 * expected1,
        "the CPU-1 profile counted {} of ~{expected1:.0} while a thread spun on CPU 1",
        c1 - c1_first
    );
}

// ---------------------------------------------------------------------------------------------------------
// 5. A 200-thread process, and descriptor exhaustion.
// ---------------------------------------------------------------------------------------------------------

/// Every one of 200 threads (all existing before the start, each spinning 5 ms of CPU in one function) is
/// counted: the count matches the total CPU time / period within 10 %. With `RLIMIT_NOFILE` at 64 (soft and
/// hard, in a helper process), starting the same profile is STATUS_INSUFFICIENT_RESOURCES and leaves no
/// descriptor behind.
#[test]
fn every_thread_of_a_200_thread_process_counts_and_descriptor_exhaustion_is_clean() {
    const THREADS: usize = 200;
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let dir = TempDir::new("threads");
    let spin = build_spin(&dir.path);
    let mut target = Target::spawn(&spin, &["threads", &THREADS.to_string(), "5"]);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", target.pid()))
        .expect("list tasks")
        .count();
    assert_eq!(tasks, THREADS + 1, "the target's threads before the start");
    let range = target.range("hot_t");

    // Descriptor exhaustion, in a helper process whose limit is 64.
    let mut command = Command::new(std::env::current_exe().expect("current_exe"));
    command
        .args(HELPER_ARGS)
        .env(HELPER_ENV, "nofile")
        .env("NTPROFILE_PROCESSES_PID", target.pid().to_string())
        .env("NTPROFILE_PROCESSES_BASE", range.0.to_string())
        .env("NTPROFILE_PROCESSES_SIZE", (range.1 - range.0).to_string());
    let r = run_helper(command);
    note(format!("RLIMIT_NOFILE helper: {r:?}"));
    assert_eq!(r["limit_soft"], "64");
    assert_eq!(r["limit_hard"], "64");
    assert_eq!(result_u64(&r, "threads"), (THREADS + 1) as u64);
    for key in ["start", "start_again"] {
        assert_eq!(
            result_status(&r, key),
            NtStatus::INSUFFICIENT_RESOURCES,
            "{key} with 64 descriptors for {} events",
            2 * (THREADS + 1)
        );
    }
    let opened = result_u64(&r, "fds_opened");
    for key in ["fds_after_start", "fds_after_second_start"] {
        assert_eq!(
            result_u64(&r, key),
            opened,
            "{key}: descriptors leaked by a failed start"
        );
    }
    assert_eq!(
        result_u64(&r, "fds_after_close"),
        result_u64(&r, "fds_before"),
        "descriptors left after closing everything"
    );

    // With room under the hard limit, the start raises the soft limit instead of failing.
    let mut command = Command::new(std::env::current_exe().expect("current_exe"));
    command
        .args(HELPER_ARGS)
        .env(HELPER_ENV, "nofile")
        .env("NTPROFILE_PROCESSES_HARD", "4096")
        .env("NTPROFILE_PROCESSES_PID", target.pid().to_string())
        .env("NTPROFILE_PROCESSES_BASE", range.0.to_string())
        .env("NTPROFILE_PROCESSES_SIZE", (range.1 - range.0).to_string());
    let r = run_helper(command);
    note(format!("RLIMIT_NOFILE helper, hard limit 4096: {r:?}"));
    assert_eq!(r["limit_soft"], "64");
    assert_eq!(
        result_status(&r, "start"),
        NtStatus::SUCCESS,
        "a start that needs {} descriptors raises the soft limit toward the hard one",
        2 * (THREADS + 1)
    );
    assert!(
        result_u64(&r, "limit_soft_after_start") > 2 * (THREADS as u64 + 1),
        "the soft limit went up: {r:?}"
    );
    assert_eq!(
        result_u64(&r, "fds_after_close"),
        result_u64(&r, "fds_before"),
        "descriptors back after stop and close"
    );
    assert_eq!(result_status(&r, "close_profile"), NtStatus::SUCCESS);
    assert_eq!(result_status(&r, "close_process"), NtStatus::SUCCESS);

    // The real profile, every thread.
    let mut process = ProcessHandle::open(target.pid()).expect("NtOpenProcess");
    let mut profile =
        CProfile::create(process.handle, range.0, range.1 - range.0, 2).expect("NtCreateProfile");
    assert_eq!(profile.start(), NtStatus::SUCCESS);
    target.go();
    let truth = target.finish();
    assert_eq!(profile.stop(), NtStatus::SUCCESS);
    let counted = profile.count_in(range);
    let stats = profile.stats();
    assert_eq!(profile.close(), NtStatus::SUCCESS);
    assert_eq!(process.close(), NtStatus::SUCCESS);
    assert_eq!(truth["threads"], THREADS as u64);
    let total = truth["total"] as f64;
    let expected = total / period;
    note(format!(
        "{THREADS} threads: {:.1} ms of CPU in total (~{expected:.0} samples); counted {counted} ({:+.1} %); \
         {stats:?} (counted+outside+lost = {})",
        total / 1e6,
        100.0 * (counted as f64 / expected - 1.0),
        stats.counted + stats.outside + stats.lost
    ));
    assert_eq!(stats.counted, counted);
    assert!(
        (counted as f64 - expected).abs() <= 0.10 * expected,
        "{THREADS} threads spent {:.1} ms in hot_t: expected ~{expected:.0} samples, counted {counted}",
        total / 1e6
    );
    assert!(
        (stats.counted + stats.outside + stats.lost) as f64 <= 1.25 * expected,
        "more samples than the process's CPU time: {stats:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// 6. fork().
// ---------------------------------------------------------------------------------------------------------

/// After a fork, the child sees the inherited profile handle as invalid (start, stop and close are
/// STATUS_INVALID_HANDLE) and its execution is not counted; the parent's profile keeps counting.
#[test]
fn forked_child_sees_invalid_handles_and_is_not_counted() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let range = fork_range();
    let mut profile = CProfile::create(current_process(), range.0, range.1 - range.0, 2)
        .expect("NtCreateProfile");
    assert_eq!(profile.start(), NtStatus::SUCCESS);
    spin_wall(hot_fork, Duration::from_millis(100));
    profile.stats(); // drain
    let before_fork = profile.total();
    assert!(before_fork > 0, "the parent's own spin was not counted");

    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    let handle = profile.handle;
    // SAFETY: the child runs only the three exports (whose fork handler reset their state), a spin, a write
    // and _exit; it never returns into the test harness.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            let statuses = [
                NtStartProfile(handle),
                NtStopProfile(handle),
                NtClose(handle),
            ];
            let mut bytes = [0u8; 12];
            for (i, s) in statuses.iter().enumerate() {
                bytes[4 * i..4 * i + 4].copy_from_slice(&s.to_ne_bytes());
            }
            let _ = nix::unistd::write(&write_end, &bytes);
            spin_wall(hot_fork, Duration::from_millis(200));
            let code = statuses
                .iter()
                .enumerate()
                .filter(|(_, s)| NtStatus(**s) != NtStatus::INVALID_HANDLE)
                .fold(0, |code, (i, _)| code | (1 << i));
            // SAFETY: ends the child at once, without running the parent's atexit handlers or destructors.
            unsafe { nix::libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            let mut bytes = [0u8; 12];
            let mut got = 0;
            while got < bytes.len() {
                match nix::unistd::read(&read_end, &mut bytes[got..]) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => panic!("read the child's statuses: {e}"),
                }
            }
            let wait = nix::sys::wait::waitpid(child, None).expect("waitpid");
            profile.stats(); // drain
            let after_child = profile.total();
            spin_wall(hot_fork, Duration::from_millis(100));
            let stats_live = profile.stats();
            let after_parent = profile.total();
            assert_eq!(
                profile.stop(),
                NtStatus::SUCCESS,
                "NtStopProfile in the parent"
            );
            assert_eq!(profile.close(), NtStatus::SUCCESS, "NtClose in the parent");
            assert_eq!(
                got,
                12,
                "the child reported no statuses (read fd {})",
                read_end.as_raw_fd()
            );
            let statuses: Vec<NtStatus> = bytes
                .chunks_exact(4)
                .map(|c| NtStatus(i32::from_ne_bytes(c.try_into().expect("4 bytes"))))
                .collect();
            let expected_parent = 100e6 / period;
            note(format!(
                "fork: child statuses {statuses:?}, child {wait:?}; parent counts {before_fork} before the \
                 fork, {after_child} after the child's 200 ms spin, +{} during its own 100 ms \
                 (~{expected_parent:.0}); {stats_live:?}",
                after_parent - after_child
            ));
            assert_eq!(
                statuses,
                vec![NtStatus::INVALID_HANDLE; 3],
                "NtStartProfile, NtStopProfile, NtClose in the child"
            );
            assert_eq!(
                wait,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "the child's exit code flags every status that was not STATUS_INVALID_HANDLE"
            );
            assert_eq!(
                after_child, before_fork,
                "the forked child's spin was counted in the parent's profile"
            );
            assert!(
                (after_parent - after_child) as f64 >= 0.3 * expected_parent,
                "the parent's profile stopped counting after the fork: {} of ~{expected_parent:.0}",
                after_parent - after_child
            );
        }
    }
}
