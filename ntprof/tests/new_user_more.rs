//! What a new user met, continued: a command's own kernel time (`record --kernel -- CMD`), `diff` of a rebuilt
//! binary under another name, and names on a wide terminal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{function_samples, gcc, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

/// The programs of `tests/new_user`, built once per test binary.
fn programs() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/new_user");
        let dir = common::build_dir("new-user-more");
        let build = |out: &str, file: &str| {
            let out = dir.join(out);
            let src = src.join(file);
            gcc(
                &[
                    "-O2",
                    "-g",
                    "-o",
                    out.to_str().unwrap(),
                    src.to_str().unwrap(),
                ],
                &dir,
            );
        };
        build("user_kernel", "user_kernel.c");
        // One program built twice under two names: a rebuild to compare.
        build("prog_fp", "leaf.c");
        build("prog_fp2", "leaf.c");
        // Two libraries with long names that differ only in the middle, each with a long-named function.
        let mut libs = Vec::new();
        for (module, which) in WIDE {
            let out = dir.join(module);
            let soname = format!("-Wl,-soname,{module}");
            let define = format!("-DWHICH={which}");
            let src = src.join("wide_lib.c");
            let args = ["-O2", "-g", "-shared", "-fPIC", &define, &soname, "-o"];
            gcc(
                &[&args[..], &[out.to_str().unwrap(), src.to_str().unwrap()]].concat(),
                &dir,
            );
            libs.push(out.to_str().unwrap().to_string());
        }
        let out = dir.join("wide");
        let main = src.join("wide_main.c");
        gcc(
            &[
                "-O2",
                "-g",
                "-o",
                out.to_str().unwrap(),
                main.to_str().unwrap(),
                &libs[0],
                &libs[1],
                "-Wl,-rpath,$ORIGIN",
            ],
            &dir,
        );
        dir
    })
}

/// The libraries of `wide` (`tests/new_user/wide_main.c`) and the function each holds (`wide_lib.c`'s WHICH).
const WIDE: [(&str, &str); 2] = [
    (
        "libwide_module_with_a_long_common_prefix_alpha_and_a_long_common_suffix.so",
        "one",
    ),
    (
        "libwide_module_with_a_long_common_prefix_beta_and_a_long_common_suffix.so",
        "two",
    ),
];

