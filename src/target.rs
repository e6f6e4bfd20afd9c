//! Who is profiled: the current process (every thread, later threads included), and the thread enumeration
//! the engine re-scans until stable.

use crate::status::NtStatus;

/// The process a profile observes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `NtCurrentProcess()`: every thread of the calling process, those created later included (the library's
    /// own consumer thread excluded).
    CurrentProcess,
}

impl Target {
    /// The Linux pid behind the target.
    pub fn pid(&self) -> i32 {
        match self {
            Target::CurrentProcess => std::process::id() as i32,
        }
    }

    /// The ids of the target's threads now.
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` when the process is gone.
    pub fn threads(&self) -> Result<Vec<i32>, NtStatus> {
        let dir = match self {
            Target::CurrentProcess => "/proc/self/task".to_string(),
        };
        let entries = std::fs::read_dir(dir).map_err(|_| NtStatus::INVALID_HANDLE)?;
        let mut tids: Vec<i32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        tids.sort_unstable();
        Ok(tids)
    }
}

/// The kernel-address half of x86-64 (and the other 64-bit ports): a range reaching it samples the kernel.
pub const KERNEL_SPACE_START: u64 = 0xFFFF_8000_0000_0000;

/// `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON`.
const CAP_PERFMON: u32 = 38;

/// True when the calling process holds `cap` in its effective set (`/proc/self/status`, `CapEff`).
pub fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1u64 << cap) != 0)
}

/// `kernel.perf_event_paranoid` now (2 when unreadable: the kernel's default).
pub fn perf_event_paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The system-profile privilege of the mapping: CAP_PERFMON, CAP_SYS_ADMIN, or `perf_event_paranoid <= 0`.
pub fn has_system_profile_privilege() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN) || perf_event_paranoid() <= 0
}

/// May this process sample kernel addresses (`exclude_kernel = 0`)? CAP_PERFMON, CAP_SYS_ADMIN or paranoid ≤ 1.
pub fn may_sample_kernel() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN) || perf_event_paranoid() <= 1
}
