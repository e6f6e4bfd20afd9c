//! `ntprof record` / `ntprof attach` / `ntprof record --kernel`: start or find the target, profile it module by
//! module in every source, follow the libraries it maps later, and build the report.
//!
//! **From the first instruction.** `record` starts CMD under `PTRACE_TRACEME`: the kernel stops it right after
//! `execve`, before its first instruction. Then the executable and the dynamic loader are the only modules mapped;
//! their profiles (and the coarse profile over the whole user address space) start there. A breakpoint at the
//! program's entry point (`AT_ENTRY` of `/proc/PID/auxv`) stops it again once the dynamic loader has mapped every
//! library it needs: those get their profiles at that moment, exactly, and ntprof detaches, so that the ordinary
//! `waitpid` sees CMD's real exit status. Libraries mapped later (`dlopen`) are found by reading
//! `/proc/PID/maps` every `--poll-ms` milliseconds; their samples before their profile starts fall in the
//! coarse profile only, as *outside*, and the report states the delay.
//!
//! **Signals.** SIGINT and SIGTERM are blocked in ntprof and read from a signalfd: during `record` they are
//! forwarded to CMD (a Ctrl-C at the terminal reaches CMD directly and is not sent twice), during `attach` and a
//! command-less `--kernel` they end the run, which is then reported.

use std::collections::{BTreeSet, HashSet};
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use ntprofile::{NtStatus, Process, Profile, ProfileBuilder, ProfileSource};

use crate::args::{AttachArgs, ProfileArgs, RecordArgs};
use crate::collect::{self, ModuleKind, ModuleProfile, ModuleSpec, SourceRun, SymbolCache};
use crate::progress::{Progress, SourceProgress};
use crate::report::{Report, SCHEMA_VERSION};
use crate::symbols::{self, KERNEL_MODULE, Kallsyms, Mapping};

/// A failure with the exit status ntprof ends with.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong and how to fix it.
    pub message: String,
    /// The exit status.
    pub code: u8,
}

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

/// Where user space ends on x86-64 (and what the coarse user profile covers): `[0, 2^47)`.
const USER_END: u64 = 0x8000_0000_0000;
/// The canonical kernel half on x86-64 that the coarse kernel profile covers.
const KERNEL_START: u64 = 0xFFFF_8000_0000_0000;
const KERNEL_SIZE: u64 = 0x7FFF_FFFF_F000;
/// The coarse profiles' bucket: 2 GiB (a 64 K-counter histogram of the whole half).
const COARSE_BUCKET: u32 = 31;
/// How often progress is updated.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The message for a kernel profile refused for lack of privilege.
pub fn kernel_privilege_message() -> String {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unreadable".into());
    format!(
        "profiling the kernel needs CAP_PERFMON (or CAP_SYS_ADMIN, or root), or \
         kernel.perf_event_paranoid <= 1 (it is {paranoid} here).\n  \
         Fix: run ntprof as root, or 'sudo setcap cap_perfmon+ep ntprof', or \
         'sudo sysctl kernel.perf_event_paranoid=1'"
    )
}

/// A library error during a profile's creation or start, with the fix.
fn explain(what: &str, err: &ntprofile::Error, pid: Option<u32>) -> Failure {
    let status = err.status();
    let base = format!("{what}: {err}");
    if status == NtStatus::PRIVILEGE_NOT_HELD {
        return Failure::new(EXIT_FAILURE, kernel_privilege_message());
    }
    if status == NtStatus::ACCESS_DENIED {
        let who = pid.map_or(String::new(), |p| format!(" process {p}"));
        return Failure::new(
            EXIT_FAILURE,
            format!(
                "{base}\n  not allowed to profile{who}: it belongs to another user (or \
                 kernel.yama.ptrace_scope forbids it).\n  Fix: run ntprof as the process's owner, or as root / \
                 with CAP_PERFMON"
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
                "{base}\n  out of file descriptors or perf ring memory: raise 'ulimit -n', or \
                 kernel.perf_event_mlock_kb, or profile fewer modules (--module)"
            ),
        );
    }
    Failure::new(EXIT_FAILURE, base)
}

/// Who the profiles observe.
#[derive(Clone)]
enum Target {
    Process(Process),
    Global,
}

