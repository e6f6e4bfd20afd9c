//! The perf mmap ring: mapping, the lock-free read protocol, and a fixed-layout record decoder that never
//! allocates.
//!
//! # Safety
//! A `Ring` owns one `mmap` of a perf event descriptor: one metadata page (`struct perf_event_mmap_page`)
//! followed by `2^n` data pages. The mapping stays valid until `Drop` unmaps it, independently of the
//! descriptor (a mapping holds its own reference to the event's buffer). The kernel writes records into the
//! data area and publishes them by storing `data_head`; we read only bytes between `data_tail` and the
//! `data_head` we loaded, and give space back by storing `data_tail`.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Offset of `data_head` in `struct perf_event_mmap_page` (see `perf_event_open(2)`).
const DATA_HEAD: usize = 1024;
/// Offset of `data_tail`.
const DATA_TAIL: usize = 1032;
/// Offset of `data_offset`.
const DATA_OFFSET: usize = 1040;
/// Offset of `data_size`.
const DATA_SIZE: usize = 1048;

/// `PERF_RECORD_LOST`.
const RECORD_LOST: u32 = 2;
/// `PERF_RECORD_THROTTLE`.
const RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`.
const RECORD_UNTHROTTLE: u32 = 6;
/// `PERF_RECORD_SAMPLE`.
const RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_LOST_SAMPLES`.
const RECORD_LOST_SAMPLES: u32 = 13;

/// The layout of a stream's `PERF_RECORD_SAMPLE`: always `PERF_SAMPLE_IP`, optionally `PERF_SAMPLE_TID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleLayout {
    /// `PERF_SAMPLE_TID` follows the IP.
    pub tid: bool,
}

/// One decoded record. Only the kinds the consumer acts on are told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// `PERF_RECORD_SAMPLE`: the sampled program counter, and the process and thread when recorded.
    Sample {
        /// The sampled instruction pointer.
        ip: u64,
        /// Process id (0 when not recorded).
        pid: u32,
        /// Thread id (0 when not recorded).
        tid: u32,
    },
    /// `PERF_RECORD_LOST` or `PERF_RECORD_LOST_SAMPLES`: this many samples were dropped.
    Lost(u64),
    /// `PERF_RECORD_THROTTLE`: the kernel throttled the event.
    Throttle,
    /// `PERF_RECORD_UNTHROTTLE`.
    Unthrottle,
    /// Anything else (ignored).
    Other,
}

