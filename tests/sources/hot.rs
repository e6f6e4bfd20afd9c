//! Functions with exact address ranges: each sampled function alone in a linker section of its own.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// Functions with exact address ranges.
// ---------------------------------------------------------------------------------------------------------

/// `[start, end)` of a linker section, from the `__start_<name>`/`__stop_<name>` symbols the linker defines
/// around every section whose name is a C identifier. A function put alone in such a section
/// (`#[unsafe(link_section = "<name>")]`) gets an exact range: its code and alignment padding, nothing else,
/// in debug and release builds alike (a guessed size such as "256 bytes from the address" can reach into the
/// next function).
macro_rules! section {
    ($sec:literal) => {{
        // tests/common: the section's extent from the linker's __start_/__stop_ symbols.
        section_range!(bounds, $sec);
        let (start, size) = bounds();
        (start, start + size)
    }};
}

/// Check that section `bounds` holds function `f` and nothing large, and return it as (base, size).
pub(crate) fn exact_range(name: &str, f: usize, bounds: (usize, usize)) -> (usize, usize) {
    let (start, end) = bounds;
    assert!(
        start <= f && f < end,
        "{name}: {f:#x} outside its section [{start:#x}, {end:#x})"
    );
    assert!(
        end - start < 4096,
        "{name}: a section of {} bytes holds more than the function",
        end - start
    );
    (start, end - start)
}

/// A xorshift chain of `n` steps: plain shifts and xors, no calls, so a thread spinning in a function made of it
/// is sampled inside that function.
macro_rules! xorshift_loop {
    ($x:ident, $n:expr, $salt:expr) => {{
        let mut i = 0u64;
        while i < $n {
            $x ^= $x << 13;
            $x ^= $x >> 7;
            $x ^= $x << 17;
            $x ^= $salt;
            i += 1;
        }
    }};
}

/// Spun by the thread created before the start in the interval-switch test.
#[inline(never)]
#[unsafe(link_section = "ntp_src_spin_pre")]
pub(crate) fn spin_pre(mut x: u64, n: u64) -> u64 {
    xorshift_loop!(x, n, 0x11);
    x
}

/// Spun by the thread created after the start in the interval-switch test.
#[inline(never)]
#[unsafe(link_section = "ntp_src_spin_post")]
pub(crate) fn spin_post(mut x: u64, n: u64) -> u64 {
    xorshift_loop!(x, n, 0x12);
    x
}

/// Spun under hardware sources when the machine has a PMU.
#[inline(never)]
#[unsafe(link_section = "ntp_src_spin_hw")]
pub(crate) fn spin_hw(mut x: u64, n: u64) -> u64 {
    xorshift_loop!(x, n, 0x13);
    x
}

/// Iterations between two clock reads in the periodic workload: a couple of microseconds of arithmetic, so
/// that almost every sample lands in the arithmetic and not in the clock code (vDSO, outside every range).
pub(crate) const PHASE_CHUNK: u64 = 2_000;

/// Phase A of the periodic workload: spin until `until`, reading the clock only between chunks.
#[inline(never)]
#[unsafe(link_section = "ntp_src_phase_a")]
pub(crate) fn phase_a(mut x: u64, until: Instant) -> u64 {
    loop {
        xorshift_loop!(x, PHASE_CHUNK, 0x21);
        if Instant::now() >= until {
            return x;
        }
    }
}

/// Phase B of the periodic workload (the same as A with another salt, in another section).
#[inline(never)]
#[unsafe(link_section = "ntp_src_phase_b")]
pub(crate) fn phase_b(mut x: u64, until: Instant) -> u64 {
    loop {
        xorshift_loop!(x, PHASE_CHUNK, 0x22);
        if Instant::now() >= until {
            return x;
        }
    }
}

/// Write one byte to each of `pages` pages from `base`, `page` bytes apart: one page fault per page of a fresh
/// anonymous mapping, each taken at the store inside this function.
#[inline(never)]
#[unsafe(link_section = "ntp_src_touch")]
pub(crate) fn touch_pages(base: *mut u8, pages: usize, page: usize) {
    let mut i = 0;
    while i < pages {
        // SAFETY: the caller maps `pages * page` writable bytes at `base`.
        unsafe { base.add(i * page).write_volatile(1) };
        i += 1;
    }
}

pub(crate) fn spin_pre_range() -> (usize, usize) {
    let f = spin_pre as fn(u64, u64) -> u64 as usize;
    exact_range("spin_pre", f, section!("ntp_src_spin_pre"))
}

pub(crate) fn spin_post_range() -> (usize, usize) {
    let f = spin_post as fn(u64, u64) -> u64 as usize;
    exact_range("spin_post", f, section!("ntp_src_spin_post"))
}

pub(crate) fn spin_hw_range() -> (usize, usize) {
    let f = spin_hw as fn(u64, u64) -> u64 as usize;
    exact_range("spin_hw", f, section!("ntp_src_spin_hw"))
}

pub(crate) fn phase_a_range() -> (usize, usize) {
    let f = phase_a as fn(u64, Instant) -> u64 as usize;
    exact_range("phase_a", f, section!("ntp_src_phase_a"))
}

pub(crate) fn phase_b_range() -> (usize, usize) {
    let f = phase_b as fn(u64, Instant) -> u64 as usize;
    exact_range("phase_b", f, section!("ntp_src_phase_b"))
}

pub(crate) fn touch_range() -> (usize, usize) {
    let f = touch_pages as fn(*mut u8, usize, usize) as usize;
    exact_range("touch_pages", f, section!("ntp_src_touch"))
}

/// A stopped profile of `source` over `range`, 16-byte buckets, every CPU.
pub(crate) fn profile_over(
    range: (usize, usize),
    source: ProfileSource,
) -> Result<Profile, NtStatus> {
    Profile::builder()
        .range(range.0, range.1)
        .bucket_size(4)
        .source(source)
        .all_cpus()
        .build()
        .map_err(|e| e.status())
}
