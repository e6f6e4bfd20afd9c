//! Hot functions of this test process, each alone in its own section.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// Hot functions of this test process, each alone in its own section.
// ---------------------------------------------------------------------------------------------------------

/// A xorshift chain: no call in the loop, so a thread spinning in it has every sample inside the section.
#[inline(never)]
#[unsafe(link_section = "ntp_proc_cpu")]
pub(crate) fn hot_cpu(mut x: u64, n: u64) -> u64 {
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
pub(crate) fn hot_fork(mut x: u64, n: u64) -> u64 {
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
pub(crate) fn section(start: *const u8, stop: *const u8, f: fn(u64, u64) -> u64) -> (u64, u64) {
    let (start, stop, entry) = (start as u64, stop as u64, f as *const () as u64);
    assert!(
        start <= entry && entry < stop && stop - start < 4096,
        "entry {entry:#x} and section [{start:#x}, {stop:#x})"
    );
    (start, stop)
}

pub(crate) fn cpu_range() -> (u64, u64) {
    // Only the addresses of the linker-defined symbols are taken, never their contents.
    section(
        &raw const __start_ntp_proc_cpu,
        &raw const __stop_ntp_proc_cpu,
        hot_cpu,
    )
}

pub(crate) fn fork_range() -> (u64, u64) {
    section(
        &raw const __start_ntp_proc_fork,
        &raw const __stop_ntp_proc_fork,
        hot_fork,
    )
}

/// Spin in `f` for `d` of wall-clock time.
pub(crate) fn spin_wall(f: fn(u64, u64) -> u64, d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 0x1234_5678u64;
    while Instant::now() < end {
        x = f(x, 20_000);
    }
    std::hint::black_box(x)
}

/// The calling thread's CPU time.
pub(crate) fn thread_cpu() -> Duration {
    let mut t = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a pointer to our own local.
    let rc = unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
