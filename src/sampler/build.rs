//! Building a sampler: the checks, in the order `SamplerBuilder::build` documents them (arguments, source,
//! privileges, targets), the parameters of its events, then the events themselves (opened by `open`), the
//! epoll set over them and the sampler.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use super::follow::Follow;
use super::lost::RingLost;
use super::open::{Opener, Target, shortage, watermark_for};
use super::wait::WaitSet;
use super::{CpuRing, Sampler, SamplerBuilder, SamplerWaker, TargetSpec};
use crate::affinity::{CpuSet, online_cpus};
use crate::api::Process;
use crate::engine::ThreadsPin;
use crate::engine::mode::EventMode;
use crate::error::Error;
use crate::perf::PerfEventSpec;
use crate::perf::proc;
use crate::perf::ring::{Ring, page_size};
use crate::perf::sampler_event::{self, MAX_STACK_USER, SamplerEventParams, USER_REGS_MASK};
use crate::perf::sys::Tid;
use crate::source::{self, ProfileSource, Support};
use crate::status::NtStatus;
use crate::target::{has_system_profile_privilege, may_sample_kernel, perf_event_paranoid};

/// Default data pages per ring: 128 pages (512 KiB), what `kernel.perf_event_mlock_kb`'s default (516 KiB per
/// CPU) allows an unprivileged user for one ring per CPU.
const DEFAULT_RING_PAGES: usize = 128;
/// Default data pages per ring with a user-stack copy: each sample may carry up to 64 KiB.
const DEFAULT_STACK_RING_PAGES: usize = 512;
/// The largest ring a caller may ask for: 2^20 pages (4 GiB with 4 KiB pages).
const MAX_RING_PAGES: usize = 1 << 20;
/// `kernel.perf_event_max_stack`'s default, when the sysctl cannot be read.
const DEFAULT_MAX_STACK: u32 = 127;

pub(super) fn build(b: SamplerBuilder) -> Result<Sampler, Error> {
    let (cpus, stack_user) = check_arguments(&b)?;
    let src = b.source;
    let spec = check_source(src, stack_user)?;
    check_privileges(&b)?;
    let me = std::process::id();
    let targets = targets_of(&b, me)?;
    let cgroup = b.cgroup.as_deref().map(open_cgroup).transpose()?;
    let (pin, own) = pin_library_threads(&targets)?;
    let (interval, params, pages) = event_params(&b, spec, stack_user);
    let mut opener = Opener::new(params, &cpus, &online_cpus(), pages, min_pages(&params));
    opener.chosen_wakeup = b.wakeup_bytes;
    let layout = match cgroup {
        Some(_) => EventMode::Cgroup.into(),
        None => super::layout::choose_layout(&opener, b.global, &targets, &own)?,
    };
    let mode = layout.mode;
    if mode == EventMode::PerThread {
        let b = super::per_thread::Built {
            interval,
            source: src,
            me,
            pin,
            cpus,
            inherit: b.inherit,
            sideband: b.sideband,
            wakeup: b.wakeup_bytes,
        };
        return super::per_thread::build(b, opener.params, layout.pages, targets, &own);
    }
    let filtered = mode == EventMode::CpuFiltered;
    if filtered {
        // Events for every task of a processor: nothing to inherit, the tree is followed from the fork records,
        // which are read from every online processor (a process may fork where no sample is taken).
        let params = SamplerEventParams {
            inherit: false,
            inherit_thread: false,
            task: true,
            ..opener.params
        };
        opener = Opener::new(params, &cpus, &online_cpus(), pages, min_pages(&params));
        opener.chosen_wakeup = b.wakeup_bytes;
    }
    let current = targets.iter().any(|t| matches!(t, Target::Current));
    opener.cgroup = cgroup;
    let processes = opener.open_all(mode, targets, &own)?;
    let raw: Vec<RawFd> = opener.fds.iter().map(AsRawFd::as_raw_fd).collect();
    // A cpu-filtered sampler's events never hang up: the targets' pidfds tell their exits.
    let exits: Vec<RawFd> = if filtered {
        processes.iter().map(|p| p.pidfd().as_raw_fd()).collect()
    } else {
        Vec::new()
    };
    let waits = WaitSet::new(raw.clone(), mode == EventMode::ThreadCpu, &exits)
        .map_err(|e| shortage(e, "the epoll set of the sampler's events"))?;
    let format = sampler_event::format_of(&opener.params);
    let follow = filtered.then(|| {
        let own: Vec<u32> = own.iter().map(|t| t.0 as u32).collect();
        Follow::new(
            &processes,
            current.then_some(me),
            &own,
            b.inherit,
            b.sideband,
            format,
        )
    });
    let watermark = opener.params.wakeup_watermark as u64;
    let rings = std::mem::take(&mut opener.rings)
        .into_iter()
        .zip(&opener.ring_cpus)
        .enumerate()
        .map(|(i, (ring, &cpu))| CpuRing {
            cpu,
            ring,
            lost: RingLost::new(
                raw.iter()
                    .zip(&opener.ring_of)
                    .filter(|&(_, &r)| r == i)
                    .map(|(&fd, _)| fd)
                    .collect(),
            ),
        })
        .collect();
    Ok(Sampler {
        fds: opener.fds,
        rings,
        waits: SamplerWaker(Arc::new(waits)),
        pages: opener.pages,
        mode,
        follow,
        per_thread: None,
        events_count_lost: opener.params.read_lost,
        no_loss_free: super::lost::no_loss_free_bytes(&opener.params),
        scratch: vec![0u64; Ring::MAX_RECORD_WORDS].into_boxed_slice(),
        format,
        watermark,
        stats: Default::default(),
        interval,
        source: src,
        owner: me,
        _processes: processes,
        pin,
    })
}

