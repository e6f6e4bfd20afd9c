//! The consumer's throughput in each event layout: `BUSY` spinning threads (and `PARKED` blocked ones) profiled
//! at `HZ` samples per CPU-second for `SECS` seconds; prints the samples counted per second of wall time, the
//! samples lost and the layout (BENCHMARKS.md, "Many threads"). `NTPROFILE_EVENTS=per-thread` or
//! `thread-cpu` chooses the layout. `cargo run --release --example consumer_rate -- BUSY PARKED HZ SECS`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ntprofile::{Profile, ProfileSource};

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
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
