//! Helpers for the tests that build and run C programs against the library (`c_abi`, `c_package`): where the
//! libraries of this build are, a scratch directory for build outputs, and running a tool to completion.
//!
//! Where the libraries are: cargo builds every crate type of the library for an integration test, and writes the
//! `cdylib` as `deps/libntprofile.so` and the `staticlib` as `deps/libntprofile.a` next to the test binary
//! (`target/<profile>/deps/`, or `target/<triple>/<profile>/deps/` with `--target`). They are found from
//! `std::env::current_exe()` whatever `CARGO_TARGET_DIR` and the profile are, and they are the ones built by the
//! same `cargo test` run. `NTPROFILE_LIB_DIR` overrides.

#![allow(dead_code)] // each test crate that includes this module uses only some of it

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding every one of `files` (`libntprofile.so`, `libntprofile.a`): `NTPROFILE_LIB_DIR`, else
/// the `deps/` folder this test binary runs from, else its parent (the profile directory).
///
/// A cdylib's or staticlib's file name carries no hash, so `deps/` holds the ones of this `cargo test` run.
/// Cargo copies them up to `target/<profile>/` only when the library itself is a requested target
/// (`cargo build`), so on a clean `cargo test` the profile directory has none; and when it has them, the copies
/// in `deps/` are the newer or the same.
pub fn lib_dir(files: &[&str]) -> PathBuf {
    if let Some(dir) = std::env::var_os("NTPROFILE_LIB_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("the test binary has a directory");
    let candidates: Vec<&Path> = [Some(deps), deps.parent()].into_iter().flatten().collect();
    candidates
        .iter()
        .find(|dir| files.iter().all(|f| dir.join(f).is_file()))
        .map(|dir| dir.to_path_buf())
        .unwrap_or_else(|| {
            panic!(
                "{files:?}: not all in any of {candidates:?}: cargo should have built the library's cdylib and \
                 staticlib for this test (set NTPROFILE_LIB_DIR to the directory holding them to override)"
            )
        })
}

/// A scratch directory for build outputs, named after the test crate and `tag`, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// Create (afresh) the scratch directory `ntprofile-<test crate>-<pid>-<tag>` under the temporary directory.
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "ntprofile-{}-{}-{tag}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch directory");
        Scratch(dir)
    }

    /// The scratch directory itself.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// The path of `name` inside the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command as a shell-like line, for messages.
pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run a tool to completion; panic with its output when it cannot start or fails.
pub fn run_tool(cmd: &mut Command) -> Output {
    let line = show(cmd);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{line}`: {e} (is it installed?)"));
    assert!(
        out.status.success(),
        "`{line}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
