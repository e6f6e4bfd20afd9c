//! The only place that talks to the kernel: event opening (through perf-event2's `Builder`), the ioctls it does
//! not wrap, the mmap ring reader, and the consumer's epoll and eventfd.
//!
//! # Safety
//! Every `unsafe` block here carries a `// SAFETY:` note naming what makes it sound, and every atomic access
//! to the ring says which kernel store or load it pairs with.

pub mod event;
/// This process's loaded objects from the dynamic loader (`dl_iterate_phdr`), for the module listing.
pub(crate) mod loader;
pub mod ring;
pub mod sys;
