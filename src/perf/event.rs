//! Opening perf events (through perf-event2's `Builder`) and the ioctls perf-event2 does not wrap; the perf
//! event description ([`PerfEventSpec`]) the layers above name their sources with.
//!
//! Every kernel number (event types and configs, ioctl requests) comes from `perf-event-open-sys2`'s bindings of
//! the kernel's `<linux/perf_event.h>`; every error is the kernel's errno ([`Errno`]), turned into an NTSTATUS
//! only by the engine.
//!
//! # Safety
//! The ioctls take a file descriptor owned by the caller (borrowed for the call) and, for
//! `PERF_EVENT_IOC_PERIOD`, a pointer to a `u64` on our stack that lives across the call.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};

use nix::errno::Errno;
use perf_event::events::Event;
use perf_event::{Builder, SampleFlag};
use perf_event_open_sys::bindings;

use super::sys::Tid;

/// `perf_event_attr.type` and `config` values the sources are built from (`<linux/perf_event.h>`).
pub mod abi {
    use perf_event_open_sys::bindings as b;

    /// `PERF_TYPE_HARDWARE`: generalized hardware events.
    pub const TYPE_HARDWARE: u32 = b::PERF_TYPE_HARDWARE;
    /// `PERF_TYPE_SOFTWARE`: kernel software events.
    pub const TYPE_SOFTWARE: u32 = b::PERF_TYPE_SOFTWARE;
    /// `PERF_TYPE_TRACEPOINT`.
    pub const TYPE_TRACEPOINT: u32 = b::PERF_TYPE_TRACEPOINT;
    /// `PERF_TYPE_HW_CACHE`: generalized cache events.
    pub const TYPE_HW_CACHE: u32 = b::PERF_TYPE_HW_CACHE;

    /// `PERF_COUNT_HW_CPU_CYCLES`.
    pub const HW_CPU_CYCLES: u64 = b::PERF_COUNT_HW_CPU_CYCLES as u64;
    /// `PERF_COUNT_HW_INSTRUCTIONS`.
    pub const HW_INSTRUCTIONS: u64 = b::PERF_COUNT_HW_INSTRUCTIONS as u64;
    /// `PERF_COUNT_HW_CACHE_REFERENCES`.
    pub const HW_CACHE_REFERENCES: u64 = b::PERF_COUNT_HW_CACHE_REFERENCES as u64;
    /// `PERF_COUNT_HW_CACHE_MISSES`.
    pub const HW_CACHE_MISSES: u64 = b::PERF_COUNT_HW_CACHE_MISSES as u64;
    /// `PERF_COUNT_HW_BRANCH_INSTRUCTIONS`.
    pub const HW_BRANCH_INSTRUCTIONS: u64 = b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS as u64;
    /// `PERF_COUNT_HW_BRANCH_MISSES`.
    pub const HW_BRANCH_MISSES: u64 = b::PERF_COUNT_HW_BRANCH_MISSES as u64;
    /// `PERF_COUNT_HW_STALLED_CYCLES_FRONTEND`.
    pub const HW_STALLED_CYCLES_FRONTEND: u64 = b::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND as u64;
    /// `PERF_COUNT_HW_STALLED_CYCLES_BACKEND`.
    pub const HW_STALLED_CYCLES_BACKEND: u64 = b::PERF_COUNT_HW_STALLED_CYCLES_BACKEND as u64;
    /// `PERF_COUNT_HW_REF_CPU_CYCLES`.
    pub const HW_REF_CPU_CYCLES: u64 = b::PERF_COUNT_HW_REF_CPU_CYCLES as u64;

