//! The perf ring decoder fed arbitrary ring contents and arbitrary `data_tail`/`data_head` positions: it must
//! terminate quickly, never read outside `[tail, head)` or at an unaligned position (the harness asserts both on
//! every read), and end the pass where the protocol says.

use ntprofile::fuzzing::decode_ring;

/// The input: `(tail, head, tid, near, bytes)`.
pub type Input<'a> = (u64, u64, bool, bool, &'a [u8]);

/// The check of one input.
pub fn run(input: Input<'_>) {
    let (tail, head, tid, near, bytes) = input;
    // The data area: the bytes, padded with zeros to a power of two of at least 8 (at most 64 KiB).
    let len = bytes.len().clamp(8, 1 << 16).next_power_of_two();
    let mut data = vec![0u8; len];
    let n = bytes.len().min(len);
    data[..n].copy_from_slice(&bytes[..n]);
    // Positions either anywhere, or a head within a few ring lengths of the tail (the usual case).
    let head = if near {
        tail.saturating_add(head % (4 * len as u64 + 1))
    } else {
        head
    };
    let d = decode_ring(&data, tail, head, tid);
    if tail % 8 != 0 || tail > head || head - tail > len as u64 {
        assert_eq!(d.records, 0);
        assert_eq!(d.end, head.max(tail));
    } else {
        assert_eq!(d.end, head, "a pass always reaches head");
        assert!(d.records <= (head - tail) / 8, "more records than words");
        assert!(d.samples + d.throttles <= d.records);
    }
}
