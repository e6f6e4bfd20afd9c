//! Handles a Windows program can keep in 32 bits, through the C exports from Rust (docs/api.md, "Handle
//! values"): for every kind (profile, process, sampler) the value equals the sign extension of its low 32 bits,
//! and the value truncated to an `i32` and sign-extended, zero-extended, or with garbage in its upper half
//! reaches the same object; a stale handle after its slot's reuse is `STATUS_INVALID_HANDLE` in every form. And
//! `RtlNtStatusToDosError` / `NtStatus::to_dos_error`: the whole status → Win32 error table, the general rules
//! and unknown statuses. (The table's 1,048,576-handle limit: the unit tests of the table and
//! `ffi/handles.c limit`.)

use std::ffi::c_void;
use std::sync::Mutex;

use ntprofile::NtStatus;
use ntprofile::ffi::exports::{
    Handle, NtClose, NtCreateProfile, NtOpenProcess, NtStartProfile, NtStopProfile,
    NtprofileQueryStatistics, RtlGetLastNtStatus, RtlNtStatusToDosError,
    RtlNtStatusToDosErrorNoTeb,
};
use ntprofile::ffi::sampler::{
    NtprofileCreateSampler, NtprofileEnableSampler, NtprofileQuerySamplerStatistics, SamplerConfig,
    SamplerStatistics,
};

/// The profile tests share the process's handle table: one at a time, so that slot reuse is predictable.
static SERIAL: Mutex<()> = Mutex::new(());

const INVALID_HANDLE: i32 = NtStatus::INVALID_HANDLE.0;
const SUCCESS: i32 = 0;

fn sign_extended(h: Handle) -> Handle {
    h as usize as u32 as i32 as isize as Handle
}

fn forms(h: Handle) -> [(&'static str, Handle); 3] {
    [
        ("sign-extended", sign_extended(h)),
        ("zero-extended", h as usize as u32 as usize as Handle),
        (
            "garbage upper half",
            (h as usize as u32 as usize | 0x5A5A_5A5A_0000_0000) as Handle,
        ),
    ]
}

fn check_value(kind: &str, h: Handle) {
    let v = h as usize;
    assert!(v != 0 && v % 4 == 0, "{kind} {v:#x}");
    assert_eq!(h, sign_extended(h), "{kind} {v:#x} is its sign extension");
    assert!(v < 1 << 31, "{kind} {v:#x} is positive in 32 bits");
}

/// A buffer and range for small profiles of this process.
struct Target {
    buffer: Box<[u32; 16]>,
    range: Box<[u8; 64]>,
}

impl Target {
    fn new() -> Target {
        Target {
            buffer: Box::new([0; 16]),
            range: Box::new([0; 64]),
        }
    }

    fn create(&mut self, process: Handle) -> (i32, Handle) {
        let mut h: Handle = std::ptr::null_mut();
        let st = NtCreateProfile(
            &mut h,
            process,
            self.range.as_mut_ptr().cast::<c_void>(),
            64,
            2,
            self.buffer.as_mut_ptr(),
            64,
            0,
            usize::MAX,
        );
        (st, h)
    }
}

const CURRENT_PROCESS: Handle = usize::MAX as Handle;

#[test]
fn profile_handles_kept_in_32_bits() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Target::new();
    let (st, h) = t.create(CURRENT_PROCESS);
    assert_eq!(st, SUCCESS);
    check_value("profile", h);
    let mut stats = [0u64; 4];
    for (name, f) in forms(h) {
        assert_eq!(
            NtStopProfile(f),
            NtStatus::PROFILING_NOT_STARTED.0,
            "{name}"
        );
        assert_eq!(
            NtprofileQueryStatistics(f, stats.as_mut_ptr().cast()),
            SUCCESS,
            "{name}"
        );
        assert_eq!(NtStartProfile(f), SUCCESS, "{name}");
        assert_eq!(NtStopProfile(f), SUCCESS, "{name}");
        assert_eq!(
            t.create(f).0,
            NtStatus::OBJECT_TYPE_MISMATCH.0,
            "{name} as a process"
        );
    }
    assert_eq!(NtClose(sign_extended(h)), SUCCESS);
    for (name, f) in forms(h) {
        assert_eq!(NtStopProfile(f), INVALID_HANDLE, "{name}");
    }
    assert_eq!(NtClose(h), INVALID_HANDLE);
}

