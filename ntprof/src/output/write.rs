//! Writing an output safely: a file is written under a temporary name in its own folder, flushed to the disk and
//! renamed over its name only when complete, so that a reader never sees half a file and an existing file is
//! replaced only by a whole one; the checks made before a run ([`check_file`], [`check_folder`]) try exactly what
//! the writer will do; and the fallback file that keeps a profile whose requested output could not be written.
//!
//! A write to standard output or standard error that fails never panics: the error is returned (a closed pipe,
//! EPIPE, apart: the reader has gone) or, for a message, dropped ([`say`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Where one output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sink {
    Stdout,
    Stderr,
    File(PathBuf),
}

impl Sink {
    pub(super) fn of(path: Option<&Path>) -> Sink {
        match path {
            None => Sink::Stdout,
            Some(p) if p == Path::new("-") => Sink::Stdout,
            Some(p) => Sink::File(p.to_path_buf()),
        }
    }
}

/// How writing one output ended badly.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WriteError {
    /// The reader went away (EPIPE): stop quietly.
    BrokenPipe,
    /// Anything else, with the message for the user.
    Failed(String),
}

/// Write `bytes` to `sink`.
pub(super) fn write_all(sink: &Sink, bytes: &[u8]) -> Result<(), WriteError> {
    let classify = |e: io::Error, what: &str| {
        if e.kind() == io::ErrorKind::BrokenPipe {
            WriteError::BrokenPipe
        } else {
            WriteError::Failed(format!("{what}: {e}"))
        }
    };
    match sink {
        Sink::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(|e| classify(e, "cannot write to standard output"))
        }
        Sink::Stderr => {
            let mut out = io::stderr().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(|e| classify(e, "cannot write to standard error"))
        }
        Sink::File(path) => write_file(path, bytes)
            .map_err(|e| classify(e, &format!("cannot write {}", path.display()))),
    }
}

/// Where a write to `path` lands: a symbolic link is followed (the link stays, its target is replaced).
fn resolved(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path).unwrap_or(path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Whether `path` is something other than a regular file or a folder (a device such as /dev/null, a FIFO, a
/// socket): written in place, as it cannot be replaced by a rename.
fn in_place(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// The temporary name `path` is written under: hidden, in the same folder (a rename stays within one file
/// system), with this process's id (a stale one left by a crash of another run is never taken for ours).
fn temporary(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.ntprof-{}.tmp", std::process::id()))
}

/// The folder `path` is written in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Write `bytes` to the file `path`: under a temporary name, flushed, then renamed over `path` (keeping an
/// existing file's permissions); a device or FIFO is written in place. On failure the temporary file is
/// removed and `path` is as it was.
fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let target = resolved(path);
    if in_place(&target) {
        let mut file = File::create(&target)?;
        return file
            .write_all(bytes)
            .and_then(|()| file.sync_data().or_else(ignore_unsyncable));
    }
    if target.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "it is a folder (give a file name)",
        ));
    }
    let tmp = temporary(&target);
    let written = (|| {
        let _ = fs::remove_file(&tmp);
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        if let Ok(old) = fs::metadata(&target) {
            file.set_permissions(old.permissions())?;
        }
        file.write_all(bytes)?;
        // A full disk that `write` did not report (delayed allocation) shows here, before the rename.
        file.sync_all()?;
        fs::rename(&tmp, &target)
    })();
    match written {
        Ok(()) => {
            // The rename itself on the disk; a folder that cannot be synced is no error of the file.
            if let Ok(dir) = File::open(folder_of(&target)) {
                let _ = dir.sync_all();
            }
            Ok(())
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// `fsync` is refused by pipes, terminals and some devices (EINVAL, ENOTSUP): nothing more to flush there.
fn ignore_unsyncable(e: io::Error) -> io::Result<()> {
    match e.kind() {
        io::ErrorKind::InvalidInput | io::ErrorKind::Unsupported => Ok(()),
        _ => Err(e),
    }
}

/// Whether a file can be created in `dir`: one is created there under the writer's temporary name and removed.
fn probe(dir: &Path, name: &Path) -> io::Result<()> {
    let tmp = temporary(&dir.join(name.file_name().unwrap_or(name.as_os_str())));
    let _ = fs::remove_file(&tmp);
    OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    fs::remove_file(&tmp)
}

/// Check, before a run, that the output `option path` can be written as [`write_all`] will: its folder exists
/// and a file can be created in it, or it is a device or FIFO. Nothing is left behind and an existing file is
/// not touched. The error names the option, the path, the reason and the fix.
pub fn check_file(option: &str, path: &Path) -> Result<(), String> {
    if path == Path::new("-") {
        return Ok(());
    }
    let target = resolved(path);
    let shown = path.display();
    if in_place(&target) {
        return Ok(());
    }
    if target.is_dir() {
        return Err(format!(
            "{option} {shown}: it is a folder: give a file name in it ({option} {}/NAME)",
            path.display()
        ));
    }
    let dir = folder_of(&target);
    match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{option} {shown}: the folder {} does not exist: create it first (mkdir -p {}), or give \
                 another path",
                dir.display(),
                dir.display()
            ));
        }
        Err(e) => return Err(format!("{option} {shown}: cannot reach its folder: {e}")),
        Ok(m) if !m.is_dir() => {
            return Err(format!(
                "{option} {shown}: {} is not a folder",
                dir.display()
            ));
        }
        Ok(_) => {}
    }
    probe(dir, &target).map_err(|e| {
        format!(
            "{option} {shown}: cannot create a file in {}: {e}",
            dir.display()
        )
    })
}

