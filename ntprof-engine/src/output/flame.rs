//! The flame graph: SVG drawn by inferno from folded stacks.
//!
//! With call stacks (`-g`, `--call-graph`), each stack is drawn from its root: the process (under the processes
//! that started it, when they were profiled too), `[truncated]` when the walk did not reach the first frame
//! (`[fp chain ended]` when a frame-pointer chain ended at no thread's or program's entry),
//! then the callers outermost first, each with its inlined functions expanded, down to the sampled function.
//! Without call stacks a histogram of program counters has no callers; the hierarchy drawn instead is where the
//! samples are: command → module → function → inlined functions (outermost first) → file:line. Either way, widths are
//! samples; the samples outside every profiled module are one more root frame, so that each box's width is its
//! share as the text report gives it. One graph per source (their units differ); the title names the source.

use inferno::flamegraph::{self, Options};

use crate::output::pprof::OUTSIDE;
use crate::report::{Report, SourceReport};

/// A frame name safe inside a folded line (`;` separates frames there).
fn frame_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The frames that name process `id`: its profiled ancestors' commands, outermost first, then its own; each
/// `command [pid]` with `pids` (off-CPU time: two processes of one command, a client and a server, wait apart
/// and must not merge into one tower).
fn process_root(report: &Report, id: u32, command: &str, pids: bool) -> Vec<String> {
    let name = |command: &str, pid: Option<u32>| match pid {
        Some(pid) if pids => frame_name(&format!("{command} [{pid}]")),
        _ => frame_name(command),
    };
    let me = report.processes.iter().find(|p| p.id == id);
    let mut chain = vec![name(command, me.map(|p| p.pid))];
    let mut at = me.and_then(|p| p.parent);
    let mut guard = 0;
    while let Some(parent) = at.and_then(|a| report.processes.iter().find(|p| p.id == a)) {
        chain.push(name(&parent.command, Some(parent.pid)));
        at = parent.parent;
        guard += 1;
        if guard > 64 {
            break;
        }
    }
    chain.reverse();
    chain
}

/// The folded call stacks of one source: `command;caller;…;function samples`, one line per distinct line (stacks
/// that differ only in addresses inside the same functions are one line), hottest first.
pub fn folded_stacks(report: &Report, source: &SourceReport) -> Vec<String> {
    let mut merged: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for stack in source.stacks.iter().filter(|s| s.samples > 0) {
        let mut frames = process_root(report, stack.process, &stack.command, source.is_off_cpu());
        if let Some(end) = source.chain_end(stack, report.fp_stacks()) {
            frames.push(end.to_string());
        }
        for &l in stack.frames.iter().rev() {
            let Some(location) = source.locations.get(l as usize) else {
                continue;
            };
            // A location's frames are innermost first: the caller side is the function, then what it inlined.
            for frame in location.frames.iter().rev() {
                frames.push(frame_name(&frame.function));
            }
        }
        *merged.entry(frames.join(";")).or_insert(0) += stack.samples;
    }
    let mut rows: Vec<(String, u64)> = merged.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut lines: Vec<String> = rows.into_iter().map(|(s, n)| format!("{s} {n}")).collect();
    if source.stats.outside > 0 {
        lines.push(format!("{OUTSIDE} {}", source.stats.outside));
    }
    lines
}

/// `--format folded`: the folded stacks of the first source (its call stacks, or without them its
/// module → function → line hierarchy), one `frames samples` line each. With off-CPU sources (`--off-cpu`), a
/// wall-time view: every source's stacks under a root frame named after the source (`Timer`, `off_cpu`,
/// `preempted`), each value in the source's unit (`samples × sample_value`: nanoseconds for the time sources
/// and the off-CPU ones).
pub fn folded_text(report: &Report) -> String {
    let Some(source) = report.sources.first() else {
        return String::new();
    };
    let mut out = String::new();
    if !report.sources.iter().any(SourceReport::is_off_cpu) {
        for line in source_folded(report, source) {
            out.push_str(&line);
            out.push('\n');
        }
        return out;
    }
    for source in &report.sources {
        for line in source_folded(report, source) {
            let Some((frames, n)) = line.rsplit_once(' ') else {
                continue;
            };
            let n: u64 = n.parse().unwrap_or(0);
            let value = n.saturating_mul(source.sample_value);
            out.push_str(&format!("{};{frames} {value}\n", frame_name(&source.name)));
        }
    }
    out
}

