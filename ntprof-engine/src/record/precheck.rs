//! The checks of `record`'s options that need the file system, made before the command runs: every
//! `--module NAME` must name a file that exists, so that a mistyped name fails at once instead of after a whole
//! run with an empty report.
//!
//! A name with a `/` is a path and must exist. A file name (`libc.so.6`, `prog`, `cc1`) must be found where a
//! module of the run can come from: the command itself, its directory, the `PATH`, the dynamic loader's
//! directories (`LD_LIBRARY_PATH`, `/etc/ld.so.conf`, the standard ones), or below the system's program and
//! library trees. A library loaded later with `dlopen` from a directory of its own is named by its full path.
//! Names in brackets (`[vdso]`, `[anon]`, `[JIT] pid N`) are the kernel's and ntprof's own, never files.

use std::path::{Path, PathBuf};

use super::{EXIT_USAGE, Failure};

/// Trees searched, to this depth, for a file name not found in the direct places.
const TREES: &[&str] = &["/usr/lib", "/usr/libexec", "/usr/local/lib", "/opt"];
const TREE_DEPTH: usize = 6;
/// The dynamic loader's standard directories.
const LIB_DIRS: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
];

/// Check every `--module` name against the files that exist (see the module's documentation).
pub fn check_modules(modules: &[String], command: &[String]) -> Result<(), Failure> {
    let exe = command.first().and_then(|c| find_program(c));
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = exe
        .as_ref()
        .and_then(|e| std::fs::canonicalize(e).ok())
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    dirs.extend(path_list("PATH"));
    dirs.extend(path_list("LD_LIBRARY_PATH"));
    dirs.extend(ld_so_conf_dirs());
    dirs.extend(LIB_DIRS.iter().map(PathBuf::from));
    for name in modules {
        if name.starts_with('[') || known(name, exe.as_deref(), &dirs) {
            continue;
        }
        let what = if name.contains('/') {
            format!("--module {name}: no such file")
        } else {
            format!(
                "--module {name}: no file of that name in the command's directory, on the PATH, in the library \
                 search path or under {}",
                TREES.join(", ")
            )
        };
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "{what}.\n  Fix: give a module's file name (e.g. libc.so.6) or its full path; a library the \
                 program loads with dlopen from a directory of its own is named by its full path"
            ),
        ));
    }
    Ok(())
}

/// Whether module `name` names a file found where a module of the run can come from.
fn known(name: &str, exe: Option<&Path>, dirs: &[PathBuf]) -> bool {
    if name.contains('/') {
        return Path::new(name).is_file();
    }
    let is_exe = |p: &Path| p.file_name().is_some_and(|f| f == name);
    if let Some(e) = exe
        && (is_exe(e) || std::fs::canonicalize(e).is_ok_and(|c| is_exe(&c)))
    {
        return true;
    }
    dirs.iter().any(|d| d.join(name).exists())
        || TREES
            .iter()
            .any(|t| found_below(Path::new(t), name, TREE_DEPTH))
}

/// A file `name` in `dir` or below it, at most `depth` levels down (symbolic links to directories are not
/// followed).
fn found_below(dir: &Path, name: &str, depth: usize) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut subdirs = Vec::new();
    for e in entries.flatten() {
        if e.file_name() == name {
            return true;
        }
        if depth > 0 && e.file_type().is_ok_and(|t| t.is_dir()) {
            subdirs.push(e.path());
        }
    }
    subdirs.iter().any(|d| found_below(d, name, depth - 1))
}

/// The program `cmd` runs: itself when it has a `/`, else the first match on the `PATH`.
fn find_program(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    path_list("PATH")
        .into_iter()
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// The directories of a colon-separated list in the environment.
fn path_list(var: &str) -> Vec<PathBuf> {
    std::env::var_os(var)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The directories `/etc/ld.so.conf` names, through its `include` lines (one level of globs in
/// `/etc/ld.so.conf.d`).
fn ld_so_conf_dirs() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/ld.so.conf")];
    if let Ok(entries) = std::fs::read_dir("/etc/ld.so.conf.d") {
        files.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "conf")),
        );
    }
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.lines()
                .map(str::trim)
                .filter(|l| l.starts_with('/'))
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        })
        .collect()
}
