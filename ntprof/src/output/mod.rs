//! Where and in which formats a [`Report`] is written: `--format`, `--output`, and the extra outputs.
//!
//! Shared by `ntprof record`, `ntprof attach` and `ntprof report` (flattened into each with clap). Every format is
//! rendered from the [`Report`] alone. Each output is rendered in memory and then written in one go, a file under
//! a temporary name renamed when complete ([`mod@write`]); a failed write is an error naming the file (or standard
//! output), except a broken pipe (`ntprof report … | head`), which ends that output quietly as other Unix tools
//! do. Every file a run will write is checked before it starts ([`check`]), and a run whose output still fails at
//! its end keeps its profile in a fallback file ([`Emit::keep`]).

#[cfg(test)]
pub(crate) use ntprof_engine::output::fixture;
pub use ntprof_engine::output::json;
use ntprof_engine::output::{flame, pprof, table};

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::report::Report;
use write::{Sink, WriteError, write_all};
pub use write::{check_file, check_folder, say};

mod write;

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
    /// A flame graph (SVG): with call stacks (-g), command -> callers -> function -> inlined functions;
    /// without, module -> function -> inlined function -> file:line.
    Flamegraph,
    /// Folded stacks, one line per stack: `frame;frame;... samples` (for flamegraph.pl, speedscope, inferno).
    Folded,
}

impl Format {
    /// The format a file name asks for by its extension, if any.
    pub fn from_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let ends = |ext: &str| name.ends_with(ext);
        if ends(".json") {
            Some(Format::Json)
        } else if ends(".csv") {
            Some(Format::Csv)
        } else if ends(".pb.gz") || ends(".pb") || ends(".pprof") {
            Some(Format::Pprof)
        } else if ends(".svg") {
            Some(Format::Flamegraph)
        } else if ends(".folded") {
            Some(Format::Folded)
        } else {
            None
        }
    }
}

/// Output options common to every command that produces a report.
#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// Format of the main output. Default: from the --output file's extension (.json, .csv, .pb.gz/.pprof, .svg),
    /// otherwise text.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Write the main output to FILE instead of standard output ('-' is standard output). 'record -- CMD' shares
    /// standard output with CMD, so there every format but text needs -o FILE, and the text report without -o
    /// goes to standard output on a terminal, otherwise to standard error.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the JSON report to FILE (read it again with 'ntprof report FILE').
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the CSV rows to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write a gzipped pprof profile to FILE (for 'pprof -top FILE', 'pprof -http=: FILE').
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,
    /// Also write a flame graph (SVG) to FILE: module -> function -> inlined function -> file:line. With several
    /// sources, the first goes to FILE and each other to FILE's name with '.SOURCE' before '.svg'.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// How many functions and lines the text report shows.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// With call stacks: the text report also prints the call tree (callers above callees, inclusive shares),
    /// down to branches of at least 0.5 % of the samples.
    #[arg(long)]
    pub call_tree: bool,
}

impl OutputArgs {
    /// The format of the main output: `--format`, else the `--output` file's extension, else text.
    pub fn main_format(&self) -> Format {
        self.format
            .or_else(|| self.output.as_deref().and_then(Format::from_path))
            .unwrap_or(Format::Text)
    }
}

/// Write `bytes` to standard output: a failure is an error with its reason, a closed pipe (`ntprof … | head`) is
/// not (the reader has gone; nothing is left to do).
pub fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    match write_all(&Sink::Stdout, bytes) {
        Ok(()) | Err(WriteError::BrokenPipe) => Ok(()),
        Err(WriteError::Failed(msg)) => Err(msg),
    }
}

/// Write `bytes` to the file `path` (`-`: standard output), flushed to the disk; a failure names the file and why.
pub fn write_path(path: &Path, bytes: &[u8]) -> Result<(), String> {
    match write_all(&Sink::of(Some(path)), bytes) {
        Ok(()) | Err(WriteError::BrokenPipe) => Ok(()),
        Err(WriteError::Failed(msg)) => Err(msg),
    }
}

