//! The sampler's builder: what to sample (processes or everything), with which source and interval, on which
//! CPUs, and what each sample carries; `build` checks it all and opens the events (in `build`).

use super::Sampler;
use crate::api::Process;
use crate::error::Error;
use crate::source::ProfileSource;

/// A target named to the builder.
#[derive(Clone, Debug)]
pub(super) enum TargetSpec {
    /// The calling process.
    Current,
    /// A process opened by the caller.
    Process(Process),
    /// A pid, opened at `build` like [`Process::open`].
    Pid(u32),
}

/// Builds a [`Sampler`]: what to sample (processes or everything), with which source and interval, on which
/// CPUs, and what each sample carries. Made by [`Sampler::builder`].
///
/// With no target and no [`global`](Self::global), the sampler samples the calling process.
#[derive(Clone, Debug)]
pub struct SamplerBuilder {
    pub(super) targets: Vec<TargetSpec>,
    pub(super) global: bool,
    pub(super) cgroup: Option<std::path::PathBuf>,
    pub(super) inherit: bool,
    pub(super) source: ProfileSource,
    pub(super) interval: Option<u32>,
    pub(super) cpus: Option<Vec<usize>>,
    pub(super) kernel: bool,
    pub(super) callchain: u16,
    pub(super) user_stack: u32,
    pub(super) sideband: bool,
    pub(super) ring_pages: Option<usize>,
    pub(super) context_switches: bool,
    pub(super) wakeup_bytes: Option<usize>,
    pub(super) samples: bool,
}

impl Default for SamplerBuilder {
    fn default() -> SamplerBuilder {
        SamplerBuilder {
            targets: Vec::new(),
            global: false,
            cgroup: None,
            inherit: true,
            source: ProfileSource::Time,
            interval: None,
            cpus: None,
            kernel: false,
            callchain: 0,
            user_stack: 0,
            sideband: true,
            ring_pages: None,
            context_switches: false,
            wakeup_bytes: None,
            samples: true,
        }
    }
}

impl SamplerBuilder {
    /// Add a target process (repeatable: several processes).
    pub fn process(mut self, process: &Process) -> Self {
        self.targets.push(TargetSpec::Process(process.clone()));
        self
    }

    /// Add a target process by Linux pid, opened at [`build`](Self::build) as [`Process::open`] opens it.
    pub fn pid(mut self, pid: u32) -> Self {
        self.targets.push(TargetSpec::Pid(pid));
        self
    }

    /// Add the calling process: its threads, except the library's own (the profiles' consumer and jitter
    /// threads).
    pub fn current_process(mut self) -> Self {
        self.targets.push(TargetSpec::Current);
        self
    }

    /// Sample every process on the chosen CPUs. Needs the system-profile privilege, as a global profile:
    /// `CAP_PERFMON`, `CAP_SYS_ADMIN` or `kernel.perf_event_paranoid <= 0`, else `STATUS_PRIVILEGE_NOT_HELD`.
    /// Names no process besides (else `STATUS_INVALID_PARAMETER`).
    pub fn global(mut self) -> Self {
        self.global = true;
        self
    }

    /// Sample the tasks of one cgroup (v2) on the chosen CPUs, whatever their process, those that join it later
    /// included, and those of the cgroups below it: `dir` is the cgroup's directory in the cgroup v2 file system
    /// (`/sys/fs/cgroup/...`). The kernel filters the processor-wide events (`PERF_FLAG_PID_CGROUP`), its
    /// side-band records included, so nothing of another task is read; the layout is `cgroup`
    /// ([`EventUsage::mode`](crate::EventUsage)). Needs the system-profile privilege, as
    /// [`global`](Self::global) (else `STATUS_PRIVILEGE_NOT_HELD`); names no process and is not global besides
    /// (else `STATUS_INVALID_PARAMETER`); a directory that cannot be opened gives `STATUS_NOT_FOUND` (or
    /// `STATUS_ACCESS_DENIED`), one the kernel does not take as a cgroup `STATUS_NOT_SUPPORTED`.
    pub fn cgroup(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cgroup = Some(dir.into());
        self
    }

    /// `true` (the default): every process the targets create (`fork`, `vfork`, `clone`, `posix_spawn`),
    /// transitively, is sampled from its first instruction, with its threads. `false`: the targets' threads
    /// only (those created later included), never their children.
    pub fn inherit(mut self, follow_children: bool) -> Self {
        self.inherit = follow_children;
        self
    }

    /// The profile source (default [`ProfileSource::Time`]). A source that cannot be sampled here gives
    /// `STATUS_NOT_SUPPORTED` at [`build`](Self::build).
    pub fn source(mut self, source: ProfileSource) -> Self {
        self.source = source;
        self
    }

    /// The interval in the source's units (100 ns for the time sources, events otherwise); clamped into the
    /// source's limits as `NtSetIntervalProfile` clamps. 0, like the default, means the process's current
    /// interval for the source ([`query_interval`](crate::query_interval)), as the C configuration's
    /// `Interval` 0 does (for the fastest interval, name the source's
    /// [`min_interval`](ProfileSource::min_interval)).
    pub fn interval(mut self, interval: u32) -> Self {
        self.interval = (interval != 0).then_some(interval);
        self
    }

    /// The CPUs to sample on (default: every online CPU). A CPU that is not online gives
    /// `STATUS_INVALID_PARAMETER`. Side-band records (see [`sideband`](Self::sideband)) still come from every
    /// online CPU: a task that maps a library or forks on another CPU is known when it is sampled on these.
    pub fn cpus(mut self, cpus: impl IntoIterator<Item = usize>) -> Self {
        self.cpus = Some(cpus.into_iter().collect());
        self
    }

