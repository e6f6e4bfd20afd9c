//! The sampler extension's C exports: `NtprofileCreateSampler`, `NtprofileEnableSampler`,
//! `NtprofileReadSampler`, `NtprofileQuerySamplerStatistics` (and `NtClose`, in `exports`), over the Rust
//! [`Sampler`] (by its handle), with the `#[repr(C)]` records of `include/ntprofile.h` (declared, read and
//! written in `sampler_records`, re-exported here).
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
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::boundary::{CURRENT_PROCESS, CURRENT_THREAD, Handle, boundary, handle_arg};
use super::probe;
use super::sampler_records::{KNOWN_FLAGS, c_record, read_config};
pub use super::sampler_records::{
    NtprofileRecord, RECORD_EXEC, RECORD_HAS_REGS, RECORD_KERNEL, RecordRoutine, SAMPLER_GLOBAL,
    SAMPLER_INHERIT, SAMPLER_KERNEL, SAMPLER_SIDEBAND, SAMPLER_SWITCH, SamplerConfig,
    SamplerStatistics, record_type,
};
use crate::handles::{Object, table};
use crate::sampler::{Sampler, SamplerWaker, WaitEnd};
use crate::source::ProfileSource;
use crate::status::NtStatus;

/// The C API's sampler object: the sampler and the buffer names are copied into (NUL-terminated).
struct CSampler {
    sampler: Sampler,
    name: Vec<u8>,
}

/// The object behind a sampler handle: the sampler behind its lock, and its waker, which a read waits on
/// without the lock (so that the other calls go on meanwhile) and `NtClose` closes (ending every wait).
struct Shared {
    waker: SamplerWaker,
    inner: Mutex<CSampler>,
}

/// `NtClose` of a sampler handle (the object left the table): a read waiting on it ends at once with
/// `STATUS_INVALID_HANDLE`; a read delivering records finishes its pass, and the sampler closes when the last
/// call on it returns.
pub(super) fn closed(object: &Arc<dyn std::any::Any + Send + Sync>) {
    if let Some(shared) = object.downcast_ref::<Shared>() {
        shared.waker.close();
    }
}

/// The most process ids a configuration may name.
const MAX_PROCESS_IDS: u32 = 65_536;

