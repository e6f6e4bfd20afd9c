//! The listing of every source (`NtprofileQuerySources`, `ntprof sources`): name, support, interval limits,
//! the interval in force, jitter and perf event.

use super::interval::{IntervalUnit, effective_interval, jitter_percent};
use super::probe::Support;
use super::registry::registered_count;
use super::{PerfEventSpec, ProfileSource};

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
