//! The consumer's wake-up cadence: how long it sleeps between timed drains, tuned to the rate at which the
//! fullest ring fills, within bounds; longer while the rings stay empty.

/// The shortest sleep between timed drains while samples flow: at very high rates the consumer drains at least
/// this often, so that a ring keeps most of its space free for a moment when the consumer is not scheduled.
pub(crate) const DRAIN_INTERVAL_MS: i32 = 20;
/// The longest sleep between timed drains while samples flow: counts in a caller's buffer are at most this late
/// (live statistics and `Sync` drain first, so they are never late). Between the two bounds the sleep is tuned to
/// the rate: long enough that a drain reads about `DRAIN_TARGET_DIVISOR`-th of the fullest ring. Each wake-up
/// costs tens of microseconds on a VM; at 10 kHz a 20 ms cadence spent about 300 ns per sample on wake-ups alone,
/// 100 ms spends about a fifth of that.
pub(crate) const BUSY_DRAIN_INTERVAL_MS: i32 = 100;
/// The longest sleep when passes find nothing (an idle process with started profiles): the timeout doubles
/// from `BUSY_DRAIN_INTERVAL_MS` up to this while rings stay empty, and drops back at the first record. An idle
/// profile should not cost 50 wake-ups a second.
pub(crate) const IDLE_DRAIN_INTERVAL_MS: i32 = 200;
/// The longest sleep while a per-thread stream is followed: a thread it sees created is sampled only once the
/// consumer has read its fork record (which wakes no one: the ring's watermark counts bytes) and the helper thread
/// has opened its event, and what it runs until then is counted as lost. 100 wake-ups a second, each of tens of
/// microseconds, are the price of seeing a new thread within about 10 ms.
pub(crate) const FOLLOW_DRAIN_INTERVAL_MS: i32 = 10;
/// A timed drain aims to find the fullest ring at most this fraction full (1/8), well under the wake-up watermark
/// (1/4 of the ring, set at open), so that the watermark only wakes the consumer when the rate jumps.
const DRAIN_TARGET_DIVISOR: u64 = 8;

/// How full the fullest ring of a pass was: bytes read from it, and its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fill {
    pub bytes: u64,
    pub ring_bytes: u64,
}

impl Fill {
    /// Keep the fuller of two (compared as fractions of their rings).
    pub(crate) fn max(self, other: Fill) -> Fill {
        if u128::from(other.bytes) * u128::from(self.ring_bytes.max(1))
            > u128::from(self.bytes) * u128::from(other.ring_bytes.max(1))
        {
            other
        } else {
            self
        }
    }
}

/// The busy sleep (ms) after a pass whose fullest ring had `fill` after `elapsed_ms` since the previous pass:
/// the time that ring takes to fill to 1/`DRAIN_TARGET_DIVISOR` at the observed rate, within
/// [`DRAIN_INTERVAL_MS`, `BUSY_DRAIN_INTERVAL_MS`].
pub(crate) fn busy_timeout(fill: Fill, elapsed_ms: u64) -> i32 {
    let target = fill.ring_bytes / DRAIN_TARGET_DIVISOR;
    let ms = elapsed_ms
        .max(1)
        .saturating_mul(target)
        .checked_div(fill.bytes)
        .unwrap_or(u64::MAX);
    ms.clamp(DRAIN_INTERVAL_MS as u64, BUSY_DRAIN_INTERVAL_MS as u64) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 256 * 1024;

    #[test]
    fn busy_timeout_is_tuned_to_the_rate_within_its_bounds() {
        // 10 kHz of 16-byte samples on one CPU: 100 ms fill 16 KB, far under 1/8 of a 256 KB ring: the longest
        // busy sleep.
        let f = Fill {
            bytes: 16_000,
            ring_bytes: RING,
        };
        assert_eq!(busy_timeout(f, 100), BUSY_DRAIN_INTERVAL_MS);
        // 1/8 of the ring in 20 ms (about 100 kHz): aim for 20 ms.
        let f = Fill {
            bytes: RING / 8,
            ring_bytes: RING,
        };
        assert_eq!(busy_timeout(f, 20), 20);
        // 1/8 of the ring in 60 ms: 60 ms.
        assert_eq!(busy_timeout(f, 60), 60);
        // Faster than the floor allows, or a one-page ring: the floor (the watermark wakes earlier).
        let f = Fill {
            bytes: 4096,
            ring_bytes: 4096,
        };
        assert_eq!(busy_timeout(f, 5), DRAIN_INTERVAL_MS);
        // Nothing read: the longest busy sleep.
        assert_eq!(busy_timeout(Fill::default(), 0), BUSY_DRAIN_INTERVAL_MS);
    }

    #[test]
    fn the_fuller_ring_is_kept_as_a_fraction() {
        let small_full = Fill {
            bytes: 2048,
            ring_bytes: 4096,
        };
        let big_less = Fill {
            bytes: 8192,
            ring_bytes: RING,
        };
        assert_eq!(small_full.max(big_less), small_full);
        assert_eq!(big_less.max(small_full), small_full);
        assert_eq!(Fill::default().max(big_less), big_less);
    }
}
