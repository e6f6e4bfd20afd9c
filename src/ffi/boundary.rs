//! What every export shares: the `HANDLE` type, the pseudo-handles `NtCurrentProcess()` and
//! `NtCurrentThread()`, and the panic boundary (`catch_unwind` → `STATUS_INTERNAL_ERROR`).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::status::NtStatus;

/// `HANDLE`.
pub type Handle = *mut c_void;

/// `NtCurrentProcess()`.
pub(crate) const CURRENT_PROCESS: usize = usize::MAX;
/// `NtCurrentThread()`.
pub(crate) const CURRENT_THREAD: usize = usize::MAX - 1;

/// The value a `HANDLE` argument stands for: only its low 32 bits count, sign-extended (see
/// `handles::significant`), so a handle kept in 32 bits reaches the same object and `(HANDLE)(LONG)-1` is
/// `NtCurrentProcess()`.
pub(crate) fn handle_arg(handle: Handle) -> usize {
    crate::handles::significant(handle as usize)
}

/// Run `f` behind the panic boundary.
pub(crate) fn boundary(f: impl FnOnce() -> Result<(), NtStatus>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NtStatus::SUCCESS.0,
        Ok(Err(status)) => status.0,
        Err(_) => NtStatus::INTERNAL_ERROR.0,
    }
}
