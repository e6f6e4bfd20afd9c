//! A Go function's record (`_func`) in each layout, its inlining tree, and the module data record that says
//! where Go 1.18 and later keep function data.

use super::read::Chunks;
use super::{GoTable, MODULEDATA_SCAN_CAP, Version, read::Layout};

/// The fields of a function record that naming needs.
#[derive(Clone, Copy, Debug)]
pub struct Func {
    /// Offset of its name in the name table.
    pub name: i32,
    /// Offsets of its pc → file and pc → line tables.
    pub pcfile: u32,
    pub pcln: u32,
    /// Its compilation unit's first entry in the file index table (Go 1.16+).
    pub cu: u32,
    /// Offset of its pc → inlining index table (0: none).
    pub inline_index: u32,
    /// Where its inlining tree is: a virtual address (before Go 1.18) or an offset from `gofunc`.
    pub tree: Option<u64>,
}

/// Where an inlined call was made from.
pub enum Site {
    /// Go 1.20+: the offset from the function's entry of an instruction at the call site.
    Pc(u32),
    /// Before: the call site's file index and line, and the index of the call it was inlined into.
    Line { file: i32, line: i32, parent: i16 },
}

/// One entry of an inlining tree.
pub struct Call {
    /// The called function's name offset.
    pub name: i32,
    /// Its call site.
    pub site: Site,
}

impl GoTable {
    /// The record at `funcoff` of the function table, which must describe the function entered at `entry`.
    pub(super) fn record(&self, c: &mut Chunks, entry: u64, funcoff: u64) -> Option<Func> {
        let l = self.layout;
        let at = self.pclntable.checked_add(funcoff)?;
        let p = l.ptr;
        // (name, pcfile, pcln, npcdata, cu, nfuncdata) offsets, and the record's size.
        let (name, pcfile, pcln, npcdata, cu, nfuncdata, size) = match self.version {
            Version::V12 => (p, p + 16, p + 20, p + 24, None, p + 31, p + 32),
            Version::V116 => (p, p + 16, p + 20, p + 24, Some(p + 28), p + 35, p + 36),
            Version::V118 => (4, 20, 24, 28, Some(32), 39, 40),
            Version::V120 => (4, 20, 24, 28, Some(32), 43, 44),
        };
        if at.checked_add(size)? > self.end {
            return None;
        }
        let recorded = match self.version {
            Version::V12 | Version::V116 => l.word(c, at)?,
            _ => self.text_start.checked_add(u64::from(l.u32(c, at)?))?,
        };
        if recorded != entry {
            return None;
        }
        let npcdata = u64::from(l.u32(c, at + npcdata)?);
        let nfuncdata = u64::from(c.byte(at + nfuncdata)?);
        let pcdata = at + size;
        // Slots past any a function has when inlined frames are not read: no index table, no tree.
        let (pcdata_inline, inline_slot) = self.inline_slots.unwrap_or((u64::MAX, u64::MAX));
        let inline_index = if npcdata > pcdata_inline {
            let slot = pcdata + pcdata_inline * 4;
            if slot + 4 > self.end {
                return None;
            }
            l.u32(c, slot)?
        } else {
            0
        };
        let funcdata = pcdata.checked_add(npcdata.checked_mul(4)?)?;
        let tree = if nfuncdata > inline_slot {
            match self.version {
                Version::V12 | Version::V116 => {
                    // Pointer-sized entries, aligned in memory to a pointer.
                    let va = self.vaddr + (funcdata - self.base);
                    let pad = if p == 8 && va % 8 != 0 { 4 } else { 0 };
                    let slot = funcdata + pad + inline_slot * p;
                    if slot + p > self.end {
                        return None;
                    }
                    Some(l.word(c, slot)?).filter(|&a| a != 0)
                }
                _ => {
                    let slot = funcdata + inline_slot * 4;
                    if slot + 4 > self.end {
                        return None;
                    }
                    Some(l.u32(c, slot)?)
                        .filter(|&o| o != u32::MAX)
                        .map(u64::from)
                }
            }
        } else {
            None
        };
        Some(Func {
            name: l.u32(c, at + name)? as i32,
            pcfile: l.u32(c, at + pcfile)?,
            pcln: l.u32(c, at + pcln)?,
            cu: match cu {
                Some(o) => l.u32(c, at + o)?,
                None => 0,
            },
            inline_index,
            tree,
        })
    }

    /// The virtual address of the inlining tree of `func`, when it has one and it can be found.
    pub(super) fn inline_tree(
        &self,
        c: &mut Chunks,
        gofunc: &mut Option<Option<u64>>,
        func: &Func,
    ) -> Option<u64> {
        let tree = func.tree?;
        if func.inline_index == 0 {
            return None;
        }
        match self.version {
            Version::V12 | Version::V116 => Some(tree),
            _ => {
                let base = *gofunc.get_or_insert_with(|| self.find_gofunc(c));
                base?.checked_add(tree)
            }
        }
    }

    /// Entry `ix` of the inlining tree at virtual address `tree`.
    pub(super) fn inlined_call(&self, c: &mut Chunks, tree: u64, ix: u64) -> Option<Call> {
        let l = self.layout;
        let size = if self.version == Version::V120 {
            16
        } else {
            20
        };
        let va = tree.checked_add(ix.checked_mul(size)?)?;
        let at = self.file_offset(va, size)?;
        Some(match self.version {
            Version::V120 => Call {
                name: l.u32(c, at + 4)? as i32,
                site: Site::Pc(l.u32(c, at + 8)?),
            },
            _ => Call {
                name: l.u32(c, at + 12)? as i32,
                site: Site::Line {
                    file: l.u32(c, at + 4)? as i32,
                    line: l.u32(c, at + 8)? as i32,
                    parent: l.u16(c, at)? as i16,
                },
            },
        })
    }

    /// The module's `gofunc` (Go 1.18+): the 38th word of its module data record (Go 1.18, 1.19) or the 40th
    /// (Go 1.20 on, which added the coverage counters' bounds before it).
    pub(super) fn find_gofunc(&self, c: &mut Chunks) -> Option<u64> {
        let word = if self.version == Version::V120 {
            40
        } else {
            38
        };
        let at = self.find_moduledata(c, word + 1)?;
        self.layout.word(c, at + word * self.layout.ptr)
    }

    /// The file offset of the module data record, of at least `words` words: it starts with a pointer to the
    /// table, then the name table's slice, whose pointer is the table's address plus the name table's offset.
    pub(super) fn find_moduledata(&self, c: &mut Chunks, words: u64) -> Option<u64> {
        let l: Layout = self.layout;
        let p = l.ptr;
        let names = self.vaddr + (self.funcnames - self.base);
        let mut scanned = 0;
        for &(_, offset, size) in &self.data {
            let mut at = offset;
            let end = offset.saturating_add(size);
            while at + words * p <= end {
                if scanned >= MODULEDATA_SCAN_CAP {
                    return None;
                }
                scanned += p;
                if l.word(c, at)? == self.vaddr && l.word(c, at + p)? == names {
                    return Some(at);
                }
                at += p;
            }
        }
        None
    }
}
