//! Whether a source can be sampled here: a probe of its event (opened disabled on the calling thread and closed
//! at once), cached unless the failure was a passing shortage, and the status a create gets for the answer.

use nix::errno::Errno;

use super::ProfileSource;
use super::interval::TABLE_SIZE;
use crate::status::NtStatus;

/// Why a source is or is not supported on this machine.
///
/// ```
/// use ntprofile::{NtStatus, ProfileSource, Support};
///
/// // Linux has no generic event for load instructions: never supported.
/// assert_eq!(ProfileSource::LoadInstructions.support(), Support::NoPerfEvent);
/// assert_eq!(Support::NoPerfEvent.status(), NtStatus::NOT_SUPPORTED);
/// // The timer is a software event: supported wherever perf_event_open is allowed.
/// let timer = ProfileSource::Time.support();
/// println!("ProfileTime: {}", timer.reason());
/// assert_eq!(timer.is_supported(), timer.status() == NtStatus::SUCCESS);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Its event opens here.
    Supported,
    /// Linux has no generic perf event for it.
    NoPerfEvent,
    /// Opening its event failed with this errno (ENOENT: no such event or PMU on this machine).
    OpenFailed(Errno),
    /// Its samples are taken in the kernel (context switches, CPU migrations, tracepoints: see
    /// `docs/linux-mapping.md`), and this caller may not sample the kernel: it needs `CAP_PERFMON`,
    /// `CAP_SYS_ADMIN` or `kernel.perf_event_paranoid <= 1`. Without kernel samples such a source would count
    /// nothing at all, so it is refused (`STATUS_PRIVILEGE_NOT_HELD`) rather than give an empty profile.
    NeedsKernelPrivilege,
}

impl Support {
    /// True when the source can be sampled.
    pub fn is_supported(self) -> bool {
        self == Support::Supported
    }

    /// A short human reason, one clause ("supported", "this machine has no PMU that counts it (ENOENT)", ...).
    pub fn reason(self) -> String {
        match self {
            Support::Supported => "supported".to_string(),
            Support::NoPerfEvent => "no generic perf event for this source".to_string(),
            Support::NeedsKernelPrivilege => {
                "its samples are taken in the kernel, which this caller may not \
                                              sample: needs CAP_PERFMON, CAP_SYS_ADMIN or \
                                              kernel.perf_event_paranoid <= 1"
                    .to_string()
            }
            Support::OpenFailed(errno) => match errno {
                Errno::ENOENT => "this machine has no PMU that counts it (ENOENT)".into(),
                Errno::EOPNOTSUPP => {
                    "the PMU counts this event but cannot sample it (EOPNOTSUPP)".into()
                }
                Errno::ENODEV => "no device for this event (ENODEV)".into(),
                Errno::EACCES | Errno::EPERM => {
                    format!("this caller may not open the event ({errno:?})")
                }
                _ => format!("the kernel refused the event: {} ({errno:?})", errno.desc()),
            },
        }
    }

    /// True when the answer is a passing shortage (no free descriptor, no memory, an interrupted call), not a
    /// property of the source or the machine: it is never cached, and the next call asks the kernel again.
    pub fn is_transient(self) -> bool {
        matches!(self, Support::OpenFailed(errno) if is_transient_errno(errno))
    }

    /// The status a create gets for this answer: `STATUS_SUCCESS` when supported,
    /// `STATUS_INSUFFICIENT_RESOURCES` for a transient failure, `STATUS_PRIVILEGE_NOT_HELD` for
    /// [`Support::NeedsKernelPrivilege`], `STATUS_NOT_SUPPORTED` otherwise.
    pub fn status(self) -> NtStatus {
        if self.is_supported() {
            NtStatus::SUCCESS
        } else if self == Support::NeedsKernelPrivilege {
            NtStatus::PRIVILEGE_NOT_HELD
        } else if self.is_transient() {
            NtStatus::INSUFFICIENT_RESOURCES
        } else {
            NtStatus::NOT_SUPPORTED
        }
    }
}

/// Errnos that describe a passing shortage of the process or the system, never the event asked for: EMFILE,
/// ENFILE, ENOMEM, EAGAIN, EINTR, EBUSY (a PMU counter held by someone else for now).
pub fn is_transient_errno(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM | Errno::EAGAIN | Errno::EINTR | Errno::EBUSY
    )
}

static SUPPORT: [std::sync::OnceLock<Support>; TABLE_SIZE] =
    [const { std::sync::OnceLock::new() }; TABLE_SIZE];

impl ProfileSource {
    /// Whether this source's event opens on this machine: probed (a sampling event on the calling thread,
    /// opened disabled and closed at once), then cached — unless the probe failed for a passing reason
    /// ([`Support::is_transient`]: no free descriptor, ...), which is answered but never cached. A source
    /// sampled in the kernel (context switches, CPU migrations) is probed with kernel samples at every call:
    /// its answer depends on the caller's privilege ([`Support::NeedsKernelPrivilege`]).
    pub fn support(self) -> Support {
        let cell = &SUPPORT[self.table_index()];
        if let Some(known) = cell.get() {
            return *known;
        }
        let answer = match self.perf_event() {
            None => Support::NoPerfEvent,
            Some(spec) => {
                let period = self.period_for(self.limits().default);
                // An interrupted probe is simply asked again (a few times).
                let mut result = crate::perf::event::probe(&spec, period);
                for _ in 0..3 {
                    if result != Err(Errno::EINTR) {
                        break;
                    }
                    result = crate::perf::event::probe(&spec, period);
                }
                match result {
                    Ok(()) => Support::Supported,
                    // Probed with kernel samples (`perf::event::probe`): the kernel said this caller may not.
                    Err(Errno::EACCES | Errno::EPERM) if spec.sampled_in_kernel() => {
                        Support::NeedsKernelPrivilege
                    }
                    Err(errno) => Support::OpenFailed(errno),
                }
            }
        };
        // A passing shortage is asked again; so is the answer for an event sampled in the kernel, which
        // depends on the caller's privilege, and that can change (a set*uid(), a forked child that drops its
        // capabilities).
        let depends_on_privilege = self.perf_event().is_some_and(|s| s.sampled_in_kernel());
        if answer.is_transient() || depends_on_privilege {
            return answer;
        }
        *cell.get_or_init(|| answer)
    }
}
