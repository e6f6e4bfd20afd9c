//! The safe Rust API reaches every target the C API reaches, with the same checks and statuses: another process
//! by pid (`Process::open`, `ProfileBuilder::process`), every process (`ProfileBuilder::global`), the kernel
//! range, and processors as `GROUP_AFFINITY` records (`ProfileBuilder::group_affinity`).
//!
//! The profiled child is this test binary re-executed in the `spin` helper mode: it spins in
//! [`reach_spin_hot`] for a given CPU time, and the parent finds that function's range *in the child* with
//! `find_function(Some(pid), ..)` (the child's own address-space layout), so no size is guessed.
//!
//! The privilege checks run in a helper process that really drops privilege (`setpriv` to uid/gid 65534, every
//! capability dropped), and compare each Rust status with the C export's status for the same request.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ntprofile::ffi::exports::{NtClose, NtCreateProfile, NtCreateProfileEx, NtOpenProcess};
use ntprofile::{
    GroupAffinity, NtStatus, Process, Profile, ProfileSource, Symbol, find_function,
    kernel_modules, modules, query_interval, set_interval,
};

mod common;
use common::unprivileged_command;

/// The environment variable naming a helper mode of this binary.
const HELPER_ENV: &str = "NTPROFILE_REACH_HELPER";
/// The arguments that make this test binary run only [`helper_process`].
const HELPER_ARGS: [&str; 5] = [
    "--exact",
    "helper_process",
    "--ignored",
    "--nocapture",
    "--test-threads=1",
];
/// ProfileTime's default interval, restored after every sampling test.
const DEFAULT_INTERVAL: u32 = 10_000;
/// 100 µs between samples.
const TEST_INTERVAL: u32 = 1_000;
/// The kernel half of x86-64 as a profile range.
const KERNEL_BASE: usize = 0xFFFF_8000_0000_0000;
const KERNEL_SIZE: usize = (1 << 47) - 1;

/// The child's hot function: a xorshift chain with no call, so every sample of the spinning thread lands in it.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn reach_spin_hot(mut x: u64, n: u64) -> u64 {
    let mut i = 0;
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x ^= 0x5eed_f00d;
        i += 1;
    }
    x
}

// ---------------------------------------------------------------------------------------------------------
// Serialization: the interval is process-wide and the tests sample.
// ---------------------------------------------------------------------------------------------------------

static SERIAL: Mutex<()> = Mutex::new(());

struct Serial {
    _lock: MutexGuard<'static, ()>,
}

impl Serial {
    fn with_interval(interval: u32) -> Serial {
        let lock = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        set_interval(ProfileSource::Time, interval);
        Serial { _lock: lock }
    }

    fn period_ns(&self) -> f64 {
        f64::from(query_interval(ProfileSource::Time)) * 100.0
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        set_interval(ProfileSource::Time, DEFAULT_INTERVAL);
    }
}

fn note(text: impl AsRef<str>) {
    println!("[reach] {}", text.as_ref());
}

// ---------------------------------------------------------------------------------------------------------
// The spinning child.
// ---------------------------------------------------------------------------------------------------------

