//! Google's pprof format: `profile.proto`, gzipped.
//!
//! The messages (`proto`) are written from the public `profile.proto` (package `perftools.profiles`, proto3) with
//! its field numbers, and encoded by prost. One pprof profile holds every source of the run: each source has two
//! sample types (samples/count, and its own unit: nanoseconds for time sources, events otherwise), and each
//! non-zero bucket becomes one sample whose values are non-zero only in its own source's columns, labelled with
//! the process's `pid` (numeric) and `command` (string) so that `pprof -tags` lists them and `-tagfocus=command=gzip`
//! selects one command. The samples that fell outside every profiled module are one more sample per process with
//! such samples, on a location named `[outside profiled modules]`, so that pprof's percentages are the shares of the
//! text report (samples / (counted + outside)).
//!
//! The mappings are the modules, the profiled executable first (pprof titles its views with the first mapping's
//! file). Locations are bucket addresses, each in the mapping of its module; a location's lines are the frames of
//! the address, innermost (inlined) first, as pprof expects.
//!
//! With call stacks (`-g`, `--call-graph`) a sample is one stack instead: one location per frame (the sampled
//! address, then each caller at its return address − 1), leaf first, so that `pprof -top -cum`, `-peek`, `-tree`
//! and `-traces` show callers and inclusive time. A stack whose walk was cut short ends in a `[truncated]`
//! frame, a frame-pointer chain that ended at no thread's or program's entry in `[fp chain ended]`; each sample
//! carries its process's `command` and `pid` as labels, and its `cgroup` (v2 path) and `container_id` (the 64-hex
//! id of a Docker, containerd, CRI-O or Podman container) where known.

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

mod labels;
mod proto;
pub use proto::*;

use crate::report::{Frame, ModuleReport, Report, SourceReport};
use labels::labels;

/// The name of the function the outside samples are shown under.
pub const OUTSIDE: &str = "[outside profiled modules]";

/// The root frame of a call stack whose walk was cut short.
pub const TRUNCATED: &str = crate::report::TRUNCATED_FRAME;

/// Builds the string table, functions and locations with de-duplication.
#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_index: HashMap<String, i64>,
    functions: Vec<Function>,
    function_index: HashMap<(String, Option<String>), u64>,
    locations: Vec<Location>,
    location_index: HashMap<(u64, u64), u64>,
}

impl Builder {
    fn new() -> Builder {
        let mut b = Builder::default();
        b.string("");
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_index.insert(s.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, file: Option<&str>, start_line: Option<u32>) -> u64 {
        let key = (name.to_string(), file.map(str::to_string));
        if let Some(&id) = self.function_index.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name_index = self.string(name);
        let filename = file.map_or(0, |f| self.string(f));
        self.functions.push(Function {
            id,
            name: name_index,
            system_name: name_index,
            filename,
            start_line: start_line.map_or(0, i64::from),
        });
        self.function_index.insert(key, id);
        id
    }

    /// The location of `address` in mapping `mapping_id` (0: none), with its lines built by `lines` on first use.
    fn location(
        &mut self,
        mapping_id: u64,
        address: u64,
        lines: impl FnOnce(&mut Builder) -> Vec<Line>,
    ) -> u64 {
        if let Some(&id) = self.location_index.get(&(mapping_id, address)) {
            return id;
        }
        let line = lines(self);
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id,
            address,
            line,
            is_folded: false,
        });
        self.location_index.insert((mapping_id, address), id);
        id
    }
}

/// Saturating conversion for values pprof stores as int64.
fn int64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Nanoseconds since the Unix epoch of an RFC 3339 UTC time (`2026-11-23T13:46:41Z`, fractions allowed).
fn rfc3339_nanos(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once(['T', ' '])?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), March-based year so that leap days end the year.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let digits: String = frac.chars().take(9).collect();
    let nanos = if digits.is_empty() {
        0
    } else {
        digits.parse::<i64>().ok()? * 10_i64.pow(9 - digits.len() as u32)
    };
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000_000) + nanos)
}

