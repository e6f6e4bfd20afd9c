//! Aggregation: one source's counts by (image, stack) → its modules, commands, processes, functions, lines and
//! buckets, with shares of the source's samples. Functions and lines are kept apart per command, as `perf
//! report --sort comm,dso,sym` does.

use std::collections::{HashMap, HashSet};

use super::symbolize::{Located, Symbolizers};
use crate::report::{
    BucketReport, CommandReport, FunctionReport, LineReport, ModuleReport, ProcessSamples, Stats,
};
use crate::tree::{SourceCounts, Tracker};

/// What a source's tables are built from.
pub struct Inputs<'a> {
    /// The model of the run.
    pub tracker: &'a Tracker,
    /// Symbolizers and module placement.
    pub symbols: &'a Symbolizers<'a>,
    /// The symbolized location of each stack id (`None` for stacks without samples).
    pub located: &'a [Option<Located>],
    /// Bucket size in bytes.
    pub bucket_size: u64,
}

/// The tables of one source.
pub struct Tables {
    /// Totals.
    pub stats: Stats,
    /// Modules with samples, hottest first.
    pub modules: Vec<ModuleReport>,
    /// Commands, hottest first.
    pub commands: Vec<CommandReport>,
    /// Every process, in order.
    pub processes: Vec<ProcessSamples>,
    /// Functions, hottest first.
    pub functions: Vec<FunctionReport>,
    /// Lines, hottest first.
    pub lines: Vec<LineReport>,
    /// Buckets, by command, module and address.
    pub buckets: Vec<BucketReport>,
}

/// `part / whole`, 0 for an empty whole.
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[derive(Default)]
struct FnAcc {
    address: u64,
    size: u64,
    file: Option<String>,
    line: Option<u32>,
    samples: u64,
}

/// The sums one source's counts are gathered into, before they become rows.
#[derive(Default)]
struct Sums<'a> {
    /// (counted, outside) per process.
    per_process: Vec<(u64, u64)>,
    commands: HashMap<&'a str, (u64, HashSet<u32>)>,
    modules: HashMap<u32, u64>,
    functions: HashMap<(&'a str, &'a str, &'a str), FnAcc>,
    /// By (command, module, function, file, line): lines stay apart per function (minified JavaScript puts many
    /// functions on one line).
    lines: HashMap<(&'a str, &'a str, &'a str, &'a str, u32), u64>,
    buckets: Vec<BucketReport>,
}

impl<'a> Sums<'a> {
    fn command(&mut self, comm: &'a str, process: u32, n: u64) {
        let c = self.commands.entry(comm).or_default();
        c.0 += n;
        c.1.insert(process);
    }

    /// `n` samples of image `image` at stack `stack`.
    fn add(&mut self, input: &'a Inputs<'a>, image: u32, stack: u32, n: u64) {
        let t = input.tracker;
        let img = &t.processes.images[image as usize];
        self.per_process[img.process as usize].0 += n;
        self.command(img.comm.as_str(), img.process, n);
        let loc = t.stacks.locs[stack as usize];
        *self.modules.entry(loc.module).or_insert(0) += n;
        let Some(located) = &input.located[stack as usize] else {
            return;
        };
        let module = input.symbols.placed[loc.module as usize].name.as_str();
        let acc = self
            .functions
            .entry((img.comm.as_str(), module, located.function.as_str()))
            .or_insert_with(|| FnAcc {
                address: located.function_address,
                size: located.function_size,
                file: located.function_line.as_ref().map(|l| l.0.clone()),
                line: located.function_line.as_ref().map(|l| l.1),
                samples: 0,
            });
        acc.samples += n;
        if let Some(inner) = located.frames.first()
            && let (Some(file), Some(line)) = (&inner.file, inner.line)
        {
            *self
                .lines
                .entry((
                    img.comm.as_str(),
                    module,
                    inner.function.as_str(),
                    file.as_str(),
                    line,
                ))
                .or_insert(0) += n;
        }
        self.buckets.push(BucketReport {
            process: img.process,
            pid: t.processes.list[img.process as usize].pid,
            command: img.comm.clone(),
            module: module.to_string(),
            address: located.address,
            offset: located.offset,
            size: input.bucket_size,
            samples: n,
            frames: located.frames.clone(),
        });
    }
}

