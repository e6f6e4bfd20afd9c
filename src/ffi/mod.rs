//! The C ABI, at the top of the layers: the exports with NT names and `Zw` aliases ([`exports`]), the sampler
//! extension's exports ([`sampler`]), the pointer
//! probes they check C pointers with (`probe`), and the `#[repr(C)]` records they write (`records`). The handle table they name objects with is `crate::handles`
//! (below the fork handling, which invalidates it in a forked child).
//!
//! # Safety
//! `exports` needs `#[unsafe(no_mangle)]` and builds a borrowed counter buffer through its `unsafe` constructor;
//! `probe` calls the guarded direct copy fallback of `perf::sys`; `records` views a record as its bytes. Each file allows `unsafe` itself and says why
//! at each use.

pub mod exports;
pub(crate) mod probe;
pub(crate) mod records;
pub mod sampler;
