//! Symbolization: each location (module, address in the module) with samples → the function, its inlined
//! frames, file and line. ELF files through their symbol tables and DWARF, the kernel through kallsyms, JIT code
//! through the process's jitdump file (by time, resolved when the run ended) or its perf map file, the vDSO
//! through ntprof's own copy of it ([`crate::symbols::vdso`]). Code of an ELF
//! file that no symbol names is named by the start of the `.eh_frame` function that holds it, `module+0xSTART`; a
//! location nothing covers is `module+0xOFFSET`.

use std::collections::HashMap;
use std::sync::Arc;

use super::cache::{SymbolCache, ToOpen};

use crate::report::Frame;
use crate::symbols::{ElfSymbolizer, Kallsyms, Mapping, NameSource, vdso};
use crate::tree::jit::{self, PerfMap};
use crate::tree::jitdump::JitState;
use crate::tree::space::{Module, ModuleKind};

/// What DWARF calls a frame it cannot name.
const UNKNOWN: &str = "[unknown]";

/// Files at one path in different roots (the host's libc and a container's) are different modules: each one
/// not in the host's root (or, without one there, in the first root seen) is named `NAME [root of pid N]`, N
/// the process it was first opened for, so that no row of the report mixes them.
fn apart_by_root(modules: &[Module], placed: &mut [Placed]) {
    let mut first: HashMap<(String, String), i32> = HashMap::new();
    for m in modules {
        if let Some(Ok(o)) = &m.object {
            let root = o.root.key();
            let key = (m.name.clone(), m.path.clone());
            let seen = first.entry(key).or_insert(root);
            if root == -1 {
                *seen = -1;
            }
        }
    }
    for (m, p) in modules.iter().zip(placed) {
        if let Some(Ok(o)) = &m.object
            && first.get(&(m.name.clone(), m.path.clone())) != Some(&o.root.key())
        {
            p.name = format!("{} [root of pid {}]", p.name, o.pid);
        }
    }
}

/// `module+0xOFFSET`.
pub fn module_offset_name(module: &str, offset: u64) -> String {
    format!("{module}+{offset:#x}")
}

/// How the report shows one module: its name and path, where its addresses are, and how they are symbolized.
pub struct Placed {
    /// Name in the report (`[JIT] pid N` for anonymous memory named by a perf map).
    pub name: String,
    /// Path in the report.
    pub path: String,
    /// Runtime start, end and file offset of its first mapping.
    pub first: (u64, u64, u64),
    /// Runtime address − address in the object's own space, for the first mapping.
    pub bias: u64,
    /// The GNU build-id.
    pub build_id: Option<String>,
    /// Where its names come from.
    pub names: Vec<String>,
    /// Why nothing names it, when nothing does.
    pub unnamed: Option<String>,
}

/// One symbolized location.
#[derive(Clone, Debug)]
pub struct Located {
    /// Runtime address (in the module's first mapping).
    pub address: u64,
    /// The address in the object's own space.
    pub offset: u64,
    /// The function.
    pub function: String,
    /// Runtime start of the function (the location's address when no symbol holds it).
    pub function_address: u64,
    /// Its size, 0 when unknown.
    pub function_size: u64,
    /// The function's first line, when known.
    pub function_line: Option<(String, u32)>,
    /// Frames, innermost (inlined) first; empty when nothing is known of the address.
    pub frames: Vec<Frame>,
}

/// Symbolizers for every module of a run, opened once.
pub struct Symbolizers<'a> {
    modules: &'a [Module],
    elf: HashMap<String, Option<Arc<ElfSymbolizer>>>,
    /// ntprof's own vDSO, when a `[vdso]` with samples has its size.
    vdso: Option<ElfSymbolizer>,
    /// Why objects could not be opened (their code is named `module+0x…`).
    unopened: Vec<String>,
    /// Perf maps the run's end did not read already.
    perf_maps: HashMap<u32, Option<PerfMap>>,
    jit: &'a JitState,
    kallsyms: Option<&'a Kallsyms>,
    /// Per module: how it is placed.
    pub placed: Vec<Placed>,
}

