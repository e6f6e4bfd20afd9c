//! Intervals: what a source's interval counts, its default and limits (the timer's floor read from the kernel),
//! and the per-source interval and jitter tables of this process, indexed by the slots the source tables share.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{MAX_REGISTERED, ProfileSource};

/// What a source's interval counts.
///
/// ```
/// use ntprofile::{IntervalUnit, ProfileSource};
///
/// assert_eq!(ProfileSource::Time.interval_unit(), IntervalUnit::Time100ns);
/// assert_eq!(ProfileSource::PageFaults.interval_unit(), IntervalUnit::Events);
/// // ProfileTime's interval 1000 is a period of 100 µs.
/// assert_eq!(ProfileSource::Time.period_for(1000), 100_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalUnit {
    /// 100 ns units of time (ProfileTime, task-clock): the perf period is `interval × 100` ns.
    Time100ns,
    /// Events between samples: the perf period is the interval itself.
    Events,
}

/// Limits of a source's interval. The timer's minimum also depends on the kernel at run time
/// (see [`ProfileSource::min_interval`]).
///
/// ```
/// use ntprofile::ProfileSource;
///
/// let limits = ProfileSource::TotalCycles.limits();
/// assert_eq!((limits.default, limits.min), (65_536, 4_096));
/// // Requests are clamped into the limits.
/// assert_eq!(ProfileSource::TotalCycles.clamp_interval(10), 4_096);
/// assert!(ProfileSource::Time.min_interval() >= ntprofile::source::TIME_KERNEL_FLOOR);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntervalLimits {
    /// The interval a source starts with.
    pub default: u32,
    /// The smallest interval accepted (requests below are raised to it).
    pub min: u32,
    /// The largest interval accepted (requests above are lowered to it).
    pub max: u32,
}

/// ProfileTime's default: 10000 × 100 ns = 1 ms, as modern Windows HALs.
pub const TIME_DEFAULT_INTERVAL: u32 = 10_000;
/// The timer's floor on Linux: the cpu-clock hrtimer never fires faster than every 10 µs (100 × 100 ns).
pub const TIME_KERNEL_FLOOR: u32 = 100;
/// The timer's documented maximum: 1 s (10,000,000 × 100 ns).
pub const TIME_MAX_INTERVAL: u32 = 10_000_000;
/// Hardware-counter sources: default 65536 events, minimum 4096, as Windows HALs.
pub const PMC_DEFAULT_INTERVAL: u32 = 65_536;
/// Hardware-counter minimum.
pub const PMC_MIN_INTERVAL: u32 = 4_096;
/// Documented maximum for every count-based source: 2^31 events between samples.
pub const COUNT_MAX_INTERVAL: u32 = 0x8000_0000;

impl ProfileSource {
    /// What the interval counts for this source.
    pub fn interval_unit(self) -> IntervalUnit {
        match self {
            ProfileSource::Time | ProfileSource::TaskClock => IntervalUnit::Time100ns,
            _ => IntervalUnit::Events,
        }
    }

    /// Static interval limits (the timer's run-time floor is applied by [`ProfileSource::min_interval`]).
    pub fn limits(self) -> IntervalLimits {
        if self == ProfileSource::AlignmentFixup {
            // Special in Windows: its interval is only stored and read back, whatever the value.
            return IntervalLimits {
                default: 1,
                min: 0,
                max: u32::MAX,
            };
        }
        match self.interval_unit() {
            IntervalUnit::Events if matches!(self, ProfileSource::Registered(_)) => {
                IntervalLimits {
                    default: if self.is_hardware() {
                        PMC_DEFAULT_INTERVAL
                    } else {
                        1
                    },
                    min: 1,
                    max: COUNT_MAX_INTERVAL,
                }
            }
            IntervalUnit::Time100ns => IntervalLimits {
                default: TIME_DEFAULT_INTERVAL,
                min: TIME_KERNEL_FLOOR,
                max: TIME_MAX_INTERVAL,
            },
            IntervalUnit::Events if self.is_hardware() => IntervalLimits {
                default: PMC_DEFAULT_INTERVAL,
                min: PMC_MIN_INTERVAL,
                max: COUNT_MAX_INTERVAL,
            },
            IntervalUnit::Events => IntervalLimits {
                default: 1,
                min: 1,
                max: COUNT_MAX_INTERVAL,
            },
        }
    }

    /// The smallest interval in force now. For timer sources it follows from the kernel's limits, read at each
    /// call (never cached across a change of the sysctl): the cpu-clock floor of 10 µs, and
    /// `kernel.perf_event_max_sample_rate`, above which the kernel throttles.
    pub fn min_interval(self) -> u32 {
        let limits = self.limits();
        match self.interval_unit() {
            IntervalUnit::Time100ns => {
                let rate = read_max_sample_rate().unwrap_or(100_000).max(1);
                // 1 / rate seconds, in 100 ns units, rounded up.
                let from_rate = 10_000_000u64.div_ceil(rate);
                (from_rate.max(u64::from(limits.min))).min(u64::from(limits.max)) as u32
            }
            IntervalUnit::Events => limits.min,
        }
    }

