//! Profile sources end to end (spec `nt-profile-api.md` sections 6 and 7, `linux-mapping.md` section 2):
//!
//! 1. hardware sources, honestly: each test decides at run time whether the machine has a PMU and checks the
//!    answers of that branch (no PMU: `STATUS_NOT_SUPPORTED` at create, interval 0, ignored sets; PMU: the hot
//!    function gets the samples, default 65536, minimum 4096);
//! 2. the count-interval path without a PMU: page faults and minor faults, one sample every N events;
//! 3. `NtSetIntervalProfile` on a running ProfileTime profile takes effect within 50 ms, for threads created
//!    before and after the start, and `NtQueryIntervalProfile` reports the clamped values;
//! 4. aliasing of a fixed sampling period with a workload of the same period, and the jitter that cures it
//!    (the workload runs pinned and, where permitted, under SCHED_FIFO; rates are per second of the thread's
//!    CPU time, which is what the cpu-clock timer counts);
//! 5. the source listing (`list_sources`, `NtprofileQuerySources`) agrees with what creates and queries do,
//!    registered raw events included.
//!
//! Every test here samples this process or changes a process-wide per-source setting (interval, jitter), and
//! every profile of the process sees every thread of it: all tests hold [`SERIAL`] and restore what they change.
//! Each sampled function lives alone in a linker section of its own, so its address range is exact and no two
//! ranges overlap (see [`section!`]). Run with `--nocapture` to see the figures each test measured.

mod common;

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtQueryIntervalProfile, NtSetIntervalProfile, NtprofileQuerySources,
    NtprofileRegisterSource, NtprofileSetSourceJitter,
};
use ntprofile::source::{
    COUNT_MAX_INTERVAL, PMC_DEFAULT_INTERVAL, PMC_MIN_INTERVAL, REGISTERED_BASE,
    TIME_DEFAULT_INTERVAL, TIME_KERNEL_FLOOR, TIME_MAX_INTERVAL,
};
use ntprofile::{
    IntervalUnit, NtStatus, Profile, ProfileSource, ProfileStats, Support, list_sources,
    query_interval, set_interval, set_jitter,
};

// ---------------------------------------------------------------------------------------------------------
// Serialization and restoring process-wide settings.
// ---------------------------------------------------------------------------------------------------------

/// Held by every test of this file (see the module docs).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Restores a source's interval when dropped (also on a panic); for ProfileTime also turns its jitter off.
struct Restore {
    source: ProfileSource,
    interval: u32,
}

