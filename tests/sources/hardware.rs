//! 1. Hardware sources, honestly.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// 1. Hardware sources, honestly.
// ---------------------------------------------------------------------------------------------------------

/// The hardware-backed built-in sources: a hardware or hardware-cache perf event behind them.
fn hardware_sources() -> Vec<ProfileSource> {
    ProfileSource::ALL
        .iter()
        .copied()
        .filter(|s| s.is_hardware() && s.perf_event().is_some())
        .collect()
}

/// The errno values that mean "this event does not exist / cannot sample here".
fn is_absent_errno(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::ENOENT | Errno::EOPNOTSUPP | Errno::ENODEV | Errno::ENOSYS
    )
}

/// Branch A for one unsupported source: every Rust and C answer says "not supported", and setting its interval
/// changes nothing anywhere.
fn check_unsupported(s: ProfileSource) {
    let raw = s.to_raw();
    let support = s.support();
    assert!(!support.is_supported(), "{s:?}");
    assert!(
        !support.reason().is_empty(),
        "{s:?}: an unsupported source needs a reason"
    );
    let range = touch_range();
    assert_eq!(
        profile_over(range, s).err(),
        Some(NtStatus::NOT_SUPPORTED),
        "{s:?}: build"
    );
    assert_eq!(
        c_create(range, raw),
        NtStatus::NOT_SUPPORTED,
        "{s:?}: NtCreateProfile"
    );
    assert_eq!(query_interval(s), 0, "{s:?}: query_interval");
    assert_eq!(
        c_query(raw),
        (NtStatus::SUCCESS, 0),
        "{s:?}: NtQueryIntervalProfile writes 0 and succeeds"
    );
    let before: Vec<(ProfileSource, u32)> = list_sources()
        .iter()
        .map(|i| (i.source, i.interval))
        .collect();
    assert_eq!(
        set_interval(s, 20_000),
        0,
        "{s:?}: set_interval on an unsupported source"
    );
    assert_eq!(
        c_set(8_192, raw),
        NtStatus::SUCCESS,
        "{s:?}: NtSetIntervalProfile always succeeds"
    );
    let after: Vec<(ProfileSource, u32)> = list_sources()
        .iter()
        .map(|i| (i.source, i.interval))
        .collect();
    assert_eq!(
        before, after,
        "{s:?}: setting an unsupported source's interval changed the listing"
    );
    assert_eq!(query_interval(s), 0, "{s:?}: query after the set");
    assert_eq!(
        c_query(raw),
        (NtStatus::SUCCESS, 0),
        "{s:?}: C query after the set"
    );
    let info = list_sources().into_iter().find(|i| i.source == s).unwrap();
    assert_eq!(
        (info.support, info.interval),
        (support, 0),
        "{s:?}: listing"
    );
}

/// Branch B for one supported hardware source: create works, default 65536, minimum 4096, maximum 2^31.
fn check_supported_hardware(s: ProfileSource) {
    let raw = s.to_raw();
    let _restore = Restore::to(s, PMC_DEFAULT_INTERVAL);
    assert!(
        profile_over(touch_range(), s).is_ok(),
        "{s:?}: build of a supported source"
    );
    assert_eq!(
        c_create(touch_range(), raw),
        NtStatus::SUCCESS,
        "{s:?}: NtCreateProfile"
    );
    assert_eq!(
        query_interval(s),
        PMC_DEFAULT_INTERVAL,
        "{s:?}: default interval"
    );
    assert_eq!(
        set_interval(s, 1),
        PMC_MIN_INTERVAL,
        "{s:?}: below the minimum"
    );
    assert_eq!(c_query(raw), (NtStatus::SUCCESS, PMC_MIN_INTERVAL), "{s:?}");
    assert_eq!(
        set_interval(s, u32::MAX),
        COUNT_MAX_INTERVAL,
        "{s:?}: above the maximum"
    );
    assert_eq!(set_interval(s, 100_000), 100_000, "{s:?}: ordinary");
    assert_eq!(
        c_set(PMC_DEFAULT_INTERVAL, raw),
        NtStatus::SUCCESS,
        "{s:?}: restore"
    );
    assert_eq!(query_interval(s), PMC_DEFAULT_INTERVAL, "{s:?}: restored");
}

