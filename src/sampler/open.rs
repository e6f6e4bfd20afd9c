//! Opening a sampler's events, target by target in stable passes (scan the threads, open every event, scan
//! again; a thread that appeared meanwhile discards the pass), with one ring per CPU within the locked-memory
//! budget, shared evenly: when a ring cannot be mapped, every ring is given up and all are opened again at half
//! the size, down to the smallest ring that holds two of the largest samples; and the errors of a refused
//! system call while doing so.

use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;

use crate::affinity::CpuSet;
use crate::api::Process;
use crate::engine::mode::EventMode;
use crate::error::Error;
use crate::perf::event;
use crate::perf::proc;
use crate::perf::ring::{Ring, SampleLayout, page_size};
use crate::perf::sampler_event::{
    SamplerEventParams, open_sampler_cgroup_event, open_sampler_event,
};
use crate::perf::sys::{self, Tid};
use crate::source;
use crate::status::NtStatus;
use crate::target::perf_event_paranoid;

/// How many times a target's pass is done again because threads appeared meanwhile.
const RESCAN_LIMIT: usize = 64;

/// A target after its pid was opened.
pub(super) enum Target {
    Current,
    Process(Process),
}

/// A passing shortage of the process or the system while creating `what`.
pub(super) fn shortage(errno: Errno, what: &str) -> Error {
    Error::new(
        NtStatus::INSUFFICIENT_RESOURCES,
        format!(
            "no resources left for {what} ({}): close descriptors or free memory and try again",
            std::io::Error::from_raw_os_error(errno as i32)
        ),
    )
}

/// The wake-up watermark for a ring of `pages` data pages: a quarter of it.
pub(super) fn watermark_for(pages: usize) -> usize {
    pages * page_size() / 4
}

/// Whose events are opened (for the meaning of a refusal).
#[derive(Clone, Copy)]
enum Who {
    Current,
    Other(u32),
    Global,
    /// Every task of each processor, of which the targets' records are kept (`cpu-filtered`).
    Filtered,
    /// The tasks of a cgroup on each processor (`cgroup`).
    Cgroup,
}

/// Descriptors kept free beside a sampler's events (the process's own needs, pidfds of followed children).
pub(super) const DESCRIPTORS_TO_SPARE: u64 = 16;

/// Why opening stopped.
enum Stop {
    /// A ring could not be mapped at this size: open everything again with smaller rings.
    Shrink(Errno),
    /// A failure to report.
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Fail(e)
    }
}

/// The events opened so far.
pub(super) struct Opener {
    pub(super) params: SamplerEventParams,
    /// The CPUs with a ring: the sampled ones, and with side-band records every online one.
    cpus: Vec<usize>,
    /// Per CPU of `cpus`: whether it is sampled (else it carries side-band records only).
    sampled: Vec<bool>,
    /// Data pages of every ring (halved while the budget refuses them).
    pub(super) pages: usize,
    /// The fewest data pages a ring may have (two of the largest samples and a Lost record).
    min_pages: usize,
    pub(super) fds: Vec<OwnedFd>,
    /// Per descriptor of `fds`: the index in `rings` of the ring it writes into.
    pub(super) ring_of: Vec<usize>,
    pub(super) rings: Vec<Ring>,
    /// Per ring: its CPU.
    pub(super) ring_cpus: Vec<usize>,
    /// Per CPU of `cpus`: the index in `fds` of the event that owns its ring.
    owner: Vec<Option<usize>>,
    raised_nofile: bool,
    /// The wake-up size the caller chose (`wakeup_bytes`), kept across the budget's restarts; `None`: a quarter
    /// of the ring, whatever size it comes out.
    pub(super) chosen_wakeup: Option<usize>,
    /// A sampler of a cgroup: its directory, the events' pid (`cgroup` layout).
    pub(super) cgroup: Option<std::fs::File>,
}

/// How far an opener had got: a pass that must be done again goes back to it.
struct Checkpoint {
    fds: usize,
    rings: usize,
}

impl Opener {
    /// An opener that samples on `cpus` and, with side-band records, reads them from every CPU of `online`
    /// (a task that maps a library, forks or execs on a CPU that is not sampled is still known when it is
    /// sampled elsewhere).
    pub(super) fn new(
        params: SamplerEventParams,
        cpus: &CpuSet,
        online: &CpuSet,
        pages: usize,
        min_pages: usize,
    ) -> Opener {
        let all: Vec<usize> = if params.sideband || params.task {
            cpus.union(online).iter().collect()
        } else {
            cpus.iter().collect()
        };
        let sampled = all.iter().map(|&c| cpus.contains(c)).collect();
        let owner = vec![None; all.len()];
        Opener {
            params,
            cpus: all,
            sampled,
            pages: pages.max(min_pages),
            min_pages,
            fds: Vec::new(),
            ring_of: Vec::new(),
            rings: Vec::new(),
            ring_cpus: Vec::new(),
            owner,
            raised_nofile: false,
            chosen_wakeup: None,
            cgroup: None,
        }
    }

