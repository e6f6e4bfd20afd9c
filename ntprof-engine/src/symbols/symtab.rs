//! An ELF object's function symbols (`.symtab`, `.dynsym`) read in one piece per table, whether it has DWARF,
//! and where its separate debug file may be.

use std::path::{Path, PathBuf};

use object::read::elf::SectionHeader;
use object::{Object, ObjectSection, ObjectSymbol, ReadRef, SymbolKind};

use super::DEBUG_ROOT;
use super::table::{Binding, Candidate, Symbol};

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
/// decoded directly. Returns how many came from each: `[.symtab, .dynsym]`.
pub fn text_symbols<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
    out: &mut Vec<Candidate>,
) -> [usize; 2] {
    let ends = section_ends(file);
    let end_of = |index: usize| ends.get(index).copied().unwrap_or(u64::MAX);
    let object::File::Elf64(elf) = file else {
        let before = out.len();
        text_symbols_generic(file, &end_of, out);
        // Not told apart there: counted as .symtab's.
        return [out.len() - before, 0];
    };
    let mut counts = [0; 2];
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
            counts[slot] += 1;
            // Special section indexes (absolute symbols, `SHN_XINDEX`) are past every section: no limit.
            out.push((
                Symbol {
                    address: value,
                    size: u64_at(entry, 16),
                    // Valid UTF-8 (nearly every name) is checked and copied at once; the rest lossily.
                    name: match std::str::from_utf8(bytes) {
                        Ok(name) => name.to_owned(),
                        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
                    },
                },
                binding,
                end_of(usize::from(shndx)),
            ));
        }
    }
    counts
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

/// Whether `file` has DWARF line or debug information of its own.
pub fn has_dwarf<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> bool {
    [".debug_info", ".debug_line"].iter().any(|name| {
        file.section_by_name(name)
            .is_some_and(|s| s.size() > 0 && s.file_range().is_some())
    })
}

/// `bytes` in lower-case hexadecimal (a build-id).
pub fn hex(bytes: &[u8]) -> String {
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