/// Check, before a run, that files can be created in the folder `dir` (which exists).
pub fn check_folder(option: &str, dir: &Path) -> Result<(), String> {
    probe(dir, Path::new("probe")).map_err(|e| {
        format!(
            "{option} {}: cannot create a file in the folder: {e}",
            dir.display()
        )
    })
}

/// The folders a fallback file is tried in: `$TMPDIR`, then `/tmp`.
fn fallback_folders() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("TMPDIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if !dirs.iter().any(|d| d == Path::new("/tmp")) {
        dirs.push(PathBuf::from("/tmp"));
    }
    dirs
}

/// Keep `json` (a profile whose requested output failed) in `ntprof-PID-START.json` in the first fallback
/// folder where it can be written (`started`: the run's start, RFC 3339, without its colons in the name).
/// Returns the file, or why it could be written nowhere.
pub fn keep(json: &[u8], started: &str) -> Result<PathBuf, String> {
    keep_in(&fallback_folders(), json, started)
}

/// [`keep`], in the first of `dirs` that takes the file.
fn keep_in(dirs: &[PathBuf], json: &[u8], started: &str) -> Result<PathBuf, String> {
    let name = format!(
        "ntprof-{}-{}.json",
        std::process::id(),
        started.replace(':', "-")
    );
    let mut why = Vec::new();
    for dir in dirs {
        let path = dir.join(&name);
        match write_file(&path, json) {
            Ok(()) => return Ok(path),
            Err(e) => why.push(format!("{}: {e}", path.display())),
        }
    }
    Err(why.join("; "))
}

/// Print `line` on standard error; a terminal or pipe that is gone (EIO, EPIPE) is no reason to stop.
pub fn say(line: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ntprof-write-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_is_replaced_whole_and_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("replace");
        let path = dir.join("out.json");
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_file(&path, b"new and longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new and longer");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // Nothing else is left in the folder (the temporary name was renamed away).
        assert_eq!(names(&dir), ["out.json"]);
        // Through a symbolic link: the link stays, its target is replaced.
        std::os::unix::fs::symlink("out.json", dir.join("link.json")).unwrap();
        write_file(&dir.join("link.json"), b"via link").unwrap();
        assert!(
            fs::symlink_metadata(dir.join("link.json"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&path).unwrap(), b"via link");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_are_written_in_place() {
        write_file(Path::new("/dev/null"), b"x").unwrap();
        assert!(Path::new("/dev/null").exists());
        let e = write_file(Path::new("/dev/full"), b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28), "{e}");
    }

    #[test]
    fn the_checks_name_the_path_the_reason_and_leave_nothing() {
        let dir = scratch("check");
        let e = check_file("-o", Path::new("/nonexistent-dir/x.json")).unwrap_err();
        assert!(
            e.starts_with("-o /nonexistent-dir/x.json: the folder /nonexistent-dir does not exist")
                && e.contains("mkdir -p /nonexistent-dir"),
            "{e}"
        );
        let e = check_file("--json", &dir).unwrap_err();
        assert!(e.contains("it is a folder"), "{e}");
        fs::write(dir.join("file"), b"").unwrap();
        let e = check_file("--csv", &dir.join("file/x.csv")).unwrap_err();
        assert!(e.contains("is not a folder"), "{e}");
        check_file("-o", &dir.join("new.json")).unwrap();
        check_file("-o", Path::new("/dev/null")).unwrap();
        check_file("-o", Path::new("-")).unwrap();
        check_folder("--output", &dir).unwrap();
        assert!(!dir.join("new.json").exists());
        assert_eq!(names(&dir), ["file"]);
        // A read-only file system refuses the probe, as it would refuse the file (root bypasses permissions,
        // not a read-only mount): /proc takes no new file.
        let e = check_file("-o", Path::new("/proc/x.json")).unwrap_err();
        assert!(e.contains("cannot create a file in /proc"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_fallback_takes_the_first_folder_that_works() {
        let dir = scratch("keep");
        let dirs = [PathBuf::from("/nonexistent-dir"), dir.clone()];
        let kept = keep_in(&dirs, b"{}", "2026-12-01T16:00:00Z").unwrap();
        assert_eq!(
            kept,
            dir.join(format!(
                "ntprof-{}-2026-12-01T16-00-00Z.json",
                std::process::id()
            ))
        );
        assert_eq!(fs::read(&kept).unwrap(), b"{}");
        let e = keep_in(&dirs[..1], b"{}", "t").unwrap_err();
        assert!(e.starts_with("/nonexistent-dir/ntprof-"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
