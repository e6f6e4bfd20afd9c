//! The report model: everything one `ntprof` run measured, resolved to modules, functions and lines.
//!
//! Every output format is rendered from a [`Report`] alone (text, JSON, CSV, pprof, flame graph), so that
//! `ntprof report FILE.json` can render a saved run again in any format without re-running it. Its JSON form *is*
//! the documented, versioned schema (a field removed or renamed increments [`SCHEMA_VERSION`]).
//!
//! Addresses are runtime virtual addresses of the profiled process (or the kernel); `offset` fields are relative
//! to the module's file (its ELF virtual address space, as `addr2line -e FILE` and pprof's `file_offset` take).
#![allow(dead_code)] // The contract between the recorder and the renderers; fields are read as they land.

use serde::{Deserialize, Serialize};

mod chain;
mod offcpu;
mod read;
pub use chain::{FP_ENDED_FRAME, TRUNCATED_FRAME, is_stack_origin};
pub use offcpu::{OffCpuKind, OffCpuProcess, OffCpuReport, OffCpuThread};
pub use read::from_json;

/// The version of the JSON schema written by this build.
pub const SCHEMA_VERSION: u32 = 2;

/// One run of `ntprof record`, `ntprof attach` or `ntprof record --kernel`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// `ntprof <version>`.
    pub tool: String,
    /// What was profiled and how.
    pub run: RunInfo,
    /// Every process the run profiled (the command and, unless `--no-inherit`, every process it started), in
    /// the order they appeared.
    #[serde(default)]
    pub processes: Vec<ProcessReport>,
    /// One entry per profile source of the run, in command-line order; each is reported on its own. With
    /// `--off-cpu`, two more come last: `off_cpu` (voluntary waits) and `preempted` (involuntary switches),
    /// whose `samples` are nanoseconds off CPU ([`SourceReport::is_off_cpu`]).
    pub sources: Vec<SourceReport>,
    /// The off-CPU time of the run (`--off-cpu`): totals per process, thread and wait kind, and how it was
    /// recorded; absent without `--off-cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<OffCpuReport>,
}

/// One process of the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessReport {
    /// Its number in this report (`process` in the per-source tables): pids can be reused during a run.
    pub id: u32,
    /// Its pid.
    pub pid: u32,
    /// Its pid inside its own pid namespace (a container's), when that differs from `pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
    /// Its parent's pid (0 when unknown).
    pub ppid: u32,
    /// The `id` of its parent when the parent was profiled too.
    pub parent: Option<u32>,
    /// Its command (the kernel's name of the program it ran last).
    pub command: String,
    /// Every command it ran, in order (`sh`, `gzip` for a shell that exec'd gzip).
    pub commands: Vec<String>,
    /// Its command line, when it could be read; empty otherwise.
    pub command_line: Vec<String>,
    /// Milliseconds after the run's start at which it appeared (0 for the processes present at the start).
    pub started_ms: f64,
    /// Milliseconds after the run's start at which it exited, `None` when it did not during the run.
    pub ended_ms: Option<f64>,
    /// How it ended: `exit status N` or `killed by signal N` (the profiled command), `exited`, or `running`
    /// (still running when the run ended).
    pub ended: String,
    /// Its cgroup v2 path (`/proc/PID/cgroup`'s `0::` line, `/` the root), read while it ran (a process whose
    /// exit came first has its parent's, which it was created in); absent when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The 64-hex id of the container its cgroup path names (Docker, containerd, CRI-O, Podman); absent when
    /// the path holds none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

/// The cgroup a `--cgroup` run profiled (`run.cgroup`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CgroupInfo {
    /// Its path in the cgroup v2 hierarchy, as `/proc/PID/cgroup` shows it (`/` the root).
    pub path: String,
    /// Its directory in the cgroup v2 file system.
    pub dir: String,
    /// How its processes were found: `kernel-filter` (processor-wide events the kernel filters by cgroup, with
    /// the privilege) or `following` (its processes, read from `cgroup.procs`, sampled with their trees).
    pub mechanism: String,
    /// `following`: how often `cgroup.procs` was read again for processes that joined or left, in
    /// milliseconds; 0 for `kernel-filter`.
    pub rescan_ms: u64,
    /// Processes found in the cgroup (and the cgroups below it) at the start.
    pub at_start: u64,
    /// Processes that joined it during the run and were profiled from then on (`following`: found on two
    /// reads of `cgroup.procs` in a row; `kernel-filter`: first seen in a record).
    pub joined: u64,
    /// `following`: processes that left it during the run, whose samples from the read that saw them gone on
    /// were not counted; 0 for `kernel-filter` (a task that leaves is no longer sampled, and not counted).
    pub left: u64,
}

