//! The two events a per-thread stream opens for a thread besides its sampling event: the task-record event
//! (fork and exit records, into the sampling event's ring) and the inherited counter (what the thread and the
//! threads it creates ran, sampled or not).
//!
//! # Safety
//! Each descriptor perf-event2 hands over is taken into an `OwnedFd` once (`into_raw_fd` gives up its ownership).
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use nix::errno::Errno;
use perf_event::Builder;
use perf_event_open_sys::bindings;

use super::event::{EventParams, PerfEventSpec, SpecEvent, abi, errno_of};
use super::sys::Tid;

/// Open the counting companion of a per-thread stream's sampling event for thread `tid`: the same event, on any
/// processor, counting (no sample period, no ring), with `inherit` + `inherit_thread`, disabled. Its count takes in
/// every thread `tid` creates from the moment it exists, so the stream can tell how much of the event its threads
/// created later ran before their own sampling events were opened (a `read` gives the count: no `read_format`
/// bit).
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_inherited_counter(params: &EventParams, tid: Tid) -> Result<OwnedFd, Errno> {
    open_counter(params.spec, tid, params.exclude_kernel, true)
}

/// Open a counting event of `spec` for task `tid` on any processor, disabled, with `inherit` (and
/// `inherit_thread`: threads only, not new processes): the counter of a per-thread stream or sampler.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_counter(
    spec: PerfEventSpec,
    tid: Tid,
    exclude_kernel: bool,
    inherit_thread: bool,
) -> Result<OwnedFd, Errno> {
    let mut builder = Builder::new(SpecEvent(spec));
    builder
        .observe_pid(tid.0)
        .any_cpu()
        .exclude_kernel(exclude_kernel)
        .exclude_hv(true)
        .inherit(true)
        .inherit_thread(inherit_thread)
        .enabled(false);
    let attr = builder.attrs_mut();
    attr.read_format = 0;
    attr.sample_type = 0;
    let counter = builder.build().map_err(|e| errno_of(&e))?;
    let raw = counter.into_raw_fd();
    // SAFETY: `into_raw_fd` hands us sole ownership of a valid, open descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Open the task-record event of a per-thread stream's thread `tid`: a software `dummy` event on any processor,
/// disabled, which samples and counts nothing and only writes a `PERF_RECORD_FORK` for every thread or process
/// `tid` creates and a `PERF_RECORD_EXIT` when `tid` exits (`task`). It is redirected into the ring of the
/// thread's sampling event, so that a record of it the ring could not hold counts in its own lost count, not in
/// the sampling event's (which then counts lost samples only).
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_task_records(tid: Tid) -> Result<OwnedFd, Errno> {
    let dummy = PerfEventSpec {
        type_: abi::TYPE_SOFTWARE,
        config: u64::from(bindings::PERF_COUNT_SW_DUMMY),
        config1: 0,
        config2: 0,
        name: "dummy",
    };
    let mut builder = Builder::new(SpecEvent(dummy));
    builder
        .observe_pid(tid.0)
        .any_cpu()
        .exclude_kernel(true)
        .exclude_hv(true)
        .task(true)
        .enabled(false);
    let counter = builder.build().map_err(|e| errno_of(&e))?;
    let raw = counter.into_raw_fd();
    // SAFETY: `into_raw_fd` hands us sole ownership of a valid, open descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
