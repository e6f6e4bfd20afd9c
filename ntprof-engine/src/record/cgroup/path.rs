//! The cgroup of a `--cgroup` run: PATH resolved against the cgroup v2 mounts of `/proc/self/mountinfo` (a
//! directory under a mount, or a path relative to the first mount's root), the processes of the cgroup and of
//! the cgroups below it (`cgroup.procs`), and the checks every mode makes before anything starts.

use std::path::{Path, PathBuf};

use super::super::session::Session;
use super::super::{EXIT_FAILURE, EXIT_USAGE, Failure};
use crate::options::ProfileOptions;
use crate::tree::{procs, space};

/// A cgroup named by `--cgroup`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// Its directory.
    pub dir: PathBuf,
    /// Its path in the hierarchy (`/` the root), as `/proc/PID/cgroup` shows it.
    pub path: String,
}

/// A `--cgroup` run: the cgroup as given, the command that bounds the run (may be empty), `--duration`, the
/// profiling options and the subcommand (`record`, `attach`).
pub struct CgroupRun<'a> {
    /// `--cgroup`'s value.
    pub arg: &'a str,
    /// The command after `--`, which bounds the run.
    pub command: &'a [String],
    /// `--duration`.
    pub duration: Option<f64>,
    /// The profiling options.
    pub profile: &'a ProfileOptions,
    /// `record` or `attach`.
    pub mode: &'static str,
}

/// The cgroup v2 mounts of a `/proc/self/mountinfo` text: (mount point, root of the hierarchy it shows), in
/// its order.
fn v2_mounts(mountinfo: &str) -> Vec<(PathBuf, String)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            if right.split(' ').next()? != "cgroup2" {
                return None;
            }
            let fields: Vec<&str> = left.split(' ').collect();
            Some((
                PathBuf::from(unescape(fields.get(4)?)),
                unescape(fields.get(3)?),
            ))
        })
        .collect()
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Resolve `--cgroup ARG` against the cgroup v2 mounts of `mountinfo`: a path under a mount point is taken as
/// it is, anything else is relative to the first mount's root (a leading `/` or not). Checks that it is a
/// cgroup (its `cgroup.procs` exists).
pub fn resolve_in(arg: &str, mountinfo: &str) -> Result<Cgroup, Failure> {
    let mounts = v2_mounts(mountinfo);
    let Some((first, first_root)) = mounts.first() else {
        return Err(Failure::new(
            EXIT_FAILURE,
            format!(
                "--cgroup {arg}: no cgroup v2 file system is mounted (/proc/self/mountinfo lists no cgroup2 \
                 mount: this machine has cgroup v1 only), and --cgroup names a cgroup v2.\n  Fix: mount it \
                 ('mount -t cgroup2 none /sys/fs/cgroup/unified'), or boot with \
                 systemd.unified_cgroup_hierarchy=1; or profile the processes with -p PID"
            ),
        ));
    };
    if arg.split('/').any(|c| c == "..") {
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "--cgroup {arg}: give the path without '..' (a cgroup below the cgroup v2 root)"
            ),
        ));
    }
    let given = Path::new(arg);
    let under = mounts
        .iter()
        .find_map(|(m, root)| given.strip_prefix(m).ok().map(|rel| (m, root, rel)));
    let (dir, root, rel) = match under {
        Some((m, root, rel)) => (m.join(rel), root, rel.to_path_buf()),
        None => {
            let rel = PathBuf::from(arg.trim_start_matches('/'));
            (first.join(&rel), first_root, rel)
        }
    };
    let rel = rel.to_string_lossy();
    let path = match (root.trim_end_matches('/'), rel.trim_matches('/')) {
        ("", "") => "/".to_string(),
        (r, "") => r.to_string(),
        (r, rel) => format!("{r}/{rel}"),
    };
    if !dir.join("cgroup.procs").is_file() {
        let why = if dir.is_dir() {
            "is not a cgroup (it has no cgroup.procs)"
        } else {
            "does not exist"
        };
        return Err(Failure::new(
            EXIT_FAILURE,
            format!(
                "--cgroup {arg}: {} {why}.\n  Fix: name a cgroup v2 directory (under {}), or a path relative to \
                 its root as /proc/PID/cgroup shows it after '0::'; 'cat /proc/PID/cgroup' tells a process's",
                dir.display(),
                first.display()
            ),
        ));
    }
    Ok(Cgroup { dir, path })
}

