//! 5. The source listing against creates and queries; registered raw events.

use super::*;
use crate::faults::{FAULT_PAGES, check_fault_ratio, fault_run};

// ---------------------------------------------------------------------------------------------------------
// 5. The source listing against creates and queries; registered raw events.
// ---------------------------------------------------------------------------------------------------------

/// Size of `NTPROFILE_SOURCE_INFO`.
const RECORD: usize = 192;

/// A decoded `NTPROFILE_SOURCE_INFO` record.
#[derive(Debug, PartialEq, Eq)]
struct CRecord {
    source: u32,
    supported: u32,
    errno: u32,
    unit: u32,
    min: u32,
    max: u32,
    interval: u32,
    jitter: u32,
    perf_type: u32,
    config: [u64; 3],
    name: String,
    event_name: String,
}

fn decode(rec: &[u8]) -> CRecord {
    let u32_at = |o: usize| u32::from_ne_bytes(rec[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(rec[o..o + 8].try_into().unwrap());
    let text = |o: usize| {
        let field = &rec[o..o + 64];
        let end = field
            .iter()
            .position(|&b| b == 0)
            .expect("a NUL-terminated name");
        String::from_utf8(field[..end].to_vec()).expect("UTF-8 name")
    };
    CRecord {
        source: u32_at(0),
        supported: u32_at(4),
        errno: u32_at(8),
        unit: u32_at(12),
        min: u32_at(16),
        max: u32_at(20),
        interval: u32_at(24),
        jitter: u32_at(28),
        perf_type: u32_at(32),
        config: [u64_at(40), u64_at(48), u64_at(56)],
        name: text(64),
        event_name: text(128),
    }
}

/// `NtprofileRegisterSource`, expecting success; returns the source value.
fn c_register(perf_type: u32, config: u64) -> u32 {
    let mut id = 0u32;
    let st = NtStatus(NtprofileRegisterSource(perf_type, config, 0, 0, &mut id));
    assert_eq!(st, NtStatus::SUCCESS, "register {perf_type}:{config}");
    id
}

#[test]
fn listing_matches_creates_and_queries() {
    let _g = serial();
    // Dropped last: whatever a failure leaves behind, ProfileTime is back at its default for the next test.
    let _time = Restore::to(ProfileSource::Time, TIME_DEFAULT_INTERVAL);
    // Registered raw events: software page-faults (type 1, config 2) and a type no PMU has.
    let pf = c_register(1, 2);
    let bogus = c_register(0x7777, 0);
    println!("registered page-faults as {pf:#x}, type 0x7777 as {bogus:#x}");
    assert!(pf >= REGISTERED_BASE && bogus >= REGISTERED_BASE);
    assert_ne!(pf, bogus);
    assert_eq!(c_register(1, 2), pf, "the same event, the same source");
    assert_eq!(
        c_register(0x7777, 0),
        bogus,
        "the same event, the same source"
    );
    let pf_source = ProfileSource::from_raw(pf).expect("a registered source");
    let bogus_source = ProfileSource::from_raw(bogus).expect("a registered source");

    let list = list_sources();
    let listed = |s: ProfileSource| list.iter().find(|i| i.source == s);
    assert!(
        listed(pf_source).is_some_and(|i| i.support == Support::Supported),
        "the registered page-fault source is listed as supported"
    );
    let bogus_info = listed(bogus_source).expect("the bogus source is listed");
    println!(
        "type 0x7777: {:?} ({})",
        bogus_info.support,
        bogus_info.support.reason()
    );
    assert!(
        matches!(bogus_info.support, Support::OpenFailed(_)),
        "an event type no PMU has is listed as unsupported"
    );
    let intervals = || -> Vec<(ProfileSource, u32)> {
        list_sources()
            .iter()
            .map(|i| (i.source, i.interval))
            .collect()
    };
    let range = touch_range();
    let mut supported = Vec::new();
    for info in &list {
        let s = info.source;
        let raw = s.to_raw();
        assert_eq!(info.name, s.name(), "{s:?}");
        assert_eq!(info.support, s.support(), "{s:?}");
        assert_eq!(info.unit, s.interval_unit(), "{s:?}");
        assert_eq!(info.event, s.perf_event(), "{s:?}");
        assert_eq!(info.max_interval, s.limits().max, "{s:?}");
        assert_eq!(info.min_interval, s.min_interval(), "{s:?}");
        assert_eq!(
            info.jitter_percent,
            ntprofile::source::jitter_percent(s),
            "{s:?}"
        );
        // Supported ⇔ a create over a small range succeeds (Rust and C), and a start really opens the events.
        let built = profile_over(range, s);
        assert_eq!(
            info.support.is_supported(),
            built.is_ok(),
            "{s:?}: listed {:?}, build {:?}",
            info.support,
            built.as_ref().err()
        );
        let c = c_create(range, raw);
        // Interval: the listing says what a query says (0 when not supported).
        assert_eq!(info.interval, query_interval(s), "{s:?}: listed interval");
        assert_eq!(
            c_query(raw),
            (NtStatus::SUCCESS, info.interval),
            "{s:?}: NtQueryIntervalProfile"
        );
        if let Ok(p) = built {
            supported.push(s);
            assert_eq!(c, NtStatus::SUCCESS, "{s:?}: NtCreateProfile");
            p.start()
                .unwrap_or_else(|e| panic!("{s:?}: listed as supported but start fails: {e:?}"));
            p.stop().expect("stop");
            assert_ne!(
                info.interval, 0,
                "{s:?}: a supported source has an interval"
            );
            assert!(info.min_interval <= info.interval && info.interval <= info.max_interval);
            // The listed limits are what clamping does; restore the value in force before.
            let others = |v: Vec<(ProfileSource, u32)>| -> Vec<(ProfileSource, u32)> {
                v.into_iter().filter(|(o, _)| *o != s).collect()
            };
            let before = others(intervals());
            let _restore = Restore::to(s, info.interval);
            assert_eq!(
                set_interval(s, info.min_interval.saturating_sub(1)),
                info.min_interval,
                "{s:?}: below the listed minimum"
            );
            assert_eq!(
                others(intervals()),
                before,
                "{s:?}: setting this source's interval changed another source's (a shared interval slot?)"
            );
            assert_eq!(query_interval(s), info.min_interval, "{s:?}");
            assert_eq!(
                set_interval(s, u32::MAX),
                info.max_interval,
                "{s:?}: above the listed maximum"
            );
            assert_eq!(
                c_query(raw),
                (NtStatus::SUCCESS, info.max_interval),
                "{s:?}"
            );
        } else {
            assert_eq!(built.err(), Some(NtStatus::NOT_SUPPORTED), "{s:?}");
            assert_eq!(c, NtStatus::NOT_SUPPORTED, "{s:?}: NtCreateProfile");
            assert_eq!(info.interval, 0, "{s:?}");
            assert_eq!(set_interval(s, 12_345), 0, "{s:?}: ignored");
            assert_eq!(query_interval(s), 0, "{s:?}");
        }
        assert_eq!(query_interval(s), info.interval, "{s:?}: restored");
    }
    println!(
        "{} sources listed, supported here: {:?}",
        list.len(),
        supported
    );
    assert!(supported.contains(&ProfileSource::Time), "ProfileTime");
    assert!(
        supported.contains(&ProfileSource::PageFaults),
        "page-faults"
    );

    check_c_listing(&list);
}

/// `NtprofileQuerySources`: too small a buffer is STATUS_BUFFER_TOO_SMALL with the total count; a full buffer
/// holds one `NTPROFILE_SOURCE_INFO` per source, each equal to the Rust listing `list` (which is unchanged).
fn check_c_listing(list: &[ntprofile::SourceInfo]) {
    // The C listing: too small a buffer first.
    let mut total = 0u32;
    let mut small = vec![0u64; RECORD / 8];
    let st = NtStatus(NtprofileQuerySources(
        small.as_mut_ptr().cast(),
        1,
        &mut total,
    ));
    assert_eq!(
        st,
        NtStatus::BUFFER_TOO_SMALL,
        "one record for {} sources",
        list.len()
    );
    assert_eq!(total as usize, list.len(), "TotalCount");
    let mut buf = vec![0u64; total as usize * RECORD / 8];
    let mut total2 = 0u32;
    let st = NtStatus(NtprofileQuerySources(
        buf.as_mut_ptr().cast(),
        total,
        &mut total2,
    ));
    assert_eq!(st, NtStatus::SUCCESS);
    assert_eq!(total2, total);
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let now = list_sources();
    assert_eq!(
        now.as_slice(),
        list,
        "the listing is unchanged by the creates, sets and restores"
    );
    for (rec, info) in bytes.chunks_exact(RECORD).zip(&now) {
        let r = decode(rec);
        let event = info.event;
        let expected = CRecord {
            source: info.source.to_raw(),
            supported: u32::from(info.support.is_supported()),
            errno: match info.support {
                Support::OpenFailed(e) => e as u32,
                Support::NeedsKernelPrivilege => libc::EACCES as u32,
                _ => 0,
            },
            unit: match info.unit {
                IntervalUnit::Time100ns => 0,
                IntervalUnit::Events => 1,
            },
            min: info.min_interval,
            max: info.max_interval,
            interval: info.interval,
            jitter: info.jitter_percent,
            perf_type: event.map_or(u32::MAX, |e| e.type_),
            config: event.map_or([0; 3], |e| [e.config, e.config1, e.config2]),
            name: info.name.to_string(),
            event_name: event.map_or(String::new(), |e| e.name.to_string()),
        };
        assert_eq!(r, expected, "record of {:?}", info.source);
        if r.supported == 0 {
            // An errno exactly when an event was tried and failed to open.
            assert_eq!(
                r.errno == 0,
                info.support == Support::NoPerfEvent,
                "{:?}: errno {} for {:?}",
                info.source,
                r.errno,
                info.support
            );
        }
    }
}

#[test]
fn registered_page_fault_source_counts_faults() {
    let _g = serial();
    let id = c_register(1, 2);
    assert!(id >= REGISTERED_BASE, "{id:#x}");
    let s = ProfileSource::from_raw(id).expect("registered");
    assert_eq!(
        ntprofile::register_raw_source(1, 2, 0, 0),
        Ok(s),
        "the Rust and C registrations agree"
    );
    assert!(
        s.support().is_supported(),
        "{s:?}: {}",
        s.support().reason()
    );
    assert!(!s.is_hardware(), "a software raw event");
    // Dropped last: whatever a failure leaves behind, ProfileTime is back at its default for the next test.
    let _time = Restore::to(ProfileSource::Time, TIME_DEFAULT_INTERVAL);
    let time_before = query_interval(ProfileSource::Time);
    assert_eq!(
        query_interval(s),
        1,
        "a software raw event samples every event by default (its own interval, not ProfileTime's {time_before})"
    );
    let _restore = Restore::to(s, 1);
    let st = fault_run(s, 16, FAULT_PAGES);
    assert_eq!(
        query_interval(ProfileSource::Time),
        time_before,
        "setting a registered source's interval changed ProfileTime's"
    );
    check_fault_ratio("registered page-faults", 16, FAULT_PAGES, &st);
}
