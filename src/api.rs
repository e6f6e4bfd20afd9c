//! The safe Rust API: a builder, a profile that owns its counts, start/stop, stop on drop, live reads.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use crate::affinity::{Affinity, CpuSet, current_group, online_cpus};
use crate::buckets::BucketLayout;
use crate::engine::{self, counters::CounterStorage};
use crate::error::Error;
use crate::profile::{ProfileCore, ProfileStats, check_front, check_kernel_privilege};
use crate::source::{self, ProfileSource};
use crate::status::NtStatus;
use crate::target::Target;

/// How a profile picks its processors.
#[derive(Clone, Debug, PartialEq, Eq)]
enum AffinitySpec {
    /// A `KAFFINITY` for the caller's current group (`u64::MAX`: every online CPU of the group).
    Mask(u64),
    /// Explicit CPU numbers (each must be online).
    Cpus(CpuSet),
    /// Every online CPU, resolved at each start.
    AllActive,
}

/// Builds a [`Profile`]: the range, the bucket size, the source and the processors.
///
/// ```
/// use ntprofile::{Profile, ProfileSource};
///
/// let profile = Profile::builder()
///     .range(0x40_0000, 0x1000) // [base, base + size)
///     .bucket_size(4)           // 16-byte buckets: 256 counters
///     .source(ProfileSource::Time)
///     .cpus([0])                // or .affinity_mask(mask), .all_cpus()
///     .build()?;
/// assert_eq!(profile.counts().len(), 256);
/// assert_eq!(profile.layout().base, 0x40_0000);
/// assert_eq!(profile.bucket_range(1), (0x40_0010, 0x40_0020));
/// assert_eq!(profile.source(), ProfileSource::Time);
/// # Ok::<(), ntprofile::Error>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ProfileBuilder {
    base: u64,
    size: u64,
    bucket_size: u32,
    source: ProfileSource,
    affinity: AffinitySpec,
}

impl Default for ProfileBuilder {
    fn default() -> Self {
        ProfileBuilder {
            base: 0,
            size: 0,
            bucket_size: 2,
            source: ProfileSource::Time,
            affinity: AffinitySpec::Mask(u64::MAX),
        }
    }
}

impl ProfileBuilder {
    /// The profiled range `[base, base + size)` of this process's address space.
    pub fn range(mut self, base: usize, size: usize) -> Self {
        self.base = base as u64;
        self.size = size as u64;
        self
    }

    /// `BucketSize`: log2 of a bucket's size in bytes (2 = 4-byte buckets … 31 = 2 GiB buckets).
    pub fn bucket_size(mut self, log2: u32) -> Self {
        self.bucket_size = log2;
        self
    }

    /// The profile source (default [`ProfileSource::Time`]).
    pub fn source(mut self, source: ProfileSource) -> Self {
        self.source = source;
        self
    }

    /// A `KAFFINITY` for the caller's current processor group, as `NtCreateProfile` takes it:
    /// `u64::MAX` means every online CPU of the group (the default).
    pub fn affinity_mask(mut self, mask: u64) -> Self {
        self.affinity = AffinitySpec::Mask(mask);
        self
    }

    /// Explicit CPU numbers; each must be online when the profile is built.
    pub fn cpus(mut self, cpus: impl IntoIterator<Item = usize>) -> Self {
        self.affinity = AffinitySpec::Cpus(CpuSet::from_cpus(cpus));
        self
    }

    /// Every online CPU, resolved again at each start (`NtCreateProfileEx` with `GroupCount == 0`).
    pub fn all_cpus(mut self) -> Self {
        self.affinity = AffinitySpec::AllActive;
        self
    }

