//! Building a sampler: the checks, in the order `SamplerBuilder::build` documents them, then the events, opened
//! target by target in stable passes (scan the threads, open every event, scan again; a thread that appeared
//! meanwhile discards the pass), with one ring per CPU within the locked-memory budget.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize};

use nix::errno::Errno;

use super::{CpuRing, Sampler, SamplerBuilder, TargetSpec};
use crate::affinity::{CpuSet, online_cpus};
use crate::api::Process;
use crate::error::Error;
use crate::perf::event;
use crate::perf::proc;
use crate::perf::records::{self, MAX_STACK_USER, SamplerEventParams, USER_REGS_MASK};
use crate::perf::ring::{Ring, SampleLayout, page_size};
use crate::perf::sys::{self, Epoll, Tid};
use crate::source;
use crate::status::NtStatus;
use crate::target::{has_system_profile_privilege, may_sample_kernel, perf_event_paranoid};

/// Default data pages per ring: 128 pages (512 KiB), what `kernel.perf_event_mlock_kb`'s default (516 KiB per
/// CPU) allows an unprivileged user for one ring per CPU.
pub(super) const DEFAULT_RING_PAGES: usize = 128;
/// Default data pages per ring with a user-stack copy: each sample may carry up to 64 KiB.
pub(super) const DEFAULT_STACK_RING_PAGES: usize = 512;
/// The largest ring a caller may ask for: 2^20 pages (4 GiB with 4 KiB pages).
pub(super) const MAX_RING_PAGES: usize = 1 << 20;
/// How many times a target's pass is done again because threads appeared meanwhile.
const RESCAN_LIMIT: usize = 64;
/// `kernel.perf_event_max_stack`'s default, when the sysctl cannot be read.
const DEFAULT_MAX_STACK: u32 = 127;

/// A target after its pid was opened.
enum Target {
    Current,
    Process(Process),
}

