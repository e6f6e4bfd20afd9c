//! Reading where a blocked thread waits, without stopping it: its system call, user stack pointer and
//! instruction pointer (`/proc/PID/task/TID/syscall`) and a copy of its user stack (`process_vm_readv`) — what
//! an off-CPU profiler needs at a thread's switch-out when the kernel does not sample there for it (an
//! unprivileged user: `kernel.perf_event_paranoid` 2 refuses the kernel-side context-switch samples).
//!
//! Both need the right to trace the thread (`PTRACE_MODE_ATTACH`: the same user, and `kernel.yama.ptrace_scope`
//! allowing it), not a tracer: the thread is not stopped, signalled or attached, and a debugger may trace it
//! meanwhile. The kernel reads the registers saved at the thread's kernel entry only while it is off CPU and
//! checks it did not run during that read; the stack is copied afterwards, so the thread's run counts are read
//! before and after the whole reading, and a thread that ran in between (its copy may hold two moments of its
//! stack) is reported as running: a reading describes one wait. The frame pointer is not among what the file
//! gives: the stack is unwound from the instruction and stack pointers with the modules' CFI.
//!
//! Trade-off against `PTRACE_SEIZE` + `PTRACE_INTERRUPT` + `PTRACE_GETREGS` (every register): that stops the
//! thread, interrupts its system call (restarted afterwards, but a wait is cut in two and its timing
//! disturbed), costs several system calls and two switches per reading, and excludes a debugger. The reading
//! here costs four system calls and never changes what the thread does.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::io::IoSliceMut;
use std::os::unix::fs::FileExt;

use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::Pid;

use super::thread_state::{RunCount, Unreadable, parse_syscall, unreadable};
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

/// Reads blocked threads; keeps each thread's `/proc` files open between readings (a reading is then four
/// system calls: the thread's run counts, its syscall file, one `process_vm_readv` per 4 MiB of stack, its
/// run counts again), for up to 512 threads at a time (two descriptors each).
#[derive(Debug, Default)]
pub struct BlockedThreadReader {
    files: HashMap<(u32, u32), ThreadFiles>,
    /// The pieces of a stack copy, kept from reading to reading.
    pieces: Vec<RemoteIoVec>,
}

/// The open files of one thread.
#[derive(Debug)]
struct ThreadFiles {
    /// `/proc/PID/task/TID/syscall`.
    syscall: File,
    /// Its run counts, read before and after the stack copy.
    runs: RunCount,
}

/// The pages a stack copy is split into, so that a copy that runs past the stack's end stops there.
const PAGE: u64 = 4096;
/// The most threads whose files a reader keeps open (two descriptors each): past it they are all closed and
/// opened again as needed, so that a program that creates and ends threads by the thousand cannot exhaust the
/// caller's descriptors with the files of threads long gone.
const MAX_OPEN: usize = 512;
/// The most iovecs one `process_vm_readv` takes (the kernel's `UIO_MAXIOV`): 4 MiB of pages per call.
const MAX_PIECES: usize = 1024;

impl BlockedThreadReader {
    /// A reader with no file open.
    pub fn new() -> BlockedThreadReader {
        BlockedThreadReader::default()
    }

    /// Read thread `tid` of process `pid`: `Ok(None)` when it is running (or ran during the reading: the
    /// wait it was in is over; the calling thread itself is running), else where it waits, with up to
    /// `stack.len()` bytes of its user stack copied into `stack` (fewer where the stack's mapping ends).
    ///
    /// A reading holds one wait: the thread's run counts (`/proc/PID/task/TID/schedstat`, which move whenever
    /// it is put on a CPU) are read before its syscall file and again after the stack copy, and a thread that
    /// ran in between — its stack copy may mix two moments — is reported as running.
    ///
    /// # Errors
    /// `STATUS_INVALID_CID` (no such thread: it exited, or exited and is not reaped yet — a zombie; or it is a
    /// kernel thread, which has no user state), `STATUS_ACCESS_DENIED` (the caller may not trace it),
    /// `STATUS_NOT_SUPPORTED` (a kernel without `CONFIG_HAVE_ARCH_TRACEHOOK`), `STATUS_INSUFFICIENT_RESOURCES`
    /// (no descriptor left).
    pub fn read(
        &mut self,
        pid: u32,
        tid: u32,
        stack: &mut [u8],
    ) -> Result<Option<BlockedThread>, Error> {
        // The calling thread's syscall file names the read of that very file: it is running.
        if pid == std::process::id() && tid == nix::unistd::gettid().as_raw() as u32 {
            return Ok(None);
        }
        let read = self.read_files(pid, tid, stack);
        if read.is_err() {
            self.files.remove(&(pid, tid));
        }
        read
    }

