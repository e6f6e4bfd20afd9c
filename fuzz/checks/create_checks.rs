//! `NtCreateProfile` / `NtCreateProfileEx` with arbitrary arguments: pointers are null, tiny, kernel-half,
//! misaligned, read-only, or placed against an unmapped guard page so that any byte past the end faults.
//!
//! Checked on every call: the status is one the contract lists for a create (never an internal error, never a
//! crash); a failed create writes nothing at all; a successful one writes only the handle (and its buffer and
//! handle pointer lie in writable memory), and the handle closes.

use std::ffi::c_void;
use std::sync::OnceLock;

use arbitrary::{self, Arbitrary};
use ntprofile::NtStatus;
use ntprofile::ffi::exports::{NtClose, NtCreateProfile, NtCreateProfileEx, NtOpenProcess};

const PAGE: usize = 4096;
/// Writable pages of the arena, then one read-only page, then one PROT_NONE guard page.
const RW_PAGES: usize = 4;

struct Arena {
    base: usize,
    process: usize,
}

fn arena() -> &'static Arena {
    static ARENA: OnceLock<Arena> = OnceLock::new();
    ARENA.get_or_init(|| {
        let len = (RW_PAGES + 2) * PAGE;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base as usize;
        // SAFETY: the last two pages of our own mapping.
        unsafe {
            assert_eq!(
                libc::mprotect(
                    (base + RW_PAGES * PAGE) as *mut c_void,
                    PAGE,
                    libc::PROT_READ
                ),
                0
            );
            assert_eq!(
                libc::mprotect(
                    (base + (RW_PAGES + 1) * PAGE) as *mut c_void,
                    PAGE,
                    libc::PROT_NONE
                ),
                0
            );
        }
        // A process handle (this process) for the "process" argument.
        let mut process: *mut c_void = std::ptr::null_mut();
        let mut cid = [u64::from(std::process::id()), 0];
        let s = NtOpenProcess(
            &mut process,
            0,
            std::ptr::null_mut(),
            cid.as_mut_ptr().cast(),
        );
        assert_eq!(s, 0, "NtOpenProcess of this process");
        Arena {
            base,
            process: process as usize,
        }
    })
}

/// Where a pointer argument points.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ptr {
    Null,
    /// Below 64 KiB: never mapped (mmap_min_addr).
    Low(u16),
    /// The kernel half or a non-canonical address.
    High(u64),
    /// `n` bytes before the guard page (anything longer than `n` reaches it).
    BeforeGuard(u16),
    /// Inside the read-only page.
    ReadOnly(u16),
    /// At an offset inside the writable pages.
    Inside(u16),
}