/// A child running this binary in the `spin` mode: ready, then waiting for a byte, then spinning.
struct Spinner {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Spinner {
    fn spawn(exe: &Path, cpu_ms: u64) -> Spinner {
        let mut child = Command::new(exe)
            .args(HELPER_ARGS)
            .env(HELPER_ENV, "spin")
            .env("NTPROFILE_REACH_MS", cpu_ms.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the spinning child");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                stdout.read_line(&mut line).expect("read the child") > 0,
                "the child ended before it was ready"
            );
            if line.contains("RESULT ready") {
                break;
            }
        }
        Spinner {
            child,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Let it spin; wait for its exit; the CPU time it spent in the hot function (ns).
    fn go_and_finish(&mut self) -> u64 {
        let mut stdin = self.stdin.take().expect("go once");
        stdin.write_all(b"g").expect("write the go byte");
        drop(stdin);
        let mut truth = None;
        let mut line = String::new();
        while self.stdout.read_line(&mut line).expect("read the child") > 0 {
            if let Some(v) = line.split("RESULT truth_ns ").nth(1) {
                truth = v.trim().parse().ok();
            }
            line.clear();
        }
        let status = self.child.wait().expect("wait for the child");
        assert!(status.success(), "the child failed: {status:?}");
        truth.expect("the child reported its CPU time")
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spin in [`reach_spin_hot`] until this thread used `ms` of CPU; the time it took (ns).
fn spin_cpu(ms: u64) -> u64 {
    let start = common::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    let mut x = start | 1;
    let mut now = start;
    while now - start < ms * 1_000_000 {
        x = reach_spin_hot(std::hint::black_box(x), 200_000);
        now = common::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    }
    std::hint::black_box(x);
    now - start
}

/// The hot function's range in process `pid`, found by name in its symbol table.
fn hot_in(pid: u32) -> Symbol {
    let symbol =
        find_function(Some(pid), None, "reach_spin_hot").expect("reach_spin_hot in the child");
    assert!(symbol.size > 0, "{symbol:?}");
    symbol
}

// ---------------------------------------------------------------------------------------------------------
// Helper processes.
// ---------------------------------------------------------------------------------------------------------

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
        Ok("spin") => helper_spin(),
        Ok("unprivileged") => helper_unprivileged(),
        Ok(other) => panic!("unknown helper mode {other:?}"),
        Err(_) => {}
    }
}

fn helper_spin() {
    let ms: u64 = std::env::var("NTPROFILE_REACH_MS")
        .expect("NTPROFILE_REACH_MS")
        .parse()
        .expect("a number");
    report("ready", 1);
    std::io::stdout().flush().expect("flush");
    let mut byte = [0u8; 1];
    if std::io::Read::read(&mut std::io::stdin(), &mut byte).unwrap_or(0) != 1 {
        return;
    }
    report("truth_ns", spin_cpu(ms));
}

/// `CLIENT_ID` for `NtOpenProcess`.
#[repr(C)]
struct ClientId {
    unique_process: usize,
    unique_thread: usize,
}

/// The C export's status for opening `pid` (the handle is closed again).
fn c_open(pid: u32) -> NtStatus {
    let mut handle: *mut std::ffi::c_void = std::ptr::null_mut();
    let mut cid = ClientId {
        unique_process: pid as usize,
        unique_thread: 0,
    };
    let s = NtStatus(NtOpenProcess(
        &mut handle,
        0x0400,
        std::ptr::null_mut(),
        (&mut cid as *mut ClientId).cast(),
    ));
    if s.is_success() {
        NtClose(handle);
    }
    s
}

/// The C export's status for creating a profile of `process` (NULL: global) over `[base, base + size)`.
fn c_create(process: *mut std::ffi::c_void, base: usize, size: usize, bucket: u32) -> NtStatus {
    let mut buffer = vec![0u32; (size >> bucket) + 1];
    let mut handle: *mut std::ffi::c_void = std::ptr::null_mut();
    let s = NtStatus(NtCreateProfile(
        &mut handle,
        process,
        std::ptr::without_provenance_mut(base),
        size,
        bucket,
        buffer.as_mut_ptr(),
        (buffer.len() * 4) as u32,
        0,
        usize::MAX,
    ));
    if s.is_success() {
        NtClose(handle);
    }
    s
}

fn status_of<T>(r: Result<T, ntprofile::Error>) -> NtStatus {
    match r {
        Ok(_) => NtStatus::SUCCESS,
        Err(e) => {
            println!("detail: {e}");
            e.status()
        }
    }
}

/// A pid that names no process now (checked against /proc).
fn missing_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (2..max)
        .rev()
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .expect("a free pid")
}

/// Run unprivileged: each request through the Rust API and through the C export, and the own child profiled.
fn helper_unprivileged() {
    report("uid", nix::unistd::getuid());
    report("euid", nix::unistd::geteuid());
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let capeff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff")
        .trim()
        .to_string();
    report("capeff", capeff);

    // A global profile.
    let hot = reach_spin_hot as *const () as usize;
    report_status(
        "global_rust",
        status_of(Profile::builder().global().range(hot, 4096).build()),
    );
    report_status("global_c", c_create(std::ptr::null_mut(), hot, 4096, 6));
    // A kernel range of this process.
    report_status(
        "kernel_rust",
        status_of(
            Profile::builder()
                .range(KERNEL_BASE, KERNEL_SIZE)
                .bucket_size(31)
                .build(),
        ),
    );
    report_status(
        "kernel_c",
        c_create(
            std::ptr::without_provenance_mut(usize::MAX),
            KERNEL_BASE,
            KERNEL_SIZE,
            31,
        ),
    );
    // pid 1 (root's), and a pid that does not exist.
    report_status("pid1_rust", status_of(Process::open(1)));
    report_status("pid1_c", c_open(1));
    let missing = missing_pid();
    report("missing_pid", missing);
    report_status("missing_rust", status_of(Process::open(missing)));
    report_status("missing_c", c_open(missing));
    // Kernel addresses and another user's mappings.
    report_status("kernel_modules", status_of(kernel_modules()));
    report_status("modules_pid1", status_of(modules(Some(1))));

    // Its own child: opened, found by name, profiled.
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Spinner::spawn(&exe, 300);
    let process = Process::open(child.pid());
    report_status(
        "own_open",
        process
            .as_ref()
            .err()
            .map_or(NtStatus::SUCCESS, |e| e.status()),
    );
    report_status("own_open_c", c_open(child.pid()));
    let Ok(process) = process else { return };
    let hot = hot_in(child.pid());
    let profile = Profile::builder()
        .process(&process)
        .function(&hot)
        .bucket_size(2)
        .build()
        .expect("a profile of the own child");
    report(
        "period_ns",
        u64::from(query_interval(ProfileSource::Time)) * 100,
    );
    profile.start().expect("start");
    let truth = child.go_and_finish();
    profile.stop().expect("stop");
    let stats = profile.stats();
    report("own_counted", stats.counted);
    report("own_outside", stats.outside);
    report("own_truth_ns", truth);
    report("own_exited", process.has_exited());
}

fn run_helper(command: Command) -> HashMap<String, String> {
    let (stdout, _, results) = common::run_helper_process(command);
    for line in stdout.lines().filter(|l| l.starts_with("detail:")) {
        note(line);
    }
    results
}

fn status_in(r: &HashMap<String, String>, key: &str) -> NtStatus {
    let text = r
        .get(key)
        .unwrap_or_else(|| panic!("helper result {key} missing: {r:?}"));
    NtStatus(u32::from_str_radix(text.trim_start_matches("0x"), 16).expect("hex") as i32)
}

fn number_in(r: &HashMap<String, String>, key: &str) -> u64 {
    r.get(key)
        .unwrap_or_else(|| panic!("helper result {key} missing: {r:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number: {r:?}"))
}

/// A directory nobody can enter, holding a copy of this test binary nobody can run.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("ntprofile-reach-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------------------------------------

/// `Process::open` + `ProfileBuilder::process`: a child profiled by pid over its hot function, found by name in
/// the child's own symbol table and address space, counts about the CPU time it spent there.
#[test]
fn rust_api_profiles_a_child_by_pid() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Spinner::spawn(&exe, 400);
    let process = Process::open(child.pid()).expect("open the child");
    assert_eq!(process.pid(), child.pid());
    assert!(!process.has_exited());
    let hot = hot_in(child.pid());
    // The child's layout is its own (ASLR): the same function at another address, of the same size.
    let mine = find_function(None, None, "reach_spin_hot").expect("reach_spin_hot here");
    assert_eq!(mine.size, hot.size);
    note(format!(
        "child {}: reach_spin_hot at {:#x} ({} bytes); here at {:#x}",
        child.pid(),
        hot.address,
        hot.size,
        mine.address
    ));
    let profile = Profile::builder()
        .process(&process)
        .function(&hot)
        .bucket_size(2)
        .build()
        .expect("build");
    profile.start().expect("start");
    let truth = child.go_and_finish();
    profile.stop().expect("stop");
    let stats = profile.stats();
    let counts: u64 = profile.counts().iter().map(|&c| u64::from(c)).sum();
    let expected = truth as f64 / period;
    note(format!(
        "child spun {:.0} ms in reach_spin_hot: {} counted (expected ~{expected:.0}), {} outside, {} lost",
        truth as f64 / 1e6,
        stats.counted,
        stats.outside,
        stats.lost
    ));
    assert_eq!(
        counts, stats.counted,
        "the buckets hold every counted sample"
    );
    assert!(
        stats.counted as f64 >= 0.6 * expected && stats.counted as f64 <= 1.3 * expected,
        "{} counted, ~{expected:.0} expected",
        stats.counted
    );
    assert!(process.has_exited(), "the child was reaped");
    // A reaped pid is gone, as NtOpenProcess says.
    let e = Process::open(child.pid()).unwrap_err();
    assert_eq!(e.status(), NtStatus::INVALID_CID, "{e}");
    assert!(e.detail().contains(&child.pid().to_string()), "{e}");
}

