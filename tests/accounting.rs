//! Exact accounting on the count path: with a page-fault source, the kernel's own count of the thread's faults
//! (`getrusage(RUSAGE_THREAD)`) is an independent figure for "every sample the kernel produced", so the
//! profile's numbers can be checked for equality, not within a tolerance (the timer has no such independent
//! count: see tests/sampling.rs).

mod common;

use ntprofile::{Profile, ProfileSource};

const PAGE: usize = 4096;

/// Touch `pages` fresh anonymous pages (one write each: one minor fault each), in its own section so its
/// range is exact.
#[inline(never)]
#[unsafe(link_section = "ntp_acct_touch")]
fn touch(base: *mut u8, pages: usize) {
    // The store itself must be an instruction of this function in every build: in a debug build `ptr::add` and
    // `write_volatile` are calls, and the fault would be taken in them, outside the section. So the address is
    // plain integer arithmetic and the store a plain store (the mapping is handed to munmap afterwards, so the
    // stores cannot be optimised away).
    let mut i = 0;
    while i < pages {
        let page = (base as usize + i * PAGE) as *mut u8;
        // SAFETY: `base` is a private anonymous mapping of `pages` pages (see `fresh`).
        unsafe { *page = 1 };
        i += 1;
    }
}

section_range!(touch_range, "ntp_acct_touch");

fn fresh(pages: usize) -> *mut u8 {
    // SAFETY: a new private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

fn unmap(p: *mut u8, pages: usize) {
    // SAFETY: `p` is a mapping of exactly `pages` pages from `fresh`, no longer used.
    unsafe { libc::munmap(p.cast(), pages * PAGE) };
}

/// Minor + major faults of the calling thread so far.
fn thread_faults() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is valid on Linux.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    (ru.ru_minflt + ru.ru_majflt) as u64
}

/// Run `touch` over `pages` fresh pages under a page-fault profile of interval `n`; returns (faults the
/// kernel counted for the thread during the touch, samples counted in touch's range, stats).
fn measure(n: u32, pages: usize) -> (u64, u64, ntprofile::ProfileStats) {
    let (base, size) = touch_range();
    // Warm the code and the stack so the only faults inside `touch` are its page writes.
    let warm = fresh(1);
    touch(warm, 1);
    unmap(warm, 1);

    assert_eq!(ntprofile::set_interval(ProfileSource::PageFaults, n), n);
    let p = Profile::builder()
        .range(base, size)
        .bucket_size(2)
        .source(ProfileSource::PageFaults)
        .build()
        .expect("create");
    let region = fresh(pages);
    p.start().expect("start");
    let before = thread_faults();
    touch(region, pages);
    let faults = thread_faults() - before;
    p.stop().expect("stop");
    unmap(region, pages);
    let counted: u64 = p.counts().iter().map(|c| u64::from(*c)).sum();
    (faults, counted, p.stats())
}

#[test]
fn every_fault_is_one_sample_at_interval_1() {
    let _g = common::serial();
    let pages = 5000;
    let (faults, counted, stats) = measure(1, pages);
    println!("interval 1: {faults} faults by the kernel's count, {counted} counted, {stats:?}");
    assert_eq!(faults, pages as u64, "one fault per fresh page");
    assert_eq!(
        counted, faults,
        "every fault the kernel counted is a sample in the range"
    );
    assert_eq!(
        stats.counted, counted,
        "the statistics agree with the buckets"
    );
    assert_eq!(stats.lost, 0);
    ntprofile::set_interval(ProfileSource::PageFaults, 1);
}

#[test]
fn one_sample_every_n_faults() {
    let _g = common::serial();
    for n in [7u32, 64] {
        let (faults, counted, stats) = measure(n, 4480);
        println!(
            "interval {n}: {faults} faults, {counted} counted (expected {}), {stats:?}",
            faults / n as u64
        );
        // The first period starts at the start; samples fire on every n-th event after it. Faults outside
        // the touch (start/stop themselves) can shift the phase by less than one period.
        let expected = faults / u64::from(n);
        assert!(
            counted.abs_diff(expected) <= 1,
            "interval {n}: {counted} vs {expected}"
        );
        assert_eq!(stats.lost, 0);
    }
    ntprofile::set_interval(ProfileSource::PageFaults, 1);
}
