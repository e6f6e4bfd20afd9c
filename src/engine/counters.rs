//! The profile's counter buffer: 32-bit counters the consumer increments atomically, owned by the profile
//! (Rust API) or borrowed from a C caller (`NtCreateProfile`'s `Buffer`).
//!
//! # Safety
//! A `CounterBuf` is a pointer and a length of 4-byte aligned, writable memory. For an owned buffer the memory
//! lives as long as the `ProfileCore` that holds it (the consumer keeps an `Arc` to the core while the profile is
//! published). For a borrowed buffer, the C caller must keep it valid until `NtStopProfile`/`NtClose` returns
//! (the contract, `docs/linux-mapping.md`, "Deliberate divergences", item 7); it was probed writable and 4-byte aligned at create
//! and again at start. Every increment is bounds-checked against the length: no write lands outside it.

use std::sync::atomic::{AtomicU32, Ordering};

/// Where the counters live.
pub enum CounterStorage {
    /// Counters owned by the profile (the Rust API).
    Owned(Box<[AtomicU32]>),
    /// A caller's buffer: address and number of ULONG counters (`BufferSize / 4`).
    Borrowed {
        /// Address of the first counter (4-byte aligned).
        addr: usize,
        /// Number of counters.
        len: usize,
    },
}

impl CounterStorage {
    /// The raw view the consumer writes through.
    pub fn buf(&self) -> CounterBuf {
        match self {
            CounterStorage::Owned(b) => CounterBuf {
                ptr: b.as_ptr(),
                len: b.len(),
            },
            CounterStorage::Borrowed { addr, len } => CounterBuf {
                ptr: *addr as *const AtomicU32,
                len: *len,
            },
        }
    }

    /// A snapshot of the counters (owned storage only; a borrowed buffer is read by its owner).
    pub fn snapshot(&self) -> Option<Vec<u32>> {
        match self {
            // Relaxed: a live read of independent counters; after a stop, the stop's ack already ordered every
            // increment before this read.
            CounterStorage::Owned(b) => Some(b.iter().map(|c| c.load(Ordering::Relaxed)).collect()),
            CounterStorage::Borrowed { .. } => None,
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
            // SAFETY: `index < len`, so the counter is inside the buffer, which is live and writable (module
            // docs). Relaxed: each counter is independent; the stop barrier's channel ack orders every increment
            // before the caller's reads after stop.
            unsafe { (*self.ptr.add(index as usize)).fetch_add(1, Ordering::Relaxed) };
        }
    }
}
