//! Regressions for the four defects found under attack, each in a fresh process (see [`crate::isolated`]).

use std::ffi::c_void;

use ntprofile::NtStatus;
use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtOpenProcess, NtQueryIntervalProfile, NtStartProfile, NtStopProfile,
    NtprofileQueryStatistics,
};
use ntprofile::profile::ProfileStats;

use crate::{CURRENT_PROCESS, exhaust_descriptors, isolated, set_nofile, st};

/// `ProfileTime`.
const PROFILE_TIME: u32 = 0;

/// A range to profile (this function's code) and a buffer that covers it with 16-byte buckets.
fn range() -> (usize, usize) {
    (range as *const () as usize & !0xFFF, 0x1000)
}

/// Lower the soft descriptor limit of this (isolated) process to `soft`, keeping the hard limit.
fn set_soft_nofile(soft: u64) {
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    set_nofile(soft, hard);
}

/// `NtCreateProfile` of this process over [`range`] into `buffer` (256 counters).
fn create(handle: &mut *mut c_void, process: *mut c_void, buffer: &mut [u32]) -> NtStatus {
    let (base, size) = range();
    st(NtCreateProfile(
        handle,
        process,
        base as *mut c_void,
        size,
        4,
        buffer.as_mut_ptr(),
        (buffer.len() * 4) as u32,
        PROFILE_TIME,
        usize::MAX,
    ))
}

/// Defect 1: the fork handlers were installed only by the first profile creation. A process that opened a
/// process handle and forked before creating any profile could use the inherited handle in the child: create a
/// profile of it, start it, close it. Every inherited handle must be `STATUS_INVALID_HANDLE` in the child.
#[test]
fn fork_child_cannot_use_an_inherited_process_handle() {
    isolated(
        "regressions::fork_child_cannot_use_an_inherited_process_handle",
        || {
            let mut process: *mut c_void = std::ptr::null_mut();
            let mut client_id = [u64::from(std::process::id()), 0u64];
            let s = st(NtOpenProcess(
                &mut process,
                0,
                std::ptr::null_mut(),
                client_id.as_mut_ptr().cast(),
            ));
            assert_eq!(s, NtStatus::SUCCESS, "NtOpenProcess of this process");
            let mut buffer = vec![0u32; 256];
            // SAFETY: the child only calls the library's exports and _exit.
            match unsafe { nix::unistd::fork() }.expect("fork") {
                nix::unistd::ForkResult::Child => {
                    let mut handle: *mut c_void = std::ptr::null_mut();
                    let created = create(&mut handle, process, &mut buffer);
                    let started = if created.is_success() {
                        st(NtStartProfile(handle))
                    } else {
                        NtStatus::INVALID_HANDLE
                    };
                    let closed = st(NtClose(process));
                    let ok = created == NtStatus::INVALID_HANDLE
                        && started == NtStatus::INVALID_HANDLE
                        && closed == NtStatus::INVALID_HANDLE;
                    if !ok {
                        eprintln!(
                            "fork child: create {created:?}, start {started:?}, close {closed:?} (all must be \
                             STATUS_INVALID_HANDLE)"
                        );
                    }
                    // SAFETY: _exit ends the child at once, running no atexit handler of the parent's.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) };
                }
                nix::unistd::ForkResult::Parent { child } => {
                    let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
                    assert_eq!(
                        status,
                        nix::sys::wait::WaitStatus::Exited(child, 0),
                        "the child could use the inherited process handle"
                    );
                    // The parent's handle is untouched.
                    let mut handle: *mut c_void = std::ptr::null_mut();
                    assert_eq!(create(&mut handle, process, &mut buffer), NtStatus::SUCCESS);
                    assert_eq!(st(NtClose(handle)), NtStatus::SUCCESS);
                    assert_eq!(st(NtClose(process)), NtStatus::SUCCESS);
                }
            }
        },
    );
}

/// Defect 2: a create made while no descriptor was free cached "ProfileTime unsupported" for the rest of the
/// process. The transient failure must give `STATUS_INSUFFICIENT_RESOURCES`, and the source must work once
/// descriptors are free again.
#[test]
fn exhausted_descriptors_never_mark_a_source_unsupported() {
    isolated(
        "regressions::exhausted_descriptors_never_mark_a_source_unsupported",
        || {
            set_soft_nofile(64);
            let mut buffer = vec![0u32; 256];
            let mut handle: *mut c_void = std::ptr::null_mut();
            let held = exhaust_descriptors();
            let during = create(&mut handle, CURRENT_PROCESS, &mut buffer);
            let mut interval = 0xDEAD_BEEFu32;
            let query_during = st(NtQueryIntervalProfile(PROFILE_TIME, &mut interval));
            drop(held);
            assert_eq!(
                during,
                NtStatus::INSUFFICIENT_RESOURCES,
                "a create without a free descriptor"
            );
            assert!(
                query_during == NtStatus::INSUFFICIENT_RESOURCES && interval == 0xDEAD_BEEF,
                "NtQueryIntervalProfile without a free descriptor: {query_during:?}, wrote {interval:#x}"
            );
            let mut interval = 0u32;
            assert_eq!(
                st(NtQueryIntervalProfile(PROFILE_TIME, &mut interval)),
                NtStatus::SUCCESS
            );
            assert_ne!(
                interval, 0,
                "ProfileTime stays supported once descriptors are free"
            );
            assert_eq!(
                create(&mut handle, CURRENT_PROCESS, &mut buffer),
                NtStatus::SUCCESS
            );
            assert_eq!(st(NtStartProfile(handle)), NtStatus::SUCCESS);
            assert_eq!(st(NtStopProfile(handle)), NtStatus::SUCCESS);
            assert_eq!(st(NtClose(handle)), NtStatus::SUCCESS);
        },
    );
}