/// The perf events behind a recording.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EventsInfo {
    /// `thread-cpu` (one event per thread and processor, one ring per processor), `cpu-filtered` (one event per
    /// processor for every task, the recorded processes' records kept), `per-thread` (one event per thread with a
    /// ring of its own, tasks created later opened as their fork records are read) or `cpu` (one event per
    /// processor for every task: `kernel`).
    pub mode: String,
    /// Event descriptors held.
    pub descriptors: u64,
    /// Rings mapped.
    pub rings: u64,
    /// Bytes of the rings' mappings (locked memory).
    pub ring_bytes: u64,
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
    /// Why the run ended: `exited`, `duration`, `interrupted` (Ctrl-C, SIGTERM), `process-exited`, `hangup`
    /// (ntprof's terminal hung up: SIGHUP, passed on to a recorded command whose exit then ended the run; an
    /// attach ends there), `stopped` (the taker of a run cut into windows ended it, as `ntprof top` does when
    /// told to quit).
    pub ended_by: String,
    /// The processors profiled (`--cpus`), `None` for all.
    pub cpus: Option<Vec<usize>>,
    /// log2 of the address granularity in bytes (`--bucket`): 0 when every address is its own bucket.
    pub bucket_log2: u32,
    /// How long after a module was mapped its samples could be counted in it, at most, in milliseconds: 0 (the
    /// kernel reports every mapping as it is made).
    pub module_poll_ms: f64,
    /// The profiled executable (the command's, as it was exec'd), when known.
    #[serde(default)]
    pub executable: Option<String>,
    /// Whether the processes the targets started were profiled too (false with `--no-inherit`). A version 1
    /// document has no such field: its runs followed no child, so it reads as false.
    #[serde(default)]
    pub follow_children: bool,
    /// Milliseconds spent symbolizing the report (symbol tables, DWARF, source lines).
    #[serde(default)]
    pub symbolize_ms: f64,
    /// How call stacks were recorded: `fp` (frame pointers), `dwarf,SIZE` (user stack copies of SIZE bytes,
    /// unwound with the modules' CFI); `None` without call stacks.
    #[serde(default)]
    pub call_graph: Option<String>,
    /// CPU time ntprof itself used to record (start, sampling, reading, following the tree), before the report
    /// was built, in milliseconds; 0 when absent.
    #[serde(default)]
    pub recorder_cpu_ms: f64,
    /// How many times the recorder read the rings (each read round costs it CPU time whether or not there was
    /// data); 0 when absent.
    #[serde(default)]
    pub recorder_rounds: u64,
    /// The perf events the recording held (every source's together): their layout and cost; absent in
    /// documents written before it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<EventsInfo>,
    /// Remarks the reader needs to read the numbers right (what the profiles cannot see, how modules loaded at
    /// startup were caught), one sentence each.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The designed shares given with `--expect FUNCTION=PERCENT`, compared with the measured ones in the
    /// report; empty when none was given.
    #[serde(default)]
    pub expected: Vec<Expectation>,
    /// Why the run has no or few samples (the command slept, ran less than one interval, ran in the kernel,
    /// its children were left out), one sentence each; empty when the samples are as many as expected.
    #[serde(default)]
    pub explanations: Vec<String>,
    /// How the JIT code of each process with some was named: from the runtime's jitdump file, by time, or from
    /// its perf map file, by address alone; empty when no process had named JIT code.
    #[serde(default)]
    pub jit: Vec<JitReport>,
    /// The window this report covers, when the run was cut into windows (`--every SECONDS`); `None` for a
    /// report of a whole run. `duration_s` is then the window's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowInfo>,
    /// The cgroup the run profiled (`--cgroup`), `None` for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupInfo>,
}

/// One window of a run cut into windows (`run.window`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WindowInfo {
    /// Its number in the run, from 0.
    pub index: u64,
    /// When it began, nanoseconds since the Unix epoch (the system clock).
    pub start_unix_ns: u64,
    /// When it ended, the same way.
    pub end_unix_ns: u64,
    /// `start_unix_ns` as RFC 3339 in UTC, with nanoseconds.
    pub start: String,
    /// `end_unix_ns` the same way.
    pub end: String,
    /// True for the run's last window, which ended with the run (it may be shorter than the others).
    pub last: bool,
}

