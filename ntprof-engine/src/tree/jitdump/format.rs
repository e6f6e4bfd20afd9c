//! The jitdump format: the file a JIT writes as it generates code (`node --perf-prof`, a JVM with
//! `-agentpath:libperf-jvmti.so`), read to name its code by time.
//!
//! A 40-byte header (magic `0x4A695444`, "JiTD" in the writer's byte order, which tells that order; version;
//! header size; ELF machine; pad; pid; timestamp; flags) is followed by records, each led by id, total size and
//! timestamp. `CODE_LOAD` (0) says code named NAME now occupies `[code_addr, code_addr + code_size)`;
//! `CODE_MOVE` (1) says code left one address for another; `CODE_DEBUG_INFO` (2) gives the source lines of the
//! code the next load at its address brings; `CODE_CLOSE` (3) ends the records; `CODE_UNWINDING_INFO` (4) and
//! ids this reader does not know are skipped by their size. Timestamps are `CLOCK_MONOTONIC` nanoseconds, the
//! sampler's clock, unless the `JITDUMP_FLAGS_ARCH_TIMESTAMP` flag says they are the processor's time stamp
//! counter.

/// The header's magic number, "JiTD".
pub const MAGIC: u32 = 0x4A69_5444;
/// The size of the header this reader needs (version 1).
pub(super) const HEADER_SIZE: usize = 40;
/// The size of a record's prefix: id, total size, timestamp.
pub(super) const PREFIX: usize = 16;
/// Header flag: timestamps are the processor's time stamp counter, not `CLOCK_MONOTONIC`.
pub const FLAG_ARCH_TIMESTAMP: u64 = 1;
/// V8 writes its line addresses this far past the code (the size of the ELF header `perf inject` puts before
/// the code in the files it makes).
const V8_LINE_SHIFT: u64 = 0x40;

pub(super) const CODE_LOAD: u32 = 0;
pub(super) const CODE_MOVE: u32 = 1;
pub(super) const CODE_DEBUG_INFO: u32 = 2;
pub(super) const CODE_CLOSE: u32 = 3;

/// One change of the code in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Code `index` named `name` now occupies `[addr, addr + size)`; `lines`: its line table.
    Load {
        /// The address of its first instruction.
        addr: u64,
        /// Its size in bytes.
        size: u64,
        /// The writer's number of the code (moves refer to it).
        index: u64,
        /// Into [`JitDump::names`].
        name: u32,
        /// Into [`JitDump::lines`].
        lines: Option<u32>,
    },
    /// Code `index` moved from `old` to `new`.
    Move {
        /// Where it was.
        old: u64,
        /// Where it is.
        new: u64,
        /// Its size in bytes.
        size: u64,
        /// The writer's number of the code.
        index: u64,
    },
}

/// The line table of one piece of code: (address as written, line, file index), by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineTable {
    /// The address the table was written for (the code's start).
    pub code_addr: u64,
    /// The entries, sorted by address.
    pub entries: Vec<(u64, u32, u32)>,
}

/// A parsed jitdump file.
#[derive(Debug, Default)]
pub struct JitDump {
    /// Timestamps are the time stamp counter (`JITDUMP_FLAGS_ARCH_TIMESTAMP`), not comparable with samples.
    pub arch_timestamps: bool,
    /// The changes, with their timestamps, sorted by time (file order among equal times).
    pub changes: Vec<(u64, Change)>,
    /// Code names.
    pub names: Vec<String>,
    /// Source file names of the line tables.
    pub files: Vec<String>,
    /// Line tables.
    pub lines: Vec<LineTable>,
    /// How far line addresses lie past the code they describe (V8's 64 bytes, or 0).
    pub line_shift: u64,
    /// Code loads.
    pub loads: u64,
    /// Code moves.
    pub moves: u64,
    /// Where the records end early: the offset of a last record the file ends inside (the writer had not
    /// finished it, or its size is wrong).
    pub cut_at: Option<usize>,
    /// Records whose contents do not fit their size, stepped over (the records after them are read).
    pub skipped: u64,
    /// The offset of the first of them.
    pub first_skipped: Option<usize>,
    /// A record whose size is smaller than its own prefix, at this offset with this size: the records after
    /// it cannot be found.
    pub lost_at: Option<(usize, u32)>,
    /// The file's size when it is larger than the part read ([`crate::files::JITDUMP_CAP`]).
    pub capped: Option<u64>,
}