/// The profiles of a run.
struct Recorder {
    target: Target,
    opts: ProfileArgs,
    t0: Instant,
    sources: Vec<SourceRun>,
    /// `(start, path)` of the executable mappings already profiled or skipped.
    known: HashSet<(u64, String)>,
    /// Module names seen in the process (for `--module` errors).
    seen: BTreeSet<String>,
    /// The `--module` names that matched a mapping.
    matched: HashSet<String>,
    /// Modules that appeared during the run and could not be profiled (the run goes on without them).
    problems: Vec<String>,
}

/// The short name of a module path.
fn module_name(path: &str) -> String {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.rsplit('/').next().unwrap_or(path).to_string()
}

impl Recorder {
    /// Check the sources, set their intervals and jitter, create and start the coarse profiles.
    fn new(
        target: Target,
        opts: &ProfileArgs,
        kernel: bool,
        t0: Instant,
    ) -> Result<Recorder, Failure> {
        if let Some(list) = &opts.cpus {
            let online = ntprofile::affinity::online_cpus();
            let offline: Vec<String> = list
                .0
                .iter()
                .filter(|c| !online.contains(**c))
                .map(usize::to_string)
                .collect();
            if !offline.is_empty() {
                let on: Vec<String> = online.iter().map(|c| c.to_string()).collect();
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!(
                        "--cpus: processor {} is not online (online: {})",
                        offline.join(", "),
                        on.join(",")
                    ),
                ));
            }
        }
        if let Some(source) = opts.interval_for_unused_source() {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "--interval {}=...: {} is not a source of this run (add --source {})",
                    source.name(),
                    source.name(),
                    source.name()
                ),
            ));
        }
        let mut unique: Vec<ProfileSource> = Vec::new();
        for &s in &opts.sources {
            if !unique.contains(&s) {
                unique.push(s);
            }
        }
        let mut sources = Vec::new();
        for source in unique {
            let support = source.support();
            if !support.is_supported() {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!(
                        "source {} ({:#x}) cannot be sampled on this machine: {}.\n  \
                         Fix: pick a source that 'ntprof sources' lists as available here (Timer, task-clock, \
                         page-faults, ...)",
                        source.name(),
                        source.to_raw(),
                        support.reason()
                    ),
                ));
            }
            if let Some(i) = opts.interval_for(source) {
                ntprofile::set_interval(source, i);
            }
            ntprofile::set_jitter(source, opts.jitter)
                .map_err(|e| explain("--jitter", &e, None))?;
            let (base, size) = if kernel {
                (KERNEL_START, KERNEL_SIZE)
            } else {
                (0, USER_END)
            };
            let pid = match &target {
                Target::Process(p) => Some(p.pid()),
                Target::Global => None,
            };
            let coarse = builder(&target, opts, source, base, size, COARSE_BUCKET)
                .build()
                .map_err(|e| explain("creating the profile", &e, pid))?;
            sources.push(SourceRun {
                source,
                interval: ntprofile::query_interval(source),
                jitter: opts.jitter,
                coarse,
                modules: Vec::new(),
                run_start: t0,
            });
        }
        let rec = Recorder {
            target,
            opts: opts.clone(),
            t0,
            sources,
            known: HashSet::new(),
            seen: BTreeSet::new(),
            matched: HashSet::new(),
            problems: Vec::new(),
        };
        for s in &rec.sources {
            s.coarse
                .start()
                .map_err(|e| explain("starting the profile", &e, rec.pid()))?;
        }
        Ok(rec)
    }

    fn pid(&self) -> Option<u32> {
        match &self.target {
            Target::Process(p) => Some(p.pid()),
            Target::Global => None,
        }
    }

    /// True when `--module` selects this module (or no `--module`/`--range` narrows the run).
    fn wanted(&mut self, name: &str, path: &str) -> bool {
        if self.opts.modules.is_empty() {
            return self.opts.ranges.is_empty();
        }
        let hit = self
            .opts
            .modules
            .iter()
            .find(|m| m.as_str() == name || m.as_str() == path)
            .cloned();
        match hit {
            Some(m) => {
                self.matched.insert(m);
                true
            }
            None => false,
        }
    }

    /// Create and start a profile of `spec` in every source.
    fn add_module(&mut self, spec: ModuleSpec) -> Result<(), Failure> {
        let spec = Arc::new(spec);
        let pid = self.pid();
        for s in &mut self.sources {
            let profile = builder(
                &self.target,
                &self.opts,
                s.source,
                spec.start,
                spec.end - spec.start,
                self.opts.bucket,
            )
            .build()
            .map_err(|e| explain(&format!("creating the profile of {}", spec.name), &e, pid))?;
            profile
                .start()
                .map_err(|e| explain(&format!("starting the profile of {}", spec.name), &e, pid))?;
            s.modules.push(ModuleProfile {
                spec: spec.clone(),
                profile,
                from: Instant::now(),
            });
        }
        Ok(())
    }

    /// Profile every executable file mapping of `maps` not seen before (that `--module` selects).
    fn add_mappings(&mut self, maps: &[Mapping]) -> Result<usize, Failure> {
        let mut added = 0;
        for m in maps.iter().filter(|m| m.is_executable() && m.is_file()) {
            if !self.known.insert((m.start, m.path.clone())) {
                continue;
            }
            let name = module_name(&m.path);
            self.seen.insert(name.clone());
            if !self.wanted(&name, &m.path) {
                continue;
            }
            self.add_module(ModuleSpec {
                name,
                path: m.path.clone(),
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                kind: ModuleKind::Elf(m.clone()),
            })?;
            added += 1;
        }
        Ok(added)
    }

    /// Profile the raw `--range`s.
    fn add_ranges(&mut self) -> Result<(), Failure> {
        for r in self.opts.ranges.clone() {
            let name = format!("range:{:#x}-{:#x}", r.start, r.end);
            self.add_module(ModuleSpec {
                name,
                path: "[range]".into(),
                start: r.start,
                end: r.end,
                file_offset: 0,
                kind: ModuleKind::Raw,
            })?;
        }
        Ok(())
    }

    /// Read the process's maps now and profile the new modules.
    fn poll_maps(&mut self) -> Result<usize, Failure> {
        let Some(pid) = self.pid() else { return Ok(0) };
        match symbols::read_maps(&pid.to_string()) {
            Ok(maps) => self.add_mappings(&maps),
            // The process is gone (or going): nothing new to profile.
            Err(_) => Ok(0),
        }
    }

    /// Poll while the program runs: a module that cannot be profiled now (descriptors or ring memory
    /// exhausted, say) is reported in the notes, and the run goes on; its samples count as outside.
    fn poll_during_run(&mut self) {
        if let Err(f) = self.poll_maps() {
            if self.problems.len() < 10 {
                self.problems.push(f.message.replace('\n', " "));
            }
        }
    }

    fn progress(&self) -> Vec<SourceProgress> {
        self.sources
            .iter()
            .map(|s| {
                let coarse = s.coarse.stats();
                let counted: u64 = s.modules.iter().map(|m| m.profile.stats().counted).sum();
                SourceProgress {
                    name: s.source.name().to_string(),
                    counted,
                    outside: (coarse.counted + coarse.outside).saturating_sub(counted),
                    lost: coarse.lost,
                }
            })
            .collect()
    }

    /// Stop every profile: the modules first, the coarse profiles last (so that every module sample is also a
    /// coarse sample, and `outside` is exact).
    fn stop(&self) {
        for s in &self.sources {
            for m in &s.modules {
                let _ = m.profile.stop();
            }
        }
        for s in &self.sources {
            let _ = s.coarse.stop();
        }
    }

    /// The profiled program runs from now on: `profiled_from_ms` counts from here.
    fn mark_run_start(&mut self) {
        let now = Instant::now();
        for s in &mut self.sources {
            s.run_start = now;
        }
    }

    /// The `--module` names that never matched.
    fn unmatched(&self) -> Vec<String> {
        self.opts
            .modules
            .iter()
            .filter(|m| !self.matched.contains(*m))
            .cloned()
            .collect()
    }
}

