//! Names of Go code from the binary's own `.gopclntab`, the table the Go runtime prints its tracebacks from: it
//! stays in every Go binary, stripped (`-ldflags='-s -w'`) or not, so that a program built as container images
//! build it still has names, files, lines and inlined frames.
//!
//! The table has had four layouts, told apart by its first four bytes: Go 1.2 to 1.15 (`0xfffffffb`), 1.16 and
//! 1.17 (`0xfffffffa`: names, files and pc-value tables in separate sub-tables), 1.18 and 1.19 (`0xfffffff0`:
//! function entries as 32-bit offsets from the text start) and 1.20 on (`0xfffffff1`: inlined calls found by
//! the pc of their call site). Each holds a sorted table of function entries; per function a record with its
//! name and the offsets of its pc-value tables (pc → file, pc → line, pc → inlining index). The inlining tree of
//! a function is in its function data, which Go 1.18 and later address from the module's `gofunc` base: found
//! in the module data record, whose first word points at the table (`.go.module`, `.noptrdata` or `.data`).
//!
//! Only what a looked-up address needs is read (`read`): a binary search over the entries, then one record and
//! its tables, in chunks kept for later lookups. Every offset is checked against the table or the file, names
//! and steps are capped, and a malformed entry gives no name rather than a wrong one.

mod read;
mod record;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::sync::Mutex;

use object::{Object, ObjectSection, ObjectSegment, ReadRef};

use crate::report::Frame;
use read::{Chunks, Layout, pcvalue};
use record::Site;

/// The largest table read (Go's own binaries of a few hundred megabytes have tables of tens of megabytes).
const TABLE_CAP: u64 = 1 << 30;
/// The deepest inlining followed (Go inlines a few levels; a cycle in a hostile tree stops here).
const INLINE_DEPTH: usize = 64;
/// The most of the data sections searched for the module data record.
const MODULEDATA_SCAN_CAP: u64 = 64 << 20;
/// Where a function's inlining index table and tree are (`PCDATA_InlTreeIndex`, `FUNCDATA_InlTree`), by the Go
/// release that wrote the table (runtime/funcdata.h of each): Go 1.13 to 1.15 (the 1.2 layout, with a register
/// map before each), and 1.16 on. Go 1.2 to 1.12 wrote the same table layout as 1.13 to 1.15 but kept them
/// elsewhere (1 and 2) and, before 1.12, in records of another shape; they are told from 1.13 to 1.15 by the
/// build information section Go writes since 1.13 (`.go.buildinfo`), and their inlined frames are not read (the
/// function itself is still named: a frame left out rather than a wrong one).
const INLINE_SLOTS_113: (u64, u64) = (2, 4);
const INLINE_SLOTS_116: (u64, u64) = (2, 3);

/// A layout of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// Go 1.2 to 1.15.
    V12,
    /// Go 1.16 and 1.17.
    V116,
    /// Go 1.18 and 1.19.
    V118,
    /// Go 1.20 and later.
    V120,
}

impl Version {
    fn of_magic(magic: u32) -> Option<Version> {
        match magic {
            0xffff_fffb => Some(Version::V12),
            0xffff_fffa => Some(Version::V116),
            0xffff_fff0 => Some(Version::V118),
            0xffff_fff1 => Some(Version::V120),
            _ => None,
        }
    }
}

/// A function found in the table, with the frames of one address in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunc {
    /// Its entry (file virtual address).
    pub entry: u64,
    /// The address after its code.
    pub end: u64,
    /// Its name, as Go prints it (`main.handler`, `net/http.(*conn).serve`).
    pub name: String,
    /// The frames of the address, innermost (inlined) first, the function itself last.
    pub frames: Vec<Frame>,
}

