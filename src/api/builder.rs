//! The builder of a profile: the range (or a module's or a function's), the bucket size, the source, the target
//! process and the processors. `build` (in `build.rs`) checks them and creates the profile.

use crate::affinity::CpuSet;
use crate::modules::{Module, Symbol};
use crate::source::ProfileSource;

use super::process::{GroupAffinity, Process};

/// How a profile picks its processors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum AffinitySpec {
    /// A `KAFFINITY` for the caller's current group (`u64::MAX`: every online CPU of the group).
    Mask(u64),
    /// Explicit CPU numbers (each must be online).
    Cpus(CpuSet),
    /// Every online CPU, resolved at each start.
    AllActive,
    /// `GROUP_AFFINITY` records, as `NtCreateProfileEx` takes them.
    Groups(Vec<GroupAffinity>),
}

/// Whose samples a profile counts.
#[derive(Clone, Debug)]
pub(super) enum TargetSpec {
    /// `NtCurrentProcess()`.
    Current,
    /// A process from [`Process::open`].
    Process(Process),
    /// `Process = NULL`: every process.
    Global,
}

/// Builds a [`Profile`](crate::Profile): the range, the bucket size, the source and the processors.
///
/// ```
/// use ntprofile::{Profile, ProfileSource};
///
/// let profile = Profile::builder()
///     .range(0x40_0000, 0x1000) // [base, base + size)
///     .bucket_size(4)           // 16-byte buckets: 256 counters
///     .source(ProfileSource::Time)
///     .cpus([0])                // or .affinity_mask(mask), .all_cpus()
///     .build()?;
/// assert_eq!(profile.counts().len(), 256);
/// assert_eq!(profile.layout().base, 0x40_0000);
/// assert_eq!(profile.bucket_range(1), (0x40_0010, 0x40_0020));
/// assert_eq!(profile.source(), ProfileSource::Time);
/// # Ok::<(), ntprofile::Error>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ProfileBuilder {
    pub(super) base: u64,
    pub(super) size: u64,
    pub(super) bucket_size: u32,
    pub(super) source: ProfileSource,
    pub(super) affinity: AffinitySpec,
    pub(super) target: TargetSpec,
}

impl Default for ProfileBuilder {
    fn default() -> Self {
        ProfileBuilder {
            base: 0,
            size: 0,
            bucket_size: 2,
            source: ProfileSource::Time,
            affinity: AffinitySpec::Mask(u64::MAX),
            target: TargetSpec::Current,
        }
    }
}

impl ProfileBuilder {
    /// The profiled range `[base, base + size)` of the target's address space (this process's by default). A
    /// range that reaches the kernel half (from `0xFFFF_8000_0000_0000` on x86-64) samples kernel code and needs
    /// the privilege (see [`build`](Self::build)).
    pub fn range(mut self, base: usize, size: usize) -> Self {
        self.base = base as u64;
        self.size = size as u64;
        self
    }

    /// The range of a module's executable mapping (from [`modules`](crate::modules),
    /// [`find_module`](crate::find_module) or [`kernel_modules`](crate::kernel_modules)), as Windows code
    /// passes a module's base and size from `GetModuleInformation`.
    ///
    /// ```no_run
    /// use ntprofile::{Profile, find_module};
    ///
    /// let libm = find_module(None, "libm.so.6")?;
    /// let profile = Profile::builder().module(&libm).bucket_size(6).build()?;
    /// profile.start()?;
    /// // ... call into libm ...
    /// profile.stop()?;
    /// println!("{} samples in libm's code", profile.stats().counted);
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn module(mut self, module: &Module) -> Self {
        self.base = module.base;
        self.size = module.size;
        self
    }

    /// The exact range of a function (from [`find_function`](crate::find_function)): its symbol's address and
    /// `st_size`.
    ///
    /// ```no_run
    /// use ntprofile::{Profile, find_function};
    ///
    /// let exp = find_function(None, Some("libm.so.6"), "exp")?;
    /// let profile = Profile::builder().function(&exp).bucket_size(2).build()?;
    /// profile.start()?;
    /// // ... call exp() ...
    /// profile.stop()?;
    /// println!("{} samples in exp ({} bytes)", profile.stats().counted, exp.size);
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn function(mut self, function: &Symbol) -> Self {
        self.base = function.address;
        self.size = function.size;
        self
    }

