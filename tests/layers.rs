//! The layers of `src/` import only downward, and no two modules import each other.
//!
//! Every `crate::` path of every file under `src/` (comments aside) names a top-level module; each module has a
//! layer in [`LAYERS`]. A file may name modules of its own layer or below, never above, and the graph of
//! module-to-module imports has no cycle. A module missing from the table fails the test: a new module says
//! where it sits. Inside a module folder (`src/engine/`, `src/perf/`, `src/ffi/`), the files other than
//! `mod.rs` name each other (`super::x`, `crate::m::x`) without a cycle either.
//!
//! The profiler engine (`ntprof-engine/src/`) is held to the same rule with its own table, [`ENGINE_LAYERS`]:
//! the session uses the tree, the tree uses symbols and unwinding, the writers read the report alone.
//!
//! And every file of `src/`, `ntprof-engine/src/` and `ntprof/src/` stays a room a newcomer reads in one sitting:
//! at most [`MAX_LINES`] lines, opening with a doc line (`//!`) that says what it holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first. `perf` is the only kernel-facing code and knows no NT type; `status`, `buckets`
/// (and the Rust error type over `status`) are pure; `source`, `affinity`, `target` (and `modules`, the
/// module listing of a process) describe what is sampled; the engine runs streams and the consumer; `profile`
/// is the object both APIs share; `handles` is the C API's handle table; `fork` knows the engine and the
/// handles; `api` and `ffi` are the two APIs on top, with `sampler` (the sampler extension, which takes an
/// `api::Process` and is exported by `ffi`; the handle table holds its C object type-erased).
const LAYERS: &[&[&str]] = &[
    &["perf"],
    &[
        "status",
        "status_message",
        "status_win32",
        "buckets",
        "error",
    ],
    &["source", "affinity", "target", "modules"],
    &["engine"],
    &["profile"],
    &["handles"],
    &["fork"],
    &["api", "ffi", "fuzzing", "sampler"],
];

/// The layers of the profiler engine (`ntprof-engine/src/`), bottom first. The data every layer shares (the
/// report model, the options, progress, file reading, off-CPU waits); names (`symbols`); call stacks (`unwind`,
/// over the symbols' ELF reading); the model of the processes and their time-ordered records (`tree`); the
/// off-CPU watcher (a source beside the samplers); the report built from the tree (`collect`) and the writers,
/// which read the report alone (`output`); the recording session on top (`record`), and beside it the comparison of
/// two profiles (`diff`, which reads them with the writers' formats).
const ENGINE_LAYERS: &[&[&str]] = &[
    &["report", "options", "progress", "files", "waits"],
    &["symbols"],
    &["unwind"],
    &["tree"],
    &["offcpu"],
    &["collect", "output"],
    &["record", "diff"],
];

/// The source folders the length and doc-line rule covers: the library, the profiler engine, the CLI.
const SOURCE_DIRS: &[&str] = &["src", "ntprof-engine/src", "ntprof/src"];

/// The most lines a file under `src/` may have. Files are meant to stay near 400; past 500, split the file by
/// topic (a folder of files beside it, as `src/modules/` or `src/source/`).
const MAX_LINES: usize = 500;

fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for `lib.rs`, the root that only declares).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src/");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib") => None,
        Some(stem) => Some(stem.to_string()),
        None => Some(first),
    }
}

