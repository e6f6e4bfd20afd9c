//! A process of thousands of threads at the usual descriptor limits (soft 1,024, hard 20,000): a profile of the
//! calling process starts in each event layout, as root and without privilege, counts busy threads for their CPU
//! time, and a hard limit too small fails at once with `STATUS_INSUFFICIENT_RESOURCES` naming the limit. Each
//! case runs in a helper process (this binary again) started under `prlimit`, so that the limits are its own.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ntprofile::{EventUsage, NtStatus, Profile, ProfileSource, Sampler};

const HELPER_ENV: &str = "NTPROFILE_MANY_THREADS_HELPER";

/// Run time of thread `tid` of this process so far (ns, the first field of its schedstat).
fn run_time_ns(tid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The helper: `threads` threads in all (`busy` of them spinning), then a profile of this process (or a
/// sampler, `what = sampler`) started, run until its threads used half a second of CPU, stopped; prints `RESULT` lines.
#[test]
#[ignore = "a helper process of the tests below"]
fn helper() {
    let Ok(what) = std::env::var(HELPER_ENV) else {
        return;
    };
    let threads: usize = std::env::var("THREADS").unwrap().parse().unwrap();
    let busy: usize = std::env::var("BUSY").unwrap().parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (1..threads)
        .map(|i| {
            let (stop, tid_tx) = (stop.clone(), tid_tx.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let _ = tid_tx.send((i, nix::unistd::gettid().as_raw()));
                    let mut x = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        if i <= busy {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                        } else {
                            std::thread::park();
                        }
                    }
                })
                .expect("spawn")
        })
        .collect();
    let tids: Vec<(usize, i32)> = (1..threads).map(|_| tid_rx.recv().unwrap()).collect();
    // Every thread the profile observes: the workers and this one (the library's own threads are not observed).
    let observed: Vec<i32> = tids
        .iter()
        .map(|t| t.1)
        .chain([nix::unistd::gettid().as_raw()])
        .collect();
    let cpu = || observed.iter().map(|&t| run_time_ns(t)).sum::<u64>();
    if what == "target" {
        // A process to profile: its threads exist; it ends when its standard input closes.
        println!("ready");
        let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
        std::process::exit(0);
    }
    let (soft, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    println!("RESULT soft {soft}");
    println!("RESULT hard {hard}");
    match what.as_str() {
        "other" => other_process(threads, busy, "profile"),
        "sampler-other" => other_process(threads, busy, "sampler"),
        "sampler-build" => {
            // Only the build (the exhaustion cases).
            let t = Instant::now();
            let built = Sampler::builder().build();
            println!("RESULT start_ms {}", t.elapsed().as_millis());
            match built {
                Ok(s) => println!("RESULT status 0x0 {s:?}"),
                Err(e) => println!("RESULT status {:#x} {e}", e.status().as_u32()),
            }
        }
        kind => measure(kind, None, &cpu),
    }
    stop.store(true, Ordering::Release);
    for w in workers {
        w.thread().unpark();
        w.join().unwrap();
    }
}

/// Start a profile (`kind` "profile") or a sampler ("sampler") of `process` (`None`: this process) at 1 ms,
/// sample until the observed threads ran 500 ms of CPU time (`cpu`, however loaded the machine; 30 s at most),
/// stop, and print the `RESULT` lines: status, layout, descriptors, start and stop times, the samples taken of
/// the target (a sampler's: those of its process; lost ones included) and the CPU time between the inner and
/// outer bounds of the sampling.
fn measure(kind: &str, process: Option<&ntprofile::Process>, cpu: &dyn Fn() -> u64) {
    ntprofile::set_interval(ProfileSource::Time, 10_000); // 1 ms
    let cpu0 = cpu();
    let t = Instant::now();
    let started: Result<(EventUsage, Recorder), ntprofile::Error> = if kind == "sampler" {
        let b = Sampler::builder()
            .source(ProfileSource::Time)
            .interval(10_000);
        let b = match process {
            Some(p) => b.process(p),
            None => b,
        };
        b.build().and_then(|s| {
            s.enable()?;
            Ok((s.event_usage(), Recorder::Sampler(Box::new(s))))
        })
    } else {
        let b = Profile::builder()
            .range(0x1000, 0x7fff_ffff_0000)
            .bucket_size(31)
            .source(ProfileSource::Time);
        let b = match process {
            Some(p) => b.process(p),
            None => b,
        };
        let profile = b.build().expect("create");
        profile.start().map(|()| {
            let u = profile.event_usage().expect("usage of a started profile");
            (u, Recorder::Profile(profile))
        })
    };
    let start_ms = t.elapsed().as_millis();
    let cpu1 = cpu();
    println!("RESULT start_ms {start_ms}");
    let (usage, mut recorder) = match started {
        Err(e) => {
            println!("RESULT status {:#x} {e}", e.status().as_u32());
            return;
        }
        Ok(started) => started,
    };
    println!("RESULT status 0x0");
    println!("RESULT mode {}", usage.mode.name());
    println!("RESULT descriptors {}", usage.descriptors);
    let pid = process.map_or(std::process::id(), ntprofile::Process::pid);
    let (mut samples, mut lost) = (0u64, 0u64);
    let mut read = |s: &mut Sampler| {
        s.read(|r| match r {
            ntprofile::SampleRecord::Sample(x) if x.pid == pid => samples += 1,
            ntprofile::SampleRecord::Lost { lost: n, .. } => lost += n,
            _ => {}
        })
        .expect("read");
    };
    let t = Instant::now();
    while cpu() - cpu1 < 500_000_000 && t.elapsed() < Duration::from_secs(30) {
        match &mut recorder {
            Recorder::Sampler(s) => {
                s.wait(Duration::from_millis(100)).expect("wait");
                read(s);
            }
            Recorder::Profile(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let cpu2 = cpu();
    let t = Instant::now();
    match &mut recorder {
        Recorder::Sampler(s) => {
            s.disable().expect("disable");
            read(s);
        }
        Recorder::Profile(p) => {
            p.stop().expect("stop");
            let st = p.stats();
            samples = st.counted + st.outside;
            lost = st.lost;
        }
    }
    println!("RESULT stop_ms {}", t.elapsed().as_millis());
    let cpu3 = cpu();
    println!("RESULT samples {}", samples + lost);
    println!("RESULT lost {lost}");
    // Sampling ran at least from the end of the start to the stop, at most from before the start to the end
    // of the stop.
    println!("RESULT inner_ms {}", (cpu2 - cpu1) / 1_000_000);
    println!("RESULT outer_ms {}", (cpu3 - cpu0) / 1_000_000);
}

/// What [`measure`] started.
enum Recorder {
    Profile(Profile),
    Sampler(Box<Sampler>),
}

/// The helper's `other` and `sampler-other` cases: a target process (this binary again, `target`) with
/// `threads` threads, `busy` of them spinning, profiled or sampled (`kind`) through its pid; the same `RESULT`
/// lines as for this process.
fn other_process(threads: usize, busy: usize, kind: &str) {
    use std::io::BufRead;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, "target")
        .env("THREADS", threads.to_string())
        .env("BUSY", busy.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 && !line.contains("ready") {
        line.clear();
    }
    let pid = child.id();
    let cpu = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        std::fs::read_to_string(e.path().join("schedstat"))
                            .ok()?
                            .split_whitespace()
                            .next()?
                            .parse::<u64>()
                            .ok()
                    })
                    .sum::<u64>()
            })
            .unwrap_or(0)
    };
    let (soft, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    println!("RESULT soft {soft}");
    println!("RESULT hard {hard}");
    let process = ntprofile::Process::open(pid).expect("open the target");
    measure(kind, Some(&process), &cpu);
    drop(child.stdin.take());
    let _ = child.wait();
}