impl Restore {
    fn to(source: ProfileSource, interval: u32) -> Restore {
        Restore { source, interval }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        set_interval(self.source, self.interval);
        if self.source == ProfileSource::Time {
            let _ = set_jitter(ProfileSource::Time, 0);
        }
    }
}

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
fn exact_range(name: &str, f: usize, bounds: (usize, usize)) -> (usize, usize) {
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
fn spin_pre(mut x: u64, n: u64) -> u64 {
    xorshift_loop!(x, n, 0x11);
    x
}

/// Spun by the thread created after the start in the interval-switch test.
#[inline(never)]
#[unsafe(link_section = "ntp_src_spin_post")]
fn spin_post(mut x: u64, n: u64) -> u64 {
    xorshift_loop!(x, n, 0x12);
    x
}

/// Spun under hardware sources when the machine has a PMU.
#[inline(never)]
#[unsafe(link_section = "ntp_src_spin_hw")]
fn spin_hw(mut x: u64, n: u64) -> u64 {
    xorshift_loop!(x, n, 0x13);
    x
}

/// Iterations between two clock reads in the periodic workload: a couple of microseconds of arithmetic, so
/// that almost every sample lands in the arithmetic and not in the clock code (vDSO, outside every range).
const PHASE_CHUNK: u64 = 2_000;

/// Phase A of the periodic workload: spin until `until`, reading the clock only between chunks.
#[inline(never)]
#[unsafe(link_section = "ntp_src_phase_a")]
fn phase_a(mut x: u64, until: Instant) -> u64 {
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
fn phase_b(mut x: u64, until: Instant) -> u64 {
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
fn touch_pages(base: *mut u8, pages: usize, page: usize) {
    let mut i = 0;
    while i < pages {
        // SAFETY: the caller maps `pages * page` writable bytes at `base`.
        unsafe { base.add(i * page).write_volatile(1) };
        i += 1;
    }
}

fn spin_pre_range() -> (usize, usize) {
    let f = spin_pre as fn(u64, u64) -> u64 as usize;
    exact_range("spin_pre", f, section!("ntp_src_spin_pre"))
}

fn spin_post_range() -> (usize, usize) {
    let f = spin_post as fn(u64, u64) -> u64 as usize;
    exact_range("spin_post", f, section!("ntp_src_spin_post"))
}

fn spin_hw_range() -> (usize, usize) {
    let f = spin_hw as fn(u64, u64) -> u64 as usize;
    exact_range("spin_hw", f, section!("ntp_src_spin_hw"))
}

fn phase_a_range() -> (usize, usize) {
    let f = phase_a as fn(u64, Instant) -> u64 as usize;
    exact_range("phase_a", f, section!("ntp_src_phase_a"))
}

fn phase_b_range() -> (usize, usize) {
    let f = phase_b as fn(u64, Instant) -> u64 as usize;
    exact_range("phase_b", f, section!("ntp_src_phase_b"))
}

fn touch_range() -> (usize, usize) {
    let f = touch_pages as fn(*mut u8, usize, usize) as usize;
    exact_range("touch_pages", f, section!("ntp_src_touch"))
}

/// A stopped profile of `source` over `range`, 16-byte buckets, every CPU.
fn profile_over(range: (usize, usize), source: ProfileSource) -> Result<Profile, NtStatus> {
    Profile::builder()
        .range(range.0, range.1)
        .bucket_size(4)
        .source(source)
        .all_cpus()
        .build()
        .map_err(|e| e.status())
}

// ---------------------------------------------------------------------------------------------------------
// The C exports, called from Rust.
// ---------------------------------------------------------------------------------------------------------

/// `NtCurrentProcess()`.
fn current_process() -> *mut c_void {
    std::ptr::without_provenance_mut(usize::MAX)
}

/// `NtCreateProfile` over `range` with 16-byte buckets and every processor of the group; closes the handle of a
/// successful create. Returns the status.
fn c_create(range: (usize, usize), source: u32) -> NtStatus {
    let mut buffer = vec![0u32; range.1.div_ceil(16).max(1)];
    let mut handle: *mut c_void = std::ptr::null_mut();
    let status = NtStatus(NtCreateProfile(
        &mut handle,
        current_process(),
        std::ptr::without_provenance_mut(range.0),
        range.1,
        4,
        buffer.as_mut_ptr(),
        (buffer.len() * 4) as u32,
        source,
        usize::MAX,
    ));
    if status == NtStatus::SUCCESS {
        assert_eq!(
            NtStatus(NtClose(handle)),
            NtStatus::SUCCESS,
            "close a new profile"
        );
    }
    status
}

/// `NtQueryIntervalProfile(source, &v)`: (status, v), with `v` preset to a marker the call must overwrite.
fn c_query(source: u32) -> (NtStatus, u32) {
    let mut value = 0xDEAD_BEEFu32;
    let status = NtStatus(NtQueryIntervalProfile(source, &mut value));
    (status, value)
}

/// `NtSetIntervalProfile(interval, source)`.
fn c_set(interval: u32, source: u32) -> NtStatus {
    NtStatus(NtSetIntervalProfile(interval, source))
}

// ---------------------------------------------------------------------------------------------------------
// 1. Hardware sources, honestly.
// ---------------------------------------------------------------------------------------------------------

/// The hardware-backed built-in sources: a hardware or hardware-cache perf event behind them.
fn hardware_sources() -> Vec<ProfileSource> {
    ProfileSource::ALL
        .iter()
        .copied()
        .filter(|s| s.is_hardware() && s.perf_event().is_some())
        .collect()
}

/// The errno values that mean "this event does not exist / cannot sample here".
fn is_absent_errno(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::ENOENT | Errno::EOPNOTSUPP | Errno::ENODEV | Errno::ENOSYS
    )
}

/// Branch A for one unsupported source: every Rust and C answer says "not supported", and setting its interval
/// changes nothing anywhere.
fn check_unsupported(s: ProfileSource) {
    let raw = s.to_raw();
    let support = s.support();
    assert!(!support.is_supported(), "{s:?}");
    assert!(
        !support.reason().is_empty(),
        "{s:?}: an unsupported source needs a reason"
    );
    let range = touch_range();
    assert_eq!(
        profile_over(range, s).err(),
        Some(NtStatus::NOT_SUPPORTED),
        "{s:?}: build"
    );
    assert_eq!(
        c_create(range, raw),
        NtStatus::NOT_SUPPORTED,
        "{s:?}: NtCreateProfile"
    );
    assert_eq!(query_interval(s), 0, "{s:?}: query_interval");
    assert_eq!(
        c_query(raw),
        (NtStatus::SUCCESS, 0),
        "{s:?}: NtQueryIntervalProfile writes 0 and succeeds"
    );
    let before: Vec<(ProfileSource, u32)> = list_sources()
        .iter()
        .map(|i| (i.source, i.interval))
        .collect();
    assert_eq!(
        set_interval(s, 20_000),
        0,
        "{s:?}: set_interval on an unsupported source"
    );
    assert_eq!(
        c_set(8_192, raw),
        NtStatus::SUCCESS,
        "{s:?}: NtSetIntervalProfile always succeeds"
    );
    let after: Vec<(ProfileSource, u32)> = list_sources()
        .iter()
        .map(|i| (i.source, i.interval))
        .collect();
    assert_eq!(
        before, after,
        "{s:?}: setting an unsupported source's interval changed the listing"
    );
    assert_eq!(query_interval(s), 0, "{s:?}: query after the set");
    assert_eq!(
        c_query(raw),
        (NtStatus::SUCCESS, 0),
        "{s:?}: C query after the set"
    );
    let info = list_sources().into_iter().find(|i| i.source == s).unwrap();
    assert_eq!(
        (info.support, info.interval),
        (support, 0),
        "{s:?}: listing"
    );
}

/// Branch B for one supported hardware source: create works, default 65536, minimum 4096, maximum 2^31.
fn check_supported_hardware(s: ProfileSource) {
    let raw = s.to_raw();
    let _restore = Restore::to(s, PMC_DEFAULT_INTERVAL);
    assert!(
        profile_over(touch_range(), s).is_ok(),
        "{s:?}: build of a supported source"
    );
    assert_eq!(
        c_create(touch_range(), raw),
        NtStatus::SUCCESS,
        "{s:?}: NtCreateProfile"
    );
    assert_eq!(
        query_interval(s),
        PMC_DEFAULT_INTERVAL,
        "{s:?}: default interval"
    );
    assert_eq!(
        set_interval(s, 1),
        PMC_MIN_INTERVAL,
        "{s:?}: below the minimum"
    );
    assert_eq!(c_query(raw), (NtStatus::SUCCESS, PMC_MIN_INTERVAL), "{s:?}");
    assert_eq!(
        set_interval(s, u32::MAX),
        COUNT_MAX_INTERVAL,
        "{s:?}: above the maximum"
    );
    assert_eq!(set_interval(s, 100_000), 100_000, "{s:?}: ordinary");
    assert_eq!(
        c_set(PMC_DEFAULT_INTERVAL, raw),
        NtStatus::SUCCESS,
        "{s:?}: restore"
    );
    assert_eq!(query_interval(s), PMC_DEFAULT_INTERVAL, "{s:?}: restored");
}

#[test]
fn hardware_sources_answer_honestly() {
    let _g = serial();
    let hw = hardware_sources();
    // The list the spec names: every generic hardware event and the Intel HAL values 0x19-0x1F.
    for raw in [
        0x02u32, 0x03, 0x05, 0x06, 0x08, 0x09, 0x0A, 0x0B, 0x13, 0x14, 0x15,
    ]
    .into_iter()
    .chain(0x19..=0x1F)
    {
        let s = ProfileSource::from_raw(raw).expect("a built-in source");
        assert!(hw.contains(&s), "{s:?} ({raw:#x}) must be hardware-backed");
    }
    for s in hw {
        match s.support() {
            Support::Supported => {
                println!("{s:?}: branch B (the PMU has this event)");
                check_supported_hardware(s);
            }
            Support::OpenFailed(errno) => {
                println!(
                    "{s:?}: branch A (no PMU event: errno {}, {})",
                    errno as i32,
                    s.support().reason()
                );
                assert!(
                    is_absent_errno(errno),
                    "{s:?}: errno {errno} does not mean \"no such event\""
                );
                check_unsupported(s);
            }
            Support::NoPerfEvent => panic!("{s:?} has a perf event but reports NoPerfEvent"),
        }
    }
}

#[test]
fn sources_without_perf_event_are_not_supported() {
    let _g = serial();
    let none: Vec<ProfileSource> = ProfileSource::ALL
        .iter()
        .copied()
        .filter(|s| s.perf_event().is_none())
        .collect();
    for raw in [
        0x04u32, 0x07, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x16, 0x17,
    ] {
        let s = ProfileSource::from_raw(raw).expect("a built-in source");
        assert!(
            none.contains(&s),
            "{s:?} ({raw:#x}) has no generic perf event"
        );
    }
    for s in none {
        assert_eq!(s.support(), Support::NoPerfEvent, "{s:?}");
        println!("{s:?}: no perf event ({})", s.support().reason());
        check_unsupported(s);
    }
}

/// Spin in `spin_hw` on this thread for `d`.
fn spin_hw_for(d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 1u64;
    while Instant::now() < end {
        x = spin_hw(x, 100_000);
    }
    black_box(x)
}

#[test]
fn hardware_sampling_hits_the_hot_function() {
    let _g = serial();
    for s in [ProfileSource::TotalCycles, ProfileSource::TotalIssues] {
        match s.support() {
            Support::Supported => {
                println!("{s:?}: branch B: sampling a hot loop");
                let _restore = Restore::to(s, PMC_DEFAULT_INTERVAL);
                assert_eq!(query_interval(s), PMC_DEFAULT_INTERVAL, "{s:?}: default");
                assert_eq!(set_interval(s, 1), PMC_MIN_INTERVAL, "{s:?}: minimum");
                assert_eq!(set_interval(s, PMC_DEFAULT_INTERVAL), PMC_DEFAULT_INTERVAL);
                let p = profile_over(spin_hw_range(), s).expect("build");
                p.start().expect("start");
                spin_hw_for(Duration::from_millis(200));
                p.stop().expect("stop");
                let st = p.stats();
                let in_buckets: u64 = p.counts().iter().map(|&c| u64::from(c)).sum();
                println!("{s:?}: {st:?}");
                assert_eq!(in_buckets, st.counted, "{s:?}: counts and statistics");
                // 200 ms of a spinning core is hundreds of millions of cycles or instructions: thousands of
                // samples at 65536 events each. Nearly all of the thread's time is in spin_hw.
                assert!(st.counted >= 100, "{s:?}: too few samples: {st:?}");
                assert!(
                    st.counted > st.outside,
                    "{s:?}: most samples must land in the hot function: {st:?}"
                );
            }
            Support::OpenFailed(errno) => {
                println!(
                    "{s:?}: branch A: no PMU (errno {}: {}); nothing to sample",
                    errno as i32,
                    s.support().reason()
                );
                assert!(is_absent_errno(errno), "{s:?}: errno {errno}");
                check_unsupported(s);
            }
            Support::NoPerfEvent => panic!("{s:?} has a perf event"),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// 2. The count-interval path without a PMU: page faults.
// ---------------------------------------------------------------------------------------------------------

/// Pages touched per run: 32 MiB of 4 KiB pages, a few tens of milliseconds.
const FAULT_PAGES: usize = 8192;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).expect("page size")
}

/// Pins the calling thread to the CPU it runs on and restores its affinity when dropped. A count-based source's
/// period runs per (thread, CPU) event: a thread that migrates would split its events between two counters and
/// leave a partial period behind in each.
struct Pin {
    previous: nix::sched::CpuSet,
}

impl Pin {
    fn here() -> Pin {
        use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        use nix::unistd::Pid;
        let previous = sched_getaffinity(Pid::from_raw(0)).expect("sched_getaffinity");
        let mut one = CpuSet::new();
        one.set(sched_getcpu().expect("sched_getcpu"))
            .expect("cpu set");
        sched_setaffinity(Pid::from_raw(0), &one).expect("sched_setaffinity");
        Pin { previous }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &self.previous);
    }
}

/// Runs the calling thread under `SCHED_FIFO` when permitted (root or CAP_SYS_NICE), restoring its policy when
/// dropped. A thread of another process that preempts the periodic workload shifts the workload's phase
/// against the sampler (the cpu-clock timer pauses while the thread is off the CPU, the wall-clock deadlines do
/// not); a real-time thread pinned to its CPU is not preempted by ordinary tasks (only, a few times per
/// second at most, by the kernel's real-time throttling), so it shows what a fixed period does to a periodic
/// workload that has its CPU to itself.
struct Realtime {
    policy: libc::c_int,
    param: libc::sched_param,
}

impl Realtime {
    fn try_enter() -> Option<Realtime> {
        let mut policy = 0;
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: the calling thread; valid out-pointers.
        let rc =
            unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
        if rc != 0 {
            return None;
        }
        let fifo = libc::sched_param { sched_priority: 10 };
        // SAFETY: the calling thread; a valid parameter block.
        let rc =
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &fifo) };
        (rc == 0).then_some(Realtime { policy, param })
    }
}