/// One mapped perf ring.
pub struct Ring {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    mask: u64,
    layout: SampleLayout,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to another thread (the consumer)
// moves that ownership. Only one thread reads a given ring at a time (`&mut self` in `drain`).
unsafe impl Send for Ring {}

impl Ring {
    /// Map the ring of event `fd` with `data_pages` (a power of two) data pages.
    ///
    /// # Errors
    /// The errno of `mmap(2)`: EPERM/ENOMEM when the locked-memory budget is spent.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize, layout: SampleLayout) -> Result<Ring, i32> {
        assert!(data_pages.is_power_of_two());
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
            return Err(super::event::last_errno());
        }
        let base = base.cast::<u8>();
        // SAFETY: the metadata page is mapped and the kernel fills `data_offset`/`data_size` before mmap returns.
        let (data_offset, data_size) = unsafe {
            (
                std::ptr::read_volatile(base.add(DATA_OFFSET).cast::<u64>()),
                std::ptr::read_volatile(base.add(DATA_SIZE).cast::<u64>()),
            )
        };
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
        })
    }

    /// A ring in anonymous memory with the kernel's layout (metadata page, then `data_pages` data pages), for
    /// replaying recorded ring contents through the consumer's decoder (`engine::replay`, unstable). Nothing but
    /// [`Ring::load`] writes records into it.
    ///
    /// # Errors
    /// The errno of `mmap(2)`.
    pub fn anonymous(data_pages: usize, layout: SampleLayout) -> Result<Ring, i32> {
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
            return Err(super::event::last_errno());
        }
        Ok(Ring {
            base: base.cast::<u8>(),
            map_len,
            data_offset: page,
            mask: (data_pages * page) as u64 - 1,
            layout,
        })
    }

    /// Copy `records` (whole records, in the kernel's format, at most the data area) to the start of the data
    /// area of an [`anonymous`](Ring::anonymous) ring and make them readable: tail 0, head their length.
    pub fn load(&mut self, records: &[u8]) {
        let size = (self.mask + 1) as usize;
        assert!(records.len() <= size && records.len() % 8 == 0);
        // SAFETY: the data area is `size` bytes of our own mapping starting at `data_offset`, and `records` fits.
        unsafe {
            std::ptr::copy_nonoverlapping(
                records.as_ptr(),
                self.base.add(self.data_offset),
                records.len(),
            );
        }
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

    fn head(&self) -> &AtomicU64 {
        // SAFETY: `data_head` is an 8-byte aligned u64 inside the mapped metadata page, alive while `self` is.
        unsafe { &*self.base.add(DATA_HEAD).cast::<AtomicU64>() }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as `head`, for `data_tail`.
        unsafe { &*self.base.add(DATA_TAIL).cast::<AtomicU64>() }
    }

    /// Read the 8-byte word at ring position `pos` (an 8-aligned position: records are 8-aligned and the data
    /// size is a multiple of 8, so a word never straddles the end of the ring).
    #[inline(always)]
    fn word(&self, pos: u64) -> u64 {
        let off = self.data_offset + (pos & self.mask) as usize;
        // SAFETY: `off` is inside the data area; the caller only reads positions in [tail, head), which the
        // kernel finished writing before its store of `data_head` (paired with our Acquire load in `drain`).
        unsafe { std::ptr::read_volatile(self.base.add(off).cast::<u64>()) }
    }

    /// True when records are waiting.
    pub fn has_data(&self) -> bool {
        // Acquire pairs with the kernel's release store of `data_head`; Relaxed for `data_tail`, which only this
        // thread writes.
        self.head().load(Ordering::Acquire) != self.tail().load(Ordering::Relaxed)
    }

    /// Bytes waiting to be read, and the size of the data area: how full the ring is.
    pub fn fill(&self) -> (u64, u64) {
        // Acquire/Relaxed as in `has_data`.
        let used = self
            .head()
            .load(Ordering::Acquire)
            .wrapping_sub(self.tail().load(Ordering::Relaxed));
        (used, self.mask + 1)
    }

    /// Decode every record between `data_tail` and `data_head`, hand each to `sink`, then give the space back.
    /// Returns the number of records read. No allocation, no lock.
    #[inline]
    pub fn drain(&mut self, mut sink: impl FnMut(Record)) -> u64 {
        // Acquire: pairs with the kernel's release store of `data_head`; every record before it is visible.
        let head = self.head().load(Ordering::Acquire);
        // Relaxed: only this thread writes `data_tail`.
        let mut pos = self.tail().load(Ordering::Relaxed);
        let mut n = 0;
        while pos < head {
            let header = self.word(pos);
            let kind = header as u32;
            let size = header >> 48;
            if size < 8 || pos + size > head {
                // A torn or corrupt header: never loop forever; skip to head.
                pos = head;
                break;
            }
            let rec = match kind {
                RECORD_SAMPLE => {
                    let ip = self.word(pos + 8);
                    let (pid, tid) = if self.layout.tid && size >= 24 {
                        let w = self.word(pos + 16);
                        (w as u32, (w >> 32) as u32)
                    } else {
                        (0, 0)
                    };
                    Record::Sample { ip, pid, tid }
                }
                RECORD_LOST if size >= 24 => Record::Lost(self.word(pos + 16)),
                RECORD_LOST_SAMPLES if size >= 16 => Record::Lost(self.word(pos + 8)),
                RECORD_THROTTLE => Record::Throttle,
                RECORD_UNTHROTTLE => Record::Unthrottle,
                _ => Record::Other,
            };
            sink(rec);
            n += 1;
            pos += size;
        }
        // Release: our reads of the records happen-before the kernel reuses the space (it reads `data_tail`
        // with a full barrier before writing over it).
        self.tail().store(pos, Ordering::Release);
        n
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
