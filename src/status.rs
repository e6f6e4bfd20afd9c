//! `NTSTATUS` as a newtype, every status value of the contract, and the one errno → NTSTATUS table.
//!
//! A newtype, not an enum: a value that comes from C (or from a future version of the contract) can never
//! become undefined behaviour; unknown values print as hex.

use std::fmt;

/// An NT status code (`NTSTATUS`, a signed 32-bit value). Success values are `>= 0`.
///
/// ```
/// use ntprofile::NtStatus;
///
/// let status = NtStatus::BUFFER_TOO_SMALL;
/// assert_eq!(status.as_u32(), 0xC000_0023);
/// assert!(!status.is_success());
/// assert_eq!(status.name(), Some("STATUS_BUFFER_TOO_SMALL"));
/// assert_eq!(status.to_string(), "STATUS_BUFFER_TOO_SMALL (0xC0000023)");
/// assert_eq!(status.ok(), Err(status));
/// assert_eq!(NtStatus::SUCCESS.ok(), Ok(()));
/// // The one errno table: ENOENT from perf_event_open means the source is not supported here.
/// assert_eq!(NtStatus::from_errno(libc::ENOENT), NtStatus::NOT_SUPPORTED);
/// assert_eq!(
///     NtStatus::from_io(&std::io::Error::from_raw_os_error(libc::EMFILE)),
///     NtStatus::INSUFFICIENT_RESOURCES
/// );
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct NtStatus(pub i32);

macro_rules! statuses {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        impl NtStatus {
            $($(#[$doc])* pub const $name: NtStatus = NtStatus($value as u32 as i32);)*

            /// The NT name of a known status (`"STATUS_SUCCESS"`), or `None`.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $(NtStatus::$name => Some(concat!("STATUS_", stringify!($name))),)*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    /// `STATUS_SUCCESS`
    SUCCESS = 0x0000_0000u32;
    /// `STATUS_DATATYPE_MISALIGNMENT`: Buffer or GroupAffinity is not 4-byte aligned.
    DATATYPE_MISALIGNMENT = 0x8000_0002u32;
    /// `STATUS_BUFFER_OVERFLOW`: ProfileBase + ProfileSize wraps past the top of the address space.
    BUFFER_OVERFLOW = 0x8000_0005u32;
    /// `STATUS_ACCESS_VIOLATION`: a pointer argument that cannot be written (or read).
    ACCESS_VIOLATION = 0xC000_0005u32;
    /// `STATUS_INVALID_HANDLE`: unknown, closed or stale handle.
    INVALID_HANDLE = 0xC000_0008u32;
    /// `STATUS_INVALID_CID`: `NtOpenProcess` for a process id that does not exist.
    INVALID_CID = 0xC000_000Bu32;
    /// `STATUS_INVALID_PARAMETER`: bucket size out of range, bad affinity, bad argument.
    INVALID_PARAMETER = 0xC000_000Du32;
    /// `STATUS_ACCESS_DENIED`: the caller may not profile that process.
    ACCESS_DENIED = 0xC000_0022u32;
    /// `STATUS_BUFFER_TOO_SMALL`: the buffer cannot hold one ULONG per bucket.
    BUFFER_TOO_SMALL = 0xC000_0023u32;
    /// `STATUS_OBJECT_TYPE_MISMATCH`: a handle of the wrong kind.
    OBJECT_TYPE_MISMATCH = 0xC000_0024u32;
    /// `STATUS_PRIVILEGE_NOT_HELD`: global or kernel profiling without the system-profile privilege.
    PRIVILEGE_NOT_HELD = 0xC000_0061u32;
    /// `STATUS_INSUFFICIENT_RESOURCES`: memory, descriptors or ring space ran out.
    INSUFFICIENT_RESOURCES = 0xC000_009Au32;
    /// `STATUS_PROFILING_NOT_STARTED`: stop of a profile that is not started.
    PROFILING_NOT_STARTED = 0xC000_00B7u32;
    /// `STATUS_PROFILING_NOT_STOPPED`: start of a profile that is already started.
    PROFILING_NOT_STOPPED = 0xC000_00B8u32;
    /// `STATUS_NOT_SUPPORTED`: the profile source cannot be sampled on this machine.
    NOT_SUPPORTED = 0xC000_00BBu32;
    /// `STATUS_PROFILING_AT_LIMIT`: too many started profiles.
    PROFILING_AT_LIMIT = 0xC000_00D3u32;
    /// `STATUS_INTERNAL_ERROR`: the library itself failed (a caught panic, a dead consumer thread).
    INTERNAL_ERROR = 0xC000_00E5u32;
    /// `STATUS_INVALID_PARAMETER_7`: `BufferSize == 0`.
    INVALID_PARAMETER_7 = 0xC000_00F5u32;
    /// `STATUS_NOT_FOUND`: no module or function of that name (`NtprofileFindFunction`, `find_function`).
    NOT_FOUND = 0xC000_0225u32;
}

impl NtStatus {
    /// `NT_SUCCESS(status)`: true for every value `>= 0`. The two `0x8000_xxxx` warnings are failures.
    pub const fn is_success(self) -> bool {
        self.0 >= 0
    }

    /// The raw value as the unsigned hex NT documentation prints it.
    pub const fn as_u32(self) -> u32 {
        self.0 as u32
    }

    /// `Ok(())` for a success value, `Err(self)` otherwise.
    pub fn ok(self) -> Result<(), NtStatus> {
        if self.is_success() { Ok(()) } else { Err(self) }
    }

    /// The status for an errno returned by `perf_event_open(2)`, `mmap(2)` or an ioctl on a perf event.
    ///
    /// This is the one table the crate uses; see `docs/linux-mapping.md`, "Kernel behaviour the design rests on":
    /// ENOENT/EOPNOTSUPP/ENODEV → not supported; EACCES/EPERM → privilege not held; ESRCH → invalid handle;
    /// EMFILE/ENFILE/ENOMEM/ENOSPC → insufficient resources; EINVAL/E2BIG → invalid parameter.
    pub fn from_errno(errno: i32) -> NtStatus {
        match errno {
            libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::ENOSYS => {
                NtStatus::NOT_SUPPORTED
            }
            libc::EACCES | libc::EPERM => NtStatus::PRIVILEGE_NOT_HELD,
            libc::ESRCH => NtStatus::INVALID_HANDLE,
            libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOSPC | libc::EAGAIN => {
                NtStatus::INSUFFICIENT_RESOURCES
            }
            libc::EFAULT => NtStatus::ACCESS_VIOLATION,
            libc::EINVAL | libc::E2BIG => NtStatus::INVALID_PARAMETER,
            _ => NtStatus::INTERNAL_ERROR,
        }
    }

    /// [`NtStatus::from_errno`] for an `std::io::Error` (a non-OS error is an internal error).
    pub fn from_io(err: &std::io::Error) -> NtStatus {
        match err.raw_os_error() {
            Some(errno) => NtStatus::from_errno(errno),
            None if err.kind() == std::io::ErrorKind::Unsupported => NtStatus::NOT_SUPPORTED,
            None => NtStatus::INTERNAL_ERROR,
        }
    }
}

impl fmt::Debug for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} (0x{:08X})", self.as_u32()),
            None => write!(f, "NtStatus(0x{:08X})", self.as_u32()),
        }
    }
}

