//! Two profiles compared function by function, as `ntprof diff OLD NEW` shows them, and their differential
//! flame graph.
//!
//! Each profile is one [`Side`]: the samples of one source per function (module and name: the function the
//! sampled address is in, the same key in every format), the total they are shares of (counted and outside, as
//! in the text report), the time one sample stands for when the source measures time, and the folded stacks.
//! A side is read from an ntprof JSON profile or from a pprof profile (gzipped or not; ntprof's own or any
//! other program's). [`compare`] lines the functions of both sides up, the largest change of share first; a
//! module renamed between the two (a rebuilt program's executable under another name) is matched first
//! ([`module_matches`]), so that its functions compare by name.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use prost::Message;

use crate::files::{self, Owners};
use crate::output::{flame, pprof};
use crate::report;

mod rename;
pub use rename::{Matched, Reason, module_matches};

/// The largest profile `diff` reads (a pprof file is gzipped, and unpacked to at most four times this).
pub const MAX_PROFILE_BYTES: u64 = 1 << 30;

/// The samples of one source of one profile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Side {
    /// The source compared (a JSON profile's source name, or a pprof sample type).
    pub source: String,
    /// Every sample of the source: the denominator of its shares.
    pub total: u64,
    /// Nanoseconds one sample stands for, when the source measures time.
    pub ns_per_sample: Option<f64>,
    /// Samples per function, keyed by (module, function).
    pub functions: HashMap<(String, String), u64>,
    /// Folded stacks: `frame;frame;… samples` lines, outermost frame first.
    pub folded: Vec<String>,
    /// The module name of the profile's main executable, when the profile says which it is (a JSON profile's
    /// `run.executable`; a pprof profile's first mapping, by pprof's convention).
    pub main: Option<String>,
}

/// One function in both profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The module (short name; empty when the profile names none).
    pub module: String,
    /// The function.
    pub function: String,
    /// Its samples in the old profile.
    pub old: u64,
    /// Its samples in the new profile.
    pub new: u64,
    /// Its share of the old profile's samples, 0..=1.
    pub old_share: f64,
    /// Its share of the new profile's samples, 0..=1.
    pub new_share: f64,
    /// Its time in the old profile, nanoseconds, when the source measures time.
    pub old_ns: Option<f64>,
    /// Its time in the new profile, nanoseconds.
    pub new_ns: Option<f64>,
}

impl Row {
    /// The change of share, in percentage points (new − old).
    pub fn change_points(&self) -> f64 {
        (self.new_share - self.old_share) * 100.0
    }
}

/// Read one profile (JSON or pprof) and take the source named `source` (case-insensitive; a JSON source name
/// such as `Timer`, or a pprof sample type such as `samples` or `cpu`), by default the first.
pub fn load(path: &Path, source: Option<&str>) -> Result<Side, String> {
    let name = path.display().to_string();
    let bytes =
        files::read(path, &Owners::Any, MAX_PROFILE_BYTES).map_err(|e| format!("{name}: {e}"))?;
    side_of(&bytes, &name, source)
}

/// [`load`] of bytes already read; `name` names them in errors.
pub fn side_of(bytes: &[u8], name: &str, source: Option<&str>) -> Result<Side, String> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(4 * MAX_PROFILE_BYTES)
            .read_to_end(&mut raw)
            .map_err(|e| format!("{name} is gzipped but cannot be unpacked: {e}"))?;
        return pprof_side(&raw, name, source);
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        let text =
            std::str::from_utf8(bytes).map_err(|e| format!("{name} is not UTF-8 JSON: {e}"))?;
        return json_side(&report::from_json(text, name)?, name, source);
    }
    pprof_side(bytes, name, source).map_err(|e| {
        format!("{e} (ntprof diff reads ntprof JSON profiles and pprof profiles, gzipped or not)")
    })
}

