//! Blocked-thread readings at their edges (`read_blocked_thread`, `BlockedThreadReader`): the calling thread
//! reading itself is running; a zombie and kernel threads are `STATUS_INVALID_CID`; a stack copy reaches past
//! 1 MiB; a worker whose main thread ended with `pthread_exit` is read whole (`leader_gone.c`); a thread that
//! runs during the copy is never reported blocked with a copy that mixes two moments of its stack. As root and,
//! through a helper process that drops privilege with setpriv, as an unprivileged user.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ntprofile::{BlockedThreadReader, NtStatus, read_blocked_thread};

use super::{Programs, common};

/// `read` on this architecture.
#[cfg(target_arch = "x86_64")]
const READ: u64 = 0;
#[cfg(target_arch = "aarch64")]
const READ: u64 = 63;

fn gettid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

fn hex(status: NtStatus) -> String {
    format!("{:#010x}", status.as_u32())
}

/// The status of a reading: success, or the error's status (its message printed).
fn status_of(pid: u32, tid: u32) -> NtStatus {
    let mut stack = vec![0u8; 4096];
    match read_blocked_thread(pid, tid, &mut stack) {
        Ok(_) => NtStatus::SUCCESS,
        Err(e) => {
            println!("{pid}/{tid}: {e}");
            e.status()
        }
    }
}

/// The state letter of thread `tid` of `pid` (`/proc/PID/task/TID/stat`), `?` when unreadable.
fn state(pid: u32, tid: u32) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
        .ok()
        .and_then(|s| s.get(s.rfind(')')? + 2..)?.chars().next())
        .unwrap_or('?')
}

/// Wait (at most 20 s) until thread `tid` of `pid` is a zombie.
fn until_zombie(pid: u32, tid: u32) {
    let t0 = Instant::now();
    while state(pid, tid) != 'Z' {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{pid}/{tid} never became a zombie"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The status of a reading of a child that exited and is not reaped yet (it is reaped afterwards).
fn zombie_status() -> NtStatus {
    let mut child = Command::new("true").spawn().expect("spawn true");
    until_zombie(child.id(), child.id());
    let st = status_of(child.id(), child.id());
    child.wait().expect("reap");
    st
}

/// Two kernel threads (`PF_KTHREAD` in their stat flags): kthreadd (pid 2) and another.
fn kernel_threads() -> Vec<u32> {
    let is_kernel = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let flags: u64 = s
                    .get(s.rfind(')')? + 2..)?
                    .split(' ')
                    .nth(6)?
                    .parse()
                    .ok()?;
                Some(flags & 0x0020_0000 != 0)
            })
            .unwrap_or(false)
    };
    let mut found: Vec<u32> = (3..4096).filter(|&p| is_kernel(p)).take(1).collect();
    assert!(is_kernel(2), "pid 2 is not kthreadd here");
    found.insert(0, 2);
    found
}

/// What `leader_gone` gives: the worker's reading (syscall, bytes copied) and the main thread's status.
struct LeaderGone {
    worker: Option<(Option<u64>, usize)>,
    leader: NtStatus,
}

fn leader_gone(program: &Path) -> LeaderGone {
    let mut child: Child = Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let pid = child.id();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("the worker's tid");
    let tid: u32 = line
        .trim()
        .strip_prefix("tid=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no tid line: {line:?}"));
    let mut stack = vec![0u8; 65536];
    let mut worker = None;
    // The worker blocks in read right after printing its tid; read until it is caught there.
    for _ in 0..2000 {
        match read_blocked_thread(pid, tid, &mut stack) {
            Ok(Some(b)) if b.syscall == Some(READ) => {
                worker = Some((b.syscall, b.stack_len));
                break;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("the worker {pid}/{tid}: {e}"),
        }
    }
    let leader = status_of(pid, pid);
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());
    LeaderGone { worker, leader }
}

fn leader_gone_program(programs: &Programs) -> std::path::PathBuf {
    let program = programs.build("leader_gone", &["-pthread"]);
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    program
}

#[test]
fn the_calling_thread_reading_itself_is_running() {
    let _serial = common::serial();
    let mut stack = vec![0u8; 4096];
    let me = read_blocked_thread(std::process::id(), gettid(), &mut stack).expect("read");
    assert_eq!(me, None, "the calling thread runs: it is not blocked");
    let mut reader = BlockedThreadReader::new();
    for _ in 0..3 {
        let again = reader
            .read(std::process::id(), gettid(), &mut stack)
            .expect("read");
        assert_eq!(again, None);
    }
}

#[test]
fn a_zombie_and_kernel_threads_are_invalid_cids() {
    let _serial = common::serial();
    assert_eq!(zombie_status(), NtStatus::INVALID_CID, "a zombie");
    for k in kernel_threads() {
        assert_eq!(status_of(k, k), NtStatus::INVALID_CID, "kernel thread {k}");
    }
}

