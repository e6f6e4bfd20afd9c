//! List every profile source, in the spirit of Windows' `PROFILE_SOURCE_INFO`: its value, its name, whether it
//! can be sampled here (and why not), its interval limits and current interval, and the perf event behind it.
//! One line per source, `key=value` fields, the reason last.
//!
//! `cargo run --example sources` (add `-- --register TYPE CONFIG` to register a raw perf event first).

use std::fmt::Write as _;
use std::io::Write as _;

use ntprofile::{IntervalUnit, list_sources, register_raw_source};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--register" {
        let parse = |s: &str| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        let (Ok(t), Ok(c)) = (parse(&args[2]), parse(&args[3])) else {
            eprintln!("usage: sources [--register TYPE CONFIG]");
            std::process::exit(2);
        };
        if let Err(status) = register_raw_source(t as u32, c, 0, 0) {
            eprintln!("register: {status}");
            std::process::exit(1);
        }
    }
    let mut out = String::new();
    for info in list_sources() {
        let unit = match info.unit {
            IntervalUnit::Time100ns => "100ns",
            IntervalUnit::Events => "events",
        };
        let event = match info.event {
            Some(e) => format!("event={} type={} config={:#x}", e.name, e.type_, e.config),
            None => "event=none".to_string(),
        };
        let _ = writeln!(
            out,
            "{:#07x} name={} supported={} min={} max={} interval={} unit={unit} jitter={} {event} -- {}",
            info.source.to_raw(),
            info.name,
            if info.support.is_supported() {
                "yes"
            } else {
                "no"
            },
            info.min_interval,
            info.max_interval,
            info.interval,
            info.jitter_percent,
            info.support.reason()
        );
    }
    // One write, and a closed pipe (`| head`) is not an error.
    let _ = std::io::stdout().write_all(out.as_bytes());
}
