use ntprofile::{Process, Profile, ProfileSource, find_function, find_module};

#[inline(never)]
fn hot(n: u64) -> u64 {
    (0..n).fold(1, |x, i| {
        (x ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
    })
}

fn main() -> Result<(), ntprofile::Error> {
    ntprofile::set_interval(ProfileSource::Time, 1000); // NtSetIntervalProfile: a sample per 100 µs of CPU

    // The exact range of a function, from the symbol table (a C name, or a Rust path without its hash).
    let function = find_function(None, None, concat!(module_path!(), "::hot"))?;
    let profile = Profile::builder()
        .function(&function) // [address, address + size)
        .bucket_size(2) // 4-byte buckets
        .source(ProfileSource::Time)
        .build()?; // NtCreateProfile: created stopped, owns zeroed counters
    profile.start()?;
    std::hint::black_box(hot(std::hint::black_box(50_000_000)));
    profile.stop()?; // a barrier; dropping a started profile also stops it
    let counts: Vec<u32> = profile.counts(); // one per 4-byte bucket of hot()
    let stats = profile.stats(); // counted, outside, lost, throttled
    println!(
        "{} samples in {} buckets of hot(): {stats:?}",
        counts.iter().sum::<u32>(),
        counts.len()
    );

    // A shared library by name: its executable mapping, as GetModuleInformation gives it on Windows.
    let libc = find_module(None, "libc.so.6")?;
    let _whole_libc = Profile::builder().module(&libc).bucket_size(8).build()?;

    // Another process by pid (NtOpenProcess), every process (Process = NULL: needs CAP_PERFMON), processors as
    // GROUP_AFFINITY records (NtCreateProfileEx): .process(&Process::open(pid)?), .global(), .group_affinity(..).
    let me = Process::open(std::process::id())?;
    let _other = Profile::builder().process(&me).module(&libc).build()?;
    Ok(())
}
