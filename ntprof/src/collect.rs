//! From the profiles of a run to a [`Report`](crate::report::Report): accounting, symbolization, aggregation by module, function and
//! source line.
//!
//! Every source has one coarse profile over the whole address space of interest (started first, stopped last)
//! and one profile per module. A sample counts in every started profile whose range holds it (one stream per
//! source and target), so every sample of a module is also a sample of the coarse profile, and
//! `outside = coarse (counted + outside) − Σ modules`: what fell in no module while the coarse profile ran.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ntprofile::{IntervalUnit, Profile, ProfileSource};

use crate::report::{
    BucketReport, Frame, FunctionReport, LineReport, ModuleReport, RunInfo, SourceReport, Stats,
};
use crate::symbols::{ElfSymbolizer, KERNEL_MODULE, Kallsyms, Mapping, Resolved};

/// What a module is, for symbolization.
#[derive(Clone, Debug)]
pub enum ModuleKind {
    /// An executable mapping of an ELF file.
    Elf(Mapping),
    /// The kernel image or a kernel module (symbols from kallsyms, under this module name).
    Kernel(String),
    /// A raw `--range`: nothing to symbolize it with.
    Raw,
}

/// A profiled module: a name, a runtime range, and how to symbolize it.
#[derive(Clone, Debug)]
pub struct ModuleSpec {
    /// Short name.
    pub name: String,
    /// Path (or `[kernel.kallsyms]`, `[range]`).
    pub path: String,
    /// Runtime start.
    pub start: u64,
    /// Runtime end (exclusive).
    pub end: u64,
    /// File offset of `start`.
    pub file_offset: u64,
    /// How to symbolize it.
    pub kind: ModuleKind,
}

/// One module's profile in one source.
pub struct ModuleProfile {
    /// The module.
    pub spec: Arc<ModuleSpec>,
    /// Its profile.
    pub profile: Profile,
    /// When its profile started.
    pub from: Instant,
}

/// Everything one source recorded.
pub struct SourceRun {
    /// The source.
    pub source: ProfileSource,
    /// Its effective interval.
    pub interval: u32,
    /// Its jitter, percent.
    pub jitter: u32,
    /// The profile over the whole address space of interest.
    pub coarse: Profile,
    /// The module profiles, in the order they started.
    pub modules: Vec<ModuleProfile>,
    /// When the profiled program started running (ntprof's `record` starts it stopped and profiles its first
    /// modules before resuming it): `profiled_from_ms` counts from here, 0 for profiles started before.
    pub run_start: Instant,
}

/// Symbolizers, opened once per file and shared across sources.
#[derive(Default)]
pub struct SymbolCache {
    elf: HashMap<PathBuf, Option<ElfSymbolizer>>,
    kallsyms: Option<Kallsyms>,
    sources: HashMap<String, Option<Vec<String>>>,
}

impl SymbolCache {
    /// A cache that symbolizes kernel modules with `kallsyms`.
    pub fn with_kallsyms(kallsyms: Kallsyms) -> SymbolCache {
        SymbolCache {
            kallsyms: Some(kallsyms),
            ..SymbolCache::default()
        }
    }

