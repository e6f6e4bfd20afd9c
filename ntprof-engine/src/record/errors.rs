//! The failures of a run explained: the library's errors with the fix, the kernel privilege's message.

use ntprofile::NtStatus;

use super::{EXIT_FAILURE, EXIT_USAGE, Failure};

/// The message for a kernel profile of a command (`record --kernel -- CMD`) refused for lack of privilege.
pub fn kernel_privilege_message() -> String {
    privilege_message("profiling the kernel side of a command", 1)
}

/// The message for a system-wide profile (`record --kernel`, `top --kernel`, a privileged `--cgroup`) refused
/// for lack of privilege: events on every processor need `perf_event_paranoid` 0 or less, one process's kernel
/// samples 1 or less.
pub fn system_privilege_message() -> String {
    privilege_message("profiling the whole system (every process, the kernel)", 0)
}

fn privilege_message(what: &str, level: u8) -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unreadable".into());
    format!(
        "{what} needs CAP_PERFMON (or CAP_SYS_ADMIN, or root), or \
         kernel.perf_event_paranoid <= {level} (it is {paranoid} here).\n  \
         Fix: run ntprof as root, or 'sudo setcap cap_perfmon+ep ntprof', or \
         'sudo sysctl kernel.perf_event_paranoid={level}'"
    )
}

/// A library error, with the fix.
pub(super) fn explain(what: &str, err: &ntprofile::Error, pid: Option<u32>) -> Failure {
    let status = err.status();
    let base = format!("{what}: {err}");
    if status == NtStatus::PRIVILEGE_NOT_HELD {
        // A sampler on named processes has its pid here; one without is system-wide (every process, or a
        // cgroup's processor-wide events), which needs the lower paranoid level.
        let message = match pid {
            Some(_) => kernel_privilege_message(),
            None => system_privilege_message(),
        };
        return Failure::new(EXIT_FAILURE, message);
    }
    if status == NtStatus::ACCESS_DENIED {
        let who = pid.map_or(String::new(), |p| format!(" process {p}"));
        // The owner's own process may be closed to them too: a process that made itself non-dumpable.
        let why = match pid.and_then(real_uid) {
            Some(uid) if uid == nix::unistd::geteuid().as_raw() => {
                "it is this user's, but made itself non-dumpable (prctl PR_SET_DUMPABLE 0), changed its \
                 credentials or runs a set-uid program"
            }
            _ => "it belongs to another user (or kernel.yama.ptrace_scope forbids it)",
        };
        return Failure::new(
            EXIT_FAILURE,
            format!(
                "{base}\n  not allowed to profile{who}: {why}.\n  Fix: run ntprof as the process's owner, or as \
                 root / with CAP_PERFMON"
            ),
        );
    }
    if status == NtStatus::INVALID_CID {
        let p = pid.map_or(String::new(), |p| format!(" {p}"));
        return Failure::new(
            EXIT_FAILURE,
            format!("no such process{p} (is the pid right? 'ps -e' lists them)"),
        );
    }
    if status == NtStatus::NOT_SUPPORTED {
        return Failure::new(EXIT_USAGE, format!("{base}\n  see 'ntprof sources'"));
    }
    if status == NtStatus::INSUFFICIENT_RESOURCES {
        return Failure::new(
            EXIT_FAILURE,
            format!(
                "{base}\n  out of file descriptors or perf ring memory: raise the hard descriptor limit \
                 ('ulimit -Hn', systemd LimitNOFILE=; ntprof raises the soft one to it), 'ulimit -l' or \
                 kernel.perf_event_mlock_kb"
            ),
        );
    }
    Failure::new(EXIT_FAILURE, base)
}

/// The real user of process `pid` (`/proc/PID/status`, readable by everyone).
fn real_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