/// For a sampler of the calling process: the library's threads (the profiles' consumer and jitter threads)
/// started now, before the events open, and kept until the sampler is dropped, with their ids (the events skip
/// them). Started later, from a thread the sampler observes, they would inherit its events.
fn pin_library_threads(targets: &[Target]) -> Result<(Option<ThreadsPin>, Vec<Tid>), Error> {
    if !targets.iter().any(|t| matches!(t, Target::Current)) {
        return Ok((None, Vec::new()));
    }
    let (pin, own) = crate::engine::pin_threads().map_err(|status| {
        Error::new(
            status,
            "could not start the library's threads, which must exist before a sampler of this process opens \
             its events (no thread or descriptor left): free resources and try again",
        )
    })?;
    Ok((Some(pin), own))
}

/// The fewest data pages (a power of two) of a ring that holds two of the largest samples of `params` and a
/// Lost record.
fn min_pages(params: &SamplerEventParams) -> usize {
    sampler_event::min_ring_bytes(params)
        .div_ceil(page_size())
        .next_power_of_two()
}

/// The `callchain` frames the events record: the builder's, capped by `kernel.perf_event_max_stack`.
fn max_stack_of(b: &SamplerBuilder) -> u16 {
    if b.callchain == 0 {
        return 0;
    }
    let kernel_max = proc::perf_event_max_stack().unwrap_or(DEFAULT_MAX_STACK);
    u16::try_from(u32::from(b.callchain).min(kernel_max.max(1))).unwrap_or(u16::MAX)
}

/// Check 1, the arguments: the CPUs to sample (all online ones by default) and the user-stack copy's size
/// rounded up to 8 bytes.
fn check_arguments(b: &SamplerBuilder) -> Result<(CpuSet, u32), Error> {
    if b.cgroup.is_some() && (b.global || !b.targets.is_empty()) {
        return Err(Error::new(
            NtStatus::INVALID_PARAMETER,
            "a sampler of a cgroup samples the tasks of that cgroup: name no process and not global() as well \
             (drop process(), pid(), current_process() and global(), or cgroup())",
        ));
    }
    if b.global && !b.targets.is_empty() {
        return Err(Error::new(
            NtStatus::INVALID_PARAMETER,
            "a global sampler samples every process: name no process as well (drop process(), pid() and \
             current_process(), or global())",
        ));
    }
    let online = online_cpus();
    let cpus = match &b.cpus {
        None => online.clone(),
        Some(list) => {
            let set = CpuSet::from_cpus(list.iter().copied());
            if set.is_empty() || !set.is_subset(&online) {
                return Err(Error::new(
                    NtStatus::INVALID_PARAMETER,
                    format!(
                        "the CPUs {list:?} are not all online (online CPUs: {:?}): name online CPUs, or none \
                         for all of them",
                        online.iter().collect::<Vec<_>>()
                    ),
                ));
            }
            set
        }
    };
    if let Some(pages) = b.ring_pages
        && (!pages.is_power_of_two() || pages > MAX_RING_PAGES)
    {
        return Err(Error::new(
            NtStatus::INVALID_PARAMETER,
            format!("ring_pages {pages} is not a power of two between 1 and {MAX_RING_PAGES}"),
        ));
    }
    if b.user_stack > MAX_STACK_USER {
        return Err(Error::new(
            NtStatus::INVALID_PARAMETER,
            format!(
                "user_stack {} bytes is above the kernel's limit of {MAX_STACK_USER} bytes per sample",
                b.user_stack
            ),
        ));
    }
    let stack_user = b.user_stack.next_multiple_of(8);
    if let Some(pages) = b.ring_pages {
        let need = sampler_event::min_ring_bytes(&SamplerEventParams {
            max_stack: max_stack_of(b),
            stack_user,
            ..placeholder_params()
        });
        let min = need.div_ceil(page_size()).next_power_of_two();
        if pages < min {
            return Err(Error::new(
                NtStatus::INVALID_PARAMETER,
                format!(
                    "ring_pages {pages} ({} bytes) cannot hold two of the largest samples this sampler writes \
                     and the kernel's Lost record ({need} bytes): a sample that does not fit would be dropped \
                     without a trace; use ring_pages({min}) or more, a smaller user_stack or callchain, or the \
                     default size",
                    pages * page_size()
                ),
            ));
        }
    }
    let pages = ring_pages(b, stack_user);
    if let Some(bytes) = b.wakeup_bytes
        && (bytes == 0 || bytes > pages.saturating_mul(crate::perf::ring::page_size()))
    {
        return Err(Error::new(
            NtStatus::INVALID_PARAMETER,
            format!(
                "wakeup_bytes {bytes} is not between 1 and the ring's size ({pages} pages): give a size the \
                 ring holds"
            ),
        ));
    }
    Ok((cpus, stack_user))
}

