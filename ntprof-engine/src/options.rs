//! The options of a recording: what to sample, how, and which targets. Plain data with public fields; start
//! from [`Default`] (or [`RecordOptions::command`], [`AttachOptions::pids`]) and set what differs.
//!
//! The structs are `#[non_exhaustive]`: options added later do not break code that sets fields by name.
//!
//! ```
//! use ntprof_engine::options::{CallGraph, RecordOptions, SourceInterval};
//! use ntprofile::ProfileSource;
//!
//! let mut options = RecordOptions::command(["./prog", "input.txt"]);
//! options.profile.sources = vec![ProfileSource::Time, ProfileSource::PageFaults];
//! options.profile.freq = Some(4000); // time sources 4000 times a second
//! options.profile.intervals.push(SourceInterval { source: Some(ProfileSource::PageFaults), value: 16 });
//! options.profile.call_graph = Some(CallGraph::Dwarf(16 * 1024));
//! options.profile.off_cpu = true;
//! assert_eq!(options.profile.interval_for(ProfileSource::Time), Some(2500));
//! assert_eq!(options.profile.interval_for(ProfileSource::PageFaults), Some(16));
//! ```

use ntprofile::{IntervalUnit, ProfileSource};

use crate::report::Expectation;

mod debuginfod;
pub use debuginfod::{
    DEFAULT_MAX_SIZE, DEFAULT_TIMEOUT_S, Debuginfod, MAX_REDIRECTS, PROGRESS_BYTES,
};

/// How call stacks are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// Frame pointers: the kernel's callchains.
    Fp,
    /// A copy of this many bytes of the user stack (a multiple of 8, at most [`DWARF_STACK_MAX`]), unwound
    /// with DWARF CFI.
    Dwarf(u32),
}

/// The default size of the user stack copy of [`CallGraph::Dwarf`] (perf's).
pub const DWARF_STACK_DEFAULT: u32 = 8192;
/// The kernel's limit on one sample's user stack copy, rounded down to 8 bytes.
pub const DWARF_STACK_MAX: u32 = 65528;

/// A processor list (`0-3,6` is `CpuList(vec![0, 1, 2, 3, 6])`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// A raw address range to profile beside the modules, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRange {
    /// First address.
    pub start: u64,
    /// Exclusive end.
    pub end: u64,
}

/// An interval for every source, or for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceInterval {
    /// The source it is for; `None`: every source without an interval of its own.
    pub source: Option<ProfileSource>,
    /// The interval (100 ns units for time sources, events between samples otherwise).
    pub value: u32,
}

/// The sampling options shared by every kind of recording.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProfileOptions {
    /// The profile sources; each is reported on its own. Default: `[ProfileSource::Time]`.
    pub sources: Vec<ProfileSource>,
    /// Intervals: for one source, or for every source without its own. Default: each source's default.
    pub intervals: Vec<SourceInterval>,
    /// log2 of the bucket size in bytes (0 ..= 31) at which addresses are aggregated; `None`: exact.
    pub bucket: Option<u32>,
    /// Profile the targets alone, not the processes they start.
    pub no_inherit: bool,
    /// Must be 0: the recorder samples with a fixed period (a value above 0 is refused).
    pub jitter: u32,
    /// Sample time sources this many times a second (wins over a bare interval for them).
    pub freq: Option<u32>,
    /// Only these processors; `None`: all.
    pub cpus: Option<CpuList>,
    /// Designed shares the report compares with the measured ones.
    pub expect: Vec<Expectation>,
    /// Only the modules with these names (file name or full path); empty: all.
    pub modules: Vec<String>,
    /// Raw address ranges profiled beside the modules.
    pub ranges: Vec<AddrRange>,
    /// Accepted and ignored (mappings are reported by the kernel as they are made).
    pub poll_ms: Option<u64>,
    /// Record frame-pointer call stacks (the same as `call_graph: Some(CallGraph::Fp)`).
    pub call_stacks: bool,
    /// How call stacks are recorded; wins over `call_stacks`.
    pub call_graph: Option<CallGraph>,
    /// Also record the time each thread spends off CPU, by the call stack it blocked at (implies frame-pointer
    /// stacks unless `call_graph` is set).
    pub off_cpu: bool,
    /// Fetch the debug files of objects that have none on disk from these debuginfod servers, by build-id;
    /// `None` (the default): never ([`Debuginfod::from_env`] reads elfutils' `DEBUGINFOD_URLS`).
    pub debuginfod: Option<Debuginfod>,
}

