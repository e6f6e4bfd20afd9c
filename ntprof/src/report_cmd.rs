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
    let bytes = if file == std::path::Path::new("-") {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        bytes
    } else {
        std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?
    };
    let name = file.display().to_string();
    let text = String::from_utf8(bytes).map_err(|e| not_json(&name, e.as_bytes()))?;
    report::from_json(&text, &name)
}

/// Why a file that is not text cannot be rendered, and what reads it.
fn not_json(name: &str, bytes: &[u8]) -> String {
    let what = if bytes.starts_with(&[0x1f, 0x8b]) {
        "a gzip file (a pprof profile?)"
    } else {
        "binary data (a pprof profile?)"
    };
    format!(
        "{name} is {what}, not a JSON profile: 'ntprof report' renders the JSON profiles that \
         'record --json FILE' writes; 'ntprof diff' compares pprof profiles, and pprof's own tools render them"
    )
}

/// Run `ntprof report`.
pub fn run(args: &ReportArgs) -> Result<(), String> {
    let report = load(&args.file)?;
    if args.output.call_tree && report.run.call_graph.is_none() {
        return Err(format!(
            "--call-tree draws the call stacks, and {} has none (recorded without -g or --call-graph): record \
             again with -g or --call-graph dwarf",
            args.file.display()
        ));
    }
    output::emit(&report, &args.output, output::Emit::default())
}
