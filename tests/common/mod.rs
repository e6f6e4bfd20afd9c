//! Helpers shared by the integration tests (each test file is a crate of its own and says `mod common;`; the
//! tests in folders say `#[path = "../common/mod.rs"] mod common;`).
//! The helpers for building C programs are in `cbuild.rs`, included only by the tests that need them.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Held by every test of a test binary that samples this process or changes a process-wide setting (a source's
/// interval or jitter), so that such tests never overlap. One per test binary (each is a process of its own).
static SERIAL: Mutex<()> = Mutex::new(());

/// Take the test binary's serial lock (a test that panicked while holding it does not poison the others).
#[allow(dead_code)] // not every test crate that includes this module samples
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `NtCurrentProcess()`, the pseudo-handle `(HANDLE)-1`.
#[allow(dead_code)] // only the tests that call the C exports need it
pub fn current_process() -> *mut std::ffi::c_void {
    std::ptr::without_provenance_mut(usize::MAX)
}

/// `section_range!(range, "sec")` defines `fn range() -> (base, size)`: the exact extent of linker section
/// `sec`, from the `__start_sec` / `__stop_sec` symbols the linker provides for a section whose name is a C
/// identifier. Only the symbols' addresses are taken.
#[macro_export]
macro_rules! section_range {
    ($range:ident, $sec:literal) => {
        fn $range() -> (usize, usize) {
            unsafe extern "C" {
                #[link_name = concat!("__start_", $sec)]
                static START: u8;
                #[link_name = concat!("__stop_", $sec)]
                static STOP: u8;
            }
            let (start, end) = (&raw const START as usize, &raw const STOP as usize);
            (start, end - start)
        }
    };
}

/// `hot_in_section!(hot, range, "sec", salt)` defines `fn hot(x: u64, n: u64) -> u64`, `n` rounds of a
/// xorshift chain with no call in its loop (so every sample of a thread spinning in it lands inside it, in
/// debug and release builds alike), alone in linker section `sec`, and `fn range()` as `section_range!`.
/// Distinct salts keep the linker from folding two such functions into one.
#[macro_export]
macro_rules! hot_in_section {
    ($hot:ident, $range:ident, $sec:literal, $salt:expr) => {
        #[inline(never)]
        #[unsafe(link_section = $sec)]
        fn $hot(mut x: u64, n: u64) -> u64 {
            let mut i = 0u64;
            while i < n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x ^= $salt;
                i += 1;
            }
            x
        }
        $crate::section_range!($range, $sec);
    };
}

/// Nanoseconds on `clock` (a thread's CPU clock, `CLOCK_THREAD_CPUTIME_ID`, ...).
#[allow(dead_code)] // not every test crate that includes this module reads a clock
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
