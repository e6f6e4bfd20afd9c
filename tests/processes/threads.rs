//! 5. A 200-thread process, and descriptor exhaustion.

use super::*;

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

    // Descriptor exhaustion, in a helper process whose limit is 64, in the (thread × processor) layout (as root,
    // 64 descriptors would hold the processor-wide filtered one: one per processor).
    let mut command = Command::new(std::env::current_exe().expect("current_exe"));
    command
        .args(HELPER_ARGS)
        .env(HELPER_ENV, "nofile")
        .env("NTPROFILE_EVENTS", "thread-cpu")
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