fn builder(
    target: &Target,
    opts: &ProfileArgs,
    source: ProfileSource,
    base: u64,
    size: u64,
    bucket: u32,
) -> ProfileBuilder {
    let mut b = Profile::builder()
        .range(base as usize, size as usize)
        .bucket_size(bucket)
        .source(source);
    b = match target {
        Target::Process(p) => b.process(p),
        Target::Global => b.global(),
    };
    match &opts.cpus {
        Some(list) => b.cpus(list.0.iter().copied()),
        None => b.all_cpus(),
    }
}

/// SIGINT and SIGTERM, blocked in ntprof and read from a signalfd.
fn block_signals() -> Result<(SigSet, SignalFd), Failure> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot block SIGINT: {e}")))?;
    let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot create a signalfd: {e}")))?;
    Ok((set, fd))
}

/// A signal read from the signalfd: its number and whether a process (not the terminal) sent it.
fn pending_signal(fd: &SignalFd) -> Option<(Signal, bool)> {
    let info = fd.read_signal().ok()??;
    let sig = Signal::try_from(info.ssi_signo as i32).ok()?;
    // SI_USER (0) / SI_QUEUE / SI_TKILL: sent by kill(); a terminal's Ctrl-C comes from the kernel (SI_KERNEL).
    let from_process = info.ssi_code <= 0;
    Some((sig, from_process))
}

