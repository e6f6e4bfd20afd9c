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
mod report_cmd;
mod sources;
mod text;
mod top;
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

fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("ntprof: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Write the report of a run and end with its exit status.
fn report(result: Result<Outcome, Failure>, out: &output::OutputArgs) -> ExitCode {
    match result {
        Ok(outcome) => {
            if let Err(msg) = output::emit(&outcome.report, out) {
                eprintln!("ntprof: error: {msg}");
                return ExitCode::FAILURE;
            }
            if let Some(w) = outcome.warning {
                eprintln!("ntprof: error: {w}");
                return ExitCode::from(2);
            }
            ExitCode::from(outcome.exit)
        }
        Err(f) => {
            eprintln!("ntprof: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Record(a) => {
            let progress = progress::Progress::new(a.quiet);
            let result = record::record(&a.options(), &progress);
            drop(progress);
            report(result, &a.output)
        }
        Command::Attach(a) => {
            let progress = progress::Progress::new(a.quiet);
            let result = record::attach(&a.options(), &progress);
            drop(progress);
            report(result, &a.output)
        }
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
