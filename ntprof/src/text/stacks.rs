//! The call-stack sections of the text report (runs with `-g` or `--call-graph`): for the top functions, who
//! called them and with which share of their inclusive samples ("called from"), and on request (`--call-tree`)
//! the call tree from the processes down, with inclusive shares.
//!
//! Frames are the stacks' locations with their inlined functions expanded, outermost first. A function's
//! inclusive samples are those of the stacks it is on (once per stack, however often it recurses); its callers
//! are the frames just outside its outermost occurrence on each stack, `[root]` when it is the outermost frame of
//! a complete stack, `[truncated]` when the walk stopped there, and (frame pointers) `[fp chain ended]` when the
//! kernel's walk ended at a function that is no thread's or program's entry: the frame-pointer chain may have
//! been cut by code built without frame pointers (libc), which `--call-graph dwarf` walks.

use std::collections::HashMap;
use std::fmt::Write;

use super::names::fit_all;
use super::pct;
use crate::report::{Report, SourceReport, StackReport};

/// Branches of the call tree below this share of the source's samples are not printed.
const TREE_MIN_SHARE: f64 = 0.005;
/// How many callers are listed per function.
const CALLERS_SHOWN: usize = 8;
/// The caller of a frame-pointer stack's outermost frame when that frame is no entry of a thread or program.
const FP_ENDED: &str = crate::report::FP_ENDED_FRAME;

/// The label of a stack's outermost caller: `[truncated]`, `[fp chain ended]` or `[root]` (see the module's
/// documentation): the engine's one rule, as every format marks the stack.
fn outer_label(source: &SourceReport, stack: &StackReport, fp: bool) -> Option<&'static str> {
    source.chain_end(stack, fp)
}

/// The frames of a stack, outermost first, inlined functions expanded.
pub fn expanded<'a>(source: &'a SourceReport, stack: &StackReport) -> Vec<&'a str> {
    let mut out = Vec::new();
    for &l in stack.frames.iter().rev() {
        if let Some(loc) = source.locations.get(l as usize) {
            out.extend(loc.frames.iter().rev().map(|f| f.function.as_str()));
        }
    }
    out
}

/// Inclusive samples of every function, and per function its callers' samples.
struct Callers<'a> {
    inclusive: HashMap<&'a str, u64>,
    callers: HashMap<&'a str, HashMap<&'a str, u64>>,
}

fn callers(source: &SourceReport, fp: bool) -> Callers<'_> {
    let mut c = Callers {
        inclusive: HashMap::new(),
        callers: HashMap::new(),
    };
    for stack in &source.stacks {
        let frames = expanded(source, stack);
        let mut seen: Vec<&str> = Vec::new();
        for (i, &f) in frames.iter().enumerate() {
            if seen.contains(&f) {
                continue; // recursion: the outermost occurrence only
            }
            seen.push(f);
            *c.inclusive.entry(f).or_insert(0) += stack.samples;
            let caller = match i.checked_sub(1) {
                Some(j) => frames[j],
                None => outer_label(source, stack, fp).unwrap_or("[root]"),
            };
            *c.callers.entry(f).or_default().entry(caller).or_insert(0) += stack.samples;
        }
    }
    c
}

/// The call-stack sections of every source that has stacks.
pub fn render(report: &Report, top: usize, call_tree: bool, width: super::Width) -> String {
    let mut out = String::new();
    for source in report
        .sources
        .iter()
        .filter(|s| !s.stacks.is_empty() && !s.is_off_cpu())
    {
        called_from(&mut out, source, (top, width), is_fp(report));
        if call_tree {
            tree(&mut out, report, source, width);
        }
    }
    out
}

/// Whether the run's stacks are frame-pointer chains (`-g`, `--call-graph fp`).
fn is_fp(report: &Report) -> bool {
    report.fp_stacks()
}

