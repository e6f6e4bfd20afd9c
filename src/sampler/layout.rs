//! The layout of a sampler's events, chosen at its build from the budgets and the privilege: one event per
//! thread and processor (`thread-cpu`), one event per thread with a ring of its own (`per-thread`), or one per
//! processor for every task with only the targets' records delivered (`cpu-filtered`), or one per processor for a
//! global sampler (`cpu`).

use super::open::{self, DESCRIPTORS_TO_SPARE, Opener, Target};
use crate::engine::mode::{
    Budget, EventMode, THREAD_CPU_PREFERRED_UP_TO, forced_mode, per_thread_bytes,
    per_thread_ring_target,
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
    let per_thread = per_thread_pages(opener.pages, opener.min_pages(), threads, &budget);
    let min_ring_kib = ((opener.min_pages() + 1) * page_size() / 1024) as u64;
    pick(threads, cpus, forced, &budget, per_thread, min_ring_kib)
}

/// The layout for `threads` threads on `cpus` processors under `budget` (`forced`: `NTPROFILE_EVENTS`'s
/// per-thread, or none; `per_thread`: the data pages of per-thread rings where they fit the locked memory;
/// `min_ring_kib`: the smallest per-thread ring with its metadata page, for the message).
fn pick(
    threads: u64,
    cpus: u64,
    forced: Option<EventMode>,
    budget: &Budget,
    per_thread: Option<usize>,
    min_ring_kib: u64,
) -> Result<Layout, Error> {
    let need = threads.saturating_mul(cpus);
    // Per thread its sampling event and, for a thread of the start, its counter (and without side-band a
    // task-record event, which the spare covers only in part: the opening raises the soft limit as needed).
    let per_thread_need = threads.saturating_mul(2) + DESCRIPTORS_TO_SPARE + threads / 8;
    let fits = |n: u64| budget.open.saturating_add(n) <= budget.hard;
    let per_thread_layout = |pages| Layout {
        mode: EventMode::PerThread,
        pages,
    };
    if forced == Some(EventMode::PerThread) {
        return per_thread
            .map(per_thread_layout)
            .ok_or_else(|| no_room_for_rings(threads, min_ring_kib, budget));
    }
    if need <= THREAD_CPU_PREFERRED_UP_TO && fits(need + DESCRIPTORS_TO_SPARE) {
        return Ok(EventMode::ThreadCpu.into());
    }
    if !budget.privileged {
        return match per_thread {
            Some(pages) if threads.saturating_mul(2) < need && fits(per_thread_need) => {
                Ok(per_thread_layout(pages))
            }
            _ if fits(need + DESCRIPTORS_TO_SPARE) => Ok(EventMode::ThreadCpu.into()),
            _ => Err(nothing_fits(
                threads,
                cpus,
                budget,
                per_thread.is_some(),
                min_ring_kib,
            )),
        };
    }
    if !fits(cpus + DESCRIPTORS_TO_SPARE) {
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

/// The error of an unprivileged sampler that no layout fits: (thread × processor) events pass the hard
/// descriptor limit, and per-thread events pass it too or their rings do not fit the locked memory.
fn nothing_fits(
    threads: u64,
    cpus: u64,
    budget: &Budget,
    rings_fit: bool,
    min_ring_kib: u64,
) -> Error {
    let need = threads.saturating_mul(cpus);
    let per_thread = threads.saturating_mul(2) + DESCRIPTORS_TO_SPARE + threads / 8;
    let least = if rings_fit {
        per_thread.min(need + DESCRIPTORS_TO_SPARE)
    } else {
        need + DESCRIPTORS_TO_SPARE
    };
    let rings = if rings_fit {
        String::new()
    } else {
        format!(
            "; per-thread rings ({threads} of {min_ring_kib} KiB at the least) do not fit the {} KiB of locked \
             memory this process may use either: raise RLIMIT_MEMLOCK (ulimit -l) or \
             kernel.perf_event_mlock_kb for those",
            budget.locked.unwrap_or(u64::MAX) / 1024
        )
    };
    Error::new(
        NtStatus::INSUFFICIENT_RESOURCES,
        format!(
            "sampling {threads} threads on {cpus} processors needs {need} descriptors (thread-cpu: one event \
             per thread and processor) or about {per_thread} (per-thread: one per thread and a counter, with a \
             ring each), beside the {} open; RLIMIT_NOFILE is {}/{} (soft/hard): raise the hard limit \
             (ulimit -Hn, systemd LimitNOFILE=) to at least {}{rings}, or run with CAP_PERFMON (or \
             kernel.perf_event_paranoid 0 or less), with which the sampler opens one event per processor \
             (cpu-filtered)",
            budget.open,
            budget.soft,
            budget.hard,
            budget.open + least
        ),
    )
}

/// Data pages of each of `threads` per-thread rings: the sampler's ring size, halved while the rings take more
/// than the share of the locked memory one stream or sampler takes by choice (half of it, 32 MiB at most), down
/// to the smallest ring that holds two of the largest samples; that smallest size where the whole budget holds
/// it; `None` where it does not.
fn per_thread_pages(
    pages: usize,
    min_pages: usize,
    threads: u64,
    budget: &Budget,
) -> Option<usize> {
    let bytes = |pages: usize| per_thread_bytes(threads, pages);
    let target = per_thread_ring_target(budget);
    let mut pages = pages;
    while pages > min_pages && bytes(pages) > target {
        pages /= 2;
    }
    let pages = pages.max(min_pages);
    (bytes(pages) <= target || bytes(pages) <= budget.locked.unwrap_or(u64::MAX)).then_some(pages)
}

/// The error of a forced `per-thread` layout whose smallest rings do not fit the locked memory.
fn no_room_for_rings(threads: u64, min_ring_kib: u64, budget: &Budget) -> Error {
    Error::new(
        NtStatus::INSUFFICIENT_RESOURCES,
        format!(
            "NTPROFILE_EVENTS forces per-thread: {threads} rings of {min_ring_kib} KiB (the least that holds two \
             of the largest samples) need {} KiB of locked memory, and this process may lock {} KiB \
             (kernel.perf_event_mlock_kb {} × {} CPUs + RLIMIT_MEMLOCK {} KiB, less {} KiB pinned): raise \
             RLIMIT_MEMLOCK (ulimit -l) or kernel.perf_event_mlock_kb, record a smaller user stack or call \
             chain, or unset NTPROFILE_EVENTS",
            threads * min_ring_kib,
            budget.locked.unwrap_or(u64::MAX) / 1024,
            budget.mlock_kb,
            budget.online,
            budget.memlock / 1024,
            budget.pinned_kib
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(hard: u64, locked: Option<u64>, privileged: bool) -> Budget {
        Budget::for_tests(hard, locked, 96, privileged)
    }

    fn mode(threads: u64, cpus: u64, b: &Budget) -> Result<EventMode, Error> {
        let pages = per_thread_pages(128, 1, threads, b);
        pick(threads, cpus, None, b, pages, 8).map(|l| l.mode)
    }

    /// Unprivileged: (thread × processor) events while they stay under 1,024; past it per-thread events where
    /// they take fewer descriptors (more than two processors) and their rings fit; else (thread × processor)
    /// events up to the hard limit.
    #[test]
    fn unprivileged_per_thread_where_it_saves_descriptors_and_its_rings_fit() {
        let b = budget(20_000, Some(56 << 20), false);
        assert_eq!(mode(1000, 96, &b).unwrap(), EventMode::PerThread);
        assert_eq!(mode(10, 96, &b).unwrap(), EventMode::ThreadCpu);
        // Two processors: per-thread events save nothing.
        assert_eq!(mode(2000, 2, &b).unwrap(), EventMode::ThreadCpu);
        // 1,000 rings in half of 56 MiB: the rings shrink to fit (3 data pages do not make a power of two).
        assert_eq!(per_thread_pages(128, 1, 1000, &b), Some(4));
        // Rings that do not fit: (thread × processor) events where the hard limit holds them.
        let small = budget(200_000, Some(4 << 20), false);
        assert_eq!(per_thread_pages(128, 1, 1000, &small), None);
        assert_eq!(mode(1000, 96, &small).unwrap(), EventMode::ThreadCpu);
        // Nothing fits: the error names both limits.
        let e = mode(1000, 96, &budget(20_000, Some(4 << 20), false)).unwrap_err();
        assert_eq!(e.status(), NtStatus::INSUFFICIENT_RESOURCES);
        assert!(e.to_string().contains("ulimit -Hn"), "{e}");
        assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
        // (thread × processor) events past the hard limit, per-thread events within it.
        assert!(mode(1000, 2, &budget(1500, Some(56 << 20), false)).is_err());
        assert_eq!(
            mode(1000, 3, &budget(2500, Some(56 << 20), false)).unwrap(),
            EventMode::PerThread
        );
    }

    /// Privileged: one event per processor past 1,024; forced per-thread where its rings fit, and a message
    /// naming the locked memory where they do not.
    #[test]
    fn privileged_cpu_filtered_and_forced_per_thread() {
        let b = budget(20_000, None, true);
        assert_eq!(mode(1000, 96, &b).unwrap(), EventMode::CpuFiltered);
        assert_eq!(mode(5, 96, &b).unwrap(), EventMode::ThreadCpu);
        let forced = pick(1000, 96, Some(EventMode::PerThread), &b, Some(4), 8).unwrap();
        assert_eq!((forced.mode, forced.pages), (EventMode::PerThread, 4));
        let e = pick(1000, 96, Some(EventMode::PerThread), &b, None, 8).unwrap_err();
        assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
        // The hard limit does not hold even one event per processor.
        let e = mode(1000, 96, &budget(50, None, true)).unwrap_err();
        assert!(e.to_string().contains("ulimit -Hn"), "{e}");
    }
}
