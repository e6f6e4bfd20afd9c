//! `ntprof report FILE.json [OUTPUT OPTIONS]`: render a saved JSON profile again, in any format, without re-running.

use std::path::PathBuf;

use clap::Args;

use crate::output::{self, OutputArgs};
use crate::report::{self, Report};

/// The arguments of `ntprof report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// A JSON profile written by `ntprof record/attach --json FILE` (or `--format json`); '-' reads standard input.
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,
    /// Where and how to write the report.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Read and check a JSON profile.
pub fn load(file: &std::path::Path) -> Result<Report, String> {
    let text = if file == std::path::Path::new("-") {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| format!("cannot read standard input: {e}"))?
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?
    };
    report::from_json(&text, &file.display().to_string())
}

/// Run `ntprof report`.
pub fn run(args: &ReportArgs) -> Result<(), String> {
    let report = load(&args.file)?;
    output::emit(&report, &args.output, output::Emit::default())
}
