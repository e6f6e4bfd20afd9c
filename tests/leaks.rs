//! Create, start, stop and close leave nothing behind: after 1000 cycles through the C exports and 1000 through
//! the Rust API (with every way of ending a profile: stop then close, close while started, drop while started)
//! the process has the same descriptors, threads and memory mappings as before.
//!
//! One test function only: the snapshots are of the whole process, so nothing else may run beside it.

mod common;
use common::snapshot;

use std::ffi::c_void;
use std::time::{Duration, Instant};

use ntprofile::ffi::exports::{NtClose, NtCreateProfile, NtStartProfile, NtStopProfile};
use ntprofile::{Profile, ProfileSource};

const CYCLES: usize = 1000;

/// `NtCurrentProcess()`.
const CURRENT_PROCESS: *mut c_void = usize::MAX as *mut c_void;

// The hot function, alone in its own section: the profiled range is the section, exactly.
hot_in_section!(hot, range, "ntp_leak_hot", 0x61);

/// Run the hot function for about `d` so that samples flow through the rings while a profile is started.
fn work(d: Duration) {
    let deadline = Instant::now() + d;
    let mut x = 1u64;
    while Instant::now() < deadline {
        x = hot(x, 10_000);
    }
    std::hint::black_box(x);
}

/// One cycle through the C exports over `buffer`. `variant` picks how the profile ends.
fn ffi_cycle(buffer: &mut [u32], variant: usize) {
    let (base, size) = range();
    let mut handle: *mut c_void = std::ptr::null_mut();
    let status = NtCreateProfile(
        &mut handle,
        CURRENT_PROCESS,
        base as *mut c_void,
        size,
        2,
        buffer.as_mut_ptr(),
        (buffer.len() * 4) as u32,
        ProfileSource::Time.to_raw(),
        usize::MAX,
    );
    assert_eq!(status, 0, "NtCreateProfile: {status:#x}");
    assert_eq!(NtStartProfile(handle), 0, "NtStartProfile");
    if variant % 8 == 0 {
        work(Duration::from_millis(1));
    }
    if variant % 2 == 0 {
        assert_eq!(NtStopProfile(handle), 0, "NtStopProfile");
    }
    // Odd variants close a started profile: NtClose stops it first.
    assert_eq!(NtClose(handle), 0, "NtClose");
    assert_ne!(NtClose(handle), 0, "a closed handle must be invalid");
}

/// One cycle through the Rust API. `variant` picks how the profile ends.
fn rust_cycle(variant: usize) {
    let (base, size) = range();
    let p = Profile::builder()
        .range(base, size)
        .bucket_size(2)
        .source(ProfileSource::Time)
        .build()
        .unwrap();
    p.start().unwrap();
    if variant % 8 == 0 {
        work(Duration::from_millis(1));
    }
    if variant % 2 == 0 {
        p.stop().unwrap();
    }
    // Odd variants drop a started profile: the drop stops it.
    drop(p);
}

#[test]
fn create_start_stop_close_leaves_nothing_behind() {
    ntprofile::set_interval(ProfileSource::Time, 1000);
    let (_, size) = range();
    let mut buffer = vec![0u32; size.div_ceil(4)];

    // Right after the very first cycle (lazy initialisation included: the source probe, the first consumer
    // thread) descriptors and threads are back to what they were.
    let before_first = snapshot();
    ffi_cycle(&mut buffer, 0);
    let after_first = snapshot();
    assert_eq!(
        after_first.fds, before_first.fds,
        "descriptors left by the first C-API cycle"
    );
    assert_eq!(
        after_first.threads, before_first.threads,
        "threads left by the first C-API cycle"
    );
    rust_cycle(0);
    let after_first_rust = snapshot();
    assert_eq!(
        after_first_rust.fds, before_first.fds,
        "descriptors left by the first Rust cycle"
    );
    assert_eq!(
        after_first_rust.threads, before_first.threads,
        "threads left by the first Rust cycle"
    );

    // The baseline is taken after that warm-up, not before it: glibc keeps the stack of a joined thread (the
    // library's consumer thread, started and joined by each cycle) in its stack cache, and the consumer's first
    // allocation creates a malloc arena that outlives the thread; both stay mapped and are reused by the next
    // cycles. Only growth beyond the warm-up state is a leak.
    let baseline = snapshot();
    let t0 = Instant::now();
    for i in 0..CYCLES {
        ffi_cycle(&mut buffer, i);
    }
    let ffi_time = t0.elapsed();
    let after_ffi = snapshot();
    let t1 = Instant::now();
    for i in 0..CYCLES {
        rust_cycle(i);
    }
    let rust_time = t1.elapsed();
    let after_rust = snapshot();
    eprintln!(
        "{CYCLES} C-API cycles in {ffi_time:?}, {CYCLES} Rust cycles in {rust_time:?}; baseline: {} fds, {} threads, \
         {} maps (before the first cycle: {} maps); {} samples counted into the C buffer",
        baseline.fds.len(),
        baseline.threads,
        baseline.maps,
        before_first.maps,
        buffer.iter().map(|&c| u64::from(c)).sum::<u64>()
    );
    assert_eq!(after_ffi, baseline, "the C-API cycles leaked");
    assert_eq!(after_rust, baseline, "the Rust-API cycles leaked");
    assert!(
        buffer.iter().any(|&c| c > 0),
        "no sample was ever counted: the cycles did not really sample"
    );
}