    /// Sample kernel addresses too (default `false`). Needs `CAP_PERFMON`, `CAP_SYS_ADMIN` or
    /// `kernel.perf_event_paranoid <= 1`, else `STATUS_PRIVILEGE_NOT_HELD`.
    pub fn kernel(mut self, include_kernel: bool) -> Self {
        self.kernel = include_kernel;
        self
    }

    /// Record frame-pointer call chains of at most `max_frames` addresses (capped by
    /// `kernel.perf_event_max_stack`); 0 (the default) records none. The raw [`Sample::callchain`](
    /// crate::Sample::callchain) also holds the kernel's context markers (`PERF_CONTEXT_USER`, ...), which the
    /// kernel does not count against the cap: it can be longer than `max_frames` by those markers (one or two;
    /// [`Sample::frames`](crate::Sample::frames) leaves them out).
    pub fn callchain(mut self, max_frames: u16) -> Self {
        self.callchain = max_frames;
        self
    }

    /// Copy the user registers (ip, sp, frame pointer) and `bytes` of the user stack from sp at each sample
    /// (rounded up to 8, at most 65528, else `STATUS_INVALID_PARAMETER`): what a DWARF unwinder needs. 0 (the
    /// default) copies nothing.
    pub fn user_stack(mut self, bytes: u32) -> Self {
        self.user_stack = bytes;
        self
    }

    /// Side-band records (default `true`): [`Mmap`](crate::Mmap) for executable mappings (anonymous ones and regions made
    /// executable by `mprotect` included), `Comm` (with the exec flag), `Fork`, `Exit`.
    pub fn sideband(mut self, on: bool) -> Self {
        self.sideband = on;
        self
    }

    /// Data pages per CPU ring: a power of two that holds two of the largest samples this sampler writes and
    /// the kernel's Lost record (1 page without a stack copy, 64 with a 65528-byte one), else
    /// `STATUS_INVALID_PARAMETER` naming the size that works. Default 128 (512 with
    /// [`user_stack`](Self::user_stack)); every CPU's ring the same size, all halved together while the
    /// locked-memory budget refuses a mapping, never below that least size.
    pub fn ring_pages(mut self, pages: usize) -> Self {
        self.ring_pages = Some(pages);
        self
    }

    /// Deliver a [`Switch`](crate::SampleRecord::Switch) record each time a target thread is switched off or
    /// onto a CPU (`perf_event_attr.context_switch`; default `false`): its exact off-CPU intervals, each
    /// switch-out marked voluntary (it blocked or slept) or preempted. Needs no privilege beyond the right to
    /// profile the targets (allowed at `kernel.perf_event_paranoid` 2 on one's own processes). A thread's
    /// blocking point is read with [`read_blocked_thread`](crate::read_blocked_thread).
    pub fn context_switches(mut self, on: bool) -> Self {
        self.context_switches = on;
        self
    }

    /// `false`: the events never sample (the kernel's dummy event, which counts nothing and costs nothing at a
    /// context switch): a side-band-only sampler. With [`wakeup_bytes`](Self::wakeup_bytes)`(1)` its
    /// [`wait`](Sampler::wait) returns at each mapping, exec, fork or exit, while another sampler of the same
    /// targets (with [`sideband`](Self::sideband)`(false)`) takes the samples and is woken only as its rings
    /// fill; [`Sampler::wait_any`] waits on both. Default `true`.
    pub fn samples(mut self, on: bool) -> Self {
        self.samples = on;
        self
    }

    /// Let [`Sampler::wait`] return once a ring holds `bytes` (default: a quarter of the ring). A small value
    /// (1: at every record) lets the caller react to a record while its cause still holds (read a blocked
    /// thread at its switch-out), at the cost of one wake-up per record. 0, or more than the ring holds, gives
    /// `STATUS_INVALID_PARAMETER`.
    pub fn wakeup_bytes(mut self, bytes: usize) -> Self {
        self.wakeup_bytes = Some(bytes);
        self
    }

    /// Open every event, disabled ([`Sampler::enable`] starts sampling).
    ///
    /// # Errors
    /// In this order: `STATUS_INVALID_PARAMETER` (a global sampler naming processes, a CPU not online, a ring
    /// size that is not a power of two or too small for two of the largest samples, a user-stack size above
    /// 65528, a wake-up size of 0 or above the ring), `STATUS_NOT_SUPPORTED` (the source has
    /// no perf event here, or a user-stack copy on an architecture without a register map) or
    /// `STATUS_PRIVILEGE_NOT_HELD` (a source the kernel samples in its own code, as context switches, without the
    /// privilege to sample the kernel: [`Support::NeedsKernelPrivilege`](crate::Support::NeedsKernelPrivilege)),
    /// `STATUS_PRIVILEGE_NOT_HELD` (global or kernel sampling without the privilege), `STATUS_INVALID_CID` (no
    /// such pid), `STATUS_ACCESS_DENIED` (the caller may not profile a target), `STATUS_INSUFFICIENT_RESOURCES`
    /// (descriptors, memory or ring memory ran out, for rings of the least size too: a passing shortage, never
    /// the arguments' fault).
    ///
    /// A target that exits before or while the events open is not an error: the sampler is built, and
    /// [`Sampler::targets_exited`] is true once every target is gone.
    pub fn build(self) -> Result<Sampler, Error> {
        super::build::build(self)
    }
}