impl<'a> Symbolizers<'a> {
    /// Open what the modules in `used` need (the ELF files in parallel: loading DWARF is most of the cost),
    /// reusing those `cache` holds already.
    pub fn open(
        modules: &'a [Module],
        used: &[bool],
        kallsyms: Option<&'a Kallsyms>,
        jit: &'a JitState,
        cache: &SymbolCache,
    ) -> Self {
        let mut unopened = Vec::new();
        let mut targets: Vec<ToOpen<'_>> = Vec::new();
        for (m, _) in modules
            .iter()
            .zip(used)
            .filter(|(m, u)| **u && m.kind == ModuleKind::File)
        {
            match &m.object {
                Some(Ok(o)) => targets.push(ToOpen::Object(o)),
                Some(Err(e)) => unopened.push(e.clone()),
                None => targets.push(ToOpen::Path(&m.path)),
            }
        }
        targets.sort_unstable_by_key(ToOpen::key);
        targets.dedup_by_key(|t| t.key());
        unopened.sort_unstable();
        unopened.dedup();
        let opened = cache.open_all(&targets);
        let mut elf = HashMap::new();
        for (path, r) in opened {
            if let Err(e) = &r {
                unopened.push(e.clone());
            }
            elf.insert(path, r.ok());
        }
        let mut perf_maps = HashMap::new();
        for (m, _) in modules.iter().zip(used).filter(|(_, u)| **u) {
            if let ModuleKind::Anon { pid } = m.kind
                && jit.perf_map(pid).is_none()
            {
                perf_maps.entry(pid).or_insert_with(|| {
                    let place = jit.places.get(&pid).cloned().unwrap_or_default();
                    PerfMap::load(pid, &place).and_then(Result::ok)
                });
            }
        }
        let vdso = modules
            .iter()
            .zip(used)
            .find(|(m, u)| **u && m.kind == ModuleKind::Special && m.path == vdso::VDSO)
            .and_then(|(m, _)| vdso::symbolizer(m.first.1.wrapping_sub(m.first.0)));
        let mut s = Symbolizers {
            modules,
            elf,
            vdso,
            unopened,
            perf_maps,
            jit,
            kallsyms,
            placed: Vec::new(),
        };
        s.placed = modules.iter().map(|m| s.place(m)).collect();
        apart_by_root(modules, &mut s.placed);
        s
    }

