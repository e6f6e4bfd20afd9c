//! `--cgroup PATH` without the privilege to observe every task: the cgroup's processes followed (to come).

use super::cgroup::{Cgroup, CgroupRun};
use super::windows::Windows;
use super::{EXIT_FAILURE, Failure, Outcome};
use crate::progress::Progress;

/// A `--cgroup` run of a caller that may not observe every task.
pub fn run(
    r: &CgroupRun<'_>,
    cg: &Cgroup,
    _progress: &dyn Progress,
    _windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unreadable".into());
    Err(Failure::new(
        EXIT_FAILURE,
        format!(
            "--cgroup {}: sampling a cgroup ({}) needs the privilege to observe every task (CAP_PERFMON or \
             CAP_SYS_ADMIN, or kernel.perf_event_paranoid 0 or less; it is {paranoid}), with which the kernel \
             filters the events by cgroup.\n  Fix: run ntprof as root or with CAP_PERFMON; or profile the \
             cgroup's processes by pid: ntprof {} -p $(paste -sd, {}/cgroup.procs)",
            r.arg,
            cg.path,
            r.mode,
            cg.dir.display()
        ),
    ))
}