#[test]
fn process_handles_kept_in_32_bits() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Target::new();
    let mut p: Handle = std::ptr::null_mut();
    let cid: [u64; 2] = [u64::from(std::process::id()), 0];
    let st = NtOpenProcess(
        &mut p,
        0,
        std::ptr::null_mut(),
        cid.as_ptr().cast_mut().cast(),
    );
    assert_eq!(st, SUCCESS);
    check_value("process", p);
    for (name, f) in forms(p) {
        let (st, prof) = t.create(f);
        assert_eq!(st, SUCCESS, "{name}");
        assert_eq!(NtClose(prof), SUCCESS);
        assert_eq!(
            NtStartProfile(f),
            NtStatus::OBJECT_TYPE_MISMATCH.0,
            "{name}"
        );
    }
    assert_eq!(NtClose(forms(p)[1].1), SUCCESS);
    assert_eq!(t.create(p).0, INVALID_HANDLE);
    assert_eq!(t.create(sign_extended(p)).0, INVALID_HANDLE);
}

#[test]
fn sampler_handles_kept_in_32_bits() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let config = SamplerConfig {
        size: std::mem::size_of::<SamplerConfig>() as u32,
        ..SamplerConfig::default()
    };
    let mut s: Handle = std::ptr::null_mut();
    assert_eq!(NtprofileCreateSampler(&mut s, &config), SUCCESS);
    check_value("sampler", s);
    let mut stats = SamplerStatistics::default();
    for (name, f) in forms(s) {
        assert_eq!(NtprofileEnableSampler(f, 1), SUCCESS, "{name}");
        assert_eq!(NtprofileEnableSampler(f, 0), SUCCESS, "{name}");
        assert_eq!(
            NtprofileQuerySamplerStatistics(f, &mut stats),
            SUCCESS,
            "{name}"
        );
        assert_eq!(NtStopProfile(f), NtStatus::OBJECT_TYPE_MISMATCH.0, "{name}");
    }
    assert_eq!(NtClose(forms(s)[2].1), SUCCESS);
    for (name, f) in forms(s) {
        assert_eq!(NtprofileEnableSampler(f, 1), INVALID_HANDLE, "{name}");
    }
}

#[test]
fn pseudo_handles_kept_in_32_bits() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Target::new();
    let (st, h) = t.create(0xFFFF_FFFFusize as Handle);
    assert_eq!(st, SUCCESS, "(HANDLE)(ULONG)-1 is NtCurrentProcess()");
    assert_eq!(NtClose(h), SUCCESS);
    assert_eq!(
        t.create(0xFFFF_FFFEusize as Handle).0,
        NtStatus::OBJECT_TYPE_MISMATCH.0,
        "(HANDLE)(ULONG)-2 is NtCurrentThread()"
    );
    for k in [4usize, 8, 12, 16] {
        assert_eq!(NtClose(k.wrapping_neg() as Handle), INVALID_HANDLE, "-{k}");
    }
}

/// A closed profile's slot given to a new profile: the old value, in every form, is refused and never reaches
/// the new one.
#[test]
fn stale_handle_after_slot_reuse() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = Target::new();
    let (st, old) = t.create(CURRENT_PROCESS);
    assert_eq!(st, SUCCESS);
    assert_eq!(NtClose(old), SUCCESS);
    let slot = |h: Handle| h as usize & 0x3F_FFFC;
    let mut created = 0;
    let new = loop {
        let (st, h) = t.create(CURRENT_PROCESS);
        assert_eq!(st, SUCCESS);
        created += 1;
        if slot(h) == slot(old) {
            break h;
        }
        assert_eq!(NtClose(h), SUCCESS);
        assert!(created < 100_000, "the slot never came back");
    };
    println!("old {old:?}, new {new:?} after {created} creations");
    assert_ne!(new, old);
    for (name, f) in forms(old) {
        assert_eq!(NtStopProfile(f), INVALID_HANDLE, "{name}");
        assert_eq!(NtStartProfile(f), INVALID_HANDLE, "{name}");
        assert_eq!(NtClose(f), INVALID_HANDLE, "{name}");
    }
    assert_eq!(NtStopProfile(new), NtStatus::PROFILING_NOT_STARTED.0);
    assert_eq!(NtClose(new), SUCCESS);
}

