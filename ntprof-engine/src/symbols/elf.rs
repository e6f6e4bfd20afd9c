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

use object::{Object, ObjectSegment, ReadCache};

use super::debugfile::{self, NameSource, Wanted};
use super::debuginfod::Client;
use super::dwarf::{self, Context};
use super::fde::FdeIndex;
use super::gopclntab::GoTable;
use super::minidebug;
use super::plt;
pub use super::symtab::debug_file_candidates;
use super::symtab::{has_dwarf, hex, text_symbols};
use super::table::{Binding, Symbol, SymbolTable};
use super::{Mapping, Resolved, demangle, load_bias};
use crate::files::{self, Budgeted, ObjectFile, Owners, Root};
use crate::report::Frame;

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
    /// A path that opens this very file on the host (the held descriptor of a mapped object's), for what is
    /// read later (the `.eh_frame` bounds).
    open: PathBuf,
    /// `(p_offset, p_vaddr)` of each `PT_LOAD` segment.
    segments: Vec<(u64, u64)>,
    build_id: Option<String>,
    symbols: SymbolTable,
    /// The file whose DWARF describes this object (itself or its separate debug file, in the root it is
    /// found in), opened lazily.
    dwarf_file: Option<(Root, PathBuf)>,
    /// Whose file the DWARF file may be (a debug file: root's, ntprof's user's or the object's owner's).
    dwarf_owners: Owners,
    debug_file: Option<PathBuf>,
    /// A Go binary's own function table (`.gopclntab`): names, files, lines and inlined frames without
    /// `.symtab` or DWARF.
    go: Option<GoTable>,
    /// Where its names come from.
    sources: Vec<NameSource>,
    /// Where its debug file was looked for and not found (for a module without names).
    looked: Vec<String>,
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
        Self::from_file((path, path), handle, len, &Root::Host, None)
    }

    /// [`open`](Self::open) for an object a process mapped: the very file that was mapped (held open since),
    /// its debug files found in the process's own root, else (with `debuginfod`) fetched by build-id.
    pub fn open_object(
        object: &ObjectFile,
        debuginfod: Option<&Client>,
    ) -> Result<ElfSymbolizer, String> {
        let path = Path::new(&object.path);
        let (handle, len) = files::checked(object.reopen()?, &Owners::Any)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_file(
            (path, &object.open_path()),
            handle,
            len,
            &object.root,
            debuginfod,
        )
    }

    /// [`open`](Self::open), with `debuginfod` asked for a debug file none on disk gives.
    pub fn open_with(path: &Path, debuginfod: Option<&Client>) -> Result<ElfSymbolizer, String> {
        let (handle, len) =
            files::open(path, &Owners::Any).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_file((path, path), handle, len, &Root::Host, debuginfod)
    }

    /// The object `path` (as its process names it, resolved in `root`; `open` opens it on the host), opened
    /// as `handle` of `len` bytes.
    fn from_file(
        (path, open): (&Path, &Path),
        handle: std::fs::File,
        len: u64,
        root: &Root,
        debuginfod: Option<&Client>,
    ) -> Result<ElfSymbolizer, String> {
        let owner = std::os::unix::fs::MetadataExt::uid(
            &handle
                .metadata()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        );
        let mut problems = Vec::new();
        // A second descriptor of the same file for a Go table, read later as lookups need it.
        let go_handle = handle.try_clone().ok();
        let cache = ReadCache::new(Budgeted::new(handle, len));
        let file = object::File::parse(&cache)
            .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
        let segments = file
            .segments()
            .map(|s| (s.file_range().0, s.address()))
            .collect();
        let go = match go_handle.and_then(|h| GoTable::find(&file, h, len)) {
            Some(Ok(table)) => Some(table),
            Some(Err(e)) => {
                problems.push(format!("{}: {e}", path.display()));
                None
            }
            None => None,
        };
        let build_id_bytes = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let build_id = build_id_bytes.as_deref().map(hex);
        let mut symbols = Vec::new();
        let mut sources = Vec::new();
        let [symtab, dynsym] = text_symbols(&file, &mut symbols);
        sources.extend((symtab > 0).then_some(NameSource::Symtab));
        sources.extend((dynsym > 0).then_some(NameSource::Dynsym));
        match minidebug::symbols(&file, &mut symbols) {
            Ok(Some(n)) if n > 0 => sources.push(NameSource::MiniDebugInfo),
            Ok(_) => {}
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
        if go.is_some() {
            sources.push(NameSource::Pclntab);
        }
        // The PLT stubs, `function@plt`: below any name a symbol table gives the same address.
        symbols.extend(plt::plt_symbols(&file).into_iter().map(|s| {
            let end = s.address + s.size;
            (s, Binding::Local, end)
        }));
        let (mut dwarf_file, mut debug_file) = (None, None);
        let debug_owners = Owners::Of(vec![owner]);
        let mut looked = Vec::new();
        if has_dwarf(&file) {
            dwarf_file = Some((Root::Host, open.to_path_buf()));
            sources.push(NameSource::Dwarf);
        } else {
            let link = file
                .gnu_debuglink()
                .ok()
                .flatten()
                .map(|(name, _crc)| name.to_vec());
            let want = Wanted {
                path,
                root,
                build_id: build_id_bytes.as_deref(),
                link: link.as_deref(),
                owners: &debug_owners,
                debuginfod,
            };
            let found = debugfile::find(&want, &mut symbols, &mut problems, &mut looked);
            sources.extend(found.sources);
            if let Some((root, p)) = found.dwarf {
                debug_file = Some(p.clone());
                dwarf_file = Some((root, p));
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
            open: open.to_path_buf(),
            segments,
            build_id,
            symbols: SymbolTable::ranked_in_sections(symbols),
            dwarf_file,
            dwarf_owners,
            debug_file,
            go,
            sources,
            looked,
            problems,
            lazy: Mutex::new(Lazy::default()),
        })
    }

    /// Symbols of an ELF image held in memory (the vDSO), named `name`: its symbol tables, PLT stubs and
    /// `.eh_frame` function bounds; no DWARF.
    pub fn from_image(name: &str, image: &[u8]) -> Result<ElfSymbolizer, String> {
        let file = object::File::parse(image).map_err(|e| format!("cannot parse {name}: {e}"))?;
        let mut symbols = Vec::new();
        let [symtab, dynsym] = text_symbols(&file, &mut symbols);
        let lazy = Lazy {
            fdes: Some(FdeIndex::of_file(&file)),
            ..Lazy::default()
        };
        Ok(ElfSymbolizer {
            path: PathBuf::from(name),
            open: PathBuf::new(),
            segments: file
                .segments()
                .map(|s| (s.file_range().0, s.address()))
                .collect(),
            build_id: file.build_id().ok().flatten().map(hex),
            symbols: SymbolTable::ranked_in_sections(symbols),
            dwarf_file: None,
            dwarf_owners: Owners::Any,
            debug_file: None,
            go: None,
            sources: [(symtab, NameSource::Symtab), (dynsym, NameSource::Dynsym)]
                .into_iter()
                .filter_map(|(n, s)| (n > 0).then_some(s))
                .collect(),
            looked: Vec::new(),
            problems: Vec::new(),
            lazy: Mutex::new(lazy),
        })
    }

    /// The object's path (as its process names it).
    pub fn path(&self) -> &Path {
        &self.path
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
        if let Some((function, _)) = self.go_function(addr) {
            return Some(function);
        }
        let index = self.symbols.lookup_index(addr)?;
        self.demangled(&mut self.lock(), index)
    }

    /// The function of `addr` in the Go table, with the frames of `addr`.
    fn go_function(&self, addr: u64) -> Option<(Symbol, Vec<Frame>)> {
        let f = self.go.as_ref()?.lookup(addr)?;
        let symbol = Symbol {
            address: f.entry,
            size: f.end - f.entry,
            name: f.name,
        };
        Some((symbol, f.frames))
    }

    /// The `.eh_frame` function range `(start, end)` containing file virtual address `addr`: the function of an
    /// address that no symbol covers (see `super::fde`).
    pub fn fde_function(&self, addr: u64) -> Option<(u64, u64)> {
        let mut lazy = self.lock();
        lazy.fdes
            .get_or_insert_with(|| FdeIndex::read(&self.open))
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
        let mut symbol = self
            .symbols
            .lookup_index(addr)
            .and_then(|i| self.demangled(&mut lazy, i));
        let mut frames = Vec::new();
        if let Some(dwarf) = self.dwarf(&mut lazy).filter(|_| dwarf::can_look_up(addr)) {
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
        // Go code is named as Go names it (`runtime.morestack`, where an external linker's `.symtab` says
        // `runtime.morestack.abi0`): what `go tool addr2line` and tracebacks print, stripped or not.
        if let Some((function, go_frames)) = self.go_function(addr) {
            if frames.is_empty() {
                frames = go_frames;
            }
            symbol = Some(function);
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
            let loaded = self.dwarf_file.as_ref().map(|(root, p)| {
                dwarf::load_in(root, p, &self.dwarf_owners)
                    .map_err(|e| format!("{}: {e}", p.display()))
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

    /// Where the names of this object come from, in a fixed order.
    pub fn name_sources(&self) -> Vec<NameSource> {
        let mut all = self.sources.clone();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Why this object has no names, when it has none: what it lacks and where its debug file was looked for.
    pub fn unnamed_reason(&self) -> Option<String> {
        if !self.sources.is_empty() {
            return None;
        }
        let mut why =
            "stripped: no .symtab, .dynsym, .gnu_debugdata or .gopclntab names".to_string();
        if self.build_id.is_none() {
            why.push_str("; no build-id to find a debug file by");
        }
        if !self.looked.is_empty() {
            why.push_str("; no debug file: ");
            why.push_str(&self.looked.join(", "));
        }
        Some(why)
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
        let found = self
            .dwarf(&mut lazy)
            .and_then(|d| {
                if !dwarf::can_look_up(addr) {
                    return None;
                }
                let loc = d.find_location(addr).ok()??;
                Some((loc.file?.to_string(), loc.line?))
            })
            .or_else(|| {
                let inner = self.go_function(addr)?.1.into_iter().next()?;
                Some((inner.file?, inner.line?))
            });
        lazy.locations.insert(addr, found.clone());
        found
    }
}

#[cfg(test)]
mod tests;
