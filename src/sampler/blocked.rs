//! Reading where a blocked thread waits, without stopping it: its system call, user stack pointer and
//! instruction pointer (`/proc/PID/task/TID/syscall`) and a copy of its user stack (`process_vm_readv`) — what
//! an off-CPU profiler needs at a thread's switch-out when the kernel does not sample there for it (an
//! unprivileged user: `kernel.perf_event_paranoid` 2 refuses the kernel-side context-switch samples).
//!
//! Both need the right to trace the thread (`PTRACE_MODE_ATTACH`: the same user, and `kernel.yama.ptrace_scope`
//! allowing it), not a tracer: the thread is not stopped, signalled or attached, and a debugger may trace it
//! meanwhile. The kernel reads the registers saved at the thread's kernel entry only while it is off CPU and
//! checks it did not run during the read, so a reading describes one wait. The frame pointer is not among what
//! the file gives: the stack is unwound from the instruction and stack pointers with the modules' CFI.
//!
//! Trade-off against `PTRACE_SEIZE` + `PTRACE_INTERRUPT` + `PTRACE_GETREGS` (every register): that stops the
//! thread, interrupts its system call (restarted afterwards, but a wait is cut in two and its timing
//! disturbed), costs several system calls and two switches per reading, and excludes a debugger. The reading
//! here costs two system calls and never changes what the thread does.

use std::collections::HashMap;
use std::fs::File;
use std::io::IoSliceMut;
use std::os::unix::fs::FileExt;

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;

use crate::error::Error;
use crate::perf::records::UserRegs;
use crate::status::NtStatus;

/// Where a blocked thread waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockedThread {
    /// The system call it is blocked in (the architecture's number: 230 is `clock_nanosleep` on x86-64), or
    /// `None` when it is off CPU outside a system call (preempted in user space, or in a page fault).
    pub syscall: Option<u64>,
    /// The system call's six arguments (0 without a system call).
    pub args: [u64; 6],
    /// The user registers at its kernel entry: `ip` (the instruction after the system call) and `sp`; `bp` is
    /// 0 (not readable without stopping the thread).
    pub regs: UserRegs,
    /// Bytes of the user stack copied from `regs.sp` upward into the caller's buffer.
    pub stack_len: usize,
}

/// Reads blocked threads; keeps each thread's `/proc` file open between readings (a reading is then two system
/// calls: one `pread`, one `process_vm_readv`).
#[derive(Debug, Default)]
pub struct BlockedThreadReader {
    files: HashMap<(u32, u32), File>,
}

/// The pages a stack copy is split into, so that a copy that runs past the stack's end stops there.
const PAGE: u64 = 4096;
/// The most iovecs one copy uses.
const MAX_PIECES: usize = 64;

impl BlockedThreadReader {
    /// A reader with no file open.
    pub fn new() -> BlockedThreadReader {
        BlockedThreadReader::default()
    }

    /// Read thread `tid` of process `pid`: `Ok(None)` when it is running (or ran during the reading: the
    /// wait it was in is over), else where it waits, with up to `stack.len()` bytes of its user stack copied
    /// into `stack` (fewer where the stack's mapping ends).
    ///
    /// # Errors
    /// `STATUS_INVALID_CID` (no such thread: it exited), `STATUS_ACCESS_DENIED` (the caller may not trace it),
    /// `STATUS_NOT_SUPPORTED` (a kernel without `CONFIG_HAVE_ARCH_TRACEHOOK`), `STATUS_INSUFFICIENT_RESOURCES`
    /// (no descriptor left).
    pub fn read(
        &mut self,
        pid: u32,
        tid: u32,
        stack: &mut [u8],
    ) -> Result<Option<BlockedThread>, Error> {
        let mut text = [0u8; 256];
        let n = match self.syscall_text(pid, tid, &mut text) {
            Ok(n) => n,
            Err(e) => {
                self.files.remove(&(pid, tid));
                return Err(e);
            }
        };
        let Some((syscall, args, sp, ip)) = parse(&text[..n]) else {
            return Ok(None);
        };
        let regs = UserRegs { ip, sp, bp: 0 };
        let stack_len = copy_stack(pid, sp, stack);
        Ok(Some(BlockedThread {
            syscall,
            args,
            regs,
            stack_len,
        }))
    }

    /// Close the file of a thread that exited.
    pub fn forget(&mut self, pid: u32, tid: u32) {
        self.files.remove(&(pid, tid));
    }

