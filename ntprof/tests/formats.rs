//! ntprof's outputs end to end, on a real run of a C program whose CPU time is split 70 / 30 by design between
//! `hot_a` (in the executable) and `hot_b` (in a shared library), built here with gcc:
//!
//! - the JSON carries the text report's totals, top functions and shares, and `ntprof report` of it prints the
//!   same text report;
//! - Google's `pprof` reads the pprof profile: `-top` lists both functions with the designed shares, `-list`
//!   shows their source lines with counts;
//! - the flame graph SVG parses, names both functions, is widest where the samples are, and renders to PNG;
//! - the CSV rows add up to the run's totals;
//! - live progress appears on a terminal (a pty, through `script`) and not when stderr is piped or with --quiet;
//! - a failed write is an error (`> /dev/full`, a full device) that keeps the profile in a fallback file, a closed
//!   pipe (`| head -1`) a quiet exit 0.
//!
//! The pprof reader and `rsvg-convert` are installed by `.ci/run` (pprof built into `target/tools/pprof`, or named
//! by `NTPROF_PPROF`). Outside CI a missing tool skips that part with a printed reason; with `CI=true` it fails.
//! Every run is bounded by the CPU time the program is told to use and by a wall-clock timeout.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

mod common;
use common::{on_path, pprof, run_bounded, tool};

use serde_json::Value;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

/// The designed shares, in percent.
const HOT_A: f64 = 70.0;
const HOT_B: f64 = 30.0;
/// Allowed deviation of a measured share from its design, in percentage points: with ≥ 500 samples one σ of a
/// 70/30 share is ≤ 2.05 points, so this is more than 3 σ; the split is of CPU time, which the timer samples, so it
/// holds on a loaded machine.
const TOLERANCE: f64 = 7.0;

/// The test program, built once per test binary.
fn split() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/formats");
        let dir = common::build_dir("formats");
        let gcc = |args: &[&str]| common::gcc(args, &dir);
        let s = |f: &str| src.join(f).to_str().unwrap().to_string();
        gcc(&[
            "-O1",
            "-g",
            "-fPIC",
            "-shared",
            "-o",
            "libsplitb.so",
            &s("split_lib.c"),
        ]);
        gcc(&[
            "-O1",
            "-g",
            "-o",
            "split",
            &s("split_main.c"),
            "-L.",
            "-lsplitb",
            "-Wl,-rpath,$ORIGIN",
        ]);
        dir.join("split")
    })
}

const LIMIT: Duration = Duration::from_secs(60);

/// A shell command line quoting each word.
fn sh_words(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The one recorded run the format tests share: every output written at once.
struct Run {
    dir: PathBuf,
    text: String,
    json: Value,
}

fn run() -> &'static Run {
    static R: OnceLock<Run> = OnceLock::new();
    R.get_or_init(|| {
        let prog = split();
        let dir = prog.parent().unwrap().join("outputs");
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(NTPROF);
        cmd.current_dir(&dir).args([
            "record",
            // 4-byte buckets: each sampled instruction is symbolized to its own source line.
            "--bucket",
            "2",
            "--json",
            "run.json",
            "--pprof",
            "run.pb.gz",
            "--flamegraph",
            "run.svg",
            "--csv",
            "run.csv",
            "--",
        ]);
        cmd.arg(prog).arg("1.5");
        let out = run_bounded(cmd, LIMIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ntprof record failed: {stderr}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        // The program's own first line comes before the report.
        let text = stdout
            .strip_prefix("split: started\n")
            .expect("the program's line, then the report")
            .to_string();
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
        Run { dir, text, json }
    })
}

/// (name, samples, share in percent) of the source's functions in the JSON.
fn json_functions(json: &Value) -> Vec<(String, u64, f64)> {
    json["sources"][0]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["samples"].as_u64().unwrap(),
                f["share"].as_f64().unwrap() * 100.0,
            )
        })
        .collect()
}

fn share_of(json: &Value, name: &str) -> f64 {
    json_functions(json)
        .into_iter()
        .find(|f| f.0 == name)
        .unwrap_or_else(|| panic!("{name} not in the JSON"))
        .2
}

