//! The C ABI, at the top of the layers: the exports with NT names and `Zw` aliases ([`exports`], every export
//! reachable there, each written in the file of its topic: `profile_exports` create, open, start, stop and close,
//! `source_exports` sources, intervals and statistics, `module_exports` modules and functions; `boundary` the
//! panic boundary and pseudo-handles they share), the sampler extension's exports ([`sampler`]; its C types in
//! `sampler_records`), the pointer probes they check C pointers with (`probe`), and the `#[repr(C)]` records
//! they write (`records`), and the blocked-thread reading of off-CPU profilers ([`blocked`]). The handle table they name objects with is `crate::handles` (below the fork
//! handling, which invalidates it in a forked child).
//!
//! # Safety
//! The export files need `#[unsafe(no_mangle)]`, and `profile_exports` builds a borrowed counter buffer through
//! its `unsafe` constructor; `sampler` also calls the caller's record routine (a C function pointer);
//! `probe` calls the guarded direct copy fallback of `perf::sys`; `records` views a record as its bytes. Each
//! file allows `unsafe` itself and says why at each use.

pub mod blocked;
mod boundary;
pub mod exports;
mod module_exports;
pub(crate) mod probe;
mod profile_exports;
pub(crate) mod records;
pub mod sampler;
mod sampler_records;
mod source_exports;
