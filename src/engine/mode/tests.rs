//! The choice of a stream's layout from the budgets and the privilege, and the message when nothing fits.

use super::*;

fn budget(hard: u64, locked: Option<u64>) -> Budget {
    Budget::for_tests(hard, locked, 2, false)
}

#[test]
fn per_thread_where_it_saves_descriptors_and_its_rings_fit() {
    let b = budget(20_000, Some(9 << 20));
    let p = choose(1000, 96, None, &b).unwrap();
    assert_eq!(p.mode, EventMode::PerThread);
    // 1000 rings in half of 9 MiB: one data page each (2 pages = 8 KiB each).
    assert_eq!(p.pages, 1);
    // Few threads: rings as large as a processor's.
    assert_eq!(
        choose(4, 96, Some(EventMode::PerThread), &b).unwrap().pages,
        64
    );
    assert_eq!(
        choose(1000, 2, None, &b).unwrap().mode,
        EventMode::ThreadCpu
    );
    // Where the hard limit would hold 96,000 (thread × processor) events, per-thread events still take
    // 3,000 instead; below 1,024 of them, (thread × processor) events (a later thread observed at once).
    let roomy = budget(200_000, Some(9 << 20));
    assert_eq!(
        choose(1000, 96, None, &roomy).unwrap().mode,
        EventMode::PerThread
    );
    assert_eq!(
        choose(10, 96, None, &roomy).unwrap().mode,
        EventMode::ThreadCpu
    );
    // No room for 1000 rings: (thread × processor) if the descriptors allow it.
    let tight = budget(200_000, Some(1 << 20));
    assert_eq!(
        choose(1000, 96, None, &tight).unwrap().mode,
        EventMode::ThreadCpu
    );
    // Without a locked-memory limit, 1000 rings within 32 MiB: four data pages each.
    assert_eq!(
        choose(1000, 96, None, &budget(20_000, None)).unwrap().pages,
        4
    );
}

/// With the privilege, many threads × processors get processor-wide filtered events; few keep (thread ×
/// processor) events; forcing it without the privilege names the capability.
#[test]
fn privileged_many_threads_take_processor_wide_filtered_events() {
    let mut b = budget(20_000, Some(9 << 20));
    b.privileged = true;
    assert_eq!(
        choose(1000, 96, None, &b).unwrap().mode,
        EventMode::CpuFiltered
    );
    // 513 threads on 2 processors need 1,026 (thread × processor) events; 512 need 1,024.
    assert_eq!(
        choose(513, 2, None, &b).unwrap().mode,
        EventMode::CpuFiltered
    );
    assert_eq!(choose(512, 2, None, &b).unwrap().mode, EventMode::ThreadCpu);
    assert_eq!(
        choose(11, 96, None, &b).unwrap().mode,
        EventMode::CpuFiltered
    );
    assert_eq!(choose(10, 96, None, &b).unwrap().mode, EventMode::ThreadCpu);
    assert_eq!(
        choose(100, 96, Some(EventMode::ThreadCpu), &b)
            .unwrap()
            .mode,
        EventMode::ThreadCpu
    );
    // Forced where its descriptors do not fit: the hard limit is named, with thread-cpu's count.
    let e = choose(1000, 96, Some(EventMode::ThreadCpu), &b).unwrap_err();
    assert!(e.contains("ulimit -Hn") && e.contains("96"), "{e}");
    // A hard limit of 1,500 holds 96 processor-wide events, not 2,000 threads' events in any other layout.
    let mut small = budget(1500, Some(1 << 20));
    small.privileged = true;
    assert_eq!(
        choose(2000, 96, None, &small).unwrap().mode,
        EventMode::CpuFiltered
    );
    let e = choose(
        2000,
        96,
        Some(EventMode::CpuFiltered),
        &budget(20_000, None),
    )
    .unwrap_err();
    assert!(e.contains("CAP_PERFMON"), "{e}");
}

#[test]
fn rings_that_do_not_fit_name_the_locked_memory() {
    let e = choose(
        2000,
        2,
        Some(EventMode::PerThread),
        &budget(20_000, Some(9 << 20)),
    )
    .unwrap_err();
    assert!(
        e.contains("RLIMIT_MEMLOCK") && !e.contains("ulimit -Hn"),
        "{e}"
    );
}

#[test]
fn nothing_fits_names_the_limits() {
    let b = budget(1500, Some(1 << 20));
    let e = choose(2000, 2, None, &b).unwrap_err();
    assert!(
        e.contains("4000 descriptors") && e.contains("RLIMIT_NOFILE 1024/1500"),
        "{e}"
    );
    assert!(e.contains("ulimit -Hn"), "{e}");
    assert!(
        choose(
            2000,
            2,
            Some(EventMode::PerThread),
            &budget(20_000, Some(1 << 20))
        )
        .is_err()
    );
}
