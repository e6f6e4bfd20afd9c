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
//! Every export of the C ABI is reachable here, as `ntprofile::ffi::exports::NAME`; each is written in the file of
//! its topic (`profile_exports`, `source_exports`, `module_exports`) and re-exported, and this file holds
//! `NtprofileStatusMessage`, the status conversions of ntdll (`RtlNtStatusToDosError`,
//! `RtlNtStatusToDosErrorNoTeb`, `RtlGetLastNtStatus`) and the `Zw` aliases.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::catch_unwind;

pub use super::boundary::Handle;
pub use super::module_exports::{NtprofileEnumerateModules, NtprofileFindFunction};
pub use super::profile_exports::{
    NtClose, NtCreateProfile, NtCreateProfileEx, NtOpenProcess, NtStartProfile, NtStopProfile,
};
pub use super::source_exports::{
    NtQueryIntervalProfile, NtSetIntervalProfile, NtprofileQueryEventUsage, NtprofileQuerySources,
    NtprofileQueryStatistics, NtprofileRegisterSource, NtprofileSetSourceJitter,
};
use crate::status::NtStatus;

/// `NtprofileStatusMessage` — what a status means: a static NUL-terminated sentence that starts with the
/// status's NT name (the text the Rust API's errors use). A value the library does not define gets a generic
/// text for its severity; never NULL. The caller must not free or modify it.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileStatusMessage(status: i32) -> *const std::ffi::c_char {
    catch_unwind(|| NtStatus(status).message_cstr())
        .unwrap_or(c"STATUS_INTERNAL_ERROR: the status text could not be produced")
        .as_ptr()
}

/// `ERROR_INTERNAL_ERROR`: what the conversions return if they themselves failed (a caught panic), as
/// `STATUS_INTERNAL_ERROR` maps.
const ERROR_INTERNAL_ERROR: u32 = 1359;

thread_local! {
    /// The last status this thread passed to `RtlNtStatusToDosError` (Windows keeps it in the thread's TEB).
    static LAST_STATUS: Cell<i32> = const { Cell::new(0) };
}

/// `RtlNtStatusToDosErrorNoTeb` — the Win32 error code Windows maps a status to (`ERROR_INVALID_HANDLE` for
/// `STATUS_INVALID_HANDLE`, ...; `ERROR_MR_MID_NOT_FOUND` (317) for a status without one). Records nothing.
#[unsafe(no_mangle)]
pub extern "C" fn RtlNtStatusToDosErrorNoTeb(status: i32) -> u32 {
    catch_unwind(|| NtStatus(status).to_dos_error()).unwrap_or(ERROR_INTERNAL_ERROR)
}

/// `RtlNtStatusToDosError` — the same conversion, which also records `status` as this thread's last status
/// (`RtlGetLastNtStatus`), as Windows does.
#[unsafe(no_mangle)]
pub extern "C" fn RtlNtStatusToDosError(status: i32) -> u32 {
    let _ = LAST_STATUS.try_with(|last| last.set(status));
    RtlNtStatusToDosErrorNoTeb(status)
}

/// `RtlGetLastNtStatus` — the last status this thread passed to `RtlNtStatusToDosError` (0 before any). The
/// profiling calls themselves do not set it, as on Windows, where only the conversion records it.
#[unsafe(no_mangle)]
pub extern "C" fn RtlGetLastNtStatus() -> i32 {
    LAST_STATUS.try_with(Cell::get).unwrap_or(0)
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
