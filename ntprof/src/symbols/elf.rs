//! Symbols and line information of one ELF object, read once and indexed.
//!
//! Opening an object reads its program headers and its symbol tables (`.symtab` and `.dynsym`, of the object
//! and of its separate debug file), through a read cache that fetches only those parts of the file (not the
//! whole of a 100 MB executable). The table keeps the raw names; a name is demangled when a lookup first returns
//! it. The DWARF (for inlined frames, files and lines) is opened on the first address that needs it, and every
//! answer is cached per address, so a report that looks the same return address up a million times parses its
//! line program once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use object::read::elf::SectionHeader;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ReadCache, ReadRef, SymbolKind};

use super::dwarf::{self, Context};
use super::fde::FdeIndex;
use super::plt;
use super::table::{Binding, Candidate, Symbol, SymbolTable};
use super::{DEBUG_ROOT, Mapping, Resolved, demangle, load_bias};
use crate::files::{self, Budgeted, Owners};
use crate::report::Frame;

/// `STT_FUNC`, `STT_GNU_IFUNC`; `STB_LOCAL`, `STB_WEAK` (`STB_GLOBAL` and `STB_GNU_UNIQUE` are global).
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const STB_LOCAL: u8 = 0;
const STB_WEAK: u8 = 2;
/// The size of an `Elf64_Sym`: name (4), info (1), other (1), section index (2), value (8), size (8).
const SYM64_SIZE: usize = 24;

/// The end address of each section, by section index (`u64::MAX` for an index no section has).
fn section_ends<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> Vec<u64> {
    let mut ends = Vec::new();
    for section in file.sections() {
        let i = section.index().0;
        if ends.len() <= i {
            ends.resize(i + 1, u64::MAX);
        }
        ends[i] = section.address().saturating_add(section.size());
    }
    ends
}

/// The function symbols of `.symtab` and `.dynsym`, each with the end of its section. Each table and its string
/// table are read in one piece (a per-name read through the cache would cost a system call per symbol) and
/// decoded directly.
fn text_symbols<'data, R: ReadRef<'data>>(file: &object::File<'data, R>, out: &mut Vec<Candidate>) {
    let ends = section_ends(file);
    let end_of = |index: usize| ends.get(index).copied().unwrap_or(u64::MAX);
    let object::File::Elf64(elf) = file else {
        return text_symbols_generic(file, &end_of, out);
    };
    let endian = elf.endian();
    let little = file.is_little_endian();
    let u32_at = |b: &[u8], at: usize| {
        let v: [u8; 4] = b[at..at + 4].try_into().unwrap_or_default();
        if little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        }
    };
    let u64_at = |b: &[u8], at: usize| {
        let v: [u8; 8] = b[at..at + 8].try_into().unwrap_or_default();
        if little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    };
    let u16_at = |b: &[u8], at: usize| {
        let v: [u8; 2] = b[at..at + 2].try_into().unwrap_or_default();
        if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        }
    };
    // An object has at most one table of each kind: the first of each is read, whatever further headers
    // claim (thousands of them spanning the file would read it thousands of times).
    let mut seen = [false; 2];
    for section in elf.sections() {
        let header = section.elf_section_header();
        let kind = header.sh_type(endian);
        let slot = match kind {
            object::elf::SHT_SYMTAB => 0,
            object::elf::SHT_DYNSYM => 1,
            _ => continue,
        };
        if std::mem::replace(&mut seen[slot], true) {
            continue;
        }
        let link = header.sh_link(endian) as usize;
        let (Ok(table), Some(Ok(strings))) = (
            section.data(),
            elf.section_by_index(object::SectionIndex(link))
                .ok()
                .map(|s| s.data()),
        ) else {
            continue;
        };
        for entry in table.chunks_exact(SYM64_SIZE) {
            let info = entry[4];
            let (bind, kind) = (info >> 4, info & 0xf);
            let shndx = u16_at(entry, 6);
            let value = u64_at(entry, 8);
            if !(kind == STT_FUNC || kind == STT_GNU_IFUNC) || shndx == 0 || value == 0 {
                continue;
            }
            let start = u32_at(entry, 0) as usize;
            let Some(rest) = strings.get(start..) else {
                continue;
            };
            let bytes = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
            // Versioned names (`name@@GLIBC_2.34` in glibc's debug symbols): the user knows the name.
            let bytes = bytes.split(|&b| b == b'@').next().unwrap_or(bytes);
            if bytes.is_empty() {
                continue;
            }
            let binding = match bind {
                STB_LOCAL => Binding::Local,
                STB_WEAK => Binding::Weak,
                _ => Binding::Global,
            };
            // Special section indexes (absolute symbols, `SHN_XINDEX`) are past every section: no limit.
            out.push((
                Symbol {
                    address: value,
                    size: u64_at(entry, 16),
                    name: String::from_utf8_lossy(bytes).into_owned(),
                },
                binding,
                end_of(usize::from(shndx)),
            ));
        }
    }
}

