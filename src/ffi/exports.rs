//! The `extern "C"` exports with NT names and their `Zw` aliases.
//!
//! Every export: a panic boundary (`catch_unwind` → `STATUS_INTERNAL_ERROR`), argument checks in the spec's
//! order, pointer probes before any access, handles looked up in the table and never cast to pointers. Pointer
//! arguments are only ever turned into addresses; all memory access goes through `probe`.
//!
//! # Safety
//! `#[unsafe(no_mangle)]` is the only unsafe item here: each exported name is unique in the library and is
//! declared with the same signature in `include/ntprofile.h`. A C caller's counter buffer becomes a
//! `CounterStorage` through its `unsafe` constructor, after the probes its `# Safety` section asks for.
//!
//! A little over 400 lines because it holds every export of the C ABI, each with its documentation, the
//! checks in the contract's order and its `Zw` alias, in one place next to the header it mirrors.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use super::probe;
use super::records::{SOURCE_INFO_SIZE, SourceInfoRecord};
use crate::affinity::{Affinity, current_group, online_cpus};
use crate::engine::{self, counters::CounterStorage};
use crate::handles::{Object, table};
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
        if matches!(handle as usize, CURRENT_PROCESS | CURRENT_THREAD) {
            return Ok(());
        }
        let mut table = table();
        match table.remove(handle as usize)? {
            Object::Profile(core) => {
                if core.is_started() {
                    let _ = core.stop();
                }
            }
            // The pidfd closes with the last reference (a started profile's stream may still hold one).
            Object::Process(_) => {}
            // A read running meanwhile holds its own reference: the sampler closes when it returns.
            Object::Sampler(_) => {}
        }
        Ok(())
    })
}

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

// ---------------------------------------------------------------------------------------------------------
// Modules and functions to profile (EnumProcessModules + GetModuleInformation, and the symbol tables).
// ---------------------------------------------------------------------------------------------------------

/// Size of `NTPROFILE_MODULE_INFO`.
const MODULE_INFO_SIZE: usize = 296;
/// Bytes of `NTPROFILE_MODULE_INFO.FullPathName`, its NUL included.
const MODULE_PATH_BYTES: usize = 256;
/// `NTPROFILE_MODULE_LOAD_BIAS_KNOWN`: `LoadBias` is valid.
const MODULE_LOAD_BIAS_KNOWN: u32 = 0x1;
/// `NTPROFILE_MODULE_NAME_ONLY`: the path did not fit; `FullPathName` holds the file name only.
const MODULE_NAME_ONLY: u32 = 0x2;
/// `NTPROFILE_MODULE_NO_FILE`: no file behind it (`[vdso]`, the kernel, a kernel module); `FullPathName` is its
/// name.
const MODULE_NO_FILE: u32 = 0x4;
/// Longest `ModuleName` or `FunctionName` read (bytes before the NUL).
const MAX_NAME: usize = 4096;

/// Whose modules: what a process handle of these exports names.
enum Scope {
    /// `NtCurrentProcess()`.
    Current,
    /// A process handle from `NtOpenProcess` (`None`: the process has exited).
    Process(Option<Arc<crate::target::ProcessRef>>),
    /// `NULL`: the system, that is the kernel and its modules.
    Kernel,
}

impl Scope {
    /// The handle's scope, as `NtCreateProfile` reads its `Process` argument.
    fn of(handle: usize) -> Result<Scope, NtStatus> {
        match handle {
            CURRENT_PROCESS => Ok(Scope::Current),
            CURRENT_THREAD => Err(NtStatus::OBJECT_TYPE_MISMATCH),
            0 => Ok(Scope::Kernel),
            other => match table().get(other)? {
                Object::Profile(_) | Object::Sampler(_) => Err(NtStatus::OBJECT_TYPE_MISMATCH),
                Object::Process(p) if p.has_exited() => Ok(Scope::Process(None)),
                Object::Process(p) => Ok(Scope::Process(Some(p.clone()))),
            },
        }
    }

    /// The modules in scope (none for an exited process: it has no address space).
    fn modules(&self) -> Result<Vec<crate::modules::Module>, NtStatus> {
        Ok(match self {
            Scope::Current => crate::modules::modules(None)?,
            Scope::Kernel => crate::modules::kernel_modules()?,
            Scope::Process(None) => Vec::new(),
            Scope::Process(Some(p)) => {
                let list = crate::modules::modules(Some(p.pid() as u32))?;
                // The pid is only trusted while the pidfd says the process lives: once it has exited, the pid
                // may name a newer process.
                if p.has_exited() { Vec::new() } else { list }
            }
        })
    }
}