/// A Go binary's function table, read as lookups need it.
pub struct GoTable {
    version: Version,
    layout: Layout,
    quantum: u64,
    /// The table's file offset, end offset and virtual address.
    base: u64,
    end: u64,
    vaddr: u64,
    nfunc: u64,
    /// File offsets of the sub-tables (all the table's start before Go 1.16).
    functab: u64,
    pclntable: u64,
    funcnames: u64,
    cutab: u64,
    filetab: u64,
    pctab: u64,
    /// Go 1.18+: the address function entries are offsets from.
    text_start: u64,
    /// The indexes of the inlining index table (PCDATA) and tree (FUNCDATA) in this table's functions; `None`
    /// where inlined frames are not read (Go before 1.13).
    inline_slots: Option<(u64, u64)>,
    /// `(vaddr, file offset, file size)` of the loadable segments, to read the inlining trees.
    segments: Vec<(u64, u64, u64)>,
    /// `(vaddr, file offset, size)` of the sections that may hold the module data record, in search order.
    data: Vec<(u64, u64, u64)>,
    state: Mutex<State>,
}

struct State {
    chunks: Chunks,
    /// The module's `gofunc` (Go 1.18+): `None` until first needed.
    gofunc: Option<Option<u64>>,
}

impl std::fmt::Debug for GoTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoTable")
            .field("version", &self.version)
            .field("functions", &self.nfunc)
            .finish()
    }
}

impl GoTable {
    /// The table of `file` (already parsed from `handle`, `len` bytes), when it has one: `None` for an object
    /// without `.gopclntab`, an error for a table that cannot be read.
    pub fn find<'data, R: ReadRef<'data>>(
        file: &object::File<'data, R>,
        handle: File,
        len: u64,
    ) -> Option<Result<GoTable, String>> {
        // Go before 1.16 puts it among the relocated read-only data of a PIE.
        let section = file
            .section_by_name(".gopclntab")
            .or_else(|| file.section_by_name(".data.rel.ro.gopclntab"))?;
        let Some((offset, size)) = section.file_range() else {
            return Some(Err("its .gopclntab has no bytes in the file".into()));
        };
        let segments = file
            .segments()
            .map(|s| {
                let (o, n) = s.file_range();
                (s.address(), o, n)
            })
            .collect();
        let data = [".go.module", ".noptrdata", ".data"]
            .iter()
            .filter_map(|n| file.section_by_name(n))
            .filter_map(|s| s.file_range().map(|(o, n)| (s.address(), o, n)))
            .collect();
        let layout = Layout {
            little: file.is_little_endian(),
            ptr: if file.is_64() { 8 } else { 4 },
        };
        let chunks = Chunks::new(handle, len);
        let text = file.section_by_name(".text").map(|s| s.address());
        let buildinfo = file.section_by_name(".go.buildinfo").is_some();
        Some(Self::parse(
            chunks,
            layout,
            (offset, size, section.address()),
            segments,
            data,
            (text, buildinfo),
        ))
    }

