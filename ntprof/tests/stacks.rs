//! Call stacks end to end (`ntprof record -g`, `--call-graph dwarf`), on programs built here:
//!
//! - the designed call tree (`tests/stacks/calltree.c`): `leaf` called by `caller_a` for 60 % and by `caller_b`
//!   for 40 % of its work, and a `qsort` whose comparator does real work. With frame pointers (`-g`, built with
//!   `-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer`) and with DWARF unwinding (`--call-graph dwarf`, built
//!   with `-fomit-frame-pointer`), Google's pprof (`-top -cum`) reads the callers' inclusive shares split 60/40
//!   within 3 σ; with DWARF, `main` holds more than 90 % and `sort_caller` includes the comparator reached
//!   through libc's `qsort`;
//! - the flame graph of that program: `leaf` twice, once over each caller, the comparator over `sort_caller`,
//!   the command at the root; rendered to PNG;
//! - a Rust and a C++ program (generics, trait objects, templates, inlined `std::sort`) give demangled stacks;
//! - bad `--call-graph` values are usage errors naming the fix.
//!
//! pprof and rsvg-convert are found as the format tests find them (`.ci/run` installs them); outside CI a missing
//! tool skips that part with a printed reason.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{call_tree_report, on_path, pprof, run_bounded, run_ok, tool};

use serde_json::Value;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
const LIMIT: Duration = Duration::from_secs(120);
/// CPU seconds each test program runs.
const SECONDS: &str = "1.5";

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| common::build_dir("stacks"))
}

fn src(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/stacks")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// The designed call tree, with frame pointers (`fp`) or without (`nofp`).
fn calltree(frame_pointers: bool) -> PathBuf {
    static FP: OnceLock<PathBuf> = OnceLock::new();
    static NOFP: OnceLock<PathBuf> = OnceLock::new();
    let (cell, name, flags): (_, _, &[&str]) = if frame_pointers {
        (
            &FP,
            "calltree_fp",
            &["-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"],
        )
    } else {
        (&NOFP, "calltree_nofp", &["-fomit-frame-pointer"])
    };
    cell.get_or_init(|| {
        let mut args = vec!["-O2", "-g"];
        args.extend_from_slice(flags);
        let s = src("calltree.c");
        args.extend_from_slice(&["-o", name, &s]);
        common::gcc(&args, dir());
        dir().join(name)
    })
    .clone()
}

/// A recorded run: its JSON, its folded stacks, and the path of its pprof profile and flame graph.
struct Recorded {
    json: Value,
    folded: String,
    pprof: PathBuf,
    svg: PathBuf,
    text: String,
}

fn record(tag: &str, options: &[&str], program: &Path, args: &[&str]) -> Recorded {
    let base = dir().join(tag);
    let (json, pb, svg) = (
        base.with_extension("json"),
        base.with_extension("pb.gz"),
        base.with_extension("svg"),
    );
    let folded = base.with_extension("folded");
    let mut cmd = Command::new(NTPROF);
    cmd.arg("record")
        .arg("-q")
        .args(options)
        .arg("--json")
        .arg(&json)
        .arg("--pprof")
        .arg(&pb)
        .arg("--flamegraph")
        .arg(&svg)
        .arg("--format")
        .arg("folded")
        .arg("-o")
        .arg(&folded)
        .arg("--")
        .arg(program)
        .args(args);
    run_ok(cmd, LIMIT);
    // The text report of the same run, with the call tree.
    let text = call_tree_report(&json, LIMIT);
    Recorded {
        json: serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap(),
        folded: std::fs::read_to_string(&folded).unwrap(),
        pprof: pb,
        svg,
        text,
    }
}

/// `pprof -top -cum` rows: (cum samples, name), with the sample count as the value.
fn pprof_cum(pprof: &Path, profile: &Path) -> Option<Vec<(f64, String)>> {
    let out = run_bounded(
        Command::new(pprof)
            .args(["-top", "-cum", "-nodecount=200", "-sample_index=samples"])
            .arg(profile),
        LIMIT,
    );
    assert!(
        out.status.success(),
        "pprof: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    Some(
        text.lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.len() < 6 || !w[4].ends_with('%') {
                    return None;
                }
                Some((w[3].parse().ok()?, w[5..].join(" ")))
            })
            .collect(),
    )
}