impl Drop for Realtime {
    fn drop(&mut self) {
        // SAFETY: the calling thread (the guard never leaves it); the saved parameter block.
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), self.policy, &self.param) };
    }
}

/// One run of the page-fault workload under `source` with interval `n`: map a fresh anonymous region, start a
/// profile over `touch_pages`, touch every page, stop, unmap. Returns the profile's statistics.
fn fault_run(source: ProfileSource, n: u32, pages: usize) -> ProfileStats {
    assert_eq!(set_interval(source, n), n, "{source:?}: interval {n}");
    assert_eq!(query_interval(source), n, "{source:?}: query");
    let p = profile_over(touch_range(), source).expect("build a fault profile");
    let page = page_size();
    let len = pages * page;
    let _pin = Pin::here();
    // SAFETY: a fresh private anonymous mapping; unmapped below, nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    // Huge pages (PMD or multi-size) would fault once per folio, not once per page. (A kernel without
    // transparent huge pages refuses the advice with EINVAL, and has nothing to turn off.)
    // SAFETY: advice on the mapping made above.
    let rc = unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    assert!(
        rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL),
        "madvise(MADV_NOHUGEPAGE): {}",
        std::io::Error::last_os_error()
    );
    p.start().expect("start");
    touch_pages(base.cast::<u8>(), pages, page);
    p.stop().expect("stop");
    // SAFETY: the mapping made above, no longer used.
    let rc = unsafe { libc::munmap(base, len) };
    assert_eq!(rc, 0, "munmap");
    let st = p.stats();
    let in_buckets: u64 = p.counts().iter().map(|&c| u64::from(c)).sum();
    assert_eq!(in_buckets, st.counted, "counts and statistics agree");
    st
}

/// Check `counted` against `pages / n` within ±10 %; returns the ratio.
fn check_fault_ratio(what: &str, n: u32, pages: usize, st: &ProfileStats) -> f64 {
    let expected = pages as f64 / f64::from(n);
    let ratio = st.counted as f64 / expected;
    println!(
        "{what}: interval {n}: {} samples in touch_pages for {pages} faults (expected {expected:.0}, \
         ratio {ratio:.3}); outside {}, lost {}",
        st.counted, st.outside, st.lost
    );
    assert_eq!(st.lost, 0, "{what}: samples lost");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{what}: interval {n}: {} samples, expected {expected:.0} ± 10 %",
        st.counted
    );
    ratio
}

#[test]
fn page_faults_sample_every_nth_fault() {
    let _g = serial();
    let s = ProfileSource::PageFaults;
    assert!(
        s.support().is_supported(),
        "page-faults is a software event"
    );
    assert_eq!(s.interval_unit(), IntervalUnit::Events);
    let _restore = Restore::to(s, s.limits().default);
    for n in [1u32, 8, 64] {
        let st = fault_run(s, n, FAULT_PAGES);
        check_fault_ratio("PageFaults", n, FAULT_PAGES, &st);
    }
}

#[test]
fn minor_faults_sample_every_nth_fault() {
    let _g = serial();
    let s = ProfileSource::MinorFaults;
    assert!(
        s.support().is_supported(),
        "minor-faults is a software event"
    );
    let _restore = Restore::to(s, s.limits().default);
    let st = fault_run(s, 16, FAULT_PAGES);
    check_fault_ratio("MinorFaults", 16, FAULT_PAGES, &st);
}

// ---------------------------------------------------------------------------------------------------------
// 3. Interval changes on a running ProfileTime profile; clamping.
// ---------------------------------------------------------------------------------------------------------

/// `kernel.perf_event_max_sample_rate` now.
fn max_sample_rate() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .expect("read perf_event_max_sample_rate")
        .trim()
        .parse()
        .expect("parse perf_event_max_sample_rate")
}

