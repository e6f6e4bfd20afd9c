//! Command-line parsing for `ntprof` (clap): subcommands and options in the conventions of `perf` and kernrate.
//!
//! Usage errors (unknown options, bad values, bad ranges) exit with code 2, as clap does.

use clap::{Args, Parser, Subcommand};
pub use ntprof_engine::options::{
    AddrRange, CallGraph, CpuList, DWARF_STACK_DEFAULT, DWARF_STACK_MAX,
    SourceInterval as IntervalArg,
};
use ntprof_engine::options::{AttachOptions, Debuginfod, ProfileOptions, RecordOptions};
use ntprofile::ProfileSource;

mod parse;
pub use parse::{parse_cpu_list, parse_range, seconds};
use parse::{parse_duration, parse_expect_arg, parse_interval_arg};

use crate::output::OutputArgs;
use crate::report::Expectation;

/// ntprof - a kernrate-like profiler built on ntprofile (the Windows NT profile API on Linux perf_event).
///
/// `ntprof record -- CMD` profiles a command and every process it starts from their first instruction to the
/// command's exit, module by module (executables, shared libraries, those loaded later with dlopen, JIT code
/// named by perf map files), and prints where the time went: processes, commands, modules, functions, lines.
#[derive(Debug, Parser)]
#[command(name = "ntprof", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command and profile it, with every process it starts, from its first instruction to its exit (or,
    /// with --kernel, profile the kernel).
    #[command(after_help = RECORD_AFTER_HELP)]
    Record(RecordArgs),
    /// Profile running processes (and those they start) until --duration ends, Ctrl-C, or they exit.
    Attach(AttachArgs),
    /// List every profile source, whether it can be sampled here (and why not), its intervals and perf event.
    Sources,
    /// Profile a bundled workload inside ntprof itself (the in-process use of the API).
    Demo(DemoOptions),
    /// Render a saved JSON profile again (ntprof report FILE.json), in any format, without re-running.
    #[command(after_help = REPORT_AFTER_HELP)]
    Report(crate::report_cmd::ReportArgs),
    /// Compare two profiles (JSON or pprof: two runs, or a run before and after a change): per function the
    /// change of share and of time, the largest first, and a differential flame graph.
    #[command(after_help = DIFF_AFTER_HELP)]
    Diff(crate::diff_cmd::DiffArgs),
    /// A live view: the hottest functions of a command (-- CMD), running processes (-p PID) or the kernel
    /// (--kernel) over a sliding window, refreshed in place; one plain table per refresh without a terminal.
    #[command(after_help = crate::top::TOP_AFTER_HELP)]
    Top(crate::top::TopArgs),
}

const DIFF_AFTER_HELP: &str = "\
Examples:
  ntprof record --json old.json -- ./prog      a run before the change
  ntprof record --json new.json -- ./prog      and after it
  ntprof diff old.json new.json                the functions whose share changed most, first
  ntprof diff --flamegraph diff.svg old.pb.gz new.pb.gz   pprof profiles, and the differential flame graph
  ntprof diff -s page-faults -n 0 old.json new.json       another source, every function

The change is in percentage points of each profile's samples (counted and outside, as in the text report), so
two runs of different lengths compare; the times are the samples times the interval.";

const RECORD_AFTER_HELP: &str = "\
Examples:
  ntprof record -- ./prog arg1 arg2          profile ./prog, report modules, functions, lines
  ntprof record -- make -j2                  make and every process it starts (sh, cc1, as, ld, ...)
  ntprof record --no-inherit -- sh -c CMD    the shell alone, not its children
  ntprof record -- node --perf-basic-prof app.js   JIT code named from /tmp/perf-PID.map
  ntprof record --source Timer,page-faults -- ./prog
  ntprof record --module prog --module libfoo.so -- ./prog
  ntprof record --kernel -- ./prog           the command's user and kernel time in one profile (root)
  ntprof record --kernel --duration 5        the kernel and its modules, system-wide (needs CAP_PERFMON)
  ntprof record --cgroup system.slice/docker-ID.scope -- sleep 10   a container's processes for 10 s
  ntprof record -g -- ./prog                 with call stacks (frame pointers): callers, call tree, flame graph
  ntprof record --call-graph dwarf -- ./prog call stacks of code built without frame pointers (libc too)
  ntprof record -g --format folded -o prog.folded -- ./prog   folded stacks for flamegraph.pl, speedscope
  ntprof record --every 10 --keep 360 --output prof/ -- ./server   a profile per 10 s window, the last hour kept

