//! `ntprof attach --pid P[,P...]`: sample running processes and, unless `--no-inherit`, every descendant they
//! have (the processes they started before the attach, transitively, and every process started while
//! attached) until `--duration` ends, Ctrl-C, or they all exit.

use std::time::{Duration, Instant};

use ntprofile::{NtStatus, Process, sampler_clock_ns};

use super::session::{ROUND, Session, Targets};
use super::windows::{Cutter, Windows};
use super::{EXIT_FAILURE, EXIT_USAGE, Failure, Outcome, PROGRESS_EVERY, explain, launch, notes};
use crate::collect;
use crate::options::{AttachOptions, ProfileOptions};
use crate::progress::Progress;
use crate::tree::{procs, space};

/// Record running processes (and, unless `profile.no_inherit`, their descendants, those running at the attach
/// and those started while attached) until `args.duration` ends, SIGINT, SIGTERM or SIGHUP arrives (blocked in
/// the calling thread and read from a signalfd; they stay blocked when it returns), or they all exit.
///
/// ```no_run
/// use ntprof_engine::options::AttachOptions;
/// use ntprof_engine::{progress::NoProgress, record};
///
/// let mut options = AttachOptions::pids([1234]);
/// options.duration = Some(5.0);
/// let outcome = record::attach(&options, &NoProgress)?;
/// println!("{} samples", outcome.report.sources[0].stats.counted);
/// # Ok::<(), record::Failure>(())
/// ```
pub fn attach(args: &AttachOptions, progress: &dyn Progress) -> Result<Outcome, Failure> {
    attach_in(args, progress, None)
}

/// [`attach`], cut into windows: every `windows.every` the window's report goes to `windows.sink` and the
/// counts start again (see [`WindowSink`](super::WindowSink)); the last window, which ends with the run, is
/// handed over too and is the [`Outcome`]'s report.
pub fn attach_windows(
    args: &AttachOptions,
    windows: Windows<'_>,
    progress: &dyn Progress,
) -> Result<Outcome, Failure> {
    attach_in(args, progress, Some(windows))
}

pub(super) fn attach_in(
    args: &AttachOptions,
    progress: &dyn Progress,
    windows: Option<Windows<'_>>,
) -> Result<Outcome, Failure> {
    if let Some(arg) = &args.cgroup {
        if !args.pid.is_empty() {
            return Err(Failure::new(
                EXIT_USAGE,
                "--cgroup names the processes to profile: give either --cgroup or --pid, not both",
            ));
        }
        let run = super::cgroup::CgroupRun {
            arg,
            command: &[],
            duration: args.duration,
            profile: &args.profile,
            mode: "attach",
        };
        return super::cgroup::run(&run, progress, windows);
    }
    let (_set, sigfd) = launch::block_signals()?;
    let started_at = collect::now_rfc3339();
    let mut pids: Vec<u32> = Vec::new();
    for &p in &args.pid {
        if !pids.contains(&p) {
            pids.push(p);
        }
    }
    if let Some(failure) = pids.iter().find_map(|&p| not_a_user_process(p)) {
        return Err(failure);
    }
    let processes: Vec<Process> = pids
        .iter()
        .map(|&p| Process::open(p).map_err(|e| explain("opening the process", &e, Some(p))))
        .collect::<Result<_, _>>()?;
    let (mut session, tree) = open_tree(processes, &pids, &args.profile)?;
    let start_ns = sampler_clock_ns();
    session.enable()?;
    let executable = std::fs::read_link(format!("/proc/{}/exe", pids[0]))
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    add_attached(&mut session, &tree, start_ns)?;
    session.tracker.run_start_ns = start_ns;
    session.round(Duration::ZERO)?;
    if let Some(w) = super::unmatched_warning(&session) {
        return Err(Failure::new(
            EXIT_USAGE,
            format!("{w}\n  Fix: --module takes a name from that list"),
        ));
    }
    let mut cutter = windows.map(|w| {
        let mut run = collect::run_info(
            "attach",
            procs::cmdline(pids[0]),
            Some(pids[0]),
            started_at.clone(),
        );
        run.executable = executable.clone();
        run.cpus = args.profile.cpus.as_ref().map(|c| c.0.clone());
        run.bucket_log2 = args.profile.bucket.unwrap_or(0);
        run.follow_children = !args.profile.no_inherit;
        run.expected = args.profile.expect.clone();
        Cutter::new(w, run, start_ns, &session)
    });
    let t0 = Instant::now();
    progress.start(&format!("attach: pid {}", join(&pids)));
    let ended_by = wait_attached(
        &mut session,
        &tree.processes[..tree.given],
        &sigfd,
        args.duration,
        progress,
        t0,
        cutter.as_mut(),
    )?;
    let duration = t0.elapsed();
    session.finish()?;
    progress.finish();
    let recorder_cpu_s = launch::own_cpu();
    let cpu = cpu_used(&tree.pids(), &tree.cpu_before);
    let left_cpu = cpu_used(&tree.left_out, &tree.left_cpu_before).map(|(u, s)| u + s);
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
    run.recorder_rounds = session.rounds;
    run.ended_by = ended_by.into();
    run.executable = executable;
    run.cpus = args.profile.cpus.as_ref().map(|c| c.0.clone());
    run.bucket_log2 = args.profile.bucket.unwrap_or(0);
    run.follow_children = !args.profile.no_inherit;
    run.expected = args.profile.expect.clone();
    run.notes = notes::user_notes(&session, tree.processes.len());
    let left_out = notes::LeftOut {
        running: tree.left_out.len(),
        no_inherit: args.profile.no_inherit,
        cpu_s: left_cpu,
    };
    run.explanations = notes::attach_explanations(&session, run.duration_s, cpu, &left_out);
    let descendants = tree.processes.len() - tree.given;
    if descendants > 0 {
        run.notes.push(format!(
            "{} the attached {} had started before the attach {} profiled too, from the attach on (earlier \
             time is not in the report)",
            notes::count(descendants, "process", "processes"),
            if tree.given == 1 { "process" } else { "processes" },
            notes::were(descendants)
        ));
    }
    if !tree.left_out.is_empty() && !args.profile.no_inherit {
        run.notes.push(format!(
            "{} running at the attach could not be profiled (another user's processes); {} samples are not \
             in the report",
            notes::count(tree.left_out.len(), "descendant", "descendants"),
            if tree.left_out.len() == 1 { "its" } else { "their" }
        ));
    }
    if tree.unsettled > 0 {
        run.notes.push(format!(
            "{} appeared while the events were being opened, on every try; profiled only if created after \
             the parent's events opened",
            notes::count(tree.unsettled, "descendant", "descendants")
        ));
    }
    if ended_by == "hangup" {
        run.notes.push(notes::hangup_ended(run.duration_s));
    }
    if ended_by == "process-exited" {
        run.notes.push(format!(
            "process {} exited during the attach; the report covers it up to its exit",
            join(&pids)
        ));
    }
    let report = match &mut cutter {
        Some(c) => c.last(&mut session, run, None, &Vec::new()),
        None => super::finish_report(&session, run, None, &Vec::new()),
    };
    Ok(Outcome {
        report,
        exit: 0,
        warning: None,
    })
}