/// The side of a source of an ntprof report.
pub fn json_side(
    report: &report::Report,
    name: &str,
    source: Option<&str>,
) -> Result<Side, String> {
    let names: Vec<&str> = report.sources.iter().map(|s| s.name.as_str()).collect();
    let s = match source {
        Some(want) => report
            .sources
            .iter()
            .find(|s| s.name.eq_ignore_ascii_case(want)),
        None => report.sources.first(),
    }
    .ok_or_else(|| match source {
        Some(want) => format!(
            "{name} has no source {want:?}; its sources: {}",
            names.join(", ")
        ),
        None => format!("{name} has no source"),
    })?;
    let mut functions: HashMap<(String, String), u64> = HashMap::new();
    for f in s.functions.iter().filter(|f| f.samples > 0) {
        *functions
            .entry((f.module.clone(), f.name.clone()))
            .or_insert(0) += f.samples;
    }
    if s.stats.outside > 0 {
        functions.insert((String::new(), pprof::OUTSIDE.to_string()), s.stats.outside);
    }
    let folded = if s.stacks.is_empty() {
        flame::folded(report, s)
    } else {
        flame::folded_stacks(report, s)
    };
    // The executable's module in this source (the name it was counted under), else its file name.
    let main = report.run.executable.as_deref().map(|exe| {
        report
            .sources
            .iter()
            .flat_map(|s| &s.modules)
            .find(|m| m.path == exe)
            .map_or_else(|| file_name(exe).to_string(), |m| m.name.clone())
    });
    Ok(Side {
        source: s.name.clone(),
        total: s.stats.counted + s.stats.outside,
        ns_per_sample: (s.sample_unit == "nanoseconds").then_some(s.sample_value as f64),
        functions,
        folded,
        main,
    })
}