/// Event parameters whose fields other than the sample's layout do not matter (sizing a ring).
fn placeholder_params() -> SamplerEventParams {
    SamplerEventParams {
        spec: PerfEventSpec {
            type_: 0,
            config: 0,
            config1: 0,
            config2: 0,
            name: "",
        },
        period: 1,
        exclude_kernel: true,
        exclude_callchain_kernel: true,
        regs: false,
        user_entry: false,
        inherit: false,
        inherit_thread: false,
        sideband: false,
        task: false,
        max_stack: 0,
        stack_user: 0,
        wakeup_watermark: 0,
        context_switch: false,
        read_lost: false,
    }
}

/// Check 2, the source: its perf event, when it has one and it can be sampled here.
fn check_source(src: ProfileSource, stack_user: u32) -> Result<PerfEventSpec, Error> {
    let spec = src.perf_event().ok_or_else(|| {
        Error::new(
            NtStatus::NOT_SUPPORTED,
            format!(
                "{} has no perf event on Linux: use a source that has one (ProfileSource::Time, TaskClock, \
                 PageFaults, ...; see list_sources)",
                src.name()
            ),
        )
    })?;
    let support = src.support();
    if support == Support::NeedsKernelPrivilege {
        return Err(Error::new(
            support.status(),
            format!(
                "{} is sampled in the kernel (where the thread blocks or moves), and this caller may not sample \
                 the kernel: run with CAP_PERFMON or CAP_SYS_ADMIN, or set kernel.perf_event_paranoid to 1 or \
                 less (it is {})",
                src.name(),
                perf_event_paranoid()
            ),
        ));
    }
    if !support.is_supported() {
        return Err(Error::new(
            support.status(),
            format!(
                "{} cannot be sampled here: {} (use ProfileSource::Time or another software source where no \
                 PMU exists; see list_sources)",
                src.name(),
                support.reason()
            ),
        ));
    }
    if stack_user > 0 && USER_REGS_MASK == 0 {
        return Err(Error::new(
            NtStatus::NOT_SUPPORTED,
            "a user-stack copy needs the register map of x86-64 or AArch64: use callchain() instead",
        ));
    }
    Ok(spec)
}

/// Check 3, privileges: a global sampler and kernel addresses need them.
fn check_privileges(b: &SamplerBuilder) -> Result<(), Error> {
    if let Some(dir) = &b.cgroup
        && !has_system_profile_privilege()
    {
        return Err(Error::new(
            NtStatus::PRIVILEGE_NOT_HELD,
            format!(
                "a sampler of a cgroup ({}) opens one event per processor for the cgroup's tasks, which needs \
                 CAP_PERFMON, CAP_SYS_ADMIN or kernel.perf_event_paranoid <= 0 (it is {}): run with the \
                 capability, or sample the cgroup's processes (cgroup.procs) by pid",
                dir.display(),
                perf_event_paranoid()
            ),
        ));
    }
    if b.global && !has_system_profile_privilege() {
        return Err(Error::new(
            NtStatus::PRIVILEGE_NOT_HELD,
            format!(
                "a global sampler (every process) needs CAP_PERFMON, CAP_SYS_ADMIN or \
                 kernel.perf_event_paranoid <= 0 (it is {}): run with the capability, or sample processes",
                perf_event_paranoid()
            ),
        ));
    }
    if b.kernel && !may_sample_kernel() {
        return Err(Error::new(
            NtStatus::PRIVILEGE_NOT_HELD,
            format!(
                "sampling kernel addresses needs CAP_PERFMON, CAP_SYS_ADMIN or kernel.perf_event_paranoid <= 1 \
                 (it is {}): run with the capability, or drop kernel(true)",
                perf_event_paranoid()
            ),
        ));
    }
    Ok(())
}

