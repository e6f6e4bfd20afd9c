//! The per-thread layout (`NTPROFILE_EVENTS=per-thread` here; chosen by itself without the privilege once (thread ×
//! processor) events would pass 1,024 on more than two processors): each thread has its own sampling event and
//! ring, and a thread created after the start gets its own as soon as its fork record is read; what it ran
//! before is counted as lost (from the inherited counters), so counted + outside + lost is what the kernel
//! took; a thread that exits has its events closed. As root and without privilege.

mod common;

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::os::unix::fs::PermissionsExt;

use ntprofile::{Process, Profile, ProfileSource};

const HELPER_ENV: &str = "NTPROFILE_PER_THREAD_HELPER";
/// Busy threads created after the start, and the CPU time each spins for.
const LATER: usize = 4;
const SPIN_MS: u64 = 300;
/// Parked threads created after the start, for the rings' memory.
const MANY: usize = 600;

/// CPU time of the calling thread (ns).
fn thread_cpu_ns() -> u64 {
    common::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Poll `f` every 2 ms for up to 5 s until it holds; whether it did.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    f()
}

/// The helper: a per-thread profile of this process started at 1 ms; then [`LATER`] threads created, each
/// spinning for [`SPIN_MS`] of its own CPU time and then waiting until released; then [`MANY`] parked threads;
/// prints `RESULT` lines: the rings and descriptors at the start, while the threads live and after they exited,
/// the rings' memory with the parked threads, the busy threads' CPU time and the profile's statistics.
#[test]
#[ignore = "a helper process of the tests below"]
fn helper() {
    if std::env::var(HELPER_ENV).is_err() {
        return;
    }
    ntprofile::set_interval(ProfileSource::Time, 10_000); // 1 ms
    let profile = Profile::builder()
        .range(0x1000, 0x7fff_ffff_0000)
        .bucket_size(31)
        .source(ProfileSource::Time)
        .build()
        .expect("create");
    let main0 = thread_cpu_ns();
    profile.start().expect("start");
    let start = profile.event_usage().expect("usage");
    println!("RESULT mode {}", start.mode.name());
    println!("RESULT start_rings {}", start.rings);
    println!("RESULT start_descriptors {}", start.descriptors);
    let release = Arc::new(AtomicBool::new(false));
    let (spun_tx, spun_rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..LATER)
        .map(|_| {
            let (release, spun_tx) = (release.clone(), spun_tx.clone());
            std::thread::spawn(move || {
                // In user space (the profile samples user addresses only): the clock is read, a system call,
                // once per million steps.
                let mut x = 0u64;
                while thread_cpu_ns() < SPIN_MS * 1_000_000 {
                    for _ in 0..1_000_000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                }
                spun_tx.send(()).unwrap();
                // Acquire: pairs with the release store below; nothing else is read through it.
                while !release.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                thread_cpu_ns()
            })
        })
        .collect();
    for _ in 0..LATER {
        spun_rx.recv().unwrap();
    }
    let grown = eventually(|| profile.event_usage().unwrap().rings >= start.rings + LATER);
    let live = profile.event_usage().unwrap();
    println!("RESULT grown {grown}");
    println!("RESULT live_rings {}", live.rings);
    println!("RESULT live_descriptors {}", live.descriptors);
    release.store(true, Ordering::Release);
    let workers_ns: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let closed = eventually(|| profile.event_usage().unwrap().descriptors == start.descriptors);
    let after = profile.event_usage().unwrap();
    println!("RESULT closed {closed}");
    println!("RESULT after_rings {}", after.rings);
    println!("RESULT after_descriptors {}", after.descriptors);
    let main_ns = thread_cpu_ns() - main0;
    // Many threads created later: their rings shrink so that the stream's stay within the ring memory a
    // per-thread stream takes by choice (32 MiB at most, half the locked-memory budget when it is limited).
    let (park_tx, park_rx) = std::sync::mpsc::channel::<()>();
    let park_rx = Arc::new(std::sync::Mutex::new(park_rx));
    let parked: Vec<_> = (0..MANY)
        .map(|_| {
            let rx = park_rx.clone();
            std::thread::spawn(move || {
                let _ = rx.lock().unwrap().recv();
            })
        })
        .collect();
    let many = eventually(|| profile.event_usage().unwrap().rings >= start.rings + MANY);
    let with_many = profile.event_usage().unwrap();
    println!("RESULT many {many}");
    println!("RESULT many_rings {}", with_many.rings);
    println!("RESULT many_ring_bytes {}", with_many.ring_bytes);
    println!("RESULT start_ring_bytes {}", start.ring_bytes);
    drop(park_tx);
    for p in parked {
        p.join().unwrap();
    }
    profile.stop().expect("stop");
    let st = profile.stats();
    println!("RESULT cpu_ms {}", (workers_ns + main_ns) / 1_000_000);
    println!("RESULT workers_ms {}", workers_ns / 1_000_000);
    println!("RESULT sampled {}", st.counted + st.outside);
    println!("RESULT lost {}", st.lost);
}