/// How many times the events are opened again because a descendant appeared while they were being opened.
const PASSES: usize = 8;

/// The processes of an attach: the given ones, then, unless `--no-inherit`, the descendants they had started.
struct Tree {
    /// How many processes were given (`--pid`): the first of `processes`.
    given: usize,
    /// The profiled processes present at the attach: the given ones first, then their descendants, each after
    /// its parent.
    processes: Vec<Process>,
    /// The parent pid of each of `processes` (0 for a given process: read from `/proc` when it is added).
    parents: Vec<u32>,
    /// CPU time of each of `processes` before the attach.
    cpu_before: Vec<Option<(f64, f64)>>,
    /// Descendants running at the attach that are not profiled (`--no-inherit`, or another user's).
    left_out: Vec<u32>,
    /// CPU time of each of `left_out` before the attach.
    left_cpu_before: Vec<Option<(f64, f64)>>,
    /// Descendants that still appeared during the last pass.
    unsettled: usize,
}

impl Tree {
    fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Process::pid).collect()
    }
}

/// Open the sampling session on the given processes and, unless `--no-inherit`, on every descendant they have
/// now. The events of a process follow only the children created after they were opened, so the descendants
/// are scanned (`/proc/*/stat`), their events opened, and scanned again: a descendant that appeared meanwhile
/// may have been created before its parent's events opened, so the pass is dropped (closing an event closes
/// the copies children inherited from it) and done again with it, until a pass finds no newcomer.
fn open_tree(
    roots: Vec<Process>,
    pids: &[u32],
    opts: &ProfileOptions,
) -> Result<(Session, Tree), Failure> {
    let mut found = procs::descendants(pids);
    if opts.no_inherit {
        let cpu_before = pids.iter().map(|&p| launch::process_cpu(p)).collect();
        let left_out: Vec<u32> = found.iter().map(|&(pid, _)| pid).collect();
        let left_cpu_before = left_out.iter().map(|&p| launch::process_cpu(p)).collect();
        let session = Session::open(Targets::Processes(&roots), opts, false, true)?;
        let parents = vec![0; roots.len()];
        return Ok((
            session,
            Tree {
                given: roots.len(),
                processes: roots,
                parents,
                cpu_before,
                left_out,
                left_cpu_before,
                unsettled: 0,
            },
        ));
    }
    for pass in 1..=PASSES {
        let mut processes = roots.clone();
        let mut parents = vec![0; roots.len()];
        let mut refused = Vec::new();
        for &(pid, ppid) in &found {
            match Process::open(pid) {
                Ok(p) => {
                    processes.push(p);
                    parents.push(ppid);
                }
                Err(e) if e.status() == NtStatus::ACCESS_DENIED => refused.push(pid),
                Err(_) => {} // it exited
            }
        }
        let cpu_before = processes
            .iter()
            .map(|p| launch::process_cpu(p.pid()))
            .collect();
        let session = Session::open(Targets::Processes(&processes), opts, false, true)?;
        let again = procs::descendants(pids);
        let newcomers = again
            .iter()
            .filter(|d| !found.iter().any(|f| f.0 == d.0))
            .count();
        if newcomers == 0 || pass == PASSES {
            let tree = Tree {
                given: roots.len(),
                processes,
                parents,
                cpu_before,
                left_cpu_before: refused.iter().map(|&p| launch::process_cpu(p)).collect(),
                left_out: refused,
                unsettled: newcomers,
            };
            return Ok((session, tree));
        }
        drop(session);
        found = again;
    }
    unreachable!("the last pass returns")
}

