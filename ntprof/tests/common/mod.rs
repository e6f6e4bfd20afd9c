//! Helpers shared by ntprof's end-to-end tests (each test file is a crate of its own and says `mod common;`):
//! building the C test programs with gcc into a per-run directory, running a command against a deadline, and
//! finding the external tools (pprof, rsvg-convert...) some tests read their outputs with.

use std::borrow::BorrowMut;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A fresh directory `ntprof-<tag>-<pid>` under cargo's temporary directory for integration tests, for the C
/// programs one test binary builds.
#[allow(dead_code)] // Not every test file builds in a scratch directory of the target.
pub fn build_dir(tag: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ntprof-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run `gcc ARGS` in `cwd`; panic with its diagnostics when it fails.
#[allow(dead_code)] // Not every test file builds C programs itself.
pub fn gcc(args: &[&str], cwd: &Path) {
    let out = Command::new("gcc")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where an `ntprof record` run by `cmd` writes its report when `cmd` names no file for it: `-o FILE` inserted
/// after `record` into a copy of `cmd` (the copy and the file returned), or `None` when `cmd` is no such run
/// (not ntprof, not `record`, or it names its own output: `-o`, `--output`, `--every`; or asks for help).
///
/// `record -- CMD` keeps the profile apart from CMD's output: a machine format goes only to a file, the text
/// report to stderr when stdout is not a terminal. The tests written when the report shared stdout read it
/// there: [`run_bounded`] runs such a command with `-o FILE` and puts the file after CMD's own output on
/// stdout, as it was.
fn with_report_file(cmd: &Command) -> Option<(Command, PathBuf)> {
    let ntprof = Path::new(env!("CARGO_BIN_EXE_ntprof"));
    let args: Vec<&std::ffi::OsStr> = cmd.get_args().collect();
    // ntprof itself, or through setpriv (`ntprof_command(true)`): the word after ntprof's path.
    let at = if Path::new(cmd.get_program()) == ntprof {
        0
    } else {
        args.iter().position(|a| Path::new(a) == ntprof)? + 1
    };
    if args.get(at).is_none_or(|a| *a != "record") {
        return None;
    }
    let options = args[at..].iter().take_while(|a| **a != "--");
    let own = ["-o", "--output", "--every", "-h", "--help"];
    if options.clone().any(|a| {
        let a = a.to_string_lossy();
        own.contains(&a.as_ref()) || a.starts_with("--output=") || a.starts_with("-o")
    }) {
        return None;
    }
    let file = report_path();
    let mut copy = Command::new(cmd.get_program());
    copy.args(&args[..=at])
        .arg("-o")
        .arg(&file)
        .args(&args[at + 1..]);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => copy.env(k, v),
            None => copy.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        copy.current_dir(d);
    }
    Some((copy, file))
}

/// Run `cmd` to its end with stdin closed and stdout and stderr captured (read while it runs, so a large output
/// cannot fill a pipe and stall it); kill it and panic when it runs longer than `limit`. An `ntprof record` that
/// names no output file writes its report to one, which is put on stdout after the command's own output (see
/// [`with_report_file`]).
#[allow(dead_code)] // Not every test file runs commands through it.
pub fn run_bounded(mut cmd: impl BorrowMut<Command>, limit: Duration) -> Output {
    let cmd = cmd.borrow_mut();
    if let Some((mut copy, file)) = with_report_file(cmd) {
        let mut out = run_raw(&mut copy, limit);
        append_report(&mut out, &file);
        return out;
    }
    run_raw(cmd, limit)
}

/// A fresh path for the report of one `ntprof record` (no extension: the format is the run's own), in a folder
/// every user may write in, as /tmp (sticky: a run as nobody through setpriv writes its report there too).
#[allow(dead_code)] // Only the tests that start ntprof record themselves ask.
pub fn report_path() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ntprof-reports");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir.join(format!("ntprof-report-{}-{n}", std::process::id()))
}

/// Put the report file `file` (if written) after the command's own output on `out.stdout`, as when the report
/// shared stdout, and remove it.
#[allow(dead_code)] // Only the tests that start ntprof record themselves ask.
pub fn append_report(out: &mut Output, file: &Path) {
    if let Ok(report) = std::fs::read(file) {
        out.stdout.extend_from_slice(&report);
        let _ = std::fs::remove_file(file);
    }
}

/// [`run_bounded`] as `cmd` is, without a report file.
#[allow(dead_code)] // Not every test file runs commands through it.
pub fn run_raw(cmd: &mut Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).map(|_| v)
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).map(|_| v)
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: reader.join().unwrap().unwrap(),
        stderr: err_reader.join().unwrap().unwrap(),
    }
}

/// Counted skips (a failure in CI), shared with the other test crates.
#[path = "../../../tests/common/skip.rs"]
pub mod skip;
#[allow(unused_imports)] // Only the tests with a requirement skip.
pub use skip::{in_ci, skip};