/// Reads fields in the file's byte order.
pub(super) struct Fields<'a> {
    pub(super) data: &'a [u8],
    pub(super) big: bool,
}

impl Fields<'_> {
    pub(super) fn u32(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    pub(super) fn u64(&self, at: usize) -> Option<u64> {
        let b: [u8; 8] = self.data.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// The NUL-terminated string at `at` and the offset after its NUL.
    pub(super) fn cstr(&self, at: usize) -> Option<(String, usize)> {
        let bytes = self.data.get(at..)?;
        let len = bytes.iter().position(|&b| b == 0)?;
        Some((
            String::from_utf8_lossy(&bytes[..len]).into_owned(),
            at + len + 1,
        ))
    }
}

impl JitDump {
    /// What the report says of a file read in part: records stepped over, records lost, a cut end.
    pub fn problem(&self) -> Option<String> {
        let mut said = Vec::new();
        if self.skipped > 0 {
            said.push(format!(
                "{} corrupt record{} (the first at byte {}) stepped over, the records after {} read",
                self.skipped,
                if self.skipped == 1 { "" } else { "s" },
                self.first_skipped.unwrap_or(0),
                if self.skipped == 1 { "it" } else { "them" },
            ));
        }
        if let Some((at, size)) = self.lost_at {
            said.push(format!(
                "a corrupt record at byte {at} gives its size as {size} bytes, less than its own header: the \
                 records after it cannot be found and are not read"
            ));
        }
        if let Some(at) = self.cut_at {
            said.push(format!(
                "its last record, at byte {at}, runs past the end of the file (the runtime had not finished \
                 writing it, or its size is corrupt)"
            ));
        }
        if let Some(len) = self.capped {
            said.push(format!(
                "only its first {} MiB of {len} bytes are read",
                crate::files::JITDUMP_CAP >> 20
            ));
        }
        (!said.is_empty()).then(|| said.join("; "))
    }

    /// V8 writes line addresses 64 bytes past the code they describe: a dump none of whose line entries lies
    /// within the first 64 bytes of its code is taken to do so. Other writers (the JVM agent) give the code's
    /// own addresses, and their first entry is at or near the code's start.
    pub(super) fn guess_line_shift(&self) -> u64 {
        let mut any = false;
        for (_, change) in &self.changes {
            if let Change::Load {
                addr,
                lines: Some(l),
                ..
            } = change
            {
                for &(a, _, _) in &self.lines[*l as usize].entries {
                    any = true;
                    if a < addr.saturating_add(V8_LINE_SHIFT) {
                        return 0;
                    }
                }
            }
        }
        if any { V8_LINE_SHIFT } else { 0 }
    }

    /// The source file and line of offset `offset` in the code whose line table is `lines`.
    pub fn line(&self, lines: u32, code_addr: u64, offset: u64) -> Option<(&str, u32)> {
        let table = self.lines.get(lines as usize)?;
        let at = code_addr.wrapping_add(offset).wrapping_add(self.line_shift);
        let i = table.entries.partition_point(|e| e.0 <= at);
        let &(_, line, file) = table.entries.get(i.checked_sub(1)?)?;
        let file = self.files.get(file as usize)?;
        (!file.is_empty()).then_some((file.as_str(), line))
    }
}

/// The jitdump basename a runtime maps (`jit-PID.dump`): whether `path` is one.
pub fn is_dump_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("jit-")
        .and_then(|n| n.strip_suffix(".dump"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}
