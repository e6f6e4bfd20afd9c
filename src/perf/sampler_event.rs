//! The sampler extension's perf events: what they record ([`SamplerEventParams`]), opening one (samples with
//! tid, time, cpu, optional call chain, user registers and user stack; side-band records of mappings,
//! comm/exec, fork and exit), and the sample layout that follows ([`SampleFormat`]).
//!
//! Every layout and flag comes from `perf-event-open-sys2`'s bindings of `<linux/perf_event.h>`.
//!
//! # Safety
//! One `unsafe` block: taking ownership of the descriptor perf-event2's `Builder` opened.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use nix::errno::Errno;
use perf_event::Builder;
use perf_event_open_sys::bindings as b;

use super::event::{PerfEventSpec, SpecEvent, errno_of};
use super::sys::Tid;

/// What a sampler's events record and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerEventParams {
    /// The event.
    pub spec: PerfEventSpec,
    /// Sample period (ns for timers, events otherwise).
    pub period: u64,
    /// `exclude_kernel`.
    pub exclude_kernel: bool,
    /// `exclude_callchain_kernel` (with a call chain): only the user part of the chain.
    pub exclude_callchain_kernel: bool,
    /// `inherit`: tasks created by an observed task are observed too.
    pub inherit: bool,
    /// `inherit_thread`: only threads (`CLONE_THREAD`) inherit, not new processes.
    pub inherit_thread: bool,
    /// Side-band records: `mmap`, `mmap2`, `comm`, `comm_exec`, `task`.
    pub sideband: bool,
    /// `task` alone (fork and exit records), without the rest of the side-band: a sampler that follows a
    /// process tree from the fork records itself (`cpu-filtered`).
    pub task: bool,
    /// `PERF_SAMPLE_CALLCHAIN` with `sample_max_stack` frames (0: no call chain).
    pub max_stack: u16,
    /// `PERF_SAMPLE_STACK_USER` of this many bytes (a multiple of 8; 0: none), which needs `regs`.
    pub stack_user: u32,
    /// `PERF_SAMPLE_REGS_USER` with [`USER_REGS_MASK`] (ip, sp, frame pointer).
    pub regs: bool,
    /// The event is sampled in the kernel ([`PerfEventSpec::sampled_in_kernel`]) for a user-space sampler:
    /// each sample is reported at the user ip of its registers (where the thread entered the kernel).
    pub user_entry: bool,
    /// Wake-up watermark in bytes.
    pub wakeup_watermark: usize,
    /// `context_switch`: `PERF_RECORD_SWITCH` records at each switch of an observed task.
    pub context_switch: bool,
    /// `read_format = PERF_FORMAT_LOST` (Linux 6.0 and later): a `read` of the event tells how many records the
    /// kernel could not write into its ring ([`sys::read_count_and_lost`](super::sys::read_count_and_lost)).
    pub read_lost: bool,
}

/// The user registers a sample carries (defined with the other events' attributes, in `event`).
pub use super::event::USER_REGS_MASK;

/// The largest user-stack copy the kernel accepts: below `u16::MAX` and a multiple of 8.
pub const MAX_STACK_USER: u32 = 65_528;

/// The largest record the kernel writes: a header's size is a `u16`, records are 8-byte aligned (the kernel
/// shortens a user-stack copy so that its sample fits).
pub const MAX_RECORD_BYTES: usize = 65_528;

/// A `PERF_RECORD_LOST` with its `sample_id_all` trailer: header, id, lost, pid/tid, time, cpu.
pub const LOST_RECORD_BYTES: usize = 48;

/// The call-chain context markers the kernel may add to `sample_max_stack` entries
/// (`kernel.perf_event_max_contexts_per_stack`'s default).
const MAX_CONTEXTS: usize = 8;

/// The largest sample events opened with `params` can write, in bytes: header, ip, pid/tid, time, cpu, then
/// the call chain (its length and entries with their context markers) and the user registers and stack copy
/// (abi, three registers, size, the copy, dyn_size), at most [`MAX_RECORD_BYTES`].
pub fn max_sample_bytes(params: &SamplerEventParams) -> usize {
    let mut bytes = 5 * 8;
    if params.max_stack > 0 {
        bytes += 8 + 8 * (usize::from(params.max_stack) + MAX_CONTEXTS);
    }
    if params.stack_user > 0 {
        bytes += 4 * 8 + 8 + params.stack_user as usize + 8;
    }
    bytes.min(MAX_RECORD_BYTES)
}

/// The fewest bytes a ring of events opened with `params` must hold: two of the largest samples (one being
/// read while the next is written) and the kernel's Lost record, so that a drop is always followed by a record
/// that says so.
pub fn min_ring_bytes(params: &SamplerEventParams) -> usize {
    2 * max_sample_bytes(params) + LOST_RECORD_BYTES
}

/// The sample layout of events opened with `params`: what follows the fixed fields of a sample.
pub fn format_of(params: &SamplerEventParams) -> SampleFormat {
    SampleFormat {
        callchain: params.max_stack > 0,
        regs: params.regs || params.stack_user > 0,
        user_stack: params.stack_user > 0,
        user_entry: params.user_entry,
    }
}

impl SamplerEventParams {
    /// The same event as a side-band carrier only: the software dummy event (it counts nothing and never
    /// samples) with the same side-band flags and record layout, for the CPUs whose samples are not wanted but
    /// whose mappings, execs, forks and exits are.
    pub fn sideband_only(&self) -> SamplerEventParams {
        SamplerEventParams {
            spec: PerfEventSpec {
                type_: super::event::abi::TYPE_SOFTWARE,
                config: super::event::abi::SW_DUMMY,
                config1: 0,
                config2: 0,
                name: "dummy",
            },
            context_switch: false,
            ..*self
        }
    }
}

