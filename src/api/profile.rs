//! A profile of the Rust API: it owns its counts; start, stop (the barrier), live reads, stop on drop.

use std::sync::Arc;

use super::builder::ProfileBuilder;
use super::details;
use crate::buckets::BucketLayout;
use crate::engine;
use crate::error::Error;
use crate::profile::{ProfileCore, ProfileStats};
use crate::source::ProfileSource;

/// A profile of this process, another process or every process: a histogram of sampled program counters over a range, counted into buckets.
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
    pub(super) core: Arc<ProfileCore>,
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
    /// A builder for a profile (of this process unless [`ProfileBuilder::process`] or
    /// [`ProfileBuilder::global`] says otherwise).
    pub fn builder() -> ProfileBuilder {
        ProfileBuilder::default()
    }

    /// `NtStartProfile(ProfileHandle)` — start sampling. A profile of a [`Process`](crate::Process) that has
    /// exited (see [`Process::has_exited`](crate::Process::has_exited)) starts too, and counts nothing.
    #[doc(alias = "NtStartProfile")]
    ///
    /// # Errors
    /// `STATUS_PROFILING_NOT_STOPPED` (already started), `STATUS_PROFILING_AT_LIMIT` (8192 × online CPUs
    /// started profiles), `STATUS_INSUFFICIENT_RESOURCES` (descriptors, ring memory), and the mapping of
    /// [`perf_event_open(2)`](https://man7.org/linux/man-pages/man2/perf_event_open.2.html) errors.
    pub fn start(&self) -> Result<(), Error> {
        self.core
            .start()
            .map_err(|status| details::start(status, self.core.source, &self.core.target))
    }

    /// `NtStopProfile(ProfileHandle)` — stop sampling. A barrier: when it returns, every sample taken before the
    /// call is counted and nothing writes to the counts any more.
    #[doc(alias = "NtStopProfile")]
    ///
    /// # Errors
    /// `STATUS_PROFILING_NOT_STARTED` when the profile is not started.
    pub fn stop(&self) -> Result<(), Error> {
        self.core.stop().map_err(details::stop)
    }

    /// True while started.
    pub fn is_started(&self) -> bool {
        self.core.is_started()
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

    /// The perf events behind the profile while it is started: their layout ([`EventMode`]: one event and ring
    /// per thread, or one event per thread and processor), descriptors, rings and ring memory (shared with the
    /// other started profiles of the same source and process). `None` when it is not started, or when its
    /// process has exited (no event is held then).
    ///
    /// [`EventMode`]: crate::EventMode
    pub fn event_usage(&self) -> Option<crate::engine::mode::EventUsage> {
        self.core.event_usage()
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
            let _ = self.core.stop();
        }
    }
}
