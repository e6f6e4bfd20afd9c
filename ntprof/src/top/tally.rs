//! What `ntprof top` keeps of each window: per source, the samples of every function (by module and name) and of
//! every process in it; a ring of the last windows, summed into the table of the sliding window.
//!
//! A window's function tallies come from its buckets (each names its process, its module and, as its outermost
//! frame, the function the report's tables name; an address nothing named is `module+0xOFFSET` there too), so
//! the table and the process column count the same samples.

use std::collections::{HashMap, VecDeque};

use ntprof_engine::report::{Report, SourceReport};

/// The row of the samples outside every profiled module.
pub const OUTSIDE: &str = "(outside every module)";

/// The samples of one function (or of the outside) in one window, by process.
#[derive(Debug, Clone, Default)]
pub struct FnTally {
    /// Samples (nanoseconds for an off-CPU source).
    pub samples: u64,
    /// By pid: the command and its samples.
    pub procs: HashMap<u32, (String, u64)>,
}

impl FnTally {
    fn add(&mut self, pid: u32, command: &str, n: u64) {
        self.samples += n;
        let e = self
            .procs
            .entry(pid)
            .or_insert_with(|| (command.to_string(), 0));
        e.1 += n;
    }

    fn merge(&mut self, other: &FnTally) {
        self.samples += other.samples;
        for (pid, (command, n)) in &other.procs {
            self.procs
                .entry(*pid)
                .or_insert_with(|| (command.clone(), 0))
                .1 += n;
        }
    }
}

/// A function: (module, name).
pub type Key = (String, String);

/// One source's counts in one window.
#[derive(Debug, Clone)]
pub struct SourceTally {
    /// The source's name (`Timer`, `off_cpu`, ...).
    pub name: String,
    /// An off-CPU source: its samples are nanoseconds off CPU.
    pub off_cpu: bool,
    /// Samples counted in a module plus those outside every module.
    pub total: u64,
    /// Samples the kernel dropped.
    pub lost: u64,
    /// Every function with samples; the outside under `("-", OUTSIDE)`.
    pub functions: HashMap<Key, FnTally>,
}

impl SourceTally {
    fn of(report: &Report, s: &SourceReport) -> SourceTally {
        let mut functions: HashMap<Key, FnTally> = HashMap::new();
        for b in &s.buckets {
            let name = match b.frames.last() {
                Some(f) => f.function.clone(),
                None => format!("{}+{:#x}", b.module, b.offset),
            };
            functions
                .entry((b.module.clone(), name))
                .or_default()
                .add(b.pid, &b.command, b.samples);
        }
        if s.stats.outside > 0 {
            let out = functions
                .entry(("-".to_string(), OUTSIDE.to_string()))
                .or_default();
            for p in s.processes.iter().filter(|p| p.outside > 0) {
                let command = report
                    .processes
                    .get(p.process as usize)
                    .map_or("?", |r| r.command.as_str());
                out.add(p.pid, command, p.outside);
            }
            // Outside samples no process row holds (a kernel profile's): counted all the same.
            if out.samples < s.stats.outside {
                out.samples = s.stats.outside;
            }
        }
        SourceTally {
            name: s.name.clone(),
            off_cpu: s.is_off_cpu(),
            total: s.stats.counted + s.stats.outside,
            lost: s.stats.lost,
            functions,
        }
    }
}

/// One window of the run, as `top` keeps it.
#[derive(Debug, Clone)]
pub struct WindowTally {
    /// Its number in the run, from 0.
    pub index: u64,
    /// Its start and end, RFC 3339 in UTC.
    pub start: String,
    /// Its end.
    pub end: String,
    /// Its length in seconds.
    pub seconds: f64,
    /// The command `top` runs (its pid), if it runs one.
    pub command_pid: Option<u32>,
    /// Every source of the run, in the report's order.
    pub sources: Vec<SourceTally>,
}

impl WindowTally {
    /// The tallies of a window's report.
    pub fn of(report: &Report) -> WindowTally {
        let w = report.run.window.as_ref();
        WindowTally {
            index: w.map_or(0, |w| w.index),
            start: w.map_or_else(String::new, |w| w.start.clone()),
            end: w.map_or_else(String::new, |w| w.end.clone()),
            seconds: report.run.duration_s,
            command_pid: report.run.pid.filter(|_| report.run.mode == "record"),
            sources: report
                .sources
                .iter()
                .map(|s| SourceTally::of(report, s))
                .collect(),
        }
    }
}

/// How the rows are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By samples in the sliding window.
    Share,
    /// By samples in the last refresh (then in the window).
    Recent,
    /// By function name.
    Name,
}

impl Sort {
    /// The next one (`s`).
    pub fn next(self) -> Sort {
        match self {
            Sort::Share => Sort::Recent,
            Sort::Recent => Sort::Name,
            Sort::Name => Sort::Share,
        }
    }