/// The pprof `Profile` of a report (not yet encoded).
pub fn profile(report: &Report) -> Profile {
    let mut b = Builder::new();
    let sample_type = sample_types(&mut b, report);
    let (mappings, mapping_of) = mappings(&mut b, report);
    let width = sample_type.len();
    let mut samples = Vec::new();
    let mut first = 0;
    for source in &report.sources {
        let columns = Columns {
            first,
            single: source.is_off_cpu(),
            width,
            sample_value: source.sample_value,
        };
        first += if columns.single { 1 } else { 2 };
        if source.stacks.is_empty() {
            bucket_samples(&mut b, report, source, &mapping_of, columns, &mut samples);
        } else {
            let fp = report.fp_stacks();
            stack_samples(
                &mut b,
                report,
                source,
                &mapping_of,
                (columns, fp),
                &mut samples,
            );
        }
        outside_samples(&mut b, report, source, columns, &mut samples);
    }
    let comment = comments(&mut b, report);
    let (period_type, period) = match report.sources.first() {
        Some(first) => (Some(sample_type[1].clone()), int64(first.sample_value)),
        None => (None, 0),
    };
    Profile {
        sample_type,
        sample: samples,
        mapping: mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        drop_frames: 0,
        keep_frames: 0,
        // A window's own start (its duration is `duration_s`).
        time_nanos: match &report.run.window {
            Some(w) => i64::try_from(w.start_unix_ns).unwrap_or(i64::MAX),
            None => rfc3339_nanos(&report.run.started_at).unwrap_or(0),
        },
        duration_nanos: (report.run.duration_s * 1e9).round() as i64,
        period_type: period_type.clone(),
        period,
        comment,
        // A string index: the type name of the first source's own unit (`cpu` for a time source).
        default_sample_type: period_type.as_ref().map_or(0, |t| t.r#type),
    }
}

/// Two sample types per source: samples/count and the source's own unit; one per off-CPU source, its name in
/// nanoseconds (`off_cpu`, `preempted`: `pprof -sample_index=off_cpu`).
fn sample_types(b: &mut Builder, report: &Report) -> Vec<ValueType> {
    let several = report.sources.len() > 1;
    let mut sample_type = Vec::new();
    for source in &report.sources {
        if source.is_off_cpu() {
            sample_type.push(ValueType {
                r#type: b.string(&source.name),
                unit: b.string("nanoseconds"),
            });
            continue;
        }
        let count_type = if several {
            format!("{}-samples", source.name)
        } else {
            "samples".to_string()
        };
        sample_type.push(ValueType {
            r#type: b.string(&count_type),
            unit: b.string("count"),
        });
        let value_type = match (source.sample_unit == "nanoseconds", several) {
            (true, true) => format!("{}-cpu", source.name),
            (true, false) => "cpu".to_string(),
            (false, _) => source.name.clone(),
        };
        sample_type.push(ValueType {
            r#type: b.string(&value_type),
            unit: b.string(&source.sample_unit),
        });
    }
    sample_type
}

/// One mapping per module name (modules are the same objects in every source of a run), the profiled
/// executable first: pprof's views are titled with the first mapping's file. Returns them with the id of each
/// module name.
fn mappings<'r>(b: &mut Builder, report: &'r Report) -> (Vec<Mapping>, HashMap<&'r str, u64>) {
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_of: HashMap<&str, u64> = HashMap::new();
    let mut modules: Vec<(&SourceReport, &ModuleReport)> = report
        .sources
        .iter()
        .flat_map(|s| s.modules.iter().map(move |m| (s, m)))
        .collect();
    let executable = report.run.executable.as_deref();
    modules.sort_by_key(|(_, m)| Some(m.path.as_str()) != executable);
    // The command's executable without samples of its own (a shell script whose time is in the programs it
    // runs, an interpreter whose time is in a library): its mapping still comes first, without locations.
    if let Some(exe) = executable
        && !modules.iter().any(|(_, m)| m.path == exe)
    {
        mappings.push(Mapping {
            id: 1,
            filename: b.string(exe),
            ..Mapping::default()
        });
    }
    for (source, module) in modules {
        if mapping_of.contains_key(module.name.as_str()) {
            continue;
        }
        let id = mappings.len() as u64 + 1;
        let frames: Vec<&Frame> = source
            .buckets
            .iter()
            .filter(|bucket| bucket.module == module.name)
            .flat_map(|bucket| &bucket.frames)
            .collect();
        mappings.push(Mapping {
            id,
            memory_start: module.start,
            memory_limit: module.end,
            file_offset: module.file_offset,
            filename: b.string(&module.path),
            build_id: module.build_id.as_deref().map_or(0, |id| b.string(id)),
            has_functions: !frames.is_empty(),
            has_filenames: frames.iter().any(|f| f.file.is_some()),
            has_line_numbers: frames.iter().any(|f| f.line.is_some()),
            has_inline_frames: frames.iter().any(|f| f.inlined),
        });
        mapping_of.insert(module.name.as_str(), id);
    }
    (mappings, mapping_of)
}