The profile never mixes with the command's output (they share standard output): JSON, CSV, pprof, folded
stacks and flame graphs go to the file -o FILE names (refused before the command starts without one); the text
report goes to standard output on a terminal, otherwise to standard error (as perf stat and time report it),
or to -o FILE.

The exit status is the command's (128 + N when a signal N killed it); 127 when it cannot be run.";

const REPORT_AFTER_HELP: &str = "\
Examples:
  ntprof record --json prof.json -- ./prog   record once, keeping the JSON profile
  ntprof report prof.json                    the text report again
  ntprof report --call-tree prof.json        with the call tree
  ntprof report prof.json --format pprof -o prof.pb.gz   any other format
  ntprof report - < prof.json                from standard input";

/// The profiling options shared by `record` and `attach`.
#[derive(Debug, Clone, Args)]
pub struct ProfileArgs {
    /// Profile sources, by name or value, or by perf's event name (-e cpu-clock, -e page-faults, -e cycles;
    /// see 'ntprof sources'); repeat it or give a comma list: each source is reported on its own.
    #[arg(short = 's', long = "source", value_name = "SOURCE", value_delimiter = ',',
          short_alias = 'e', alias = "event", value_parser = parse_source_arg, default_value = "Timer")]
    pub sources: Vec<ProfileSource>,
    /// The interval (NtSetIntervalProfile): 100 ns units for time sources (10000 = 1 ms), events between
    /// samples otherwise; clamped into each source's limits. N applies to every source; SOURCE=N to one
    /// (repeatable: --interval 1000 --interval page-faults=16). Default: the source's default.
    #[arg(short = 'i', long = "interval", value_name = "[SOURCE=]N", value_parser = parse_interval_arg)]
    pub intervals: Vec<IntervalArg>,
    /// Address granularity: log2 of the bucket size in bytes (0 ..= 31) at which sampled addresses are
    /// aggregated into the report's buckets and lines. Default: exact (every address on its own, as the kernel
    /// reports it).
    #[arg(short = 'b', long, value_name = "LOG2",
          value_parser = clap::value_parser!(u32).range(0..=31))]
    pub bucket: Option<u32>,
    /// Profile CMD (or the attached processes) alone, not the processes they start (perf's option name). By
    /// default every process started, transitively (fork, vfork, clone, posix_spawn, exec), is profiled from
    /// its first instruction (and an attach follows the descendants running at the attach too).
    #[arg(long)]
    pub no_inherit: bool,
    /// Not available here (0 only), so left out of the help: 'record' and 'attach' sample with a fixed period;
    /// the period jitter is the library's, for NT profiles (NtSetJitter / ntprofile::set_jitter). A value above
    /// 0 is refused before anything runs, with that reason.
    #[arg(long, value_name = "PERCENT", default_value_t = 0, hide = true,
          value_parser = clap::value_parser!(u32).range(0..=90))]
    pub jitter: u32,
    /// Sample time sources HZ times a second (perf's and samply's spelling): the interval 1/HZ s, i.e.
    /// 10000000/HZ in 100 ns units. Sources that count events keep their --interval (or default).
    #[arg(short = 'F', long = "freq", value_name = "HZ",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub freq: Option<u32>,
    /// Only these processors, e.g. 0-3,6 (default: all).
    #[arg(long, value_name = "LIST", value_parser = parse_cpu_list)]
    pub cpus: Option<CpuList>,
    /// A designed share to check: FUNCTION=PERCENT (repeatable). The report then compares it with the measured
    /// share, in percentage points and in standard deviations of a share with that many samples.
    #[arg(long = "expect", value_name = "FUNCTION=PERCENT", value_parser = parse_expect_arg)]
    pub expect: Vec<Expectation>,
    /// Profile only the modules with this name (file name, e.g. libc.so.6, or full path); repeatable.
    #[arg(short = 'm', long = "module", value_name = "NAME")]
    pub modules: Vec<String>,
    /// Also profile a raw address range START-END (hexadecimal, end exclusive); repeatable.
    #[arg(long = "range", value_name = "START-END", value_parser = parse_range)]
    pub ranges: Vec<AddrRange>,
    /// No longer needed, so left out of the help and accepted for old scripts with a note that it does nothing:
    /// the kernel reports every mapping (libraries, dlopen, JIT code) as it is made, so nothing is polled.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=1000), hide = true)]
    pub poll_ms: Option<u64>,
    /// Record call stacks from frame pointers (the kernel walks them at each sample): the same as
    /// --call-graph fp. With --kernel: kernel stacks.
    #[arg(short = 'g')]
    pub call_stacks: bool,
    /// Record call stacks: 'fp' (frame pointers, walked by the kernel) or 'dwarf' / 'dwarf,SIZE' (perf's
    /// spelling: copy SIZE bytes of the user stack at each sample, default 8192, at most 65528, and unwind them
    /// with the modules' .eh_frame/.debug_frame, so code built without frame pointers, libc included, is walked).
    #[arg(long = "call-graph", value_name = "fp|dwarf[,SIZE]", value_parser = parse_call_graph)]
    pub call_graph: Option<CallGraph>,
    /// Also record the time each thread spends off CPU (sleeping, blocked in I/O, on a lock, waiting for a
    /// child; preemptions apart), by the call stack it blocked at, in nanoseconds: the report's Off-CPU section,
    /// and the off_cpu and preempted sources of every format. Implies -g (frame pointers) for the CPU samples
    /// unless --call-graph is given: code built without frame pointers (libc, most distribution binaries) then
    /// ends their stacks early ('[fp chain ended]'), which --off-cpu --call-graph dwarf walks. Works unprivileged
    /// on your own processes.
    #[arg(long = "off-cpu")]
    pub off_cpu: bool,
    /// Fetch the debug files of objects that have none on disk (stripped libraries, distribution packages)
    /// from this debuginfod server, by build-id (repeatable, or space-separated URLs). Default: the servers of
    /// DEBUGINFOD_URLS when it is set, else none. Fetched files are checked to be of the object's build-id and
    /// cached where gdb and perf find them (DEBUGINFOD_CACHE_PATH, else ~/.cache/debuginfod_client);
    /// DEBUGINFOD_TIMEOUT (default 90 s) bounds a server that does not answer.
    #[arg(
        long = "debuginfod",
        value_name = "URL",
        conflicts_with = "no_debuginfod"
    )]
    pub debuginfod: Vec<String>,
    /// Fetch nothing from debuginfod servers, even with DEBUGINFOD_URLS set.
    #[arg(long = "no-debuginfod")]
    pub no_debuginfod: bool,
}

