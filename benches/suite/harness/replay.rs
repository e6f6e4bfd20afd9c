//! The consumer's hot path replayed: real (or synthesized) sample IPs fed through the unstable replay entry point,
//! timed in this process and counted in instructions under callgrind (the suite binary's child mode).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::stats::{fmt_ns, spread};

/// The replay configurations: (profiles, overlapping).
pub const REPLAY_CASES: [(usize, bool); 5] = [
    (1, true),
    (10, true),
    (10, false),
    (1000, true),
    (1000, false),
];

/// The replay's profile ranges (shared with `benches/replay.rs`).
#[path = "../replay_ranges.rs"]
mod replay_ranges;
pub use replay_ranges::replay_ranges;

#[inline(never)]
pub(super) fn replay_spin(n: u64) -> u64 {
    let mut x = 1u64;
    for i in 0..n {
        x = x.rotate_left(5) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x = std::hint::black_box(x);
    }
    x
}

/// Record about `samples` real samples of this thread (every 20 µs of CPU); synthetic IPs over a 256-byte
/// function when perf events are unavailable. Returns the IPs.
pub fn record_ips(samples: u64) -> (Vec<u64>, bool) {
    use ntprofile::engine::replay::Recording;
    let pages = ((samples * 16).div_ceil(4096) * 2).next_power_of_two() as usize;
    let mut ips = Vec::new();
    let mut real = false;
    for _ in 0..20 {
        let Ok(rec) = Recording::record(20_000, pages, || {
            std::hint::black_box(replay_spin(20_000_000));
        }) else {
            break;
        };
        real = true;
        ips.extend(rec.ips());
        if ips.len() as u64 >= samples {
            break;
        }
    }
    // Keep the samples of the spinning function's neighbourhood (a few land in the C library or the loader: a
    // range over them all would span gigabytes).
    let f = replay_spin as *const () as u64;
    ips.retain(|&ip| ip.wrapping_sub(f) < 4096);
    if ips.is_empty() {
        real = false;
        ips = (0..samples).map(|i| f + (i * 4) % 256).collect();
    }
    ips.truncate(samples as usize);
    (ips, real)
}

/// Child mode of the suite binary under callgrind: replay `ips` through `n` profiles `repeats` times.
pub fn replay_child(ips_file: &Path, n: usize, overlapping: bool, repeats: u32) {
    use ntprofile::engine::replay::{Recording, Replay};
    let text = std::fs::read_to_string(ips_file).expect("ips file");
    let ips: Vec<u64> = text
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let rec = Recording::from_ips(&ips);
    let mut r = Replay::new(&rec, &replay_ranges(&ips, n, overlapping)).expect("replay");
    let mut total = 0;
    for _ in 0..repeats {
        total += r.run();
    }
    assert_eq!(total, ips.len() as u64 * u64::from(repeats));
}

pub(super) fn callgrind_ir(exe: &Path, args: &[String], dir: &Path) -> Option<f64> {
    let mut file = std::ffi::OsString::from("--callgrind-out-file=");
    file.push(dir.join("callgrind.out"));
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(file)
        .arg(exe)
        .args(args)
        .output()
        .ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!(
            "callgrind {args:?}: {}\n{}",
            out.status,
            err.lines().rev().take(12).collect::<Vec<_>>().join("\n")
        );
        return None;
    }
    err.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
}

/// ns per sample (timed in-process, median of rounds) and instructions per sample (callgrind: the difference
/// between 3 and 1 replays of the recording, so that setup cancels) for every replay case. Returns Markdown.
pub fn replay_section(samples: u64) -> String {
    use ntprofile::engine::replay::{Recording, Replay};
    let (ips, real) = record_ips(samples);
    let dir = std::env::temp_dir().join(format!("ntprofile-suite-replay-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let ips_file = dir.join("ips.txt");
    let _ = std::fs::write(
        &ips_file,
        ips.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let exe = std::env::current_exe().ok();
    let have_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut s = format!(
        "{} samples {}, fed through the consumer's drain (decode → match → increment, statistics) by the \
         unstable replay entry point (`ntprofile::engine::replay`). Time: median (min–max) of 15 timed replays \
         in this process; instructions: `valgrind --tool=callgrind`, (3 replays − 1 replay) ÷ 2 ÷ samples.\n\n\
         | started profiles | ranges | ns / sample | instructions / sample |\n|---|---|---|---|\n",
        ips.len(),
        if real {
            "recorded from a real ring (cpu-clock, one every 20 µs of a spinning thread)"
        } else {
            "synthesized (perf events unavailable)"
        }
    );
    let rec = Recording::from_ips(&ips);
    for (n, overlapping) in REPLAY_CASES {
        let mut r = Replay::new(&rec, &replay_ranges(&ips, n, overlapping)).expect("replay");
        let reps = if n >= 1000 && overlapping { 3 } else { 15 };
        let times: Vec<f64> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(r.run());
                t.elapsed().as_nanos() as f64 / ips.len() as f64
            })
            .collect();
        let instr = match (&exe, have_valgrind) {
            (Some(exe), true) => {
                let a = |reps: u32| {
                    vec![
                        "--replay-child".to_string(),
                        ips_file.to_string_lossy().into_owned(),
                        n.to_string(),
                        overlapping.to_string(),
                        reps.to_string(),
                    ]
                };
                match (
                    callgrind_ir(exe, &a(1), &dir),
                    callgrind_ir(exe, &a(3), &dir),
                ) {
                    (Some(one), Some(three)) => {
                        format!("{:.1}", (three - one) / 2.0 / ips.len() as f64)
                    }
                    _ => "callgrind failed".into(),
                }
            }
            _ => "valgrind not installed".into(),
        };
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {instr} |",
            if overlapping {
                "overlapping"
            } else {
                "disjoint"
            },
            fmt_ns(spread(times))
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    s
}
