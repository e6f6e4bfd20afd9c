//! 2. An unprivileged caller.

use super::*;
use crate::common::unprivileged_command;

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
    // As root, drop privilege through setpriv; already unprivileged, run the helper as it is (it checks that it
    // holds no capability).
    let mut command = unprivileged_command(&helper);
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
