//! Helpers shared by ntprof's end-to-end tests (each test file is a crate of its own and says `mod common;`):
//! building the C test programs with gcc into a per-run directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory `ntprof-<tag>-<pid>` under cargo's temporary directory for integration tests, for the C
/// programs one test binary builds.
pub fn build_dir(tag: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ntprof-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run `gcc ARGS` in `cwd`; panic with its diagnostics when it fails.
#[allow(dead_code)] // Not every test file builds C programs itself.
pub fn gcc(args: &[&str], cwd: &Path) {
    let out = Command::new("gcc")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
