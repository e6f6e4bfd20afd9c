//! Symbolization: runtime address → module offset → function (demangled), inlined frames, file and line.
//!
//! **ELF objects** (executables, PIE or not, and shared libraries). A position-independent object is loaded at a
//! random base, so a sampled address must be translated before it can be looked up in the file's symbol table or
//! DWARF. An executable mapping in `/proc/PID/maps` starts at the page that holds the start of its `PT_LOAD`
//! segment: that segment is the one whose `p_offset` lies in `[mapping offset, mapping offset + mapping size)`.
//! Its first byte is at run time `mapping start + (p_offset − mapping offset)` and in the file at `p_vaddr`; the
//! difference is the load bias, and `file virtual address = runtime − bias`. This holds whether or not `p_vaddr`
//! equals `p_offset`. (Looking the file offset up in every segment is not enough: the page-aligned head of the
//! mapping also holds the tail of the previous segment's bytes, which that segment maps at another address.)
//!
//! Debug information is taken from the object itself when it has DWARF; otherwise from a separate debug file
//! found by build-id (`/usr/lib/debug/.build-id/xx/yyyy.debug`) or by `.gnu_debuglink` (next to the object, in
//! its `.debug/` directory, or under `/usr/lib/debug/` + the object's directory). Function names come from the
//! symbol tables (`.symtab`, then `.dynsym`, of the object and of its debug file); when nothing names an address
//! it is shown as `module+0xOFFSET`.
//!
//! **The kernel** is symbolized from `/proc/kallsyms` (text symbols of the kernel and its loaded modules).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use addr2line::Loader;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::report::Frame;

/// The running executable, as the kernel sees it (valid even if the file was moved or replaced).
pub const SELF_EXE: &str = "/proc/self/exe";

/// Where distributions install separate debug files.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// Exclusive end.
    pub end: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// The mapped file (empty for anonymous memory; `[vdso]` and the like for special mappings).
    pub path: String,
}

impl Mapping {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    /// True for an executable mapping.
    pub fn is_executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// True when the mapping is backed by a file (not anonymous, not `[vdso]`/`[stack]`…).
    #[allow(dead_code)] // The recorder now learns mappings from the kernel's records.
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }

    /// Parse one line.
    pub fn parse(line: &str) -> Option<Mapping> {
        // start-end perms offset dev inode [path]; the path may contain spaces and is padded on the left.
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?.to_string();
        let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
        let _dev = fields.next()?;
        let _inode = fields.next()?;
        let path = fields.next().unwrap_or("").trim_start().to_string();
        Some(Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            perms,
            offset,
            path,
        })
    }
}

/// Every mapping of process `pid` (`self` for this process).
pub fn read_maps(pid: &str) -> std::io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(text.lines().filter_map(Mapping::parse).collect())
}

/// The executable mapping of this process that contains `addr` (for a function of ntprof: ntprof's text).
pub fn executable_mapping_containing(addr: u64) -> Result<Mapping, String> {
    let maps = read_maps("self").map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    maps.into_iter()
        .find(|m| m.is_executable() && m.start <= addr && addr < m.end)
        .ok_or_else(|| format!("no executable mapping in /proc/self/maps contains {addr:#x}"))
}

/// The load bias of `mapping`: runtime − file virtual address, from the `PT_LOAD` segments given as
/// `(p_offset, p_vaddr)`. The segment the mapping was made for is the first whose `p_offset` lies inside it.
pub fn load_bias(mapping: &Mapping, segments: impl IntoIterator<Item = (u64, u64)>) -> Option<u64> {
    segments
        .into_iter()
        .find(|&(offset, _)| offset >= mapping.offset && offset - mapping.offset < mapping.size())
        .map(|(offset, vaddr)| (mapping.start + (offset - mapping.offset)).wrapping_sub(vaddr))
}

/// A symbol-table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Start address (file virtual address for ELF objects, runtime address for the kernel).
    pub address: u64,
    /// Size in bytes (0 when the table does not say).
    pub size: u64,
    /// Demangled name.
    pub name: String,
}

/// A sorted symbol table with a containment lookup.
#[derive(Debug, Default)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