/// `ProfileBuilder::global`: as root, a profile of every process over the child's hot function counts the child;
/// without the privilege it is refused exactly as `NtCreateProfile(Process = NULL)` is.
#[test]
fn rust_api_global_profile() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Spinner::spawn(&exe, 400);
    let hot = hot_in(child.pid());
    let built = Profile::builder()
        .global()
        .function(&hot)
        .bucket_size(2)
        .all_cpus()
        .build();
    if !ntprofile::target::has_system_profile_privilege() {
        let e = built.unwrap_err();
        assert_eq!(e.status(), NtStatus::PRIVILEGE_NOT_HELD, "{e}");
        assert_eq!(
            c_create(
                std::ptr::null_mut(),
                hot.address as usize,
                hot.size as usize,
                2
            ),
            NtStatus::PRIVILEGE_NOT_HELD
        );
        note("global profile refused: not privileged here (the unprivileged test covers that)");
        common::skip("needs the system-profile privilege for its global half (run as root)");
        return;
    }
    let profile = built.expect("a global profile as root");
    profile.start().expect("start");
    let truth = child.go_and_finish();
    profile.stop().expect("stop");
    let stats = profile.stats();
    let expected = truth as f64 / period;
    note(format!(
        "global profile over the child's reach_spin_hot: {} counted (expected ~{expected:.0}), {} outside \
         (every other process on every CPU), {} lost",
        stats.counted, stats.outside, stats.lost
    ));
    assert!(
        stats.counted as f64 >= 0.6 * expected && stats.counted as f64 <= 1.3 * expected,
        "{} counted, ~{expected:.0} expected",
        stats.counted
    );
}

