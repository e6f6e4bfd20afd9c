//! The sampler extension's C exports: `NtprofileCreateSampler`, `NtprofileEnableSampler`,
//! `NtprofileReadSampler`, `NtprofileQuerySamplerStatistics` (and `NtClose`, in `exports`), over the Rust
//! [`Sampler`] (by its handle), with the `#[repr(C)]` records of `include/ntprofile.h`.
//!
//! Every export: the panic boundary, the pointer probes before any access (the configuration and the process ids
//! are copied in through `probe`, the handle and the statistics written out through it), handles looked up in
//! the table and never cast to pointers. The record routine runs on the caller's thread inside
//! `NtprofileReadSampler`; the pointers of a record (call chain, stack, name) live only during its call.
//!
//! # Safety
//! `#[unsafe(no_mangle)]` on each export (unique names, declared with the same signatures in the header), and
//! the call of the caller's record routine: a C function pointer the caller passed for this purpose, called with
//! a pointer to a record on our stack and the caller's own context value.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::probe;
use crate::handles::{Object, table};
use crate::sampler::{SampleRecord, Sampler};
use crate::source::ProfileSource;
use crate::status::NtStatus;

/// `HANDLE`.
type Handle = *mut c_void;

/// `NTPROFILE_SAMPLER_INHERIT`: follow the processes the targets create.
pub const SAMPLER_INHERIT: u32 = 0x1;
/// `NTPROFILE_SAMPLER_GLOBAL`: every process (`ProcessCount` must be 0).
pub const SAMPLER_GLOBAL: u32 = 0x2;
/// `NTPROFILE_SAMPLER_KERNEL`: kernel samples too.
pub const SAMPLER_KERNEL: u32 = 0x4;
/// `NTPROFILE_SAMPLER_SIDEBAND`: Mmap, Comm, Fork and Exit records.
pub const SAMPLER_SIDEBAND: u32 = 0x8;
const KNOWN_FLAGS: u32 = SAMPLER_INHERIT | SAMPLER_GLOBAL | SAMPLER_KERNEL | SAMPLER_SIDEBAND;

/// `NtprofileRecordSample` .. `NtprofileRecordUnthrottle` (`NTPROFILE_RECORD_TYPE`).
pub mod record_type {
    /// A sample.
    pub const SAMPLE: u32 = 1;
    /// An executable mapping.
    pub const MMAP: u32 = 2;
    /// A command-name change (exec).
    pub const COMM: u32 = 3;
    /// A new thread or process.
    pub const FORK: u32 = 4;
    /// A thread's exit.
    pub const EXIT: u32 = 5;
    /// Records the kernel dropped.
    pub const LOST: u32 = 6;
    /// Sampling throttled.
    pub const THROTTLE: u32 = 7;
    /// Sampling resumed.
    pub const UNTHROTTLE: u32 = 8;
}

/// `NTPROFILE_RECORD_KERNEL`: a sample's ip is in the kernel.
pub const RECORD_KERNEL: u32 = 0x1;
/// `NTPROFILE_RECORD_EXEC`: a Comm record caused by an exec.
pub const RECORD_EXEC: u32 = 0x2;
/// `NTPROFILE_RECORD_HAS_REGS`: a sample carries the user registers (`UserIp`, `UserSp`, `UserBp`).
pub const RECORD_HAS_REGS: u32 = 0x4;

/// `NTPROFILE_SAMPLER_CONFIG` (56 bytes on LP64), as the header declares it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SamplerConfig {
    /// `sizeof(NTPROFILE_SAMPLER_CONFIG)`.
    pub size: u32,
    /// `NTPROFILE_SAMPLER_*`.
    pub flags: u32,
    /// `KPROFILE_SOURCE`.
    pub source: u32,
    /// 0: the source's current interval.
    pub interval: u32,
    /// Number of pids at `process_ids`; 0 without GLOBAL: the current process.
    pub process_count: u32,
    /// Must be 0.
    pub reserved0: u32,
    /// Linux pids.
    pub process_ids: *const u32,
    /// Processors of group 0; 0: every online processor.
    pub affinity: usize,
    /// 0: no call chain.
    pub max_callchain: u16,
    /// Must be 0.
    pub reserved1: u16,
    /// 0: no user-stack copy.
    pub user_stack_size: u32,
    /// 0: the default.
    pub ring_pages: u32,
    /// Must be 0.
    pub reserved2: u32,
}

