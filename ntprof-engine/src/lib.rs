//! The profiler engine behind `ntprof`: record a command, running processes or the kernel through
//! [`ntprofile`]'s sampler, follow the process tree and its mappings, unwind call stacks (frame pointers or DWARF
//! CFI), symbolize them (ELF, DWARF lines and inlines, PLT, vDSO, JIT maps and jitdump, kernel), build the
//! [`report::Report`] and write it as pprof, JSON, CSV, folded stacks or a flame graph.
//!
//! The modules, each importing only those below it:
//!
//! * [`record`]: the recording session (targets, sources, the process tree, off-CPU time);
//! * `collect`: the report built from the tree;
//! * `offcpu`: the off-CPU watcher;
//! * `tree`: the model of the processes, their mappings and their time-ordered records;
//! * `unwind` and [`symbols`]: call stacks and names;
//! * [`options`], [`progress`], [`report`] and `waits`: the data the layers share;
//! * [`output`]: the writers, which read a [`report::Report`] alone.
//!
//! Record a command with call stacks, print its ten hottest functions and write a pprof profile:
//!
//! ```no_run
//! use ntprof_engine::options::{CallGraph, RecordOptions};
//! use ntprof_engine::{output, progress::NoProgress, record};
//!
//! let mut options = RecordOptions::command(["./prog", "--fast"]);
//! options.profile.call_graph = Some(CallGraph::Dwarf(16 * 1024));
//! let outcome = record::record(&options, &NoProgress)?;
//! for f in outcome.report.sources[0].functions.iter().take(10) {
//!     println!("{:6.2}%  {}  ({})", 100.0 * f.share, f.name, f.module);
//! }
//! std::fs::write("prog.pb.gz", output::pprof::render(&outcome.report)?)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! To drive `ntprofile::Sampler` yourself, its samples are unwound by [`unwind::ProcessUnwinder`] and named by
//! [`symbols::ProcessSymbolizer`] (the crate's `own_sampler` example does both).

#![warn(missing_docs)]

mod collect;
pub mod diff;
mod files;
mod offcpu;
pub mod options;
pub mod output;
pub mod progress;
pub mod record;
pub mod report;
pub mod symbols;
mod tree;
pub mod unwind;
mod waits;