/// The exit status of a finished child, shell-style.
fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// The AT_ENTRY value of a process's auxiliary vector.
fn entry_point(pid: u32) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|pair| {
        let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
        let val = u64::from_ne_bytes(pair[8..].try_into().ok()?);
        (key == 9).then_some(val) // AT_ENTRY
    })
}

/// What happened while running a traced child to its entry point.
enum AtEntry {
    /// Stopped at the entry point (breakpoint removed, instruction pointer restored).
    Stopped,
    /// It ended before reaching it.
    Exited(WaitStatus),
    /// The breakpoint could not be used; the child is still stopped where it was.
    Unavailable,
}

/// Run a child stopped after `execve` to its entry point with a one-shot int3 breakpoint.
fn run_to_entry(pid: Pid, entry: u64) -> AtEntry {
    let addr = entry as ptrace::AddressType;
    let Ok(orig) = ptrace::read(pid, addr) else {
        return AtEntry::Unavailable;
    };
    let patched = (orig & !0xff) | 0xcc;
    if ptrace::write(pid, addr, patched).is_err() {
        return AtEntry::Unavailable;
    }
    let mut deliver: Option<Signal> = None;
    loop {
        if ptrace::cont(pid, deliver).is_err() {
            return AtEntry::Unavailable;
        }
        match waitpid(pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {
                let Ok(mut regs) = ptrace::getregs(pid) else {
                    return AtEntry::Unavailable;
                };
                if regs.rip != entry + 1 {
                    // Not our breakpoint (the program raised SIGTRAP itself): deliver it.
                    deliver = Some(Signal::SIGTRAP);
                    continue;
                }
                regs.rip = entry;
                if ptrace::write(pid, addr, orig).is_err() || ptrace::setregs(pid, regs).is_err() {
                    return AtEntry::Unavailable;
                }
                return AtEntry::Stopped;
            }
            Ok(WaitStatus::Stopped(_, sig)) => deliver = Some(sig),
            Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                return AtEntry::Exited(st);
            }
            Ok(_) => deliver = None,
            Err(_) => return AtEntry::Unavailable,
        }
    }
}

