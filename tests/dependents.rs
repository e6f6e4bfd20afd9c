//! A crate that depends on ntprofile compiles only what the library needs: none of the `ntprof` CLI's
//! dependencies (symbolization, argument parsing, output formats).
//!
//! The test writes a new crate in a temporary directory that depends on this repository by path, with this
//! repository's `Cargo.lock` (same versions, so it resolves offline from what this build already downloaded),
//! and checks both its `cargo tree` and the log of its `cargo build -v`. The build uses a target directory of its
//! own under this one (`<target>/dependents-check`), so it never waits for the lock this `cargo test` holds, and
//! later runs find it fresh.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory this test binary was built into (`<target>/<profile>/deps/<exe>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// Crates that only the profiler may compile: every dependency `ntprof/Cargo.toml` (the CLI) and
/// `ntprof-engine/Cargo.toml` (its engine) name except the library, the engine and what the library itself
/// depends on, plus the symbolization and format crates those pull in.
fn cli_only_crates() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(repo().join("ntprof/Cargo.toml")).unwrap()
        + &std::fs::read_to_string(repo().join("ntprof-engine/Cargo.toml")).unwrap();
    let library = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let deps_of = |text: &str| -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        let mut in_deps = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                in_deps = line == "[dependencies]";
                continue;
            }
            if in_deps && !line.starts_with('#') {
                if let Some((name, _)) = line.split_once('=') {
                    names.insert(name.trim().to_string());
                }
            }
        }
        names
    };
    let library_deps = deps_of(&library);
    let mut cli: BTreeSet<String> = deps_of(&manifest)
        .into_iter()
        .filter(|n| n != "ntprofile" && n != "ntprof-engine" && !library_deps.contains(n))
        .collect();
    for always in [
        "addr2line",
        "gimli",
        "object",
        "clap",
        "clap_derive",
        "serde",
        "serde_derive",
        "serde_json",
        "cpp_demangle",
    ] {
        cli.insert(always.to_string());
    }
    cli
}

/// Crates of the terminal and the command line, which the engine must not compile: a program that embeds the
/// engine gets no argument parser, progress bar or terminal handling it did not ask for.
const TERMINAL_CRATES: &[&str] = &[
    "clap",
    "clap_builder",
    "clap_derive",
    "clap_lex",
    "indicatif",
    "console",
    "anstream",
    "anstyle",
    "terminal_size",
    "unicode-width",
    "crossterm",
    "termcolor",
];

#[test]
fn the_engine_compiles_no_terminal_crate() {
    let out = cargo(
        &repo(),
        &[
            "tree",
            "--offline",
            "-p",
            "ntprof-engine",
            "-e",
            "normal",
            "--prefix",
            "none",
        ],
        &target_dir().join("dependents-check"),
    );
    let in_tree: BTreeSet<&str> = out.lines().filter_map(crate_name).collect();
    assert!(
        in_tree.contains("ntprofile") && in_tree.contains("addr2line"),
        "the engine's tree lacks the library or the symbolizer: {in_tree:?}"
    );
    let terminal: Vec<&&str> = TERMINAL_CRATES
        .iter()
        .filter(|c| in_tree.contains(**c))
        .collect();
    assert!(
        terminal.is_empty(),
        "the engine depends on terminal crates {terminal:?}:\n{out}"
    );
    // And the CLI does depend on them: the check would see one.
    let cli = cargo(
        &repo(),
        &[
            "tree",
            "--offline",
            "-p",
            "ntprof",
            "-e",
            "normal",
            "--prefix",
            "none",
        ],
        &target_dir().join("dependents-check"),
    );
    let cli: BTreeSet<&str> = cli.lines().filter_map(crate_name).collect();
    assert!(cli.contains("clap") && cli.contains("indicatif"), "{cli:?}");
}

fn write_dependent(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"uses_ntprofile\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nntprofile = {{ path = {:?} }}\n\n[workspace]\n",
        repo().display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        "fn main() {\n    let n = ntprofile::query_interval(ntprofile::ProfileSource::Time);\n    \
         println!(\"ProfileTime interval: {n}\");\n}\n",
    )
    .unwrap();
    std::fs::copy(repo().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
}

fn cargo(dir: &Path, args: &[&str], target: &Path) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "cargo {args:?} failed ({}):\n{text}",
        out.status
    );
    text
}

/// The crate name of a `cargo tree --prefix none` line or of a `Compiling`/`Fresh` line of a build log.
fn crate_name(line: &str) -> Option<&str> {
    let line = line.trim();
    let line = line
        .strip_prefix("Compiling ")
        .or_else(|| line.strip_prefix("Fresh "))
        .unwrap_or(line);
    line.split_whitespace().next()
}

#[test]
fn a_dependent_crate_compiles_none_of_the_cli_dependencies() {
    let forbidden = cli_only_crates();
    println!("CLI-only crates: {forbidden:?}");
    let dir = std::env::temp_dir().join(format!("ntprofile-dependents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write_dependent(&dir);
    let target = target_dir().join("dependents-check");

    let tree = cargo(
        &dir,
        &[
            "tree",
            "--offline",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ],
        &target,
    );
    let in_tree: BTreeSet<&str> = tree.lines().filter_map(crate_name).collect();
    println!("cargo tree of a dependent crate: {in_tree:?}");
    assert!(in_tree.contains("ntprofile"), "{tree}");

    let log = cargo(&dir, &["build", "--release", "--offline", "-v"], &target);
    let built: BTreeSet<&str> = log
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("Compiling ") || l.starts_with("Fresh ")
        })
        .filter_map(crate_name)
        .collect();
    println!("cargo build -v of a dependent crate compiled: {built:?}");
    assert!(
        built.contains("ntprofile") && built.contains("uses_ntprofile"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let in_tree_bad: Vec<&&str> = in_tree.iter().filter(|n| forbidden.contains(**n)).collect();
    let built_bad: Vec<&&str> = built.iter().filter(|n| forbidden.contains(**n)).collect();
    assert!(
        in_tree_bad.is_empty() && built_bad.is_empty(),
        "a crate depending on ntprofile gets the CLI's dependencies: in cargo tree {in_tree_bad:?}, \
         compiled {built_bad:?}"
    );
}
