//! The consumer's hot path (decode → match → increment) performs no heap allocation.
//!
//! This binary counts every allocation of the process with its own `#[global_allocator]`, so it runs without the
//! libtest harness (`harness = false` in Cargo.toml): the harness's own threads (output capture, timers, result
//! channels) would allocate at any moment and make a count of zero unattainable, or worse, make a non-zero count
//! meaningless. Here the process has exactly two threads in the measured window: this one, spinning in a hot
//! function that allocates nothing, and the library's consumer thread, which decodes and counts its samples.
//!
//! Two profiles share the sample stream: one through the C exports over a buffer this test owns, so that the
//! counts the consumer wrote *during* the window can be read without calling the library (no sync request, no
//! allocation of ours), and one through the Rust API.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ntprofile::ffi::exports::{NtClose, NtCreateProfile, NtStartProfile, NtStopProfile};
use ntprofile::{Profile, ProfileSource};

/// Counts allocations (alloc, alloc_zeroed, realloc) and deallocations, then defers to the system allocator.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static DEALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        DEALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// The hot function, alone in its own section so that the linker's __start_/__stop_ symbols bound it exactly
// (see tests/sampling.rs for the reasoning). A xorshift chain: no calls, no allocation, in any build.
hot_in_section!(hot, hot_range, "ntp_na_hot", 0x51);

const CHUNK: u64 = 100_000;

/// Spin in `hot` on this thread for at least `wall`, and on until this thread has had `cpu` of CPU time (a
/// loaded machine shares its processors with other work), at most 10 s. Nothing here allocates: `Instant::now`
/// is the vDSO's clock_gettime, the thread CPU clock a plain system call.
fn spin(x: u64, wall: Duration, cpu: Duration) -> u64 {
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let cpu = cpu.as_nanos() as u64;
    let mut x = x;
    loop {
        x = hot(x, CHUNK);
        let elapsed = start.elapsed();
        if (elapsed >= wall && thread_cpu_ns() - cpu_start >= cpu)
            || elapsed > Duration::from_secs(10)
        {
            return x;
        }
    }
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, a system call: no allocation).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let (start, size) = hot_range();
    let end = start + size;
    let f = hot as *const () as usize;
    assert!(
        start <= f && f < end && end - start < 4096,
        "hot {f:#x} in [{start:#x}, {end:#x})"
    );

    assert_eq!(
        ntprofile::set_interval(ProfileSource::Time, 1000),
        1000,
        "a 100 µs period"
    );

    // The C-API profile over a buffer of ours, 4-byte buckets. Written by the consumer with 32-bit atomic adds;
    // read here through the same atomic type.
    let counters: Box<[AtomicU32]> = (0..size.div_ceil(4)).map(|_| AtomicU32::new(0)).collect();
    let mut handle: *mut c_void = std::ptr::null_mut();
    let status = NtCreateProfile(
        &mut handle,
        usize::MAX as *mut c_void, // NtCurrentProcess()
        start as *mut c_void,
        size,
        2,
        counters.as_ptr() as *mut u32,
        (counters.len() * 4) as u32,
        ProfileSource::Time.to_raw(),
        usize::MAX, // every processor
    );
    assert_eq!(status, 0, "NtCreateProfile: {status:#x}");
    let in_buffer = || {
        counters
            .iter()
            .map(|c| u64::from(c.load(Ordering::Relaxed)))
            .sum::<u64>()
    };

    // The Rust-API profile over the same range.
    let profile = Profile::builder()
        .range(start, size)
        .bucket_size(4)
        .build()
        .expect("build");

    assert_eq!(NtStartProfile(handle), 0);
    profile.start().expect("start");

    // Warm up: the consumer thread exists, its rings are mapped, its first drains have run.
    let mut x = spin(
        0x9e37_79b9_7f4a_7c15,
        Duration::from_millis(100),
        Duration::ZERO,
    );
    let rust_before = profile.stats(); // may allocate: outside the window

    let buffer0 = in_buffer();
    let cpu0 = thread_cpu_ns();
    let (allocs0, deallocs0) = (
        ALLOCS.load(Ordering::SeqCst),
        DEALLOCS.load(Ordering::SeqCst),
    );
    let t0 = Instant::now();
    x = spin(x, Duration::from_millis(400), Duration::from_millis(250));
    let window = t0.elapsed();
    let (allocs1, deallocs1) = (
        ALLOCS.load(Ordering::SeqCst),
        DEALLOCS.load(Ordering::SeqCst),
    );
    let cpu1 = thread_cpu_ns();
    let buffer1 = in_buffer();

    let rust_after = profile.stats();
    profile.stop().expect("stop");
    assert_eq!(NtStopProfile(handle), 0);
    let buffer_final = in_buffer();
    assert_eq!(NtClose(handle), 0);
    std::hint::black_box(x);

    let in_window = buffer1 - buffer0;
    let rust_in_window = rust_after.counted - rust_before.counted;
    println!(
        "window of {:?} ({:.1} ms CPU on this thread): {} allocations, {} deallocations; the consumer counted \
         {in_window} samples into the C buffer during the window ({buffer_final} in all), the Rust profile \
         {rust_in_window}",
        window,
        (cpu1 - cpu0) as f64 / 1e6,
        allocs1 - allocs0,
        deallocs1 - deallocs0
    );
    assert!(allocs0 > 0, "the counting allocator is not in use");
    assert!(
        in_window > 1000,
        "the consumer processed only {in_window} samples during the window"
    );
    assert!(
        rust_in_window > 1000,
        "the Rust profile counted only {rust_in_window} samples"
    );
    assert_eq!(
        allocs1 - allocs0,
        0,
        "heap allocations while the consumer decoded and counted samples"
    );
    assert_eq!(
        deallocs1 - deallocs0,
        0,
        "heap deallocations while the consumer decoded and counted samples"
    );
    sampler_reads_without_allocating();
    println!("no_alloc: ok");
}

