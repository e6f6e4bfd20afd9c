//! Pointer probes for the exports: a pointer from C is never dereferenced before it is known to be mapped with
//! the right access in this process. Writes and reads of small out-values go through `process_vm_writev(2)` /
//! `process_vm_readv(2)` on our own process (`perf::sys`), which fail with EFAULT instead of faulting; the
//! counter buffer is checked against `/proc/self/maps`.
//!
//! # Safety
//! The direct copies (`perf::sys::write_own_memory_direct` / `read_own_memory_direct`) happen only after
//! `/proc/self/maps` showed the whole range mapped with the needed access; they are the fallback for systems
//! where `process_vm_writev` is filtered out.
#![allow(unsafe_code)]

use nix::errno::Errno;

use crate::perf::{proc, sys};
use crate::status::NtStatus;

/// True when `[addr, addr + len)` lies entirely in mappings with write permission (per `/proc/self/maps`).
pub(crate) fn is_writable(addr: usize, len: usize) -> bool {
    range_has(addr, len, b'w')
}

/// True when `[addr, addr + len)` lies entirely in mappings with read permission.
pub(crate) fn is_readable(addr: usize, len: usize) -> bool {
    range_has(addr, len, b'r')
}

fn range_has(addr: usize, len: usize, perm: u8) -> bool {
    if addr == 0 {
        return false;
    }
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    if len == 0 {
        return true;
    }
    let Some(maps) = proc::own_maps() else {
        return false;
    };
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
            return false;
        }
        cursor = hi;
        if cursor >= end {
            return true;
        }
    }
    false
}

/// Write `bytes` at `addr` in this process, or `STATUS_ACCESS_VIOLATION` when that memory is not writable.
pub(crate) fn write_bytes(addr: usize, bytes: &[u8]) -> Result<(), NtStatus> {
    if addr == 0 || addr.checked_add(bytes.len()).is_none() {
        return Err(NtStatus::ACCESS_VIOLATION);
    }
    match sys::write_own_memory(addr, bytes) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) | Err(Errno::EFAULT) => Err(NtStatus::ACCESS_VIOLATION),
        // Filtered (seccomp) or missing: check the maps, then write directly.
        Err(_) => {
            if is_writable(addr, bytes.len()) {
                // SAFETY: `/proc/self/maps` just showed [addr, addr + len) mapped writable; `bytes` is our own
                // memory, not the caller's destination.
                unsafe { sys::write_own_memory_direct(addr, bytes) };
                Ok(())
            } else {
                Err(NtStatus::ACCESS_VIOLATION)
            }
        }
    }
}

/// Read `out.len()` bytes at `addr` in this process, or `STATUS_ACCESS_VIOLATION` when not readable.
pub(crate) fn read_bytes(addr: usize, out: &mut [u8]) -> Result<(), NtStatus> {
    if addr == 0 || addr.checked_add(out.len()).is_none() {
        return Err(NtStatus::ACCESS_VIOLATION);
    }
    let len = out.len();
    match sys::read_own_memory(addr, out) {
        Ok(n) if n == len => Ok(()),
        Ok(_) | Err(Errno::EFAULT) => Err(NtStatus::ACCESS_VIOLATION),
        Err(_) => {
            if is_readable(addr, len) {
                // SAFETY: `/proc/self/maps` just showed [addr, addr + len) mapped readable; `out` is our own
                // buffer.
                unsafe { sys::read_own_memory_direct(addr, out) };
                Ok(())
            } else {
                Err(NtStatus::ACCESS_VIOLATION)
            }
        }
    }
}

/// Read a NUL-terminated string at `addr` (without its NUL), at most `max` bytes before the NUL. Reads go page
/// by page (4 KiB blocks never cross a page), so a string that ends just before unmapped memory is read whole.
///
/// # Errors
/// `STATUS_ACCESS_VIOLATION` when `addr` is NULL or the string runs into unreadable memory,
/// `STATUS_INVALID_PARAMETER` when no NUL comes within `max` bytes.
pub(crate) fn read_cstr(addr: usize, max: usize) -> Result<Vec<u8>, NtStatus> {
    const BLOCK: usize = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    loop {
        let chunk = (BLOCK - at % BLOCK).min(max + 1 - out.len());
        let mut buf = vec![0u8; chunk];
        read_bytes(at, &mut buf)?;
        if let Some(nul) = buf.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..nul]);
            return Ok(out);
        }
        out.extend_from_slice(&buf);
        if out.len() > max {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        at = at.checked_add(chunk).ok_or(NtStatus::ACCESS_VIOLATION)?;
    }
}

/// NT's `ProbeForWrite` of an out-value: read it and write the same bytes back (no visible change), or
/// `STATUS_ACCESS_VIOLATION`.
pub(crate) fn probe_write(addr: usize, len: usize) -> Result<(), NtStatus> {
    let mut buf = [0u8; 16];
    let buf = buf.get_mut(..len).ok_or(NtStatus::INTERNAL_ERROR)?;
    read_bytes(addr, buf)?;
    write_bytes(addr, buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes() {
        let mut x: u64 = 7;
        let addr = &mut x as *mut u64 as usize;
        assert!(is_writable(addr, 8));
        assert_eq!(probe_write(addr, 8), Ok(()));
        write_bytes(addr, &9u64.to_ne_bytes()).unwrap();
        assert_eq!(x, 9);
        assert_eq!(write_bytes(0, &[0]), Err(NtStatus::ACCESS_VIOLATION));
        assert_eq!(write_bytes(8, &[0]), Err(NtStatus::ACCESS_VIOLATION));
        assert!(!is_writable(usize::MAX - 4, 8));
        // Code is mapped read-only + exec.
        let code = probes as *const () as usize;
        assert!(!is_writable(code, 4));
        assert!(is_readable(code, 4));
        assert_eq!(write_bytes(code, &[0]), Err(NtStatus::ACCESS_VIOLATION));
    }

    #[test]
    fn c_strings() {
        let text = b"libm.so.6\0";
        assert_eq!(read_cstr(text.as_ptr() as usize, 64).unwrap(), b"libm.so.6");
        assert_eq!(read_cstr(text.as_ptr() as usize, 9).unwrap(), b"libm.so.6");
        assert_eq!(
            read_cstr(text.as_ptr() as usize, 8),
            Err(NtStatus::INVALID_PARAMETER)
        );
        assert_eq!(read_cstr(0, 64), Err(NtStatus::ACCESS_VIOLATION));
        // A string across a 4 KiB boundary.
        let mut long = vec![b'x'; 5000];
        long.push(0);
        assert_eq!(read_cstr(long.as_ptr() as usize, 8192).unwrap().len(), 5000);
    }
}
