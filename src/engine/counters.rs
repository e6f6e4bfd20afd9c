//! What the consumer counts into: a profile's counter buffer (32-bit counters incremented atomically, owned by
//! the profile for the Rust API or borrowed from a C caller for `NtCreateProfile`'s `Buffer`), its statistics,
//! and [`Counts`], the part of a profile the engine publishes to the consumer thread; the ids of profiles and
//! streams.
//!
//! # Safety
//! A `CounterBuf` is a pointer and a length of 4-byte aligned, writable memory. For an owned buffer the memory
//! lives as long as the [`Counts`] that holds it (the consumer keeps an `Arc` to it while the profile is
//! published). For a borrowed buffer, the C caller must keep it valid until `NtStopProfile`/`NtClose` returns
//! (the contract stated in `include/ntprofile.h`); it was probed writable and 4-byte aligned at create and
//! again at start, and [`CounterStorage::borrowed`] is an `unsafe fn` that states that promise. Every increment
//! is bounds-checked against the length: no write lands outside it.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::buckets::BucketLayout;

/// A profile's identity inside the engine (unique for the life of the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ProfileId(u64);

impl ProfileId {
    /// A new, never used id.
    pub(crate) fn next() -> ProfileId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        // Relaxed: a unique number, nothing else is ordered by it.
        ProfileId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A stream's identity, shared by the engine and the consumer thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct StreamId(pub(super) u64);

/// A caller's counter buffer: address and number of ULONG counters (`BufferSize / 4`). Built only by
/// [`CounterStorage::borrowed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BorrowedCounters {
    addr: usize,
    len: usize,
}

impl BorrowedCounters {
    /// Address of the first counter.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Number of counters.
    pub fn len(&self) -> usize {
        self.len
    }
}

/// Where the counters live.
pub enum CounterStorage {
    /// Counters owned by the profile (the Rust API).
    Owned(Box<[AtomicU32]>),
    /// A caller's buffer (the C API).
    Borrowed(BorrowedCounters),
}

impl CounterStorage {
    /// A caller's buffer of `len` counters at `addr`.
    ///
    /// # Safety
    /// `[addr, addr + 4 × len)` must be 4-byte aligned memory of this process, writable, and stay so until
    /// the last profile that counts into it is stopped (`NtStopProfile`/`NtClose` returned): the consumer
    /// thread increments counters there, atomically, while the profile is started. The C exports check
    /// alignment and writability at create and again at each start; the rest is the C caller's promise.
    pub unsafe fn borrowed(addr: usize, len: usize) -> CounterStorage {
        CounterStorage::Borrowed(BorrowedCounters { addr, len })
    }

    /// The raw view the consumer writes through.
    pub fn buf(&self) -> CounterBuf {
        match self {
            CounterStorage::Owned(b) => CounterBuf {
                ptr: b.as_ptr(),
                len: b.len(),
            },
            CounterStorage::Borrowed(b) => CounterBuf {
                ptr: b.addr as *const AtomicU32,
                len: b.len,
            },
        }
    }

    /// A snapshot of the counters (owned storage only; a borrowed buffer is read by its owner).
    pub fn snapshot(&self) -> Option<Vec<u32>> {
        match self {
            // Relaxed: a live read of independent counters; after a stop, the stop's ack already ordered every
            // increment before this read.
            CounterStorage::Owned(b) => Some(b.iter().map(|c| c.load(Ordering::Relaxed)).collect()),
            CounterStorage::Borrowed(_) => None,
        }
    }

    /// Set every owned counter to zero (owned storage only).
    pub fn clear(&self) {
        if let CounterStorage::Owned(b) = self {
            // Relaxed: the caller clears between runs; increments racing with a clear may survive it, as in NT.
            b.iter().for_each(|c| c.store(0, Ordering::Relaxed));
        }
    }
}

/// A pointer and a length of counters, copied into the consumer's tables.
#[derive(Clone, Copy, Debug)]
pub struct CounterBuf {
    ptr: *const AtomicU32,
    len: usize,
}

// SAFETY: the pointee is a set of atomics, safe to touch from any thread; lifetime is guaranteed by the
// publication protocol described in the module docs.
unsafe impl Send for CounterBuf {}

impl CounterBuf {
    /// Add one (wrapping modulo 2^32, as NT) to counter `index`; an index at or past the end is ignored.
    #[inline(always)]
    pub fn increment(&self, index: u64) {
        if index < self.len as u64 {
            // SAFETY: `index < len`, so the offset stays inside the buffer (module docs).
            let counter = unsafe { self.ptr.add(index as usize) };
            // SAFETY: `counter` is inside the buffer, which is live, aligned and writable (module docs). Relaxed:
            // each counter is independent; the stop barrier's channel ack orders every increment before the
            // caller's reads after stop.
            unsafe { (*counter).fetch_add(1, Ordering::Relaxed) };
        }
    }
}

/// What a profile counted, read live or after a stop.
///
/// Every sample the kernel delivered for the profile's source, process and processors while it was started is in
/// exactly one of `counted` and `outside`; samples the kernel dropped because a ring was full are in `lost`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ProfileStats {
    /// Samples that fell in the range and incremented a counter.
    pub counted: u64,
    /// Samples of the profile's source, process and processors whose PC was outside the range.
    pub outside: u64,
    /// Samples the kernel dropped (full ring: `PERF_RECORD_LOST`) on the profile's processors.
    pub lost: u64,
    /// Times the kernel throttled the event on the profile's processors (`PERF_RECORD_THROTTLE`, or the
    /// episode's `PERF_RECORD_UNTHROTTLE` when a full ring dropped the first).
    pub throttled: u64,
}

/// A profile's statistics, added to by the consumer and read by the API.
#[derive(Default)]
pub(crate) struct StatsCell {
    counted: AtomicU64,
    outside: AtomicU64,
    lost: AtomicU64,
    throttled: AtomicU64,
}

impl StatsCell {
    /// Add a batch (called by the consumer only).
    pub(crate) fn add(&self, d: &ProfileStats) {
        // Relaxed: the consumer is the only writer; readers want eventual values, and a stop's ack orders the
        // final additions before the caller's reads.
        self.counted.fetch_add(d.counted, Ordering::Relaxed);
        self.outside.fetch_add(d.outside, Ordering::Relaxed);
        self.lost.fetch_add(d.lost, Ordering::Relaxed);
        self.throttled.fetch_add(d.throttled, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> ProfileStats {
        // Relaxed: see `add`.
        ProfileStats {
            counted: self.counted.load(Ordering::Relaxed),
            outside: self.outside.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
        }
    }
}

/// The part of a profile the consumer thread needs: its id, range and buckets, counters and statistics.
/// Shared (`Arc`) between the profile and the consumer while started.
pub(crate) struct Counts {
    pub(crate) id: ProfileId,
    pub(crate) layout: BucketLayout,
    pub(crate) storage: CounterStorage,
    pub(crate) stats: StatsCell,
}

impl Counts {
    /// Counts for a new profile with range `layout`, counting into `storage`.
    pub(crate) fn new(layout: BucketLayout, storage: CounterStorage) -> Counts {
        Counts {
            id: ProfileId::next(),
            layout,
            storage,
            stats: StatsCell::default(),
        }
    }
}
