//! The options of `ntprof top`: one target (a command, running processes or the kernel), the refresh and the
//! sliding window, how long to run, and the profiling options `record` and `attach` share.

use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory};
use ntprof_engine::options::RecordOptions;

use crate::args::{Cli, ProfileArgs};

/// The help after the options: keys, columns, examples.
pub const TOP_AFTER_HELP: &str = "\
Keys (on a terminal; the footer line lists them too):
  q, Ctrl-C   quit: ends the run (a command gets SIGTERM; q again: SIGKILL)
  s           cycle the sort: window share, last refresh's samples, name
  e, Tab      cycle the source (off_cpu and preempted with --off-cpu)
  f, space    freeze / unfreeze the display (sampling goes on)
  ?           help (any key returns)

Columns: SHARE (of the source's samples in the window, the outside included), SAMPLES (in the window; TIME off \
CPU for off_cpu and preempted), FUNCTION, MODULE, PROCESS (the command and pid with most of the function's \
samples, '+N' when N other processes have some, or 'N procs' when none has more than half).

Without a terminal (stdout piped or redirected) one plain table is printed per refresh, with the refresh's \
start and end, and no key is read.

The command shares the terminal: what it prints there is drawn over by the next refresh and lost. Redirect \
its output to keep it: ntprof top -- sh -c './prog args > prog.log 2>&1'.

Examples:
  ntprof top -- ./prog args         a command and every process it starts
  ntprof top -p 1234                a running process and its descendants
  ntprof top --kernel               the kernel, system-wide (needs CAP_PERFMON)
  ntprof top --cgroup PATH          every process of a cgroup (a container)
  ntprof top --off-cpu -- ./server  with the off-CPU waits as sources (press e)
  ntprof top --duration 10 -- ./prog > top.txt
                                    ten seconds of plain tables";

/// `ntprof top`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// Profile the kernel and its modules, system-wide: every process and the idle processors ('swapper')
    /// (needs root, CAP_PERFMON or perf_event_paranoid <= 0).
    #[arg(short = 'k', long)]
    pub kernel: bool,
    /// Profile every process of a cgroup v2 (a directory under the cgroup v2 mount, or a path relative to its
    /// root as /proc/PID/cgroup shows it), those that join it later included, and nothing else.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["kernel", "pid"])]
    pub cgroup: Option<String>,
    /// Profile running processes (a comma list) and, unless --no-inherit, their descendants.
    #[arg(short = 'p', long, value_name = "PID[,PID...]", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub pid: Vec<u32>,
    /// Seconds between refreshes (a window of the run is cut at each); perf top's -d/--delay.
    #[arg(long, short = 'd', visible_alias = "delay", value_name = "SECONDS", default_value = "1",
          value_parser = parse_refresh)]
    pub refresh: f64,
    /// The sliding window the table sums, in seconds: the last refreshes that fit in it (at least one).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_window)]
    pub window: f64,
    /// End after this many seconds (default: when the target ends, or q). A command is then sent SIGTERM.
    #[arg(long, value_name = "S", value_parser = parse_window)]
    pub duration: Option<f64>,
    /// How many functions a plain table (no terminal) shows; on a terminal, at most as many as fit.
    #[arg(short = 'n', long = "rows", value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rows: u32,
    /// Profiling options.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The command to run and its arguments, after '--'.
    #[arg(value_name = "CMD", trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}

/// What `top` profiles.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A command it runs.
    Command(Vec<String>),
    /// Running processes.
    Pids(Vec<u32>),
    /// The kernel, system-wide.
    Kernel,
    /// Every process of a cgroup.
    Cgroup(String),
}

impl TopArgs {
    /// The one target given, or the usage error (exit status 2) to end with.
    pub fn target(&self) -> Result<Target, clap::Error> {
        let mut given = Vec::new();
        if !self.command.is_empty() {
            given.push(format!("a command ('{}')", self.command.join(" ")));
        }
        if !self.pid.is_empty() {
            given.push("-p/--pid".to_string());
        }
        if self.kernel {
            given.push("--kernel".to_string());
        }
        if given.len() > 1 {
            return Err(usage(
                ErrorKind::ArgumentConflict,
                format!(
                    "give one target to 'ntprof top', not {}: -- CMD, -p PID or --kernel",
                    given.join(" and ")
                ),
            ));
        }
        if !self.profile.expect.is_empty() {
            return Err(usage(
                ErrorKind::ArgumentConflict,
                "--expect compares a report's shares with designed ones: 'ntprof top' writes no report \
                 (use 'ntprof record --expect')"
                    .to_string(),
            ));
        }
        if self.window < self.refresh {
            return Err(usage(
                ErrorKind::ValueValidation,
                format!(
                    "--window {} is shorter than --refresh {}: the window holds whole refreshes",
                    self.window, self.refresh
                ),
            ));
        }
        if let Some(cg) = &self.cgroup {
            if !self.command.is_empty() {
                return Err(usage(
                    ErrorKind::ArgumentConflict,
                    "give one target to 'ntprof top': --cgroup PATH, or a command (use --duration to bound a \
                     --cgroup view)"
                        .to_string(),
                ));
            }
            Ok(Target::Cgroup(cg.clone()))
        } else if !self.command.is_empty() {
            Ok(Target::Command(self.command.clone()))
        } else if !self.pid.is_empty() {
            Ok(Target::Pids(self.pid.clone()))
        } else if self.kernel {
            Ok(Target::Kernel)
        } else {
            Err(usage(
                ErrorKind::MissingRequiredArgument,
                "no target: 'ntprof top -- CMD [ARGS]', 'ntprof top -p PID[,PID]', 'ntprof top --cgroup PATH' \
                 or 'ntprof top --kernel'"
                    .to_string(),
            ))
        }
    }

    /// The engine's options: `record` of the command, an attach to the pids, or the kernel. `--duration` is
    /// not the engine's (it would refuse it for a command): `top` ends the run itself.
    pub fn options(&self) -> RecordOptions {
        let mut o = RecordOptions::command(self.command.iter().cloned());
        o.kernel = self.kernel;
        o.pid = self.pid.clone();
        o.cgroup = self.cgroup.clone();
        o.profile = self.profile.options();
        // top's screen is drawn over: a long debuginfod fetch delays a refresh, and says nothing on it.
        if let Some(d) = o.profile.debuginfod.as_mut() {
            d.progress = false;
        }
        o
    }

    /// The refresh period.
    pub fn every(&self) -> Duration {
        Duration::from_secs_f64(self.refresh)
    }

    /// How many refreshes the sliding window holds.
    pub fn windows(&self) -> usize {
        ((self.window / self.refresh) + 1e-9).floor().max(1.0) as usize
    }
}

/// A usage error of `ntprof top`, shown with its usage line.
fn usage(kind: ErrorKind, message: String) -> clap::Error {
    let mut cli = Cli::command();
    cli.build();
    match cli.find_subcommand_mut("top") {
        Some(top) => top.error(kind, message),
        None => cli.error(kind, message),
    }
}

fn seconds(s: &str, max: f64) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_finite() && (0.1..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s} is out of range (0.1 <= SECONDS <= {max})"))
    }
}

fn parse_refresh(s: &str) -> Result<f64, String> {
    seconds(s, 3600.0)
}

fn parse_window(s: &str) -> Result<f64, String> {
    seconds(s, 86_400.0)
}
