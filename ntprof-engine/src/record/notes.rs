//! What the reader needs to read a report right: notes on what the run saw and could not see, and, when a run
//! has no or few samples, why.

use super::session::Session;

/// Fewer samples than this and the report explains why.
const FEW: u64 = 50;

/// The notes of a user-space run (`record`, `attach`); `roots`: how many processes the run began with (the
/// command, or the attached processes).
pub fn user_notes(session: &Session, roots: usize) -> Vec<String> {
    let t = &session.tracker;
    let side = if session.kernel {
        "user and kernel time of the command and of every process it starts, one profile: kernel samples \
         (system calls, page faults, interrupts taken while it ran) are named from /proc/kallsyms, in the \
         kernel and its loaded modules; other processes and the idle CPUs are not sampled"
    } else {
        "user-space profiles: time the program spent in the kernel (system calls, page faults) is not \
         sampled here; 'ntprof record --kernel -- CMD' profiles the kernel side too"
    };
    let mut notes = vec![
        side.to_string(),
        "every mapping (executable, libraries, dlopen, JIT code) was reported by the kernel as it was made: \
         samples count in a module from the moment it was mapped (the 'from' column)"
            .to_string(),
    ];
    let running = t
        .processes
        .list
        .iter()
        .skip(roots)
        .filter(|p| p.exit_ns.is_none())
        .count();
    if running > 0 {
        notes.push(format!(
            "{} started during the run {} still running when it ended; profiled until then",
            count(running, "process", "processes"),
            were(running)
        ));
    }
    if t.late_processes > 0 {
        let late = t.late_processes as usize;
        notes.push(format!(
            "{} appeared without the kernel's record of {} creation; {} mappings were read from /proc when \
             {} first sample arrived",
            count(late, "process", "processes"),
            its(late),
            its(late),
            its(late)
        ));
    }
    if session.infos.len() > 1 {
        notes.push("each source is sampled and reported on its own".into());
    }
    notes.extend(super::rate::rate_notes(session));
    notes
}

/// The descendants an attach found running and did not profile.
pub struct LeftOut {
    /// How many.
    pub running: usize,
    /// They were left out because of `--no-inherit`.
    pub no_inherit: bool,
    /// The CPU seconds they used during the attach (user and system), when it could be read.
    pub cpu_s: Option<f64>,
}

/// Why a run has no or few samples, when it has: each reason the run's figures show.
/// `cpu`: user and system CPU seconds of what was profiled, when known; `record`: the command was started (not
/// attached to).
pub fn explanations(
    session: &Session,
    duration_s: f64,
    cpu: Option<(f64, f64)>,
    record: bool,
) -> Vec<String> {
    explain(session, duration_s, cpu, record, None)
}

/// [`explanations`] of an attach, which may have left out running descendants: then the profile never says
/// the process slept while they were busy, and names the option that left them out.
pub fn attach_explanations(
    session: &Session,
    duration_s: f64,
    cpu: Option<(f64, f64)>,
    left_out: &LeftOut,
) -> Vec<String> {
    explain(session, duration_s, cpu, false, Some(left_out))
}

