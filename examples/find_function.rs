//! Profile what you find by name: (i) a function of this program, its exact range from the symbol table
//! (`find_function`), and (ii) a shared library, libm, its executable mapping (`find_module`), while calling
//! into it.
//!
//! (i) Two profiles run at once while `hot` spins: one over exactly the function (4-byte buckets), one over the
//! program's whole code (16-byte buckets), which shows where the program's samples went: into `hot`'s buckets
//! and (nearly) nowhere else. (ii) A profile over libm's code while the program calls `tgamma`.
//!
//! `cargo run --release --example find_function`. Exits with status 1 unless (i) counted samples with at most
//! 2 % of the program's samples outside the function's buckets, and (ii) most samples landed in libm.

use std::hint::black_box;
use std::process::ExitCode;

use ntprofile::{Error, Profile, find_function, find_module, modules, set_interval};

#[link(name = "m")]
unsafe extern "C" {
    /// libm's gamma function: a real library call with some work in it.
    safe fn tgamma(x: f64) -> f64;
}

/// The function profiled by name (found as `find_function::hot`: the crate's name, then the function's).
#[inline(never)]
fn hot(mut x: u64, n: u64) -> u64 {
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// This thread's CPU time in nanoseconds.
fn cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("the thread's CPU clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Samples in the buckets of `profile` that overlap `[start, end)`, and in the others.
fn split(profile: &Profile, start: u64, end: u64) -> (u64, u64) {
    let (mut inside, mut elsewhere) = (0, 0);
    for (i, &count) in profile.counts().iter().enumerate() {
        let (lo, hi) = profile.bucket_range(i);
        if hi > start && lo < end {
            inside += u64::from(count);
        } else {
            elsewhere += u64::from(count);
        }
    }
    (inside, elsewhere)
}

fn run() -> Result<bool, Error> {
    // A sample every 100 µs of CPU time.
    set_interval(ntprofile::ProfileSource::Time, 1000);

    // (i) The function, by name, and the program's code around it.
    let function = find_function(None, None, "find_function::hot")?;
    let program = modules(None)?
        .into_iter()
        .find(|m| m.contains(function.address))
        .expect("the function is in one of the program's mappings");
    println!(
        "hot ({}) at {:#x}, {} bytes, in {} [{:#x}, +{:#x})",
        function.name, function.address, function.size, program.name, program.base, program.size
    );
    let exact = Profile::builder()
        .function(&function)
        .bucket_size(2)
        .build()?;
    let around = Profile::builder().module(&program).bucket_size(4).build()?;
    exact.start()?;
    around.start()?;
    let start = cpu_ns();
    let mut x = 1;
    while cpu_ns() - start < 300_000_000 {
        x = hot(black_box(x | 1), 200_000);
    }
    black_box(x);
    around.stop()?;
    exact.stop()?;
    let stats = exact.stats();
    let (inside, elsewhere) = split(&around, function.address, function.end());
    println!(
        "function: hot {} counted in its own profile ({} outside it); in the program's code {inside} in hot's \
         buckets, {elsewhere} elsewhere",
        stats.counted, stats.outside
    );
    let function_ok = stats.counted > 0 && inside > 0 && elsewhere * 50 <= inside;

    // (ii) libm, by name, while calling into it.
    let libm = find_module(None, "libm.so.6")?;
    let library = Profile::builder().module(&libm).bucket_size(6).build()?;
    library.start()?;
    let start = cpu_ns();
    let mut sum = 0.0;
    while cpu_ns() - start < 300_000_000 {
        for i in 0..1000 {
            sum += tgamma(black_box(2.5 + f64::from(i) * 1e-3));
        }
    }
    black_box(sum);
    library.stop()?;
    let stats = library.stats();
    println!(
        "library: {} [{:#x}, +{:#x}) {} counted in libm, {} outside it (the calling loop)",
        libm.path.display(),
        libm.base,
        libm.size,
        stats.counted,
        stats.outside
    );
    let library_ok = stats.counted > 0 && stats.counted >= 2 * stats.outside;
    Ok(function_ok && library_ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAILED");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("find_function: {e}");
            ExitCode::FAILURE
        }
    }
}