/// Defect 3a: `/proc/self/maps` could not be read (EMFILE) and the buffer was taken as unwritable: a valid
/// create and start answered `STATUS_ACCESS_VIOLATION`, blaming the caller's buffer.
#[test]
fn exhausted_descriptors_never_blame_the_buffer() {
    isolated(
        "regressions::exhausted_descriptors_never_blame_the_buffer",
        || {
            set_soft_nofile(64);
            let mut buffer = vec![0u32; 256];
            let mut started: *mut c_void = std::ptr::null_mut();
            // The source is probed (and cached as supported) while descriptors are free.
            assert_eq!(
                create(&mut started, CURRENT_PROCESS, &mut buffer),
                NtStatus::SUCCESS
            );
            let held = exhaust_descriptors();
            let mut handle: *mut c_void = std::ptr::null_mut();
            let created = create(&mut handle, CURRENT_PROCESS, &mut buffer);
            let start = st(NtStartProfile(started));
            drop(held);
            assert_eq!(
                created,
                NtStatus::INSUFFICIENT_RESOURCES,
                "create without a free descriptor"
            );
            assert_eq!(
                start,
                NtStatus::INSUFFICIENT_RESOURCES,
                "start without a free descriptor"
            );
            // Once descriptors are back, the same calls succeed.
            assert_eq!(st(NtStartProfile(started)), NtStatus::SUCCESS);
            assert_eq!(st(NtStopProfile(started)), NtStatus::SUCCESS);
            assert_eq!(st(NtClose(started)), NtStatus::SUCCESS);
        },
    );
}

/// Defect 3b: with few descriptors (RLIMIT_NOFILE 24, 9 threads) the thread listing (`/proc/self/task`) failed
/// and the start answered `STATUS_INVALID_HANDLE`. For every limit from 48 down to 8, a start gives success or
/// `STATUS_INSUFFICIENT_RESOURCES`, never a status that blames the handle or the buffer.
#[test]
fn few_descriptors_give_insufficient_resources_or_success() {
    isolated(
        "regressions::few_descriptors_give_insufficient_resources_or_success",
        || {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    })
                })
                .collect();
            let mut buffer = vec![0u32; 256];
            let mut seen = std::collections::BTreeMap::new();
            // Lowering the hard limit is allowed to anyone; going down keeps it possible without privilege.
            for limit in (8..=48u64).rev() {
                let mut handle: *mut c_void = std::ptr::null_mut();
                assert_eq!(
                    create(&mut handle, CURRENT_PROCESS, &mut buffer),
                    NtStatus::SUCCESS
                );
                set_nofile(limit, limit);
                let s = st(NtStartProfile(handle));
                *seen.entry(format!("{s:?}")).or_insert(0) += 1;
                assert!(
                    s == NtStatus::SUCCESS || s == NtStatus::INSUFFICIENT_RESOURCES,
                    "RLIMIT_NOFILE {limit}, 9 threads: start gave {s:?}"
                );
                if s.is_success() {
                    assert_eq!(st(NtStopProfile(handle)), NtStatus::SUCCESS);
                }
                let c = st(NtClose(handle));
                assert_eq!(c, NtStatus::SUCCESS, "close at RLIMIT_NOFILE {limit}");
            }
            println!("statuses of starts at RLIMIT_NOFILE 48..=8 with 9 threads: {seen:?}");
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for t in threads {
                t.join().unwrap();
            }
        },
    );
}

/// The thread listing itself: without a free descriptor it is a shortage of resources, not a dead process.
#[test]
fn thread_listing_without_descriptors_is_a_shortage() {
    isolated(
        "regressions::thread_listing_without_descriptors_is_a_shortage",
        || {
            set_soft_nofile(64);
            let held = exhaust_descriptors();
            let r = ntprofile::target::Target::CurrentProcess.threads();
            drop(held);
            assert_eq!(r, Err(NtStatus::INSUFFICIENT_RESOURCES));
        },
    );
}

