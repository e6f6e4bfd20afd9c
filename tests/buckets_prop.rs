//! Property tests of the KPROFILE arithmetic (`docs/api.md` sections 3 and 4) against an independent model written here:
//! the create-time checks in their NT order, and the counter a PC lands in.
//!
//! The model computes in `u128`, so it cannot share an overflow bug with the library's `u64` code.

use ntprofile::NtStatus;
use ntprofile::buckets::{check_layout, nt_byte_offset};
use proptest::prelude::*;

/// The spec's section 3, checks 1, 3, 4 and 5, in order, computed in 128 bits.
fn model_status(base: u64, size: u64, bucket_size: u32, buffer_size: u32) -> NtStatus {
    // 1. BufferSize == 0 wins over everything.
    if buffer_size == 0 {
        return NtStatus::INVALID_PARAMETER_7;
    }
    // 3. BucketSize is log2 of the bucket's size, 2..=31.
    if !(2..=31).contains(&bucket_size) {
        return NtStatus::INVALID_PARAMETER;
    }
    // 4. ceil(ProfileSize / 2^BucketSize) counters must fit in floor(BufferSize / 4) ULONGs.
    let bucket = 1u128 << bucket_size;
    let needed = u128::from(size).div_ceil(bucket);
    if needed > u128::from(buffer_size) / 4 {
        return NtStatus::BUFFER_TOO_SMALL;
    }
    // 5. ProfileBase + ProfileSize must not go past the top of the address space (exactly the top passes).
    if u128::from(base) + u128::from(size) > u128::from(u64::MAX) {
        return NtStatus::BUFFER_OVERFLOW;
    }
    NtStatus::SUCCESS
}

/// The model's answer for a PC: `Some(ULONG index)` when `base <= pc < base + size`, from NT's byte offset
/// `((pc - base) >> (BucketSize - 2)) & ~3`, written out here rather than taken from the library.
fn model_index(pc: u64, base: u64, size: u64, bucket_size: u32) -> Option<u64> {
    let (pc, lo, hi) = (
        u128::from(pc),
        u128::from(base),
        u128::from(base) + u128::from(size),
    );
    if pc < lo || pc >= hi {
        return None;
    }
    let byte_offset = ((pc - lo) >> (bucket_size - 2)) & !3u128;
    Some((byte_offset / 4) as u64)
}

/// Sizes spread over every magnitude (a uniform u64 would almost never be small).
fn any_size() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0u64..64,
        (any::<u64>(), 0u32..64).prop_map(|(v, shift)| v >> shift),
        Just(u64::MAX),
        Just(u64::MAX / 2),
    ]
}

/// Bases anywhere, and bases near the top of the address space (where the overflow check matters).
fn any_base(size: u64) -> impl Strategy<Value = u64> {
    let near_top = u64::MAX - size;
    prop_oneof![
        any::<u64>(),
        Just(0u64),
        (0u64..16).prop_map(move |d| near_top.saturating_add(d).saturating_sub(8)),
        Just(near_top),
        (0u64..0x7fff_ffff_ffff).prop_map(|b| b & !0xf),
    ]
}

/// Buffer sizes: any, 0, and within a few bytes of exactly what the range needs (where the exact rule and the
/// defective pre-1703 rule disagree).
fn any_buffer(size: u64, bucket_size: u32) -> impl Strategy<Value = u32> {
    let exact = if (2..=63).contains(&bucket_size) {
        let bucket = 1u128 << bucket_size;
        let needed = u128::from(size).div_ceil(bucket);
        u32::try_from(needed * 4).unwrap_or(u32::MAX)
    } else {
        0
    };
    prop_oneof![
        any::<u32>(),
        Just(0u32),
        0u32..64,
        (-5i64..=5).prop_map(move |d| (i64::from(exact) + d).clamp(0, i64::from(u32::MAX)) as u32),
        Just(exact),
    ]
}

/// (base, size, bucket size, buffer size) with bucket sizes also outside 2..=31.
fn any_args() -> impl Strategy<Value = (u64, u64, u32, u32)> {
    (any_size(), 0u32..=40).prop_flat_map(|(size, bucket_size)| {
        (
            any_base(size),
            Just(size),
            Just(bucket_size),
            any_buffer(size, bucket_size),
        )
    })
}