thread_local! {
    /// The sampler objects whose record routine runs on this thread now (a call on one of them from inside its
    /// routine would wait for itself).
    static READING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The sampler object a handle names (the table's lock is released before returning, so that the caller may
/// call back into the API, `NtClose` included). A call from inside the same sampler's record routine on this
/// thread is refused (`STATUS_INVALID_PARAMETER`): it would wait for itself.
fn lookup(handle: Handle) -> Result<Arc<Shared>, NtStatus> {
    // The pseudo-handles name the current process and thread: objects of another type (as for NtStartProfile).
    let handle = handle_arg(handle);
    if matches!(handle, CURRENT_PROCESS | CURRENT_THREAD) {
        return Err(NtStatus::OBJECT_TYPE_MISMATCH);
    }
    let object = {
        let table = table();
        match table.get(handle)? {
            Object::Sampler(any) => any.clone(),
            Object::Profile(_) | Object::Process(_) => {
                return Err(NtStatus::OBJECT_TYPE_MISMATCH);
            }
        }
    };
    let shared = object
        .downcast::<Shared>()
        .map_err(|_| NtStatus::INTERNAL_ERROR)?;
    if READING.with(|r| r.borrow().contains(&key(&shared))) {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(shared)
}

fn key(shared: &Arc<Shared>) -> usize {
    Arc::as_ptr(shared) as usize
}

/// Run `f` on the sampler a handle names, under its lock.
fn with_sampler(
    handle: Handle,
    f: impl FnOnce(&mut CSampler) -> Result<(), NtStatus>,
) -> Result<(), NtStatus> {
    let shared = lookup(handle)?;
    let mut guard = shared.inner.lock().unwrap_or_else(PoisonError::into_inner);
    f(&mut guard)
}

/// Wait up to `timeout_ms` without the sampler's lock (after a look under it: data may be there already), then
/// drain every ring under the lock, running `routine` with this sampler marked as reading on this thread.
/// Returns the records delivered.
fn read_sampler(
    handle: Handle,
    timeout_ms: u32,
    routine: RecordRoutine,
    context: *mut c_void,
) -> Result<usize, NtStatus> {
    let shared = lookup(handle)?;
    if timeout_ms != 0 {
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            let pending = {
                let guard = shared.inner.lock().unwrap_or_else(PoisonError::into_inner);
                guard.sampler.prepare_wait().map_err(|e| e.status())?
            };
            let Some(waker) = pending else { break };
            let left = deadline.saturating_duration_since(Instant::now());
            match waker.wait(left) {
                WaitEnd::Closed => return Err(NtStatus::INVALID_HANDLE),
                // A per-thread sampler's wait ends every 10 ms: read if a ring holds anything (a fork record),
                // else wait on.
                WaitEnd::Capped if !left.is_zero() => {
                    let guard = shared.inner.lock().unwrap_or_else(PoisonError::into_inner);
                    if guard.sampler.holds_records() {
                        break;
                    }
                }
                _ => break,
            }
        }
    }
    if shared.waker.is_closed() {
        // Closed while this read waited (or was about to): the handle is gone.
        return Err(NtStatus::INVALID_HANDLE);
    }
    let mut guard = shared.inner.lock().unwrap_or_else(PoisonError::into_inner);
    let k = key(&shared);
    READING.with(|r| r.borrow_mut().push(k));
    let result = catch_unwind(AssertUnwindSafe(|| {
        let CSampler { sampler, name } = &mut *guard;
        sampler
            .read(|record| {
                if let Some(f) = routine {
                    let rec = c_record(record, name);
                    f(&rec, context);
                }
            })
            .map_err(|e| e.status())
    }));
    READING.with(|r| r.borrow_mut().retain(|&x| x != k));
    result.unwrap_or(Err(NtStatus::INTERNAL_ERROR))
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
        .context_switches(c.flags & SAMPLER_SWITCH != 0)
        .source(source)
        .callchain(c.max_callchain)
        .user_stack(c.user_stack_size);
    if global {
        b = b.global();
    }
    for pid in pids {
        b = b.pid(pid);
    }
    // Interval 0 is the source's current interval, in C as in Rust.
    b = b.interval(c.interval);
    if c.affinity != 0 {
        let mask = c.affinity as u64;
        b = b.cpus((0..64).filter(|bit| mask & (1u64 << bit) != 0));
    }
    if ring_pages != 0 {
        b = b.ring_pages(ring_pages);
    }
    let sampler = b.build().map_err(|e| e.status())?;
    crate::fork::install();
    let object: Arc<Shared> = Arc::new(Shared {
        waker: sampler.waker(),
        inner: Mutex::new(CSampler {
            sampler,
            name: Vec::new(),
        }),
    });
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
        with_sampler(sampler_handle, |c| {
            if enable != 0 {
                c.sampler.enable()
            } else {
                c.sampler.disable()
            }
            .map_err(|e| e.status())
        })
    })
}

/// `NtprofileReadSampler` — wait up to `TimeoutMilliseconds` (0: do not wait) for data, then drain every ring
/// once, calling `Routine(record, Context)` for each record on this thread (a NULL `Routine` drains and counts
/// only); `*RecordCount` (optional) receives the number of records. The pointers of a record live only during
/// its call. A call on the same sampler from inside its routine (other than `NtClose`) returns
/// `STATUS_INVALID_PARAMETER`. The wait holds no lock (the other calls answer meanwhile); `NtClose` ends it at
/// once with `STATUS_INVALID_HANDLE`, as does a `fork()` inside the routine in the child.
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
        let delivered = read_sampler(sampler_handle, timeout_milliseconds, routine, context)?;
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
        with_sampler(sampler_handle, |c| {
            let s = c.sampler.stats();
            out = SamplerStatistics {
                records: s.records,
                samples: s.samples,
                lost: s.lost,
                throttled: s.throttled,
                unthrottled: s.unthrottled,
                targets_exited: u32::from(c.sampler.targets_exited()),
                event_mode: c.sampler.event_usage().mode.code(),
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
        bytes[44..48].copy_from_slice(&out.event_mode.to_ne_bytes());
        probe::write_bytes(addr, &bytes)
    })
}
