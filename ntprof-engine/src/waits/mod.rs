//! What a thread waits in, and the off-CPU intervals the watcher ([`crate::offcpu`]) hands to the tree
//! ([`crate::tree`]): the data both sides share, below either of them.

pub mod syscalls;

use ntprofile::UserRegs;

/// What a thread waited in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A system call (the architecture's number).
    Syscall(u64),
    /// Off CPU outside a system call (preempted in user space, a page fault).
    NoSyscall,
    /// In a system call the kernel's call chain does not name.
    SomeSyscall,
    /// Not known: the wait was over before it could be read (or no sample came with it).
    Unread,
    /// A preemption not read at its switch-out, placed where the thread was running: at its last CPU sample
    /// before the switch-out (taken since its last voluntary wait).
    LastSample,
}

/// One off-CPU interval of one thread, with where it waited.
#[derive(Clone, Debug)]
pub struct Interval {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Switch-out time (sampler clock, ns).
    pub start: u64,
    /// Switch-in time.
    pub end: u64,
    /// The thread was preempted (still runnable): an involuntary switch.
    pub preempt: bool,
    /// What it waited in.
    pub wait: Wait,
    /// The user frames of the frame-pointer chain (switch samples with `-g`), innermost first.
    pub chain: Vec<u64>,
    /// The user registers at the kernel entry (DWARF unwinding), `None` without.
    pub regs: Option<UserRegs>,
    /// The user stack copy from `regs.sp`.
    pub stack: Vec<u8>,
}