/// Resolve `--cgroup ARG` against this machine's mounts.
pub fn resolve(arg: &str) -> Result<Cgroup, Failure> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| {
        Failure::new(
            EXIT_FAILURE,
            format!(
                "--cgroup: cannot read /proc/self/mountinfo ({e}) to find the cgroup v2 file system"
            ),
        )
    })?;
    resolve_in(arg, &mountinfo)
}

/// The processes of the cgroup at `dir` and of every cgroup below it (their `cgroup.procs`), sorted, ntprof's
/// own left out; a cgroup removed meanwhile has none.
pub fn procs_of(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|&p| p != std::process::id());
    pids
}

/// Process `pid`, profiled from `time` on, added to the model with what it mapped before (later mappings come
/// as the kernel's records).
pub(super) fn add_present(session: &mut Session, pid: u32, time: u64) {
    let maps = space::read_executable_maps(pid).unwrap_or_default();
    let comm = procs::comm(pid).unwrap_or_else(|| procs::unknown_comm(pid));
    let ppid = procs::parent_pid(pid).unwrap_or(0);
    session.tracker.add_process(pid, ppid, &comm, &maps, time);
}

/// The checks every mode of a `--cgroup` run makes before anything starts.
pub(super) fn check(r: &CgroupRun<'_>) -> Result<Cgroup, Failure> {
    if r.profile.no_inherit {
        return Err(Failure::new(
            EXIT_USAGE,
            "--no-inherit: a --cgroup run profiles every process of the cgroup, the children its processes \
             start there included; drop --no-inherit",
        ));
    }
    if r.duration.is_some() && !r.command.is_empty() {
        return Err(Failure::new(
            EXIT_USAGE,
            "--cgroup: give either --duration or a command (which bounds the run), not both",
        ));
    }
    resolve(r.arg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
31 25 0:27 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/memory rw,relatime shared:11 - cgroup cgroup rw,memory
";

    /// A v2 mount and the mount of the machine this runs on.
    #[test]
    fn finds_the_v2_mount() {
        assert_eq!(
            v2_mounts(HYBRID),
            vec![(PathBuf::from("/sys/fs/cgroup/unified"), "/".to_string())]
        );
        let escaped = "41 31 0:38 /ns /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v2_mounts(escaped),
            vec![(PathBuf::from("/mnt/cg two"), "/ns".to_string())]
        );
        assert!(
            v2_mounts("42 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
                .is_empty()
        );
    }

    /// Paths under the mount, relative to its root with or without '/', the root itself; errors: no v2 mount
    /// (v1 only), a cgroup that does not exist, '..'.
    #[test]
    fn resolves_paths_and_names_the_fix() {
        let here = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let (mount, _) = v2_mounts(&here)
            .into_iter()
            .next()
            .expect("a cgroup v2 mount");
        let root = resolve_in(&mount.to_string_lossy(), &here).unwrap();
        assert_eq!((root.dir.clone(), root.path.as_str()), (mount.clone(), "/"));
        assert_eq!(resolve_in("/", &here).unwrap(), root);
        assert_eq!(resolve_in("", &here).unwrap(), root);
        let v1 = "42 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let e = resolve_in("/x", v1).unwrap_err();
        assert!(
            e.message.contains("cgroup v1 only") && e.message.contains("Fix:"),
            "{e}"
        );
        assert_eq!(e.code, EXIT_FAILURE);
        let e = resolve_in("/no-such-cgroup-here", &here).unwrap_err();
        assert!(
            e.message.contains("does not exist") && e.message.contains("Fix:"),
            "{e}"
        );
        assert_eq!(e.code, EXIT_FAILURE);
        let e = resolve_in("a/../../etc", &here).unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        // A directory that is no cgroup.
        let e = resolve_in("/tmp", "1 1 0:1 / /tmp rw - cgroup2 cgroup2 rw\n").unwrap_err();
        assert!(e.message.contains("is not a cgroup"), "{e}");
        // A relative path and its absolute spelling name the same cgroup (made by the integration tests; here
        // the hierarchy's own directory for any child: its path is under the root).
        let child = std::fs::read_dir(&mount)
            .unwrap()
            .flatten()
            .find(|e| e.path().join("cgroup.procs").is_file());
        if let Some(child) = child {
            let name = child.file_name().to_string_lossy().into_owned();
            let a = resolve_in(&name, &here).unwrap();
            assert_eq!(a, resolve_in(&format!("/{name}"), &here).unwrap());
            assert_eq!(
                a,
                resolve_in(&child.path().to_string_lossy(), &here).unwrap()
            );
            assert_eq!(a.path, format!("/{name}"));
        }
    }
}
