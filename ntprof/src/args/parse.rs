//! The values of ntprof's options that clap cannot parse alone: expectations, intervals, durations, processor
//! lists and address ranges.

use super::{AddrRange, CpuList, IntervalArg, parse_source_arg};
use crate::report::Expectation;

pub(super) fn parse_expect_arg(s: &str) -> Result<Expectation, String> {
    let (function, percent) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("'{s}' is not FUNCTION=PERCENT (e.g. main=60)"))?;
    let percent: f64 = percent
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{percent}' is not a percentage"))?;
    if function.trim().is_empty() || !(0.0..=100.0).contains(&percent) {
        return Err(format!(
            "'{s}' is not FUNCTION=PERCENT with PERCENT in 0..=100"
        ));
    }
    Ok(Expectation {
        function: function.trim().to_string(),
        percent,
    })
}

pub(super) fn parse_interval_arg(s: &str) -> Result<IntervalArg, String> {
    let (source, value) = match s.rsplit_once(['=', ':']) {
        Some((name, value)) => (Some(parse_source_arg(name.trim())?), value),
        None => (None, s),
    };
    let value = value
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("'{value}' is not an interval (a whole number, 0 ..= 4294967295)"))?;
    Ok(IntervalArg { source, value })
}

pub(super) fn parse_duration(s: &str) -> Result<f64, String> {
    seconds(s).and_then(|v| {
        if v > 0.0 && v <= 86_400.0 {
            Ok(v)
        } else {
            Err(format!("{s} is out of range (0 < S <= 86400)"))
        }
    })
}

/// A number of seconds (`2`, `1.5`, `1.5s`), finite.
pub fn seconds(s: &str) -> Result<f64, String> {
    s.trim()
        .trim_end_matches('s')
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("'{s}' is not a number of seconds"))
}

/// `0-3,6,8-9`.
pub fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let bad = || format!("'{part}' is not a CPU number or a range like 0-3");
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a.trim().parse().map_err(|_| bad())?;
        let b: usize = b.trim().parse().map_err(|_| bad())?;
        if a > b || b >= 4096 {
            return Err(format!(
                "'{part}': a range must go upwards and stay below CPU 4096"
            ));
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(CpuList(cpus))
}

/// `START-END`, hexadecimal (with or without `0x`), end exclusive and above the start.
pub fn parse_range(s: &str) -> Result<AddrRange, String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}' is not START-END (e.g. 0x400000-0x401000)"))?;
    let hex = |t: &str| {
        let t = t.trim();
        u64::from_str_radix(
            t.strip_prefix("0x")
                .or_else(|| t.strip_prefix("0X"))
                .unwrap_or(t),
            16,
        )
        .map_err(|_| format!("'{t}' is not a hexadecimal address"))
    };
    let (start, end) = (hex(a)?, hex(b)?);
    if end <= start {
        return Err(format!(
            "the range {s} is empty or goes backwards (END must be above START)"
        ));
    }
    Ok(AddrRange { start, end })
}
