//! The kernel's files that stand in for system calls: `/proc` (thread lists, memory maps, capabilities,
//! perf sysctls) and `/sys` (online CPUs). Each function returns the kernel's raw answer; the layers above
//! parse and interpret it.

use nix::errno::Errno;

use super::sys::Tid;

/// The ids of process `pid`'s threads now (`None`: this process), sorted.
///
/// # Errors
/// The errno of the listing: ENOENT/ESRCH when the process is gone, EMFILE/ENFILE/ENOMEM when a descriptor or
/// memory is short (the layers above must not take a shortage for a dead process). A listing that fails
/// part-way is an error, never a partial list.
pub fn thread_ids(pid: Option<i32>) -> Result<Vec<Tid>, Errno> {
    let dir = match pid {
        None => "/proc/self/task".to_string(),
        Some(pid) => format!("/proc/{pid}/task"),
    };
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let mut tids = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(errno)? {
        if let Some(tid) = entry
            .map_err(errno)?
            .file_name()
            .to_str()
            .and_then(|n| n.parse().ok())
        {
            tids.push(Tid(tid));
        }
    }
    tids.sort_unstable();
    Ok(tids)
}

/// The child processes of process `pid` now: what `/proc/PID/task/TID/children` lists for each of its threads
/// (`CONFIG_PROC_CHILDREN`), or, where the kernel has no such file, every process whose `/proc/PID/stat` names
/// `pid` as its parent. Empty when `pid` is gone.
pub fn child_processes(pid: u32) -> Vec<u32> {
    let Ok(tids) = thread_ids(Some(pid as i32)) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for tid in tids {
        match std::fs::read_to_string(format!("/proc/{pid}/task/{}/children", tid.0)) {
            Ok(text) => children.extend(
                text.split_ascii_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && thread_dir_exists(pid, tid) => {
                return children_by_stat(pid);
            }
            Err(_) => {}
        }
    }
    children.sort_unstable();
    children.dedup();
    children
}

/// Whether `/proc/PID/task/TID` exists (the thread lives, so a missing file of it is the kernel's lack).
fn thread_dir_exists(pid: u32, tid: Tid) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{}", tid.0)).exists()
}

/// Every process whose `/proc/PID/stat` names `parent` as its parent (the fourth field, after the command name
/// in parentheses, which may itself hold spaces and parentheses).
fn children_by_stat(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_ascii_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            children.push(pid);
        }
    }
    children.sort_unstable();
    children
}

/// True while thread `tid` of this process still exists (`/proc/self/task/<tid>`).
pub fn own_thread_exists(tid: Tid) -> bool {
    std::fs::metadata(format!("/proc/self/task/{tid}")).is_ok()
}

/// This process's memory map (`/proc/self/maps`), read again on EINTR.
///
/// # Errors
/// The errno of the read (EMFILE, ENFILE, ENOMEM: a shortage, not an answer about any address).
pub fn own_maps() -> Result<String, Errno> {
    let mut attempts = 0;
    loop {
        match std::fs::read_to_string("/proc/self/maps") {
            Ok(text) => return Ok(text),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && attempts < 3 => attempts += 1,
            Err(e) => return Err(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }
}

/// `/proc/self/maps` opened for `PROCMAP_QUERY` (`sys::query_vma`).
///
/// # Errors
/// The errno of the open (EMFILE, ENFILE, ENOMEM: a shortage).
pub fn own_maps_file() -> Result<std::fs::File, Errno> {
    std::fs::File::open("/proc/self/maps")
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
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

/// `kernel.perf_event_max_stack` now (the most call-chain entries a sample may ask for), or `None` when
/// unreadable.
pub fn perf_event_max_stack() -> Option<u32> {
    read_number("/proc/sys/kernel/perf_event_max_stack")
}

/// `kernel.perf_event_mlock_kb` now (KiB of ring memory each user may lock per online CPU), or `None`.
pub fn perf_event_mlock_kb() -> Option<u64> {
    read_number("/proc/sys/kernel/perf_event_mlock_kb")
}

/// How many descriptors this process has open now (the entries of `/proc/self/fd`, less the one the listing
/// itself uses), or `None` when the listing cannot be read.
pub fn open_descriptors() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

/// KiB of this process's memory pinned now (`VmPin` of `/proc/self/status`: perf rings beyond the per-user
/// allowance are charged there), 0 when unreadable.
pub fn pinned_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmPin:"))?;
            line.trim_start_matches("VmPin:")
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child of this process is listed by the children files and by the scan of `/proc/*/stat` alike.
    #[test]
    fn a_child_process_is_found_both_ways() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let me = std::process::id();
        let pid = child.id();
        assert!(child_processes(me).contains(&pid));
        assert!(children_by_stat(me).contains(&pid));
        assert!(child_processes(pid).is_empty());
        let _ = child.kill();
        let _ = child.wait();
        assert!(!child_processes(me).contains(&pid));
        assert!(child_processes(u32::MAX).is_empty());
    }
}
