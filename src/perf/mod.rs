//! The bottom layer and the only code that talks to the kernel: event opening (through perf-event2's
//! `Builder`), the ioctls it does not wrap, the mmap ring reader, the consumer's epoll and eventfd, and the
//! other system calls and `/proc` reads the library makes.
//!
//! A leaf: it imports no other module of the crate and knows no NT type. Its errors are the kernel's errno
//! ([`nix::errno::Errno`]); the engine turns them into an `NtStatus`, once, at its boundary.
//!
//! - [`event`]: [`PerfEventSpec`], opening events, the precise-ip step-down, the perf ioctls;
//!   [`thread_events`]: the task-record and inherited counting events of a per-thread stream;
//! - [`ring`]: the mmap ring and its lock-free read protocol; `decode`: the engine's record decoder;
//! - [`sys`]: [`Tid`], epoll, eventfd, signals, fork handlers, pidfds, rlimits, own-memory reads and writes;
//! - [`proc`]: `/proc` and `/sys` reads;
//! - [`records`]: the sampler extension's record types; [`sampler_event`]: its events; [`sampler_decode`]: the
//!   decoder of their records.
//!
//! # Safety
//! Each file that needs `unsafe` allows it itself, under its own `# Safety` note; every `unsafe` block carries a
//! `// SAFETY:` note naming what makes it sound, and every atomic access to the ring says which kernel store or
//! load it pairs with.

pub mod decode;
pub mod event;
/// This process's loaded objects from the dynamic loader (`dl_iterate_phdr`), for the module listing.
pub(crate) mod loader;
pub mod proc;
pub mod records;
pub mod ring;
pub mod sampler_decode;
pub mod sampler_event;
pub mod sys;
pub mod thread_events;

pub use event::PerfEventSpec;
pub use sys::Tid;
