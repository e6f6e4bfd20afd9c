//! The sampler's promises about the library's own threads, its intervals, and the sources the kernel samples in
//! its own code (docs/api.md section 8, docs/linux-mapping.md):
//!
//! - a sampler of the calling process never samples the library's consumer and jitter threads, also when it is
//!   built before a profile starts them;
//! - `.interval(0)` is the source's current interval, as the C configuration's `Interval` 0;
//! - context switches count where the thread blocked: at the user address where it entered the kernel (the
//!   libc call that sleeps), in NT profiles and in the sampler alike; a caller who may not sample the kernel is
//!   refused such a source with `STATUS_PRIVILEGE_NOT_HELD`, and the source listing says so.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use ntprofile::{NtStatus, Profile, ProfileSource, SampleRecord, Sampler, Support};

fn gettid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

/// The threads of this process whose name is one of the library's (`ntprofile-consumer`, `ntprofile-jitter`,
/// cut to 15 bytes by the kernel).
fn library_tids() -> BTreeSet<u32> {
    let mut tids = BTreeSet::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("read /proc/self/task") {
        let entry = entry.expect("task entry");
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.starts_with("ntprofile-") {
            if let Ok(tid) = entry.file_name().to_string_lossy().parse() {
                tids.insert(tid);
            }
        }
    }
    tids
}

fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    let mut x = 1u64;
    while Instant::now() < end {
        for _ in 0..1000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
}

/// A sampler of the calling process built while no profile runs (so the library has no thread yet), then a
/// started profile, whose consumer drains a fast stream and whose jitter thread redraws its periods: none of
/// the sampler's samples may come from those threads.
#[test]
fn the_library_threads_are_never_sampled() {
    let _serial = common::serial();
    let source = ProfileSource::Time;
    let before = ntprofile::query_interval(source);
    let mut sampler = Sampler::builder()
        .interval(source.min_interval().max(200))
        .build()
        .expect("sampler of this process");
    sampler.enable().expect("enable");
    // The profile's stream: the fastest timer over this process's whole user space, with jitter.
    assert!(ntprofile::set_interval(source, source.min_interval().max(200)) > 0);
    ntprofile::set_jitter(source, 50).expect("jitter");
    let profile = Profile::builder()
        .range(0x1000, 0x7fff_ffff_0000)
        .bucket_size(31)
        .source(source)
        .build()
        .expect("profile");
    profile.start().expect("start");
    let library = library_tids();
    assert!(
        !library.is_empty(),
        "a started profile runs the library's threads"
    );
    let me = gettid();
    let (mut mine, mut theirs, mut samples) = (0u64, 0u64, 0u64);
    let end = Instant::now() + Duration::from_millis(800);
    while Instant::now() < end {
        spin_for(Duration::from_millis(20));
        sampler
            .read(|r| {
                if let SampleRecord::Sample(s) = r {
                    samples += 1;
                    if s.tid == me {
                        mine += 1;
                    }
                    if library.contains(&s.tid) {
                        theirs += 1;
                    }
                }
            })
            .expect("read");
    }
    profile.stop().expect("stop");
    sampler.disable().expect("disable");
    sampler
        .read(|r| {
            if let SampleRecord::Sample(s) = r {
                samples += 1;
                theirs += u64::from(library.contains(&s.tid));
            }
        })
        .expect("read");
    ntprofile::set_jitter(source, 0).expect("jitter off");
    ntprofile::set_interval(source, before);
    let stats = sampler.stats();
    println!(
        "library threads {library:?}: {theirs} of {samples} samples; this thread {mine}; profile {:?}; sampler {stats:?}",
        profile.stats()
    );
    assert!(
        mine >= 100,
        "the sampler samples this thread: {mine} samples"
    );
    assert!(
        profile.stats().counted >= 100,
        "the profile's consumer had work to do"
    );
    assert_eq!(
        theirs, 0,
        "samples of the library's consumer and jitter threads"
    );
    assert_eq!(stats.samples, samples, "every sample delivered is counted");
}

/// `.interval(0)` is the source's current interval (as `Interval` 0 in C), not the fastest one.
#[test]
fn interval_zero_means_the_current_interval() {
    let _serial = common::serial();
    let source = ProfileSource::TaskClock;
    let before = ntprofile::query_interval(source);
    let current = ntprofile::set_interval(source, 5000);
    assert_eq!(current, 5000);
    let sampler = Sampler::builder()
        .source(source)
        .interval(0)
        .build()
        .expect("build");
    ntprofile::set_interval(source, before);
    assert_eq!(
        sampler.interval(),
        5000,
        "Interval 0 is the current interval"
    );
}