fn spawn_error(cmd: &str, err: &std::io::Error) -> Failure {
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

/// The outcome of a run: the report and ntprof's exit status.
pub struct Outcome {
    /// The report.
    pub report: Report,
    /// The exit status ntprof should end with (CMD's for `record`).
    pub exit: u8,
    /// A message to print after the report (with exit status 2 if set and the run itself succeeded).
    pub warning: Option<String>,
}

fn finish_report(
    rec: &Recorder,
    mut run: crate::report::RunInfo,
    cache: &mut SymbolCache,
) -> Report {
    let (sources, spent) = collect::build_sources(&rec.sources, run.duration_s, cache);
    run.symbolize_ms = spent.as_secs_f64() * 1000.0;
    Report {
        schema_version: SCHEMA_VERSION,
        tool: format!("ntprof {}", env!("CARGO_PKG_VERSION")),
        run,
        sources,
    }
}

fn user_notes(rec: &Recorder, poll_ms: u64, entry_breakpoint: Option<bool>) -> Vec<String> {
    let mut notes: Vec<String> = rec
        .problems
        .iter()
        .map(|p| {
            format!(
                "a module mapped during the run was not profiled (its samples are outside): {p}"
            )
        })
        .collect();
    notes.push(
        "user-space profiles: time the program spent in the kernel (system calls, page faults) is not \
         sampled here; 'ntprof record --kernel' profiles the kernel side"
            .to_string(),
    );
    match entry_breakpoint {
        Some(true) => notes.push(
            "the executable and the dynamic loader were profiled from the first instruction, the libraries \
             the loader mapped at startup from the program's entry point (their initializers ran before it: \
             those samples are outside)"
                .into(),
        ),
        Some(false) => notes.push(format!(
            "the libraries mapped at startup were found by polling (the entry-point breakpoint was not \
             available): each was profiled within {poll_ms} ms of being mapped"
        )),
        None => {}
    }
    notes.push(format!(
        "libraries mapped later (dlopen) are profiled within {poll_ms} ms of being mapped (the 'from' \
         column); their samples before that count as outside"
    ));
    if rec.sources.len() > 1 {
        notes.push("each source is sampled and reported on its own".into());
    }
    notes
}

/// `ntprof record -- CMD` (and `--kernel`).
pub fn record(args: &RecordArgs) -> Result<Outcome, Failure> {
    if args.kernel {
        return record_kernel(args);
    }
    if args.duration.is_some() {
        return Err(Failure::new(
            EXIT_USAGE,
            "--duration applies to 'record --kernel' and 'attach'; 'record -- CMD' runs until CMD exits",
        ));
    }
    let Some(cmd) = args.command.first() else {
        return Err(Failure::new(
            EXIT_USAGE,
            "no command to record: 'ntprof record [OPTIONS] -- CMD [ARGS...]'",
        ));
    };
    let (_set, sigfd) = block_signals()?;
    let started_at = collect::now_rfc3339();
    let mut command = std::process::Command::new(cmd);
    command.args(&args.command[1..]);
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
    let child = command.spawn().map_err(|e| spawn_error(cmd, &e))?;
    let pid_u = child.id();
    let pid = Pid::from_raw(pid_u as i32);
    // Stopped after execve, before the first instruction.
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
    let t0 = Instant::now();
    let fail = |f: Failure| {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
        f
    };
    let process =
        Process::open(pid_u).map_err(|e| fail(explain("opening the process", &e, Some(pid_u))))?;
    let mut rec =
        Recorder::new(Target::Process(process), &args.profile, false, t0).map_err(fail)?;
    rec.add_ranges().map_err(fail)?;
    rec.poll_maps().map_err(fail)?;
    // The program runs from now on: module profiles started so far cover it from its first instruction.
    rec.mark_run_start();
    let mut early_exit = None;
    let breakpoint = match entry_point(pid_u) {
        Some(entry) => match run_to_entry(pid, entry) {
            AtEntry::Stopped => {
                rec.poll_maps().map_err(fail)?;
                Some(true)
            }
            AtEntry::Exited(st) => {
                early_exit = Some(st);
                Some(true)
            }
            AtEntry::Unavailable => Some(false),
        },
        None => Some(false),
    };
    if early_exit.is_none() {
        let _ = ptrace::detach(pid, None);
    }

    let progress = Progress::new(
        &format!("record: {}", args.command.join(" ")),
        args.output.quiet,
    );
    let poll = Duration::from_millis(args.profile.poll_ms);
    let mut last_progress = Instant::now();
    let status = loop {
        if let Some(st) = early_exit {
            break st;
        }
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => break st,
            Ok(_) => {}
            Err(e) => return Err(Failure::new(EXIT_FAILURE, format!("waitpid: {e}"))),
        }
        while let Some((sig, from_process)) = pending_signal(&sigfd) {
            // The terminal's Ctrl-C reached CMD already (same process group); forward what was sent to us.
            if from_process {
                let _ = kill(pid, sig);
            }
        }
        rec.poll_during_run();
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress.update(t0.elapsed(), &rec.progress());
            last_progress = Instant::now();
        }
        std::thread::sleep(poll);
    };
    let duration = t0.elapsed();
    rec.stop();
    progress.finish();
    drop(child);

    let exit = exit_code(status);
    let mut run = collect::run_info(
        "record",
        args.command.clone(),
        Some(pid_u),
        duration.as_secs_f64(),
        started_at,
        exit,
        "exited",
        args.profile.cpus.as_ref().map(|c| c.0.clone()),
        args.profile.bucket,
        args.profile.poll_ms as f64,
    );
    run.notes = user_notes(&rec, args.profile.poll_ms, breakpoint);
    run.expected = args.profile.expect.clone();
    let report = finish_report(&rec, run, &mut SymbolCache::default());
    let warning = unmatched_warning(&rec);
    Ok(Outcome {
        report,
        exit: exit.map_or(EXIT_FAILURE, |c| c.clamp(0, 255) as u8),
        warning,
    })
}