/// Check 4, the targets, each process once (`me`, the calling process, is the current process however named):
/// the calling process when none is named and the sampler is not global.
fn targets_of(b: &SamplerBuilder, me: u32) -> Result<Vec<Target>, Error> {
    let mut targets: Vec<Target> = Vec::new();
    let mut pids: Vec<u32> = Vec::new();
    let specs = if b.targets.is_empty() && !b.global && b.cgroup.is_none() {
        vec![TargetSpec::Current]
    } else {
        b.targets.clone()
    };
    for spec in specs {
        let target = match spec {
            TargetSpec::Current => Target::Current,
            TargetSpec::Process(p) if p.pid() == me => Target::Current,
            TargetSpec::Process(p) => Target::Process(p),
            TargetSpec::Pid(pid) if pid == me => Target::Current,
            TargetSpec::Pid(pid) => Target::Process(Process::open(pid)?),
        };
        let pid = match &target {
            Target::Current => me,
            Target::Process(p) => p.pid(),
        };
        if !pids.contains(&pid) {
            pids.push(pid);
            targets.push(target);
        }
    }
    Ok(targets)
}

/// Check 4 for a sampler of a cgroup: its directory, opened (the events take it as their pid).
fn open_cgroup(dir: &std::path::Path) -> Result<std::fs::File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir);
    opened.map_err(|e| {
        let status = match e.kind() {
            std::io::ErrorKind::PermissionDenied => NtStatus::ACCESS_DENIED,
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => NtStatus::NOT_FOUND,
            _ => NtStatus::INVALID_PARAMETER,
        };
        Error::new(
            status,
            format!(
                "cannot open the cgroup directory {} ({e}): name a directory of the cgroup v2 file system",
                dir.display()
            ),
        )
    })
}

/// What the events record: the interval (the builder's, clamped, or the source's), the events' parameters and
/// the data pages of each ring.
fn event_params(
    b: &SamplerBuilder,
    spec: PerfEventSpec,
    stack_user: u32,
) -> (u32, SamplerEventParams, usize) {
    let src = b.source;
    let interval = match b.interval {
        Some(i) => src.clamp_interval(i),
        None => source::effective_interval(src),
    };
    let pages = ring_pages(b, stack_user);
    // An event sampled in the kernel (context switches, migrations, tracepoints) gives no sample at all with
    // `exclude_kernel`: it takes kernel samples (`check_source` refused it to a caller who may not) with the
    // user registers, and a user-space sampler reports each at the user ip, where the thread entered the
    // kernel (the registers stay in the sample).
    let in_kernel = spec.sampled_in_kernel() && USER_REGS_MASK != 0;
    let params = SamplerEventParams {
        spec,
        period: src.period_for(interval),
        exclude_kernel: !b.kernel && !in_kernel,
        exclude_callchain_kernel: !b.kernel,
        regs: in_kernel,
        user_entry: in_kernel && !b.kernel,
        inherit: !b.global && b.cgroup.is_none(),
        inherit_thread: !b.inherit,
        sideband: b.sideband,
        task: false,
        max_stack: max_stack_of(b),
        stack_user,
        wakeup_watermark: b.wakeup_bytes.unwrap_or_else(|| watermark_for(pages)),
        context_switch: b.context_switches,
        read_lost: true,
    };
    let params = if b.samples {
        params
    } else {
        params.sideband_only()
    };
    (interval, params, pages)
}

/// The data pages of each ring: the builder's, else the default for the sample's size.
fn ring_pages(b: &SamplerBuilder, stack_user: u32) -> usize {
    b.ring_pages.unwrap_or(if stack_user > 0 {
        DEFAULT_STACK_RING_PAGES
    } else {
        DEFAULT_RING_PAGES
    })
}