    /// `PERF_COUNT_SW_CPU_CLOCK`.
    pub const SW_CPU_CLOCK: u64 = b::PERF_COUNT_SW_CPU_CLOCK as u64;
    /// `PERF_COUNT_SW_TASK_CLOCK`.
    pub const SW_TASK_CLOCK: u64 = b::PERF_COUNT_SW_TASK_CLOCK as u64;
    /// `PERF_COUNT_SW_PAGE_FAULTS`.
    pub const SW_PAGE_FAULTS: u64 = b::PERF_COUNT_SW_PAGE_FAULTS as u64;
    /// `PERF_COUNT_SW_CONTEXT_SWITCHES`.
    pub const SW_CONTEXT_SWITCHES: u64 = b::PERF_COUNT_SW_CONTEXT_SWITCHES as u64;
    /// `PERF_COUNT_SW_CPU_MIGRATIONS`.
    pub const SW_CPU_MIGRATIONS: u64 = b::PERF_COUNT_SW_CPU_MIGRATIONS as u64;
    /// `PERF_COUNT_SW_PAGE_FAULTS_MIN`.
    pub const SW_PAGE_FAULTS_MIN: u64 = b::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64;
    /// `PERF_COUNT_SW_PAGE_FAULTS_MAJ`.
    pub const SW_PAGE_FAULTS_MAJ: u64 = b::PERF_COUNT_SW_PAGE_FAULTS_MAJ as u64;
    /// `PERF_COUNT_SW_ALIGNMENT_FAULTS`.
    pub const SW_ALIGNMENT_FAULTS: u64 = b::PERF_COUNT_SW_ALIGNMENT_FAULTS as u64;
    /// `PERF_COUNT_SW_DUMMY`: counts nothing, never samples; carries side-band records.
    pub const SW_DUMMY: u64 = b::PERF_COUNT_SW_DUMMY as u64;

    /// `PERF_COUNT_HW_CACHE_L1D`.
    pub const CACHE_L1D: u64 = b::PERF_COUNT_HW_CACHE_L1D as u64;
    /// `PERF_COUNT_HW_CACHE_L1I`.
    pub const CACHE_L1I: u64 = b::PERF_COUNT_HW_CACHE_L1I as u64;
    /// `PERF_COUNT_HW_CACHE_OP_READ`.
    pub const CACHE_OP_READ: u64 = b::PERF_COUNT_HW_CACHE_OP_READ as u64;
    /// `PERF_COUNT_HW_CACHE_RESULT_ACCESS`.
    pub const CACHE_RESULT_ACCESS: u64 = b::PERF_COUNT_HW_CACHE_RESULT_ACCESS as u64;
    /// `PERF_COUNT_HW_CACHE_RESULT_MISS`.
    pub const CACHE_RESULT_MISS: u64 = b::PERF_COUNT_HW_CACHE_RESULT_MISS as u64;

    /// The `config` of a `PERF_TYPE_HW_CACHE` event: `cache | op << 8 | result << 16` (`perf_event_open(2)`).
    pub const fn hw_cache_config(cache: u64, op: u64, result: u64) -> u64 {
        cache | (op << 8) | (result << 16)
    }
}

/// A perf event: `perf_event_attr` `type`, `config`, `config1`, `config2`, and the perf tool's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PerfEventSpec {
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
    /// `perf_event_attr.config2`.
    pub config2: u64,
    /// The perf tool's name for the event (`cpu-clock`, `cycles`, `L1-dcache-load-misses`, ...).
    pub name: &'static str,
}

impl PerfEventSpec {
    /// True for an event counted by a hardware PMU (`PERF_TYPE_HARDWARE` or `PERF_TYPE_HW_CACHE`).
    pub fn is_generic_hardware(&self) -> bool {
        self.type_ == abi::TYPE_HARDWARE || self.type_ == abi::TYPE_HW_CACHE
    }

    /// True for a kernel software event or a tracepoint (never a PMU).
    pub fn is_software_or_tracepoint(&self) -> bool {
        self.type_ == abi::TYPE_SOFTWARE || self.type_ == abi::TYPE_TRACEPOINT
    }

    /// True for an event whose samples the kernel takes at a kernel address, in the middle of its own code, even
    /// for a task that runs user code: `context-switches` and `cpu-migrations` (taken in the scheduler) and
    /// every tracepoint. With `exclude_kernel` set such an event never produces a sample; the timers, the page
    /// and alignment faults and the hardware events are taken at the interrupted user address.
    pub fn sampled_in_kernel(&self) -> bool {
        (self.type_ == abi::TYPE_SOFTWARE
            && matches!(
                self.config,
                abi::SW_CONTEXT_SWITCHES | abi::SW_CPU_MIGRATIONS
            ))
            || self.type_ == abi::TYPE_TRACEPOINT
    }
}

