//! Who is profiled: the current process (every thread, later threads included), and the thread enumeration
//! the engine re-scans until stable.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use crate::source::ProfileSource;
use crate::status::NtStatus;

/// Another process, named by a pidfd (so that a recycled pid never reaches a different process).
#[derive(Debug)]
pub struct ProcessRef {
    pid: i32,
    pidfd: OwnedFd,
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
        let pidfd = crate::perf::sys::pidfd_open(pid).map_err(|errno| match errno {
            libc::ESRCH | libc::EINVAL => NtStatus::INVALID_CID,
            other => NtStatus::from_errno(other),
        })?;
        let process = ProcessRef { pid, pidfd };
        process.check_access()?;
        Ok(process)
    }

    /// The Linux pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// True once the process has exited (its pidfd polls readable).
    pub fn has_exited(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
    }

    /// May the caller profile this process now? (`STATUS_ACCESS_DENIED` if not.)
    pub fn check_access(&self) -> Result<(), NtStatus> {
        let time = ProfileSource::Time;
        let spec = time.perf_event().ok_or(NtStatus::INTERNAL_ERROR)?;
        match crate::perf::event::probe_pid(&spec, time.period_for(time.limits().default), self.pid)
        {
            Ok(()) => Ok(()),
            Err(libc::EACCES | libc::EPERM) => Err(NtStatus::ACCESS_DENIED),
            Err(libc::ESRCH) if self.has_exited() => Ok(()), // exited: the handle stays valid
            Err(errno) => Err(NtStatus::from_errno(errno)),
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
            (Target::Process(a), Target::Process(b)) => a.pid == b.pid,
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

    /// True for a per-CPU target (every process).
    pub fn is_global(&self) -> bool {
        matches!(self, Target::Global)
    }

    /// The ids of the target's threads now (`[-1]` for global: one event per CPU for every task).
    ///
    /// # Errors
    /// `STATUS_INSUFFICIENT_RESOURCES` when the listing cannot be read for want of a descriptor or memory (a
    /// shortage, never a verdict on the handle). A process that is gone has no threads (an empty list).
    pub fn threads(&self) -> Result<Vec<i32>, NtStatus> {
        let dir = match self {
            Target::CurrentProcess => "/proc/self/task".to_string(),
            Target::Process(p) if p.has_exited() => return Ok(Vec::new()),
            Target::Process(p) => format!("/proc/{}/task", p.pid),
            Target::Global => return Ok(vec![-1]),
        };
        let listing_error = |e: std::io::Error| match e.raw_os_error() {
            // The process exited between the check and the listing.
            Some(libc::ENOENT | libc::ESRCH) if !matches!(self, Target::CurrentProcess) => None,
            Some(errno) if crate::source::is_transient_errno(errno) => {
                Some(NtStatus::INSUFFICIENT_RESOURCES)
            }
            _ => Some(NtStatus::INTERNAL_ERROR),
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return listing_error(e).map_or(Ok(Vec::new()), Err),
        };
        let mut tids = Vec::new();
        for entry in entries {
            // A listing that fails part-way would leave threads unobserved: report it, never a partial list.
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return listing_error(e).map_or(Ok(Vec::new()), Err),
            };
            if let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                tids.push(tid);
            }
        }
        tids.sort_unstable();
        Ok(tids)
    }
}

/// The kernel-address half of x86-64 (and the other 64-bit ports): a range reaching it samples the kernel.
pub const KERNEL_SPACE_START: u64 = 0xFFFF_8000_0000_0000;

/// `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON`.
const CAP_PERFMON: u32 = 38;

/// True when the calling process holds `cap` in its effective set (`/proc/self/status`, `CapEff`).
pub fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1u64 << cap) != 0)
}

/// `kernel.perf_event_paranoid` now (2 when unreadable: the kernel's default).
pub fn perf_event_paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The system-profile privilege of the mapping: CAP_PERFMON, CAP_SYS_ADMIN, or `perf_event_paranoid <= 0`.
pub fn has_system_profile_privilege() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN) || perf_event_paranoid() <= 0
}

/// May this process sample kernel addresses (`exclude_kernel = 0`)? CAP_PERFMON, CAP_SYS_ADMIN or paranoid ≤ 1.
pub fn may_sample_kernel() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN) || perf_event_paranoid() <= 1
}