    /// Profile another process (opened with [`Process::open`]): every thread of it, threads it creates later
    /// included, as `NtCreateProfile` with a process handle from `NtOpenProcess`. The range is in that process's
    /// address space (see [`modules`](crate::modules) and [`find_function`](crate::find_function) with its pid).
    ///
    /// ```no_run
    /// use ntprofile::{Process, Profile, find_module};
    ///
    /// let pid = 4242; // a process of the caller's own
    /// let process = Process::open(pid)?;
    /// let libc = find_module(Some(pid), "libc.so.6")?;
    /// let profile = Profile::builder().process(&process).module(&libc).build()?;
    /// profile.start()?;
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn process(mut self, process: &Process) -> Self {
        self.target = TargetSpec::Process(process.clone());
        self
    }

    /// Profile every process on the chosen processors (`NtCreateProfile` with `Process = NULL`): one sampler
    /// per CPU sees every task. Needs the system-profile privilege: `CAP_PERFMON`, `CAP_SYS_ADMIN` or
    /// `kernel.perf_event_paranoid <= 0`.
    ///
    /// ```no_run
    /// use ntprofile::{Profile, kernel_modules};
    ///
    /// // kernrate's classic use: the kernel's text, every process, every CPU.
    /// let kernel = kernel_modules()?.into_iter().next().expect("[kernel] comes first");
    /// let profile = Profile::builder().global().module(&kernel).bucket_size(8).all_cpus().build()?;
    /// profile.start()?;
    /// std::thread::sleep(std::time::Duration::from_secs(1));
    /// profile.stop()?;
    /// println!("{} samples in the kernel's text", profile.stats().counted);
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn global(mut self) -> Self {
        self.target = TargetSpec::Global;
        self
    }

    /// Profile this process (the default; undoes [`process`](Self::process) and [`global`](Self::global)).
    ///
    /// ```
    /// use ntprofile::Profile;
    ///
    /// let profile = Profile::builder().global().current_process().range(0x10000, 0x1000).build()?;
    /// assert!(!profile.is_started());
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn current_process(mut self) -> Self {
        self.target = TargetSpec::Current;
        self
    }

    /// Processors as `GROUP_AFFINITY` records, as `NtCreateProfileEx` takes them: each record must name an
    /// existing group and a non-empty mask of online CPUs; masks of one group are OR-ed. An empty slice means
    /// every online CPU, resolved at each start (`GroupCount == 0`, the same as [`all_cpus`](Self::all_cpus)).
    ///
    /// ```
    /// use ntprofile::{GroupAffinity, Profile};
    ///
    /// let profile = Profile::builder()
    ///     .range(0x10000, 0x1000)
    ///     .group_affinity(&[GroupAffinity { mask: 1, group: 0 }]) // CPU 0
    ///     .build()?;
    /// assert_eq!(profile.counts().len(), 0x1000 / 4);
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    #[doc(alias = "NtCreateProfileEx")]
    pub fn group_affinity(mut self, groups: &[GroupAffinity]) -> Self {
        self.affinity = AffinitySpec::Groups(groups.to_vec());
        self
    }

    /// `BucketSize`: log2 of a bucket's size in bytes (2 = 4-byte buckets … 31 = 2 GiB buckets).
    pub fn bucket_size(mut self, log2: u32) -> Self {
        self.bucket_size = log2;
        self
    }

    /// The profile source (default [`ProfileSource::Time`]).
    pub fn source(mut self, source: ProfileSource) -> Self {
        self.source = source;
        self
    }

    /// A `KAFFINITY` for the caller's current processor group, as `NtCreateProfile` takes it:
    /// `u64::MAX` means every online CPU of the group (the default).
    pub fn affinity_mask(mut self, mask: u64) -> Self {
        self.affinity = AffinitySpec::Mask(mask);
        self
    }

    /// Explicit CPU numbers; each must be online when the profile is built.
    pub fn cpus(mut self, cpus: impl IntoIterator<Item = usize>) -> Self {
        self.affinity = AffinitySpec::Cpus(CpuSet::from_cpus(cpus));
        self
    }

    /// Every online CPU, resolved again at each start (`NtCreateProfileEx` with `GroupCount == 0`).
    pub fn all_cpus(mut self) -> Self {
        self.affinity = AffinitySpec::AllActive;
        self
    }
}
