//! The sampler extension's C types, as `include/ntprofile.h` declares them: the flags, the record types, the
//! `#[repr(C)]` configuration, record and statistics (with tests of their layouts), the record routine's type;
//! reading a configuration from the caller's memory and writing a decoded record in the header's layout.
//!
//! Every type is public as `ntprofile::ffi::sampler::NAME`; the exports that use them are in `sampler`.

use std::ffi::{c_char, c_void};

use super::probe;
use crate::sampler::{Sample, SampleRecord};
use crate::status::NtStatus;

/// `NTPROFILE_SAMPLER_INHERIT`: follow the processes the targets create.
pub const SAMPLER_INHERIT: u32 = 0x1;
/// `NTPROFILE_SAMPLER_GLOBAL`: every process (`ProcessCount` must be 0).
pub const SAMPLER_GLOBAL: u32 = 0x2;
/// `NTPROFILE_SAMPLER_KERNEL`: kernel samples too.
pub const SAMPLER_KERNEL: u32 = 0x4;
/// `NTPROFILE_SAMPLER_SIDEBAND`: Mmap, Comm, Fork and Exit records.
pub const SAMPLER_SIDEBAND: u32 = 0x8;
/// `NTPROFILE_SAMPLER_SWITCH`: Switch records at each context switch of a target thread.
pub const SAMPLER_SWITCH: u32 = 0x10;
pub(super) const KNOWN_FLAGS: u32 =
    SAMPLER_INHERIT | SAMPLER_GLOBAL | SAMPLER_KERNEL | SAMPLER_SIDEBAND | SAMPLER_SWITCH;

/// `NtprofileRecordSample` .. `NtprofileRecordUnthrottle` (`NTPROFILE_RECORD_TYPE`).
pub mod record_type {
    /// A sample.
    pub const SAMPLE: u32 = 1;
    /// An executable mapping.
    pub const MMAP: u32 = 2;
    /// A command-name change (exec).
    pub const COMM: u32 = 3;
    /// A new thread or process.
    pub const FORK: u32 = 4;
    /// A thread's exit.
    pub const EXIT: u32 = 5;
    /// Records the kernel dropped.
    pub const LOST: u32 = 6;
    /// Sampling throttled.
    pub const THROTTLE: u32 = 7;
    /// Sampling resumed.
    pub const UNTHROTTLE: u32 = 8;
    /// A thread switched off or onto a CPU.
    pub const SWITCH: u32 = 9;
}

/// `NTPROFILE_RECORD_KERNEL`: a sample's ip is in the kernel.
pub const RECORD_KERNEL: u32 = 0x1;
/// `NTPROFILE_RECORD_EXEC`: a Comm record caused by an exec.
pub const RECORD_EXEC: u32 = 0x2;
/// `NTPROFILE_RECORD_HAS_REGS`: a sample carries the user registers (`UserIp`, `UserSp`, `UserBp`).
pub const RECORD_HAS_REGS: u32 = 0x4;
/// `NTPROFILE_RECORD_SWITCH_OUT`: a Switch record of a thread leaving the CPU (else one arriving).
pub const RECORD_SWITCH_OUT: u32 = 0x8;
/// `NTPROFILE_RECORD_PREEMPT`: a switch-out of a thread that was still runnable (preempted).
pub const RECORD_PREEMPT: u32 = 0x10;

/// `NTPROFILE_SAMPLER_CONFIG` (56 bytes on LP64), as the header declares it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SamplerConfig {
    /// `sizeof(NTPROFILE_SAMPLER_CONFIG)`.
    pub size: u32,
    /// `NTPROFILE_SAMPLER_*`.
    pub flags: u32,
    /// `KPROFILE_SOURCE`.
    pub source: u32,
    /// 0: the source's current interval.
    pub interval: u32,
    /// Number of pids at `process_ids`; 0 without GLOBAL: the current process.
    pub process_count: u32,
    /// Must be 0.
    pub reserved0: u32,
    /// Linux pids.
    pub process_ids: *const u32,
    /// Processors of group 0; 0: every online processor.
    pub affinity: usize,
    /// 0: no call chain.
    pub max_callchain: u16,
    /// Must be 0.
    pub reserved1: u16,
    /// 0: no user-stack copy.
    pub user_stack_size: u32,
    /// 0: the default.
    pub ring_pages: u32,
    /// Must be 0.
    pub reserved2: u32,
}

