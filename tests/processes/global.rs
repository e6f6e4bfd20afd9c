//! 3. Global profiles.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// 3. Global profiles.
// ---------------------------------------------------------------------------------------------------------

/// A global profile (Process = NULL) over the text of `spin` counts two processes running it, each in its own
/// function; a global profile of the kernel half counts a system-call-heavy loop.
#[test]
fn global_profile_counts_two_processes_and_the_kernel() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let dir = TempDir::new("global");
    let spin = build_spin(&dir.path);
    let privileged = ntprofile::target::has_system_profile_privilege();
    if !privileged {
        // Without the privilege the only correct answer is the refusal (the unprivileged test covers it too).
        let refused = CProfile::create(std::ptr::null_mut(), SPIN_TEXT, 0x10000, 4).err();
        assert_eq!(refused, Some(NtStatus::PRIVILEGE_NOT_HELD));
        note("global: not privileged here, only the refusal was checked");
        crate::common::skip("needs the system-profile privilege for its global half (run as root)");
        return;
    }

    // Two processes of the same non-PIE program, one in hot_a, the other in hot_b.
    let mut first = Target::spawn(&spin, &["run", "a", "300"]);
    let mut second = Target::spawn(&spin, &["run", "b", "300"]);
    assert_eq!(
        first.ranges, second.ranges,
        "a non-PIE program has one layout"
    );
    let (start, stop) = span(&first, &["hot_a", "hot_b", "hot_c", "hot_t"]);
    let mut profile = CProfile::create(std::ptr::null_mut(), start, stop - start, 2)
        .expect("global NtCreateProfile");
    assert_eq!(profile.start(), NtStatus::SUCCESS);
    first.go();
    second.go();
    let (truth_a, truth_b) = (first.finish()["ns"] as f64, second.finish()["ns"] as f64);
    assert_eq!(profile.stop(), NtStatus::SUCCESS);
    let a = profile.count_in(first.range("hot_a"));
    let b = profile.count_in(first.range("hot_b"));
    let others = profile.total() - a - b;
    let stats = profile.stats();
    assert_eq!(profile.close(), NtStatus::SUCCESS);
    let (expected_a, expected_b) = (truth_a / period, truth_b / period);
    note(format!(
        "global, two processes: hot_a {a} (expected ~{expected_a:.0}), hot_b {b} (expected ~{expected_b:.0}), \
         elsewhere in the text {others}; {stats:?}"
    ));
    assert!(
        a as f64 >= 0.5 * expected_a,
        "the first process's hot_a: {a} of ~{expected_a:.0}"
    );
    assert!(
        b as f64 >= 0.5 * expected_b,
        "the second process's hot_b: {b} of ~{expected_b:.0}"
    );
    assert!(
        a as f64 <= 1.5 * expected_a && b as f64 <= 1.5 * expected_b,
        "more samples than CPU time: nothing else runs this text"
    );

    // The kernel half of the address space: 65536 buckets of 2 GiB; a loop of reads from /dev/zero.
    let mut kernel = CProfile::create(std::ptr::null_mut(), KERNEL_BASE, KERNEL_SIZE, 31)
        .expect("global kernel-range NtCreateProfile");
    assert_eq!(kernel.counters.len(), 65536);
    let zero = std::fs::File::open("/dev/zero").expect("open /dev/zero");
    let mut chunk = vec![0u8; 64 * 1024];
    let system_time = || {
        let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
            .expect("getrusage");
        let t = usage.system_time();
        Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
    };
    assert_eq!(kernel.start(), NtStatus::SUCCESS);
    let sys_before = system_time();
    let end = Instant::now() + Duration::from_millis(300);
    let mut reads = 0u64;
    while Instant::now() < end {
        let n = nix::unistd::read(&zero, &mut chunk).expect("read /dev/zero");
        assert_eq!(n, chunk.len());
        reads += 1;
    }
    let sys = system_time() - sys_before;
    assert_eq!(kernel.stop(), NtStatus::SUCCESS);
    let counts = kernel.counts();
    let total: u64 = counts.iter().map(|c| u64::from(*c)).sum();
    let busy: Vec<(usize, u32)> = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(i, c)| (i, *c))
        .collect();
    let kstats = kernel.stats();
    assert_eq!(kernel.close(), NtStatus::SUCCESS);
    let expected = sys.as_nanos() as f64 / period;
    note(format!(
        "global kernel range: {reads} reads of 64 KiB, {:.1} ms of system time (~{expected:.0} samples); \
         counted {total} in buckets {busy:?}; {kstats:?}",
        sys.as_secs_f64() * 1e3
    ));
    assert!(
        total as f64 >= 0.5 * expected,
        "kernel range counted {total}, the loop alone spent ~{expected:.0} periods in the kernel"
    );
    assert!(
        busy.iter().all(|(i, _)| *i >= 0x8000),
        "kernel samples below the top half of the kernel range: {busy:?}"
    );
}
