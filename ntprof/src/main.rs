//! `ntprof`: a kernrate-like command-line profiler built on ntprofile's NT profile API.
//!
//! `ntprof record -- CMD` profiles a command and every process it starts from their first instruction to the
//! command's exit, `ntprof attach --pid PID` running processes, `ntprof record --kernel` the kernel; `ntprof sources` lists the profile sources and
//! `ntprof demo` profiles a bundled workload in-process. Usage errors exit with 2, run-time failures with 1,
//! `record` with the command's own exit status (127 when it cannot be found).

mod args;
mod demo;
mod diff_cmd;
mod output;
mod progress;
mod push;
mod report_cmd;
mod sources;
mod text;
mod top;
mod windows;
mod workload;

// The engine's modules under their old names, for the paths of the command's own modules.
use ntprof_engine::{record, report, symbols};

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use record::{Failure, Outcome};

/// Write to stdout; a closed pipe (`ntprof sources | head`) is not an error.
fn print(text: &str) -> Result<(), String> {
    output::write_stdout(text.as_bytes())
}

/// Say `msg` as an error on stderr (a terminal or pipe that is gone does not stop ntprof).
fn error(msg: &str) {
    output::say(&format!("ntprof: error: {msg}"));
}

fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            error(&msg);
            ExitCode::FAILURE
        }
    }
}

/// A usage error found after parsing (exit status 2, as clap's own).
fn usage_error(msg: &str) -> ExitCode {
    error(msg);
    ExitCode::from(2)
}

/// Write the report of a run and end with its exit status: 1 when an output could not be written (the profile
/// is then kept in a fallback file, named in the error).
fn report(
    result: Result<Outcome, Failure>,
    out: &output::OutputArgs,
    how: output::Emit,
) -> ExitCode {
    match result {
        Ok(outcome) => {
            if let Err(msg) = output::emit(&outcome.report, out, how) {
                error(&msg);
                return ExitCode::FAILURE;
            }
            if let Some(w) = outcome.warning {
                error(&w);
                return ExitCode::from(2);
            }
            ExitCode::from(outcome.exit)
        }
        Err(f) => {
            error(&f.message);
            ExitCode::from(f.code)
        }
    }
}

/// A run cut into windows (`--every`): each window written as it closes; at the end, what was written.
fn windowed(
    args: &windows::WindowArgs,
    out: &output::OutputArgs,
    quiet: bool,
    every: f64,
    progress: &progress::Progress,
    pushers: Option<push::Pushers>,
    run: impl FnOnce(record::Windows<'_>) -> Result<Outcome, Failure>,
) -> ExitCode {
    let dir = match windows::folder(args, out, pushers.is_some())
        .and_then(|dir| windows::check_format(out, dir.as_deref()).map(|()| dir))
    {
        Ok(dir) => dir,
        Err(msg) => return usage_error(&msg),
    };
    // The folder is created and checked before the run starts: a run is not made to be lost.
    let mut taker = match windows::Windows::new(dir, args.keep, progress, quiet) {
        Ok(t) => t,
        Err(msg) => return usage_error(&msg),
    };
    taker.push = pushers;
    let mut result = run(taker.engine(every));
    ntprof_engine::progress::Progress::finish(progress);
    // --push: the queues were drained at the last window; a run that ended without one drains them here.
    push::end_run(taker.push.take(), &mut result, false);
    match result {
        Ok(outcome) => {
            if let Some(line) = taker.summary(every) {
                output::say(&format!("ntprof: {line}"));
            }
            if let Some(w) = outcome.warning {
                error(&w);
                return ExitCode::from(2);
            }
            if taker.failed > 0 {
                return ExitCode::FAILURE;
            }
            ExitCode::from(outcome.exit)
        }
        Err(f) => {
            error(&f.message);
            ExitCode::from(f.code)
        }
    }
}

/// What `record` and `attach` share beyond the engine's options.
struct Recording<'a> {
    push: &'a push::PushArgs,
    /// The command line (empty for an attach).
    command: &'a [String],
    /// The first process given, if any.
    pid: Option<u32>,
    window: &'a windows::WindowArgs,
    output: &'a output::OutputArgs,
    profile: &'a args::ProfileArgs,
    quiet: bool,
}

/// A `record` or `attach`: the outputs and the pushes checked first (nothing runs when one of them cannot be
/// done), then the whole run (`whole`) or its windows (`cut`).
fn recording(
    r: Recording<'_>,
    whole: impl FnOnce(&progress::Progress) -> Result<Outcome, Failure>,
    cut: impl FnOnce(record::Windows<'_>, &progress::Progress) -> Result<Outcome, Failure>,
) -> ExitCode {
    match r.profile.check(r.output) {
        Ok(notes) => notes.iter().for_each(|n| eprintln!("ntprof: note: {n}")),
        Err(e) => return usage_error(&e),
    }
    if r.window.every.is_none()
        && let Err(msg) =
            windows::folder(r.window, r.output, false).and_then(|_| output::check(r.output))
    {
        return usage_error(&msg);
    }
    // A command shares ntprof's standard output: the profile is kept apart from its output.
    let how = match (
        r.command.is_empty() || r.window.every.is_some(),
        output::apart_from_command(r.output),
    ) {
        (true, _) => output::Emit {
            keep: true,
            text_to_stderr: false,
        },
        (false, Ok(how)) => how,
        (false, Err(msg)) => return usage_error(&msg),
    };
    let pushers = match push::Pushers::start(r.push, r.command, r.pid) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let progress = progress::Progress::new(r.quiet);
    if let Some(every) = r.window.every {
        return windowed(
            r.window,
            r.output,
            r.quiet,
            every,
            &progress,
            pushers,
            |w| cut(w, &progress),
        );
    }
    let mut result = whole(&progress);
    drop(progress);
    push::end_run(pushers, &mut result, true);
    report(result, r.output, how)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Record(a) => recording(
            Recording {
                push: &a.push,
                command: &a.command,
                pid: a.pid.first().copied(),
                window: &a.window,
                output: &a.output,
                profile: &a.profile,
                quiet: a.quiet,
            },
            |progress| record::record(&a.options(), progress),
            |w, progress| record::record_windows(&a.options(), w, progress),
        ),
        Command::Attach(a) => recording(
            Recording {
                push: &a.push,
                command: &[],
                pid: a.pid.first().copied(),
                window: &a.window,
                output: &a.output,
                profile: &a.profile,
                quiet: a.quiet,
            },
            |progress| record::attach(&a.options(), progress),
            |w, progress| record::attach_windows(&a.options(), w, progress),
        ),
        Command::Diff(a) => finish(diff_cmd::run(&a)),
        Command::Sources => finish(sources::run().and_then(|text| print(&text))),
        Command::Demo(opts) => {
            let mut written = Ok(());
            let run = demo::run(&opts, &mut |text| {
                if written.is_ok() {
                    written = print(text);
                }
            });
            finish(run.and(written))
        }
        Command::Report(a) => finish(report_cmd::run(&a)),
        Command::Top(a) => top::run(&a),
    }
}
