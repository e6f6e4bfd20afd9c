//! Spawning and attaching: start the command stopped right after its `execve` (before its first instruction),
//! let it go, wait for its real exit status; SIGINT, SIGTERM and SIGHUP read from a signalfd.

use std::os::unix::process::CommandExt;

use nix::sys::ptrace;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

use super::{EXIT_FAILURE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, Failure};

/// SIGINT, SIGTERM and SIGHUP, blocked in ntprof and read from a signalfd: none of them ends ntprof before it
/// has written what it recorded.
pub fn block_signals() -> Result<(SigSet, SignalFd), Failure> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set.thread_block().map_err(|e| {
        Failure::new(
            EXIT_FAILURE,
            format!("cannot block SIGINT, SIGTERM and SIGHUP: {e}"),
        )
    })?;
    let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot create a signalfd: {e}")))?;
    Ok((set, fd))
}

/// A signal read from the signalfd: its number and whether a process (not the terminal) sent it.
pub fn pending_signal(fd: &SignalFd) -> Option<(Signal, bool)> {
    let info = fd.read_signal().ok()??;
    let sig = Signal::try_from(info.ssi_signo as i32).ok()?;
    // SI_USER (0) / SI_QUEUE / SI_TKILL: sent by kill(); a terminal's Ctrl-C comes from the kernel (SI_KERNEL).
    let from_process = info.ssi_code <= 0;
    Some((sig, from_process))
}

/// Whether a signal ntprof received is passed on to the command it runs. One that a process sent (kill) is:
/// it was meant for the run. One the kernel sent is not, as it reached the command too (a Ctrl-C goes to the
/// terminal's whole foreground process group), except a hang-up sent to ntprof as its session's leader (a
/// terminal that went away): the kernel sends that to the session leader alone, so the command, which shares
/// ntprof's session, hears of it only from ntprof.
pub fn forwarded(sig: Signal, from_process: bool) -> bool {
    from_process
        || (sig == Signal::SIGHUP && nix::unistd::getsid(None) == Ok(nix::unistd::getpid()))
}

/// The exit status of a finished child, shell-style.
pub fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// How a process ended, in words: `exit status N`, `killed by signal N`.
pub fn ending(code: i32) -> String {
    if code > 128 {
        format!("killed by signal {}", code - 128)
    } else {
        format!("exit status {code}")
    }
}

/// The failure of a command that could not be started, with the shell's status.
pub fn spawn_error(cmd: &str, err: &std::io::Error) -> Failure {
    match err.kind() {
        std::io::ErrorKind::NotFound => Failure::new(
            EXIT_NOT_FOUND,
            if cmd.contains('/') {
                format!("{cmd}: no such file")
            } else {
                format!("{cmd}: command not found (give a path, e.g. ./{cmd}, or check $PATH)")
            },
        ),
        std::io::ErrorKind::PermissionDenied => Failure::new(
            EXIT_NOT_EXECUTABLE,
            format!("{cmd}: permission denied (is it executable? chmod +x {cmd})"),
        ),
        _ => Failure::new(EXIT_NOT_EXECUTABLE, format!("cannot run {cmd}: {err}")),
    }
}

/// A command started under `PTRACE_TRACEME`, stopped after its `execve`.
pub struct Stopped {
    /// Its pid.
    pub pid: Pid,
}

/// Start `argv` stopped right after its `execve`, before its first instruction (`traced`), or simply start it.
pub fn start(argv: &[String], traced: bool) -> Result<Stopped, Failure> {
    let cmd = &argv[0];
    let mut command = std::process::Command::new(cmd);
    command.args(&argv[1..]);
    if traced {
        // SAFETY: the closure runs in the forked child before execve and calls only async-signal-safe functions
        // (ptrace and sigprocmask system calls); it allocates nothing and takes no lock.
        unsafe {
            command.pre_exec(|| {
                ptrace::traceme().map_err(std::io::Error::from)?;
                SigSet::all()
                    .thread_unblock()
                    .map_err(std::io::Error::from)?;
                Ok(())
            });
        }
    } else {
        // SAFETY: runs in the forked child before execve; sigprocmask only (async-signal-safe).
        unsafe {
            command.pre_exec(|| SigSet::all().thread_unblock().map_err(std::io::Error::from));
        }
    }
    let child = command.spawn().map_err(|e| spawn_error(cmd, &e))?;
    let pid = Pid::from_raw(child.id() as i32);
    if traced {
        match waitpid(pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
            Ok(st) => {
                return Err(Failure::new(
                    EXIT_FAILURE,
                    format!("{cmd} did not stop after execve as traced programs do ({st:?})"),
                ));
            }
            Err(e) => return Err(Failure::new(EXIT_FAILURE, format!("waitpid: {e}"))),
        }
    }
    Ok(Stopped { pid })
}

impl Stopped {
    /// Kill it (the run failed before it started) and collect it.
    pub fn kill(&self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }

    /// Let it run: detach, so that its first instruction runs now and `waitpid` sees its real exit status.
    pub fn resume(&self) -> Result<(), Failure> {
        ptrace::detach(self.pid, None).map_err(|e| {
            Failure::new(
                EXIT_FAILURE,
                format!("cannot start the command (ptrace detach): {e}"),
            )
        })
    }
}

/// User and system CPU seconds of the terminated children waited for (the command and the descendants it
/// waited for).
pub fn children_cpu() -> Option<(f64, f64)> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).ok()?;
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    Some((s(u.user_time()), s(u.system_time())))
}

/// User and system CPU seconds ntprof has used so far (every thread of it).
pub fn own_cpu() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    s(u.user_time()) + s(u.system_time())
}

/// User and system CPU seconds of a running process (`/proc/PID/stat`, in the kernel's 100 Hz user ticks).
pub fn process_cpu(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command is in parentheses and may hold spaces: count fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let tick = |i: usize| f.get(i)?.parse::<f64>().ok().map(|t| t / 100.0);
    // Fields 14 (utime) and 15 (stime) of stat(5); `rest` starts at field 3.
    Some((tick(11)?, tick(12)?))
}
