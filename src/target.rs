//! Who is profiled: the current process (every thread, later threads included), and the thread enumeration
//! the engine re-scans until stable.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;

use crate::perf::Tid;
use crate::perf::{proc, sys};
use crate::source::ProfileSource;
use crate::status::NtStatus;

/// Another process, named by a pidfd (so that a recycled pid never reaches a different process).
#[derive(Debug)]
pub struct ProcessRef {
    pid: i32,
    pidfd: OwnedFd,
    /// The process that opened it: in a `fork()`ed child the object is inherited, not opened, and names nothing
    /// (as an inherited handle of the C API).
    opener: u32,
}

impl ProcessRef {
    /// `NtOpenProcess` for Linux pid `pid`: open a pidfd and check that the caller may profile the process (the
    /// kernel's own check: a disabled timer event is opened on it and closed).
    ///
    /// # Errors
    /// `STATUS_INVALID_CID` when no such process exists, `STATUS_ACCESS_DENIED` when the caller may not
    /// profile it, `STATUS_INSUFFICIENT_RESOURCES` when no descriptor is left.
    pub fn open(pid: i32) -> Result<ProcessRef, NtStatus> {
        if pid <= 0 {
            return Err(NtStatus::INVALID_CID);
        }
        let pidfd = sys::pidfd_open(pid).map_err(|errno| match errno {
            Errno::ESRCH | Errno::EINVAL => NtStatus::INVALID_CID,
            other => NtStatus::from(other),
        })?;
        let process = ProcessRef {
            pid,
            pidfd,
            opener: std::process::id(),
        };
        process.check_access()?;
        Ok(process)
    }

    /// The Linux pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// True once the process has exited (its pidfd polls readable).
    pub fn has_exited(&self) -> bool {
        sys::pidfd_exited_within(self.pidfd.as_fd(), 0)
    }

    /// The pidfd (readable once the process has exited), for a wait set.
    pub fn pidfd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Wait up to `ms` milliseconds for the process to finish exiting; true once it has.
    pub fn exited_within(&self, ms: u16) -> bool {
        sys::pidfd_exited_within(self.pidfd.as_fd(), ms)
    }

    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child: the object was opened by the parent.
    pub fn check_opener(&self) -> Result<(), NtStatus> {
        if self.opener == std::process::id() {
            Ok(())
        } else {
            Err(NtStatus::INVALID_HANDLE)
        }
    }

    /// May the caller profile this process now? (`STATUS_ACCESS_DENIED` if not; `STATUS_INVALID_HANDLE` in a
    /// `fork()`ed child of the process that opened it.) A process that has exited, or is exiting, passes: the
    /// pidfd still names it, and a profile of it starts and counts nothing.
    pub fn check_access(&self) -> Result<(), NtStatus> {
        self.check_opener()?;
        let time = ProfileSource::Time;
        let spec = time.perf_event().ok_or(NtStatus::INTERNAL_ERROR)?;
        match crate::perf::event::probe_pid(&spec, time.period_for(time.limits().default), self.pid)
        {
            Ok(()) => Ok(()),
            Err(Errno::EACCES | Errno::EPERM) => Err(NtStatus::ACCESS_DENIED),
            // ESRCH on a pid the pidfd pins: the process has exited, or is exiting (or only its first thread
            // has ended, and each start checks the access of the threads it observes). The handle stays valid.
            Err(Errno::ESRCH) => Ok(()),
            Err(errno) => Err(NtStatus::from(errno)),
        }
    }
}

/// The process a profile observes.
#[derive(Clone, Debug)]
pub enum Target {
    /// `NtCurrentProcess()`: every thread of the calling process, those created later included (the library's
    /// own consumer thread excluded).
    CurrentProcess,
    /// Another process (a handle from `NtOpenProcess`): every thread, those created later included.
    Process(Arc<ProcessRef>),
    /// `Process = NULL`: every process, through per-CPU events.
    Global,
}

