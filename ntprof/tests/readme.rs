//! The README against the code: its sample report has the structure, line numbers, functions and modules of a
//! real run of the same command; the prose about those lines names the lines the table shows; the library's
//! dependency list is Cargo.toml's; the C examples come after what makes them run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
}

/// The first ```text block after the Quick start's command.
fn sample_block(readme: &str) -> Vec<String> {
    let start = readme
        .find("## Quick start")
        .expect("a Quick start section");
    let rest = &readme[start..];
    let open = rest.find("```text\n").expect("a sample output block") + "```text\n".len();
    let end = rest[open..].find("```").unwrap();
    rest[open..open + end].lines().map(str::to_string).collect()
}

/// The demo program, built beside ntprof (`cargo test` builds the demo's test harness, not its program).
fn demo() -> PathBuf {
    let demo = Path::new(NTPROF).with_file_name("ntprof-demo");
    let profile_dir = Path::new(NTPROF).parent().unwrap();
    let mut build = Command::new(env!("CARGO"));
    build
        .args([
            "build",
            "-p",
            "ntprof-demo",
            "--bin",
            "ntprof-demo",
            "--target-dir",
        ])
        .arg(profile_dir.parent().unwrap())
        .current_dir(repo());
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    assert!(
        build.status().unwrap().success(),
        "cargo build -p ntprof-demo failed"
    );
    demo
}

/// The rows of the table whose heading line starts with `heading` (up to the first blank line), each split
/// into words.
fn table(lines: &[String], heading: &str) -> Vec<Vec<String>> {
    let Some(at) = lines
        .iter()
        .position(|l| l.trim_start().starts_with(heading))
    else {
        panic!("no table '{heading}' in:\n{}", lines.join("\n"));
    };
    lines[at + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The README's sample is the output of its command, as a run of it gives today: the same sections in the
/// same order, and each function, module and source line it shows is one the real run shows, with the source
/// text of that line of the file.
#[test]
fn readme_sample_output_matches_a_real_run() {
    let readme = readme();
    let command = "target/release/ntprof record --expect demo_exe_hot=50 --expect demo_lib_hot=30 \
                   --expect demo_plugin_hot=20 -- target/release/ntprof-demo";
    assert!(
        readme.contains(command),
        "the README's command changed: update this test"
    );
    let demo = demo();
    // As the README runs it, without a terminal (as in CI): the report goes to stderr then, after the demo's own
    // lines, as the README's sample shows them; stdout stays the demo's (empty).
    let out = common::run_raw(
        Command::new(NTPROF).args([
            "record",
            "--expect",
            "demo_exe_hot=50",
            "--expect",
            "demo_lib_hot=30",
            "--expect",
            "demo_plugin_hot=20",
            "--",
            demo.to_str().unwrap(),
        ]),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let real: Vec<String> = String::from_utf8(out.stderr)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let sample = sample_block(&readme);
    // The sections, in order.
    let headings = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| {
                let t = l.trim_start();
                [
                    "ntprof record:",
                    "1 process",
                    "== Timer",
                    "Module ",
                    "Samples   Share  Function",
                    "Samples   Share  Line",
                    "Designed against measured",
                    "largest deviation",
                ]
                .iter()
                .find(|h| t.starts_with(**h))
                .map(|h| h.to_string())
            })
            .collect()
    };
    assert_eq!(
        headings(&sample),
        headings(&real),
        "the sections of the README's sample and of a real run"
    );
    // Functions and modules.
    let real_functions = table(&real, "Samples   Share  Function");
    for row in table(&sample, "Samples   Share  Function") {
        assert!(
            real_functions
                .iter()
                .any(|r| r[2] == row[2] && r[3] == row[3]),
            "the README shows function {} in {}, which a real run does not",
            row[2],
            row[3]
        );
    }
    let real_modules = table(&real, "Module ");
    for row in table(&sample, "Module ")
        .iter()
        .filter(|r| !r[0].starts_with('('))
    {
        assert!(
            real_modules.iter().any(|r| r[0] == row[0]),
            "module {} is not in a real run",
            row[0]
        );
    }
    // Source lines: each README row is a real one (file:line, function, module) and shows that line's text.
    let hot_h = std::fs::read_to_string(repo().join("ntprof-demo/csrc/hot.h")).unwrap();
    let real_lines = table(&real, "Samples   Share  Line");
    let mut shown_lines = Vec::new();
    for row in table(&sample, "Samples   Share  Line") {
        assert!(
            real_lines.iter().any(|r| r[2..5] == row[2..5]),
            "the README shows {} {} {}, which a real run does not show:\n{}",
            row[2],
            row[3],
            row[4],
            real.join("\n")
        );
        if let Some(n) = row[2].strip_prefix("hot.h:") {
            let n: usize = n.parse().unwrap();
            let text = row[5..].join(" ");
            let actual = hot_h.lines().nth(n - 1).unwrap();
            assert!(
                actual.contains(&text),
                "hot.h:{n} is '{actual}', the README shows '{text}'"
            );
            if !shown_lines.contains(&n) {
                shown_lines.push(n);
            }
        }
    }
    // The prose after the sample names the lines the table shows ("on the loop's lines A and B").
    let prose_at = readme
        .find("on the loop's lines ")
        .expect("the sentence about the loop's lines");
    let prose = &readme[prose_at + "on the loop's lines ".len()..];
    let named: Vec<usize> = prose
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(shown_lines.len())
        .map(|w| w.parse().unwrap())
        .collect();
    shown_lines.sort_unstable();
    assert_eq!(
        named, shown_lines,
        "the prose names other lines than the table shows"
    );
    // The multiply the prose names is the multiply of hot.h.
    let multiply = hot_h.lines().position(|l| l.contains("* k;")).unwrap() + 1;
    assert!(
        readme.contains(&format!("slow multiply of `hot.h:{multiply}`")),
        "the prose does not name hot.h:{multiply} as the multiply"
    );
}

/// "The library depends only on A, B, ... and Z": Cargo.toml's [dependencies], no more, no fewer.
#[test]
fn readme_lists_the_library_dependencies_of_cargo_toml() {
    let readme = readme();
    let at = readme
        .find("The library depends only on ")
        .expect("the dependency sentence");
    let rest = &readme[at + "The library depends only on ".len()..];
    let sentence = &rest[..rest.find(';').unwrap()];
    let mut listed: Vec<String> = sentence
        .replace('\n', " ")
        .replace(" and ", ", ")
        .split(',')
        .map(|w| w.trim().trim_matches('`').to_string())
        .filter(|w| !w.is_empty())
        .collect();
    let toml = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let deps = &toml[toml.find("\n[dependencies]\n").unwrap() + 16..];
    let deps = &deps[..deps.find("\n[").unwrap()];
    let mut names: Vec<String> = deps
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| l.split('=').next().unwrap().trim().to_string())
        .collect();
    listed.sort();
    names.sort();
    assert_eq!(
        listed, names,
        "README's list against Cargo.toml's [dependencies]"
    );
}

/// The C examples run as written: the first `pkg-config` example comes after what lets the program find
/// `libntprofile.so.0` at run time (the loader's cache refreshed with `ldconfig`, or an rpath).
#[test]
fn readme_c_examples_come_after_what_makes_them_run() {
    let readme = readme();
    let first_example = readme
        .find("$(pkg-config --cflags --libs ntprofile)")
        .expect("a pkg-config example");
    let before = &readme[..first_example];
    assert!(
        before.contains("ldconfig") && before.contains("pkg/install.sh"),
        "the first pkg-config example comes before the install and ldconfig steps"
    );
}