    /// Clamp a requested interval into `[min_interval(), max]`.
    pub fn clamp_interval(self, interval: u32) -> u32 {
        interval.clamp(self.min_interval(), self.limits().max)
    }

    /// The perf sample period (nanoseconds for timers, events otherwise) for an interval of this source.
    pub fn period_for(self, interval: u32) -> u64 {
        match self.interval_unit() {
            IntervalUnit::Time100ns => interval as u64 * 100,
            // A period of 0 would turn sampling off (AlignmentFixup stores any value): at least every event.
            IntervalUnit::Events => (interval as u64).max(1),
        }
    }

    /// The source's slot in the per-source tables: built-in sources first, registered ones after them.
    pub(super) fn table_index(self) -> usize {
        match self {
            ProfileSource::Registered(n) => BUILTIN_SLOTS + usize::from(n),
            _ => ProfileSource::ALL
                .iter()
                .position(|s| *s == self)
                .expect("every built-in source is in ALL"),
        }
    }
}

fn read_max_sample_rate() -> Option<u64> {
    crate::perf::proc::perf_event_max_sample_rate()
}

/// The per-source interval table of this process: what `NtSetIntervalProfile` stored (0 = never set: the
/// default). Shared by every profile of a source, as NT's per-source interval.
static INTERVALS: [AtomicU64; TABLE_SIZE] = [const { AtomicU64::new(0) }; TABLE_SIZE];

/// Marks a stored interval in `INTERVALS` (0 there means "never set": the default); any u32 can be stored.
const STORED: u64 = 1 << 32;

/// Slots reserved for the built-in sources in the per-source tables.
pub(super) const BUILTIN_SLOTS: usize = 64;
/// Slots of the per-source tables: the built-in sources, then the registered ones.
pub(super) const TABLE_SIZE: usize = BUILTIN_SLOTS + MAX_REGISTERED;

/// Jitter of each source's period, in percent (0 = a fixed period).
static JITTER: [AtomicU32; TABLE_SIZE] = [const { AtomicU32::new(0) }; TABLE_SIZE];

/// The largest jitter accepted, in percent.
pub const MAX_JITTER_PERCENT: u32 = 90;

/// The jitter of `source`'s period, in percent (0: fixed).
pub fn jitter_percent(source: ProfileSource) -> u32 {
    // Relaxed: a self-contained setting, re-read by the engine under its lock.
    JITTER[source.table_index()].load(Ordering::Relaxed)
}

pub(crate) fn store_jitter(source: ProfileSource, percent: u32) {
    // Relaxed: see `jitter_percent`.
    JITTER[source.table_index()].store(percent, Ordering::Relaxed);
}

/// The interval stored for `source` (before the run-time clamp).
fn stored_interval(source: ProfileSource) -> u32 {
    // Relaxed: the value is self-contained; the engine re-reads it under its own lock when it programs events.
    match INTERVALS[source.table_index()].load(Ordering::Relaxed) {
        0 => source.limits().default,
        v => v as u32,
    }
}

/// The effective interval of `source`: the stored (or default) value clamped into today's limits.
pub fn effective_interval(source: ProfileSource) -> u32 {
    source.clamp_interval(stored_interval(source))
}

/// Store a new interval for `source`, clamped into its limits; returns the effective value.
pub(crate) fn store_interval(source: ProfileSource, interval: u32) -> u32 {
    let clamped = source.clamp_interval(interval);
    // Relaxed: see `stored_interval`.
    INTERVALS[source.table_index()].store(STORED | u64::from(clamped), Ordering::Relaxed);
    clamped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_fixup_interval_is_stored_and_read_back() {
        let s = ProfileSource::AlignmentFixup;
        for v in [0, 1, 12345, u32::MAX] {
            assert_eq!(store_interval(s, v), v);
            assert_eq!(effective_interval(s), v);
        }
        assert_eq!(s.period_for(0), 1, "sampling stays on");
        store_interval(s, 1);
    }

    #[test]
    fn timer_limits() {
        let s = ProfileSource::Time;
        assert_eq!(s.period_for(10_000), 1_000_000);
        assert!(s.min_interval() >= TIME_KERNEL_FLOOR);
        assert_eq!(s.clamp_interval(1), s.min_interval());
        assert_eq!(s.clamp_interval(u32::MAX), TIME_MAX_INTERVAL);
        assert_eq!(
            ProfileSource::TotalCycles.clamp_interval(1),
            PMC_MIN_INTERVAL
        );
    }
}