/// The user registers a sample carries: the frame pointer, the stack pointer and the instruction pointer, in
/// the order of their bits in the mask (ascending), which is the order the kernel writes them in.
#[cfg(target_arch = "x86_64")]
pub const USER_REGS_MASK: u64 = 1 << bindings::PERF_REG_X86_BP
    | 1 << bindings::PERF_REG_X86_SP
    | 1 << bindings::PERF_REG_X86_IP;
/// The user registers a sample carries (`x29`, `sp`, `pc`), in the order the kernel writes them.
#[cfg(target_arch = "aarch64")]
pub const USER_REGS_MASK: u64 = 1 << bindings::PERF_REG_ARM64_X29
    | 1 << bindings::PERF_REG_ARM64_SP
    | 1 << bindings::PERF_REG_ARM64_PC;
/// No user-register dump on this architecture (a sampler with a user stack is not supported here).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const USER_REGS_MASK: u64 = 0;

/// The user registers an event [`sampled_in_kernel`](PerfEventSpec::sampled_in_kernel) records: the sampler's
/// set (frame pointer, stack pointer, ip; the ip is the last, the highest bit), 0 where there is no register
/// map (such an event then keeps its kernel address). Every event of this library uses the same set: the
/// kernel works out a software event's user registers once per occurrence for every event that takes it, and
/// an event asking for another set would get records of the wrong size.
pub const USER_IP_MASK: u64 = USER_REGS_MASK;

/// The errno of an error perf-event2 returned (EINVAL when it carries none).
pub(super) fn errno_of(e: &std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::EINVAL, Errno::from_raw)
}

/// The event of a source, as a perf-event2 `Event`: sets `type` and the three config words.
#[derive(Clone, Copy, Debug)]
pub(super) struct SpecEvent(pub(super) PerfEventSpec);

impl Event for SpecEvent {
    fn update_attrs(self, attr: &mut perf_event_open_sys::bindings::perf_event_attr) {
        attr.type_ = self.0.type_;
        attr.config = self.0.config;
        attr.config1 = self.0.config1;
        attr.config2 = self.0.config2;
    }
}

/// The highest `precise_ip` (a two-bit field of `perf_event_attr`: 3 = zero skid required).
pub const MAX_PRECISE_IP: u8 = 3;

/// What a stream's events record and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventParams {
    /// The event.
    pub spec: PerfEventSpec,
    /// Sample period (ns for timers, events otherwise).
    pub period: u64,
    /// `exclude_kernel`: true for user-address ranges.
    pub exclude_kernel: bool,
    /// Add `PERF_SAMPLE_TID` to each sample (needed only where a stream must tell processes apart).
    pub sample_tid: bool,
    /// Add `PERF_SAMPLE_CPU` to each sample: the events of a per-thread stream run on any processor, and the
    /// consumer applies each profile's affinity from this field.
    pub sample_cpu: bool,
    /// `inherit` + `inherit_thread`: threads created later by an observed thread are observed too.
    pub inherit_threads: bool,
    /// Wake-up watermark in bytes.
    pub wakeup_watermark: usize,
    /// `precise_ip` (0 = arbitrary skid … 3 = zero skid required); see [`open_precise_on`].
    pub precise_ip: u8,
    /// `read_format = PERF_FORMAT_LOST` (Linux 6.0 and later): a `read` of the event tells how many records it
    /// and its inherited copies could not write into their ring, even those no Lost record reported.
    pub read_lost: bool,
    /// `PERF_SAMPLE_REGS_USER` with [`USER_IP_MASK`], after the IP (and TID): for an event
    /// [`sampled_in_kernel`](PerfEventSpec::sampled_in_kernel), the user address where the thread entered the
    /// kernel, which the decoder then reports as the sample's ip.
    pub user_ip: bool,
}

/// Open one sampling event, disabled, for thread `tid` (or [`Tid::ALL_TASKS`]: every task) on CPU `cpu`.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open(params: &EventParams, tid: Tid, cpu: usize) -> Result<OwnedFd, Errno> {
    open_on(params, tid, Some(cpu))
}

