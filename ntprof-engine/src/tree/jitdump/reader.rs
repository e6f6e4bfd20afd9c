//! Reading a jitdump record by record: the fixed fields, names and line tables are kept, a load's code bytes
//! are stepped over, so memory holds what the report needs and never the file; a record whose contents do not
//! fit its size is stepped over, so the records after it still count.

use std::collections::HashMap;
use std::io::Read;

use super::format::{
    CODE_CLOSE, CODE_DEBUG_INFO, CODE_LOAD, CODE_MOVE, Change, FLAG_ARCH_TIMESTAMP, Fields,
    HEADER_SIZE, JitDump, LineTable, MAGIC, PREFIX,
};

/// Read as much of `buf` as `r` has; the number of bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Step over `n` bytes of `r`; whether they were all there.
fn skip(r: &mut impl Read, n: u64) -> bool {
    std::io::copy(&mut r.take(n), &mut std::io::sink()).is_ok_and(|k| k == n)
}

/// The size of a `CODE_LOAD` body before its name: pid, tid, vma, code_addr, code_size, code_index.
const LOAD_FIXED: usize = 40;

/// What the per-record reader found.
enum Record {
    /// Read (or stepped over) whole: continue after it.
    Done,
    /// Its contents do not fit its size: stepped over.
    Malformed,
    /// `CODE_CLOSE`: no record after it is read.
    Close,
    /// The file ended inside it.
    Short,
}

/// The state of one reading.
struct Reading {
    big: bool,
    names: HashMap<String, u32>,
    files: HashMap<String, u32>,
    /// Line tables wait for the next load at their address.
    pending: HashMap<u64, u32>,
    buf: Vec<u8>,
}

impl JitDump {
    /// Parse a jitdump file's bytes (see [`JitDump::read`]).
    #[allow(dead_code)] // The tests and the fuzz target parse bytes; a run reads the file.
    pub fn parse(data: &[u8]) -> Result<JitDump, String> {
        JitDump::read(&mut &*data, data.len() as u64)
    }

    /// Read a jitdump of `len` bytes from `r`, record by record: the code bytes of each load are stepped over,
    /// so memory holds only names and line tables, never the file. A record cut short at the end (a writer
    /// still running) ends the records and is reported in [`JitDump::cut_at`]; a record whose contents do not
    /// fit its size is stepped over and counted in [`JitDump::skipped`]; a record whose size is smaller than its
    /// own prefix leaves no way to find the next one, and ends the records ([`JitDump::lost_at`]).
    pub fn read(r: &mut impl Read, len: u64) -> Result<JitDump, String> {
        let mut header = [0u8; HEADER_SIZE];
        let got = read_full(r, &mut header).map_err(|e| format!("cannot read it: {e}"))?;
        let magic = header[..got]
            .get(..4)
            .ok_or_else(|| format!("too short for a jitdump header ({got} bytes)"))?;
        let big = match (
            u32::from_le_bytes(magic.try_into().unwrap_or_default()),
            u32::from_be_bytes(magic.try_into().unwrap_or_default()),
        ) {
            (MAGIC, _) => false,
            (_, MAGIC) => true,
            (m, _) => return Err(format!("not a jitdump file (magic {m:#010x})")),
        };
        if got < HEADER_SIZE {
            return Err(format!(
                "the jitdump header is cut short ({got} of {HEADER_SIZE} bytes)"
            ));
        }
        let f = Fields { data: &header, big };
        let header_size = u64::from(f.u32(8).unwrap_or(0));
        if !(HEADER_SIZE as u64..=len).contains(&header_size) {
            return Err(format!(
                "the jitdump header gives its size as {header_size} bytes (the file has {len})"
            ));
        }
        if !skip(r, header_size - HEADER_SIZE as u64) {
            return Err("the jitdump header is cut short".into());
        }
        // Version (4), ELF machine (12), pad (16), pid (20) and the header's timestamp (24) are not needed.
        let mut dump = JitDump {
            arch_timestamps: f.u64(32).unwrap_or(0) & FLAG_ARCH_TIMESTAMP != 0,
            ..JitDump::default()
        };
        let mut reading = Reading {
            big,
            names: HashMap::new(),
            files: HashMap::new(),
            pending: HashMap::new(),
            buf: Vec::new(),
        };
        let mut at = header_size;
        while at < len {
            let mut prefix = [0u8; PREFIX];
            if len - at < PREFIX as u64 || !matches!(read_full(r, &mut prefix), Ok(PREFIX)) {
                dump.cut_at = Some(at as usize);
                break;
            }
            let p = Fields { data: &prefix, big };
            let (id, size, time) = (
                p.u32(0).unwrap_or(0),
                p.u32(4).unwrap_or(0),
                p.u64(8).unwrap_or(0),
            );
            if (size as usize) < PREFIX {
                dump.lost_at = Some((at as usize, size));
                break;
            }
            let body = u64::from(size) - PREFIX as u64;
            if body > len - at - PREFIX as u64 {
                dump.cut_at = Some(at as usize);
                break;
            }
            match dump.record(&mut reading, r, id, body, time) {
                Record::Done => {}
                Record::Malformed => {
                    dump.skipped += 1;
                    dump.first_skipped.get_or_insert(at as usize);
                }
                Record::Close => break,
                Record::Short => {
                    dump.cut_at = Some(at as usize);
                    break;
                }
            }
            at += u64::from(size);
        }
        dump.changes.sort_by_key(|&(t, _)| t);
        dump.line_shift = dump.guess_line_shift();
        Ok(dump)
    }