#[test]
fn a_stack_copy_goes_past_one_mebibyte() {
    let _serial = common::serial();
    const WANT: usize = 2 << 20;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<u32>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let waiter = std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(move || {
            // 3 MiB of this thread's stack above the point where it blocks.
            let big = [0x5Au8; 3 << 20];
            std::hint::black_box(&big);
            ready_tx.send(gettid()).unwrap();
            go_rx.recv().unwrap();
            std::hint::black_box(&big);
        })
        .unwrap();
    let tid = ready_rx.recv().unwrap();
    let mut stack = vec![0u8; WANT];
    let mut got = None;
    for _ in 0..2000 {
        if let Some(b) = read_blocked_thread(std::process::id(), tid, &mut stack).expect("read") {
            got = Some(b.stack_len);
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    go_tx.send(()).unwrap();
    waiter.join().unwrap();
    assert_eq!(got, Some(WANT), "bytes copied of a {WANT}-byte buffer");
}

#[test]
fn a_worker_whose_main_thread_ended_is_read_with_its_stack() {
    let _serial = common::serial();
    let programs = Programs::new("leader");
    let r = leader_gone(&leader_gone_program(&programs));
    let (syscall, copied) = r
        .worker
        .expect("the worker was never caught blocked in read");
    assert_eq!(syscall, Some(READ));
    assert!(copied > 0, "no stack copied");
    assert_eq!(r.leader, NtStatus::INVALID_CID, "the main thread, a zombie");
}

/// A thread stamps a generation number on every page of a 16 MiB region of its stack, then sleeps in the same
/// call: ten times 1 ms, then 50 ms, over and over. Readings copy the whole region (milliseconds of copying),
/// so one started in the short sleeps sees the thread wake, restamp and sleep again while it copies; one in a
/// long sleep does not. A reading that found the thread blocked must hold one generation.
#[test]
fn a_thread_that_runs_during_the_copy_is_not_reported_blocked() {
    let _serial = common::serial();
    const WORDS: usize = 2 << 20;
    let stop = Arc::new(AtomicBool::new(false));
    let region = Arc::new(AtomicUsize::new(0));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel::<u32>();
    let (s, r) = (Arc::clone(&stop), Arc::clone(&region));
    let stamper = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let mut words = [0u64; WORDS];
            let base = words.as_mut_ptr();
            // Relaxed: the address is a plain value; the test reads the memory through the kernel.
            r.store(base as usize, Ordering::Relaxed);
            tid_tx.send(gettid()).unwrap();
            let mut generation = 0u64;
            // Relaxed: a stop flag.
            while !s.load(Ordering::Relaxed) {
                generation += 1;
                for i in (0..WORDS).step_by(512) {
                    // SAFETY: i < WORDS: inside this thread's own array.
                    unsafe { std::ptr::write_volatile(base.add(i), generation) };
                }
                let nap = if generation % 11 == 0 { 50 } else { 1 };
                std::thread::sleep(Duration::from_millis(nap));
            }
            std::hint::black_box(&words);
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();
    let base = region.load(Ordering::Relaxed) as u64;
    let mut reader = BlockedThreadReader::new();
    let mut stack = vec![0u8; WORDS * 8 + (1 << 20)];
    let (mut whole, mut mixed, mut running) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let Some(b) = reader
            .read(std::process::id(), tid, &mut stack)
            .expect("read")
        else {
            running += 1;
            // Leave the CPU to the thread (on a loaded machine a reader that never pauses keeps it waiting).
            std::thread::sleep(Duration::from_micros(300));
            continue;
        };
        let Some(at) = base.checked_sub(b.regs.sp).map(|a| a as usize) else {
            continue;
        };
        if at + WORDS * 8 > b.stack_len {
            continue;
        }
        let stamp = |i: usize| {
            let o = at + i * 8;
            u64::from_le_bytes(stack[o..o + 8].try_into().unwrap())
        };
        let first = stamp(0);
        if (0..WORDS).step_by(512).all(|i| stamp(i) == first) {
            whole += 1;
        } else {
            mixed += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    stamper.join().unwrap();
    println!("readings: {whole} of one generation, {mixed} of two, {running} running or ran");
    assert_eq!(
        mixed, 0,
        "readings reported blocked with two generations of the stack"
    );
    assert!(
        whole > 0,
        "no reading found the thread blocked ({running} running)"
    );
}

/// As nobody (setpriv), the same statuses: itself running, a zombie and kernel threads `STATUS_INVALID_CID`
/// (their files belong to root: not a denial), pid 1 `STATUS_ACCESS_DENIED` (another user's live process), and
/// the worker of `leader_gone` read with its stack.
#[test]
fn an_unprivileged_caller_gets_the_same_statuses() {
    let _serial = common::serial();
    let programs = Programs::new("unpriv-blocked");
    let program = leader_gone_program(&programs);
    std::fs::set_permissions(
        programs.scratch.dir(),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let helper = programs.scratch.path("blocked-helper");
    std::fs::copy(std::env::current_exe().expect("current_exe"), &helper).expect("copy");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut command = common::unprivileged_command(&helper);
    command
        .args([
            "--exact",
            "blocked::blocked_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(programs.scratch.dir())
        .env("NTPROFILE_BLOCKED_HELPER", &program);
    let (stdout, _, r) = common::run_helper_process(command);
    println!("{stdout}");
    let get = |k: &str| {
        r.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: {r:?}"))
    };
    if nix::unistd::geteuid().is_root() {
        assert_eq!(get("uid"), "65534", "setpriv did not drop to nobody");
        assert_eq!(get("pid1"), hex(NtStatus::ACCESS_DENIED));
    }
    assert_eq!(get("self"), "running");
    assert_eq!(get("zombie"), hex(NtStatus::INVALID_CID));
    assert_eq!(get("kernel"), hex(NtStatus::INVALID_CID));
    assert_eq!(get("worker_syscall"), READ.to_string());
    assert!(get("worker_stack").parse::<usize>().unwrap() > 0, "{r:?}");
    assert_eq!(get("leader"), hex(NtStatus::INVALID_CID));
}

/// The helper's side of [`an_unprivileged_caller_gets_the_same_statuses`]: runs only when re-executed.
#[test]
#[ignore = "a helper process of an_unprivileged_caller_gets_the_same_statuses"]
fn blocked_helper() {
    let _serial = common::serial();
    let Some(program) = std::env::var_os("NTPROFILE_BLOCKED_HELPER") else {
        return;
    };
    let report = |k: &str, v: String| println!("RESULT {k} {v}");
    report("uid", nix::unistd::getuid().to_string());
    let mut stack = vec![0u8; 4096];
    let me = read_blocked_thread(std::process::id(), gettid(), &mut stack);
    report(
        "self",
        match me {
            Ok(None) => "running".into(),
            other => format!("{other:?}").replace(' ', "_"),
        },
    );
    report("zombie", hex(zombie_status()));
    let kernel: Vec<NtStatus> = kernel_threads()
        .into_iter()
        .map(|k| status_of(k, k))
        .collect();
    let all_same = kernel.iter().all(|&s| s == kernel[0]);
    report(
        "kernel",
        if all_same {
            hex(kernel[0])
        } else {
            format!("{kernel:?}").replace(' ', "_")
        },
    );
    report("pid1", hex(status_of(1, 1)));
    let r = leader_gone(Path::new(&program));
    let (syscall, copied) = r.worker.unwrap_or((None, 0));
    report(
        "worker_syscall",
        syscall.map_or("none".into(), |n| n.to_string()),
    );
    report("worker_stack", copied.to_string());
    report("leader", hex(r.leader));
}

/// A reader of many threads keeps a bounded number of files open: 600 threads read once each leave at most the
/// files of 512 threads (two descriptors each) open, not 1200 descriptors.
#[test]
fn a_reader_of_many_threads_keeps_a_bounded_number_of_files_open() {
    // No sampling test opens its events meanwhile (they hold the lock): the descriptor count is this test's.
    let _serial = common::serial();
    let open_fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Arc::new(std::sync::Mutex::new(go_rx));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel::<u32>();
    let threads: Vec<_> = (0..600)
        .map(|_| {
            let (rx, tx) = (Arc::clone(&go_rx), tid_tx.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    tx.send(gettid()).unwrap();
                    let _ = rx.lock().unwrap().recv();
                })
                .unwrap()
        })
        .collect();
    let tids: Vec<u32> = (0..600).map(|_| tid_rx.recv().unwrap()).collect();
    let before = open_fds();
    let mut reader = BlockedThreadReader::new();
    let mut stack = vec![0u8; 256];
    let mut peak = 0;
    for &tid in &tids {
        reader
            .read(std::process::id(), tid, &mut stack)
            .expect("read");
        peak = peak.max(open_fds().saturating_sub(before));
    }
    drop(go_tx);
    for t in threads {
        t.join().unwrap();
    }
    println!("at most {peak} descriptors open for 600 threads read");
    // A margin of 64 for the other tests of this binary that run meanwhile without sampling.
    assert!(peak <= 2 * 512 + 64, "{peak} descriptors open");
    assert!(
        peak >= 2 * 100,
        "the files are kept open between readings: {peak}"
    );
}