/// `NTPROFILE_RECORD` (136 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NtprofileRecord {
    /// `NTPROFILE_RECORD_TYPE`.
    pub type_: u32,
    /// `NTPROFILE_RECORD_KERNEL`, `_EXEC`, `_HAS_REGS`.
    pub flags: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Fork/Exit: the parent's process id.
    pub parent_pid: u32,
    /// Fork/Exit: the parent's thread id.
    pub parent_tid: u32,
    /// Sample: the CPU.
    pub cpu: u32,
    /// 0.
    pub reserved: u32,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub time: u64,
    /// Sample: ip; Mmap: start.
    pub address: u64,
    /// Mmap: length; Lost: records lost.
    pub length: u64,
    /// Mmap: file offset.
    pub offset: u64,
    /// Mmap: `PROT_*`.
    pub protection: u32,
    /// Mmap: `MAP_*`.
    pub map_flags: u32,
    /// Entries at `callchain`.
    pub callchain_count: u32,
    /// Bytes at `stack`.
    pub stack_size: u32,
    /// The raw call chain, with `PERF_CONTEXT_*` markers (NULL when empty).
    pub callchain: *const u64,
    /// User registers (with `NTPROFILE_RECORD_HAS_REGS`).
    pub user_ip: u64,
    /// User stack pointer: the address of `stack[0]`.
    pub user_sp: u64,
    /// User frame pointer.
    pub user_bp: u64,
    /// The user-stack copy (NULL when empty).
    pub stack: *const u8,
    /// Comm: the command; Mmap: the file name; NUL-terminated (NULL for other records).
    pub name: *const c_char,
    /// Bytes of `name` before its NUL.
    pub name_length: u32,
    /// 0.
    pub reserved2: u32,
}

impl NtprofileRecord {
    /// Every field 0, every pointer NULL.
    const EMPTY: NtprofileRecord = NtprofileRecord {
        type_: 0,
        flags: 0,
        pid: 0,
        tid: 0,
        parent_pid: 0,
        parent_tid: 0,
        cpu: 0,
        reserved: 0,
        time: 0,
        address: 0,
        length: 0,
        offset: 0,
        protection: 0,
        map_flags: 0,
        callchain_count: 0,
        stack_size: 0,
        callchain: std::ptr::null(),
        user_ip: 0,
        user_sp: 0,
        user_bp: 0,
        stack: std::ptr::null(),
        name: std::ptr::null(),
        name_length: 0,
        reserved2: 0,
    };
}

/// `NTPROFILE_SAMPLER_STATISTICS` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStatistics {
    /// Records delivered.
    pub records: u64,
    /// Samples delivered.
    pub samples: u64,
    /// Records the kernel dropped.
    pub lost: u64,
    /// Throttle records.
    pub throttled: u64,
    /// Unthrottle records.
    pub unthrottled: u64,
    /// 1 when every target exited.
    pub targets_exited: u32,
    /// The layout of its events (`NTPROFILE_EVENTS_*`).
    pub event_mode: u32,
}

/// `PNTPROFILE_RECORD_ROUTINE`.
pub type RecordRoutine =
    Option<extern "C" fn(record: *const NtprofileRecord, context: *mut c_void)>;

