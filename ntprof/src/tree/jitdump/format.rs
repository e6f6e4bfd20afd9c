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

use std::collections::HashMap;

/// The header's magic number, "JiTD".
pub const MAGIC: u32 = 0x4A69_5444;
/// The size of the header this reader needs (version 1).
const HEADER_SIZE: usize = 40;
/// The size of a record's prefix: id, total size, timestamp.
const PREFIX: usize = 16;
/// Header flag: timestamps are the processor's time stamp counter, not `CLOCK_MONOTONIC`.
pub const FLAG_ARCH_TIMESTAMP: u64 = 1;
/// V8 writes its line addresses this far past the code (the size of the ELF header `perf inject` puts before
/// the code in the files it makes).
const V8_LINE_SHIFT: u64 = 0x40;

const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const CODE_DEBUG_INFO: u32 = 2;
const CODE_CLOSE: u32 = 3;

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
    /// Where the records end early: the offset of an incomplete last record (the writer had not finished it).
    pub cut_at: Option<usize>,
}

/// Reads fields in the file's byte order.
struct Fields<'a> {
    data: &'a [u8],
    big: bool,
}

impl Fields<'_> {
    fn u32(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&self, at: usize) -> Option<u64> {
        let b: [u8; 8] = self.data.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// The NUL-terminated string at `at`, within `end`, and the offset after its NUL.
    fn cstr(&self, at: usize, end: usize) -> Option<(String, usize)> {
        let bytes = self.data.get(at..end)?;
        let len = bytes.iter().position(|&b| b == 0)?;
        Some((
            String::from_utf8_lossy(&bytes[..len]).into_owned(),
            at + len + 1,
        ))
    }
}

impl JitDump {
    /// Parse a jitdump file's bytes. A record cut short at the end (a writer still running) ends the records
    /// and is reported in [`JitDump::cut_at`]; a malformed record inside the file ends them too.
    pub fn parse(data: &[u8]) -> Result<JitDump, String> {
        let magic = data
            .get(..4)
            .ok_or_else(|| format!("too short for a jitdump header ({} bytes)", data.len()))?;
        let big = match (
            u32::from_le_bytes(magic.try_into().unwrap_or_default()),
            u32::from_be_bytes(magic.try_into().unwrap_or_default()),
        ) {
            (MAGIC, _) => false,
            (_, MAGIC) => true,
            (m, _) => return Err(format!("not a jitdump file (magic {m:#010x})")),
        };
        let f = Fields { data, big };
        if data.len() < HEADER_SIZE {
            return Err(format!(
                "the jitdump header is cut short ({} of {HEADER_SIZE} bytes)",
                data.len()
            ));
        }
        let header_size = f.u32(8).unwrap_or(0) as usize;
        if !(HEADER_SIZE..=data.len()).contains(&header_size) {
            return Err(format!(
                "the jitdump header gives its size as {header_size} bytes (the file has {})",
                data.len()
            ));
        }
        // Version (4), ELF machine (12), pad (16), pid (20) and the header's timestamp (24) are not needed.
        let mut dump = JitDump {
            arch_timestamps: f.u64(32).unwrap_or(0) & FLAG_ARCH_TIMESTAMP != 0,
            ..JitDump::default()
        };
        let mut names: HashMap<String, u32> = HashMap::new();
        let mut files: HashMap<String, u32> = HashMap::new();
        // Line tables wait for the next load at their address.
        let mut pending: HashMap<u64, u32> = HashMap::new();
        let mut at = header_size;
        while at < data.len() {
            let (Some(id), Some(size), Some(time)) = (f.u32(at), f.u32(at + 4), f.u64(at + 8))
            else {
                dump.cut_at = Some(at);
                break;
            };
            let size = size as usize;
            let Some(end) = at
                .checked_add(size)
                .filter(|&e| size >= PREFIX && e <= data.len())
            else {
                dump.cut_at = Some(at);
                break;
            };
            let body = at + PREFIX;
            let ok = match id {
                CODE_LOAD => dump.load(&f, body, end, time, &mut names, &mut pending),
                CODE_MOVE => dump.move_record(&f, body, time),
                CODE_DEBUG_INFO => dump.debug_info(&f, body, end, &mut files, &mut pending),
                CODE_CLOSE => break,
                _ => Some(()),
            };
            if ok.is_none() {
                dump.cut_at = Some(at);
                break;
            }
            at = end;
        }
        dump.changes.sort_by_key(|&(t, _)| t);
        dump.line_shift = dump.guess_line_shift();
        Ok(dump)
    }