/// Where a source's values go in a sample's value vector.
#[derive(Clone, Copy)]
struct Columns {
    /// The source's first column.
    first: usize,
    /// One column (an off-CPU source: nanoseconds), else two (samples, value).
    single: bool,
    width: usize,
    sample_value: u64,
}

impl Columns {
    fn values(self, samples: u64) -> Vec<i64> {
        let mut value = vec![0_i64; self.width];
        value[self.first] = int64(samples);
        if !self.single {
            value[self.first + 1] = int64(samples.saturating_mul(self.sample_value));
        }
        value
    }
}

/// The first line of each function of `source`, by (module, function): for Function.start_line.
fn start_lines(source: &SourceReport) -> HashMap<(&str, &str), u32> {
    source
        .functions
        .iter()
        .filter_map(|f| Some(((f.module.as_str(), f.name.as_str()), f.line?)))
        .collect()
}

/// The Lines of an address in `module` whose symbolized `frames` are given (innermost first, as pprof wants).
fn frame_lines(
    b: &mut Builder,
    start_lines: &HashMap<(&str, &str), u32>,
    module: &str,
    frames: &[Frame],
) -> Vec<Line> {
    frames
        .iter()
        .map(|frame| {
            let start = start_lines.get(&(module, frame.function.as_str())).copied();
            Line {
                function_id: b.function(&frame.function, frame.file.as_deref(), start),
                line: frame.line.map_or(0, i64::from),
            }
        })
        .collect()
}

/// One sample per non-zero bucket of `source`, on its location, labelled with its process.
fn bucket_samples(
    b: &mut Builder,
    report: &Report,
    source: &SourceReport,
    mapping_of: &HashMap<&str, u64>,
    columns: Columns,
    samples: &mut Vec<Sample>,
) {
    let start_lines = start_lines(source);
    for bucket in source.buckets.iter().filter(|bucket| bucket.samples > 0) {
        let mapping_id = mapping_of.get(bucket.module.as_str()).copied().unwrap_or(0);
        let location = b.location(mapping_id, bucket.address, |b| {
            let mut lines = frame_lines(b, &start_lines, &bucket.module, &bucket.frames);
            if lines.is_empty() {
                // Nothing is known of the address: name it module+offset, as the text report does.
                let name = format!("{}+{:#x}", bucket.module, bucket.offset);
                lines.push(Line {
                    function_id: b.function(&name, None, None),
                    line: 0,
                });
            }
            lines
        });
        let process = report.processes.get(bucket.process as usize);
        samples.push(Sample {
            location_id: vec![location],
            value: columns.values(bucket.samples),
            label: labels(b, bucket.pid, &bucket.command, process),
        });
    }
}

