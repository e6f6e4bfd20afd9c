//! Helper processes: this test binary re-executed in a mode (`HELPER_ENV`), and what they report.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// Helper processes (this binary re-executed).
// ---------------------------------------------------------------------------------------------------------

/// The arguments that make this test binary run only [`helper_process`].
pub(crate) const HELPER_ARGS: [&str; 5] = [
    "--exact",
    "helper_process",
    "--ignored",
    "--nocapture",
    "--test-threads=1",
];

/// Run a helper command; its `RESULT key value` lines.
pub(crate) fn run_helper(command: Command) -> HashMap<String, String> {
    let (stdout, stderr, results) = crate::common::run_helper_process(command);
    assert!(
        !results.is_empty(),
        "the helper reported nothing (did it run?):\n{stdout}\n{stderr}"
    );
    results
}

pub(crate) fn result_status(results: &HashMap<String, String>, key: &str) -> NtStatus {
    let text = results
        .get(key)
        .unwrap_or_else(|| panic!("helper result {key} missing: {results:?}"));
    NtStatus(parse_hex(text) as u32 as i32)
}

pub(crate) fn result_u64(results: &HashMap<String, String>, key: &str) -> u64 {
    results
        .get(key)
        .unwrap_or_else(|| panic!("helper result {key} missing: {results:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("helper result {key} is not a number: {results:?}"))
}

pub(crate) fn report(key: &str, value: impl std::fmt::Display) {
    println!("RESULT {key} {value}");
}

pub(crate) fn report_status(key: &str, s: NtStatus) {
    report(key, format_args!("{:#010x}", s.as_u32()));
}

pub(crate) fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| panic!("{name} not set")))
}

pub(crate) fn env_u32(name: &str) -> u32 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} not set"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// `CapEff` of this process.
pub(crate) fn effective_caps() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = text
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .expect("CapEff line");
    parse_hex(line.trim_start_matches("CapEff:").trim())
}

/// Open `pid`, create a profile of it and start it; the first status that is not a success (or success).
pub(crate) fn open_create_start(pid: u32) -> (NtStatus, &'static str) {
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
pub(crate) fn helper_unprivileged() {
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
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .count()
}

/// With `RLIMIT_NOFILE` = 64 (soft and hard): starting a profile of a 200-thread process fails cleanly.
pub(crate) fn helper_nofile() {
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
