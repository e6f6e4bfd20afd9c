//! The exports of sources and intervals: `NtSetIntervalProfile`, `NtQueryIntervalProfile`, and the extensions
//! `NtprofileQuerySources`, `NtprofileRegisterSource`, `NtprofileSetSourceJitter`, with
//! `NtprofileQueryStatistics` (what a profile counted) and `NtprofileQueryEventUsage` (the events behind it).
//!
//! # Safety
//! `#[unsafe(no_mangle)]` is the only unsafe item here: each exported name is unique in the library and is
//! declared with the same signature in `include/ntprofile.h`.
#![allow(unsafe_code)]

use std::ffi::c_void;

use super::boundary::{Handle, boundary};
use super::probe;
use super::profile_exports::with_profile;
use super::records::{SOURCE_INFO_SIZE, SourceInfoRecord};
use crate::engine;
use crate::profile::ProfileStats;
use crate::source::{self, ProfileSource};
use crate::status::NtStatus;

/// `NtSetIntervalProfile` — set a source's interval (interval first). Always succeeds; an unsupported source's
/// value is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn NtSetIntervalProfile(interval: u32, source: u32) -> i32 {
    boundary(|| {
        // A source whose probe failed for a passing reason (no free descriptor) may well be supported: its
        // interval is stored all the same, so that the setting is not lost.
        if let Some(source) = ProfileSource::from_raw(source)
            && (source.support().is_supported() || source.support().is_transient())
        {
            engine::set_interval(source, interval);
        }
        Ok(())
    })
}

/// `NtQueryIntervalProfile` — the effective interval of a source (source first); 0 for an unsupported one.
/// `STATUS_INSUFFICIENT_RESOURCES` (nothing written) when whether the source is supported cannot be told now
/// (no free descriptor for the probe).
#[unsafe(no_mangle)]
pub extern "C" fn NtQueryIntervalProfile(profile_source: u32, interval: *mut u32) -> i32 {
    boundary(|| {
        let value = match ProfileSource::from_raw(profile_source) {
            Some(s) => match s.support() {
                support if support.is_supported() => source::effective_interval(s),
                support if support.is_transient() => return Err(support.status()),
                _ => 0,
            },
            None => 0,
        };
        probe::write_bytes(interval as usize, &value.to_ne_bytes())
    })
}

/// `NtprofileQueryStatistics` — what a profile counted: counted, outside the range, lost, throttled
/// (`NTPROFILE_STATISTICS`, four `ULONGLONG`s). Live while started; final after stop.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileQueryStatistics(
    profile_handle: Handle,
    statistics: *mut ProfileStats,
) -> i32 {
    boundary(|| {
        with_profile(profile_handle, |core| {
            if core.is_started() {
                engine::sync()?;
            }
            let s = core.stats.read();
            let mut bytes = [0u8; 32];
            for (i, v) in [s.counted, s.outside, s.lost, s.throttled]
                .into_iter()
                .enumerate()
            {
                bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
            }
            probe::write_bytes(statistics as usize, &bytes)
        })
    })
}

/// `NtprofileQueryEventUsage` — the perf events behind a started profile (`NTPROFILE_EVENT_USAGE`: mode,
/// rings, descriptors, ring bytes, threads observed directly). `STATUS_PROFILING_NOT_STARTED` when it is not
/// started; a started profile of a process that has exited holds no event (mode `NTPROFILE_EVENTS_NONE`).
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileQueryEventUsage(profile_handle: Handle, usage: *mut c_void) -> i32 {
    boundary(|| {
        with_profile(profile_handle, |core| {
            if !core.is_started() {
                return Err(NtStatus::PROFILING_NOT_STARTED);
            }
            let u = core.event_usage();
            let mode = u.map_or(0, |u| u.mode.code());
            let rings = u.map_or(0, |u| u.rings as u32);
            let mut bytes = [0u8; 32];
            bytes[0..4].copy_from_slice(&mode.to_ne_bytes());
            bytes[4..8].copy_from_slice(&rings.to_ne_bytes());
            for (i, v) in [
                u.map_or(0, |u| u.descriptors),
                u.map_or(0, |u| u.ring_bytes),
                u.map_or(0, |u| u.threads),
            ]
            .into_iter()
            .enumerate()
            {
                bytes[8 + i * 8..16 + i * 8].copy_from_slice(&(v as u64).to_ne_bytes());
            }
            probe::write_bytes(usage as usize, &bytes)
        })
    })
}

/// `NtprofileQuerySources` — the source listing: every source with its name, whether it is supported here
/// (and the errno when not), its interval limits, unit, effective interval, jitter and perf event.
/// `*TotalCount` receives the number of sources; when `BufferCount` is smaller, nothing else is written and the
/// call returns `STATUS_BUFFER_TOO_SMALL`.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileQuerySources(
    buffer: *mut c_void,
    buffer_count: u32,
    total_count: *mut u32,
) -> i32 {
    boundary(|| {
        let list = source::list_sources();
        probe::probe_write(total_count as usize, 4)?;
        let fits = (buffer_count as usize) >= list.len();
        // Every check of the buffer passes before anything is written.
        if fits {
            if buffer as usize % 4 != 0 {
                return Err(NtStatus::DATATYPE_MISALIGNMENT);
            }
            probe::check_writable(buffer as usize, list.len() * SOURCE_INFO_SIZE)?;
        }
        probe::write_bytes(total_count as usize, &(list.len() as u32).to_ne_bytes())?;
        if !fits {
            return Err(NtStatus::BUFFER_TOO_SMALL);
        }
        for (i, info) in list.iter().enumerate() {
            let record = SourceInfoRecord::new(info);
            probe::write_bytes(buffer as usize + i * SOURCE_INFO_SIZE, record.as_bytes())?;
        }
        Ok(())
    })
}

/// `NtprofileRegisterSource` — register a raw perf event (`perf_event_attr` type, config, config1, config2) as
/// a new profile source; its `KPROFILE_SOURCE` value is written to `*Source` (the same value for the same event).
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileRegisterSource(
    perf_type: u32,
    config: u64,
    config1: u64,
    config2: u64,
    source_out: *mut u32,
) -> i32 {
    boundary(|| {
        probe::probe_write(source_out as usize, 4)?;
        let s = source::register_raw_source(perf_type, config, config1, config2)?;
        probe::write_bytes(source_out as usize, &s.to_raw().to_ne_bytes())
    })
}

/// `NtprofileSetSourceJitter` — jitter a source's sample period by up to ± `Percent` % (0: fixed period).
/// `STATUS_INVALID_PARAMETER` above 90, `STATUS_NOT_SUPPORTED` for a source not supported here.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileSetSourceJitter(profile_source: u32, percent: u32) -> i32 {
    boundary(|| {
        let s = ProfileSource::from_raw(profile_source).ok_or(NtStatus::NOT_SUPPORTED)?;
        engine::set_jitter(s, percent)
    })
}
