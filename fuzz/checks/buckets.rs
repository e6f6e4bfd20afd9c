//! The bucket arithmetic: `check_layout` (checks 1, 3, 4, 5 of `NtCreateProfile`, in order) against a 128-bit
//! reference, and for every layout it accepts, the counter index of arbitrary PCs against NT's byte-offset rule.

use ntprofile::NtStatus;
use ntprofile::buckets::{MAX_BUCKET_SIZE, MIN_BUCKET_SIZE, check_layout, nt_byte_offset};

/// The input the fuzzer builds from its bytes.
pub type Input = (u64, u64, u32, u32, [u64; 4]);

/// The check of one input.
pub fn run(input: Input) {
    let (base, size, bucket_size, buffer_size, pcs) = input;
    let got = check_layout(base, size, bucket_size, buffer_size);
    // The reference, in order, in 128-bit arithmetic.
    let expected = if buffer_size == 0 {
        Err(NtStatus::INVALID_PARAMETER_7)
    } else if !(MIN_BUCKET_SIZE..=MAX_BUCKET_SIZE).contains(&bucket_size) {
        Err(NtStatus::INVALID_PARAMETER)
    } else if (u128::from(size)).div_ceil(1u128 << bucket_size) > u128::from(buffer_size / 4) {
        Err(NtStatus::BUFFER_TOO_SMALL)
    } else if u128::from(base) + u128::from(size) > u128::from(u64::MAX) {
        Err(NtStatus::BUFFER_OVERFLOW)
    } else {
        Ok(())
    };
    assert_eq!(got.map(|_| ()), expected, "{input:?}");
    let Ok(layout) = got else { return };
    assert!(layout.counters_needed <= layout.buffer_counters);
    assert_eq!(layout.end(), base + size);
    // Arbitrary PCs, and the edges of the range.
    let edges = [
        base,
        base.wrapping_sub(1),
        base.wrapping_add(size),
        base.wrapping_add(size).wrapping_sub(1),
    ];
    for pc in pcs.into_iter().chain(edges) {
        let inside = pc >= base && u128::from(pc) < u128::from(base) + u128::from(size);
        match layout.index(pc) {
            Some(i) => {
                assert!(
                    inside,
                    "pc {pc:#x} outside [{base:#x}, +{size:#x}) was counted"
                );
                assert!(
                    i < layout.counters_needed,
                    "index {i} past the counters needed"
                );
                assert_eq!(
                    i * 4,
                    nt_byte_offset(pc, base, bucket_size),
                    "NT's byte offset"
                );
            }
            None => assert!(!inside, "pc {pc:#x} inside the range was not counted"),
        }
    }
}