/// ProfileTime's minimum for a given maximum sample rate: max(10 µs, 1 / rate), in 100 ns units.
fn time_min_for(rate: u64) -> u32 {
    let from_rate = 10_000_000u64.div_ceil(rate.max(1));
    u32::try_from(from_rate.max(u64::from(TIME_KERNEL_FLOOR))).expect("minimum")
}

#[test]
fn time_interval_is_clamped_and_queried() {
    let _g = serial();
    let s = ProfileSource::Time;
    let _restore = Restore::to(s, TIME_DEFAULT_INTERVAL);
    assert_eq!(
        query_interval(s),
        TIME_DEFAULT_INTERVAL,
        "ProfileTime's default"
    );

    let rate_before = max_sample_rate();
    let min = s.min_interval();
    let rate_after = max_sample_rate();
    println!(
        "ProfileTime: perf_event_max_sample_rate {rate_before}, min_interval {min} (x 100 ns)"
    );
    assert!(
        min == time_min_for(rate_before) || min == time_min_for(rate_after),
        "min_interval {min} must be max(100, ceil(1e7 / {rate_before}))"
    );

    assert_eq!(c_set(1, 0), NtStatus::SUCCESS);
    let (st, v) = c_query(0);
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(v, s.min_interval(), "below the minimum: the minimum");
    assert_eq!(c_set(u32::MAX, 0), NtStatus::SUCCESS);
    assert_eq!(
        c_query(0),
        (NtStatus::SUCCESS, TIME_MAX_INTERVAL),
        "above the maximum: 10,000,000"
    );
    assert_eq!(c_set(5_000, 0), NtStatus::SUCCESS);
    assert_eq!(c_query(0), (NtStatus::SUCCESS, 5_000), "an ordinary value");
    assert_eq!(c_set(TIME_DEFAULT_INTERVAL, 0), NtStatus::SUCCESS);
    assert_eq!(c_query(0), (NtStatus::SUCCESS, TIME_DEFAULT_INTERVAL));
}

/// The CPU-time clock of the calling thread, usable from other threads of the process while it lives.
fn own_cpu_clock() -> libc::clockid_t {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread; `clock` is a valid out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    assert_eq!(rc, 0, "pthread_getcpuclockid");
    clock
}

use common::clock_ns;

/// A spinning thread's CPU clock, published once it spins.
struct SpinState {
    clock: AtomicI32,
    running: AtomicBool,
}

impl SpinState {
    fn new() -> SpinState {
        SpinState {
            clock: AtomicI32::new(0),
            running: AtomicBool::new(false),
        }
    }

    /// Wait until the thread spins; its CPU clock.
    fn wait(&self) -> libc::clockid_t {
        while !self.running.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        self.clock.load(Ordering::Acquire)
    }
}

/// Spin in `f` until `stop`, publishing the thread's CPU clock in `state` first.
fn spinner(f: fn(u64, u64) -> u64, state: &SpinState, stop: &AtomicBool) -> u64 {
    let mut x = 7u64;
    state.clock.store(own_cpu_clock(), Ordering::Release);
    state.running.store(true, Ordering::Release);
    while !stop.load(Ordering::Acquire) {
        x = f(x, 50_000);
    }
    black_box(x)
}

/// A disabled, non-inherited software event (`PERF_COUNT_SW_DUMMY`) on the calling thread, for as long as it
/// lives.
///
/// Why: perf has an optimization for threads whose event contexts are equivalent: when a thread and a thread it
/// created (whose events are inherited copies of its own) follow each other on a CPU, the kernel swaps their
/// event contexts instead of switching events out and in. After such a swap the new thread runs on the
/// creator's original events, the very descriptors the library holds, and so it gets a new interval by luck;
/// without a swap it keeps its inherited copies, which `PERF_EVENT_IOC_PERIOD` on the creator's descriptors
/// does not reach. Whether a swap happens depends on where the scheduler puts the new thread. A thread whose
/// context holds an event that is not inherited gives its new threads contexts that are not clones of its
/// own, so no swap ever happens: the test then sees what a thread created after the start gets by itself.
struct NoContextSwap {
    _fd: std::os::fd::OwnedFd,
}

impl NoContextSwap {
    fn open() -> NoContextSwap {
        use std::os::fd::FromRawFd;
        // perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): type, size, config, ..., flags at byte 40.
        let mut attr = [0u64; 8];
        attr[0] = 1 | (64 << 32); // type PERF_TYPE_SOFTWARE, size 64
        attr[1] = 9; // config PERF_COUNT_SW_DUMMY
        attr[5] = 1 | (1 << 5) | (1 << 6); // disabled, exclude_kernel, exclude_hv; not inherit
        // SAFETY: a valid perf_event_attr of the size it declares, read by the kernel during the call.
        let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0) };
        assert!(
            fd >= 0,
            "perf_event_open(dummy): {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
        NoContextSwap { _fd: fd }
    }
}

/// Raises a flag when dropped: threads of a scope that spin until the flag stop even when the scope's body
/// panics (the scope would otherwise wait for them forever).
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// One reading of the interval-switch monitor: when, each spinner's CPU time, each profile's count.
#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    cpu: [u64; 2],
    count: [u64; 2],
}

/// Samples per second of thread CPU time between two readings, for spinner `t`; and that CPU time.
fn cpu_rate(a: &Reading, b: &Reading, t: usize) -> (f64, u64) {
    let cpu = b.cpu[t] - a.cpu[t];
    (
        (b.count[t] - a.count[t]) as f64 * 1e9 / cpu.max(1) as f64,
        cpu,
    )
}

/// Samples per second of wall time between two readings, for spinner `t`.
fn wall_rate(a: &Reading, b: &Reading, t: usize) -> f64 {
    (b.count[t] - a.count[t]) as f64 / (b.at - a.at).as_secs_f64()
}

