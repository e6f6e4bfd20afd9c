//! `ntprof record` / `attach` / `record --kernel` end to end, on C programs built here with gcc and on the
//! bundled `ntprof-demo`: designed shares found within 3 σ, symbols with and without debug information, dlopen,
//! attach and its errors, the kernel, two sources, exit statuses.
//!
//! Every run is bounded by the CPU time its program is told to use (about a second) and by a wall-clock
//! timeout. Shares are shares of CPU time, which the timer samples, so they hold on a loaded machine.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

mod common;
use common::{function_samples, gcc, gcc_shared, is_root, ntprof_command, source, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

/// The C programs of `tests/c`, built once per test binary.
struct Programs {
    dir: PathBuf,
}

impl Programs {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn run_tool(tool: &str, args: &[&str]) {
    let st = Command::new(tool)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(st.success(), "{tool} {args:?} failed");
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
        let dir = common::build_dir("record");
        let d = dir.to_str().unwrap();
        let s = |f: &str| src.join(f).to_str().unwrap().to_string();
        gcc_shared(&format!("{d}/libsplit.so"), &s("libsplit.c"), &dir);
        gcc(
            &[
                "-O2",
                "-g",
                "-o",
                &format!("{d}/split"),
                &s("split.c"),
                "-L",
                d,
                "-lsplit",
                "-Wl,-rpath,$ORIGIN",
            ],
            &dir,
        );
        gcc_shared(&format!("{d}/plugin.so"), &s("plugin.c"), &dir);
        gcc(
            &[
                "-O2",
                "-g",
                "-o",
                &format!("{d}/late_load"),
                &s("late_load.c"),
                "-ldl",
            ],
            &dir,
        );
        gcc(
            &["-O2", "-g", "-o", &format!("{d}/faults"), &s("faults.c")],
            &dir,
        );
        gcc(
            &["-O0", "-g", "-o", &format!("{d}/segv"), &s("segv.c")],
            &dir,
        );
        gcc(
            &[
                "-O2",
                "-g",
                "-o",
                &format!("{d}/syscalls"),
                &s("syscalls.c"),
            ],
            &dir,
        );
        gcc(
            &[
                "-O2",
                "-g",
                "-pthread",
                "-o",
                &format!("{d}/threads"),
                &s("threads.c"),
            ],
            &dir,
        );
        gcc(
            &[
                "-O2",
                "-g",
                "-o",
                &format!("{d}/two_static"),
                &s("two_static.c"),
            ],
            &dir,
        );
        // Copies stripped of debug information (symbol tables kept) and of everything.
        for (sub, flag) in [("nodebug", "--strip-debug"), ("stripped", "--strip-all")] {
            let sd = dir.join(sub);
            std::fs::create_dir_all(&sd).unwrap();
            for f in ["split", "libsplit.so", "two_static"] {
                let to = sd.join(f);
                std::fs::copy(dir.join(f), &to).unwrap();
                run_tool("strip", &[flag, to.to_str().unwrap()]);
            }
        }
        Programs { dir }
    })
}

/// Run ntprof with `args`, at most `limit`, as the given user (None: as we are).
fn ntprof_as(args: &[&str], limit: Duration, unprivileged: bool) -> Output {
    common::run_bounded(ntprof_command(unprivileged).args(args), limit)
}

fn ntprof(args: &[&str]) -> Output {
    ntprof_as(args, Duration::from_secs(60), false)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON report of a run that succeeded with `status`.
fn report(out: &Output, status: i32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(status),
        "exit status; stderr: {}",
        stderr(out)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the JSON report ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

fn module<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no module {name} in {}", s["modules"]))
}

/// Counted + outside + lost adds up: the modules' samples are the counted ones.
fn check_accounting(s: &Value) {
    let st = &s["stats"];
    let samples = |list: &str| -> u64 {
        s[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| u(&e["samples"]))
            .sum()
    };
    assert_eq!(
        samples("modules"),
        u(&st["counted"]),
        "modules vs counted: {st}"
    );
    assert_eq!(
        samples("functions"),
        u(&st["counted"]),
        "functions vs counted"
    );
    assert_eq!(samples("buckets"), u(&st["counted"]), "buckets vs counted");
}

/// The split program's source `s`: its accounting adds up, `exe_hot` and `lib_hot` are the two hottest
/// functions and they share the samples 60 / 40 within 3 σ (`what` names the comparison). Returns the functions.
fn check_split<'a>(s: &'a Value, what: &str) -> &'a Vec<Value> {
    check_accounting(s);
    let f = s["functions"].as_array().unwrap();
    let top: Vec<&str> = f
        .iter()
        .take(2)
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(top, ["exe_hot", "lib_hot"], "the two hot functions on top");
    within_3_sigma(u(&f[0]["samples"]), u(&f[1]["samples"]), 0.6, what);
    f
}

