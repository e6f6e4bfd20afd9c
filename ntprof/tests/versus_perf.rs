//! ntprof side by side with `perf record` on the same workloads, at the same interval (cpu-clock, user space):
//! `make -j2` compiling a small C project (samples counted, shares by command) and `node --perf-basic-prof`
//! running a hot JavaScript function (named from the perf map file, its share, nothing outside).
//!
//! `perf`, `make`, `gcc` and `node` are required: a missing one fails the test with the reason (CI installs
//! linux-perf and nodejs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
/// The interval of both profilers: 1 ms of CPU time (ntprof's 10000 x 100 ns, perf's -c 1000000 ns).
const PERIOD_NS: u64 = 1_000_000;

fn require(tool: &str, args: &[&str]) {
    let ok = Command::new(tool)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        ok.is_ok_and(|s| s.success()),
        "{tool} is required by this test and is missing or broken (install it: apt-get install {})",
        match tool {
            "perf" => "linux-perf",
            "node" => "nodejs",
            other => other,
        }
    );
}

/// Run `cmd`, at most `limit`; it must succeed.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let out = common::run_bounded(&mut *cmd, limit);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `perf record` of `argv` at the shared interval, in user space: the data file.
fn perf_record(dir: &Path, argv: &[&str]) -> PathBuf {
    let data = dir.join("perf.data");
    let period = PERIOD_NS.to_string();
    let mut cmd = Command::new("perf");
    cmd.args(["record", "-q", "-e", "cpu-clock:u", "-c", &period, "-o"])
        .arg(&data)
        .arg("--")
        .args(argv);
    run(&mut cmd, Duration::from_secs(300));
    data
}

/// `perf report -n --sort KEY`: (key → samples).
fn perf_report(data: &Path, key: &str) -> HashMap<String, u64> {
    let mut cmd = Command::new("perf");
    cmd.args(["report", "-q", "-n", "--stdio", "--sort", key, "-i"])
        .arg(data);
    let out = run(&mut cmd, Duration::from_secs(300));
    let mut rows = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "    45.23%          1234  cc1" (the key may hold spaces).
        let mut f = line.split_whitespace();
        let (Some(pct), Some(n)) = (f.next(), f.next()) else {
            continue;
        };
        let (true, Ok(n)) = (pct.ends_with('%'), n.parse::<u64>()) else {
            continue;
        };
        let rest: Vec<&str> = f.collect();
        *rows.entry(rest.join(" ")).or_insert(0) += n;
    }
    rows
}