fn unmatched_warning(rec: &Recorder) -> Option<String> {
    let missing = rec.unmatched();
    (!missing.is_empty()).then(|| {
        format!(
            "unknown module {}: no such module was mapped (modules seen: {})",
            missing.join(", "),
            rec.seen.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    })
}

/// The command line of a process (`/proc/PID/cmdline`).
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Wait for the end of a run that has no child of ours: a duration, a signal, or (`watch`) the process's exit.
fn wait_run(
    rec: &mut Recorder,
    sigfd: &SignalFd,
    duration: Option<f64>,
    watch: Option<&Process>,
    progress: &Progress,
    poll: Duration,
) -> Result<&'static str, Failure> {
    let deadline = duration.map(|d| rec.t0 + Duration::from_secs_f64(d));
    let mut last_progress = Instant::now();
    loop {
        if pending_signal(sigfd).is_some() {
            return Ok("interrupted");
        }
        if watch.is_some_and(Process::has_exited) {
            return Ok("process-exited");
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok("duration");
        }
        rec.poll_during_run();
        if last_progress.elapsed() >= PROGRESS_EVERY {
            progress.update(rec.t0.elapsed(), &rec.progress());
            last_progress = Instant::now();
        }
        let left = deadline.map_or(poll, |d| {
            d.saturating_duration_since(Instant::now()).min(poll)
        });
        std::thread::sleep(left.max(Duration::from_millis(1)));
    }
}

/// `ntprof attach --pid PID`.
pub fn attach(args: &AttachArgs) -> Result<Outcome, Failure> {
    let (_set, sigfd) = block_signals()?;
    let started_at = collect::now_rfc3339();
    let process =
        Process::open(args.pid).map_err(|e| explain("opening the process", &e, Some(args.pid)))?;
    let command = cmdline(args.pid);
    let maps = symbols::read_maps(&args.pid.to_string()).map_err(|e| {
        Failure::new(
            EXIT_FAILURE,
            format!(
                "cannot read /proc/{}/maps: {e} (has the process exited?)",
                args.pid
            ),
        )
    })?;
    let t0 = Instant::now();
    let mut rec = Recorder::new(Target::Process(process.clone()), &args.profile, false, t0)?;
    rec.add_ranges()?;
    rec.add_mappings(&maps)?;
    if let Some(w) = unmatched_warning(&rec) {
        rec.stop();
        return Err(Failure::new(
            EXIT_USAGE,
            format!("{w}\n  Fix: --module takes a name from that list"),
        ));
    }
    rec.mark_run_start();
    let progress = Progress::new(&format!("attach: pid {}", args.pid), args.output.quiet);
    let poll = Duration::from_millis(args.profile.poll_ms);
    let ended_by = wait_run(
        &mut rec,
        &sigfd,
        args.duration,
        Some(&process),
        &progress,
        poll,
    )?;
    let duration = t0.elapsed();
    rec.stop();
    progress.finish();
    let mut run = collect::run_info(
        "attach",
        command,
        Some(args.pid),
        duration.as_secs_f64(),
        started_at,
        None,
        ended_by,
        args.profile.cpus.as_ref().map(|c| c.0.clone()),
        args.profile.bucket,
        args.profile.poll_ms as f64,
    );
    run.notes = user_notes(&rec, args.profile.poll_ms, None);
    run.expected = args.profile.expect.clone();
    if ended_by == "process-exited" {
        run.notes.push(format!(
            "process {} exited during the attach; the report covers it up to its exit",
            args.pid
        ));
    }
    let report = finish_report(&rec, run, &mut SymbolCache::default());
    Ok(Outcome {
        report,
        exit: 0,
        warning: None,
    })
}

