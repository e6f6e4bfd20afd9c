//! The sampler extension's record types: what a sampler's rings hold once decoded (samples with pid, tid, time,
//! cpu, ip, optional call chain, user registers and user stack; side-band records of mappings, comm/exec, fork,
//! exit, lost and throttle), and the statistics a sampler keeps.
//!
//! The types are the public ones of `ntprofile::sampler` (re-exported there): a record borrows its variable
//! parts (call chain, stack copy, names) from the ring, or from the caller's scratch buffer for a record that
//! wraps round the ring's end, for the duration of one call of the caller's function. The events are opened in
//! `sampler_event`, their records decoded in `sampler_decode`.

/// What a sampler counted since it was built.
///
/// `samples` counts the [`SampleRecord::Sample`] records delivered, `records` every record delivered,
/// `lost` the records the kernel dropped because a ring was full ([`SampleRecord::Lost`]), `throttled` and
/// `unthrottled` the kernel's throttle and unthrottle records (the sample rate was above
/// `kernel.perf_event_max_sample_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SamplerStats {
    /// Records delivered, of every kind.
    pub records: u64,
    /// [`SampleRecord::Sample`] records delivered.
    pub samples: u64,
    /// Records the kernel dropped (a full ring): the sum of every [`SampleRecord::Lost`]'s `lost`.
    pub lost: u64,
    /// Throttle records: sampling of an event was paused because the sample rate was too high.
    pub throttled: u64,
    /// Unthrottle records: sampling resumed.
    pub unthrottled: u64,
}

/// One record of a sampler's rings.
///
/// Every record carries the kernel's `time` ([`sampler_clock_ns`](crate::sampler_clock_ns)'s clock). Within
/// one ring, records come in the order the kernel wrote them; across rings (one per CPU) order them by `time`.
#[derive(Debug)]
pub enum SampleRecord<'a> {
    /// A sample.
    Sample(Sample<'a>),
    /// An executable mapping appeared (`PERF_RECORD_MMAP2`): a file mapped executable, an anonymous region
    /// made executable (`//anon`, JIT code), the vDSO.
    Mmap(Mmap<'a>),
    /// A thread's command name changed (`PERF_RECORD_COMM`); `exec` when the change comes from an `execve`
    /// (the Comm record of an exec comes before the Mmap records of the new image).
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Kernel time of the change.
        time: u64,
        /// The new command name, without its NUL padding.
        comm: &'a [u8],
        /// True when the name changed because of an `execve` (`PERF_RECORD_MISC_COMM_EXEC`).
        exec: bool,
    },
    /// A thread or process was created (`PERF_RECORD_FORK`); a new thread of an existing process has
    /// `pid == ppid`.
    Fork {
        /// Process id of the new task.
        pid: u32,
        /// Process id of its creator.
        ppid: u32,
        /// Thread id of the new task.
        tid: u32,
        /// Thread id of its creator.
        ptid: u32,
        /// Kernel time of the creation.
        time: u64,
    },
    /// A thread exited (`PERF_RECORD_EXIT`); `pid == tid` for the process's main thread.
    Exit {
        /// Process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// Thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
        /// Kernel time of the exit.
        time: u64,
    },
    /// The kernel dropped `lost` records because the ring was full (`PERF_RECORD_LOST`, `PERF_RECORD_LOST_SAMPLES`).
    Lost {
        /// Records dropped.
        lost: u64,
        /// Kernel time of the report.
        time: u64,
    },
    /// A thread was switched off or onto a CPU (`PERF_RECORD_SWITCH`, `PERF_RECORD_SWITCH_CPU_WIDE`), with
    /// [`SamplerBuilder::context_switches`](crate::SamplerBuilder::context_switches). The times are exact: the
    /// time between a thread's switch-out and its next switch-in is time it spent off CPU.
    Switch {
        /// Process id of the thread switched.
        pid: u32,
        /// Thread id of the thread switched.
        tid: u32,
        /// Kernel time of the switch.
        time: u64,
        /// The CPU.
        cpu: u32,
        /// True for a switch-out (the thread leaves the CPU), false for a switch-in.
        out: bool,
        /// A switch-out of a thread that was still runnable (`PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`): it was
        /// preempted, an involuntary switch; false for a thread that blocked or slept (a voluntary one).
        preempt: bool,
    },
    /// Sampling was throttled (`throttled: true`) or resumed (`false`) by the kernel's sample-rate limit.
    Throttle {
        /// Kernel time.
        time: u64,
        /// True for a throttle, false for an unthrottle.
        throttled: bool,
    },
}