    /// Its name in the header.
    pub fn label(self) -> &'static str {
        match self {
            Sort::Share => "share",
            Sort::Recent => "last refresh",
            Sort::Name => "name",
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The module.
    pub module: String,
    /// The function.
    pub function: String,
    /// Samples in the sliding window.
    pub samples: u64,
    /// Samples in the last refresh.
    pub recent: u64,
    /// The process column.
    pub process: String,
}

/// A source's table over the sliding window.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The source's name.
    pub source: String,
    /// An off-CPU source (samples are nanoseconds).
    pub off_cpu: bool,
    /// Samples (counted + outside) in the window.
    pub total: u64,
    /// Samples lost in the window.
    pub lost: u64,
    /// The window's length in seconds (the refreshes it holds).
    pub seconds: f64,
    /// How many refreshes it holds.
    pub refreshes: usize,
    /// The last refresh's start and end.
    pub span: (String, String),
    /// The last refresh's number in the run.
    pub index: u64,
    /// Every function, in the order asked.
    pub rows: Vec<Row>,
}

/// The last windows of the run (at most `capacity`): the sliding window.
#[derive(Debug, Clone)]
pub struct Ring {
    capacity: usize,
    windows: VecDeque<WindowTally>,
}

impl Ring {
    /// A ring of `capacity` windows (at least one).
    pub fn new(capacity: usize) -> Ring {
        Ring {
            capacity: capacity.max(1),
            windows: VecDeque::new(),
        }
    }

    /// A window closed: keep it, dropping the oldest beyond the capacity.
    pub fn push(&mut self, w: WindowTally) {
        self.windows.push_back(w);
        while self.windows.len() > self.capacity {
            self.windows.pop_front();
        }
    }

    /// The names of the run's sources (those of the last window), and whether each is off-CPU.
    pub fn sources(&self) -> Vec<(String, bool)> {
        self.windows.back().map_or_else(Vec::new, |w| {
            w.sources
                .iter()
                .map(|s| (s.name.clone(), s.off_cpu))
                .collect()
        })
    }

    /// The table of source `source` over the windows held, ordered by `sort`.
    pub fn table(&self, source: &str, sort: Sort) -> Option<Table> {
        let last = self.windows.back()?;
        let mut sum: HashMap<&Key, FnTally> = HashMap::new();
        let (mut total, mut lost, mut seconds, mut off_cpu) = (0, 0, 0.0, false);
        for w in &self.windows {
            seconds += w.seconds;
            let Some(s) = w.sources.iter().find(|s| s.name == source) else {
                continue;
            };
            total += s.total;
            lost += s.lost;
            off_cpu = s.off_cpu;
            for (k, f) in &s.functions {
                sum.entry(k).or_default().merge(f);
            }
        }
        let recent = last.sources.iter().find(|s| s.name == source);
        let mut rows: Vec<Row> = sum
            .into_iter()
            .map(|(k, f)| Row {
                module: k.0.clone(),
                function: k.1.clone(),
                samples: f.samples,
                recent: recent
                    .and_then(|s| s.functions.get(k))
                    .map_or(0, |f| f.samples),
                process: process_label(&f.procs),
            })
            .collect();
        let by_name = |a: &Row, b: &Row| {
            a.function
                .cmp(&b.function)
                .then_with(|| a.module.cmp(&b.module))
        };
        match sort {
            Sort::Share => {
                rows.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| by_name(a, b)))
            }
            Sort::Recent => rows.sort_by(|a, b| {
                (b.recent, b.samples)
                    .cmp(&(a.recent, a.samples))
                    .then_with(|| by_name(a, b))
            }),
            Sort::Name => rows.sort_by(by_name),
        }
        Some(Table {
            source: source.to_string(),
            off_cpu,
            total,
            lost,
            seconds,
            refreshes: self.windows.len(),
            span: (last.start.clone(), last.end.clone()),
            index: last.index,
            rows,
        })
    }
}

/// The process column: the process with most of the samples (`command pid`, `+N` when N others have some too,
/// if it has more than half of them), else `N procs`.
pub fn process_label(procs: &HashMap<u32, (String, u64)>) -> String {
    let total: u64 = procs.values().map(|p| p.1).sum();
    let top = procs
        .iter()
        .max_by(|a, b| a.1.1.cmp(&b.1.1).then_with(|| b.0.cmp(a.0)));
    match top {
        None => "-".to_string(),
        Some((pid, (command, _))) if procs.len() == 1 => format!("{command} {pid}"),
        Some((pid, (command, n))) if 2 * n > total => {
            format!("{command} {pid} +{}", procs.len() - 1)
        }
        Some(_) => format!("{} procs", procs.len()),
    }
}

#[cfg(test)]
#[path = "tally_tests.rs"]
mod tests;
