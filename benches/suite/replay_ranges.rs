//! The profiles the replay benchmarks start over a recording (`benches/replay.rs` and the suite's instruction
//! counts use the same ones, so that their figures describe the same work).

use ntprofile::engine::replay::Range;

/// `n` profiles over the span of `ips`: all of it each (overlapping), or `n` consecutive slices (disjoint).
pub fn replay_ranges(ips: &[u64], n: usize, overlapping: bool) -> Vec<Range> {
    let lo = ips.iter().copied().min().unwrap_or(0) & !0xF;
    let hi = (ips.iter().copied().max().unwrap_or(0) + 16) & !0xF;
    let span = (hi - lo).max(16 * n as u64);
    (0..n)
        .map(|i| {
            if overlapping {
                Range {
                    base: lo,
                    size: span,
                    bucket_size: 2,
                }
            } else {
                let slice = span.div_ceil(n as u64).next_multiple_of(4);
                Range {
                    base: lo + i as u64 * slice,
                    size: slice,
                    bucket_size: 2,
                }
            }
        })
        .collect()
}
