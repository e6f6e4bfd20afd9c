//! 2. The count-interval path without a PMU: page faults.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// 2. The count-interval path without a PMU: page faults.
// ---------------------------------------------------------------------------------------------------------

/// Pages touched per run: 32 MiB of 4 KiB pages, a few tens of milliseconds.
pub(crate) const FAULT_PAGES: usize = 8192;

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(v).expect("page size")
}

/// Pins the calling thread to the CPU it runs on and restores its affinity when dropped. A count-based source's
/// period runs per (thread, CPU) event: a thread that migrates would split its events between two counters and
/// leave a partial period behind in each.
pub(crate) struct Pin {
    previous: nix::sched::CpuSet,
}

impl Pin {
    pub(crate) fn here() -> Pin {
        use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        use nix::unistd::Pid;
        let previous = sched_getaffinity(Pid::from_raw(0)).expect("sched_getaffinity");
        let mut one = CpuSet::new();
        one.set(sched_getcpu().expect("sched_getcpu"))
            .expect("cpu set");
        sched_setaffinity(Pid::from_raw(0), &one).expect("sched_setaffinity");
        Pin { previous }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &self.previous);
    }
}

/// Runs the calling thread under `SCHED_FIFO` when permitted (root or CAP_SYS_NICE), restoring its policy when
/// dropped. A thread of another process that preempts the periodic workload shifts the workload's phase
/// against the sampler (the cpu-clock timer pauses while the thread is off the CPU, the wall-clock deadlines do
/// not); a real-time thread pinned to its CPU is not preempted by ordinary tasks (only, a few times per
/// second at most, by the kernel's real-time throttling), so it shows what a fixed period does to a periodic
/// workload that has its CPU to itself.
pub(crate) struct Realtime {
    policy: libc::c_int,
    param: libc::sched_param,
}

impl Realtime {
    pub(crate) fn try_enter() -> Option<Realtime> {
        let mut policy = 0;
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: the calling thread; valid out-pointers.
        let rc =
            unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
        if rc != 0 {
            return None;
        }
        let fifo = libc::sched_param { sched_priority: 10 };
        // SAFETY: the calling thread; a valid parameter block.
        let rc =
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &fifo) };
        (rc == 0).then_some(Realtime { policy, param })
    }
}

impl Drop for Realtime {
    fn drop(&mut self) {
        // SAFETY: the calling thread (the guard never leaves it); the saved parameter block.
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), self.policy, &self.param) };
    }
}

/// One run of the page-fault workload under `source` with interval `n`: map a fresh anonymous region, start a
/// profile over `touch_pages`, touch every page, stop, unmap. Returns the profile's statistics.
pub(crate) fn fault_run(source: ProfileSource, n: u32, pages: usize) -> ProfileStats {
    assert_eq!(set_interval(source, n), n, "{source:?}: interval {n}");
    assert_eq!(query_interval(source), n, "{source:?}: query");
    let p = profile_over(touch_range(), source).expect("build a fault profile");
    let page = page_size();
    let len = pages * page;
    let _pin = Pin::here();
    // SAFETY: a fresh private anonymous mapping; unmapped below, nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    // Huge pages (PMD or multi-size) would fault once per folio, not once per page. (A kernel without
    // transparent huge pages refuses the advice with EINVAL, and has nothing to turn off.)
    // SAFETY: advice on the mapping made above.
    let rc = unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    assert!(
        rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL),
        "madvise(MADV_NOHUGEPAGE): {}",
        std::io::Error::last_os_error()
    );
    p.start().expect("start");
    touch_pages(base.cast::<u8>(), pages, page);
    p.stop().expect("stop");
    // SAFETY: the mapping made above, no longer used.
    let rc = unsafe { libc::munmap(base, len) };
    assert_eq!(rc, 0, "munmap");
    let st = p.stats();
    let in_buckets: u64 = p.counts().iter().map(|&c| u64::from(c)).sum();
    assert_eq!(in_buckets, st.counted, "counts and statistics agree");
    st
}

/// Check `counted` against `pages / n` within ±10 %; returns the ratio.
pub(crate) fn check_fault_ratio(what: &str, n: u32, pages: usize, st: &ProfileStats) -> f64 {
    let expected = pages as f64 / f64::from(n);
    let ratio = st.counted as f64 / expected;
    println!(
        "{what}: interval {n}: {} samples in touch_pages for {pages} faults (expected {expected:.0}, \
         ratio {ratio:.3}); outside {}, lost {}",
        st.counted, st.outside, st.lost
    );
    assert_eq!(st.lost, 0, "{what}: samples lost");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{what}: interval {n}: {} samples, expected {expected:.0} ± 10 %",
        st.counted
    );
    ratio
}

#[test]
fn page_faults_sample_every_nth_fault() {
    let _g = serial();
    let s = ProfileSource::PageFaults;
    assert!(
        s.support().is_supported(),
        "page-faults is a software event"
    );
    assert_eq!(s.interval_unit(), IntervalUnit::Events);
    let _restore = Restore::to(s, s.limits().default);
    for n in [1u32, 8, 64] {
        let st = fault_run(s, n, FAULT_PAGES);
        check_fault_ratio("PageFaults", n, FAULT_PAGES, &st);
    }
}

#[test]
fn minor_faults_sample_every_nth_fault() {
    let _g = serial();
    let s = ProfileSource::MinorFaults;
    assert!(
        s.support().is_supported(),
        "minor-faults is a software event"
    );
    let _restore = Restore::to(s, s.limits().default);
    let st = fault_run(s, 16, FAULT_PAGES);
    check_fault_ratio("MinorFaults", 16, FAULT_PAGES, &st);
}
