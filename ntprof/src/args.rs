//! Command-line parsing for `ntprof`: subcommands, options, help texts, usage errors (exit code 2).
//!
//! Written by hand rather than with a parser crate: two subcommands and five options do not need one.

use std::ffi::OsString;
use std::fmt;

use ntprofile::ProfileSource;

/// The help of `ntprof` itself.
pub const MAIN_HELP: &str = "\
ntprof - a kernrate-like profiler built on ntprofile
         (the Windows NT profile API on Linux perf_event)

Usage:
  ntprof demo [OPTIONS]     profile a bundled demo workload, print a symbolized report
  ntprof sources            list the profile sources, whether they work here, their intervals
  ntprof help [COMMAND]     print this help, or the help of COMMAND

Options:
  -h, --help                print help
  -V, --version             print the version

Run 'ntprof demo --help' for the demo's options.
";

/// The help of `ntprof demo`.
pub const DEMO_HELP: &str = "\
ntprof demo - profile a bundled workload through NtCreateProfile / NtStartProfile

The workload runs three functions (demo_alpha, demo_beta, demo_gamma) whose CPU time is
split 50% / 30% / 20% by design, on two threads: one created before the profile starts,
one after. The profiled range is ntprof's own text (its executable mapping in
/proc/self/maps). Bucket addresses are symbolized against /proc/self/exe and aggregated by
function; a bucket that straddles two functions is counted for the function that contains
the bucket's start address (--bucket 2 gives exact 4-byte attribution).

Usage:
  ntprof demo [OPTIONS]

Options:
  -s, --seconds <S>     how long the workload runs, in seconds (default 2)
  -i, --interval <I>    the source's interval (NtSetIntervalProfile): 100 ns units for time
                        sources (10000 = 1 ms), events between samples otherwise; clamped
                        into the source's limits (default: the source's current interval)
  -b, --bucket <B>      BucketSize: log2 of the bucket size in bytes, 2..=31
                        (default 4 = 16-byte buckets)
  -n, --top <N>         how many functions to show (default 15)
      --source <SRC>    the profile source, by name (Timer, task-clock, ...) or value
                        (0x0, 0x10000, ...); default Timer. The designed shares are shares
                        of CPU time: compare them with a time source.
  -h, --help            print this help
";

/// The help of `ntprof sources`.
pub const SOURCES_HELP: &str = "\
ntprof sources - list every profile source (KPROFILE_SOURCE and the Linux extension range)

For each source: its value, its name, whether it can be sampled on this machine (and why
not), its minimum, maximum and current interval with the unit, and the perf event behind it.

Usage:
  ntprof sources

Options:
  -h, --help            print this help
";

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Print this text to stdout and exit 0.
    Help(&'static str),
    /// Print the version.
    Version,
    /// `ntprof demo`.
    Demo(DemoOptions),
    /// `ntprof sources`.
    Sources,
}

/// The options of `ntprof demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How long the workload runs.
    pub seconds: f64,
    /// The interval to set before the profile starts, if any.
    pub interval: Option<u32>,
    /// `BucketSize` (log2 of the bucket size in bytes).
    pub bucket: u32,
    /// Functions shown.
    pub top: usize,
    /// The profile source.
    pub source: ProfileSource,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            seconds: 2.0,
            interval: None,
            bucket: 4,
            top: 15,
            source: ProfileSource::Time,
        }
    }
}

/// A bad command line: printed with a hint, exit code 2.
#[derive(Debug)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

/// Parse the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    let mut it = args_into_strings(args)?.into_iter();
    let Some(first) = it.next() else {
        return Err(usage("no command given (expected 'demo' or 'sources')"));
    };
    match first.as_str() {
        "-h" | "--help" => no_more(it, Command::Help(MAIN_HELP)),
        "-V" | "--version" => no_more(it, Command::Version),
        "help" => match it.next().as_deref() {
            None => Ok(Command::Help(MAIN_HELP)),
            Some("demo") => no_more(it, Command::Help(DEMO_HELP)),
            Some("sources") => no_more(it, Command::Help(SOURCES_HELP)),
            Some(other) => Err(usage(format!("no help for unknown command '{other}'"))),
        },
        "demo" => parse_demo(it),
        "sources" => parse_sources(it),
        other if other.starts_with('-') => Err(usage(format!(
            "unknown option '{other}' before the command"
        ))),
        other => Err(usage(format!(
            "unknown command '{other}' (expected 'demo' or 'sources')"
        ))),
    }
}

fn args_into_strings(args: impl IntoIterator<Item = OsString>) -> Result<Vec<String>, UsageError> {
    args.into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| usage(format!("argument {a:?} is not valid UTF-8")))
        })
        .collect()
}

fn no_more(mut it: impl Iterator<Item = String>, cmd: Command) -> Result<Command, UsageError> {
    match it.next() {
        None => Ok(cmd),
        Some(extra) => Err(usage(format!("unexpected argument '{extra}'"))),
    }
}

