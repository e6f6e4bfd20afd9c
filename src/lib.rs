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
//! From C: `include/ntprofile.h` and `libntprofile.so` (`pkg/install.sh --prefix DIR` installs them with a
//! pkg-config file; see the README).
//!
//! Two documents in the source tree are the reference: `docs/api.md` is the contract (every call, its checks in
//! order with their statuses, the bucket rule, intervals, sources, the extensions) and `docs/linux-mapping.md`
//! says how it maps onto Linux `perf_event`, with the deliberate divergences from Windows and why.
//!
//! Errors: every fallible call returns an [`Error`], which carries the [`NtStatus`] the C API returns for the
//! same failure and a sentence saying which argument or check failed.
//!
//! The modules form layers that import only downward (`tests/layers.rs` checks it): `perf` at the bottom, the
//! only kernel-facing code, which knows no NT type and returns the kernel's errno; `status`, `buckets` and
//! `error`, pure; `source`, `affinity`, `target`; the `engine` (streams, the consumer and jitter threads,
//! errno → NTSTATUS at its boundary); `profile`, the object both APIs share; `handles`, the C handle table;
//! `fork`, which knows the engine and the handles; `api`, `sampler` and `ffi` on top.
//!
//! The sampler extension ([`Sampler`], module [`sampler`]) hands the caller every decoded perf record of whole
//! process trees (or of everything): samples with optional call chains and user-stack copies, and the kernel's
//! side-band records of mappings, exec, fork and exit. It is what a profiler that follows children and keeps
//! stacks needs; the NT calls keep their meaning (a profile on a process counts that process only).
#![deny(unsafe_code)]
// Every unsafe block says why it is sound, one unsafe operation per block; the files that need `unsafe` allow
// it themselves, under their `# Safety` note.
#![deny(
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block
)]
#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]

pub mod affinity;
mod api;
pub mod buckets;
pub mod engine;
mod error;
pub mod ffi;
mod fork;
#[doc(hidden)]
pub mod fuzzing;
mod handles;
mod modules;
mod perf;
pub mod profile;
pub mod sampler;
pub mod source;
pub mod status;
mod status_message;
mod status_win32;
pub mod target;

pub use affinity::{Affinity, CpuSet};
pub use api::{
    GroupAffinity, Process, Profile, ProfileBuilder, query_interval, set_interval, set_jitter,
};
pub use buckets::BucketLayout;
pub use engine::mode::{EventMode, EventUsage};
pub use error::Error;
pub use modules::{
    Module, Symbol, find_function, find_kernel_function, find_module, kernel_modules,
    kernel_symbols, modules,
};
pub use profile::ProfileStats;
pub use sampler::{
    BlockedThread, BlockedThreadReader, CallchainContext, Mmap, Sample, SampleRecord, Sampler,
    SamplerBuilder, SamplerStats, SamplerWaker, UserRegs, read_blocked_thread, sampler_clock_ns,
};
pub use source::{
    IntervalUnit, PerfEventSpec, ProfileSource, SourceInfo, Support, list_sources,
    register_raw_source,
};
pub use status::NtStatus;

/// The README's Rust examples, compiled and run as doctests so that they stay correct and free of warnings.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