/// `ProfileBuilder::group_affinity`: records are checked as `NtCreateProfileEx` checks them, and a profile on
/// CPU 0 only counts this thread while it runs on CPU 0, not while it runs on CPU 1.
#[test]
fn rust_api_group_affinity_records() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let _ = serial.period_ns();
    let online = ntprofile::affinity::online_cpus();
    let hot = find_function(None, None, "reach_spin_hot").expect("reach_spin_hot here");
    // Bad records: the same status from both APIs.
    let bad: [&[GroupAffinity]; 3] = [
        &[GroupAffinity { mask: 0, group: 0 }],
        &[GroupAffinity {
            mask: 1,
            group: 1000,
        }],
        &[GroupAffinity {
            mask: 1 << 63,
            group: 0,
        }],
    ];
    for records in bad {
        if records[0].mask == 1 << 63 && online.contains(63) {
            continue;
        }
        let rust = Profile::builder()
            .function(&hot)
            .group_affinity(records)
            .build()
            .unwrap_err();
        let mut raw: Vec<u64> = records
            .iter()
            .flat_map(|r| [r.mask, u64::from(r.group)])
            .collect();
        let mut buffer = vec![0u32; 1024];
        let mut handle: *mut std::ffi::c_void = std::ptr::null_mut();
        let c = NtStatus(NtCreateProfileEx(
            &mut handle,
            std::ptr::without_provenance_mut(usize::MAX),
            std::ptr::without_provenance_mut(hot.address as usize),
            hot.size as usize,
            2,
            buffer.as_mut_ptr(),
            (buffer.len() * 4) as u32,
            0,
            records.len() as u16,
            raw.as_mut_ptr().cast(),
        ));
        assert_eq!(
            rust.status(),
            NtStatus::INVALID_PARAMETER,
            "{records:?}: {rust}"
        );
        assert_eq!(c, rust.status(), "{records:?}: the C export disagrees");
        note(format!("{records:?}: {rust}"));
    }
    // CPU 0 only.
    let profile = Profile::builder()
        .function(&hot)
        .bucket_size(2)
        .group_affinity(&[GroupAffinity::cpu(0)])
        .build()
        .expect("CPU 0");
    let pin = |cpu: usize| {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).expect("cpu");
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("pin");
    };
    let before = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity");
    profile.start().expect("start");
    pin(0);
    let on_cpu0 = spin_cpu(200);
    let after_cpu0 = profile.stats().counted;
    let other = online.iter().find(|&c| c != 0);
    if let Some(cpu) = other {
        pin(cpu);
        spin_cpu(200);
    }
    profile.stop().expect("stop");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &before).expect("unpin");
    let total = profile.stats().counted;
    note(format!(
        "profile on CPU 0: {after_cpu0} counted while pinned to CPU 0 ({:.0} ms), {} more while pinned to CPU \
         {other:?}",
        on_cpu0 as f64 / 1e6,
        total - after_cpu0
    ));
    assert!(after_cpu0 > 0, "nothing counted on CPU 0");
    if other.is_some() {
        // A sample or two may land while the migration is under way.
        assert!(
            total - after_cpu0 <= 2,
            "counted on another CPU: {}",
            total - after_cpu0
        );
    }
}