#[test]
fn interval_switch_takes_effect_within_50ms() {
    const WINDOW: Duration = Duration::from_millis(25);
    const SWITCH_AT: usize = 12; // 300 ms at the old interval
    const WINDOWS: usize = 24; // 300 ms at the new one
    let _g = serial();
    let s = ProfileSource::Time;
    let _restore = Restore::to(s, TIME_DEFAULT_INTERVAL);
    assert_eq!(c_set(10_000, 0), NtStatus::SUCCESS);
    assert_eq!(c_query(0), (NtStatus::SUCCESS, 10_000));

    let stop = AtomicBool::new(false);
    let (pre, post) = (SpinState::new(), SpinState::new());
    let p_pre = profile_over(spin_pre_range(), s).expect("build");
    let p_post = profile_over(spin_post_range(), s).expect("build");
    let (readings, switched_at) = std::thread::scope(|sc| {
        let stopper = RaiseOnDrop(&stop);
        // Created before the start: instrumented by the start's thread scan.
        let t_pre = sc.spawn(|| spinner(spin_pre, &pre, &stop));
        let pre_clock = pre.wait();
        p_pre.start().expect("start");
        p_post.start().expect("start");
        // Created after the start: covered through inheritance from this thread (see `NoContextSwap`).
        let no_swap = NoContextSwap::open();
        let t_post = sc.spawn(|| spinner(spin_post, &post, &stop));
        let post_clock = post.wait();
        let origin = Instant::now();
        let mut readings = Vec::with_capacity(WINDOWS + 1);
        let mut switched_at = None;
        for w in 0..=WINDOWS {
            let due = origin + WINDOW * w as u32;
            if let Some(rest) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(rest);
            }
            if w == SWITCH_AT {
                switched_at = Some(Instant::now());
                assert_eq!(c_set(1_000, 0), NtStatus::SUCCESS, "NtSetIntervalProfile");
            }
            // The live reads drain every ring first; then the clocks: a sample taken between the two is
            // counted in the next window, and that window's CPU time includes it.
            let count = [p_pre.stats().counted, p_post.stats().counted];
            let cpu = [clock_ns(pre_clock), clock_ns(post_clock)];
            readings.push(Reading {
                at: Instant::now(),
                cpu,
                count,
            });
        }
        drop(stopper);
        t_pre.join().expect("pre spinner");
        t_post.join().expect("post spinner");
        drop(no_swap);
        (readings, switched_at.expect("switched"))
    });
    p_pre.stop().expect("stop");
    p_post.stop().expect("stop");
    assert_eq!(c_query(0), (NtStatus::SUCCESS, 1_000), "the new interval");

    // The timer runs on each thread's own CPU time (cpu-clock counts while the thread is on a CPU), so a
    // thread's sample rate is samples per second of its CPU time: 1000/s at 1 ms, 10000/s at 100 µs. Per wall
    // second it would also depend on how much CPU the thread got, which other processes on a 2-CPU machine
    // decide; both are printed, the assertions use CPU time.
    for (t, name) in ["created before the start", "created after the start"]
        .into_iter()
        .enumerate()
    {
        // Before the switch: readings 1 .. SWITCH_AT - 1 (reading SWITCH_AT is taken after the switch).
        let (before, before_cpu) = cpu_rate(&readings[1], &readings[SWITCH_AT - 1], t);
        let per_window: Vec<String> = readings
            .windows(2)
            .map(|w| match cpu_rate(&w[0], &w[1], t) {
                (_, cpu) if cpu < 500_000 => "-".to_string(), // the thread hardly ran
                (rate, _) => format!("{rate:.0}"),
            })
            .collect();
        let per_window_wall: Vec<String> = readings
            .windows(2)
            .map(|w| format!("{:.0}", wall_rate(&w[0], &w[1], t)))
            .collect();
        println!(
            "thread {name}: samples per CPU-second, 25 ms windows: {}",
            per_window.join(" ")
        );
        println!(
            "thread {name}: samples per wall second, same windows: {}",
            per_window_wall.join(" ")
        );
        // The window that starts 50 ms after the switch: the last reading taken at most 50 ms after it (so a
        // reading delayed by a busy machine makes the check stricter, never laxer), extended over the next
        // windows while it holds less than 3 ms of the thread's CPU time, so that the rate is not a ratio of
        // tiny numbers.
        let i = (SWITCH_AT..readings.len())
            .take_while(|&k| readings[k].at <= switched_at + Duration::from_millis(50))
            .last()
            .expect("the reading right after the switch");
        let mut j = i + 1;
        while j + 1 < readings.len() && readings[j].cpu[t] - readings[i].cpu[t] < 3_000_000 {
            j += 1;
        }
        assert!(j < readings.len(), "the run must extend past that window");
        let (after, after_cpu) = cpu_rate(&readings[i], &readings[j], t);
        let ratio = after / before;
        let wall_ratio = wall_rate(&readings[i], &readings[j], t)
            / wall_rate(&readings[1], &readings[SWITCH_AT - 1], t);
        // When the new rate first showed: the end of the first window after the switch at 6x or more.
        let first_fast_ms = (SWITCH_AT..readings.len() - 1)
            .find(|&k| cpu_rate(&readings[k], &readings[k + 1], t).0 >= 6.0 * before)
            .map(|k| (readings[k + 1].at - switched_at).as_secs_f64() * 1e3);
        println!(
            "thread {name}: before the switch {before:.0}/CPU-s over {:.1} ms of CPU; window from {:.1} to \
             {:.1} ms after the switch: {after:.0}/CPU-s over {:.1} ms of CPU: ratio {ratio:.2} (wall-time \
             ratio {wall_ratio:.2}); the first window at >= 6x ends {first_fast_ms:.1?} ms after the switch",
            before_cpu as f64 / 1e6,
            (readings[i].at - switched_at).as_secs_f64() * 1e3,
            (readings[j].at - switched_at).as_secs_f64() * 1e3,
            after_cpu as f64 / 1e6,
        );
        assert!(
            (800.0..=1200.0).contains(&before),
            "thread {name}: {before:.0} samples per CPU-second at a 1 ms interval"
        );
        assert!(
            (6.0..=14.0).contains(&ratio),
            "thread {name}: the rate 50 ms after the switch is {ratio:.2}x the rate before, not about 10x"
        );
    }
    let (a, b) = (p_pre.stats(), p_post.stats());
    println!("pre {a:?}\npost {b:?}");
}

// ---------------------------------------------------------------------------------------------------------
// 4. Aliasing and jitter.
// ---------------------------------------------------------------------------------------------------------

/// The periodic workload: a 4 ms cycle, 3 ms in `phase_a` then 1 ms in `phase_b`.
const CYCLE: Duration = Duration::from_millis(4);
const A_PART: Duration = Duration::from_millis(3);
/// Monitor windows for the phase-locking statistic.
const LOCK_WINDOW: Duration = Duration::from_millis(50);

/// What one run of the periodic workload measured.
#[derive(Debug)]
struct PeriodicRun {
    /// Samples in phase_a and in phase_b.
    a: u64,
    b: u64,
    /// A's share of the samples.
    share: f64,
    /// A's share of the thread's CPU time in the two phases (the truth a CPU-time sampler should find).
    truth: f64,
    /// A's share of the wall time in the two phases (equal to `truth` when the thread has a CPU to itself).
    truth_wall: f64,
    /// (share - truth) / sqrt(truth (1 - truth) / n).
    z: f64,
    /// Every sample of the stream per second of the workload thread's CPU time.
    rate: f64,
    /// The workload thread's CPU time over the run's wall time (1: never off its CPU).
    on_cpu: f64,
    /// The workload ran under SCHED_FIFO.
    realtime: bool,
    /// The same per wall second.
    rate_wall: f64,
    /// Dispersion of A's share across the monitor windows: chi-square per window against independent samples
    /// with A's overall share (about 1 when samples are independent, up to the samples per window when every
    /// window is all-A or all-B, i.e. the sampler is phase-locked to the workload).
    dispersion: f64,
    windows: usize,
}

/// Chi-square per window of the windows' (a, n) counts against a binomial with the pooled share.
fn dispersion(windows: &[(u64, u64)]) -> f64 {
    let (sa, sn) = windows
        .iter()
        .fold((0u64, 0u64), |(sa, sn), &(a, n)| (sa + a, sn + n));
    if sn == 0 {
        return 0.0;
    }
    let p = sa as f64 / sn as f64;
    if p <= 0.0 || p >= 1.0 {
        // Every sample on one side for the whole run: as locked as it gets.
        return f64::INFINITY;
    }
    let used: Vec<&(u64, u64)> = windows.iter().filter(|w| w.1 > 0).collect();
    let chi: f64 = used
        .iter()
        .map(|&&(a, n)| {
            let n = n as f64;
            (a as f64 - n * p).powi(2) / (n * p * (1.0 - p))
        })
        .sum();
    chi / used.len().max(1) as f64
}

