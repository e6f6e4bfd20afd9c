//! Creating a profile from its builder: the checks in the C API's order, each failure with its status and a
//! sentence naming the argument or check, then the counter buffer.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use super::builder::{AffinitySpec, ProfileBuilder, TargetSpec};
use super::details;
use super::process::open_error;
use super::profile::Profile;
use crate::affinity::{Affinity, current_group, online_cpus};
use crate::engine::counters::CounterStorage;
use crate::error::Error;
use crate::profile::{ProfileCore, check_front, check_kernel_privilege};
use crate::status::NtStatus;
use crate::target::{Target, has_system_profile_privilege, perf_event_paranoid};

impl ProfileBuilder {
    /// Create the profile, stopped, with a zeroed counter buffer of exactly the counters the range needs.
    #[doc(alias = "NtCreateProfile")]
    ///
    /// # Errors
    /// In the order the C API checks: `STATUS_INVALID_PARAMETER` (bucket size), `STATUS_BUFFER_OVERFLOW`
    /// (the range wraps), `STATUS_NOT_SUPPORTED` (source) or `STATUS_PRIVILEGE_NOT_HELD` (a source sampled in
    /// the kernel, as context switches, without the privilege to sample the kernel: see
    /// [`Support::NeedsKernelPrivilege`](crate::Support::NeedsKernelPrivilege)), `STATUS_INVALID_PARAMETER` (processors: a mask,
    /// CPU list or `GROUP_AFFINITY` record naming no online CPU), then the target: `STATUS_PRIVILEGE_NOT_HELD`
    /// (a [global](Self::global) profile without the system-profile privilege), `STATUS_ACCESS_DENIED` (the
    /// [process](Self::process) may no longer be profiled), then `STATUS_PRIVILEGE_NOT_HELD` (a kernel range
    /// without `CAP_PERFMON`, `CAP_SYS_ADMIN` or `perf_event_paranoid <= 1`), and
    /// `STATUS_INSUFFICIENT_RESOURCES` (the counters cannot be allocated or exceed `ULONG` sizes).
    ///
    /// ```
    /// use ntprofile::{GroupAffinity, NtStatus, Profile};
    ///
    /// // Group 1000 does not exist on any machine this runs on.
    /// let err = Profile::builder()
    ///     .range(0x10000, 0x1000)
    ///     .group_affinity(&[GroupAffinity { mask: 1, group: 1000 }])
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.status(), NtStatus::INVALID_PARAMETER);
    /// ```
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
            .ok_or_else(|| details::counters(NtStatus::INSUFFICIENT_RESOURCES, needed, false))?;
        let (layout, source) = check_front(
            self.base,
            self.size,
            self.bucket_size,
            buffer_size,
            self.source.to_raw(),
        )
        .map_err(|status| {
            details::create_front(
                status,
                self.base,
                self.size,
                self.bucket_size,
                buffer_size,
                self.source,
            )
        })?;
        let affinity = resolve_affinity(self.affinity)?;
        // Check 9: the process, as the C API's NtCreateProfile checks its Process handle.
        let target = resolve_target(&self.target)?;
        check_kernel_privilege(&layout).map_err(|status| {
            Error::new(
                status,
                format!(
                    "the range {:#x}..{:#x} reaches kernel addresses: sampling the kernel needs CAP_PERFMON, \
                     CAP_SYS_ADMIN or kernel.perf_event_paranoid <= 1 (it is {})",
                    layout.base,
                    layout.end(),
                    perf_event_paranoid()
                ),
            )
        })?;
        let storage = zeroed_counters(needed)?;
        crate::fork::install();
        let core = ProfileCore::new(layout, source, target, affinity, storage);
        Ok(Profile {
            core: Arc::new(core),
        })
    }
}

/// The processors of a profile, from the builder's choice (a mask, CPU numbers or `GROUP_AFFINITY` records that
/// name no online CPU are refused, as the C API refuses them).
fn resolve_affinity(affinity: AffinitySpec) -> Result<Affinity, Error> {
    let online = online_cpus();
    Ok(match affinity {
        AffinitySpec::Mask(m) => Affinity::from_kaffinity(m, current_group(), &online)
            .map_err(|status| details::affinity_mask(status, m, current_group(), &online))?,
        AffinitySpec::AllActive => Affinity::AllActive,
        AffinitySpec::Cpus(set) => {
            if set.is_empty() || !set.is_subset(&online) {
                return Err(details::cpus(&set, &online));
            }
            Affinity::Cpus(set)
        }
        AffinitySpec::Groups(groups) => {
            let records: Vec<(u64, u16, [u16; 3])> =
                groups.iter().map(|g| (g.mask, g.group, [0; 3])).collect();
            Affinity::from_groups(&records, &online).map_err(|status| {
                Error::new(
                    status,
                    format!(
                        "a GROUP_AFFINITY record names no online CPU or a group that does not exist \
                         ({groups:?}; online CPUs: {:?})",
                        online.iter().collect::<Vec<_>>()
                    ),
                )
            })?
        }
    })
}

/// The process of a profile, checked as the C API's `NtCreateProfile` checks its `Process` handle: a global
/// profile needs the privilege, another process the access.
fn resolve_target(target: &TargetSpec) -> Result<Target, Error> {
    Ok(match target {
        TargetSpec::Current => Target::CurrentProcess,
        TargetSpec::Global => {
            if !has_system_profile_privilege() {
                return Err(Error::new(
                    NtStatus::PRIVILEGE_NOT_HELD,
                    format!(
                        "a global profile (every process) needs CAP_PERFMON, CAP_SYS_ADMIN or \
                         kernel.perf_event_paranoid <= 0 (it is {})",
                        perf_event_paranoid()
                    ),
                ));
            }
            Target::Global
        }
        TargetSpec::Process(process) => {
            process
                .inner()
                .check_access()
                .map_err(|status| open_error(process.pid(), status))?;
            Target::Process(process.inner().clone())
        }
    })
}

/// `needed` zeroed counters, or `STATUS_INSUFFICIENT_RESOURCES` when they cannot be allocated.
fn zeroed_counters(needed: u64) -> Result<CounterStorage, Error> {
    let mut counters: Vec<AtomicU32> = Vec::new();
    counters
        .try_reserve_exact(needed as usize)
        .map_err(|_| details::counters(NtStatus::INSUFFICIENT_RESOURCES, needed, true))?;
    counters.resize_with(needed as usize, || AtomicU32::new(0));
    Ok(CounterStorage::Owned(counters.into_boxed_slice()))
}
