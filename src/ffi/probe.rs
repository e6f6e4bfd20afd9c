//! Pointer probes for the exports: a pointer from C is never dereferenced before it is known to be mapped with
//! the right access in this process. Writes and reads of small out-values go through `process_vm_writev(2)` /
//! `process_vm_readv(2)` on our own process, which fail with EFAULT instead of faulting; the counter buffer is
//! checked against `/proc/self/maps`.
//!
//! # Safety
//! The one direct write (`write_direct`) happens only after `/proc/self/maps` showed the whole destination
//! mapped writable; it is the fallback for systems where `process_vm_writev` is filtered out.

use std::io::{IoSlice, IoSliceMut};

use nix::sys::uio::{RemoteIoVec, process_vm_readv, process_vm_writev};
use nix::unistd::Pid;

use crate::status::NtStatus;

fn me() -> Pid {
    Pid::this()
}

/// True when `[addr, addr + len)` lies entirely in mappings with write permission (per `/proc/self/maps`).
///
/// # Errors
/// `STATUS_INSUFFICIENT_RESOURCES` (or the mapping of the errno) when `/proc/self/maps` cannot be read — no
/// free descriptor, no memory: a shortage of this process, never a verdict on the caller's pointer.
pub(crate) fn is_writable(addr: usize, len: usize) -> Result<bool, NtStatus> {
    range_has(addr, len, b'w')
}

/// True when `[addr, addr + len)` lies entirely in mappings with read permission (errors as [`is_writable`]).
pub(crate) fn is_readable(addr: usize, len: usize) -> Result<bool, NtStatus> {
    range_has(addr, len, b'r')
}

/// Check that `[addr, addr + len)` is writable: `STATUS_ACCESS_VIOLATION` if not, the shortage's status when
/// that cannot be told now.
pub(crate) fn check_writable(addr: usize, len: usize) -> Result<(), NtStatus> {
    if is_writable(addr, len)? {
        Ok(())
    } else {
        Err(NtStatus::ACCESS_VIOLATION)
    }
}

fn range_has(addr: usize, len: usize, perm: u8) -> Result<bool, NtStatus> {
    if addr == 0 {
        return Ok(false);
    }
    let Some(end) = addr.checked_add(len) else {
        return Ok(false);
    };
    if len == 0 {
        return Ok(true);
    }
    let maps = read_maps()?;
    let mut cursor = addr;
    // Mappings are listed in address order: walk them, extending the covered prefix.
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi <= cursor {
            continue;
        }
        if lo > cursor || !perms.as_bytes().contains(&perm) {
            return Ok(false);
        }
        cursor = hi;
        if cursor >= end {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `/proc/self/maps`, read again on an interrupted call.
fn read_maps() -> Result<String, NtStatus> {
    let mut attempts = 0;
    loop {
        match std::fs::read_to_string("/proc/self/maps") {
            Ok(text) => return Ok(text),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && attempts < 3 => attempts += 1,
            // EMFILE, ENFILE, ENOMEM: STATUS_INSUFFICIENT_RESOURCES; anything else is ours, not the caller's.
            Err(e) => {
                return Err(match NtStatus::from_io(&e) {
                    NtStatus::ACCESS_VIOLATION | NtStatus::INVALID_PARAMETER => {
                        NtStatus::INTERNAL_ERROR
                    }
                    other => other,
                });
            }
        }
    }
}

/// Write `bytes` at `addr` in this process, or `STATUS_ACCESS_VIOLATION` when that memory is not writable. All
/// or nothing: a destination that crosses a page boundary is probed whole first (read, and the same bytes
/// written back), because the kernel copies page by page and would otherwise leave the pages before a fault
/// written.
pub(crate) fn write_bytes(addr: usize, bytes: &[u8]) -> Result<(), NtStatus> {
    if addr == 0 || addr.checked_add(bytes.len()).is_none() {
        return Err(NtStatus::ACCESS_VIOLATION);
    }
    if crosses_page(addr, bytes.len()) {
        probe_write(addr, bytes.len())?;
    }
    write_once(addr, bytes)
}

/// True when `[addr, addr + len)` touches more than one page (the smallest page: 4 KiB).
fn crosses_page(addr: usize, len: usize) -> bool {
    len > 1 && addr / 4096 != (addr + len - 1) / 4096
}

fn write_once(addr: usize, bytes: &[u8]) -> Result<(), NtStatus> {
    let local = [IoSlice::new(bytes)];
    let remote = [RemoteIoVec {
        base: addr,
        len: bytes.len(),
    }];
    match process_vm_writev(me(), &local, &remote) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) | Err(nix::errno::Errno::EFAULT) => Err(NtStatus::ACCESS_VIOLATION),
        // Filtered (seccomp) or missing: check the maps, then write directly.
        Err(_) => {
            check_writable(addr, bytes.len())?;
            write_direct(addr, bytes);
            Ok(())
        }
    }
}