/// `ntprof record --kernel [--duration S | -- CMD]`.
fn record_kernel(args: &RecordArgs) -> Result<Outcome, Failure> {
    if args.duration.is_some() && !args.command.is_empty() {
        return Err(Failure::new(
            EXIT_USAGE,
            "give either --duration or a command to 'record --kernel', not both",
        ));
    }
    let (_set, sigfd) = block_signals()?;
    let started_at = collect::now_rfc3339();
    let kallsyms = Kallsyms::load().map_err(|e| Failure::new(EXIT_FAILURE, e))?;
    let t0 = Instant::now();
    // The privilege is checked by the library when the first kernel-range profile is created.
    let mut rec = Recorder::new(Target::Global, &args.profile, true, t0)?;
    let Some((stext, etext)) = kallsyms.text else {
        rec.stop();
        return Err(Failure::new(
            EXIT_FAILURE,
            format!(
                "/proc/kallsyms shows no kernel addresses (kernel.kptr_restrict hides them).\n  {}",
                kernel_privilege_message()
            ),
        ));
    };
    rec.add_ranges()?;
    let mut kernel_modules = vec![(KERNEL_MODULE.to_string(), stext, etext - stext)];
    kernel_modules.extend(kallsyms.loaded.iter().cloned());
    for (name, start, size) in kernel_modules {
        let path = if name == KERNEL_MODULE {
            "[kernel.kallsyms]".to_string()
        } else {
            format!("[module {name}]")
        };
        rec.seen.insert(name.clone());
        if !rec.wanted(&name, &path) {
            continue;
        }
        rec.add_module(ModuleSpec {
            kind: ModuleKind::Kernel(name.clone()),
            name,
            path,
            start,
            end: start + size,
            file_offset: 0,
        })?;
    }
    if let Some(w) = unmatched_warning(&rec) {
        rec.stop();
        return Err(Failure::new(
            EXIT_USAGE,
            format!("{w}\n  Fix: --module takes a name from that list"),
        ));
    }
    rec.mark_run_start();
    let what = if args.command.is_empty() {
        "record --kernel".to_string()
    } else {
        format!("record --kernel: {}", args.command.join(" "))
    };
    let progress = Progress::new(&what, args.output.quiet);
    let poll = Duration::from_millis(args.profile.poll_ms);
    let (ended_by, exit) = if let Some(cmd) = args.command.first() {
        let mut command = std::process::Command::new(cmd);
        command.args(&args.command[1..]);
        // SAFETY: runs in the forked child before execve; sigprocmask only (async-signal-safe).
        unsafe {
            command.pre_exec(|| SigSet::all().thread_unblock().map_err(std::io::Error::from));
        }
        let child = match command.spawn() {
            Ok(c) => c,
            Err(e) => {
                rec.stop();
                return Err(spawn_error(cmd, &e));
            }
        };
        let pid = Pid::from_raw(child.id() as i32);
        let mut last_progress = Instant::now();
        let status = loop {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => break st,
                Ok(_) => {}
                Err(e) => return Err(Failure::new(EXIT_FAILURE, format!("waitpid: {e}"))),
            }
            while let Some((sig, from_process)) = pending_signal(&sigfd) {
                if from_process {
                    let _ = kill(pid, sig);
                }
            }
            if last_progress.elapsed() >= PROGRESS_EVERY {
                progress.update(t0.elapsed(), &rec.progress());
                last_progress = Instant::now();
            }
            std::thread::sleep(poll);
        };
        ("exited", exit_code(status))
    } else {
        (
            wait_run(&mut rec, &sigfd, args.duration, None, &progress, poll)?,
            None,
        )
    };
    let duration = t0.elapsed();
    rec.stop();
    progress.finish();
    let mut run = collect::run_info(
        "kernel",
        args.command.clone(),
        None,
        duration.as_secs_f64(),
        started_at,
        exit,
        ended_by,
        args.profile.cpus.as_ref().map(|c| c.0.clone()),
        args.profile.bucket,
        0.0,
    );
    run.expected = args.profile.expect.clone();
    run.notes.push(
        "system-wide kernel profile: samples of every process in user space, and in kernel memory outside \
         the kernel's text and its modules, count as outside"
            .into(),
    );
    let report = finish_report(&rec, run, &mut SymbolCache::with_kallsyms(kallsyms));
    Ok(Outcome {
        report,
        exit: exit.map_or(0, |c| c.clamp(0, 255) as u8),
        warning: None,
    })
}