/// The processes present at the attach as they are now: their mappings (later ones come as the kernel's
/// records), command, command line and parent. A given process that cannot be read is an error; a descendant
/// that exited meanwhile is listed without mappings.
fn add_attached(session: &mut Session, tree: &Tree, start_ns: u64) -> Result<(), Failure> {
    for (i, (p, &ppid)) in tree.processes.iter().zip(&tree.parents).enumerate() {
        let pid = p.pid();
        // Mapped before the attach: what /proc lists now (later mappings come as the kernel's records).
        let maps = match space::read_executable_maps(pid) {
            Ok(m) => m,
            Err(_) if i >= tree.given => Vec::new(),
            Err(e) => {
                return Err(Failure::new(
                    EXIT_FAILURE,
                    format!("cannot read /proc/{pid}/maps: {e} (has the process exited?)"),
                ));
            }
        };
        let comm = procs::comm(pid).unwrap_or_else(|| procs::unknown_comm(pid));
        let ppid = if ppid == 0 {
            procs::parent_pid(pid).unwrap_or(0)
        } else {
            ppid
        };
        session
            .tracker
            .add_process(pid, ppid, &comm, &maps, start_ns);
    }
    Ok(())
}

/// Read rounds until `--duration`, Ctrl-C (or SIGTERM, or a hang-up: SIGHUP), or the exit of the attached
/// processes and of those followed from them; returns why the run ended.
fn wait_attached(
    session: &mut Session,
    processes: &[Process],
    sigfd: &nix::sys::signalfd::SignalFd,
    duration: Option<f64>,
    progress: &dyn Progress,
    t0: Instant,
    mut cutter: Option<&mut Cutter<'_>>,
) -> Result<&'static str, Failure> {
    let deadline = duration.map(|d| t0 + Duration::from_secs_f64(d));
    let mut last_progress = Instant::now();
    loop {
        let left = deadline.map_or(ROUND, |d| {
            d.saturating_duration_since(Instant::now()).min(ROUND)
        });
        session.round(left)?;
        if let Some((sig, _)) = launch::pending_signal(sigfd) {
            return Ok(if sig == nix::sys::signal::Signal::SIGHUP {
                "hangup"
            } else {
                "interrupted"
            });
        }
        if let Some(c) = cutter.as_deref_mut()
            && !c.tick(session, None)
        {
            return Ok("stopped");
        }
        // Every followed thread has ended: rounds would return at once until the processes' exits complete
        // (see `run_until_exit`); wait for those instead.
        if session.targets_exited()
            && let Some(p) = processes.iter().find(|p| !p.has_exited())
        {
            p.exited_within(left);
        }
        // The given processes and the processes followed from them (those found at the attach, and those they
        // started since) have all exited.
        if processes.iter().all(Process::has_exited)
            && (session.targets_exited()
                || session
                    .tracker
                    .processes
                    .list
                    .iter()
                    .all(|p| p.exit_ns.is_some()))
        {
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

/// `PF_KTHREAD` in the flags of `/proc/PID/stat`: a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Why pid `pid` has nothing a user-space profile could sample, if so: a kernel thread, or a process that has
/// exited and waits for its parent to reap it (a zombie: every thread gone). Read from `/proc/PID/stat`,
/// which everyone may read; `None` for a live process or a pid that cannot be read (the open says why).
fn not_a_user_process(pid: u32) -> Option<Failure> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    let (state, ppid) = (*fields.first()?, *fields.get(1)?);
    let flags: u64 = fields.get(6)?.parse().ok()?;
    if flags & PF_KTHREAD != 0 {
        return Some(Failure::new(
            EXIT_FAILURE,
            format!(
                "pid {pid} is a kernel thread ({comm}): it runs no user code, so attaching to it has nothing \
                 to sample.\n  Fix: use ntprof record --kernel to profile the kernel, kernel threads included \
                 (it needs root or CAP_PERFMON)"
            ),
        ));
    }
    // A process whose main thread ended with pthread_exit also reads Z while its other threads run.
    if state == "Z" && procs::live_threads(pid).is_empty() {
        return Some(Failure::new(
            EXIT_FAILURE,
            format!(
                "pid {pid} has exited and not been reaped (zombie): {comm} runs no more, nothing of it is \
                 left to profile; its parent (pid {ppid}) has not collected its exit status"
            ),
        ));
    }
    None
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
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
