//! Google's pprof format: `profile.proto`, gzipped.
//!
//! The messages below are written from the public `profile.proto` (package `perftools.profiles`, proto3) with its
//! field numbers, and encoded by prost. One pprof profile holds every source of the run: each source has two sample
//! types (samples/count, and its own unit: nanoseconds for time sources, events otherwise), and each non-zero bucket
//! becomes one sample whose values are non-zero only in its own source's columns. The samples that fell outside
//! every profiled module are one more sample per source on a location named `[outside profiled modules]`, so that
//! pprof's percentages are the shares of the text report (samples / (counted + outside)).
//!
//! Locations are bucket start addresses, each in the mapping of its module; a location's lines are the frames of
//! the address, innermost (inlined) first, as pprof expects.
//!
//! With call stacks (`-g`, `--call-graph`) a sample is one stack instead: one location per frame (the sampled
//! address, then each caller at its return address − 1), leaf first, so that `pprof -top -cum`, `-peek`, `-tree`
//! and `-traces` show callers and inclusive time. A stack whose walk was cut short ends in a `[truncated]`
//! frame; each sample carries its process's `command` and `pid` as labels.

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use crate::report::{Frame, Report, SourceReport};

/// The name of the function the outside samples are shown under.
pub const OUTSIDE: &str = "[outside profiled modules]";