#[test]
fn hardware_sources_answer_honestly() {
    let _g = serial();
    let hw = hardware_sources();
    // The list the spec names: every generic hardware event and the Intel HAL values 0x19-0x1F.
    for raw in [
        0x02u32, 0x03, 0x05, 0x06, 0x08, 0x09, 0x0A, 0x0B, 0x13, 0x14, 0x15,
    ]
    .into_iter()
    .chain(0x19..=0x1F)
    {
        let s = ProfileSource::from_raw(raw).expect("a built-in source");
        assert!(hw.contains(&s), "{s:?} ({raw:#x}) must be hardware-backed");
    }
    for s in hw {
        match s.support() {
            Support::Supported => {
                println!("{s:?}: branch B (the PMU has this event)");
                check_supported_hardware(s);
            }
            Support::OpenFailed(errno) => {
                println!(
                    "{s:?}: branch A (no PMU event: errno {}, {})",
                    errno as i32,
                    s.support().reason()
                );
                assert!(
                    is_absent_errno(errno),
                    "{s:?}: errno {errno} does not mean \"no such event\""
                );
                check_unsupported(s);
            }
            Support::NoPerfEvent => panic!("{s:?} has a perf event but reports NoPerfEvent"),
            Support::NeedsKernelPrivilege => panic!("{s:?} is not sampled in the kernel"),
        }
    }
}

#[test]
fn sources_without_perf_event_are_not_supported() {
    let _g = serial();
    let none: Vec<ProfileSource> = ProfileSource::ALL
        .iter()
        .copied()
        .filter(|s| s.perf_event().is_none())
        .collect();
    for raw in [
        0x04u32, 0x07, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x16, 0x17,
    ] {
        let s = ProfileSource::from_raw(raw).expect("a built-in source");
        assert!(
            none.contains(&s),
            "{s:?} ({raw:#x}) has no generic perf event"
        );
    }
    for s in none {
        assert_eq!(s.support(), Support::NoPerfEvent, "{s:?}");
        println!("{s:?}: no perf event ({})", s.support().reason());
        check_unsupported(s);
    }
}

/// Spin in `spin_hw` on this thread for `d`.
fn spin_hw_for(d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 1u64;
    while Instant::now() < end {
        x = spin_hw(x, 100_000);
    }
    black_box(x)
}

#[test]
fn hardware_sampling_hits_the_hot_function() {
    let _g = serial();
    for s in [ProfileSource::TotalCycles, ProfileSource::TotalIssues] {
        match s.support() {
            Support::Supported => {
                println!("{s:?}: branch B: sampling a hot loop");
                let _restore = Restore::to(s, PMC_DEFAULT_INTERVAL);
                assert_eq!(query_interval(s), PMC_DEFAULT_INTERVAL, "{s:?}: default");
                assert_eq!(set_interval(s, 1), PMC_MIN_INTERVAL, "{s:?}: minimum");
                assert_eq!(set_interval(s, PMC_DEFAULT_INTERVAL), PMC_DEFAULT_INTERVAL);
                let p = profile_over(spin_hw_range(), s).expect("build");
                p.start().expect("start");
                spin_hw_for(Duration::from_millis(200));
                p.stop().expect("stop");
                let st = p.stats();
                let in_buckets: u64 = p.counts().iter().map(|&c| u64::from(c)).sum();
                println!("{s:?}: {st:?}");
                assert_eq!(in_buckets, st.counted, "{s:?}: counts and statistics");
                // 200 ms of a spinning core is hundreds of millions of cycles or instructions: thousands of
                // samples at 65536 events each. Nearly all of the thread's time is in spin_hw.
                assert!(st.counted >= 100, "{s:?}: too few samples: {st:?}");
                assert!(
                    st.counted > st.outside,
                    "{s:?}: most samples must land in the hot function: {st:?}"
                );
            }
            Support::OpenFailed(errno) => {
                println!(
                    "{s:?}: branch A: no PMU (errno {}: {}); nothing to sample",
                    errno as i32,
                    s.support().reason()
                );
                assert!(is_absent_errno(errno), "{s:?}: errno {errno}");
                check_unsupported(s);
            }
            Support::NoPerfEvent => panic!("{s:?} has a perf event"),
            Support::NeedsKernelPrivilege => panic!("{s:?} is not sampled in the kernel"),
        }
    }
}
