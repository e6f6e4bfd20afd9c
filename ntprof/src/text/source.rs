//! One source's tables: its commands (when several), modules, top functions and hottest lines, and the
//! designed shares against the measured ones (`--expect`).

use std::fmt::Write;

use super::names::fit_column;
use super::{bar, head, pct, tail};
use crate::report::{Expectation, SourceReport};

pub fn render(out: &mut String, s: &SourceReport, top: usize) {
    let total = s.stats.counted + s.stats.outside;
    let _ = writeln!(
        out,
        "\n== {} ({} samples, each {} {}) ==",
        s.name, total, s.sample_value, s.sample_unit
    );
    // Several commands: their table, and a command column in the function and line tables.
    let several = s.commands.len() > 1;
    if several {
        commands(out, s, top);
    }
    modules(out, s, total);
    let column = Column(several);
    if !s.functions.is_empty() {
        functions(out, s, top, total, column);
    }
    if !s.lines.is_empty() {
        lines(out, s, top, column);
    }
}

/// The command column of the function and line tables, present when the source has several commands.
#[derive(Clone, Copy)]
struct Column(bool);

impl Column {
    fn title(self) -> String {
        if self.0 {
            format!("{:<16} ", "Command")
        } else {
            String::new()
        }
    }
    fn cell(self, c: &str) -> String {
        if self.0 {
            format!("{:<16} ", head(c, 16))
        } else {
            String::new()
        }
    }
}

fn commands(out: &mut String, s: &SourceReport, top: usize) {
    let _ = writeln!(
        out,
        "\n  {:<20} {:>9} {:>7} {:>9}",
        "Command", "Samples", "Share", "Processes"
    );
    for c in s.commands.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:<20} {:>9} {:>7} {:>9}  {}",
            head(&c.command, 20),
            c.samples,
            pct(c.share),
            c.processes,
            bar(c.share)
        );
    }
    if s.commands.len() > top {
        let _ = writeln!(
            out,
            "  ({} more commands; --top N shows more)",
            s.commands.len() - top
        );
    }
}

fn modules(out: &mut String, s: &SourceReport, total: u64) {
    let _ = writeln!(
        out,
        "\n  {:<28} {:>9} {:>7}  {:>10}  path",
        "Module", "Samples", "Share", "from (ms)"
    );
    for m in &s.modules {
        let _ = writeln!(
            out,
            "  {:<28} {:>9} {:>7}  {:>10.1}  {}",
            tail(&m.name, 28),
            m.samples,
            pct(m.share),
            m.profiled_from_ms,
            m.path
        );
    }
    let outside_share = if total == 0 {
        0.0
    } else {
        s.stats.outside as f64 / total as f64
    };
    let _ = writeln!(
        out,
        "  {:<28} {:>9} {:>7}",
        "(outside every module)",
        s.stats.outside,
        pct(outside_share)
    );
    if s.stats.lost > 0 {
        let _ = writeln!(out, "  {:<28} {:>9}", "(lost: ring full)", s.stats.lost);
    }
}

fn functions(out: &mut String, s: &SourceReport, top: usize, total: u64, column: Column) {
    let names: Vec<&str> = s
        .functions
        .iter()
        .take(top)
        .map(|f| f.name.as_str())
        .collect();
    let (width, texts) = fit_column(&names, 36);
    let _ = writeln!(
        out,
        "\n  {:>9} {:>7}  {}{:<width$} Module",
        "Samples",
        "Share",
        column.title(),
        "Function"
    );
    for (f, text) in s.functions.iter().zip(&texts) {
        let _ = writeln!(
            out,
            "  {:>9} {:>7}  {}{:<width$} {:<26} {}",
            f.samples,
            pct(f.share),
            column.cell(&f.command),
            text,
            tail(&f.module, 26),
            bar(f.share)
        );
    }
    if s.functions.len() > top {
        let rest: u64 = s.functions.iter().skip(top).map(|f| f.samples).sum();
        let _ = writeln!(
            out,
            "  {:>9} {:>7}  ({} more functions; --top N shows more)",
            rest,
            pct(if total == 0 {
                0.0
            } else {
                rest as f64 / total as f64
            }),
            s.functions.len() - top
        );
    }
}

fn lines(out: &mut String, s: &SourceReport, top: usize, column: Column) {
    let names: Vec<&str> = s
        .lines
        .iter()
        .take(top)
        .map(|l| l.function.as_str())
        .collect();
    let (width, texts) = fit_column(&names, 20);
    let _ = writeln!(
        out,
        "\n  {:>9} {:>7}  {}{:<20} {:<width$} {:<26} source",
        "Samples",
        "Share",
        column.title(),
        "Line",
        "Function",
        "Module"
    );
    for (l, function) in s.lines.iter().zip(&texts) {
        let file = std::path::Path::new(&l.file)
            .file_name()
            .map_or(l.file.clone(), |f| f.to_string_lossy().into_owned());
        let _ = writeln!(
            out,
            "  {:>9} {:>7}  {}{:<20} {:<width$} {:<26} {}",
            l.samples,
            pct(l.share),
            column.cell(&l.command),
            tail(&format!("{file}:{}", l.line), 20),
            function,
            tail(&l.module, 26),
            l.text.as_deref().map(str::trim).unwrap_or("")
        );
    }
}

/// Designed against measured shares (`--expect`): each function's deviation in percentage points and in
/// standard deviations of a binomial share with this source's number of samples.
pub fn render_expected(out: &mut String, s: &SourceReport, expected: &[Expectation]) {
    let total = s.stats.counted + s.stats.outside;
    if expected.is_empty() || total == 0 {
        return;
    }
    let names: Vec<&str> = expected.iter().map(|e| e.function.as_str()).collect();
    let (width, texts) = fit_column(&names, 36);
    let _ = writeln!(
        out,
        "\n  {:<width$} {:>9} {:>9} {:>10} {:>8}",
        "Designed against measured", "designed", "measured", "deviation", "sigma"
    );
    let mut largest: Option<(f64, f64)> = None;
    for (e, text) in expected.iter().zip(&texts) {
        let samples: u64 = s
            .functions
            .iter()
            .filter(|f| f.name == e.function)
            .map(|f| f.samples)
            .sum();
        let designed = e.percent / 100.0;
        let measured = samples as f64 / total as f64;
        let points = (measured - designed) * 100.0;
        let sigma = (designed * (1.0 - designed) / total as f64).sqrt();
        let z = if sigma > 0.0 {
            (measured - designed) / sigma
        } else {
            0.0
        };
        if largest.is_none_or(|(p, _)| points.abs() > p.abs()) {
            largest = Some((points, z));
        }
        let _ = writeln!(
            out,
            "  {:<width$} {:>8.1}% {:>8.1}% {:>+6.1} pts {:>+8.2}",
            text,
            e.percent,
            measured * 100.0,
            points,
            z
        );
    }
    if let Some((points, z)) = largest {
        let _ = writeln!(
            out,
            "  largest deviation {:.1} points ({:.2} standard deviations of a share of {} samples)",
            points.abs(),
            z.abs(),
            total
        );
    }
}
