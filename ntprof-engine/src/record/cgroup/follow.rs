//! `--cgroup PATH` without the privilege to observe every task (`following`): the processes of the cgroup and of
//! the cgroups below it (their `cgroup.procs`) are sampled as an attach samples processes, with every process
//! they start; `cgroup.procs` is read again every [`RESCAN`]. A process found there that the run does not
//! follow, on two reads in a row (one read could find a child whose fork record is not applied yet), joined the
//! cgroup: it is sampled from then on, with its own samplers. A followed process missing from a read left it:
//! its samples are dropped from then on (and counted), until a read finds it there again. An empty cgroup is
//! waited for (a command after `--` may be what starts its processes).

use std::time::{Duration, Instant};

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use ntprofile::{NtStatus, Process, sampler_clock_ns};

use super::super::session::{Session, Targets};
use super::super::windows::{Cutter, Windows};
use super::super::{EXIT_FAILURE, Failure, Outcome, kernel, launch, notes};
use super::path::{Cgroup, CgroupRun, add_present, procs_of};
use super::run::{ended, template};
use crate::collect;
use crate::options::ProfileOptions;
use crate::progress::Progress;
use crate::report::CgroupInfo;
use crate::tree::hash::FastSet;

/// How often `cgroup.procs` is read again.
pub const RESCAN: Duration = Duration::from_millis(250);

/// What the reads of `cgroup.procs` found.
struct Rescan<'a> {
    cg: &'a Cgroup,
    opts: &'a ProfileOptions,
    last: Instant,
    /// Processes not followed at the last read (they join at the next read that finds them still).
    pending: Vec<u32>,
    /// Processes that joined and were profiled from then on.
    joined: u64,
    /// Processes of the cgroup that could not be profiled (another user's), and why the last one could not.
    refused: Vec<u32>,
    why: Option<String>,
    /// Every process that left the cgroup during the run.
    ever_left: FastSet<u32>,
    /// The processes that joined, kept open (their pids name them while the run holds them).
    opened: Vec<Process>,
}

impl Rescan<'_> {
    /// After a round: every [`RESCAN`], read `cgroup.procs` again; follow the processes that joined, drop the
    /// samples of those that left.
    fn tick(&mut self, session: &mut Session) -> Result<(), Failure> {
        if self.last.elapsed() < RESCAN {
            return Ok(());
        }
        self.last = Instant::now();
        let now = procs_of(&self.cg.dir);
        let t = &session.tracker.processes;
        let followed = |pid: u32| {
            t.get(pid)
                .is_some_and(|p| t.list[p as usize].exit_ns.is_none())
        };
        let unknown: Vec<u32> = now
            .iter()
            .copied()
            .filter(|&p| !followed(p) && !self.refused.contains(&p))
            .collect();
        let (confirmed, pending): (Vec<u32>, Vec<u32>) =
            unknown.into_iter().partition(|p| self.pending.contains(p));
        self.pending = pending;
        // A process leaves cgroup.procs when it exits, before its exit record is applied: only one that still
        // runs left the cgroup.
        let left: FastSet<u32> = t
            .list
            .iter()
            .filter(|p| p.exit_ns.is_none() && now.binary_search(&p.pid).is_err())
            .map(|p| p.pid)
            .filter(|&pid| !crate::tree::procs::live_threads(pid).is_empty())
            .collect();
        self.ever_left.extend(left.iter().copied());
        session.set_left(left);
        let mut joiners = Vec::new();
        for pid in confirmed {
            match Process::open(pid) {
                Ok(p) => joiners.push(p),
                Err(e) if e.status() == NtStatus::ACCESS_DENIED => {
                    self.refused.push(pid);
                    self.why = Some(e.to_string());
                }
                Err(_) => {} // it exited
            }
        }
        if joiners.is_empty() {
            return Ok(());
        }
        match session.add_processes(&joiners, self.opts) {
            Ok(()) => {
                let time = sampler_clock_ns();
                for p in &joiners {
                    add_present(session, p.pid(), time);
                }
                self.joined += joiners.len() as u64;
                self.opened.extend(joiners);
            }
            Err(e) => {
                self.refused.extend(joiners.iter().map(Process::pid));
                self.why = Some(e.to_string());
            }
        }
        Ok(())
    }
}

/// Wait until the cgroup holds a process (every [`RESCAN`]), the command ends, Ctrl-C or `--duration`; the
/// processes then, opened (another user's left out, counted in `refused`), or the reason the run ended first.
fn first_processes(
    cg: &Cgroup,
    child: Option<&launch::Stopped>,
    sigfd: &nix::sys::signalfd::SignalFd,
    deadline: Option<Instant>,
    refused: &mut Vec<u32>,
) -> Result<Vec<Process>, &'static str> {
    loop {
        let mut processes = Vec::new();
        for pid in procs_of(&cg.dir) {
            match Process::open(pid) {
                Ok(p) => processes.push(p),
                Err(e) if e.status() == NtStatus::ACCESS_DENIED => refused.push(pid),
                Err(_) => {}
            }
        }
        if !processes.is_empty() {
            return Ok(processes);
        }
        if let Some(c) = child
            && matches!(
                waitpid(c.pid, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)
            )
        {
            return Err("the command exited");
        }
        if launch::pending_signal(sigfd).is_some() {
            return Err("a signal (Ctrl-C, SIGTERM, SIGHUP)");
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err("--duration");
        }
        std::thread::sleep(RESCAN);
    }
}

