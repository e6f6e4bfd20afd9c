//! Fault injection at the kernel boundary: `fault_shim.c`, built here with gcc and preloaded into a fresh run
//! of this test binary, makes `perf_event_open`, `mmap` of a perf descriptor and `pidfd_open` fail on demand.
//!
//! For each fault: the start (or open) gives its documented status; everything it took is given back (same
//! descriptors, threads and mappings as before); a profile started before keeps counting; and once the fault
//! is gone, the same profile starts and counts.

use std::ffi::{CString, c_long, c_void};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ntprofile::NtStatus;
use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtOpenProcess, NtSetIntervalProfile, NtStartProfile, NtStopProfile,
    NtprofileQueryStatistics,
};
use ntprofile::profile::ProfileStats;

use crate::{CURRENT_PROCESS, hot_in_section, is_isolated_child, isolated_with, snapshot, st};

hot_in_section!(hot, range, "ntp_fault_hot", 0x5F);

/// `ProfileTime` and the Linux `task-clock` source.
const PROFILE_TIME: u32 = 0;
const TASK_CLOCK: u32 = 0x1_0000;

/// Whether this is the isolated child of test `name`, which runs with the fault shim preloaded. In the test
/// itself: build the shim, run the test again in a child process with it (`isolated_with`), remove it, and return
/// false.
pub(crate) fn in_shim_child(name: &str) -> bool {
    in_shim_child_with(name, &[])
}

/// [`in_shim_child`] with more environment variables for the child (e.g. `NTPROFILE_EVENTS`).
pub(crate) fn in_shim_child_with(name: &str, env: &[(&str, &str)]) -> bool {
    if is_isolated_child(name) {
        return true;
    }
    // One shim test at a time, each with its own build of the shim, removed after its child ended: a shim
    // shared by tests running in parallel was removed by the first to finish while another's child was still
    // to preload it ("cannot open shared object file"), and gcc rewriting it under a running child gave "file
    // too short".
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let so = build_shim_now();
    let mut all = vec![("LD_PRELOAD", so.to_str().unwrap())];
    all.extend_from_slice(env);
    isolated_with(name, &all);
    let _ = std::fs::remove_dir_all(so.parent().unwrap());
    false
}

fn build_shim_now() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ntprofile-fault-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let so = dir.join("libntpfault.so");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hardening/fault_shim.c");
    let out = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc fault_shim.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// The shim's control functions, found in the preloaded library.
pub(crate) struct Shim {
    open: extern "C" fn(i32, i32, i32),
    esrch: extern "C" fn(i32),
    pub(crate) mmap: extern "C" fn(i32, c_long),
    pidfd: extern "C" fn(i32),
    pub(crate) clear: extern "C" fn(),
    injected: extern "C" fn() -> c_long,
    watermark: extern "C" fn(i32) -> c_long,
    pub(crate) mapped: extern "C" fn(i32) -> c_long,
}

fn sym(name: &str) -> *mut c_void {
    let c = CString::new(name).unwrap();
    // SAFETY: dlsym with the default handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    assert!(
        !p.is_null(),
        "{name} not found: the fault shim is not preloaded"
    );
    p
}

impl Shim {
    pub(crate) fn load() -> Shim {
        // SAFETY: each symbol is the C function of that name in fault_shim.c, with this signature.
        unsafe {
            Shim {
                open: std::mem::transmute::<*mut c_void, extern "C" fn(i32, i32, i32)>(sym(
                    "ntp_fault_open",
                )),
                esrch: std::mem::transmute::<*mut c_void, extern "C" fn(i32)>(sym(
                    "ntp_fault_esrch",
                )),
                mmap: std::mem::transmute::<*mut c_void, extern "C" fn(i32, c_long)>(sym(
                    "ntp_fault_mmap",
                )),
                pidfd: std::mem::transmute::<*mut c_void, extern "C" fn(i32)>(sym(
                    "ntp_fault_pidfd",
                )),
                clear: std::mem::transmute::<*mut c_void, extern "C" fn()>(sym("ntp_fault_clear")),
                injected: std::mem::transmute::<*mut c_void, extern "C" fn() -> c_long>(sym(
                    "ntp_fault_injected",
                )),
                watermark: std::mem::transmute::<*mut c_void, extern "C" fn(i32) -> c_long>(sym(
                    "ntp_perf_watermark",
                )),
                mapped: std::mem::transmute::<*mut c_void, extern "C" fn(i32) -> c_long>(sym(
                    "ntp_perf_mapped",
                )),
            }
        }
    }
}