/// The flame graph outputs: `path` for the first source, `path` with `.SOURCE` before the extension for the others.
fn flamegraphs(report: &Report, path: Option<&Path>) -> Vec<(Sink, Result<Vec<u8>, String>)> {
    if report.sources.is_empty() {
        return vec![(
            Sink::of(path),
            Err("the report has no source to draw a flame graph of".into()),
        )];
    }
    report
        .sources
        .iter()
        .enumerate()
        .map(|(i, source)| {
            let sink = match (i, path) {
                (0, _) => Sink::of(path),
                (_, None) => {
                    // Several SVG documents one after the other on standard output would be no SVG at all.
                    let msg = format!(
                        "a flame graph of {} too: several sources need --flamegraph FILE.svg (one file each)",
                        source.name
                    );
                    return (Sink::Stdout, Err(msg));
                }
                (_, Some(p)) => {
                    let name = p
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let tag: String = source
                        .name
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    let name = match name.strip_suffix(".svg") {
                        Some(stem) => format!("{stem}.{tag}.svg"),
                        None => format!("{name}.{tag}"),
                    };
                    Sink::File(p.with_file_name(name))
                }
            };
            (sink, flame::render_source(report, source))
        })
        .collect()
}

/// Render one of the single-document formats (the flame graph has one document per source: [`flamegraphs`]);
/// the text report's names fitted to `width`.
fn render(
    report: &Report,
    format: Format,
    (top, call_tree): (usize, bool),
    width: crate::text::Width,
) -> Result<Vec<u8>, String> {
    match format {
        Format::Text => {
            let mut text = crate::text::render(report, top, width);
            text.push_str(&crate::text::stacks::render(report, top, call_tree, width));
            Ok(text.into_bytes())
        }
        Format::Folded => Ok(flame::folded_text(report).into_bytes()),
        Format::Json => json(report),
        Format::Csv => table::render(report),
        Format::Pprof => pprof::render(report),
        Format::Flamegraph => flame::render_source(
            report,
            report
                .sources
                .first()
                .ok_or("the report has no source to draw a flame graph of")?,
        ),
    }
}

/// How [`emit`] writes a run's outputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Emit {
    /// A failed output keeps the profile in a fallback file (`$TMPDIR`, else `/tmp`: `ntprof-PID-START.json`),
    /// named in the error: a recording cannot be made again, a saved report can.
    pub keep: bool,
    /// The text report, when no file is given for it, goes to standard error rather than to standard output:
    /// `record` shares its standard output with the command.
    pub text_to_stderr: bool,
}

