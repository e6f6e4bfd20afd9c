//! Opening the files a profiled program controls (its jitdump, its perf map, its objects and their debug
//! files, source files its DWARF names) so that none of them can hang, crash or exhaust ntprof.
//!
//! Every such file is opened with `O_NONBLOCK` (opening a FIFO does not wait for a writer), checked with
//! `fstat` on the open descriptor to be a regular file (not a FIFO, a device such as `/dev/zero`, a socket or a
//! directory), and read up to a cap of its kind. A file read on behalf of a process (its jitdump and perf map)
//! must belong to root, to the user ntprof runs as, or to the process's own user; a debug file must belong to
//! root or to the owner of the object it describes. The rule is documented in docs/ntprof.md, section "Files
//! ntprof reads". A process in a container has its files opened in its own root ([`Root`]), and its root
//! user is the host user its user namespace maps uid 0 to.

use std::fs::File;
use std::io::{BufRead, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

// Paths given so that the fuzz targets, which include this file by its path, find them too (a module file
// included by path looks for its modules beside it, not in a folder of its name).
#[path = "files/object.rs"]
mod object;
#[path = "files/root.rs"]
mod root;
pub use object::{ObjectFile, Opened, device, mismatch};
pub use root::{Place, Root, Roots};

/// The most of a jitdump that is read (its code bytes are skipped, not kept).
pub const JITDUMP_CAP: u64 = 1 << 30;
/// The most of a perf map that is read.
pub const PERF_MAP_CAP: u64 = 256 << 20;
/// The longest perf map line kept (the rest of a longer line is skipped).
pub const PERF_MAP_LINE: usize = 64 << 10;
/// The largest object (executable, library, debug file) whose DWARF is read into memory.
pub const OBJECT_CAP: u64 = 4 << 30;
/// The largest source file whose lines are shown.
pub const SOURCE_CAP: u64 = 64 << 20;

/// Whose files are trusted besides root's and the user ntprof runs as.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Owners {
    /// Any owner (the objects a process maps: what it runs is what it runs).
    #[default]
    Any,
    /// These users only (with root and ntprof's own user).
    Of(Vec<u32>),
}

impl Owners {
    /// The users a process runs as (real and effective user id, from `/proc/PID/status`) and, for a process
    /// in a user namespace of its own (a rootless container), the host user its namespace's root is (from
    /// `/proc/PID/uid_map`); only root and ntprof's own user when the process is gone.
    pub fn of_process(pid: u32) -> Owners {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let mut uids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|l| {
                l.split_whitespace()
                    .take(2)
                    .filter_map(|u| u.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap_or_default();
        // (Root's own files are trusted anyway: uid 0 of the host's namespace adds nothing.)
        if let Some(root) = namespace_root(&map).filter(|u| *u != 0 && !uids.contains(u)) {
            uids.push(root);
        }
        Owners::Of(uids)
    }

    fn allows(&self, uid: u32) -> bool {
        match self {
            Owners::Any => true,
            Owners::Of(uids) => {
                uid == 0 || uid == nix::unistd::geteuid().as_raw() || uids.contains(&uid)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Owners::Any => String::new(),
            Owners::Of(uids) if uids.is_empty() => "root or the user ntprof runs as".into(),
            Owners::Of(uids) => {
                let list: Vec<String> = uids.iter().map(u32::to_string).collect();
                format!(
                    "root, the user ntprof runs as or the process's user (uid {})",
                    list.join(", ")
                )
            }
        }
    }
}

/// The host user that uid 0 of a user namespace is, from its `uid_map` (`INSIDE OUTSIDE COUNT` lines, as
/// the host reads them); `None` when no line maps uid 0.
fn namespace_root(uid_map: &str) -> Option<u32> {
    uid_map.lines().find_map(|l| {
        let mut f = l.split_whitespace().map(|n| n.parse::<u32>().ok());
        match (f.next()??, f.next()??, f.next()??) {
            (0, outside, count) if count > 0 => Some(outside),
            _ => None,
        }
    })
}

/// Open `path` for reading without blocking, and check that it is a regular file owned as `owners` allow;
/// the file and its size.
pub fn open(path: &Path, owners: &Owners) -> Result<(File, u64), String> {
    open_in(&Root::Host, path, owners)
}

/// [`open`] with `path` resolved in `root` (a container's paths inside the container).
pub fn open_in(root: &Root, path: &Path, owners: &Owners) -> Result<(File, u64), String> {
    let file = root
        .open(path)
        .map_err(|e| format!("cannot open it: {e}"))?;
    checked(file, owners)
}

/// `file` if it is a regular file owned as `owners` allow, with its size.
pub fn checked(file: File, owners: &Owners) -> Result<(File, u64), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a file"
        };
        return Err(format!("not read: it is {what}, not a regular file"));
    }
    if !owners.allows(meta.uid()) {
        return Err(format!(
            "not read: it belongs to uid {}, not to {}",
            meta.uid(),
            owners.describe()
        ));
    }
    Ok((file, meta.len()))
}

