//! The perf mmap ring: mapping, and the lock-free read protocol (records decoded by [`decode`](super::decode),
//! or handed out whole as their words by [`Ring::drain_words`]); never allocating.
//!
//! # Safety
//! A `Ring` owns one `mmap` of a perf event descriptor: one metadata page (`struct perf_event_mmap_page`)
//! followed by `2^n` data pages. The mapping stays valid until `Drop` unmaps it, independently of the
//! descriptor (a mapping holds its own reference to the event's buffer). The kernel writes records into the
//! data area and publishes them by storing `data_head`; we read only bytes between `data_tail` and the
//! `data_head` we loaded, and give space back by storing `data_tail`.
//!
//! The metadata page's layout comes from `perf-event-open-sys2`'s bindings of `<linux/perf_event.h>`.
#![allow(unsafe_code)]

use std::mem::offset_of;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::decode::{HEADER, SIZE_SHIFT, WORD, decode};
use super::sys;
// The records a ring's reader hands out, named where they have always been named.
pub(crate) use super::decode::decode_slice;
pub use super::decode::{Record, SampleLayout};

/// Offset of `data_head` in `struct perf_event_mmap_page`.
const DATA_HEAD: usize = offset_of!(perf_event_mmap_page, data_head);
/// Offset of `data_tail`.
const DATA_TAIL: usize = offset_of!(perf_event_mmap_page, data_tail);
/// Offset of `data_offset`.
const DATA_OFFSET: usize = offset_of!(perf_event_mmap_page, data_offset);
/// Offset of `data_size`.
const DATA_SIZE: usize = offset_of!(perf_event_mmap_page, data_size);

/// One mapped perf ring.
pub struct Ring {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    mask: u64,
    layout: SampleLayout,
    /// The fork generation of the process that mapped the ring ([`sys::fork_generation`]): in a `fork()`ed
    /// child the mapping does not exist (perf mappings are not copied), and the ring is never touched there.
    generation: u64,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to another thread (the consumer)
// moves that ownership. Only one thread reads a given ring at a time (`&mut self` in `drain`).
unsafe impl Send for Ring {}

impl Ring {
    /// Map the ring of event `fd` with `data_pages` (a power of two) data pages.
    ///
    /// # Errors
    /// The errno of `mmap(2)`: EPERM/ENOMEM when the locked-memory budget is spent.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize, layout: SampleLayout) -> Result<Ring, Errno> {
        assert!(data_pages.is_power_of_two());
        sys::watch_forks();
        let page = page_size();
        let map_len = (1 + data_pages) * page;
        // SAFETY: a fresh shared mapping of a perf event descriptor; no existing memory is touched. PROT_WRITE
        // is needed to store `data_tail` (without it the kernel would overwrite unread records).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let base = base.cast::<u8>();
        // Both offsets lie inside the mapped metadata page (no wrap-around: plain pointer arithmetic).
        let (offset_at, size_at) = (base.wrapping_add(DATA_OFFSET), base.wrapping_add(DATA_SIZE));
        // SAFETY: an aligned u64 of the mapped metadata page; the kernel fills it before mmap returns.
        let data_offset = unsafe { std::ptr::read_volatile(offset_at.cast::<u64>()) };
        // SAFETY: as above, for `data_size`.
        let data_size = unsafe { std::ptr::read_volatile(size_at.cast::<u64>()) };
        let (data_offset, data_size) = if data_size == 0 {
            // Kernels before 4.1 leave these zero: the data area starts at the second page.
            (page as u64, (data_pages * page) as u64)
        } else {
            (data_offset, data_size)
        };
        Ok(Ring {
            base,
            map_len,
            data_offset: data_offset as usize,
            mask: data_size - 1,
            layout,
            generation: sys::fork_generation(),
        })
    }

    /// A ring in anonymous memory with the kernel's layout (metadata page, then `data_pages` data pages), for
    /// replaying recorded ring contents through the consumer's decoder (`engine::replay`, unstable). Nothing but
    /// [`Ring::load`] writes records into it.
    ///
    /// # Errors
    /// The errno of `mmap(2)`.
    pub fn anonymous(data_pages: usize, layout: SampleLayout) -> Result<Ring, Errno> {
        assert!(data_pages.is_power_of_two());
        let page = page_size();
        let map_len = (1 + data_pages) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(Ring {
            base: base.cast::<u8>(),
            map_len,
            data_offset: page,
            mask: (data_pages * page) as u64 - 1,
            layout,
            generation: sys::fork_generation(),
        })
    }