fn explain(
    session: &Session,
    duration_s: f64,
    cpu: Option<(f64, f64)>,
    record: bool,
    left_out: Option<&LeftOut>,
) -> Vec<String> {
    let t = &session.tracker;
    let mut out = Vec::new();
    for (info, counts) in session.infos.iter().zip(&t.sources) {
        if counts.samples >= FEW {
            continue;
        }
        let name = info.source.name();
        let what = if record { "the command" } else { "the process" };
        out.push(format!(
            "{name}: only {}.",
            count(counts.samples as usize, "sample", "samples")
        ));
        let not_followed = t.processes.not_followed.len();
        if not_followed > 0 {
            out.push(format!(
                "{what} started {} that {} not profiled (--no-inherit); without --no-inherit ntprof profiles \
                 every process it starts",
                count(not_followed, "process", "processes"),
                were(not_followed)
            ));
        }
        if let Some(l) = left_out.filter(|l| l.running > 0) {
            let used = l.cpu_s.map_or(String::new(), |c| {
                format!(" and used {:.1} ms of CPU time during it", c * 1e3)
            });
            let (why, fix) = if l.no_inherit {
                (
                    "--no-inherit",
                    "without --no-inherit ntprof attach profiles the descendants running at the attach too",
                )
            } else {
                ("not allowed", "run ntprof as their owner, or as root")
            };
            out.push(format!(
                "{} of the process {} running at the attach{used} and not profiled ({why}): {fix}",
                count(l.running, "descendant", "descendants"),
                were(l.running)
            ));
        }
        if info.source.interval_unit() != ntprofile::IntervalUnit::Time100ns {
            out.push(format!(
                "{name} counts events ({} per sample): few of them happened",
                info.interval
            ));
            continue;
        }
        let interval_s = f64::from(info.interval) * 100e-9;
        if duration_s < interval_s {
            out.push(format!(
                "{what} ran {:.3} ms, less than one sampling interval ({:.3} ms); a shorter interval (-i) \
                 samples it more often",
                duration_s * 1e3,
                interval_s * 1e3
            ));
        }
        if let Some((user, system)) = cpu {
            let used = user + system;
            // Descendants left out that worked more than the process (or whose CPU time is unknown): the
            // process did not sleep, its work was done where the profile did not look.
            let busy_left_out = left_out
                .filter(|l| l.running > 0)
                .is_some_and(|l| l.cpu_s.is_none_or(|c| c > used.max(interval_s)));
            if used < 0.25 * duration_s && !busy_left_out {
                let off_cpu = if session.off_cpu.is_some() {
                    "; the Off-CPU section shows where it waited"
                } else {
                    "; 'ntprof record --off-cpu' (or 'attach --off-cpu') shows where it waited, by call stack"
                };
                out.push(format!(
                    "{what} used {:.1} ms of CPU time in {:.1} ms: it slept or waited most of the time, and \
                     samples are taken of CPU time only{off_cpu}",
                    used * 1e3,
                    duration_s * 1e3
                ));
            }
            if system > user && system >= interval_s && !session.kernel {
                out.push(format!(
                    "{:.1} ms of its CPU time was in the kernel (system calls, page faults), which a user-space \
                     profile does not sample; 'ntprof record --kernel' profiles it",
                    system * 1e3
                ));
            }
            if user < FEW as f64 * interval_s && used >= 0.25 * duration_s && system <= user {
                out.push(format!(
                    "{what} used {:.1} ms of user CPU time: about {:.0} samples at this interval; a shorter \
                     interval (-i) gives more",
                    user * 1e3,
                    user / interval_s
                ));
            }
        }
    }
    out
}

/// `n` and the noun in the number it takes: "1 process", "2 processes".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The verb after `n` things: "was" or "were".
pub fn were(n: usize) -> &'static str {
    if n == 1 { "was" } else { "were" }
}

/// The possessive after `n` things: "its" or "their".
fn its(n: usize) -> &'static str {
    if n == 1 { "its" } else { "their" }
}

/// The note of a run whose terminal hung up (SIGHUP `at` seconds into it) while a command ran: the hang-up was
/// passed on to the command, which ended with `exit` (shell-style) at some point after.
pub fn hangup_passed_on(at: f64, exit: Option<i32>) -> String {
    let ended = exit.map_or("ended".to_string(), |c| {
        format!("ended ({})", super::launch::ending(c))
    });
    format!(
        "ntprof's terminal hung up (SIGHUP) {at:.1} s into the run: the hang-up was passed on to the command, \
         which {ended}; the profile covers the run up to that exit"
    )
}

/// The note of a run (an attach, a system-wide profile) that a hang-up of ntprof's terminal ended.
pub fn hangup_ended(at: f64) -> String {
    format!(
        "ntprof's terminal hung up (SIGHUP) {at:.1} s into the run, which ended there; the profile covers it up \
         to then"
    )
}

/// `--off-cpu` turns on frame-pointer stacks unless `--call-graph` says otherwise: say how many of the CPU
/// samples have a chain that ended early, and the fix (the waits' own stacks are unwound from a copy with CFI).
pub fn offcpu_fp_note(sources: &[crate::report::SourceReport]) -> Option<String> {
    if !sources.iter().any(|s| s.is_off_cpu()) {
        return None;
    }
    let (ended, all) = sources
        .iter()
        .filter(|s| !s.is_off_cpu())
        .flat_map(|s| &s.stacks)
        .fold((0u64, 0u64), |(e, a), st| {
            (
                e + u64::from(st.fp_chain_ended) * st.samples,
                a + st.samples,
            )
        });
    (ended > 0).then(|| {
        format!(
            "{:.1} % of the CPU samples have a frame-pointer stack that ended early ([fp chain ended]): \
             --off-cpu records frame-pointer stacks unless --call-graph is given, and libc and most \
             distribution binaries are built without frame pointers; --off-cpu --call-graph dwarf walks them",
            ended as f64 * 100.0 / all.max(1) as f64
        )
    })
}