#[allow(unsafe_code)]
fn write_direct(addr: usize, bytes: &[u8]) {
    // SAFETY: `/proc/self/maps` showed [addr, addr + len) mapped writable (checked by the caller); the
    // destination is caller memory we were asked to write, byte-wise, with no alignment assumption.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// Read `out.len()` bytes at `addr` in this process, or `STATUS_ACCESS_VIOLATION` when not readable.
pub(crate) fn read_bytes(addr: usize, out: &mut [u8]) -> Result<(), NtStatus> {
    if addr == 0 || addr.checked_add(out.len()).is_none() {
        return Err(NtStatus::ACCESS_VIOLATION);
    }
    let len = out.len();
    let remote = [RemoteIoVec { base: addr, len }];
    let mut local = [IoSliceMut::new(out)];
    match process_vm_readv(me(), &mut local, &remote) {
        Ok(n) if n == len => Ok(()),
        Ok(_) | Err(nix::errno::Errno::EFAULT) => Err(NtStatus::ACCESS_VIOLATION),
        Err(_) => {
            if !is_readable(addr, len)? {
                return Err(NtStatus::ACCESS_VIOLATION);
            }
            read_direct(addr, out);
            Ok(())
        }
    }
}

#[allow(unsafe_code)]
fn read_direct(addr: usize, out: &mut [u8]) {
    // SAFETY: `/proc/self/maps` showed [addr, addr + len) mapped readable (checked by the caller).
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
}

/// NT's `ProbeForWrite` of an out-value: read it and write the same bytes back (no visible change), or
/// `STATUS_ACCESS_VIOLATION`. (A write-back that faults part-way has changed nothing: the bytes are the same.)
pub(crate) fn probe_write(addr: usize, len: usize) -> Result<(), NtStatus> {
    let mut small = [0u8; 64];
    let mut large = Vec::new();
    let buf = match small.get_mut(..len) {
        Some(buf) => buf,
        None => {
            large
                .try_reserve_exact(len)
                .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
            large.resize(len, 0);
            &mut large[..]
        }
    };
    read_bytes(addr, buf)?;
    write_once(addr, buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes() {
        let mut x: u64 = 7;
        let addr = &mut x as *mut u64 as usize;
        assert_eq!(is_writable(addr, 8), Ok(true));
        assert_eq!(probe_write(addr, 8), Ok(()));
        write_bytes(addr, &9u64.to_ne_bytes()).unwrap();
        assert_eq!(x, 9);
        assert_eq!(write_bytes(0, &[0]), Err(NtStatus::ACCESS_VIOLATION));
        assert_eq!(write_bytes(8, &[0]), Err(NtStatus::ACCESS_VIOLATION));
        assert_eq!(is_writable(usize::MAX - 4, 8), Ok(false));
        // Code is mapped read-only + exec.
        let code = probes as *const () as usize;
        assert_eq!(is_writable(code, 4), Ok(false));
        assert_eq!(is_readable(code, 4), Ok(true));
        assert_eq!(write_bytes(code, &[0]), Err(NtStatus::ACCESS_VIOLATION));
    }
}