/// The folded lines of a source: call stacks when it has them.
fn source_folded(report: &Report, source: &SourceReport) -> Vec<String> {
    if source.stacks.is_empty() {
        folded(report, source)
    } else {
        folded_stacks(report, source)
    }
}

/// The folded stacks of one source: `command;module;function;inlined…;file:line samples`, one line per bucket.
pub fn folded(report: &Report, source: &SourceReport) -> Vec<String> {
    let mut lines = Vec::new();
    for bucket in source.buckets.iter().filter(|b| b.samples > 0) {
        let mut stack = vec![frame_name(&bucket.command), frame_name(&bucket.module)];
        if bucket.frames.is_empty() {
            stack.push(frame_name(&format!(
                "{}+{:#x}",
                bucket.module, bucket.offset
            )));
        }
        // Frames are innermost first; a flame graph grows from the outermost.
        for frame in bucket.frames.iter().rev() {
            stack.push(frame_name(&frame.function));
        }
        if let Some(innermost) = bucket.frames.first()
            && let Some(file) = &innermost.file
        {
            let base = file.rsplit('/').next().unwrap_or(file);
            stack.push(frame_name(&match innermost.line {
                Some(line) => format!("{base}:{line}"),
                None => base.to_string(),
            }));
        }
        lines.push(format!("{} {}", stack.join(";"), bucket.samples));
    }
    let mut listed = 0;
    for p in source.processes.iter().filter(|p| p.outside > 0) {
        let command = report
            .processes
            .get(p.process as usize)
            .map_or("", |r| r.command.as_str());
        lines.push(format!("{};{OUTSIDE} {}", frame_name(command), p.outside));
        listed += p.outside;
    }
    if source.stats.outside > listed {
        lines.push(format!("{OUTSIDE} {}", source.stats.outside - listed));
    }
    lines
}

/// The SVG of one source.
pub fn render_source(report: &Report, source: &SourceReport) -> Result<Vec<u8>, String> {
    let lines = source_folded(report, source);
    if lines.is_empty() {
        return Err(format!(
            "no samples of {} to draw a flame graph of",
            source.name
        ));
    }
    let what = if report.run.command.is_empty() {
        report.run.mode.clone()
    } else {
        report.run.command.join(" ")
    };
    let mut options = Options::default();
    let s = source.stats;
    if source.is_off_cpu() {
        let what_kind = if source.name == "off_cpu" {
            "time blocked (sleep, I/O, locks, children)"
        } else {
            "time preempted (runnable, waiting for a CPU)"
        };
        options.title = format!("ntprof: off-CPU {what_kind} of {what}");
        options.subtitle = Some(format!(
            "{:.1} ms off CPU; the top frame is the wait (system call), below it the stack that blocked; width = \
             time",
            (s.counted + s.outside) as f64 / 1e6
        ));
        options.count_name = "ns".into();
    } else {
        options.title = format!("ntprof: {} samples of {what}", source.name);
        options.subtitle = Some(format!(
            "{} samples counted, {} outside the profiled modules, {} lost; interval {} ({} units)",
            s.counted, s.outside, s.lost, source.interval, source.interval_unit
        ));
        options.count_name = "samples".into();
    }
    options.name_type = "Frame:".into();
    fit_titles(&mut options);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph of {}: {e}", source.name))?;
    let svg = String::from_utf8(svg)
        .map_err(|e| format!("the flame graph of {} is not UTF-8: {e}", source.name))?;
    Ok(label_root(svg, &format!("all: {what} [{}]", source.name)).into_bytes())
}

/// Cut the title and the subtitle in the middle (`…`) to what the image's width holds at their font sizes
/// (inferno centres them and draws them whole, so a longer one is clipped at both edges).
fn fit_titles(options: &mut Options<'_>) {
    let width = options.image_width.unwrap_or(DEFAULT_IMAGE_WIDTH) as f64;
    // The title is drawn 5 points larger than the frames' font; a character is `font_width` of the size wide.
    let chars = |size: f64| {
        ((width - 20.0) / (size * options.font_width))
            .floor()
            .max(8.0) as usize
    };
    let title_chars = chars(options.font_size as f64 + 5.0);
    options.title = cut_middle(&options.title, title_chars);
    let sub_chars = chars(options.font_size as f64);
    options.subtitle = options.subtitle.take().map(|s| cut_middle(&s, sub_chars));
}

