//! The exports that find what to profile: `NtprofileEnumerateModules` (as `EnumProcessModules` +
//! `GetModuleInformation`) and `NtprofileFindFunction` (the symbol tables).
//!
//! # Safety
//! `#[unsafe(no_mangle)]` is the only unsafe item here: each exported name is unique in the library and is
//! declared with the same signature in `include/ntprofile.h`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use super::boundary::{CURRENT_PROCESS, CURRENT_THREAD, Handle, boundary, handle_arg};
use super::probe;
use crate::handles::{Object, table};
use crate::status::NtStatus;

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
        let list = Scope::of(handle_arg(process_handle))?.modules()?;
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
        let symbol = match Scope::of(handle_arg(process_handle))? {
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
