//! Bad input, missing privilege, exited targets, accounting, leaks and fork().

use std::os::unix::fs::PermissionsExt;

use super::*;

fn status_of(result: Result<Sampler, ntprofile::Error>) -> NtStatus {
    match result {
        Ok(s) => panic!("built a sampler: {s:?}"),
        Err(e) => {
            println!("{e}");
            assert!(!e.detail().is_empty(), "an error without a sentence");
            e.status()
        }
    }
}

/// Arguments the builder refuses, each with its status.
#[test]
fn bad_arguments_get_their_status() {
    let b = Sampler::builder;
    let invalid = NtStatus::INVALID_PARAMETER;
    assert_eq!(status_of(b().user_stack(65_529).build()), invalid);
    assert_eq!(status_of(b().user_stack(u32::MAX).build()), invalid);
    assert_eq!(status_of(b().ring_pages(3).build()), invalid);
    assert_eq!(status_of(b().ring_pages(0).build()), invalid);
    assert_eq!(status_of(b().ring_pages(1 << 40).build()), invalid);
    assert_eq!(status_of(b().cpus([100_000]).build()), invalid);
    assert_eq!(status_of(b().cpus([]).build()), invalid);
    assert_eq!(status_of(b().global().pid(1).build()), invalid);
    // No such process (pids stop at 2^22).
    assert_eq!(
        status_of(b().pid(0x7FFF_FFFF).build()),
        NtStatus::INVALID_CID
    );
    assert_eq!(status_of(b().pid(0).build()), NtStatus::INVALID_CID);
    // No perf event for the source at all, and hardware sources on a machine without a PMU.
    assert_eq!(
        status_of(b().source(ProfileSource::LoadInstructions).build()),
        NtStatus::NOT_SUPPORTED
    );
    if !ProfileSource::TotalCycles.support().is_supported() {
        assert_eq!(
            status_of(b().source(ProfileSource::TotalCycles).build()),
            NtStatus::NOT_SUPPORTED
        );
    }
    // The largest user-stack copy is accepted (rounded to 8: 65521 -> 65528), in a ring that holds two such
    // samples (64 pages).
    let _serial = common::serial();
    let s = b()
        .user_stack(65_521)
        .ring_pages(64)
        .build()
        .expect("65521 bytes");
    drop(s);
}

/// The interval: clamped into the source's limits; by default the source's current interval.
#[test]
fn the_interval_is_clamped_and_defaults_to_the_current_one() {
    let _serial = common::serial();
    let s = Sampler::builder().interval(1).build().expect("build");
    assert_eq!(s.interval(), ProfileSource::Time.min_interval());
    let s = Sampler::builder()
        .interval(u32::MAX)
        .build()
        .expect("build");
    assert_eq!(s.interval(), ProfileSource::Time.limits().max);
    let s = Sampler::builder().build().expect("build");
    assert_eq!(s.interval(), ntprofile::query_interval(ProfileSource::Time));
    let s = Sampler::builder()
        .source(ProfileSource::PageFaults)
        .interval(7)
        .build()
        .expect("build");
    assert_eq!((s.source(), s.interval()), (ProfileSource::PageFaults, 7));
}

/// A target that exited before the build is no error: the sampler is built, has nothing to read, and its targets
/// have exited.
#[test]
fn a_target_that_exited_builds_a_sampler_whose_targets_exited() {
    let _serial = common::serial();
    let mut child = Command::new("true").spawn().expect("spawn true");
    let process = Process::open(child.id()).expect("open");
    child.wait().expect("wait");
    assert!(process.has_exited());
    let mut sampler = Sampler::builder().process(&process).build().expect("build");
    sampler.enable().expect("enable");
    assert!(sampler.targets_exited());
    assert!(
        sampler.wait(Duration::from_secs(5)).expect("wait"),
        "wait returns at once"
    );
    assert_eq!(sampler.read(|_| {}).expect("read"), 0);
}

