//! The report model: everything one `ntprof` run measured, resolved to modules, functions and lines.
//!
//! Every output format is rendered from a [`Report`] alone (text, JSON, CSV, pprof, flame graph), so that
//! `ntprof report FILE.json` can render a saved run again in any format without re-running it. The JSON form of
//! this model *is* the documented, versioned schema (`schema_version`); a change that removes or renames a field
//! increments [`SCHEMA_VERSION`].
//!
//! Addresses are runtime virtual addresses of the profiled process (or the kernel); `offset` fields are relative
//! to the module's file (the ELF virtual address space of the object, as `addr2line -e FILE` and pprof's mapping
//! `file_offset` arithmetic expect them).
#![allow(dead_code)] // The contract between the recorder and the renderers; fields are read as they land.

use serde::{Deserialize, Serialize};

/// The version of the JSON schema written by this build.
pub const SCHEMA_VERSION: u32 = 1;

/// One run of `ntprof record`, `ntprof attach` or `ntprof record --kernel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// `ntprof <version>`.
    pub tool: String,
    /// What was profiled and how.
    pub run: RunInfo,
    /// One entry per profile source of the run, in command-line order; each is reported on its own.
    pub sources: Vec<SourceReport>,
}

/// What was profiled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// `record`, `attach` or `kernel`.
    pub mode: String,
    /// The command line that was run (`record`), or the process's command line (`attach`); empty for the kernel.
    pub command: Vec<String>,
    /// The profiled process; `None` for a global (kernel) profile.
    pub pid: Option<u32>,
    /// Wall-clock time from the first profile's start to the last profile's stop, in seconds.
    pub duration_s: f64,
    /// When the run started, RFC 3339 in UTC.
    pub started_at: String,
    /// How the profiled command ended (`record`): its exit code, or 128 + the signal.
    pub exit_status: Option<i32>,
    /// Why the run ended: `exited`, `duration`, `interrupted` (Ctrl-C), `process-exited`.
    pub ended_by: String,
    /// The processors profiled (`--cpus`), `None` for all.
    pub cpus: Option<Vec<usize>>,
    /// log2 of the bucket size in bytes (`--bucket`).
    pub bucket_log2: u32,
    /// How long after a module was mapped its profile was started, at most (the poll period), in milliseconds.
    pub module_poll_ms: f64,
    /// Milliseconds spent symbolizing the report (symbol tables, DWARF, source lines).
    #[serde(default)]
    pub symbolize_ms: f64,
    /// Remarks the reader needs to read the numbers right (what the profiles cannot see, how modules loaded at
    /// startup were caught), one sentence each.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The designed shares given with `--expect FUNCTION=PERCENT`, compared with the measured ones in the
    /// report; empty when none was given.
    #[serde(default)]
    pub expected: Vec<Expectation>,
}

/// A designed share of the samples (`--expect FUNCTION=PERCENT`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Expectation {
    /// The function's name as the report shows it.
    pub function: String,
    /// Its designed share in percent of the samples (counted + outside).
    pub percent: f64,
}

/// The results of one profile source.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceReport {
    /// The source's name as `ntprof sources` prints it (`Timer`, `page-faults`, …).
    pub name: String,
    /// The KPROFILE_SOURCE value.
    pub value: u32,
    /// The effective interval (`NtQueryIntervalProfile`).
    pub interval: u32,
    /// The interval's unit: `100ns` for time sources, `events` otherwise.
    pub interval_unit: String,
    /// What one sample stands for, in the source's unit: nanoseconds for time sources (`interval * 100`), events
    /// otherwise (`interval`).
    pub sample_value: u64,
    /// `nanoseconds` or `events`: the unit of `sample_value`.
    pub sample_unit: String,
    /// Samples counted per second of run time, all modules and the outside together.
    pub achieved_rate_hz: f64,
    /// The jitter percentage (`--jitter`), 0 when off.
    pub jitter_percent: u32,
    /// The totals of this source.
    pub stats: Stats,
    /// Every profiled module with at least one sample, hottest first.
    pub modules: Vec<ModuleReport>,
    /// Functions across modules, hottest first.
    pub functions: Vec<FunctionReport>,
    /// Source lines across modules, hottest first.
    pub lines: Vec<LineReport>,
    /// Every non-zero bucket, by address.
    pub buckets: Vec<BucketReport>,
}