    /// Read the header of the table at `(file offset, size, vaddr)`.
    fn parse(
        mut c: Chunks,
        layout: Layout,
        (base, size, vaddr): (u64, u64, u64),
        segments: Vec<(u64, u64, u64)>,
        data: Vec<(u64, u64, u64)>,
        (text, buildinfo): (Option<u64>, bool),
    ) -> Result<GoTable, String> {
        let end = base
            .checked_add(size.min(TABLE_CAP))
            .filter(|&e| e <= c.len())
            .ok_or("its .gopclntab lies past the end of the file")?;
        let head: [u8; 8] = c.array(base).ok_or("its .gopclntab is cut short")?;
        let magic = layout.u32(&mut c, base).unwrap_or(0);
        let version = Version::of_magic(magic)
            .ok_or_else(|| format!("its .gopclntab has an unknown layout (magic {magic:#010x})"))?;
        let (quantum, ptr) = (u64::from(head[6]), u64::from(head[7]));
        if head[4] != 0 || head[5] != 0 || ![1, 2, 4].contains(&quantum) || ptr != layout.ptr {
            return Err(format!(
                "its .gopclntab header is not one Go writes (quantum {quantum}, pointer size {ptr})"
            ));
        }
        let word = |c: &mut Chunks, i: u64| -> Result<u64, String> {
            layout
                .word(c, base + 8 + i * ptr)
                .ok_or_else(|| "its .gopclntab header is cut short".to_string())
        };
        let inside = |off: u64| -> Result<u64, String> {
            base.checked_add(off)
                .filter(|&a| a <= end)
                .ok_or_else(|| format!("its .gopclntab header points past the table ({off:#x})"))
        };
        let nfunc = word(&mut c, 0)?;
        let mut t = GoTable {
            version,
            layout,
            quantum,
            base,
            end,
            vaddr,
            nfunc,
            functab: 0,
            pclntable: base,
            funcnames: base,
            cutab: base,
            filetab: base,
            pctab: base,
            text_start: 0,
            inline_slots: match version {
                Version::V12 if buildinfo => Some(INLINE_SLOTS_113),
                Version::V12 => None,
                _ => Some(INLINE_SLOTS_116),
            },
            segments,
            data,
            state: Mutex::new(State {
                chunks: c,
                gofunc: None,
            }),
        };
        let c = &mut t.state.get_mut().unwrap_or_else(|e| e.into_inner()).chunks;
        let entry_size = match version {
            Version::V12 => {
                t.functab = inside(8 + ptr)?;
                let after = t.functab + (2 * nfunc.min(size) + 1) * ptr;
                let filetab = layout
                    .u32(c, after)
                    .ok_or("its .gopclntab file table offset is cut short")?;
                t.filetab = inside(u64::from(filetab))?;
                2 * ptr
            }
            Version::V116 | Version::V118 | Version::V120 => {
                // The five table offsets follow the header's words: from word 2 in 1.16, after the text start
                // (word 2) from 1.18 on.
                let first = if version == Version::V116 {
                    2
                } else {
                    t.text_start = word(c, 2)?;
                    3
                };
                let offsets: Vec<u64> = (first..first + 5)
                    .map(|i| word(c, i))
                    .collect::<Result<_, _>>()?;
                t.funcnames = inside(offsets[0])?;
                t.cutab = inside(offsets[1])?;
                t.filetab = inside(offsets[2])?;
                t.pctab = inside(offsets[3])?;
                t.pclntable = inside(offsets[4])?;
                t.functab = t.pclntable;
                if version == Version::V116 { 2 * ptr } else { 8 }
            }
        };
        // The entries (and the end entry after them) must lie inside the table.
        let entries_end = nfunc
            .checked_add(1)
            .and_then(|n| n.checked_mul(entry_size))
            .and_then(|n| n.checked_add(t.functab));
        if nfunc == 0 || entries_end.is_none_or(|e| e > end) {
            return Err(format!(
                "its .gopclntab claims {nfunc} functions, which do not fit in it"
            ));
        }
        // Go 1.20 and later no longer store the text start in the header: the module data record's `text`
        // (its 22nd word) has it, else the start of `.text`, as Go's own tools take it.
        if version >= Version::V118 && t.text_start == 0 {
            let from_record = {
                let mut state = t.lock();
                let c = &mut state.chunks;
                t.find_moduledata(c, 23)
                    .and_then(|at| layout.word(c, at + 22 * ptr))
            };
            t.text_start = from_record
                .or(text)
                .ok_or("its .gopclntab has no text start, and no module data or .text gives it")?;
        }
        Ok(t)
    }