    fn load(
        &mut self,
        f: &Fields<'_>,
        body: usize,
        end: usize,
        time: u64,
        names: &mut HashMap<String, u32>,
        pending: &mut HashMap<u64, u32>,
    ) -> Option<()> {
        // pid, tid, vma, code_addr, code_size, code_index, then the name and the code bytes.
        let addr = f.u64(body + 16)?;
        let size = f.u64(body + 24)?;
        let index = f.u64(body + 32)?;
        let (name, _) = f.cstr(body + 40, end)?;
        let next = self.names.len() as u32;
        let name = *names.entry(name).or_insert_with_key(|n| {
            self.names.push(n.clone());
            next
        });
        self.loads += 1;
        let lines = pending.remove(&addr);
        if size > 0 {
            self.changes.push((
                time,
                Change::Load {
                    addr,
                    size,
                    index,
                    name,
                    lines,
                },
            ));
        }
        Some(())
    }

    fn move_record(&mut self, f: &Fields<'_>, body: usize, time: u64) -> Option<()> {
        // pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
        let old = f.u64(body + 16)?;
        let new = f.u64(body + 24)?;
        let size = f.u64(body + 32)?;
        let index = f.u64(body + 40)?;
        self.moves += 1;
        self.changes.push((
            time,
            Change::Move {
                old,
                new,
                size,
                index,
            },
        ));
        Some(())
    }

    fn debug_info(
        &mut self,
        f: &Fields<'_>,
        body: usize,
        end: usize,
        files: &mut HashMap<String, u32>,
        pending: &mut HashMap<u64, u32>,
    ) -> Option<()> {
        // code_addr, nr_entry, then entries: addr, line, discriminator, file name (0xFF 0x00: the previous).
        let code_addr = f.u64(body)?;
        let count = f.u64(body + 8)?;
        let mut at = body + 16;
        let mut table = LineTable {
            code_addr,
            entries: Vec::new(),
        };
        let mut previous: Option<u32> = None;
        for _ in 0..count {
            let addr = f.u64(at)?;
            let line = f.u32(at + 8)?;
            at += 16;
            let file = if f.data.get(at..at + 2) == Some(&[0xff, 0][..]) {
                at += 2;
                previous?
            } else {
                let (name, next) = f.cstr(at, end)?;
                at = next;
                // Some V8 versions write the bytes of a string object rather than its text for some script
                // names: a name that is not text is no file.
                let name = if name
                    .contains(|c: char| c.is_control() || c == char::REPLACEMENT_CHARACTER)
                {
                    String::new()
                } else {
                    name
                };
                let n = self.files.len() as u32;
                *files.entry(name).or_insert_with_key(|k| {
                    self.files.push(k.clone());
                    n
                })
            };
            previous = Some(file);
            table.entries.push((addr, line, file));
        }
        table.entries.sort_by_key(|e| e.0);
        pending.insert(code_addr, self.lines.len() as u32);
        self.lines.push(table);
        Some(())
    }

    /// V8 writes line addresses 64 bytes past the code they describe: a dump none of whose line entries lies
    /// within the first 64 bytes of its code is taken to do so. Other writers (the JVM agent) give the code's
    /// own addresses, and their first entry is at or near the code's start.
    fn guess_line_shift(&self) -> u64 {
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
