//! Profile sources (`KPROFILE_SOURCE`): every NT value, the Intel HAL values, and the Linux extension range;
//! the perf event behind each (`docs/linux-mapping.md`, "Sources and their perf events"), interval units, defaults and limits,
//! and the per-source interval table shared by every profile of a source (`docs/api.md` section 6).
//!
//! Longer than the other modules (about 570 lines of code, then its tests) for one reason: the source table is
//! one declarative list of every NT and Linux source with its documentation and perf event, and the interval,
//! jitter and support tables, the raw-event registry and the listing all index the same slots; split apart,
//! each part would have to re-derive the slot layout.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nix::errno::Errno;

pub use crate::perf::PerfEventSpec;
use crate::perf::event::abi;
use crate::status::NtStatus;

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

const fn ev(type_: u32, config: u64, name: &'static str) -> Option<PerfEventSpec> {
    Some(PerfEventSpec {
        type_,
        config,
        config1: 0,
        config2: 0,
        name,
    })
}

/// A cache read event (`PERF_COUNT_HW_CACHE_OP_READ`) of `cache` with `result` (access or miss).
const fn hw_cache(cache: u64, result: u64, name: &'static str) -> Option<PerfEventSpec> {
    ev(
        abi::TYPE_HW_CACHE,
        abi::hw_cache_config(cache, abi::CACHE_OP_READ, result),
        name,
    )
}

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
    /// The perf event behind this source, or `None` when Linux has no generic event for it.
    pub fn perf_event(self) -> Option<PerfEventSpec> {
        use ProfileSource::*;
        match self {
            Registered(n) => registered(n),
            Time => ev(abi::TYPE_SOFTWARE, abi::SW_CPU_CLOCK, "cpu-clock"),
            AlignmentFixup | AlignmentFaults => ev(
                abi::TYPE_SOFTWARE,
                abi::SW_ALIGNMENT_FAULTS,
                "alignment-faults",
            ),
            TotalIssues | InstructionRetired => {
                ev(abi::TYPE_HARDWARE, abi::HW_INSTRUCTIONS, "instructions")
            }
            TotalCycles | UnhaltedCoreCycles => {
                ev(abi::TYPE_HARDWARE, abi::HW_CPU_CYCLES, "cpu-cycles")
            }
            UnhaltedReferenceCycles => ev(abi::TYPE_HARDWARE, abi::HW_REF_CPU_CYCLES, "ref-cycles"),
            BranchInstructions | BranchInstructionRetired => ev(
                abi::TYPE_HARDWARE,
                abi::HW_BRANCH_INSTRUCTIONS,
                "branch-instructions",
            ),
            BranchMispredictions | BranchMispredictsRetired => {
                ev(abi::TYPE_HARDWARE, abi::HW_BRANCH_MISSES, "branch-misses")
            }
            CacheMisses | LlcMisses => ev(abi::TYPE_HARDWARE, abi::HW_CACHE_MISSES, "cache-misses"),
            LlcReference => ev(
                abi::TYPE_HARDWARE,
                abi::HW_CACHE_REFERENCES,
                "cache-references",
            ),
            DcacheMisses => hw_cache(
                abi::CACHE_L1D,
                abi::CACHE_RESULT_MISS,
                "L1-dcache-load-misses",
            ),
            DcacheAccesses => hw_cache(abi::CACHE_L1D, abi::CACHE_RESULT_ACCESS, "L1-dcache-loads"),
            IcacheMisses => hw_cache(
                abi::CACHE_L1I,
                abi::CACHE_RESULT_MISS,
                "L1-icache-load-misses",
            ),
            IcacheIssues => hw_cache(abi::CACHE_L1I, abi::CACHE_RESULT_ACCESS, "L1-icache-loads"),
            PipelineDry => ev(
                abi::TYPE_HARDWARE,
                abi::HW_STALLED_CYCLES_FRONTEND,
                "stalled-cycles-frontend",
            ),
            PipelineFrozen => ev(
                abi::TYPE_HARDWARE,
                abi::HW_STALLED_CYCLES_BACKEND,
                "stalled-cycles-backend",
            ),
            TaskClock => ev(abi::TYPE_SOFTWARE, abi::SW_TASK_CLOCK, "task-clock"),
            PageFaults => ev(abi::TYPE_SOFTWARE, abi::SW_PAGE_FAULTS, "page-faults"),
            ContextSwitches => ev(
                abi::TYPE_SOFTWARE,
                abi::SW_CONTEXT_SWITCHES,
                "context-switches",
            ),
            CpuMigrations => ev(abi::TYPE_SOFTWARE, abi::SW_CPU_MIGRATIONS, "cpu-migrations"),
            MinorFaults => ev(abi::TYPE_SOFTWARE, abi::SW_PAGE_FAULTS_MIN, "minor-faults"),
            MajorFaults => ev(abi::TYPE_SOFTWARE, abi::SW_PAGE_FAULTS_MAJ, "major-faults"),
            LoadInstructions | TotalNonissues | StoreInstructions | FpInstructions
            | IntegerInstructions | Issue2 | Issue3 | Issue4 | SpecialInstructions
            | MemoryBarrierCycles | LoadLinkedIssues => None,
        }
    }

    /// What the interval counts for this source.
    pub fn interval_unit(self) -> IntervalUnit {
        match self {
            ProfileSource::Time | ProfileSource::TaskClock => IntervalUnit::Time100ns,
            _ => IntervalUnit::Events,
        }
    }

    /// True for sources backed by a hardware performance counter (a registered raw event counts as hardware
    /// unless it is a software or tracepoint event).
    pub fn is_hardware(self) -> bool {
        match self.perf_event() {
            Some(e) if matches!(self, ProfileSource::Registered(_)) => {
                !e.is_software_or_tracepoint()
            }
            Some(e) => e.is_generic_hardware(),
            None => true,
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
    fn table_index(self) -> usize {
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
const BUILTIN_SLOTS: usize = 64;
/// Slots of the per-source tables: the built-in sources, then the registered ones.
const TABLE_SIZE: usize = BUILTIN_SLOTS + MAX_REGISTERED;

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

/// Why a source is or is not supported on this machine.
///
/// ```
/// use ntprofile::{NtStatus, ProfileSource, Support};
///
/// // Linux has no generic event for load instructions: never supported.
/// assert_eq!(ProfileSource::LoadInstructions.support(), Support::NoPerfEvent);
/// assert_eq!(Support::NoPerfEvent.status(), NtStatus::NOT_SUPPORTED);
/// // The timer is a software event: supported wherever perf_event_open is allowed.
/// let timer = ProfileSource::Time.support();
/// println!("ProfileTime: {}", timer.reason());
/// assert_eq!(timer.is_supported(), timer.status() == NtStatus::SUCCESS);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Its event opens here.
    Supported,
    /// Linux has no generic perf event for it.
    NoPerfEvent,
    /// Opening its event failed with this errno (ENOENT: no such event or PMU on this machine).
    OpenFailed(Errno),
}

impl Support {
    /// True when the source can be sampled.
    pub fn is_supported(self) -> bool {
        self == Support::Supported
    }

    /// A short human reason ("supported", "no PMU event (ENOENT)", ...).
    pub fn reason(self) -> String {
        match self {
            Support::Supported => "supported".to_string(),
            Support::NoPerfEvent => "no generic perf event for this source".to_string(),
            Support::OpenFailed(errno) => {
                let what = match errno {
                    Errno::ENOENT => "the event does not exist on this machine (no PMU)",
                    Errno::EOPNOTSUPP => "sampling not supported by this PMU",
                    Errno::ENODEV => "no such device",
                    Errno::EACCES | Errno::EPERM => "not permitted",
                    _ => "perf_event_open failed",
                };
                format!(
                    "{what} ({})",
                    std::io::Error::from_raw_os_error(errno as i32)
                )
            }
        }
    }

    /// The status a create gets for this answer (`STATUS_NOT_SUPPORTED` unless supported).
    pub fn status(self) -> NtStatus {
        if self.is_supported() {
            NtStatus::SUCCESS
        } else {
            NtStatus::NOT_SUPPORTED
        }
    }
}

static SUPPORT: [std::sync::OnceLock<Support>; TABLE_SIZE] =
    [const { std::sync::OnceLock::new() }; TABLE_SIZE];

impl ProfileSource {
    /// Whether this source's event opens on this machine: probed once (a sampling event on the calling thread,
    /// opened disabled and closed at once), then cached.
    pub fn support(self) -> Support {
        *SUPPORT[self.table_index()].get_or_init(|| match self.perf_event() {
            None => Support::NoPerfEvent,
            Some(spec) => {
                match crate::perf::event::probe(&spec, self.period_for(self.limits().default)) {
                    Ok(()) => Support::Supported,
                    Err(errno) => Support::OpenFailed(errno),
                }
            }
        })
    }
}

/// Raw perf events registered as sources, in registration order.
static REGISTRY: std::sync::Mutex<Vec<PerfEventSpec>> = std::sync::Mutex::new(Vec::new());
/// Number of registrations (read without the lock by `from_raw`).
static REGISTERED: AtomicU32 = AtomicU32::new(0);

fn registered_count() -> usize {
    // Acquire: pairs with the Release increment in `register_raw_source`, which follows the push of the spec.
    REGISTERED.load(Ordering::Acquire) as usize
}

fn registered(n: u16) -> Option<PerfEventSpec> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(usize::from(n))
        .copied()
}

/// Register a raw perf event (`perf_event_attr` `type`, `config`, `config1`, `config2`) as a new profile source
/// and return it. Registering the same event again returns the same source. Whether it can be sampled here is
/// told by [`ProfileSource::support`] like any other source.
///
/// # Errors
/// `STATUS_INSUFFICIENT_RESOURCES` past [`MAX_REGISTERED`] registrations.
///
/// ```
/// use ntprofile::{IntervalUnit, register_raw_source};
///
/// // PERF_TYPE_SOFTWARE (1), PERF_COUNT_SW_PAGE_FAULTS_MIN (5): minor page faults as a source.
/// let minor = register_raw_source(1, 5, 0, 0)?;
/// assert_eq!(register_raw_source(1, 5, 0, 0)?, minor); // the same event, the same source
/// assert_eq!(minor.interval_unit(), IntervalUnit::Events);
/// # Ok::<(), ntprofile::NtStatus>(())
/// ```
pub fn register_raw_source(
    type_: u32,
    config: u64,
    config1: u64,
    config2: u64,
) -> Result<ProfileSource, NtStatus> {
    let mut reg = REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let same = |e: &PerfEventSpec| {
        e.type_ == type_ && e.config == config && e.config1 == config1 && e.config2 == config2
    };
    if let Some(n) = reg.iter().position(same) {
        return Ok(ProfileSource::Registered(n as u16));
    }
    if reg.len() >= MAX_REGISTERED {
        return Err(NtStatus::INSUFFICIENT_RESOURCES);
    }
    // The name lives as long as the process, like the registration (at most MAX_REGISTERED of them).
    let name: &'static str =
        Box::leak(format!("raw:{type_}:{config:#x}:{config1:#x}:{config2:#x}").into_boxed_str());
    reg.push(PerfEventSpec {
        type_,
        config,
        config1,
        config2,
        name,
    });
    // Release: publishes the pushed spec before the new count (see `registered_count`).
    REGISTERED.fetch_add(1, Ordering::Release);
    Ok(ProfileSource::Registered((reg.len() - 1) as u16))
}

/// One line of the source listing, in the spirit of Windows' `PROFILE_SOURCE_INFO`.
///
/// ```
/// use ntprofile::{ProfileSource, list_sources};
///
/// let timer = list_sources().into_iter().find(|s| s.source == ProfileSource::Time).unwrap();
/// assert_eq!(timer.name, "Timer");
/// assert!(timer.min_interval <= timer.max_interval);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    /// The source.
    pub source: ProfileSource,
    /// Its name ("Timer" for ProfileTime).
    pub name: &'static str,
    /// Whether it can be sampled here, and why not.
    pub support: Support,
    /// Smallest interval in force now.
    pub min_interval: u32,
    /// Largest interval.
    pub max_interval: u32,
    /// The effective interval now (0 when not supported, as `NtQueryIntervalProfile`).
    pub interval: u32,
    /// What the interval counts.
    pub unit: IntervalUnit,
    /// Jitter of the period in percent (0: fixed).
    pub jitter_percent: u32,
    /// The perf event behind it, if Linux has one.
    pub event: Option<PerfEventSpec>,
}

