//! The C export of the blocked-thread reading: `NtprofileReadBlockedThread`, over
//! [`read_blocked_thread`], with the `NTPROFILE_BLOCKED_THREAD` record of
//! `include/ntprofile.h` (declared here, with a test of its layout).
//!
//! The panic boundary and the pointer probes before any access: the record is written out through `probe`, the
//! stack is copied into a buffer of ours first and then out through `probe` (never read from the caller's).
//!
//! # Safety
//! `#[unsafe(no_mangle)]` on the export (a unique name, declared with the same signature in the header).
#![allow(unsafe_code)]

use super::boundary::boundary;
use super::probe;
use crate::sampler::read_blocked_thread;
use crate::status::NtStatus;

/// `NTPROFILE_BLOCKED_IN_SYSCALL`: the thread waits in system call `Syscall`.
pub const BLOCKED_IN_SYSCALL: u32 = 0x1;
/// `NTPROFILE_BLOCKED_RUNNING`: the thread was running (or ran during the reading): nothing else is valid.
pub const BLOCKED_RUNNING: u32 = 0x2;
/// The largest stack copy one call makes (larger buffers get this many bytes).
const MAX_STACK: u32 = 1 << 20;

/// `NTPROFILE_BLOCKED_THREAD` (88 bytes), as the header declares it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockedThreadInfo {
    /// `NTPROFILE_BLOCKED_*`.
    pub flags: u32,
    /// 0.
    pub reserved: u32,
    /// The system call's number, with `NTPROFILE_BLOCKED_IN_SYSCALL`.
    pub syscall: u64,
    /// Its six arguments.
    pub arguments: [u64; 6],
    /// The user instruction pointer at the kernel entry.
    pub user_ip: u64,
    /// The user stack pointer: the address of the stack copy's first byte.
    pub user_sp: u64,
    /// Bytes written to the stack buffer.
    pub stack_size: u32,
    /// 0.
    pub reserved2: u32,
}

/// `NtprofileReadBlockedThread` — where thread `Tid` of process `Pid` waits: its system call, user ip and sp,
/// and up to `StackBufferSize` bytes of its user stack from sp into `StackBuffer`; `NTPROFILE_BLOCKED_RUNNING`
/// when it runs.
#[unsafe(no_mangle)]
pub extern "C" fn NtprofileReadBlockedThread(
    pid: u32,
    tid: u32,
    stack_buffer: *mut u8,
    stack_buffer_size: u32,
    info: *mut BlockedThreadInfo,
) -> i32 {
    boundary(|| {
        let addr = info as usize;
        if addr == 0 {
            return Err(NtStatus::ACCESS_VIOLATION);
        }
        if addr % std::mem::align_of::<BlockedThreadInfo>() != 0 {
            return Err(NtStatus::DATATYPE_MISALIGNMENT);
        }
        probe::probe_write(addr, std::mem::size_of::<BlockedThreadInfo>())?;
        let stack_addr = stack_buffer as usize;
        let size = stack_buffer_size.min(MAX_STACK) as usize;
        if stack_addr == 0 && stack_buffer_size != 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        if size > 0 {
            probe::probe_write(stack_addr, size)?;
        }
        let mut stack = vec![0u8; size];
        let read = read_blocked_thread(pid, tid, &mut stack).map_err(|e| e.status())?;
        let out = match read {
            None => BlockedThreadInfo {
                flags: BLOCKED_RUNNING,
                ..BlockedThreadInfo::default()
            },
            Some(b) => BlockedThreadInfo {
                flags: if b.syscall.is_some() {
                    BLOCKED_IN_SYSCALL
                } else {
                    0
                },
                syscall: b.syscall.unwrap_or(0),
                arguments: b.args,
                user_ip: b.regs.ip,
                user_sp: b.regs.sp,
                stack_size: b.stack_len as u32,
                ..BlockedThreadInfo::default()
            },
        };
        if out.stack_size > 0 {
            probe::write_bytes(stack_addr, &stack[..out.stack_size as usize])?;
        }
        let mut bytes = Vec::with_capacity(std::mem::size_of::<BlockedThreadInfo>());
        bytes.extend_from_slice(&out.flags.to_ne_bytes());
        bytes.extend_from_slice(&out.reserved.to_ne_bytes());
        bytes.extend_from_slice(&out.syscall.to_ne_bytes());
        for a in out.arguments {
            bytes.extend_from_slice(&a.to_ne_bytes());
        }
        bytes.extend_from_slice(&out.user_ip.to_ne_bytes());
        bytes.extend_from_slice(&out.user_sp.to_ne_bytes());
        bytes.extend_from_slice(&out.stack_size.to_ne_bytes());
        bytes.extend_from_slice(&out.reserved2.to_ne_bytes());
        probe::write_bytes(addr, &bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_layout_matches_the_header() {
        assert_eq!(size_of::<BlockedThreadInfo>(), 88);
        assert_eq!(offset_of!(BlockedThreadInfo, syscall), 8);
        assert_eq!(offset_of!(BlockedThreadInfo, user_ip), 64);
        assert_eq!(offset_of!(BlockedThreadInfo, stack_size), 80);
    }

    #[test]
    fn bad_pointers_and_a_gone_thread_are_refused() {
        let mut info = BlockedThreadInfo::default();
        assert_eq!(
            NtprofileReadBlockedThread(1, 1, std::ptr::null_mut(), 0, std::ptr::null_mut()),
            NtStatus::ACCESS_VIOLATION.0
        );
        assert_eq!(
            NtprofileReadBlockedThread(1, 1, std::ptr::null_mut(), 16, &mut info),
            NtStatus::INVALID_PARAMETER.0
        );
        let misaligned = (std::ptr::addr_of_mut!(info) as usize + 1) as *mut BlockedThreadInfo;
        assert_eq!(
            NtprofileReadBlockedThread(1, 1, std::ptr::null_mut(), 0, misaligned),
            NtStatus::DATATYPE_MISALIGNMENT.0
        );
        let mut stack = [0u8; 64];
        assert_eq!(
            NtprofileReadBlockedThread(
                i32::MAX as u32,
                i32::MAX as u32,
                stack.as_mut_ptr(),
                64,
                &mut info
            ),
            NtStatus::INVALID_CID.0
        );
    }

    #[test]
    fn a_sleeping_child_is_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut info = BlockedThreadInfo::default();
        let mut stack = vec![0u8; 4096];
        let st =
            NtprofileReadBlockedThread(child.id(), child.id(), stack.as_mut_ptr(), 4096, &mut info);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(st, 0);
        assert_eq!(info.flags, BLOCKED_IN_SYSCALL, "{info:?}");
        assert!(info.user_sp != 0 && info.stack_size > 0, "{info:?}");
    }
}