/// This test binary, copied afresh where `nobody` can run it; the copy is removed when dropped.
///
/// Afresh every time: a directory named after this process's id may be left from an earlier process that had
/// the same id (ids are reused, after 32,768 processes with the default `pid_max`), holding the binary of an
/// older build. Reusing that copy once ran an old helper (without processor-wide filtered events) in place of
/// this one.
struct HelperCopy {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
}

impl HelperCopy {
    fn new() -> HelperCopy {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ntprofile-many-threads-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join("many-threads-helper");
        std::fs::copy(std::env::current_exe().unwrap(), &path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        HelperCopy { dir, path }
    }
}

impl Drop for HelperCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run the helper with `RLIMIT_NOFILE` soft/hard, unprivileged or not, the events layout forced or not.
fn run(
    what: &str,
    nofile: (u32, u32),
    threads: usize,
    busy: usize,
    unprivileged: bool,
    mode: Option<&str>,
) -> std::collections::HashMap<String, String> {
    let copy = HelperCopy::new();
    let helper = &copy.path;
    let mut c = Command::new("prlimit");
    c.arg(format!("--nofile={}:{}", nofile.0, nofile.1))
        .arg("--");
    if unprivileged && nix::unistd::geteuid().is_root() {
        c.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ]);
        c.args(["--bounding-set=-all"]);
    }
    c.arg(helper)
        .args([
            "--ignored",
            "--exact",
            "helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, what)
        .env("THREADS", threads.to_string())
        .env("BUSY", busy.to_string())
        .current_dir(helper.parent().unwrap());
    match mode {
        Some(m) => c.env("NTPROFILE_EVENTS", m),
        None => c.env_remove("NTPROFILE_EVENTS"),
    };
    let (stdout, _, r) = common::run_helper_process(c);
    println!(
        "{what} {threads} threads {nofile:?} unprivileged {unprivileged} mode {mode:?}:\n{stdout}"
    );
    r
}

/// 2,000 threads (two of them busy) at soft 1,024 / hard 20,000: the start succeeds within three seconds on a
/// loaded machine (under one here when idle), the layout is the one asked for, and the busy threads'
/// samples at 1 ms account for the CPU time of the observed threads (the cpu-clock event fires once per millisecond of it; the margin
/// covers the sampling noise and the start and stop edges).
fn check_counts(r: &std::collections::HashMap<String, String>, mode: &str) {
    assert_eq!(r["soft"], "1024");
    assert_eq!(r["status"], "0x0", "{r:?}");
    assert_eq!(r["mode"], mode);
    let descriptors: usize = r["descriptors"].parse().unwrap();
    let cpus = ntprofile::affinity::online_cpus().len();
    match mode {
        // One event per processor, whatever the threads.
        "cpu-filtered" => assert_eq!(descriptors, cpus, "{r:?}"),
        // Three per thread (its sampling event, its task-record event, the inherited counter): the 2,000 and the
        // test harness's own.
        "per-thread" => assert!(descriptors <= 3 * 2002, "{r:?}"),
        // One per thread and processor: the 2,000 threads (and the harness's own) on each processor.
        "thread-cpu" => assert!(descriptors >= 2000 * cpus, "{r:?}"),
        _ => panic!("layout {mode}: {r:?}"),
    }
    let start_ms: u64 = r["start_ms"].parse().unwrap();
    // Measured 0.15–0.9 s here for 2,000 threads (BENCHMARKS.md), up to 1.7 s for another process at a load
    // average of 18 on 2 processors; the bound covers such a machine and still catches a start whose cost
    // grows faster than the threads.
    assert!(start_ms < 3000, "start took {start_ms} ms");
    // Nothing lost: every thread existed at the start (none is found late), and a ring holds far more than what
    // arrives between two reads (100 samples of 16 to 40 bytes per busy thread per 100 ms, in rings of 8 KiB
    // or more); `lost` is the kernel's count of records its rings dropped.
    assert_eq!(r["lost"], "0", "{r:?}");
    let samples: f64 = r["samples"].parse().unwrap();
    let inner: f64 = r["inner_ms"].parse().unwrap();
    let outer: f64 = r["outer_ms"].parse().unwrap();
    assert!(inner > 200.0, "the busy threads hardly ran: {inner} ms");
    // One sample per millisecond of CPU time while sampling ran, which lies between the two bounds. Measured:
    // 0.98–1.05 of the inner bound in quieter runs, 0.88–0.91 at a load average of 18 on 2 processors (the virtual CPUs
    // are taken away while the threads' run time goes on), in both layouts alike; the margins cover both.
    assert!(
        samples >= 0.8 * inner && samples <= 1.1 * outer,
        "{samples} samples for {inner}..{outer} ms of CPU time"
    );
}

#[test]
fn two_thousand_threads_at_a_soft_limit_of_1024_start_in_each_layout() {
    let _serial = common::serial();
    // (what, threads, unprivileged, the layout forced, the layout expected). As root the layout chosen is
    // processor-wide events filtered to the target, one per processor; unprivileged, (thread × processor)
    // events. "other": another process of 2,000 threads, through its pid (it runs as the profiler's user).
    // Unprivileged, per-thread rings of 2,000 threads do not fit the locked-memory allowance (8 KiB each;
    // about 9 MiB here): 500 do.
    let cases = [
        ("profile", 2000, false, None, "cpu-filtered"),
        ("profile", 2000, false, Some("thread-cpu"), "thread-cpu"),
        ("profile", 2000, false, Some("per-thread"), "per-thread"),
        ("profile", 2000, true, None, "thread-cpu"),
        ("other", 2000, false, None, "cpu-filtered"),
        ("other", 2000, false, Some("per-thread"), "per-thread"),
        ("other", 2000, true, None, "thread-cpu"),
        ("profile", 500, true, Some("per-thread"), "per-thread"),
    ];
    for (what, threads, unprivileged, forced, expected) in cases {
        check_counts(
            &run(what, (1024, 20_000), threads, 2, unprivileged, forced),
            expected,
        );
    }
}

/// A sampler of 2,000 threads (two of them busy), of this process and of another, at soft 1,024 / hard
/// 20,000: as root one event per processor for every task, only the target's samples delivered
/// (`cpu-filtered`), unprivileged (or forced) one event per thread and processor, or forced one event per thread
/// with a ring of its own (`per-thread`); each counts the busy threads' CPU time as a profile does.
#[test]
fn a_sampler_of_two_thousand_threads_counts_them_at_a_soft_limit_of_1024() {
    let _serial = common::serial();
    let cases = [
        ("sampler", false, None, "cpu-filtered"),
        ("sampler", false, Some("thread-cpu"), "thread-cpu"),
        ("sampler", false, Some("per-thread"), "per-thread"),
        ("sampler", true, None, "thread-cpu"),
        ("sampler-other", false, None, "cpu-filtered"),
        ("sampler-other", false, Some("per-thread"), "per-thread"),
        ("sampler-other", true, None, "thread-cpu"),
    ];
    for (what, unprivileged, forced, expected) in cases {
        check_counts(
            &run(what, (1024, 20_000), 2000, 2, unprivileged, forced),
            expected,
        );
    }
    // Unprivileged, per-thread rings of 2,000 threads do not fit the locked-memory allowance here: 500 do.
    check_counts(
        &run(
            "sampler-other",
            (1024, 20_000),
            500,
            2,
            true,
            Some("per-thread"),
        ),
        "per-thread",
    );
}

/// A hard limit too small for any layout: `STATUS_INSUFFICIENT_RESOURCES` well under a second, before any
/// event is opened, with a message that names what was needed and the limit to raise. Unprivileged, a hard
/// limit of 1,500 holds neither 2,000 threads' (thread × processor) events nor their per-thread events; as root
/// it holds the processor-wide filtered events (one per processor and 32 to spare), and only a hard limit of 32
/// does not.
#[test]
fn true_exhaustion_fails_fast_and_names_the_limit() {
    let _serial = common::serial();
    let insufficient = format!("{:#x}", NtStatus::INSUFFICIENT_RESOURCES.as_u32());
    // One event per thread and processor: the 2,000 threads and the helper's main thread on every processor.
    let cpus = ntprofile::affinity::online_cpus().len();
    let thread_cpu = format!("needs {} descriptors (thread-cpu", 2001 * cpus);
    for (unprivileged, nofile) in [(true, (1024, 1500)), (false, (32, 32))] {
        let r = run("profile", nofile, 2000, 0, unprivileged, None);
        assert!(r["status"].starts_with(&insufficient), "{r:?}");
        assert!(
            r["status"].contains(&thread_cpu) && r["status"].contains("ulimit -Hn"),
            "{r:?}"
        );
        if !unprivileged {
            let filtered = format!(" or {cpus} descriptors (cpu-filtered");
            assert!(r["status"].contains(&filtered), "{r:?}");
        }
        let ms: u64 = r["start_ms"].parse().unwrap();
        assert!(ms < 500, "failing took {ms} ms");
        // The same for a sampler of the process (as root, a hard limit that leaves too few descriptors for one
        // event per processor and the few it keeps to spare).
        let nofile = if unprivileged { nofile } else { (16, 16) };
        let r = run("sampler-build", nofile, 2000, 0, unprivileged, None);
        assert!(r["status"].starts_with(&insufficient), "{r:?}");
        assert!(r["status"].contains("ulimit -Hn"), "{r:?}");
        if !unprivileged {
            let filtered = format!("{cpus} descriptors (cpu-filtered");
            assert!(r["status"].contains(&filtered), "{r:?}");
        }
        let ms: u64 = r["start_ms"].parse().unwrap();
        assert!(ms < 500, "the sampler's failure took {ms} ms");
    }
    // As root, 32 descriptors hold a sampler's processor-wide filtered events.
    let r = run("sampler-build", (32, 32), 2000, 0, false, None);
    assert!(r["status"].starts_with("0x0 Sampler"), "{r:?}");
    // As root, 1,500 descriptors hold the processor-wide filtered events of 2,000 threads.
    let r = run("profile", (1024, 1500), 2000, 0, false, None);
    assert_eq!(r["status"], "0x0", "{r:?}");
    assert_eq!(r["mode"], "cpu-filtered", "{r:?}");
}
