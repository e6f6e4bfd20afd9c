//! The flame graph: SVG drawn by inferno from folded stacks.
//!
//! Without call stacks the hierarchy drawn is where the samples are: command → module → function → inlined
//! functions (outermost first) → file:line, widths by samples. The samples outside every profiled module are one
//! more frame under their command, so that each box's width is its share as the text report gives it. One graph
//! per source (their units differ); the title names the source.

use inferno::flamegraph::{self, Options};

use crate::output::pprof::OUTSIDE;
use crate::report::{Report, SourceReport};

/// A frame name safe inside a folded line (`;` separates frames there).
fn frame_name(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
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
    let lines = folded(report, source);
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
    options.title = format!("ntprof: {} samples of {what}", source.name);
    let s = source.stats;
    options.subtitle = Some(format!(
        "{} samples counted, {} outside the profiled modules, {} lost; interval {} ({} units)",
        s.counted, s.outside, s.lost, source.interval, source.interval_unit
    ));
    options.count_name = "samples".into();
    options.name_type = "Frame:".into();
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph of {}: {e}", source.name))?;
    Ok(svg)
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
    fn svg_names_the_source_and_the_functions() {
        let report = fixture::report();
        let svg = String::from_utf8(render_source(&report, &report.sources[0]).unwrap()).unwrap();
        assert!(svg.contains("ntprof: Timer samples of ./demo --seconds 2"));
        assert!(svg.contains("hot_a (600 samples, 60.00%)"), "{svg}");
        assert!(svg.contains("hot_b (300 samples, 30.00%)"));
    }

    #[test]
    fn an_empty_source_is_an_error_not_an_empty_picture() {
        let mut report = fixture::report();
        report.sources[0].buckets.clear();
        report.sources[0].stats.outside = 0;
        report.sources[0].processes.clear();
        assert!(render_source(&report, &report.sources[0]).is_err());
    }
}
