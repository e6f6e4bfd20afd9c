//! One source's tables: its commands (when several), modules, top functions and hottest lines, and the
//! designed shares against the measured ones (`--expect`).

use std::fmt::Write;

use super::names::{fit_column_in, fit_plain};
use super::{Width, bar, cap, head, pct, tail};
use crate::report::{Expectation, SourceReport};

/// The columns of two names side by side in `budget` characters (`None`: no limit, both whole), each wanting its
/// longest text and given at least its floor: the first (the function) has the room first, the second (the
/// module) at least a third of it.
fn split(
    budget: Width,
    (a_long, a_min): (usize, usize),
    (b_long, b_min): (usize, usize),
) -> (Width, Width) {
    let Some(budget) = budget else {
        return (None, None);
    };
    let (a_long, b_long) = (a_long.max(a_min), b_long.max(b_min));
    if a_long + b_long <= budget {
        return (Some(a_long), Some(b_long));
    }
    let b = b_long.min(b_min.max(budget / 3));
    let a = a_long.min(a_min.max(budget.saturating_sub(b)));
    let b = b_long.min(b_min.max(budget.saturating_sub(a)));
    (Some(a), Some(b))
}

/// The longest of `texts`, in characters.
fn longest<'a>(texts: impl IntoIterator<Item = &'a str>) -> usize {
    texts
        .into_iter()
        .map(|t| t.chars().count())
        .max()
        .unwrap_or(0)
}

pub fn render(out: &mut String, s: &SourceReport, top: usize, width: Width) {
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
    modules(out, s, total, width);
    let column = Column(several);
    if !s.functions.is_empty() {
        functions(out, s, (top, total), column, width);
    }
    if !s.lines.is_empty() {
        lines(out, s, top, column, width);
    }
}

/// The command column of the function and line tables, present when the source has several commands.
#[derive(Clone, Copy)]
struct Column(bool);