/// The sampler's `wait` and `read` (decode of variable-layout samples with call chain and user-stack copy,
/// records that wrap round the ring's end copied into the scratch buffer) allocate nothing per record.
fn sampler_reads_without_allocating() {
    use ntprofile::{SampleRecord, Sampler};
    // A 64 KiB ring and samples of about 1.2 KiB: the ring wraps many times and records straddle its end.
    let mut sampler = Sampler::builder()
        .interval(1000)
        .callchain(32)
        .user_stack(1024)
        .ring_pages(16)
        .build()
        .expect("build the sampler");
    sampler.enable().expect("enable");
    let (mut records, mut samples, mut with_stack) = (0u64, 0u64, 0u64);
    let mut sink = |r: &SampleRecord<'_>| {
        records += 1;
        if let SampleRecord::Sample(s) = r {
            samples += 1;
            with_stack += u64::from(!s.stack.is_empty() && !s.callchain.is_empty());
        }
    };
    let mut x = spin(7, Duration::from_millis(50), Duration::ZERO);
    sampler.read(&mut sink).expect("read");
    let (allocs0, deallocs0) = (
        ALLOCS.load(Ordering::SeqCst),
        DEALLOCS.load(Ordering::SeqCst),
    );
    // 400 ms of this thread's CPU time (not of wall time, of which a loaded machine may give it a quarter),
    // bounded by 20 s of wall time.
    let t0 = Instant::now();
    let cpu0 = thread_cpu_ns();
    while thread_cpu_ns() - cpu0 < 400_000_000 && t0.elapsed() < Duration::from_secs(20) {
        x = spin(x, Duration::from_millis(2), Duration::ZERO);
        sampler.wait(Duration::ZERO).expect("wait");
        sampler.read(&mut sink).expect("read");
    }
    let (allocs1, deallocs1) = (
        ALLOCS.load(Ordering::SeqCst),
        DEALLOCS.load(Ordering::SeqCst),
    );
    std::hint::black_box(x);
    sampler.disable().expect("disable");
    let stats = sampler.stats();
    drop(sampler);
    println!(
        "sampler: {} allocations, {} deallocations while reading {records} records ({samples} samples, \
         {with_stack} with call chain and stack); {stats:?}",
        allocs1 - allocs0,
        deallocs1 - deallocs0
    );
    assert!(
        samples > 1000,
        "the sampler delivered only {samples} samples"
    );
    assert!(with_stack * 10 >= samples * 9, "{with_stack} of {samples}");
    assert_eq!(
        allocs1 - allocs0,
        0,
        "heap allocations in the sampler's read"
    );
    assert_eq!(
        deallocs1 - deallocs0,
        0,
        "heap deallocations in the sampler's read"
    );
}
