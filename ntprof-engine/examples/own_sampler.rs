//! Drive `ntprofile::Sampler` yourself, and let the engine unwind and name its samples.
//!
//! Samples this process with copies of the user stack while a worker thread spends twice as long in `work_a` as
//! in `work_b` (both reached through `outer`), unwinds each sample with the engine's DWARF unwinder, names every
//! frame, and prints the shares of the two functions and the hottest call stacks.
//!
//! `cargo run --release -p ntprof-engine --example own_sampler`

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use ntprof_engine::symbols::{Mapping, ProcessSymbolizer};
use ntprof_engine::unwind::{ProcessUnwinder, UnwindFiles};
use ntprofile::{SampleRecord, Sampler};

/// Burn CPU for `ms` milliseconds.
#[inline(never)]
fn spin(ms: u64) -> u64 {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut x = 1u64;
    while Instant::now() < end {
        for i in 0..1000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

#[inline(never)]
fn work_a() -> u64 {
    black_box(spin(20))
}

#[inline(never)]
fn work_b() -> u64 {
    black_box(spin(10))
}

#[inline(never)]
fn outer(rounds: u32) -> u64 {
    (0..rounds)
        .map(|_| work_a() ^ work_b())
        .fold(0, |a, b| black_box(a ^ b))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sampler = Sampler::builder()
        .current_process()
        .user_stack(16 * 1024)
        .build()?;
    // The mappings the process has now; the sampler reports those made later (Mmap records).
    let mut names = ProcessSymbolizer::of_pid(std::process::id())?;
    let mut unwinder = ProcessUnwinder::new();
    let mut files = UnwindFiles::default();
    for m in names.mappings() {
        unwinder.add_mapping(&mut files, m.start, m.end, m.offset, &m.path);
    }

    sampler.enable()?;
    let worker = std::thread::spawn(|| outer(50));
    let (mut stacks, mut truncated) = (HashMap::<Vec<u64>, u64>::new(), 0);
    loop {
        let finished = worker.is_finished();
        sampler.wait(Duration::from_millis(50))?;
        sampler.read(|record| match record {
            SampleRecord::Sample(s) => {
                if let Some(regs) = s.regs {
                    let mut pcs = Vec::new();
                    truncated += u64::from(unwinder.unwind(regs, s.stack, &mut pcs));
                    *stacks.entry(pcs).or_default() += 1;
                }
            }
            SampleRecord::Mmap(m) => {
                let path = String::from_utf8_lossy(m.filename).into_owned();
                let (start, end) = (m.addr, m.addr + m.len);
                unwinder.add_mapping(&mut files, start, end, m.pgoff, &path);
                names.add(Mapping {
                    start,
                    end,
                    perms: "r-xp".into(),
                    offset: m.pgoff,
                    path,
                });
            }
            _ => {}
        })?;
        if finished {
            break;
        }
    }
    let _ = worker.join();

    // Name each stack: the first address is the sampled instruction, the others return addresses (address - 1).
    let mut named: HashMap<String, u64> = HashMap::new();
    let (mut total, mut in_a, mut in_b) = (0, 0, 0);
    for (pcs, n) in &stacks {
        let functions: Vec<String> = pcs
            .iter()
            .enumerate()
            .map(|(i, &pc)| names.function(if i == 0 { pc } else { pc - 1 }))
            .collect();
        total += n;
        in_a += n * u64::from(functions.iter().any(|f| f.ends_with("work_a")));
        in_b += n * u64::from(functions.iter().any(|f| f.ends_with("work_b")));
        let path: Vec<&str> = functions.iter().take(4).map(String::as_str).collect();
        *named.entry(path.join(" <- ")).or_default() += n;
    }
    let share = |n: u64| 100.0 * n as f64 / total.max(1) as f64;
    println!(
        "{total} samples unwound ({truncated} truncated), {} distinct stacks",
        stacks.len()
    );
    println!(
        "work_a {:.1}% (designed 66.7% of the worker), work_b {:.1}% (33.3%)",
        share(in_a),
        share(in_b)
    );
    let mut hottest: Vec<(String, u64)> = named.into_iter().collect();
    hottest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (stack, n) in hottest.iter().take(5) {
        println!("{n:6} {:5.1}%  {stack}", share(*n));
    }
    Ok(())
}
