//! The `extern "C"` exports with NT names and their `Zw` aliases.
//!
//! Every export: a panic boundary (`catch_unwind` → `STATUS_INTERNAL_ERROR`), argument checks in the spec's
//! order, pointer probes before any access, handles looked up in the table and never cast to pointers. Pointer
//! arguments are only ever turned into addresses; all memory access goes through `probe`.
//!
//! # Safety
//! `#[unsafe(no_mangle)]` is the only unsafe item here: each exported name is unique in the library and is
//! declared with the same signature in `include/ntprofile.h`.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::handles::{Object, table};
use super::probe;
use crate::affinity::{Affinity, current_group, online_cpus};
use crate::engine::{self, counters::CounterStorage};
use crate::profile::{ProfileCore, ProfileStats, check_front, check_kernel_privilege};
use crate::source::{self, ProfileSource};
use crate::status::NtStatus;
use crate::target::{Target, has_system_profile_privilege};

/// `HANDLE`.
pub type Handle = *mut c_void;

/// `NtCurrentProcess()`.
const CURRENT_PROCESS: usize = usize::MAX;
/// `NtCurrentThread()`.
const CURRENT_THREAD: usize = usize::MAX - 1;

/// Run `f` behind the panic boundary.
fn boundary(f: impl FnOnce() -> Result<(), NtStatus>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NtStatus::SUCCESS.0,
        Ok(Err(status)) => status.0,
        Err(_) => NtStatus::INTERNAL_ERROR.0,
    }
}

/// Which processors an export asked for (resolved at check 8).
enum AffinityArg {
    /// `NtCreateProfile`'s KAFFINITY.
    Mask(u64),
    /// `NtCreateProfileEx`'s GROUP_AFFINITY array: count and address.
    Groups(u16, usize),
}

/// Size of `GROUP_AFFINITY`.
const GROUP_AFFINITY_SIZE: usize = 16;

#[allow(clippy::too_many_arguments)]
fn create(
    handle_out: usize,
    process: usize,
    base: usize,
    size: usize,
    bucket_size: u32,
    buffer: usize,
    buffer_size: u32,
    source: u32,
    affinity: AffinityArg,
) -> Result<(), NtStatus> {
    // Checks 1-6: buffer size, bucket size, buffer sufficiency, overflow, source.
    let (layout, source) = check_front(base as u64, size as u64, bucket_size, buffer_size, source)?;
    // Check 7: pointer probes, handle pointer first.
    probe::probe_write(handle_out, std::mem::size_of::<usize>())?;
    if buffer % 4 != 0 {
        return Err(NtStatus::DATATYPE_MISALIGNMENT);
    }
    if !probe::is_writable(buffer, buffer_size as usize) {
        return Err(NtStatus::ACCESS_VIOLATION);
    }
    let mut groups = Vec::new();
    if let AffinityArg::Groups(count, addr) = affinity
        && count > 0
    {
        if addr % 4 != 0 {
            return Err(NtStatus::DATATYPE_MISALIGNMENT);
        }
        let mut raw = vec![0u8; usize::from(count) * GROUP_AFFINITY_SIZE];
        probe::read_bytes(addr, &mut raw)?;
        for rec in raw.chunks_exact(GROUP_AFFINITY_SIZE) {
            let word = |i: usize| u16::from_ne_bytes([rec[i], rec[i + 1]]);
            let mask =
                u64::from_ne_bytes(rec[0..8].try_into().map_err(|_| NtStatus::INTERNAL_ERROR)?);
            groups.push((mask, word(8), [word(10), word(12), word(14)]));
        }
    }
    // Check 8: processors.
    let online = online_cpus();
    let affinity = match affinity {
        AffinityArg::Mask(mask) => Affinity::from_kaffinity(mask, current_group(), &online)?,
        AffinityArg::Groups(..) => Affinity::from_groups(&groups, &online)?,
    };
    // Check 9: process.
    let mut table = table();
    let target = match process {
        CURRENT_PROCESS => Target::CurrentProcess,
        CURRENT_THREAD => return Err(NtStatus::OBJECT_TYPE_MISMATCH),
        0 => {
            if !has_system_profile_privilege() {
                return Err(NtStatus::PRIVILEGE_NOT_HELD);
            }
            Target::Global
        }
        other => match table.get(other)? {
            Object::Profile(_) => return Err(NtStatus::OBJECT_TYPE_MISMATCH),
            Object::Process(p) => {
                p.check_access()?;
                Target::Process(p.clone())
            }
        },
    };
    check_kernel_privilege(&layout)?;
    // Check 10: create, stopped; write the handle.
    let storage = CounterStorage::Borrowed {
        addr: buffer,
        len: (buffer_size / 4) as usize,
    };
    let core = ProfileCore::new(layout, source, target, affinity, storage);
    let handle = table.insert(Object::Profile(Arc::new(core)))?;
    if let Err(status) = probe::write_bytes(handle_out, &handle.to_ne_bytes()) {
        let _ = table.remove(handle);
        return Err(status);
    }
    Ok(())
}

