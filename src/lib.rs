//! # ntprofile
//!
//! The Windows NT profiling API — `NtCreateProfile`, `NtCreateProfileEx`, `NtStartProfile`, `NtStopProfile`,
//! `NtSetIntervalProfile`, `NtQueryIntervalProfile`, `NtClose` — on Linux, backed by `perf_event` sampling.
//! A consumer thread reads the perf mmap rings and applies the NT KPROFILE rule (range test, bucket shift) to
//! count samples into 32-bit buckets.
//!
//! From Rust:
//!
//! ```no_run
//! use ntprofile::{Profile, ProfileSource, find_function};
//!
//! #[inline(never)]
//! fn hot() -> u64 { (0..10_000_000u64).fold(0, |a, b| a ^ b.wrapping_mul(31)) }
//!
//! // The exact range of hot(), from the symbol table.
//! let function = find_function(None, None, concat!(module_path!(), "::hot"))?;
//! let profile = Profile::builder()
//!     .function(&function)    // [address, address + size)
//!     .bucket_size(2)         // 4-byte buckets
//!     .source(ProfileSource::Time)
//!     .build()?;
//! profile.start()?;
//! std::hint::black_box(hot());
//! profile.stop()?;            // a barrier: every sample taken before it is counted
//! println!("{:?}", profile.stats());
//! # Ok::<(), ntprofile::Error>(())
//! ```
//!
//! Other targets, as the C API has them: [`Process::open`] and [`ProfileBuilder::process`] (another process),
//! [`ProfileBuilder::global`] (every process), kernel ranges ([`kernel_modules`]), processors as
//! [`GroupAffinity`] records; and what to profile: [`modules`], [`find_module`], [`find_function`].
//!
//! From C: `include/ntprofile.h` and `libntprofile.so`. The contract is `../shared/spec/nt-profile-api.md`,
//! the Linux mapping `../shared/spec/linux-mapping.md`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod affinity;
mod api;
pub mod buckets;
pub mod engine;
mod error;
pub mod ffi;
#[allow(unsafe_code)]
mod loader;
mod modules;
#[allow(unsafe_code)]
mod perf;
mod process;
pub mod profile;
pub mod source;
pub mod status;
pub mod target;

pub use affinity::{Affinity, CpuSet};
pub use api::{Profile, ProfileBuilder, query_interval, set_interval, set_jitter};
pub use buckets::BucketLayout;
pub use error::Error;
pub use modules::{
    Module, Symbol, find_function, find_kernel_function, find_module, kernel_modules,
    kernel_symbols, modules,
};
pub use process::{GroupAffinity, Process};
pub use profile::ProfileStats;
pub use source::{
    IntervalUnit, PerfEventSpec, ProfileSource, SourceInfo, Support, list_sources,
    register_raw_source,
};
pub use status::NtStatus;