/// A `--cgroup` run of a caller that may not observe every task.
pub fn run(
    r: &CgroupRun<'_>,
    cg: &Cgroup,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    if r.profile.off_cpu {
        // The off-CPU watcher follows the processes of the start only.
        return Err(Failure::new(
            super::super::EXIT_USAGE,
            "--off-cpu with --cgroup: drop --off-cpu (the processes that join a cgroup are sampled by samplers \
             of their own, which carry no off-CPU watch), or profile the cgroup's processes with -p PID",
        ));
    }
    let (_set, sigfd) = launch::block_signals()?;
    let started_at = collect::now_rfc3339();
    let t0 = Instant::now();
    let deadline = r.duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut refused = Vec::new();
    let mut child = None;
    let mut processes =
        first_processes(cg, None, &sigfd, Some(t0), &mut refused).unwrap_or_default();
    if processes.is_empty() {
        // Nothing to sample yet: the command (which may start the cgroup's first process) runs meanwhile.
        if !r.command.is_empty() {
            child = Some(launch::start(r.command, false)?);
        }
        processes = first_processes(cg, child.as_ref(), &sigfd, deadline, &mut refused).map_err(
            |ended| {
                Failure::new(
                    EXIT_FAILURE,
                    format!(
                        "--cgroup {}: the cgroup had no process this user may profile until {ended} ended the \
                         run{}: nothing was profiled",
                        cg.path,
                        if refused.is_empty() {
                            String::new()
                        } else {
                            format!(" ({} of another user's)", refused.len())
                        }
                    ),
                )
            },
        )?;
    }
    refused.sort_unstable();
    refused.dedup();
    let present: Vec<u32> = processes.iter().map(Process::pid).collect();
    let mut session = Session::open(Targets::Processes(&processes), r.profile, false, true)?;
    let start_ns = sampler_clock_ns();
    session.enable()?;
    for p in &processes {
        add_present(&mut session, p.pid(), start_ns);
    }
    session.tracker.run_start_ns = start_ns;
    let mut rescan = Rescan {
        cg,
        opts: r.profile,
        last: Instant::now(),
        pending: Vec::new(),
        joined: 0,
        refused,
        why: None,
        ever_left: FastSet::default(),
        opened: Vec::new(),
    };
    let info = |rescan: &Rescan<'_>| CgroupInfo {
        path: cg.path.clone(),
        dir: cg.dir.to_string_lossy().into_owned(),
        mechanism: "following".into(),
        rescan_ms: RESCAN.as_millis() as u64,
        at_start: present.len() as u64,
        joined: rescan.joined,
        left: rescan.ever_left.len() as u64,
    };
    let mut cutter = windows.map(|w| {
        let mut run = template(r, started_at.clone());
        run.cgroup = Some(info(&rescan));
        Cutter::new(w, run, start_ns, &session)
    });
    progress.start(&format!("{} --cgroup {}", r.mode, cg.path));
    if child.is_none() && !r.command.is_empty() {
        child = Some(launch::start(r.command, false)?);
    }
    let left_duration = r
        .duration
        .map(|d| (d - t0.elapsed().as_secs_f64()).max(0.0));
    let end = kernel::wait_kernel(
        &mut session,
        child.as_ref(),
        &sigfd,
        left_duration,
        progress,
        Instant::now(),
        cutter.as_mut().map(|c| (c, None)),
        &mut |s| rescan.tick(s),
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
    run.cgroup = Some(info(&rescan));
    run.notes.push(format!(
        "cgroup {}: followed without the privilege to observe every task: its processes (cgroup.procs of it \
         and of the cgroups below it) sampled with every process they start; cgroup.procs read every {} ms, a \
         process that joined profiled from the second read that found it (up to {} ms after it joined), one \
         that left not counted from the first read that missed it ({} samples dropped); {} at the start, {} \
         joined, {} left",
        cg.path,
        RESCAN.as_millis(),
        2 * RESCAN.as_millis(),
        session.left_samples,
        notes::count(present.len(), "process", "processes"),
        rescan.joined,
        rescan.ever_left.len()
    ));
    if !rescan.refused.is_empty() {
        run.notes.push(format!(
            "{} of the cgroup could not be profiled ({}); their samples are not in the report (root or \
             CAP_PERFMON samples every process of the cgroup)",
            notes::count(rescan.refused.len(), "process", "processes"),
            rescan
                .why
                .clone()
                .unwrap_or_else(|| "another user's".to_string())
        ));
    }
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