/// Run the periodic workload on this thread for `duration` under one profile per phase.
///
/// The truth is A's share of the thread's CPU time in the two phases, read around each phase with
/// `CLOCK_THREAD_CPUTIME_ID` next to `Instant`: the cpu-clock timer counts the thread's CPU time, so time the
/// thread spent preempted inside a phase would make a wall-clock truth wrong. When the thread keeps its CPU the
/// two agree; both are reported.
fn periodic_run(duration: Duration, late: bool) -> PeriodicRun {
    let pa = profile_over(phase_a_range(), ProfileSource::Time).expect("build A");
    let pb = profile_over(phase_b_range(), ProfileSource::Time).expect("build B");
    let done = AtomicBool::new(false);
    pa.start().expect("start A");
    pb.start().expect("start B");
    let (wall, cpu, elapsed, windows, realtime) = std::thread::scope(|sc| {
        // The monitor reads both profiles every LOCK_WINDOW from another thread (on the other CPU), so that
        // the workload thread is never blocked and its phase never disturbed.
        let finished = RaiseOnDrop(&done);
        let monitor = sc.spawn(|| {
            let mut windows = Vec::new();
            let mut last = (pa.stats().counted, pb.stats().counted);
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(LOCK_WINDOW);
                let now = (pa.stats().counted, pb.stats().counted);
                windows.push((now.0 - last.0, now.0 - last.0 + now.1 - last.1));
                last = now;
            }
            windows
        });
        // Deadlines advance in fixed steps from the start: the workload's period is exactly 4 ms. The phases
        // are timed on the wall clock and on the thread's CPU clock, each read once per phase boundary.
        let work = || {
            let _pin = Pin::here();
            let rt = Realtime::try_enter();
            let start = Instant::now();
            let cpu_start = clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
            let (mut wall, mut cpu) = ([Duration::ZERO; 2], [0u64; 2]);
            let (mut t, mut c) = (start, cpu_start);
            let mut x = 3u64;
            let cycles = (duration.as_micros() / CYCLE.as_micros()) as u32;
            for k in 0..cycles {
                let a_end = start + CYCLE * k + A_PART;
                let b_end = start + CYCLE * (k + 1);
                for (phase, until) in [(0, a_end), (1, b_end)] {
                    x = if phase == 0 {
                        phase_a(x, until)
                    } else {
                        phase_b(x, until)
                    };
                    let (t2, c2) = (Instant::now(), clock_ns(libc::CLOCK_THREAD_CPUTIME_ID));
                    wall[phase] += t2 - t;
                    cpu[phase] += c2 - c;
                    (t, c) = (t2, c2);
                }
            }
            black_box(x);
            let realtime = rt.is_some();
            drop(rt);
            (wall, cpu, (t - start, c - cpu_start), realtime)
        };
        // `late`: the workload runs on a thread created after the start (observed through inheritance).
        let (wall, cpu, elapsed, realtime) = if late {
            sc.spawn(work).join().expect("late workload thread")
        } else {
            work()
        };
        drop(finished);
        (
            wall,
            cpu,
            elapsed,
            monitor.join().expect("monitor"),
            realtime,
        )
    });
    pa.stop().expect("stop A");
    pb.stop().expect("stop B");
    let (sa, sb) = (pa.stats(), pb.stats());
    let (a, b) = (sa.counted, sb.counted);
    assert!(
        a + b >= 100,
        "the periodic workload got only {a} + {b} samples in {:?}",
        elapsed.0
    );
    let n = (a + b) as f64;
    let share = a as f64 / n;
    let truth = cpu[0] as f64 / (cpu[0] + cpu[1]) as f64;
    let truth_wall = wall[0].as_secs_f64() / (wall[0] + wall[1]).as_secs_f64();
    let z = (share - truth) / (truth * (1.0 - truth) / n).sqrt();
    // Every sample of the stream (A's counted and outside) is a sample of this process while A was started:
    // the workload thread's, and a few of the monitor's.
    let all = (sa.counted + sa.outside) as f64;
    let rate = all * 1e9 / elapsed.1 as f64;
    let on_cpu = elapsed.1 as f64 / elapsed.0.as_nanos() as f64;
    let rate_wall = all / elapsed.0.as_secs_f64();
    // The first window holds the start; the last is cut short by the end.
    let used = if windows.len() > 2 {
        &windows[1..windows.len() - 1]
    } else {
        &windows[..]
    };
    PeriodicRun {
        a,
        b,
        share,
        truth,
        truth_wall,
        z,
        rate,
        on_cpu,
        realtime,
        rate_wall,
        dispersion: dispersion(used),
        windows: used.len(),
    }
}

/// Samples per window in the no-jitter run must spread at least this much more than independent samples do.
const LOCKED_DISPERSION: f64 = 3.0;