    /// Read one record's body (`body` bytes, all in the file) and apply it.
    fn record(
        &mut self,
        rd: &mut Reading,
        r: &mut impl Read,
        id: u32,
        body: u64,
        time: u64,
    ) -> Record {
        // The part of the body to keep: a load's fixed fields and name (its code is stepped over), all of a move
        // or a line table, nothing of other records.
        let keep = match id {
            CODE_LOAD | CODE_MOVE | CODE_DEBUG_INFO => body,
            CODE_CLOSE => return Record::Close,
            _ => 0,
        };
        let mut keep = keep as usize;
        let mut fixed = [0u8; LOAD_FIXED];
        if id == CODE_LOAD {
            if body < LOAD_FIXED as u64 {
                return if skip(r, body) {
                    Record::Malformed
                } else {
                    Record::Short
                };
            }
            if !matches!(read_full(r, &mut fixed), Ok(LOAD_FIXED)) {
                return Record::Short;
            }
            let code_size = Fields {
                data: &fixed,
                big: rd.big,
            }
            .u64(24)
            .unwrap_or(0);
            let rest = body - LOAD_FIXED as u64;
            keep = (if code_size <= rest {
                rest - code_size
            } else {
                rest
            }) as usize;
        }
        rd.buf.clear();
        rd.buf.resize(keep, 0);
        if !matches!(read_full(r, &mut rd.buf), Ok(n) if n == keep) {
            return Record::Short;
        }
        let left = body
            - keep as u64
            - if id == CODE_LOAD {
                LOAD_FIXED as u64
            } else {
                0
            };
        if !skip(r, left) {
            return Record::Short;
        }
        let buf = std::mem::take(&mut rd.buf);
        let f = Fields {
            data: &buf,
            big: rd.big,
        };
        let ok = match id {
            CODE_LOAD => {
                let fixed = Fields {
                    data: &fixed,
                    big: rd.big,
                };
                self.load(&fixed, &f, time, rd)
            }
            CODE_MOVE => self.move_record(&f, time),
            CODE_DEBUG_INFO => self.debug_info(&f, rd),
            _ => Some(()),
        };
        rd.buf = buf;
        if ok.is_some() {
            Record::Done
        } else {
            Record::Malformed
        }
    }

    fn load(
        &mut self,
        fixed: &Fields<'_>,
        rest: &Fields<'_>,
        time: u64,
        rd: &mut Reading,
    ) -> Option<()> {
        // pid, tid, vma, code_addr, code_size, code_index, then the name and the code bytes.
        let addr = fixed.u64(16)?;
        let size = fixed.u64(24)?;
        let index = fixed.u64(32)?;
        let (name, _) = rest.cstr(0)?;
        let next = self.names.len() as u32;
        let name = *rd.names.entry(name).or_insert_with_key(|n| {
            self.names.push(n.clone());
            next
        });
        self.loads += 1;
        let lines = rd.pending.remove(&addr);
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

    fn move_record(&mut self, f: &Fields<'_>, time: u64) -> Option<()> {
        // pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
        let old = f.u64(16)?;
        let new = f.u64(24)?;
        let size = f.u64(32)?;
        let index = f.u64(40)?;
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

    fn debug_info(&mut self, f: &Fields<'_>, rd: &mut Reading) -> Option<()> {
        // code_addr, nr_entry, then entries: addr, line, discriminator, file name (0xFF 0x00: the previous).
        let code_addr = f.u64(0)?;
        let count = f.u64(8)?;
        let mut at = 16;
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
                let (name, next) = f.cstr(at)?;
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
                *rd.files.entry(name).or_insert_with_key(|k| {
                    self.files.push(k.clone());
                    n
                })
            };
            previous = Some(file);
            table.entries.push((addr, line, file));
        }
        table.entries.sort_by_key(|e| e.0);
        rd.pending.insert(code_addr, self.lines.len() as u32);
        self.lines.push(table);
        Some(())
    }
}
