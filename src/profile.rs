//! The profile object shared by the C and Rust APIs: parameters fixed at creation, the counter storage, and
//! the statistics the consumer keeps.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::affinity::Affinity;
use crate::buckets::BucketLayout;
use crate::engine::counters::CounterStorage;
use crate::source::ProfileSource;
use crate::target::{KERNEL_SPACE_START, Target};

/// What a profile counted, read live or after a stop.
///
/// Every sample the kernel delivered for the profile's source, process and processors while it was started is in
/// exactly one of `counted` and `outside`; samples the kernel dropped because a ring was full are in `lost`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ProfileStats {
    /// Samples that fell in the range and incremented a counter.
    pub counted: u64,
    /// Samples of the profile's source, process and processors whose PC was outside the range.
    pub outside: u64,
    /// Samples the kernel dropped (full ring: `PERF_RECORD_LOST`) on the profile's processors.
    pub lost: u64,
    /// Times the kernel throttled the event on the profile's processors (`PERF_RECORD_THROTTLE`).
    pub throttled: u64,
}

#[derive(Default)]
pub(crate) struct StatsCell {
    counted: AtomicU64,
    outside: AtomicU64,
    lost: AtomicU64,
    throttled: AtomicU64,
}

impl StatsCell {
    /// Add a batch (called by the consumer only).
    pub(crate) fn add(&self, d: &ProfileStats) {
        // Relaxed: the consumer is the only writer; readers want eventual values, and a stop's ack orders the
        // final additions before the caller's reads.
        self.counted.fetch_add(d.counted, Ordering::Relaxed);
        self.outside.fetch_add(d.outside, Ordering::Relaxed);
        self.lost.fetch_add(d.lost, Ordering::Relaxed);
        self.throttled.fetch_add(d.throttled, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> ProfileStats {
        // Relaxed: see `add`.
        ProfileStats {
            counted: self.counted.load(Ordering::Relaxed),
            outside: self.outside.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
        }
    }
}

/// A created profile: everything `NtCreateProfile` fixed. Shared (`Arc`) between its owner and the consumer
/// while started.
pub(crate) struct ProfileCore {
    pub(crate) id: u64,
    pub(crate) layout: BucketLayout,
    pub(crate) source: ProfileSource,
    pub(crate) target: Target,
    pub(crate) affinity: Affinity,
    pub(crate) storage: CounterStorage,
    pub(crate) stats: StatsCell,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl ProfileCore {
    pub(crate) fn new(
        layout: BucketLayout,
        source: ProfileSource,
        target: Target,
        affinity: Affinity,
        storage: CounterStorage,
    ) -> ProfileCore {
        crate::engine::fork::install();
        // Relaxed: a unique number, nothing else is ordered by it.
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        ProfileCore {
            id,
            layout,
            source,
            target,
            affinity,
            storage,
            stats: StatsCell::default(),
        }
    }

    /// True when the range reaches kernel addresses (the stream must then include the kernel).
    pub(crate) fn wants_kernel(&self) -> bool {
        self.layout.size > 0 && self.layout.end() > KERNEL_SPACE_START
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
) -> Result<(BucketLayout, ProfileSource), crate::status::NtStatus> {
    let layout = crate::buckets::check_layout(base, size, bucket_size, buffer_size)?;
    let source = ProfileSource::from_raw(source).ok_or(crate::status::NtStatus::NOT_SUPPORTED)?;
    source.support().status().ok()?;
    Ok((layout, source))
}

/// Check 9 for a range that reaches kernel addresses: sampling the kernel needs CAP_PERFMON (or CAP_SYS_ADMIN)
/// or `perf_event_paranoid <= 1` (`docs/linux-mapping.md`, "Deliberate divergences", item 2).
pub(crate) fn check_kernel_privilege(layout: &BucketLayout) -> Result<(), crate::status::NtStatus> {
    let wants_kernel = layout.size > 0 && layout.end() > KERNEL_SPACE_START;
    if wants_kernel && !crate::target::may_sample_kernel() {
        return Err(crate::status::NtStatus::PRIVILEGE_NOT_HELD);
    }
    Ok(())
}