/// Write every output that `args` asks for: the files first, then the main output. Every output is attempted;
/// the error lists each one that failed (and, with [`Emit::keep`], where the profile was kept). A broken pipe
/// on an output is not an error (the reader has gone).
pub fn emit(report: &Report, args: &OutputArgs, how: Emit) -> Result<(), String> {
    let mut jobs: Vec<(Sink, Result<Vec<u8>, String>)> = Vec::new();
    if let Some(path) = &args.json {
        jobs.push((Sink::of(Some(path)), json(report)));
    }
    if let Some(path) = &args.csv {
        jobs.push((Sink::of(Some(path)), table::render(report)));
    }
    if let Some(path) = &args.pprof {
        jobs.push((Sink::of(Some(path)), pprof::render(report)));
    }
    if let Some(path) = &args.flamegraph {
        jobs.extend(flamegraphs(report, Some(path)));
    }
    let format = args.main_format();
    let mut main = Sink::of(args.output.as_deref());
    if format == Format::Text && main == Sink::Stdout && how.text_to_stderr {
        main = Sink::Stderr;
    }
    if format == Format::Pprof && main == Sink::Stdout && io::stdout().is_terminal() {
        jobs.push((
            main,
            Err("not writing a binary pprof profile to the terminal: give --output FILE.pb.gz, or redirect".into()),
        ));
    } else if format == Format::Flamegraph {
        jobs.extend(flamegraphs(report, args.output.as_deref()));
    } else {
        let width = text_width(&main);
        jobs.push((
            main,
            render(report, format, (args.top, args.call_tree), width),
        ));
    }

    let mut errors = Vec::new();
    for (sink, rendered) in jobs {
        match rendered
            .map_err(WriteError::Failed)
            .and_then(|bytes| write_all(&sink, &bytes))
        {
            Ok(()) | Err(WriteError::BrokenPipe) => {}
            Err(WriteError::Failed(msg)) => errors.push(msg),
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    if how.keep {
        errors.push(match json(report).and_then(|j| write::keep(&j, &report.run.started_at)) {
            Ok(kept) => format!(
                "the profile is kept in {}: 'ntprof report {}' writes it again in any format (-o FILE, \
                 --format, --json ...)",
                kept.display(),
                kept.display()
            ),
            Err(e) => format!("the profile could not be kept in a fallback file either: {e}"),
        });
    }
    Err(errors.join("\nntprof: error: "))
}

/// The width the text report fits its names to where it goes to a terminal: the terminal's columns (its
/// window size, TIOCGWINSZ; `COLUMNS` where that cannot be read; 80 without either). `None` (every name whole)
/// in a file or a pipe, where nothing wraps and a reader wants the names as they are.
fn text_width(sink: &Sink) -> crate::text::Width {
    let terminal = match sink {
        Sink::Stdout => io::stdout().is_terminal(),
        Sink::Stderr => io::stderr().is_terminal(),
        Sink::File(_) => false,
    };
    if !terminal {
        return None;
    }
    let columns = crossterm::terminal::size()
        .ok()
        .map(|(c, _)| usize::from(c))
        .filter(|&c| c > 0)
        .or_else(|| std::env::var("COLUMNS").ok()?.trim().parse().ok())
        .filter(|&c: &usize| c > 0);
    Some(columns.unwrap_or(80))
}

/// How a run whose command shares ntprof's standard output writes its outputs (`record -- CMD`): the profile
/// never mixes with the command's own output. A machine format (JSON, CSV, pprof, folded stacks, a flame graph)
/// goes only to a file: asked for on standard output (no `-o`, or `-` for a file), it is refused, before the
/// command starts, with the fix. The text report goes to standard output when that is a terminal, otherwise to
/// standard error (as `perf stat` and `time` report), unless `-o FILE` names its file (`-o -`: standard output,
/// asked for).
pub fn apart_from_command(args: &OutputArgs) -> Result<Emit, String> {
    let stdout = |p: &Option<PathBuf>| p.as_deref().is_none_or(|p| p == Path::new("-"));
    let format = args.main_format();
    if format != Format::Text && stdout(&args.output) {
        let name = format!("{format:?}").to_ascii_lowercase();
        let example = match format {
            Format::Json => "prof.json",
            Format::Csv => "prof.csv",
            Format::Pprof => "prof.pb.gz",
            Format::Flamegraph => "flame.svg",
            Format::Folded => "prof.folded",
            Format::Text => "report.txt",
        };
        return Err(format!(
            "--format {name} would go to standard output, which the command shares: its own output would mix \
             into the profile. Give the file for it with -o FILE (e.g. -o {example})"
        ));
    }
    let files = [
        ("--json", &args.json),
        ("--csv", &args.csv),
        ("--pprof", &args.pprof),
        ("--flamegraph", &args.flamegraph),
    ];
    if let Some((option, _)) = files
        .iter()
        .find(|(_, p)| p.as_deref() == Some(Path::new("-")))
    {
        return Err(format!(
            "{option} -: standard output is the command's too, and its own output would mix into the profile: \
             give a file name"
        ));
    }
    Ok(Emit {
        keep: true,
        text_to_stderr: args.output.is_none() && !io::stdout().is_terminal(),
    })
}

/// Check, before a run starts, every file `args` will write (see [`check_file`]); `-o DIR/` of a run cut
/// into windows is the windows' folder, checked by them.
pub fn check(args: &OutputArgs) -> Result<(), String> {
    let files = [
        ("--output", &args.output),
        ("--json", &args.json),
        ("--csv", &args.csv),
        ("--pprof", &args.pprof),
        ("--flamegraph", &args.flamegraph),
    ];
    for (option, path) in files {
        if let Some(p) = path {
            check_file(option, p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
