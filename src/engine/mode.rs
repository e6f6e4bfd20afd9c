//! How a stream lays out its perf events, chosen at each start from the budgets of the process: descriptors
//! (`RLIMIT_NOFILE`, soft raised to hard when needed) and locked ring memory (`kernel.perf_event_mlock_kb` per
//! online CPU plus `RLIMIT_MEMLOCK`, or CAP_IPC_LOCK), and the failure that names the limit to raise when no
//! layout fits.
//!
//! - [`EventMode::ThreadCpu`]: one event per (thread × processor) with `inherit`, one ring per processor
//!   (`PERF_EVENT_IOC_SET_OUTPUT`): `threads × cpus` descriptors, `cpus` rings.
//! - [`EventMode::PerThread`]: per thread, one sampling event on any processor without `inherit`, owning a small
//!   ring, and for each thread of the start one counting event with `inherit`; threads created later get their
//!   sampling event from the helper thread when their fork record is read: `3 × threads` descriptors at the start
//!   (two more per thread created later: the sampling event and a `dummy` event for its fork and exit records), `threads` small rings; each sample carries its processor, and the
//!   consumer applies the affinity from it.
//! - [`EventMode::CpuFiltered`]: one event per processor for every task, of which only the target's samples are
//!   counted (each sample carries its process and thread): `cpus` descriptors and rings, however many threads.
//!   It needs the privilege to observe every process (CAP_PERFMON, CAP_SYS_ADMIN, or
//!   `kernel.perf_event_paranoid` 0 or less), and the consumer reads (and drops) the samples of every other
//!   task of those processors.
//! - [`EventMode::Cpu`]: a global stream, one event per processor for every task.
//! - [`EventMode::Cgroup`]: a sampler of a cgroup: one event per processor for the tasks of that cgroup (and of
//!   the cgroups below it), filtered by the kernel (`PERF_FLAG_PID_CGROUP`); privileged as a global stream.

use std::cell::RefCell;

use crate::perf::proc;
use crate::perf::ring::page_size;
use crate::perf::sys;
use crate::target::{has_capability, perf_event_paranoid};

/// `CAP_IPC_LOCK`: ring memory is not limited.
const CAP_IPC_LOCK: u32 = 14;
/// Data pages of a per-thread ring, most to fewest: the largest that fits half the locked-memory budget is
/// taken (the other half stays for other streams and samplers), else one page if the whole budget holds it.
const PER_THREAD_PAGES: [usize; 7] = [64, 32, 16, 8, 4, 2, 1];
/// The most ring memory per-thread rings of one stream take by choice: smaller rings beyond it (one data page at
/// the least, whatever the count).
const UNLIMITED_TARGET: u64 = 32 << 20;
/// Descriptors kept free beyond a stream's own: threads created during the start, and the process's own needs.
const SPARE_DESCRIPTORS: u64 = 32;
/// `CAP_SYS_ADMIN` and `CAP_PERFMON`: either lets a process open per-processor events for every task.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
/// With the privilege, processor-wide filtered events are preferred once (thread × processor) events would need
/// more descriptors than this (the usual soft `RLIMIT_NOFILE`): below it those cost little and sample only the
/// target, above it they grow with threads × processors (descriptors, kernel memory, start time) while the
/// processor-wide set stays at one per processor.
pub(crate) const THREAD_CPU_PREFERRED_UP_TO: u64 = 1024;

/// How a stream's events are laid out (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventMode {
    /// One event per (thread × processor), one ring per processor.
    ThreadCpu,
    /// Per thread a sampling event with a small ring of its own, on any processor (the affinity applied from each
    /// sample's CPU), and an event for its fork and exit records; an inherited counter per thread of the start.
    /// Threads created later get their events as they appear; what they ran before is counted as lost.
    PerThread,
    /// One event per processor for every task (a global profile).
    Cpu,
    /// One event per processor for every task, only the target's samples counted (privileged).
    CpuFiltered,
    /// One event per processor for the tasks of one cgroup, the kernel's filter (a sampler of a cgroup,
    /// privileged).
    Cgroup,
}