/// Every source: the built-in ones in value order, then the registered raw events.
///
/// ```
/// for info in ntprofile::list_sources() {
///     println!("{:#07x} {:<24} {}", info.source.to_raw(), info.name, info.support.reason());
/// }
/// ```
pub fn list_sources() -> Vec<SourceInfo> {
    let registered = (0..registered_count()).map(|n| ProfileSource::Registered(n as u16));
    ProfileSource::ALL
        .iter()
        .copied()
        .chain(registered)
        .map(|source| {
            let support = source.support();
            SourceInfo {
                source,
                name: source.name(),
                support,
                min_interval: source.min_interval(),
                max_interval: source.limits().max,
                interval: if support.is_supported() {
                    effective_interval(source)
                } else {
                    0
                },
                unit: source.interval_unit(),
                jitter_percent: jitter_percent(source),
                event: source.perf_event(),
            }
        })
        .collect()
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
        assert!(ProfileSource::ALL.len() <= BUILTIN_SLOTS);
    }

    #[test]
    fn registration() {
        let a = register_raw_source(1, 2, 0, 0).unwrap(); // software page-faults, as a raw event
        assert_eq!(
            register_raw_source(1, 2, 0, 0).unwrap(),
            a,
            "same event, same source"
        );
        assert!(a.to_raw() >= REGISTERED_BASE);
        assert_eq!(ProfileSource::from_raw(a.to_raw()), Some(a));
        assert_eq!(a.perf_event().unwrap().config, 2);
        assert!(a.support().is_supported());
        assert_eq!(
            a.limits().default,
            1,
            "a software raw event samples every event by default"
        );
        assert!(list_sources().iter().any(|i| i.source == a));
        // Its own interval, not ProfileTime's.
        let time_before = effective_interval(ProfileSource::Time);
        assert_eq!(effective_interval(a), 1);
        store_interval(a, 16);
        assert_eq!(effective_interval(a), 16);
        assert_eq!(effective_interval(ProfileSource::Time), time_before);
        let bogus = register_raw_source(0x7777, 0, 0, 0).unwrap();
        assert!(
            !bogus.support().is_supported(),
            "its own support answer, not ProfileTime's"
        );
    }

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
