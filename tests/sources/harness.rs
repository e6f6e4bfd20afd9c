//! Restoring process-wide settings, and the C exports called from Rust.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// Serialization and restoring process-wide settings.
// ---------------------------------------------------------------------------------------------------------

// Held by every test of this file (see the module docs).
pub(crate) use crate::common::serial;

/// Restores a source's interval when dropped (also on a panic); for ProfileTime also turns its jitter off.
pub(crate) struct Restore {
    pub(crate) source: ProfileSource,
    pub(crate) interval: u32,
}

impl Restore {
    pub(crate) fn to(source: ProfileSource, interval: u32) -> Restore {
        Restore { source, interval }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        set_interval(self.source, self.interval);
        if self.source == ProfileSource::Time {
            let _ = set_jitter(ProfileSource::Time, 0);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The C exports, called from Rust.
// ---------------------------------------------------------------------------------------------------------

pub(crate) use crate::common::current_process;

/// `NtCreateProfile` over `range` with 16-byte buckets and every processor of the group; closes the handle of a
/// successful create. Returns the status.
pub(crate) fn c_create(range: (usize, usize), source: u32) -> NtStatus {
    let mut buffer = vec![0u32; range.1.div_ceil(16).max(1)];
    let mut handle: *mut c_void = std::ptr::null_mut();
    let status = NtStatus(NtCreateProfile(
        &mut handle,
        current_process(),
        std::ptr::without_provenance_mut(range.0),
        range.1,
        4,
        buffer.as_mut_ptr(),
        (buffer.len() * 4) as u32,
        source,
        usize::MAX,
    ));
    if status == NtStatus::SUCCESS {
        assert_eq!(
            NtStatus(NtClose(handle)),
            NtStatus::SUCCESS,
            "close a new profile"
        );
    }
    status
}

/// `NtQueryIntervalProfile(source, &v)`: (status, v), with `v` preset to a marker the call must overwrite.
pub(crate) fn c_query(source: u32) -> (NtStatus, u32) {
    let mut value = 0xDEAD_BEEFu32;
    let status = NtStatus(NtQueryIntervalProfile(source, &mut value));
    (status, value)
}

/// `NtSetIntervalProfile(interval, source)`.
pub(crate) fn c_set(interval: u32, source: u32) -> NtStatus {
    NtStatus(NtSetIntervalProfile(interval, source))
}