/// A sample: who, when, where, and optionally the call chain and a copy of the user stack.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Kernel time of the sample ([`sampler_clock_ns`](crate::sampler_clock_ns)'s clock).
    pub time: u64,
    /// The CPU the sample was taken on.
    pub cpu: u32,
    /// The sampled instruction address.
    pub ip: u64,
    /// The ip is a kernel address (the record's cpumode).
    pub kernel: bool,
    /// The raw call chain, with the kernel's `PERF_CONTEXT_*` markers; empty without
    /// [`SamplerBuilder::callchain`](crate::SamplerBuilder::callchain). See [`Sample::frames`].
    pub callchain: &'a [u64],
    /// With [`SamplerBuilder::user_stack`](crate::SamplerBuilder::user_stack): the user registers at the
    /// sample; `None` when the sample has none (a kernel thread, or the option is off).
    pub regs: Option<UserRegs>,
    /// With [`SamplerBuilder::user_stack`](crate::SamplerBuilder::user_stack): the copy of the user stack from
    /// `regs.sp` upward, as many bytes as the kernel could copy (empty otherwise).
    pub stack: &'a [u8],
}

/// The first value of the kernel's call-chain context markers (`PERF_CONTEXT_MAX`): every entry at or above it
/// is a marker, not an address.
const CONTEXT_MAX: u64 = perf_event_open_sys::bindings::PERF_CONTEXT_MAX;

impl<'a> Sample<'a> {
    /// The call chain without its markers: each address with the context it belongs to (the kernel puts a
    /// marker before the kernel part, the user part and the guest parts).
    ///
    /// ```
    /// use ntprofile::{CallchainContext, Sample};
    ///
    /// // PERF_CONTEXT_KERNEL, two kernel frames, PERF_CONTEXT_USER, one user frame.
    /// let chain = [u64::MAX - 127, 0xffff_ffff_8100_0000, 0xffff_ffff_8100_0100, u64::MAX - 511, 0x401000];
    /// let sample = Sample {
    ///     pid: 1, tid: 1, time: 0, cpu: 0, ip: 0xffff_ffff_8100_0000, kernel: true,
    ///     callchain: &chain, regs: None, stack: &[],
    /// };
    /// let frames: Vec<_> = sample.frames().collect();
    /// assert_eq!(frames, [
    ///     (CallchainContext::Kernel, 0xffff_ffff_8100_0000),
    ///     (CallchainContext::Kernel, 0xffff_ffff_8100_0100),
    ///     (CallchainContext::User, 0x401000),
    /// ]);
    /// ```
    pub fn frames(&self) -> impl Iterator<Item = (CallchainContext, u64)> + 'a {
        let mut context = if self.kernel {
            CallchainContext::Kernel
        } else {
            CallchainContext::User
        };
        self.callchain.iter().filter_map(move |&entry| {
            if entry >= CONTEXT_MAX {
                context = context_of(entry).unwrap_or(context);
                None
            } else {
                Some((context, entry))
            }
        })
    }
}

/// The context a marker opens (`None` for a value that is no marker the kernel defines).
fn context_of(marker: u64) -> Option<CallchainContext> {
    use perf_event_open_sys::bindings as b;
    match marker {
        b::PERF_CONTEXT_KERNEL | b::PERF_CONTEXT_HV => Some(CallchainContext::Kernel),
        b::PERF_CONTEXT_USER => Some(CallchainContext::User),
        b::PERF_CONTEXT_GUEST | b::PERF_CONTEXT_GUEST_KERNEL | b::PERF_CONTEXT_GUEST_USER => {
            Some(CallchainContext::Guest)
        }
        _ => None,
    }
}

/// Which part of the call chain an address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallchainContext {
    /// A kernel (or hypervisor) address.
    Kernel,
    /// A user-space address of the sampled process.
    User,
    /// An address of a guest (virtual machine) context.
    Guest,
}

/// The user registers a sample carries with [`SamplerBuilder::user_stack`](crate::SamplerBuilder::user_stack):
/// what a DWARF unwinder needs to start from the stack copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: the address of the first byte of [`Sample::stack`].
    pub sp: u64,
    /// Frame pointer (`rbp` on x86-64, `x29` on AArch64).
    pub bp: u64,
}

/// An executable mapping (`PERF_RECORD_MMAP2`).
#[derive(Debug, Clone, Copy)]
pub struct Mmap<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id of the thread that mapped it.
    pub tid: u32,
    /// Kernel time of the mapping.
    pub time: u64,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `addr` (bytes, page-aligned).
    pub pgoff: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_*` bits.
    pub flags: u32,
    /// Device major number of the file.
    pub maj: u32,
    /// Device minor number of the file.
    pub min: u32,
    /// Inode number of the file.
    pub ino: u64,
    /// Inode generation of the file.
    pub ino_generation: u64,
    /// The file name without its NUL padding: a path, `//anon`, `[vdso]`, `/memfd:x (deleted)`, ...
    pub filename: &'a [u8],
}