/// `ntprof record`.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// Profile kernel time too, named from /proc/kallsyms (the kernel and its loaded modules). With a command
    /// (--kernel -- CMD): the command's and its children's user and kernel time in one profile, nothing else
    /// (needs root, CAP_PERFMON or perf_event_paranoid <= 1). Without one: the whole system, every process and
    /// the idle processors ('swapper'), user space counted as outside, for --duration or until Ctrl-C (needs
    /// root, CAP_PERFMON or perf_event_paranoid <= 0).
    #[arg(short = 'k', long)]
    pub kernel: bool,
    /// With --kernel or --cgroup and no command: how long to profile, in seconds (default: until Ctrl-C).
    #[arg(short = 'd', long, value_name = "S", value_parser = parse_duration)]
    pub duration: Option<f64>,
    /// Profile every process of a cgroup v2 (a directory under the cgroup v2 mount, or a path relative to its
    /// root as /proc/PID/cgroup shows it, as perf's -G), those that join it later included, and nothing else;
    /// for --duration, until Ctrl-C, or while a command given after '--' runs (it bounds the run and is
    /// profiled only if it runs in the cgroup).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["kernel", "pid"])]
    pub cgroup: Option<String>,
    /// Profiling options.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Attach to running processes instead of running a command (perf's spelling of 'ntprof attach --pid').
    #[arg(short = 'p', long, value_name = "PID[,PID...]", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "kernel")]
    pub pid: Vec<u32>,
    /// Output options.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Windows (--every, --keep).
    #[command(flatten)]
    pub window: crate::windows::WindowArgs,
    /// No live progress on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Push options.
    #[command(flatten)]
    pub push: crate::push::PushArgs,
    /// The command to run and its arguments: after '--', or as the first word that is not an option (every
    /// word after it is the command's, as with perf).
    #[arg(value_name = "CMD", trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}

