//! The C package as a packager installs it: `pkg/install.sh` puts the header, the shared library (with its
//! SONAME and symlinks), the static library and `ntprofile.pc` under a prefix; the shared library exports only
//! the API; and a C program builds with `pkg-config` against the shared library and, with `--static`, against the
//! static one, and both count samples.
//!
//! The libraries are the ones this `cargo test` run built: for an integration test cargo compiles the library
//! with every crate type, writing `deps/libntprofile.so` and `deps/libntprofile.a` next to this test binary. The
//! install script takes them with `--artifacts` rather than running a `cargo build` of its own (which would wait
//! for the target directory's lock that this `cargo test` holds). `NTPROFILE_LIB_DIR` overrides the directory.
//!
//! Needs `gcc`, `pkg-config`, `objdump`, `nm` and `readelf` (binutils); `.ci/run` installs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "common/cbuild.rs"]
mod cbuild;
use cbuild::{Scratch, lib_dir, repo, run_tool, show};

/// The directory holding the `libntprofile.so` and `libntprofile.a` of this build.
fn artifacts() -> PathBuf {
    lib_dir(&["libntprofile.so", "libntprofile.a"])
}

/// Run a tool to completion, echoing its command line; panic with its output when it cannot start or fails.
fn run(cmd: &mut Command) -> Output {
    println!("$ {}", show(cmd));
    run_tool(cmd)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `pkg/install.sh --prefix PREFIX --artifacts <this build> [extra]`.
fn install(prefix: &Path, extra: &[&str]) {
    let out = run(Command::new("bash")
        .arg(repo().join("pkg/install.sh"))
        .arg("--prefix")
        .arg(prefix)
        .arg("--artifacts")
        .arg(artifacts())
        .args(extra));
    print!("{}", stdout(&out));
}

/// `pkg-config ARGS ntprofile` with the prefix's `lib/pkgconfig` as the only search path, split into words.
fn pkg_config(prefix: &Path, args: &[&str]) -> Vec<String> {
    let out = run(Command::new("pkg-config")
        .env("PKG_CONFIG_LIBDIR", prefix.join("lib/pkgconfig"))
        .env_remove("PKG_CONFIG_PATH")
        .args(args)
        .arg("ntprofile"));
    let words: Vec<String> = stdout(&out)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    println!("  -> {words:?}");
    words
}

/// Build `ffi/example_hot.c` with the given compiler and linker words.
fn build_example(exe: &Path, flags: &[String]) {
    run(Command::new("gcc")
        .args([
            "-O2",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
        ])
        .arg(repo().join("ffi/example_hot.c"))
        .arg("-o")
        .arg(exe)
        .args(flags));
}

/// The shared libraries a program records as `NEEDED`.
fn needed(exe: &Path) -> Vec<String> {
    let out = run(Command::new("readelf").arg("-d").arg(exe));
    stdout(&out)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
        .collect()
}

/// Run the example and return the number of samples it counted (its statistics line).
fn run_example(exe: &Path, ld_library_path: Option<&Path>) -> u64 {
    let mut cmd = Command::new(exe);
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(dir) = ld_library_path {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    let out = run(&mut cmd);
    let text = stdout(&out);
    println!("{text}");
    assert!(
        text.contains("example_hot: ok"),
        "example_hot did not pass:\n{text}"
    );
    let counted = text
        .lines()
        .find_map(|l| l.strip_prefix("statistics: counted "))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no statistics line in:\n{text}"));
    assert!(counted > 0, "no samples counted:\n{text}");
    counted
}

#[test]
fn install_layout_soname_exports_and_pkg_config_links() {
    let scratch = Scratch::new("full");
    let prefix = scratch.path("prefix");
    install(&prefix, &[]);

    // The layout.
    let version = env!("CARGO_PKG_VERSION");
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let lib = prefix.join("lib");
    let real = lib.join(format!("libntprofile.so.{version}"));
    for file in [
        prefix.join("include/ntprofile.h"),
        real.clone(),
        lib.join("libntprofile.a"),
        lib.join("pkgconfig/ntprofile.pc"),
    ] {
        assert!(file.is_file(), "{} was not installed", file.display());
    }
    let link = |name: &str| std::fs::read_link(lib.join(name)).ok();
    assert_eq!(
        link(&format!("libntprofile.so.{major}")),
        Some(PathBuf::from(format!("libntprofile.so.{version}"))),
        "libntprofile.so.{major} must be a symlink to libntprofile.so.{version}"
    );
    assert_eq!(
        link("libntprofile.so"),
        Some(PathBuf::from(format!("libntprofile.so.{major}"))),
        "libntprofile.so must be a symlink to libntprofile.so.{major}"
    );
    assert_eq!(
        std::fs::read(prefix.join("include/ntprofile.h")).unwrap(),
        std::fs::read(repo().join("include/ntprofile.h")).unwrap(),
        "the installed header differs from include/ntprofile.h"
    );

    // SONAME.
    let dynamic = stdout(&run(Command::new("objdump").arg("-p").arg(&real)));
    let soname = dynamic
        .lines()
        .find_map(|l| l.trim().strip_prefix("SONAME"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{} has no SONAME:\n{dynamic}", real.display()));
    println!("SONAME {soname}");
    assert_eq!(soname, format!("libntprofile.so.{major}"));

    // Only the API's symbols are exported.
    let symbols = stdout(&run(Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&real)));
    let names: Vec<&str> = symbols
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    println!("{} exported symbols: {names:?}", names.len());
    let foreign: Vec<&&str> = names
        .iter()
        .filter(|n| !(n.starts_with("Nt") || n.starts_with("Zw") || n.starts_with("Rtl")))
        .collect();
    assert!(
        foreign.is_empty(),
        "libntprofile.so exports symbols outside the API: {foreign:?}"
    );
    for expected in [
        "NtCreateProfile",
        "NtCreateProfileEx",
        "NtStartProfile",
        "NtStopProfile",
        "NtClose",
        "ZwCreateProfile",
        "NtprofileQueryStatistics",
        "RtlNtStatusToDosError",
    ] {
        assert!(names.contains(&expected), "{expected} is not exported");
    }

    // pkg-config knows the package.
    assert_eq!(pkg_config(&prefix, &["--modversion"]), [version]);

    // A C program against the shared library: it records the SONAME and runs from the prefix.
    let mut flags = pkg_config(&prefix, &["--cflags", "--libs"]);
    assert!(flags.iter().any(|w| w == "-lntprofile"), "{flags:?}");
    flags.push(format!("-Wl,-rpath,{}", lib.display()));
    let exe = scratch.path("example_hot_shared");
    build_example(&exe, &flags);
    let needs = needed(&exe);
    println!("NEEDED {needs:?}");
    assert!(
        needs.contains(&format!("libntprofile.so.{major}")),
        "the program does not record the SONAME: {needs:?}"
    );
    let counted = run_example(&exe, None);
    println!("shared: {counted} samples counted");
}

#[test]
fn static_library_links_with_pkg_config_static() {
    let scratch = Scratch::new("static");
    let prefix = scratch.path("prefix");
    // Only the static library, as cargo-c's `--library-type staticlib`: `-lntprofile` can only resolve to it.
    install(&prefix, &["--library-type", "staticlib"]);
    let lib = prefix.join("lib");
    assert!(lib.join("libntprofile.a").is_file());
    assert!(
        !lib.join("libntprofile.so").exists(),
        "--library-type staticlib installed the shared library"
    );

    let flags = pkg_config(&prefix, &["--static", "--cflags", "--libs"]);
    for private in ["-lpthread", "-ldl", "-lm"] {
        assert!(
            flags.iter().any(|w| w == private),
            "Libs.private lacks {private}: {flags:?}"
        );
    }
    let exe = scratch.path("example_hot_static");
    build_example(&exe, &flags);
    let needs = needed(&exe);
    println!("NEEDED {needs:?}");
    assert!(
        !needs.iter().any(|n| n.starts_with("libntprofile")),
        "the static program still needs a shared libntprofile: {needs:?}"
    );
    let symbols = stdout(&run(Command::new("nm").arg("--defined-only").arg(&exe)));
    assert!(
        symbols.lines().any(|l| l.ends_with(" T NtCreateProfile")),
        "NtCreateProfile is not linked into the program"
    );
    // No LD_LIBRARY_PATH, no rpath: nothing to find at run time.
    let counted = run_example(&exe, None);
    println!("static: {counted} samples counted");
}

/// With both kinds installed (the default), `pkg-config --static` still links the static library: the program
/// needs no shared libntprofile (nor any shared library: `--static` gives a static program).
#[test]
fn pkg_config_static_links_the_archive_when_both_kinds_are_installed() {
    let scratch = Scratch::new("both");
    let prefix = scratch.path("prefix");
    install(&prefix, &[]);
    let lib = prefix.join("lib");
    assert!(lib.join("libntprofile.a").is_file() && lib.join("libntprofile.so").exists());
    let flags = pkg_config(&prefix, &["--static", "--cflags", "--libs"]);
    let exe = scratch.path("example_hot_both_static");
    build_example(&exe, &flags);
    let needs = needed(&exe);
    println!("NEEDED {needs:?}");
    assert!(
        !needs.iter().any(|n| n.starts_with("libntprofile")),
        "pkg-config --static linked the shared libntprofile: {needs:?}"
    );
    // Run where the shared library could be found: the program must not use it.
    let counted = run_example(&exe, Some(&lib));
    println!("static with both installed: {counted} samples counted");
}