/// A kernel range through the Rust API: as root it counts a system-call loop; the privilege check is the C
/// API's.
#[test]
fn rust_api_kernel_range() {
    let _serial = Serial::with_interval(TEST_INTERVAL);
    let built = Profile::builder()
        .range(KERNEL_BASE, KERNEL_SIZE)
        .bucket_size(31)
        .build();
    let c = c_create(
        std::ptr::without_provenance_mut(usize::MAX),
        KERNEL_BASE,
        KERNEL_SIZE,
        31,
    );
    if !ntprofile::target::may_sample_kernel() {
        let e = built.unwrap_err();
        assert_eq!(e.status(), NtStatus::PRIVILEGE_NOT_HELD, "{e}");
        assert_eq!(c, NtStatus::PRIVILEGE_NOT_HELD);
        return;
    }
    assert_eq!(c, NtStatus::SUCCESS);
    let profile = built.expect("a kernel range as root");
    // The kernel's text, found through kernel_modules, holds the samples.
    let kernel = kernel_modules().expect("kernel modules as root");
    profile.start().expect("start");
    let start = common::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
    while common::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) - start < 200_000_000 {
        for _ in 0..100 {
            std::hint::black_box(nix::unistd::getppid());
        }
    }
    profile.stop().expect("stop");
    let stats = profile.stats();
    note(format!(
        "kernel range (kernel text {:#x}+{:#x}): {} counted, {} outside",
        kernel[0].base, kernel[0].size, stats.counted, stats.outside
    ));
    assert!(stats.counted > 0, "{stats:?}");
}

/// Unprivileged for real (`setpriv` to uid 65534, no capability): the Rust API gets the C API's statuses —
/// global STATUS_PRIVILEGE_NOT_HELD, pid 1 STATUS_ACCESS_DENIED, a missing pid STATUS_INVALID_CID — and its own
/// child is opened, found by name and counted.
#[test]
fn unprivileged_rust_api_gets_the_c_api_statuses() {
    let _serial = Serial::with_interval(DEFAULT_INTERVAL);
    let scratch = Scratch::new("unpriv");
    let helper = scratch.0.join("reach-helper");
    std::fs::copy(std::env::current_exe().expect("current_exe"), &helper).expect("copy");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let as_root = nix::unistd::geteuid().is_root();
    let mut command = unprivileged_command(&helper);
    command
        .args(HELPER_ARGS)
        .current_dir(&scratch.0)
        .env(HELPER_ENV, "unprivileged");
    let r = run_helper(command);
    note(format!("unprivileged helper: {r:?}"));
    if as_root {
        assert_eq!(r["uid"], "65534", "setpriv did not drop to nobody");
        assert_eq!(r["euid"], "65534");
    }
    assert_eq!(
        u64::from_str_radix(&r["capeff"], 16).unwrap(),
        0,
        "capabilities left"
    );
    let paranoid = ntprofile::target::perf_event_paranoid();
    for (key, expected) in [
        ("global", NtStatus::PRIVILEGE_NOT_HELD),
        ("missing", NtStatus::INVALID_CID),
    ] {
        let rust = status_in(&r, &format!("{key}_rust"));
        let c = status_in(&r, &format!("{key}_c"));
        assert_eq!(rust, expected, "{key}: Rust");
        assert_eq!(c, expected, "{key}: C");
    }
    if as_root {
        assert_eq!(
            status_in(&r, "pid1_rust"),
            NtStatus::ACCESS_DENIED,
            "pid 1: Rust"
        );
        assert_eq!(status_in(&r, "pid1_c"), NtStatus::ACCESS_DENIED, "pid 1: C");
        assert_eq!(status_in(&r, "modules_pid1"), NtStatus::ACCESS_DENIED);
    }
    if paranoid >= 2 {
        assert_eq!(status_in(&r, "kernel_rust"), NtStatus::PRIVILEGE_NOT_HELD);
        assert_eq!(status_in(&r, "kernel_c"), NtStatus::PRIVILEGE_NOT_HELD);
        assert_eq!(
            status_in(&r, "kernel_modules"),
            NtStatus::PRIVILEGE_NOT_HELD
        );
    } else {
        assert_eq!(status_in(&r, "kernel_rust"), status_in(&r, "kernel_c"));
    }
    assert_eq!(status_in(&r, "own_open"), NtStatus::SUCCESS);
    assert_eq!(status_in(&r, "own_open_c"), NtStatus::SUCCESS);
    let counted = number_in(&r, "own_counted");
    let expected = number_in(&r, "own_truth_ns") as f64 / number_in(&r, "period_ns") as f64;
    assert!(
        counted as f64 >= 0.6 * expected && counted as f64 <= 1.3 * expected,
        "own child: {counted} counted, ~{expected:.0} expected"
    );
    assert_eq!(r["own_exited"], "true");
}
