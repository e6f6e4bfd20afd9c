//! Live progress on stderr while recording: elapsed time, samples so far per source, lost so far.
//!
//! Shown only when stderr is a terminal and `--quiet` is not given.
#![allow(dead_code)] // Filled in by the format work; the recorder already drives it.

use std::time::Duration;

/// What the recorder knows of one source at a moment of the run.
#[derive(Debug, Clone, Default)]
pub struct SourceProgress {
    /// The source's name.
    pub name: String,
    /// Samples counted so far (all modules).
    pub counted: u64,
    /// Samples outside every module so far.
    pub outside: u64,
    /// Samples lost so far.
    pub lost: u64,
}

/// The progress display of one run. Every method is cheap and may be called a few times per second.
pub struct Progress {
    _private: (),
}

impl Progress {
    /// A display for a run described by `what` (`record: ./prog`, `attach: pid 1234`); hidden when `quiet` or when
    /// stderr is not a terminal.
    pub fn new(what: &str, quiet: bool) -> Progress {
        let _ = (what, quiet);
        Progress { _private: () }
    }

    /// Show the state after `elapsed`.
    pub fn update(&self, elapsed: Duration, sources: &[SourceProgress]) {
        let _ = (elapsed, sources);
    }

    /// Remove the display (before the report is printed).
    pub fn finish(&self) {}
}