/// Arguments that mostly pass: bucket size 2..=31 and a buffer at least as large as needed.
fn valid_args() -> impl Strategy<Value = (u64, u64, u32, u32)> {
    (any_size(), 2u32..=31)
        // Shrink a range whose counters could not fit a 32-bit BufferSize (halving keeps the magnitude spread).
        .prop_map(|(mut size, bs)| {
            let bucket = 1u128 << bs;
            while u128::from(size).div_ceil(bucket) > u128::from(u32::MAX / 4) {
                size >>= 1;
            }
            (size, bs)
        })
        .prop_flat_map(|(size, bucket_size)| {
            let bucket = 1u128 << bucket_size;
            // At least one counter: BufferSize 0 is refused before anything else.
            let exact = ((u128::from(size).div_ceil(bucket) * 4) as u32).max(4);
            let extra = u32::MAX - exact;
            (
                any_base(size),
                Just(size),
                Just(bucket_size),
                prop_oneof![
                    Just(exact),
                    (0u32..=3).prop_map(move |d| exact.saturating_add(d)),
                    (0..=extra).prop_map(move |d| exact + d)
                ],
            )
        })
}

/// PCs to try for a layout: both edges of the range, the bytes just outside them, bucket edges, random PCs in
/// the range and anywhere.
fn pcs(base: u64, size: u64, bucket_size: u32) -> impl Strategy<Value = Vec<u64>> {
    let end = base.wrapping_add(size);
    let mut fixed = vec![
        base,
        base.wrapping_sub(1),
        end,
        end.wrapping_sub(1),
        end.wrapping_add(1),
        base.wrapping_add(1 << bucket_size),
        base.wrapping_add(1 << bucket_size).wrapping_sub(1),
        0,
        u64::MAX,
    ];
    // The first byte of the last bucket, and the byte before it.
    if size > 0 {
        let last_bucket = (size - 1) >> bucket_size << bucket_size;
        fixed.push(base.wrapping_add(last_bucket));
        fixed.push(base.wrapping_add(last_bucket).wrapping_sub(1));
    }
    let inside = any::<u64>().prop_map(move |r| {
        if size == 0 {
            base
        } else {
            base.wrapping_add(r % size)
        }
    });
    let near = (-1024i64..1024).prop_map(move |d| end.wrapping_add(d as u64));
    (
        Just(fixed),
        prop::collection::vec(inside, 16),
        prop::collection::vec(any::<u64>(), 8),
        prop::collection::vec(near, 8),
    )
        .prop_map(|(mut a, b, c, d)| {
            a.extend(b);
            a.extend(c);
            a.extend(d);
            a
        })
}

proptest! {
    // No failure persistence: no regressions file appears in tests/ (nobody would commit it); a failure prints
    // its minimal input instead.
    #![proptest_config(ProptestConfig { cases: 4096, failure_persistence: None, ..ProptestConfig::default() })]

    /// check_layout returns the status of the first check that fails, in the spec's order.
    #[test]
    fn status_precedence((base, size, bucket_size, buffer_size) in any_args()) {
        let got = check_layout(base, size, bucket_size, buffer_size);
        let want = model_status(base, size, bucket_size, buffer_size);
        match got {
            Ok(layout) => {
                prop_assert_eq!(want, NtStatus::SUCCESS);
                prop_assert_eq!(layout.base, base);
                prop_assert_eq!(layout.size, size);
                prop_assert_eq!(layout.bucket_size, bucket_size);
                prop_assert_eq!(u128::from(layout.buffer_counters), u128::from(buffer_size / 4));
                let bucket = 1u128 << bucket_size;
                prop_assert_eq!(u128::from(layout.counters_needed), u128::from(size).div_ceil(bucket));
            }
            Err(status) => prop_assert_eq!(status, want),
        }
    }

    /// An accepted layout maps every PC inside [base, base + size) to NT's counter, always inside the buffer,
    /// and every PC outside (base + size above all, and base - 1) to nothing.
    #[test]
    fn index_matches_nt_rule(
        ((base, size, bucket_size, buffer_size), pcs) in valid_args()
            .prop_flat_map(|a| (Just(a), pcs(a.0, a.1, a.2)))
    ) {
        let layout = match check_layout(base, size, bucket_size, buffer_size) {
            Ok(l) => l,
            Err(status) => {
                // Only the overflow check can refuse these arguments (the buffer is large enough).
                prop_assert_eq!(status, NtStatus::BUFFER_OVERFLOW);
                prop_assert_eq!(model_status(base, size, bucket_size, buffer_size), NtStatus::BUFFER_OVERFLOW);
                return Ok(());
            }
        };
        prop_assert_eq!(model_status(base, size, bucket_size, buffer_size), NtStatus::SUCCESS);
        let buffer_counters = u64::from(buffer_size / 4);
        // The end is exclusive: pc == base + size is never counted (base + size cannot wrap: it was accepted).
        prop_assert_eq!(layout.index(base + size), None);
        if base > 0 {
            prop_assert_eq!(layout.index(base - 1), None);
        }
        if size > 0 {
            prop_assert_eq!(layout.index(base), Some(0));
            prop_assert!(layout.index(base + size - 1).is_some());
        } else {
            prop_assert_eq!(layout.index(base), None);
        }
        for pc in pcs {
            let got = layout.index(pc);
            let want = model_index(pc, base, size, bucket_size);
            prop_assert_eq!(got, want, "pc {:#x} in [{:#x}, +{:#x}) bs {}", pc, base, size, bucket_size);
            if let Some(i) = got {
                prop_assert!(i < buffer_counters, "index {} past the buffer's {} counters", i, buffer_counters);
                prop_assert!(i < layout.counters_needed);
                prop_assert_eq!(i, nt_byte_offset(pc, base, bucket_size) / 4);
                prop_assert_eq!(i, (pc - base) >> bucket_size);
            }
        }
    }
}