/// The code of a file without its comments (`//` to the end of the line; the sources use no block comments).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules named by `crate::` paths in `code`, including grouped imports such as
/// `use crate::{a, b::{c, d}}` (whose first segments are `a` and `b`).
fn crate_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let ident = |at: usize| -> String {
        code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::") {
        let at = from + i;
        from = at + "crate::".len();
        // `$crate::` (macros) names the crate from outside; `foo_crate::` is another path.
        let before = at.checked_sub(1).map(|b| bytes[b]);
        if matches!(before, Some(b'$'))
            || before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            continue;
        }
        let rest = &code[from..];
        if rest.starts_with('{') {
            // A group: every segment that starts right after `{` or `,` at depth 1.
            let mut depth = 0;
            let mut expect = true;
            for (k, c) in rest.char_indices() {
                match c {
                    '{' => {
                        depth += 1;
                        expect = depth == 1;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expect = true,
                    c if c.is_whitespace() => {}
                    _ => {
                        if expect && depth == 1 {
                            let name = ident(from + k);
                            if !name.is_empty() && name != "self" {
                                found.insert(name);
                            }
                        }
                        expect = false;
                    }
                }
            }
        } else {
            let name = ident(from);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// Every (importing module, imported module, file) of the source folder `dir` (`src`), across modules.
fn imports(dir: &str) -> Vec<(String, String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut edges = Vec::new();
    for file in files {
        let Some(from) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source file");
        for to in crate_modules(&code(&text)) {
            if to != from {
                let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
                edges.push((from.clone(), to, rel));
            }
        }
    }
    edges
}

/// A cycle of the module graph, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|n| n == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(c) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// The first segments of every `prefix` path in `code` (`super::` or `crate::engine::`), grouped ones included.
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    // Reuse the `crate::` scanner on a copy where the prefix reads `crate::`.
    let marker = "\u{1}";
    let renamed = code
        .replace("crate::", marker)
        .replace(prefix, "crate::")
        .replace(marker, "#::");
    crate_modules(&renamed)
}

#[test]
fn files_inside_a_module_form_no_cycle() {
    let checked = folders_without_cycles("src");
    assert!(checked >= 3, "expected the engine, perf and ffi folders");
    let checked = folders_without_cycles("ntprof-engine/src");
    assert!(
        checked >= 8,
        "expected the profiler engine's record, tree, symbols, ... folders"
    );
}

/// Check that the files of each module folder of `folder` import each other without a cycle; how many folders.
fn folders_without_cycles(folder: &str) -> usize {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut checked = 0;
    for dir in std::fs::read_dir(&src).expect("read src/") {
        let dir = dir.expect("dir entry").path();
        if !dir.is_dir() {
            continue;
        }
        let module = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8")
            .to_string();
        let files: BTreeSet<String> = std::fs::read_dir(&dir)
            .expect("read module dir")
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".rs").map(str::to_string)
            })
            .filter(|n| n != "mod")
            .collect();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let text = std::fs::read_to_string(dir.join(format!("{file}.rs"))).expect("read file");
            let code = code(&text);
            let mut named = paths_after(&code, "super::");
            named.extend(paths_after(&code, &format!("crate::{module}::")));
            let siblings = named.into_iter().filter(|n| n != file && files.contains(n));
            graph.entry(file.clone()).or_default().extend(siblings);
        }
        println!("{folder}/{module}/: {graph:?}");
        if let Some(cycle) = find_cycle(&graph) {
            panic!("{folder}/{module}/: import cycle {}", cycle.join(" -> "));
        }
        checked += 1;
    }
    checked
}

#[test]
fn the_parser_sees_plain_grouped_and_nested_paths() {
    let code = code(
        "use crate::perf::sys::{self, Tid};\nuse crate::{engine::{self, X}, status::NtStatus};\n\
         let x = crate::target::may_sample_kernel();\n$crate::section!();\n// crate::ffi in a comment\n",
    );
    let found: Vec<String> = crate_modules(&code).into_iter().collect();
    assert_eq!(found, ["engine", "perf", "status", "target"]);
}

#[test]
fn every_import_points_down_and_modules_form_no_cycle() {
    let edges = imports("src");
    assert!(
        edges.iter().any(|(f, t, _)| f == "engine" && t == "perf"),
        "the scan found no import of perf by the engine: it reads nothing"
    );
    assert_layered(LAYERS, &edges);
}

#[test]
fn the_profiler_engine_imports_point_down_and_form_no_cycle() {
    let edges = imports("ntprof-engine/src");
    assert!(
        edges.iter().any(|(f, t, _)| f == "record" && t == "tree")
            && edges.iter().any(|(f, t, _)| f == "tree" && t == "unwind"),
        "the scan found no import of the tree by the session, or of unwinding by the tree: it reads nothing"
    );
    assert_layered(ENGINE_LAYERS, &edges);
}