/// The side of a sample type of a pprof profile (`profile.proto`, not gzipped).
pub fn pprof_side(raw: &[u8], name: &str, source: Option<&str>) -> Result<Side, String> {
    let p =
        pprof::Profile::decode(raw).map_err(|e| format!("{name} is not a pprof profile: {e}"))?;
    let text = |i: i64| p.string_table.get(i as usize).map_or("", String::as_str);
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (text(t.r#type), text(t.unit)))
        .collect();
    let index = match source {
        Some(want) => types.iter().position(|t| t.0.eq_ignore_ascii_case(want)),
        None => types
            .iter()
            .position(|t| t.1 == "count")
            .or((!types.is_empty()).then_some(0)),
    }
    .ok_or_else(|| {
        let list: Vec<String> = types.iter().map(|t| format!("{}/{}", t.0, t.1)).collect();
        format!(
            "{name} has no sample type {:?}; its sample types: {}",
            source.unwrap_or(""),
            list.join(", ")
        )
    })?;
    // The time column of a count column (ntprof writes `samples/count` then `cpu/nanoseconds`).
    let time = (types[index].1 == "count"
        && types.get(index + 1).is_some_and(|t| t.1 == "nanoseconds"))
    .then_some(index + 1);
    let location: HashMap<u64, &pprof::Location> = p.location.iter().map(|l| (l.id, l)).collect();
    let function: HashMap<u64, &str> = p.function.iter().map(|f| (f.id, text(f.name))).collect();
    let module: HashMap<u64, &str> = p
        .mapping
        .iter()
        .map(|m| (m.id, file_name(text(m.filename))))
        .collect();
    let frame_names = |id: &u64| -> Vec<String> {
        let Some(l) = location.get(id) else {
            return vec![format!("{id:#x}")];
        };
        if l.line.is_empty() {
            return vec![format!(
                "{}+{:#x}",
                module.get(&l.mapping_id).unwrap_or(&""),
                l.address
            )];
        }
        // Innermost (inlined) first, the function last: outermost first for the folded line.
        l.line
            .iter()
            .rev()
            .map(|ln| function.get(&ln.function_id).unwrap_or(&"?").to_string())
            .collect()
    };
    let mut side = Side {
        source: types[index].0.to_string(),
        main: p
            .mapping
            .first()
            .map(|m| file_name(text(m.filename)).to_string())
            .filter(|m| !m.is_empty()),
        ..Side::default()
    };
    let (mut counts, mut nanos) = (0u64, 0f64);
    let mut folded: HashMap<String, u64> = HashMap::new();
    for s in &p.sample {
        let v = s.value.get(index).copied().unwrap_or(0).max(0) as u64;
        if v == 0 {
            continue;
        }
        side.total += v;
        counts += v;
        nanos += time
            .and_then(|t| s.value.get(t))
            .copied()
            .unwrap_or(0)
            .max(0) as f64;
        let Some(leaf) = s.location_id.first() else {
            continue;
        };
        let leaf_module = location
            .get(leaf)
            .map_or("", |l| module.get(&l.mapping_id).copied().unwrap_or(""));
        let leaf_function = frame_names(leaf).first().cloned().unwrap_or_default();
        *side
            .functions
            .entry((leaf_module.to_string(), leaf_function))
            .or_insert(0) += v;
        let mut frames: Vec<String> = s
            .label
            .iter()
            .filter(|l| text(l.key) == "command" && l.str != 0)
            .map(|l| text(l.str).to_string())
            .collect();
        frames.extend(s.location_id.iter().rev().flat_map(frame_names));
        *folded.entry(frames.join(";")).or_insert(0) += v;
    }
    side.ns_per_sample = (time.is_some() && counts > 0).then(|| nanos / counts as f64);
    let mut lines: Vec<(String, u64)> = folded.into_iter().collect();
    lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    side.folded = lines.into_iter().map(|(s, n)| format!("{s} {n}")).collect();
    Ok(side)
}

/// The last part of a path: a module's name as both formats key it.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

/// Every function of either side, the largest change of share first (then the larger new share, then name).
/// The old side's renamed modules ([`module_matches`]) take their new names first: a row is a function of both.
pub fn compare(old: &Side, new: &Side) -> Vec<Row> {
    let old = &rename::renamed(old, &module_matches(old, new));
    let share = |n: u64, total: u64| {
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    };
    let mut keys: Vec<&(String, String)> =
        old.functions.keys().chain(new.functions.keys()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut rows: Vec<Row> = keys
        .into_iter()
        .map(|k| {
            let o = old.functions.get(k).copied().unwrap_or(0);
            let n = new.functions.get(k).copied().unwrap_or(0);
            Row {
                module: k.0.clone(),
                function: k.1.clone(),
                old: o,
                new: n,
                old_share: share(o, old.total),
                new_share: share(n, new.total),
                old_ns: old.ns_per_sample.map(|ns| o as f64 * ns),
                new_ns: new.ns_per_sample.map(|ns| n as f64 * ns),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.change_points()
            .abs()
            .total_cmp(&a.change_points().abs())
            .then_with(|| b.new_share.total_cmp(&a.new_share))
            .then_with(|| (&a.module, &a.function).cmp(&(&b.module, &b.function)))
    });
    rows
}

/// The differential flame graph (SVG) of the new profile against the old: the frames of the new profile's
/// stacks, red where a stack's share grew, blue where it shrank (the old counts are scaled to the new total, so
/// the colours show shares, as the table does).
pub fn flame_graph(old: &Side, new: &Side, title: &str) -> Result<Vec<u8>, String> {
    if new.folded.is_empty() && old.folded.is_empty() {
        return Err("neither profile has samples to draw".into());
    }
    let old = &rename::renamed(old, &module_matches(old, new));
    let join = |s: &Side| {
        s.folded
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let (before, after) = (join(old), join(new));
    let mut merged = Vec::new();
    let options = inferno::differential::Options {
        normalize: true,
        ..Default::default()
    };
    inferno::differential::from_readers(options, before.as_bytes(), after.as_bytes(), &mut merged)
        .map_err(|e| format!("cannot merge the stacks: {e}"))?;
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "samples".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_reader(&mut opts, merged.as_slice(), &mut svg)
        .map_err(|e| format!("cannot draw the flame graph: {e}"))?;
    Ok(svg)
}

#[cfg(test)]
mod tests;
