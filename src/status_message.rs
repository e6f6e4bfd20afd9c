//! What each status means, in one sentence: the text behind [`NtStatus::message`] and the C export
//! `NtprofileStatusMessage`. Pure data, no allocation: every text is a static NUL-terminated string.

use std::ffi::CStr;

use crate::status::NtStatus;

/// `(value, text)`: the statuses the library returns, plus the common Windows statuses a ported program may pass
/// along (`STATUS_UNSUCCESSFUL`, `STATUS_NO_MEMORY`, `STATUS_NOT_FOUND`). Each text starts with the status's NT
/// name.
const MESSAGES: &[(u32, &CStr)] = &[
    (0x0000_0000, c"STATUS_SUCCESS: the call succeeded"),
    (
        0x8000_0002,
        c"STATUS_DATATYPE_MISALIGNMENT: Buffer (or the GROUP_AFFINITY array) is not aligned on 4 bytes",
    ),
    (
        0x8000_0005,
        c"STATUS_BUFFER_OVERFLOW: ProfileBase + ProfileSize wraps past the top of the address space",
    ),
    (0xC000_0001, c"STATUS_UNSUCCESSFUL: the operation failed"),
    (
        0xC000_0005,
        c"STATUS_ACCESS_VIOLATION: a pointer argument is NULL, unmapped or not writable (or not readable)",
    ),
    (
        0xC000_0008,
        c"STATUS_INVALID_HANDLE: the handle is not open (never created, closed, or inherited across fork)",
    ),
    (
        0xC000_000B,
        c"STATUS_INVALID_CID: no process has the pid given in ClientId->UniqueProcess",
    ),
    (
        0xC000_000D,
        c"STATUS_INVALID_PARAMETER: an argument is out of range (BucketSize outside 2..31, a processor mask naming no online CPU, a bad GROUP_AFFINITY record, a jitter above 90 %, ...)",
    ),
    (
        0xC000_0017,
        c"STATUS_NO_MEMORY: not enough memory to complete the operation",
    ),
    (
        0xC000_0022,
        c"STATUS_ACCESS_DENIED: the caller may not profile that process (the ptrace access check or CAP_PERFMON)",
    ),
    (
        0xC000_0023,
        c"STATUS_BUFFER_TOO_SMALL: the buffer cannot hold one ULONG counter per bucket of the range (or the listing)",
    ),
    (
        0xC000_0024,
        c"STATUS_OBJECT_TYPE_MISMATCH: the handle is of the wrong kind (a process handle where a profile is expected, or the reverse)",
    ),
    (
        0xC000_0061,
        c"STATUS_PRIVILEGE_NOT_HELD: global and kernel-range profiles need CAP_PERFMON, CAP_SYS_ADMIN or a lower kernel.perf_event_paranoid",
    ),
    (
        0xC000_009A,
        c"STATUS_INSUFFICIENT_RESOURCES: memory, file descriptors or locked ring memory ran out (raise the hard RLIMIT_NOFILE, ulimit -Hn; or RLIMIT_MEMLOCK, ulimit -l, or kernel.perf_event_mlock_kb)",
    ),
    (
        0xC000_00B7,
        c"STATUS_PROFILING_NOT_STARTED: the profile is not started",
    ),
    (
        0xC000_00B8,
        c"STATUS_PROFILING_NOT_STOPPED: the profile is already started",
    ),
    (
        0xC000_00BB,
        c"STATUS_NOT_SUPPORTED: the profile source cannot be sampled on this machine (no such perf event, or no hardware PMU)",
    ),
    (
        0xC000_00D3,
        c"STATUS_PROFILING_AT_LIMIT: too many profiles are started at once (8192 per online processor)",
    ),
    (
        0xC000_00E5,
        c"STATUS_INTERNAL_ERROR: the library failed internally (a caught panic or an unexpected kernel error)",
    ),
    (
        0xC000_00F5,
        c"STATUS_INVALID_PARAMETER_7: BufferSize is 0",
    ),
    (
        0xC000_0225,
        c"STATUS_NOT_FOUND: no module or function of that name",
    ),
];

/// The text of a success value the table does not name.
const UNKNOWN_SUCCESS: &CStr = c"a success or informational status that ntprofile does not define";
/// The text of a warning value (`0x8xxxxxxx`) the table does not name.
const UNKNOWN_WARNING: &CStr = c"a warning status that ntprofile does not define";
/// The text of an error value (`0xCxxxxxxx`) the table does not name.
const UNKNOWN_ERROR: &CStr = c"an error status that ntprofile does not define";

impl NtStatus {
    /// What the status means, as a static NUL-terminated string (`NtprofileStatusMessage` returns it to C).
    /// Every value gets a text: one the table does not know gets a generic one for its severity.
    ///
    /// ```
    /// use ntprofile::NtStatus;
    ///
    /// let text = NtStatus::BUFFER_TOO_SMALL.message_cstr();
    /// assert!(text.to_str().unwrap().starts_with("STATUS_BUFFER_TOO_SMALL: "));
    /// ```
    pub fn message_cstr(self) -> &'static CStr {
        let raw = self.as_u32();
        match MESSAGES.iter().find(|(value, _)| *value == raw) {
            Some((_, text)) => text,
            None if self.is_success() => UNKNOWN_SUCCESS,
            None if raw >> 30 == 0b10 => UNKNOWN_WARNING,
            None => UNKNOWN_ERROR,
        }
    }

    /// What the status means, in one sentence that starts with its NT name (the text C callers get from
    /// `NtprofileStatusMessage`).
    ///
    /// ```
    /// use ntprofile::NtStatus;
    ///
    /// assert!(NtStatus::NOT_SUPPORTED.message().contains("cannot be sampled on this machine"));
    /// assert_eq!(NtStatus(0xC0FF_EE00u32 as i32).message(), "an error status that ntprofile does not define");
    /// ```
    pub fn message(self) -> &'static str {
        // Every text above is ASCII.
        self.message_cstr().to_str().unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_status_has_its_own_text() {
        let ranges = [
            0u32..=0x100,
            0x8000_0000..=0x8000_0100,
            0xC000_0000..=0xC000_0400,
        ];
        let mut named = 0;
        for raw in ranges.into_iter().flatten() {
            let status = NtStatus(raw as i32);
            if let Some(name) = status.name() {
                named += 1;
                let text = status.message();
                assert!(
                    text.starts_with(&format!("{name}: ")),
                    "{name} has no text of its own: {text:?}"
                );
            }
        }
        assert!(named >= 18, "only {named} named statuses found");
    }

    #[test]
    fn texts_are_distinct_and_unknown_values_get_the_generic_text() {
        for (i, (a, ta)) in MESSAGES.iter().enumerate() {
            for (b, tb) in &MESSAGES[i + 1..] {
                assert!(a != b && ta != tb, "duplicate entry for 0x{a:08X}");
            }
        }
        assert_eq!(NtStatus(0x1234).message_cstr(), UNKNOWN_SUCCESS);
        assert_eq!(
            NtStatus(0x8000_0777u32 as i32).message_cstr(),
            UNKNOWN_WARNING
        );
        assert_eq!(
            NtStatus(0xC000_0777u32 as i32).message_cstr(),
            UNKNOWN_ERROR
        );
        assert_eq!(NtStatus(0x4000_0000).message_cstr(), UNKNOWN_SUCCESS);
    }
}