#[test]
fn fixed_period_aliases_and_jitter_cures_it() {
    let _g = serial();
    let s = ProfileSource::Time;
    let _restore = Restore::to(s, TIME_DEFAULT_INTERVAL);
    let (ra, rb) = (phase_a_range(), phase_b_range());
    println!(
        "phase_a [{:#x}, +{}), phase_b [{:#x}, +{})",
        ra.0, ra.1, rb.0, rb.1
    );
    assert!(
        ra.0 + ra.1 <= rb.0 || rb.0 + rb.1 <= ra.0,
        "the two ranges must not overlap"
    );
    assert_eq!(set_interval(s, 40_000), 40_000, "4 ms");
    set_jitter(s, 0).expect("jitter off");
    assert_eq!(
        ntprofile::source::jitter_percent(s),
        0,
        "no jitter for the first run"
    );

    // Without jitter the sampler fires at a fixed phase of the workload's cycle, which drifts only when the
    // thread is descheduled (the cpu-clock timer pauses while the wall-clock deadlines go on). A's share is
    // then whatever fraction of the run the phase spent inside A: usually far from the truth, but a random walk
    // of the phase can by chance spend about 75 % of the run inside A. So a single run's share cannot be
    // required to be wrong. What is always true of a phase-locked sampler, wherever its total lands, is that
    // its samples come in runs: a 50 ms window (12 samples) is nearly all-A or all-B, far more spread than
    // independent samples (dispersion about 1). A run shows aliasing when it shows mis-attribution (|z| > 4)
    // or phase locking (dispersion > LOCKED_DISPERSION).
    //
    // Both need the thread to keep its CPU: on a machine so busy that the thread is descheduled every few
    // milliseconds, every deschedule moves the phase at random and the fixed period does not alias at all. The
    // workload therefore runs pinned and, where permitted, under SCHED_FIFO (see `Realtime`); a run in which
    // the thread still spent less than 90 % of the wall time on its CPU and showed no aliasing is void. Up to
    // three runs are made; the majority of the runs that are not void must alias, and at least one run must
    // not be void (a machine too busy to show aliasing fails the test: it cannot show that jitter cures it).
    let (mut aliased, mut valid, mut runs) = (0, 0, 0);
    while runs < 3 {
        let r = periodic_run(Duration::from_millis(2_000), false);
        runs += 1;
        let misattributed = r.z.abs() > 4.0;
        let locked = r.dispersion > LOCKED_DISPERSION;
        let disturbed = r.on_cpu < 0.9;
        println!(
            "no jitter, run {runs}: A {} B {}, share {:.3} vs truth {:.3} (wall {:.3}), z {:.1}, {:.0} \
             samples per CPU-s ({:.0}/s wall), dispersion {:.2} over {} windows, on CPU {:.0} % (SCHED_FIFO \
             {}): misattributed {misattributed}, phase-locked {locked}",
            r.a,
            r.b,
            r.share,
            r.truth,
            r.truth_wall,
            r.z,
            r.rate,
            r.rate_wall,
            r.dispersion,
            r.windows,
            r.on_cpu * 100.0,
            r.realtime
        );
        if misattributed || locked {
            aliased += 1;
            valid += 1;
        } else if !disturbed {
            valid += 1;
        }
        if valid > 0 && aliased * 2 > valid && (runs > 1 || aliased == valid) {
            // A clear first run is enough; later runs only settle a first run that looked fair or was void.
            break;
        }
    }
    assert!(
        valid > 0,
        "the machine is too busy to show aliasing: the workload thread was descheduled in every run"
    );
    assert!(
        aliased * 2 > valid,
        "the fixed period aliased in only {aliased} of {valid} valid runs ({runs} made)"
    );

    assert_eq!(
        NtStatus(NtprofileSetSourceJitter(0, 50)),
        NtStatus::SUCCESS,
        "jitter 50 % through the C export"
    );
    assert_eq!(ntprofile::source::jitter_percent(s), 50);
    assert_eq!(
        set_jitter(s, 91).map_err(|e| e.status()),
        Err(NtStatus::INVALID_PARAMETER),
        "above 90 %"
    );
    let r = periodic_run(Duration::from_millis(3_000), false);
    println!(
        "jitter 50 %: A {} B {}, share {:.3} vs truth {:.3} (wall {:.3}), z {:.2}, {:.1} samples per CPU-s \
         ({:.1}/s wall), dispersion {:.2} over {} windows, on CPU {:.0} % (SCHED_FIFO {})",
        r.a,
        r.b,
        r.share,
        r.truth,
        r.truth_wall,
        r.z,
        r.rate,
        r.rate_wall,
        r.dispersion,
        r.windows,
        r.on_cpu * 100.0,
        r.realtime
    );
    assert!(
        r.z.abs() <= 3.0,
        "with jitter A's share {:.3} must match the truth {:.3} (z {:.2})",
        r.share,
        r.truth,
        r.z
    );
    assert!(
        (212.5..=287.5).contains(&r.rate),
        "the jittered mean rate {:.1} per CPU-second must stay within 15 % of 250",
        r.rate
    );
    // The same on a thread created after the start: its events are inherited copies, which a period change
    // does not reach, so the library re-opens the stream for it; it must be jittered all the same.
    let r = periodic_run(Duration::from_millis(3_000), true);
    println!(
        "jitter 50 %, thread created after the start: A {} B {}, share {:.3} vs truth {:.3}, z {:.2}, {:.1} \
         samples per CPU-s, dispersion {:.2}",
        r.a, r.b, r.share, r.truth, r.z, r.rate, r.dispersion
    );
    assert!(
        r.z.abs() <= 3.0,
        "late thread: with jitter A's share {:.3} must match the truth {:.3} (z {:.2})",
        r.share,
        r.truth,
        r.z
    );
    assert!(
        (212.5..=287.5).contains(&r.rate),
        "late thread: the jittered mean rate {:.1} per CPU-second must stay within 15 % of 250",
        r.rate
    );
    set_jitter(s, 0).expect("jitter off");
    assert_eq!(ntprofile::source::jitter_percent(s), 0);
}

// ---------------------------------------------------------------------------------------------------------
// 5. The source listing against creates and queries; registered raw events.
// ---------------------------------------------------------------------------------------------------------

/// Size of `NTPROFILE_SOURCE_INFO`.
const RECORD: usize = 192;

/// A decoded `NTPROFILE_SOURCE_INFO` record.
#[derive(Debug, PartialEq, Eq)]
struct CRecord {
    source: u32,
    supported: u32,
    errno: u32,
    unit: u32,
    min: u32,
    max: u32,
    interval: u32,
    jitter: u32,
    perf_type: u32,
    config: [u64; 3],
    name: String,
    event_name: String,
}