/// `NtCreateProfile` — create a profile object, stopped.
///
/// # Safety
/// Callable from C with any argument values: pointers are probed, never trusted.
#[unsafe(no_mangle)]
pub extern "C" fn NtCreateProfile(
    profile_handle: *mut Handle,
    process: Handle,
    profile_base: *mut c_void,
    profile_size: usize,
    bucket_size: u32,
    buffer: *mut u32,
    buffer_size: u32,
    profile_source: u32,
    affinity: usize,
) -> i32 {
    boundary(|| {
        create(
            profile_handle as usize,
            process as usize,
            profile_base as usize,
            profile_size,
            bucket_size,
            buffer as usize,
            buffer_size,
            profile_source,
            AffinityArg::Mask(affinity as u64),
        )
    })
}

/// `NtCreateProfileEx` — create a profile object on processors given as `GROUP_AFFINITY` records.
#[unsafe(no_mangle)]
pub extern "C" fn NtCreateProfileEx(
    profile_handle: *mut Handle,
    process: Handle,
    profile_base: *mut c_void,
    profile_size: usize,
    bucket_size: u32,
    buffer: *mut u32,
    buffer_size: u32,
    profile_source: u32,
    group_count: u16,
    group_affinity: *mut c_void,
) -> i32 {
    boundary(|| {
        create(
            profile_handle as usize,
            process as usize,
            profile_base as usize,
            profile_size,
            bucket_size,
            buffer as usize,
            buffer_size,
            profile_source,
            AffinityArg::Groups(group_count, group_affinity as usize),
        )
    })
}

fn with_profile(
    handle: Handle,
    f: impl FnOnce(&Arc<ProfileCore>) -> Result<(), NtStatus>,
) -> Result<(), NtStatus> {
    // The pseudo-handles name the current process and thread: objects of another type.
    if matches!(handle as usize, CURRENT_PROCESS | CURRENT_THREAD) {
        return Err(NtStatus::OBJECT_TYPE_MISMATCH);
    }
    let table = table();
    match table.get(handle as usize)? {
        Object::Profile(core) => f(core),
        Object::Process(_) => Err(NtStatus::OBJECT_TYPE_MISMATCH),
    }
}

/// Size of `CLIENT_ID` (two `HANDLE`s).
const CLIENT_ID_SIZE: usize = 16;

