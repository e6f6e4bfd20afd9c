//! `ntprof record` / `ntprof attach` / `ntprof record --kernel`: start or find the targets, sample them and every
//! process they start through the library's sampler, follow the tree and its mappings from the kernel's own
//! records, and build the report.
//!
//! **From the first instruction.** `record` starts CMD under `PTRACE_TRACEME`: the kernel stops it right after
//! `execve`, before its first instruction. There the sampler is opened on it (following its children unless
//! `--no-inherit`) and enabled, its current mappings (executable, dynamic loader, vdso) are read from
//! `/proc/PID/maps`, and ntprof detaches. From then on the kernel reports every mapping (libraries, `dlopen`,
//! JIT code), fork, exec and exit as it happens: nothing is polled.
//!
//! **Signals.** SIGINT, SIGTERM and SIGHUP are blocked in ntprof and read from a signalfd: during `record` they
//! are forwarded to CMD (a Ctrl-C at the terminal reaches CMD directly and is not sent twice; a terminal's
//! hang-up is passed on as the terminal would have: see `launch::forwarded`), and CMD decides whether it ends;
//! during `attach` and a command-less `--kernel` they end the run. Either way the run is then reported: a
//! terminal that goes away (an ssh session that drops) loses nothing recorded, and `run.ended_by` says
//! `hangup`.
//!
//! The rooms: `launch` starts and stops the command, `session` samples and reads, `crate::tree` follows
//! the processes and their mappings, `crate::collect` builds the report, `notes` explains it.

mod attach;
pub mod cgroup;
mod checks;
mod errors;
mod kernel;
mod launch;
mod notes;
mod precheck;
mod rate;
mod session;
mod sideband;
mod windows;

use std::time::{Duration, Instant};

use nix::sys::signal::kill;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use ntprofile::sampler_clock_ns;

pub use attach::{attach, attach_windows};
use errors::explain;
pub use errors::kernel_privilege_message;
pub use windows::{WindowSink, Windows};

use crate::collect::{self, Endings};
use crate::options::CallGraph;
use crate::options::{AttachOptions, RecordOptions};
use crate::progress::Progress;
use crate::report::{Report, RunInfo, SCHEMA_VERSION};
use crate::symbols::Kallsyms;
use crate::tree::{procs, space};
use session::{ROUND, Session, Targets};
use windows::Cutter;

/// A failure with the exit status ntprof ends with.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong and how to fix it.
    pub message: String,
    /// The exit status.
    pub code: u8,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code,
        }
    }
}

/// Exit status for a failure of the run itself (not of the user's options).
const EXIT_FAILURE: u8 = 1;
/// Exit status for a bad command line (clap's too).
const EXIT_USAGE: u8 = 2;
/// The shell's status for a command that cannot be found.
const EXIT_NOT_FOUND: u8 = 127;
/// The shell's status for a command that cannot be executed.
const EXIT_NOT_EXECUTABLE: u8 = 126;
/// How often progress is updated.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The outcome of a run: the report and ntprof's exit status.
pub struct Outcome {
    /// The report.
    pub report: Report,
    /// The exit status ntprof should end with (CMD's for `record`).
    pub exit: u8,
    /// A message to print after the report (with exit status 2 if set and the run itself succeeded).
    pub warning: Option<String>,
}

