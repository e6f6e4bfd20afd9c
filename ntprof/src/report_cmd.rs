//! `ntprof report FILE.json [OUTPUT OPTIONS]`: render a saved JSON profile again, in any format, without re-running.

use std::path::PathBuf;

use clap::Args;

use crate::output::{self, OutputArgs};
use crate::report::{Report, SCHEMA_VERSION};

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
    // The version first, so that a profile of a newer schema gets a message about versions, not about a field.
    let version = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| format!("{} is not JSON: {e}", file.display()))?
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| {
            format!(
                "{} is not an ntprof JSON profile (it has no schema_version)",
                file.display()
            )
        })?;
    if version > u64::from(SCHEMA_VERSION) {
        return Err(format!(
            "{} has schema version {version}, newer than this ntprof reads ({SCHEMA_VERSION}): use a newer ntprof",
            file.display()
        ));
    }
    serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a valid ntprof JSON profile: {e}", file.display()))
}

/// Run `ntprof report`.
pub fn run(args: &ReportArgs) -> Result<(), String> {
    let report = load(&args.file)?;
    output::emit(&report, &args.output)
}