    /// Copy `records` (whole records, in the kernel's format, at most the data area) to the start of the data
    /// area of an [`anonymous`](Ring::anonymous) ring and make them readable: tail 0, head their length.
    pub fn load(&mut self, records: &[u8]) {
        let size = (self.mask + 1) as usize;
        assert!(records.len() <= size && records.len() % 8 == 0);
        // SAFETY: `data_offset` is inside our own mapping.
        let data = unsafe { self.base.add(self.data_offset) };
        // SAFETY: the data area is `size` bytes of our own mapping from `data`, `records` fits, and the two do not
        // overlap (`records` is caller memory).
        unsafe { std::ptr::copy_nonoverlapping(records.as_ptr(), data, records.len()) };
        self.rewind(records.len() as u64);
    }

    /// Make the first `len` bytes of the data area readable again (tail 0, head `len`): the replay of the same
    /// contents. Only for an [`anonymous`](Ring::anonymous) ring (a kernel ring's head is the kernel's).
    pub fn rewind(&mut self, len: u64) {
        // Relaxed/Release: this thread is the ring's only reader and writer; Release orders `load`'s copy before
        // the head that publishes it, as the kernel's store does.
        self.tail().store(0, Ordering::Relaxed);
        self.head().store(len, Ordering::Release);
    }

    /// The bytes between tail and head, in order (unwrapped), without consuming them: a recording of the
    /// ring's contents.
    pub fn copy_out(&self) -> Vec<u8> {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        let mut out = Vec::with_capacity(head.saturating_sub(tail) as usize);
        let mut pos = tail;
        while pos < head {
            out.extend_from_slice(&self.word(pos).to_ne_bytes());
            pos += 8;
        }
        out
    }

    /// The 8-byte aligned u64 at `offset` (`data_head` or `data_tail`) of the metadata page, as an atomic.
    fn metadata_word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is DATA_HEAD or DATA_TAIL, inside the mapped metadata page.
        let at = unsafe { self.base.add(offset) };
        // SAFETY: an 8-byte aligned u64 inside the mapping, alive while `self` is; the kernel and this thread
        // access it only atomically.
        unsafe { &*at.cast::<AtomicU64>() }
    }

    fn head(&self) -> &AtomicU64 {
        self.metadata_word(DATA_HEAD)
    }

    fn tail(&self) -> &AtomicU64 {
        self.metadata_word(DATA_TAIL)
    }

    /// Read the 8-byte word at ring position `pos` (an 8-aligned position: records are 8-aligned and the data
    /// size is a multiple of 8, so a word never straddles the end of the ring).
    #[inline(always)]
    fn word(&self, pos: u64) -> u64 {
        let off = self.data_offset + (pos & self.mask) as usize;
        // SAFETY: `off` is inside the data area of the mapping (masked by the data size).
        let at = unsafe { self.base.add(off) };
        // SAFETY: an 8-aligned word of the data area; the caller only reads positions in [tail, head), which the
        // kernel finished writing before its store of `data_head` (paired with our Acquire load in `drain`).
        unsafe { std::ptr::read_volatile(at.cast::<u64>()) }
    }

    /// Bytes of the mapping (the metadata page and the data pages): the locked memory the ring costs.
    pub fn map_len(&self) -> usize {
        self.map_len
    }

    /// The fork generation of the process that mapped the ring: the ring exists only where
    /// [`sys::fork_generation`] still returns it.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// True when records are waiting.
    pub fn has_data(&self) -> bool {
        self.fill().0 != 0
    }

    /// Where the ring was read up to (`data_tail`; Relaxed: only this thread writes it).
    pub fn consumed(&self) -> u64 {
        self.tail().load(Ordering::Relaxed)
    }

    /// Bytes waiting to be read, and the size of the data area: how full the ring is.
    pub fn fill(&self) -> (u64, u64) {
        // Acquire pairs with the kernel's release store of `data_head`.
        let used = self
            .head()
            .load(Ordering::Acquire)
            .wrapping_sub(self.consumed());
        (used, self.mask + 1)
    }

    /// Decode every record between `data_tail` and `data_head`, hand each to `sink`, then give the space back.
    /// Returns the number of records read. No allocation, no lock.
    #[inline]
    pub fn drain(&mut self, sink: impl FnMut(Record)) -> u64 {
        // Acquire: pairs with the kernel's release store of `data_head`; every record before it is visible.
        let head = self.head().load(Ordering::Acquire);
        // Relaxed: only this thread writes `data_tail`.
        let tail = self.tail().load(Ordering::Relaxed);
        let (pos, n) = decode(
            |pos| self.word(pos),
            tail,
            head,
            self.mask + 1,
            self.layout,
            sink,
        );
        // Release: our reads of the records happen-before the kernel reuses the space (it reads `data_tail`
        // with a full barrier before writing over it).
        self.tail().store(pos, Ordering::Release);
        n
    }
}

