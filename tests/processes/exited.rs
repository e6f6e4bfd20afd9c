//! A process that has exited is still a process, through the Rust API: `Process::open` of a zombie succeeds
//! and says it has exited, and a profile of it starts, stops and starts again, counting nothing.

use super::*;

use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use ntprofile::{Process, Profile, ProfileSource};

/// A zombie child (exited, not reaped): `Process::open` succeeds and `has_exited()` is true; a profile of it
/// builds, starts, stops and restarts, its statistics read zero and its buckets stay zero; once the child is
/// reaped the profile still starts and stops, and its pid opens no more (`STATUS_INVALID_CID`).
#[test]
fn rust_api_profiles_a_zombie_and_a_reaped_process() {
    let _serial = crate::common::serial();
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    // Wait for the exit without reaping: the child stays a zombie.
    waitid(
        Id::Pid(Pid::from_raw(pid as i32)),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
    )
    .expect("waitid");

    let process = Process::open(pid).expect("Process::open of a zombie");
    assert!(process.has_exited(), "a zombie has exited");
    // Every user address, in 2 GiB buckets: whatever the process ran would be counted.
    let profile = Profile::builder()
        .process(&process)
        .range(0, 1 << 47)
        .bucket_size(31)
        .source(ProfileSource::Time)
        .build()
        .expect("a profile of the zombie");
    profile.start().expect("start on the zombie");
    assert!(
        profile.start().is_err(),
        "a second start of a started profile"
    );
    profile.stop().expect("stop on the zombie");
    profile.start().expect("restart on the zombie");
    profile.stop().expect("stop again");

    child.wait().expect("reap the child");
    assert!(process.has_exited());
    profile.start().expect("start once the process is reaped");
    profile.stop().expect("stop once the process is reaped");
    assert_eq!(profile.stats(), ProfileStats::default(), "nothing counted");
    assert!(
        profile.counts().iter().all(|&c| c == 0),
        "buckets stay zero"
    );
    note(format!(
        "zombie pid {pid}: Process::open ok, has_exited true, start/stop/restart ok, {:?}",
        profile.stats()
    ));
    drop(profile);
    let err = Process::open(pid).expect_err("a reaped pid names no process");
    assert_eq!(err.status(), NtStatus::INVALID_CID, "{err}");
}