/// The function of `wide_lib.c` built with WHICH.
fn wide_function(which: &str) -> String {
    format!("wide_function_with_a_long_common_prefix_{which}_and_a_long_common_suffix_part_0")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `record --kernel -- CMD` is one profile of the command's user and kernel time: its kernel samples named from
/// kallsyms, its user samples counted in its own functions (not outside), and nothing of other processes or the
/// idle processors. Refused without the privilege, before the command runs, with the reason and the fix.
#[test]
fn kernel_with_a_command_profiles_its_user_and_kernel_time() {
    let prog = programs().join("user_kernel");
    let prog = prog.to_str().unwrap();
    // Unprivileged (nobody, no capabilities; paranoid is above 1 where this runs): refused, the command unrun.
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().parse().unwrap_or(2))
        .unwrap_or(2);
    if common::is_root() && paranoid > 1 {
        let out = common::run_bounded(
            common::ntprof_command(true).args(["record", "--kernel", "--", prog, "0.05"]),
            Duration::from_secs(60),
        );
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(
            e.contains("kernel side of a command") && e.contains("perf_event_paranoid <= 1"),
            "{e}"
        );
        assert!(e.contains("Fix: run ntprof as root"), "{e}");
        // The command stopped before its first instruction and was killed: it printed nothing.
        assert!(!String::from_utf8_lossy(&out.stdout).contains("done"));
    }
    if !common::root_or_skip("record --kernel -- CMD samples the kernel (paranoid is 2 here)") {
        return;
    }
    let json = programs().join("user_kernel.json");
    let out = common::run_bounded(
        Command::new(NTPROF).args([
            "record",
            "-q",
            "--kernel",
            "--json",
            json.to_str().unwrap(),
            "-o",
            "/dev/null",
            "--",
            prog,
            "0.3",
        ]),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = read_json(&json);
    assert_eq!(
        r["run"]["mode"], "record",
        "the command's profile, not the system's"
    );
    // Only the command: one process, no idle task, no other process of the machine.
    let pids: Vec<u64> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(&p["pid"]))
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let s = &r["sources"][0];
    let (counted, outside) = (u(&s["stats"]["counted"]), u(&s["stats"]["outside"]));
    let total = counted + outside;
    // 0.6 s of CPU at 1 kHz: about 600 samples (a loaded machine gives the command the same CPU time, later).
    assert!(total > 400, "{}", s["stats"]);
    // Every sample is the command's own code or the kernel's text: nothing is outside but the odd kernel
    // address outside the text (a BPF or ftrace trampoline), well under 1 % (3 sigma of a rare event at 600).
    assert!(outside * 100 <= total, "{}", s["stats"]);
    let kernel = s["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            let path = m["path"].as_str().unwrap();
            path == "[kernel.kallsyms]" || path.starts_with("[module ")
        })
        .map(|m| u(&m["samples"]))
        .sum::<u64>();
    let user = function_samples(s, "user_spin");
    // The program spends equal CPU time (its own clock) in user_spin and in the kernel's reads of /dev/zero:
    // each is 50 % of its samples, with a binomial sigma of 2 points at 600 samples; the bounds (35-65 %) leave
    // 7 sigma and the process's start, exit and clock reads (kernel time outside the reads).
    let share = |n: u64| n as f64 / total as f64;
    assert!(
        (0.35..0.65).contains(&share(user)),
        "user_spin {user} of {total}"
    );
    assert!(
        (0.35..0.65).contains(&share(kernel)),
        "kernel {kernel} of {total}"
    );
    // The kernel's functions are named from kallsyms: the reads' own (read_zero, or the copy it calls).
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let names: std::collections::HashSet<&str> = kallsyms
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let top_kernel = s["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["module"] == "[kernel]")
        .expect("a kernel function");
    assert!(
        names.contains(top_kernel["name"].as_str().unwrap()),
        "{top_kernel}"
    );
    assert!(share(u(&top_kernel["samples"])) > 0.25, "{top_kernel}");
    let notes = r["run"]["notes"].to_string();
    assert!(
        notes.contains("user and kernel time of the command"),
        "{notes}"
    );
    eprintln!(
        "user_spin {user}, kernel {kernel}, outside {outside} of {total}; top kernel function {}",
        top_kernel["name"]
    );
}

/// `diff` of a program and its rebuild under another name: each function is one row of both profiles (the main
/// executable matched with the main executable), and the header says how it matched; in JSON and in pprof.
#[test]
fn diff_of_a_rebuilt_binary_matches_functions_across_the_rename() {
    let dir = programs();
    let mut files = Vec::new();
    for prog in ["prog_fp", "prog_fp2"] {
        let json = dir.join(format!("{prog}.json"));
        let pprof = dir.join(format!("{prog}.pb.gz"));
        let out = common::run_bounded(
            Command::new(NTPROF)
                .args(["record", "-q", "--json", json.to_str().unwrap()])
                .args(["--pprof", pprof.to_str().unwrap(), "-o", "/dev/null", "--"])
                .arg(dir.join(prog)),
            Duration::from_secs(120),
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        files.push((json, pprof));
    }
    let (old, new) = (&files[0], &files[1]);
    for (a, b) in [(&old.0, &new.0), (&old.1, &new.1)] {
        let out = common::run_bounded(
            Command::new(NTPROF).args(["diff", "-n", "0"]).arg(a).arg(b),
            Duration::from_secs(60),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            text.contains("matched prog_fp → prog_fp2 (main executable)"),
            "{text}"
        );
        // leaf_loop is one row, in both profiles, under the new name; nothing is left under the old one.
        let rows: Vec<&str> = text.lines().filter(|l| l.contains(" leaf_loop ")).collect();
        assert_eq!(rows.len(), 1, "{text}");
        let cols: Vec<&str> = rows[0].split_whitespace().collect();
        let share = |c: &str| c.trim_end_matches('%').parse::<f64>().unwrap();
        // The same program twice: leaf_loop is nearly all of each run (about 90 samples at 1 kHz); the loader
        // and the exit take a sample or two, so each share is above 80 %.
        assert!(
            share(cols[1]) > 80.0 && share(cols[2]) > 80.0,
            "{}",
            rows[0]
        );
        assert!(cols.last() == Some(&"prog_fp2"), "{}", rows[0]);
        assert!(
            !text.lines().any(|l| l.trim_end().ends_with(" prog_fp")),
            "{text}"
        );
    }
}

/// The function and module columns of the function table's rows in a text report (the rows under its
/// `Samples   Share  Function` title, to the first empty line).
fn function_rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .skip_while(|l| !(l.contains("Samples") && l.contains("Function") && !l.contains("Line")))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() >= 4).then(|| (cols[2].to_string(), cols[3].to_string()))
        })
        .collect()
}

