//! The safe Rust API: a builder, a profile that owns its counts, start/stop, stop on drop, live reads.
//!
//! A profile reaches every target the C API reaches: this process (the default), another process
//! ([`ProfileBuilder::process`], `NtOpenProcess`), every process ([`ProfileBuilder::global`], `Process = NULL`),
//! a range of kernel addresses, and processors given as a mask, CPU numbers or `GROUP_AFFINITY` records
//! ([`ProfileBuilder::group_affinity`], `NtCreateProfileEx`). The checks, their order and their statuses are the
//! C API's: both call the same functions.

mod details;

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use crate::affinity::{Affinity, CpuSet, current_group, online_cpus};
use crate::buckets::BucketLayout;
use crate::engine::{self, counters::CounterStorage};
use crate::error::Error;
use crate::modules::{Module, Symbol};
use crate::profile::{ProfileCore, ProfileStats, check_front, check_kernel_privilege};
use crate::source::{self, ProfileSource};
use crate::status::NtStatus;
use crate::target::{ProcessRef, Target, has_system_profile_privilege, perf_event_paranoid};

/// How a profile picks its processors.
#[derive(Clone, Debug, PartialEq, Eq)]
enum AffinitySpec {
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
enum TargetSpec {
    /// `NtCurrentProcess()`.
    Current,
    /// A process from [`Process::open`].
    Process(Process),
    /// `Process = NULL`: every process.
    Global,
}

/// Builds a [`Profile`]: the range, the bucket size, the source and the processors.
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
    base: u64,
    size: u64,
    bucket_size: u32,
    source: ProfileSource,
    affinity: AffinitySpec,
    target: TargetSpec,
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

