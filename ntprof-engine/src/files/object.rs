//! A mapped object's file as its process mapped it: held open, checked to be the file the kernel recorded
//! (device and inode), with the root its debug files and sources are found in.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Root;

/// A device number as `stat` gives it, from the major and minor numbers of a record or a maps line.
pub fn device(major: u32, minor: u32) -> u64 {
    nix::sys::stat::makedev(u64::from(major), u64::from(minor))
}

/// What opening an object gave: the file, or why the object is not named.
pub type Opened = Result<std::sync::Arc<ObjectFile>, String>;

/// One object as its process maps it: the file found, and where its debug files and sources are found.
#[derive(Debug)]
pub struct ObjectFile {
    /// The path as the process names it.
    pub path: String,
    /// The process's root: where its debug files and sources are found.
    pub root: Root,
    /// The mapped file's device and inode.
    pub id: (u64, u64),
    /// The process it was first opened for.
    pub pid: u32,
    /// The file, held open (`None` when the run holds too many: opened again by path and checked).
    file: Option<File>,
}

impl ObjectFile {
    /// The object `path` of the process `pid`, whose root is `root`, with the mapped identity `id`, held open
    /// as `file` (or `None`: opened again by path).
    pub fn new(path: &str, root: Root, id: (u64, u64), pid: u32, file: Option<File>) -> ObjectFile {
        ObjectFile {
            path: path.to_string(),
            root,
            id,
            pid,
            file,
        }
    }

    /// A path that opens this very file: the held descriptor's (`/proc/self/fd/N`), else the path (checked
    /// again by [`reopen`](Self::reopen)).
    pub fn open_path(&self) -> PathBuf {
        match &self.file {
            Some(f) => PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())),
            None => PathBuf::from(&self.path),
        }
    }

    /// The file opened anew (a reader of its own), checked to be the mapped one.
    pub fn reopen(&self) -> Result<File, String> {
        let file = match &self.file {
            Some(_) => Root::Host.open(&self.open_path()),
            None => self.root.open(Path::new(&self.path)),
        }
        .map_err(|e| format!("{}: cannot open it again: {e}", self.path))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("{}: cannot stat it: {e}", self.path))?;
        if (meta.dev(), meta.ino()) != self.id {
            return Err(mismatch(&self.path, self.id, (meta.dev(), meta.ino())));
        }
        Ok(file)
    }

    /// A key telling this object from any other of the run.
    pub fn key(&self) -> String {
        format!("{}:{}:{}", self.id.0, self.id.1, self.path)
    }
}

/// The note of a file found that is not the one mapped.
pub fn mismatch(path: &str, mapped: (u64, u64), found: (u64, u64)) -> String {
    let dev = |d: u64| format!("{}:{}", nix::sys::stat::major(d), nix::sys::stat::minor(d));
    format!(
        "{path}: the file found there (device {}, inode {}) is not the one that was mapped (device {}, \
         inode {}): replaced, or another root's file",
        dev(found.0),
        found.1,
        dev(mapped.0),
        mapped.1
    )
}