    /// The report's notes on the objects that could not be read, or not all of them: their code, or the part
    /// a broken table covers, is named `module+0x…` (without inlined frames and lines when the DWARF is lost).
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .unopened
            .iter()
            .map(|e| format!("no names for the code of an object, shown as module+0x…: {e}"))
            .collect();
        let mut elfs: Vec<&ElfSymbolizer> = self.elf.values().flatten().map(|e| &**e).collect();
        elfs.sort_by_key(|e| e.path());
        for elf in elfs {
            let p = elf.path().display();
            notes.extend(
                elf.problems()
                    .into_iter()
                    .map(|e| format!("names in {p} may be incomplete: {e}")),
            );
        }
        notes
    }

    /// The perf map of `pid`, if it has one.
    fn perf_map(&self, pid: u32) -> Option<&PerfMap> {
        match self.jit.perf_map(pid) {
            Some(map) => map,
            None => self.perf_maps.get(&pid).and_then(Option::as_ref),
        }
    }

    /// The symbolizer of a mapped file's module: its checked object's (none when it was refused).
    fn elf_of(&self, m: &Module) -> Option<&ElfSymbolizer> {
        let key = match &m.object {
            Some(Ok(o)) => ToOpen::Object(o).key(),
            Some(Err(_)) => return None,
            None => m.path.clone(),
        };
        self.elf.get(&key).and_then(Option::as_deref)
    }

    fn place(&self, m: &Module) -> Placed {
        let (start, end, pgoff) = m.first;
        let (mut name, mut path) = (m.name.clone(), m.path.clone());
        let (names, unnamed) = self.name_sources(m);
        let (bias, build_id) = match &m.kind {
            ModuleKind::File => {
                let elf = self.elf_of(m);
                let mapping = Mapping {
                    start,
                    end,
                    perms: "r-xp".into(),
                    offset: pgoff,
                    path: m.path.clone(),
                };
                let bias = elf
                    .and_then(|e| e.bias(&mapping))
                    .unwrap_or(start.wrapping_sub(pgoff));
                (bias, elf.and_then(|e| e.build_id().map(str::to_string)))
            }
            ModuleKind::Special => match self.vdso.as_ref().filter(|_| m.path == vdso::VDSO) {
                Some(elf) => {
                    let mapping = Mapping {
                        start,
                        end,
                        perms: "r-xp".into(),
                        offset: pgoff,
                        path: m.path.clone(),
                    };
                    let bias = elf.bias(&mapping).unwrap_or(start.wrapping_sub(pgoff));
                    (bias, elf.build_id().map(str::to_string))
                }
                None => (start.wrapping_sub(pgoff), None),
            },
            ModuleKind::Anon { pid } => {
                // With a dump that named some of the process's JIT code, the rest is in the same module row.
                if let Some(dump) = self.jit.dump_path(*pid) {
                    name = jit::jit_module_name(*pid);
                    path = dump.to_string();
                } else if self.perf_map(*pid).is_some() {
                    name = jit::jit_module_name(*pid);
                    let place = self.jit.places.get(pid).cloned().unwrap_or_default();
                    path = jit::place_path(*pid, &place);
                }
                (0, None)
            }
            ModuleKind::JitDump { dump, .. } => {
                path = self.jit.path(*dump).unwrap_or_default().to_string();
                (0, None)
            }
            ModuleKind::Kernel(_) => (0, None),
            ModuleKind::Range => (start, None),
        };
        Placed {
            name,
            path,
            first: m.first,
            bias,
            build_id,
            names: names.iter().map(|s| s.as_str().to_string()).collect(),
            unnamed,
        }
    }

    /// Where the names of `m` come from, and why nothing names it when nothing does.
    fn name_sources(&self, m: &Module) -> (Vec<NameSource>, Option<String>) {
        let of_elf = |elf: Option<&ElfSymbolizer>, refused: Option<&String>| match elf {
            Some(e) => (e.name_sources(), e.unnamed_reason()),
            None => (
                Vec::new(),
                Some(match refused {
                    Some(e) => format!("not read: {e}"),
                    None => "the file could not be read (see the notes)".to_string(),
                }),
            ),
        };
        match &m.kind {
            ModuleKind::File => {
                let refused = match &m.object {
                    Some(Err(e)) => Some(e),
                    _ => None,
                };
                of_elf(self.elf_of(m), refused)
            }
            ModuleKind::Special if m.path == vdso::VDSO => of_elf(self.vdso.as_ref(), None),
            ModuleKind::Special => (
                Vec::new(),
                Some("a kernel-made mapping with no file".into()),
            ),
            ModuleKind::Anon { pid } => {
                let mut names = Vec::new();
                if self.jit.dump_path(*pid).is_some() {
                    names.push(NameSource::Jitdump);
                }
                if self.perf_map(*pid).is_some() {
                    names.push(NameSource::PerfMap);
                }
                let why = names.is_empty().then(|| {
                    format!(
                        "anonymous memory (JIT code?) and process {pid} wrote no perf map (/tmp/perf-{pid}.map)                          or jitdump file"
                    )
                });
                (names, why)
            }
            ModuleKind::JitDump { .. } => (vec![NameSource::Jitdump], None),
            ModuleKind::Kernel(_) => match self.kallsyms {
                Some(_) => (vec![NameSource::Kallsyms], None),
                None => (Vec::new(), Some("/proc/kallsyms could not be read".into())),
            },
            ModuleKind::Range => (
                Vec::new(),
                Some("a raw address range: no file names it".into()),
            ),
        }
    }

    /// The runtime address (in the module's first mapping) of `offset` in module `module`.
    fn runtime(&self, module: u32, offset: u64) -> u64 {
        let m = &self.modules[module as usize];
        match m.kind {
            ModuleKind::File | ModuleKind::Special => {
                m.first.0.wrapping_add(offset.wrapping_sub(m.first.2))
            }
            ModuleKind::Range => m.first.0.wrapping_add(offset),
            ModuleKind::Anon { .. } | ModuleKind::Kernel(_) => offset,
            ModuleKind::JitDump { dump, .. } => {
                self.jit.locate(dump, offset).map_or(offset, |f| f.address)
            }
        }
    }

    /// Symbolize `offset` of module `module`.
    pub fn locate(&self, module: u32, offset: u64) -> Located {
        let m = &self.modules[module as usize];
        let placed = &self.placed[module as usize];
        let address = self.runtime(module, offset);
        let object = address.wrapping_sub(placed.bias);
        let mut located = Located {
            address,
            offset: object,
            function: module_offset_name(&placed.name, object),
            function_address: address,
            function_size: 0,
            function_line: None,
            frames: Vec::new(),
        };
        match &m.kind {
            ModuleKind::File => {
                if let Some(elf) = self.elf_of(m) {
                    Self::elf_frames(elf, &placed.name, placed.bias, object, &mut located);
                }
            }
            ModuleKind::Kernel(name) => {
                if let Some(sym) = self.kallsyms.and_then(|k| k.lookup(name, address)) {
                    located.function = sym.name.clone();
                    located.function_address = sym.address;
                    located.frames = vec![frame(&sym.name)];
                }
            }
            ModuleKind::Anon { pid } => {
                let named = self.perf_map(*pid).and_then(|j| j.lookup(address));
                located.function = match named {
                    Some((name, start)) => {
                        located.function_address = start;
                        located.frames = vec![frame(name)];
                        name.to_string()
                    }
                    None => "[unknown]".to_string(),
                };
            }
            ModuleKind::Special if m.path == vdso::VDSO && self.vdso.is_some() => {
                if let Some(elf) = &self.vdso {
                    Self::elf_frames(elf, &placed.name, placed.bias, object, &mut located);
                }
            }
            ModuleKind::Special if m.path == crate::tree::wait::WAIT_MODULE => {
                let name = crate::tree::wait::wait_name(offset);
                located.function = name.clone();
                located.frames = vec![frame(&name)];
            }
            ModuleKind::JitDump { dump, .. } => {
                if let Some(f) = self.jit.locate(*dump, offset) {
                    located.function = f.name.to_string();
                    located.function_address = f.start;
                    located.function_size = f.size;
                    located.function_line =
                        f.first_line.map(|(file, line)| (file.to_string(), line));
                    located.frames = vec![Frame {
                        function: f.name.to_string(),
                        file: f.line.map(|l| l.0.to_string()),
                        line: f.line.map(|l| l.1),
                        inlined: false,
                    }];
                }
            }
            ModuleKind::Special | ModuleKind::Range => {}
        }
        // One name per function in every format: a location named without frames (by `.eh_frame` bounds, a
        // perf map's miss) gets its name as its one frame, so that the CSV, the buckets of JSON and the stacks
        // show the name the function tables show. An address nothing named keeps no frame.
        if located.frames.is_empty() && located.function != module_offset_name(&placed.name, object)
        {
            located.frames.push(frame(&located.function));
        }
        located
    }

    fn elf_frames(
        elf: &ElfSymbolizer,
        module: &str,
        bias: u64,
        object: u64,
        located: &mut Located,
    ) {
        let r = elf.resolve(object);
        let mut frames = r.frames;
        if frames.is_empty()
            && let Some(s) = &r.symbol
        {
            frames.push(frame(&s.name));
        }
        match (&r.symbol, frames.last()) {
            (Some(s), _) => {
                // The outermost frame is the symbol's function: named as the symbol table names it, which
                // prefers the global name (`qsort_r`) to the alias DWARF may carry (`__GI___qsort_r`), so
                // that stacks and the flat table agree.
                if let Some(outer) = frames.last_mut() {
                    outer.function = s.name.clone();
                }
                located.function = s.name.clone();
                located.function_address = s.address.wrapping_add(bias);
                located.function_size = s.size;
                located.function_line = elf.location(s.address);
            }
            (None, Some(f)) if f.function != UNKNOWN => {
                located.function = f.function.clone();
                located.function_line = f.file.clone().zip(f.line);
            }
            (None, _) => {
                // No name, but `.eh_frame` knows the function's bounds: one row per function, named by its
                // start, rather than one per sampled address.
                if let Some((start, end)) = elf.fde_function(object) {
                    located.function = module_offset_name(module, start);
                    located.function_address = start.wrapping_add(bias);
                    located.function_size = end - start;
                    located.function_line = elf.location(start);
                }
                // The outermost frame is the function, as the tables name it.
                if let Some(last) = frames.last_mut() {
                    last.function = located.function.clone();
                }
            }
        }
        located.frames = frames;
    }
}

fn frame(name: &str) -> Frame {
    Frame {
        function: name.to_string(),
        file: None,
        line: None,
        inlined: false,
    }
}
