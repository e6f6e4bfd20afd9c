//! The text of `ntprof top`: the header line, the table's columns fitted to a width, the footer and the help.
//! The same lines make the terminal's screen and the plain tables printed without a terminal.

use super::tally::{Ring, Row, Sort, Table};

/// The keys, on the footer line.
pub const FOOTER: &str = "q quit  s sort  e/Tab source  f/space freeze  ? help";

/// The help screen.
pub const HELP: &[&str] = &[
    "ntprof top: the hottest functions over a sliding window",
    "",
    "  q, Ctrl-C   quit (ends the run; a command is sent SIGTERM, and SIGKILL on a second q)",
    "  s           cycle the sort: share in the window, samples in the last refresh, function name",
    "  e, Tab      cycle the source among the run's sources (off_cpu and preempted with --off-cpu)",
    "  f, space    freeze / unfreeze the display (sampling goes on)",
    "  ?           this help",
    "",
    "  SHARE    the function's part of the source's samples in the window (the outside included)",
    "  SAMPLES  its samples in the window (TIME: its time off CPU, for off_cpu and preempted)",
    "  PROCESS  the command and pid with most of its samples, +N other processes, or N procs",
    "",
    "any key returns",
];

/// What the display shows now: the choices the keys make.
#[derive(Debug, Clone)]
pub struct View {
    /// The order of the rows.
    pub sort: Sort,
    /// The source shown, by name (the first of the run until one is chosen).
    pub source: Option<String>,
    /// The windows as they were when the display was frozen.
    pub frozen: Option<Ring>,
    /// The help is shown.
    pub help: bool,
}

impl View {
    /// The first view: sorted by share, the run's first source.
    pub fn new() -> View {
        View {
            sort: Sort::Share,
            source: None,
            frozen: None,
            help: false,
        }
    }

    /// The source shown in `ring`, and its position among the run's sources.
    pub fn source_in(&self, ring: &Ring) -> Option<(String, usize, usize)> {
        let names = ring.sources();
        let at = self
            .source
            .as_ref()
            .and_then(|s| names.iter().position(|(n, _)| n == s))
            .unwrap_or(0);
        names.get(at).map(|(n, _)| (n.clone(), at, names.len()))
    }

    /// The next source of the run (`e`), among those of the windows shown (`live`, or the frozen ones).
    pub fn next_source(&mut self, live: &Ring) {
        let ring = self.frozen.as_ref().unwrap_or(live);
        let names = ring.sources();
        if let Some((_, at, n)) = self.source_in(ring) {
            self.source = Some(names[(at + 1) % n].0.clone());
        }
    }

    /// Freeze the display on the windows of `live`, or let it follow them again (`f`).
    pub fn toggle_freeze(&mut self, live: &Ring) {
        self.frozen = match self.frozen {
            Some(_) => None,
            None => Some(live.clone()),
        };
    }

    /// The header line and the table's lines (column titles, then at most `rows` rows) at `width`, from
    /// `live` or the frozen windows. `None` before the first window.
    pub fn lines(
        &self,
        live: &Ring,
        target: &str,
        width: usize,
        rows: usize,
    ) -> Option<Vec<String>> {
        let ring = self.frozen.as_ref().unwrap_or(live);
        let (source, at, n) = self.source_in(ring)?;
        let table = ring.table(&source, self.sort)?;
        let mut out = vec![fit(
            &header(target, &table, (at, n), self.sort, self.frozen.is_some()),
            width,
        )];
        out.extend(columns(&table, width, rows));
        Some(out)
    }
}

/// `ntprof top  [FROZEN  ]source S (1/3)  sort share  window 10.0 s (10 refreshes)  812 samples/s  lost 0  TARGET`:
/// what may change first, the target (the longest) last.
pub fn header(
    target: &str,
    t: &Table,
    (at, n): (usize, usize),
    sort: Sort,
    frozen: bool,
) -> String {
    let seconds = t.seconds.max(1e-9);
    let (kind, rate) = if t.off_cpu {
        (
            ": off-CPU waits",
            format!("{:.2} s off CPU/s", t.total as f64 / 1e9 / seconds),
        )
    } else {
        ("", format!("{:.0} samples/s", t.total as f64 / seconds))
    };
    let frozen = if frozen { "FROZEN  " } else { "" };
    format!(
        "ntprof top  {frozen}source {} ({}/{n}{kind})  sort {}  window {:.1} s ({} refreshes)  {rate}  lost {}  {target}",
        t.source,
        at + 1,
        sort.label(),
        t.seconds,
        t.refreshes,
        t.lost
    )
}