/// Read the configuration the caller passed (copied in through the probes).
pub(super) fn read_config(config: usize) -> Result<SamplerConfig, NtStatus> {
    if config == 0 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    if config % std::mem::align_of::<SamplerConfig>() != 0 {
        return Err(NtStatus::DATATYPE_MISALIGNMENT);
    }
    // The whole structure is read before `Size` is looked at: a `Config` that is readable only in part is
    // unreadable (`STATUS_ACCESS_VIOLATION`), whatever its `Size` field says.
    let mut bytes = [0u8; std::mem::size_of::<SamplerConfig>()];
    probe::read_bytes(config, &mut bytes)?;
    if u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize
        != std::mem::size_of::<SamplerConfig>()
    {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let u16_at = |o: usize| u16::from_ne_bytes([bytes[o], bytes[o + 1]]);
    let u32_at =
        |o: usize| u32::from_ne_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let usize_at = |o: usize| {
        let mut w = [0u8; std::mem::size_of::<usize>()];
        let n = w.len();
        w.copy_from_slice(&bytes[o..o + n]);
        usize::from_ne_bytes(w)
    };
    use std::mem::offset_of;
    Ok(SamplerConfig {
        size: u32_at(offset_of!(SamplerConfig, size)),
        flags: u32_at(offset_of!(SamplerConfig, flags)),
        source: u32_at(offset_of!(SamplerConfig, source)),
        interval: u32_at(offset_of!(SamplerConfig, interval)),
        process_count: u32_at(offset_of!(SamplerConfig, process_count)),
        reserved0: u32_at(offset_of!(SamplerConfig, reserved0)),
        process_ids: std::ptr::without_provenance(usize_at(offset_of!(SamplerConfig, process_ids))),
        affinity: usize_at(offset_of!(SamplerConfig, affinity)),
        max_callchain: u16_at(offset_of!(SamplerConfig, max_callchain)),
        reserved1: u16_at(offset_of!(SamplerConfig, reserved1)),
        user_stack_size: u32_at(offset_of!(SamplerConfig, user_stack_size)),
        ring_pages: u32_at(offset_of!(SamplerConfig, ring_pages)),
        reserved2: u32_at(offset_of!(SamplerConfig, reserved2)),
    })
}

/// A record in the header's layout, its pointers into the ring (or into `name`, for the NUL-terminated names).
pub(super) fn c_record(record: &SampleRecord<'_>, name: &mut Vec<u8>) -> NtprofileRecord {
    let mut r = NtprofileRecord::EMPTY;
    match record {
        SampleRecord::Sample(s) => sample_fields(&mut r, s),
        SampleRecord::Mmap(m) => {
            r.type_ = record_type::MMAP;
            (r.pid, r.tid, r.time) = (m.pid, m.tid, m.time);
            (r.address, r.length, r.offset) = (m.addr, m.len, m.pgoff);
            (r.protection, r.map_flags) = (m.prot, m.flags);
            set_name(&mut r, name, m.filename);
        }
        SampleRecord::Comm {
            pid,
            tid,
            time,
            comm,
            exec,
        } => {
            r.type_ = record_type::COMM;
            (r.pid, r.tid, r.time) = (*pid, *tid, *time);
            if *exec {
                r.flags |= RECORD_EXEC;
            }
            set_name(&mut r, name, comm);
        }
        SampleRecord::Fork {
            pid,
            ppid,
            tid,
            ptid,
            time,
        }
        | SampleRecord::Exit {
            pid,
            ppid,
            tid,
            ptid,
            time,
        } => {
            r.type_ = if matches!(record, SampleRecord::Fork { .. }) {
                record_type::FORK
            } else {
                record_type::EXIT
            };
            (r.pid, r.tid, r.parent_pid, r.parent_tid, r.time) = (*pid, *tid, *ppid, *ptid, *time);
        }
        SampleRecord::Lost { lost, time } => {
            r.type_ = record_type::LOST;
            (r.length, r.time) = (*lost, *time);
        }
        SampleRecord::Switch {
            pid,
            tid,
            time,
            cpu,
            out,
            preempt,
        } => {
            r.type_ = record_type::SWITCH;
            (r.pid, r.tid, r.time, r.cpu) = (*pid, *tid, *time, *cpu);
            if *out {
                r.flags |= RECORD_SWITCH_OUT;
            }
            if *preempt {
                r.flags |= RECORD_PREEMPT;
            }
        }
        SampleRecord::Throttle { time, throttled } => {
            r.type_ = if *throttled {
                record_type::THROTTLE
            } else {
                record_type::UNTHROTTLE
            };
            r.time = *time;
        }
    }
    r
}

/// A sample's fields; its call chain and stack copy point into the ring.
fn sample_fields(r: &mut NtprofileRecord, s: &Sample<'_>) {
    r.type_ = record_type::SAMPLE;
    (r.pid, r.tid, r.time, r.cpu, r.address) = (s.pid, s.tid, s.time, s.cpu, s.ip);
    if s.kernel {
        r.flags |= RECORD_KERNEL;
    }
    if !s.callchain.is_empty() {
        r.callchain = s.callchain.as_ptr();
        r.callchain_count = s.callchain.len() as u32;
    }
    if let Some(regs) = s.regs {
        r.flags |= RECORD_HAS_REGS;
        (r.user_ip, r.user_sp, r.user_bp) = (regs.ip, regs.sp, regs.bp);
    }
    if !s.stack.is_empty() {
        r.stack = s.stack.as_ptr();
        r.stack_size = s.stack.len() as u32;
    }
}

/// Point `r.name` at `bytes` copied into `name` with a NUL.
fn set_name(r: &mut NtprofileRecord, name: &mut Vec<u8>, bytes: &[u8]) {
    name.clear();
    name.extend_from_slice(bytes);
    name.push(0);
    r.name = name.as_ptr().cast();
    r.name_length = bytes.len() as u32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The layouts the header asserts.
    #[test]
    fn layouts_match_the_header() {
        assert_eq!(size_of::<SamplerConfig>(), 56);
        assert_eq!(offset_of!(SamplerConfig, process_ids), 24);
        assert_eq!(offset_of!(SamplerConfig, affinity), 32);
        assert_eq!(offset_of!(SamplerConfig, max_callchain), 40);
        assert_eq!(offset_of!(SamplerConfig, user_stack_size), 44);
        assert_eq!(offset_of!(SamplerConfig, ring_pages), 48);
        assert_eq!(size_of::<NtprofileRecord>(), 136);
        assert_eq!(offset_of!(NtprofileRecord, time), 32);
        assert_eq!(offset_of!(NtprofileRecord, callchain), 80);
        assert_eq!(offset_of!(NtprofileRecord, stack), 112);
        assert_eq!(offset_of!(NtprofileRecord, name), 120);
        assert_eq!(offset_of!(NtprofileRecord, name_length), 128);
        assert_eq!(size_of::<SamplerStatistics>(), 48);
        assert_eq!(offset_of!(SamplerStatistics, targets_exited), 40);
    }
}
