//! The KPROFILE arithmetic: the create-time checks of `NtCreateProfile` that concern the range and the buffer
//! (`docs/api.md` section 3, checks 1 to 5, in that order), and the bucket rule of `docs/api.md` section 4.
//!
//! Pure functions, no I/O, no unsafe: unit-, property- and Miri-tested.

use crate::status::NtStatus;

/// The smallest `BucketSize` (log2 of the bucket's size in bytes): 4-byte buckets.
///
/// ```
/// use ntprofile::buckets::{MAX_BUCKET_SIZE, MIN_BUCKET_SIZE};
/// assert_eq!((MIN_BUCKET_SIZE, MAX_BUCKET_SIZE), (2, 31));
/// ```
pub const MIN_BUCKET_SIZE: u32 = 2;
/// The largest `BucketSize`: 2 GiB buckets.
///
/// ```
/// assert_eq!(1u64 << ntprofile::buckets::MAX_BUCKET_SIZE, 2 << 30);
/// ```
pub const MAX_BUCKET_SIZE: u32 = 31;

/// A validated range and bucket layout: what a started profile needs to turn a PC into a counter index.
///
/// ```
/// // 0x1000 bytes at 0x40_0000 in 16-byte buckets, with a buffer of exactly 256 counters.
/// let layout = ntprofile::buckets::check_layout(0x40_0000, 0x1000, 4, 256 * 4)?;
/// assert_eq!(layout.counters_needed, 256);
/// assert_eq!(layout.index(0x40_0010), Some(1));
/// assert_eq!(layout.index(layout.end()), None); // the end is exclusive
/// # Ok::<(), ntprofile::NtStatus>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketLayout {
    /// `ProfileBase`.
    pub base: u64,
    /// `ProfileSize`, in bytes. The range is `[base, base + size)`, end exclusive.
    pub size: u64,
    /// `BucketSize`, the log2 of a bucket's size in bytes (2..=31).
    pub bucket_size: u32,
    /// Counters the range needs: `ceil(size / 2^bucket_size)`.
    pub counters_needed: u64,
    /// Counters the buffer holds: `floor(BufferSize / 4)`.
    pub buffer_counters: u64,
}

/// Counters a range of `size` bytes needs with `2^bucket_size`-byte buckets: `ceil(size / 2^bucket_size)`,
/// computed exactly (Windows computes it in 32 bits and lets some huge ranges through).
///
/// ```
/// use ntprofile::buckets::counters_needed;
/// assert_eq!(counters_needed(4096, 4), 256);
/// assert_eq!(counters_needed(4097, 4), 257); // a partial bucket needs a counter
/// assert_eq!(counters_needed(0, 4), 0);
/// ```
pub const fn counters_needed(size: u64, bucket_size: u32) -> u64 {
    let shifted = size >> bucket_size;
    let rem = size & ((1u64 << bucket_size) - 1);
    shifted + (rem != 0) as u64
}

/// The byte offset into the buffer that NT computes for `pc`: `((pc - base) >> (BucketSize - 2)) & ~3`.
/// Only meaningful for a `pc` inside the range.
///
/// ```
/// use ntprofile::buckets::nt_byte_offset;
/// // PC 0x24 bytes into 16-byte buckets: counter 2, at byte offset 8.
/// assert_eq!(nt_byte_offset(0x1024, 0x1000, 4), 8);
/// ```
pub const fn nt_byte_offset(pc: u64, base: u64, bucket_size: u32) -> u64 {
    (pc.wrapping_sub(base) >> (bucket_size - 2)) & !3
}

/// The create-time checks of `docs/api.md` section 3 that concern the range and the buffer, in the spec's order:
///
/// 1. `BufferSize == 0` → `STATUS_INVALID_PARAMETER_7`;
/// 3. `BucketSize` outside `2..=31` → `STATUS_INVALID_PARAMETER`;
/// 4. `ceil(ProfileSize / 2^BucketSize) > floor(BufferSize / 4)` → `STATUS_BUFFER_TOO_SMALL`;
/// 5. `ProfileBase + ProfileSize` wraps → `STATUS_BUFFER_OVERFLOW` (a sum of exactly the top address passes).
///
/// (Check 2 exists only on 32-bit x86 Windows.) The later checks (source, pointers, processors, process) belong
/// to the caller, in that order.
///
/// # Errors
/// The status of the first check that fails.
///
/// ```
/// use ntprofile::NtStatus;
/// use ntprofile::buckets::check_layout;
///
/// assert_eq!(check_layout(0x1000, 64, 2, 0), Err(NtStatus::INVALID_PARAMETER_7));
/// assert_eq!(check_layout(0x1000, 64, 1, 64), Err(NtStatus::INVALID_PARAMETER));
/// assert_eq!(check_layout(0x1000, 64, 2, 60), Err(NtStatus::BUFFER_TOO_SMALL));
/// assert_eq!(check_layout(u64::MAX - 7, 64, 2, 64), Err(NtStatus::BUFFER_OVERFLOW));
/// assert!(check_layout(0x1000, 64, 2, 64).is_ok());
/// ```
pub fn check_layout(
    base: u64,
    size: u64,
    bucket_size: u32,
    buffer_size: u32,
) -> Result<BucketLayout, NtStatus> {
    if buffer_size == 0 {
        return Err(NtStatus::INVALID_PARAMETER_7);
    }
    if !(MIN_BUCKET_SIZE..=MAX_BUCKET_SIZE).contains(&bucket_size) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let needed = counters_needed(size, bucket_size);
    let buffer_counters = u64::from(buffer_size / 4);
    if needed > buffer_counters {
        return Err(NtStatus::BUFFER_TOO_SMALL);
    }
    if base.checked_add(size).is_none() {
        return Err(NtStatus::BUFFER_OVERFLOW);
    }
    Ok(BucketLayout {
        base,
        size,
        bucket_size,
        counters_needed: needed,
        buffer_counters,
    })
}