/// `ntprof attach`.
#[derive(Debug, Clone, Args)]
pub struct AttachArgs {
    /// The process to profile, or a comma list of them (--pid 12,34); unless --no-inherit, their descendants
    /// are profiled too: those running at the attach and those started while attached.
    #[arg(short = 'p', long, value_name = "PID[,PID...]", value_delimiter = ',',
          required_unless_present = "cgroup", value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Vec<u32>,
    /// Profile every process of a cgroup v2 instead (a directory under the cgroup v2 mount, or a path relative
    /// to its root as /proc/PID/cgroup shows it), those that join it later included, and nothing else.
    #[arg(long, value_name = "PATH", conflicts_with = "pid")]
    pub cgroup: Option<String>,
    /// How long to profile, in seconds (default: until Ctrl-C or the process exits).
    #[arg(short = 'd', long, value_name = "S", value_parser = parse_duration)]
    pub duration: Option<f64>,
    /// Profiling options.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Output options.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Windows (--every, --keep).
    #[command(flatten)]
    pub window: crate::windows::WindowArgs,
    /// No live progress on stderr.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Push options.
    #[command(flatten)]
    pub push: crate::push::PushArgs,
}

/// The options of `ntprof demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoOptions {
    /// How long the workload runs, in seconds.
    #[arg(short = 's', long, value_name = "S", default_value_t = 2.0, value_parser = parse_duration)]
    pub seconds: f64,
    /// The source's interval (100 ns units for time sources, events otherwise); clamped into its limits.
    #[arg(short = 'i', long, value_name = "I")]
    pub interval: Option<u32>,
    /// BucketSize: log2 of the bucket size in bytes, 2..=31.
    #[arg(short = 'b', long, value_name = "B", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(2..=31))]
    pub bucket: u32,
    /// How many functions to show.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 15)]
    pub top: usize,
    /// The profile source, by name or value.
    #[arg(long, value_name = "SRC", default_value = "Timer", value_parser = parse_source_arg)]
    pub source: ProfileSource,
}

/// A decimal or `0x` hexadecimal number.
pub fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse_call_graph(s: &str) -> Result<CallGraph, String> {
    let (mode, size) = match s.split_once(',') {
        Some((m, size)) => (m, Some(size)),
        None => (s, None),
    };
    match (mode, size) {
        ("fp", None) => Ok(CallGraph::Fp),
        ("fp", Some(_)) => Err("'fp' takes no size (the kernel walks the frame pointers)".into()),
        ("dwarf", None) => Ok(CallGraph::Dwarf(DWARF_STACK_DEFAULT)),
        ("dwarf", Some(size)) => {
            let n: u32 = size
                .trim()
                .parse()
                .map_err(|_| format!("'{size}' is not a size in bytes (e.g. dwarf,16384)"))?;
            if n == 0 || n > DWARF_STACK_MAX {
                return Err(format!(
                    "the stack copy must be 8 ..= {DWARF_STACK_MAX} bytes, not {n}"
                ));
            }
            Ok(CallGraph::Dwarf(n.next_multiple_of(8)))
        }
        (other, _) => Err(format!(
            "'{other}' is not a call-graph mode: use fp (frame pointers) or dwarf[,SIZE] (stack copies)"
        )),
    }
}