impl EventMode {
    /// The mode's name as the docs, `ntprof` and `NTPROFILE_EVENTS` spell it.
    pub fn name(self) -> &'static str {
        match self {
            EventMode::ThreadCpu => "thread-cpu",
            EventMode::PerThread => "per-thread",
            EventMode::Cpu => "cpu",
            EventMode::CpuFiltered => "cpu-filtered",
            EventMode::Cgroup => "cgroup",
        }
    }

    /// The number the C API reports (`NTPROFILE_EVENTS_*`).
    pub fn code(self) -> u32 {
        match self {
            EventMode::ThreadCpu => 1,
            EventMode::PerThread => 2,
            EventMode::Cpu => 3,
            EventMode::CpuFiltered => 4,
            EventMode::Cgroup => 5,
        }
    }
}

/// The perf events behind a started profile (its stream, shared with the other started profiles of the same
/// source and process): how they are laid out, how many descriptors and rings they hold, the bytes of ring
/// memory mapped, and the threads observed directly (threads created later are observed through inheritance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventUsage {
    /// The layout.
    pub mode: EventMode,
    /// Event descriptors held.
    pub descriptors: usize,
    /// Rings mapped.
    pub rings: usize,
    /// Bytes of the rings' mappings (locked memory).
    pub ring_bytes: usize,
    /// Threads whose events were opened directly at the start.
    pub threads: usize,
}

/// The mode the environment forces (`NTPROFILE_EVENTS=per-thread`, `thread-cpu` or `cpu-filtered`), read at
/// each start; `None` (also for `auto` or anything else): chosen from the budgets and the privilege.
pub(crate) fn forced_mode() -> Option<EventMode> {
    match std::env::var("NTPROFILE_EVENTS").ok()?.as_str() {
        "per-thread" => Some(EventMode::PerThread),
        "thread-cpu" => Some(EventMode::ThreadCpu),
        "cpu-filtered" => Some(EventMode::CpuFiltered),
        _ => None,
    }
}

/// What the process may use now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// The soft `RLIMIT_NOFILE`.
    pub(crate) soft: u64,
    /// The hard `RLIMIT_NOFILE`.
    pub(crate) hard: u64,
    /// Descriptors open now.
    pub(crate) open: u64,
    /// Bytes of ring memory the process may still lock (`None`: unlimited, CAP_IPC_LOCK).
    pub(crate) locked: Option<u64>,
    /// The parts of `locked`, for the message.
    pub(crate) mlock_kb: u64,
    pub(crate) memlock: u64,
    pub(crate) pinned_kib: u64,
    pub(crate) online: u64,
    /// The process may open per-processor events for every task (CAP_PERFMON, CAP_SYS_ADMIN, or
    /// `kernel.perf_event_paranoid` 0 or less).
    pub(crate) privileged: bool,
}

impl Budget {
    /// The budget now.
    pub(crate) fn now() -> Budget {
        let (soft, hard) = sys::nofile_limits();
        let open = proc::open_descriptors().unwrap_or(0);
        let online = crate::affinity::online_cpus().len() as u64;
        let mlock_kb = proc::perf_event_mlock_kb().unwrap_or(516);
        let memlock = sys::memlock_limit();
        let pinned_kib = proc::pinned_kib();
        let unlimited =
            has_capability(CAP_IPC_LOCK) || perf_event_paranoid() < 0 || memlock == u64::MAX;
        let locked = (!unlimited).then(|| {
            (mlock_kb * 1024 * online)
                .saturating_add(memlock)
                .saturating_sub(pinned_kib * 1024)
        });
        let privileged = perf_event_paranoid() <= 0
            || has_capability(CAP_PERFMON)
            || has_capability(CAP_SYS_ADMIN);
        Budget {
            soft,
            hard,
            open,
            locked,
            mlock_kb,
            memlock,
            pinned_kib,
            online,
            privileged,
        }
    }

    /// A budget for the tests of the choices: soft limit 1,024 with 10 descriptors open, `mlock_kb` 516 and
    /// `RLIMIT_MEMLOCK` 8 MiB, nothing pinned.
    #[cfg(test)]
    pub(crate) fn for_tests(
        hard: u64,
        locked: Option<u64>,
        online: u64,
        privileged: bool,
    ) -> Budget {
        Budget {
            soft: 1024,
            hard,
            open: 10,
            locked,
            mlock_kb: 516,
            memlock: 8 << 20,
            pinned_kib: 0,
            online,
            privileged,
        }
    }

    /// Descriptors the process may still open once the soft limit is raised to the hard one.
    fn free_descriptors(&self) -> u64 {
        self.hard.saturating_sub(self.open)
    }
}

/// A layout that fits: the mode, and for per-thread rings their data pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) mode: EventMode,
    pub(crate) pages: usize,
}

