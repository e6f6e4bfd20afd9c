//! What both ways of recording a cgroup put in the report's run: its header before the run, and how the run
//! ended after it.

use std::time::Instant;

use super::super::session::Session;
use super::super::{Failure, launch, notes};
use super::path::CgroupRun;
use crate::collect;
use crate::progress::Progress;
use crate::report::RunInfo;

/// The run's header as the options give it (command, processors, bucket size, expected shares).
pub(super) fn template(r: &CgroupRun<'_>, started_at: String) -> RunInfo {
    let mut run = collect::run_info(r.mode, r.command.to_vec(), None, started_at);
    run.cpus = r.profile.cpus.as_ref().map(|c| c.0.clone());
    run.bucket_log2 = r.profile.bucket.unwrap_or(0);
    run.expected = r.profile.expect.clone();
    run
}

/// How a run ended, as the wait returned it: what ended it, the command's exit status, and when a hang-up came.
pub(super) type Ended = (&'static str, Option<i32>, Option<f64>);

/// The run after it ended: the session finished, the progress line closed, and the run's header with its
/// duration (from `t0`), the recorder's own CPU time and rounds, how it ended, and the notes (the user-space
/// notes for `processes` processes, a hang-up passed on to the command or ending the run).
pub(super) fn ended(
    r: &CgroupRun<'_>,
    (session, progress): (&mut Session, &dyn Progress),
    (started_at, t0): (String, Instant),
    (ended_by, exit, hangup): Ended,
    has_command: bool,
    processes: usize,
) -> Result<RunInfo, Failure> {
    let duration = t0.elapsed();
    session.finish()?;
    progress.finish();
    let mut run = template(r, started_at);
    run.duration_s = duration.as_secs_f64();
    run.recorder_cpu_ms = launch::own_cpu() * 1e3;
    run.recorder_rounds = session.rounds;
    run.exit_status = exit;
    run.ended_by = ended_by.into();
    run.notes = notes::user_notes(session, processes.max(1));
    match hangup {
        Some(at) if has_command => run.notes.push(notes::hangup_passed_on(at, exit)),
        Some(at) => run.notes.push(notes::hangup_ended(at)),
        None => {}
    }
    Ok(run)
}
