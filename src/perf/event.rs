//! Opening perf events (through perf-event2's `Builder`) and the ioctls perf-event2 does not wrap.
//!
//! # Safety
//! The ioctls take a file descriptor owned by the caller (borrowed for the call) and, for
//! `PERF_EVENT_IOC_PERIOD`, a pointer to a `u64` on our stack that lives across the call.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};

use perf_event::events::Event;
use perf_event::{Builder, SampleFlag};

use crate::source::PerfEventSpec;

/// `PERF_EVENT_IOC_ENABLE`, `_IO('$', 0)`.
const IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_EVENT_IOC_DISABLE`, `_IO('$', 1)`.
const IOC_DISABLE: libc::c_ulong = 0x2401;
/// `PERF_EVENT_IOC_PERIOD`, `_IOW('$', 4, __u64)`: takes a **pointer** to the new period.
const IOC_PERIOD: libc::c_ulong = 0x4008_2404;
/// `PERF_EVENT_IOC_SET_OUTPUT`, `_IO('$', 5)`: takes the target descriptor by value.
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// The event of a source, as a perf-event2 `Event`: sets `type` and the three config words.
#[derive(Clone, Copy, Debug)]
struct SpecEvent(PerfEventSpec);

impl Event for SpecEvent {
    fn update_attrs(self, attr: &mut perf_event_open_sys::bindings::perf_event_attr) {
        attr.type_ = self.0.type_;
        attr.config = self.0.config;
        attr.config1 = self.0.config1;
        attr.config2 = self.0.config2;
    }
}

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
    /// `inherit` + `inherit_thread`: threads created later by an observed thread are observed too.
    pub inherit_threads: bool,
    /// Wake-up watermark in bytes.
    pub wakeup_watermark: usize,
    /// `precise_ip` (0 = arbitrary skid … 3 = zero skid required); see [`open_precise`].
    pub precise_ip: u8,
}

/// Open one sampling event, disabled, for thread `tid` (or `-1`: every task) on CPU `cpu`.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open(params: &EventParams, tid: i32, cpu: usize) -> Result<OwnedFd, i32> {
    let mut builder = Builder::new(SpecEvent(params.spec));
    if tid < 0 {
        builder.any_pid();
    } else {
        builder.observe_pid(tid);
    }
    let mut sample = SampleFlag::IP;
    if params.sample_tid {
        sample |= SampleFlag::TID;
    }
    builder
        .one_cpu(cpu)
        .sample_period(params.period)
        .sample(sample)
        .exclude_kernel(params.exclude_kernel)
        .exclude_hv(true)
        .inherit(params.inherit_threads)
        .inherit_thread(params.inherit_threads)
        .wakeup_watermark(params.wakeup_watermark)
        .enabled(false);
    builder
        .attrs_mut()
        .set_precise_ip(u64::from(params.precise_ip.min(3)));
    let counter = builder
        .build()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
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
pub fn open_precise(params: &mut EventParams, tid: i32, cpu: usize) -> Result<OwnedFd, i32> {
    step_down_precise(params, |p| open(p, tid, cpu))
}

/// The step-down of `open_precise`, apart from the system call (so that it can be tested without a PMU).
fn step_down_precise<T>(
    params: &mut EventParams,
    mut try_open: impl FnMut(&EventParams) -> Result<T, i32>,
) -> Result<T, i32> {
    loop {
        match try_open(params) {
            Err(libc::EINVAL | libc::EOPNOTSUPP) if params.precise_ip > 0 => params.precise_ip -= 1,
            other => return other,
        }
    }
}

/// Probe whether `spec` can be sampled here: open a sampling event on the calling thread (any CPU), disabled,
/// and close it at once.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn probe(spec: &PerfEventSpec, period: u64) -> Result<(), i32> {
    probe_pid(spec, period, 0)
}

/// Probe whether the caller may sample process (or thread) `pid` with `spec`: the kernel's own permission check
/// (`ptrace` read access and `perf_event_paranoid`), by opening a disabled event and closing it.
///
/// # Errors
/// The errno of `perf_event_open(2)`: ESRCH (no such process), EACCES/EPERM (not allowed).
pub fn probe_pid(spec: &PerfEventSpec, period: u64, pid: i32) -> Result<(), i32> {
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
        .exclude_kernel(true)
        .exclude_hv(true)
        .enabled(false);
    builder
        .build()
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
}

fn ioctl_arg(fd: BorrowedFd<'_>, request: libc::c_ulong, arg: libc::c_ulong) -> Result<(), i32> {
    // SAFETY: `fd` is a live descriptor borrowed for the call; these requests take an integer argument.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) };
    if rc < 0 { Err(last_errno()) } else { Ok(()) }
}

/// `PERF_EVENT_IOC_ENABLE` (also enables the event's inherited children).
pub fn enable(fd: BorrowedFd<'_>) -> Result<(), i32> {
    ioctl_arg(fd, IOC_ENABLE, 0)
}

/// `PERF_EVENT_IOC_DISABLE` (also disables the event's inherited children).
pub fn disable(fd: BorrowedFd<'_>) -> Result<(), i32> {
    ioctl_arg(fd, IOC_DISABLE, 0)
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: send `fd`'s records into `target`'s ring (same CPU only).
pub fn set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<(), i32> {
    ioctl_arg(fd, IOC_SET_OUTPUT, target.as_raw_fd() as libc::c_ulong)
}

/// `PERF_EVENT_IOC_PERIOD` with the new period passed **by pointer** (by value gives EFAULT). Applies to the
/// event's inherited children too.
pub fn set_period(fd: BorrowedFd<'_>, period: u64) -> Result<(), i32> {
    let value: u64 = period;
    // SAFETY: the kernel reads one u64 through the pointer during the call; `value` outlives it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), IOC_PERIOD, &value as *const u64) };
    if rc < 0 { Err(last_errno()) } else { Ok(()) }
}

/// The calling thread's errno.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(precise_ip: u8) -> EventParams {
        EventParams {
            spec: PerfEventSpec {
                type_: 0,
                config: 0,
                config1: 0,
                config2: 0,
                name: "cpu-cycles",
            },
            period: 65_536,
            exclude_kernel: true,
            sample_tid: false,
            inherit_threads: true,
            wakeup_watermark: 4096,
            precise_ip,
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
                Err(libc::EOPNOTSUPP)
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
            step_down_precise(&mut p, |_| -> Result<(), i32> {
                n += 1;
                Err(libc::ENOENT)
            }),
            Err(libc::ENOENT)
        );
        assert_eq!(n, 1);
        // EINVAL at every level: the answer at level 0 is final.
        let mut p = params(2);
        assert_eq!(
            step_down_precise(&mut p, |_| -> Result<(), i32> { Err(libc::EINVAL) }),
            Err(libc::EINVAL)
        );
        assert_eq!(p.precise_ip, 0);
    }
}
