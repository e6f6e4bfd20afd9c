//! `--cgroup PATH` with the privilege to observe every task (`kernel-filter`): one event per processor on the
//! cgroup, which the kernel filters (`PERF_FLAG_PID_CGROUP`); the processes present at the start read from
//! `/proc`, those that join later at their first record.

use std::time::Instant;

use ntprofile::sampler_clock_ns;

use super::super::session::{Session, Targets};
use super::super::windows::{Cutter, Windows};
use super::super::{Failure, Outcome, kernel, launch, notes};
use super::path::{Cgroup, CgroupRun, add_present, procs_of};
use super::run::{ended, template};
use crate::collect;
use crate::progress::Progress;
use crate::report::CgroupInfo;

/// A `--cgroup` run through the kernel's cgroup filter.
pub(super) fn run(
    r: &CgroupRun<'_>,
    cg: &Cgroup,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    let (_set, sigfd) = launch::block_signals()?;
    let started_at = collect::now_rfc3339();
    let mut session = Session::open(Targets::Cgroup(&cg.dir), r.profile, false, true)?;
    let start_ns = sampler_clock_ns();
    session.enable()?;
    // The processes present now, with what they mapped before (later mappings come as the kernel's records;
    // a process that joins later is read from /proc at its first record).
    let present = procs_of(&cg.dir);
    for &pid in &present {
        add_present(&mut session, pid, start_ns);
    }
    let late_before = session.tracker.late_processes;
    session.tracker.run_start_ns = start_ns;
    let info = |joined: u64| CgroupInfo {
        path: cg.path.clone(),
        dir: cg.dir.to_string_lossy().into_owned(),
        mechanism: "kernel-filter".into(),
        rescan_ms: 0,
        at_start: present.len() as u64,
        joined,
        left: 0,
    };
    let mut cutter = windows.map(|w| {
        let mut run = template(r, started_at.clone());
        run.cgroup = Some(info(0));
        Cutter::new(w, run, start_ns, &session)
    });
    let t0 = Instant::now();
    progress.start(&format!("{} --cgroup {}", r.mode, cg.path));
    let child = match r.command.first() {
        Some(_) => Some(launch::start(r.command, false)?),
        None => None,
    };
    let end = kernel::wait_kernel(
        &mut session,
        child.as_ref(),
        &sigfd,
        r.duration,
        progress,
        t0,
        cutter.as_mut().map(|c| (c, None)),
        &mut |_| Ok(()),
    )?;
    let exit = end.1;
    let mut run = ended(
        r,
        (&mut session, progress),
        (started_at, t0),
        end,
        child.is_some(),
        present.len(),
    )?;
    let joined = u64::from(session.tracker.late_processes - late_before);
    run.cgroup = Some(info(joined));
    run.notes.push(format!(
        "cgroup {}: the kernel filtered processor-wide events by cgroup (the processes of the cgroup and of \
         the cgroups below it, only while they are in it); {} at the start, {} joined during the run",
        cg.path,
        notes::count(present.len(), "process", "processes"),
        joined
    ));
    let report = match &mut cutter {
        Some(c) => c.last(&mut session, run, None, &Vec::new()),
        None => super::super::finish_report(&session, run, None, &Vec::new()),
    };
    Ok(Outcome {
        report,
        exit: exit.map_or(0, |c| c.clamp(0, 255) as u8),
        warning: None,
    })
}