fn open_on(params: &EventParams, tid: Tid, cpu: Option<usize>) -> Result<OwnedFd, Errno> {
    let mut builder = Builder::new(SpecEvent(params.spec));
    if tid == Tid::ALL_TASKS {
        builder.any_pid();
    } else {
        builder.observe_pid(tid.0);
    }
    let mut sample = SampleFlag::IP;
    if params.sample_tid {
        sample |= SampleFlag::TID;
    }
    if params.sample_cpu {
        sample |= SampleFlag::CPU;
    }
    if params.user_ip {
        sample |= SampleFlag::REGS_USER;
        builder.sample_regs_user(USER_IP_MASK);
    }
    match cpu {
        Some(cpu) => builder.one_cpu(cpu),
        None => builder.any_cpu(),
    };
    builder
        .sample_period(params.period)
        .sample(sample)
        .exclude_kernel(params.exclude_kernel)
        .exclude_hv(true)
        .inherit(params.inherit_threads)
        .inherit_thread(params.inherit_threads)
        .wakeup_watermark(params.wakeup_watermark)
        .enabled(false);
    let attr = builder.attrs_mut();
    attr.set_precise_ip(u64::from(params.precise_ip.min(MAX_PRECISE_IP)));
    if params.read_lost {
        attr.read_format = u64::from(bindings::PERF_FORMAT_LOST);
    }
    let counter = builder.build().map_err(|e| errno_of(&e))?;
    let raw = counter.into_raw_fd();
    // SAFETY: `into_raw_fd` hands us sole ownership of a valid, open descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Open the first event of a hardware stream with the most precise `precise_ip` the PMU accepts: try 3, 2, 1,
/// then 0, stepping down on EINVAL/EOPNOTSUPP, and record the level that worked in `params` for the stream's
/// other events. Software events always use 0.
///
/// # Errors
/// The errno of the last `perf_event_open(2)` tried.
/// `cpu`: `None` for any CPU.
///
pub fn open_precise_on(
    params: &mut EventParams,
    tid: Tid,
    cpu: Option<usize>,
) -> Result<OwnedFd, Errno> {
    step_down_precise(params, |p| open_on(p, tid, cpu))
}

/// [`open`] on CPU `cpu`, or on any CPU (`None`).
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_on_cpu(params: &EventParams, tid: Tid, cpu: Option<usize>) -> Result<OwnedFd, Errno> {
    open_on(params, tid, cpu)
}

/// The step-down of `open_precise`, apart from the system call (so that it can be tested without a PMU).
fn step_down_precise<T>(
    params: &mut EventParams,
    mut try_open: impl FnMut(&EventParams) -> Result<T, Errno>,
) -> Result<T, Errno> {
    loop {
        match try_open(params) {
            Err(Errno::EINVAL | Errno::EOPNOTSUPP) if params.precise_ip > 0 => {
                params.precise_ip -= 1
            }
            other => return other,
        }
    }
}

/// Probe whether `spec` can be sampled here: open a sampling event on the calling thread (any CPU), disabled,
/// and close it at once. An event [`sampled_in_kernel`](PerfEventSpec::sampled_in_kernel) is probed as it is
/// opened for a user-space profile: with kernel samples and the user ip (so that EACCES or EPERM means that
/// this caller may not sample the kernel).
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn probe(spec: &PerfEventSpec, period: u64) -> Result<(), Errno> {
    let in_kernel = spec.sampled_in_kernel();
    let mut builder = probe_builder(spec, period, 0, !in_kernel);
    if in_kernel && USER_IP_MASK != 0 {
        builder
            .sample(SampleFlag::IP | SampleFlag::REGS_USER)
            .sample_regs_user(USER_IP_MASK);
    }
    builder.build().map(drop).map_err(|e| errno_of(&e))
}

/// Probe whether the caller may sample process (or thread) `pid` with `spec`: the kernel's own permission check
/// (`ptrace` read access and `perf_event_paranoid`), by opening a disabled event and closing it.
///
/// # Errors
/// The errno of `perf_event_open(2)`: ESRCH (no such process), EACCES/EPERM (not allowed).
pub fn probe_pid(spec: &PerfEventSpec, period: u64, pid: i32) -> Result<(), Errno> {
    probe_builder(spec, period, pid, true)
        .build()
        .map(drop)
        .map_err(|e| errno_of(&e))
}

/// A disabled sampling event of `spec` on `pid` (0: the calling thread), any CPU, IP only.
fn probe_builder(
    spec: &PerfEventSpec,
    period: u64,
    pid: i32,
    exclude_kernel: bool,
) -> Builder<'static> {
    let mut builder = Builder::new(SpecEvent(*spec));
    if pid == 0 {
        builder.observe_self();
    } else {
        builder.observe_pid(pid);
    }
    builder
        .any_cpu()
        .sample_period(period)
        .sample(SampleFlag::IP)
        .exclude_kernel(exclude_kernel)
        .exclude_hv(true)
        .enabled(false);
    builder
}

