//! The writers: pprof, JSON, CSV, folded stacks and flame graphs, each rendered in memory from a
//! [`Report`] alone.
//!
//! ```
//! use ntprof_engine::output::{self, fixture};
//!
//! let report = fixture::report(); // or a recording's, or one read back from its JSON
//! let json = output::json(&report)?;
//! let csv = output::table::render(&report)?;
//! let pprof = output::pprof::render(&report)?; // gzipped profile.proto
//! let folded = output::flame::folded_text(&report);
//! let svg = output::flame::render_source(&report, &report.sources[0])?;
//! assert!(json.starts_with(b"{") && csv.starts_with(b"source,") && pprof.starts_with(&[0x1f, 0x8b]));
//! assert!(folded.contains("hot_a") && svg.starts_with(b"<?xml"));
//! # Ok::<(), String>(())
//! ```

pub mod fixture;
pub mod flame;
pub mod pprof;
pub mod table;

use crate::report::Report;

/// The JSON document of a report (the versioned schema), with a final newline.
pub fn json(report: &Report) -> Result<Vec<u8>, String> {
    let mut bytes = serde_json::to_vec_pretty(report)
        .map_err(|e| format!("cannot encode the JSON report: {e}"))?;
    bytes.push(b'\n');
    Ok(bytes)
}
