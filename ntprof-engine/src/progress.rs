//! What a recording reports while it runs: the [`Progress`] a caller passes in (a terminal line, a log, nothing)
//! and the counts it is given a few times a second.

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

/// Receives the progress of a recording. Called on the recording's own thread, a few times a second: keep each
/// call cheap.
///
/// ```
/// use std::time::Duration;
/// use ntprof_engine::progress::{Progress, SourceProgress};
///
/// /// One line on stderr per update.
/// struct Log;
///
/// impl Progress for Log {
///     fn update(&self, elapsed: Duration, sources: &[SourceProgress]) {
///         for s in sources {
///             eprintln!("{:.1}s {}: {} samples, {} lost", elapsed.as_secs_f64(), s.name, s.counted, s.lost);
///         }
///     }
/// }
/// # Log.update(Duration::from_secs(1), &[SourceProgress::default()]);
/// ```
pub trait Progress {
    /// The run has started; `what` describes it (`record: ./prog`, `attach: pid 1234`).
    fn start(&self, what: &str) {
        let _ = what;
    }
    /// The state after `elapsed`.
    fn update(&self, elapsed: Duration, sources: &[SourceProgress]);
    /// Sampling has ended (the report is being built).
    fn finish(&self) {}
}

/// No progress: every call does nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _: Duration, _: &[SourceProgress]) {}
}