/// `NTPROFILE_RECORD` (136 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NtprofileRecord {
    /// `NTPROFILE_RECORD_TYPE`.
    pub type_: u32,
    /// `NTPROFILE_RECORD_KERNEL`, `_EXEC`, `_HAS_REGS`.
    pub flags: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Fork/Exit: the parent's process id.
    pub parent_pid: u32,
    /// Fork/Exit: the parent's thread id.
    pub parent_tid: u32,
    /// Sample: the CPU.
    pub cpu: u32,
    /// 0.
    pub reserved: u32,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub time: u64,
    /// Sample: ip; Mmap: start.
    pub address: u64,
    /// Mmap: length; Lost: records lost.
    pub length: u64,
    /// Mmap: file offset.
    pub offset: u64,
    /// Mmap: `PROT_*`.
    pub protection: u32,
    /// Mmap: `MAP_*`.
    pub map_flags: u32,
    /// Entries at `callchain`.
    pub callchain_count: u32,
    /// Bytes at `stack`.
    pub stack_size: u32,
    /// The raw call chain, with `PERF_CONTEXT_*` markers (NULL when empty).
    pub callchain: *const u64,
    /// User registers (with `NTPROFILE_RECORD_HAS_REGS`).
    pub user_ip: u64,
    /// User stack pointer: the address of `stack[0]`.
    pub user_sp: u64,
    /// User frame pointer.
    pub user_bp: u64,
    /// The user-stack copy (NULL when empty).
    pub stack: *const u8,
    /// Comm: the command; Mmap: the file name; NUL-terminated (NULL for other records).
    pub name: *const c_char,
    /// Bytes of `name` before its NUL.
    pub name_length: u32,
    /// 0.
    pub reserved2: u32,
}

/// `NTPROFILE_SAMPLER_STATISTICS` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStatistics {
    /// Records delivered.
    pub records: u64,
    /// Samples delivered.
    pub samples: u64,
    /// Records the kernel dropped.
    pub lost: u64,
    /// Throttle records.
    pub throttled: u64,
    /// Unthrottle records.
    pub unthrottled: u64,
    /// 1 when every target exited.
    pub targets_exited: u32,
    /// 0.
    pub reserved: u32,
}

/// `PNTPROFILE_RECORD_ROUTINE`.
pub type RecordRoutine =
    Option<extern "C" fn(record: *const NtprofileRecord, context: *mut c_void)>;

/// The C API's sampler object: the sampler and the buffer names are copied into (NUL-terminated).
struct CSampler {
    sampler: Sampler,
    name: Vec<u8>,
}

/// The object behind a sampler handle.
type Shared = Mutex<CSampler>;

/// The most process ids a configuration may name.
const MAX_PROCESS_IDS: u32 = 65_536;

thread_local! {
    /// The sampler objects whose record routine runs on this thread now (a call on one of them from inside its
    /// routine would wait for itself).
    static READING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn boundary(f: impl FnOnce() -> Result<(), NtStatus>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NtStatus::SUCCESS.0,
        Ok(Err(status)) => status.0,
        Err(_) => NtStatus::INTERNAL_ERROR.0,
    }
}

