//! The records the C API writes into a caller's memory, as `#[repr(C)]` structs that mirror
//! `include/ntprofile.h`: the size and every field offset are checked at compile time, and `tests/c_abi.rs`
//! checks the header's side with the C compiler.
//!
//! # Safety
//! [`SourceInfoRecord::as_bytes`] views a record as bytes: a `#[repr(C)]` struct of integers and byte arrays
//! whose size is the sum of its fields' sizes (asserted below), so it has no padding and every byte is
//! initialized.
#![allow(unsafe_code)]

use std::mem::{offset_of, size_of};

use crate::source::{IntervalUnit, SourceInfo, Support};

/// Length of the two name fields, NUL included.
const NAME_LEN: usize = 64;

/// `NTPROFILE_SOURCE_INFO`: one line of the source listing (`NtprofileQuerySources`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SourceInfoRecord {
    source: u32,
    supported: u32,
    open_errno: u32,
    interval_is_event_count: u32,
    minimum_interval: u32,
    maximum_interval: u32,
    interval: u32,
    jitter_percent: u32,
    perf_type: u32,
    reserved: u32,
    perf_config: u64,
    perf_config1: u64,
    perf_config2: u64,
    name: [u8; NAME_LEN],
    perf_event_name: [u8; NAME_LEN],
}

/// `sizeof(NTPROFILE_SOURCE_INFO)`.
pub(crate) const SOURCE_INFO_SIZE: usize = size_of::<SourceInfoRecord>();

// The layout of `include/ntprofile.h`, field by field.
const _: () = {
    assert!(SOURCE_INFO_SIZE == 192);
    assert!(10 * size_of::<u32>() + 3 * size_of::<u64>() + 2 * NAME_LEN == SOURCE_INFO_SIZE);
    assert!(offset_of!(SourceInfoRecord, source) == 0);
    assert!(offset_of!(SourceInfoRecord, supported) == 4);
    assert!(offset_of!(SourceInfoRecord, open_errno) == 8);
    assert!(offset_of!(SourceInfoRecord, interval_is_event_count) == 12);
    assert!(offset_of!(SourceInfoRecord, minimum_interval) == 16);
    assert!(offset_of!(SourceInfoRecord, maximum_interval) == 20);
    assert!(offset_of!(SourceInfoRecord, interval) == 24);
    assert!(offset_of!(SourceInfoRecord, jitter_percent) == 28);
    assert!(offset_of!(SourceInfoRecord, perf_type) == 32);
    assert!(offset_of!(SourceInfoRecord, reserved) == 36);
    assert!(offset_of!(SourceInfoRecord, perf_config) == 40);
    assert!(offset_of!(SourceInfoRecord, perf_config1) == 48);
    assert!(offset_of!(SourceInfoRecord, perf_config2) == 56);
    assert!(offset_of!(SourceInfoRecord, name) == 64);
    assert!(offset_of!(SourceInfoRecord, perf_event_name) == 128);
};

/// `text` as a NUL-terminated C string field, truncated to 63 bytes.
fn c_name(text: &str) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    let n = text.len().min(NAME_LEN - 1);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

impl SourceInfoRecord {
    /// The record of one listed source.
    pub(crate) fn new(info: &SourceInfo) -> SourceInfoRecord {
        let open_errno = match info.support {
            Support::OpenFailed(e) => e as u32,
            // Refused for want of the privilege to sample the kernel: the probe's EACCES.
            Support::NeedsKernelPrivilege => libc::EACCES as u32,
            _ => 0,
        };
        SourceInfoRecord {
            source: info.source.to_raw(),
            supported: u32::from(info.support.is_supported()),
            open_errno,
            interval_is_event_count: u32::from(info.unit == IntervalUnit::Events),
            minimum_interval: info.min_interval,
            maximum_interval: info.max_interval,
            interval: info.interval,
            jitter_percent: info.jitter_percent,
            perf_type: info.event.map_or(u32::MAX, |e| e.type_),
            reserved: 0,
            perf_config: info.event.map_or(0, |e| e.config),
            perf_config1: info.event.map_or(0, |e| e.config1),
            perf_config2: info.event.map_or(0, |e| e.config2),
            name: c_name(info.name),
            perf_event_name: c_name(info.event.map_or("", |e| e.name)),
        }
    }

    /// The record's bytes, as C reads them.
    pub(crate) fn as_bytes(&self) -> &[u8; SOURCE_INFO_SIZE] {
        let ptr = (self as *const SourceInfoRecord).cast::<[u8; SOURCE_INFO_SIZE]>();
        // SAFETY: `SourceInfoRecord` is `#[repr(C)]`, `SOURCE_INFO_SIZE` bytes with no padding (asserted above),
        // and made of integers and byte arrays only, so every byte is initialized; a byte array has alignment 1
        // and the borrow lives as long as `self`.
        unsafe { &*ptr }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_of_the_timer() {
        let info = crate::source::list_sources()
            .into_iter()
            .find(|i| i.source == crate::source::ProfileSource::Time)
            .expect("the timer is listed");
        let rec = SourceInfoRecord::new(&info);
        let bytes = rec.as_bytes();
        assert_eq!(&bytes[0..4], &0u32.to_ne_bytes(), "ProfileTime is 0");
        assert_eq!(&bytes[4..8], &1u32.to_ne_bytes(), "supported");
        assert_eq!(&bytes[24..28], &info.interval.to_ne_bytes());
        assert_eq!(&bytes[64..70], b"Timer\0");
        assert_eq!(&bytes[128..138], b"cpu-clock\0");
    }
}
