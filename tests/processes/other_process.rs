//! 1. Another process, by pid.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// 1. Another process, by pid.
// ---------------------------------------------------------------------------------------------------------

/// A parent profiles its child through `NtOpenProcess`: two hot functions with a designed 75/25 split (measured
/// exactly by the child) are counted in proportion, within 3 binomial sigma; a thread the child creates only
/// after the profile started is counted too; stop and close succeed after the child exited and leave the
/// counts alone.
#[test]
fn profiles_a_child_process_by_pid_including_a_late_thread() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let dir = TempDir::new("pid");
    let spin = build_spin(&dir.path);
    let mut target = Target::spawn(&spin, &["split", "600"]);

    let mut process = ProcessHandle::open(target.pid()).expect("NtOpenProcess of the child");
    let (start, stop) = span(&target, &["hot_a", "hot_b", "hot_c"]);
    let mut profile =
        CProfile::create(process.handle, start, stop - start, 2).expect("NtCreateProfile");
    assert_eq!(profile.start(), NtStatus::SUCCESS);
    // Only now does the child create its second thread.
    target.go();
    let truth = target.finish();
    // The child has exited (and been reaped): stop and close must still succeed.
    assert_eq!(
        profile.stop(),
        NtStatus::SUCCESS,
        "NtStopProfile after the child exited"
    );
    let stats = profile.stats();
    let after_stop = profile.counts();
    let a = profile.count_in(target.range("hot_a"));
    let b = profile.count_in(target.range("hot_b"));
    let c = profile.count_in(target.range("hot_c"));
    assert_eq!(profile.close(), NtStatus::SUCCESS, "NtClose of the profile");
    assert_eq!(
        profile.counts(),
        after_stop,
        "the counts changed after the stop"
    );
    assert_eq!(
        process.close(),
        NtStatus::SUCCESS,
        "NtClose of the process handle"
    );

    let (ta, tb, tc) = (truth["a"] as f64, truth["b"] as f64, truth["c"] as f64);
    let p = ta / (ta + tb);
    let n = (a + b) as f64;
    let measured = a as f64 / n.max(1.0);
    let sigma = (p * (1.0 - p) / n.max(1.0)).sqrt();
    let expected_ab = (ta + tb) / period;
    let expected_c = tc / period;
    note(format!(
        "child by pid: truth a {:.1} ms b {:.1} ms c {:.1} ms ({} chunks); counts a {a} b {b} c {c}; \
         {stats:?}; share of a {measured:.4} vs true {p:.4}: {:.2} sigma (sigma {sigma:.4}); \
         a+b {:.0}% and c {:.0}% of time/period",
        ta / 1e6,
        tb / 1e6,
        tc / 1e6,
        truth["chunks"],
        (measured - p).abs() / sigma,
        100.0 * n / expected_ab,
        100.0 * c as f64 / expected_c,
    ));
    assert!(
        n >= 0.5 * expected_ab,
        "hot_a + hot_b counted {n}, expected about {expected_ab:.0}"
    );
    assert!(
        (measured - p).abs() <= 3.0 * sigma,
        "share of hot_a {measured:.4}, truth {p:.4}, beyond 3 sigma ({sigma:.4})"
    );
    assert!(
        c as f64 >= 0.5 * expected_c,
        "the thread created after the start ran hot_c for {:.1} ms but only {c} samples were counted \
         (expected about {expected_c:.0})",
        tc / 1e6
    );
    assert_eq!(
        stats.counted,
        a + b + c,
        "every counted sample is in one function"
    );
}