impl Ptr {
    fn addr(self) -> usize {
        let a = arena();
        let guard = a.base + (RW_PAGES + 1) * PAGE;
        match self {
            Ptr::Null => 0,
            Ptr::Low(v) => usize::from(v),
            Ptr::High(v) => (v | 0x8000_0000_0000_0000) as usize,
            Ptr::BeforeGuard(n) => guard - 1 - usize::from(n) % ((RW_PAGES + 1) * PAGE),
            Ptr::ReadOnly(n) => a.base + RW_PAGES * PAGE + usize::from(n) % PAGE,
            Ptr::Inside(n) => a.base + usize::from(n) % (RW_PAGES * PAGE),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Process {
    Current,
    CurrentThread,
    Global,
    Opened,
    Raw(u64),
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    ex: bool,
    handle: Ptr,
    process: Process,
    /// The range: either around this code or anywhere.
    base_near: bool,
    base: u64,
    size: u32,
    size_high: bool,
    bucket_size: u8,
    buffer: Ptr,
    buffer_size: u16,
    buffer_size_raw: Option<u32>,
    source: u8,
    source_raw: Option<u32>,
    affinity: u64,
    group_count: u8,
    groups: Ptr,
}

/// The statuses a create may return (the contract's list).
const CREATE_STATUSES: &[NtStatus] = &[
    NtStatus::SUCCESS,
    NtStatus::INVALID_PARAMETER_7,
    NtStatus::INVALID_PARAMETER,
    NtStatus::BUFFER_TOO_SMALL,
    NtStatus::BUFFER_OVERFLOW,
    NtStatus::NOT_SUPPORTED,
    NtStatus::ACCESS_VIOLATION,
    NtStatus::DATATYPE_MISALIGNMENT,
    NtStatus::INVALID_HANDLE,
    NtStatus::OBJECT_TYPE_MISMATCH,
    NtStatus::PRIVILEGE_NOT_HELD,
    NtStatus::ACCESS_DENIED,
    NtStatus::INSUFFICIENT_RESOURCES,
];

const SOURCES: &[u32] = &[
    0, 1, 2, 0x13, 0x18, 0x19, 0x1F, 0x20, 0x1_0000, 0x1_0003, 0x1_0006, 0x1_0007, 0x2_0000,
];

fn snapshot() -> Vec<u8> {
    let a = arena();
    // SAFETY: the writable and read-only pages of the arena are mapped readable for the whole run.
    unsafe { std::slice::from_raw_parts(a.base as *const u8, (RW_PAGES + 1) * PAGE) }.to_vec()
}

fn writable(addr: usize, len: usize) -> bool {
    let a = arena();
    addr >= a.base
        && addr
            .checked_add(len)
            .is_some_and(|end| end <= a.base + RW_PAGES * PAGE)
}

/// The check of one input.
pub fn run(input: Input) {
    let a = arena();
    let handle_ptr = input.handle.addr();
    let buffer = input.buffer.addr();
    let buffer_size = input
        .buffer_size_raw
        .unwrap_or(u32::from(input.buffer_size));
    let process = match input.process {
        Process::Current => usize::MAX,
        Process::CurrentThread => usize::MAX - 1,
        Process::Global => 0,
        Process::Opened => a.process,
        Process::Raw(v) => v as usize,
    };
    let base = if input.base_near {
        (arena as *const () as usize as u64) & !0xFFF
    } else {
        input.base
    };
    let size = if input.size_high {
        input.base
    } else {
        u64::from(input.size)
    };
    let source = input
        .source_raw
        .unwrap_or(SOURCES[usize::from(input.source) % SOURCES.len()]);
    let before = snapshot();
    let raw = if input.ex {
        NtCreateProfileEx(
            handle_ptr as *mut *mut c_void,
            process as *mut c_void,
            base as *mut c_void,
            size as usize,
            u32::from(input.bucket_size),
            buffer as *mut u32,
            buffer_size,
            source,
            u16::from(input.group_count % 4),
            input.groups.addr() as *mut c_void,
        )
    } else {
        NtCreateProfile(
            handle_ptr as *mut *mut c_void,
            process as *mut c_void,
            base as *mut c_void,
            size as usize,
            u32::from(input.bucket_size),
            buffer as *mut u32,
            buffer_size,
            source,
            input.affinity as usize,
        )
    };
    let status = NtStatus(raw);
    assert!(
        CREATE_STATUSES.contains(&status),
        "status {status:?} outside the contract for {input:?}"
    );
    let after = snapshot();
    if !status.is_success() {
        assert!(
            before == after,
            "a failed create ({status:?}) wrote into the arena: {input:?}"
        );
        return;
    }
    assert!(
        writable(handle_ptr, 8),
        "success with an unwritable handle pointer: {input:?}"
    );
    assert!(
        writable(buffer, buffer_size as usize),
        "success with an unwritable buffer: {input:?}"
    );
    // Only the handle changed.
    let off = handle_ptr - a.base;
    for (i, (x, y)) in before.iter().zip(&after).enumerate() {
        if !(off..off + 8).contains(&i) {
            assert_eq!(x, y, "byte {i} of the arena changed by a create: {input:?}");
        }
    }
    let handle = usize::from_ne_bytes(after[off..off + 8].try_into().unwrap());
    assert_eq!(NtStatus(NtClose(handle as *mut c_void)), NtStatus::SUCCESS);
    assert_eq!(
        NtStatus(NtClose(handle as *mut c_void)),
        NtStatus::INVALID_HANDLE
    );
}