impl fmt::Display for NtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for NtStatus {}

/// The same table as [`NtStatus::from_errno`], for the kernel errors the `perf` layer returns.
impl From<nix::errno::Errno> for NtStatus {
    fn from(errno: nix::errno::Errno) -> NtStatus {
        NtStatus::from_errno(errno as i32)
    }
}

impl From<NtStatus> for i32 {
    fn from(s: NtStatus) -> i32 {
        s.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_the_contract() {
        assert_eq!(NtStatus::INVALID_PARAMETER_7.as_u32(), 0xC00000F5);
        assert_eq!(NtStatus::PROFILING_AT_LIMIT.as_u32(), 0xC00000D3);
        assert!(!NtStatus::BUFFER_OVERFLOW.is_success());
        assert!(!NtStatus::DATATYPE_MISALIGNMENT.is_success());
        assert!(NtStatus::SUCCESS.is_success());
        assert_eq!(
            NtStatus::BUFFER_TOO_SMALL.name(),
            Some("STATUS_BUFFER_TOO_SMALL")
        );
        assert_eq!(format!("{}", NtStatus(0x1234)), "NtStatus(0x00001234)");
    }

    #[test]
    fn errno_table() {
        assert_eq!(NtStatus::from_errno(libc::ENOENT), NtStatus::NOT_SUPPORTED);
        assert_eq!(
            NtStatus::from_errno(libc::EMFILE),
            NtStatus::INSUFFICIENT_RESOURCES
        );
        assert_eq!(
            NtStatus::from_errno(libc::EACCES),
            NtStatus::PRIVILEGE_NOT_HELD
        );
        assert_eq!(
            NtStatus::from_errno(libc::EINVAL),
            NtStatus::INVALID_PARAMETER
        );
    }
}