    /// Open the symbolizers of `paths`, one thread each (at most a few modules have samples).
    fn open_elf_all(&mut self, paths: &[&str]) {
        let opened: Vec<(PathBuf, Option<ElfSymbolizer>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = paths
                .iter()
                .map(|&p| {
                    scope.spawn(move || (PathBuf::from(p), ElfSymbolizer::open(Path::new(p)).ok()))
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        self.elf.extend(opened);
    }
}

/// The text of `line` (1-based) of `file`, trimmed at the end; `None` when the file is unreadable.
fn line_text(
    texts: &mut HashMap<String, Option<Vec<String>>>,
    file: &str,
    line: u32,
) -> Option<String> {
    let lines = texts
        .entry(file.to_string())
        .or_insert_with(|| {
            std::fs::read(file).ok().map(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .map(str::to_string)
                    .collect()
            })
        })
        .as_ref()?;
    let text = lines.get((line as usize).checked_sub(1)?)?;
    Some(text.trim_end().to_string())
}

/// `module+0xOFFSET`.
pub fn module_offset_name(module: &str, offset: u64) -> String {
    format!("{module}+{offset:#x}")
}

/// How a module's addresses are symbolized: the bias and the resolver of each bucket.
struct ModuleResolver<'a> {
    bias: u64,
    elf: Option<&'a ElfSymbolizer>,
    kernel: Option<(&'a Kallsyms, &'a str)>,
}

impl ModuleResolver<'_> {
    fn resolve(&self, addr: u64) -> Resolved {
        if let Some(elf) = self.elf {
            return elf.resolve(addr.wrapping_sub(self.bias));
        }
        if let Some((k, module)) = self.kernel {
            let symbol = k.lookup(module, addr).cloned();
            let frames = symbol
                .iter()
                .map(|s| Frame {
                    function: s.name.clone(),
                    file: None,
                    line: None,
                    inlined: false,
                })
                .collect();
            return Resolved { symbol, frames };
        }
        Resolved::default()
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Build the reports of every source, symbolizing as needed. Returns them with the time spent symbolizing.
pub fn build_sources(
    runs: &[SourceRun],
    duration_s: f64,
    cache: &mut SymbolCache,
) -> (Vec<SourceReport>, Duration) {
    let mut spent = Duration::ZERO;
    let reports = runs
        .iter()
        .map(|run| build_source(run, duration_s, cache, &mut spent))
        .collect();
    (reports, spent)
}

#[derive(Default)]
struct FnAcc {
    address: u64,
    size: u64,
    file: Option<String>,
    line: Option<u32>,
    samples: u64,
}

fn build_source(
    run: &SourceRun,
    duration_s: f64,
    cache: &mut SymbolCache,
    spent: &mut Duration,
) -> SourceReport {
    let coarse = run.coarse.stats();
    // Counts first (cheap), so that the time measured below is symbolization only.
    let counted_per_module: Vec<(usize, Vec<u32>)> = run
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| (i, m.profile.counts()))
        .collect();
    let counted: u64 = counted_per_module
        .iter()
        .flat_map(|(_, c)| c.iter())
        .map(|&c| u64::from(c))
        .sum();
    let all = coarse.counted + coarse.outside;
    let stats = Stats {
        counted,
        outside: all.saturating_sub(counted),
        lost: coarse.lost,
        throttled: coarse.throttled,
    };
    let total = stats.counted + stats.outside;

    let t0 = Instant::now();
    let mut modules: Vec<ModuleReport> = Vec::new();
    let mut buckets: Vec<BucketReport> = Vec::new();
    let mut functions: HashMap<(String, String), FnAcc> = HashMap::new();
    let mut lines: HashMap<(String, String, u32), (String, u64)> = HashMap::new();
    // Open the symbolizers of the modules that have samples (in parallel: loading DWARF, often compressed, is
    // most of the cost), then read them through shared borrows.
    let mut wanted: Vec<&str> = counted_per_module
        .iter()
        .map(|(i, counts)| (&run.modules[*i].spec, counts))
        .filter(|(spec, counts)| {
            matches!(spec.kind, ModuleKind::Elf(_)) && counts.iter().any(|&c| c > 0)
        })
        .map(|(spec, _)| spec.path.as_str())
        .filter(|p| !cache.elf.contains_key(Path::new(p)))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    cache.open_elf_all(&wanted);
    let SymbolCache {
        elf: elf_cache,
        kallsyms,
        sources: source_texts,
    } = cache;
    for (i, counts) in &counted_per_module {
        let m = &run.modules[*i];
        let spec = &m.spec;
        let samples: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let elf: Option<&ElfSymbolizer> = match &spec.kind {
            ModuleKind::Elf(_) => elf_cache
                .get(Path::new(&spec.path))
                .and_then(Option::as_ref),
            _ => None,
        };
        let bias = match &spec.kind {
            ModuleKind::Elf(mapping) => elf
                .and_then(|e| e.bias(mapping))
                .unwrap_or(mapping.start.wrapping_sub(mapping.offset)),
            ModuleKind::Kernel(name) if name == KERNEL_MODULE => 0,
            ModuleKind::Kernel(_) | ModuleKind::Raw => spec.start,
        };
        let build_id = elf.and_then(|e| e.build_id().map(str::to_string));
        if let Some(existing) = modules
            .iter_mut()
            .find(|r| r.name == spec.name && r.path == spec.path)
        {
            existing.samples += samples;
            existing.start = existing.start.min(spec.start);
            existing.end = existing.end.max(spec.end);
        } else {
            modules.push(ModuleReport {
                name: spec.name.clone(),
                path: spec.path.clone(),
                build_id,
                start: spec.start,
                end: spec.end,
                file_offset: spec.file_offset,
                bias,
                samples,
                share: 0.0,
                profiled_from_ms: m
                    .from
                    .saturating_duration_since(run.run_start)
                    .as_secs_f64()
                    * 1000.0,
            });
        }
        if samples == 0 {
            continue;
        }
        let resolver = ModuleResolver {
            bias,
            elf,
            kernel: match &spec.kind {
                ModuleKind::Kernel(name) => kallsyms.as_ref().map(|k| (k, name.as_str())),
                _ => None,
            },
        };
        let bucket_size = 1u64 << m.profile.layout().bucket_size;
        let mut pending_lines: Vec<(String, String, u32, u64)> = Vec::new();
        for (index, &count) in counts.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let (start, _end) = m.profile.bucket_range(index);
            let offset = start.wrapping_sub(bias);
            let r = resolver.resolve(start);
            let mut frames = r.frames.clone();
            if frames.is_empty() {
                if let Some(s) = &r.symbol {
                    frames.push(Frame {
                        function: s.name.clone(),
                        file: None,
                        line: None,
                        inlined: false,
                    });
                }
            }
            let samples = u64::from(count);
            let (fname, acc_init) = match (&r.symbol, frames.last()) {
                (Some(s), _) => {
                    let loc = resolver.elf.and_then(|e| e.location(s.address));
                    (
                        s.name.clone(),
                        FnAcc {
                            address: s.address.wrapping_add(bias_for_symbol(&spec.kind, bias)),
                            size: s.size,
                            file: loc.as_ref().map(|l| l.0.clone()),
                            line: loc.map(|l| l.1),
                            samples: 0,
                        },
                    )
                }
                (None, Some(f)) => (
                    f.function.clone(),
                    FnAcc {
                        address: start,
                        size: 0,
                        file: f.file.clone(),
                        line: f.line,
                        samples: 0,
                    },
                ),
                (None, None) => (
                    module_offset_name(&spec.name, offset),
                    FnAcc {
                        address: start,
                        ..FnAcc::default()
                    },
                ),
            };
            functions
                .entry((spec.name.clone(), fname))
                .or_insert(acc_init)
                .samples += samples;
            if let Some(inner) = frames.first() {
                if let (Some(file), Some(line)) = (&inner.file, inner.line) {
                    pending_lines.push((inner.function.clone(), file.clone(), line, samples));
                }
            }
            buckets.push(BucketReport {
                module: spec.name.clone(),
                address: start,
                offset,
                size: bucket_size.min(spec.end - start),
                samples,
                frames,
            });
        }
        for (function, file, line, samples) in pending_lines {
            lines
                .entry((spec.name.clone(), file, line))
                .or_insert((function, 0))
                .1 += samples;
        }
    }

