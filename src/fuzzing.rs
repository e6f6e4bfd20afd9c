//! Entry points for the fuzz targets (`fuzz/`) and for Miri: internals that are not part of the API, exposed
//! only so that code outside the crate can drive them. Hidden from the documentation; no stability promise.
//!
//! What is here: the perf ring record decoder run over a byte slice (the consumer runs the same decoder over a
//! mapped ring). The bucket arithmetic ([`crate::buckets`]) and the handle table (through the C exports) are
//! reachable without it.

use crate::perf::ring::{Record, SampleLayout, decode_slice};

/// What one decoding pass found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The position the pass stopped at (the ring's new `data_tail`).
    pub end: u64,
    /// Records decoded.
    pub records: u64,
    /// `PERF_RECORD_SAMPLE` records.
    pub samples: u64,
    /// Samples reported lost (`PERF_RECORD_LOST`, `PERF_RECORD_LOST_SAMPLES`), summed with wrap-around.
    pub lost: u64,
    /// `PERF_RECORD_THROTTLE` and `PERF_RECORD_UNTHROTTLE` records.
    pub throttles: u64,
}

/// Decode the records at ring positions `[tail, head)` of a ring whose data area is `data` (its length a power
/// of two, at least 8; position `p` is byte `p & (len - 1)`), with `PERF_SAMPLE_TID` in samples when `tid`.
///
/// # Panics
/// When `data`'s length is not a power of two of at least 8, or when the decoder reads a word outside
/// `[tail, head)` or at an unaligned position (the fuzzer's finding).
pub fn decode_ring(data: &[u8], tail: u64, head: u64, tid: bool) -> Decoded {
    let mut d = Decoded::default();
    // The same words with a user-ip register block after each sample's fixed fields (the layout of a stream
    // whose event is sampled in the kernel) must end at the same place with the same records.
    let with_user_ip = SampleLayout {
        tid,
        user_ip: true,
        cpu: false,
    };
    let (end_ip, records_ip) = decode_slice(data, tail, head, with_user_ip, |_| ());
    let (end, records) = decode_slice(
        data,
        tail,
        head,
        SampleLayout {
            tid,
            user_ip: false,
            cpu: false,
        },
        |r| match r {
            Record::Sample { .. } => d.samples += 1,
            Record::Lost(n) => d.lost = d.lost.wrapping_add(n),
            Record::Throttle | Record::Unthrottle => d.throttles += 1,
            Record::Fork { .. } | Record::Exit { .. } | Record::Other => {}
        },
    );
    assert_eq!(
        (end, records),
        (end_ip, records_ip),
        "the user-ip layout changes only the ip"
    );
    d.end = end;
    d.records = records;
    d
}