fn run_helper(unprivileged: bool) -> std::collections::HashMap<String, String> {
    let dir = scratch("later");
    let exe = copy_of_this_binary(&dir);
    let mut c = if unprivileged {
        common::unprivileged_command(&exe)
    } else {
        Command::new(&exe)
    };
    c.args(["--ignored", "--exact", "helper", "--nocapture"])
        .env(HELPER_ENV, "1")
        .env("NTPROFILE_EVENTS", "per-thread")
        .current_dir(&dir);
    let (stdout, _, r) = common::run_helper_process(c);
    println!("unprivileged {unprivileged}:\n{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// A new directory for one test's files, readable by every user (the unprivileged helpers run from it).
fn scratch(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ntprofile-per-thread-{what}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A copy of this test binary in `dir` that every user may run (the build directory may not be reachable for
/// the unprivileged user).
fn copy_of_this_binary(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("per-thread-helper");
    std::fs::copy(std::env::current_exe().unwrap(), &path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Threads created after a per-thread start get a ring of their own while they live (600 of them within 32 MiB of
/// rings and one page each) (before, they wrote into the
/// ring of the thread that created them, from several processors at once, which the kernel's ring does not
/// survive), their events are closed when they exit, and their CPU time is sampled by their own events: their
/// samples count at least 85 % of it (each is seen within about 10 ms of its creation: 4 threads of 300 ms),
/// and with the lost ones, 85 % to 115 % of the CPU time of every observed thread.
#[test]
fn threads_created_after_a_per_thread_start_get_their_own_events() {
    for unprivileged in [false, true] {
        let r = run_helper(unprivileged);
        let n = |k: &str| -> u64 { r[k].parse().unwrap_or_else(|_| panic!("{k}: {r:?}")) };
        assert_eq!(r["mode"], "per-thread", "{r:?}");
        assert_eq!(r["grown"], "true", "a ring per thread created later: {r:?}");
        assert!(n("live_rings") >= n("start_rings") + LATER as u64, "{r:?}");
        assert_eq!(
            r["closed"], "true",
            "the exited threads' events closed: {r:?}"
        );
        assert_eq!(n("after_rings"), n("start_rings"), "{r:?}");
        assert_eq!(r["many"], "true", "{r:?}");
        assert!(
            n("many_ring_bytes") <= n("start_ring_bytes") + (32 << 20) + MANY as u64 * 8192,
            "{MANY} threads created later, their rings within 32 MiB and a page each: {r:?}"
        );
        let (cpu, workers) = (n("cpu_ms") as f64, n("workers_ms") as f64);
        let (sampled, lost) = (n("sampled") as f64, n("lost") as f64);
        assert!(workers >= (LATER as u64 * SPIN_MS) as f64, "{r:?}");
        assert!(sampled >= 0.85 * workers, "{r:?}");
        let total = sampled + lost;
        assert!(
            total >= 0.85 * cpu && total <= 1.15 * cpu,
            "{total} samples for {cpu} ms: {r:?}"
        );
    }
}

/// The faulter (tests/hardening/faulter.c), built into `dir`, runnable by every user.
fn build_faulter(dir: &std::path::Path) -> std::path::PathBuf {
    let exe = dir.join("faulter");
    common::build_c_program("tests/hardening/faulter.c", &exe);
    exe
}

/// How long each of the churn cases' threads sleeps before its first fault (ms): the time the profiler has to
/// open its events. It does once it reads the thread's fork record, which wakes no one: its reads come every
/// 10 ms while it follows per-thread events (a profile's consumer, a sampler's wait), and the open follows at
/// once; three times that leaves a loaded machine's scheduling delay. (With 10 ms, 16-19 % of the threads'
/// faults came before their events; with 30 ms, 0.03-1.2 %.)
const CHURN_PAUSE_MS: &str = "30";

/// The faulter of the churn cases, blocked reading its standard input: 4 threads of 50 faults after a pause of
/// [`CHURN_PAUSE_MS`], 100 times over once it reads a line, then it holds until its standard input closes.
fn spawn_churning_faulter(exe: &std::path::Path) -> (std::process::Child, u32) {
    let child = Command::new(exe)
        .args(["4", "50", "20000", "0", "100", "hold", CHURN_PAUSE_MS])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the faulter");
    let pid = child.id();
    common::wait_blocked_in_read(pid, "the faulter");
    (child, pid)
}

/// Run the churn helper `helper` of a copy of this binary, with the faulter, in the per-thread layout: as root,
/// then as an unprivileged user; each must print its `seen` line.
fn run_churn_helpers(what: &str, helper: &str) {
    let dir = scratch(what);
    let faulter = build_faulter(&dir);
    let me = copy_of_this_binary(&dir);
    for unprivileged in [false, true] {
        let mut c = if unprivileged {
            common::unprivileged_command(&me)
        } else {
            Command::new(&me)
        };
        c.args(["--ignored", "--exact", helper, "--nocapture"])
            .env(HELPER_ENV, &faulter)
            .env("NTPROFILE_EVENTS", "per-thread")
            .current_dir(&dir);
        let (stdout, _, r) = common::run_helper_process(c);
        println!("unprivileged {unprivileged}:\n{stdout}");
        assert!(r.contains_key("seen"), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The other-process case, run by the test or (unprivileged) by a helper: 100 batches of 4 threads of 50 page
/// faults each come and go in another process; a page-fault profile at interval 1 counts every fault the
/// kernel counted (an independent counter), as counted, outside or lost, and once they are gone only the
/// first thread's events are left.
fn churn_case(exe: &std::path::Path) -> String {
    let (mut child, pid) = spawn_churning_faulter(exe);
    let process = Process::open(pid).expect("open the faulter");
    let profile = Profile::builder()
        .process(&process)
        .range(0x10000, 0x10000)
        .bucket_size(6)
        .source(ProfileSource::PageFaults)
        .build()
        .expect("create");
    let mut counter = common::page_fault_counter(pid);
    profile.start().expect("start");
    counter.enable().expect("enable the counter");
    let start = profile.event_usage().expect("usage");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let before = faults_before_the_pause(&line);
    let closed = eventually(|| profile.event_usage().unwrap().descriptors == start.descriptors);
    let after = profile.event_usage().unwrap();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let took = counter.read().expect("read the counter");
    profile.stop().expect("stop");
    let st = profile.stats();
    let total = st.counted + st.outside + st.lost;
    let seen = format!(
        "mode {}; descriptors at the start {}, after the threads exited {} (closed: {closed}); the kernel took \
         {took}; counted {} + outside {} + lost {} = {total}; throttled {}",
        start.mode.name(),
        start.descriptors,
        after.descriptors,
        st.counted,
        st.outside,
        st.lost,
        st.throttled
    );
    println!("{seen}");
    assert_eq!(start.mode.name(), "per-thread", "{seen}");
    assert!(closed, "{seen}");
    assert_eq!(st.throttled, 0, "{seen}");
    assert!(took >= 100 * 4 * 50, "{seen}");
    assert_eq!(total, took, "{seen}");
    check_churn_loss(st.lost, before, took, &seen);
    seen
}

/// The page faults the churn faulter's threads took before their pause, from its `done N` line.
fn faults_before_the_pause(line: &str) -> u64 {
    line.strip_prefix("done ")
        .and_then(|n| n.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("the faulter's last line: {line:?}"))
}

/// What the per-thread layout may lose of the churn: a thread's faults before its events open. Each thread
/// sleeps [`CHURN_PAUSE_MS`] before faulting, so only the faults it took before its pause (`before`, its own
/// count) and those of a thread whose events opened later than that are lost, which takes the reader kept from
/// a processor for more than 20 ms: 0.03-1.2 % of what the kernel took at a load average of 20 on 2
/// processors, 11.4 % once at 25 with two busy loops beside. Allowed: a quarter. A layout that never opens a
/// new thread's events loses all the threads' faults but those of threads found by a scan: 87-92 % measured.
fn check_churn_loss(lost: u64, before: u64, took: u64, seen: &str) {
    let allowed = before + took / 4;
    assert!(
        lost <= allowed,
        "{lost} lost; at most {allowed}: the {before} faults before the threads' pauses and a quarter of the \
         {took} the kernel took: {seen}"
    );
}

#[test]
#[ignore = "a helper process of the test below"]
fn churn_helper() {
    if let Ok(exe) = std::env::var(HELPER_ENV) {
        println!("RESULT seen {}", churn_case(std::path::Path::new(&exe)));
    }
}

/// Threads that come and go in another process: 400 of them, 4 at a time, each gets its own events while it
/// lives and has them closed when it exits; every page fault the kernel counted is counted, counted outside or
/// reported as lost, and lost only what came before a thread's events could open (`check_churn_loss`). As
/// root, and without privilege (a helper run as another user profiles a faulter of its own).
#[test]
fn threads_that_come_and_go_are_counted_exactly_and_their_events_closed() {
    run_churn_helpers("churn", "churn_helper");
}

/// The churn case for a sampler (`ntprofile::Sampler`, as `ntprof attach` opens it): 100 batches of 4 threads
/// of 50 page faults each come and go in another process, sampled at every page fault in the per-thread layout,
/// read as a recorder reads (wait, read); every fault the kernel counted (an independent counter) is a sample or
/// reported lost, and once the threads are gone only the first thread's events are left.
fn sampler_churn_case(exe: &std::path::Path) -> String {
    use ntprofile::{SampleRecord, Sampler};
    let (mut child, pid) = spawn_churning_faulter(exe);
    let mut sampler = Sampler::builder()
        .pid(pid)
        .source(ProfileSource::PageFaults)
        .interval(1)
        .sideband(false)
        .build()
        .expect("build");
    let start = sampler.event_usage();
    let mut counter = common::page_fault_counter(pid);
    sampler.enable().expect("enable");
    counter.enable().expect("enable the counter");
    let (mut samples, mut lost) = (0u64, 0u64);
    let mut record = |r: &SampleRecord<'_>| match r {
        SampleRecord::Sample(s) if s.pid == pid => samples += 1,
        SampleRecord::Lost { lost: n, .. } => lost += n,
        _ => {}
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    // The faulter prints "done" when its threads are joined: read it on a thread while this one records.
    let stdout = child.stdout.take().unwrap();
    let done = std::thread::spawn(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        line
    });
    let t = Instant::now();
    while !done.is_finished() && t.elapsed() < Duration::from_secs(120) {
        sampler.wait(Duration::from_millis(100)).expect("wait");
        sampler.read(&mut record).expect("read");
    }
    let before = faults_before_the_pause(&done.join().unwrap());
    // The exited threads' rings close once their exit records (or a scan of the thread list) are read.
    let closed = eventually(|| {
        sampler.read(&mut record).expect("read");
        sampler.event_usage().descriptors == start.descriptors
    });
    let after = sampler.event_usage();
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let took = counter.read().expect("read the counter");
    sampler.disable().expect("disable");
    sampler.read(&mut record).expect("read");
    let st = sampler.stats();
    let seen = format!(
        "mode {}; descriptors at the start {}, after the threads exited {} (closed: {closed}); the kernel took \
         {took}; samples {samples} + lost {lost} = {}; {st:?}",
        start.mode.name(),
        start.descriptors,
        after.descriptors,
        samples + lost
    );
    println!("{seen}");
    assert_eq!(start.mode.name(), "per-thread", "{seen}");
    assert!(closed, "{seen}");
    assert_eq!(st.throttled, 0, "{seen}");
    assert!(took >= 100 * 4 * 50, "{seen}");
    assert_eq!(samples + lost, took, "{seen}");
    assert_eq!(st.lost, lost, "{seen}");
    check_churn_loss(lost, before, took, &seen);
    seen
}

#[test]
#[ignore = "a helper process of the test below"]
fn sampler_churn_helper() {
    if let Ok(exe) = std::env::var(HELPER_ENV) {
        println!(
            "RESULT seen {}",
            sampler_churn_case(std::path::Path::new(&exe))
        );
    }
}

/// A sampler of another process whose threads come and go, in the per-thread layout: 400 threads, 4 at a time,
/// each gets its own events while it lives (opened from its fork record) and has them closed when it exits;
/// every page fault the kernel counted is a sample or reported lost (what a thread ran before its events opened
/// is reported lost from the counters), and lost only what came before a thread's events could open
/// (`check_churn_loss`). As root, and without privilege.
#[test]
fn a_per_thread_sampler_of_threads_that_come_and_go_accounts_for_every_fault() {
    run_churn_helpers("sampler-churn", "sampler_churn_helper");
}