    for m in &mut modules {
        m.share = share(m.samples, total);
    }
    modules.retain(|m| m.samples > 0);
    modules.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
    let mut functions: Vec<FunctionReport> = functions
        .into_iter()
        .map(|((module, name), a)| FunctionReport {
            module,
            name,
            address: a.address,
            size: a.size,
            file: a.file,
            line: a.line,
            samples: a.samples,
            share: share(a.samples, total),
        })
        .collect();
    functions.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then(a.module.cmp(&b.module))
            .then(a.name.cmp(&b.name))
    });
    let mut lines: Vec<LineReport> = lines
        .into_iter()
        .map(|((module, file, line), (function, samples))| LineReport {
            text: line_text(source_texts, &file, line),
            module,
            function,
            file,
            line,
            samples,
            share: share(samples, total),
        })
        .collect();
    lines.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then(a.file.cmp(&b.file))
            .then(a.line.cmp(&b.line))
    });
    buckets.sort_by_key(|b| b.address);
    *spent += t0.elapsed();

    let (interval_unit, sample_value, sample_unit) = match run.source.interval_unit() {
        IntervalUnit::Time100ns => ("100ns", u64::from(run.interval) * 100, "nanoseconds"),
        IntervalUnit::Events => ("events", u64::from(run.interval), "events"),
    };
    SourceReport {
        name: run.source.name().to_string(),
        value: run.source.to_raw(),
        interval: run.interval,
        interval_unit: interval_unit.to_string(),
        sample_value,
        sample_unit: sample_unit.to_string(),
        achieved_rate_hz: if duration_s > 0.0 {
            total as f64 / duration_s
        } else {
            0.0
        },
        jitter_percent: run.jitter,
        stats,
        modules,
        functions,
        lines,
        buckets,
    }
}

/// The bias that turns a symbol's address into a runtime address (kallsyms addresses are runtime already).
fn bias_for_symbol(kind: &ModuleKind, bias: u64) -> u64 {
    match kind {
        ModuleKind::Elf(_) => bias,
        ModuleKind::Kernel(_) | ModuleKind::Raw => 0,
    }
}

/// A RunInfo with the fields every mode fills the same way.
#[allow(clippy::too_many_arguments)]
pub fn run_info(
    mode: &str,
    command: Vec<String>,
    pid: Option<u32>,
    duration_s: f64,
    started_at: String,
    exit_status: Option<i32>,
    ended_by: &str,
    cpus: Option<Vec<usize>>,
    bucket_log2: u32,
    module_poll_ms: f64,
) -> RunInfo {
    RunInfo {
        mode: mode.to_string(),
        command,
        pid,
        duration_s,
        started_at,
        exit_status,
        ended_by: ended_by.to_string(),
        cpus,
        bucket_log2,
        module_poll_ms,
        symbolize_ms: 0.0,
        notes: Vec::new(),
        expected: Vec::new(),
    }
}

/// Now as RFC 3339 in UTC (`2026-01-31T12:34:56Z`), from the system clock.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm, written out).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_is_well_formed() {
        let s = now_rfc3339();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with('Z'), "{s}");
    }

    #[test]
    fn offsets_are_named() {
        assert_eq!(module_offset_name("prog", 0x1234), "prog+0x1234");
    }
}