/// The rows of the text report's function table: (samples, share text, name).
fn text_functions(text: &str) -> Vec<(u64, String, String)> {
    let mut lines = text
        .lines()
        .skip_while(|l| !(l.contains("Samples") && l.contains("Function")))
        .skip(1);
    let mut rows = Vec::new();
    for line in lines.by_ref() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 3 {
            break;
        }
        rows.push((
            words[0].parse().expect("samples"),
            words[1].to_string(),
            words[2].to_string(),
        ));
    }
    rows
}

#[test]
fn json_has_the_text_reports_totals_functions_and_shares_and_report_renders_it_again() {
    let run = run();
    let json = &run.json;
    assert_eq!(json["schema_version"], 2);
    let source = &json["sources"][0];
    let stats = &source["stats"];
    let (counted, outside, lost) = (
        stats["counted"].as_u64().unwrap(),
        stats["outside"].as_u64().unwrap(),
        stats["lost"].as_u64().unwrap(),
    );
    let totals = format!(
        "samples {} = counted {counted} + outside {outside} + lost {lost}",
        counted + outside + lost
    );
    assert!(
        run.text.contains(&totals),
        "the text report lacks '{totals}':\n{}",
        run.text
    );
    assert!(
        counted > 300,
        "too few samples for the shares to mean anything: {counted}"
    );

    // The same functions, in the same order, with the same samples and shares.
    let from_text = text_functions(&run.text);
    let from_json = json_functions(json);
    assert!(from_text.len() >= 2, "no function table in:\n{}", run.text);
    assert_eq!(from_text.len(), from_json.len().min(20));
    for ((samples, share, name), (jname, jsamples, jshare)) in from_text.iter().zip(&from_json) {
        assert_eq!(
            (name, samples, share),
            (jname, jsamples, &format!("{jshare:.1}%"))
        );
    }
    // The designed split, found.
    let (a, b) = (share_of(json, "hot_a"), share_of(json, "hot_b"));
    println!(
        "JSON shares: hot_a {a:.2} % (designed {HOT_A}), hot_b {b:.2} % (designed {HOT_B}), {counted} samples"
    );
    assert_eq!(from_json[0].0, "hot_a");
    assert_eq!(from_json[1].0, "hot_b");
    assert!(
        (a - HOT_A).abs() < TOLERANCE && (b - HOT_B).abs() < TOLERANCE,
        "hot_a {a}, hot_b {b}"
    );

    // `ntprof report` of the JSON prints the very same text report.
    let mut cmd = Command::new(NTPROF);
    cmd.arg("report").arg(run.dir.join("run.json"));
    let out = run_bounded(cmd, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), run.text);
    // And writes the same JSON back.
    let mut cmd = Command::new(NTPROF);
    cmd.arg("report")
        .arg(run.dir.join("run.json"))
        .args(["--format", "json"]);
    let out = run_bounded(cmd, LIMIT);
    assert_eq!(out.stdout, std::fs::read(run.dir.join("run.json")).unwrap());
}

#[test]
fn report_refuses_what_it_cannot_read_with_the_reason() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ntprof-formats-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("missing.json", None, "cannot read"),
        ("notjson.json", Some("hello"), "is not JSON"),
        ("other.json", Some("{\"a\": 1}"), "no schema_version"),
        (
            "newer.json",
            Some("{\"schema_version\": 99}"),
            "newer than this ntprof reads",
        ),
        (
            "broken.json",
            Some("{\"schema_version\": 1, \"tool\": 5}"),
            "not a valid ntprof JSON profile",
        ),
    ];
    for (name, content, message) in cases {
        let path = dir.join(name);
        if let Some(c) = content {
            std::fs::write(&path, c).unwrap();
        }
        let mut cmd = Command::new(NTPROF);
        cmd.arg("report").arg(&path);
        let out = run_bounded(cmd, LIMIT);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(message) && err.contains(name), "{name}: {err}");
        assert!(out.stdout.is_empty());
    }
}

/// `pprof -top` lines: (flat %, name).
fn pprof_top(output: &str) -> Vec<(f64, String)> {
    output
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() < 6 {
                return None;
            }
            let flat = w[1].strip_suffix('%')?.parse().ok()?;
            Some((flat, w[5..].join(" ")))
        })
        .collect()
}

