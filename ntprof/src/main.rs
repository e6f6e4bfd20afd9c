//! `ntprof`: a kernrate-like command-line profiler built on ntprofile's NT profile API.
//!
//! `ntprof demo` profiles a bundled workload over ntprof's own text and prints a symbolized report;
//! `ntprof sources` lists the profile sources. Usage errors exit with code 2, run-time failures with 1.

mod args;
mod demo;
mod output;
mod progress;
mod report;
mod report_cmd;
mod sources;
mod symbols;
mod workload;

use std::io::Write;
use std::process::ExitCode;

use args::Command;

/// Write to stdout; a closed pipe (`ntprof sources | head`) is not an error.
fn emit(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("ntprof: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    match args::parse(std::env::args_os().skip(1)) {
        Ok(Command::Help(text)) => {
            emit(text);
            ExitCode::SUCCESS
        }
        Ok(Command::Version) => {
            emit(&format!("ntprof {}\n", env!("CARGO_PKG_VERSION")));
            ExitCode::SUCCESS
        }
        Ok(Command::Sources) => finish(sources::run().map(|text| emit(&text))),
        Ok(Command::Demo(opts)) => finish(demo::run(&opts, &mut |text| emit(text))),
        Err(err) => {
            eprintln!("ntprof: error: {err}\nRun 'ntprof --help' for usage.");
            ExitCode::from(2)
        }
    }
}
