//! Raw perf events registered as sources at run time (`NtprofileRegisterSource`), numbered from
//! [`REGISTERED_BASE`](super::REGISTERED_BASE) in registration order.

use std::sync::atomic::{AtomicU32, Ordering};

use super::{MAX_REGISTERED, PerfEventSpec, ProfileSource};
use crate::status::NtStatus;

/// Raw perf events registered as sources, in registration order.
static REGISTRY: std::sync::Mutex<Vec<PerfEventSpec>> = std::sync::Mutex::new(Vec::new());
/// Number of registrations (read without the lock by `from_raw`).
static REGISTERED: AtomicU32 = AtomicU32::new(0);

pub(super) fn registered_count() -> usize {
    // Acquire: pairs with the Release increment in `register_raw_source`, which follows the push of the spec.
    REGISTERED.load(Ordering::Acquire) as usize
}

pub(super) fn registered(n: u16) -> Option<PerfEventSpec> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{REGISTERED_BASE, effective_interval, list_sources, store_interval};

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
}