/// Open one sampler event, disabled, for task `tid` (or [`Tid::ALL_TASKS`]) on CPU `cpu` (`None`: on any
/// CPU, for one task, the per-thread layout): `sample_type`
/// IP|TID|TIME|CPU (+CALLCHAIN, +REGS_USER|STACK_USER), `sample_id_all`, the monotonic clock, and the
/// side-band flags of `params`.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_sampler_event(
    params: &SamplerEventParams,
    tid: Tid,
    cpu: Option<usize>,
) -> Result<OwnedFd, Errno> {
    let mut builder = Builder::new(SpecEvent(params.spec));
    if tid == Tid::ALL_TASKS {
        builder.any_pid();
    } else {
        builder.observe_pid(tid.0);
    }
    match cpu {
        Some(cpu) => builder.one_cpu(cpu),
        None => builder.any_cpu(),
    };
    open_with(builder, params)
}

/// Open one sampler event, disabled, for the tasks of a cgroup on CPU `cpu`: `cgroup` is the cgroup's
/// directory in the cgroup v2 file system, passed as the pid with `PERF_FLAG_PID_CGROUP`, so that the kernel
/// counts (and writes the side-band records of) only the tasks of that cgroup and of the cgroups below it.
/// The records are those of [`open_sampler_event`]; nothing is inherited (the event is processor-wide).
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_sampler_cgroup_event(
    params: &SamplerEventParams,
    cgroup: &std::fs::File,
    cpu: usize,
) -> Result<OwnedFd, Errno> {
    let mut builder = Builder::new(SpecEvent(params.spec));
    builder.observe_cgroup(cgroup).one_cpu(cpu);
    let params = SamplerEventParams {
        inherit: false,
        inherit_thread: false,
        ..*params
    };
    open_with(builder, &params)
}

/// The attributes every sampler event shares, on a builder whose target (task, cgroup) and CPU are set.
fn open_with(mut builder: Builder<'_>, params: &SamplerEventParams) -> Result<OwnedFd, Errno> {
    builder
        .sample_period(params.period)
        .exclude_kernel(params.exclude_kernel)
        .exclude_hv(true)
        .inherit(params.inherit)
        .inherit_thread(params.inherit && params.inherit_thread)
        .wakeup_watermark(params.wakeup_watermark)
        .enabled(false);
    let attr = builder.attrs_mut();
    let mut sample_type = u64::from(b::PERF_SAMPLE_IP)
        | u64::from(b::PERF_SAMPLE_TID)
        | u64::from(b::PERF_SAMPLE_TIME)
        | u64::from(b::PERF_SAMPLE_CPU);
    if params.max_stack > 0 {
        sample_type |= u64::from(b::PERF_SAMPLE_CALLCHAIN);
        attr.sample_max_stack = params.max_stack;
        attr.set_exclude_callchain_kernel(u64::from(params.exclude_callchain_kernel));
    }
    if params.regs || params.stack_user > 0 {
        sample_type |= u64::from(b::PERF_SAMPLE_REGS_USER);
        attr.sample_regs_user = USER_REGS_MASK;
    }
    if params.stack_user > 0 {
        sample_type |= u64::from(b::PERF_SAMPLE_STACK_USER);
        attr.sample_stack_user = params.stack_user;
    }
    attr.sample_type = sample_type;
    attr.read_format = if params.read_lost {
        u64::from(b::PERF_FORMAT_LOST)
    } else {
        0
    };
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    let sideband = u64::from(params.sideband);
    attr.set_mmap(sideband);
    attr.set_mmap2(sideband);
    attr.set_comm(sideband);
    attr.set_comm_exec(sideband);
    attr.set_task(sideband | u64::from(params.task));
    attr.set_context_switch(u64::from(params.context_switch));
    let counter = builder.build().map_err(|e| errno_of(&e))?;
    let raw = counter.into_raw_fd();
    // SAFETY: `into_raw_fd` hands us sole ownership of a valid, open descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Open the counting companion of a per-thread sampler's event for thread `tid`: the same event on any CPU,
/// counting (no sample period, no ring), disabled, with `inherit` (and `inherit_thread` when the sampler follows
/// threads only). Its count takes in every task `tid` creates from the moment that task exists, so the sampler
/// can tell how much of the event its tasks created later ran before their own events were opened.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_sampler_counter(params: &SamplerEventParams, tid: Tid) -> Result<OwnedFd, Errno> {
    super::thread_events::open_counter(
        params.spec,
        tid,
        params.exclude_kernel,
        params.inherit_thread,
    )
}

/// What follows the fixed fields (ip, pid/tid, time, cpu) of a sampler's sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleFormat {
    /// `PERF_SAMPLE_CALLCHAIN`: `nr`, then `nr` entries.
    pub callchain: bool,
    /// `PERF_SAMPLE_REGS_USER` with [`USER_REGS_MASK`]: `abi`, then three registers unless `abi` is NONE.
    pub regs: bool,
    /// `PERF_SAMPLE_STACK_USER` (`size`, `size` bytes, then `dyn_size` unless `size` is 0), after the registers.
    pub user_stack: bool,
    /// Report a sample that has user registers at their ip, as a user-space sample (the event is sampled in
    /// the kernel; the user ip is where the thread entered it).
    pub user_entry: bool,
}