    /// Create the profile, stopped, with a zeroed counter buffer of exactly the counters the range needs.
    #[doc(alias = "NtCreateProfile")]
    ///
    /// # Errors
    /// In the order of `docs/api.md` section 3: `STATUS_INVALID_PARAMETER` (bucket size), `STATUS_BUFFER_OVERFLOW`
    /// (the range wraps), `STATUS_NOT_SUPPORTED` (source), `STATUS_INVALID_PARAMETER` (processors),
    /// `STATUS_PRIVILEGE_NOT_HELD` (a kernel range without the privilege), `STATUS_INSUFFICIENT_RESOURCES`
    /// (the counters cannot be allocated or exceed `ULONG` sizes).
    pub fn build(self) -> Result<Profile, Error> {
        if !(crate::buckets::MIN_BUCKET_SIZE..=crate::buckets::MAX_BUCKET_SIZE)
            .contains(&self.bucket_size)
        {
            return Err(Error::new(
                NtStatus::INVALID_PARAMETER,
                format!(
                    "BucketSize {} is outside {}..={}",
                    self.bucket_size,
                    crate::buckets::MIN_BUCKET_SIZE,
                    crate::buckets::MAX_BUCKET_SIZE
                ),
            ));
        }
        let needed = crate::buckets::counters_needed(self.size, self.bucket_size).max(1);
        // The buffer must fit a ULONG BufferSize, as the C API's.
        let buffer_size = needed
            .checked_mul(4)
            .and_then(|bytes| u32::try_from(bytes).ok())
            .ok_or_else(|| {
                crate::error::counters(NtStatus::INSUFFICIENT_RESOURCES, needed, false)
            })?;
        let (layout, source) = check_front(
            self.base,
            self.size,
            self.bucket_size,
            buffer_size,
            self.source.to_raw(),
        )
        .map_err(|status| {
            crate::error::create_front(
                status,
                self.base,
                self.size,
                self.bucket_size,
                buffer_size,
                self.source,
            )
        })?;
        let online = online_cpus();
        let affinity = match self.affinity {
            AffinitySpec::Mask(m) => Affinity::from_kaffinity(m, current_group(), &online)
                .map_err(|status| {
                    crate::error::affinity_mask(status, m, current_group(), &online)
                })?,
            AffinitySpec::AllActive => Affinity::AllActive,
            AffinitySpec::Cpus(set) => {
                if set.is_empty() || !set.is_subset(&online) {
                    return Err(crate::error::cpus(&set, &online));
                }
                Affinity::Cpus(set)
            }
        };
        check_kernel_privilege(&layout)?;
        let mut counters: Vec<AtomicU32> = Vec::new();
        counters
            .try_reserve_exact(needed as usize)
            .map_err(|_| crate::error::counters(NtStatus::INSUFFICIENT_RESOURCES, needed, true))?;
        counters.resize_with(needed as usize, || AtomicU32::new(0));
        let storage = CounterStorage::Owned(counters.into_boxed_slice());
        let core = ProfileCore::new(layout, source, Target::CurrentProcess, affinity, storage);
        Ok(Profile {
            core: Arc::new(core),
        })
    }
}

/// A profile of this process: a histogram of sampled program counters over a range, counted into buckets.
///
/// Created stopped; counts accumulate across start/stop cycles until [`Profile::clear`]. Dropping a started
/// profile stops it first.
///
/// ```no_run
/// use ntprofile::{Profile, ProfileSource};
///
/// #[inline(never)]
/// fn work() -> u64 {
///     (0..50_000_000u64).fold(0, |a, b| std::hint::black_box(a ^ b.wrapping_mul(31)))
/// }
///
/// let base = (work as fn() -> u64) as usize;
/// let profile = Profile::builder().range(base, 4096).bucket_size(2).build()?;
/// ntprofile::set_interval(ProfileSource::Time, 1000); // a sample every 100 µs of CPU time
/// profile.start()?;
/// assert!(profile.is_started());
/// std::hint::black_box(work());
/// profile.stop()?; // every sample taken before the stop is counted now
/// let stats = profile.stats();
/// let counts = profile.counts();
/// assert_eq!(counts.iter().map(|&c| u64::from(c)).sum::<u64>(), stats.counted);
/// profile.clear(); // zero the counters; counts otherwise accumulate over start/stop cycles
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub struct Profile {
    core: Arc<ProfileCore>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("layout", &self.core.layout)
            .field("source", &self.core.source)
            .field("affinity", &self.core.affinity)
            .finish()
    }
}

impl Profile {
    /// A builder for a profile of this process.
    pub fn builder() -> ProfileBuilder {
        ProfileBuilder::default()
    }

    /// `NtStartProfile(ProfileHandle)` — start sampling.
    #[doc(alias = "NtStartProfile")]
    ///
    /// # Errors
    /// `STATUS_PROFILING_NOT_STOPPED` (already started), `STATUS_PROFILING_AT_LIMIT` (8192 × online CPUs
    /// started profiles), `STATUS_INSUFFICIENT_RESOURCES` (descriptors, ring memory), and the mapping of
    /// [`perf_event_open(2)`](https://man7.org/linux/man-pages/man2/perf_event_open.2.html) errors.
    pub fn start(&self) -> Result<(), Error> {
        engine::start(&self.core)
            .map_err(|status| crate::error::start(status, self.core.source, &self.core.target))
    }