/// A file read through object's read cache, which keeps every range it reads: the ranges read in all may
/// not exceed twice the file's size and 16 MiB (a file whose headers make the same bytes read many times
/// over, such as thousands of symbol table headers spanning the file, fails its reads past that, and costs
/// no more memory).
#[derive(Debug)]
pub struct Budgeted {
    file: File,
    left: u64,
    /// A read was refused for the budget.
    pub exhausted: bool,
}

impl Budgeted {
    /// `file`, of `len` bytes.
    pub fn new(file: File, len: u64) -> Budgeted {
        Budgeted {
            file,
            left: len.saturating_mul(2).saturating_add(16 << 20),
            exhausted: false,
        }
    }
}

impl Read for Budgeted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            self.exhausted = true;
            return Err(std::io::Error::other("read budget exhausted"));
        }
        let n = self.file.read(buf)?;
        self.left -= n as u64;
        Ok(n)
    }
}

impl std::io::Seek for Budgeted {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

/// The whole of a small file (at most `cap` bytes; a longer one is an error, not a prefix).
pub fn read(path: &Path, owners: &Owners, cap: u64) -> Result<Vec<u8>, String> {
    read_in(&Root::Host, path, owners, cap)
}

/// [`read`] with `path` resolved in `root`.
pub fn read_in(root: &Root, path: &Path, owners: &Owners, cap: u64) -> Result<Vec<u8>, String> {
    let (file, len) = open_in(root, path, owners)?;
    if len > cap {
        return Err(format!(
            "not read: it has {len} bytes, more than the {cap} ntprof reads"
        ));
    }
    let mut data = Vec::with_capacity(len as usize);
    file.take(cap)
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read it: {e}"))?;
    Ok(data)
}

/// Call `each` with every line of `reader` (without its newline), each cut to `max` bytes: a line of any
/// length costs at most `max` bytes of memory.
pub fn for_each_line(
    reader: &mut impl BufRead,
    max: usize,
    mut each: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let mut line = Vec::new();
    let mut pending = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            if pending {
                each(&line);
            }
            return Ok(());
        }
        let (part, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        pending = true;
        reader.consume(used);
        if done {
            each(&line);
            line.clear();
            pending = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_not_kept_whole() {
        let text = format!("a b\n{}\nlast", "x".repeat(100_000));
        let mut lines = Vec::new();
        for_each_line(&mut text.as_bytes(), 10, |l| lines.push(l.to_vec())).unwrap();
        assert_eq!(lines, [b"a b".to_vec(), b"x".repeat(10), b"last".to_vec()]);
    }

    #[test]
    fn a_fifo_and_a_device_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("ntprof-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = open(&fifo, &Owners::Any).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
        let e = read(Path::new("/dev/zero"), &Owners::Any, 1 << 20).unwrap_err();
        assert!(e.contains("character device"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_user_namespace_root_is_its_mapped_host_user() {
        assert_eq!(
            namespace_root("         0          0 4294967295\n"),
            Some(0)
        );
        assert_eq!(namespace_root("1000 1000 1\n0 100000 1000\n"), Some(100000));
        assert_eq!(namespace_root("1 100000 65536\n"), None);
        assert_eq!(namespace_root(""), None);
    }
}