impl ProfileArgs {
    /// The engine's options for these arguments.
    pub fn options(&self) -> ProfileOptions {
        let mut o = ProfileOptions::default();
        o.sources = self.sources.clone();
        o.intervals = self.intervals.clone();
        o.bucket = self.bucket;
        o.no_inherit = self.no_inherit;
        o.jitter = self.jitter;
        o.freq = self.freq;
        o.cpus = self.cpus.clone();
        o.expect = self.expect.clone();
        o.modules = self.modules.clone();
        o.ranges = self.ranges.clone();
        o.call_stacks = self.call_stacks;
        o.call_graph = self.call_graph;
        o.off_cpu = self.off_cpu;
        o.debuginfod = self.debuginfod();
        o
    }

    /// The debuginfod settings: none with --no-debuginfod, the servers of --debuginfod, else
    /// DEBUGINFOD_URLS's.
    pub fn debuginfod(&self) -> Option<Debuginfod> {
        if self.no_debuginfod {
            return None;
        }
        let urls: Vec<String> = self
            .debuginfod
            .iter()
            .flat_map(|u| u.split_whitespace())
            .map(str::to_string)
            .collect();
        if urls.is_empty() {
            Debuginfod::from_env()
        } else {
            Some(Debuginfod::with_urls(urls))
        }
    }
}

impl ProfileArgs {
    /// Whether the run records call stacks (`-g`, `--call-graph`, or `--off-cpu`, which implies `-g`).
    pub fn has_stacks(&self) -> bool {
        self.call_stacks || self.call_graph.is_some() || self.off_cpu
    }

    /// The checks clap cannot make, before anything runs: `--call-tree` needs call stacks. Returns the notes
    /// to print on options that do nothing (`--poll-ms`).
    pub fn check(&self, output: &OutputArgs) -> Result<Vec<String>, String> {
        if output.call_tree && !self.has_stacks() {
            return Err(
                "--call-tree draws the call stacks, and this run records none: add -g (frame \
                        pointers) or --call-graph dwarf"
                    .into(),
            );
        }
        Ok(self
            .poll_ms
            .map(|ms| {
                format!(
                    "--poll-ms {ms} does nothing and can be dropped: the kernel reports every mapping as it is \
                     made, so nothing is polled"
                )
            })
            .into_iter()
            .collect())
    }
}

impl RecordArgs {
    /// The engine's options for these arguments.
    pub fn options(&self) -> RecordOptions {
        let mut o = RecordOptions::command(self.command.iter().cloned());
        o.kernel = self.kernel;
        o.duration = self.duration;
        o.profile = self.profile.options();
        o.pid = self.pid.clone();
        o.cgroup = self.cgroup.clone();
        quiet_fetches(&mut o.profile, self.quiet);
        o
    }
}

impl AttachArgs {
    /// The engine's options for these arguments.
    pub fn options(&self) -> AttachOptions {
        let mut o = AttachOptions::pids(self.pid.iter().copied());
        o.cgroup = self.cgroup.clone();
        o.duration = self.duration;
        o.profile = self.profile.options();
        quiet_fetches(&mut o.profile, self.quiet);
        o
    }
}

/// With -q, a long debuginfod fetch is not said either.
fn quiet_fetches(o: &mut ProfileOptions, quiet: bool) {
    if let Some(d) = o.debuginfod.as_mut() {
        d.progress = !quiet;
    }
}

mod source;
#[cfg(test)]
use source::parse_source;
use source::parse_source_arg;

#[cfg(test)]
mod tests;
