//! The C ABI: exports with NT names and `Zw` aliases, the handle table, pointer probes.
//!
//! # Safety
//! `exports` needs `#[unsafe(no_mangle)]`; `probe` has one guarded direct write/read fallback. Both say why
//! at each use.

#[allow(unsafe_code)]
pub mod exports;
pub(crate) mod handles;
pub(crate) mod probe;
