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