    /// Create the profile, stopped, with a zeroed counter buffer of exactly the counters the range needs.
    #[doc(alias = "NtCreateProfile")]
    ///
    /// # Errors
    /// In the order the C API checks: `STATUS_INVALID_PARAMETER` (bucket size), `STATUS_BUFFER_OVERFLOW`
    /// (the range wraps), `STATUS_NOT_SUPPORTED` (source), `STATUS_INVALID_PARAMETER` (processors: a mask,
    /// CPU list or `GROUP_AFFINITY` record naming no online CPU), then the target: `STATUS_PRIVILEGE_NOT_HELD`
    /// (a [global](Self::global) profile without the system-profile privilege), `STATUS_ACCESS_DENIED` (the
    /// [process](Self::process) may no longer be profiled), then `STATUS_PRIVILEGE_NOT_HELD` (a kernel range
    /// without `CAP_PERFMON`, `CAP_SYS_ADMIN` or `perf_event_paranoid <= 1`), and
    /// `STATUS_INSUFFICIENT_RESOURCES` (the counters cannot be allocated or exceed `ULONG` sizes).
    ///
    /// ```
    /// use ntprofile::{GroupAffinity, NtStatus, Profile};
    ///
    /// // Group 1000 does not exist on any machine this runs on.
    /// let err = Profile::builder()
    ///     .range(0x10000, 0x1000)
    ///     .group_affinity(&[GroupAffinity { mask: 1, group: 1000 }])
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.status(), NtStatus::INVALID_PARAMETER);
    /// ```
    pub fn build(self) -> Result<Profile, Error> {
        if !(crate::buckets::MIN_BUCKET_SIZE..=crate::buckets::MAX_BUCKET_SIZE)
            .contains(&self.bucket_size)
        {
            return Err(Error::new(
                NtStatus::INVALID_PARAMETER,
                format!(
                    "BucketSize {} is outside {}..={}",
                    self.bucket_size,
                    crate::buckets::MIN_BUCKET_SIZE,
                    crate::buckets::MAX_BUCKET_SIZE
                ),
            ));
        }
        let needed = crate::buckets::counters_needed(self.size, self.bucket_size).max(1);
        // The buffer must fit a ULONG BufferSize, as the C API's.
        let buffer_size = needed
            .checked_mul(4)
            .and_then(|bytes| u32::try_from(bytes).ok())
            .ok_or_else(|| details::counters(NtStatus::INSUFFICIENT_RESOURCES, needed, false))?;
        let (layout, source) = check_front(
            self.base,
            self.size,
            self.bucket_size,
            buffer_size,
            self.source.to_raw(),
        )
        .map_err(|status| {
            details::create_front(
                status,
                self.base,
                self.size,
                self.bucket_size,
                buffer_size,
                self.source,
            )
        })?;
        let online = online_cpus();
        let affinity = match self.affinity {
            AffinitySpec::Mask(m) => Affinity::from_kaffinity(m, current_group(), &online)
                .map_err(|status| details::affinity_mask(status, m, current_group(), &online))?,
            AffinitySpec::AllActive => Affinity::AllActive,
            AffinitySpec::Cpus(set) => {
                if set.is_empty() || !set.is_subset(&online) {
                    return Err(details::cpus(&set, &online));
                }
                Affinity::Cpus(set)
            }
            AffinitySpec::Groups(groups) => {
                let records: Vec<(u64, u16, [u16; 3])> =
                    groups.iter().map(|g| (g.mask, g.group, [0; 3])).collect();
                Affinity::from_groups(&records, &online).map_err(|status| {
                    Error::new(
                        status,
                        format!(
                            "a GROUP_AFFINITY record names no online CPU or a group that does not exist \
                             ({groups:?}; online CPUs: {:?})",
                            online.iter().collect::<Vec<_>>()
                        ),
                    )
                })?
            }
        };
        // Check 9: the process, as the C API's NtCreateProfile checks its Process handle.
        let target = match &self.target {
            TargetSpec::Current => Target::CurrentProcess,
            TargetSpec::Global => {
                if !has_system_profile_privilege() {
                    return Err(Error::new(
                        NtStatus::PRIVILEGE_NOT_HELD,
                        format!(
                            "a global profile (every process) needs CAP_PERFMON, CAP_SYS_ADMIN or \
                             kernel.perf_event_paranoid <= 0 (it is {})",
                            perf_event_paranoid()
                        ),
                    ));
                }
                Target::Global
            }
            TargetSpec::Process(process) => {
                process
                    .inner()
                    .check_access()
                    .map_err(|status| open_error(process.pid(), status))?;
                Target::Process(process.inner().clone())
            }
        };
        check_kernel_privilege(&layout).map_err(|status| {
            Error::new(
                status,
                format!(
                    "the range {:#x}..{:#x} reaches kernel addresses: sampling the kernel needs CAP_PERFMON, \
                     CAP_SYS_ADMIN or kernel.perf_event_paranoid <= 1 (it is {})",
                    layout.base,
                    layout.end(),
                    perf_event_paranoid()
                ),
            )
        })?;
        let mut counters: Vec<AtomicU32> = Vec::new();
        counters
            .try_reserve_exact(needed as usize)
            .map_err(|_| details::counters(NtStatus::INSUFFICIENT_RESOURCES, needed, true))?;
        counters.resize_with(needed as usize, || AtomicU32::new(0));
        let storage = CounterStorage::Owned(counters.into_boxed_slice());
        crate::fork::install();
        let core = ProfileCore::new(layout, source, target, affinity, storage);
        Ok(Profile {
            core: Arc::new(core),
        })
    }
}

