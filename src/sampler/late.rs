//! What a per-thread sampler tells of a task whose events it opened late (a thread or process created after the
//! start, opened from its fork record or found by a scan): the kernel reports a task's mappings and exec to the
//! task's own events only, so what the task mapped or exec'ed before its events were opened never reaches a
//! ring. The sampler reads it from `/proc` after opening the events (anything later comes in the ring) and hands
//! it on as records: for a new process a `Comm` record with `exec` set (its image may not be its parent's any
//! more: mappings known of it are replaced), then one `Mmap` record per executable mapping; for a new thread of
//! a process already known, the `Mmap` records only when the process's mappings changed since they were last
//! read.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::perf::records::{Mmap, SampleRecord};

/// One executable line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MapLine {
    start: u64,
    end: u64,
    pgoff: u64,
    prot: u32,
    flags: u32,
    maj: u32,
    min: u32,
    ino: u64,
    name: Vec<u8>,
}

/// Parse one line of `/proc/PID/maps` (`start-end perms offset maj:min inode [path]`) when it is executable; an
/// anonymous executable region is named `//anon` as the kernel names it in its records.
pub(super) fn parse_line(line: &str) -> Option<MapLine> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?.as_bytes();
    let offset = fields.next()?;
    let dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if perms.len() < 4 || perms[2] != b'x' {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let mut prot = libc::PROT_EXEC as u32;
    if perms[0] == b'r' {
        prot |= libc::PROT_READ as u32;
    }
    if perms[1] == b'w' {
        prot |= libc::PROT_WRITE as u32;
    }
    let flags = if perms[3] == b's' {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    } as u32;
    let name = if path.is_empty() {
        b"//anon".to_vec()
    } else {
        path.as_bytes().to_vec()
    };
    Some(MapLine {
        start: hex(start)?,
        end: hex(end)?,
        pgoff: hex(offset)?,
        prot,
        flags,
        maj: u32::try_from(hex(maj)?).ok()?,
        min: u32::try_from(hex(min)?).ok()?,
        ino: inode.parse().ok()?,
        name,
    })
}

/// The executable mappings of process `pid` now, read through thread `tid` (a process whose main thread ended
/// lists no mapping of its own); empty when it is gone.
fn read_maps(pid: u32, tid: u32) -> Vec<MapLine> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/maps"))
        .or_else(|_| std::fs::read_to_string(format!("/proc/{pid}/maps")))
        .unwrap_or_default();
    text.lines().filter_map(parse_line).collect()
}

/// The records a late task gets, and the mappings last read of each process.
#[derive(Default)]
pub(super) struct Late {
    /// Per process: a digest of the executable mappings last handed on.
    seen: HashMap<u32, u64>,
    /// The mappings to hand on now, and the command name of a new process.
    maps: Vec<MapLine>,
    comm: Vec<u8>,
}

impl Late {
    /// Read what task `tid` of process `pid` (a new process when `new_process`) had before its events opened, at
    /// `time`; then `deliver` each record (false: stop, the process forked in it).
    pub(super) fn announce(
        &mut self,
        pid: u32,
        tid: u32,
        new_process: bool,
        time: u64,
        mut deliver: impl FnMut(&SampleRecord<'_>) -> bool,
    ) -> bool {
        self.maps = read_maps(pid, tid);
        let mut digest = DefaultHasher::new();
        self.maps.hash(&mut digest);
        let digest = digest.finish();
        let changed = self.seen.insert(pid, digest) != Some(digest);
        if new_process {
            self.comm = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
            while self.comm.last() == Some(&b'\n') {
                self.comm.pop();
            }
            let record = SampleRecord::Comm {
                pid,
                tid,
                time,
                comm: &self.comm,
                exec: true,
            };
            if !deliver(&record) {
                return false;
            }
        } else if !changed {
            return true;
        }
        for m in &self.maps {
            let record = SampleRecord::Mmap(Mmap {
                pid,
                tid,
                time,
                addr: m.start,
                len: m.end - m.start,
                pgoff: m.pgoff,
                prot: m.prot,
                flags: m.flags,
                maj: m.maj,
                min: m.min,
                ino: m.ino,
                ino_generation: 0,
                filename: &m.name,
            });
            if !deliver(&record) {
                return false;
            }
        }
        true
    }

    /// Forget a process that left.
    pub(super) fn forget(&mut self, pid: u32) {
        self.seen.remove(&pid);
    }
}

impl Hash for MapLine {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.start, self.end, self.pgoff, self.ino, &self.name).hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_lines_only_with_their_fields() {
        let m = parse_line(
            "7f1c2a000000-7f1c2a1b0000 r-xp 00028000 fd:01 1573213                    /usr/lib/libc.so.6",
        )
        .expect("executable line");
        assert_eq!(
            (m.start, m.end, m.pgoff),
            (0x7f1c_2a00_0000, 0x7f1c_2a1b_0000, 0x28000)
        );
        assert_eq!((m.maj, m.min, m.ino), (0xfd, 1, 1_573_213));
        assert_eq!(m.name, b"/usr/lib/libc.so.6");
        assert_eq!(m.prot, (libc::PROT_READ | libc::PROT_EXEC) as u32);
        assert_eq!(m.flags, libc::MAP_PRIVATE as u32);
        assert!(
            parse_line("7f1c2a1b0000-7f1c2a200000 r--p 00000000 fd:01 1573213 /usr/lib/libc.so.6")
                .is_none()
        );
        let anon = parse_line("7f00000000-7f00001000 rwxp 00000000 00:00 0 ").expect("anon");
        assert_eq!(anon.name, b"//anon");
        let vdso = parse_line("7ffd1000-7ffd3000 r-xp 00000000 00:00 0                  [vdso]")
            .expect("vdso");
        assert_eq!(vdso.name, b"[vdso]");
        assert!(parse_line("garbage").is_none());
    }
}