    /// The CPUs with a ring (sampled ones, and with side-band or task records every online one).
    pub(super) fn ring_cpu_count(&self) -> usize {
        self.cpus.len()
    }

    /// The fewest data pages a ring may have (two of the largest samples and a Lost record).
    pub(super) fn min_pages(&self) -> usize {
        self.min_pages
    }

    /// Open the events of every target (or, `global`, of every task on each CPU); the target processes are
    /// returned, to be kept open for the sampler's life. The library's own threads `own` are never observed. When the
    /// locked-memory budget refuses a ring, everything is closed and opened again with rings of half the size
    /// (the same size on every CPU), down to the smallest size the samples allow.
    pub(super) fn open_all(
        &mut self,
        mode: EventMode,
        targets: Vec<Target>,
        own: &[Tid],
    ) -> Result<Vec<Process>, Error> {
        loop {
            self.params.wakeup_watermark = self.chosen_wakeup.map_or_else(
                || watermark_for(self.pages),
                |w| w.min(self.pages * page_size()),
            );
            match self.try_open_all(mode, &targets, own) {
                Ok(()) => break,
                Err(Stop::Fail(e)) => return Err(e),
                Err(Stop::Shrink(errno)) => {
                    self.rollback(&Checkpoint { fds: 0, rings: 0 });
                    if self.pages <= self.min_pages {
                        return Err(self.no_budget(errno));
                    }
                    self.pages = (self.pages / 2).max(self.min_pages);
                }
            }
        }
        Ok(targets
            .into_iter()
            .filter_map(|t| match t {
                Target::Process(p) => Some(p),
                Target::Current => None,
            })
            .collect())
    }

    fn try_open_all(
        &mut self,
        mode: EventMode,
        targets: &[Target],
        own: &[Tid],
    ) -> Result<(), Stop> {
        match mode {
            EventMode::Cpu => return self.observe(Tid::ALL_TASKS, Who::Global),
            EventMode::CpuFiltered => return self.observe(Tid::ALL_TASKS, Who::Filtered),
            EventMode::Cgroup => return self.observe(Tid::ALL_TASKS, Who::Cgroup),
            _ => {}
        }
        for target in targets {
            match target {
                Target::Current => self.open_target(target, own)?,
                Target::Process(_) => self.open_target(target, &[])?,
            }
        }
        Ok(())
    }

    /// The error when rings of the smallest size do not fit in the locked-memory budget on every CPU.
    fn no_budget(&self, errno: Errno) -> Error {
        let kib = self.min_pages * page_size() / 1024;
        Error::new(
            NtStatus::INSUFFICIENT_RESOURCES,
            format!(
                "no locked memory left for {} rings of {} data pages ({kib} KiB each, the least that holds two of \
                 the largest samples) ({}): raise RLIMIT_MEMLOCK (ulimit -l) or kernel.perf_event_mlock_kb, \
                 close other perf rings of this user, sample fewer CPUs, or record a smaller user stack or call \
                 chain",
                self.cpus.len(),
                self.min_pages,
                std::io::Error::from_raw_os_error(errno as i32)
            ),
        )
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
        self.ring_cpus.truncate(cp.rings);
        self.fds.truncate(cp.fds);
        self.ring_of.truncate(cp.fds);
        for o in &mut self.owner {
            if o.is_some_and(|i| i >= cp.fds) {
                *o = None;
            }
        }
    }

