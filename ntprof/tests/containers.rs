//! Containers made by the tests themselves: a root of copied files entered with `unshare --mount --pid --fork
//! chroot ROOT PROGRAM` (as root) and `unshare -r --mount --pid --fork chroot ...` (a rootless container, as
//! Podman makes one, with ntprof unprivileged). The container's program is at a path that also exists on the
//! host, where another program lies: the host's must never name it. Every check compares with what the program
//! ran: its designed shares (SPIN times the processor time in `container_spin` as in `container_other`), and
//! the names its own files give (the perf map the container holds). Also: a process that exits and whose root is
//! deleted before the report, an attach from the host, and a hostile container whose perf map is a symlink out
//! of its root or a FIFO. The root whose libc differs from the host's (a Debian 13 root) is in
//! `containers_libc.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{build_dir, function_samples, gcc, is_root, ntprof_command, run_ok, u};

const LIMIT: Duration = Duration::from_secs(120);
/// The processor time of `container_spin` for each of `container_other` (the same loop at two addresses).
const SPIN: u64 = 3;
/// Where the program's JIT code is (prog.c's JIT_AT).
const JIT_AT: u64 = 0x7e55_0000_0000;

/// A container root of copied files: the program at `prog` (a path that also exists on the host, holding
/// another program), the libraries it needs copied from the host.
struct Container {
    root: PathBuf,
    prog: String,
}

