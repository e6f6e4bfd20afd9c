//! What `/proc` tells about one thread for a blocked-thread reading: where it waits
//! (`/proc/PID/task/TID/syscall`), whether it ran between two moments (its scheduler counts), and why a thread
//! cannot be read at all (it exited and is a zombie, or it is a kernel thread: `/proc/PID/task/TID/stat`).

use std::fs::File;
use std::os::unix::fs::FileExt;

/// `PF_KTHREAD` in the flags field of `/proc/PID/task/TID/stat`: the task is a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Where a thread waits, as its syscall file says: (system call or `None` outside one, arguments, sp, ip).
pub(super) type Waiting = (Option<u64>, [u64; 6], u64, u64);

/// Parse `/proc/PID/task/TID/syscall`: `running`; `-1 SP PC` (off CPU outside a system call); `NR A1 .. A6 SP
/// PC`. `None` for `running` (or anything else).
pub(super) fn parse_syscall(text: &[u8]) -> Option<Waiting> {
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

/// Why a thread has no user state to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// It exited and waits to be reaped (a zombie): no registers, no address space.
    Zombie,
    /// A kernel thread: it never runs user code.
    Kernel,
}

/// Whether thread `tid` of `pid` is a zombie or a kernel thread, from its `stat` file (readable by everyone,
/// unlike the syscall file); `None` for a live user thread or when the file cannot be read.
pub(super) fn unreadable(pid: u32, tid: u32) -> Option<Unreadable> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    classify_stat(&stat)
}

/// The state (field 3) and flags (field 9) of a `stat` line, counted after the command's last `)` (the
/// command may hold spaces and parentheses).
fn classify_stat(stat: &str) -> Option<Unreadable> {
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?;
    let flags: u64 = fields.nth(5)?.parse().ok()?;
    if flags & PF_KTHREAD != 0 {
        Some(Unreadable::Kernel)
    } else if state == "Z" || state == "X" {
        Some(Unreadable::Zombie)
    } else {
        None
    }
}

/// How a thread's runs are counted, to tell whether it ran between two readings of the counts.
#[derive(Debug)]
pub(super) enum RunCount {
    /// `/proc/PID/task/TID/schedstat`: the CPU time it used, the time it waited on a run queue and the number
    /// of times it was put on a CPU. Each of them moves only when the thread is woken or runs.
    Schedstat(File),
    /// `/proc/PID/task/TID/status` (a kernel without scheduler statistics): its voluntary and involuntary
    /// context switches, which move when it leaves a CPU — so a thread still running when they are read is
    /// seen by reading its syscall file again.
    Status(File),
}

impl RunCount {
    /// Open the counts of thread `tid` of `pid`: the scheduler statistics where the kernel has them, else the
    /// switch counts.
    pub(super) fn open(pid: u32, tid: u32) -> std::io::Result<RunCount> {
        match File::open(format!("/proc/{pid}/task/{tid}/schedstat")) {
            Ok(f) => Ok(RunCount::Schedstat(f)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                File::open(format!("/proc/{pid}/task/{tid}/status")).map(RunCount::Status)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a thread running when the counts are read escapes them (they count switch-outs only).
    pub(super) fn misses_a_running_thread(&self) -> bool {
        matches!(self, RunCount::Status(_))
    }

    /// The counts now: two numbers that change whenever the thread runs (or, for the switch counts, has run
    /// and left the CPU).
    pub(super) fn read(&self) -> std::io::Result<(u64, u64, u64)> {
        let (file, size) = match self {
            RunCount::Schedstat(f) => (f, 128),
            RunCount::Status(f) => (f, 4096),
        };
        let mut buf = [0u8; 4096];
        // One read from the start: the kernel writes these small files whole into a large enough buffer.
        let n = file.read_at(&mut buf[..size], 0)?;
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("");
        let parsed = match self {
            RunCount::Schedstat(_) => parse_schedstat(text),
            RunCount::Status(_) => parse_switches(text),
        };
        parsed.ok_or_else(|| std::io::Error::from_raw_os_error(libc::EIO))
    }
}

/// `RUN_NS WAIT_NS TIMESLICES` of a schedstat file.
fn parse_schedstat(text: &str) -> Option<(u64, u64, u64)> {
    let mut f = text.split_ascii_whitespace().map(|s| s.parse().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

/// The `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` lines of a status file.
fn parse_switches(text: &str) -> Option<(u64, u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .parse()
            .ok()
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_of_the_syscall_file_parse() {
        assert_eq!(parse_syscall(b"running\n"), None);
        assert_eq!(
            parse_syscall(b"-1 0x7ffd0 0x401000\n"),
            Some((None, [0; 6], 0x7ffd0, 0x401000))
        );
        assert_eq!(
            parse_syscall(b"230 0x0 0x0 0x7ffe8 0x7ffe9 0x0 0x0 0x7ffe0 0x7f0435001503\n"),
            Some((
                Some(230),
                [0, 0, 0x7ffe8, 0x7ffe9, 0, 0],
                0x7ffe0,
                0x7f0435001503
            ))
        );
        assert_eq!(parse_syscall(b"17 0x4\n"), None, "too few fields");
        assert_eq!(parse_syscall(b""), None);
    }

    #[test]
    fn stat_lines_tell_zombies_and_kernel_threads() {
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 24";
        assert_eq!(classify_stat(kthread), Some(Unreadable::Kernel));
        let zombie = "77 (a) b (c)) Z 1 77 77 0 -1 4194572 0 0 0 0";
        assert_eq!(classify_stat(zombie), Some(Unreadable::Zombie));
        let sleeping = "78 (sleep) S 1 78 78 0 -1 4194304 0 0 0 0";
        assert_eq!(classify_stat(sleeping), None);
        assert_eq!(classify_stat("79 (cut"), None);
    }

    #[test]
    fn run_counts_parse() {
        assert_eq!(parse_schedstat("1893 1309 4\n"), Some((1893, 1309, 4)));
        assert_eq!(parse_schedstat("1893 x 4\n"), None);
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_switches(status), Some((12, 3, 0)));
        assert_eq!(parse_switches("Name:\tx\n"), None);
    }

    #[test]
    fn this_threads_counts_move_as_it_runs_in_both_forms() {
        let (pid, tid) = (std::process::id(), nix::unistd::gettid().as_raw() as u32);
        let sched = RunCount::open(pid, tid).unwrap();
        let status =
            RunCount::Status(File::open(format!("/proc/{pid}/task/{tid}/status")).unwrap());
        assert!(
            !sched.misses_a_running_thread()
                || !std::path::Path::new("/proc/self/schedstat").exists()
        );
        assert!(status.misses_a_running_thread());
        for counts in [sched, status] {
            let before = counts.read().unwrap();
            // A sleep is a voluntary switch out and a switch back in: both forms move.
            std::thread::sleep(std::time::Duration::from_millis(2));
            assert_ne!(counts.read().unwrap(), before, "{counts:?}");
        }
    }
}