/// A profile of this process, another process or every process: a histogram of sampled program counters over a range, counted into buckets.
///
/// Created stopped; counts accumulate across start/stop cycles until [`Profile::clear`]. Dropping a started
/// profile stops it first.
///
/// ```no_run
/// use ntprofile::{Profile, ProfileSource};
///
/// #[inline(never)]
/// fn work() -> u64 {
///     (0..50_000_000u64).fold(0, |a, b| std::hint::black_box(a ^ b.wrapping_mul(31)))
/// }
///
/// let base = (work as fn() -> u64) as usize;
/// let profile = Profile::builder().range(base, 4096).bucket_size(2).build()?;
/// ntprofile::set_interval(ProfileSource::Time, 1000); // a sample every 100 µs of CPU time
/// profile.start()?;
/// assert!(profile.is_started());
/// std::hint::black_box(work());
/// profile.stop()?; // every sample taken before the stop is counted now
/// let stats = profile.stats();
/// let counts = profile.counts();
/// assert_eq!(counts.iter().map(|&c| u64::from(c)).sum::<u64>(), stats.counted);
/// profile.clear(); // zero the counters; counts otherwise accumulate over start/stop cycles
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub struct Profile {
    core: Arc<ProfileCore>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("layout", &self.core.layout)
            .field("source", &self.core.source)
            .field("affinity", &self.core.affinity)
            .finish()
    }
}

impl Profile {
    /// A builder for a profile (of this process unless [`ProfileBuilder::process`] or
    /// [`ProfileBuilder::global`] says otherwise).
    pub fn builder() -> ProfileBuilder {
        ProfileBuilder::default()
    }

    /// `NtStartProfile(ProfileHandle)` — start sampling. A profile of a [`Process`] that has exited (see
    /// [`Process::has_exited`]) starts too, and counts nothing.
    #[doc(alias = "NtStartProfile")]
    ///
    /// # Errors
    /// `STATUS_PROFILING_NOT_STOPPED` (already started), `STATUS_PROFILING_AT_LIMIT` (8192 × online CPUs
    /// started profiles), `STATUS_INSUFFICIENT_RESOURCES` (descriptors, ring memory), and the mapping of
    /// [`perf_event_open(2)`](https://man7.org/linux/man-pages/man2/perf_event_open.2.html) errors.
    pub fn start(&self) -> Result<(), Error> {
        self.core
            .start()
            .map_err(|status| details::start(status, self.core.source, &self.core.target))
    }

    /// `NtStopProfile(ProfileHandle)` — stop sampling. A barrier: when it returns, every sample taken before the
    /// call is counted and nothing writes to the counts any more.
    #[doc(alias = "NtStopProfile")]
    ///
    /// # Errors
    /// `STATUS_PROFILING_NOT_STARTED` when the profile is not started.
    pub fn stop(&self) -> Result<(), Error> {
        self.core.stop().map_err(details::stop)
    }

    /// True while started.
    pub fn is_started(&self) -> bool {
        self.core.is_started()
    }

    /// The counters now (every sample taken before the call is included).
    pub fn counts(&self) -> Vec<u32> {
        if self.is_started() {
            let _ = engine::sync();
        }
        self.core.storage.snapshot().unwrap_or_default()
    }

    /// The statistics now: counted, outside the range, lost, throttled.
    pub fn stats(&self) -> ProfileStats {
        if self.is_started() {
            let _ = engine::sync();
        }
        self.core.stats.read()
    }

    /// Zero every counter (the statistics keep accumulating).
    pub fn clear(&self) {
        self.core.storage.clear();
    }

    /// The range and bucket layout.
    pub fn layout(&self) -> BucketLayout {
        self.core.layout
    }

    /// The source.
    pub fn source(&self) -> ProfileSource {
        self.core.source
    }

    /// The address range `[start, end)` that counter `index` covers.
    pub fn bucket_range(&self, index: usize) -> (u64, u64) {
        let l = self.core.layout;
        let start = l.base + ((index as u64) << l.bucket_size);
        (start, (start + (1u64 << l.bucket_size)).min(l.end()))
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if self.is_started() {
            let _ = self.core.stop();
        }
    }
}

