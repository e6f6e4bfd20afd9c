//! Names for the addresses of one process: its executable mappings, and each object's symbols and DWARF, opened
//! once and shared by every mapping of it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::{ElfSymbolizer, Mapping, read_maps, vdso};
use crate::report::Frame;

/// Symbolizes the addresses of one process, mapping by mapping.
///
/// Give it the process's executable mappings (from `/proc/PID/maps` with [`ProcessSymbolizer::of_pid`], or one by
/// one from the sampler's [`Mmap`](ntprofile::Mmap) records with [`ProcessSymbolizer::add`]); each object is
/// opened on the first address that needs it and kept. An address in no mapping, or in an object that cannot be
/// read, is named `[unknown]` or `module+0xOFFSET`.
///
/// ```
/// use ntprof_engine::symbols::ProcessSymbolizer;
///
/// #[inline(never)]
/// fn here() -> u64 {
///     here as usize as u64
/// }
///
/// let mut names = ProcessSymbolizer::of_pid(std::process::id()).unwrap();
/// let frames = names.frames(here());
/// assert!(frames.last().unwrap().function.ends_with("here"), "{frames:?}");
/// ```
#[derive(Default)]
pub struct ProcessSymbolizer {
    /// Executable mappings by start address.
    maps: BTreeMap<u64, Mapping>,
    /// Objects by path, opened on first use (`None`: could not be read).
    objects: HashMap<String, Option<Arc<ElfSymbolizer>>>,
}

impl std::fmt::Debug for ProcessSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessSymbolizer")
            .field("mappings", &self.maps.len())
            .field("objects", &self.objects.len())
            .finish()
    }
}

impl ProcessSymbolizer {
    /// A symbolizer with no mapping yet.
    pub fn new() -> ProcessSymbolizer {
        ProcessSymbolizer::default()
    }

    /// A symbolizer for the executable mappings process `pid` has now (`/proc/PID/maps`).
    pub fn of_pid(pid: u32) -> std::io::Result<ProcessSymbolizer> {
        let mut s = ProcessSymbolizer::new();
        for m in read_maps(&pid.to_string())? {
            s.add(m);
        }
        Ok(s)
    }

    /// Add a mapping (a non-executable one is ignored). It replaces what it overlaps, as a new `mmap` over old
    /// mappings does: the parts of an old mapping outside it stay.
    pub fn add(&mut self, mapping: Mapping) {
        if !mapping.is_executable() || mapping.start >= mapping.end {
            return;
        }
        let overlapping: Vec<u64> = self
            .maps
            .range(..mapping.end)
            .filter(|(_, m)| m.end > mapping.start)
            .map(|(&start, _)| start)
            .collect();
        for start in overlapping {
            let Some(old) = self.maps.remove(&start) else {
                continue;
            };
            if old.start < mapping.start {
                let left = Mapping {
                    end: mapping.start,
                    ..old.clone()
                };
                self.maps.insert(left.start, left);
            }
            if old.end > mapping.end {
                let right = Mapping {
                    start: mapping.end,
                    offset: old.offset + (mapping.end - old.start),
                    ..old
                };
                self.maps.insert(right.start, right);
            }
        }
        self.maps.insert(mapping.start, mapping);
    }

    /// The executable mappings, by address.
    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.maps.values()
    }

    /// The mapping that contains `addr`.
    pub fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let (_, m) = self.maps.range(..=addr).next_back()?;
        (addr < m.end).then_some(m)
    }

    /// The frames of `addr`, innermost (inlined) first, the function that holds the code last; at least one.
    /// For a return address (every frame of a call stack but the first), pass the address − 1: the return
    /// address itself may be the first byte of the next line or function.
    pub fn frames(&mut self, addr: u64) -> Vec<Frame> {
        let Some(m) = self.mapping(addr).cloned() else {
            return vec![unknown("[unknown]".to_string())];
        };
        let module = module_name(&m.path);
        let Some((elf, bias)) = self.object(&m) else {
            return vec![unknown(format!(
                "{module}+{:#x}",
                addr - m.start + m.offset
            ))];
        };
        let file_addr = addr.wrapping_sub(bias);
        let resolved = elf.resolve(file_addr);
        if !resolved.frames.is_empty() {
            return resolved.frames;
        }
        let function = match resolved.symbol {
            Some(s) => s.name,
            None => format!("{module}+{file_addr:#x}"),
        };
        vec![unknown(function)]
    }

    /// The name of the function that holds `addr` (the outermost of [`ProcessSymbolizer::frames`]).
    pub fn function(&mut self, addr: u64) -> String {
        let mut frames = self.frames(addr);
        frames.pop().map(|f| f.function).unwrap_or_default()
    }

    /// The object of mapping `m` and the mapping's load bias, opened on first use.
    fn object(&mut self, m: &Mapping) -> Option<(Arc<ElfSymbolizer>, u64)> {
        let elf = self
            .objects
            .entry(m.path.clone())
            .or_insert_with(|| {
                if m.path == vdso::VDSO {
                    vdso::symbolizer(m.size()).map(Arc::new)
                } else if m.path.starts_with('/') {
                    ElfSymbolizer::open(Path::new(&m.path)).ok().map(Arc::new)
                } else {
                    None
                }
            })
            .clone()?;
        let bias = elf.bias(m)?;
        Some((elf, bias))
    }
}

/// A frame with a name and no location.
fn unknown(function: String) -> Frame {
    Frame {
        function,
        file: None,
        line: None,
        inlined: false,
    }
}

/// The file name of a mapping's path (`libc.so.6`), or the path itself (`[vdso]`).
fn module_name(path: &str) -> &str {
    path.rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(start: u64, end: u64, offset: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            perms: "r-xp".into(),
            offset,
            path: path.into(),
        }
    }

    #[test]
    fn a_new_mapping_replaces_what_it_overlaps_and_keeps_the_rest() {
        let mut s = ProcessSymbolizer::new();
        s.add(code(0x1000, 0x4000, 0, "/nonexistent/a.so"));
        s.add(code(0x6000, 0x8000, 0x2000, "/nonexistent/b.so"));
        s.add(Mapping {
            perms: "rw-p".into(),
            ..code(0x9000, 0xa000, 0, "/nonexistent/data")
        });
        s.add(code(0x3000, 0x7000, 0, "/nonexistent/c.so"));
        let maps: Vec<(u64, u64, u64, &str)> = s
            .mappings()
            .map(|m| (m.start, m.end, m.offset, m.path.as_str()))
            .collect();
        assert_eq!(
            maps,
            [
                (0x1000, 0x3000, 0, "/nonexistent/a.so"),
                (0x3000, 0x7000, 0, "/nonexistent/c.so"),
                (0x7000, 0x8000, 0x3000, "/nonexistent/b.so"),
            ]
        );
        // Objects that cannot be read are named by module and file offset; no mapping, [unknown].
        assert_eq!(s.function(0x7010), "b.so+0x3010");
        assert_eq!(s.function(0x3100), "c.so+0x100");
        assert_eq!(s.function(0x9000), "[unknown]");
        assert_eq!(s.mapping(0x8000), None);
    }
}