fn decode(rec: &[u8]) -> CRecord {
    let u32_at = |o: usize| u32::from_ne_bytes(rec[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(rec[o..o + 8].try_into().unwrap());
    let text = |o: usize| {
        let field = &rec[o..o + 64];
        let end = field
            .iter()
            .position(|&b| b == 0)
            .expect("a NUL-terminated name");
        String::from_utf8(field[..end].to_vec()).expect("UTF-8 name")
    };
    CRecord {
        source: u32_at(0),
        supported: u32_at(4),
        errno: u32_at(8),
        unit: u32_at(12),
        min: u32_at(16),
        max: u32_at(20),
        interval: u32_at(24),
        jitter: u32_at(28),
        perf_type: u32_at(32),
        config: [u64_at(40), u64_at(48), u64_at(56)],
        name: text(64),
        event_name: text(128),
    }
}

/// `NtprofileRegisterSource`, expecting success; returns the source value.
fn c_register(perf_type: u32, config: u64) -> u32 {
    let mut id = 0u32;
    let st = NtStatus(NtprofileRegisterSource(perf_type, config, 0, 0, &mut id));
    assert_eq!(st, NtStatus::SUCCESS, "register {perf_type}:{config}");
    id
}

#[test]
fn listing_matches_creates_and_queries() {
    let _g = serial();
    // Dropped last: whatever a failure leaves behind, ProfileTime is back at its default for the next test.
    let _time = Restore::to(ProfileSource::Time, TIME_DEFAULT_INTERVAL);
    // Registered raw events: software page-faults (type 1, config 2) and a type no PMU has.
    let pf = c_register(1, 2);
    let bogus = c_register(0x7777, 0);
    println!("registered page-faults as {pf:#x}, type 0x7777 as {bogus:#x}");
    assert!(pf >= REGISTERED_BASE && bogus >= REGISTERED_BASE);
    assert_ne!(pf, bogus);
    assert_eq!(c_register(1, 2), pf, "the same event, the same source");
    assert_eq!(
        c_register(0x7777, 0),
        bogus,
        "the same event, the same source"
    );
    let pf_source = ProfileSource::from_raw(pf).expect("a registered source");
    let bogus_source = ProfileSource::from_raw(bogus).expect("a registered source");

    let list = list_sources();
    let listed = |s: ProfileSource| list.iter().find(|i| i.source == s);
    assert!(
        listed(pf_source).is_some_and(|i| i.support == Support::Supported),
        "the registered page-fault source is listed as supported"
    );
    let bogus_info = listed(bogus_source).expect("the bogus source is listed");
    println!(
        "type 0x7777: {:?} ({})",
        bogus_info.support,
        bogus_info.support.reason()
    );
    assert!(
        matches!(bogus_info.support, Support::OpenFailed(_)),
        "an event type no PMU has is listed as unsupported"
    );
    let intervals = || -> Vec<(ProfileSource, u32)> {
        list_sources()
            .iter()
            .map(|i| (i.source, i.interval))
            .collect()
    };
    let range = touch_range();
    let mut supported = Vec::new();
    for info in &list {
        let s = info.source;
        let raw = s.to_raw();
        assert_eq!(info.name, s.name(), "{s:?}");
        assert_eq!(info.support, s.support(), "{s:?}");
        assert_eq!(info.unit, s.interval_unit(), "{s:?}");
        assert_eq!(info.event, s.perf_event(), "{s:?}");
        assert_eq!(info.max_interval, s.limits().max, "{s:?}");
        assert_eq!(info.min_interval, s.min_interval(), "{s:?}");
        assert_eq!(
            info.jitter_percent,
            ntprofile::source::jitter_percent(s),
            "{s:?}"
        );
        // Supported ⇔ a create over a small range succeeds (Rust and C), and a start really opens the events.
        let built = profile_over(range, s);
        assert_eq!(
            info.support.is_supported(),
            built.is_ok(),
            "{s:?}: listed {:?}, build {:?}",
            info.support,
            built.as_ref().err()
        );
        let c = c_create(range, raw);
        // Interval: the listing says what a query says (0 when not supported).
        assert_eq!(info.interval, query_interval(s), "{s:?}: listed interval");
        assert_eq!(
            c_query(raw),
            (NtStatus::SUCCESS, info.interval),
            "{s:?}: NtQueryIntervalProfile"
        );
        if let Ok(p) = built {
            supported.push(s);
            assert_eq!(c, NtStatus::SUCCESS, "{s:?}: NtCreateProfile");
            p.start()
                .unwrap_or_else(|e| panic!("{s:?}: listed as supported but start fails: {e:?}"));
            p.stop().expect("stop");
            assert_ne!(
                info.interval, 0,
                "{s:?}: a supported source has an interval"
            );
            assert!(info.min_interval <= info.interval && info.interval <= info.max_interval);
            // The listed limits are what clamping does; restore the value in force before.
            let others = |v: Vec<(ProfileSource, u32)>| -> Vec<(ProfileSource, u32)> {
                v.into_iter().filter(|(o, _)| *o != s).collect()
            };
            let before = others(intervals());
            let _restore = Restore::to(s, info.interval);
            assert_eq!(
                set_interval(s, info.min_interval.saturating_sub(1)),
                info.min_interval,
                "{s:?}: below the listed minimum"
            );
            assert_eq!(
                others(intervals()),
                before,
                "{s:?}: setting this source's interval changed another source's (a shared interval slot?)"
            );
            assert_eq!(query_interval(s), info.min_interval, "{s:?}");
            assert_eq!(
                set_interval(s, u32::MAX),
                info.max_interval,
                "{s:?}: above the listed maximum"
            );
            assert_eq!(
                c_query(raw),
                (NtStatus::SUCCESS, info.max_interval),
                "{s:?}"
            );
        } else {
            assert_eq!(built.err(), Some(NtStatus::NOT_SUPPORTED), "{s:?}");
            assert_eq!(c, NtStatus::NOT_SUPPORTED, "{s:?}: NtCreateProfile");
            assert_eq!(info.interval, 0, "{s:?}");
            assert_eq!(set_interval(s, 12_345), 0, "{s:?}: ignored");
            assert_eq!(query_interval(s), 0, "{s:?}");
        }
        assert_eq!(query_interval(s), info.interval, "{s:?}: restored");
    }
    println!(
        "{} sources listed, supported here: {:?}",
        list.len(),
        supported
    );
    assert!(supported.contains(&ProfileSource::Time), "ProfileTime");
    assert!(
        supported.contains(&ProfileSource::PageFaults),
        "page-faults"
    );

    // The C listing: too small a buffer first.
    let mut total = 0u32;
    let mut small = vec![0u64; RECORD / 8];
    let st = NtStatus(NtprofileQuerySources(
        small.as_mut_ptr().cast(),
        1,
        &mut total,
    ));
    assert_eq!(
        st,
        NtStatus::BUFFER_TOO_SMALL,
        "one record for {} sources",
        list.len()
    );
    assert_eq!(total as usize, list.len(), "TotalCount");
    let mut buf = vec![0u64; total as usize * RECORD / 8];
    let mut total2 = 0u32;
    let st = NtStatus(NtprofileQuerySources(
        buf.as_mut_ptr().cast(),
        total,
        &mut total2,
    ));
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(total2, total);
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let now = list_sources();
    assert_eq!(
        now, list,
        "the listing is unchanged by the creates, sets and restores"
    );
    for (rec, info) in bytes.chunks_exact(RECORD).zip(&now) {
        let r = decode(rec);
        let event = info.event;
        let expected = CRecord {
            source: info.source.to_raw(),
            supported: u32::from(info.support.is_supported()),
            errno: match info.support {
                Support::OpenFailed(e) => e as u32,
                _ => 0,
            },
            unit: match info.unit {
                IntervalUnit::Time100ns => 0,
                IntervalUnit::Events => 1,
            },
            min: info.min_interval,
            max: info.max_interval,
            interval: info.interval,
            jitter: info.jitter_percent,
            perf_type: event.map_or(u32::MAX, |e| e.type_),
            config: event.map_or([0; 3], |e| [e.config, e.config1, e.config2]),
            name: info.name.to_string(),
            event_name: event.map_or(String::new(), |e| e.name.to_string()),
        };
        assert_eq!(r, expected, "record of {:?}", info.source);
        if r.supported == 0 {
            // An errno exactly when an event was tried and failed to open.
            assert_eq!(
                r.errno == 0,
                info.support == Support::NoPerfEvent,
                "{:?}: errno {} for {:?}",
                info.source,
                r.errno,
                info.support
            );
        }
    }
}

#[test]
fn registered_page_fault_source_counts_faults() {
    let _g = serial();
    let id = c_register(1, 2);
    assert!(id >= REGISTERED_BASE, "{id:#x}");
    let s = ProfileSource::from_raw(id).expect("registered");
    assert_eq!(
        ntprofile::register_raw_source(1, 2, 0, 0),
        Ok(s),
        "the Rust and C registrations agree"
    );
    assert!(
        s.support().is_supported(),
        "{s:?}: {}",
        s.support().reason()
    );
    assert!(!s.is_hardware(), "a software raw event");
    // Dropped last: whatever a failure leaves behind, ProfileTime is back at its default for the next test.
    let _time = Restore::to(ProfileSource::Time, TIME_DEFAULT_INTERVAL);
    let time_before = query_interval(ProfileSource::Time);
    assert_eq!(
        query_interval(s),
        1,
        "a software raw event samples every event by default (its own interval, not ProfileTime's {time_before})"
    );
    let _restore = Restore::to(s, 1);
    let st = fault_run(s, 16, FAULT_PAGES);
    assert_eq!(
        query_interval(ProfileSource::Time),
        time_before,
        "setting a registered source's interval changed ProfileTime's"
    );
    check_fault_ratio("registered page-faults", 16, FAULT_PAGES, &st);
}