pub(super) fn build(b: SamplerBuilder) -> Result<Sampler, Error> {
    // 1. The arguments.
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

    // 2. The source.
    let src = b.source;
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

    // 3. Privileges.
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

    // 4. The targets, each process once.
    let mut targets: Vec<Target> = Vec::new();
    let mut pids: Vec<u32> = Vec::new();
    let me = std::process::id();
    let specs = if b.targets.is_empty() && !b.global {
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

    // 5. The events.
    let interval = match b.interval {
        Some(i) => src.clamp_interval(i),
        None => source::effective_interval(src),
    };
    let kernel_max = proc::perf_event_max_stack().unwrap_or(DEFAULT_MAX_STACK);
    let max_stack =
        u16::try_from(u32::from(b.callchain).min(kernel_max.max(1))).unwrap_or(u16::MAX);
    let pages = b.ring_pages.unwrap_or(if stack_user > 0 {
        DEFAULT_STACK_RING_PAGES
    } else {
        DEFAULT_RING_PAGES
    });
    let params = SamplerEventParams {
        spec,
        period: src.period_for(interval),
        exclude_kernel: !b.kernel,
        inherit: !b.global,
        inherit_thread: !b.inherit,
        sideband: b.sideband,
        max_stack: if b.callchain == 0 { 0 } else { max_stack },
        stack_user,
        wakeup_watermark: watermark_for(pages),
    };
    let mut opener = Opener::new(params, &cpus, pages);
    let mut processes = Vec::new();
    if b.global {
        opener.observe(Tid::ALL_TASKS, Who::Global)?;
    } else {
        for target in targets {
            match target {
                Target::Current => {
                    let own = crate::engine::own_tids();
                    opener.open_target(&Target::Current, &own)?;
                }
                Target::Process(p) => {
                    opener.open_target(&Target::Process(p.clone()), &[])?;
                    processes.push(p);
                }
            }
        }
    }
    let epoll = Epoll::new().map_err(|e| shortage(e, "an epoll descriptor"))?;
    for (i, fd) in opener.fds.iter().enumerate() {
        epoll
            .add(fd.as_raw_fd(), i as u64)
            .map_err(|e| shortage(e, "the epoll set of the sampler's events"))?;
    }
    let hup = (0..opener.fds.len())
        .map(|_| AtomicBool::new(false))
        .collect();
    let format = records::format_of(&opener.params);
    let watermark = opener.params.wakeup_watermark as u64;
    Ok(Sampler {
        fds: opener.fds,
        rings: opener.rings,
        epoll,
        hup,
        hung_up: AtomicUsize::new(0),
        per_task: !b.global,
        scratch: vec![0u64; Ring::MAX_RECORD_WORDS].into_boxed_slice(),
        format,
        watermark,
        stats: Default::default(),
        interval,
        source: src,
        owner: me,
        _processes: processes,
    })
}

/// A passing shortage of the process or the system while creating `what`.
fn shortage(errno: Errno, what: &str) -> Error {
    Error::new(
        NtStatus::INSUFFICIENT_RESOURCES,
        format!(
            "no resources left for {what} ({}): close descriptors or free memory and try again",
            std::io::Error::from_raw_os_error(errno as i32)
        ),
    )
}

/// The wake-up watermark for a ring of `pages` data pages: a quarter of it.
fn watermark_for(pages: usize) -> usize {
    pages * page_size() / 4
}

/// Whose events are opened (for the meaning of a refusal).
#[derive(Clone, Copy)]
enum Who {
    Current,
    Other(u32),
    Global,
}

/// The events opened so far.
struct Opener {
    params: SamplerEventParams,
    cpus: Vec<usize>,
    /// Data pages of the next ring (shrunk when the budget refused a larger one).
    pages: usize,
    fds: Vec<OwnedFd>,
    rings: Vec<CpuRing>,
    /// Per CPU of `cpus`: the index in `fds` of the event that owns its ring.
    owner: Vec<Option<usize>>,
    raised_nofile: bool,
}

/// How far an opener had got: a pass that must be done again goes back to it.
struct Checkpoint {
    fds: usize,
    rings: usize,
}

impl Opener {
    fn new(params: SamplerEventParams, cpus: &CpuSet, pages: usize) -> Opener {
        let cpus: Vec<usize> = cpus.iter().collect();
        let owner = vec![None; cpus.len()];
        Opener {
            params,
            cpus,
            pages,
            fds: Vec::new(),
            rings: Vec::new(),
            owner,
            raised_nofile: false,
        }
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            fds: self.fds.len(),
            rings: self.rings.len(),
        }
    }

    /// Close what was opened since `cp` (closing an event also removes the copies tasks inherited from it).
    fn rollback(&mut self, cp: &Checkpoint) {
        self.rings.truncate(cp.rings);
        self.fds.truncate(cp.fds);
        for o in &mut self.owner {
            if o.is_some_and(|i| i >= cp.fds) {
                *o = None;
            }
        }
    }

    /// Open the events of one target process in a stable pass (see the module's documentation), skipping the
    /// threads `skip`. A process that exited (or exits meanwhile) gets no events, which is no error.
    fn open_target(&mut self, target: &Target, skip: &[Tid]) -> Result<(), Error> {
        let who = match target {
            Target::Current => Who::Current,
            Target::Process(p) => Who::Other(p.pid()),
        };
        for attempt in 0..RESCAN_LIMIT {
            let cp = self.checkpoint();
            let scan = threads(target)?;
            for &tid in scan.iter().filter(|t| !skip.contains(t)) {
                self.observe(tid, who)?;
            }
            let fresh: Vec<Tid> = threads(target)?
                .into_iter()
                .filter(|t| !skip.contains(t) && scan.binary_search(t).is_err())
                .collect();
            if fresh.is_empty() || attempt + 1 == RESCAN_LIMIT {
                // Under a storm of thread creation that never settles, the newcomers are added one by one
                // (each is then observed at least once).
                for tid in fresh {
                    self.observe(tid, who)?;
                }
                // The events were opened by pid: if the process is gone now, its pid may have been reused by
                // another process meanwhile. Keep nothing of it.
                if let Target::Process(p) = target
                    && p.has_exited()
                {
                    self.rollback(&cp);
                }
                return Ok(());
            }
            self.rollback(&cp);
        }
        Ok(())
    }

    /// Open task `tid`'s event on every CPU: the first of a CPU owns its ring, the others write into it.
    fn observe(&mut self, tid: Tid, who: Who) -> Result<(), Error> {
        for ci in 0..self.cpus.len() {
            let cpu = self.cpus[ci];
            let Some(fd) = self.open_one(tid, cpu, who)? else {
                return Ok(()); // the task exited meanwhile
            };
            let fd = match self.owner[ci] {
                Some(o) => {
                    event::set_output(fd.as_fd(), self.fds[o].as_fd())
                        .map_err(|e| refusal(e, who, "redirecting an event into its CPU's ring"))?;
                    fd
                }
                None => {
                    let Some((ring, fd)) = self.map_owner(fd, tid, cpu, who)? else {
                        return Ok(());
                    };
                    self.rings.push(CpuRing { cpu, ring });
                    self.owner[ci] = Some(self.fds.len());
                    fd
                }
            };
            self.fds.push(fd);
        }
        Ok(())
    }

    /// Open one event; `None` when the task is gone (ESRCH).
    fn open_one(&mut self, tid: Tid, cpu: usize, who: Who) -> Result<Option<OwnedFd>, Error> {
        let mut interrupted = 0;
        loop {
            match records::open_sampler_event(&self.params, tid, cpu) {
                Ok(fd) => return Ok(Some(fd)),
                Err(Errno::ESRCH) if tid != Tid::ALL_TASKS => return Ok(None),
                Err(Errno::EINTR) if interrupted < 3 => interrupted += 1,
                Err(Errno::EMFILE) if !self.raised_nofile && sys::raise_nofile_limit() => {
                    self.raised_nofile = true;
                }
                Err(errno) => return Err(refusal(errno, who, "opening a perf event")),
            }
        }
    }

    /// Map the ring of a CPU's first event, halving its size while the locked-memory budget refuses it. When
    /// the ring comes out smaller than the watermark was chosen for, the event is opened again with a quarter
    /// of the smaller ring as its watermark (the kernel would otherwise wake the reader only when the ring is
    /// full). `None`: the task exited meanwhile.
    fn map_owner(
        &mut self,
        mut fd: OwnedFd,
        tid: Tid,
        cpu: usize,
        who: Who,
    ) -> Result<Option<(Ring, OwnedFd)>, Error> {
        loop {
            let ring = loop {
                match Ring::map(fd.as_fd(), self.pages, SampleLayout { tid: true }) {
                    Ok(ring) => break ring,
                    Err(Errno::EPERM | Errno::ENOMEM) if self.pages > 1 => self.pages /= 2,
                    Err(errno) => {
                        return Err(Error::new(
                            NtStatus::INSUFFICIENT_RESOURCES,
                            format!(
                                "no locked memory left for a ring of one page ({}): raise RLIMIT_MEMLOCK or \
                                 kernel.perf_event_mlock_kb, or close other perf rings",
                                std::io::Error::from_raw_os_error(errno as i32)
                            ),
                        ));
                    }
                }
            };
            let watermark = watermark_for(self.pages);
            if self.params.wakeup_watermark <= watermark {
                return Ok(Some((ring, fd)));
            }
            drop(ring);
            drop(fd);
            self.params.wakeup_watermark = watermark;
            fd = match self.open_one(tid, cpu, who)? {
                Some(fd) => fd,
                None => return Ok(None),
            };
        }
    }
}