/// `NtSetIntervalProfile(Interval, Source)` — set a source's interval (shared by all its profiles), clamped into
/// its limits and applied at once to running profiles. A value for an unsupported source is ignored. Returns
/// the effective interval (0 for an unsupported source). While support cannot be probed (no free descriptor:
/// [`crate::Support::is_transient`]) the value is stored all the same.
///
/// ```
/// use ntprofile::{ProfileSource, query_interval, set_interval};
///
/// // A sample every 5000th context switch, for every profile of that source in this process.
/// assert_eq!(set_interval(ProfileSource::ContextSwitches, 5000), 5000);
/// assert_eq!(query_interval(ProfileSource::ContextSwitches), 5000);
/// assert_eq!(set_interval(ProfileSource::ContextSwitches, 0), 1); // clamped into the limits
/// assert_eq!(set_interval(ProfileSource::LoadInstructions, 5000), 0); // never supported on Linux
/// ```
#[doc(alias = "NtSetIntervalProfile")]
pub fn set_interval(source: ProfileSource, interval: u32) -> u32 {
    let support = source.support();
    if !support.is_supported() && !support.is_transient() {
        return 0;
    }
    engine::set_interval(source, interval)
}

/// `NtQueryIntervalProfile(Source, &Interval)` — the effective interval of a source (after clamping), or 0 when
/// the source is not supported on this machine — or, for that one call, when support cannot be probed (no free
/// descriptor; nothing is cached then, and the C export answers `STATUS_INSUFFICIENT_RESOURCES`).
///
/// ```
/// use ntprofile::{ProfileSource, query_interval};
///
/// assert!(query_interval(ProfileSource::Time) >= ProfileSource::Time.min_interval());
/// assert_eq!(query_interval(ProfileSource::LoadInstructions), 0);
/// ```
#[doc(alias = "NtQueryIntervalProfile")]
pub fn query_interval(source: ProfileSource) -> u32 {
    if !source.support().is_supported() {
        return 0;
    }
    source::effective_interval(source)
}

/// Jitter a source's sample period by up to ± `percent` % (0: a fixed period, the default), an extension:
/// periodic workloads can no longer alias with the sampler, and the mean rate stays the interval's.
///
/// # Errors
/// `STATUS_INVALID_PARAMETER` above 90 %, `STATUS_NOT_SUPPORTED` for a source not supported here.
///
/// ```
/// use ntprofile::{NtStatus, ProfileSource, set_jitter};
///
/// set_jitter(ProfileSource::PageFaults, 20)?;
/// assert_eq!(ntprofile::source::jitter_percent(ProfileSource::PageFaults), 20);
/// set_jitter(ProfileSource::PageFaults, 0)?; // a fixed period again
/// assert_eq!(set_jitter(ProfileSource::PageFaults, 91).unwrap_err(), NtStatus::INVALID_PARAMETER);
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn set_jitter(source: ProfileSource, percent: u32) -> Result<(), Error> {
    engine::set_jitter(source, percent).map_err(|status| details::jitter(status, source, percent))
}

/// Another process opened for profiling, as `NtOpenProcess` opens it: named by a pidfd, so that a pid recycled
/// after the process exited never reaches a different process.
///
/// Pass it to [`ProfileBuilder::process`](crate::ProfileBuilder::process) to profile every thread of that
/// process (threads it creates later included). Cloning is cheap and shares the pidfd.
///
/// ```no_run
/// use ntprofile::{Process, Profile};
///
/// let child = std::process::Command::new("sleep").arg("1").spawn()?;
/// let process = Process::open(child.id())?;
/// assert_eq!(process.pid(), child.id());
/// let profile = Profile::builder().process(&process).range(0x1000, 0x10000).build()?;
/// profile.start()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Process {
    inner: Arc<ProcessRef>,
}

