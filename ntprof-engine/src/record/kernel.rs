//! `ntprof record --kernel [--duration S]`: a system-wide sampler with kernel samples, resolved against the
//! kernel's text and its modules (kallsyms). (`record --kernel -- CMD` is a `record` of the command whose samplers
//! take its kernel samples too, against the same ranges: [`add_kernel_text`].)

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use ntprofile::sampler_clock_ns;

use super::session::{ROUND, Session, Targets};
use super::windows::{Cutter, Windows};
use super::{EXIT_FAILURE, EXIT_USAGE, Failure, Outcome, PROGRESS_EVERY, launch};
use crate::collect;
use crate::options::RecordOptions;
use crate::progress::Progress;
use crate::symbols::{KERNEL_MODULE, Kallsyms};
use crate::tree::space::ModuleKind;

/// `ntprof record --kernel` without a command (and `--kernel --duration S -- CMD`, refused here).
pub fn record_kernel(
    args: &RecordOptions,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    if args.duration.is_some() && !args.command.is_empty() {
        return Err(Failure::new(
            EXIT_USAGE,
            "give either --duration or a command to 'record --kernel', not both",
        ));
    }
    let (_set, sigfd) = launch::block_signals()?;
    let started_at = collect::now_rfc3339();
    let kallsyms = Kallsyms::load().map_err(|e| Failure::new(EXIT_FAILURE, e))?;
    // The privilege is checked by the library when the global kernel sampler is created.
    let mut session = Session::open(Targets::Global, &args.profile, true, false)?;
    add_kernel_text(&mut session, &kallsyms)?;
    if let Some(w) = super::unmatched_warning(&session) {
        return Err(Failure::new(
            EXIT_USAGE,
            format!("{w}\n  Fix: --module takes a name from that list"),
        ));
    }
    session.tracker.run_start_ns = sampler_clock_ns();
    session.enable()?;
    let mut cutter = windows.map(|w| {
        let mut run = collect::run_info("kernel", args.command.clone(), None, started_at.clone());
        run.cpus = args.profile.cpus.as_ref().map(|c| c.0.clone());
        run.bucket_log2 = args.profile.bucket.unwrap_or(0);
        run.follow_children = false;
        run.expected = args.profile.expect.clone();
        Cutter::new(w, run, session.tracker.run_start_ns, &session)
    });
    let t0 = Instant::now();
    let what = if args.command.is_empty() {
        "record --kernel".to_string()
    } else {
        format!("record --kernel: {}", args.command.join(" "))
    };
    progress.start(&what);
    let child = match args.command.first() {
        Some(_) => Some(launch::start(&args.command, false)?),
        None => None,
    };
    let (ended_by, exit, hangup) = wait_kernel(
        &mut session,
        child.as_ref(),
        &sigfd,
        args.duration,
        progress,
        t0,
        cutter.as_mut().map(|c| (c, Some(&kallsyms))),
        &mut |_| Ok(()),
    )?;
    let duration = t0.elapsed();
    session.finish()?;
    progress.finish();
    let recorder_cpu_s = launch::own_cpu();
    let mut run = collect::run_info("kernel", args.command.clone(), None, started_at);
    run.duration_s = duration.as_secs_f64();
    run.recorder_cpu_ms = recorder_cpu_s * 1e3;
    run.recorder_rounds = session.rounds;
    run.exit_status = exit;
    run.ended_by = ended_by.into();
    run.cpus = args.profile.cpus.as_ref().map(|c| c.0.clone());
    run.bucket_log2 = args.profile.bucket.unwrap_or(0);
    run.follow_children = false;
    run.expected = args.profile.expect.clone();
    match hangup {
        Some(at) if child.is_some() => run.notes.push(super::notes::hangup_passed_on(at, exit)),
        Some(at) => run.notes.push(super::notes::hangup_ended(at)),
        None => {}
    }
    run.notes.push(
        "system-wide kernel profile: samples of every process in user space, and in kernel memory outside \
         the kernel's text and its modules, count as outside"
            .into(),
    );
    run.notes.extend(super::rate::rate_notes(&session));
    let report = match &mut cutter {
        Some(c) => c.last(&mut session, run, Some(&kallsyms), &Vec::new()),
        None => super::finish_report(&session, run, Some(&kallsyms), &Vec::new()),
    };
    Ok(Outcome {
        report,
        exit: exit.map_or(0, |c| c.clamp(0, 255) as u8),
        warning: None,
    })
}

