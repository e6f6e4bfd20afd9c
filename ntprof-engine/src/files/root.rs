//! The root directory a process sees its paths in, so that the files ntprof reads for a process in a container
//! (its perf map, jitdump, separate debug files, sources, and its objects when their mapping cannot be opened
//! itself) are the container's, never the host's files at the same paths.
//!
//! A process whose root and mount namespace are ntprof's own sees the host's paths ([`Root::Host`]: opened as
//! they always were). Any other process's root is held open as a directory (`/proc/PID/root`, one descriptor
//! per distinct root, shared by its processes), so that it stays usable after the process exits, and a path is
//! opened under it with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`: an absolute symlink, a `..` or a
//! `/proc/self/...` link in the container resolves inside the container's root, never to a host file.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Where a process's paths are resolved.
#[derive(Clone, Debug, Default)]
pub enum Root {
    /// ntprof's own root and mounts (a process on the host, or one whose root could not be read: gone).
    #[default]
    Host,
    /// A container's root directory, held open.
    Dir(Arc<OwnedFd>),
}

impl PartialEq for Root {
    fn eq(&self, other: &Root) -> bool {
        self.key() == other.key()
    }
}

impl Root {
    /// A number telling roots apart while they are held (-1 for the host's).
    pub fn key(&self) -> i32 {
        match self {
            Root::Host => -1,
            Root::Dir(dir) => dir.as_raw_fd(),
        }
    }

    /// True for ntprof's own root.
    pub fn is_host(&self) -> bool {
        matches!(self, Root::Host)
    }

    /// Open `path` (as the process names it) for reading, without blocking on a FIFO and without following
    /// a link out of the root.
    pub fn open(&self, path: &Path) -> io::Result<File> {
        match self {
            Root::Host => {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc_nonblock())
                    .open(path)
            }
            Root::Dir(dir) => {
                let fd = rustix::fs::openat2(
                    dir,
                    in_root(path),
                    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
                    Mode::empty(),
                    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
                )?;
                Ok(File::from(fd))
            }
        }
    }

    /// True when `path` names something (resolved as [`open`](Self::open) resolves it).
    pub fn exists(&self, path: &Path) -> bool {
        match self {
            Root::Host => std::fs::metadata(path).is_ok(),
            Root::Dir(dir) => rustix::fs::openat2(
                dir,
                in_root(path),
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            )
            .is_ok(),
        }
    }
}

/// `path` relative to the root it is resolved in (`RESOLVE_IN_ROOT` takes an absolute path so too; a relative
/// one would be read from the root as well).
fn in_root(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

fn libc_nonblock() -> i32 {
    nix::fcntl::OFlag::O_NONBLOCK.bits()
}

/// What tells one root from another: the mount namespace and the root directory's device and inode.
type RootId = (u64, u64, u64);

/// The roots of a run's processes, each container root held once.
#[derive(Debug, Default)]
pub struct Roots {
    ours: Option<RootId>,
    held: HashMap<RootId, Root>,
}

impl Roots {
    /// The root process `pid` sees now; [`Root::Host`] when it is ntprof's own, or when the process is gone or
    /// its root cannot be read.
    pub fn of_process(&mut self, pid: u32) -> Root {
        let ours = *self
            .ours
            .get_or_insert_with(|| own_root().unwrap_or_default());
        let Some((id, dir)) = process_root(pid) else {
            return Root::Host;
        };
        if id == ours {
            return Root::Host;
        }
        self.held
            .entry(id)
            .or_insert_with(|| Root::Dir(Arc::new(dir)))
            .clone()
    }

    /// How many container roots are held.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

fn own_root() -> Option<RootId> {
    let root = std::fs::metadata("/").ok()?;
    let ns = std::fs::metadata("/proc/self/ns/mnt").ok()?;
    Some((ns.ino(), root.dev(), root.ino()))
}

/// Process `pid`'s root directory, opened (`O_PATH`), with its identity.
fn process_root(pid: u32) -> Option<(RootId, OwnedFd)> {
    let dir = rustix::fs::open(
        format!("/proc/{pid}/root"),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&dir).ok()?;
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/mnt")).ok()?;
    Some(((ns.ino(), stat.st_dev, stat.st_ino), dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A directory made to look like a container's root: a library path that is a symlink to a host file
    /// (absolute, and by `..`), and a file of its own.
    #[test]
    fn links_in_a_root_resolve_inside_it() {
        let dir = std::env::temp_dir().join(format!("ntprof-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(dir.join("etc/hostname"), "inside\n").unwrap();
        symlink("/etc/hostname", dir.join("lib/abs")).unwrap();
        symlink("../../../../../../etc/hostname", dir.join("lib/up")).unwrap();
        symlink("/proc/self/root/etc/hostname", dir.join("lib/magic")).unwrap();
        let fd = rustix::fs::open(
            &dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let root = Root::Dir(Arc::new(fd));
        for link in ["/lib/abs", "/lib/up", "lib/up"] {
            let text = std::io::read_to_string(root.open(Path::new(link)).unwrap()).unwrap();
            assert_eq!(text, "inside\n", "{link} left the root");
        }
        // A magic link is refused, not followed to the host.
        assert!(root.open(Path::new("/lib/magic")).is_err());
        assert!(root.exists(Path::new("/lib/abs")) && !root.exists(Path::new("/nothing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn own_processes_root_is_the_host() {
        let mut roots = Roots::default();
        assert!(roots.of_process(std::process::id()).is_host());
        // Gone: taken as the host's (the identity checks guard what is named from it).
        assert!(roots.of_process(u32::MAX - 1).is_host());
        assert_eq!(roots.held(), 0);
    }
}

/// Where a process finds its files, and who it is in its own pid namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Place {
    /// Its root.
    pub root: Root,
    /// Its pid in its own (innermost) pid namespace, when that is not its host pid (`NSpid`).
    pub ns_pid: Option<u32>,
}
