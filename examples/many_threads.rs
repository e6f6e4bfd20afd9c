//! Start cost against thread count: spawns N parked threads, then creates and starts a profile of the calling
//! process and prints the descriptors it holds and the time `start` and `stop` took (the figures of
//! BENCHMARKS.md's "Many threads" section). `cargo run --release --example many_threads -- 1 16 64 256`.
//! With `--sampler`, a sampler of the calling process instead: the time its build took (it opens the
//! events) and the time dropping it took (it closes them).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use ntprofile::{Profile, ProfileSource, Sampler};

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn main() {
    let sampler = std::env::args().any(|a| a == "--sampler");
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![1, 16, 64, 256]
    } else {
        counts
    };
    println!("threads\tdescriptors\tstart_ms\tstop_ms\tmode");
    for n in counts {
        // n - 1 parked threads beside this one: n threads in all.
        let gate = Arc::new(Barrier::new(n));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let parked: Vec<_> = (1..n)
            .map(|_| {
                let (gate, stop) = (gate.clone(), stop.clone());
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        gate.wait();
                        while !stop.load(std::sync::atomic::Ordering::Acquire) {
                            std::thread::park();
                        }
                    })
                    .expect("spawn")
            })
            .collect();
        gate.wait();
        if sampler {
            measure_sampler(n);
        } else {
            measure_profile(n);
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
        for p in parked {
            p.thread().unpark();
            let _ = p.join();
        }
    }
}

/// A sampler of this process (of `n` threads): build, then drop.
fn measure_sampler(n: usize) {
    let before = open_descriptors();
    let t = Instant::now();
    let built = Sampler::builder().source(ProfileSource::Time).build();
    let start_ms = t.elapsed().as_secs_f64() * 1e3;
    match built {
        Ok(s) => {
            let held = open_descriptors().saturating_sub(before);
            let u = s.event_usage();
            let t = Instant::now();
            drop(s);
            let stop_ms = t.elapsed().as_secs_f64() * 1e3;
            println!(
                "{n}\t{held}\t{start_ms:.1}\t{stop_ms:.1}\t{} ({} rings, {} KiB)",
                u.mode.name(),
                u.rings,
                u.ring_bytes / 1024
            );
        }
        Err(e) => println!("{n}\t-\t{start_ms:.1}\t-\t{e}"),
    }
}

/// A profile of this process (of `n` threads): create, start, stop.
fn measure_profile(n: usize) {
    {
        let profile = Profile::builder()
            .range(0x1000, 0x1000)
            .source(ProfileSource::Time)
            .build()
            .expect("create");
        let before = open_descriptors();
        let t = Instant::now();
        let started = profile.start();
        let start_ms = t.elapsed().as_secs_f64() * 1e3;
        let held = open_descriptors().saturating_sub(before);
        let mode = profile
            .event_usage()
            .map(|u| {
                format!(
                    "{} ({} rings, {} KiB)",
                    u.mode.name(),
                    u.rings,
                    u.ring_bytes / 1024
                )
            })
            .unwrap_or_default();
        let t = Instant::now();
        let stop_ms = match &started {
            Ok(()) => {
                profile.stop().expect("stop");
                t.elapsed().as_secs_f64() * 1e3
            }
            Err(e) => {
                println!("{n}\t-\t{start_ms:.1}\t-\t{e}");
                f64::NAN
            }
        };
        if started.is_ok() {
            println!("{n}\t{held}\t{start_ms:.1}\t{stop_ms:.1}\t{mode}");
        }
    }
}