/// An ioctl request of `<linux/perf_event.h>`, as `ioctl(2)` takes it.
fn request(ioctl: bindings::perf_event_ioctls) -> libc::c_ulong {
    libc::c_ulong::from(ioctl)
}

fn ioctl_arg(
    fd: BorrowedFd<'_>,
    ioctl: bindings::perf_event_ioctls,
    arg: libc::c_ulong,
) -> Result<(), Errno> {
    // SAFETY: `fd` is a live descriptor borrowed for the call; these requests take an integer argument.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request(ioctl), arg) };
    Errno::result(rc).map(drop)
}

/// `PERF_EVENT_IOC_ENABLE` (also enables the event's inherited children).
pub fn enable(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    ioctl_arg(fd, bindings::ENABLE, 0)
}

/// `PERF_EVENT_IOC_DISABLE` (also disables the event's inherited children).
pub fn disable(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    ioctl_arg(fd, bindings::DISABLE, 0)
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: send `fd`'s records into `target`'s ring (same CPU only; for events on any
/// CPU, same thread only).
pub fn set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), Errno> {
    ioctl_arg(
        fd,
        bindings::SET_OUTPUT,
        target.as_raw_fd() as libc::c_ulong,
    )
}

/// `PERF_EVENT_IOC_PERIOD` with the new period passed **by pointer** (by value gives EFAULT). Applies to the
/// event's inherited children too.
pub fn set_period(fd: BorrowedFd<'_>, period: u64) -> Result<(), Errno> {
    let value: u64 = period;
    // SAFETY: the kernel reads one u64 through the pointer during the call; `value` outlives it.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            request(bindings::PERIOD),
            &value as *const u64,
        )
    };
    Errno::result(rc).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(precise_ip: u8) -> EventParams {
        EventParams {
            spec: PerfEventSpec {
                type_: abi::TYPE_HARDWARE,
                config: abi::HW_CPU_CYCLES,
                config1: 0,
                config2: 0,
                name: "cpu-cycles",
            },
            period: 65_536,
            exclude_kernel: true,
            sample_tid: false,
            sample_cpu: false,
            inherit_threads: true,
            wakeup_watermark: 4096,
            precise_ip,
            user_ip: false,
            read_lost: false,
        }
    }

    #[test]
    fn precise_ip_steps_down_to_what_the_pmu_accepts() {
        // A PMU that takes at most precise_ip 1 (EOPNOTSUPP above, as x86 without PEBS answers).
        let mut p = params(3);
        let mut tried = Vec::new();
        let r = step_down_precise(&mut p, |q| {
            tried.push(q.precise_ip);
            if q.precise_ip > 1 {
                Err(Errno::EOPNOTSUPP)
            } else {
                Ok(q.precise_ip)
            }
        });
        assert_eq!(r, Ok(1));
        assert_eq!(tried, [3, 2, 1]);
        assert_eq!(
            p.precise_ip, 1,
            "the stream's other events use the level that worked"
        );
    }

    #[test]
    fn other_errors_and_level_zero_are_final() {
        // No PMU at all: ENOENT at the first try, no step-down.
        let mut p = params(3);
        let mut n = 0;
        assert_eq!(
            step_down_precise(&mut p, |_| -> Result<(), Errno> {
                n += 1;
                Err(Errno::ENOENT)
            }),
            Err(Errno::ENOENT)
        );
        assert_eq!(n, 1);
        // EINVAL at every level: the answer at level 0 is final.
        let mut p = params(2);
        assert_eq!(
            step_down_precise(&mut p, |_| -> Result<(), Errno> { Err(Errno::EINVAL) }),
            Err(Errno::EINVAL)
        );
        assert_eq!(p.precise_ip, 0);
    }
}