/// Build the tables of one source.
pub fn tables<'a>(input: &'a Inputs<'a>, counts: &SourceCounts) -> Tables {
    let t = input.tracker;
    let outside: u64 = counts.outside.values().sum();
    let total = counts.samples;
    let stats = Stats {
        counted: counts.samples - outside,
        outside,
        lost: counts.lost,
        throttled: counts.throttled,
    };
    let mut sums = Sums {
        per_process: vec![(0, 0); t.processes.list.len()],
        ..Sums::default()
    };
    for (&image, &n) in &counts.outside {
        if let Some(img) = t.processes.images.get(image as usize) {
            sums.per_process[img.process as usize].1 += n;
            sums.command(img.comm.as_str(), img.process, n);
        }
    }
    for (&(image, stack), &n) in &counts.counts {
        sums.add(input, image, stack, n);
    }
    let mut buckets = sums.buckets;
    buckets.sort_by(|a, b| {
        (a.process, &a.command, &a.module, a.address)
            .cmp(&(b.process, &b.command, &b.module, b.address))
    });
    Tables {
        stats,
        modules: module_rows(input, &sums.modules, total),
        commands: command_rows(sums.commands, total),
        processes: sums
            .per_process
            .iter()
            .enumerate()
            .map(|(i, &(c, o))| ProcessSamples {
                process: i as u32,
                pid: t.processes.list[i].pid,
                counted: c,
                outside: o,
                share: share(c + o, total),
            })
            .collect(),
        functions: function_rows(sums.functions, total),
        lines: line_rows(input, sums.lines, total),
        buckets,
    }
}

/// Modules merged by name and path (a file mapped by several processes is one module).
fn module_rows(input: &Inputs<'_>, samples: &HashMap<u32, u64>, total: u64) -> Vec<ModuleReport> {
    let t = input.tracker;
    let mut rows: Vec<ModuleReport> = Vec::new();
    let mut order: Vec<(&u32, &u64)> = samples.iter().collect();
    order.sort();
    for (&m, &n) in order {
        let placed = &input.symbols.placed[m as usize];
        let from_ms = t.modules.list[m as usize]
            .mapped_ns
            .saturating_sub(t.run_start_ns) as f64
            / 1e6;
        if let Some(row) = rows
            .iter_mut()
            .find(|r| r.name == placed.name && r.path == placed.path)
        {
            row.samples += n;
            row.profiled_from_ms = row.profiled_from_ms.min(from_ms);
            continue;
        }
        rows.push(ModuleReport {
            name: placed.name.clone(),
            path: placed.path.clone(),
            build_id: placed.build_id.clone(),
            start: placed.first.0,
            end: placed.first.1,
            file_offset: placed.first.2,
            bias: placed.bias,
            samples: n,
            share: 0.0,
            profiled_from_ms: from_ms,
            names: placed.names.clone(),
            unnamed: placed.unnamed.clone(),
        });
    }
    for r in &mut rows {
        r.share = share(r.samples, total);
    }
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
    rows
}

fn command_rows(commands: HashMap<&str, (u64, HashSet<u32>)>, total: u64) -> Vec<CommandReport> {
    let mut rows: Vec<CommandReport> = commands
        .into_iter()
        .map(|(command, (samples, procs))| CommandReport {
            command: command.to_string(),
            processes: procs.len() as u32,
            samples,
            share: share(samples, total),
        })
        .collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.command.cmp(&b.command)));
    rows
}

fn function_rows(map: HashMap<(&str, &str, &str), FnAcc>, total: u64) -> Vec<FunctionReport> {
    let mut rows: Vec<FunctionReport> = map
        .into_iter()
        .map(|((command, module, name), a)| FunctionReport {
            command: command.to_string(),
            module: module.to_string(),
            name: name.to_string(),
            address: a.address,
            size: a.size,
            file: a.file,
            line: a.line,
            samples: a.samples,
            share: share(a.samples, total),
        })
        .collect();
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| (&a.command, &a.module, &a.name).cmp(&(&b.command, &b.module, &b.name)))
    });
    rows
}

type LineKey<'a> = (&'a str, &'a str, &'a str, &'a str, u32);

fn line_rows(input: &Inputs<'_>, map: HashMap<LineKey<'_>, u64>, total: u64) -> Vec<LineReport> {
    let mut texts = super::lines::SourceTexts::default();
    // Each module's sources are read in the root of the process that mapped it.
    let host = crate::files::Root::Host;
    let roots: HashMap<&str, &crate::files::Root> = input
        .tracker
        .modules
        .list
        .iter()
        .zip(&input.symbols.placed)
        .filter_map(|(m, placed)| match &m.object {
            Some(Ok(o)) => Some((placed.name.as_str(), &o.root)),
            _ => None,
        })
        .collect();
    let mut rows: Vec<LineReport> = map
        .into_iter()
        .map(
            |((command, module, function, file, line), samples)| LineReport {
                command: command.to_string(),
                text: texts.line(roots.get(module).copied().unwrap_or(&host), file, line),
                module: module.to_string(),
                function: function.to_string(),
                file: file.to_string(),
                line,
                samples,
                share: share(samples, total),
            },
        )
        .collect();
    rows.sort_by(|a, b| {
        b.samples.cmp(&a.samples).then_with(|| {
            (&a.command, &a.file, a.line, &a.function).cmp(&(
                &b.command,
                &b.file,
                b.line,
                &b.function,
            ))
        })
    });
    rows
}
