//! List every profile source: its value, its name, and its interval here or why it cannot be sampled.
//!
//! `cargo run --example sources`.

use std::fmt::Write as _;
use std::io::Write as _;

use ntprofile::{IntervalUnit, ProfileSource, query_interval};

fn main() {
    let mut out = String::new();
    for &source in ProfileSource::ALL {
        let support = source.support();
        let what = if support.is_supported() {
            let unit = match source.interval_unit() {
                IntervalUnit::Time100ns => "x 100 ns",
                IntervalUnit::Events => "events",
            };
            format!("interval {} {unit}", query_interval(source))
        } else {
            format!("not supported: {}", support.reason())
        };
        let _ = writeln!(
            out,
            "{:#07x}  {:<26} {what}",
            source.to_raw(),
            source.name()
        );
    }
    // One write, and a closed pipe (`| head`) is not an error.
    let _ = std::io::stdout().write_all(out.as_bytes());
}