impl Ring {
    /// The largest record the kernel writes, in 8-byte words: a header's size is a `u16` of bytes. A scratch
    /// buffer of this many words holds any record that wraps round the ring's end.
    pub const MAX_RECORD_WORDS: usize = (u16::MAX as usize) / 8;

    /// Hand every whole record between `data_tail` and `data_head` to `sink` as its 8-byte words (header
    /// included), giving the space back as it goes. A record that lies in one piece is borrowed from the mapping;
    /// one that wraps round the ring's end is copied into `scratch` (at least [`Ring::MAX_RECORD_WORDS`] words)
    /// and borrowed from there: no allocation.
    ///
    /// A record handed to `sink` is consumed, whatever `sink` does: when it returns `Break`, and when it panics,
    /// `data_tail` is stored past it (and past every record before it) on the way out, so that the next pass
    /// does not deliver them again. When the process has `fork()`ed meanwhile (`sink` forked, and this is the
    /// child) the pass ends at once without touching the ring again: the child does not have the mapping.
    ///
    /// A header that is torn or corrupt (size below 8, not a multiple of 8, past `head`) ends the pass at `head`,
    /// as [`decode`] does; so does a `head` more than a ring's length ahead of `tail`.
    pub fn drain_words(
        &mut self,
        scratch: &mut [u64],
        mut sink: impl FnMut(&[u64]) -> ControlFlow<()>,
    ) -> Drained {
        assert!(scratch.len() >= Ring::MAX_RECORD_WORDS);
        let mut out = Drained {
            records: 0,
            used: 0,
            size: self.mask + 1,
            forked: false,
        };
        if self.generation != sys::fork_generation() {
            out.forked = true;
            return out;
        }
        // Acquire: pairs with the kernel's release store of `data_head`; every record before it is visible.
        let head = self.head().load(Ordering::Acquire);
        // Relaxed: only this thread writes `data_tail`.
        let tail = self.tail().load(Ordering::Relaxed);
        let ring_len = self.mask + 1;
        let mut guard = TailGuard {
            tail: self.tail(),
            pos: tail,
            generation: self.generation,
        };
        if tail % WORD != 0 || head.wrapping_sub(tail) > ring_len {
            guard.pos = head.max(tail);
        }
        while guard.pos < head {
            let pos = guard.pos;
            let header = self.word(pos);
            let size = header >> SIZE_SHIFT;
            if size < HEADER || size % WORD != 0 || size > head - pos {
                guard.pos = head;
                break;
            }
            let start = pos & self.mask;
            let words = (size / WORD) as usize;
            // Consumed from here on, even if `sink` panics: the guard stores the tail past it.
            guard.pos = pos + size;
            out.records += 1;
            let flow = if start + size <= ring_len {
                // SAFETY: `data_offset + start` is inside the data area of the mapping (masked by its size).
                let at = unsafe { self.base.add(self.data_offset + start as usize) };
                // SAFETY: `words` 8-aligned u64s from `at` lie inside the data area (start + size <= its length),
                // in [tail, head): the kernel finished writing them before its store of `data_head` (our Acquire
                // load above) and writes there again only after we store a `data_tail` past them, which the
                // guard does once `sink` has returned (or unwound); the borrow ends with `sink`'s call.
                let record = unsafe { std::slice::from_raw_parts(at.cast::<u64>(), words) };
                sink(record)
            } else {
                for (i, w) in scratch[..words].iter_mut().enumerate() {
                    *w = self.word(pos + i as u64 * WORD);
                }
                sink(&scratch[..words])
            };
            if self.generation != sys::fork_generation() {
                // `sink` forked and this is the child: the mapping is not here.
                std::mem::forget(guard);
                out.forked = true;
                return out;
            }
            if flow.is_break() {
                break;
            }
        }
        // Acquire as above: how full the ring is just before the space is given back. Every record the kernel
        // could not write since the last pass found less free space than this moment leaves (nothing was given
        // back meanwhile), which is how the caller knows whether the kernel may have dropped any.
        out.used = self.head().load(Ordering::Acquire).wrapping_sub(tail);
        drop(guard);
        out
    }
}

/// What a pass of [`Ring::drain_words`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Records handed to the sink.
    pub records: u64,
    /// Bytes the ring held (read or not) just before the pass gave its space back: the lowest free space since
    /// the previous pass is `size - used`.
    pub used: u64,
    /// The size of the data area in bytes.
    pub size: u64,
    /// The process forked during the pass and this is the child: the ring was left alone.
    pub forked: bool,
}

