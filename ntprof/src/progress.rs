//! Live progress on stderr while recording: elapsed time, samples so far per source, lost so far.
//!
//! Shown only when stderr is a terminal and `--quiet` is not given; otherwise every method does nothing, so that a
//! piped or redirected stderr gets no control sequences.

use std::io::IsTerminal;
use std::time::Duration;

use std::sync::OnceLock;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ntprof_engine::progress::SourceProgress;

/// The progress display of one run: drawn from the engine's calls once the run has started. Every method is
/// cheap and may be called a few times per second.
pub struct Progress {
    /// Whether the display may be drawn (not `--quiet`, stderr a terminal).
    shown: bool,
    bar: OnceLock<ProgressBar>,
}

/// `12.3s`, `2m05.1s`, `1h02m03s`.
fn elapsed_text(elapsed: Duration) -> String {
    let s = elapsed.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:04.1}s", (s / 60.0) as u64, s % 60.0)
    } else {
        let t = elapsed.as_secs();
        format!("{}h{:02}m{:02}s", t / 3600, t / 60 % 60, t % 60)
    }
}

/// The line shown for `sources`.
fn status_line(sources: &[SourceProgress]) -> String {
    sources
        .iter()
        .map(|s| {
            let samples = s.counted + s.outside;
            let mut part = format!("{}: {samples} samples ({} outside)", s.name, s.outside);
            if s.lost > 0 {
                part.push_str(&format!(", {} LOST", s.lost));
            } else {
                part.push_str(", 0 lost");
            }
            part
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

impl Progress {
    /// A display, hidden when `quiet` or when stderr is not a terminal.
    pub fn new(quiet: bool) -> Progress {
        Progress::shown_if(!quiet && std::io::stderr().is_terminal())
    }

    fn shown_if(shown: bool) -> Progress {
        Progress {
            shown,
            bar: OnceLock::new(),
        }
    }

    /// The display for a run described by `what` (`record: ./prog`, `attach: pid 1234`), if shown.
    fn bar(what: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{spinner} ntprof {prefix} [{msg}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        bar.set_message("0.0s");
        bar
    }

    /// Print a line on stderr above the display (which is drawn again below it).
    pub fn println(&self, line: &str) {
        match self.bar.get() {
            Some(bar) => bar.println(line),
            None => crate::output::say(line),
        }
    }

    /// Whether anything is drawn.
    #[cfg(test)]
    fn visible(&self) -> bool {
        self.bar.get().is_some()
    }
}

impl ntprof_engine::progress::Progress for Progress {
    /// Draw the display (when shown) for the run described by `what`.
    fn start(&self, what: &str) {
        if self.shown {
            self.bar.get_or_init(|| Progress::bar(what));
        }
    }

    /// Show the state after `elapsed`.
    fn update(&self, elapsed: Duration, sources: &[SourceProgress]) {
        if let Some(bar) = self.bar.get() {
            bar.set_message(format!(
                "{} | {}",
                elapsed_text(elapsed),
                status_line(sources)
            ));
            bar.tick();
        }
    }

    /// Remove the display (before the report is printed).
    fn finish(&self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        ntprof_engine::progress::Progress::finish(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_when_quiet_or_not_a_terminal() {
        use ntprof_engine::progress::Progress as _;
        let started = |shown: bool| {
            let p = Progress::shown_if(shown);
            p.start("record: x");
            p.visible()
        };
        assert!(!started(false));
        assert!(started(true));
        assert!(!Progress::shown_if(true).visible());
    }

    #[test]
    fn the_line_has_elapsed_samples_per_source_and_lost() {
        let sources = [
            SourceProgress {
                name: "Timer".into(),
                counted: 900,
                outside: 100,
                lost: 0,
            },
            SourceProgress {
                name: "page-faults".into(),
                counted: 5,
                outside: 0,
                lost: 2,
            },
        ];
        assert_eq!(
            status_line(&sources),
            "Timer: 1000 samples (100 outside), 0 lost | page-faults: 5 samples (0 outside), 2 LOST"
        );
        assert_eq!(elapsed_text(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(elapsed_text(Duration::from_millis(125_100)), "2m05.1s");
        assert_eq!(elapsed_text(Duration::from_secs(3723)), "1h02m03s");
    }
}
