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
//! symbol tables (`.symtab`, then `.dynsym`, of the object and of its debug file). Code that no symbol covers
//! (a stripped program, a library's static functions) still has its functions' bounds in `.eh_frame` (`fde`):
//! such a function is named by its start, `module+0xSTART`; an address outside every symbol and FDE is shown as
//! `module+0xOFFSET`.
//!
//! **The vDSO** (`[vdso]`) is an ELF image without a file: ntprof's own copy, read from its memory, names it
//! (`vdso`).
//!
//! **The kernel** is symbolized from `/proc/kallsyms` (text symbols of the kernel and its loaded modules).
//!
//! **Speed.** Each module's symbol table is read once and indexed (`table`: sorted, one entry per address,
//! binary search), names are demangled when a lookup returns them, and DWARF is opened and consulted only for
//! addresses that need a line, with every answer cached per module (`elf`).
//!
//! **debuginfod.** With servers configured, an object whose debug file is on no disk has it fetched by
//! build-id and cached as elfutils' client caches it (`debuginfod`); it is used only when its build-id is the
//! object's.
//!
//! Rooms: `table` (the index and the choice among aliases), `elf` (ELF objects, DWARF), `debugfile` (the
//! separate debug file and where names came from), `debuginfod` (fetching it), `fde` (function bounds from
//! `.eh_frame`), `kernel` (kallsyms).

use std::borrow::Cow;
use std::path::Path;

use crate::report::Frame;

pub(crate) mod debugfile;
pub mod debuginfod;
pub(crate) mod dwarf;
pub(crate) mod elf;
pub(crate) mod fde;
pub(crate) mod gopclntab;
#[cfg(test)]
pub(crate) mod hostile;
pub(crate) mod kernel;
pub(crate) mod minidebug;
pub(crate) mod plt;
mod process;
pub(crate) mod symtab;
pub(crate) mod table;
pub(crate) mod vdso;

pub use debugfile::NameSource;
pub use elf::ElfSymbolizer;
pub use kernel::{KERNEL_MODULE, Kallsyms};
pub use process::ProcessSymbolizer;
pub use table::Symbol;

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
    Ok(read_maps_text(&text))
}

/// Every mapping of a text in the format of `/proc/PID/maps`.
pub fn read_maps_text(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(Mapping::parse).collect()
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

/// Demangle a Rust or C++ symbol name (other names unchanged); a PLT stub's `@plt` stays after the name.
pub fn demangle(name: &str) -> String {
    if let Some(function) = name.strip_suffix(plt::SUFFIX) {
        return format!("{}{}", demangle(function), plt::SUFFIX);
    }
    addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
}

/// What is known about one address.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    /// The symbol-table entry containing it.
    pub symbol: Option<Symbol>,
    /// DWARF frames, innermost (inlined) first, the real function last; empty without line information.
    pub frames: Vec<Frame>,
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
        if let Some(s) = self.elf.symbol(addr) {
            return Function {
                start: Some(s.address),
                name: s.name,
            };
        }
        let name = self
            .elf
            .resolve(addr)
            .frames
            .last()
            .map(|f| f.function.clone());
        Function {
            start: None,
            name: name.unwrap_or_else(|| "[unknown]".to_string()),
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
            last.file
                .as_deref()
                .unwrap_or("")
                .ends_with("symbols/mod.rs"),
            "{r:?}"
        );
    }
}
