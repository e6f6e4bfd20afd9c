//! Tests of the dispatch: exact drains against the range index, throttle episodes from either record, and the
//! rule that tells when a ring may have dropped records since its previous drain.
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use super::{Active, CpuRing, StreamDispatch, may_have_dropped};
use crate::affinity::CpuSet;
use crate::buckets::{check_layout, counters_needed};
use crate::engine::counters::{CounterStorage, Counts, StreamId};
use crate::perf::ring::{Ring, SampleLayout};

/// A profile of `[base, base + size)` in 16-byte buckets, counting on processor 0.
fn profile(base: u64, size: u64) -> Arc<Counts> {
    let n = counters_needed(size, 4);
    let layout = check_layout(base, size, 4, (n * 4) as u32).expect("layout");
    let storage = CounterStorage::Owned((0..n).map(|_| AtomicU32::new(0)).collect());
    Arc::new(Counts::new(layout, storage))
}

/// Every sample is counted in every started profile whose range holds it, whether the drain matched it
/// through the rebuilt range index or, in an exact drain right after the set changed, against every
/// profile.
#[test]
fn exact_drains_after_a_change_count_like_the_index() {
    let ips: Vec<u64> = (0..400u64).map(|i| 0x1000 + (i * 37) % 0x300).collect();
    // One sample record per IP as the kernel writes them: header (PERF_RECORD_SAMPLE, user mode, 16 bytes),
    // then the IP.
    let rec: Vec<u8> = ips
        .iter()
        .flat_map(|&ip| {
            let header = 9u64 | (2u64 << 32) | (16u64 << 48);
            [header.to_ne_bytes(), ip.to_ne_bytes()]
        })
        .flatten()
        .collect();
    let ring = Ring::anonymous(4, SampleLayout::default()).expect("ring");
    let mut s = StreamDispatch::new(StreamId(0));
    s.rings.push(CpuRing::new(Some(0), ring, -1, Vec::new()));
    let ranges = [
        (0x1000, 0x100),
        (0x1080, 0x200),
        (0x1200, 0x40),
        (0x2000, 0x10),
    ];
    let on_cpu0 = CpuSet::from_cpus([0]);
    let mut counts = Vec::new();
    let expect = |n: usize| -> Vec<u64> {
        ranges[..n]
            .iter()
            .map(|&(b, sz)| ips.iter().filter(|&&ip| ip >= b && ip < b + sz).count() as u64)
            .collect()
    };
    let counted = |counts: &[Arc<Counts>]| -> Vec<u64> {
        counts
            .iter()
            .map(|c| {
                let buckets = c.storage.snapshot().expect("owned counters");
                buckets.iter().map(|&b| u64::from(b)).sum()
            })
            .collect()
    };
    let mut want = vec![0u64; ranges.len()];
    for (n, &(b, sz)) in ranges.iter().enumerate() {
        // Started like the consumer's publish: the set is stale until a drain rebuilds it.
        let c = profile(b, sz);
        s.active.push(Active::new(c.clone(), on_cpu0.clone()));
        s.rebuild_index();
        counts.push(c);
        s.rings[0].ring.load(&rec);
        // Odd steps settle exactly (no rebuild: every profile is tried), even steps drain as the
        // consumer's pass does (rebuild, then the index).
        let records = if n % 2 == 1 {
            s.drain_exact()
        } else {
            s.drain()
        };
        assert_eq!(records, ips.len() as u64, "step {n}");
        for (w, e) in want.iter_mut().zip(expect(n + 1)) {
            *w += e;
        }
        let mut got = counted(&counts);
        got.resize(ranges.len(), 0);
        assert_eq!(
            got,
            want,
            "after start {n} ({})",
            if n % 2 == 1 { "exact" } else { "index" }
        );
    }
    assert!(
        want.iter().take(3).all(|&w| w > 0),
        "the ranges hold samples: {want:?}"
    );
}

/// A throttle episode whose Throttle record the full ring dropped still counts, from its Unthrottle record;
/// an episode with both records counts once. (Before, only Throttle records counted: 1 here, not 2.)
#[test]
fn a_throttle_whose_record_was_dropped_counts_from_its_unthrottle() {
    let record = |kind: u64| {
        // PERF_RECORD_THROTTLE (5) / UNTHROTTLE (6): header, then time, id, stream id.
        let header = kind | (32u64 << 48);
        [header, 1, 2, 3]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect::<Vec<u8>>()
    };
    let c = profile(0x1000, 0x100);
    let ring = Ring::anonymous(4, SampleLayout::default()).expect("ring");
    let mut s = StreamDispatch::new(StreamId(0));
    s.rings.push(CpuRing::new(Some(0), ring, -1, Vec::new()));
    s.active
        .push(Active::new(c.clone(), CpuSet::from_cpus([0])));
    s.rebuild_index();
    // A whole episode, then one whose Throttle was dropped, across two drains.
    s.rings[0]
        .ring
        .load(&[record(5), record(6), record(6)].concat());
    s.drain_exact();
    assert_eq!(c.stats.read().throttled, 2);
    // Records of several events interleave in a ring, so an episode is counted once the larger of the two
    // counts grows: a third Throttle (as many of each now) waits for its Unthrottle.
    s.rings[0].ring.load(&record(5));
    s.drain_exact();
    assert_eq!(c.stats.read().throttled, 2);
    s.rings[0].ring.load(&record(6));
    s.drain_exact();
    assert_eq!(c.stats.read().throttled, 3);
}

#[test]
fn a_drop_during_a_drain_is_found_by_the_next_one() {
    let size = 4096;
    // The ring looked half full, the drain consumed 2 KiB while the kernel filled the rest and dropped,
    // then the writers stopped: the next drain finds 2 KiB, no Lost record, and must still read the count.
    assert!(may_have_dropped(2048, 2048, false, 0, size));
    assert!(may_have_dropped(4000, 0, false, 0, size));
    // Two small drains in a row: the kernel never lacked room.
    assert!(!may_have_dropped(1024, 1024, false, 0, size));
    assert!(may_have_dropped(0, 0, true, 0, size));
    assert!(may_have_dropped(0, 0, false, 3, size));
}