/// A profile of [`range`] through the C exports.
struct Prof {
    handle: *mut c_void,
    _buffer: Box<[u32]>,
}

impl Prof {
    fn new(source: u32) -> Prof {
        let (base, size) = range();
        let mut buffer = vec![0u32; size / 4 + 1].into_boxed_slice();
        let mut handle: *mut c_void = std::ptr::null_mut();
        let s = st(NtCreateProfile(
            &mut handle,
            CURRENT_PROCESS,
            base as *mut c_void,
            size,
            2,
            buffer.as_mut_ptr(),
            (buffer.len() * 4) as u32,
            source,
            usize::MAX,
        ));
        assert_eq!(s, NtStatus::SUCCESS, "create");
        Prof {
            handle,
            _buffer: buffer,
        }
    }

    fn start(&self) -> NtStatus {
        st(NtStartProfile(self.handle))
    }

    fn stop(&self) -> NtStatus {
        st(NtStopProfile(self.handle))
    }

    fn stats(&self) -> ProfileStats {
        let mut s = ProfileStats::default();
        assert_eq!(
            st(NtprofileQueryStatistics(self.handle, &mut s)),
            NtStatus::SUCCESS
        );
        s
    }
}

impl Drop for Prof {
    fn drop(&mut self) {
        assert_eq!(st(NtClose(self.handle)), NtStatus::SUCCESS);
    }
}

fn burn(d: Duration) {
    let end = Instant::now() + d;
    let mut x = 1u64;
    while Instant::now() < end {
        x = hot(x, 20_000);
    }
    std::hint::black_box(x);
}

/// The perf descriptors of this process (as the shim saw them opened), with their watermark and mapped length.
fn perf_rings(shim: &Shim) -> Vec<(i32, c_long, c_long)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let fd: i32 = entry
            .unwrap()
            .file_name()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let mapped = (shim.mapped)(fd);
        if mapped > 0 {
            out.push((fd, (shim.watermark)(fd), mapped));
        }
    }
    out
}

