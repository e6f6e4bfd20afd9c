//! `ntprof attach --pid P[,P...]`: sample running processes (and, unless `--no-inherit`, every process they start
//! while attached) until `--duration` ends, Ctrl-C, or they exit.

use std::time::{Duration, Instant};

use ntprofile::{Process, sampler_clock_ns};

use super::session::{ROUND, Session, Targets};
use super::{EXIT_FAILURE, EXIT_USAGE, Failure, Outcome, PROGRESS_EVERY, explain, launch, notes};
use crate::args::AttachArgs;
use crate::collect;
use crate::progress::Progress;
use crate::tree::{procs, space};

/// `ntprof attach --pid PID[,PID...]`.
pub fn attach(args: &AttachArgs) -> Result<Outcome, Failure> {
    let (_set, sigfd) = launch::block_signals()?;
    let started_at = collect::now_rfc3339();
    let mut pids: Vec<u32> = Vec::new();
    for &p in &args.pid {
        if !pids.contains(&p) {
            pids.push(p);
        }
    }
    let processes: Vec<Process> = pids
        .iter()
        .map(|&p| Process::open(p).map_err(|e| explain("opening the process", &e, Some(p))))
        .collect::<Result<_, _>>()?;
    let cpu_before: Vec<Option<(f64, f64)>> =
        pids.iter().map(|&p| launch::process_cpu(p)).collect();
    let mut session = Session::open(Targets::Pids(&pids), &args.profile, false, true)?;
    let start_ns = sampler_clock_ns();
    session.enable()?;
    let executable = std::fs::read_link(format!("/proc/{}/exe", pids[0]))
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    add_attached(&mut session, &pids, start_ns)?;
    session.tracker.run_start_ns = start_ns;
    session.round(Duration::ZERO)?;
    if let Some(w) = super::unmatched_warning(&session) {
        return Err(Failure::new(
            EXIT_USAGE,
            format!("{w}\n  Fix: --module takes a name from that list"),
        ));
    }
    let t0 = Instant::now();
    let progress = Progress::new(&format!("attach: pid {}", join(&pids)), args.output.quiet);
    let ended_by = wait_attached(
        &mut session,
        &processes,
        &sigfd,
        args.duration,
        &progress,
        t0,
    )?;
    let duration = t0.elapsed();
    session.finish()?;
    progress.finish();
    let recorder_cpu_s = launch::own_cpu();
    let cpu = cpu_used(&pids, &cpu_before);
    let mut run = collect::run_info("attach", procs::cmdline(pids[0]), Some(pids[0]), started_at);
    if run.command.is_empty() {
        run.command = session
            .tracker
            .processes
            .list
            .first()
            .and_then(|p| p.cmdline.clone())
            .unwrap_or_default();
    }
    run.duration_s = duration.as_secs_f64();
    run.recorder_cpu_ms = recorder_cpu_s * 1e3;
    run.ended_by = ended_by.into();
    run.executable = executable;
    run.cpus = args.profile.cpus.as_ref().map(|c| c.0.clone());
    run.bucket_log2 = args.profile.bucket.unwrap_or(0);
    run.follow_children = !args.profile.no_inherit;
    run.expected = args.profile.expect.clone();
    run.notes = notes::user_notes(&session, args.profile.jitter, pids.len());
    run.explanations = notes::explanations(&session, run.duration_s, cpu, false);
    if ended_by == "process-exited" {
        run.notes.push(format!(
            "process {} exited during the attach; the report covers it up to its exit",
            join(&pids)
        ));
    }
    let report = super::finish_report(&session, run, None, &Vec::new());
    Ok(Outcome {
        report,
        exit: 0,
        warning: None,
    })
}

/// The attached processes as they are now: their mappings (later ones come as the kernel's records), command
/// and parent.
fn add_attached(session: &mut Session, pids: &[u32], start_ns: u64) -> Result<(), Failure> {
    for &pid in pids {
        // Mapped before the attach: what /proc lists now (later mappings come as the kernel's records).
        let maps = space::read_executable_maps(pid).map_err(|e| {
            Failure::new(
                EXIT_FAILURE,
                format!("cannot read /proc/{pid}/maps: {e} (has the process exited?)"),
            )
        })?;
        let comm = procs::comm(pid).unwrap_or_else(|| format!("pid {pid}"));
        let ppid = parent_pid(pid).unwrap_or(0);
        session
            .tracker
            .add_process(pid, ppid, &comm, &maps, start_ns);
    }
    Ok(())
}

/// Read rounds until `--duration`, Ctrl-C, or the attached processes' exit; returns why the run ended.
fn wait_attached(
    session: &mut Session,
    processes: &[Process],
    sigfd: &nix::sys::signalfd::SignalFd,
    duration: Option<f64>,
    progress: &Progress,
    t0: Instant,
) -> Result<&'static str, Failure> {
    let deadline = duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut last_progress = Instant::now();
    loop {
        let left = deadline.map_or(ROUND, |d| {
            d.saturating_duration_since(Instant::now()).min(ROUND)
        });
        session.round(left)?;
        if launch::pending_signal(sigfd).is_some() {
            return Ok("interrupted");
        }
        if processes.iter().all(Process::has_exited) {
            return Ok("process-exited");
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok("duration");
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress.update(t0.elapsed(), &session.progress());
            last_progress = Instant::now();
        }
    }
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The parent of a running process (`/proc/PID/stat`, field 4).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// The CPU time the attached processes used during the attach (those still readable at its end).
fn cpu_used(pids: &[u32], before: &[Option<(f64, f64)>]) -> Option<(f64, f64)> {
    let mut total = None;
    for (&pid, b) in pids.iter().zip(before) {
        if let (Some((u0, s0)), Some((u1, s1))) = (*b, launch::process_cpu(pid)) {
            let (u, s) = total.unwrap_or((0.0, 0.0));
            total = Some((u + (u1 - u0).max(0.0), s + (s1 - s0).max(0.0)));
        }
    }
    total
}
