//! JIT code over time: a JIT reuses memory (V8 frees the code of dead functions and compiles new code into the
//! same bytes), so one address holds different functions at different times, and a perf map file, which has no
//! times, cannot tell which. A runtime that writes a *jitdump* file (`node --perf-prof`, a JVM with
//! `-agentpath:libperf-jvmti.so`) records each code load and move with its time; ntprof names each sample by the
//! code that was at its address at its moment.
//!
//! **Finding the file.** The runtime maps its dump (`jit-PID.dump`, in its working directory for node) with
//! `PROT_EXEC`, so the kernel reports the mapping like any other: its path is where the file is, wherever the
//! runtime wrote it. From that moment on, each sample of the process whose stack touches its anonymous executable
//! memory is logged with its time (a fixed-size entry; the counts are kept as before).
//!
//! **Resolving.** When the run ends, each dump is read ([the reader](self::format)) and its loads and moves are
//! replayed in time order ([the replay](self::replay)) against the logged samples of its process, sorted by time:
//! each JIT frame of such a sample is moved to a location in the dump's module (`[JIT] pid N`) that names the
//! code placed there at that time. Frames no code of the dump covered at their time keep their address, named
//! from the perf map file if there is one.

pub mod format;
mod reader;
pub mod replay;
mod state;

pub use state::JitState;

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