impl BucketLayout {
    /// The ULONG index of the counter for `pc`, or `None` when `pc` is outside `[base, base + size)`.
    ///
    /// One subtraction and one comparison: `pc - base` (wrapping) is below `size` exactly when `pc` is inside
    /// the range, so `pc == base + size` is never counted (the end-inclusive defect is impossible). The index is
    /// `(pc - base) >> BucketSize`, the same counter as NT's byte offset `((pc - base) >> (BucketSize-2)) & ~3`,
    /// and it is always below `counters_needed`, hence below `buffer_counters`.
    ///
    /// ```
    /// let layout = ntprofile::buckets::check_layout(0x1000, 64, 2, 64)?;
    /// assert_eq!(layout.index(0x1000), Some(0));
    /// assert_eq!(layout.index(0x103F), Some(15));
    /// assert_eq!(layout.index(0x1040), None);
    /// assert_eq!(layout.index(0x0FFF), None);
    /// # Ok::<(), ntprofile::NtStatus>(())
    /// ```
    #[inline(always)]
    pub fn index(&self, pc: u64) -> Option<u64> {
        let off = pc.wrapping_sub(self.base);
        if off < self.size {
            Some(off >> self.bucket_size)
        } else {
            None
        }
    }

    /// The exclusive end of the range (does not wrap: checked at creation).
    ///
    /// ```
    /// let layout = ntprofile::buckets::check_layout(0x1000, 64, 2, 64)?;
    /// assert_eq!(layout.end(), 0x1040);
    /// # Ok::<(), ntprofile::NtStatus>(())
    /// ```
    pub fn end(&self) -> u64 {
        self.base + self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_of_checks() {
        // BufferSize 0 wins over everything, even a bad bucket size and an overflowing range.
        assert_eq!(
            check_layout(u64::MAX, 10, 0, 0),
            Err(NtStatus::INVALID_PARAMETER_7)
        );
        // Bucket size before buffer size.
        assert_eq!(
            check_layout(0, 1 << 20, 1, 4),
            Err(NtStatus::INVALID_PARAMETER)
        );
        assert_eq!(
            check_layout(0, 1 << 20, 32, 4),
            Err(NtStatus::INVALID_PARAMETER)
        );
        // Buffer size before overflow.
        assert_eq!(
            check_layout(u64::MAX, 1 << 20, 2, 4),
            Err(NtStatus::BUFFER_TOO_SMALL)
        );
        assert_eq!(
            check_layout(u64::MAX, 4, 2, 4),
            Err(NtStatus::BUFFER_OVERFLOW)
        );
    }

    #[test]
    fn exact_buffer_rule() {
        // 17 bytes in 4-byte buckets need 5 counters = 20 bytes.
        assert_eq!(
            check_layout(0x1000, 17, 2, 16),
            Err(NtStatus::BUFFER_TOO_SMALL)
        );
        assert!(check_layout(0x1000, 17, 2, 20).is_ok());
        // BufferSize not a multiple of 4 rounds down.
        assert_eq!(
            check_layout(0x1000, 17, 2, 19),
            Err(NtStatus::BUFFER_TOO_SMALL)
        );
        // ProfileSize 0 needs no counter.
        assert!(check_layout(0x1000, 0, 2, 4).is_ok());
        // The case Windows lets through on x64 (32-bit count): SIZE_MAX/2, BucketSize 31, 2 GiB buffer.
        assert_eq!(
            check_layout(0, u64::MAX / 2, 31, 0x8000_0000),
            Err(NtStatus::BUFFER_TOO_SMALL)
        );
        // The pre-1703 rule `(size >> (bs-2)) > BufferSize` would accept this one (a quarter-bucket too long).
        let (size, bs, buf) = (0x1000 + 3, 4u32, 0x1000 / 4);
        assert!(size >> (bs - 2) <= buf as u64);
        assert_eq!(
            check_layout(0, size, bs, buf),
            Err(NtStatus::BUFFER_TOO_SMALL)
        );
    }

    #[test]
    fn overflow_edge() {
        // A sum of exactly the top address passes; one more wraps.
        assert!(check_layout(u64::MAX - 8, 8, 2, 8).is_ok());
        assert_eq!(
            check_layout(u64::MAX - 7, 8, 2, 8),
            Err(NtStatus::BUFFER_OVERFLOW)
        );
    }

    #[test]
    fn end_is_exclusive() {
        let l = check_layout(0x1000, 0x100, 4, 0x100 / 16 * 4).unwrap();
        assert_eq!(l.index(0x1000), Some(0));
        assert_eq!(l.index(0x10FF), Some(15));
        assert_eq!(l.index(0x1100), None);
        assert_eq!(l.index(0xFFF), None);
        assert_eq!(nt_byte_offset(0x10FF, 0x1000, 4) / 4, 15);
    }
}
