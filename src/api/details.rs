//! The Rust API's error details: a lower layer returns the bare status of the check that failed; these name the
//! argument or the check from what the API knows (its arguments, the machine's state). They sit with the API,
//! above the engine, because the sentences read the engine's limits and the machine's state; the [`Error`] type
//! itself is pure and lives below (`src/error.rs`).

use crate::affinity::CpuSet;
use crate::error::Error;
use crate::source::ProfileSource;
use crate::status::NtStatus;
use crate::target::{Target, perf_event_paranoid};

/// CPU numbers as a short list (`0-3,6`).
fn cpu_list(set: &CpuSet) -> String {
    let cpus: Vec<usize> = set.iter().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j == i {
            out.push_str(&cpus[i].to_string());
        } else {
            out.push_str(&format!("{}-{}", cpus[i], cpus[j]));
        }
        i = j + 1;
    }
    if out.is_empty() { "none".into() } else { out }
}

/// Why a source is not supported here: `source TotalCycles (0x13) is not supported here: ...`.
fn unsupported_source(source: ProfileSource) -> String {
    format!(
        "source {} ({:#x}) is not supported here: {}",
        source.name(),
        source.to_raw(),
        source.support().reason()
    )
}

/// A failed front check of `NtCreateProfile` (buffer, bucket size, range, source) for the builder's arguments.
pub(crate) fn create_front(
    status: NtStatus,
    base: u64,
    size: u64,
    bucket_size: u32,
    buffer_size: u32,
    source: ProfileSource,
) -> Error {
    let detail = match status {
        NtStatus::INVALID_PARAMETER_7 => "BufferSize is 0".to_string(),
        NtStatus::INVALID_PARAMETER => format!(
            "BucketSize {bucket_size} is outside {}..={}",
            crate::buckets::MIN_BUCKET_SIZE,
            crate::buckets::MAX_BUCKET_SIZE
        ),
        NtStatus::BUFFER_TOO_SMALL => format!(
            "BufferSize {buffer_size} holds fewer than the {} counters that ProfileSize {size:#x} needs in \
             {}-byte buckets",
            crate::buckets::counters_needed(size, bucket_size),
            1u64 << bucket_size.min(63)
        ),
        NtStatus::BUFFER_OVERFLOW => format!(
            "ProfileSize {size:#x} at base {base:#x} wraps past the top of the address space"
        ),
        NtStatus::NOT_SUPPORTED => unsupported_source(source),
        NtStatus::PRIVILEGE_NOT_HELD => format!(
            "source {} ({:#x}) is sampled in the kernel (where the thread blocks or moves), and this caller may \
             not sample the kernel: run with CAP_PERFMON or CAP_SYS_ADMIN, or set kernel.perf_event_paranoid to \
             1 or less (it is {})",
            source.name(),
            source.to_raw(),
            perf_event_paranoid()
        ),
        other => return Error::from(other),
    };
    Error::new(status, detail)
}

/// The counters of a range do not fit a `ULONG` `BufferSize`, or cannot be allocated.
pub(crate) fn counters(status: NtStatus, needed: u64, fits_ulong: bool) -> Error {
    let detail = if fits_ulong {
        format!(
            "cannot allocate the {needed} counters ({} bytes) the range needs",
            needed * 4
        )
    } else {
        format!(
            "the range needs {needed} counters ({} bytes), more than a ULONG BufferSize can describe (4 GiB - 1); \
             use a larger BucketSize",
            u128::from(needed) * 4
        )
    };
    Error::new(status, detail)
}

/// A `KAFFINITY` that names no online processor of the group.
pub(crate) fn affinity_mask(status: NtStatus, mask: u64, group: usize, online: &CpuSet) -> Error {
    Error::new(
        status,
        format!(
            "Affinity {mask:#x} names no online processor of group {group} (online CPUs: {})",
            cpu_list(online)
        ),
    )
}

/// A CPU set that is empty or names an offline CPU.
pub(crate) fn cpus(set: &CpuSet, online: &CpuSet) -> Error {
    let detail = match set.iter().find(|cpu| !online.contains(*cpu)) {
        _ if set.is_empty() => "the CPU set is empty".to_string(),
        Some(cpu) => format!(
            "CPU {cpu} is not online (online CPUs: {})",
            cpu_list(online)
        ),
        None => format!("CPUs {} are not all online", cpu_list(set)),
    };
    Error::new(NtStatus::INVALID_PARAMETER, detail)
}

/// Whose samples a profile counts, for a sentence.
fn whom(target: &Target) -> String {
    match target {
        Target::CurrentProcess => "this process".to_string(),
        Target::Global => "every process".to_string(),
        other => format!("process {}", other.pid()),
    }
}

/// A failed `NtStartProfile`.
pub(crate) fn start(status: NtStatus, source: ProfileSource, target: &Target) -> Error {
    let detail = match status {
        NtStatus::PROFILING_NOT_STOPPED => "the profile is already started".to_string(),
        NtStatus::PROFILING_AT_LIMIT => format!(
            "{} profiles are started, the limit of 8192 per online processor",
            crate::engine::started_limit()
        ),
        NtStatus::INSUFFICIENT_RESOURCES => match crate::engine::mode::take_shortfall() {
            Some(why) => format!(
                "starting a profile of {} ran out of file descriptors or locked ring memory: {why}",
                whom(target)
            ),
            None => {
                let nofile =
                    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                        .map(|(soft, hard)| format!("RLIMIT_NOFILE {soft}/{hard}"))
                        .unwrap_or_else(|_| "RLIMIT_NOFILE unknown".to_string());
                format!(
                    "starting a profile of {} ran out of file descriptors ({nofile}: raise the hard limit, ulimit \
                     -Hn) or of locked memory for the rings (RLIMIT_MEMLOCK, ulimit -l, or \
                     kernel.perf_event_mlock_kb)",
                    whom(target)
                )
            }
        },
        NtStatus::NOT_SUPPORTED => unsupported_source(source),
        NtStatus::PRIVILEGE_NOT_HELD => format!(
            "perf_event_open refused to sample {} with source {}: it needs CAP_PERFMON, CAP_SYS_ADMIN or a \
             lower kernel.perf_event_paranoid (it is {})",
            whom(target),
            source.name(),
            perf_event_paranoid()
        ),
        NtStatus::ACCESS_DENIED => format!(
            "this process may not profile {} (the ptrace access check of perf_event_open, or CAP_PERFMON)",
            whom(target)
        ),
        NtStatus::INVALID_HANDLE => format!(
            "{} was opened by another process: a process handle does not survive fork()",
            whom(target)
        ),
        other => return Error::from(other),
    };
    Error::new(status, detail)
}

/// A failed `NtStopProfile`.
pub(crate) fn stop(status: NtStatus) -> Error {
    match status {
        NtStatus::PROFILING_NOT_STARTED => Error::new(status, "the profile is not started"),
        other => Error::from(other),
    }
}

/// A failed `NtprofileSetSourceJitter`.
pub(crate) fn jitter(status: NtStatus, source: ProfileSource, percent: u32) -> Error {
    match status {
        NtStatus::INVALID_PARAMETER => Error::new(
            status,
            format!("jitter {percent} % is above the maximum of 90 %"),
        ),
        NtStatus::NOT_SUPPORTED => Error::new(status, unsupported_source(source)),
        other => Error::from(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_short() {
        assert_eq!(cpu_list(&CpuSet::from_cpus([0, 1, 2, 3, 6])), "0-3,6");
        assert_eq!(cpu_list(&CpuSet::from_cpus([5])), "5");
        assert_eq!(cpu_list(&CpuSet::new()), "none");
    }
}