/// The report of a finished session.
fn finish_report(
    session: &Session,
    mut run: RunInfo,
    kallsyms: Option<&Kallsyms>,
    endings: &Endings,
) -> Report {
    let bucket = run.bucket_log2;
    run.events = session.events.clone();
    let (processes, sources, spent, object_notes) = collect::build(
        &session.tracker,
        &session.infos,
        kallsyms,
        run.duration_s,
        bucket,
        endings,
        &session.symbols,
    );
    run.symbolize_ms = spent.as_secs_f64() * 1000.0;
    let t = &session.tracker;
    if let Some(w) = &session.off_cpu {
        run.notes.extend(crate::collect::offcpu::notes(w));
    }
    run.call_graph = t.call_graph.map(|g| match g {
        CallGraph::Fp => "fp".to_string(),
        CallGraph::Dwarf(size) => format!("dwarf,{size}"),
    });
    if let Some(g) = t.call_graph {
        // The CPU samples only: the off-CPU sources count nanoseconds, and their stacks have their own note.
        let walked: u64 = t
            .sources
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                t.waits
                    .as_ref()
                    .is_none_or(|w| *i != w.voluntary && *i != w.preempted)
            })
            .map(|(_, s)| s.samples)
            .sum();
        if t.unwinding.truncated > 0 {
            let how = match g {
                CallGraph::Fp => {
                    "the frame-pointer chain left the executable mappings (code built without frame pointers: try --call-graph dwarf) or reached the kernel's frame limit"
                }
                CallGraph::Dwarf(_) => {
                    "the stack copy ran out (a larger --call-graph dwarf,SIZE keeps more), a return address was in no executable mapping, or the module had no unwind information for it"
                }
            };
            run.notes.push(format!(
                "{} of {walked} call stacks are truncated ([truncated] at their root): {how}",
                t.unwinding.truncated
            ));
        }
        if let Some((waits, cut)) = t.waits.as_ref().map(|w| w.stacks)
            && cut > 0
        {
            run.notes.push(format!(
                "{cut} of {waits} off-CPU waits have a truncated stack ([truncated] at their root): a blocked \
                 thread's stack is unwound with CFI from a copy of it, which ran out (--call-graph dwarf,SIZE \
                 copies more than the {} bytes of the default), or a return address was in no executable \
                 mapping, or its module had no unwind information for it",
                crate::offcpu::DEFAULT_STACK_BYTES
            ));
        }
    }
    run.notes.extend(notes::offcpu_fp_note(&sources));
    let off_cpu = session
        .off_cpu
        .as_ref()
        .and_then(|w| crate::collect::offcpu::build(t, w, &processes));
    run.notes.extend(object_notes);
    run.jit = t.jit.reports.clone();
    run.notes
        .extend(crate::tree::jitdump::JitState::notes(&run.jit));
    Report {
        schema_version: SCHEMA_VERSION,
        tool: format!("ntprof {}", env!("CARGO_PKG_VERSION")),
        run,
        processes,
        sources,
        off_cpu,
    }
}

