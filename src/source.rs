//! Profile sources (`KPROFILE_SOURCE`): every NT value, the Intel HAL values, and the Linux extension range,
//! each with its number and name; the perf event behind each (`docs/linux-mapping.md`, "Sources and their perf
//! events"), interval units, defaults and limits, and the per-source interval table shared by every profile of a
//! source (`docs/api.md` section 6).
//!
//! Where each part lives: this file holds the source table itself (one declarative list of every NT and Linux
//! source with its documentation); `events` the perf event behind each source; `interval` the interval units
//! and limits and the per-source interval and jitter tables (whose slot layout the other tables share);
//! `probe` whether a source's event opens here; `registry` the raw perf events registered at run time;
//! `listing` the listing of every source.

mod events;
mod interval;
mod listing;
mod probe;
mod registry;

pub use crate::perf::PerfEventSpec;
pub use interval::{
    COUNT_MAX_INTERVAL, IntervalLimits, IntervalUnit, MAX_JITTER_PERCENT, PMC_DEFAULT_INTERVAL,
    PMC_MIN_INTERVAL, TIME_DEFAULT_INTERVAL, TIME_KERNEL_FLOOR, TIME_MAX_INTERVAL,
    effective_interval, jitter_percent,
};
pub(crate) use interval::{store_interval, store_jitter};
pub use listing::{SourceInfo, list_sources};
pub use probe::{Support, is_transient_errno};
pub use registry::register_raw_source;
use registry::{registered, registered_count};

/// First value of the Linux extension range (sources NT does not have).
///
/// ```
/// use ntprofile::ProfileSource;
/// assert_eq!(ProfileSource::TaskClock.to_raw(), ntprofile::source::EXTENSION_BASE);
/// ```
pub const EXTENSION_BASE: u32 = 0x1_0000;
/// First value of the raw perf events registered at run time.
///
/// ```
/// // PERF_TYPE_SOFTWARE (1), PERF_COUNT_SW_DUMMY (9): a registered source gets a value from REGISTERED_BASE on.
/// let source = ntprofile::register_raw_source(1, 9, 0, 0)?;
/// assert!(source.to_raw() >= ntprofile::source::REGISTERED_BASE);
/// # Ok::<(), ntprofile::NtStatus>(())
/// ```
pub const REGISTERED_BASE: u32 = 0x2_0000;
/// How many raw sources a process may register.
///
/// ```
/// assert_eq!(ntprofile::source::MAX_REGISTERED, 64);
/// ```
pub const MAX_REGISTERED: usize = 64;

