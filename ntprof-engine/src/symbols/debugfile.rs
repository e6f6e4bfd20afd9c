//! An object's separate debug file, and where its names came from.
//!
//! The debug file is looked for on disk first, in the object's own root: by build-id
//! (`/usr/lib/debug/.build-id/xx/yyyy.debug`), then by `.gnu_debuglink`; a candidate is used only when its
//! build-id equals the object's (when both have one). Without one that has DWARF, and with a debuginfod
//! client, the servers are asked by build-id ([`super::debuginfod`]); the answer has been checked to be of the
//! object's build-id. [`NameSource`] records which of them named something.

use std::path::{Path, PathBuf};

use object::{Object, ReadCache};

use super::debuginfod::Client;
use super::symtab::{debug_file_candidates, has_dwarf, text_symbols};
use super::table::Candidate;
use crate::files::{self, Budgeted, Owners, Root};

/// Where the names of a module came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NameSource {
    /// The object's own `.symtab`.
    Symtab,
    /// The object's `.dynsym` (its exported functions).
    Dynsym,
    /// The object's own DWARF (inlined frames, files, lines).
    Dwarf,
    /// A separate debug file found by build-id under `/usr/lib/debug/.build-id`.
    DebugBuildId,
    /// A separate debug file found by `.gnu_debuglink`.
    DebugLink,
    /// The debug file fetched from (or cached for) a debuginfod server.
    Debuginfod,
    /// MiniDebugInfo (`.gnu_debugdata`).
    MiniDebugInfo,
    /// A Go binary's `.gopclntab`.
    Pclntab,
    /// A JIT's perf map file (`/tmp/perf-PID.map`).
    PerfMap,
    /// A JIT's jitdump file.
    Jitdump,
    /// `/proc/kallsyms`.
    Kallsyms,
}

impl NameSource {
    /// The name the report gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            NameSource::Symtab => "symtab",
            NameSource::Dynsym => "dynsym",
            NameSource::Dwarf => "dwarf",
            NameSource::DebugBuildId => "debug file by build-id",
            NameSource::DebugLink => "debug file by debuglink",
            NameSource::Debuginfod => "debuginfod",
            NameSource::MiniDebugInfo => "minidebuginfo",
            NameSource::Pclntab => "pclntab",
            NameSource::PerfMap => "perf map",
            NameSource::Jitdump => "jitdump",
            NameSource::Kallsyms => "kallsyms",
        }
    }
}

/// What is known of an object needed to find its debug file.
pub struct Wanted<'a> {
    /// Its path, as its process names it.
    pub path: &'a Path,
    /// The root its process sees.
    pub root: &'a Root,
    /// Its build-id.
    pub build_id: Option<&'a [u8]>,
    /// Its `.gnu_debuglink` file name.
    pub link: Option<&'a [u8]>,
    /// Whose debug files are trusted.
    pub owners: &'a Owners,
    /// The debuginfod client, if fetching is on.
    pub debuginfod: Option<&'a Client>,
}

/// The debug file found: its DWARF's file (in its root) if it has DWARF, and where it was found.
pub struct DebugFile {
    /// The file whose DWARF describes the object, if any.
    pub dwarf: Option<(Root, PathBuf)>,
    /// The debug files that named something, with how each was found.
    pub sources: Vec<NameSource>,
}

/// Look for the debug file of `want`, adding its function symbols to `symbols` and what could not be read to
/// `problems`; `looked` gets, for a report of an unnamed module, where it was looked for.
pub fn find(
    want: &Wanted<'_>,
    symbols: &mut Vec<Candidate>,
    problems: &mut Vec<String>,
    looked: &mut Vec<String>,
) -> DebugFile {
    let mut found = DebugFile {
        dwarf: None,
        sources: Vec::new(),
    };
    let path = want.path;
    let candidates = debug_file_candidates(path, want.build_id, want.link);
    for (i, candidate) in candidates.iter().enumerate() {
        // The first candidate is the build-id's when there is a build-id.
        let how = if i == 0 && want.build_id.is_some_and(|id| id.len() >= 2) {
            NameSource::DebugBuildId
        } else {
            NameSource::DebugLink
        };
        if candidate == path || !want.root.exists(candidate) {
            looked.push(format!("{} (absent)", candidate.display()));
            continue;
        }
        let opened = files::open_in(want.root, candidate, want.owners);
        match use_file(opened, want.build_id, symbols) {
            Ok(Used { named, dwarf }) => {
                if named || dwarf {
                    found.sources.push(how);
                }
                if dwarf {
                    found.dwarf = Some((want.root.clone(), candidate.clone()));
                    return found;
                }
            }
            Err(e) => problems.push(format!(
                "the debug file {} of {} is not used: {e}",
                candidate.display(),
                path.display()
            )),
        }
    }
    let (Some(client), Some(id)) = (want.debuginfod, want.build_id) else {
        if want.debuginfod.is_none() {
            looked.push("debuginfod is off (DEBUGINFOD_URLS, --debuginfod URL)".into());
        }
        return found;
    };
    match client.debug_file(id, path) {
        Ok(file) => {
            let opened = files::open(&file.path, &Owners::Of(Vec::new()));
            match use_file(opened, want.build_id, symbols) {
                Ok(Used { named, dwarf }) => {
                    if named || dwarf {
                        found.sources.push(NameSource::Debuginfod);
                    }
                    if dwarf {
                        found.dwarf = Some((Root::Host, file.path));
                    }
                }
                Err(e) => problems.push(format!(
                    "the debug file {} of {} from debuginfod is not used: {e}",
                    file.path.display(),
                    path.display()
                )),
            }
        }
        Err(e) => {
            problems.push(e.clone());
            looked.push(e);
        }
    }
    found
}

/// What a debug file gave.
struct Used {
    /// Function symbols.
    named: bool,
    /// DWARF.
    dwarf: bool,
}

/// Read the symbols of the opened debug file into `symbols` if its build-id is `build_id`.
fn use_file(
    opened: Result<(std::fs::File, u64), String>,
    build_id: Option<&[u8]>,
    symbols: &mut Vec<Candidate>,
) -> Result<Used, String> {
    let (handle, len) = opened?;
    let cache = ReadCache::new(Budgeted::new(handle, len));
    let file = object::File::parse(&cache).map_err(|e| format!("it is not an ELF file: {e}"))?;
    // A debug file for another build would give wrong names and lines: the build-ids must agree when both
    // have one.
    if let (Some(a), Ok(Some(b))) = (build_id, file.build_id())
        && a != b
    {
        return Err(format!(
            "it is of another build (build-id {})",
            super::symtab::hex(b)
        ));
    }
    let before = symbols.len();
    text_symbols(&file, symbols);
    Ok(Used {
        named: symbols.len() > before,
        dwarf: has_dwarf(&file),
    })
}