/// Every status the library returns or its header defines, with the Win32 error Windows maps it to.
const WINDOWS_TABLE: &[(NtStatus, u32)] = &[
    (NtStatus::SUCCESS, 0),
    (NtStatus::DATATYPE_MISALIGNMENT, 998), // ERROR_NOACCESS
    (NtStatus::BUFFER_OVERFLOW, 234),       // ERROR_MORE_DATA
    (NtStatus(0xC000_0001u32 as i32), 31),  // STATUS_UNSUCCESSFUL → ERROR_GEN_FAILURE
    (NtStatus::ACCESS_VIOLATION, 998),      // ERROR_NOACCESS
    (NtStatus::INVALID_HANDLE, 6),          // ERROR_INVALID_HANDLE
    (NtStatus::INVALID_CID, 87),            // ERROR_INVALID_PARAMETER
    (NtStatus::INVALID_PARAMETER, 87),
    (NtStatus(0xC000_0017u32 as i32), 8), // STATUS_NO_MEMORY → ERROR_NOT_ENOUGH_MEMORY
    (NtStatus::ACCESS_DENIED, 5),
    (NtStatus::BUFFER_TOO_SMALL, 122), // ERROR_INSUFFICIENT_BUFFER
    (NtStatus::OBJECT_TYPE_MISMATCH, 6), // ERROR_INVALID_HANDLE
    (NtStatus::PRIVILEGE_NOT_HELD, 1314), // ERROR_PRIVILEGE_NOT_HELD
    (NtStatus::INSUFFICIENT_RESOURCES, 1450), // ERROR_NO_SYSTEM_RESOURCES
    (NtStatus::PROFILING_NOT_STARTED, 317), // ERROR_MR_MID_NOT_FOUND
    (NtStatus::PROFILING_NOT_STOPPED, 317),
    (NtStatus::NOT_SUPPORTED, 50),
    (NtStatus::PROFILING_AT_LIMIT, 317),
    (NtStatus::INTERNAL_ERROR, 1359),
    (NtStatus::INVALID_PARAMETER_7, 87),
    (NtStatus::NOT_FOUND, 1168),
];

#[test]
fn status_to_win32_error_table() {
    for &(status, error) in WINDOWS_TABLE {
        assert_eq!(status.to_dos_error(), error, "{status}");
        assert_eq!(RtlNtStatusToDosError(status.0), error, "{status}");
        assert_eq!(RtlGetLastNtStatus(), status.0, "{status} recorded");
        assert_eq!(RtlNtStatusToDosErrorNoTeb(status.0), error, "{status}");
    }
}

#[test]
fn status_to_win32_error_rules_and_unknown_values() {
    for (raw, error) in [
        (0x8007_0005u32, 5u32), // a Win32 error in a status / HRESULT
        (0x8007_2AF9, 0x2AF9),
        (0xC001_0057, 87),          // 0xC001xxxx: the low 16 bits
        (0xE000_1234, 0xE000_1234), // customer bit: unchanged
        (0x2000_0001, 0x2000_0001),
        (0xFFFF_FFFF, 0xFFFF_FFFF),
        (0xD000_0008, 6),   // 0xD reads as 0xC
        (0xC000_0777, 317), // unknown: ERROR_MR_MID_NOT_FOUND
        (0x8000_0777, 317),
        (0x4000_0777, 317),
        (0x0000_0777, 317),
        (0xC007_0005, 317), // no rule for 0xC007xxxx
    ] {
        let status = NtStatus(raw as i32);
        assert_eq!(status.to_dos_error(), error, "{status}");
        assert_eq!(RtlNtStatusToDosErrorNoTeb(status.0), error, "{status}");
    }
    // The last status is per thread, and NoTeb does not record.
    RtlNtStatusToDosError(NtStatus::ACCESS_DENIED.0);
    RtlNtStatusToDosErrorNoTeb(NtStatus::INVALID_HANDLE.0);
    assert_eq!(RtlGetLastNtStatus(), NtStatus::ACCESS_DENIED.0);
    std::thread::spawn(|| assert_eq!(RtlGetLastNtStatus(), 0))
        .join()
        .unwrap();
}