/// `NtOpenProcess` — open a process by id for profiling: `ClientId->UniqueProcess` is a Linux pid. The handle
/// is backed by a pidfd; `NtClose` closes it. `ObjectAttributes` is accepted and not interpreted.
///
/// Statuses: `STATUS_ACCESS_VIOLATION` (unwritable handle pointer, unreadable client id),
/// `STATUS_INVALID_PARAMETER` (no client id), `STATUS_INVALID_CID` (no such process), `STATUS_ACCESS_DENIED`
/// (the caller may not profile it).
#[unsafe(no_mangle)]
pub extern "C" fn NtOpenProcess(
    process_handle: *mut Handle,
    _desired_access: u32,
    _object_attributes: *mut c_void,
    client_id: *mut c_void,
) -> i32 {
    boundary(|| {
        probe::probe_write(process_handle as usize, std::mem::size_of::<usize>())?;
        if client_id.is_null() {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let mut raw = [0u8; CLIENT_ID_SIZE];
        probe::read_bytes(client_id as usize, &mut raw)?;
        let unique_process =
            u64::from_ne_bytes(raw[0..8].try_into().map_err(|_| NtStatus::INTERNAL_ERROR)?);
        let pid = i32::try_from(unique_process).map_err(|_| NtStatus::INVALID_CID)?;
        let process = crate::target::ProcessRef::open(pid)?;
        let mut table = table();
        let handle = table.insert(Object::Process(Arc::new(process)))?;
        if let Err(status) = probe::write_bytes(process_handle as usize, &handle.to_ne_bytes()) {
            let _ = table.remove(handle);
            return Err(status);
        }
        Ok(())
    })
}

/// `NtStartProfile` — start sampling.
#[unsafe(no_mangle)]
pub extern "C" fn NtStartProfile(profile_handle: Handle) -> i32 {
    boundary(|| {
        with_profile(profile_handle, |core| {
            if engine::is_started(core.id) {
                return Err(NtStatus::PROFILING_NOT_STOPPED);
            }
            // The caller may have unmapped the buffer since create: probe it again.
            if let CounterStorage::Borrowed { addr, len } = core.storage
                && !probe::is_writable(addr, len * 4)
            {
                return Err(NtStatus::ACCESS_VIOLATION);
            }
            engine::start(core)
        })
    })
}

/// `NtStopProfile` — stop sampling; returns when the counts are complete.
#[unsafe(no_mangle)]
pub extern "C" fn NtStopProfile(profile_handle: Handle) -> i32 {
    boundary(|| with_profile(profile_handle, |core| engine::stop(core)))
}

/// `NtClose` — close a handle; a started profile is stopped first. Closing a pseudo-handle
/// (`NtCurrentProcess()`, `NtCurrentThread()`) does nothing and succeeds, as in Windows.
#[unsafe(no_mangle)]
pub extern "C" fn NtClose(handle: Handle) -> i32 {
    boundary(|| {
        if matches!(handle as usize, CURRENT_PROCESS | CURRENT_THREAD) {
            return Ok(());
        }
        let mut table = table();
        match table.remove(handle as usize)? {
            Object::Profile(core) => {
                if engine::is_started(core.id) {
                    let _ = engine::stop(&core);
                }
            }
            // The pidfd closes with the last reference (a started profile's stream may still hold one).
            Object::Process(_) => {}
        }
        Ok(())
    })
}

/// `NtSetIntervalProfile` — set a source's interval (interval first). Always succeeds; an unsupported source's
/// value is ignored.
#[unsafe(no_mangle)]
pub extern "C" fn NtSetIntervalProfile(interval: u32, source: u32) -> i32 {
    boundary(|| {
        if let Some(source) = ProfileSource::from_raw(source)
            && source.support().is_supported()
        {
            engine::set_interval(source, interval);
        }
        Ok(())
    })
}

/// `NtQueryIntervalProfile` — the effective interval of a source (source first); 0 for an unsupported one.
#[unsafe(no_mangle)]
pub extern "C" fn NtQueryIntervalProfile(profile_source: u32, interval: *mut u32) -> i32 {
    boundary(|| {
        let value = match ProfileSource::from_raw(profile_source) {
            Some(s) if s.support().is_supported() => source::effective_interval(s),
            _ => 0,
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
            if engine::is_started(core.id) {
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

/// Size of `NTPROFILE_SOURCE_INFO`.
const SOURCE_INFO_SIZE: usize = 192;

/// Encode one `NTPROFILE_SOURCE_INFO` record (layout documented in `include/ntprofile.h`).
fn encode_source_info(info: &source::SourceInfo) -> [u8; SOURCE_INFO_SIZE] {
    let mut rec = [0u8; SOURCE_INFO_SIZE];
    let mut put32 = |off: usize, v: u32| rec[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    let errno = match info.support {
        source::Support::OpenFailed(e) => e as u32,
        _ => 0,
    };
    put32(0, info.source.to_raw());
    put32(4, u32::from(info.support.is_supported()));
    put32(8, errno);
    put32(12, u32::from(info.unit == source::IntervalUnit::Events));
    put32(16, info.min_interval);
    put32(20, info.max_interval);
    put32(24, info.interval);
    put32(28, info.jitter_percent);
    put32(32, info.event.map_or(u32::MAX, |e| e.type_));
    let event = info.event.unwrap_or(source::PerfEventSpec {
        type_: u32::MAX,
        config: 0,
        config1: 0,
        config2: 0,
        name: "",
    });
    for (off, v) in [(40, event.config), (48, event.config1), (56, event.config2)] {
        rec[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    // NUL-terminated, truncated to 63 bytes.
    for (off, text) in [(64, info.name), (128, event.name)] {
        let bytes = text.as_bytes();
        let n = bytes.len().min(63);
        rec[off..off + n].copy_from_slice(&bytes[..n]);
    }
    rec
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
        probe::write_bytes(total_count as usize, &(list.len() as u32).to_ne_bytes())?;
        if (buffer_count as usize) < list.len() {
            return Err(NtStatus::BUFFER_TOO_SMALL);
        }
        if buffer as usize % 4 != 0 {
            return Err(NtStatus::DATATYPE_MISALIGNMENT);
        }
        if !probe::is_writable(buffer as usize, list.len() * SOURCE_INFO_SIZE) {
            return Err(NtStatus::ACCESS_VIOLATION);
        }
        for (i, info) in list.iter().enumerate() {
            probe::write_bytes(
                buffer as usize + i * SOURCE_INFO_SIZE,
                &encode_source_info(info),
            )?;
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

/// `NtprofileStatusMessage` — what a status means: a static NUL-terminated sentence that starts with the
/// status's NT name (the text the Rust API's errors use). A value the library does not define gets a generic
/// text for its severity; never NULL. The caller must not free or modify it.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileStatusMessage(status: i32) -> *const std::ffi::c_char {
    catch_unwind(|| NtStatus(status).message_cstr())
        .unwrap_or(c"STATUS_INTERNAL_ERROR: the status text could not be produced")
        .as_ptr()
}

macro_rules! zw_aliases {
    ($($zw:ident => $nt:ident ( $($arg:ident : $ty:ty),* );)*) => {$(
        #[doc = concat!("`", stringify!($zw), "`: the same as [`", stringify!($nt), "`].")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $zw($($arg: $ty),*) -> i32 {
            $nt($($arg),*)
        }
    )*};
}

zw_aliases! {
    ZwCreateProfile => NtCreateProfile(profile_handle: *mut Handle, process: Handle, profile_base: *mut c_void,
        profile_size: usize, bucket_size: u32, buffer: *mut u32, buffer_size: u32, profile_source: u32,
        affinity: usize);
    ZwCreateProfileEx => NtCreateProfileEx(profile_handle: *mut Handle, process: Handle,
        profile_base: *mut c_void, profile_size: usize, bucket_size: u32, buffer: *mut u32, buffer_size: u32,
        profile_source: u32, group_count: u16, group_affinity: *mut c_void);
    ZwStartProfile => NtStartProfile(profile_handle: Handle);
    ZwOpenProcess => NtOpenProcess(process_handle: *mut Handle, desired_access: u32,
        object_attributes: *mut c_void, client_id: *mut c_void);
    ZwStopProfile => NtStopProfile(profile_handle: Handle);
    ZwClose => NtClose(handle: Handle);
    ZwSetIntervalProfile => NtSetIntervalProfile(interval: u32, source: u32);
    ZwQueryIntervalProfile => NtQueryIntervalProfile(profile_source: u32, interval: *mut u32);
}