impl Column {
    /// Its width, with the space after it.
    fn width(self) -> usize {
        if self.0 { 17 } else { 0 }
    }
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

fn modules(out: &mut String, s: &SourceReport, total: u64, width: Width) {
    let names: Vec<&str> = s.modules.iter().map(|m| m.name.as_str()).collect();
    let sources: Vec<String> = s
        .modules
        .iter()
        .map(|m| match m.names.is_empty() {
            true => "none".to_string(),
            false => m.names.join(", "),
        })
        .collect();
    let sw = sources.iter().map(|n| n.len()).max().unwrap_or(0).max(10);
    // The name, then 34 columns of counts and the name sources before the path, which is printed whole.
    let paths = longest(s.modules.iter().map(|m| m.path.as_str()));
    let (w, texts) = fit_plain(&names, 28, cap(width, 36 + sw + paths, 28));
    let _ = writeln!(
        out,
        "\n  {:<w$} {:>9} {:>7}  {:>10}  {:<sw$}  path",
        "Module", "Samples", "Share", "from (ms)", "names from"
    );
    for ((m, text), n) in s.modules.iter().zip(&texts).zip(&sources) {
        let _ = writeln!(
            out,
            "  {:<w$} {:>9} {:>7}  {:>10.1}  {:<sw$}  {}",
            text,
            m.samples,
            pct(m.share),
            m.profiled_from_ms,
            n,
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
        "  {:<w$} {:>9} {:>7}",
        "(outside every module)",
        s.stats.outside,
        pct(outside_share)
    );
    if s.stats.lost > 0 {
        let _ = writeln!(out, "  {:<w$} {:>9}", "(lost: ring full)", s.stats.lost);
    }
    for m in &s.modules {
        if let Some(why) = &m.unnamed {
            let _ = writeln!(out, "  ({} has no names: {why})", m.name);
        }
    }
}

fn functions(
    out: &mut String,
    s: &SourceReport,
    (top, total): (usize, u64),
    column: Column,
    width: Width,
) {
    let shown = &s.functions[..top.min(s.functions.len())];
    let names: Vec<&str> = shown.iter().map(|f| f.name.as_str()).collect();
    let modules: Vec<&str> = shown.iter().map(|f| f.module.as_str()).collect();
    // Samples and share (21 columns), the command, the two names with a space after each, the longest bar.
    let bars = shown.first().map_or(0, |f| bar(f.share).len());
    let budget = width.map(|w| w.saturating_sub(21 + column.width() + 2 + bars));
    let (_, whole) = fit_column_in(&names, 36, None);
    let (fn_cap, mod_cap) = split(
        budget,
        (longest(whole.iter().map(|t| t.as_str())), 36),
        (longest(modules.iter().copied()), 26),
    );
    let (width, texts) = fit_column_in(&names, 36, fn_cap);
    let (mod_w, module_texts) = fit_plain(&modules, 26, mod_cap);
    let _ = writeln!(
        out,
        "\n  {:>9} {:>7}  {}{:<width$} Module",
        "Samples",
        "Share",
        column.title(),
        "Function"
    );
    for ((f, text), module) in shown.iter().zip(&texts).zip(&module_texts) {
        let _ = writeln!(
            out,
            "  {:>9} {:>7}  {}{:<width$} {:<mod_w$} {}",
            f.samples,
            pct(f.share),
            column.cell(&f.command),
            text,
            module,
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

/// The least of a line's source text shown on a terminal (its start).
const SOURCE_START: usize = 24;

fn lines(out: &mut String, s: &SourceReport, top: usize, column: Column, term: Width) {
    let shown = &s.lines[..top.min(s.lines.len())];
    let names: Vec<&str> = shown.iter().map(|l| l.function.as_str()).collect();
    let modules: Vec<&str> = shown.iter().map(|l| l.module.as_str()).collect();
    let places: Vec<String> = shown
        .iter()
        .map(|l| {
            let file = std::path::Path::new(&l.file)
                .file_name()
                .map_or(l.file.clone(), |f| f.to_string_lossy().into_owned());
            format!("{file}:{}", l.line)
        })
        .collect();
    // Samples and share (21), the command, three names with a space after each, and the start of the source
    // text (the names have the room first, the text takes what they leave).
    let text = longest(
        shown
            .iter()
            .map(|l| l.text.as_deref().map_or("", str::trim)),
    )
    .min(SOURCE_START);
    let budget = term.map(|w| w.saturating_sub(21 + column.width() + 3 + text));
    let place_cap = budget.map(|b| longest(places.iter().map(String::as_str)).min(20.max(b / 5)));
    let budget = budget.map(|b| b.saturating_sub(place_cap.unwrap_or(0)));
    let (_, whole) = fit_column_in(&names, 20, None);
    let (fn_cap, mod_cap) = split(
        budget,
        (longest(whole.iter().map(String::as_str)), 20),
        (longest(modules.iter().copied()), 26),
    );
    let place_refs: Vec<&str> = places.iter().map(String::as_str).collect();
    let (place_w, place_texts) = match place_cap {
        // A file name keeps its end (the line number) when cut.
        Some(c) if c <= 20 => (20, places.iter().map(|p| tail(p, 20)).collect()),
        _ => fit_plain(&place_refs, 20, place_cap),
    };
    let (width, texts) = fit_column_in(&names, 20, fn_cap);
    let (mod_w, module_texts) = fit_plain(&modules, 26, mod_cap);
    // The source text takes what the columns before it leave of the terminal, at least its start (a terminal
    // too narrow even for the names' least widths is overflowed by them already), cut at its end; whole off a
    // terminal.
    let before = 21 + column.width() + place_w + 1 + width + 1 + mod_w + 1;
    let source = |t: &str| match term {
        Some(w) => head(t, w.saturating_sub(before).max(SOURCE_START)),
        None => t.to_string(),
    };
    let _ = writeln!(
        out,
        "\n  {:>9} {:>7}  {}{:<place_w$} {:<width$} {:<mod_w$} source",
        "Samples",
        "Share",
        column.title(),
        "Line",
        "Function",
        "Module"
    );
    for (i, l) in shown.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>9} {:>7}  {}{:<place_w$} {:<width$} {:<mod_w$} {}",
            l.samples,
            pct(l.share),
            column.cell(&l.command),
            place_texts[i],
            texts[i],
            module_texts[i],
            source(l.text.as_deref().map_or("", str::trim))
        );
    }
}

/// Designed against measured shares (`--expect`): each function's deviation in percentage points and in
/// standard deviations of a binomial share with this source's number of samples.
pub fn render_expected(out: &mut String, s: &SourceReport, expected: &[Expectation], width: Width) {
    let total = s.stats.counted + s.stats.outside;
    if expected.is_empty() || total == 0 {
        return;
    }
    let names: Vec<&str> = expected.iter().map(|e| e.function.as_str()).collect();
    // After the name: four figures (42 columns).
    let (width, texts) = fit_column_in(&names, 36, cap(width, 44, 36));
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
