//! Function boundaries from `.eh_frame`, for code that no symbol names.
//!
//! A stripped program, or the static functions of a library that keeps only `.dynsym`, has no symbol for much of
//! its code, yet it keeps its unwind information: every FDE (frame description entry) of `.eh_frame` covers one
//! function, `[initial_location, initial_location + address_range)` in the file's own virtual addresses. Those
//! ranges let the report give such a function one row, named by its start (`module+0xSTART`), instead of one
//! row per sampled address. The ranges are read once per object, sorted, and looked up by binary search.
//! (gimli is used through addr2line's re-export: the version addr2line builds, no second copy.)

use std::path::Path;

use addr2line::gimli::{BaseAddresses, CieOrFde, EhFrame, RunTimeEndian, UnwindSection};
use object::{Object, ObjectSection, ReadCache, ReadRef};

/// The function ranges of one object's `.eh_frame`, sorted by start.
#[derive(Debug, Default)]
pub struct FdeIndex {
    /// `(start, end)` in file virtual addresses, end exclusive, sorted by start.
    ranges: Vec<(u64, u64)>,
}

impl FdeIndex {
    /// The FDE ranges of the ELF file at `path` (empty when it cannot be read or has no `.eh_frame`).
    pub fn read(path: &Path) -> FdeIndex {
        let Ok((handle, len)) = crate::files::open(path, &crate::files::Owners::Any) else {
            return FdeIndex::default();
        };
        let cache = ReadCache::new(crate::files::Budgeted::new(handle, len));
        match object::File::parse(&cache) {
            Ok(file) => FdeIndex::of_file(&file),
            Err(_) => FdeIndex::default(),
        }
    }

    /// The FDE ranges of a parsed object.
    pub fn of_file<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> FdeIndex {
        let Some(eh) = file.section_by_name(".eh_frame") else {
            return FdeIndex::default();
        };
        let Ok(data) = eh.data() else {
            return FdeIndex::default();
        };
        // Pointer encodings in the CFI may be relative to these sections (x86-64 uses pc-relative ones, which
        // need the address of `.eh_frame` itself).
        let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
        if let Some(s) = file.section_by_name(".text") {
            bases = bases.set_text(s.address());
        }
        if let Some(s) = file.section_by_name(".got") {
            bases = bases.set_got(s.address());
        }
        if let Some(s) = file.section_by_name(".eh_frame_hdr") {
            bases = bases.set_eh_frame_hdr(s.address());
        }
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        FdeIndex::parse(data, endian, &bases)
    }

    /// The FDE ranges of `.eh_frame` bytes. A malformed entry ends the walk: the ranges read before it stand.
    pub fn parse(data: &[u8], endian: RunTimeEndian, bases: &BaseAddresses) -> FdeIndex {
        let eh_frame = EhFrame::new(data, endian);
        let mut ranges = Vec::new();
        let mut entries = eh_frame.entries(bases);
        while let Ok(Some(entry)) = entries.next() {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) =
                partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
            else {
                continue;
            };
            let (start, len) = (fde.initial_address(), fde.len());
            if start != 0 && len > 0 {
                ranges.push((start, start.saturating_add(len)));
            }
        }
        FdeIndex::from_ranges(ranges)
    }

    /// An index of `(start, end)` ranges, in any order.
    pub fn from_ranges(mut ranges: Vec<(u64, u64)>) -> FdeIndex {
        ranges.sort_unstable();
        ranges.dedup();
        FdeIndex { ranges }
    }

    /// The function range `(start, end)` containing file virtual address `addr`: the last FDE starting at or
    /// below it, if it reaches `addr`.
    pub fn lookup(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.ranges.partition_point(|&(start, _)| start <= addr);
        let &(start, end) = self.ranges.get(i.checked_sub(1)?)?;
        (addr < end).then_some((start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_the_covering_range_only() {
        let idx = FdeIndex::from_ranges(vec![(0x2000, 0x2040), (0x1000, 0x1100), (0x1100, 0x1180)]);
        assert_eq!(idx.ranges.len(), 3);
        assert_eq!(idx.lookup(0x1000), Some((0x1000, 0x1100)));
        assert_eq!(idx.lookup(0x10ff), Some((0x1000, 0x1100)));
        assert_eq!(idx.lookup(0x1100), Some((0x1100, 0x1180)));
        // A gap between functions, before the first and after the last: nothing.
        assert_eq!(idx.lookup(0x1180), None);
        assert_eq!(idx.lookup(0xfff), None);
        assert_eq!(idx.lookup(0x2040), None);
        assert_eq!(idx.lookup(0x203f), Some((0x2000, 0x2040)));
    }

    /// The FDEs of this test binary cover this very function, from its symbol's start.
    #[test]
    fn own_function_is_covered_from_its_start() {
        let addr = own_function_is_covered_from_its_start as *const () as u64;
        let mapping = super::super::executable_mapping_containing(addr).unwrap();
        let elf = super::super::ElfSymbolizer::open(Path::new(super::super::SELF_EXE)).unwrap();
        let file_addr = addr - elf.bias(&mapping).unwrap();
        let sym = elf.symbol(file_addr).expect("the test binary has symbols");
        let idx = FdeIndex::read(Path::new(super::super::SELF_EXE));
        assert!(idx.ranges.len() > 100, "{} FDEs", idx.ranges.len());
        let (start, end) = idx.lookup(file_addr + 1).expect("an FDE covers it");
        assert_eq!(start, sym.address);
        assert!(end > file_addr + 1);
    }
}