/// Names on a 230-column terminal (a tmux pane) are whole where they fit, and whole in a file or a pipe; two long
/// module names that differ only in the middle, and two long function names with a long common start and end,
/// never print alike.
#[test]
fn names_fit_the_terminal_and_are_whole_off_one() {
    let wide = programs().join("wide");
    let whole: Vec<(String, String)> = WIDE
        .iter()
        .map(|(m, w)| (wide_function(w), m.to_string()))
        .collect();
    let check = |text: &str, how: &str, terminal: bool| {
        // The rows of the two functions (main and the loader may have a sample or two).
        let mut rows: Vec<(String, String)> = function_rows(text)
            .into_iter()
            .filter(|(f, _)| f.starts_with("wide_f"))
            .collect();
        rows.sort();
        assert_eq!(rows, whole, "{how}:\n{text}");
        // The module table's names: whole off a terminal; on one, whole or cut around the part where they
        // differ (the path that follows, printed whole, may leave them less room), never alike.
        let names: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("  libwide"))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(names.len(), 2, "{how}: the module table\n{text}");
        assert_ne!(names[0], names[1], "{how}: the module table\n{text}");
        for (module, _) in WIDE {
            // What each keeps of the part where they differ: at least two letters of it (a cut may take
            // the first ones, "…lpha_…").
            let middle = if module.contains("alpha") { "ph" } else { "et" };
            let found = names.iter().filter(|n| n.contains(middle)).count();
            assert_eq!(found, 1, "{how}: {middle} in the module table\n{text}");
            assert!(
                terminal || names.contains(&module),
                "{how}: {module} whole\n{text}"
            );
        }
    };
    // No terminal: the report on standard error (a pipe), every name whole.
    let out = common::run_raw(
        Command::new(NTPROF).args(["record", "-q", "--"]).arg(&wide),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check(&stderr(&out), "no terminal", false);
    // The line table's source text: whole off a terminal (the hot line's trailing comment too).
    assert!(
        stderr(&out).contains("acc >> 3); /* a hot line whose text is longer than the room a 230-column terminal leaves it */"),
        "the hot line's source text whole:\n{}",
        stderr(&out)
    );
    // A 230-column terminal: the report on it, the names whole (they fit).
    let Some(_) = common::tool("tmux", common::on_path("tmux"), "apt-get install tmux") else {
        return;
    };
    let socket = format!("ntprof-wide-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("run tmux")
    };
    let script = format!(
        "{NTPROF} record -q -- {}; echo REPORT-END; sleep 60",
        wide.display()
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-x",
        "230",
        "-y",
        "100",
        "-s",
        "w",
        "sh",
        "-c",
        &script,
    ]);
    assert!(started.status.success(), "{}", stderr(&started));
    let t0 = std::time::Instant::now();
    let screen = loop {
        // -J: lines the terminal wrapped joined again, so that a row too long for it shows as one line.
        let pane = tmux(&["capture-pane", "-p", "-J", "-t", "w", "-S", "-300"]);
        let text = String::from_utf8_lossy(&pane.stdout).into_owned();
        if text.contains("REPORT-END") || t0.elapsed() > Duration::from_secs(60) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = tmux(&["kill-server"]);
    assert!(
        screen.contains("REPORT-END"),
        "the report did not end:\n{screen}"
    );
    check(&screen, "a 230-column terminal", true);
    // Each line of the tables fits the terminal.
    for l in screen
        .lines()
        .filter(|l| l.contains("wide_function") || l.contains("libwide"))
    {
        assert!(l.chars().count() <= 230, "{l}");
    }
    // The hot line's text is cut to the room left (its end shown as cut), not left out.
    assert!(
        screen
            .lines()
            .any(|l| l.contains("acc += i * i ^ (acc >> 3);") && l.trim_end().ends_with('…')),
        "the hot line's source text cut to the terminal:\n{screen}"
    );
}