/// The threads of a target now, sorted (empty when the process is gone).
fn threads(target: &Target) -> Result<Vec<Tid>, Error> {
    let pid = match target {
        Target::Current => None,
        Target::Process(p) if p.has_exited() => return Ok(Vec::new()),
        Target::Process(p) => Some(p.pid() as i32),
    };
    match proc::thread_ids(pid) {
        Ok(tids) => Ok(tids),
        Err(Errno::ENOENT | Errno::ESRCH) if pid.is_some() => Ok(Vec::new()),
        Err(errno) if source::is_transient_errno(errno) => {
            Err(shortage(errno, "listing a target's threads"))
        }
        Err(errno) => Err(Error::new(
            NtStatus::INTERNAL_ERROR,
            format!(
                "cannot list the threads of {} ({})",
                pid.map_or("this process".to_string(), |p| format!("process {p}")),
                std::io::Error::from_raw_os_error(errno as i32)
            ),
        )),
    }
}

/// The error of a refused system call while opening events for `who`.
fn refusal(errno: Errno, who: Who, doing: &str) -> Error {
    let text = std::io::Error::from_raw_os_error(errno as i32);
    match errno {
        Errno::EACCES | Errno::EPERM => match who {
            Who::Other(pid) => Error::new(
                NtStatus::ACCESS_DENIED,
                format!(
                    "this caller may not profile process {pid} ({text}): it needs CAP_PERFMON or \
                     CAP_SYS_ADMIN, or ptrace access under kernel.yama.ptrace_scope"
                ),
            ),
            Who::Current | Who::Global => Error::new(
                NtStatus::PRIVILEGE_NOT_HELD,
                format!(
                    "the kernel refused the sampler's events ({text}; kernel.perf_event_paranoid is {}): run \
                     with CAP_PERFMON, or lower the sysctl",
                    perf_event_paranoid()
                ),
            ),
        },
        e if source::is_transient_errno(e) || e == Errno::ENOSPC => Error::new(
            NtStatus::INSUFFICIENT_RESOURCES,
            format!(
                "no resources left while {doing} ({text}): close descriptors (or raise RLIMIT_NOFILE), free \
                 memory, or sample fewer CPUs, and try again"
            ),
        ),
        Errno::EINVAL
        | Errno::E2BIG
        | Errno::EOPNOTSUPP
        | Errno::EOVERFLOW
        | Errno::ENOENT
        | Errno::ENODEV => Error::new(
            NtStatus::NOT_SUPPORTED,
            format!(
                "this kernel refused the sampler's event attributes while {doing} ({text}): use a software \
                 source, fewer call-chain frames or a smaller user_stack"
            ),
        ),
        e => Error::new(NtStatus::from(e), format!("{doing} failed ({text})")),
    }
}