/// Descriptors a mode needs for `threads` threads on `cpus` processors.
pub(crate) fn descriptors(mode: EventMode, threads: u64, cpus: u64) -> u64 {
    match mode {
        EventMode::ThreadCpu => threads.saturating_mul(cpus),
        // Its sampling event, its task-record event, and the inherited counter of a thread of the start.
        EventMode::PerThread => threads.saturating_mul(3),
        EventMode::Cpu | EventMode::CpuFiltered | EventMode::Cgroup => cpus,
    }
}

/// The ring memory per-thread rings of one stream take by choice: half the locked-memory budget (the other half
/// stays for other streams and samplers), and without a limit (CAP_IPC_LOCK) still [`UNLIMITED_TARGET`].
pub(crate) fn per_thread_ring_target(budget: &Budget) -> u64 {
    (budget.locked.unwrap_or(u64::MAX) / 2).min(UNLIMITED_TARGET)
}

/// Data pages of each of `threads` per-thread rings within `target` bytes: the largest size that fits, one page
/// at the least (a thread created later whose ring does not fit even so is not sampled, and what it runs is
/// counted as lost).
pub(crate) fn per_thread_pages_within(threads: u64, target: u64) -> usize {
    *PER_THREAD_PAGES
        .iter()
        .find(|&&p| per_thread_bytes(threads, p) <= target)
        .unwrap_or(&1)
}

/// Locked bytes of `threads` per-thread rings of `pages` data pages (each with its metadata page).
pub(crate) fn per_thread_bytes(threads: u64, pages: usize) -> u64 {
    threads.saturating_mul((pages as u64 + 1) * page_size() as u64)
}

/// The layout for `threads` threads on `cpus` processors under `budget` (`forced`: that mode or none). With the
/// privilege to observe every process, processor-wide filtered events (descriptors and rings by processors
/// alone) once (thread × processor) events would need more than [`THREAD_CPU_PREFERRED_UP_TO`] descriptors;
/// otherwise (thread × processor) events where the hard descriptor limit holds them, then processor-wide
/// filtered events (privileged), then per-thread events where their rings fit the locked memory.
///
/// # Errors
/// When no layout fits: a sentence with what was needed and the limits, naming the limit to raise.
pub(crate) fn choose(
    threads: u64,
    cpus: u64,
    forced: Option<EventMode>,
    budget: &Budget,
) -> Result<Plan, String> {
    let spare = SPARE_DESCRIPTORS + threads / 8;
    let free = budget.free_descriptors();
    let per_thread = || -> Option<Plan> {
        if descriptors(EventMode::PerThread, threads, cpus) + spare > free {
            return None;
        }
        let locked = budget.locked.unwrap_or(u64::MAX);
        let pages = *PER_THREAD_PAGES
            .iter()
            .find(|&&p| per_thread_bytes(threads, p) <= per_thread_ring_target(budget))
            .or_else(|| {
                PER_THREAD_PAGES
                    .last()
                    .filter(|&&p| per_thread_bytes(threads, p) <= locked)
            })?;
        Some(Plan {
            mode: EventMode::PerThread,
            pages,
        })
    };
    let thread_cpu = || -> Option<Plan> {
        (descriptors(EventMode::ThreadCpu, threads, cpus) + spare <= free).then_some(Plan {
            mode: EventMode::ThreadCpu,
            pages: 0,
        })
    };
    // Its rings are thread-cpu's (one per processor, shrunk to the locked memory when mapped).
    let cpu_filtered = || -> Option<Plan> {
        // No descriptor per thread: threads created during the start need none to spare.
        (budget.privileged
            && descriptors(EventMode::CpuFiltered, threads, cpus) + SPARE_DESCRIPTORS <= free)
            .then_some(Plan {
                mode: EventMode::CpuFiltered,
                pages: 0,
            })
    };
    let found = match forced {
        Some(EventMode::PerThread) => per_thread(),
        Some(EventMode::CpuFiltered) => cpu_filtered(),
        Some(_) => thread_cpu(),
        // Past the usual soft limit, the layout whose descriptors do not grow with threads × processors: with
        // the privilege, one event per processor; without it, per-thread events, where they take fewer
        // descriptors than (thread × processor) ones (more than two processors).
        None if descriptors(EventMode::ThreadCpu, threads, cpus) > THREAD_CPU_PREFERRED_UP_TO => {
            cpu_filtered()
                .or_else(|| {
                    (descriptors(EventMode::PerThread, threads, cpus)
                        < descriptors(EventMode::ThreadCpu, threads, cpus))
                    .then(per_thread)
                    .flatten()
                })
                .or_else(thread_cpu)
                .or_else(per_thread)
        }
        // Below it, (thread × processor) events wherever the descriptors allow them: few, and a thread created
        // later is observed from its first instruction (per-thread events observe it from the moment the helper
        // thread opens its event; what it ran before is counted as lost).
        None => thread_cpu().or_else(cpu_filtered).or_else(per_thread),
    };
    found.ok_or_else(|| shortfall(threads, cpus, forced, budget))
}