/// The `--module` names no mapping matched, as the warning printed after the report.
fn unmatched_warning(session: &Session) -> Option<String> {
    let f = &session.tracker.filter;
    let missing = f.unmatched();
    (!missing.is_empty()).then(|| {
        format!(
            "unknown module {}: no such module was mapped (modules seen: {})",
            missing.join(", "),
            f.seen.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}

/// Record `args.command` and every process it starts (unless `profile.no_inherit`) from its first instruction
/// to its exit; or, with `args.kernel`, the kernel (for as long as the command runs, else for
/// `args.duration` or until SIGINT/SIGTERM); or, with `args.pid`, running processes as [`attach`] does.
///
/// Blocks until the run ends. SIGINT, SIGTERM and SIGHUP are blocked in the calling thread and read from a
/// signalfd (they stay blocked when it returns): while a command runs they are forwarded to it, otherwise they
/// end the run. `progress` is told of the run a few times a second. The [`Outcome`] holds the report and the exit
/// status the command ended with (`ntprof` ends with it); a [`Failure`] says what went wrong and the exit status
/// for it (2: a usage error, 127/126: the command cannot be found or run, 1: anything else).
///
/// ```no_run
/// use ntprof_engine::options::{CallGraph, RecordOptions};
/// use ntprof_engine::{progress::NoProgress, record};
///
/// let mut options = RecordOptions::command(["make", "-j2"]);
/// options.profile.call_graph = Some(CallGraph::Fp);
/// let outcome = record::record(&options, &NoProgress)?;
/// println!("{} processes", outcome.report.processes.len());
/// # Ok::<(), record::Failure>(())
/// ```
pub fn record(args: &RecordOptions, progress: &dyn Progress) -> Result<Outcome, Failure> {
    record_in(args, progress, None)
}

/// [`record`], cut into windows: every `windows.every` the window's report goes to `windows.sink` and the
/// counts start again (see [`WindowSink`]); the run's last window, which ends with it, is handed over too and
/// is the [`Outcome`]'s report.
pub fn record_windows(
    args: &RecordOptions,
    windows: Windows<'_>,
    progress: &dyn Progress,
) -> Result<Outcome, Failure> {
    record_in(args, progress, Some(windows))
}

fn record_in(
    args: &RecordOptions,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    if args.cgroup.is_some() {
        return cgroup::record(args, progress, windows);
    }
    if !args.pid.is_empty() {
        return record_pids(args, progress, windows);
    }
    // A command with --duration too is refused there.
    if args.kernel && (args.command.is_empty() || args.duration.is_some()) {
        return kernel::record_kernel(args, progress, windows);
    }
    if args.duration.is_some() {
        return Err(Failure::new(
            EXIT_USAGE,
            "--duration applies to 'record --kernel' and 'attach'; 'record -- CMD' runs until CMD exits",
        ));
    }
    if args.command.is_empty() {
        return Err(Failure::new(
            EXIT_USAGE,
            "no command to record: 'ntprof record [OPTIONS] -- CMD [ARGS...]'",
        ));
    }
    // Signals first: the library may start threads, which must inherit the blocked mask.
    let (_set, sigfd) = launch::block_signals()?;
    session::check_sources(&args.profile)?;
    precheck::check_modules(&args.profile.modules, &args.command)?;
    // `--kernel -- CMD`: the command's own kernel time too, named from kallsyms (read before it starts).
    let kallsyms = match args.kernel {
        true => Some(Kallsyms::load().map_err(|e| Failure::new(EXIT_FAILURE, e))?),
        false => None,
    };
    let started_at = collect::now_rfc3339();
    let cmd = launch::start(&args.command, true)?;
    let pid_u = cmd.pid.as_raw() as u32;
    let mut session = match start_session(pid_u, args, kallsyms.as_ref()) {
        Ok(s) => s,
        Err(f) => {
            cmd.kill();
            return Err(f);
        }
    };
    let executable = std::fs::read_link(format!("/proc/{pid_u}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    session.tracker.run_start_ns = sampler_clock_ns();
    let mut cutter = windows.map(|w| {
        let mut run = collect::run_info(
            "record",
            args.command.clone(),
            Some(pid_u),
            started_at.clone(),
        );
        run.executable = executable.clone();
        fill_common(&mut run, args);
        Cutter::new(w, run, session.tracker.run_start_ns, &session)
    });
    let t0 = Instant::now();
    cmd.resume()?;

    progress.start(&format!("record: {}", args.command.join(" ")));
    let (status, hangup) = run_until_exit(
        &mut session,
        (&cmd, &sigfd),
        progress,
        t0,
        cutter.as_mut().map(|c| (c, kallsyms.as_ref())),
    )?;
    let duration = t0.elapsed();
    session.finish()?;
    progress.finish();
    let recorder_cpu_s = launch::own_cpu();
    let cpu = launch::children_cpu();

    let exit = launch::exit_code(status);
    let mut run = collect::run_info("record", args.command.clone(), Some(pid_u), started_at);
    run.duration_s = duration.as_secs_f64();
    run.recorder_cpu_ms = recorder_cpu_s * 1e3;
    run.recorder_rounds = session.rounds;
    run.exit_status = exit;
    run.ended_by = if hangup.is_some() { "hangup" } else { "exited" }.into();
    run.executable = executable;
    fill_common(&mut run, args);
    run.notes = notes::user_notes(&session, 1);
    if let Some(at) = hangup {
        run.notes.push(notes::hangup_passed_on(at, exit));
    }
    run.explanations = notes::explanations(&session, run.duration_s, cpu, true);
    let endings: Endings = exit
        .map(|c| vec![(0, launch::ending(c))])
        .unwrap_or_default();
    let report = match &mut cutter {
        Some(c) => c.last(&mut session, run, kallsyms.as_ref(), &endings),
        None => finish_report(&session, run, kallsyms.as_ref(), &endings),
    };
    let warning = unmatched_warning(&session);
    Ok(Outcome {
        report,
        exit: exit.map_or(EXIT_FAILURE, |c| c.clamp(0, 255) as u8),
        warning,
    })
}

/// `ntprof record -p PID[,PID...]`: perf's spelling of `ntprof attach --pid`.
fn record_pids(
    args: &RecordOptions,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    if !args.command.is_empty() {
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "-p/--pid attaches to running processes: give either -p PID or a command ('{}'), not both",
                args.command.join(" ")
            ),
        ));
    }
    attach::attach_in(
        &AttachOptions {
            pid: args.pid.clone(),
            duration: args.duration,
            profile: args.profile.clone(),
            cgroup: None,
        },
        progress,
        windows,
    )
}

/// Read rounds until the command exits; forward the signals sent to ntprof; show progress. Returns how the
/// command ended and, if ntprof's terminal hung up (SIGHUP) meanwhile, when (seconds into the run).
fn run_until_exit(
    session: &mut Session,
    (cmd, sigfd): (&launch::Stopped, &nix::sys::signalfd::SignalFd),
    progress: &dyn Progress,
    t0: Instant,
    mut cutter: Option<(&mut Cutter<'_>, Option<&Kallsyms>)>,
) -> Result<(WaitStatus, Option<f64>), Failure> {
    let mut last_progress = Instant::now();
    let mut hangup = None;
    let mut ended = false;
    // The command's pidfd, to wait for its exit (`None` if it cannot be opened: the rounds then go on).
    let process = ntprofile::Process::open(cmd.pid.as_raw() as u32).ok();
    loop {
        session.round(ROUND)?;
        match waitpid(cmd.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                return Ok((st, hangup));
            }
            Ok(_) => {}
            Err(e) => return Err(Failure::new(EXIT_FAILURE, format!("waitpid: {e}"))),
        }
        // Every thread of the tree has ended, but the command is not yet waitable (the kernel ends a thread's
        // events before it reports the exit; on a loaded machine that can take a while). A round would return
        // at once (nothing more can come) and the loop would spin, taking CPU from the very exit it waits for:
        // wait for the exit itself.
        if let Some(p) = &process
            && session.targets_exited()
        {
            p.exited_within(ROUND);
        }
        while let Some((sig, from_process)) = launch::pending_signal(sigfd) {
            if sig == nix::sys::signal::Signal::SIGHUP && hangup.is_none() {
                hangup = Some(t0.elapsed().as_secs_f64());
            }
            // The terminal's Ctrl-C reached CMD already (same process group); forward what was sent to us.
            if launch::forwarded(sig, from_process) {
                let _ = kill(cmd.pid, sig);
            }
        }
        if let Some((c, kallsyms)) = cutter.as_mut()
            && !c.tick(session, *kallsyms)
            && !ended
        {
            // The windows' taker ended the run: the command is asked to end, and its exit ends the run.
            let _ = kill(cmd.pid, nix::sys::signal::Signal::SIGTERM);
            ended = true;
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress.update(t0.elapsed(), &session.progress());
            last_progress = Instant::now();
        }
    }
}

/// The options every mode records the same way.
fn fill_common(run: &mut RunInfo, args: &RecordOptions) {
    run.cpus = args.profile.cpus.as_ref().map(|c| c.0.clone());
    run.bucket_log2 = args.profile.bucket.unwrap_or(0);
    run.follow_children = !args.profile.no_inherit;
    run.expected = args.profile.expect.clone();
}

/// At the stop after `execve`: open and enable the samplers on the command, and take its current mappings;
/// with `kallsyms` (`--kernel`), its kernel samples too, resolved against the kernel's text and modules.
fn start_session(
    pid: u32,
    args: &RecordOptions,
    kallsyms: Option<&Kallsyms>,
) -> Result<Session, Failure> {
    let mut session = Session::open(Targets::Pids(&[pid]), &args.profile, args.kernel, true)?;
    if let Some(k) = kallsyms {
        kernel::add_kernel_text(&mut session, k)?;
    }
    session.enable()?;
    let maps = space::read_executable_maps(pid)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot read /proc/{pid}/maps: {e}")))?;
    let comm = procs::comm(pid).unwrap_or_else(|| args.command[0].clone());
    session
        .tracker
        .add_process(pid, std::process::id(), &comm, &maps, 0);
    Ok(session)
}