/// Accounting: samples in the stats equal the Sample records delivered; a ring too small for the samples makes
/// the kernel drop records, reported as Lost records whose sum is the stats' lost.
#[test]
fn every_sample_is_delivered_or_reported_lost() {
    let _serial = common::serial();
    let programs = Programs::new("lost");
    let (chain, _) = (programs.build("chain", &[]), ());
    let program = Waiting::spawn(&chain, &["300"]);
    // Two data pages (the least that holds two samples with 2 KiB of stack), at 100 µs: the ring fills between
    // two reads.
    let mut sampler = Sampler::builder()
        .pid(program.pid())
        .interval(1000)
        .user_stack(2048)
        .ring_pages(2)
        .build()
        .expect("build");
    let mut program = program;
    sampler.enable().expect("enable");
    program.go();
    program.finish();
    let (mut samples, mut lost, mut records) = (0u64, 0u64, 0u64);
    sampler
        .read(|r| {
            records += 1;
            match r {
                SampleRecord::Sample(_) => samples += 1,
                SampleRecord::Lost { lost: n, .. } => lost += n,
                _ => {}
            }
        })
        .expect("read");
    let stats = sampler.stats();
    println!("lost: {samples} samples, {lost} lost; {stats:?}");
    assert_eq!(stats.samples, samples);
    assert_eq!(stats.lost, lost);
    assert_eq!(stats.records, records);
    assert!(samples > 0 && lost > 0, "{stats:?}");
    // About 3000 samples are due (300 ms of CPU at 100 µs), each delivered or counted lost. On a loaded machine
    // the kernel throttles the event or lowers its sample rate (perf_cpu_time_max_percent): a busy run saw 301.
    // The floor only says that the loss was counted in bulk, not record by record.
    assert!(samples + lost >= 150, "{stats:?}");
}

/// Building, enabling, reading and dropping samplers leaves no descriptor, thread or mapping behind.
#[test]
fn samplers_leak_nothing() {
    let _serial = common::serial();
    let work = || {
        let mut s = Sampler::builder()
            .current_process()
            .callchain(16)
            .build()
            .expect("build");
        s.enable().expect("enable");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x ^ i.wrapping_mul(31));
        }
        s.wait(Duration::from_millis(1)).expect("wait");
        s.read(|_| {}).expect("read");
        s.disable().expect("disable");
    };
    work(); // first use: lazily created process-wide state
    let before = common::snapshot();
    for _ in 0..20 {
        work();
    }
    // A leak stays; a thread or descriptor of a test running beside this one goes away. Wait up to 10 s for
    // the process to be as it was before (a busy machine may keep such a thread alive for a while).
    let t0 = std::time::Instant::now();
    let mut after = common::snapshot();
    while after != before && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
        after = common::snapshot();
    }
    assert_eq!(after, before);
}

/// The calling process samples itself: its own samples come, and wait() returns on data.
#[test]
fn the_current_process_samples_itself() {
    let _serial = common::serial();
    let mut s = Sampler::builder().interval(1000).build().expect("build");
    s.enable().expect("enable");
    let start = Instant::now();
    let me = std::process::id();
    let mut own = 0;
    // 300 ms of this thread's CPU time (a loaded machine may give it a fraction of 300 ms of wall time), within
    // 20 s.
    let cpu = || {
        let t =
            nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).expect("clock");
        Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
    };
    let cpu0 = cpu();
    while cpu() - cpu0 < Duration::from_millis(300) && start.elapsed() < Duration::from_secs(20) {
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x ^ i.wrapping_mul(31));
        }
        s.read(|r| {
            if let SampleRecord::Sample(smp) = r {
                assert_eq!(smp.pid, me);
                own += 1;
            }
        })
        .expect("read");
    }
    s.disable().expect("disable");
    println!("current process: {own} samples in 300 ms of CPU time at 100 µs");
    assert!(own >= 300, "{own}");
    assert!(!s.targets_exited());
}

