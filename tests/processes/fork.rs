//! 6. fork().

use super::*;

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
