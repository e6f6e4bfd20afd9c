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
//! use ntprofile::{Profile, ProfileSource};
//!
//! fn hot() -> u64 { (0..10_000_000u64).fold(0, |a, b| a ^ b.wrapping_mul(31)) }
//!
//! let base = (hot as fn() -> u64) as usize;
//! let profile = Profile::builder()
//!     .range(base, 4096)      // [base, base + 4096)
//!     .bucket_size(4)         // 16-byte buckets
//!     .source(ProfileSource::Time)
//!     .build()?;
//! profile.start()?;
//! std::hint::black_box(hot());
//! profile.stop()?;            // a barrier: every sample taken before it is counted
//! println!("{:?}", profile.stats());
//! # Ok::<(), ntprofile::Error>(())
//! ```
//!
//! From C: `include/ntprofile.h` and `libntprofile.so` (`pkg/install.sh --prefix DIR` installs them with a
//! pkg-config file; see the README).
//!
//! Two documents in the source tree are the reference: `docs/api.md` is the contract (every call, its checks in
//! order with their statuses, the bucket rule, intervals, sources, the extensions) and `docs/linux-mapping.md`
//! says how it maps onto Linux `perf_event`, with the deliberate divergences from Windows and why.
//!
//! Errors: every fallible call returns an [`Error`], which carries the [`NtStatus`] the C API returns for the
//! same failure and a sentence saying which argument or check failed.
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]

pub mod affinity;
mod api;
pub mod buckets;
pub mod engine;
mod error;
pub mod ffi;
#[allow(unsafe_code)]
mod perf;
pub mod profile;
pub mod source;
pub mod status;
mod status_message;
pub mod target;

pub use affinity::{Affinity, CpuSet};
pub use api::{Profile, ProfileBuilder, query_interval, set_interval, set_jitter};
pub use buckets::BucketLayout;
pub use error::Error;
pub use profile::ProfileStats;
pub use source::{
    IntervalUnit, PerfEventSpec, ProfileSource, SourceInfo, Support, list_sources,
    register_raw_source,
};
pub use status::NtStatus;

/// The README's Rust examples, compiled and run as doctests so that they stay correct and free of warnings.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
