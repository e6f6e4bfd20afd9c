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

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;

use crate::perf::{proc, sys};
use crate::status::NtStatus;

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
    // Relaxed: a hint that only ever goes from false to true; a thread that misses the store asks the kernel
    // once more and gets ENOTTY again.
    if !NO_VMA_QUERY.load(Ordering::Relaxed) {
        match range_has_queried(addr, end, perm) {
            Ok(answer) => return Ok(answer),
            Err(Errno::ENOTTY) => NO_VMA_QUERY.store(true, Ordering::Relaxed),
            Err(errno @ (Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM)) => {
                return Err(shortage(errno));
            }
            // Anything else the text below answers.
            Err(_) => {}
        }
    }
    Ok(range_has_in_text(&read_maps()?, addr, end, perm))
}

/// Set once `PROCMAP_QUERY` was refused with ENOTTY (a kernel before 6.11): read the map as text from then on.
static NO_VMA_QUERY: AtomicBool = AtomicBool::new(false);

/// [`range_has`] by one `PROCMAP_QUERY` per mapping the range crosses (usually one): a lookup in the kernel's
/// tree, where reading `/proc/self/maps` formats every mapping of the process as text.
fn range_has_queried(addr: usize, end: usize, perm: u8) -> Result<bool, Errno> {
    let maps = proc::own_maps_file()?;
    let mut cursor = addr;
    while cursor < end {
        let Some(vma) = sys::query_vma(maps.as_fd(), cursor)? else {
            return Ok(false);
        };
        let allowed = match perm {
            b'w' => vma.writable,
            _ => vma.readable,
        };
        if vma.start > cursor || vma.end <= cursor || !allowed {
            return Ok(false);
        }
        cursor = vma.end;
    }
    Ok(true)
}

/// [`range_has`] from the text of `/proc/self/maps`: mappings are listed in address order; walk them,
/// extending the covered prefix of `[addr, end)`.
fn range_has_in_text(maps: &str, addr: usize, end: usize, perm: u8) -> bool {
    let mut cursor = addr;
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

/// A failure to look at the map (no descriptor, no memory): the shortage's status, never
/// `STATUS_ACCESS_VIOLATION` or `STATUS_INVALID_PARAMETER`, which would blame the caller's pointer.
fn shortage(errno: Errno) -> NtStatus {
    match NtStatus::from_errno(errno as i32) {
        NtStatus::ACCESS_VIOLATION | NtStatus::INVALID_PARAMETER => NtStatus::INTERNAL_ERROR,
        other => other,
    }
}

/// `/proc/self/maps`; a failure to read it (EMFILE, ENFILE, ENOMEM: `STATUS_INSUFFICIENT_RESOURCES`) is a
/// shortage of this process, never an answer about the caller's pointer.
fn read_maps() -> Result<String, NtStatus> {
    proc::own_maps().map_err(shortage)
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
    match sys::write_own_memory(addr, bytes) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) | Err(Errno::EFAULT) => Err(NtStatus::ACCESS_VIOLATION),
        // Filtered (seccomp) or missing: check the maps, then write directly.
        Err(_) => {
            check_writable(addr, bytes.len())?;
            // SAFETY: `/proc/self/maps` just showed [addr, addr + len) mapped writable; `bytes` is our own
            // memory, not the caller's destination.
            unsafe { sys::write_own_memory_direct(addr, bytes) };
            Ok(())
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
            if !is_readable(addr, len)? {
                return Err(NtStatus::ACCESS_VIOLATION);
            }
            // SAFETY: `/proc/self/maps` just showed [addr, addr + len) mapped readable; `out` is our own
            // buffer.
            unsafe { sys::read_own_memory_direct(addr, out) };
            Ok(())
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

    /// The kernel's lookup and the text of `/proc/self/maps` give the same answer for ranges at and around
    /// every mapping's edges (this process's map does not change between the two: no thread maps anything).
    #[test]
    fn the_lookup_and_the_text_agree() {
        let text = proc::own_maps().unwrap();
        let mut ranges = Vec::new();
        for line in text.lines() {
            let range = line.split_whitespace().next().unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).unwrap(),
                usize::from_str_radix(hi, 16).unwrap(),
            );
            for (a, b) in [
                (lo, hi),
                (lo, lo + 1),
                (hi - 1, hi),
                (hi - 1, hi + 1),
                (lo.saturating_sub(1), lo + 1),
                (lo, hi + 4096),
                (lo + (hi - lo) / 2, hi + 1),
            ] {
                if a < b && a != 0 {
                    ranges.push((a, b));
                }
            }
        }
        assert!(ranges.len() > 20, "{text}");
        let (mut yes, mut no) = (0, 0);
        for &(a, b) in &ranges {
            for perm in [b'r', b'w'] {
                // Other tests of this process may map or unmap memory meanwhile: compare only when the map
                // read before the lookup and after it are the same.
                let before = proc::own_maps().unwrap();
                let queried = range_has_queried(a, b, perm).unwrap();
                if proc::own_maps().unwrap() != before {
                    continue;
                }
                assert_eq!(
                    queried,
                    range_has_in_text(&before, a, b, perm),
                    "[{a:#x}, {b:#x}) {}",
                    perm as char
                );
                if queried {
                    yes += 1;
                } else {
                    no += 1;
                }
            }
        }
        assert!(yes > 10 && no > 10, "{yes} yes, {no} no");
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