/// A pprof duration (`1.03s`, `443ms`, `.`) in milliseconds.
fn duration_ms(text: &str) -> f64 {
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e3)
    } else {
        return 0.0;
    };
    number.parse::<f64>().map_or(0.0, |v| v * scale)
}

#[test]
fn pprof_reads_the_profile_with_the_designed_shares_and_source_lines() {
    let run = run();
    let Some(pprof) = pprof() else { return };
    let profile = run.dir.join("run.pb.gz");
    let mut cmd = Command::new(&pprof);
    cmd.args(["-top"]).arg(&profile);
    let out = run_bounded(cmd, LIMIT);
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pprof -top: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("pprof -top:\n{top}");
    assert!(top.contains("Type: cpu"), "{top}");
    // The process labels: -tags lists the command and the pid; -tagfocus on the command keeps every sample, on
    // another command none. The executable is the first mapping, which titles the views.
    let pid = run.json["processes"][0]["pid"].to_string();
    let mut cmd = Command::new(&pprof);
    cmd.args(["-tags"]).arg(&profile);
    let tags = String::from_utf8_lossy(&run_bounded(cmd, LIMIT).stdout).into_owned();
    println!("pprof -tags:\n{tags}");
    assert!(
        tags.contains("command") && tags.contains("split") && tags.contains(&pid),
        "{tags}"
    );
    let mut cmd = Command::new(&pprof);
    cmd.args(["-top", "-tagfocus=command=split"]).arg(&profile);
    let focused = String::from_utf8_lossy(&run_bounded(cmd, LIMIT).stdout).into_owned();
    assert_eq!(
        pprof_top(&focused).first().map(|r| r.1.as_str()),
        Some("hot_a"),
        "{focused}"
    );
    assert!(top.lines().any(|l| l.starts_with("File: split")), "{top}");
    let rows = pprof_top(&top);
    assert_eq!(rows[0].1, "hot_a", "{top}");
    assert_eq!(rows[1].1, "hot_b", "{top}");
    for (flat, name) in &rows[..2] {
        let designed = if name == "hot_a" { HOT_A } else { HOT_B };
        assert!(
            (flat - designed).abs() < TOLERANCE,
            "{name}: {flat} % in pprof, designed {designed} %"
        );
        // pprof's share is the report's share (outside samples have their own entry in both).
        let share = share_of(&run.json, name);
        assert!(
            (flat - share).abs() < 0.006,
            "{name}: pprof {flat} %, report {share} %"
        );
    }

    for (function, hot_line) in [("hot_a", "hot_a's hot line"), ("hot_b", "hot_b's hot line")] {
        let mut cmd = Command::new(&pprof);
        cmd.args(["-list", &format!("^{function}$")]).arg(&profile);
        let out = run_bounded(cmd, LIMIT);
        let list = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "pprof -list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!("pprof -list {function}:\n{list}");
        assert!(
            list.contains(&format!("ROUTINE ======================== {function} in ")),
            "{list}"
        );
        // The hot loop's line carries (nearly) all of the function's samples.
        let routine = list.lines().nth(2).unwrap_or_default();
        let total = duration_ms(routine.split_whitespace().next().unwrap_or_default());
        let line = list
            .lines()
            .find(|l| l.contains(hot_line))
            .unwrap_or_else(|| panic!("{list}"));
        let on_line = duration_ms(line.split_whitespace().next().unwrap());
        assert!(
            total > 0.0 && on_line >= 0.9 * total,
            "{function}: {on_line} ms of {total} ms on its hot line:\n{list}"
        );
    }

    // Mappings per module, with the files and build ids.
    let mut cmd = Command::new(&pprof);
    cmd.arg("-raw").arg(&profile);
    let raw = String::from_utf8(run_bounded(cmd, LIMIT).stdout).unwrap();
    let mappings = raw.split("Mappings").nth(1).expect("a Mappings section");
    assert!(
        mappings
            .lines()
            .any(|l| l.contains("/split ") && l.contains("[FN][FL][LN]")),
        "{mappings}"
    );
    assert!(
        mappings.lines().any(|l| l.contains("/libsplitb.so ")),
        "{mappings}"
    );
}

