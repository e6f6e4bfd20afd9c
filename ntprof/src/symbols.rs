//! The executable's text mapping, runtime address → file virtual address, and function names.
//!
//! A position-independent executable is loaded at a random base, so a sampled address must be translated before
//! it can be looked up in the file's symbol table or DWARF. The executable mapping in `/proc/self/maps` starts
//! at the page that holds the start of its `PT_LOAD` segment: that segment is the one whose `p_offset` lies in
//! `[mapping offset, mapping offset + mapping size)`. Its first byte is at run time
//! `mapping start + (p_offset − mapping offset)` and in the file at `p_vaddr`; the difference is the load bias,
//! and `file virtual address = runtime − bias`. This holds whether or not `p_vaddr` equals `p_offset`. (Looking
//! the file offset up in every segment is not enough: the page-aligned head of the mapping also holds the tail
//! of the previous segment's bytes, which that segment maps at another address.)

use std::borrow::Cow;

use addr2line::Loader;
use addr2line::fallible_iterator::FallibleIterator;
use object::{Object, ObjectSegment};

/// The running executable, as the kernel sees it (valid even if the file was moved or replaced).
pub const SELF_EXE: &str = "/proc/self/exe";

/// One line of `/proc/self/maps`.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// Exclusive end.
    pub end: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// The mapped file (empty for anonymous memory).
    pub path: String,
}

impl Mapping {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    fn parse(line: &str) -> Option<Mapping> {
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

/// The executable mapping of this process that contains `addr` (for a function of ntprof: ntprof's text).
pub fn executable_mapping_containing(addr: u64) -> Result<Mapping, String> {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    maps.lines()
        .filter_map(Mapping::parse)
        .find(|m| m.perms.as_bytes().get(2) == Some(&b'x') && m.start <= addr && addr < m.end)
        .ok_or_else(|| format!("no executable mapping in /proc/self/maps contains {addr:#x}"))
}

/// The load bias of `mapping`: runtime − file virtual address, from the `PT_LOAD` segments given as
/// `(p_offset, p_vaddr)`. The segment the mapping was made for is the first whose `p_offset` lies inside it.
fn load_bias(mapping: &Mapping, segments: impl IntoIterator<Item = (u64, u64)>) -> Option<u64> {
    segments
        .into_iter()
        .find(|&(offset, _)| offset >= mapping.offset && offset - mapping.offset < mapping.size())
        .map(|(offset, vaddr)| (mapping.start + (offset - mapping.offset)).wrapping_sub(vaddr))
}

/// A function as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Function {
    /// Its start address in the file (`None` when only DWARF knew its name, or nothing did).
    pub start: Option<u64>,
    /// Its demangled name (`[unknown]` when nothing names it).
    pub name: String,
}

/// Symbolizes addresses of one executable mapping of this process.
pub struct Symbolizer {
    mapping: Mapping,
    /// Runtime address − file virtual address, for every address of the mapping.
    bias: u64,
    loader: Loader,
}

impl Symbolizer {
    /// Read the program headers of `/proc/self/exe` and open it for symbol and DWARF lookups.
    pub fn new(mapping: Mapping) -> Result<Symbolizer, String> {
        let data = std::fs::read(SELF_EXE).map_err(|e| format!("cannot read {SELF_EXE}: {e}"))?;
        let file =
            object::File::parse(&*data).map_err(|e| format!("cannot parse {SELF_EXE}: {e}"))?;
        let segments = file.segments().map(|s| (s.file_range().0, s.address()));
        let bias = load_bias(&mapping, segments).ok_or_else(|| {
            format!(
                "no PT_LOAD segment of {SELF_EXE} starts in the mapping at {:#x} (file offset {:#x})",
                mapping.start, mapping.offset
            )
        })?;
        let loader =
            Loader::new(SELF_EXE).map_err(|e| format!("cannot load symbols of {SELF_EXE}: {e}"))?;
        Ok(Symbolizer {
            mapping,
            bias,
            loader,
        })
    }

    /// The mapping this symbolizer covers.
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// The virtual address in the executable file of a runtime address inside the mapping.
    pub fn file_address(&self, runtime: u64) -> Option<u64> {
        let m = &self.mapping;
        if runtime < m.start || runtime >= m.end {
            return None;
        }
        Some(runtime.wrapping_sub(self.bias))
    }

    /// The function that contains a runtime address: the symbol table first (it names the machine-code function,
    /// and gives its start), then the outermost DWARF frame.
    pub fn function(&self, runtime: u64) -> Function {
        let unknown = Function {
            start: None,
            name: "[unknown]".to_string(),
        };
        let Some(addr) = self.file_address(runtime) else {
            return unknown;
        };
        if let Some(sym) = self.loader.find_symbol_info(addr) {
            let name = addr2line::demangle_auto(Cow::Borrowed(sym.name()), None).into_owned();
            return Function {
                start: Some(sym.address()),
                name,
            };
        }
        let outermost = self
            .loader
            .find_frames(addr)
            .ok()
            .and_then(|frames| frames.last().ok().flatten())
            .and_then(|frame| {
                frame
                    .function
                    .and_then(|f| f.demangle().ok().map(Cow::into_owned))
            });
        match outermost {
            Some(name) => Function { start: None, name },
            None => unknown,
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
        let anon = Mapping::parse("7ffd1000-7ffd2000 rw-p 00000000 00:00 0").unwrap();
        assert_eq!(anon.path, "");
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
}