/// In a fork()ed child the sampler is dead: every call is STATUS_INVALID_HANDLE, dropping it unmaps nothing (the
/// child's own mappings stay), and the parent's sampler keeps working.
#[test]
fn a_forked_child_finds_the_sampler_dead() {
    let _serial = common::serial();
    let mut s = Sampler::builder().interval(1000).build().expect("build");
    s.enable().expect("enable");
    // SAFETY: the child only calls the sampler (no lock of another thread is needed) and leaves with _exit.
    match unsafe { libc::fork() } {
        0 => {
            let ok = s.enable().err().map(|e| e.status()) == Some(NtStatus::INVALID_HANDLE)
                && s.read(|_| {}).err().map(|e| e.status()) == Some(NtStatus::INVALID_HANDLE)
                && s.wait(Duration::ZERO).err().map(|e| e.status())
                    == Some(NtStatus::INVALID_HANDLE)
                && !s.targets_exited();
            drop(s);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        child => {
            assert!(child > 0, "fork");
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child saw a live sampler (status {status:#x})"
            );
        }
    }
    let mut x = 0u64;
    for i in 0..5_000_000u64 {
        x = std::hint::black_box(x ^ i.wrapping_mul(31));
    }
    let mut n = 0;
    s.read(|r| n += matches!(r, SampleRecord::Sample(_)) as usize)
        .expect("the parent's sampler still reads");
    assert!(n > 0);
}

/// As nobody with no capability (setpriv): pid 1 is STATUS_ACCESS_DENIED, a global sampler and kernel sampling
/// are STATUS_PRIVILEGE_NOT_HELD, and its own child is sampled.
#[test]
fn an_unprivileged_caller_gets_the_denials() {
    let _serial = common::serial();
    let scratch = cbuild::Scratch::new("unpriv");
    let helper = scratch.path("sampler-helper");
    std::fs::copy(std::env::current_exe().expect("current_exe"), &helper)
        .expect("copy the test binary");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut command = common::unprivileged_command(&helper);
    command
        .args([
            "--exact",
            "errors::helper_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(scratch.dir())
        .env("NTPROFILE_SAMPLER_HELPER", "unprivileged");
    let (stdout, _, r) = common::run_helper_process(command);
    println!("{stdout}");
    let status = |k: &str| -> String {
        r.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: {r:?}"))
    };
    if nix::unistd::geteuid().is_root() {
        assert_eq!(status("uid"), "65534", "setpriv did not drop to nobody");
        assert_eq!(
            status("pid1"),
            format!("{:#010x}", NtStatus::ACCESS_DENIED.as_u32())
        );
    }
    assert_eq!(
        status("global"),
        format!("{:#010x}", NtStatus::PRIVILEGE_NOT_HELD.as_u32())
    );
    if ntprofile_paranoid() >= 2 {
        assert_eq!(
            status("kernel"),
            format!("{:#010x}", NtStatus::PRIVILEGE_NOT_HELD.as_u32())
        );
    }
    let own: u64 = status("own_child_samples").parse().unwrap();
    assert!(
        own >= 20,
        "the unprivileged caller's own child: {own} samples"
    );
}

fn ntprofile_paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The helper's side of [`an_unprivileged_caller_gets_the_denials`]: runs only when re-executed.
#[test]
#[ignore = "a helper process of an_unprivileged_caller_gets_the_denials"]
fn helper_process() {
    if std::env::var("NTPROFILE_SAMPLER_HELPER").as_deref() != Ok("unprivileged") {
        return;
    }
    let report = |k: &str, v: String| println!("RESULT {k} {v}");
    let code = |r: Result<Sampler, ntprofile::Error>| match r {
        Ok(_) => "0x00000000".to_string(),
        Err(e) => {
            println!("{e}");
            format!("{:#010x}", e.status().as_u32())
        }
    };
    report("uid", nix::unistd::getuid().to_string());
    report("pid1", code(Sampler::builder().pid(1).build()));
    report("global", code(Sampler::builder().global().build()));
    report("kernel", code(Sampler::builder().kernel(true).build()));
    // Its own child: a shell that, once told to go, runs a busy shell loop for 500 ms under timeout (a
    // grandchild, followed through inheritance).
    let mut child = Command::new("sh")
        .args(["-c", "read x; exec timeout 0.5 sh -c 'while :; do :; done'"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let mut sampler = Sampler::builder()
        .pid(child.id())
        .build()
        .expect("own child");
    sampler.enable().expect("enable");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut n = 0u64;
    while !sampler.targets_exited() {
        sampler.wait(Duration::from_millis(50)).expect("wait");
        sampler
            .read(|r| n += matches!(r, SampleRecord::Sample(_)) as u64)
            .expect("read");
    }
    sampler
        .read(|r| n += matches!(r, SampleRecord::Sample(_)) as u64)
        .expect("read");
    child.wait().unwrap();
    report("own_child_samples", n.to_string());
}

/// With the privilege (root here): a global sampler sees a process it was never told about, with its Comm and
/// Exit records; its targets never "exit".
#[test]
fn a_global_sampler_sees_every_process() {
    let _serial = common::serial();
    if !nix::unistd::geteuid().is_root() {
        common::skip("needs the system-profile privilege (run as root)");
        return;
    }
    let programs = Programs::new("global");
    let chain = programs.build("chain", &[]);
    let mut sampler = Sampler::builder().global().build().expect("global sampler");
    let mut program = Waiting::spawn(&chain, &["200"]);
    let pid = program.pid();
    sampler.enable().expect("enable");
    program.go();
    program.finish();
    let mut recs = Vec::new();
    sampler.read(|r| recs.push(Rec::of(r))).expect("read");
    note("global", &recs, sampler.stats());
    assert!(
        recs.iter()
            .any(|r| matches!(r, Rec::Exit { pid: p, tid, .. } if *p == pid && *tid == pid)),
        "no Exit record of {pid}"
    );
    let per = samples_per_pid(&recs);
    let n = per.get(&pid).copied().unwrap_or(0);
    assert!(
        n >= 100,
        "{n} samples of the unnamed process {pid}: {per:?}"
    );
    assert!(!sampler.targets_exited());
}