/// Stores `data_tail` at `pos` when dropped (at the end of a pass, or while a panic of the sink unwinds), unless
/// the process is a `fork()`ed child of the one that mapped the ring.
struct TailGuard<'a> {
    tail: &'a AtomicU64,
    pos: u64,
    generation: u64,
}

impl Drop for TailGuard<'_> {
    fn drop(&mut self) {
        if self.generation == sys::fork_generation() {
            // Release: our reads of the records happen-before the kernel reuses the space (it reads `data_tail`
            // with a full barrier before writing over it).
            self.tail.store(self.pos, Ordering::Release);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned; nothing borrows the mapping past `self`.
        unsafe {
            libc::munmap(self.base.cast(), self.map_len);
        }
    }
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::decode::{RECORD_SAMPLE, RECORD_THROTTLE};

    fn header(kind: u32, size: u64) -> u64 {
        u64::from(kind) | (size << 48)
    }

    /// `drain_words`: a record that wraps round the ring's end comes whole from the scratch buffer, the ones in
    /// one piece straight from the ring, and the tail moves past all of them.
    #[test]
    fn drain_words_reassembles_a_record_that_wraps() {
        let mut ring = Ring::anonymous(
            1,
            SampleLayout {
                tid: true,
                user_ip: false,
                cpu: false,
            },
        )
        .expect("anonymous ring");
        let size = ring.mask + 1;
        let put = |ring: &Ring, pos: u64, w: u64| {
            let off = ring.data_offset + (pos & ring.mask) as usize;
            let at = ring.base.wrapping_add(off).cast::<u64>();
            // SAFETY: an 8-aligned word inside the data area of our own anonymous mapping.
            unsafe { std::ptr::write_volatile(at, w) };
        };
        // Two turns round the ring already: positions keep growing, the data area wraps.
        let start = 2 * size - 8;
        let recs: [&[u64]; 2] = [
            &[header(RECORD_SAMPLE, 32), 0xA1, 0xA2, 0xA3],
            &[header(RECORD_THROTTLE, 16), 0xB1],
        ];
        let mut pos = start;
        for rec in recs {
            for &w in rec {
                put(&ring, pos, w);
                pos += 8;
            }
        }
        ring.tail().store(start, Ordering::Relaxed);
        ring.head().store(pos, Ordering::Release);
        let mut scratch = vec![0u64; Ring::MAX_RECORD_WORDS];
        let mut got: Vec<Vec<u64>> = Vec::new();
        let drained = ring.drain_words(&mut scratch, |w| {
            got.push(w.to_vec());
            ControlFlow::Continue(())
        });
        assert_eq!(drained.records, 2);
        assert!(!drained.forked);
        assert_eq!(got, [recs[0].to_vec(), recs[1].to_vec()]);
        assert_eq!(ring.tail().load(Ordering::Relaxed), pos);
        // A torn header ends the pass at head.
        put(&ring, pos, header(RECORD_SAMPLE, 4));
        ring.head().store(pos + 16, Ordering::Release);
        assert_eq!(
            ring.drain_words(&mut scratch, |_| panic!("a torn record"))
                .records,
            0
        );
        assert_eq!(ring.tail().load(Ordering::Relaxed), pos + 16);
    }

    /// A sink that panics leaves the record it was given, and every one before it, consumed: the tail moves past
    /// them while the panic unwinds, and the next pass starts at the record after.
    #[test]
    fn a_panicking_sink_consumes_what_it_was_given() {
        let mut ring = Ring::anonymous(
            1,
            SampleLayout {
                tid: true,
                user_ip: false,
                cpu: false,
            },
        )
        .expect("anonymous ring");
        let mut bytes = Vec::new();
        for i in 0..3u64 {
            for w in [header(RECORD_THROTTLE, 16), i] {
                bytes.extend_from_slice(&w.to_ne_bytes());
            }
        }
        ring.load(&bytes);
        let mut scratch = vec![0u64; Ring::MAX_RECORD_WORDS];
        let mut seen = Vec::new();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ring.drain_words(&mut scratch, |w| {
                seen.push(w[1]);
                if w[1] == 1 {
                    panic!("the sink fails on the second record");
                }
                ControlFlow::Continue(())
            })
        }));
        assert!(result.is_err());
        assert_eq!(ring.tail().load(Ordering::Relaxed), 32);
        let mut rest = Vec::new();
        ring.drain_words(&mut scratch, |w| {
            rest.push(w[1]);
            ControlFlow::Continue(())
        });
        assert_eq!((seen, rest), (vec![0, 1], vec![2]));
    }
}