/// The same through object's symbol iterators, for objects other than 64-bit ELF.
fn text_symbols_generic<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
    end_of: &dyn Fn(usize) -> u64,
    out: &mut Vec<Candidate>,
) {
    for s in file.symbols().chain(file.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || s.address() == 0 || s.is_undefined() {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        // Versioned dynamic names (`name@@GLIBC_2.34`): the user knows the name.
        let name = name.split('@').next().unwrap_or(name);
        if name.is_empty() {
            continue;
        }
        let binding = if s.is_weak() {
            Binding::Weak
        } else if s.is_global() {
            Binding::Global
        } else {
            Binding::Local
        };
        let limit = s.section_index().map_or(u64::MAX, |i| end_of(i.0));
        out.push((
            Symbol {
                address: s.address(),
                size: s.size(),
                name: name.to_string(),
            },
            binding,
            limit,
        ));
    }
}

fn has_dwarf<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> bool {
    [".debug_info", ".debug_line"].iter().any(|name| {
        file.section_by_name(name)
            .is_some_and(|s| s.size() > 0 && s.file_range().is_some())
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Candidate separate debug files of `path`, in the order gdb searches them.
pub fn debug_file_candidates(
    path: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<&[u8]>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let h = hex(id);
        out.push(PathBuf::from(format!(
            "{DEBUG_ROOT}/.build-id/{}/{}.debug",
            &h[..2],
            &h[2..]
        )));
    }
    if let Some(link) = debuglink.and_then(|l| std::str::from_utf8(l).ok()) {
        let dir = path.parent().unwrap_or(Path::new("/"));
        out.push(dir.join(link));
        out.push(dir.join(".debug").join(link));
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        out.push(Path::new(DEBUG_ROOT).join(rel).join(link));
    }
    out
}

/// What is computed on demand, under one lock (uncontended: a report symbolizes on one thread).
#[derive(Default)]
struct Lazy {
    /// The DWARF: `None` until first needed, then `Some(None)` when it cannot be opened.
    dwarf: Option<Option<Context>>,
    /// Why the DWARF is not used, when it exists and is not.
    dwarf_problem: Option<String>,
    /// Demangled names, by symbol index.
    names: HashMap<usize, String>,
    /// Resolved addresses.
    resolved: HashMap<u64, Resolved>,
    /// Innermost locations of addresses.
    locations: HashMap<u64, Option<(String, u32)>>,
    /// The `.eh_frame` function ranges, read on the first address no symbol covers.
    fdes: Option<FdeIndex>,
}

/// Symbols and line information of one ELF object.
pub struct ElfSymbolizer {
    path: PathBuf,
    /// `(p_offset, p_vaddr)` of each `PT_LOAD` segment.
    segments: Vec<(u64, u64)>,
    build_id: Option<String>,
    symbols: SymbolTable,
    /// The file whose DWARF describes this object (itself or its separate debug file), opened lazily.
    dwarf_file: Option<PathBuf>,
    /// Whose file the DWARF file may be (a debug file: root's, ntprof's user's or the object's owner's).
    dwarf_owners: Owners,
    debug_file: Option<PathBuf>,
    /// What could not be read, for the report's notes.
    problems: Vec<String>,
    lazy: Mutex<Lazy>,
}

impl std::fmt::Debug for ElfSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfSymbolizer")
            .field("path", &self.path)
            .field("symbols", &self.symbols.len())
            .field("debug_file", &self.debug_file)
            .finish()
    }
}

impl ElfSymbolizer {
    /// Read the program headers and symbol tables of `path` and find its DWARF (its own, or a separate debug
    /// file found by build-id or `.gnu_debuglink`), to be opened when an address first needs it.
    pub fn open(path: &Path) -> Result<ElfSymbolizer, String> {
        let (handle, len) =
            files::open(path, &Owners::Any).map_err(|e| format!("{}: {e}", path.display()))?;
        let owner = std::os::unix::fs::MetadataExt::uid(
            &handle
                .metadata()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        );
        let mut problems = Vec::new();
        let cache = ReadCache::new(Budgeted::new(handle, len));
        let file = object::File::parse(&cache)
            .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
        let segments = file
            .segments()
            .map(|s| (s.file_range().0, s.address()))
            .collect();
        let build_id_bytes = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let build_id = build_id_bytes.as_deref().map(hex);
        let mut symbols = Vec::new();
        text_symbols(&file, &mut symbols);
        // The PLT stubs, `function@plt`: below any name a symbol table gives the same address.
        symbols.extend(plt::plt_symbols(&file).into_iter().map(|s| {
            let end = s.address + s.size;
            (s, Binding::Local, end)
        }));
        let (mut dwarf_file, mut debug_file) = (None, None);
        let debug_owners = Owners::Of(vec![owner]);
        if has_dwarf(&file) {
            dwarf_file = Some(path.to_path_buf());
        } else {
            let link = file
                .gnu_debuglink()
                .ok()
                .flatten()
                .map(|(name, _crc)| name.to_vec());
            for candidate in debug_file_candidates(path, build_id_bytes.as_deref(), link.as_deref())
            {
                if candidate == path || std::fs::metadata(&candidate).is_err() {
                    continue;
                }
                let (handle, dlen) = match files::open(&candidate, &debug_owners) {
                    Ok(h) => h,
                    Err(e) => {
                        problems.push(format!(
                            "the debug file {} of {} is not used: {e}",
                            candidate.display(),
                            path.display()
                        ));
                        continue;
                    }
                };
                let dcache = ReadCache::new(Budgeted::new(handle, dlen));
                let Ok(dfile) = object::File::parse(&dcache) else {
                    continue;
                };
                // A debug file for another build would give wrong names and lines: the build-ids must agree
                // when both have one.
                if let (Some(a), Ok(Some(b))) = (&build_id_bytes, dfile.build_id()) {
                    if a.as_slice() != b {
                        continue;
                    }
                }
                text_symbols(&dfile, &mut symbols);
                if has_dwarf(&dfile) {
                    dwarf_file = Some(candidate.clone());
                    debug_file = Some(candidate);
                    break;
                }
            }
        }
        let dwarf_owners = if debug_file.is_some() {
            debug_owners
        } else {
            Owners::Any
        };
        drop(file);
        if cache.into_inner().exhausted {
            problems.push(format!(
                "{}: its headers make it read more than twice its size; the tables past that are not read",
                path.display()
            ));
        }
        Ok(ElfSymbolizer {
            path: path.to_path_buf(),
            segments,
            build_id,
            symbols: SymbolTable::ranked_in_sections(symbols),
            dwarf_file,
            dwarf_owners,
            debug_file,
            problems,
            lazy: Mutex::new(Lazy::default()),
        })
    }

    /// Symbols of an ELF image held in memory (the vDSO), named `name`: its symbol tables, PLT stubs and
    /// `.eh_frame` function bounds; no DWARF.
    pub fn from_image(name: &str, image: &[u8]) -> Result<ElfSymbolizer, String> {
        let file = object::File::parse(image).map_err(|e| format!("cannot parse {name}: {e}"))?;
        let mut symbols = Vec::new();
        text_symbols(&file, &mut symbols);
        let lazy = Lazy {
            fdes: Some(FdeIndex::of_file(&file)),
            ..Lazy::default()
        };
        Ok(ElfSymbolizer {
            path: PathBuf::from(name),
            segments: file
                .segments()
                .map(|s| (s.file_range().0, s.address()))
                .collect(),
            build_id: file.build_id().ok().flatten().map(hex),
            symbols: SymbolTable::ranked_in_sections(symbols),
            dwarf_file: None,
            dwarf_owners: Owners::Any,
            debug_file: None,
            problems: Vec::new(),
            lazy: Mutex::new(lazy),
        })
    }

    /// The GNU build-id, hex.
    pub fn build_id(&self) -> Option<&str> {
        self.build_id.as_deref()
    }

    /// The load bias of a mapping of this object (runtime − file virtual address).
    pub fn bias(&self, mapping: &Mapping) -> Option<u64> {
        load_bias(mapping, self.segments.iter().copied())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lazy> {
        // A panic while holding the lock leaves only caches behind, which stay valid.
        self.lazy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn demangled(&self, lazy: &mut Lazy, index: usize) -> Option<Symbol> {
        let raw = self.symbols.get(index)?;
        let name = lazy
            .names
            .entry(index)
            .or_insert_with(|| demangle(&raw.name))
            .clone();
        Some(Symbol {
            address: raw.address,
            size: raw.size,
            name,
        })
    }

    /// The symbol containing file virtual address `addr`, demangled (the symbol table only, no DWARF).
    pub fn symbol(&self, addr: u64) -> Option<Symbol> {
        let index = self.symbols.lookup_index(addr)?;
        self.demangled(&mut self.lock(), index)
    }

    /// The `.eh_frame` function range `(start, end)` containing file virtual address `addr`: the function of an
    /// address that no symbol covers (see [`super::fde`]).
    pub fn fde_function(&self, addr: u64) -> Option<(u64, u64)> {
        let mut lazy = self.lock();
        lazy.fdes
            .get_or_insert_with(|| FdeIndex::read(&self.path))
            .lookup(addr)
    }

    /// Everything known about file virtual address `addr`: the containing symbol, and the DWARF frames
    /// (innermost first) with their locations. For a return address, pass the address of the call
    /// instruction (return address − 1): the return address itself may be the first byte of the next line or
    /// function.
    pub fn resolve(&self, addr: u64) -> Resolved {
        let mut lazy = self.lock();
        if let Some(r) = lazy.resolved.get(&addr) {
            return r.clone();
        }
        let symbol = self
            .symbols
            .lookup_index(addr)
            .and_then(|i| self.demangled(&mut lazy, i));
        let mut frames = Vec::new();
        if let Some(dwarf) = self.dwarf(&mut lazy) {
            if let Ok(mut iter) = dwarf.find_frames(addr).skip_all_loads() {
                while let Ok(Some(frame)) = iter.next() {
                    let function = frame
                        .function
                        .as_ref()
                        .and_then(|f| f.demangle().ok().map(Cow::into_owned));
                    let (file, line) = match &frame.location {
                        Some(loc) => (loc.file.map(str::to_string), loc.line),
                        None => (None, None),
                    };
                    frames.push(Frame {
                        function: function.unwrap_or_default(),
                        file,
                        line,
                        inlined: true,
                    });
                }
            }
            if frames.is_empty() {
                if let Ok(Some(loc)) = dwarf.find_location(addr) {
                    frames.push(Frame {
                        function: String::new(),
                        file: loc.file.map(str::to_string),
                        line: loc.line,
                        inlined: false,
                    });
                }
            }
        }
        if let Some(last) = frames.last_mut() {
            last.inlined = false;
            // The outermost frame is the machine-code function: the symbol table names it best (and the
            // DWARF name is missing for code without a subprogram entry).
            if let Some(sym) = &symbol {
                if last.function.is_empty() || !sym.name.is_empty() {
                    last.function = sym.name.clone();
                }
            }
        }
        for f in &mut frames {
            if f.function.is_empty() {
                f.function = "[unknown]".to_string();
            }
        }
        let r = Resolved { symbol, frames };
        lazy.resolved.insert(addr, r.clone());
        r
    }

    fn dwarf<'a>(&self, lazy: &'a mut Lazy) -> Option<&'a Context> {
        if lazy.dwarf.is_none() {
            let loaded = self.dwarf_file.as_ref().map(|p| {
                dwarf::load(p, &self.dwarf_owners).map_err(|e| format!("{}: {e}", p.display()))
            });
            lazy.dwarf = Some(match loaded {
                Some(Ok(d)) => Some(d),
                Some(Err(e)) => {
                    lazy.dwarf_problem = Some(e);
                    None
                }
                None => None,
            });
        }
        lazy.dwarf.as_ref().and_then(Option::as_ref)
    }

    /// What could not be read of this object and its debug file, for the report's notes (the DWARF's
    /// problem once an address needed it).
    pub fn problems(&self) -> Vec<String> {
        let mut all = self.problems.clone();
        all.extend(self.lock().dwarf_problem.clone());
        all
    }

    /// The file and line of `addr` (the innermost frame's location).
    pub fn location(&self, addr: u64) -> Option<(String, u32)> {
        let mut lazy = self.lock();
        if let Some(l) = lazy.locations.get(&addr) {
            return l.clone();
        }
        let found = self.dwarf(&mut lazy).and_then(|d| {
            let loc = d.find_location(addr).ok()??;
            Some((loc.file?.to_string(), loc.line?))
        });
        lazy.locations.insert(addr, found.clone());
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libc's `malloc` is named `malloc`, although `__libc_malloc` (and, with libc's debug file installed,
    /// `__GI___libc_malloc`) name the same address.
    #[test]
    fn libc_malloc_is_malloc() {
        let maps = super::super::read_maps("self").unwrap();
        let Some(libc) = maps
            .iter()
            .find(|m| m.is_executable() && m.path.contains("/libc.so"))
        else {
            eprintln!("skipped: this test binary is not linked against a shared libc");
            return;
        };
        let elf = ElfSymbolizer::open(Path::new(&libc.path)).unwrap();
        let data = std::fs::read(&libc.path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let malloc = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("malloc") && s.is_definition())
            .expect("libc defines malloc");
        let aliases = file
            .dynamic_symbols()
            .filter(|s| s.address() == malloc.address() && s.name() != Ok("malloc"))
            .count();
        assert!(
            aliases > 0,
            "libc has aliases of malloc (__libc_malloc): the test would prove nothing"
        );
        let s = elf.symbol(malloc.address() + 1).unwrap();
        assert_eq!(s.name, "malloc", "{elf:?}");
        assert_eq!(
            elf.resolve(malloc.address() + 1).symbol.unwrap().name,
            "malloc"
        );
    }
}