/// `a` of `a + b` is within 3 σ of `p` (binomial).
fn within_3_sigma(a: u64, b: u64, p: f64, what: &str) {
    let n = (a + b) as f64;
    assert!(n >= 300.0, "{what}: too few samples ({n})");
    let got = a as f64 / n;
    let sigma = (p * (1.0 - p) / n).sqrt();
    assert!(
        (got - p).abs() <= 3.0 * sigma,
        "{what}: share {got:.4} is more than 3 sigma ({:.4}) from {p}",
        3.0 * sigma
    );
    eprintln!(
        "{what}: {a}/{n} = {got:.4}, designed {p}, 3 sigma {:.4}",
        3.0 * sigma
    );
}

/// `ntprof record --format json -i 2000 -- PROGRAM ARGS...` (a sample every 200 µs): the JSON report of a run
/// that must exit 0.
fn record_json(program: &Path, args: &[&str]) -> Value {
    let mut argv = vec![
        "record",
        "--format",
        "json",
        "-i",
        "2000",
        "--",
        program.to_str().unwrap(),
    ];
    argv.extend_from_slice(args);
    report(&ntprof(&argv), 0)
}

fn record_split(dir: &Path) -> Value {
    record_json(&dir.join("split"), &["1.0"])
}

#[test]
fn split_60_40_named_with_lines() {
    let p = programs();
    let r = record_split(&p.dir);
    let s = source(&r, "Timer");
    let f = check_split(s, "exe_hot vs lib_hot");
    assert_eq!(f[0]["module"], "split");
    assert_eq!(f[1]["module"], "libsplit.so");
    // The hottest lines: the loop of split.h (lines 7-9, inlined into both), with their text. Addresses are exact,
    // so a loop's samples spread over its lines as the instructions sampled belong to them.
    let lines = s["lines"].as_array().unwrap();
    for (m, function) in [("split", "exe_hot"), ("libsplit.so", "lib_hot")] {
        let in_loop: u64 = lines
            .iter()
            .filter(|l| l["module"] == m && l["file"].as_str().unwrap().ends_with("split.h"))
            .filter(|l| (7..=9).contains(&u(&l["line"])))
            .map(|l| u(&l["samples"]))
            .sum();
        let all = function_samples(s, function);
        assert!(
            in_loop as f64 >= 0.9 * all as f64,
            "{m}: {in_loop} of {all} in the loop"
        );
    }
    let top = &lines[0];
    assert!(top["file"].as_str().unwrap().ends_with("split.h"), "{top}");
    // With its text: the loop's lines of split.h.
    let loop_text = [
        "for (uint64_t i = 0; i < n; i++) {",
        "x = (x ^ i) * k;",
        "x = (x << 23) | (x >> 41);",
    ];
    for l in lines.iter().take(2) {
        let text = l["text"].as_str().unwrap_or("");
        assert!(loop_text.iter().any(|t| text.contains(t)), "{l}");
    }
    // Inlined frames: the bucket's innermost frame is chain, inlined into exe_hot.
    let b = s["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["module"] == "split")
        .max_by_key(|b| u(&b["samples"]))
        .unwrap();
    let frames = b["frames"].as_array().unwrap();
    assert_eq!(frames[0]["function"], "chain", "{b}");
    assert_eq!(frames[0]["inlined"], true);
    assert_eq!(frames.last().unwrap()["function"], "exe_hot");
    assert!(r["run"]["symbolize_ms"].as_f64().unwrap() < 2000.0);
}

#[test]
fn split_without_debug_info_uses_the_symbol_table() {
    let p = programs();
    let r = record_split(&p.dir.join("nodebug"));
    let s = source(&r, "Timer");
    check_split(s, "exe_hot vs lib_hot (no debug info)");
    assert!(
        s["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["module"] != "split" && l["module"] != "libsplit.so"),
        "no lines without debug info"
    );
}

#[test]
fn fully_stripped_split_shows_module_offsets_and_module_shares() {
    let p = programs();
    let r = record_split(&p.dir.join("stripped"));
    let s = source(&r, "Timer");
    check_accounting(s);
    let exe = u(&module(s, "split")["samples"]);
    let lib = u(&module(s, "libsplit.so")["samples"]);
    within_3_sigma(exe, lib, 0.6, "split vs libsplit.so (stripped)");
    let f = s["functions"].as_array().unwrap();
    let in_exe: Vec<&Value> = f.iter().filter(|f| f["module"] == "split").collect();
    // The PLT keeps its names when stripped (they come from the relocations): a rare sample in it, e.g. in the
    // lazy binder's `.plt` entry at a first call, is named so.
    assert!(
        in_exe.iter().all(|f| {
            let name = f["name"].as_str().unwrap();
            name.starts_with("split+0x") || name == ".plt" || name.ends_with("@plt")
        }),
        "nothing names the stripped executable's code: {in_exe:?}"
    );
    // A shared library keeps its exported names in .dynsym: its samples are lib_hot's, but for the rare one
    // that lands in the code the loader runs once at load (the library's init functions; one run in many took
    // 1 of 1992 there).
    let named = function_samples(s, "lib_hot");
    assert!(
        named <= lib && named + 2 >= lib,
        "lib_hot {named} of the library's {lib}"
    );
}

/// `(start, size)` of the local function `name` in `prog`, from `nm -S`.
fn nm_function(prog: &Path, name: &str) -> (u64, u64) {
    let out = Command::new("nm")
        .args(["-S", "--defined-only", prog.to_str().unwrap()])
        .output()
        .expect("run nm");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 4 && f[3] == name)
        .map(|f| {
            let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
            (hex(f[0]), hex(f[1]))
        })
        .unwrap_or_else(|| panic!("nm finds no {name} in {}: {text}", prog.display()))
}

/// Fully stripped, two static hot functions are still one row each: `.eh_frame` bounds them, and each is named
/// by its start (the address `nm` gives for it in the unstripped build), not split into one row per address.
#[test]
fn fully_stripped_static_functions_are_one_row_each_named_by_their_start() {
    let p = programs();
    let r = record_json(&p.dir.join("stripped/two_static"), &["1.0"]);
    let s = source(&r, "Timer");
    check_accounting(s);
    let (a, a_size) = nm_function(&p.path("two_static"), "hot_a");
    let (b, b_size) = nm_function(&p.path("two_static"), "hot_b");
    let f = s["functions"].as_array().unwrap();
    let in_exe: Vec<&Value> = f.iter().filter(|f| f["module"] == "two_static").collect();
    let names: Vec<&str> = in_exe.iter().map(|f| f["name"].as_str().unwrap()).collect();
    // No row for an address inside either function other than its start. (A PLT stub keeps its name when the
    // program is stripped, from its relocations: a sample in `clock_gettime@plt` is named so.)
    for name in names.iter().filter(|n| !n.ends_with("@plt")) {
        let off = name
            .strip_prefix("two_static+0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        let off =
            off.unwrap_or_else(|| panic!("a stripped program's row is module+0x…: {names:?}"));
        for (start, size) in [(a, a_size), (b, b_size)] {
            assert!(
                !(start < off && off < start + size),
                "{name} is inside the function at {start:#x}: {names:?}"
            );
        }
    }
    // Main, the hot pair and at most a row or two of start-up code: not one row per sampled address.
    assert!(names.len() <= 5, "{} rows: {names:?}", names.len());
    let a_samples = function_samples(s, &format!("two_static+{a:#x}"));
    let b_samples = function_samples(s, &format!("two_static+{b:#x}"));
    assert_eq!(
        [names[0], names[1]],
        [format!("two_static+{a:#x}"), format!("two_static+{b:#x}")],
        "the two hot functions on top, named by their starts"
    );
    // All of each function's samples in its row: the designed 60 / 40 holds, and the two rows are nearly all
    // of the module.
    within_3_sigma(a_samples, b_samples, 0.6, "hot_a vs hot_b (stripped)");
    let exe = u(&module(s, "two_static")["samples"]);
    assert!(
        (a_samples + b_samples) as f64 >= 0.99 * exe as f64,
        "{a_samples} + {b_samples} of {exe}"
    );
}

#[test]
fn dlopen_half_way_is_profiled_from_the_moment_it_is_mapped() {
    let p = programs();
    let prog = p.path("late_load");
    let plugin = p.path("plugin.so");
    // --poll-ms is accepted for old scripts and has no effect: nothing is polled any more.
    let out = ntprof(&[
        "record",
        "--format",
        "json",
        "-i",
        "2000",
        "--poll-ms",
        "300",
        "--",
        prog.to_str().unwrap(),
        "1.0",
        plugin.to_str().unwrap(),
    ]);
    let r = report(&out, 0);
    let err = stderr(&out);
    let dlopen_ms: f64 = err
        .split("dlopen_ms=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("late_load did not say when it loaded the plugin: {err}"));
    assert_eq!(r["run"]["module_poll_ms"].as_f64(), Some(0.0));
    let s = source(&r, "Timer");
    check_accounting(s);
    let m = module(s, "plugin.so");
    let from = m["profiled_from_ms"].as_f64().unwrap();
    // The module counts from its mapping, inside the dlopen: before dlopen returned (late_load measures from its
    // main, which starts a few ms after the exec the run counts from).
    eprintln!("plugin loaded at {dlopen_ms} ms (after main), mapped at {from} ms (after exec)");
    assert!(
        (from - dlopen_ms).abs() < 100.0,
        "mapped at {from} ms, dlopen returned at {dlopen_ms} ms"
    );
    let plugin_hot = function_samples(s, "plugin_hot");
    let exe_hot = function_samples(s, "exe_hot");
    let outside = u(&s["stats"]["outside"]);
    assert_eq!(
        outside, 0,
        "no sample is outside: the plugin counts from its mapping"
    );
    // Half the CPU time ran in the plugin. Not a 3-sigma bound: the halves are halves of the process's CPU time,
    // kernel time included (the dlopen's mappings and page faults land in the second half), which user-space
    // samples do not see.
    let half = plugin_hot as f64 / (plugin_hot + exe_hot) as f64;
    eprintln!("plugin share of the two halves: {half:.4}");
    assert!((half - 0.5).abs() < 0.06, "plugin half {half:.4}");
}

/// A process running `split` for `seconds` of CPU time.
fn spawn_split(seconds: &str) -> std::process::Child {
    Command::new(programs().path("split"))
        .arg(seconds)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn attach_reports_the_same_functions() {
    let mut child = spawn_split("30");
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id().to_string();
    let t0 = Instant::now();
    let out = ntprof(&[
        "attach",
        "--pid",
        &pid,
        "--duration",
        "2",
        "--format",
        "json",
        "-i",
        "2000",
    ]);
    let wall = t0.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    let r = report(&out, 0);
    assert_eq!(r["run"]["ended_by"], "duration");
    // Ended by the 2 s duration, not by the target's 30 s of CPU time. The recorder waits in rounds of at most
    // the time left and stops after the first round that ends past the deadline: never before 2 s (its clock is
    // the one the deadline was set on), and after it by one round's read pass and the wake-up's scheduling
    // delay only, well under 0.5 s even on a loaded 2-processor machine. The command's wall time holds the
    // duration and the report, made after it (seconds, generously, on a loaded machine).
    let d = r["run"]["duration_s"].as_f64().unwrap();
    assert!((2.0..2.5).contains(&d), "duration {d}");
    assert!(
        wall.as_secs_f64() >= d && wall < Duration::from_secs(20),
        "{wall:?} for a recording of {d} s"
    );
    let s = source(&r, "Timer");
    check_split(s, "attach: exe_hot vs lib_hot");
}

#[test]
fn attach_errors() {
    // No such process.
    let out = ntprof(&["attach", "--pid", "2147483647", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no such process 2147483647"),
        "{}",
        stderr(&out)
    );
    // Another user's process (init, root's), unprivileged.
    let out = ntprof_as(
        &["attach", "--pid", "1", "--duration", "1"],
        Duration::from_secs(20),
        true,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("not allowed to profile process 1") && e.contains("another user"),
        "{e}"
    );
    // Bad pid syntax: a usage error.
    let out = ntprof(&["attach", "--pid", "zero"]);
    assert_eq!(out.status.code(), Some(2));
    // Unknown module.
    let mut child = spawn_split("10");
    let pid = child.id().to_string();
    std::thread::sleep(Duration::from_millis(100));
    let out = ntprof(&[
        "attach",
        "--pid",
        &pid,
        "--module",
        "nosuch.so",
        "--duration",
        "1",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains("unknown module nosuch.so") && e.contains("libsplit.so"),
        "{e}"
    );
}

#[test]
fn attach_to_a_process_that_exits() {
    let mut child = spawn_split("0.5");
    let pid = child.id().to_string();
    let t0 = Instant::now();
    let out = ntprof(&[
        "attach",
        "--pid",
        &pid,
        "--duration",
        "20",
        "--format",
        "json",
    ]);
    let _ = child.wait();
    let r = report(&out, 0);
    assert_eq!(r["run"]["ended_by"], "process-exited");
    // Ended by the target's exit, not by the 20 s duration.
    assert!(t0.elapsed() < Duration::from_secs(18), "{:?}", t0.elapsed());
    assert!(
        r["run"]["notes"]
            .to_string()
            .contains("exited during the attach")
    );
    check_accounting(source(&r, "Timer"));
}

#[test]
fn kernel_profile_names_kernel_functions_and_needs_privilege() {
    let prog = programs().path("syscalls");
    // Unprivileged: refused, naming the privilege and the sysctl (system-wide: paranoid 0 or less).
    let out = ntprof_as(
        &["record", "--kernel", "--duration", "0.2"],
        Duration::from_secs(30),
        true,
    );
    if is_root() {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let e = stderr(&out);
        assert!(
            e.contains("CAP_PERFMON") && e.contains("perf_event_paranoid <= 0"),
            "{e}"
        );
    }
    if !common::root_or_skip("the privileged half of this test profiles the kernel") {
        return;
    }
    // The whole system while the program runs beside it (the command form profiles the command alone).
    let mut busy = Command::new(&prog).arg("0.8").spawn().unwrap();
    let out = ntprof(&[
        "record",
        "--kernel",
        "--duration",
        "0.6",
        "--format",
        "json",
    ]);
    let _ = busy.wait();
    let r = report(&out, 0);
    assert_eq!(r["run"]["mode"], "kernel");
    // The idle task, where sampled, is named as perf names it (pid 0 has no /proc entry to name it from).
    for p in r["processes"].as_array().unwrap() {
        if p["pid"] == 0 {
            assert_eq!(p["command"], "swapper", "{p}");
        }
    }
    let s = source(&r, "Timer");
    check_accounting(s);
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let names: std::collections::HashSet<&str> = kallsyms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let f = s["functions"].as_array().unwrap();
    let named: Vec<&str> = f
        .iter()
        .take(10)
        .map(|f| f["name"].as_str().unwrap())
        .filter(|n| names.contains(n))
        .collect();
    assert!(
        named.len() >= 3,
        "kernel functions from kallsyms among the top: {f:?}"
    );
    assert!(u(&module(s, "[kernel]")["samples"]) > 50);
    eprintln!("kernel top functions: {named:?}");
}

#[test]
fn two_sources_each_with_its_counts_and_interval() {
    let prog = programs().path("faults");
    let out = ntprof(&[
        "record",
        "--format",
        "json",
        "--source",
        "Timer,page-faults",
        "--",
        prog.to_str().unwrap(),
        "0.5",
    ]);
    let r = report(&out, 0);
    let t = source(&r, "Timer");
    let pf = source(&r, "page-faults");
    for s in [t, pf] {
        check_accounting(s);
        assert!(u(&s["stats"]["counted"]) > 0, "{}", s["stats"]);
        assert!(s["achieved_rate_hz"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(t["interval_unit"], "100ns");
    assert_eq!(pf["interval_unit"], "events");
    assert_eq!(u(&t["interval"]), 10_000);
    assert_eq!(
        pf["functions"][0]["name"], "touch_pages",
        "page faults happen in touch_pages"
    );
    assert_eq!(
        t["functions"][0]["name"], "compute",
        "CPU time goes to compute"
    );
    assert_ne!(t["stats"], pf["stats"]);
}

#[test]
fn exit_status_is_passed_through() {
    let out = ntprof(&["record", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let segv = programs().path("segv");
    let out = ntprof(&["record", "--", segv.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(139), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("killed by signal 11"));
    let out = ntprof(&["record", "--", "nosuchcmd-ntprof-test"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        stderr(&out).contains("command not found"),
        "{}",
        stderr(&out)
    );
    let out = ntprof(&["record", "--bucket", "40", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let out = ntprof(&["record", "--range", "0x2000-0x1000", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let out = ntprof(&["record", "--source", "TotalCycles", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot be sampled"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn stdio_is_left_to_the_command() {
    let file = common::report_path();
    let mut child = Command::new(NTPROF)
        .args(["record", "-q", "--format", "json", "-o"])
        .arg(&file)
        .args(["--", "sh", "-c", "read x; echo got-$x >&2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let mut out = child.wait_with_output().unwrap();
    common::append_report(&mut out, &file);
    assert!(stderr(&out).contains("got-hello"), "{}", stderr(&out));
    report(&out, 0);
}

/// The README's main command: `ntprof record -- target/release/ntprof-demo`.
#[test]
fn readme_demo_shows_the_designed_shares() {
    let demo = Path::new(NTPROF).with_file_name("ntprof-demo");
    // `cargo test` builds the demo package's test harness, not its program: build the program beside ntprof
    // (same target directory and profile). The build lock is free while tests run.
    let profile_dir = Path::new(NTPROF).parent().unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let mut build = std::process::Command::new(env!("CARGO"));
    build
        .args([
            "build",
            "-p",
            "ntprof-demo",
            "--bin",
            "ntprof-demo",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build -p ntprof-demo");
    assert!(status.success(), "cargo build -p ntprof-demo failed");
    assert!(
        demo.exists(),
        "{} is missing after the build",
        demo.display()
    );
    let r = record_json(&demo, &["1"]);
    let s = source(&r, "Timer");
    check_accounting(s);
    let exe = function_samples(s, "demo_exe_hot");
    let lib = function_samples(s, "demo_lib_hot");
    let plugin = function_samples(s, "demo_plugin_hot");
    within_3_sigma(exe, lib + plugin, 0.5, "demo_exe_hot");
    within_3_sigma(lib, exe + plugin, 0.3, "demo_lib_hot");
    within_3_sigma(plugin, exe + lib, 0.2, "demo_plugin_hot");
    // The plugin counts from its mapping (the dlopen, a fraction of a millisecond in), and nothing is outside.
    let from = module(s, "libntprof_demo_plugin.so")["profiled_from_ms"]
        .as_f64()
        .unwrap();
    // Early in the run (its first quarter), whatever a loaded machine's scheduling delays add to the dlopen.
    let duration_ms = r["run"]["duration_s"].as_f64().unwrap() * 1e3;
    assert!(
        from > 0.0 && from < 0.25 * duration_ms,
        "plugin mapped at {from} ms of {duration_ms:.0} ms"
    );
    assert_eq!(u(&s["stats"]["outside"]), 0, "{}", s["stats"]);
}

/// The `/proc/PID/stat` fields after the command name (field 3, the state, first), or none once it is gone.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    Some(rest.split(' ').map(str::to_string).collect())
}

/// How long a test waits for a state the program under test must reach.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Wait (at most `WAIT_LIMIT`) until `what` holds; `why` says what was awaited when it never does.
fn wait_for(what: impl Fn() -> bool, why: &str) {
    let t0 = Instant::now();
    while !what() {
        assert!(t0.elapsed() < WAIT_LIMIT, "waited {WAIT_LIMIT:?} for {why}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `parent` has a child named `name` that runs on its own: started and no longer traced.
fn runs_untraced_child(parent: u32, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat_fields(pid).is_some_and(|f| f[1] == parent.to_string()))
        .any(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status.lines().any(|l| l == format!("Name:\t{name}"))
                && status.lines().any(|l| l == "TracerPid:\t0")
        })
}

/// Whether process `pid` has a perf_event file descriptor open.
fn has_perf_event(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.filter_map(Result::ok).any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
        })
    })
}

/// User CPU ticks (1/100 s) process `pid` has used.
fn user_ticks(pid: u32) -> u64 {
    stat_fields(pid).map_or(0, |f| f[11].parse().unwrap_or(0))
}

/// SIGINT to ntprof: `record` forwards it to the command (which dies of it: 130), `attach` ends and reports.
/// The signal is sent once the state it must find is reached, however slowly a loaded machine gets there: for
/// `record`, the command running untraced (ntprof reads its signals from then on); for `attach`, the samplers
/// open and the target's CPU time grown by 0.2 s since (samples to report).
#[test]
fn sigint_is_forwarded_by_record_and_ends_attach() {
    let split = programs().path("split");
    let start = |args: &[&str]| {
        let mut cmd = Command::new(NTPROF);
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        // SAFETY: runs in the forked child before execve and calls only sigaction (async-signal-safe). A test
        // run started in the background by a non-interactive shell inherits SIGINT ignored, and a command that
        // ignores it does not die of it: the command ntprof starts gets the default action, as from a terminal.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::signal::signal(Signal::SIGINT, nix::sys::signal::SigHandler::SigDfl)
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        cmd.spawn().unwrap()
    };
    let interrupt = |child: &std::process::Child| {
        kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    };
    let file = common::report_path();
    let rec = start(&[
        "record",
        "--format",
        "json",
        "-o",
        file.to_str().unwrap(),
        "--",
        split.to_str().unwrap(),
        "30",
    ]);
    wait_for(
        || runs_untraced_child(rec.id(), "split"),
        "ntprof record to let split run",
    );
    interrupt(&rec);
    let mut out = rec.wait_with_output().unwrap();
    common::append_report(&mut out, &file);
    let r = report(&out, 130);
    assert_eq!(r["run"]["exit_status"], 130);

    let mut target = spawn_split("30");
    let att = start(&[
        "attach",
        "--format",
        "json",
        "--pid",
        &target.id().to_string(),
    ]);
    wait_for(
        || has_perf_event(att.id()),
        "ntprof attach to open its samplers",
    );
    let ticks = user_ticks(target.id());
    wait_for(
        || user_ticks(target.id()) >= ticks + 20,
        "the target to run 0.2 s of CPU",
    );
    interrupt(&att);
    let out = att.wait_with_output().unwrap();
    let _ = target.kill();
    let _ = target.wait();
    let r = report(&out, 0);
    assert_eq!(r["run"]["ended_by"], "interrupted");
    assert!(function_samples(source(&r, "Timer"), "exe_hot") > 0);
}

/// Every thread is profiled, those created after the start too: the samples match the process's CPU time.
#[test]
fn threads_created_later_are_profiled() {
    let prog = programs().path("threads");
    let out = ntprof(&[
        "record",
        "--format",
        "json",
        "-i",
        "5000",
        "--",
        prog.to_str().unwrap(),
        "0.5",
    ]);
    let r = report(&out, 0);
    let err = stderr(&out);
    let cpu_ms: f64 = err
        .split("cpu_ms=")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no cpu_ms: {err}"));
    let s = source(&r, "Timer");
    check_accounting(s);
    let hot = function_samples(s, "thread_hot") as f64;
    // One sample per 500 us of CPU time; the workers run nearly all of it.
    let expected = cpu_ms / 0.5;
    eprintln!("thread_hot {hot} samples, {expected:.0} expected from {cpu_ms} ms of CPU time");
    assert!(
        hot > 0.8 * expected && hot < 1.1 * expected,
        "{hot} vs {expected:.0}"
    );
}

/// `ntprof sources` says whether context switches and migrations, which the kernel samples in its own code,
/// can be sampled by this user: yes with the privilege to sample the kernel (root here), no with the reason
/// without it (dropped with setpriv, where perf_event_paranoid >= 2).
#[test]
fn sources_say_which_user_may_sample_context_switches() {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    let line_of = |out: &Output, event: &str| -> String {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "ntprof sources failed:\n{text}");
        text.lines()
            .find(|l| l.contains(&format!(" {event} ")))
            .unwrap_or_else(|| panic!("no {event} line:\n{text}"))
            .to_string()
    };
    let here = |line: &str| line.split_whitespace().nth(2).unwrap_or("").to_string();
    for event in ["context-switches", "cpu-migrations"] {
        if is_root() {
            let line = line_of(&ntprof(&["sources"]), event);
            assert_eq!(here(&line), "yes", "{line}");
        }
        if paranoid >= 2 && is_root() {
            let out = ntprof_as(&["sources"], Duration::from_secs(60), true);
            let line = line_of(&out, event);
            assert_eq!(here(&line), "no", "{line}");
            assert!(
                line.contains("taken in the kernel") && line.contains("CAP_PERFMON"),
                "the reason names the privilege: {line}"
            );
        }
    }
}
