//! `--cgroup PATH` (`record`, `attach`, `top`): every process of a cgroup v2 (and of the cgroups below it),
//! those that join it during the run included, and nothing else.
//!
//! PATH is a directory of the cgroup v2 file system (`/sys/fs/cgroup/...`, wherever `/proc/self/mountinfo`
//! says it is mounted), or a path relative to its root, as perf's `-G` takes it and as `/proc/PID/cgroup`
//! shows it (`/system.slice/x.service` or `system.slice/x.service`). With the privilege to observe every task
//! (CAP_PERFMON, CAP_SYS_ADMIN, `kernel.perf_event_paranoid` 0 or less) the kernel filters processor-wide
//! events by cgroup (`kernel-filter`, in `kernel`); without it the cgroup's processes are followed
//! (`following`, in `follow`); PATH is resolved in `path`. The run ends at `--duration`, Ctrl-C, or the exit of a command given after `--`
//! (`record --cgroup PATH -- sleep 10`, as `perf record -a -G PATH -- sleep 10`), which bounds it and is not
//! profiled unless it runs in the cgroup.

mod follow;
mod kernel;
mod path;
mod run;

use super::windows::Windows;
use super::{EXIT_USAGE, Failure, Outcome};
use crate::progress::Progress;
use path::check;
pub use path::{Cgroup, CgroupRun, procs_of, resolve, resolve_in};

/// `ntprof record --cgroup PATH [--duration S | -- CMD]`.
pub(super) fn record(
    args: &crate::options::RecordOptions,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    if !args.pid.is_empty() || args.kernel {
        return Err(Failure::new(
            EXIT_USAGE,
            "--cgroup names the processes to profile: give it without -p/--pid and --kernel",
        ));
    }
    let run = CgroupRun {
        arg: args.cgroup.as_deref().unwrap_or_default(),
        command: &args.command,
        duration: args.duration,
        profile: &args.profile,
        mode: "record",
    };
    self::run(&run, progress, windows)
}

/// A `--cgroup` run (see the module's documentation).
pub fn run(
    r: &CgroupRun<'_>,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    let cg = check(r)?;
    if ntprofile::target::has_system_profile_privilege() {
        kernel::run(r, &cg, progress, windows)
    } else {
        follow::run(r, &cg, progress, windows)
    }
}