macro_rules! sources {
    ($($(#[$doc:meta])* $variant:ident = $value:expr, $name:expr;)*) => {
        /// A profile source: what makes a sample. NT's `KPROFILE_SOURCE` values keep their numbers; Linux-only
        /// sources live above `0xFFFF`.
        ///
        /// ```
        /// use ntprofile::ProfileSource;
        ///
        /// assert_eq!(ProfileSource::Time.to_raw(), 0x00);
        /// assert_eq!(ProfileSource::from_raw(0x13), Some(ProfileSource::TotalCycles));
        /// assert_eq!(ProfileSource::from_raw(0x18), None); // ProfileMaximum is a count
        /// assert_eq!(ProfileSource::Time.name(), "Timer");
        /// assert_eq!(ProfileSource::TaskClock.to_raw(), 0x10000);
        /// assert!(ProfileSource::ALL.contains(&ProfileSource::PageFaults));
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum ProfileSource {
            $($(#[$doc])* $variant,)*
            /// A raw perf event registered at run time with [`register_raw_source`]: the n-th registration,
            /// numbered `REGISTERED_BASE + n`.
            Registered(u16),
        }

        impl ProfileSource {
            /// Every built-in source, in value order (registered raw sources are listed by [`list_sources`]).
            pub const ALL: &'static [ProfileSource] = &[$(ProfileSource::$variant,)*];

            /// The source's numeric value (`KPROFILE_SOURCE`).
            pub const fn to_raw(self) -> u32 {
                match self {
                    $(ProfileSource::$variant => $value,)*
                    ProfileSource::Registered(n) => REGISTERED_BASE + n as u32,
                }
            }

            /// The source for a numeric value, or `None` for a value no source has (`ProfileMaximum` included,
            /// and raw-source numbers not registered yet).
            pub fn from_raw(value: u32) -> Option<ProfileSource> {
                match value {
                    $(v if v == $value => Some(ProfileSource::$variant),)*
                    v if v >= REGISTERED_BASE && ((v - REGISTERED_BASE) as usize) < registered_count() => {
                        Some(ProfileSource::Registered((v - REGISTERED_BASE) as u16))
                    }
                    _ => None,
                }
            }

            /// The source's name as Windows lists it ("Timer" for ProfileTime), or the Linux event's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(ProfileSource::$variant => $name,)*
                    ProfileSource::Registered(n) => registered(n).map(|r| r.name).unwrap_or("raw"),
                }
            }
        }
    };
}

sources! {
    /// `ProfileTime` (0x00): the profile timer. Interval in 100 ns units.
    Time = 0x00, "Timer";
    /// `ProfileAlignmentFixup` (0x01): alignment faults.
    AlignmentFixup = 0x01, "AlignmentFixup";
    /// `ProfileTotalIssues` (0x02): instructions.
    TotalIssues = 0x02, "TotalIssues";
    /// `ProfilePipelineDry` (0x03): front-end stalled cycles.
    PipelineDry = 0x03, "PipelineDry";
    /// `ProfileLoadInstructions` (0x04): no generic perf event.
    LoadInstructions = 0x04, "LoadInstructions";
    /// `ProfilePipelineFrozen` (0x05): back-end stalled cycles.
    PipelineFrozen = 0x05, "PipelineFrozen";
    /// `ProfileBranchInstructions` (0x06).
    BranchInstructions = 0x06, "BranchInstructions";
    /// `ProfileTotalNonissues` (0x07): no generic perf event.
    TotalNonissues = 0x07, "TotalNonissues";
    /// `ProfileDcacheMisses` (0x08): L1D read misses.
    DcacheMisses = 0x08, "DcacheMisses";
    /// `ProfileIcacheMisses` (0x09): L1I read misses.
    IcacheMisses = 0x09, "IcacheMisses";
    /// `ProfileCacheMisses` (0x0A): last-level cache misses.
    CacheMisses = 0x0A, "CacheMisses";
    /// `ProfileBranchMispredictions` (0x0B).
    BranchMispredictions = 0x0B, "BranchMispredictions";
    /// `ProfileStoreInstructions` (0x0C): no generic perf event.
    StoreInstructions = 0x0C, "StoreInstructions";
    /// `ProfileFpInstructions` (0x0D): no generic perf event.
    FpInstructions = 0x0D, "FpInstructions";
    /// `ProfileIntegerInstructions` (0x0E): no generic perf event.
    IntegerInstructions = 0x0E, "IntegerInstructions";
    /// `Profile2Issue` (0x0F): no generic perf event.
    Issue2 = 0x0F, "2Issue";
    /// `Profile3Issue` (0x10): no generic perf event.
    Issue3 = 0x10, "3Issue";
    /// `Profile4Issue` (0x11): no generic perf event.
    Issue4 = 0x11, "4Issue";
    /// `ProfileSpecialInstructions` (0x12): no generic perf event.
    SpecialInstructions = 0x12, "SpecialInstructions";
    /// `ProfileTotalCycles` (0x13): CPU cycles.
    TotalCycles = 0x13, "TotalCycles";
    /// `ProfileIcacheIssues` (0x14): L1I read accesses.
    IcacheIssues = 0x14, "IcacheIssues";
    /// `ProfileDcacheAccesses` (0x15): L1D read accesses.
    DcacheAccesses = 0x15, "DcacheAccesses";
    /// `ProfileMemoryBarrierCycles` (0x16): no generic perf event.
    MemoryBarrierCycles = 0x16, "MemoryBarrierCycles";
    /// `ProfileLoadLinkedIssues` (0x17): no generic perf event.
    LoadLinkedIssues = 0x17, "LoadLinkedIssues";
    /// Intel HAL `UnhaltedCoreCycles` (0x19).
    UnhaltedCoreCycles = 0x19, "UnhaltedCoreCycles";
    /// Intel HAL `InstructionRetired` (0x1A).
    InstructionRetired = 0x1A, "InstructionRetired";
    /// Intel HAL `UnhaltedReferenceCycles` (0x1B).
    UnhaltedReferenceCycles = 0x1B, "UnhaltedReferenceCycles";
    /// Intel HAL `LLCReference` (0x1C).
    LlcReference = 0x1C, "LLCReference";
    /// Intel HAL `LLCMisses` (0x1D).
    LlcMisses = 0x1D, "LLCMisses";
    /// Intel HAL `BranchInstructionRetired` (0x1E).
    BranchInstructionRetired = 0x1E, "BranchInstructionRetired";
    /// Intel HAL `BranchMispredictsRetired` (0x1F).
    BranchMispredictsRetired = 0x1F, "BranchMispredictsRetired";
    /// Linux `task-clock` (0x10000): a timer on the task's own CPU time. Interval in 100 ns units.
    TaskClock = EXTENSION_BASE, "task-clock";
    /// Linux `page-faults` (0x10001).
    PageFaults = EXTENSION_BASE + 1, "page-faults";
    /// Linux `minor-faults` (0x10002).
    MinorFaults = EXTENSION_BASE + 2, "minor-faults";
    /// Linux `major-faults` (0x10003).
    MajorFaults = EXTENSION_BASE + 3, "major-faults";
    /// Linux `context-switches` (0x10004).
    ContextSwitches = EXTENSION_BASE + 4, "context-switches";
    /// Linux `cpu-migrations` (0x10005).
    CpuMigrations = EXTENSION_BASE + 5, "cpu-migrations";
    /// Linux `alignment-faults` (0x10006).
    AlignmentFaults = EXTENSION_BASE + 6, "alignment-faults";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip() {
        for s in ProfileSource::ALL {
            assert_eq!(ProfileSource::from_raw(s.to_raw()), Some(*s));
        }
        assert_eq!(
            ProfileSource::from_raw(0x18),
            None,
            "ProfileMaximum is a count, not a source"
        );
        assert_eq!(ProfileSource::Time.name(), "Timer");
        assert!(ProfileSource::ALL.len() <= interval::BUILTIN_SLOTS);
    }
}