/// The root frame of a call stack whose walk was cut short.
pub const TRUNCATED: &str = "[truncated]";

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// A description of the samples' values.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The mapped objects; id 1 and up.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The locations (addresses); id 1 and up.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions; id 1 and up.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; index 0 is the empty string.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regular expression of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regular expression of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was collected, nanoseconds since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the profile covers, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period is.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, in `period_type`'s unit.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// String index of the type (a `sample_type` name) shown by default; unset, the last.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: a type and unit, both string indices.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// E.g. `samples`, `cpu`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `count`, `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: a stack of locations (leaf first) and one value per sample type.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per `Profile::sample_type`.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`: a key with a string or numeric value.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`: one mapped object.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Id, 1 and up.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Runtime start address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Runtime end address (exclusive).
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the object's path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build id (hex).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// The locations of this mapping carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// They carry file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// They carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// They carry inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`: an address and its frames.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Id, 1 and up.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The mapping holding the address, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Runtime address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// The frames at the address: the last is the caller the earlier ones were inlined into.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several call sites folded into one location.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `Line`: a function and a line in it.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Id, 1 and up.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the (demangled) name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name as the object has it.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// The function's first line, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

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
    let several = report.sources.len() > 1;

    // Two sample types per source: samples/count and the source's own unit.
    let mut sample_type = Vec::new();
    for source in &report.sources {
        let count_type = if several {
            format!("{}-samples", source.name)
        } else {
            "samples".to_string()
        };
        sample_type.push(ValueType {
            r#type: b.string(&count_type),
            unit: b.string("count"),
        });
        let value_type = if source.sample_unit == "nanoseconds" {
            if several {
                format!("{}-cpu", source.name)
            } else {
                "cpu".to_string()
            }
        } else {
            source.name.clone()
        };
        sample_type.push(ValueType {
            r#type: b.string(&value_type),
            unit: b.string(&source.sample_unit),
        });
    }

    // One mapping per module name (modules are the same objects in every source of a run).
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_of: HashMap<&str, u64> = HashMap::new();
    for source in &report.sources {
        for module in &source.modules {
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
    }

    let width = sample_type.len();
    let mut samples = Vec::new();
    for (index, source) in report.sources.iter().enumerate() {
        // The first line of each function, for Function.start_line.
        let start_lines: HashMap<(&str, &str), u32> = source
            .functions
            .iter()
            .filter_map(|f| Some(((f.module.as_str(), f.name.as_str()), f.line?)))
            .collect();
        let values = |samples: u64| {
            let mut value = vec![0_i64; width];
            value[2 * index] = int64(samples);
            value[2 * index + 1] = int64(samples.saturating_mul(source.sample_value));
            value
        };
        if !source.stacks.is_empty() {
            stack_samples(
                &mut b,
                source,
                &mapping_of,
                &start_lines,
                &values,
                &mut samples,
            );
        }
        for bucket in source.buckets.iter().filter(|_| source.stacks.is_empty()) {
            if bucket.samples == 0 {
                continue;
            }
            let mapping_id = mapping_of.get(bucket.module.as_str()).copied().unwrap_or(0);
            let location = b.location(mapping_id, bucket.address, |b| {
                let mut lines: Vec<Line> = bucket
                    .frames
                    .iter()
                    .map(|frame| {
                        let start = start_lines
                            .get(&(bucket.module.as_str(), frame.function.as_str()))
                            .copied();
                        Line {
                            function_id: b.function(&frame.function, frame.file.as_deref(), start),
                            line: frame.line.map_or(0, i64::from),
                        }
                    })
                    .collect();
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
            samples.push(Sample {
                location_id: vec![location],
                value: values(bucket.samples),
                label: Vec::new(),
            });
        }
        if source.stats.outside > 0 {
            let location = b.location(0, 0, |b| {
                vec![Line {
                    function_id: b.function(OUTSIDE, None, None),
                    line: 0,
                }]
            });
            samples.push(Sample {
                location_id: vec![location],
                value: values(source.stats.outside),
                label: Vec::new(),
            });
        }
    }

    let mut comment = Vec::new();
    let what = if report.run.command.is_empty() {
        report.run.mode.clone()
    } else {
        format!("{}: {}", report.run.mode, report.run.command.join(" "))
    };
    comment.push(b.string(&format!("{} {what}", report.tool)));
    for source in &report.sources {
        let s = source.stats;
        comment.push(b.string(&format!(
            "{}: interval {} {}, counted {}, outside {}, lost {}, throttled {}",
            source.name,
            source.interval,
            source.interval_unit,
            s.counted,
            s.outside,
            s.lost,
            s.throttled
        )));
    }
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
        time_nanos: rfc3339_nanos(&report.run.started_at).unwrap_or(0),
        duration_nanos: (report.run.duration_s * 1e9).round() as i64,
        period_type: period_type.clone(),
        period,
        comment,
        // A string index: the type name of the first source's own unit (`cpu` for a time source).
        default_sample_type: period_type.as_ref().map_or(0, |t| t.r#type),
    }
}

/// One sample per call stack of `source`, one location per frame.
fn stack_samples(
    b: &mut Builder,
    source: &SourceReport,
    mapping_of: &HashMap<&str, u64>,
    start_lines: &HashMap<(&str, &str), u32>,
    values: &dyn Fn(u64) -> Vec<i64>,
    samples: &mut Vec<Sample>,
) {
    let command_key = b.string("command");
    let pid_key = b.string("pid");
    for stack in source.stacks.iter().filter(|s| s.samples > 0) {
        let mut ids = Vec::with_capacity(stack.frames.len() + 1);
        for &l in &stack.frames {
            let Some(loc) = source.locations.get(l as usize) else {
                continue;
            };
            let mapping_id = mapping_of.get(loc.module.as_str()).copied().unwrap_or(0);
            ids.push(b.location(mapping_id, loc.address, |b| {
                loc.frames
                    .iter()
                    .map(|frame| {
                        let start = start_lines
                            .get(&(loc.module.as_str(), frame.function.as_str()))
                            .copied();
                        Line {
                            function_id: b.function(&frame.function, frame.file.as_deref(), start),
                            line: frame.line.map_or(0, i64::from),
                        }
                    })
                    .collect()
            }));
        }
        if stack.truncated {
            ids.push(b.location(0, 1, |b| {
                vec![Line {
                    function_id: b.function(TRUNCATED, None, None),
                    line: 0,
                }]
            }));
        }
        let command = b.string(&stack.command);
        samples.push(Sample {
            location_id: ids,
            value: values(stack.samples),
            label: vec![
                Label {
                    key: command_key,
                    str: command,
                    ..Label::default()
                },
                Label {
                    key: pid_key,
                    num: i64::from(stack.pid),
                    ..Label::default()
                },
            ],
        });
    }
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
mod tests {
    use std::io::Read;

    use super::*;
    use crate::output::fixture;

    fn decode(bytes: &[u8]) -> Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut raw)
            .unwrap();
        Profile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn one_sample_per_bucket_plus_outside_with_values_in_both_units() {
        let report = fixture::report();
        let p = decode(&render(&report).unwrap());
        let source = &report.sources[0];
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.sample.len(), source.buckets.len() + 1);
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total as u64, source.stats.counted + source.stats.outside);
        for s in &p.sample {
            assert_eq!(s.value[1], s.value[0] * source.sample_value as i64);
        }
        let st = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(
            (st(p.sample_type[0].r#type), st(p.sample_type[0].unit)),
            ("samples", "count")
        );
        assert_eq!(
            (st(p.sample_type[1].r#type), st(p.sample_type[1].unit)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(p.duration_nanos, 2_000_000_000);
        assert_eq!(st(p.default_sample_type), "cpu");
        assert_eq!(p.period, 1_000_000);
    }

    #[test]
    fn inlined_frames_innermost_first_in_the_module_mapping() {
        let report = fixture::report();
        let p = decode(&render(&report).unwrap());
        let st = |i: i64| p.string_table[i as usize].clone();
        let inlined = report.sources[0]
            .buckets
            .iter()
            .find(|b| b.frames.len() == 2)
            .unwrap();
        let loc = p
            .location
            .iter()
            .find(|l| l.address == inlined.address)
            .unwrap();
        let names: Vec<String> = loc
            .line
            .iter()
            .map(|l| st(p.function[l.function_id as usize - 1].name))
            .collect();
        assert_eq!(names, ["mix", "hot_a"]);
        let mapping = &p.mapping[loc.mapping_id as usize - 1];
        assert!(mapping.memory_start <= loc.address && loc.address < mapping.memory_limit);
        assert_eq!(st(mapping.filename), "/opt/demo/bin/demo");
        assert!(mapping.has_inline_frames && mapping.has_line_numbers);
    }

    #[test]
    fn two_sources_have_their_own_columns() {
        let mut report = fixture::report();
        let mut faults = report.sources[0].clone();
        faults.name = "page-faults".into();
        faults.sample_unit = "events".into();
        faults.sample_value = 1;
        report.sources.push(faults);
        let p = decode(&render(&report).unwrap());
        assert_eq!(p.sample_type.len(), 4);
        let n = report.sources[0].buckets.len() + 1;
        assert!(
            p.sample[..n]
                .iter()
                .all(|s| s.value[2] == 0 && s.value[3] == 0)
        );
        assert!(
            p.sample[n..]
                .iter()
                .all(|s| s.value[0] == 0 && s.value[2] == s.value[3])
        );
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339_nanos("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            rfc3339_nanos("2000-03-01T00:00:01.5Z"),
            Some(951_868_801_500_000_000)
        );
        assert_eq!(
            rfc3339_nanos("2026-11-23T13:46:41Z"),
            Some(1_795_441_601_000_000_000)
        );
        assert_eq!(rfc3339_nanos("yesterday"), None);
    }
}
