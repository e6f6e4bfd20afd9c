//! Profile this program's own hot function with the safe Rust API and print the hottest buckets.
//!
//! `cargo run --release --example self_profile`. Exits with status 1 if no sample was counted.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ntprofile::{Profile, ProfileSource, query_interval, set_interval};

/// The function we profile: a dependent multiply-rotate chain.
#[inline(never)]
fn hot(mut x: u64, iterations: u64) -> u64 {
    for i in 0..iterations {
        x = (x ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    x
}

fn main() -> ExitCode {
    // 1000 x 100 ns = a sample every 100 us of CPU time (the interval is shared by every Timer profile).
    set_interval(ProfileSource::Time, 1000);
    let base = hot as *const () as usize;
    // [base, base + 1 KiB) in 16-byte buckets (BucketSize 4): hot() and whatever the linker put after it.
    let profile = match Profile::builder()
        .range(base, 1024)
        .bucket_size(4)
        .source(ProfileSource::Time)
        .build()
    {
        Ok(p) => p,
        Err(status) => {
            eprintln!("NtCreateProfile failed: {status}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(status) = profile.start() {
        eprintln!("NtStartProfile failed: {status}");
        return ExitCode::FAILURE;
    }
    let until = Instant::now() + Duration::from_millis(300);
    let mut acc = 1;
    while Instant::now() < until {
        acc = hot(black_box(acc), 100_000);
    }
    black_box(acc);
    // Stop is a barrier: every sample taken before it is counted when it returns.
    if let Err(status) = profile.stop() {
        eprintln!("NtStopProfile failed: {status}");
        return ExitCode::FAILURE;
    }

    let counts = profile.counts();
    let mut hot_buckets: Vec<(usize, u32)> = counts
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, c)| c > 0)
        .collect();
    hot_buckets.sort_by_key(|&(_, c)| std::cmp::Reverse(c));
    println!(
        "interval {} x 100 ns; range {base:#x} + 1024, 16-byte buckets",
        query_interval(ProfileSource::Time)
    );
    println!("{:>12} {:>8}", "hot+offset", "samples");
    for &(index, count) in hot_buckets.iter().take(8) {
        let (start, end) = profile.bucket_range(index);
        println!(
            "{:>5}..{:<5} {count:>8}",
            start - base as u64,
            end - base as u64
        );
    }
    let stats = profile.stats();
    println!(
        "counted {}, outside {}, lost {}, throttled {}",
        stats.counted, stats.outside, stats.lost, stats.throttled
    );
    if stats.counted == 0 {
        eprintln!("no sample was counted");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
