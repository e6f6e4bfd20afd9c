//! `ntprof diff OLD NEW`: what changed between two profiles, function by function (the change of share, in
//! percentage points, and of time), the largest change first, and a differential flame graph.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use ntprof_engine::diff::{self, Row, Side};

use crate::output;
use crate::text::names;

/// The arguments of `ntprof diff`.
#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The profile before: an ntprof JSON profile (`--json FILE`) or a pprof profile (`--pprof FILE`, gzipped or
    /// not, ntprof's or another profiler's).
    #[arg(value_name = "OLD")]
    pub old: PathBuf,
    /// The profile after, in either format.
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    /// The source to compare: a JSON profile's source (Timer, page-faults, off_cpu, …) or a pprof sample type
    /// (samples, cpu, …); by default the first of each profile.
    #[arg(short = 's', long, value_name = "NAME")]
    pub source: Option<String>,
    /// How many functions to show, the largest changes first (0: every function of either profile).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 30)]
    pub top: usize,
    /// Also write a differential flame graph (SVG): the new profile's stacks, red where their share grew and
    /// blue where it shrank (the old profile scaled to the new one's total).
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
}

/// Run `ntprof diff`.
pub fn run(args: &DiffArgs) -> Result<(), String> {
    let source = args.source.as_deref();
    let old = diff::load(&args.old, source)?;
    let new = diff::load(&args.new, source)?;
    if old.total == 0 && new.total == 0 {
        return Err(format!(
            "neither {} nor {} has samples in source {}",
            args.old.display(),
            args.new.display(),
            new.source
        ));
    }
    if let Some(path) = &args.flamegraph {
        let title = format!("{} → {}", args.old.display(), args.new.display());
        let svg = diff::flame_graph(&old, &new, &title)?;
        output::write_path(path, &svg)?;
    }
    output::write_stdout(render(args, &old, &new).as_bytes())
}

/// The text of the comparison.
fn render(args: &DiffArgs, old: &Side, new: &Side) -> String {
    let rows = diff::compare(old, new);
    let mut out = String::new();
    let source = if old.source == new.source {
        format!("source {}", new.source)
    } else {
        format!("sources {} and {}", old.source, new.source)
    };
    let _ = writeln!(
        out,
        "ntprof diff: {} → {} ({source})",
        args.old.display(),
        args.new.display()
    );
    let _ = writeln!(out, "  old: {}", totals(old));
    let _ = writeln!(out, "  new: {}", totals(new));
    // A rebuilt program under another name: its functions are rows of both profiles, and this says why.
    for m in diff::module_matches(old, new) {
        let _ = writeln!(
            out,
            "  matched {} → {} ({}): functions compared by name",
            m.old,
            m.new,
            m.reason.describe()
        );
    }
    out.push('\n');
    let shown = match args.top {
        0 => rows.len(),
        n => n.min(rows.len()),
    };
    let timed = old.ns_per_sample.is_some() && new.ns_per_sample.is_some();
    let functions: Vec<&str> = rows[..shown].iter().map(|r| r.function.as_str()).collect();
    let (width, texts) = names::fit_column(&functions, 24);
    let _ = write!(out, "  {:>9} {:>7} {:>7}", "change", "old", "new");
    if timed {
        let _ = write!(
            out,
            " {:>10} {:>10} {:>11}",
            "old time", "new time", "time change"
        );
    }
    let _ = writeln!(out, "  {:<width$}  module", "function");
    for (row, text) in rows[..shown].iter().zip(&texts) {
        let _ = write!(
            out,
            "  {:>+8.1}p {:>6.1}% {:>6.1}%",
            row.change_points(),
            row.old_share * 100.0,
            row.new_share * 100.0
        );
        if timed {
            let _ = write!(
                out,
                " {} {} {}",
                ms(row.old_ns, false),
                ms(row.new_ns, false),
                ms(delta(row), true)
            );
        }
        let _ = writeln!(out, "  {text:<width$}  {}", row.module);
    }
    if shown < rows.len() {
        let largest = rows[shown].change_points().abs();
        let _ = writeln!(
            out,
            "  … {} more function{} changed by {largest:.1} points or less (-n 0 shows every one)",
            rows.len() - shown,
            if rows.len() - shown == 1 { "" } else { "s" }
        );
    }
    if let Some(path) = &args.flamegraph {
        let _ = writeln!(out, "\n  differential flame graph: {}", path.display());
    }
    out
}

/// A profile's samples and, for a time source, the time they stand for.
fn totals(side: &Side) -> String {
    let samples = format!(
        "{} sample{}",
        side.total,
        if side.total == 1 { "" } else { "s" }
    );
    match side.ns_per_sample {
        Some(ns) => format!("{samples} ({:.3} s)", side.total as f64 * ns / 1e9),
        None => samples,
    }
}

fn delta(row: &Row) -> Option<f64> {
    Some(row.new_ns? - row.old_ns?)
}

/// Nanoseconds as milliseconds in a column of 10 (`signed`: 11, with its sign).
fn ms(ns: Option<f64>, signed: bool) -> String {
    match (ns, signed) {
        (Some(ns), false) => format!("{:>7.1} ms", ns / 1e6),
        (Some(ns), true) => format!("{:>+8.1} ms", ns / 1e6),
        (None, false) => format!("{:>10}", "-"),
        (None, true) => format!("{:>11}", "-"),
    }
}