fn container(tag: &str) -> Container {
    let dir = build_dir(&format!("containers-{tag}"));
    let root = dir.join("root");
    let _ = std::fs::remove_dir_all(&root);
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let prog = shared.join("prog");
    // The host's program at the path: other names, other code.
    let host_c = dir.join("host.c");
    std::fs::write(
        &host_c,
        "volatile unsigned long s;\n__attribute__((noinline)) void host_program_only(void) { for (int i = 0; \
         i < 20000; i++) s += i; }\nint main(void) { for (int i = 0; i < 100; i++) host_program_only(); \
         return 0; }\n",
    )
    .unwrap();
    gcc(
        &[
            "-O1",
            "-o",
            prog.to_str().unwrap(),
            host_c.to_str().unwrap(),
        ],
        &dir,
    );
    // The container's, at the same path inside its root.
    let inside = root.join(prog.strip_prefix("/").unwrap());
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/containers/prog.c");
    gcc(
        &[
            "-O1",
            &format!("-DSPIN={SPIN}"),
            "-o",
            inside.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
        &dir,
    );
    let ldd = Command::new("ldd").arg(&inside).output().unwrap();
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let to = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(lib, &to).unwrap();
    }
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    set_mode(&root.join("tmp"), 0o1777);
    Container {
        root,
        prog: prog.to_str().unwrap().to_string(),
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The command line entering `c` (rootless with `unshare -r` when `rootless`), running its program with `args`.
fn enter(c: &Container, rootless: bool, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec!["unshare".into()];
    if rootless {
        v.push("-r".into());
    }
    for a in ["--mount", "--pid", "--fork", "chroot"] {
        v.push(a.into());
    }
    v.push(c.root.to_str().unwrap().into());
    v.push(c.prog.clone());
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

/// `ntprof record -q --format json` of `command`, unprivileged (as nobody) when `unprivileged`.
fn record(unprivileged: bool, command: &[String]) -> Value {
    let mut cmd = ntprof_command(unprivileged);
    cmd.args(["record", "-q", "--format", "json", "-i", "2000", "--"])
        .args(command);
    let out = run_ok(&mut cmd, LIMIT);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Skip (outside CI) or fail (in CI) when the test cannot make its containers: it needs root to run an
/// unprivileged ntprof as nobody, and `unshare`.
fn can_run() -> bool {
    let ok = is_root();
    if !ok {
        assert!(
            !common::in_ci(),
            "these tests make containers and run ntprof as nobody: run them as root"
        );
        eprintln!("SKIPPED: not root (the tests make containers and run ntprof as nobody)");
    }
    ok
}

/// The container's program is named from its own file, in its designed shares, and never with the host's
/// program's names.
fn check_named_from_the_container(r: &Value) {
    let s = &r["sources"][0];
    assert_eq!(
        function_samples(s, "host_program_only"),
        0,
        "the host's program named the container's"
    );
    let spin = function_samples(s, "container_spin");
    let other = function_samples(s, "container_other");
    let n = spin + other;
    assert!(n >= 100, "too few samples of the program: {n}\n{s}");
    // SPIN times the processor time of the other, spent in the same loop: share SPIN/(SPIN+1) within 5
    // binomial sigma, and 0.03 for the clock readings between the rounds (a few microseconds each, which
    // fall in either function's last round of 2 ms).
    let p = SPIN as f64 / (SPIN + 1) as f64;
    let sigma = (p * (1.0 - p) / n as f64).sqrt();
    let share = spin as f64 / n as f64;
    assert!(
        (share - p).abs() <= 5.0 * sigma + 0.03,
        "container_spin {share:.3} of the program's samples, designed {p:.3} (n {n})"
    );
    let prog = s["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "prog")
        .expect("a module prog");
    assert!(u(&prog["samples"]) >= n);
}

#[test]
fn a_different_program_at_the_containers_path_is_never_named_from_the_host() {
    if !can_run() {
        return;
    }
    for (rootless, unprivileged) in [(false, false), (true, true)] {
        let c = container(if rootless { "rootless" } else { "root" });
        let r = record(unprivileged, &enter(&c, rootless, &["1.5"]));
        check_named_from_the_container(&r);
        // The process is pid 1 in its namespace: the report says so.
        let inner = r["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["command"] == "prog")
            .expect("the program's process");
        assert_eq!(inner["ns_pid"], 1, "{inner}");
    }
}

#[test]
fn a_process_that_exits_and_whose_root_is_deleted_before_the_report_is_still_named() {
    if !can_run() {
        return;
    }
    let c = container("gone");
    // The container's program exits, its root is deleted, and the run goes on a while before the report.
    let line = enter(&c, false, &["1.5"])
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let script = format!("{line} && rm -rf '{}' && sleep 0.5", c.root.display());
    let r = record(false, &["sh".into(), "-c".into(), script]);
    assert!(!c.root.exists());
    check_named_from_the_container(&r);
}

/// The process `name` of nobody's or root's whose command line is exactly `prog`'s, waited for.
fn pid_of(prog: &str) -> u32 {
    for _ in 0..200 {
        let out = Command::new("pgrep")
            .args(["-x", "-f"])
            .arg(format!("{prog} 4"))
            .output()
            .unwrap();
        if let Some(pid) = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
        {
            return pid.parse().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{prog} did not start");
}

#[test]
fn attach_from_the_host_to_a_containerized_process() {
    if !can_run() {
        return;
    }
    for (rootless, unprivileged) in [(false, false), (true, true)] {
        let c = container(if rootless {
            "attach-rootless"
        } else {
            "attach"
        });
        let line = enter(&c, rootless, &["4"]);
        let mut cmd = if unprivileged {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"]);
            c.args(&line);
            c
        } else {
            let mut c = Command::new(&line[0]);
            c.args(&line[1..]);
            c
        };
        let mut child = cmd.stdout(Stdio::null()).spawn().unwrap();
        let pid = pid_of(&c.prog);
        let mut a = ntprof_command(unprivileged);
        a.args([
            "attach", "-q", "--format", "json", "-i", "2000", "-d", "1.5", "-p",
        ])
        .arg(pid.to_string());
        let out = run_ok(&mut a, LIMIT);
        let _ = child.kill();
        let _ = child.wait();
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        check_named_from_the_container(&r);
        assert_eq!(r["processes"][0]["ns_pid"], 1, "{}", r["processes"]);
    }
}

/// The samples of the container's JIT code, by function name.
fn jit_names(r: &Value) -> Vec<(String, u64)> {
    r["sources"][0]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["module"].as_str().unwrap_or("").starts_with("[JIT]") || f["module"] == "[anon]"
        })
        .map(|f| (f["name"].as_str().unwrap().to_string(), u(&f["samples"])))
        .collect()
}

#[test]
fn a_perf_map_written_under_the_containers_own_pid_names_its_jit_code() {
    if !can_run() {
        return;
    }
    for (rootless, unprivileged) in [(false, false), (true, true)] {
        let c = container(if rootless { "map-rootless" } else { "map" });
        // The program is pid 1 in its namespace: its runtime would write /tmp/perf-1.map in its root.
        let map = c.root.join("tmp/perf-1.map");
        std::fs::write(&map, format!("{JIT_AT:x} 100 container_jit_code\n")).unwrap();
        if unprivileged {
            // A rootless container's files belong to the user who made it (its root user, on the host).
            std::os::unix::fs::chown(&map, Some(65534), Some(65534)).unwrap();
        }
        let r = record(unprivileged, &enter(&c, rootless, &["1.5", "jit"]));
        let names = jit_names(&r);
        let named: u64 = names
            .iter()
            .filter(|(n, _)| n == "container_jit_code")
            .map(|(_, s)| s)
            .sum();
        let all: u64 = names.iter().map(|(_, s)| s).sum();
        assert!(
            all >= 100 && named == all,
            "the JIT code is not named from its perf map: {names:?}"
        );
        let module = r["sources"][0]["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str().unwrap_or("").starts_with("[JIT]"))
            .expect("a JIT module")
            .clone();
        assert_eq!(module["path"], "/tmp/perf-1.map");
    }
}

#[test]
fn a_hostile_containers_perf_map_symlink_or_fifo_never_reaches_the_host() {
    if !can_run() {
        return;
    }
    let c = container("hostile");
    // A host file with names for the container's JIT code, and the container's perf map a link to it (by an
    // absolute path and by `..`): inside the root neither exists.
    let planted = std::env::temp_dir().join(format!("ntprof-planted-{}.map", std::process::id()));
    std::fs::write(&planted, format!("{JIT_AT:x} 100 planted_on_the_host\n")).unwrap();
    let map = c.root.join("tmp/perf-1.map");
    let up = format!("../../../../../../../../..{}", planted.display());
    for target in [planted.to_str().unwrap(), up.as_str()] {
        let _ = std::fs::remove_file(&map);
        std::os::unix::fs::symlink(target, &map).unwrap();
        let r = record(false, &enter(&c, false, &["1", "jit"]));
        let names = jit_names(&r);
        assert!(
            names.iter().all(|(n, _)| n != "planted_on_the_host") && !names.is_empty(),
            "a link in the container reached the host's file ({target}): {names:?}"
        );
    }
    // A FIFO: not waited for, not read, and said.
    let _ = std::fs::remove_file(&map);
    let status = Command::new("mkfifo").arg(&map).status().unwrap();
    assert!(status.success());
    let r = record(false, &enter(&c, false, &["1", "jit"]));
    let notes = r.to_string();
    assert!(
        notes.contains("FIFO"),
        "no note of the FIFO: {}",
        r["sources"][0]["jit"]
    );
    let _ = std::fs::remove_file(&planted);
}

#[test]
fn top_names_a_containers_jit_code_from_the_map_under_its_own_pid() {
    if !can_run() {
        return;
    }
    let c = container("top");
    let map = c.root.join("tmp/perf-1.map");
    std::fs::write(&map, format!("{JIT_AT:x} 100 container_jit_code\n")).unwrap();
    // The plain tables (no terminal): the last one holds the whole run.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ntprof"));
    cmd.args([
        "top",
        "--duration",
        "2.5",
        "--refresh",
        "1",
        "-i",
        "2000",
        "--",
    ])
    .args(enter(&c, false, &["2", "jit"]));
    let out = run_ok(&mut cmd, LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.rsplit("--- refresh ").next().unwrap();
    // Rows: SHARE SAMPLES FUNCTION MODULE PROCESS.
    let mut named = 0u64;
    let mut all = 0u64;
    for l in last.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 4 && w[0].ends_with('%') {
            let n: u64 = w[1].parse().unwrap_or(0);
            all += n;
            if w[2] == "container_jit_code" {
                named += n;
            }
        }
    }
    // The program spends nearly all its time in the copied loop (between clock readings): a top that looked
    // for the host pid's map would show it as an unnamed address.
    assert!(
        all >= 200 && named * 10 >= all * 8,
        "the JIT code is {named} of {all} samples in top's last table:\n{text}"
    );
}

/// `node --perf-basic-prof` in a pid namespace, as the issue found it: node is pid 1 there and writes
/// /tmp/perf-1.map; ntprof must read that map (under the pid node has in its namespace), not /tmp/perf-HOSTPID.map.
#[test]
fn node_in_a_pid_namespace_is_named_from_its_own_perf_map() {
    if !can_run() {
        return;
    }
    common::require_node();
    let dir = build_dir("containers-node");
    let js = dir.join("fib.js");
    // One hot JavaScript function, about 1.5 s of processor time.
    std::fs::write(
        &js,
        "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
         const t0 = Date.now(); let s = 0;\n\
         while (Date.now() - t0 < 1500) { s += fib(25); }\n\
         if (s < 0) console.error('never');\n",
    )
    .unwrap();
    // The map node writes lands in the host's /tmp (only the pid and /proc are its own): a left-over one from
    // another run is removed first, and this run's after.
    let map = Path::new("/tmp/perf-1.map");
    let _ = std::fs::remove_file(map);
    let line: Vec<String> = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        "node",
        "--perf-basic-prof",
        js.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = record(false, &line);
    let _ = std::fs::remove_file(map);
    let s = &r["sources"][0];
    let funcs = s["functions"].as_array().unwrap();
    let total: u64 = funcs.iter().map(|f| u(&f["samples"])).sum();
    let fib: u64 = funcs
        .iter()
        .filter(|f| {
            let name = f["name"].as_str().unwrap_or("");
            f["module"].as_str().unwrap_or("").starts_with("[JIT]") && name.contains("fib")
        })
        .map(|f| u(&f["samples"]))
        .sum();
    // fib is node's work once started (about three quarters of the samples here; the rest is node's start,
    // its compilers and the collector): named from the map, at least half of the samples. Looked up under the
    // host pid, no map is found and fib is an unnamed [anon] address (0 samples named).
    assert!(
        total >= 200 && fib * 2 >= total,
        "fib named in {fib} of {total} samples: {}",
        s["functions"]
    );
    let node = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ns_pid"] == 1 && p["commands"].to_string().contains("node"))
        .unwrap_or_else(|| panic!("node with pid 1 in its namespace: {}", r["processes"]));
    assert!(node["pid"] != 1, "{node}");
}
