//! The safe Rust API: a builder, a profile that owns its counts, start/stop, stop on drop, live reads.
//!
//! A profile reaches every target the C API reaches: this process (the default), another process
//! ([`ProfileBuilder::process`], `NtOpenProcess`), every process ([`ProfileBuilder::global`], `Process = NULL`),
//! a range of kernel addresses, and processors given as a mask, CPU numbers or `GROUP_AFFINITY` records
//! ([`ProfileBuilder::group_affinity`], `NtCreateProfileEx`). The checks, their order and their statuses are the
//! C API's: both call the same functions.
//!
//! Where each part lives: this file holds the free functions (intervals and jitter); `builder` the builder's
//! settings; `build` the checks and the creation of a profile, in the C API's order; `profile` the profile
//! itself (start, stop, reads); `process` another process opened for profiling, and `GROUP_AFFINITY` records;
//! `details` the sentences of the errors.

mod build;
mod builder;
mod details;
mod process;
mod profile;

pub use builder::ProfileBuilder;
pub use process::{GroupAffinity, Process};
pub use profile::Profile;

use crate::engine;
use crate::error::Error;
use crate::source::{self, ProfileSource};

/// `NtSetIntervalProfile(Interval, Source)` — set a source's interval (shared by all its profiles), clamped into
/// its limits and applied at once to running profiles. A value for an unsupported source is ignored. Returns
/// the effective interval (0 for an unsupported source). While support cannot be probed (no free descriptor:
/// [`crate::Support::is_transient`]) the value is stored all the same.
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
    let support = source.support();
    if !support.is_supported() && !support.is_transient() {
        return 0;
    }
    engine::set_interval(source, interval)
}

/// `NtQueryIntervalProfile(Source, &Interval)` — the effective interval of a source (after clamping), or 0 when
/// the source is not supported on this machine — or, for that one call, when support cannot be probed (no free
/// descriptor; nothing is cached then, and the C export answers `STATUS_INSUFFICIENT_RESOURCES`).
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
    engine::set_jitter(source, percent).map_err(|status| details::jitter(status, source, percent))
}