    fn syscall_text(&mut self, pid: u32, tid: u32, text: &mut [u8]) -> Result<usize, Error> {
        let file = match self.files.entry((pid, tid)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let f = File::open(format!("/proc/{pid}/task/{tid}/syscall"))
                    .map_err(|e| io_error(&e, pid, tid))?;
                v.insert(f)
            }
        };
        file.read_at(text, 0).map_err(|e| io_error(&e, pid, tid))
    }
}

/// Read thread `tid` of process `pid` once (opening and closing its file): see [`BlockedThreadReader::read`].
///
/// ```
/// // A child that sleeps: it is blocked in a system call, and its stack is readable by its parent's user.
/// let mut child = std::process::Command::new("sleep").arg("2").spawn()?;
/// std::thread::sleep(std::time::Duration::from_millis(200));
/// let mut stack = vec![0u8; 4096];
/// let blocked = ntprofile::read_blocked_thread(child.id(), child.id(), &mut stack)?;
/// let blocked = blocked.expect("sleep sleeps");
/// assert!(blocked.syscall.is_some() && blocked.regs.sp != 0 && blocked.stack_len > 0);
/// child.kill()?;
/// child.wait()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// As [`BlockedThreadReader::read`].
pub fn read_blocked_thread(
    pid: u32,
    tid: u32,
    stack: &mut [u8],
) -> Result<Option<BlockedThread>, Error> {
    BlockedThreadReader::new().read(pid, tid, stack)
}

fn io_error(e: &std::io::Error, pid: u32, tid: u32) -> Error {
    let status = match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => NtStatus::INVALID_CID,
        Some(libc::EACCES) | Some(libc::EPERM) => NtStatus::ACCESS_DENIED,
        _ => NtStatus::from_io(e),
    };
    Error::new(
        status,
        format!(
            "reading where thread {tid} of process {pid} waits (/proc/{pid}/task/{tid}/syscall): {e}"
        ),
    )
}

/// Parse `/proc/PID/task/TID/syscall`: `running`; `-1 SP PC` (off CPU outside a system call); `NR A1 .. A6 SP
/// PC`. `None` for `running` (or anything else).
fn parse(text: &[u8]) -> Option<(Option<u64>, [u64; 6], u64, u64)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let nr: i64 = fields.next()?.parse().ok()?;
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let rest: Vec<u64> = fields.map(hex).collect::<Option<Vec<u64>>>()?;
    match (nr, rest.as_slice()) {
        (-1, &[sp, ip]) => Some((None, [0; 6], sp, ip)),
        (nr, &[a, b, c, d, e, f, sp, ip]) if nr >= 0 => {
            Some((Some(nr as u64), [a, b, c, d, e, f], sp, ip))
        }
        _ => None,
    }
}

/// Copy the user stack of `pid` from `sp` into `out`, page by page so that the copy stops where the mapping
/// ends; the bytes copied (0 when none could be).
fn copy_stack(pid: u32, sp: u64, out: &mut [u8]) -> usize {
    if out.is_empty() || sp == 0 {
        return 0;
    }
    let mut remote = Vec::with_capacity(MAX_PIECES);
    let (mut at, mut left) = (sp, out.len() as u64);
    while left > 0 && remote.len() < MAX_PIECES {
        let piece = (PAGE - at % PAGE).min(left);
        remote.push(RemoteIoVec {
            base: at as usize,
            len: piece as usize,
        });
        at += piece;
        left -= piece;
    }
    let total: usize = remote.iter().map(|r| r.len).sum();
    let mut local = [IoSliceMut::new(&mut out[..total])];
    process_vm_readv(Pid::from_raw(pid as i32), &mut local, &remote).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_of_the_syscall_file_parse() {
        assert_eq!(parse(b"running\n"), None);
        assert_eq!(
            parse(b"-1 0x7ffd0 0x401000\n"),
            Some((None, [0; 6], 0x7ffd0, 0x401000))
        );
        assert_eq!(
            parse(b"230 0x0 0x0 0x7ffe8 0x7ffe9 0x0 0x0 0x7ffe0 0x7f0435001503\n"),
            Some((
                Some(230),
                [0, 0, 0x7ffe8, 0x7ffe9, 0, 0],
                0x7ffe0,
                0x7f0435001503
            ))
        );
        assert_eq!(parse(b"17 0x4\n"), None, "too few fields");
        assert_eq!(parse(b""), None);
    }

    #[test]
    fn a_thread_that_is_gone_is_an_invalid_cid() {
        let mut stack = [0u8; 64];
        let err = read_blocked_thread(u32::MAX - 1, u32::MAX - 1, &mut stack).unwrap_err();
        assert_eq!(err.status(), NtStatus::INVALID_CID);
    }
}
