//! The consumer's throughput in each event layout: `BUSY` spinning threads (and `PARKED` blocked ones) profiled
//! at `HZ` samples per CPU-second for `SECS` seconds; prints the samples counted per second of wall time, the
//! samples lost and the layout (BENCHMARKS.md, "Many threads"). `NTPROFILE_EVENTS=per-thread` or
//! `thread-cpu` chooses the layout. `cargo run --release --example consumer_rate -- BUSY PARKED HZ SECS`.
//! With `--sampler`, a sampler of the calling process read as a recorder reads it (wait, read) instead: the
//! samples delivered per second, the lost ones and the reader's CPU time per sample.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ntprofile::{Profile, ProfileSource, SampleRecord, Sampler};

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let sampler = std::env::args().any(|a| a == "--sampler");
    let (busy, parked, hz, secs) = (arg(1, 2), arg(2, 0), arg(3, 10_000), arg(4, 2));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..busy + parked)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if i < busy {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    } else {
                        std::thread::park();
                    }
                }
            })
        })
        .collect();
    // The interval is in 100 ns units.
    ntprofile::set_interval(ProfileSource::Time, (10_000_000 / hz.max(1)) as u32);
    if sampler {
        read_sampler(busy, parked, hz, secs);
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.thread().unpark();
            let _ = t.join();
        }
        return;
    }
    let profile = Profile::builder()
        .range(0x1000, 0x7fff_ffff_0000)
        .bucket_size(31)
        .source(ProfileSource::Time)
        .build()
        .expect("create");
    profile.start().expect("start");
    let usage = profile.event_usage().expect("started");
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    profile.stop().expect("stop");
    let wall = t.elapsed().as_secs_f64();
    let s = profile.stats();
    println!(
        "layout {} ({} rings): {busy} busy + {parked} parked threads at {hz} Hz: {} samples in {wall:.2} s = {:.0} \
         samples/s, {} lost, {} throttle events",
        usage.mode.name(),
        usage.rings,
        s.counted + s.outside,
        (s.counted + s.outside) as f64 / wall,
        s.lost,
        s.throttled
    );
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.thread().unpark();
        let _ = t.join();
    }
}

/// CPU time of the calling thread (ns).
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// A sampler of this process, read by this thread (wait, read) for `secs` seconds.
fn read_sampler(busy: u64, parked: u64, hz: u64, secs: u64) {
    let mut sampler = Sampler::builder()
        .source(ProfileSource::Time)
        .interval((10_000_000 / hz.max(1)) as u32)
        .build()
        .expect("build");
    let usage = sampler.event_usage();
    sampler.enable().expect("enable");
    let (mut samples, mut lost) = (0u64, 0u64);
    let mut record = |r: &SampleRecord<'_>| match r {
        SampleRecord::Sample(_) => samples += 1,
        SampleRecord::Lost { lost: n, .. } => lost += n,
        _ => {}
    };
    let cpu0 = thread_cpu_ns();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        sampler.wait(Duration::from_millis(100)).expect("wait");
        sampler.read(&mut record).expect("read");
    }
    sampler.disable().expect("disable");
    sampler.read(&mut record).expect("read");
    let wall = t.elapsed().as_secs_f64();
    let cpu = thread_cpu_ns() - cpu0;
    println!(
        "sampler layout {} ({} rings): {busy} busy + {parked} parked threads at {hz} Hz: {samples} samples in \
         {wall:.2} s = {:.0} samples/s, {lost} lost, reader {:.0} ns of CPU per sample",
        usage.mode.name(),
        usage.rings,
        samples as f64 / wall,
        cpu as f64 / samples.max(1) as f64
    );
}