/// The sampler a handle names (the table's lock is released before `f` runs, so that `f` may call back into
/// the API, `NtClose` included). `reading`: `f` runs the caller's record routine, during which a call on the
/// same sampler from this thread is refused instead of waiting for itself.
fn with_sampler(
    handle: Handle,
    reading: bool,
    f: impl FnOnce(&mut CSampler) -> Result<(), NtStatus>,
) -> Result<(), NtStatus> {
    let object = {
        let table = table();
        match table.get(handle as usize)? {
            Object::Sampler(any) => any.clone(),
            Object::Profile(_) | Object::Process(_) => {
                return Err(NtStatus::OBJECT_TYPE_MISMATCH);
            }
        }
    };
    let shared = object
        .downcast::<Shared>()
        .map_err(|_| NtStatus::INTERNAL_ERROR)?;
    let key = Arc::as_ptr(&shared) as usize;
    if READING.with(|r| r.borrow().contains(&key)) {
        // Called from inside this sampler's own record routine.
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let mut guard = shared.lock().unwrap_or_else(PoisonError::into_inner);
    if !reading {
        return f(&mut guard);
    }
    READING.with(|r| r.borrow_mut().push(key));
    let result = catch_unwind(AssertUnwindSafe(|| f(&mut guard)));
    READING.with(|r| r.borrow_mut().retain(|&k| k != key));
    result.unwrap_or(Err(NtStatus::INTERNAL_ERROR))
}

/// Read the configuration the caller passed (copied in through the probes).
fn read_config(config: usize) -> Result<SamplerConfig, NtStatus> {
    if config == 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if config % std::mem::align_of::<SamplerConfig>() != 0 {
        return Err(NtStatus::DATATYPE_MISALIGNMENT);
    }
    let mut size = [0u8; 4];
    probe::read_bytes(config, &mut size)?;
    if u32::from_ne_bytes(size) as usize != std::mem::size_of::<SamplerConfig>() {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let mut bytes = [0u8; std::mem::size_of::<SamplerConfig>()];
    probe::read_bytes(config, &mut bytes)?;
    let u16_at = |o: usize| u16::from_ne_bytes([bytes[o], bytes[o + 1]]);
    let u32_at =
        |o: usize| u32::from_ne_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let usize_at = |o: usize| {
        let mut w = [0u8; std::mem::size_of::<usize>()];
        let n = w.len();
        w.copy_from_slice(&bytes[o..o + n]);
        usize::from_ne_bytes(w)
    };
    use std::mem::offset_of;
    Ok(SamplerConfig {
        size: u32_at(offset_of!(SamplerConfig, size)),
        flags: u32_at(offset_of!(SamplerConfig, flags)),
        source: u32_at(offset_of!(SamplerConfig, source)),
        interval: u32_at(offset_of!(SamplerConfig, interval)),
        process_count: u32_at(offset_of!(SamplerConfig, process_count)),
        reserved0: u32_at(offset_of!(SamplerConfig, reserved0)),
        process_ids: std::ptr::without_provenance(usize_at(offset_of!(SamplerConfig, process_ids))),
        affinity: usize_at(offset_of!(SamplerConfig, affinity)),
        max_callchain: u16_at(offset_of!(SamplerConfig, max_callchain)),
        reserved1: u16_at(offset_of!(SamplerConfig, reserved1)),
        user_stack_size: u32_at(offset_of!(SamplerConfig, user_stack_size)),
        ring_pages: u32_at(offset_of!(SamplerConfig, ring_pages)),
        reserved2: u32_at(offset_of!(SamplerConfig, reserved2)),
    })
}

fn create(handle_out: usize, config: usize) -> Result<(), NtStatus> {
    probe::probe_write(handle_out, std::mem::size_of::<usize>())?;
    let c = read_config(config)?;
    if c.flags & !KNOWN_FLAGS != 0 || c.reserved0 != 0 || c.reserved1 != 0 || c.reserved2 != 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let global = c.flags & SAMPLER_GLOBAL != 0;
    if (global && c.process_count != 0) || c.process_count > MAX_PROCESS_IDS {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let mut pids = Vec::new();
    if c.process_count > 0 {
        let addr = c.process_ids as usize;
        if addr == 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if addr % 4 != 0 {
            return Err(NtStatus::DATATYPE_MISALIGNMENT);
        }
        let mut raw = vec![0u8; c.process_count as usize * 4];
        probe::read_bytes(addr, &mut raw)?;
        pids = raw
            .chunks_exact(4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
    }
    let source = ProfileSource::from_raw(c.source).ok_or(NtStatus::NOT_SUPPORTED)?;
    let ring_pages = usize::try_from(c.ring_pages).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let mut b = Sampler::builder()
        .inherit(c.flags & SAMPLER_INHERIT != 0)
        .kernel(c.flags & SAMPLER_KERNEL != 0)
        .sideband(c.flags & SAMPLER_SIDEBAND != 0)
        .source(source)
        .callchain(c.max_callchain)
        .user_stack(c.user_stack_size);
    if global {
        b = b.global();
    }
    for pid in pids {
        b = b.pid(pid);
    }
    if c.interval != 0 {
        b = b.interval(c.interval);
    }
    if c.affinity != 0 {
        let mask = c.affinity as u64;
        b = b.cpus((0..64).filter(|bit| mask & (1u64 << bit) != 0));
    }
    if ring_pages != 0 {
        b = b.ring_pages(ring_pages);
    }
    let sampler = b.build().map_err(|e| e.status())?;
    crate::fork::install();
    let object: Arc<Shared> = Arc::new(Mutex::new(CSampler {
        sampler,
        name: Vec::new(),
    }));
    let mut table = table();
    let handle = table.insert(Object::Sampler(object))?;
    if let Err(status) = probe::write_bytes(handle_out, &handle.to_ne_bytes()) {
        let _ = table.remove(handle);
        return Err(status);
    }
    Ok(())
}

/// `NtprofileCreateSampler` — create a sampler, disabled, as `*Config` says, and write its handle.
///
/// Statuses, in order: `STATUS_ACCESS_VIOLATION` (unwritable `SamplerHandle`, unreadable `Config` or process
/// ids), `STATUS_INVALID_PARAMETER` (NULL `Config`, a `Size` that is not `sizeof(NTPROFILE_SAMPLER_CONFIG)`, an
/// unknown flag, a non-zero reserved field, GLOBAL with process ids, NULL `ProcessIds` with a count),
/// `STATUS_DATATYPE_MISALIGNMENT` (a misaligned `Config` or `ProcessIds`), then the statuses of the Rust
/// builder (`SamplerBuilder::build`).
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileCreateSampler(
    sampler_handle: *mut Handle,
    config: *const SamplerConfig,
) -> i32 {
    boundary(|| create(sampler_handle as usize, config as usize))
}

/// `NtprofileEnableSampler` — start (`Enable` non-zero) or stop sampling.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileEnableSampler(sampler_handle: Handle, enable: u8) -> i32 {
    boundary(|| {
        with_sampler(sampler_handle, false, |c| {
            if enable != 0 {
                c.sampler.enable()
            } else {
                c.sampler.disable()
            }
            .map_err(|e| e.status())
        })
    })
}

/// A record in the header's layout, its pointers into the ring (or into `name`, for the NUL-terminated names).
fn c_record(record: &SampleRecord<'_>, name: &mut Vec<u8>) -> NtprofileRecord {
    let mut r = NtprofileRecord {
        type_: 0,
        flags: 0,
        pid: 0,
        tid: 0,
        parent_pid: 0,
        parent_tid: 0,
        cpu: 0,
        reserved: 0,
        time: 0,
        address: 0,
        length: 0,
        offset: 0,
        protection: 0,
        map_flags: 0,
        callchain_count: 0,
        stack_size: 0,
        callchain: std::ptr::null(),
        user_ip: 0,
        user_sp: 0,
        user_bp: 0,
        stack: std::ptr::null(),
        name: std::ptr::null(),
        name_length: 0,
        reserved2: 0,
    };
    let mut set_name = |r: &mut NtprofileRecord, bytes: &[u8]| {
        name.clear();
        name.extend_from_slice(bytes);
        name.push(0);
        r.name = name.as_ptr().cast();
        r.name_length = bytes.len() as u32;
    };
    match record {
        SampleRecord::Sample(s) => {
            r.type_ = record_type::SAMPLE;
            (r.pid, r.tid, r.time, r.cpu, r.address) = (s.pid, s.tid, s.time, s.cpu, s.ip);
            if s.kernel {
                r.flags |= RECORD_KERNEL;
            }
            if !s.callchain.is_empty() {
                r.callchain = s.callchain.as_ptr();
                r.callchain_count = s.callchain.len() as u32;
            }
            if let Some(regs) = s.regs {
                r.flags |= RECORD_HAS_REGS;
                (r.user_ip, r.user_sp, r.user_bp) = (regs.ip, regs.sp, regs.bp);
            }
            if !s.stack.is_empty() {
                r.stack = s.stack.as_ptr();
                r.stack_size = s.stack.len() as u32;
            }
        }
        SampleRecord::Mmap(m) => {
            r.type_ = record_type::MMAP;
            (r.pid, r.tid, r.time) = (m.pid, m.tid, m.time);
            (r.address, r.length, r.offset) = (m.addr, m.len, m.pgoff);
            (r.protection, r.map_flags) = (m.prot, m.flags);
            set_name(&mut r, m.filename);
        }
        SampleRecord::Comm {
            pid,
            tid,
            time,
            comm,
            exec,
        } => {
            r.type_ = record_type::COMM;
            (r.pid, r.tid, r.time) = (*pid, *tid, *time);
            if *exec {
                r.flags |= RECORD_EXEC;
            }
            set_name(&mut r, comm);
        }
        SampleRecord::Fork {
            pid,
            ppid,
            tid,
            ptid,
            time,
        }
        | SampleRecord::Exit {
            pid,
            ppid,
            tid,
            ptid,
            time,
        } => {
            r.type_ = if matches!(record, SampleRecord::Fork { .. }) {
                record_type::FORK
            } else {
                record_type::EXIT
            };
            (r.pid, r.tid, r.parent_pid, r.parent_tid, r.time) = (*pid, *tid, *ppid, *ptid, *time);
        }
        SampleRecord::Lost { lost, time } => {
            r.type_ = record_type::LOST;
            (r.length, r.time) = (*lost, *time);
        }
        SampleRecord::Throttle { time, throttled } => {
            r.type_ = if *throttled {
                record_type::THROTTLE
            } else {
                record_type::UNTHROTTLE
            };
            r.time = *time;
        }
    }
    r
}

/// `NtprofileReadSampler` — wait up to `TimeoutMilliseconds` (0: do not wait) for data, then drain every ring
/// once, calling `Routine(record, Context)` for each record on this thread (a NULL `Routine` drains and counts
/// only); `*RecordCount` (optional) receives the number of records. The pointers of a record live only during
/// its call. A call on the same sampler from inside its routine (other than `NtClose`) returns
/// `STATUS_INVALID_PARAMETER`.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileReadSampler(
    sampler_handle: Handle,
    timeout_milliseconds: u32,
    routine: RecordRoutine,
    context: *mut c_void,
    record_count: *mut u32,
) -> i32 {
    boundary(|| {
        if !record_count.is_null() {
            probe::probe_write(record_count as usize, 4)?;
        }
        let mut delivered = 0usize;
        with_sampler(sampler_handle, true, |c| {
            if timeout_milliseconds != 0 {
                c.sampler
                    .wait(Duration::from_millis(u64::from(timeout_milliseconds)))
                    .map_err(|e| e.status())?;
            }
            let CSampler { sampler, name } = c;
            let result = sampler.read(|record| {
                if let Some(f) = routine {
                    let rec = c_record(record, name);
                    f(&rec, context);
                }
            });
            delivered = result.map_err(|e| e.status())?;
            Ok(())
        })?;
        if !record_count.is_null() {
            let n = u32::try_from(delivered).unwrap_or(u32::MAX);
            probe::write_bytes(record_count as usize, &n.to_ne_bytes())?;
        }
        Ok(())
    })
}

/// `NtprofileQuerySamplerStatistics` — records, samples, lost, throttled and unthrottled so far, and whether
/// every target exited.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileQuerySamplerStatistics(
    sampler_handle: Handle,
    statistics: *mut SamplerStatistics,
) -> i32 {
    boundary(|| {
        let addr = statistics as usize;
        if addr == 0 {
            return Err(NtStatus::ACCESS_VIOLATION);
        }
        if addr % std::mem::align_of::<SamplerStatistics>() != 0 {
            return Err(NtStatus::DATATYPE_MISALIGNMENT);
        }
        let mut out = SamplerStatistics::default();
        with_sampler(sampler_handle, false, |c| {
            let s = c.sampler.stats();
            out = SamplerStatistics {
                records: s.records,
                samples: s.samples,
                lost: s.lost,
                throttled: s.throttled,
                unthrottled: s.unthrottled,
                targets_exited: u32::from(c.sampler.targets_exited()),
                reserved: 0,
            };
            Ok(())
        })?;
        let mut bytes = [0u8; std::mem::size_of::<SamplerStatistics>()];
        for (i, v) in [
            out.records,
            out.samples,
            out.lost,
            out.throttled,
            out.unthrottled,
        ]
        .into_iter()
        .enumerate()
        {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        bytes[40..44].copy_from_slice(&out.targets_exited.to_ne_bytes());
        probe::write_bytes(addr, &bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layouts the header asserts.
    #[test]
    fn layouts_match_the_header() {
        assert_eq!(size_of::<SamplerConfig>(), 56);
        assert_eq!(offset_of!(SamplerConfig, process_ids), 24);
        assert_eq!(offset_of!(SamplerConfig, affinity), 32);
        assert_eq!(offset_of!(SamplerConfig, max_callchain), 40);
        assert_eq!(offset_of!(SamplerConfig, user_stack_size), 44);
        assert_eq!(offset_of!(SamplerConfig, ring_pages), 48);
        assert_eq!(size_of::<NtprofileRecord>(), 136);
        assert_eq!(offset_of!(NtprofileRecord, time), 32);
        assert_eq!(offset_of!(NtprofileRecord, callchain), 80);
        assert_eq!(offset_of!(NtprofileRecord, stack), 112);
        assert_eq!(offset_of!(NtprofileRecord, name), 120);
        assert_eq!(offset_of!(NtprofileRecord, name_length), 128);
        assert_eq!(size_of::<SamplerStatistics>(), 48);
        assert_eq!(offset_of!(SamplerStatistics, targets_exited), 40);
    }
}
