//! The layout of a sampler's events, chosen at its build from the budgets and the privilege: one event per
//! thread and processor (`thread-cpu`), one event per thread with a ring of its own (`per-thread`), or one per
//! processor for every task with only the targets' records delivered (`cpu-filtered`), or one per processor for a
//! global sampler (`cpu`).

use super::open::{self, DESCRIPTORS_TO_SPARE, Opener, Target};
use crate::engine::mode::{
    Budget, EventMode, THREAD_CPU_PREFERRED_UP_TO, forced_mode, per_thread_ring_target,
};
use crate::error::Error;
use crate::perf::ring::page_size;
use crate::perf::sys::Tid;
use crate::status::NtStatus;
use crate::target::perf_event_paranoid;

/// A sampler's layout: the mode, and for `per-thread` the data pages of each thread's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) mode: EventMode,
    pub(super) pages: usize,
}

impl From<EventMode> for Layout {
    fn from(mode: EventMode) -> Layout {
        Layout { mode, pages: 0 }
    }
}

/// The layout of the events: one per processor for every task for a global sampler (`cpu`); for processes,
/// when one event per thread and processor would need more than [`THREAD_CPU_PREFERRED_UP_TO`] descriptors or
/// more than the hard limit leaves, one per processor for every task with only the targets' records delivered
/// (`cpu-filtered`) when the caller may observe every task, else one per thread with a ring of its own
/// (`per-thread`) where that takes fewer descriptors (more than two processors) and the rings fit the locked
/// memory; otherwise one per thread and processor (`thread-cpu`). `NTPROFILE_EVENTS=thread-cpu`, `per-thread`
/// or `cpu-filtered` forces one (a forced `cpu-filtered` without the privilege fails, and so does a forced
/// `per-thread` whose smallest rings do not fit the locked memory).
pub(super) fn choose_layout(
    opener: &Opener,
    global: bool,
    targets: &[Target],
    own: &[Tid],
) -> Result<Layout, Error> {
    if global {
        return Ok(EventMode::Cpu.into());
    }
    let budget = Budget::now();
    let forced = forced_mode();
    match forced {
        Some(EventMode::ThreadCpu) => return Ok(EventMode::ThreadCpu.into()),
        Some(EventMode::CpuFiltered) if budget.privileged => {
            return Ok(EventMode::CpuFiltered.into());
        }
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
    let per_thread = per_thread_pages(opener, threads, &budget);
    if forced == Some(EventMode::PerThread) {
        return match per_thread {
            Some(pages) => Ok(Layout {
                mode: EventMode::PerThread,
                pages,
            }),
            None => Err(no_room_for_rings(opener, threads, &budget)),
        };
    }
    if need <= THREAD_CPU_PREFERRED_UP_TO
        && budget.open + need + DESCRIPTORS_TO_SPARE <= budget.hard
    {
        return Ok(EventMode::ThreadCpu.into());
    }
    if !budget.privileged {
        // Per thread its sampling event and, for a thread of the start, its counter.
        let fewer = threads.saturating_mul(2) < need;
        let fit = budget.open + threads.saturating_mul(2) + DESCRIPTORS_TO_SPARE + threads / 8
            <= budget.hard;
        return Ok(match per_thread {
            Some(pages) if fewer && fit => Layout {
                mode: EventMode::PerThread,
                pages,
            },
            // Where nothing better fits: the opening fails at once if even the hard limit is too small.
            _ => EventMode::ThreadCpu.into(),
        });
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
    Ok(EventMode::CpuFiltered.into())
}

/// Data pages of each of `threads` per-thread rings: the sampler's ring size, halved while the rings take more
/// than the share of the locked memory one stream or sampler takes by choice (half of it, 32 MiB at most), down
/// to the smallest ring that holds two of the largest samples; that smallest size where the whole budget holds
/// it; `None` where it does not.
fn per_thread_pages(opener: &Opener, threads: u64, budget: &Budget) -> Option<usize> {
    let bytes = |pages: usize| threads.saturating_mul((pages as u64 + 1) * page_size() as u64);
    let target = per_thread_ring_target(budget);
    let mut pages = opener.pages;
    while pages > opener.min_pages() && bytes(pages) > target {
        pages /= 2;
    }
    let pages = pages.max(opener.min_pages());
    (bytes(pages) <= target || bytes(pages) <= budget.locked.unwrap_or(u64::MAX)).then_some(pages)
}

/// The error of a forced `per-thread` layout whose smallest rings do not fit the locked memory.
fn no_room_for_rings(opener: &Opener, threads: u64, budget: &Budget) -> Error {
    let kib = (opener.min_pages() + 1) * page_size() / 1024;
    Error::new(
        NtStatus::INSUFFICIENT_RESOURCES,
        format!(
            "NTPROFILE_EVENTS forces per-thread: {threads} rings of {kib} KiB (the least that holds two of the \
             largest samples) need {} KiB of locked memory, and this process may lock {} KiB \
             (kernel.perf_event_mlock_kb {} × {} CPUs + RLIMIT_MEMLOCK {} KiB, less {} KiB pinned): raise \
             RLIMIT_MEMLOCK (ulimit -l) or kernel.perf_event_mlock_kb, record a smaller user stack or call \
             chain, or unset NTPROFILE_EVENTS",
            threads * kib as u64,
            budget.locked.unwrap_or(u64::MAX) / 1024,
            budget.mlock_kb,
            budget.online,
            budget.memlock / 1024,
            budget.pinned_kib
        ),
    )
}