/// `ntprof record` of `argv` at the shared interval: its JSON report (written to a file: the command's own
/// output goes to stdout).
fn ntprof_json(dir: &Path, argv: &[&str]) -> Value {
    let file = dir.join("ntprof.json");
    let mut cmd = Command::new(NTPROF);
    cmd.args([
        "record",
        "-q",
        "-i",
        &(PERIOD_NS / 100).to_string(),
        "--json",
    ])
    .arg(&file)
    .arg("--")
    .args(argv);
    run(&mut cmd, Duration::from_secs(300));
    serde_json::from_slice(&std::fs::read(&file).unwrap()).expect("the JSON report")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// A small C project: a Makefile and eight sources heavy enough for the compiler to take a while each.
fn make_project() -> PathBuf {
    let dir = common::build_dir("make");
    let mut objs = Vec::new();
    for i in 0..8 {
        let mut src = String::from("#include <string.h>\n");
        for f in 0..120 {
            src.push_str(&format!(
                "int f{i}_{f}(int *a, int n) {{ int s = 0; for (int k = 0; k < n; k++) {{ s += a[k] * {f} ^ (s >> 3); \
                 if (s % 7 == {i}) s -= a[(k + {f}) % n]; }} return s + (int)strlen((const char *)a); }}\n"
            ));
        }
        src.push_str(&format!(
            "int unit{i}(void) {{ int a[64] = {{0}}; return f{i}_0(a, 64); }}\n"
        ));
        std::fs::write(dir.join(format!("u{i}.c")), src).unwrap();
        objs.push(format!("u{i}.o"));
    }
    let mut main = String::new();
    for i in 0..8 {
        main.push_str(&format!("int unit{i}(void);\n"));
    }
    main.push_str("int main(void) { return unit0() + unit1() + unit2() + unit3() + unit4() + unit5() + unit6() + unit7(); }\n");
    std::fs::write(dir.join("main.c"), main).unwrap();
    objs.push("main.o".into());
    let makefile = format!(
        "CFLAGS = -O2 -g\nprog: {objs}\n\t$(CC) -o $@ $^\n%.o: %.c\n\t$(CC) $(CFLAGS) -c -o $@ $<\n",
        objs = objs.join(" ")
    );
    std::fs::write(dir.join("Makefile"), makefile).unwrap();
    dir
}

/// One `perf record` run and one `ntprof record` run of the same `make -j2`: Ok when ntprof counts at least 90 %
/// as many samples as perf and every command's share agrees within 3 points; Err says what differed.
fn compare_make_once(dir: &Path, argv: &[&str]) -> Result<(), String> {
    let perf = perf_report(&perf_record(dir, argv), "comm");
    let r = ntprof_json(dir, argv);
    let s = &r["sources"][0];
    let ours = u(&s["stats"]["counted"]) + u(&s["stats"]["outside"]);
    let theirs: u64 = perf.values().sum();
    eprintln!(
        "samples: ntprof {ours}, perf {theirs} ({:.1} %)",
        100.0 * ours as f64 / theirs as f64
    );
    if (ours as f64) < 0.9 * theirs as f64 {
        return Err(format!("ntprof {ours} samples, perf {theirs}"));
    }
    let mut ours_by: HashMap<String, f64> = HashMap::new();
    for c in s["commands"].as_array().unwrap() {
        ours_by.insert(
            c["command"].as_str().unwrap().to_string(),
            100.0 * c["share"].as_f64().unwrap(),
        );
    }
    let mut names: Vec<&String> = perf.keys().chain(ours_by.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let p = 100.0 * perf.get(name).copied().unwrap_or(0) as f64 / theirs as f64;
        let o = ours_by.get(name).copied().unwrap_or(0.0);
        eprintln!("{name:<12} perf {p:6.2} %  ntprof {o:6.2} %");
        if (p - o).abs() > 3.0 {
            return Err(format!("{name}: perf {p:.2} %, ntprof {o:.2} %"));
        }
    }
    // The compiler and the assembler, run by make through the driver, are there (make itself has next to no
    // samples).
    if !(ours_by.contains_key("cc1") && ours_by.contains_key("as")) {
        return Err(format!("no cc1 or as among {ours_by:?}"));
    }
    Ok(())
}

/// The two profilers cannot run the same `make` at once, and on a shared machine the CPU time of one build
/// differs from the next by up to a fifth (a CI run saw ntprof 7533 samples against perf's 9134 while other
/// builds ran). So the comparison is one perf run next to one ntprof run, repeated up to three times: it passes
/// when one pair agrees, and fails, printing every pair, when none does (a real loss of samples or a wrong
/// command shows in every pair).
#[test]
fn make_j2_counts_as_many_samples_as_perf_with_the_same_shares_by_command() {
    require("perf", &["--version"]);
    require("make", &["--version"]);
    let dir = make_project();
    let d = dir.to_str().unwrap();
    let argv = ["make", "-s", "-B", "-j2", "-C", d];
    let mut failures = Vec::new();
    for attempt in 1..=3 {
        match compare_make_once(&dir, &argv) {
            Ok(()) => return,
            Err(why) => {
                eprintln!("pair {attempt}: {why}");
                failures.push(why);
            }
        }
    }
    panic!("no pair of runs agreed: {failures:?}");
}

#[test]
fn node_jit_functions_are_named_from_the_perf_map() {
    require("perf", &["--version"]);
    require("node", &["--version"]);
    let dir = common::build_dir("node");
    let app = dir.join("app.js");
    std::fs::write(
        &app,
        "function hotLoop(n) {\n  let x = 0;\n  for (let i = 0; i < n; i++) { x = (x * 31 + i) % 1000003; }\n  return x;\n}\n\
         let s = 0;\nfor (let r = 0; r < 100; r++) { s += hotLoop(1000000); }\nconsole.log(s);\n",
    )
    .unwrap();
    // A fixed amount of work (about 2 s of CPU here), not a fixed time: on a loaded machine a timed loop gets
    // less CPU in one run than in the other, and the hot function's share of each run with it.
    let argv = ["node", "--perf-basic-prof", app.to_str().unwrap()];
    let perf = perf_report(&perf_record(&dir, &argv), "sym");
    let theirs: u64 = perf.values().sum();
    let perf_hot: u64 = perf
        .iter()
        .filter(|(k, _)| k.contains("hotLoop"))
        .map(|(_, n)| *n)
        .sum();
    let perf_share = perf_hot as f64 / theirs as f64;
    let r = ntprof_json(&dir, &argv);
    let s = &r["sources"][0];
    let total = u(&s["stats"]["counted"]) + u(&s["stats"]["outside"]);
    let hot: Vec<&Value> = s["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"].as_str().unwrap().contains("hotLoop"))
        .collect();
    assert!(!hot.is_empty(), "hotLoop is not named: {}", s["functions"]);
    assert!(
        hot[0]["module"].as_str().unwrap().starts_with("[JIT] pid "),
        "{}",
        hot[0]
    );
    let ours = hot.iter().map(|f| u(&f["samples"])).sum::<u64>() as f64 / total as f64;
    let outside = u(&s["stats"]["outside"]) as f64 / total as f64;
    eprintln!(
        "hotLoop: ntprof {:.2} % of {total}, perf {:.2} % of {theirs}; outside {:.2} %",
        ours * 100.0,
        perf_share * 100.0,
        outside * 100.0
    );
    assert!(
        ours >= 0.9 * perf_share,
        "ntprof {ours:.4}, perf {perf_share:.4}"
    );
    assert!(outside <= 0.01, "outside {outside:.4}");
    for p in r["processes"].as_array().unwrap() {
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", p["pid"]));
    }
}