impl SymbolTable {
    /// Build from unsorted entries (duplicates at one address: the first named wins; sized entries preferred).
    pub fn new(mut symbols: Vec<Symbol>) -> SymbolTable {
        symbols.sort_by(|a, b| {
            a.address
                .cmp(&b.address)
                .then(b.size.cmp(&a.size))
                .then(a.name.cmp(&b.name))
        });
        symbols.dedup_by_key(|s| s.address);
        SymbolTable { symbols }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// The symbol that contains `addr`: the last one starting at or below it, if its size covers `addr` (a
    /// symbol without a size extends to the next symbol).
    pub fn lookup(&self, addr: u64) -> Option<&Symbol> {
        let i = self.symbols.partition_point(|s| s.address <= addr);
        let sym = self.symbols.get(i.checked_sub(1)?)?;
        let end = if sym.size > 0 {
            sym.address + sym.size
        } else {
            self.symbols.get(i).map_or(u64::MAX, |next| next.address)
        };
        (addr < end).then_some(sym)
    }
}

/// Demangle a Rust or C++ symbol name (other names unchanged).
pub fn demangle(name: &str) -> String {
    addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
}

fn elf_text_symbols(file: &object::File<'_>) -> Vec<Symbol> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && !s.is_undefined())
        .filter_map(|s| {
            let name = s.name().ok()?;
            (!name.is_empty()).then(|| Symbol {
                address: s.address(),
                size: s.size(),
                name: demangle(name),
            })
        })
        .collect()
}

fn has_dwarf(file: &object::File<'_>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.file_range().is_some())
        || file
            .section_by_name(".debug_line")
            .is_some_and(|s| s.size() > 0 && s.file_range().is_some())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Candidate separate debug files of `path`, in the order gdb searches them.
fn debug_file_candidates(
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

/// Symbols and line information of one ELF object.
pub struct ElfSymbolizer {
    path: PathBuf,
    /// `(p_offset, p_vaddr)` of each `PT_LOAD` segment.
    segments: Vec<(u64, u64)>,
    build_id: Option<String>,
    symbols: SymbolTable,
    /// DWARF of the object or of its separate debug file.
    dwarf: Option<Loader>,
    debug_file: Option<PathBuf>,
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
    /// Read the program headers and symbol tables of `path` and open its DWARF (its own, or a separate debug
    /// file found by build-id or `.gnu_debuglink`).
    pub fn open(path: &Path) -> Result<ElfSymbolizer, String> {
        let data =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = object::File::parse(&*data)
            .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
        let segments = file
            .segments()
            .map(|s| (s.file_range().0, s.address()))
            .collect();
        let build_id_bytes = file.build_id().ok().flatten();
        let build_id = build_id_bytes.map(hex);
        let mut symbols = elf_text_symbols(&file);
        let (dwarf, debug_file) = if has_dwarf(&file) {
            (Loader::new(path).ok(), None)
        } else {
            let link = file.gnu_debuglink().ok().flatten().map(|(name, _crc)| name);
            let mut found = (None, None);
            for candidate in debug_file_candidates(path, build_id_bytes, link) {
                if candidate == path || !candidate.is_file() {
                    continue;
                }
                let Ok(dbg) = std::fs::read(&candidate) else {
                    continue;
                };
                let Ok(dfile) = object::File::parse(&*dbg) else {
                    continue;
                };
                // A debug file for another build would give wrong lines: the build-ids must agree when both
                // have one.
                if let (Some(a), Ok(Some(b))) = (build_id_bytes, dfile.build_id()) {
                    if a != b {
                        continue;
                    }
                }
                symbols.extend(elf_text_symbols(&dfile));
                if has_dwarf(&dfile) {
                    found = (Loader::new(&candidate).ok(), Some(candidate));
                    break;
                }
            }
            found
        };
        Ok(ElfSymbolizer {
            path: path.to_path_buf(),
            segments,
            build_id,
            symbols: SymbolTable::new(symbols),
            dwarf,
            debug_file,
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

    /// Everything known about file virtual address `addr`: the containing symbol, and the DWARF frames
    /// (innermost first) with their locations.
    pub fn resolve(&self, addr: u64) -> Resolved {
        let symbol = self.symbols.lookup(addr).cloned();
        let mut frames = Vec::new();
        if let Some(dwarf) = &self.dwarf {
            if let Ok(mut iter) = dwarf.find_frames(addr) {
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
        Resolved { symbol, frames }
    }

    /// The file and line of `addr` (the innermost frame's location).
    pub fn location(&self, addr: u64) -> Option<(String, u32)> {
        let loc = self.dwarf.as_ref()?.find_location(addr).ok()??;
        Some((loc.file?.to_string(), loc.line?))
    }
}

/// What is known about one address.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    /// The symbol-table entry containing it.
    pub symbol: Option<Symbol>,
    /// DWARF frames, innermost (inlined) first, the real function last; empty without line information.
    pub frames: Vec<Frame>,
}

/// The kernel's text symbols from `/proc/kallsyms`, and the kernel modules of `/proc/modules`.
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// Symbols per module (`[kernel]` for the kernel image).
    pub modules: HashMap<String, SymbolTable>,
    /// The kernel image's text `[_stext, _etext)`.
    pub text: Option<(u64, u64)>,
    /// Loaded modules: name, start, size.
    pub loaded: Vec<(String, u64, u64)>,
}

/// The name the kernel image has in reports.
pub const KERNEL_MODULE: &str = "[kernel]";

impl Kallsyms {
    /// Parse `/proc/kallsyms` and `/proc/modules` (the addresses are zero unless the reader is privileged).
    pub fn load() -> Result<Kallsyms, String> {
        let syms = std::fs::read_to_string("/proc/kallsyms")
            .map_err(|e| format!("cannot read /proc/kallsyms: {e}"))?;
        let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        Ok(Kallsyms::parse(&syms, &modules))
    }

    /// Parse the texts of `/proc/kallsyms` and `/proc/modules`.
    pub fn parse(kallsyms: &str, modules: &str) -> Kallsyms {
        let mut per: HashMap<String, Vec<Symbol>> = HashMap::new();
        let (mut stext, mut etext) = (None, None);
        for line in kallsyms.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            match name {
                "_stext" => stext = Some(addr),
                "_etext" => etext = Some(addr),
                _ => {}
            }
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let module = f
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_string())
                .unwrap_or_else(|| KERNEL_MODULE.to_string());
            per.entry(module).or_default().push(Symbol {
                address: addr,
                size: 0,
                name: name.to_string(),
            });
        }
        let loaded = modules
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let size: u64 = f.get(1)?.parse().ok()?;
                let addr = parse_hex(f.get(5)?)?;
                (addr != 0 && size > 0).then(|| (f[0].to_string(), addr, size))
            })
            .collect();
        Kallsyms {
            modules: per
                .into_iter()
                .map(|(k, v)| (k, SymbolTable::new(v)))
                .collect(),
            text: stext.zip(etext).filter(|(a, b)| a < b),
            loaded,
        }
    }

    /// The function of module `module` containing runtime address `addr`.
    pub fn lookup(&self, module: &str, addr: u64) -> Option<&Symbol> {
        self.modules.get(module)?.lookup(addr)
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// A function as the demo reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Function {
    /// Its start address in the file (`None` when only DWARF knew its name, or nothing did).
    pub start: Option<u64>,
    /// Its demangled name (`[unknown]` when nothing names it).
    pub name: String,
}

/// Symbolizes addresses of one executable mapping of this process (`ntprof demo`).
pub struct Symbolizer {
    mapping: Mapping,
    bias: u64,
    elf: ElfSymbolizer,
}

impl Symbolizer {
    /// Open `/proc/self/exe` for the mapping.
    pub fn new(mapping: Mapping) -> Result<Symbolizer, String> {
        let elf = ElfSymbolizer::open(Path::new(SELF_EXE))?;
        let bias = elf.bias(&mapping).ok_or_else(|| {
            format!(
                "no PT_LOAD segment of {SELF_EXE} starts in the mapping at {:#x} (file offset {:#x})",
                mapping.start, mapping.offset
            )
        })?;
        Ok(Symbolizer { mapping, bias, elf })
    }

    /// The mapping this symbolizer covers.
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// The virtual address in the executable file of a runtime address inside the mapping.
    pub fn file_address(&self, runtime: u64) -> Option<u64> {
        let m = &self.mapping;
        (m.start..m.end)
            .contains(&runtime)
            .then(|| runtime.wrapping_sub(self.bias))
    }

    /// The function that contains a runtime address: the symbol table first, then the outermost DWARF frame.
    pub fn function(&self, runtime: u64) -> Function {
        let Some(addr) = self.file_address(runtime) else {
            return Function {
                start: None,
                name: "[unknown]".to_string(),
            };
        };
        let r = self.elf.resolve(addr);
        match (r.symbol, r.frames.last()) {
            (Some(s), _) => Function {
                start: Some(s.address),
                name: s.name,
            },
            (None, Some(f)) => Function {
                start: None,
                name: f.function.clone(),
            },
            (None, None) => Function {
                start: None,
                name: "[unknown]".to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let m = Mapping::parse(
            "5581f7a00000-5581f7a6b000 r-xp 0001b000 fd:01 1234                       /usr/bin/my prog",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x5581f7a00000, 0x5581f7a6b000, 0x1b000)
        );
        assert_eq!(
            (m.perms.as_str(), m.path.as_str()),
            ("r-xp", "/usr/bin/my prog")
        );
        assert!(m.is_executable() && m.is_file());
        let anon = Mapping::parse("7ffd1000-7ffd2000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(anon.path, "");
        assert!(!anon.is_file());
    }

    #[test]
    fn bias_from_the_segment_that_starts_in_the_mapping() {
        let text = |start, end, offset| Mapping {
            start,
            end,
            perms: "r-xp".into(),
            offset,
            path: String::new(),
        };
        // A non-PIE executable whose text segment has p_vaddr != p_offset: the mapping's first page also holds
        // the tail of the read-only segment at file offset 0 (which is mapped at 0x200000).
        let segments = [
            (0, 0x20_0000),
            (0x5_0590, 0x25_1590),
            (0x18_1b80, 0x38_3b80),
        ];
        assert_eq!(
            load_bias(&text(0x25_1000, 0x38_3000, 0x5_0000), segments),
            Some(0)
        );
        // A PIE loaded at 0x5555_5555_4000 with p_vaddr == p_offset.
        let pie = [(0, 0), (0x5_b000, 0x5_b000), (0x18_b000, 0x18_c000)];
        assert_eq!(
            load_bias(&text(0x5555_555a_f000, 0x5555_556e_1000, 0x5_b000), pie),
            Some(0x5555_5555_4000)
        );
        assert_eq!(load_bias(&text(0x1000, 0x2000, 0x9_0000), pie), None);
    }

    #[test]
    fn symbol_table_containment() {
        let t = SymbolTable::new(vec![
            Symbol {
                address: 0x200,
                size: 0,
                name: "b".into(),
            },
            Symbol {
                address: 0x100,
                size: 0x10,
                name: "a".into(),
            },
            Symbol {
                address: 0x300,
                size: 0x20,
                name: "c".into(),
            },
        ]);
        assert_eq!(t.lookup(0x100).map(|s| s.name.as_str()), Some("a"));
        assert_eq!(t.lookup(0x10f).map(|s| s.name.as_str()), Some("a"));
        assert_eq!(t.lookup(0x110), None, "past a's size");
        assert_eq!(
            t.lookup(0x2ff).map(|s| s.name.as_str()),
            Some("b"),
            "unsized: up to the next"
        );
        assert_eq!(t.lookup(0x320), None);
        assert_eq!(t.lookup(0xff), None);
    }

    #[test]
    fn kallsyms_text() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\nffffffff81000100 T do_syscall_64\nffffffff81000200 t helper\n\
             ffffffff82000000 T _etext\nffffffff82000010 D some_data\nffffffffc0000000 t ext4_read\t[ext4]\n",
            "ext4 1000 1 - Live 0xffffffffc0000000\n",
        );
        assert_eq!(k.text, Some((0xffff_ffff_8100_0000, 0xffff_ffff_8200_0000)));
        assert_eq!(
            k.lookup(KERNEL_MODULE, 0xffff_ffff_8100_0150).unwrap().name,
            "do_syscall_64"
        );
        assert_eq!(
            k.lookup("ext4", 0xffff_ffff_c000_0004).unwrap().name,
            "ext4_read"
        );
        assert_eq!(
            k.loaded,
            vec![("ext4".to_string(), 0xffff_ffff_c000_0000, 1000)]
        );
    }

    #[test]
    fn own_function_is_named() {
        let addr = own_function_is_named as *const () as u64;
        let mapping = executable_mapping_containing(addr).unwrap();
        let sym = Symbolizer::new(mapping).unwrap();
        let f = sym.function(addr);
        assert!(f.name.ends_with("own_function_is_named"), "{f:?}");
        assert_eq!(f.start, sym.file_address(addr));
    }

    #[test]
    fn own_lines_are_found() {
        let addr = own_lines_are_found as *const () as u64;
        let mapping = executable_mapping_containing(addr).unwrap();
        let elf = ElfSymbolizer::open(Path::new(SELF_EXE)).unwrap();
        let bias = elf.bias(&mapping).unwrap();
        let r = elf.resolve(addr - bias);
        let last = r
            .frames
            .last()
            .expect("frames (release builds keep line tables)");
        assert!(last.function.ends_with("own_lines_are_found"), "{r:?}");
        assert!(
            last.file.as_deref().unwrap_or("").ends_with("symbols.rs"),
            "{r:?}"
        );
    }
}