/// A time in nanoseconds, in a unit that keeps three or four digits.
pub fn time(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{:.2}s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.1}ms", ns / 1e6)
    } else {
        format!("{:.0}us", ns / 1e3)
    }
}

/// `line` cut to `width` characters (the last one an ellipsis when cut).
pub fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    if width > 0 {
        s.push('…');
    }
    s
}

/// `s` in exactly `width` characters: cut, or padded on the right.
fn cell(s: &str, width: usize) -> String {
    format!("{:<width$}", fit(s, width))
}

/// The column titles and at most `rows` rows of `t`, each at most `width` characters.
pub fn columns(t: &Table, width: usize, rows: usize) -> Vec<String> {
    let shown = &t.rows[..t.rows.len().min(rows)];
    let widest = |f: fn(&Row) -> usize, title: usize, cap: usize| {
        shown.iter().map(f).max().unwrap_or(0).max(title).min(cap)
    };
    let process_w = widest(|r| r.process.chars().count(), 7, 24);
    // SHARE (7), SAMPLES or TIME (10), two spaces between columns.
    let others = 7 + 2 + 10 + 2 + 2 + 2 + process_w;
    let function_long = widest(|r| r.function.chars().count(), 8, usize::MAX);
    // Module names get what the functions leave, and at least a fifth of a wide terminal; without one
    // (`usize::MAX`) every name is whole.
    let room = width.saturating_sub(others.saturating_add(function_long));
    let module_w = widest(|r| r.module.chars().count(), 6, room.max(width / 5).max(20));
    let function_w = function_long
        .min(width.saturating_sub(others + module_w))
        .max(12);
    // Cut in the middle, never two different names alike (each keeps the part where it differs).
    let fitted = |names: Vec<&str>, w: usize| crate::text::names::fit_plain(&names, w, Some(w));
    let (function_w, functions) = fitted(
        shown.iter().map(|r| r.function.as_str()).collect(),
        function_w,
    );
    let (module_w, modules) = fitted(shown.iter().map(|r| r.module.as_str()).collect(), module_w);
    let amount = if t.off_cpu { "TIME" } else { "SAMPLES" };
    let mut out = vec![fit(
        &format!(
            "{:>7}  {amount:>10}  {}  {}  {}",
            "SHARE",
            cell("FUNCTION", function_w),
            cell("MODULE", module_w),
            "PROCESS"
        ),
        width,
    )];
    for ((r, function), module) in shown.iter().zip(&functions).zip(&modules) {
        let share = if t.total == 0 {
            0.0
        } else {
            100.0 * r.samples as f64 / t.total as f64
        };
        let amount = if t.off_cpu {
            time(r.samples)
        } else {
            r.samples.to_string()
        };
        let line = format!(
            "{share:>6.2}%  {amount:>10}  {}  {}  {}",
            cell(function, function_w),
            cell(module, module_w),
            r.process
        );
        out.push(fit(line.trim_end(), width));
    }
    if t.rows.is_empty() {
        out.push("(no samples in the window)".to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two long function names with a long common start and end, in two long modules that differ only in the
    /// middle: whole where they fit (230 columns, no terminal), cut around their difference where not (120).
    #[test]
    fn long_names_fit_the_width_and_never_print_alike() {
        let row = |which: &str, module: &str| Row {
            module: format!(
                "libwide_module_with_a_long_common_prefix_{module}_and_a_long_common_suffix.so"
            ),
            function: format!(
                "wide_function_with_a_long_common_prefix_{which}_and_a_long_common_suffix_part_0"
            ),
            samples: 50,
            recent: 5,
            process: "wide 4242".into(),
        };
        let table = Table {
            source: "Timer".into(),
            off_cpu: false,
            total: 100,
            lost: 0,
            seconds: 1.0,
            refreshes: 1,
            span: (String::new(), String::new()),
            index: 0,
            rows: vec![row("one", "alpha"), row("two", "beta")],
        };
        for width in [230, usize::MAX] {
            let lines = columns(&table, width, 10);
            for r in &table.rows {
                assert!(
                    lines
                        .iter()
                        .any(|l| l.contains(&r.function) && l.contains(&r.module)),
                    "{width}: {lines:#?}"
                );
            }
        }
        let lines = columns(&table, 120, 10);
        assert!(lines.iter().all(|l| l.chars().count() <= 120), "{lines:#?}");
        let (one, two) = (&lines[1], &lines[2]);
        assert!(one.contains("one") && two.contains("two"), "{lines:#?}");
        assert!(one.contains("alph") && two.contains("bet"), "{lines:#?}");
    }
}
