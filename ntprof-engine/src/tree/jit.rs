//! Code without a file: perf map files, the names JIT compilers write for the code they generate.
//!
//! `node --perf-basic-prof`, `python3.12 -X perf` and JVM agents write `/tmp/perf-PID.map`, one line per piece of
//! code: `START SIZE NAME`, START and SIZE in hexadecimal (with or without `0x`). A JIT may reuse memory, so a later
//! line wins where it overlaps an earlier one; the file has no times, so the samples taken there before the
//! later code came may be misnamed: the map keeps where lines overlap, for the report to say so. The file is read
//! when the report is built (the process keeps it). A runtime's jitdump file names code by time
//! ([`super::jitdump`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::files::{self, Owners, Place};

/// The name given to anonymous executable memory without a perf map entry.
pub const ANON_MODULE: &str = "[anon]";

/// The perf map file of `pid`.
pub fn map_path(pid: u32) -> String {
    format!("/tmp/perf-{pid}.map")
}

/// The perf map file of `pid` as the process names it (under its own pid in its namespace).
pub fn place_path(pid: u32, place: &Place) -> String {
    map_path(place.ns_pid.unwrap_or(pid))
}

/// The module name of a process's JIT code named from its perf map file.
pub fn jit_module_name(pid: u32) -> String {
    format!("[JIT] pid {pid}")
}

/// A perf map: code ranges and their names.
#[derive(Debug, Default)]
pub struct PerfMap {
    /// start → (end, index into `names`).
    ranges: BTreeMap<u64, (u64, usize)>,
    names: Vec<String>,
    /// Lines whose code covered code of earlier lines.
    pub reused: u64,
    /// The ranges several lines cover (where names may be mixed), sorted and merged.
    mixed: Vec<(u64, u64)>,
}

impl PerfMap {
    /// Read the perf map of `pid`: `None` when it has none, an error when it is not used (not a regular file,
    /// not owned by root, ntprof's user or the process's user, unreadable). At most
    /// [`files::PERF_MAP_CAP`] bytes are read, line by line, each line cut to [`files::PERF_MAP_LINE`] bytes.
    ///
    /// The file is the one the process wrote: under its pid in its own namespace (`/tmp/perf-1.map` for a
    /// process that is pid 1 in a container), in its own root.
    pub fn load(pid: u32, place: &Place) -> Option<Result<PerfMap, String>> {
        let path = place_path(pid, place);
        if !place.root.exists(Path::new(&path)) {
            return None;
        }
        let read = || {
            let owners = Owners::of_process(pid);
            let (file, _) = files::open_in(&place.root, Path::new(&path), &owners)?;
            let mut reader = std::io::BufReader::new(file.take(files::PERF_MAP_CAP));
            let mut map = PerfMap::default();
            files::for_each_line(&mut reader, files::PERF_MAP_LINE, |line| {
                map.line(&String::from_utf8_lossy(line));
            })
            .map_err(|e| format!("cannot read it: {e}"))?;
            map.finish();
            Ok(map)
        };
        Some(read())
    }

    /// Parse a perf map's text; malformed lines are skipped.
    #[allow(dead_code)] // The tests and the fuzz target parse text; a run reads the file line by line.
    pub fn parse(text: &str) -> PerfMap {
        let mut map = PerfMap::default();
        for line in text.lines() {
            map.line(line);
        }
        map.finish();
        map
    }

    /// Add one line (a malformed one is skipped).
    fn line(&mut self, line: &str) {
        let hex = |s: &str| {
            let s = s.trim();
            u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
        };
        let mut parts = line.trim_start().splitn(3, ' ');
        let (Some(start), Some(size), Some(name)) = (
            parts.next().and_then(hex),
            parts.next().and_then(hex),
            parts.next(),
        ) else {
            return;
        };
        if size == 0 {
            return;
        }
        self.insert(start, start.saturating_add(size), name.trim());
    }

    /// After the last line: merge the ranges where lines overlap.
    fn finish(&mut self) {
        self.mixed.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.mixed.len());
        for &(s, e) in &self.mixed {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.mixed = merged;
    }

    /// Lines read (those naming code).
    pub fn lines(&self) -> u64 {
        self.names.len() as u64
    }

    /// Whether several lines cover `addr` (its name may be that of code that came later than the sample).
    pub fn mixed(&self, addr: u64) -> bool {
        let i = self.mixed.partition_point(|&(s, _)| s <= addr);
        i.checked_sub(1).is_some_and(|i| addr < self.mixed[i].1)
    }

    /// Add `[start, end)` named `name`, over whatever it overlaps.
    fn insert(&mut self, start: u64, end: u64, name: &str) {
        let index = self.names.len();
        self.names.push(name.to_string());
        let before = self.mixed.len();
        if let Some((&s, &(e, n))) = self.ranges.range(..start).next_back()
            && e > start
        {
            self.mixed.push((start, e.min(end)));
            self.ranges.insert(s, (start, n));
            if e > end {
                self.ranges.insert(end, (e, n));
            }
        }
        let inside: Vec<u64> = self.ranges.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some((e, n)) = self.ranges.remove(&s) {
                self.mixed.push((s, e.min(end)));
                if e > end {
                    self.ranges.insert(end, (e, n));
                }
            }
        }
        if self.mixed.len() > before {
            self.reused += 1;
        }
        self.ranges.insert(start, (end, index));
    }

    /// The name of the code at `addr` and the start of its range.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let (&start, &(end, n)) = self.ranges.range(..=addr).next_back()?;
        (addr < end).then(|| (self.names[n].as_str(), start))
    }

    /// Number of named ranges.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_and_later_ones_win() {
        let m = PerfMap::parse(
            "3a2b1c00 40 LazyCompile:*hot /app.js:3:13\n\
             0x3a2b1c40 20 Builtin:Add\n\
             garbage line\n\
             3a2b1c10 8 LazyCompile:*hot2 /app.js:9:1\n",
        );
        assert_eq!(
            m.lookup(0x3a2b1c00),
            Some(("LazyCompile:*hot /app.js:3:13", 0x3a2b1c00))
        );
        assert_eq!(
            m.lookup(0x3a2b1c12),
            Some(("LazyCompile:*hot2 /app.js:9:1", 0x3a2b1c10))
        );
        assert_eq!(
            m.lookup(0x3a2b1c18).map(|(n, _)| n),
            Some("LazyCompile:*hot /app.js:3:13")
        );
        assert_eq!(m.lookup(0x3a2b1c45).map(|(n, _)| n), Some("Builtin:Add"));
        assert_eq!(m.lookup(0x3a2b1c60), None);
        assert_eq!(m.len(), 4);
        // Only where two lines cover the same bytes may a name be mixed.
        assert_eq!((m.lines(), m.reused), (3, 1));
        assert!(m.mixed(0x3a2b1c10) && m.mixed(0x3a2b1c17));
        assert!(!m.mixed(0x3a2b1c0f) && !m.mixed(0x3a2b1c18) && !m.mixed(0x3a2b1c45));
    }
}
