//! The consumer's hot path (decode → match → increment) on recorded ring contents, with 1, 10 and 1000 started
//! profiles whose ranges overlap (every sample lands in every profile) or are disjoint (every sample lands in at
//! most one). Reports time per replay of the whole recording; criterion's throughput line gives samples per
//! second (ns per sample = 10^9 ÷ that).
//!
//! Run: `cargo bench --bench replay`. Instruction counts of the same path (load-independent) are in
//! `BENCHMARKS.md`, from `cargo bench --bench suite`, which runs the replay under `valgrind --tool=callgrind`.
//!
//! Uses `ntprofile::engine::replay`, an unstable entry point that exists for benchmarks only.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ntprofile::engine::replay::{Recording, Replay};

/// Four hot functions of different sizes, so that the recording's IPs spread over a few hundred bytes.
#[inline(never)]
fn spin_a(n: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..n {
        x = x.rotate_left(5) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    x
}

#[inline(never)]
fn spin_b(n: u64) -> u64 {
    let mut x = 3u64;
    for i in 0..n {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i) ^ (x >> 29);
    }
    x
}

/// Record about 10,000 samples of this thread running the two functions (one every 20 µs of CPU).
fn recording() -> Recording {
    match Recording::record(20_000, 256, || {
        let mut s = 0u64;
        for _ in 0..40 {
            s ^= spin_a(2_000_000) ^ spin_b(1_500_000);
        }
        std::hint::black_box(s);
    }) {
        Ok(r) if !r.is_empty() => r,
        // No perf events here: the same number of samples over the two functions' addresses.
        _ => {
            let (a, b) = (spin_a as *const () as u64, spin_b as *const () as u64);
            let ips: Vec<u64> = (0..10_000u64)
                .map(|i| {
                    if i % 3 == 0 {
                        b + (i * 4) % 64
                    } else {
                        a + (i * 4) % 64
                    }
                })
                .collect();
            Recording::from_ips(&ips)
        }
    }
}

#[path = "suite/replay_ranges.rs"]
mod replay_ranges;
use replay_ranges::replay_ranges as ranges;

fn bench(c: &mut Criterion) {
    let rec = recording();
    // Keep the two functions' neighbourhood (a sample in the C library would stretch the ranges to gigabytes).
    let a = spin_a as *const () as u64;
    let ips: Vec<u64> = rec
        .ips()
        .into_iter()
        .filter(|ip| ip.abs_diff(a) < 1 << 16)
        .collect();
    let rec = Recording::from_ips(&ips);
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(ips.len() as u64));
    for (n, overlapping) in [
        (1, true),
        (10, true),
        (10, false),
        (1000, true),
        (1000, false),
    ] {
        let mut replay = Replay::new(&rec, &ranges(&ips, n, overlapping)).expect("replay");
        let kind = if overlapping {
            "overlapping"
        } else {
            "disjoint"
        };
        g.bench_function(BenchmarkId::new(format!("{n} profiles"), kind), |b| {
            b.iter(|| replay.run())
        });
        // Every sample was matched: counted + outside = samples, per profile.
        let stats = replay.stats();
        assert!(stats.iter().all(|s| s.counted + s.outside > 0));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
