//! The profile object shared by the C and Rust APIs: parameters fixed at creation (source, target, processors)
//! around the engine's `Counts` (range, counter storage, statistics), and the create-time checks both APIs
//! make. Starting and stopping hand the profile to the engine.

use std::sync::Arc;

use crate::affinity::Affinity;
use crate::buckets::BucketLayout;
use crate::engine::{self, Counts, StreamKey};
use crate::source::ProfileSource;
use crate::status::NtStatus;
use crate::target::{KERNEL_SPACE_START, Target};

pub use crate::engine::counters::ProfileStats;

/// A created profile: everything `NtCreateProfile` fixed. Its [`Counts`] are shared (`Arc`) with the consumer
/// while started; the rest (id, layout, storage, stats) is reached through them (`Deref`).
pub(crate) struct ProfileCore {
    counts: Arc<Counts>,
    pub(crate) source: ProfileSource,
    pub(crate) target: Target,
    pub(crate) affinity: Affinity,
}

impl std::ops::Deref for ProfileCore {
    type Target = Counts;

    fn deref(&self) -> &Counts {
        &self.counts
    }
}

impl ProfileCore {
    pub(crate) fn new(
        layout: BucketLayout,
        source: ProfileSource,
        target: Target,
        affinity: Affinity,
        storage: crate::engine::counters::CounterStorage,
    ) -> ProfileCore {
        ProfileCore {
            counts: Arc::new(Counts::new(layout, storage)),
            source,
            target,
            affinity,
        }
    }

    /// True when the range reaches kernel addresses (the stream must then include the kernel).
    pub(crate) fn wants_kernel(&self) -> bool {
        self.layout.size > 0 && self.layout.end() > KERNEL_SPACE_START
    }

    /// `NtStartProfile`'s work (see [`engine::start`]).
    pub(crate) fn start(&self) -> Result<(), NtStatus> {
        let key = StreamKey {
            source: self.source,
            target: self.target.clone(),
            kernel: self.wants_kernel(),
        };
        engine::start(&self.counts, key, &self.affinity)
    }

    /// `NtStopProfile`'s work, the barrier (see [`engine::stop`]).
    pub(crate) fn stop(&self) -> Result<(), NtStatus> {
        engine::stop(self.counts.id)
    }

    /// True while started.
    pub(crate) fn event_usage(&self) -> Option<crate::engine::mode::EventUsage> {
        engine::usage(self.counts.id)
    }

    pub(crate) fn is_started(&self) -> bool {
        engine::is_started(self.counts.id)
    }
}

/// Checks 1 to 6 of `docs/api.md` section 3, in order: buffer size, bucket size, buffer sufficiency, overflow, then the
/// source (unknown values, and sources whose event does not open here, are `STATUS_NOT_SUPPORTED`).
pub(crate) fn check_front(
    base: u64,
    size: u64,
    bucket_size: u32,
    buffer_size: u32,
    source: u32,
) -> Result<(BucketLayout, ProfileSource), NtStatus> {
    let layout = crate::buckets::check_layout(base, size, bucket_size, buffer_size)?;
    let source = ProfileSource::from_raw(source).ok_or(NtStatus::NOT_SUPPORTED)?;
    source.support().status().ok()?;
    Ok((layout, source))
}

/// Check 9 for a range that reaches kernel addresses: sampling the kernel needs CAP_PERFMON (or CAP_SYS_ADMIN)
/// or `perf_event_paranoid <= 1` (`docs/linux-mapping.md`, "Deliberate divergences", item 2).
pub(crate) fn check_kernel_privilege(layout: &BucketLayout) -> Result<(), NtStatus> {
    let wants_kernel = layout.size > 0 && layout.end() > KERNEL_SPACE_START;
    if wants_kernel && !crate::target::may_sample_kernel() {
        return Err(NtStatus::PRIVILEGE_NOT_HELD);
    }
    Ok(())
}