fn parse_sources(it: impl Iterator<Item = String>) -> Result<Command, UsageError> {
    let mut help = false;
    for a in it {
        match a.as_str() {
            "-h" | "--help" => help = true,
            other if other.starts_with('-') => {
                return Err(usage(format!("unknown option '{other}' for 'sources'")));
            }
            other => {
                return Err(usage(format!(
                    "unexpected argument '{other}' for 'sources'"
                )));
            }
        }
    }
    Ok(if help {
        Command::Help(SOURCES_HELP)
    } else {
        Command::Sources
    })
}

fn parse_demo(mut it: impl Iterator<Item = String>) -> Result<Command, UsageError> {
    let mut opts = DemoOptions::default();
    while let Some(arg) = it.next() {
        // `--name=value` or `--name value`.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, UsageError> {
            match inline.clone().or_else(|| it.next()) {
                Some(v) => Ok(v),
                None => Err(usage(format!("option '{name}' needs a value ({what})"))),
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help(DEMO_HELP)),
            "-s" | "--seconds" => {
                let v = value("seconds")?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| usage(format!("--seconds: '{v}' is not a number")))?;
                if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
                    return Err(usage(format!(
                        "--seconds: {v} is out of range (0 < S <= 3600)"
                    )));
                }
                opts.seconds = s;
            }
            "-i" | "--interval" => {
                let v = value("interval")?;
                let i = parse_u64(&v)
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| {
                        usage(format!("--interval: '{v}' is not a 32-bit unsigned number"))
                    })?;
                opts.interval = Some(i);
            }
            "-b" | "--bucket" => {
                let v = value("log2 of the bucket size")?;
                let b = parse_u64(&v)
                    .filter(|b| (2..=31).contains(b))
                    .ok_or_else(|| {
                        usage(format!("--bucket: '{v}' is not a BucketSize in 2..=31"))
                    })?;
                opts.bucket = b as u32;
            }
            "-n" | "--top" => {
                let v = value("number of functions")?;
                let n = parse_u64(&v)
                    .filter(|n| *n >= 1)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| usage(format!("--top: '{v}' is not a positive number")))?;
                opts.top = n;
            }
            "--source" => {
                let v = value("source name or value")?;
                opts.source = parse_source(&v).ok_or_else(|| {
                    usage(format!(
                        "--source: unknown source '{v}' (see 'ntprof sources')"
                    ))
                })?;
            }
            other if other.starts_with('-') => {
                return Err(usage(format!("unknown option '{other}' for 'demo'")));
            }
            other => return Err(usage(format!("unexpected argument '{other}' for 'demo'"))),
        }
    }
    Ok(Command::Demo(opts))
}

/// A decimal or `0x` hexadecimal number.
fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A source by value (`0x13`, `19`), by its listed name (`Timer`, `task-clock`, case-insensitive), or by its
/// NT name with or without the `Profile` prefix (`ProfileTime`, `TotalCycles`).
pub fn parse_source(s: &str) -> Option<ProfileSource> {
    if let Some(v) = parse_u64(s) {
        return u32::try_from(v).ok().and_then(ProfileSource::from_raw);
    }
    let wanted = s.trim().to_ascii_lowercase();
    let bare = wanted.strip_prefix("profile").unwrap_or(&wanted);
    if bare == "time" {
        return Some(ProfileSource::Time);
    }
    ProfileSource::ALL.iter().copied().find(|src| {
        let name = src.name().to_ascii_lowercase();
        let debug = format!("{src:?}").to_ascii_lowercase();
        name == wanted || name == bare || debug == bare
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn demo_options() {
        let Ok(Command::Demo(o)) = p(&[
            "demo",
            "--seconds=0.5",
            "-i",
            "2000",
            "--bucket",
            "2",
            "--top",
            "3",
        ]) else {
            panic!("demo options rejected");
        };
        assert_eq!(
            (o.seconds, o.interval, o.bucket, o.top),
            (0.5, Some(2000), 2, 3)
        );
        assert!(p(&["demo", "--bucket", "32"]).is_err());
        assert!(p(&["demo", "--seconds"]).is_err());
        assert!(p(&["demo", "--bogus"]).is_err());
        assert!(p(&[]).is_err());
        assert!(matches!(
            p(&["demo", "--help"]),
            Ok(Command::Help(DEMO_HELP))
        ));
    }

    #[test]
    fn sources_by_name_or_value() {
        assert_eq!(parse_source("Timer"), Some(ProfileSource::Time));
        assert_eq!(parse_source("ProfileTime"), Some(ProfileSource::Time));
        assert_eq!(parse_source("task-clock"), Some(ProfileSource::TaskClock));
        assert_eq!(parse_source("0x13"), Some(ProfileSource::TotalCycles));
        assert_eq!(parse_source("0x18"), None);
        assert_eq!(parse_source("nonsense"), None);
    }
}