    fn read_files(
        &mut self,
        pid: u32,
        tid: u32,
        stack: &mut [u8],
    ) -> Result<Option<BlockedThread>, Error> {
        let BlockedThreadReader { files, pieces } = self;
        if files.len() >= MAX_OPEN && !files.contains_key(&(pid, tid)) {
            files.clear();
        }
        let files = match files.entry((pid, tid)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let open = |path: String| File::open(path).map_err(|e| io_error(&e, pid, tid));
                let syscall = open(format!("/proc/{pid}/task/{tid}/syscall"))?;
                let runs = RunCount::open(pid, tid).map_err(|e| io_error(&e, pid, tid))?;
                v.insert(ThreadFiles { syscall, runs })
            }
        };
        let before = files.runs.read().map_err(|e| io_error(&e, pid, tid))?;
        let mut text = [0u8; 256];
        let n = files
            .syscall
            .read_at(&mut text, 0)
            .map_err(|e| io_error(&e, pid, tid))?;
        let Some((syscall, args, sp, ip)) = parse_syscall(&text[..n]) else {
            return Ok(None);
        };
        // A zombie reads as "off CPU at 0"; a kernel thread as "system call 0 at 0".
        if sp == 0
            && ip == 0
            && let Some(why) = unreadable(pid, tid)
        {
            return Err(unreadable_error(why, pid, tid));
        }
        let stack_len = copy_stack(pieces, tid, sp, stack);
        if files.runs.misses_a_running_thread() {
            let mut again = [0u8; 256];
            let m = files
                .syscall
                .read_at(&mut again, 0)
                .map_err(|e| io_error(&e, pid, tid))?;
            if again[..m] != text[..n] {
                return Ok(None);
            }
        }
        if files.runs.read().map_err(|e| io_error(&e, pid, tid))? != before {
            return Ok(None);
        }
        Ok(Some(BlockedThread {
            syscall,
            args,
            regs: UserRegs { ip, sp, bp: 0 },
            stack_len,
        }))
    }

    /// Close the files of a thread that exited.
    pub fn forget(&mut self, pid: u32, tid: u32) {
        self.files.remove(&(pid, tid));
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
        // A zombie's and a kernel thread's files belong to root: say which it is rather than "denied".
        Some(libc::EACCES) | Some(libc::EPERM) => {
            if let Some(why) = unreadable(pid, tid) {
                return unreadable_error(why, pid, tid);
            }
            NtStatus::ACCESS_DENIED
        }
        _ => NtStatus::from_io(e),
    };
    Error::new(
        status,
        format!(
            "reading where thread {tid} of process {pid} waits (/proc/{pid}/task/{tid}/syscall): {e}"
        ),
    )
}

/// `STATUS_INVALID_CID` for a thread with no user state to read.
fn unreadable_error(why: Unreadable, pid: u32, tid: u32) -> Error {
    let detail = match why {
        Unreadable::Zombie => format!(
            "thread {tid} of process {pid} has exited and is not reaped yet (a zombie): it has no registers or \
             stack left to read"
        ),
        Unreadable::Kernel => format!(
            "thread {tid} of process {pid} is a kernel thread: it has no user registers or stack (a profile of \
             the kernel side sees kernel threads)"
        ),
    };
    Error::new(NtStatus::INVALID_CID, detail)
}

/// Copy the user stack of thread `tid` from `sp` into `out`, page by page so that the copy stops where the
/// mapping ends; the bytes copied (0 when none could be). The memory is reached through the thread itself, not
/// its process's id: a process whose main thread ended (`pthread_exit`) has no address space under that id.
fn copy_stack(pieces: &mut Vec<RemoteIoVec>, tid: u32, sp: u64, out: &mut [u8]) -> usize {
    let Ok(target) = i32::try_from(tid) else {
        return 0;
    };
    if sp == 0 {
        return 0;
    }
    let mut done = 0usize;
    let mut at = sp;
    while done < out.len() {
        pieces.clear();
        let mut left = (out.len() - done) as u64;
        while left > 0 && pieces.len() < MAX_PIECES {
            let piece = (PAGE - at % PAGE).min(left);
            let Some(next) = at.checked_add(piece) else {
                break;
            };
            pieces.push(RemoteIoVec {
                base: at as usize,
                len: piece as usize,
            });
            at = next;
            left -= piece;
        }
        let total: usize = pieces.iter().map(|r| r.len).sum();
        if total == 0 {
            break;
        }
        let mut local = [IoSliceMut::new(&mut out[done..done + total])];
        let n = process_vm_readv(Pid::from_raw(target), &mut local, pieces).unwrap_or(0);
        done += n;
        if n < total {
            break;
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_is_gone_is_an_invalid_cid() {
        let mut stack = [0u8; 64];
        let err = read_blocked_thread(u32::MAX - 1, u32::MAX - 1, &mut stack).unwrap_err();
        assert_eq!(err.status(), NtStatus::INVALID_CID);
    }
}