    /// `NtStopProfile(ProfileHandle)` — stop sampling. A barrier: when it returns, every sample taken before the
    /// call is counted and nothing writes to the counts any more.
    #[doc(alias = "NtStopProfile")]
    ///
    /// # Errors
    /// `STATUS_PROFILING_NOT_STARTED` when the profile is not started.
    pub fn stop(&self) -> Result<(), Error> {
        engine::stop(&self.core).map_err(crate::error::stop)
    }

    /// True while started.
    pub fn is_started(&self) -> bool {
        engine::is_started(self.core.id)
    }

    /// The counters now (every sample taken before the call is included).
    pub fn counts(&self) -> Vec<u32> {
        if self.is_started() {
            let _ = engine::sync();
        }
        self.core.storage.snapshot().unwrap_or_default()
    }

    /// The statistics now: counted, outside the range, lost, throttled.
    pub fn stats(&self) -> ProfileStats {
        if self.is_started() {
            let _ = engine::sync();
        }
        self.core.stats.read()
    }

    /// Zero every counter (the statistics keep accumulating).
    pub fn clear(&self) {
        self.core.storage.clear();
    }

    /// The range and bucket layout.
    pub fn layout(&self) -> BucketLayout {
        self.core.layout
    }

    /// The source.
    pub fn source(&self) -> ProfileSource {
        self.core.source
    }

    /// The address range `[start, end)` that counter `index` covers.
    pub fn bucket_range(&self, index: usize) -> (u64, u64) {
        let l = self.core.layout;
        let start = l.base + ((index as u64) << l.bucket_size);
        (start, (start + (1u64 << l.bucket_size)).min(l.end()))
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if self.is_started() {
            let _ = engine::stop(&self.core);
        }
    }
}

/// `NtSetIntervalProfile(Interval, Source)` — set a source's interval (shared by all its profiles), clamped into
/// its limits and applied at once to running profiles. A value for an unsupported source is ignored. Returns
/// the effective interval (0 for an unsupported source).
///
/// ```
/// use ntprofile::{ProfileSource, query_interval, set_interval};
///
/// // A sample every 5000th context switch, for every profile of that source in this process.
/// assert_eq!(set_interval(ProfileSource::ContextSwitches, 5000), 5000);
/// assert_eq!(query_interval(ProfileSource::ContextSwitches), 5000);
/// assert_eq!(set_interval(ProfileSource::ContextSwitches, 0), 1); // clamped into the limits
/// assert_eq!(set_interval(ProfileSource::LoadInstructions, 5000), 0); // never supported on Linux
/// ```
#[doc(alias = "NtSetIntervalProfile")]
pub fn set_interval(source: ProfileSource, interval: u32) -> u32 {
    if !source.support().is_supported() {
        return 0;
    }
    engine::set_interval(source, interval)
}

/// `NtQueryIntervalProfile(Source, &Interval)` — the effective interval of a source (after clamping), or 0 when
/// the source is not supported on this machine.
///
/// ```
/// use ntprofile::{ProfileSource, query_interval};
///
/// assert!(query_interval(ProfileSource::Time) >= ProfileSource::Time.min_interval());
/// assert_eq!(query_interval(ProfileSource::LoadInstructions), 0);
/// ```
#[doc(alias = "NtQueryIntervalProfile")]
pub fn query_interval(source: ProfileSource) -> u32 {
    if !source.support().is_supported() {
        return 0;
    }
    source::effective_interval(source)
}

/// Jitter a source's sample period by up to ± `percent` % (0: a fixed period, the default), an extension:
/// periodic workloads can no longer alias with the sampler, and the mean rate stays the interval's.
///
/// # Errors
/// `STATUS_INVALID_PARAMETER` above 90 %, `STATUS_NOT_SUPPORTED` for a source not supported here.
///
/// ```
/// use ntprofile::{NtStatus, ProfileSource, set_jitter};
///
/// set_jitter(ProfileSource::PageFaults, 20)?;
/// assert_eq!(ntprofile::source::jitter_percent(ProfileSource::PageFaults), 20);
/// set_jitter(ProfileSource::PageFaults, 0)?; // a fixed period again
/// assert_eq!(set_jitter(ProfileSource::PageFaults, 91).unwrap_err(), NtStatus::INVALID_PARAMETER);
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn set_jitter(source: ProfileSource, percent: u32) -> Result<(), Error> {
    engine::set_jitter(source, percent)
        .map_err(|status| crate::error::jitter(status, source, percent))
}