impl Process {
    /// `NtOpenProcess` for Linux process id `pid`: open it and check that the caller may profile it (the kernel's
    /// own check: the caller may ptrace-read it, or holds `CAP_PERFMON`/`CAP_SYS_ADMIN`).
    #[doc(alias = "NtOpenProcess")]
    ///
    /// # Errors
    /// - `STATUS_INVALID_CID` when no process `pid` exists (or `pid` is 0 or above the kernel's pid range). A
    ///   process that has exited but is not reaped yet (a zombie) exists: it opens, and
    ///   [`has_exited`](Self::has_exited) says it has exited;
    /// - `STATUS_ACCESS_DENIED` when the caller may not profile it (another user's process without the
    ///   privilege, or `kernel.yama.ptrace_scope` forbids it);
    /// - `STATUS_INSUFFICIENT_RESOURCES` when no file descriptor is left.
    ///
    /// ```
    /// use ntprofile::{NtStatus, Process};
    ///
    /// let me = Process::open(std::process::id())?;
    /// assert!(!me.has_exited());
    /// // Process ids are at most 2^22 on Linux: this one never exists.
    /// assert_eq!(Process::open(0x7FFF_FFFF).unwrap_err().status(), NtStatus::INVALID_CID);
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn open(pid: u32) -> Result<Process, Error> {
        let Ok(raw) = i32::try_from(pid) else {
            return Err(Error::new(
                NtStatus::INVALID_CID,
                format!("process id {pid} is beyond the range of Linux process ids"),
            ));
        };
        match ProcessRef::open(raw) {
            Ok(inner) => Ok(Process {
                inner: Arc::new(inner),
            }),
            Err(status) => Err(open_error(pid, status)),
        }
    }

    /// The Linux process id.
    ///
    /// ```
    /// let me = ntprofile::Process::open(std::process::id())?;
    /// assert_eq!(me.pid(), std::process::id());
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn pid(&self) -> u32 {
        self.inner.pid() as u32
    }

    /// True once the process has exited (a profile of it then counts nothing more). The pidfd keeps naming the
    /// exited process, never a newer one that got its pid.
    ///
    /// ```
    /// // `cat` runs until its input closes: the process is surely alive while it is opened.
    /// let mut child = std::process::Command::new("cat")
    ///     .stdin(std::process::Stdio::piped())
    ///     .spawn()
    ///     .unwrap();
    /// let process = ntprofile::Process::open(child.id())?;
    /// assert!(!process.has_exited());
    /// drop(child.stdin.take()); // end of input: cat exits
    /// child.wait().unwrap();
    /// assert!(process.has_exited());
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn has_exited(&self) -> bool {
        self.inner.has_exited()
    }

    /// The shared internal reference (the same object a C process handle holds).
    fn inner(&self) -> &Arc<ProcessRef> {
        &self.inner
    }
}

/// The detail of a failed open, by status.
fn open_error(pid: u32, status: NtStatus) -> Error {
    let detail = match status {
        NtStatus::INVALID_CID => format!("no process {pid}"),
        NtStatus::ACCESS_DENIED => format!(
            "this caller may not profile process {pid} (another user's process: it needs CAP_PERFMON or \
             CAP_SYS_ADMIN, or ptrace access under kernel.yama.ptrace_scope)"
        ),
        NtStatus::INSUFFICIENT_RESOURCES => {
            format!("no file descriptor left to open process {pid}")
        }
        _ => format!("cannot open process {pid}"),
    };
    Error::new(status, detail)
}

/// A `GROUP_AFFINITY` record of `NtCreateProfileEx`: the processors `64·group + bit` for each set bit of `mask`.
/// Linux CPU `n` is bit `n % 64` of group `n / 64`.
///
/// ```
/// use ntprofile::GroupAffinity;
///
/// let cpu0 = GroupAffinity { mask: 1, group: 0 };
/// assert_eq!(GroupAffinity::cpu(65), GroupAffinity { mask: 2, group: 1 });
/// # let _ = cpu0;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GroupAffinity {
    /// The processors of the group (`KAFFINITY`): bit `b` is CPU `64·group + b`.
    pub mask: u64,
    /// The processor group.
    pub group: u16,
}

impl GroupAffinity {
    /// The record naming one Linux CPU.
    pub fn cpu(cpu: usize) -> GroupAffinity {
        GroupAffinity {
            mask: 1u64 << (cpu % crate::affinity::GROUP_SIZE),
            group: (cpu / crate::affinity::GROUP_SIZE) as u16,
        }
    }
}