#[test]
fn kernel_faults() {
    const NAME: &str = "faults::kernel_faults";
    if !in_shim_child(NAME) {
        return;
    }
    let shim = Shim::load();
    let page = 4096;
    // The sources are probed (and cached as supported) before any fault.
    let other = Prof::new(PROFILE_TIME);
    assert_eq!(other.start(), NtStatus::SUCCESS);
    let victim = Prof::new(TASK_CLOCK);
    let helper_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let helper = {
        let stop = helper_stop.clone();
        std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let helper_tid = tid_rx.recv().unwrap();

    type Setup<'a> = Box<dyn Fn(&Shim) + 'a>;
    let cases: Vec<(&str, Setup, NtStatus)> = vec![
        (
            "perf_event_open EMFILE",
            Box::new(|s: &Shim| (s.open)(libc::EMFILE, -1, 0)),
            NtStatus::INSUFFICIENT_RESOURCES,
        ),
        (
            "perf_event_open ENFILE",
            Box::new(|s: &Shim| (s.open)(libc::ENFILE, -1, 0)),
            NtStatus::INSUFFICIENT_RESOURCES,
        ),
        (
            "perf_event_open ENOMEM",
            Box::new(|s: &Shim| (s.open)(libc::ENOMEM, -1, 0)),
            NtStatus::INSUFFICIENT_RESOURCES,
        ),
        (
            "perf_event_open ENOMEM after 3 opens (partial stream)",
            Box::new(|s: &Shim| (s.open)(libc::ENOMEM, -1, 3)),
            NtStatus::INSUFFICIENT_RESOURCES,
        ),
        (
            "perf_event_open EINTR once",
            Box::new(|s: &Shim| (s.open)(libc::EINTR, 1, 0)),
            NtStatus::SUCCESS,
        ),
        (
            "perf_event_open ENOENT",
            Box::new(|s: &Shim| (s.open)(libc::ENOENT, -1, 0)),
            NtStatus::NOT_SUPPORTED,
        ),
        (
            "mmap EPERM (every size)",
            Box::new(|s: &Shim| (s.mmap)(libc::EPERM, 0)),
            NtStatus::INSUFFICIENT_RESOURCES,
        ),
        (
            "mmap ENOMEM (every size)",
            Box::new(|s: &Shim| (s.mmap)(libc::ENOMEM, 0)),
            NtStatus::INSUFFICIENT_RESOURCES,
        ),
        (
            "mmap EPERM above one data page (tiny rings)",
            Box::new(move |s: &Shim| (s.mmap)(libc::EPERM, 2 * page)),
            NtStatus::SUCCESS,
        ),
        (
            "perf_event_open ESRCH for a thread (it exited after the scan)",
            Box::new(move |s: &Shim| (s.esrch)(helper_tid)),
            NtStatus::SUCCESS,
        ),
    ];
    let mut table = Vec::new();
    for (name, setup, expected) in &cases {
        let before = snapshot();
        let other_before = other.stats().counted;
        setup(&shim);
        let status = victim.start();
        let injected = (shim.injected)();
        if status.is_success() && name.contains("tiny rings") {
            // The watermark fits the ring that could be mapped: every mapped ring's owner was opened with a
            // wake-up watermark of at most a quarter of its data area.
            let rings = perf_rings(&shim);
            assert!(!rings.is_empty());
            for (fd, watermark, mapped) in rings.iter().filter(|r| r.2 <= 2 * page as c_long) {
                let data = mapped - page as c_long;
                assert!(
                    *watermark <= data / 4,
                    "ring of fd {fd}: watermark {watermark} for {data} data bytes"
                );
            }
            // Nothing lost to the watermark: a fast timer into one-page rings. A watermark past the data area
            // would never wake the consumer, and all but the last ring's worth (about 85 samples) of the 300 ms
            // would be lost; a consumer kept from a processor on a loaded machine loses some (5.3 % seen at load
            // average 12), so the bound is half.
            NtSetIntervalProfile(400, TASK_CLOCK);
            burn(Duration::from_millis(300));
            let s = victim.stats();
            NtSetIntervalProfile(10_000, TASK_CLOCK);
            let total = s.counted + s.outside + s.lost;
            println!(
                "tiny rings: counted {} outside {} lost {}",
                s.counted, s.outside, s.lost
            );
            assert!(
                s.lost * 2 <= total,
                "tiny rings lost {} of {total} samples",
                s.lost
            );
        }
        if status.is_success() {
            assert_eq!(victim.stop(), NtStatus::SUCCESS);
        }
        (shim.clear)();
        let after = snapshot();
        table.push(format!(
            "{name:<62} {status:?} (faults injected: {injected})"
        ));
        assert_eq!(status, *expected, "{name}");
        assert!(injected > 0, "{name}: the fault was never hit");
        assert_eq!(
            after, before,
            "{name}: descriptors, threads or mappings left behind"
        );
        // The profile started before keeps counting.
        burn(Duration::from_millis(60));
        assert!(
            other.stats().counted > other_before,
            "{name}: the other profile stopped counting"
        );
        // The fault is gone: the same profile starts and counts.
        let counted = victim.stats().counted;
        assert_eq!(
            victim.start(),
            NtStatus::SUCCESS,
            "{name}: start after the fault"
        );
        burn(Duration::from_millis(60));
        assert_eq!(victim.stop(), NtStatus::SUCCESS);
        assert!(
            victim.stats().counted > counted,
            "{name}: no count after the fault"
        );
    }
    // pidfd_open failures at NtOpenProcess.
    for (errno, expected) in [
        (libc::EMFILE, NtStatus::INSUFFICIENT_RESOURCES),
        (libc::ENFILE, NtStatus::INSUFFICIENT_RESOURCES),
        (libc::ENOMEM, NtStatus::INSUFFICIENT_RESOURCES),
        (libc::ESRCH, NtStatus::INVALID_CID),
    ] {
        let before = snapshot();
        let mut handle: *mut c_void = 0x77 as *mut c_void;
        let mut cid = [u64::from(std::process::id()), 0];
        (shim.pidfd)(errno);
        let s = st(NtOpenProcess(
            &mut handle,
            0,
            std::ptr::null_mut(),
            cid.as_mut_ptr().cast(),
        ));
        let injected = (shim.injected)();
        (shim.clear)();
        table.push(format!(
            "{:<62} {s:?} (faults injected: {injected})",
            format!("pidfd_open {}", std::io::Error::from_raw_os_error(errno))
        ));
        assert_eq!(s, expected);
        assert_eq!(handle as usize, 0x77, "a failed open wrote the handle");
        assert_eq!(snapshot(), before);
        let s = st(NtOpenProcess(
            &mut handle,
            0,
            std::ptr::null_mut(),
            cid.as_mut_ptr().cast(),
        ));
        assert_eq!(s, NtStatus::SUCCESS, "open after the fault");
        assert_eq!(st(NtClose(handle)), NtStatus::SUCCESS);
    }
    println!("fault                                                          status");
    for line in &table {
        println!("{line}");
    }
    helper_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    helper.join().unwrap();
    assert_eq!(other.stop(), NtStatus::SUCCESS);
}