/// The sentence of a start that no layout fits.
fn shortfall(threads: u64, cpus: u64, forced: Option<EventMode>, b: &Budget) -> String {
    let spare = SPARE_DESCRIPTORS + threads / 8;
    let tc = descriptors(EventMode::ThreadCpu, threads, cpus);
    let pt = descriptors(EventMode::PerThread, threads, cpus);
    let ring_kib = per_thread_bytes(threads, 1) / 1024;
    let locked = match b.locked {
        None => "unlimited (CAP_IPC_LOCK)".to_string(),
        Some(l) => format!(
            "{} KiB (kernel.perf_event_mlock_kb {} × {} CPUs + RLIMIT_MEMLOCK {} KiB, less {} KiB pinned)",
            l / 1024,
            b.mlock_kb,
            b.online,
            b.memlock / 1024,
            b.pinned_kib
        ),
    };
    let memlock = if b.locked.is_some() {
        ", or raise RLIMIT_MEMLOCK (ulimit -l) or kernel.perf_event_mlock_kb so that per-thread rings fit"
    } else {
        ""
    };
    if forced == Some(EventMode::CpuFiltered) && !b.privileged {
        return format!(
            "NTPROFILE_EVENTS forces cpu-filtered, which opens one event per processor for every task: this \
             process lacks the privilege (CAP_PERFMON or CAP_SYS_ADMIN, or kernel.perf_event_paranoid 0 or \
             less, is {}); unset NTPROFILE_EVENTS or grant the capability",
            perf_event_paranoid()
        );
    }
    // The fewest descriptors a layout that may be chosen needs, with its spare.
    let least = match forced {
        Some(EventMode::ThreadCpu) => tc + spare,
        Some(EventMode::PerThread) => pt + spare,
        Some(_) => cpus + SPARE_DESCRIPTORS,
        None if b.privileged => cpus + SPARE_DESCRIPTORS,
        None => pt.min(tc) + spare,
    };
    let forced = forced.map_or(String::new(), |m| {
        format!(" (NTPROFILE_EVENTS forces {})", m.name())
    });
    let need_fds = b.open + least;
    let fix = if need_fds > b.hard {
        format!(
            "raise the hard RLIMIT_NOFILE (ulimit -Hn, systemd LimitNOFILE=) to at least {need_fds}{memlock}"
        )
    } else {
        format!(
            "the descriptors fit, the rings do not: raise RLIMIT_MEMLOCK (ulimit -l) by at least {} KiB or \
             kernel.perf_event_mlock_kb, or let the layout be chosen (thread-cpu needs one ring per processor)",
            ring_kib.saturating_sub(b.locked.unwrap_or(0) / 1024)
        )
    };
    let filtered = if b.privileged {
        format!(" or {cpus} descriptors (cpu-filtered: one event per processor)")
    } else {
        String::new()
    };
    format!(
        "profiling {threads} threads on {cpus} processors{forced} needs {tc} descriptors (thread-cpu: one event \
         per thread and processor) or {pt} descriptors and {ring_kib} KiB of locked ring memory (per-thread)\
         {filtered}, and about {spare} to spare; this process has {} open, RLIMIT_NOFILE {}/{} (soft/hard), \
         locked memory {locked}: {fix}",
        b.open, b.soft, b.hard,
    )
}

thread_local! {
    /// Why the last start on this thread found no resources (taken by the error's detail).
    static SHORTFALL: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Remember why a start on this thread failed for want of resources.
pub(crate) fn set_shortfall(text: String) {
    SHORTFALL.with(|s| *s.borrow_mut() = Some(text));
}

/// Why the last start on this thread failed for want of resources, once.
pub fn take_shortfall() -> Option<String> {
    SHORTFALL.with(|s| s.borrow_mut().take())
}

#[cfg(test)]
mod tests;
