//! The kernel's files that stand in for system calls: `/proc` (thread lists, memory maps, capabilities,
//! perf sysctls) and `/sys` (online CPUs). Each function returns the kernel's raw answer; the layers above
//! parse and interpret it.

use super::sys::Tid;

/// The ids of process `pid`'s threads now (`None`: this process), sorted, or `None` when the process is gone or
/// its task list cannot be read.
pub fn thread_ids(pid: Option<i32>) -> Option<Vec<Tid>> {
    let dir = match pid {
        None => "/proc/self/task".to_string(),
        Some(pid) => format!("/proc/{pid}/task"),
    };
    let entries = std::fs::read_dir(dir).ok()?;
    let mut tids: Vec<Tid> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok().map(Tid))
        .collect();
    tids.sort_unstable();
    Some(tids)
}

/// True while thread `tid` of this process still exists (`/proc/self/task/<tid>`).
pub fn own_thread_exists(tid: Tid) -> bool {
    std::fs::metadata(format!("/proc/self/task/{tid}")).is_ok()
}

/// This process's memory map (`/proc/self/maps`), or `None` when unreadable.
pub fn own_maps() -> Option<String> {
    std::fs::read_to_string("/proc/self/maps").ok()
}

/// The effective capability set of this process (`CapEff` of `/proc/self/status`), or 0 when unreadable.
pub fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
        })
        .unwrap_or(0)
}

/// `kernel.perf_event_paranoid` now, or `None` when unreadable.
pub fn perf_event_paranoid() -> Option<i32> {
    read_number("/proc/sys/kernel/perf_event_paranoid")
}

/// `kernel.perf_event_max_sample_rate` now, or `None` when unreadable.
pub fn perf_event_max_sample_rate() -> Option<u64> {
    read_number("/proc/sys/kernel/perf_event_max_sample_rate")
}

/// The kernel's list of online CPUs (`/sys/devices/system/cpu/online`, such as `0-3,8`), or `None`.
pub fn online_cpu_list() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/cpu/online").ok()
}

fn read_number<T: std::str::FromStr>(path: &str) -> Option<T> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}