    /// The table's layout.
    #[cfg(test)]
    pub fn version(&self) -> Version {
        self.version
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves only caches behind, which stay valid.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entry `i` of the function table: its pc and the offset of its record.
    fn entry(&self, c: &mut Chunks, i: u64) -> Option<(u64, u64)> {
        let l = self.layout;
        match self.version {
            Version::V12 | Version::V116 => {
                let at = self.functab + i * 2 * l.ptr;
                Some((l.word(c, at)?, l.word(c, at + l.ptr)?))
            }
            Version::V118 | Version::V120 => {
                let at = self.functab + i * 8;
                let pc = self.text_start.checked_add(u64::from(l.u32(c, at)?))?;
                Some((pc, u64::from(l.u32(c, at + 4)?)))
            }
        }
    }

    /// The function holding file virtual address `addr`, and the frames of `addr` (innermost first).
    pub fn lookup(&self, addr: u64) -> Option<GoFunc> {
        let mut state = self.lock();
        let State { chunks, gofunc } = &mut *state;
        let c = chunks;
        let (first, _) = self.entry(c, 0)?;
        let (last, _) = self.entry(c, self.nfunc)?;
        if addr < first || addr >= last {
            return None;
        }
        // The last entry at or below addr.
        let (mut lo, mut hi) = (0, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry(c, mid)?.0 <= addr {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (entry, funcoff) = self.entry(c, lo)?;
        let (end, _) = self.entry(c, lo + 1)?;
        let func = self.record(c, entry, funcoff)?;
        let name = self.name(c, func.name)?;
        let location = |t: &Self, c: &mut Chunks, pc: u64| -> (Option<String>, Option<u32>) {
            let file = t
                .value(c, func.pcfile, entry, pc)
                .and_then(|f| t.file_name(c, func.cu, f));
            let line = t
                .value(c, func.pcln, entry, pc)
                .and_then(|l| u32::try_from(l).ok());
            (file, line)
        };
        let mut frames = Vec::new();
        let (mut file, mut line) = location(self, c, addr);
        if let Some(tree) = self.inline_tree(c, gofunc, &func) {
            let mut index = self.value(c, func.inline_index, entry, addr);
            while let Some(ix) = index.and_then(|i| u64::try_from(i).ok()) {
                if frames.len() >= INLINE_DEPTH {
                    break;
                }
                let Some(call) = self.inlined_call(c, tree, ix) else {
                    break;
                };
                let Some(callee) = self.name(c, call.name) else {
                    break;
                };
                frames.push(Frame {
                    function: callee,
                    file: file.take(),
                    line: line.take(),
                    inlined: true,
                });
                match call.site {
                    Site::Pc(offset) => {
                        let pc = entry.wrapping_add(u64::from(offset));
                        (file, line) = location(self, c, pc);
                        index = self.value(c, func.inline_index, entry, pc);
                    }
                    Site::Line {
                        file: f,
                        line: l,
                        parent,
                    } => {
                        file = self.file_name(c, func.cu, f);
                        line = u32::try_from(l).ok();
                        index = Some(i32::from(parent));
                    }
                }
            }
        }
        frames.push(Frame {
            function: name.clone(),
            file,
            line,
            inlined: false,
        });
        Some(GoFunc {
            entry,
            end,
            name,
            frames,
        })
    }

    /// The value a pc-value table (offset `table` in the pc-value tables; 0: none) gives to `pc`.
    fn value(&self, c: &mut Chunks, table: u32, entry: u64, pc: u64) -> Option<i32> {
        if table == 0 {
            return None;
        }
        let at = self.pctab.checked_add(u64::from(table))?;
        pcvalue(c, at, self.end, entry, self.quantum, pc)
    }

    /// The name at offset `off` of the name table.
    fn name(&self, c: &mut Chunks, off: i32) -> Option<String> {
        let at = self.funcnames.checked_add(u64::try_from(off).ok()?)?;
        c.cstr(at, self.end).filter(|n| !n.is_empty())
    }

    /// The name of file `index` of compilation unit `cu` (before Go 1.16: of the whole table).
    fn file_name(&self, c: &mut Chunks, cu: u32, index: i32) -> Option<String> {
        let index = u64::try_from(index).ok()?;
        let l = self.layout;
        let off = match self.version {
            Version::V12 => {
                // The table starts with its count; file numbers start at 1.
                let count = u64::from(l.u32(c, self.filetab)?);
                if index == 0 || index >= count {
                    return None;
                }
                let at = self.filetab.checked_add(index * 4)?;
                let name = self.base.checked_add(u64::from(l.u32(c, at)?))?;
                return c.cstr(name, self.end);
            }
            _ => {
                let at = self
                    .cutab
                    .checked_add((u64::from(cu).checked_add(index)?).checked_mul(4)?)?;
                if at.checked_add(4)? > self.end {
                    return None;
                }
                l.u32(c, at)?
            }
        };
        if off == u32::MAX {
            return None;
        }
        c.cstr(self.filetab.checked_add(u64::from(off))?, self.end)
    }

    /// The file offset of virtual address `vaddr`, when a segment holds it in the file.
    fn file_offset(&self, vaddr: u64, len: u64) -> Option<u64> {
        self.segments.iter().find_map(|&(va, off, size)| {
            let rel = vaddr.checked_sub(va)?;
            (rel.checked_add(len)? <= size).then(|| off + rel)
        })
    }
}