/// (title, width) of every frame box of an inferno SVG.
fn svg_frames(svg: &str) -> (String, Vec<(String, f64)>) {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut frames = Vec::new();
    let mut title = String::new();
    let mut in_title = false;
    let mut in_heading = false;
    let mut heading = String::new();
    let mut last_title = None;
    loop {
        match reader.read_event().expect("the SVG parses as XML") {
            Event::Start(e) if e.name().as_ref() == b"title" => in_title = true,
            Event::End(e) if e.name().as_ref() == b"title" => in_title = false,
            Event::Start(e) if e.name().as_ref() == b"text" => {
                in_heading = e
                    .attributes()
                    .flatten()
                    .any(|a| a.key.as_ref() == b"id" && a.value.as_ref() == b"title");
            }
            Event::End(e) if e.name().as_ref() == b"text" => in_heading = false,
            Event::Text(t) if in_title => {
                title = t.decode().unwrap().into_owned();
                last_title = Some(title.clone());
            }
            Event::Text(t) if in_heading => heading.push_str(&t.decode().unwrap()),
            Event::Empty(e) if e.name().as_ref() == b"rect" => {
                if let Some(t) = last_title.take() {
                    let width = e
                        .attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == b"width")
                        .map(|a| {
                            String::from_utf8_lossy(&a.value)
                                .trim_end_matches('%')
                                .parse::<f64>()
                                .unwrap()
                        })
                        .unwrap();
                    frames.push((t, width));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let _ = title;
    (heading, frames)
}

#[test]
fn flame_graph_parses_names_the_hot_functions_widest_where_the_samples_are_and_renders() {
    let run = run();
    let svg_path = run.dir.join("run.svg");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (heading, frames) = svg_frames(&svg);
    assert!(
        heading.contains("Timer") && heading.contains("split"),
        "title: {heading}"
    );
    let width = |name: &str| {
        frames
            .iter()
            .find(|(t, _)| t.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("no frame {name} in {frames:?}"))
            .1
    };
    let all = frames
        .iter()
        .find(|(t, _)| t.starts_with("all: ") && t.contains("split") && t.contains(" [Timer] ("))
        .unwrap_or_else(|| {
            panic!("the root frame, labelled with the command and the source: {frames:?}")
        })
        .1;
    let (a, b) = (width("hot_a"), width("hot_b"));
    println!(
        "flame graph widths: all {all}, hot_a {a} ({:.1} %), hot_b {b} ({:.1} %)",
        a / all * 100.0,
        b / all * 100.0
    );
    assert!(a > b && b > 0.0, "hot_a {a}, hot_b {b}");
    // Widths are the shares of the samples (inferno rounds to 0.01 % of the width).
    for (name, w) in [("hot_a", a), ("hot_b", b)] {
        let share = share_of(&run.json, name);
        assert!(
            (w / all * 100.0 - share).abs() < 0.2,
            "{name}: width {w} of {all}, share {share} %"
        );
    }
    // Frames go module -> function -> file:line.
    assert!(frames.iter().any(|(t, _)| t.starts_with("libsplitb.so (")));
    assert!(frames.iter().any(|(t, _)| t.starts_with("split_main.c:")));

    let rsvg = tool(
        "rsvg-convert",
        on_path("rsvg-convert"),
        "apt-get install librsvg2-bin",
    );
    if let Some(rsvg) = rsvg {
        let png = run.dir.join("run.png");
        let mut cmd = Command::new(rsvg);
        cmd.arg("-o").arg(&png).arg(&svg_path);
        let out = run_bounded(cmd, LIMIT);
        assert!(
            out.status.success(),
            "rsvg-convert: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let (w, h) = (
            u32::from_be_bytes(bytes[16..20].try_into().unwrap()),
            u32::from_be_bytes(bytes[20..24].try_into().unwrap()),
        );
        println!(
            "flame graph PNG: {} ({w} x {h}, {} bytes)",
            png.display(),
            bytes.len()
        );
        assert!(w >= 800 && h >= 100, "{w} x {h}");
    }
}

#[test]
fn csv_rows_add_up_to_the_runs_totals() {
    let run = run();
    let text = std::fs::read_to_string(run.dir.join("run.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "source,pid,command,module,function,inlined,file,line,address,offset,samples,value,unit"
    );
    let pid = run.json["processes"][0]["pid"].to_string();
    let stats = &run.json["sources"][0]["stats"];
    let expected = stats["counted"].as_u64().unwrap() + stats["outside"].as_u64().unwrap();
    let mut total = 0;
    let mut hot_a = 0;
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 13, "{line}");
        assert_eq!((fields[1], fields[2]), (pid.as_str(), "split"), "{line}");
        let samples: u64 = fields[10].parse().unwrap();
        assert_eq!(
            fields[11].parse::<u64>().unwrap(),
            samples * 1_000_000,
            "{line}"
        );
        total += samples;
        if fields[4] == "hot_a" {
            hot_a += samples;
            assert!(
                fields[6].ends_with("split_main.c") && fields[8].starts_with("0x"),
                "{line}"
            );
        }
    }
    assert_eq!(total, expected);
    let share = hot_a as f64 / total as f64 * 100.0;
    assert!((share - share_of(&run.json, "hot_a")).abs() < 1e-9);
}

/// Run `words` under a pseudo-terminal of its own (`script` makes one), with a terminal type of its own: the
/// progress line is not drawn on a terminal that says it cannot move the cursor (`TERM=dumb`, as many CI runners
/// set it) or names no type at all (`env -i`), whatever the terminal the tests run from. Its terminal output.
fn under_pty(words: &[&str]) -> Option<Output> {
    let script = tool("script", on_path("script"), "apt-get install bsdutils")?;
    let mut cmd = Command::new(script);
    cmd.env("TERM", "xterm-256color");
    cmd.args(["-qec", &sh_words(words), "/dev/null"]);
    Some(run_bounded(cmd, LIMIT))
}

#[test]
fn progress_shows_on_a_terminal_only() {
    let prog = split().to_str().unwrap().to_string();
    let progress_line = |s: &str| {
        s.split(['\r', '\n']).any(|l| {
            l.contains("ntprof record: ")
                && l.contains("| Timer: ")
                && l.contains(" samples (")
                && l.contains(" lost")
        })
    };
    // On a terminal: the progress line (elapsed | Timer: N samples (M outside), L lost).
    let Some(out) = under_pty(&[NTPROF, "record", "--", &prog, "1.0"]) else {
        return;
    };
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{tty}");
    assert!(progress_line(&tty), "no progress on the terminal:\n{tty:?}");
    assert!(tty.contains("== Timer"), "the report follows: {tty:?}");
    // --quiet on a terminal: none.
    let out = under_pty(&[NTPROF, "record", "--quiet", "--", &prog, "1.0"]).unwrap();
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(!progress_line(&tty) && tty.contains("== Timer"), "{tty:?}");
    // Piped: nothing on stderr, no control sequences anywhere.
    let mut cmd = Command::new(NTPROF);
    cmd.args(["record", "--", &prog, "1.0"]);
    let out = run_bounded(cmd, LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.is_empty(), "stderr piped: {err:?}");
    assert!(
        !out.stdout.contains(&0x1b),
        "control sequences in the piped report"
    );
}

/// Two sources in one run: one pprof profile with a pair of sample types per source, one flame graph per source.
#[test]
fn two_sources_each_get_their_sample_types_and_their_flame_graph() {
    let prog = split();
    let dir = prog.parent().unwrap().join("two-sources");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(NTPROF);
    cmd.current_dir(&dir)
        .args([
            "record",
            "-q",
            "--source",
            "Timer,page-faults",
            "--pprof",
            "two.pb.gz",
        ])
        .args(["--flamegraph", "flame.svg", "--json", "two.json", "--"])
        .arg(prog)
        .arg("0.5");
    let out = run_bounded(cmd, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("two.json")).unwrap()).unwrap();
    let names: Vec<&str> = json["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Timer", "page-faults"]);
    let timer_svg = std::fs::read_to_string(dir.join("flame.svg")).unwrap();
    assert!(svg_frames(&timer_svg).0.contains("Timer"));
    let faults_svg = std::fs::read_to_string(dir.join("flame.page-faults.svg")).unwrap();
    assert!(svg_frames(&faults_svg).0.contains("page-faults"));

    let Some(pprof) = pprof() else { return };
    let mut cmd = Command::new(&pprof);
    cmd.args(["-raw"]).arg(dir.join("two.pb.gz"));
    let raw = String::from_utf8(run_bounded(cmd, LIMIT).stdout).unwrap();
    assert!(
        raw.contains("Timer-samples/count Timer-cpu/nanoseconds[dflt] page-faults-samples/count page-faults/events"),
        "{raw}"
    );
    // pprof's page-fault totals are the report's (counted + outside) of that source.
    let stats = &json["sources"][1]["stats"];
    let faults = stats["counted"].as_u64().unwrap() + stats["outside"].as_u64().unwrap();
    let mut cmd = Command::new(&pprof);
    cmd.args(["-top", "-sample_index=page-faults-samples"])
        .arg(dir.join("two.pb.gz"));
    let top = String::from_utf8(run_bounded(cmd, LIMIT).stdout).unwrap();
    assert!(
        top.contains(&format!("of {faults} total")),
        "page faults {faults}:\n{top}"
    );
}