/// inferno's image width when none is set.
const DEFAULT_IMAGE_WIDTH: usize = 1200;

/// `s` in at most `max` characters: its start and its end, `…` in place of the middle.
fn cut_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max - 1;
    let front: String = s.chars().take(keep - keep / 2).collect();
    let back: String = s.chars().skip(n - keep / 2).collect();
    format!("{front}…{back}")
}

/// The most characters of the root's label drawn in its box (the box spans the width: 1180 pixels of 12-pixel
/// text, about 7 pixels a character); the whole label stays in its title.
const ROOT_LABEL_CHARS: usize = 160;

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Name inferno's root frame, which it titles `all (N samples, 100%)` and draws without a label: its title and its
/// box say `label` (what was profiled and the source). The graph's script shows a box's title, less its trailing
/// `(N samples, …)`, when it zooms, so the two agree.
fn label_root(mut svg: String, label: &str) -> String {
    const ROOT: &str = "<title>all (";
    let Some(at) = svg.find(ROOT) else {
        return svg;
    };
    let Some(title_len) = svg[at..].find("</title>") else {
        return svg;
    };
    if !svg[at..at + title_len].ends_with(", 100%)") {
        return svg;
    }
    let Some(group_len) = svg[at..].find("</g>") else {
        return svg;
    };
    let Some(empty) = svg[at..at + group_len].find("></text>") else {
        return svg;
    };
    let shown: String = if label.chars().count() > ROOT_LABEL_CHARS {
        let mut s: String = label.chars().take(ROOT_LABEL_CHARS - 2).collect();
        s.push_str("..");
        s
    } else {
        label.to_string()
    };
    // The box's text first (it comes after the title), so that the title's offsets still hold.
    svg.insert_str(at + empty + 1, &xml_escape(&shown));
    svg.replace_range(
        at + "<title>".len()..at + "<title>all".len(),
        &xml_escape(label),
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixture;

    #[test]
    fn folded_stacks_go_module_function_inlined_line() {
        let report = fixture::report();
        let lines = folded(&report, &report.sources[0]);
        assert_eq!(
            lines,
            [
                "demo;demo;hot_a;demo.c:12 350",
                "demo;demo;hot_a;mix;mix.h:3 250",
                "demo;libhot.so;hot_b;hot, \"b\".c:7 300",
                "demo;[outside profiled modules] 100",
            ]
        );
    }

    #[test]
    fn call_stacks_fold_from_the_command_outward_in_with_inlined_frames_and_truncation() {
        let report = fixture::report_with_stacks();
        assert_eq!(
            folded_stacks(&report, &report.sources[0]),
            [
                "demo;main;run_a;hot_a;mix 400",
                "demo;main;run_b;hot_b 280",
                "demo;main;run_b;hot_a;mix 200",
                "demo;[truncated];hot_b 20",
                "[outside profiled modules] 100",
            ]
        );
        assert!(folded_text(&report).starts_with("demo;main;run_a;hot_a;mix 400\n"));
        let svg = String::from_utf8(render_source(&report, &report.sources[0]).unwrap()).unwrap();
        assert!(svg.contains("run_a (400 samples, 40.00%)"), "{svg}");
        assert!(svg.contains("run_b (480 samples, 48.00%)"));
    }

    #[test]
    fn a_frame_pointer_chain_that_ended_early_is_marked_in_folded_stacks_and_the_svg() {
        let mut report = fixture::report_with_stacks();
        report.run.call_graph = Some("fp".into());
        // The fixture's stacks end at main, which is no thread's or program's entry.
        assert_eq!(
            folded_stacks(&report, &report.sources[0])[..4],
            [
                "demo;[fp chain ended];main;run_a;hot_a;mix 400",
                "demo;[fp chain ended];main;run_b;hot_b 280",
                "demo;[fp chain ended];main;run_b;hot_a;mix 200",
                "demo;[truncated];hot_b 20",
            ]
        );
        let svg = String::from_utf8(render_source(&report, &report.sources[0]).unwrap()).unwrap();
        assert!(svg.contains("[fp chain ended] (880 samples"), "{svg}");
    }

    #[test]
    fn a_frame_pointer_stack_is_whole_only_when_it_reaches_an_entry() {
        use crate::report::{FP_ENDED_FRAME, TRUNCATED_FRAME, is_stack_origin};
        let mut report = fixture::report_with_stacks();
        report.run.call_graph = Some("fp".into());
        let source = &report.sources[0];
        // The fixture's stacks end at `main`: no entry, so every whole one is marked, the cut one truncated.
        for stack in &source.stacks {
            let want = if stack.truncated {
                TRUNCATED_FRAME
            } else {
                FP_ENDED_FRAME
            };
            assert_eq!(source.chain_end(stack, true), Some(want));
            let dwarf = stack.truncated.then_some(TRUNCATED_FRAME);
            assert_eq!(source.chain_end(stack, false), dwarf);
        }
        for f in [
            "_start",
            "__libc_start_call_main",
            "start_thread",
            "std_thread_start",
            "entry_SYSCALL_64_after_hwframe",
            "asm_sysvec_apic_timer_interrupt",
            "ret_from_fork_asm",
        ] {
            assert!(is_stack_origin(f), "{f}");
        }
        assert!(!is_stack_origin("main") && !is_stack_origin("cmp"));
    }

    #[test]
    fn svg_names_the_source_and_the_functions() {
        let report = fixture::report();
        let svg = String::from_utf8(render_source(&report, &report.sources[0]).unwrap()).unwrap();
        assert!(svg.contains("ntprof: Timer samples of ./demo --seconds 2"));
        // The root frame is labelled, in its title and in its box.
        assert!(
            svg.contains("<title>all: ./demo --seconds 2 [Timer] (1,000 samples, 100%)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains(">all: ./demo --seconds 2 [Timer]</text>"),
            "{svg}"
        );
        assert!(!svg.contains("<title>all ("), "{svg}");
        assert!(svg.contains("hot_a (600 samples, 60.00%)"), "{svg}");
        assert!(svg.contains("hot_b (300 samples, 30.00%)"));
    }

    #[test]
    fn the_root_label_is_escaped_and_cut_to_its_box() {
        let svg = "<g><title>all (7 samples, 100%)</title><rect/><text x=\"0.25%\"></text></g>"
            .to_string();
        assert_eq!(
            label_root(svg.clone(), "all: sh -c \"a<b & c\" [Timer]"),
            "<g><title>all: sh -c &quot;a&lt;b &amp; c&quot; [Timer] (7 samples, 100%)</title><rect/>\
             <text x=\"0.25%\">all: sh -c &quot;a&lt;b &amp; c&quot; [Timer]</text></g>"
        );
        let long = format!("all: {}", "x".repeat(300));
        let out = label_root(svg, &long);
        assert!(out.contains(&format!(
            ">all: {}..</text>",
            "x".repeat(ROOT_LABEL_CHARS - 7)
        )));
        assert!(out.contains(&format!("<title>{long} (7 samples")));
        // A function called `all` is not the root.
        let f = "<g><title>all (7 samples, 100.00%)</title><text></text></g>".to_string();
        assert_eq!(label_root(f.clone(), "x"), f);
    }

    #[test]
    fn an_empty_source_is_an_error_not_an_empty_picture() {
        let mut report = fixture::report();
        report.sources[0].buckets.clear();
        report.sources[0].stats.outside = 0;
        report.sources[0].processes.clear();
        assert!(render_source(&report, &report.sources[0]).is_err());
    }

    /// A long command line does not clip the flame graph's title at both edges: the title is cut in the middle to
    /// the characters the image's width holds at the title's font size, keeping its start and its end.
    #[test]
    fn long_flame_graph_titles_fit_the_image() {
        let mut report = fixture::report();
        let long: Vec<String> = (0..60).map(|i| format!("--argument-{i}")).collect();
        report.run.command = std::iter::once("./prog".to_string()).chain(long).collect();
        let svg = String::from_utf8(render_source(&report, &report.sources[0]).unwrap()).unwrap();
        let at = svg.find("id=\"title\"").expect("a title element");
        let text = &svg[at..];
        let text = &text[text.find('>').unwrap() + 1..text.find("</text>").unwrap()];
        let defaults = inferno::flamegraph::Options::default();
        let size = defaults.font_size as f64 + 5.0;
        let width = text.chars().count() as f64 * size * defaults.font_width;
        assert!(
            width <= 1200.0,
            "title of {} characters, {width:.0} pixels wide: {text}",
            text.chars().count()
        );
        assert!(
            text.starts_with("ntprof: Timer samples of ./prog --argument-0"),
            "{text}"
        );
        assert!(text.ends_with("--argument-59"), "{text}");
        assert!(text.contains('…'), "{text}");
    }
}
