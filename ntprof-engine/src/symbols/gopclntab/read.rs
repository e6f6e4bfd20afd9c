//! Reading a Go binary's tables on demand: the file in 64 KiB chunks fetched when a lookup first touches them
//! and kept (a report that names a thousand addresses reads a few hundred kilobytes of a 30 MB table, not all
//! of it), every read checked against the file's size, and the pc-value tables' varint streams decoded with
//! their lengths and counts bounded.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// The size of one cached piece of the file.
const CHUNK: u64 = 64 << 10;
/// The most of the file kept in memory at once; past it the cache starts again (a lookup never needs more
/// than a few chunks, so a hostile table that sends lookups all over a huge file costs this much at most).
const CACHE_CAP: usize = 256 << 20;
/// The longest name or file name read (Go's longest generic instantiations are a few kilobytes).
pub const NAME_CAP: u64 = 16 << 10;
/// The most steps a pc-value table is followed (a table of a function of a few megabytes of code has fewer).
const PCVALUE_STEPS: u32 = 1 << 20;

/// A file read by chunks, each fetched once.
pub struct Chunks {
    file: File,
    len: u64,
    chunks: HashMap<u64, Arc<[u8]>>,
    held: usize,
}

impl std::fmt::Debug for Chunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Chunks({} bytes, {} held)", self.len, self.held)
    }
}

impl Chunks {
    /// `file`, of `len` bytes.
    pub fn new(file: File, len: u64) -> Chunks {
        Chunks {
            file,
            len,
            chunks: HashMap::new(),
            held: 0,
        }
    }

    /// The size of the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    fn chunk(&mut self, index: u64) -> Option<Arc<[u8]>> {
        if let Some(c) = self.chunks.get(&index) {
            return Some(c.clone());
        }
        let start = index.checked_mul(CHUNK)?;
        if start >= self.len {
            return None;
        }
        let size = (self.len - start).min(CHUNK) as usize;
        let mut buf = vec![0; size];
        // A file cut short after it was opened reads fewer bytes: what was read is kept, the rest is absent.
        let mut got = 0;
        while got < size {
            match self.file.read_at(&mut buf[got..], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        buf.truncate(got);
        if got == 0 {
            return None;
        }
        if self.held + got > CACHE_CAP {
            self.chunks.clear();
            self.held = 0;
        }
        let c: Arc<[u8]> = buf.into();
        self.held += got;
        self.chunks.insert(index, c.clone());
        Some(c)
    }

    /// The byte at file offset `at`.
    pub fn byte(&mut self, at: u64) -> Option<u8> {
        let c = self.chunk(at / CHUNK)?;
        c.get((at % CHUNK) as usize).copied()
    }

    /// `N` bytes at file offset `at`, when all are in the file.
    pub fn array<const N: usize>(&mut self, at: u64) -> Option<[u8; N]> {
        let end = at.checked_add(N as u64)?;
        if end > self.len {
            return None;
        }
        let mut out = [0; N];
        let c = self.chunk(at / CHUNK)?;
        let within = (at % CHUNK) as usize;
        if within + N <= c.len() {
            out.copy_from_slice(&c[within..within + N]);
        } else {
            for (i, b) in out.iter_mut().enumerate() {
                *b = self.byte(at + i as u64)?;
            }
        }
        Some(out)
    }

    /// The NUL-terminated string at `at`, which must end before `limit` and within [`NAME_CAP`] bytes.
    pub fn cstr(&mut self, at: u64, limit: u64) -> Option<String> {
        let limit = limit.min(self.len).min(at.saturating_add(NAME_CAP));
        let mut bytes = Vec::new();
        let mut p = at;
        while p < limit {
            let c = self.chunk(p / CHUNK)?;
            let from = (p % CHUNK) as usize;
            let upto = ((limit - p) as usize).min(c.len().saturating_sub(from));
            let part = c.get(from..from + upto)?;
            if let Some(nul) = part.iter().position(|&b| b == 0) {
                bytes.extend_from_slice(&part[..nul]);
                return Some(String::from_utf8_lossy(&bytes).into_owned());
            }
            bytes.extend_from_slice(part);
            p += upto as u64;
            if upto == 0 {
                return None;
            }
        }
        None
    }
}

/// Little- or big-endian integers of a table with `ptr`-byte pointers.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Little-endian.
    pub little: bool,
    /// Pointer size, 4 or 8.
    pub ptr: u64,
}

impl Layout {
    /// The `u32` at `at`.
    pub fn u32(self, c: &mut Chunks, at: u64) -> Option<u32> {
        let b = c.array::<4>(at)?;
        Some(if self.little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    }

    /// The `u16` at `at`.
    pub fn u16(self, c: &mut Chunks, at: u64) -> Option<u16> {
        let b = c.array::<2>(at)?;
        Some(if self.little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    }

    /// The pointer-sized word at `at`.
    pub fn word(self, c: &mut Chunks, at: u64) -> Option<u64> {
        if self.ptr == 4 {
            return self.u32(c, at).map(u64::from);
        }
        let b = c.array::<8>(at)?;
        Some(if self.little {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    }
}

/// An unsigned LEB128 varint of at most 32 bits at `*at` in `[.., limit)`, advancing `*at`.
fn uvarint(c: &mut Chunks, at: &mut u64, limit: u64) -> Option<u32> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        if *at >= limit {
            return None;
        }
        let b = c.byte(*at)?;
        *at += 1;
        value |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The value a pc-value table starting at file offset `table` (ending before `limit`) gives to `target`, for a
/// function starting at `entry` with instruction quantum `quantum`: pairs of a zig-zag value delta and a pc
/// delta in quanta, from value −1 at the entry; each value holds up to (not including) the pc after it. `None`
/// when the table ends before `target` or is malformed.
pub fn pcvalue(
    c: &mut Chunks,
    table: u64,
    limit: u64,
    entry: u64,
    quantum: u64,
    target: u64,
) -> Option<i32> {
    let (mut at, mut pc, mut value) = (table, entry, -1i32);
    for step in 0..PCVALUE_STEPS {
        let raw = uvarint(c, &mut at, limit)?;
        if raw == 0 && step > 0 {
            return None;
        }
        let delta = if raw & 1 != 0 { !(raw >> 1) } else { raw >> 1 };
        value = value.wrapping_add(delta as i32);
        let pcdelta = uvarint(c, &mut at, limit)?;
        pc = pc.checked_add(u64::from(pcdelta).checked_mul(quantum)?)?;
        if target < pc {
            return Some(value);
        }
    }
    None
}