    /// Open the events of one target process in a stable pass (see the module's documentation), skipping the
    /// threads `skip`. A process that exited (or exits meanwhile) gets no events, which is no error.
    fn open_target(&mut self, target: &Target, skip: &[Tid]) -> Result<(), Stop> {
        let who = match target {
            Target::Current => Who::Current,
            Target::Process(p) => Who::Other(p.pid()),
        };
        for attempt in 0..RESCAN_LIMIT {
            let cp = self.checkpoint();
            let scan = threads(target)?;
            self.check_descriptors(scan.len(), who)?;
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

    /// Fail at once, before opening a target's events, when `threads` threads on every CPU cannot fit under the
    /// hard descriptor limit; raise the soft limit to the hard one when they need more than it leaves.
    fn check_descriptors(&mut self, threads: usize, who: Who) -> Result<(), Stop> {
        let budget = crate::engine::mode::Budget::now();
        let need = (threads as u64).saturating_mul(self.cpus.len() as u64);
        if budget.open + need + DESCRIPTORS_TO_SPARE > budget.hard {
            let whom = match who {
                Who::Other(pid) => format!("process {pid}"),
                Who::Current | Who::Global | Who::Filtered | Who::Cgroup => {
                    "this process".to_string()
                }
            };
            return Err(Stop::Fail(Error::new(
                NtStatus::INSUFFICIENT_RESOURCES,
                format!(
                    "sampling the {threads} threads of {whom} on {} processors needs {need} descriptors (one \
                     event per thread and processor) beside the {} open; RLIMIT_NOFILE is {}/{} (soft/hard): \
                     raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) to at least {}, or run with \
                     CAP_PERFMON (or kernel.perf_event_paranoid 0 or less), with which the sampler opens one \
                     event per processor (cpu-filtered)",
                    self.cpus.len(),
                    budget.open,
                    budget.soft,
                    budget.hard,
                    budget.open + need + DESCRIPTORS_TO_SPARE
                ),
            )));
        }
        if budget.open + need + DESCRIPTORS_TO_SPARE > budget.soft && sys::raise_nofile_limit() {
            self.raised_nofile = true;
        }
        Ok(())
    }

    /// Open task `tid`'s event on every CPU: the first of a CPU owns its ring, the others write into it.
    fn observe(&mut self, tid: Tid, who: Who) -> Result<(), Stop> {
        for ci in 0..self.cpus.len() {
            let cpu = self.cpus[ci];
            let Some(fd) = self.open_one(tid, cpu, who, self.sampled[ci])? else {
                return Ok(()); // the task exited meanwhile
            };
            let ring = match self.owner[ci] {
                Some(o) => {
                    event::set_output(fd.as_fd(), self.fds[o].as_fd())
                        .map_err(|e| refusal(e, who, "redirecting an event into its CPU's ring"))?;
                    self.ring_of[o]
                }
                None => {
                    let ring = match Ring::map(
                        fd.as_fd(),
                        self.pages,
                        SampleLayout {
                            tid: true,
                            user_ip: false,
                            cpu: false,
                        },
                    ) {
                        Ok(ring) => ring,
                        Err(errno @ (Errno::EPERM | Errno::ENOMEM)) => {
                            return Err(Stop::Shrink(errno));
                        }
                        Err(errno) => {
                            return Err(Stop::Fail(shortage(errno, "mapping a sampler's ring")));
                        }
                    };
                    self.rings.push(ring);
                    self.ring_cpus.push(cpu);
                    self.owner[ci] = Some(self.fds.len());
                    self.rings.len() - 1
                }
            };
            self.fds.push(fd);
            self.ring_of.push(ring);
        }
        Ok(())
    }

    /// Open one event (`sampled`: the sampler's event, else its side-band carrier); `None` when the task is
    /// gone (ESRCH).
    fn open_one(
        &mut self,
        tid: Tid,
        cpu: usize,
        who: Who,
        sampled: bool,
    ) -> Result<Option<OwnedFd>, Error> {
        let mut interrupted = 0;
        loop {
            let params = if sampled {
                self.params
            } else {
                self.params.sideband_only()
            };
            let opened = match &self.cgroup {
                Some(dir) => open_sampler_cgroup_event(&params, dir, cpu),
                None => open_sampler_event(&params, tid, Some(cpu)),
            };
            match opened {
                Ok(fd) => return Ok(Some(fd)),
                Err(Errno::ESRCH) if tid != Tid::ALL_TASKS => return Ok(None),
                Err(Errno::EINTR) if interrupted < 3 => interrupted += 1,
                Err(Errno::EMFILE) if !self.raised_nofile && sys::raise_nofile_limit() => {
                    self.raised_nofile = true;
                }
                // A kernel before 6.0 has no PERF_FORMAT_LOST: count lost records from Lost records only.
                Err(Errno::EINVAL) if self.params.read_lost => self.params.read_lost = false,
                Err(errno) => return Err(refusal(errno, who, "opening a perf event")),
            }
        }
    }
}

/// The threads of a target now, sorted (empty when the process is gone).
pub(super) fn threads(target: &Target) -> Result<Vec<Tid>, Error> {
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

/// The error of a refused system call while opening events for another process `pid`, or for this one.
pub(super) fn refused(errno: Errno, pid: Option<u32>, doing: &str) -> Error {
    refusal(errno, pid.map_or(Who::Current, Who::Other), doing)
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
            Who::Cgroup => Error::new(
                NtStatus::PRIVILEGE_NOT_HELD,
                format!(
                    "the kernel refused the cgroup's processor-wide events ({text}; kernel.perf_event_paranoid \
                     is {}): run with CAP_PERFMON (or CAP_SYS_ADMIN), or lower the sysctl to 0",
                    perf_event_paranoid()
                ),
            ),
            Who::Current | Who::Global | Who::Filtered => Error::new(
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
        Errno::EBADF if matches!(who, Who::Cgroup) => Error::new(
            NtStatus::NOT_SUPPORTED,
            format!(
                "the kernel does not take the directory as a cgroup while {doing} ({text}): name a directory \
                 of the cgroup v2 file system (the perf_event controller, implicit in v2)"
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
