//! The layout of a sampler's events, chosen at its build from the budgets and the privilege: one event per
//! thread and processor (`thread-cpu`), or one per processor for every task with only the targets' records
//! delivered (`cpu-filtered`), or one per processor for a global sampler (`cpu`).

use super::open::{self, DESCRIPTORS_TO_SPARE, Opener, Target};
use crate::engine::mode::{Budget, EventMode, THREAD_CPU_PREFERRED_UP_TO, forced_mode};
use crate::error::Error;
use crate::perf::sys::Tid;
use crate::status::NtStatus;
use crate::target::perf_event_paranoid;

/// The layout of the events: one per processor for every task for a global sampler (`cpu`); for processes,
/// one per processor for every task with only the targets' records delivered (`cpu-filtered`) when the
/// caller may observe every task and one event per thread and processor would need more than
/// [`THREAD_CPU_PREFERRED_UP_TO`] descriptors or more than the hard limit leaves, else one per thread and
/// processor (`thread-cpu`). `NTPROFILE_EVENTS=thread-cpu` or `cpu-filtered` forces one of the two (a
/// forced `cpu-filtered` without the privilege fails); `per-thread` is a layout of profiles only, and a
/// sampler chooses as without it.
pub(super) fn choose_layout(
    opener: &Opener,
    global: bool,
    targets: &[Target],
    own: &[Tid],
) -> Result<EventMode, Error> {
    if global {
        return Ok(EventMode::Cpu);
    }
    let budget = Budget::now();
    match forced_mode() {
        Some(EventMode::ThreadCpu) => return Ok(EventMode::ThreadCpu),
        Some(EventMode::CpuFiltered) if budget.privileged => return Ok(EventMode::CpuFiltered),
        Some(EventMode::CpuFiltered) => {
            return Err(Error::new(
                NtStatus::PRIVILEGE_NOT_HELD,
                format!(
                    "NTPROFILE_EVENTS forces cpu-filtered, which opens one event per processor for every \
                     task: this process lacks the privilege (CAP_PERFMON or CAP_SYS_ADMIN, or \
                     kernel.perf_event_paranoid 0 or less, is {}); unset NTPROFILE_EVENTS or grant the \
                     capability",
                    perf_event_paranoid()
                ),
            ));
        }
        _ => {}
    }
    if !budget.privileged {
        return Ok(EventMode::ThreadCpu);
    }
    let mut threads = 0u64;
    for target in targets {
        let scan = open::threads(target)?;
        let skip = match target {
            Target::Current => scan.iter().filter(|t| own.contains(t)).count(),
            Target::Process(_) => 0,
        };
        threads += (scan.len() - skip) as u64;
    }
    let cpus = opener.ring_cpu_count() as u64;
    let need = threads.saturating_mul(cpus);
    if need <= THREAD_CPU_PREFERRED_UP_TO
        && budget.open + need + DESCRIPTORS_TO_SPARE <= budget.hard
    {
        return Ok(EventMode::ThreadCpu);
    }
    if budget.open + cpus + DESCRIPTORS_TO_SPARE > budget.hard {
        return Err(Error::new(
            NtStatus::INSUFFICIENT_RESOURCES,
            format!(
                "sampling {threads} threads on {cpus} processors needs {cpus} descriptors (cpu-filtered: one \
                 event per processor) or {need} (thread-cpu: one per thread and processor), and {} to \
                 spare, beside the {} open; RLIMIT_NOFILE is {}/{} (soft/hard): raise the hard limit \
                 (ulimit -Hn, systemd LimitNOFILE=) to at least {}",
                DESCRIPTORS_TO_SPARE,
                budget.open,
                budget.soft,
                budget.hard,
                budget.open + cpus + DESCRIPTORS_TO_SPARE
            ),
        ));
    }
    Ok(EventMode::CpuFiltered)
}