fn cum(rows: &[(f64, String)], name: &str) -> f64 {
    rows.iter().find(|(_, n)| n == name).map_or(0.0, |r| r.0)
}

fn total(json: &Value) -> f64 {
    let s = &json["sources"][0]["stats"];
    (s["counted"].as_u64().unwrap() + s["outside"].as_u64().unwrap()) as f64
}

/// caller_a's part of the two callers' inclusive samples is 60 % within 3 σ (binomial, n = their sum).
fn check_split(rows: &[(f64, String)]) {
    let (a, b) = (cum(rows, "caller_a"), cum(rows, "caller_b"));
    let n = a + b;
    assert!(n >= 200.0, "too few samples under the callers: {a} + {b}");
    let share = a / n;
    let sigma = (0.6 * 0.4 / n).sqrt();
    println!(
        "caller_a {a}, caller_b {b}: caller_a's share {:.1} % (designed 60 %, σ {:.2} points, {:.2} σ off)",
        share * 100.0,
        sigma * 100.0,
        (share - 0.6).abs() / sigma
    );
    assert!(
        (share - 0.6).abs() <= 3.0 * sigma,
        "caller_a {a}, caller_b {b}: {share}"
    );
}

#[test]
fn frame_pointer_stacks_split_the_leaf_60_40_between_its_callers() {
    let r = record("fp", &["-g"], &calltree(true), &[SECONDS]);
    assert_eq!(r.json["run"]["call_graph"], "fp");
    assert!(
        !r.json["sources"][0]["stacks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let Some(pprof) = pprof() else { return };
    let rows = pprof_cum(&pprof, &r.pprof).unwrap();
    check_split(&rows);
    // The text report's "called from" view says the same.
    assert!(r.text.contains("Called from"), "{}", r.text);
}

#[test]
fn dwarf_stacks_walk_code_without_frame_pointers_and_through_libc() {
    let r = record(
        "dwarf",
        &["--call-graph", "dwarf"],
        &calltree(false),
        &[SECONDS],
    );
    assert_eq!(r.json["run"]["call_graph"], "dwarf,8192");
    // libc's functions in the stacks have the names a user knows (`qsort_r`), not the internal aliases that
    // libc's debug information also carries (`__GI___qsort_r`).
    assert!(
        !r.folded.contains("__GI_"),
        "an internal alias in the stacks:\n{}",
        r.folded
    );
    let Some(pprof) = pprof() else { return };
    let rows = pprof_cum(&pprof, &r.pprof).unwrap();
    check_split(&rows);
    let all = total(&r.json);
    let main = cum(&rows, "main");
    println!(
        "main: {main} of {all} samples ({:.1} %)",
        main / all * 100.0
    );
    assert!(main / all > 0.9, "main {main} of {all}");
    // The comparator is reached through libc's qsort: its samples are inside sort_caller's.
    let (sorter, compare) = (cum(&rows, "sort_caller"), cum(&rows, "compare_keys"));
    println!("sort_caller {sorter}, compare_keys {compare}");
    assert!(
        compare > 0.05 * all,
        "the comparator does real work: {compare} of {all}"
    );
    assert!(
        sorter >= compare,
        "sort_caller {sorter} includes compare_keys {compare}"
    );
    for line in r.folded.lines().filter(|l| l.contains("compare_keys")) {
        let frames: Vec<&str> = line.rsplit_once(' ').unwrap().0.split(';').collect();
        let (s, c) = (
            frames.iter().position(|f| *f == "sort_caller"),
            frames.iter().position(|f| *f == "compare_keys").unwrap(),
        );
        // Every comparator stack but a truncated one has sort_caller, then libc's sorting code, above it.
        if !frames.contains(&"[truncated]") {
            let s = s.unwrap_or_else(|| panic!("{line}"));
            assert!(
                s + 1 < c,
                "libc frames between sort_caller and compare_keys: {line}"
            );
        }
    }
    let text = &r.text;
    assert!(text.contains("Call tree"), "{text}");
}

/// Frame boxes of an inferno SVG: (name, x, y, width), x and width in percent.
fn svg_boxes(svg: &str) -> Vec<(String, f64, f64, f64)> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let (mut boxes, mut in_title, mut title) = (Vec::new(), false, None::<String>);
    loop {
        match reader.read_event().expect("the SVG parses") {
            Event::Start(e) if e.name().as_ref() == b"title" => in_title = true,
            Event::End(e) if e.name().as_ref() == b"title" => in_title = false,
            Event::Text(t) if in_title => title = Some(t.decode().unwrap().into_owned()),
            Event::Empty(e) if e.name().as_ref() == b"rect" => {
                if let Some(t) = title.take() {
                    let attr = |k: &[u8]| {
                        e.attributes()
                            .flatten()
                            .find(|a| a.key.as_ref() == k)
                            .map(|a| {
                                String::from_utf8_lossy(&a.value)
                                    .trim_end_matches('%')
                                    .parse::<f64>()
                                    .unwrap()
                            })
                            .unwrap()
                    };
                    let name = t
                        .rsplit_once(" (")
                        .map_or(t.clone(), |(n, _)| n.to_string());
                    boxes.push((name, attr(b"x"), attr(b"y"), attr(b"width")));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    boxes
}

/// The box right under (the caller of) `b`: the nearest lower level whose x range holds it.
fn parent<'a>(
    boxes: &'a [(String, f64, f64, f64)],
    b: &(String, f64, f64, f64),
) -> Option<&'a str> {
    boxes
        .iter()
        .filter(|p| p.2 > b.2 && p.1 <= b.1 + 1e-6 && b.1 + b.3 <= p.1 + p.3 + 1e-6)
        .min_by(|x, y| x.2.partial_cmp(&y.2).unwrap())
        .map(|p| p.0.as_str())
}

#[test]
fn the_flame_graph_has_two_towers_over_leaf_and_the_comparator_under_its_caller() {
    let r = record(
        "flame",
        &["--call-graph", "dwarf"],
        &calltree(false),
        &[SECONDS],
    );
    let svg = std::fs::read_to_string(&r.svg).unwrap();
    let boxes = svg_boxes(&svg);
    let leaves: Vec<_> = boxes.iter().filter(|b| b.0 == "leaf").collect();
    let mut callers: Vec<&str> = leaves.iter().filter_map(|b| parent(&boxes, b)).collect();
    callers.sort_unstable();
    assert_eq!(
        callers,
        ["caller_a", "caller_b"],
        "leaf's boxes and their callers"
    );
    let wide = |name: &str| {
        boxes
            .iter()
            .filter(|b| b.0 == name)
            .map(|b| b.3)
            .fold(0.0, f64::max)
    };
    assert!(
        wide("caller_a") > wide("caller_b"),
        "caller_a's tower is the wider (60 %)"
    );
    // Each comparator box stands (through libc's frames) on sort_caller.
    let compares: Vec<_> = boxes.iter().filter(|b| b.0 == "compare_keys").collect();
    assert!(!compares.is_empty(), "no compare_keys box");
    let sorter = boxes
        .iter()
        .find(|b| b.0 == "sort_caller")
        .expect("a sort_caller box");
    for c in compares {
        assert!(
            c.2 < sorter.2 && sorter.1 <= c.1 && c.1 + c.3 <= sorter.1 + sorter.3 + 1e-6,
            "{c:?} over {sorter:?}"
        );
    }
    // The command at the root, right over the root frame, which is labelled with the command line and the source.
    let root = boxes
        .iter()
        .find(|b| b.0 == "calltree_nofp")
        .expect("the command's box");
    let all = parent(&boxes, root).unwrap_or_default();
    assert!(
        all.starts_with("all: ") && all.contains("calltree_nofp 1.5") && all.ends_with(" [Timer]"),
        "the root frame: {all:?}"
    );

    if let Some(rsvg) = tool(
        "rsvg-convert",
        on_path("rsvg-convert"),
        "apt-get install librsvg2-bin",
    ) {
        let png = r.svg.with_extension("png");
        let out = run_bounded(Command::new(rsvg).arg("-o").arg(&png).arg(&r.svg), LIMIT);
        assert!(
            out.status.success(),
            "rsvg-convert: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        println!("flame graph PNG: {}", png.display());
    }
}

#[test]
fn rust_and_cpp_stacks_are_demangled() {
    let rust = dir().join("stacks_rust");
    let out = Command::new("rustc")
        .args(["-O", "-g", "-C", "force-frame-pointers=yes", "-o"])
        .arg(&rust)
        .arg(src("stacks_rust.rs"))
        .output()
        .expect("run rustc");
    assert!(
        out.status.success(),
        "rustc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = record("rust", &["-g"], &rust, &["1"]);
    let hot = r
        .folded
        .lines()
        .filter(|l| l.contains("stacks_rust::Mixer<T>::mix"))
        .collect::<Vec<_>>();
    assert!(!hot.is_empty(), "{}", r.folded);
    for (caller, impl_) in [
        (
            "Squares",
            "<stacks_rust::Squares as stacks_rust::Stage>::run",
        ),
        ("Cubes", "<stacks_rust::Cubes as stacks_rust::Stage>::run"),
    ] {
        assert!(
            hot.iter().any(
                |l| l.contains("stacks_rust::main;stacks_rust::Pipeline::run;")
                    && l.contains(&format!("{impl_};stacks_rust::Mixer<T>::mix"))
            ),
            "{caller}: {hot:#?}"
        );
    }

    let cpp = dir().join("stacks_cpp");
    let out = Command::new("g++")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&cpp)
        .arg(src("stacks_cpp.cpp"))
        .output()
        .expect("run g++");
    assert!(
        out.status.success(),
        "g++: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = record("cpp", &["--call-graph", "dwarf"], &cpp, &["1"]);
    let has = |needle: &str| r.folded.lines().any(|l| l.contains(needle));
    for needle in [
        "main;Engine::step(int);double run_kernel<Accumulator<double>, double>(Accumulator<double>&, std::vector<double, std::allocator<double> > const&, int);Accumulator<double>::add(std::vector<double, std::allocator<double> > const&, int)",
        "main;Engine::step(int);float run_kernel<Accumulator<float>, float>(Accumulator<float>&, std::vector<float, std::allocator<float> > const&, int);Accumulator<float>::add(",
        // std::sort is inlined into Engine::reorder: its frames come from DWARF's inlined subroutines.
        "main;Engine::reorder();void std::sort<",
    ] {
        assert!(has(needle), "{needle}\n{}", r.folded);
    }
}

#[test]
fn bad_call_graph_values_are_usage_errors() {
    for (value, says) in [
        ("lbr", "fp (frame pointers) or dwarf"),
        ("dwarf,0", "8 ..= 65528"),
        ("dwarf,x", "not a size"),
        ("fp,64", "no size"),
    ] {
        let out = Command::new(NTPROF)
            .args(["record", "--call-graph", value, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{value}: {err}");
    }
}

/// Samples of the folded lines containing all of `frames` in this order.
fn samples_with(folded: &str, frames: &[&str]) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| {
            let mut it = stack.split(';');
            frames.iter().all(|f| it.any(|x| x == *f))
        })
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn threads_signal_handlers_and_stripped_programs_unwind() {
    // Threads: every worker's stack is complete, down to the thread's start (clone3, start_thread).
    let threads = dir().join("threads");
    common::gcc(
        &[
            "-O2",
            "-g",
            "-pthread",
            "-fomit-frame-pointer",
            "-o",
            "threads",
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/c/threads.c")
                .to_string_lossy(),
        ],
        dir(),
    );
    let r = record("threads", &["--call-graph", "dwarf"], &threads, &["0.7"]);
    let hot = samples_with(&r.folded, &["thread_hot"]);
    let full = samples_with(&r.folded, &["start_thread", "worker", "thread_hot"]);
    println!("threads: thread_hot {hot}, under start_thread > worker {full}");
    assert!(
        hot > 500 && full as f64 >= 0.95 * hot as f64,
        "{}",
        r.folded
    );

    // A signal handler: its stack goes on, past the signal frame, into the interrupted main_loop.
    common::gcc(
        &[
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-o",
            "signals",
            &src("signals.c"),
        ],
        dir(),
    );
    let r = record(
        "signals",
        &["--call-graph", "dwarf"],
        &dir().join("signals"),
        &["1"],
    );
    let handler = samples_with(&r.folded, &["in_handler"]);
    let through = samples_with(
        &r.folded,
        &["main", "main_loop", "__restore_rt", "in_handler"],
    );
    println!("signals: in_handler {handler}, through the signal frame into main_loop {through}");
    assert!(
        handler > 100 && through as f64 >= 0.9 * handler as f64,
        "{}",
        r.folded
    );

    // Stripped (names from .dynsym with -rdynamic; unwinding by .eh_frame, which strip keeps).
    common::gcc(
        &[
            "-O2",
            "-fomit-frame-pointer",
            "-rdynamic",
            "-o",
            "calltree_stripped",
            &src("calltree.c"),
        ],
        dir(),
    );
    let out = Command::new("strip")
        .arg(dir().join("calltree_stripped"))
        .output()
        .expect("run strip");
    assert!(out.status.success());
    let r = record(
        "stripped",
        &["--call-graph", "dwarf"],
        &dir().join("calltree_stripped"),
        &[SECONDS],
    );
    let (a, b) = (
        samples_with(&r.folded, &["main", "caller_a", "leaf"]),
        samples_with(&r.folded, &["main", "caller_b", "leaf"]),
    );
    let n = (a + b) as f64;
    let sigma = (0.24 / n).sqrt();
    println!(
        "stripped: caller_a {a}, caller_b {b}: {:.1} %",
        a as f64 / n * 100.0
    );
    assert!(
        n > 200.0 && (a as f64 / n - 0.6).abs() <= 3.0 * sigma,
        "{}",
        r.folded
    );
}

#[test]
fn kernel_stacks_with_kernel_and_g() {
    // With frame pointers: `--kernel -- CMD` samples the command's user side too, and its frame-pointer
    // chains continue from the system call into the program (without them they end at its first frame).
    common::gcc(
        &[
            "-O2",
            "-fno-omit-frame-pointer",
            "-o",
            "syscalls",
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/c/syscalls.c")
                .to_string_lossy(),
        ],
        dir(),
    );
    let r = record(
        "kernel",
        &["--kernel", "-g"],
        &dir().join("syscalls"),
        &["1"],
    );
    let total: u64 = r
        .folded
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    let entered = samples_with(
        &r.folded,
        &["entry_SYSCALL_64_after_hwframe", "do_syscall_64"],
    );
    let truncated = samples_with(&r.folded, &["[truncated]"]);
    println!(
        "kernel: {total} samples, {entered} under entry_SYSCALL_64 > do_syscall_64, {truncated} truncated"
    );
    assert!(entered > 50, "{}", r.folded);
    assert!(truncated * 10 < total, "{}", r.folded);
}
