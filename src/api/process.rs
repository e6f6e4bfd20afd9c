//! Another process opened for profiling (`NtOpenProcess`, pinned by a pidfd), and `GROUP_AFFINITY` records of
//! `NtCreateProfileEx`.

use std::sync::Arc;

use crate::error::Error;
use crate::status::NtStatus;
use crate::target::ProcessRef;

/// Another process opened for profiling, as `NtOpenProcess` opens it: named by a pidfd, so that a pid recycled
/// after the process exited never reaches a different process.
///
/// Pass it to [`ProfileBuilder::process`](crate::ProfileBuilder::process) to profile every thread of that
/// process (threads it creates later included). Cloning is cheap and shares the pidfd.
///
/// ```no_run
/// use ntprofile::{Process, Profile};
///
/// let child = std::process::Command::new("sleep").arg("1").spawn()?;
/// let process = Process::open(child.id())?;
/// assert_eq!(process.pid(), child.id());
/// let profile = Profile::builder().process(&process).range(0x1000, 0x10000).build()?;
/// profile.start()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Process {
    inner: Arc<ProcessRef>,
}

impl Process {
    /// `NtOpenProcess` for Linux process id `pid`: open it and check that the caller may profile it (the kernel's
    /// own check: the caller may ptrace-read it, or holds `CAP_PERFMON`/`CAP_SYS_ADMIN`).
    #[doc(alias = "NtOpenProcess")]
    ///
    /// # Errors
    /// - `STATUS_INVALID_CID` when no process `pid` exists (or `pid` is 0 or above the kernel's pid range). A
    ///   process that has exited but is not reaped yet (a zombie) exists: it opens, and
    ///   [`has_exited`](Self::has_exited) says it has exited;
    /// - `STATUS_ACCESS_DENIED` when the caller may not profile it (another user's process without the
    ///   privilege, or `kernel.yama.ptrace_scope` forbids it);
    /// - `STATUS_INSUFFICIENT_RESOURCES` when no file descriptor is left.
    ///
    /// ```
    /// use ntprofile::{NtStatus, Process};
    ///
    /// let me = Process::open(std::process::id())?;
    /// assert!(!me.has_exited());
    /// // Process ids are at most 2^22 on Linux: this one never exists.
    /// assert_eq!(Process::open(0x7FFF_FFFF).unwrap_err().status(), NtStatus::INVALID_CID);
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn open(pid: u32) -> Result<Process, Error> {
        let Ok(raw) = i32::try_from(pid) else {
            return Err(Error::new(
                NtStatus::INVALID_CID,
                format!("process id {pid} is beyond the range of Linux process ids"),
            ));
        };
        match ProcessRef::open(raw) {
            Ok(inner) => Ok(Process {
                inner: Arc::new(inner),
            }),
            Err(status) => Err(open_error(pid, status)),
        }
    }

    /// The Linux process id.
    ///
    /// ```
    /// let me = ntprofile::Process::open(std::process::id())?;
    /// assert_eq!(me.pid(), std::process::id());
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn pid(&self) -> u32 {
        self.inner.pid() as u32
    }

    /// True once the process has exited (a profile of it then counts nothing more). The pidfd keeps naming the
    /// exited process, never a newer one that got its pid.
    ///
    /// ```
    /// // `cat` runs until its input closes: the process is surely alive while it is opened.
    /// let mut child = std::process::Command::new("cat")
    ///     .stdin(std::process::Stdio::piped())
    ///     .spawn()
    ///     .unwrap();
    /// let process = ntprofile::Process::open(child.id())?;
    /// assert!(!process.has_exited());
    /// drop(child.stdin.take()); // end of input: cat exits
    /// child.wait().unwrap();
    /// assert!(process.has_exited());
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn has_exited(&self) -> bool {
        self.inner.has_exited()
    }

    /// Waits up to `timeout` (rounded up to a millisecond, at most 65 s) for the process to finish exiting;
    /// true once it has. A caller that saw the process's threads end (its sampler's
    /// [`targets_exited`](crate::Sampler::targets_exited)) waits here for the exit itself, which the kernel
    /// completes a little later, instead of polling.
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut child = std::process::Command::new("sleep").arg("0.05").spawn().unwrap();
    /// let process = ntprofile::Process::open(child.id())?;
    /// assert!(process.exited_within(Duration::from_secs(30)));
    /// child.wait().unwrap();
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn exited_within(&self, timeout: std::time::Duration) -> bool {
        let ms = u16::try_from(timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(u16::MAX);
        self.inner.exited_within(ms)
    }

    /// The pidfd (readable once the process has exited).
    pub(crate) fn pidfd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inner.pidfd()
    }

    /// The shared internal reference (the same object a C process handle holds).
    pub(super) fn inner(&self) -> &Arc<ProcessRef> {
        &self.inner
    }
}

/// The detail of a failed open, by status.
pub(super) fn open_error(pid: u32, status: NtStatus) -> Error {
    let detail = match status {
        NtStatus::INVALID_CID => format!("no process {pid}"),
        NtStatus::ACCESS_DENIED => format!(
            "this caller may not profile process {pid} (another user's process: it needs CAP_PERFMON or \
             CAP_SYS_ADMIN, or ptrace access under kernel.yama.ptrace_scope)"
        ),
        NtStatus::INSUFFICIENT_RESOURCES => {
            format!("no file descriptor left to open process {pid}")
        }
        _ => format!("cannot open process {pid}"),
    };
    Error::new(status, detail)
}

/// A `GROUP_AFFINITY` record of `NtCreateProfileEx`: the processors `64·group + bit` for each set bit of `mask`.
/// Linux CPU `n` is bit `n % 64` of group `n / 64`.
///
/// ```
/// use ntprofile::GroupAffinity;
///
/// let cpu0 = GroupAffinity { mask: 1, group: 0 };
/// assert_eq!(GroupAffinity::cpu(65), GroupAffinity { mask: 2, group: 1 });
/// # let _ = cpu0;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GroupAffinity {
    /// The processors of the group (`KAFFINITY`): bit `b` is CPU `64·group + b`.
    pub mask: u64,
    /// The processor group.
    pub group: u16,
}

impl GroupAffinity {
    /// The record naming one Linux CPU.
    pub fn cpu(cpu: usize) -> GroupAffinity {
        GroupAffinity {
            mask: 1u64 << (cpu % crate::affinity::GROUP_SIZE),
            group: (cpu / crate::affinity::GROUP_SIZE) as u16,
        }
    }
}