/// The executable mapping of libc in this process: (start, length).
fn libc_text() -> (u64, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let path = line.split_whitespace().nth(5).unwrap_or("");
        if perms.starts_with("r-x") && path.contains("/libc.so") {
            let (lo, hi) = range.split_once('-').unwrap();
            let lo = u64::from_str_radix(lo, 16).unwrap();
            let hi = u64::from_str_radix(hi, 16).unwrap();
            return (lo, hi - lo);
        }
    }
    panic!("no executable libc mapping in /proc/self/maps");
}

/// The dynamic symbol nearest below `addr` (`dladdr`), or "?".
fn symbol_at(addr: u64) -> String {
    // SAFETY: dladdr only reads the loader's tables; `info` is a zeroed out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; any address may be asked about.
    let found = unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_sname.is_null() {
        return "?".into();
    }
    // SAFETY: dladdr returned a NUL-terminated name of the loader's, alive while libc is loaded.
    unsafe { std::ffi::CStr::from_ptr(info.dli_sname) }
        .to_string_lossy()
        .into_owned()
}

/// 100 voluntary context switches of this thread: 1 ms sleeps.
fn sleep_100_times() {
    for _ in 0..100 {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: nanosleep reads the timespec on our stack; the remainder pointer may be NULL.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
}

/// With the privilege to sample the kernel (root here), 100 sleeps of this thread give ~100 context-switch
/// samples at the libc call that sleeps: in a profile of the whole user space (none outside), in a profile of
/// libc (its hottest bucket in the nanosleep code), and in a sampler (user ip, user registers present).
#[test]
fn context_switches_count_where_the_thread_blocked() {
    let _serial = common::serial();
    let source = ProfileSource::ContextSwitches;
    if !nix::unistd::geteuid().is_root() {
        // `Support::NeedsKernelPrivilege`, named by its Debug form.
        assert_eq!(format!("{:?}", source.support()), "NeedsKernelPrivilege");
        common::skip("needs root to count context switches (only the refusal was checked)");
        return;
    }
    assert_eq!(source.support(), Support::Supported);
    let before = ntprofile::query_interval(source);
    assert_eq!(ntprofile::set_interval(source, 1), 1);
    let whole = Profile::builder()
        .range(0x1000, 0x7fff_ffff_0000)
        .bucket_size(31)
        .source(source)
        .build()
        .expect("profile of the user space");
    let (libc_base, libc_len) = libc_text();
    let in_libc = Profile::builder()
        .range(libc_base as usize, libc_len as usize)
        .bucket_size(4)
        .source(source)
        .build()
        .expect("profile of libc");
    let mut sampler = Sampler::builder()
        .source(source)
        .interval(1)
        .callchain(16)
        .build()
        .expect("sampler");
    whole.start().expect("start");
    in_libc.start().expect("start");
    sampler.enable().expect("enable");
    sleep_100_times();
    sampler.disable().expect("disable");
    in_libc.stop().expect("stop");
    whole.stop().expect("stop");
    ntprofile::set_interval(source, before);

    let me = gettid();
    let (mut mine, mut at_user, mut with_regs, mut in_nanosleep) = (0u64, 0u64, 0u64, 0u64);
    let mut kernel = 0u64;
    sampler
        .read(|r| {
            if let SampleRecord::Sample(s) = r {
                kernel += u64::from(s.kernel);
                if s.tid != me {
                    return;
                }
                mine += 1;
                at_user += u64::from(!s.kernel && s.ip < 0x8000_0000_0000);
                if let Some(regs) = s.regs {
                    with_regs += u64::from(regs.ip == s.ip);
                }
                in_nanosleep += u64::from(symbol_at(s.ip).contains("nanosleep"));
            }
        })
        .expect("read");
    let ws = whole.stats();
    let ls = in_libc.stats();
    let counts = in_libc.counts();
    let (hot, hot_count) = counts
        .iter()
        .enumerate()
        .max_by_key(|(_, c)| **c)
        .map(|(i, c)| (libc_base + (i as u64) * 16, *c))
        .unwrap();
    let hot_symbol = symbol_at(hot);
    println!(
        "whole user space: {ws:?}; libc: {ls:?}, hottest bucket {hot:#x} ({hot_symbol}) {hot_count}; \
         sampler: {mine} of this thread, {at_user} at a user ip, {with_regs} with its registers, \
         {in_nanosleep} in nanosleep code, {kernel} at a kernel ip"
    );
    assert!(
        (95..=160).contains(&ws.counted),
        "the whole user space counts the 100 switches: {ws:?}"
    );
    assert_eq!(
        ws.outside, 0,
        "no switch of a user thread is outside the user space"
    );
    assert!(
        ls.counted >= 95,
        "the switches count in libc, where the thread called the kernel: {ls:?}"
    );
    assert!(
        hot_symbol.contains("nanosleep") && u64::from(hot_count) >= 90,
        "the hottest libc bucket is the nanosleep call: {hot:#x} {hot_symbol} {hot_count}"
    );
    assert!(
        (95..=160).contains(&mine),
        "the sampler's samples of this thread: {mine}"
    );
    assert_eq!(at_user, mine, "each at a user address");
    assert_eq!(
        with_regs, mine,
        "each with the user registers, ip == regs.ip"
    );
    assert!(in_nanosleep >= 90, "in the nanosleep code: {in_nanosleep}");
    assert_eq!(kernel, 0, "no kernel address in a user-space sampler");
}

/// Without the privilege to sample the kernel (dropped with setpriv), a context-switch source is refused with
/// `STATUS_PRIVILEGE_NOT_HELD` by NT profiles and by the sampler, and the listing says why.
#[test]
fn an_unprivileged_caller_is_refused_kernel_sampled_sources() {
    let _serial = common::serial();
    if paranoid() <= 1 {
        return; // every caller may sample the kernel here: nothing to refuse
    }
    let scratch = std::env::temp_dir().join(format!("ntp-sampler-checks-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let helper = scratch.join("helper");
    std::fs::copy(std::env::current_exe().expect("current_exe"), &helper).expect("copy");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut command = common::unprivileged_command(&helper);
    command
        .args([
            "--exact",
            "unprivileged_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(&scratch)
        .env("NTPROFILE_CHECKS_HELPER", "1");
    let (stdout, _, r) = common::run_helper_process(command);
    let _ = std::fs::remove_dir_all(&scratch);
    println!("{stdout}");
    let get = |k: &str| {
        r.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: {r:?}"))
    };
    let denied = format!("{:#010x}", NtStatus::PRIVILEGE_NOT_HELD.as_u32());
    for source in ["ContextSwitches", "CpuMigrations"] {
        assert_eq!(
            get(&format!("{source}.profile")),
            denied,
            "{source}: Profile"
        );
        assert_eq!(
            get(&format!("{source}.sampler")),
            denied,
            "{source}: Sampler"
        );
        assert_eq!(
            get(&format!("{source}.support")),
            "NeedsKernelPrivilege",
            "{source}: listing"
        );
    }
    assert_eq!(get("Time.profile"), "0x00000000", "the timer stays allowed");
}

fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The helper's side of [`an_unprivileged_caller_is_refused_kernel_sampled_sources`]: runs only re-executed.
#[test]
#[ignore = "a helper process of an_unprivileged_caller_is_refused_kernel_sampled_sources"]
fn unprivileged_helper() {
    if std::env::var("NTPROFILE_CHECKS_HELPER").as_deref() != Ok("1") {
        return;
    }
    let code = |e: Option<ntprofile::Error>| match e {
        None => "0x00000000".to_string(),
        Some(e) => {
            println!("{e}");
            format!("{:#010x}", e.status().as_u32())
        }
    };
    for (name, source) in [
        ("ContextSwitches", ProfileSource::ContextSwitches),
        ("CpuMigrations", ProfileSource::CpuMigrations),
        ("Time", ProfileSource::Time),
    ] {
        let profile = Profile::builder()
            .range(0x1000, 0x7fff_ffff_0000)
            .bucket_size(31)
            .source(source)
            .build();
        println!("RESULT {name}.profile {}", code(profile.err()));
        let sampler = Sampler::builder().source(source).build();
        println!("RESULT {name}.sampler {}", code(sampler.err()));
        let listed = ntprofile::list_sources()
            .into_iter()
            .find(|s| s.source == source)
            .expect("listed");
        println!("RESULT {name}.support {:?}", listed.support);
        println!("{name}: {}", listed.support.reason());
    }
}