/// Encode one `NTPROFILE_MODULE_INFO` record (layout in `include/ntprofile.h`).
fn encode_module_info(m: &crate::modules::Module) -> [u8; MODULE_INFO_SIZE] {
    let mut rec = [0u8; MODULE_INFO_SIZE];
    let mut put64 = |off: usize, v: u64| rec[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    put64(0, m.base);
    put64(8, m.size);
    put64(16, m.file_offset);
    put64(24, m.load_bias.unwrap_or(0));
    let mut flags = 0;
    if m.load_bias.is_some() {
        flags |= MODULE_LOAD_BIAS_KNOWN;
    }
    let path = m.path.as_os_str().as_encoded_bytes();
    let (text, name_offset) = if path.is_empty() {
        flags |= MODULE_NO_FILE;
        (m.name.as_bytes(), 0)
    } else if path.len() < MODULE_PATH_BYTES {
        let slash = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        (path, slash)
    } else {
        flags |= MODULE_NAME_ONLY;
        (m.name.as_bytes(), 0)
    };
    let n = text.len().min(MODULE_PATH_BYTES - 1);
    rec[32..36].copy_from_slice(&flags.to_ne_bytes());
    rec[36..38].copy_from_slice(&(name_offset as u16).to_ne_bytes());
    rec[40..40 + n].copy_from_slice(&text[..n]);
    rec
}

/// `NtprofileEnumerateModules` — the modules of a process, as `EnumProcessModules` + `GetModuleInformation`
/// give them on Windows: one `NTPROFILE_MODULE_INFO` per executable mapping. `ProcessHandle` is
/// `NtCurrentProcess()`, a handle from `NtOpenProcess`, or NULL for the kernel and its modules. `*ReturnLength`
/// receives the bytes the whole list needs; when `Length` is smaller, nothing else is written and the call
/// returns `STATUS_BUFFER_TOO_SMALL`.
///
/// Statuses: `STATUS_ACCESS_VIOLATION` (`ReturnLength` not writable, `Modules` not writable for the list),
/// `STATUS_DATATYPE_MISALIGNMENT` (`Modules` not 8-byte aligned), `STATUS_INVALID_HANDLE`,
/// `STATUS_OBJECT_TYPE_MISMATCH` (a profile handle, `NtCurrentThread()`), `STATUS_ACCESS_DENIED` (the process's
/// mappings may not be read), `STATUS_PRIVILEGE_NOT_HELD` (NULL while the kernel hides its addresses),
/// `STATUS_BUFFER_TOO_SMALL`.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileEnumerateModules(
    process_handle: Handle,
    modules: *mut c_void,
    length: u32,
    return_length: *mut u32,
) -> i32 {
    boundary(|| {
        probe::probe_write(return_length as usize, 4)?;
        let list = Scope::of(process_handle as usize)?.modules()?;
        let needed = u32::try_from(list.len() * MODULE_INFO_SIZE)
            .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
        if length < needed {
            probe::write_bytes(return_length as usize, &needed.to_ne_bytes())?;
            return Err(NtStatus::BUFFER_TOO_SMALL);
        }
        if needed > 0 {
            if modules as usize % 8 != 0 {
                return Err(NtStatus::DATATYPE_MISALIGNMENT);
            }
            probe::check_writable(modules as usize, needed as usize)?;
            let mut bytes = Vec::new();
            bytes
                .try_reserve_exact(needed as usize)
                .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
            for m in &list {
                bytes.extend_from_slice(&encode_module_info(m));
            }
            probe::write_bytes(modules as usize, &bytes)?;
        }
        probe::write_bytes(return_length as usize, &needed.to_ne_bytes())
    })
}

/// Read an optional C string argument as UTF-8.
fn name_arg(addr: usize) -> Result<Option<String>, NtStatus> {
    if addr == 0 {
        return Ok(None);
    }
    let bytes = probe::read_cstr(addr, MAX_NAME)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| NtStatus::INVALID_PARAMETER)
}

/// `NtprofileFindFunction` — the exact range of a function by name, from the ELF symbol tables (`.symtab`, then
/// `.dynsym`; `st_value` + the module's load bias, `st_size`), in the module named `ModuleName` (a file name such
/// as `"libm.so.6"`, its prefix up to a dot such as `"libm"`, or a path) or in every module when it is NULL.
/// `ProcessHandle` as for `NtprofileEnumerateModules` (NULL: kernel functions from `/proc/kallsyms`, whose
/// sizes run to the next symbol). Writes `*Base` and `*Size` only on success.
///
/// Statuses: `STATUS_ACCESS_VIOLATION` (`Base`/`Size` not writable, a name not readable),
/// `STATUS_INVALID_PARAMETER` (`FunctionName` NULL, a name longer than 4096 bytes or not UTF-8), the handle
/// statuses of `NtprofileEnumerateModules`, and `STATUS_NOT_FOUND` (no such module, or no such function in it;
/// also for an indirect function, `STT_GNU_IFUNC`, whose symbol is its resolver).
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileFindFunction(
    process_handle: Handle,
    module_name: *const c_char,
    function_name: *const c_char,
    base: *mut *mut c_void,
    size: *mut usize,
) -> i32 {
    boundary(|| {
        probe::probe_write(base as usize, std::mem::size_of::<usize>())?;
        probe::probe_write(size as usize, std::mem::size_of::<usize>())?;
        let function = name_arg(function_name as usize)?.ok_or(NtStatus::INVALID_PARAMETER)?;
        let module = name_arg(module_name as usize)?;
        let symbol = match Scope::of(process_handle as usize)? {
            Scope::Current => crate::modules::find_function(None, module.as_deref(), &function)?,
            Scope::Kernel => crate::modules::find_kernel_function(module.as_deref(), &function)?,
            Scope::Process(None) => return Err(NtStatus::NOT_FOUND),
            Scope::Process(Some(p)) => {
                let found = crate::modules::find_function(
                    Some(p.pid() as u32),
                    module.as_deref(),
                    &function,
                )?;
                if p.has_exited() {
                    return Err(NtStatus::NOT_FOUND);
                }
                found
            }
        };
        let address = usize::try_from(symbol.address).map_err(|_| NtStatus::INTERNAL_ERROR)?;
        let length = usize::try_from(symbol.size).map_err(|_| NtStatus::INTERNAL_ERROR)?;
        probe::write_bytes(base as usize, &address.to_ne_bytes())?;
        probe::write_bytes(size as usize, &length.to_ne_bytes())
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
