//! The file behind each mapped object, opened as its process sees it while the process lives, and checked to be
//! the file the kernel mapped.
//!
//! The kernel's mmap record (and a line of `/proc/PID/maps`) gives the mapped file's device and inode. ntprof
//! opens the mapping itself (`/proc/PID/map_files/START-END`, where it may: root, or `CAP_CHECKPOINT_RESTORE`),
//! else the path in the process's own root ([`Root`]); the descriptor is kept for the whole run, so a process
//! that exits (or a container that is torn down) before the report is still named from its own files. The file
//! opened must have the recorded device and inode, else the object is not named from it: its code stays
//! `module+0x…` and the report's note says which file was found instead. This holds on the host too: a library
//! replaced on disk during the run is not named with the new file's symbols.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use super::Tracker;
use super::space::is_anonymous;
use crate::files::{ObjectFile, Root, mismatch};

/// The most descriptors of objects held (a run of many thousand distinct objects keeps the first ones; the
/// others are opened again at the report, by path, and checked again).
const HELD_MAX: usize = 2048;

pub use crate::files::{Opened, device};

/// The objects of a run, opened once per (device, inode, path).
#[derive(Default)]
pub struct MappedFiles {
    objects: HashMap<(u64, u64, String), Opened>,
    held: usize,
}

impl MappedFiles {
    /// The object `path` (device `dev`, inode `ino`) that process `pid`, whose root is `root`, maps at
    /// `[start, end)`: opened now if not found yet (again if an earlier try failed: another process of the
    /// same file may still run).
    pub fn open(
        &mut self,
        pid: u32,
        root: &Root,
        (start, end): (u64, u64),
        path: &str,
        (dev, ino): (u64, u64),
    ) -> Opened {
        let key = (dev, ino, path.to_string());
        if let Some(Ok(o)) = self.objects.get(&key) {
            return Ok(o.clone());
        }
        let opened = self.open_new(pid, root, (start, end), path, (dev, ino));
        self.objects.insert(key, opened.clone());
        opened
    }

    /// The object already opened as (device, inode, path), if it was.
    pub fn get(&self, path: &str, (dev, ino): (u64, u64)) -> Option<Opened> {
        self.objects.get(&(dev, ino, path.to_string())).cloned()
    }

    fn open_new(
        &mut self,
        pid: u32,
        root: &Root,
        (start, end): (u64, u64),
        path: &str,
        id: (u64, u64),
    ) -> Opened {
        let shown = path.strip_suffix(" (deleted)").unwrap_or(path);
        // The mapping itself first: its file whatever its path now (deleted, renamed, in any root).
        let by_mapping = Root::Host
            .open(Path::new(&format!(
                "/proc/{pid}/map_files/{start:x}-{end:x}"
            )))
            .ok();
        // Then the path in the process's root (a kernel record names it so), and on the host (a line of
        // `/proc/PID/maps` names it as ntprof sees it): whichever is the file with the mapped identity.
        let in_root = root.open(Path::new(shown)).ok();
        let on_host = (!root.is_host())
            .then(|| Root::Host.open(Path::new(shown)).ok())
            .flatten();
        let mut other = None;
        let mut matched = None;
        for file in by_mapping.into_iter().chain(in_root).chain(on_host) {
            let Ok(meta) = file.metadata() else { continue };
            if !meta.is_file() {
                continue; // a FIFO, a device, a directory planted at the path: never the mapped file
            }
            if (meta.dev(), meta.ino()) == id {
                matched = Some(file);
                break;
            }
            other.get_or_insert((meta.dev(), meta.ino()));
        }
        let Some(file) = matched else {
            if let Some(found) = other {
                return Err(mismatch(shown, id, found));
            }
            let gone = !Path::new(&format!("/proc/{pid}")).exists();
            return Err(if gone {
                format!("{shown}: pid {pid} exited before its mapping could be opened")
            } else {
                format!("{shown}: cannot be opened in pid {pid}'s root")
            });
        };
        let file = if self.held < HELD_MAX {
            self.held += 1;
            Some(file)
        } else {
            None
        };
        Ok(Arc::new(ObjectFile::new(
            shown,
            root.clone(),
            id,
            pid,
            file,
        )))
    }
}

pub use crate::files::Place;

/// The pid of `pid` in its innermost pid namespace (the last number of `NSpid` in `/proc/PID/status`), when it
/// differs.
pub fn ns_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let inner = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()?;
    (inner != pid).then_some(inner)
}

impl Tracker {
    /// Where `pid` finds its files, read now.
    pub(super) fn place_now(&mut self, pid: u32) -> Place {
        let ns_pid = match self.read_places.get(&pid) {
            Some(p) => p.ns_pid,
            None => ns_pid(pid),
        };
        Place {
            root: self.roots.of_process(pid),
            ns_pid,
        }
    }

    /// A mapping record of `pid` was just read (the process most likely still runs): its root is taken and
    /// its file opened now, before the record is applied (by then a short process may be gone, and a
    /// container's root with it).
    pub fn mmap_read(&mut self, pid: u32, (start, end): (u64, u64), path: &[u8], id: (u64, u64)) {
        let place = self.place_now(pid);
        let path = String::from_utf8_lossy(path);
        if !is_anonymous(&path) && !path.starts_with('[') && self.mapped.get(&path, id).is_none() {
            let _ = self.mapped.open(pid, &place.root, (start, end), &path, id);
        }
        self.read_places.insert(pid, place);
    }

    /// A new process `pid` was just read: what was read of an earlier process of that pid is not its.
    pub fn forked_read(&mut self, pid: u32) {
        self.read_places.remove(&pid);
    }

    /// The object of a mapping `[start, end)` of `path` with identity `id` in process `p` (opened when its
    /// record was read, else now), and the process's place kept for its perf map and jitdump.
    pub(super) fn object(
        &mut self,
        p: u32,
        range: (u64, u64),
        path: &str,
        id: (u64, u64),
    ) -> Opened {
        let pid = self.processes.list[p as usize].pid;
        let place = match self.read_places.get(&pid) {
            Some(place) => place.clone(),
            None => self.place_now(pid),
        };
        let root = place.root.clone();
        self.places.insert(p, place);
        match self.mapped.get(path, id) {
            Some(Ok(o)) => Ok(o),
            _ => self.mapped.open(pid, &root, range, path, id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_mapped_file_is_taken() {
        let dir = std::env::temp_dir().join(format!("ntprof-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lib.so");
        std::fs::write(&path, b"first").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let id = (meta.dev(), meta.ino());
        let p = path.to_str().unwrap();
        let mut files = MappedFiles::default();
        // Not this process's mapping: found by path, and it is the file with the recorded identity.
        let o = files
            .open(u32::MAX - 1, &Root::Host, (0, 1), p, id)
            .unwrap();
        assert_eq!(o.reopen().map(|_| ()), Ok(()));
        // Replaced on disk (a new inode at the same path): the held file still reads the first one...
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"second, another inode").unwrap();
        let text = std::io::read_to_string(o.reopen().unwrap()).unwrap();
        assert_eq!(text, "first");
        // ...and a mapping recorded with the old identity is never given the new file.
        let mut fresh = MappedFiles::default();
        let e = fresh
            .open(u32::MAX - 1, &Root::Host, (0, 1), p, id)
            .unwrap_err();
        assert!(e.contains("not the one that was mapped"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