/// Counted + outside + lost accounts for every sample of the source.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    /// Samples counted into a module's buckets.
    pub counted: u64,
    /// Samples of the process (or system) whose address fell outside every profiled module.
    pub outside: u64,
    /// Samples the kernel dropped (ring full).
    pub lost: u64,
    /// Throttle events (the kernel lowered the rate).
    pub throttled: u64,
}

/// One profiled module (an executable, a shared library, the kernel or a kernel module).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModuleReport {
    /// Short name (`libc.so.6`, `[kernel]`, `ext4`).
    pub name: String,
    /// Path of the file (`/usr/lib/x86_64-linux-gnu/libc.so.6`), or `[kernel.kallsyms]`.
    pub path: String,
    /// The GNU build-id, hex, if the file has one.
    pub build_id: Option<String>,
    /// Runtime start of the profiled (executable) range.
    pub start: u64,
    /// Runtime end (exclusive).
    pub end: u64,
    /// File offset of `start` within `path` (pprof's `file_offset`).
    pub file_offset: u64,
    /// Runtime address minus this = address in the object's own (ELF virtual address) space.
    pub bias: u64,
    /// Samples counted in this module.
    pub samples: u64,
    /// `samples / (counted + outside)` of the source, 0..=1.
    pub share: f64,
    /// Milliseconds after the run's start at which this module's profile started (0 for modules present at the
    /// start; later for libraries loaded with `dlopen`).
    pub profiled_from_ms: f64,
}

/// A function with its samples, aggregated over its buckets.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionReport {
    /// Module name ([`ModuleReport::name`]).
    pub module: String,
    /// Demangled name, or `module+0xOFFSET` when no symbol covers the address.
    pub name: String,
    /// Runtime start address of the function (of the bucket, when there is no symbol).
    pub address: u64,
    /// The symbol's size in bytes, 0 when unknown.
    pub size: u64,
    /// Source file of the function's first line, if known.
    pub file: Option<String>,
    /// That line.
    pub line: Option<u32>,
    /// Samples.
    pub samples: u64,
    /// `samples / (counted + outside)`, 0..=1.
    pub share: f64,
}

/// A source line with its samples.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LineReport {
    /// Module name.
    pub module: String,
    /// The innermost function at that line (an inlined function where it was inlined).
    pub function: String,
    /// Source file path as recorded in the debug info.
    pub file: String,
    /// Line number.
    pub line: u32,
    /// Samples.
    pub samples: u64,
    /// `samples / (counted + outside)`, 0..=1.
    pub share: f64,
    /// The text of the line, when the file is readable.
    pub text: Option<String>,
}

/// One non-zero bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BucketReport {
    /// Module name.
    pub module: String,
    /// Runtime start address of the bucket.
    pub address: u64,
    /// Address in the object's own space (`address - bias`), what `addr2line -e FILE` takes.
    pub offset: u64,
    /// Bucket size in bytes.
    pub size: u64,
    /// Samples.
    pub samples: u64,
    /// The frames at the bucket's start address, innermost (inlined) first, outermost (the real function) last.
    /// Empty when nothing is known about the address.
    pub frames: Vec<Frame>,
}

/// One frame of a symbolized address.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Frame {
    /// Demangled function name, or `module+0xOFFSET`.
    pub function: String,
    /// Source file, if known.
    pub file: Option<String>,
    /// Line, if known.
    pub line: Option<u32>,
    /// True when this frame was inlined into the next one.
    pub inlined: bool,
}