/// The edges the generators above could miss, spelled out.
#[test]
fn fixed_cases() {
    // A range ending exactly at the top of the address space passes; its last byte counts, the top does not
    // exist as an end PC (u64::MAX is the last byte here).
    let l = check_layout(u64::MAX - 16, 16, 2, 16).unwrap();
    assert_eq!(l.index(u64::MAX - 1), Some(3));
    assert_eq!(
        l.index(u64::MAX),
        None,
        "u64::MAX == base + size: the exclusive end"
    );
    assert_eq!(
        check_layout(u64::MAX - 15, 16, 2, 16),
        Err(NtStatus::BUFFER_OVERFLOW)
    );
    // BufferSize 0 before a bad bucket size before a too-small buffer before an overflow.
    assert_eq!(
        check_layout(u64::MAX, u64::MAX, 40, 0),
        Err(NtStatus::INVALID_PARAMETER_7)
    );
    assert_eq!(
        check_layout(u64::MAX, u64::MAX, 1, 4),
        Err(NtStatus::INVALID_PARAMETER)
    );
    assert_eq!(
        check_layout(u64::MAX, u64::MAX, 32, 4),
        Err(NtStatus::INVALID_PARAMETER)
    );
    assert_eq!(
        check_layout(u64::MAX, u64::MAX, 31, 4),
        Err(NtStatus::BUFFER_TOO_SMALL)
    );
    assert_eq!(
        check_layout(u64::MAX, 1 << 31, 31, 4),
        Err(NtStatus::BUFFER_OVERFLOW)
    );
    // The pre-1703 rule would accept a quarter-bucket too much: 0x103 bytes in 16-byte buckets need 17 counters.
    assert_eq!(
        check_layout(0x1000, 0x103, 4, 16 * 4),
        Err(NtStatus::BUFFER_TOO_SMALL)
    );
    let l = check_layout(0x1000, 0x103, 4, 17 * 4).unwrap();
    assert_eq!(l.index(0x1102), Some(16));
    assert_eq!(l.index(0x1103), None);
}

/// The generators reach every outcome of the checks (otherwise `status_precedence` would test less than it says).
#[test]
fn generators_cover_every_status() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = any_args();
    let mut seen = std::collections::HashMap::new();
    for _ in 0..4096 {
        let (base, size, bs, buf) = strategy.new_tree(&mut runner).unwrap().current();
        *seen
            .entry(model_status(base, size, bs, buf))
            .or_insert(0u32) += 1;
    }
    for status in [
        NtStatus::SUCCESS,
        NtStatus::INVALID_PARAMETER_7,
        NtStatus::INVALID_PARAMETER,
        NtStatus::BUFFER_TOO_SMALL,
        NtStatus::BUFFER_OVERFLOW,
    ] {
        let n = seen.get(&status).copied().unwrap_or(0);
        assert!(
            n >= 40,
            "{status:?} generated only {n} times in 4096: {seen:?}"
        );
    }
}