impl Default for ProfileOptions {
    fn default() -> ProfileOptions {
        ProfileOptions {
            sources: vec![ProfileSource::Time],
            intervals: Vec::new(),
            bucket: None,
            no_inherit: false,
            jitter: 0,
            freq: None,
            cpus: None,
            expect: Vec::new(),
            modules: Vec::new(),
            ranges: Vec::new(),
            poll_ms: None,
            call_stacks: false,
            call_graph: None,
            off_cpu: false,
            debuginfod: None,
        }
    }
}

impl ProfileOptions {
    /// How call stacks are recorded, if at all (`call_graph` wins over `call_stacks` and `off_cpu`).
    pub fn call_graph(&self) -> Option<CallGraph> {
        self.call_graph
            .or((self.call_stacks || self.off_cpu).then_some(CallGraph::Fp))
    }

    /// The interval asked for `source`: its own, else (a time source) `freq`'s, else one for every source,
    /// else none (the source's default).
    pub fn interval_for(&self, source: ProfileSource) -> Option<u32> {
        let own = self
            .intervals
            .iter()
            .rev()
            .find(|i| i.source == Some(source));
        let all = self.intervals.iter().rev().find(|i| i.source.is_none());
        let freq = self
            .freq
            .filter(|_| source.interval_unit() == IntervalUnit::Time100ns)
            .map(interval_of_freq);
        own.map(|i| i.value).or(freq).or(all.map(|i| i.value))
    }

    /// An interval for a source that is not among `sources`, if any (a usage error).
    pub fn interval_for_unused_source(&self) -> Option<ProfileSource> {
        self.intervals
            .iter()
            .filter_map(|i| i.source)
            .find(|s| !self.sources.contains(s))
    }
}

/// The interval, in 100 ns units, of `hz` samples a second (rounded to the nearest unit).
pub fn interval_of_freq(hz: u32) -> u32 {
    ((10_000_000 + u64::from(hz) / 2) / u64::from(hz)) as u32
}

/// A recording of a command (and every process it starts), or of the kernel.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RecordOptions {
    /// Kernel samples too, named from kallsyms. With a command: the command's (and its children's) user and
    /// kernel time, nothing else (needs CAP_PERFMON or `perf_event_paranoid` <= 1). Without one: the kernel and
    /// its modules, system-wide (needs CAP_PERFMON or `perf_event_paranoid` <= 0).
    pub kernel: bool,
    /// With `kernel` and no command: how long to profile, in seconds (`None`: until SIGINT or SIGTERM).
    pub duration: Option<f64>,
    /// The sampling options.
    pub profile: ProfileOptions,
    /// Running processes to attach to instead of a command (the same as [`crate::record::attach`]).
    pub pid: Vec<u32>,
    /// `--cgroup PATH`: every process of this cgroup v2 (a directory of the cgroup file system, or a path
    /// relative to its root) instead of a command's tree; a command, if given, bounds the run (see
    /// [`crate::record::cgroup`]).
    pub cgroup: Option<String>,
    /// The command and its arguments.
    pub command: Vec<String>,
}

impl RecordOptions {
    /// A recording of `argv` with the default sampling options.
    pub fn command<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> RecordOptions {
        RecordOptions {
            command: argv.into_iter().map(Into::into).collect(),
            ..RecordOptions::default()
        }
    }
}

/// A recording of running processes (and, unless `profile.no_inherit`, their descendants).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AttachOptions {
    /// The processes.
    pub pid: Vec<u32>,
    /// How long to profile, in seconds (`None`: until SIGINT, SIGTERM or the processes exit).
    pub duration: Option<f64>,
    /// The sampling options.
    pub profile: ProfileOptions,
    /// `--cgroup PATH`: every process of this cgroup instead of `pid` (see [`crate::record::cgroup`]).
    pub cgroup: Option<String>,
}

impl AttachOptions {
    /// An attachment to `pids` with the default sampling options.
    pub fn pids(pids: impl IntoIterator<Item = u32>) -> AttachOptions {
        AttachOptions {
            pid: pids.into_iter().collect(),
            ..AttachOptions::default()
        }
    }
}