/// The kernel's text and its loaded modules, as ranges valid in every process; an error when kallsyms hides
/// the kernel's addresses.
pub(super) fn add_kernel_text(session: &mut Session, kallsyms: &Kallsyms) -> Result<(), Failure> {
    let Some((stext, etext)) = kallsyms.text else {
        return Err(Failure::new(
            EXIT_FAILURE,
            format!(
                "/proc/kallsyms shows no kernel addresses (kernel.kptr_restrict hides them).\n  {}",
                super::kernel_privilege_message()
            ),
        ));
    };
    let mut kernel_modules = vec![(KERNEL_MODULE.to_string(), stext, etext - stext)];
    kernel_modules.extend(kallsyms.loaded.iter().cloned());
    for (name, start, size) in kernel_modules {
        let path = if name == KERNEL_MODULE {
            "[kernel.kallsyms]".to_string()
        } else {
            format!("[module {name}]")
        };
        session.tracker.add_fixed(
            &name,
            &path,
            ModuleKind::Kernel(name.clone()),
            start,
            start + size,
        );
    }
    Ok(())
}

/// Read rounds until the command exits (forwarding signals), Ctrl-C (or SIGTERM, or SIGHUP), or `--duration`,
/// calling `each` after every round; returns why the run ended, the command's exit status and, after a hang-up
/// (SIGHUP), when it came (seconds into the run).
#[allow(clippy::too_many_arguments)]
pub(super) fn wait_kernel(
    session: &mut Session,
    child: Option<&launch::Stopped>,
    sigfd: &nix::sys::signalfd::SignalFd,
    duration: Option<f64>,
    progress: &dyn Progress,
    t0: Instant,
    mut cutter: Option<(&mut Cutter<'_>, Option<&Kallsyms>)>,
    each: &mut dyn FnMut(&mut Session) -> Result<(), Failure>,
) -> Result<(&'static str, Option<i32>, Option<f64>), Failure> {
    let mut ended = false;
    let mut hangup = None;
    let deadline = duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut last_progress = Instant::now();
    loop {
        let left = deadline.map_or(ROUND, |d| {
            d.saturating_duration_since(Instant::now()).min(ROUND)
        });
        session.round(left)?;
        each(session)?;
        if let Some(c) = child {
            match waitpid(c.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                    let why = if hangup.is_some() { "hangup" } else { "exited" };
                    return Ok((why, launch::exit_code(st), hangup));
                }
                Ok(_) => {}
                Err(e) => return Err(Failure::new(EXIT_FAILURE, format!("waitpid: {e}"))),
            }
            while let Some((sig, from_process)) = launch::pending_signal(sigfd) {
                if sig == Signal::SIGHUP && hangup.is_none() {
                    hangup = Some(t0.elapsed().as_secs_f64());
                }
                if launch::forwarded(sig, from_process) {
                    let _ = kill(c.pid, sig);
                }
            }
        } else if let Some((sig, _)) = launch::pending_signal(sigfd) {
            return Ok(if sig == Signal::SIGHUP {
                ("hangup", None, Some(t0.elapsed().as_secs_f64()))
            } else {
                ("interrupted", None, None)
            });
        }
        if let Some((c, kallsyms)) = cutter.as_mut()
            && !c.tick(session, *kallsyms)
            && !ended
        {
            // The windows' taker ended the run: the command is asked to end (its exit ends the run).
            match child {
                Some(c) => {
                    let _ = kill(c.pid, Signal::SIGTERM);
                    ended = true;
                }
                None => return Ok(("stopped", None, None)),
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(("duration", None, None));
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress.update(t0.elapsed(), &session.progress());
            last_progress = Instant::now();
        }
    }
}
