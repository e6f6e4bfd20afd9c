//! JIT code over time. node runs four phases, each a fresh function compiled from its own file, made hot by a
//! fixed amount of work (4 : 3 : 2 : 1), then dropped and collected; V8 compiles the next phases' code into the
//! memory the earlier ones held. With `--perf-prof`, ntprof names every sample from node's jitdump file by the
//! code that was at its address at its moment: each phase keeps its designed share and its source lines. With
//! only a perf map (`--perf-basic-prof`), the report says where names may be mixed, and how many samples fell
//! there.
//!
//! `node` is required: a missing one fails the test with the reason (CI installs nodejs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::u;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
/// The phases, in order, and how many calls of 1,000,000 iterations each makes.
const PHASES: [(&str, u32); 4] = [
    ("phaseA", 160),
    ("phaseB", 120),
    ("phaseC", 80),
    ("phaseD", 40),
];
/// Runs to find one where V8 reused the memory of hot code (it nearly always does, at the first).
const ATTEMPTS: usize = 3;

/// The phase files and the driver, in `dir`: the driver's path.
fn write_program(dir: &Path) -> PathBuf {
    let mut calls = String::new();
    for (name, reps) in PHASES {
        let file = dir.join(format!("{name}.js"));
        std::fs::write(
            &file,
            format!(
                "(function {name}(n) {{\n  let x = 0;\n  for (let i = 0; i < n; i++) {{\n    \
                 x = (x * 31 + i) % 1000003;\n  }}\n  return x;\n}})\n"
            ),
        )
        .unwrap();
        // A literal path: V8 writes the names of such scripts into the dump's line records as they are.
        calls.push_str(&format!(
            "phase({}, {reps});\n",
            serde_json::to_string(file.to_str().unwrap()).unwrap()
        ));
    }
    let driver = dir.join("drive.js");
    std::fs::write(
        &driver,
        format!(
            "const fs = require('fs'), vm = require('vm');\nlet s = 0;\n\
             function phase(file, reps) {{\n  \
             let fn = vm.runInThisContext(fs.readFileSync(file, 'utf8'), {{ filename: file }});\n  \
             for (let r = 0; r < reps; r++) s += fn(1000000);\n  fn = null;\n  gc(); gc();\n}}\n\
             {calls}console.log(s);\n"
        ),
    )
    .unwrap();
    driver
}

/// One profiled run of the driver.
struct Run {
    json: Value,
    text: String,
    pid: u64,
    /// node's perf map, when it wrote one (removed from /tmp).
    map: Option<String>,
}

/// `ntprof record OPTIONS -- node --expose-gc NODE_FLAGS drive.js`, in `dir`.
fn record(dir: &Path, options: &[&str], node_flags: &[&str]) -> Run {
    let driver = write_program(dir);
    let file = dir.join("ntprof.json");
    let mut cmd = Command::new(NTPROF);
    cmd.current_dir(dir)
        .args(["record", "-i", "10000"])
        .args(options)
        .arg("--json")
        .arg(&file)
        .args(["--", "node", "--expose-gc"])
        .args(node_flags)
        .arg(&driver);
    let out = common::run_bounded(&mut cmd, Duration::from_secs(300));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let pid = u(&json["run"]["pid"]);
    let map_path = format!("/tmp/perf-{pid}.map");
    let map = std::fs::read_to_string(&map_path).ok();
    let _ = std::fs::remove_file(&map_path);
    Run {
        json,
        text: String::from_utf8_lossy(&out.stdout).into_owned(),
        pid,
        map,
    }
}

/// Which phase a name is of.
fn phase_of(name: &str) -> Option<usize> {
    PHASES.iter().position(|(p, _)| name.contains(p))
}

/// Samples of each phase's functions in a source.
fn phase_samples(s: &Value) -> [u64; 4] {
    let mut n = [0; 4];
    for f in s["functions"].as_array().unwrap() {
        if let Some(i) = phase_of(f["name"].as_str().unwrap()) {
            n[i] += u(&f["samples"]);
        }
    }
    n
}

/// A perf map's lines: (start, end, name), in file order.
fn map_lines(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter_map(|l| {
            let mut p = l.splitn(3, ' ');
            let start = u64::from_str_radix(p.next()?, 16).ok()?;
            let size = u64::from_str_radix(p.next()?, 16).ok()?;
            Some((start, start + size, p.next()?.to_string()))
        })
        .collect()
}