/// How the JIT code of one process was named (`run.jit[]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JitReport {
    /// The process's pid.
    pub pid: u32,
    /// `jitdump` (the runtime's dump file: code loads and moves with their times) or `perf map`
    /// (`/tmp/perf-PID.map`: addresses and names, no times).
    pub kind: String,
    /// The file's path.
    pub path: String,
    /// Code loads (jitdump) or lines (perf map) read from it.
    pub records: u64,
    /// Loads or lines whose code covered code loaded before it (the JIT reused the memory).
    pub reused: u64,
    /// Samples (of every source) in the process's JIT code that the file was asked to name.
    pub samples: u64,
    /// Of those, the samples named by the code that was at their address at their time (jitdump).
    pub named_by_time: u64,
    /// Of those, the samples in ranges that several perf map lines cover (perf map): each is named by the
    /// latest line whatever its time, so names there may be mixed.
    pub mixed: u64,
    /// What went wrong with the file (unreadable, not a jitdump, cut short), if anything.
    pub problem: Option<String>,
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
    /// Samples by command (all the processes that ran it), hottest first.
    #[serde(default)]
    pub commands: Vec<CommandReport>,
    /// Samples by process, in the order of [`Report::processes`]; processes without samples too.
    #[serde(default)]
    pub processes: Vec<ProcessSamples>,
    /// Every profiled module with at least one sample, hottest first.
    pub modules: Vec<ModuleReport>,
    /// Functions across modules, hottest first.
    pub functions: Vec<FunctionReport>,
    /// Source lines across modules, hottest first.
    pub lines: Vec<LineReport>,
    /// Every non-zero bucket, by address.
    pub buckets: Vec<BucketReport>,
    /// Call stacks (runs with `-g` or `--call-graph`): every distinct stack with its samples, hottest first;
    /// empty without call stacks.
    #[serde(default)]
    pub stacks: Vec<StackReport>,
    /// The locations the stacks' frames refer to, by index.
    #[serde(default)]
    pub locations: Vec<LocationReport>,
}

impl SourceReport {
    /// An off-CPU source (`off_cpu`, `preempted`): its `samples` are nanoseconds off CPU.
    pub fn is_off_cpu(&self) -> bool {
        self.interval_unit == OFF_CPU_UNIT
    }
}

/// The `interval_unit` of the off-CPU sources: each context switch is measured.
pub const OFF_CPU_UNIT: &str = "switch";

/// One distinct call stack of one command and its samples.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StackReport {
    /// The `id` of the process (in [`Report::processes`]) whose samples these are.
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// The command it ran.
    pub command: String,
    /// Samples with exactly this stack.
    pub samples: u64,
    /// The walk ended before the process's first frame (the stack copy ran out, a return address was in no
    /// executable mapping, or the frame limit was reached): the outermost callers are unknown.
    pub truncated: bool,
    /// A frame-pointer walk that ended at a function that is no thread's or program's entry (code built without
    /// frame pointers cut the chain): the callers above it are unknown; every format marks it `[fp chain ended]`.
    #[serde(default)]
    pub fp_chain_ended: bool,
    /// Indexes into [`SourceReport::locations`]: the sampled location first, then its callers, outward.
    pub frames: Vec<u32>,
}

/// One location of the call stacks: an address and what it symbolizes to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LocationReport {
    /// The module's name.
    pub module: String,
    /// Runtime address (in the module's first mapping); for a caller, its return address − 1 (inside the call
    /// instruction).
    pub address: u64,
    /// The address in the object's own address space.
    pub offset: u64,
    /// The function holding it (the machine-code function: the outermost of `frames`).
    pub function: String,
    /// Inlined frames innermost first, the function last; empty when nothing is known of the address.
    pub frames: Vec<Frame>,
}

/// The samples of one command.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CommandReport {
    /// The command.
    pub command: String,
    /// How many processes ran it.
    pub processes: u32,
    /// Samples (counted and outside) while it ran.
    pub samples: u64,
    /// `samples / (counted + outside)`, 0..=1.
    pub share: f64,
}

/// The samples of one process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessSamples {
    /// [`ProcessReport::id`].
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// Samples counted in a module.
    pub counted: u64,
    /// Samples outside every profiled module.
    pub outside: u64,
    /// `(counted + outside) / (counted + outside of the source)`, 0..=1.
    pub share: f64,
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
    /// Milliseconds after the run's start at which it was first mapped, from which its samples count (0 at start).
    pub profiled_from_ms: f64,
    /// Where its names came from (`symtab`, `debuginfod`, …: `NameSource`); empty when nothing names it.
    #[serde(default)] // Profiles written before it.
    pub names: Vec<String>,
    /// Why nothing names it (its code shows as `module+0x…`); `None` when something does.
    pub unnamed: Option<String>,
}

/// A function with its samples, aggregated over its buckets.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionReport {
    /// The command it ran in (functions are reported by command, module and name, as `perf report --sort
    /// comm,dso,sym`).
    #[serde(default)]
    pub command: String,
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
    /// The command it ran in.
    #[serde(default)]
    pub command: String,
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
    /// The process ([`ProcessReport::id`]).
    #[serde(default)]
    pub process: u32,
    /// Its pid.
    #[serde(default)]
    pub pid: u32,
    /// The command it ran then.
    #[serde(default)]
    pub command: String,
    /// Module name.
    pub module: String,
    /// Runtime start address of the bucket (in the module's first mapping, [`ModuleReport::start`]).
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