/// The first file `name` in a directory of the PATH.
#[allow(dead_code)] // Only the tests that use external tools look.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A tool the test needs: its path, or `None` (skip, with the reason and `how` to install it printed) outside CI;
/// a failure in CI.
#[allow(dead_code)] // Only the tests that use external tools ask.
pub fn tool(name: &str, path: Option<PathBuf>, how: &str) -> Option<PathBuf> {
    match path {
        Some(p) => Some(p),
        None => {
            skip(&format!(
                "{name} is not installed ({how}; .ci/run installs it)"
            ));
            None
        }
    }
}

/// Google's pprof: `NTPROF_PPROF`, `target/tools/pprof` (where .ci/run builds it), or `pprof` on the PATH.
#[allow(dead_code)] // Only the tests that read pprof profiles ask.
pub fn pprof() -> Option<PathBuf> {
    let from_env = std::env::var_os("NTPROF_PPROF")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    let built = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(|t| t.join("tools/pprof"))
        .filter(|p| p.is_file());
    let found = from_env.or(built).or_else(|| on_path("pprof"));
    tool(
        "pprof",
        found,
        "apt-get install golang-go golang-github-google-pprof-dev; \
         GOPATH=/usr/share/gocode GO111MODULE=off go build -o target/tools/pprof github.com/google/pprof",
    )
}

/// A JSON number that must be a u64.
#[allow(dead_code)] // Only the tests that read ntprof's JSON report ask.
pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Samples of a function (by name) in a source of ntprof's JSON report, 0 when absent.
#[allow(dead_code)] // Only the tests that read ntprof's JSON report ask.
pub fn function_samples(s: &Value, name: &str) -> u64 {
    s["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["name"] == name)
        .map(|f| u(&f["samples"]))
        .sum()
}

/// Whether this process runs as root (real user id 0, from /proc/self/status).
#[allow(dead_code)] // Only the tests that also run ntprof without privilege ask.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether this process is root; if not, the calling test is skipped (a failure in CI) for `why`, what it
/// needs root for.
#[allow(dead_code)] // Only the tests that need root ask.
pub fn root_or_skip(why: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(&format!("needs root: {why}"));
    false
}

/// A command that runs ntprof: as nobody with no capabilities (through setpriv) when `unprivileged` and we are
/// root, as we are otherwise.
#[allow(dead_code)] // Only the tests that also run ntprof without privilege ask.
pub fn ntprof_command(unprivileged: bool) -> Command {
    let ntprof = env!("CARGO_BIN_EXE_ntprof");
    if unprivileged && is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--inh-caps=-all",
            ntprof,
        ]);
        c
    } else {
        Command::new(ntprof)
    }
}

/// `run_bounded`, and panic with the command's standard error unless it succeeded.
#[allow(dead_code)] // Not every test file expects success this way.
pub fn run_ok(mut cmd: impl BorrowMut<Command>, limit: Duration) -> Output {
    let cmd = cmd.borrow_mut();
    let out = run_bounded(&mut *cmd, limit);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ntprof report --call-tree JSON`: the text report, with its call tree, of a JSON report.
#[allow(dead_code)] // Only the tests that read the call tree ask.
pub fn call_tree_report(json: &Path, limit: Duration) -> String {
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ntprof"))
            .args(["report", "--call-tree"])
            .arg(json),
        limit,
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Build a shared library `OUT` from `SRC` in `cwd` with `gcc -O2 -g -fPIC -shared`.
#[allow(dead_code)] // Only the tests with a library of their own build one.
pub fn gcc_shared(out: &str, src: &str, cwd: &Path) {
    gcc(&["-O2", "-g", "-fPIC", "-shared", "-o", out, src], cwd);
}

/// The source named `name` of ntprof's JSON report.
#[allow(dead_code)] // Only the tests that read ntprof's JSON report ask.
pub fn source<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no source {name} in {report}"))
}

/// Samples (nanoseconds for an off-CPU source) of `source`'s stacks that have `function` on them, as the
/// machine-code function or an inlined frame of a location (inclusive).
#[allow(dead_code)] // Only the tests that read call stacks ask.
pub fn inclusive_ns(source: &Value, function: &str) -> u64 {
    let locations = source["locations"].as_array().unwrap();
    source["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["frames"].as_array().unwrap().iter().any(|l| {
                let loc = &locations[l.as_u64().unwrap() as usize];
                loc["function"] == function
                    || loc["frames"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f["function"] == function)
            })
        })
        .map(|s| u(&s["samples"]))
        .sum()
}

/// Fail unless `node` runs: the tests of JavaScript's JIT code need it (CI installs it).
#[allow(dead_code)] // Only the JIT tests ask.
pub fn require_node() {
    let ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        ok.is_ok_and(|s| s.success()),
        "node is required by this test and is missing or broken (install it: apt-get install nodejs)"
    );
}