#[test]
fn an_upward_import_or_a_pair_importing_each_other_is_caught() {
    let edge = |f: &str, t: &str| {
        (
            f.to_string(),
            t.to_string(),
            PathBuf::from(format!("src/{f}.rs")),
        )
    };
    // The writers reading the session: upward.
    let upward = layering_problems(ENGINE_LAYERS, &[edge("output", "record")]);
    assert_eq!(
        upward.len(),
        1,
        "output -> record must be refused: {upward:?}"
    );
    assert!(upward[0].contains("upward import"), "{upward:?}");
    // Two modules of one layer importing each other (as the tree and the off-CPU watcher once did): a cycle.
    let pair = layering_problems(
        ENGINE_LAYERS,
        &[edge("files", "waits"), edge("waits", "files")],
    );
    assert_eq!(pair.len(), 1, "files <-> waits must be refused: {pair:?}");
    assert!(pair[0].starts_with("import cycle"), "{pair:?}");
    let down = layering_problems(
        ENGINE_LAYERS,
        &[edge("record", "tree"), edge("tree", "symbols")],
    );
    assert!(down.is_empty(), "{down:?}");
}

/// Every upward import, module without a layer, and cycle of `edges` under `layers`.
fn layering_problems(layers: &[&[&str]], edges: &[(String, String, PathBuf)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to, file) in edges {
        graph.entry(from.clone()).or_default().insert(to.clone());
        match (layer_of(layers, from), layer_of(layers, to)) {
            (None, _) => problems.push(format!(
                "{}: module `{from}` has no layer: add it to its table in tests/layers.rs",
                file.display()
            )),
            (_, None) => problems.push(format!(
                "{}: imports `crate::{to}`, a module with no layer: add it to its table in tests/layers.rs",
                file.display()
            )),
            (Some(a), Some(b)) if b > a => problems.push(format!(
                "{}: `{from}` (layer {a}) imports `crate::{to}` (layer {b}): an upward import",
                file.display()
            )),
            _ => {}
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        problems.push(format!("import cycle: {}", cycle.join(" -> ")));
    }
    println!("module imports:");
    for (from, to) in &graph {
        println!(
            "  {from} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    problems
}

/// Fail with every problem of `edges` under `layers`.
fn assert_layered(layers: &[&[&str]], edges: &[(String, String, PathBuf)]) {
    let problems = layering_problems(layers, edges);
    assert!(
        problems.is_empty(),
        "layering broken:\n{}",
        problems.join("\n")
    );
}

/// The files of `src/` longer than `max` lines, with their length.
fn too_long(src: &Path, max: usize) -> Vec<(PathBuf, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(&file)
                .expect("read source file")
                .lines()
                .count();
            (lines > max).then_some((file, lines))
        })
        .collect()
}

#[test]
fn every_file_is_short_and_says_what_it_holds() {
    for dir in SOURCE_DIRS {
        short_and_documented(dir);
    }
}

/// Check the files of the source folder `dir`: at most [`MAX_LINES`] lines, a `//!` first line.
fn short_and_documented(dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 10,
        "the scan found only {} files in {dir}/",
        files.len()
    );
    let long: Vec<String> = too_long(&src, MAX_LINES)
        .into_iter()
        .map(|(file, lines)| {
            let rel = file
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(&file);
            format!("{}: {lines} lines", rel.display())
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines: split each by topic into files of about 400 lines\n{}",
        long.join("\n")
    );
    let undocumented: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).expect("read source file");
            !text.lines().next().is_some_and(|l| l.starts_with("//! "))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        undocumented.is_empty(),
        "files whose first line is not a `//!` doc line saying what they hold:\n{}",
        undocumented.join("\n")
    );
}

#[test]
fn the_length_check_sees_a_file_one_line_too_long() {
    let dir = std::env::temp_dir().join(format!("ntprofile-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).expect("scratch dir");
    let lines = |n: usize| "//! x\n".repeat(n);
    std::fs::write(dir.join("fits.rs"), lines(MAX_LINES)).expect("write");
    std::fs::write(dir.join("sub").join("long.rs"), lines(MAX_LINES + 1)).expect("write");
    let found = too_long(&dir, MAX_LINES);
    std::fs::remove_dir_all(&dir).expect("remove scratch dir");
    assert_eq!(
        found,
        [(dir.join("sub").join("long.rs"), MAX_LINES + 1)],
        "a {}-line file must be caught, a {MAX_LINES}-line one must pass",
        MAX_LINES + 1
    );
}