/// Defect 4: a `NtprofileQueryStatistics` record crossing into a PROT_NONE page had its first half written
/// before the call returned `STATUS_ACCESS_VIOLATION`. Nothing may be written on failure.
#[test]
fn failed_statistics_query_writes_nothing() {
    let page = 4096usize;
    // SAFETY: a fresh anonymous mapping of two pages, private to this test; the second is made PROT_NONE.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    // SAFETY: the second page of our own mapping.
    let rc = unsafe { libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE) };
    assert_eq!(rc, 0);
    let mut buffer = vec![0u32; 256];
    let mut handle: *mut c_void = std::ptr::null_mut();
    assert_eq!(
        create(&mut handle, CURRENT_PROCESS, &mut buffer),
        NtStatus::SUCCESS
    );
    for offset in [8usize, 16, 24, 31] {
        let at = base as usize + page - offset;
        // SAFETY: [base, base + page) is ours and writable.
        unsafe { std::ptr::write_bytes(base.cast::<u8>(), 0xAA, page) };
        let s = st(NtprofileQueryStatistics(handle, at as *mut ProfileStats));
        assert_eq!(
            s,
            NtStatus::ACCESS_VIOLATION,
            "record {offset} bytes before the guard page"
        );
        // SAFETY: as above.
        let first = unsafe { std::slice::from_raw_parts(base.cast::<u8>(), page) };
        assert!(
            first.iter().all(|&b| b == 0xAA),
            "a failed query wrote into the record's first {offset} bytes"
        );
    }
    assert_eq!(st(NtClose(handle)), NtStatus::SUCCESS);
    // SAFETY: unmapping our own mapping, no reference to it is left.
    unsafe { libc::munmap(base, 2 * page) };
}

/// The same class: the capability check read `/proc/self/status`, and without a free descriptor a privileged
/// caller was told `STATUS_PRIVILEGE_NOT_HELD` for a global profile. Capabilities are now asked of the kernel
/// (`capget`), which needs no descriptor. (Runs where the caller holds CAP_SYS_ADMIN or CAP_PERFMON.)
#[test]
fn exhausted_descriptors_never_deny_a_privilege_held() {
    isolated(
        "regressions::exhausted_descriptors_never_deny_a_privilege_held",
        || {
            if !ntprofile::target::has_system_profile_privilege() {
                crate::common::skip(
                    "needs the system-profile privilege, to show it is not lost (run as root)",
                );
                return;
            }
            set_soft_nofile(64);
            let mut buffer = vec![0u32; 256];
            let mut handle: *mut c_void = std::ptr::null_mut();
            // Probe and cache the source first; the buffer check needs /proc/self/maps, so only the privilege
            // check is left to the shortage: it must not answer STATUS_PRIVILEGE_NOT_HELD.
            assert_eq!(
                create(&mut handle, CURRENT_PROCESS, &mut buffer),
                NtStatus::SUCCESS
            );
            assert_eq!(st(NtClose(handle)), NtStatus::SUCCESS);
            let held = exhaust_descriptors();
            let privileged = ntprofile::target::has_system_profile_privilege();
            let global = create(&mut handle, std::ptr::null_mut(), &mut buffer);
            drop(held);
            assert!(
                privileged,
                "the privilege vanished without a free descriptor"
            );
            assert_ne!(global, NtStatus::PRIVILEGE_NOT_HELD, "global create");
        },
    );
}

/// The same class for the Rust API: a `Process` (and a profile of it) inherited by a `fork()`ed child names
/// nothing there — building a profile of it, or starting one built in the parent, is `STATUS_INVALID_HANDLE`;
/// the child never profiles its parent.
#[test]
fn fork_child_cannot_use_an_inherited_rust_process() {
    isolated(
        "regressions::fork_child_cannot_use_an_inherited_rust_process",
        || {
            let process = ntprofile::Process::open(std::process::id()).expect("open this process");
            let (base, size) = range();
            let built = ntprofile::Profile::builder()
                .process(&process)
                .range(base, size)
                .build()
                .expect("a profile of this process");
            // SAFETY: the child only calls the library and _exit.
            match unsafe { nix::unistd::fork() }.expect("fork") {
                nix::unistd::ForkResult::Child => {
                    let build = ntprofile::Profile::builder()
                        .process(&process)
                        .range(base, size)
                        .build()
                        .map(|_| ())
                        .map_err(|e| e.status());
                    let start = built.start().map_err(|e| e.status());
                    let ok = build == Err(NtStatus::INVALID_HANDLE)
                        && start == Err(NtStatus::INVALID_HANDLE);
                    if !ok {
                        eprintln!(
                            "fork child: build {build:?}, start {start:?} (both must be STATUS_INVALID_HANDLE)"
                        );
                    }
                    // SAFETY: _exit ends the child at once.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) };
                }
                nix::unistd::ForkResult::Parent { child } => {
                    let status = nix::sys::wait::waitpid(child, None).expect("waitpid");
                    assert_eq!(
                        status,
                        nix::sys::wait::WaitStatus::Exited(child, 0),
                        "the child could use the inherited process"
                    );
                    built.start().expect("the parent's profile starts");
                    built.stop().expect("and stops");
                }
            }
        },
    );
}
