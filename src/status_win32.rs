//! NTSTATUS → Win32 error code, as Windows' `RtlNtStatusToDosError` maps them: the text behind
//! [`NtStatus::to_dos_error`] and the C exports `RtlNtStatusToDosError` / `RtlNtStatusToDosErrorNoTeb`.
//!
//! The table holds every status the library returns and the other statuses the header defines, each with the
//! Win32 error Windows gives it (docs/api.md, "Status to Win32 error"). Values outside the table follow
//! Windows' general rules: 0 and customer-defined values (bit 29 set) come back unchanged, a status that
//! carries a Win32 code (`0x8007xxxx`, which is also the HRESULT form of a Win32 error, and `0xC001xxxx`)
//! gives its low 16 bits, and anything else is `ERROR_MR_MID_NOT_FOUND` (317).

use crate::status::NtStatus;

/// `ERROR_MR_MID_NOT_FOUND`: what Windows returns for a status it has no Win32 error for.
pub(crate) const ERROR_MR_MID_NOT_FOUND: u32 = 317;

/// `(status, Win32 error)`, by status value.
const TABLE: &[(u32, u32)] = &[
    (0x8000_0002, 998),  // STATUS_DATATYPE_MISALIGNMENT → ERROR_NOACCESS
    (0x8000_0005, 234),  // STATUS_BUFFER_OVERFLOW → ERROR_MORE_DATA
    (0xC000_0001, 31),   // STATUS_UNSUCCESSFUL → ERROR_GEN_FAILURE
    (0xC000_0005, 998),  // STATUS_ACCESS_VIOLATION → ERROR_NOACCESS
    (0xC000_0008, 6),    // STATUS_INVALID_HANDLE → ERROR_INVALID_HANDLE
    (0xC000_000B, 87),   // STATUS_INVALID_CID → ERROR_INVALID_PARAMETER
    (0xC000_000D, 87),   // STATUS_INVALID_PARAMETER → ERROR_INVALID_PARAMETER
    (0xC000_0017, 8),    // STATUS_NO_MEMORY → ERROR_NOT_ENOUGH_MEMORY
    (0xC000_0022, 5),    // STATUS_ACCESS_DENIED → ERROR_ACCESS_DENIED
    (0xC000_0023, 122),  // STATUS_BUFFER_TOO_SMALL → ERROR_INSUFFICIENT_BUFFER
    (0xC000_0024, 6),    // STATUS_OBJECT_TYPE_MISMATCH → ERROR_INVALID_HANDLE
    (0xC000_0061, 1314), // STATUS_PRIVILEGE_NOT_HELD → ERROR_PRIVILEGE_NOT_HELD
    (0xC000_009A, 1450), // STATUS_INSUFFICIENT_RESOURCES → ERROR_NO_SYSTEM_RESOURCES
    (0xC000_00B7, 317),  // STATUS_PROFILING_NOT_STARTED → (none in Win32)
    (0xC000_00B8, 317),  // STATUS_PROFILING_NOT_STOPPED → (none in Win32)
    (0xC000_00BB, 50),   // STATUS_NOT_SUPPORTED → ERROR_NOT_SUPPORTED
    (0xC000_00D3, 317),  // STATUS_PROFILING_AT_LIMIT → (none in Win32)
    (0xC000_00E5, 1359), // STATUS_INTERNAL_ERROR → ERROR_INTERNAL_ERROR
    (0xC000_00F5, 87),   // STATUS_INVALID_PARAMETER_7 → ERROR_INVALID_PARAMETER
    (0xC000_0225, 1168), // STATUS_NOT_FOUND → ERROR_NOT_FOUND
];

impl NtStatus {
    /// The Win32 error code Windows' `RtlNtStatusToDosError` gives this status (`GetLastError` values:
    /// `ERROR_INVALID_HANDLE` = 6 for `STATUS_INVALID_HANDLE`, ...). A status with no Win32 equivalent, as the
    /// three profiling statuses, gives `ERROR_MR_MID_NOT_FOUND` (317), as on Windows.
    ///
    /// ```
    /// use ntprofile::NtStatus;
    ///
    /// assert_eq!(NtStatus::SUCCESS.to_dos_error(), 0);
    /// assert_eq!(NtStatus::INVALID_HANDLE.to_dos_error(), 6);
    /// assert_eq!(NtStatus::ACCESS_VIOLATION.to_dos_error(), 998);
    /// assert_eq!(NtStatus::PROFILING_NOT_STARTED.to_dos_error(), 317);
    /// // A Win32 error carried in a status (NTSTATUS_FROM_WIN32, HRESULT_FROM_WIN32) comes back out.
    /// assert_eq!(NtStatus(0x8007_0005u32 as i32).to_dos_error(), 5);
    /// ```
    pub fn to_dos_error(self) -> u32 {
        let mut raw = self.as_u32();
        // Success and customer-defined values are their own code.
        if raw == 0 || raw & 0x2000_0000 != 0 {
            return raw;
        }
        // The reserved bit 28 does not change an error's meaning: 0xDxxxxxxx reads as 0xCxxxxxxx.
        if raw >> 28 == 0xD {
            raw &= !0x1000_0000;
        }
        if let Ok(i) = TABLE.binary_search_by_key(&raw, |&(status, _)| status) {
            return TABLE[i].1;
        }
        match raw >> 16 {
            0x8007 | 0xC001 => raw & 0xFFFF,
            _ => ERROR_MR_MID_NOT_FOUND,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_the_binary_search() {
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn every_status_of_the_crate_is_in_the_table() {
        for (value, _) in TABLE {
            assert!(NtStatus(*value as i32).message().starts_with("STATUS_"));
        }
        for s in [
            NtStatus::DATATYPE_MISALIGNMENT,
            NtStatus::BUFFER_OVERFLOW,
            NtStatus::ACCESS_VIOLATION,
            NtStatus::INVALID_HANDLE,
            NtStatus::INVALID_CID,
            NtStatus::INVALID_PARAMETER,
            NtStatus::ACCESS_DENIED,
            NtStatus::BUFFER_TOO_SMALL,
            NtStatus::OBJECT_TYPE_MISMATCH,
            NtStatus::PRIVILEGE_NOT_HELD,
            NtStatus::INSUFFICIENT_RESOURCES,
            NtStatus::PROFILING_NOT_STARTED,
            NtStatus::PROFILING_NOT_STOPPED,
            NtStatus::NOT_SUPPORTED,
            NtStatus::PROFILING_AT_LIMIT,
            NtStatus::INTERNAL_ERROR,
            NtStatus::INVALID_PARAMETER_7,
            NtStatus::NOT_FOUND,
        ] {
            assert!(
                TABLE.iter().any(|(v, _)| *v == s.as_u32()),
                "{s} has no entry"
            );
        }
    }
}