impl PartialEq for Target {
    fn eq(&self, other: &Target) -> bool {
        match (self, other) {
            (Target::CurrentProcess, Target::CurrentProcess) | (Target::Global, Target::Global) => {
                true
            }
            // The same opened process (one handle, or clones of one Rust `Process`): a pid alone could name a
            // newer process that reused the pid of one that exited, and its profiles must not join the exited
            // one's stream (whose events observe the dead threads).
            (Target::Process(a), Target::Process(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Target {}

impl std::hash::Hash for Target {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        if let Target::Process(p) = self {
            p.pid.hash(state);
        }
    }
}

impl Target {
    /// The Linux pid behind the target (-1 for global).
    pub fn pid(&self) -> i32 {
        match self {
            Target::CurrentProcess => std::process::id() as i32,
            Target::Process(p) => p.pid,
            Target::Global => -1,
        }
    }

    /// True when the target is another process that has exited (its pidfd says so).
    pub fn has_exited(&self) -> bool {
        matches!(self, Target::Process(p) if p.has_exited())
    }

    /// True for a per-CPU target (every process).
    pub fn is_global(&self) -> bool {
        matches!(self, Target::Global)
    }

    /// The ids of the target's threads now, sorted (`[Tid::ALL_TASKS]` for global: one event per CPU for
    /// every task).
    ///
    /// # Errors
    /// `STATUS_INSUFFICIENT_RESOURCES` when the listing cannot be read for want of a descriptor or memory (a
    /// shortage, never a verdict on the handle). A process that is gone has no threads (an empty list).
    pub fn threads(&self) -> Result<Vec<Tid>, NtStatus> {
        let pid = match self {
            Target::CurrentProcess => None,
            Target::Process(p) if p.check_opener().is_err() => {
                return Err(NtStatus::INVALID_HANDLE);
            }
            Target::Process(p) if p.has_exited() => return Ok(Vec::new()),
            Target::Process(p) => Some(p.pid),
            Target::Global => return Ok(vec![Tid::ALL_TASKS]),
        };
        match proc::thread_ids(pid) {
            Ok(tids) => Ok(tids),
            // The process exited between the check and the listing.
            Err(Errno::ENOENT | Errno::ESRCH) if pid.is_some() => Ok(Vec::new()),
            Err(errno) if crate::source::is_transient_errno(errno) => {
                Err(NtStatus::INSUFFICIENT_RESOURCES)
            }
            Err(_) => Err(NtStatus::INTERNAL_ERROR),
        }
    }
}

/// The kernel-address half of x86-64 (and the other 64-bit ports): a range reaching it samples the kernel.
pub const KERNEL_SPACE_START: u64 = 0xFFFF_8000_0000_0000;

/// `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON`.
const CAP_PERFMON: u32 = 38;

/// True when the calling process holds `cap` in its effective set (`capget(2)`, falling back to
/// `/proc/self/status`'s `CapEff` where the call is filtered out).
pub fn has_capability(cap: u32) -> bool {
    let caps = sys::effective_capabilities().unwrap_or_else(|_| proc::effective_capabilities());
    cap < u64::BITS && caps & (1u64 << cap) != 0
}

/// `kernel.perf_event_paranoid` now (2 when unreadable: the kernel's default).
pub fn perf_event_paranoid() -> i32 {
    proc::perf_event_paranoid().unwrap_or(2)
}

/// The system-profile privilege of the mapping: CAP_PERFMON, CAP_SYS_ADMIN, or `perf_event_paranoid <= 0`.
pub fn has_system_profile_privilege() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN) || perf_event_paranoid() <= 0
}

/// May this process sample kernel addresses (`exclude_kernel = 0`)? CAP_PERFMON, CAP_SYS_ADMIN or paranoid ≤ 1.
pub fn may_sample_kernel() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN) || perf_event_paranoid() <= 1
}
