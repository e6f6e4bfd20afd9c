//! The off-CPU part of the report model: time off CPU per process, thread and wait kind.

use serde::{Deserialize, Serialize};

/// The off-CPU time of a run (`--off-cpu`). Its stacks are those of the `off_cpu` and `preempted` sources.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OffCpuReport {
    /// How it was recorded: `switch-samples` (context-switch samples with the user state at the kernel entry,
    /// and switch records: needs CAP_PERFMON or perf_event_paranoid <= 1) or `switch-records+proc` (switch
    /// records, each blocked thread read from /proc and its memory: unprivileged).
    pub mechanism: String,
    /// What this mechanism could not see, one sentence each.
    pub limits: Vec<String>,
    /// Nanoseconds off CPU in voluntary waits (sleep, I/O, locks, children), every thread together.
    pub voluntary_ns: u64,
    /// Nanoseconds runnable but preempted (waiting for a CPU).
    pub preempted_ns: u64,
    /// Nanoseconds of waits whose stack was not known (`[wait not read]`), included in the two above.
    pub unread_ns: u64,
    /// Switch-outs the recorder saw.
    pub switches: u64,
    /// Blocked threads read from /proc (`switch-records+proc`).
    pub reads: u64,
    /// Readings that found the thread running again (its wait was shorter than the reading's delay).
    pub missed: u64,
    /// Readings refused because this user may not read the thread (a non-dumpable process, another user's):
    /// their waits are under `[wait not read]` too, but not for lateness.
    #[serde(default)]
    pub denied: u64,
    /// Switch records the kernel dropped (a full ring).
    pub lost: u64,
    /// Per process, in the order of [`Report::processes`](super::Report::processes), those with off-CPU time.
    pub processes: Vec<OffCpuProcess>,
    /// Per thread, most off-CPU time first.
    pub threads: Vec<OffCpuThread>,
    /// Per wait kind (the system call, `[no system call]`, `[wait not read]`), most time first.
    pub kinds: Vec<OffCpuKind>,
}

/// The off-CPU time of one process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OffCpuProcess {
    /// [`ProcessReport::id`](super::ProcessReport::id).
    pub process: u32,
    /// Its pid.
    pub pid: u32,
    /// Its command.
    pub command: String,
    /// Voluntary off-CPU nanoseconds, all its threads together.
    pub voluntary_ns: u64,
    /// Preempted nanoseconds.
    pub preempted_ns: u64,
}

/// The off-CPU time of one thread.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OffCpuThread {
    /// [`ProcessReport::id`](super::ProcessReport::id) of its process.
    pub process: u32,
    /// Its process's pid.
    pub pid: u32,
    /// Its thread id.
    pub tid: u32,
    /// Its name (`comm`), empty when it could not be read.
    pub name: String,
    /// Voluntary off-CPU nanoseconds.
    pub voluntary_ns: u64,
    /// Preempted nanoseconds.
    pub preempted_ns: u64,
    /// Off-CPU intervals.
    pub waits: u64,
}

/// The off-CPU time of one wait kind.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OffCpuKind {
    /// The system call (`read`, `futex`, `clock_nanosleep`, …), `[no system call]` or `[wait not read]`.
    pub kind: String,
    /// Preemptions (true) or voluntary waits.
    pub preempted: bool,
    /// Nanoseconds.
    pub ns: u64,
    /// Intervals.
    pub waits: u64,
}
