//! A run cut into windows (`--every SECONDS`): at each cut the samples read so far make the window's report,
//! which is handed to a [`WindowSink`], and the counts start again from zero. What the run learned stays: the
//! processes and their mappings, the interned stacks, the unwinders, the JIT dumps and the opened symbol tables
//! ([`crate::collect::SymbolCache`]), so a window costs its own samples and report, not a new start.
//!
//! A window ends where the last read round's records were applied (every record older than that instant is in
//! it, none younger), so consecutive windows cover the run without a gap or an overlap; the last one ends with
//! the run.

use std::time::{Duration, Instant};

use super::session::Session;
use super::{finish_report, launch};
use crate::collect::{self, Endings};
use crate::report::{Report, RunInfo, WindowInfo};
use crate::symbols::Kallsyms;

/// Takes the windows of a run as they close.
pub trait WindowSink {
    /// A window closed: its report (`report.run.window` says which, `report.run.duration_s` is its length).
    /// Returns false to end the run: `record` then sends SIGTERM to its command and goes on until it exits,
    /// `attach` and `record --kernel` end at once; the windows up to the end are still handed over.
    fn window(&mut self, report: &Report) -> bool;

    /// Asked after every read round (about ten times a second): true to end the run now rather than at the
    /// next window's end (a live view told to quit). The run then ends as when [`WindowSink::window`] returns
    /// false, and the samples since the last window are handed over in the run's last window. By default never.
    fn stop_requested(&mut self) -> bool {
        false
    }
}

/// How a run is cut: every `every`, each window to `sink`.
pub struct Windows<'a> {
    /// The length of a window.
    pub every: Duration,
    /// Where the windows go.
    pub sink: &'a mut dyn WindowSink,
}

/// The cutting of one run.
pub(super) struct Cutter<'a> {
    every: Duration,
    sink: &'a mut dyn WindowSink,
    /// When the next window is due.
    next: Instant,
    index: u64,
    /// The window's start, sampler clock.
    start_ns: u64,
    /// System clock − sampler clock, nanoseconds.
    offset: i128,
    cpu_at_start: f64,
    rounds_at_start: u64,
    /// What every window's report says of the run (its mode, command, options).
    template: RunInfo,
    /// The sink asked to end the run.
    pub stopped: bool,
}

impl<'a> Cutter<'a> {
    /// Windows of a run whose first starts at `start_ns` (sampler clock), each report made from `template`.
    pub fn new(w: Windows<'a>, template: RunInfo, start_ns: u64, session: &Session) -> Cutter<'a> {
        let offset = i128::from(collect::unix_now_ns()) - i128::from(ntprofile::sampler_clock_ns());
        Cutter {
            every: w.every,
            sink: w.sink,
            next: Instant::now() + w.every,
            index: 0,
            start_ns,
            offset,
            cpu_at_start: launch::own_cpu(),
            rounds_at_start: session.rounds,
            template,
            stopped: false,
        }
    }

    /// After a round: close the window if it is due. False once the sink asked to end the run.
    pub fn tick(&mut self, session: &mut Session, kallsyms: Option<&Kallsyms>) -> bool {
        let now = Instant::now();
        if now >= self.next && !self.stopped {
            // A round late by more than a window (a stopped machine) starts the count again from now.
            self.next += self.every;
            if self.next <= now {
                self.next = now + self.every;
            }
            let end = session.applied_until();
            let run = self.template.clone();
            let report = self.close(session, run, kallsyms, &Vec::new(), end, false);
            self.stopped = !self.sink.window(&report);
        }
        if !self.stopped && self.sink.stop_requested() {
            self.stopped = true;
        }
        !self.stopped
    }

    /// The run ended (`session.finish()` was called): its last window, from the full `run` of the mode,
    /// handed to the sink and returned.
    pub fn last(
        &mut self,
        session: &mut Session,
        run: RunInfo,
        kallsyms: Option<&Kallsyms>,
        endings: &Endings,
    ) -> Report {
        let end = session.applied_until().max(self.start_ns);
        let report = self.close(session, run, kallsyms, endings, end, true);
        self.sink.window(&report);
        report
    }

    fn unix(&self, sampler_ns: u64) -> u64 {
        (i128::from(sampler_ns) + self.offset).clamp(0, i128::from(u64::MAX)) as u64
    }

    fn close(
        &mut self,
        session: &mut Session,
        mut run: RunInfo,
        kallsyms: Option<&Kallsyms>,
        endings: &Endings,
        end_ns: u64,
        last: bool,
    ) -> Report {
        session.settle_window_stats();
        if !last {
            // The last window's JIT code was named when the session finished.
            session.tracker.resolve_jit();
        }
        let (start, end) = (
            self.unix(self.start_ns),
            self.unix(end_ns.max(self.start_ns)),
        );
        run.duration_s = end.saturating_sub(start) as f64 / 1e9;
        // The window's CPU: recording and reading in it, and making and handing over the previous window (each
        // window's own report is counted in the next one's, so the run's CPU is all counted once).
        let cpu = launch::own_cpu();
        run.recorder_cpu_ms = (cpu - self.cpu_at_start).max(0.0) * 1e3;
        run.recorder_rounds = session.rounds - self.rounds_at_start;
        run.window = Some(WindowInfo {
            index: self.index,
            start_unix_ns: start,
            end_unix_ns: end,
            start: collect::rfc3339(start, true),
            end: collect::rfc3339(end, true),
            last,
        });
        // Every process of the run keeps its row (the rows are numbered by position); one that ended
        // before the window has nothing in it.
        let report = finish_report(session, run, kallsyms, endings);
        session.tracker.start_window();
        self.index += 1;
        self.start_ns = end_ns.max(self.start_ns);
        self.cpu_at_start = cpu;
        self.rounds_at_start = session.rounds;
        report
    }
}
