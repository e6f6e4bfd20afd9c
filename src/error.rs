//! The Rust API's error: the NTSTATUS the C API would return, and what exactly was wrong.

use std::borrow::Cow;
use std::fmt;

use crate::status::NtStatus;

/// An error of the safe Rust API: the [`NtStatus`] that the matching C call returns, and a sentence saying which
/// argument or check failed (`BucketSize 1 is outside 2..=31`).
///
/// ```
/// use ntprofile::{NtStatus, Profile};
///
/// let err = Profile::builder().range(0x10000, 4096).bucket_size(1).build().unwrap_err();
/// assert_eq!(err.status(), NtStatus::INVALID_PARAMETER);
/// assert!(err.to_string().contains("BucketSize 1"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: NtStatus,
    detail: Cow<'static, str>,
}

impl Error {
    /// An error with `status` and a sentence saying what was wrong.
    pub fn new(status: NtStatus, detail: impl Into<Cow<'static, str>>) -> Error {
        Error {
            status,
            detail: detail.into(),
        }
    }

    /// The NTSTATUS the C API returns for the same failure.
    pub fn status(&self) -> NtStatus {
        self.status
    }

    /// What was wrong, in words (empty when only the status is known).
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl From<NtStatus> for Error {
    fn from(status: NtStatus) -> Error {
        Error {
            status,
            detail: Cow::Borrowed(""),
        }
    }
}

impl From<Error> for NtStatus {
    fn from(err: Error) -> NtStatus {
        err.status
    }
}

/// `detail (STATUS_NAME (0x...))`; with no detail, the status's own sentence (`NtStatus::message`) and its value.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(
                f,
                "{} (0x{:08X})",
                self.status.message(),
                self.status.as_u32()
            )
        } else {
            write!(f, "{} ({})", self.detail, self.status)
        }
    }
}

impl std::error::Error for Error {}

/// An error equals a status when its status is that status, whatever its detail.
impl PartialEq<NtStatus> for Error {
    fn eq(&self, other: &NtStatus) -> bool {
        self.status == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_without_detail_uses_the_status_text() {
        let err = Error::from(NtStatus::PROFILING_NOT_STARTED);
        assert_eq!(
            err.to_string(),
            "STATUS_PROFILING_NOT_STARTED: the profile is not started (0xC00000B7)"
        );
        let err = Error::new(
            NtStatus::INVALID_PARAMETER,
            "BucketSize 1 is outside 2..=31",
        );
        assert_eq!(
            err.to_string(),
            "BucketSize 1 is outside 2..=31 (STATUS_INVALID_PARAMETER (0xC000000D))"
        );
    }
}
