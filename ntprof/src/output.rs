//! Where and in which formats a [`Report`] is written: `--format`, `--output`, and the extra outputs.
//!
//! Shared by `ntprof record`, `ntprof attach` and `ntprof report` (flattened into each with clap).
#![allow(dead_code)] // Filled in by the format work; the recorder already calls `emit`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::report::Report;

/// The formats of the main output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The human-readable report (the default).
    Text,
    /// The versioned JSON schema (docs/json-schema.md); `ntprof report` reads it back.
    Json,
    /// One row per (source, module, function, file, line, bucket address, samples), with a header row.
    Csv,
    /// Google's pprof `profile.proto`, gzipped.
    Pprof,
}

/// Output options common to every command that produces a report.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Format of the main output. Default: from the --output file's extension (.json, .csv, .pb.gz/.pprof),
    /// otherwise text.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Write the main output to FILE instead of the terminal.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the CSV rows to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write a gzipped pprof profile to FILE.
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,
    /// Also write a flame graph (SVG) to FILE: module -> function -> inlined function -> file:line.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// How many functions and lines the text report shows.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// No live progress on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// Write every output that `args` asks for.
pub fn emit(report: &Report, args: &OutputArgs) -> Result<(), String> {
    // Until the format work lands: the text report (or the JSON of the report) on stdout.
    use std::io::Write;
    let text = match args.format {
        Some(Format::Json) => {
            serde_json::to_string_pretty(report).map_err(|e| e.to_string())? + "\n"
        }
        _ => crate::text::render(report, args.top),
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write the report: {e}"))
        }
        _ => Ok(()),
    }
}