fn called_from(
    out: &mut String,
    source: &SourceReport,
    (top, width): (usize, super::Width),
    fp: bool,
) {
    let total = source.stats.counted + source.stats.outside;
    let c = callers(source, fp);
    let truncated: u64 = source
        .stacks
        .iter()
        .filter(|s| s.truncated)
        .map(|s| s.samples)
        .sum();
    let _ = writeln!(
        out,
        "\nCalled from ({}): the top functions' callers, as shares of the function's inclusive samples",
        source.name
    );
    if truncated > 0 {
        let _ = writeln!(
            out,
            "  ({} of the counted samples have a truncated stack: their outermost callers are unknown)",
            pct(truncated as f64 / total.max(1) as f64)
        );
    }
    let ended: u64 = source
        .stacks
        .iter()
        .filter(|s| outer_label(source, s, fp) == Some(FP_ENDED))
        .map(|s| s.samples)
        .sum();
    if ended > 0 {
        let _ = writeln!(
            out,
            "  ({} of the counted samples have a frame-pointer chain that ended at a function that is no \
             thread's or program's entry, {FP_ENDED}: likely code built without frame pointers (libc, \
             distribution binaries) cut the chain: try --call-graph dwarf)",
            pct(ended as f64 / total.max(1) as f64)
        );
    }
    // Every name of the section as it prints: never two functions alike, however long.
    let texts = fit_all(
        source
            .functions
            .iter()
            .take(top.min(10))
            .map(|f| f.name.as_str())
            .chain(c.callers.values().flat_map(|m| m.keys().copied())),
        70,
        super::cap(width, 24, 70),
    );
    let mut shown: Vec<&str> = Vec::new();
    for f in source.functions.iter().take(top.min(10)) {
        if shown.contains(&f.name.as_str()) {
            continue; // the same function in several commands: its callers are listed once
        }
        shown.push(&f.name);
        let Some(&incl) = c.inclusive.get(f.name.as_str()) else {
            continue;
        };
        let _ = writeln!(
            out,
            "  {}  self {}  inclusive {}",
            texts[f.name.as_str()],
            pct(f.share),
            pct(incl as f64 / total.max(1) as f64)
        );
        let mut rows: Vec<(&str, u64)> = c.callers[f.name.as_str()]
            .iter()
            .map(|(&k, &v)| (k, v))
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        for (caller, n) in rows.iter().take(CALLERS_SHOWN) {
            let _ = writeln!(
                out,
                "    {:>6}  {}",
                pct(*n as f64 / incl.max(1) as f64),
                texts[caller]
            );
        }
        if rows.len() > CALLERS_SHOWN {
            let rest: u64 = rows[CALLERS_SHOWN..].iter().map(|r| r.1).sum();
            let _ = writeln!(
                out,
                "    {:>6}  ({} other callers)",
                pct(rest as f64 / incl.max(1) as f64),
                rows.len() - CALLERS_SHOWN
            );
        }
    }
}

/// A node of the call tree.
#[derive(Default)]
struct Node<'a> {
    samples: u64,
    own: u64,
    children: HashMap<&'a str, Node<'a>>,
}

fn tree(out: &mut String, report: &Report, source: &SourceReport, width: super::Width) {
    let total = source.stats.counted + source.stats.outside;
    let mut root = Node::default();
    for stack in &source.stacks {
        let mut path: Vec<&str> = Vec::new();
        path.push(stack.command.as_str());
        let frames = expanded(source, stack);
        if let Some(label) = outer_label(source, stack, is_fp(report)) {
            path.push(label);
        }
        path.extend(frames);
        let mut node = &mut root;
        node.samples += stack.samples;
        for f in path {
            node = node.children.entry(f).or_default();
            node.samples += stack.samples;
        }
        node.own += stack.samples;
    }
    let _ = writeln!(
        out,
        "\nCall tree ({}): inclusive share, self share, function (branches under {} left out)",
        source.name,
        pct(TREE_MIN_SHARE)
    );
    let _ = report;
    // The tree's indentation grows with depth: a name takes at most what is left past 40 columns.
    let cap = super::cap(width, 40, 90);
    let texts = fit_all(
        source.stacks.iter().flat_map(|s| expanded(source, s)),
        90,
        cap,
    );
    print_children(out, &root, total.max(1), 1, &texts);
}

fn print_children(
    out: &mut String,
    node: &Node<'_>,
    total: u64,
    depth: usize,
    texts: &HashMap<&str, String>,
) {
    let mut kids: Vec<(&&str, &Node<'_>)> = node.children.iter().collect();
    kids.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
    for (name, child) in kids {
        let share = child.samples as f64 / total as f64;
        if share < TREE_MIN_SHARE {
            continue;
        }
        let _ = writeln!(
            out,
            "  {:>6} {:>6}  {}{}",
            pct(share),
            pct(child.own as f64 / total as f64),
            "  ".repeat(depth - 1),
            // The first level is the commands; the functions under them are shown as the tables show them.
            match texts.get(*name) {
                Some(text) if depth > 1 => text.as_str(),
                _ => name,
            }
        );
        print_children(out, child, total, depth + 1, texts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixture;

    #[test]
    fn callers_share_the_inclusive_samples_and_the_tree_nests() {
        let report = fixture::report_with_stacks();
        let text = render(&report, 10, true, Some(80));
        // hot_a: 600 inclusive, 400 from run_a and 200 from run_b.
        let at = text
            .find("  hot_a  self 60.0%  inclusive 60.0%")
            .expect(&text);
        let rest = &text[at..];
        let a = rest.find("66.7%  run_a").expect(&text);
        let b = rest.find("33.3%  run_b").expect(&text);
        assert!(a < b, "{text}");
        // hot_b: 280 from run_b, 20 from a truncated stack.
        assert!(
            text.contains("93.3%  run_b") && text.contains("6.7%  [truncated]"),
            "{text}"
        );
        assert!(
            text.contains("(2.0% of the counted samples have a truncated stack"),
            "{text}"
        );
        // The tree: demo > main > run_b (48 %) > hot_b (28 %).
        let tree = &text[text.find("Call tree").expect(&text)..];
        assert!(tree.contains(" 90.0%   0.0%  demo\n"), "{tree}");
        assert!(tree.contains(" 88.0%   0.0%    main\n"), "{tree}");
        assert!(tree.contains(" 48.0%   0.0%      run_b\n"), "{tree}");
        assert!(tree.contains(" 28.0%  28.0%        hot_b\n"), "{tree}");
        assert!(!render(&fixture::report(), 10, true, Some(80)).contains("Called from"));
    }
}