/// The JIT buckets of a source: (address, samples, name the report gives).
fn jit_buckets(s: &Value) -> Vec<(u64, u64, String)> {
    s["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["module"].as_str().unwrap().starts_with("[JIT] pid "))
        .map(|b| {
            (
                u(&b["address"]),
                u(&b["samples"]),
                b["frames"][0]["function"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Of the samples the report names as a phase's, how many a perf map would give another name (its latest line
/// at their address, as a reader without times must), by the map `text`.
fn misnamed_by_map(s: &Value, text: &str) -> (u64, u64) {
    let lines = map_lines(text);
    let (mut wrong, mut all) = (0, 0);
    for (addr, n, name) in jit_buckets(s) {
        let Some(phase) = phase_of(&name) else {
            continue;
        };
        all += n;
        let latest = lines.iter().rev().find(|l| l.0 <= addr && addr < l.1);
        if latest.and_then(|l| phase_of(&l.2)) != Some(phase) {
            wrong += n;
        }
    }
    (wrong, all)
}

fn jit_row<'a>(run: &'a Run, kind: &str) -> &'a Value {
    run.json["run"]["jit"]
        .as_array()
        .unwrap_or_else(|| panic!("the report has no run.jit: {}", run.json["run"]))
        .iter()
        .find(|r| r["kind"] == kind && u(&r["pid"]) == run.pid)
        .unwrap_or_else(|| panic!("no {kind} row in run.jit: {}", run.json["run"]["jit"]))
}

#[test]
fn node_jit_code_is_named_by_time_from_its_jitdump() {
    common::require_node();
    let dir = common::build_dir("jitdump");
    let dir = dir.canonicalize().unwrap();
    let mut reused = Vec::new();
    for attempt in 1..=ATTEMPTS {
        // The perf map is written too: by its lines, the test checks that this run reused memory of hot code.
        let run = record(&dir, &["-g"], &["--perf-prof", "--perf-basic-prof"]);
        let dump = dir.join(format!("jit-{}.dump", run.pid));
        let s = &run.json["sources"][0];
        let counted = u(&s["stats"]["counted"]);
        let row = jit_row(&run, "jitdump");
        eprintln!("attempt {attempt}: {row}");
        assert_eq!(row["path"], dump.to_str().unwrap(), "{row}");
        assert!(
            u(&row["named_by_time"]) * 100 >= u(&row["samples"]) * 98 && u(&row["samples"]) > 0,
            "{row}"
        );
        assert!(
            run.text
                .contains(&format!("JIT code of pid {} named by time from", run.pid)),
            "{}",
            run.text
        );
        let module = s["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == format!("[JIT] pid {}", run.pid))
            .unwrap_or_else(|| panic!("no JIT module: {}", s["modules"]));
        assert_eq!(module["path"], dump.to_str().unwrap());

        // Each phase keeps its designed share of the phases' samples.
        let n = phase_samples(s);
        let total: u64 = n.iter().sum();
        assert!(
            total * 10 >= counted * 6,
            "phases {n:?} of {counted} samples"
        );
        let design: u32 = PHASES.iter().map(|p| p.1).sum();
        for (i, (name, reps)) in PHASES.iter().enumerate() {
            let share = n[i] as f64 / total as f64;
            let want = f64::from(*reps) / f64::from(design);
            eprintln!("{name}: {} samples, {share:.3} (designed {want:.3})", n[i]);
            assert!(
                (share - want).abs() <= 0.05,
                "{name}: {share:.3} of the phases' samples, designed {want:.3}: {n:?}"
            );
        }
        // Their source lines: the loop's two lines hold most of each phase's samples.
        let mut loop_lines = [0u64; 4];
        for l in s["lines"].as_array().unwrap() {
            let file = l["file"].as_str().unwrap();
            if let Some(i) = phase_of(file)
                && file == dir.join(format!("{}.js", PHASES[i].0)).to_str().unwrap()
                && (l["line"] == 3 || l["line"] == 4)
            {
                loop_lines[i] += u(&l["samples"]);
                if l["line"] == 4 {
                    assert!(l["text"].as_str().unwrap().contains("1000003"), "{l}");
                }
            }
        }
        for i in 0..4 {
            assert!(
                loop_lines[i] * 10 >= n[i] * 7,
                "{}: {} of {} samples on the loop's lines",
                PHASES[i].0,
                loop_lines[i],
                n[i]
            );
        }
        // Stacks name the same code as the flat table.
        let locations = s["locations"].as_array().unwrap();
        let mut leaves = [0u64; 4];
        for st in s["stacks"].as_array().unwrap() {
            let leaf = &locations[u(&st["frames"][0]) as usize];
            if let Some(i) = phase_of(leaf["function"].as_str().unwrap()) {
                leaves[i] += u(&st["samples"]);
            }
        }
        assert_eq!(leaves, n, "stacks' leaves and functions differ");

        // Did this run reuse memory where it matters? A reader of the perf map alone would misname these.
        let (wrong, all) = misnamed_by_map(s, run.map.as_deref().expect("node's perf map"));
        eprintln!("a perf map would misname {wrong} of the {all} phase samples");
        let _ = std::fs::remove_file(&dump);
        if wrong * 10 >= all {
            return;
        }
        reused.push((wrong, all));
    }
    panic!(
        "in {ATTEMPTS} runs V8 never put later code over earlier hot code (misnamed by a perf map, of all: \
         {reused:?}): the test proves nothing"
    );
}

#[test]
fn a_perf_map_alone_says_where_names_may_be_mixed() {
    common::require_node();
    let dir = common::build_dir("perfmap");
    for attempt in 1..=ATTEMPTS {
        let run = record(&dir, &[], &["--perf-basic-prof"]);
        let s = &run.json["sources"][0];
        let row = jit_row(&run, "perf map");
        eprintln!("attempt {attempt}: {row}");
        assert_eq!(row["path"], format!("/tmp/perf-{}.map", run.pid));
        let map = map_lines(run.map.as_deref().expect("node's perf map"));
        // The samples in ranges two lines cover, counted here from the buckets and the map.
        let mut mixed = 0;
        let mut in_jit = 0;
        for (addr, n, _) in jit_buckets(s) {
            in_jit += n;
            if map.iter().filter(|l| l.0 <= addr && addr < l.1).count() >= 2 {
                mixed += n;
            }
        }
        assert_eq!(u(&row["samples"]), in_jit, "{row}");
        assert_eq!(u(&row["mixed"]), mixed, "{row}");
        let named = map.iter().filter(|l| l.1 > l.0).count() as u64;
        assert_eq!(u(&row["records"]), named, "{row}");
        if u(&row["reused"]) > 0 && mixed > 0 {
            assert!(
                run.text.contains(&format!(
                    "names may be mixed in the JIT code of pid {}",
                    run.pid
                )),
                "{}",
                run.text
            );
            return;
        }
    }
    panic!("in {ATTEMPTS} runs no sample fell where perf map lines overlap");
}