/// With call stacks: one sample per stack of `source`, one location per frame (leaf first), a stack whose walk
/// was cut short ending in a `[truncated]` location, a frame-pointer chain that ended early in `[fp chain ended]`.
fn stack_samples(
    b: &mut Builder,
    report: &Report,
    source: &SourceReport,
    mapping_of: &HashMap<&str, u64>,
    (columns, fp): (Columns, bool),
    samples: &mut Vec<Sample>,
) {
    let start_lines = start_lines(source);
    for stack in source.stacks.iter().filter(|s| s.samples > 0) {
        let mut ids = Vec::with_capacity(stack.frames.len() + 1);
        for &l in &stack.frames {
            let Some(loc) = source.locations.get(l as usize) else {
                continue;
            };
            let mapping_id = mapping_of.get(loc.module.as_str()).copied().unwrap_or(0);
            ids.push(b.location(mapping_id, loc.address, |b| {
                frame_lines(b, &start_lines, &loc.module, &loc.frames)
            }));
        }
        if let Some(end) = source.chain_end(stack, fp) {
            // One location per marker, outside every mapping: address 1 cut short, 2 a frame-pointer chain's end.
            let address = if end == TRUNCATED { 1 } else { 2 };
            ids.push(b.location(0, address, |b| {
                vec![Line {
                    function_id: b.function(end, None, None),
                    line: 0,
                }]
            }));
        }
        let process = report.processes.get(stack.process as usize);
        samples.push(Sample {
            location_id: ids,
            value: columns.values(stack.samples),
            label: labels(b, stack.pid, &stack.command, process),
        });
    }
}

/// The samples outside every module: one sample per process with such samples, labelled like the others; any
/// rest unlabelled.
fn outside_samples(
    b: &mut Builder,
    report: &Report,
    source: &SourceReport,
    columns: Columns,
    samples: &mut Vec<Sample>,
) {
    if source.stats.outside == 0 {
        return;
    }
    let location = b.location(0, 0, |b| {
        vec![Line {
            function_id: b.function(OUTSIDE, None, None),
            line: 0,
        }]
    });
    let mut left = source.stats.outside;
    for p in source.processes.iter().filter(|p| p.outside > 0) {
        let process = report.processes.get(p.process as usize);
        let command = process.map_or("", |r| r.command.as_str());
        left = left.saturating_sub(p.outside);
        samples.push(Sample {
            location_id: vec![location],
            value: columns.values(p.outside),
            label: labels(b, p.pid, command, process),
        });
    }
    if left > 0 {
        samples.push(Sample {
            location_id: vec![location],
            value: columns.values(left),
            label: Vec::new(),
        });
    }
}

/// The profile's comments: what ran, and each source's interval and accounting.
fn comments(b: &mut Builder, report: &Report) -> Vec<i64> {
    let what = if report.run.command.is_empty() {
        report.run.mode.clone()
    } else {
        format!("{}: {}", report.run.mode, report.run.command.join(" "))
    };
    let mut comment = vec![b.string(&format!("{} {what}", report.tool))];
    for source in &report.sources {
        let s = source.stats;
        // An off-CPU source counts nanoseconds off CPU, not samples: say so, as the text report does.
        let (what, ns) = if source.is_off_cpu() {
            ("nanoseconds off CPU, each switch measured".into(), " ns")
        } else {
            (
                format!("interval {} {}", source.interval, source.interval_unit),
                "",
            )
        };
        comment.push(b.string(&format!(
            "{}: {what}, counted {}{ns}, outside {}{ns}, lost {}, throttled {}",
            source.name, s.counted, s.outside, s.lost, s.throttled
        )));
    }
    comment
}

/// The gzipped `profile.proto` of a report.
pub fn render(report: &Report) -> Result<Vec<u8>, String> {
    let bytes = profile(report).encode_to_vec();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&bytes)
        .and_then(|()| gz.finish())
        .map_err(|e| format!("cannot compress the pprof profile: {e}"))
}

#[cfg(test)]
mod tests;
