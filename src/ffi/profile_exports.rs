//! The exports that create, open, start, stop and close: `NtCreateProfile`, `NtCreateProfileEx` (their checks in
//! the contract's order), `NtOpenProcess`, `NtStartProfile`, `NtStopProfile`, `NtClose`.
//!
//! # Safety
//! `#[unsafe(no_mangle)]` is the only unsafe item here: each exported name is unique in the library and is
//! declared with the same signature in `include/ntprofile.h`. A C caller's counter buffer becomes a
//! `CounterStorage` through its `unsafe` constructor, after the probes its `# Safety` section asks for.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::Arc;

use super::boundary::{CURRENT_PROCESS, CURRENT_THREAD, Handle, boundary, handle_arg};
use super::probe;
use crate::affinity::{Affinity, current_group, online_cpus};
use crate::engine::counters::CounterStorage;
use crate::handles::{Object, table};
use crate::profile::{ProfileCore, check_front, check_kernel_privilege};
use crate::status::NtStatus;
use crate::target::{Target, has_system_profile_privilege};

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
    probe::check_writable(buffer, buffer_size as usize)?;
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
            Object::Profile(_) | Object::Sampler(_) => return Err(NtStatus::OBJECT_TYPE_MISMATCH),
            Object::Process(p) => {
                p.check_access()?;
                Target::Process(p.clone())
            }
        },
    };
    check_kernel_privilege(&layout)?;
    // Check 10: create, stopped; write the handle.
    // SAFETY: `buffer` was checked 4-byte aligned and `[buffer, buffer + buffer_size)` mapped writable above;
    // the C caller keeps it valid until the profile is stopped (the contract in `include/ntprofile.h`), and
    // each start probes it again.
    let storage = unsafe { CounterStorage::borrowed(buffer, (buffer_size / 4) as usize) };
    crate::fork::install();
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
            handle_arg(process),
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
            handle_arg(process),
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

pub(crate) fn with_profile(
    handle: Handle,
    f: impl FnOnce(&Arc<ProfileCore>) -> Result<(), NtStatus>,
) -> Result<(), NtStatus> {
    // The pseudo-handles name the current process and thread: objects of another type.
    let handle = handle_arg(handle);
    if matches!(handle, CURRENT_PROCESS | CURRENT_THREAD) {
        return Err(NtStatus::OBJECT_TYPE_MISMATCH);
    }
    let table = table();
    match table.get(handle)? {
        Object::Profile(core) => f(core),
        Object::Process(_) | Object::Sampler(_) => Err(NtStatus::OBJECT_TYPE_MISMATCH),
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
        // Before the first handle of any kind exists: in a forked child, an inherited process handle must be
        // invalid even when no profile was ever created.
        crate::fork::install();
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
            if core.is_started() {
                return Err(NtStatus::PROFILING_NOT_STOPPED);
            }
            // The caller may have unmapped the buffer since create: probe it again.
            if let CounterStorage::Borrowed(b) = &core.storage {
                probe::check_writable(b.addr(), b.len() * 4)?;
            }
            core.start()
        })
    })
}

/// `NtStopProfile` — stop sampling; returns when the counts are complete.
#[unsafe(no_mangle)]
pub extern "C" fn NtStopProfile(profile_handle: Handle) -> i32 {
    boundary(|| with_profile(profile_handle, |core| core.stop()))
}

/// `NtClose` — close a handle; a started profile is stopped first. Closing a pseudo-handle
/// (`NtCurrentProcess()`, `NtCurrentThread()`) does nothing and succeeds, as in Windows.
#[unsafe(no_mangle)]
pub extern "C" fn NtClose(handle: Handle) -> i32 {
    boundary(|| {
        let handle = handle_arg(handle);
        if matches!(handle, CURRENT_PROCESS | CURRENT_THREAD) {
            return Ok(());
        }
        let mut table = table();
        match table.remove(handle)? {
            Object::Profile(core) => {
                if core.is_started() {
                    let _ = core.stop();
                }
            }
            // The pidfd closes with the last reference (a started profile's stream may still hold one).
            Object::Process(_) => {}
            // A read waiting on it ends now; a read running meanwhile holds its own reference: the sampler
            // closes when it returns.
            Object::Sampler(any) => super::sampler::closed(&any),
        }
        Ok(())
    })
}