#[test]
fn pprof_is_not_written_to_a_terminal() {
    let json = run().dir.join("run.json");
    let json = json.to_str().unwrap();
    let Some(out) = under_pty(&[NTPROF, "report", json, "--format", "pprof"]) else {
        return;
    };
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        tty.contains("not writing a binary pprof profile to the terminal"),
        "{tty:?}"
    );
    assert!(
        !tty.contains('\u{1f}'),
        "gzip bytes on the terminal: {tty:?}"
    );
}

#[test]
fn a_failed_write_is_an_error_and_a_closed_pipe_a_quiet_success() {
    let prog = split().to_str().unwrap().to_string();
    // Standard output on a full device.
    let out = run_bounded(
        {
            let mut c = Command::new("bash");
            c.args([
                "-c",
                &format!(
                    "{} > /dev/full",
                    sh_words(&[
                        NTPROF,
                        "report",
                        run().dir.join("run.json").to_str().unwrap()
                    ])
                ),
            ]);
            c
        },
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    println!("> /dev/full: exit {:?}, stderr {err:?}", out.status.code());
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write to standard output: No space left on device"),
        "{err}"
    );

    // Outputs that fail at the end (a full device passes the check made before the run): each is named, the
    // other outputs are still written, and the profile is kept in the fallback file under $TMPDIR.
    let dir = split().parent().unwrap().join("unwritable");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("ok.json");
    let mut cmd = Command::new(NTPROF);
    cmd.args(["record", "--pprof", "/dev/full", "--json"])
        .arg(&json)
        .args(["-o", "/dev/full", "--", &prog, "0.3"])
        .env("TMPDIR", &dir);
    let out = run_bounded(cmd, LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("unwritable: exit {:?}, stderr {err:?}", out.status.code());
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.matches("cannot write /dev/full: No space left on device")
            .count(),
        2,
        "{err}"
    );
    assert!(
        err.contains(&format!("the profile is kept in {}/ntprof-", dir.display())),
        "{err}"
    );
    assert!(std::fs::metadata(&json).unwrap().len() > 100);

    // Into `head -1`: head takes the first line and exits; the rest of the report meets a closed pipe. ntprof
    // ends quietly with status 0, not killed by SIGPIPE.
    let json = run().dir.join("run.json");
    let line = format!(
        "set -o pipefail; {} | head -1; echo \"status ${{PIPESTATUS[*]}}\" >&2",
        sh_words(&[NTPROF, "report", json.to_str().unwrap()])
    );
    let out = run_bounded(
        {
            let mut c = Command::new("bash");
            c.args(["-c", &line]);
            c
        },
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    println!("| head -1: exit {:?}, stderr {err:?}", out.status.code());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ntprof record: "));
    assert_eq!(err, "status 0 0\n");
    assert_eq!(out.status.code(), Some(0));

    // `record -- prog | head -1`: the pipe is the program's alone; the report goes to stderr (not a terminal).
    let line = format!(
        "set -o pipefail; {} | head -1; echo \"status ${{PIPESTATUS[*]}}\" >&2",
        sh_words(&[NTPROF, "record", "--", &prog, "0.3"])
    );
    let out = run_bounded(
        {
            let mut c = Command::new("bash");
            c.args(["-c", &line]);
            c
        },
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "split: started\n");
    assert!(
        err.contains("== Timer") && err.ends_with("status 0 0\n"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(0));
}
