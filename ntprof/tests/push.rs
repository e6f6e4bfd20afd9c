//! `ntprof record --every 1 --push URL` against the real servers `.ci/backends` builds (Pyroscope, Parca over
//! gRPC and HTTP, the OpenTelemetry Collector over OTLP/HTTP and gRPC with its file exporter), each started on
//! 127.0.0.1 and stopped after: the windows of a designed workload (push_three and push_one, CPU work 3:1) are
//! read back through the backend's own query API, where at least two windows must have arrived, the designed
//! share hold within the sampling noise of the samples read back, and the labels (service name, team=x, host,
//! pid, command line) be those sent. A backend that is down must not stall the run, and a refused push shows
//! the backend's answer. A server that is not built fails its test with the reason and the command that
//! builds it.

mod common;
#[path = "push/otlp_json.rs"]
mod otlp_json;
#[path = "push/readback.rs"]
mod readback;
#[path = "../../ntprof-push/tests/common/mod.rs"]
mod servers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use servers::{backend, check_shares, free_port, scratch};

/// Rounds of the workload: about 2.5 s of CPU time, so at least two one-second windows on any machine.
const ROUNDS: &str = "400";

/// One ntprof run and what it said.
struct Run {
    status: Option<i32>,
    stderr: String,
    /// The JSON report (the last window's).
    report: Value,
    /// Windows with samples (the folder holds every window's JSON).
    with_samples: u64,
    /// Every window as ntprof wrote it.
    files: Vec<WindowFile>,
    wall: Duration,
}

/// The workload, built once per scratch directory.
fn workload(dir: &Path) -> PathBuf {
    let exe = dir.join("workload");
    let src = servers::root().join("ntprof-push/tests/workload.c");
    common::gcc(
        &[
            "-O2",
            "-g",
            "-fno-inline",
            "-o",
            exe.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
        dir,
    );
    exe
}

/// `ntprof record --every 1 --output DIR/windows/ --push URL... PUSH_ARGS -- CMD...`; the report is the last
/// window's JSON in the folder.
fn record(dir: &Path, urls: &[String], push_args: &[&str], cmd: &[&str]) -> Run {
    let folder = dir.join("windows");
    let _ = std::fs::remove_dir_all(&folder);
    let mut c = Command::new(env!("CARGO_BIN_EXE_ntprof"));
    c.args(["record", "--quiet", "--every", "1", "--output"])
        .arg(format!("{}/", folder.display()));
    for u in urls {
        c.arg("--push").arg(u);
    }
    c.args(push_args).arg("--").args(cmd);
    let t0 = Instant::now();
    let out = common::run_bounded(&mut c, Duration::from_secs(180));
    let wall = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut jsons: Vec<PathBuf> = std::fs::read_dir(&folder)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    jsons.retain(|p| p.extension().is_some_and(|e| e == "json"));
    jsons.sort();
    let last = jsons
        .last()
        .unwrap_or_else(|| panic!("no window written by {c:?}: {stderr}"));
    let read = |p: &PathBuf| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let with_samples = jsons
        .iter()
        .filter(|p| read(p)["sources"][0]["stats"]["counted"].as_u64().unwrap() > 0)
        .count() as u64;
    let files = jsons
        .iter()
        .map(|p| {
            let pprof = PathBuf::from(p.to_str().unwrap().replace(".json", ".pb.gz"));
            WindowFile {
                start_ns: read(p)["run"]["window"]["start_unix_ns"].as_u64().unwrap(),
                counts: servers::pprof_self_counts(&std::fs::read(pprof).unwrap()),
            }
        })
        .collect();
    let report = read(last);
    assert_eq!(
        report["run"]["window"]["last"],
        Value::Bool(true),
        "{}",
        last.display()
    );
    Run {
        status: out.status.code(),
        stderr,
        report,
        with_samples,
        files,
        wall,
    }
}

/// One window as ntprof wrote it into the folder: its start, and the samples per leaf function of its pprof.
struct WindowFile {
    start_ns: u64,
    counts: BTreeMap<String, i64>,
}

/// The window with the most samples; `own_second`: among those whose start second no other window shares
/// (Pyroscope files a profile at its start second).
fn fullest(run: &Run, own_second: bool) -> &WindowFile {
    let second = |w: &WindowFile| w.start_ns / 1_000_000_000;
    run.files
        .iter()
        .filter(|w| !own_second || run.files.iter().filter(|o| second(o) == second(w)).count() == 1)
        .max_by_key(|w| w.counts.values().sum::<i64>())
        .expect("a window")
}

/// One window read back: exactly the samples ntprof wrote for it, and the designed share within five
/// standard deviations of a binomial share of its samples (plus 2 points for the loop's entry and exit).
fn check_window(back: &BTreeMap<String, i64>, window: &WindowFile, what: &str) -> f64 {
    assert_eq!(
        back, &window.counts,
        "{what}: the window read back against the one written"
    );
    let three = *back.get("push_three").unwrap_or(&0) as f64;
    let n = three + *back.get("push_one").unwrap_or(&0) as f64;
    assert!(
        n >= 50.0,
        "{what}: {n} samples of the designed functions in the window"
    );
    let share = three / n;
    let margin = 5.0 * (0.1875 / n).sqrt() + 0.02;
    assert!(
        (share - 0.75).abs() <= margin,
        "{what}: push_three's share {share:.3} of the window is not 0.75 +- {margin:.3}: {back:?}"
    );
    eprintln!("{what}: one window, push_three {share:.3} +- {margin:.3} of {back:?}");
    share
}

/// The windows the summary on stderr says went to `url` (and that none was dropped).
fn pushed_ok(run: &Run, url: &str) -> u64 {
    let want = format!("to {url}, 0 dropped");
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("ntprof: pushed ") && l.contains(&want))
        .unwrap_or_else(|| panic!("no summary '... {want}' on stderr:\n{}", run.stderr));
    let n: u64 = line["ntprof: pushed ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 2, "only {n} windows pushed: {line}");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    n
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

fn pid_of(run: &Run) -> String {
    run.report["run"]["pid"].as_u64().unwrap().to_string()
}

#[test]
fn pyroscope_windows_read_back_with_shares_and_labels_and_a_refusal_shows_its_answer() {
    let bin = backend("pyroscope");
    let dir = scratch("cli-pyroscope");
    let exe = workload(&dir);
    let (mut server, http) = servers::start_pyroscope(&bin, &dir);
    let url = format!("pyroscope+http://127.0.0.1:{http}");
    let run = record(
        &dir,
        std::slice::from_ref(&url),
        &["--name", "cli-pyro", "--label", "team=x"],
        &[exe.to_str().unwrap(), ROUNDS],
    );
    let sent = pushed_ok(&run, &url);
    let back = readback::pyroscope(&mut server, http, "{service_name=\"cli-pyro\",team=\"x\"}");
    assert!(
        back.windows >= 2 && back.windows <= sent,
        "{} windows read back, {sent} sent",
        back.windows
    );
    let share = check_shares(&back.counts, "pyroscope");
    let window = fullest(&run, true);
    let at = (window.start_ns / 1_000_000_000 * 1000) as i64;
    let one = readback::pyroscope_merge(
        &server,
        http,
        "{service_name=\"cli-pyro\",team=\"x\"}",
        (at, at + 999),
    );
    check_window(&one, window, "pyroscope");
    eprintln!(
        "pyroscope: {sent} windows sent, {} read back, push_three {share:.3} of {:?}",
        back.windows, back.counts
    );
    for (label, want) in [
        ("team", "x".to_string()),
        ("host", hostname()),
        ("pid", pid_of(&run)),
        ("service_name", "cli-pyro".to_string()),
    ] {
        assert_eq!(back.labels.get(label), Some(&vec![want]), "{label}");
    }
    let line = &back.labels["command_line"][0];
    assert!(line.contains("workload 400"), "{line}");

    // A label value longer than Pyroscope takes: the push is refused, and the answer is shown.
    let long = format!("big={}", "v".repeat(2100));
    let run = record(
        &dir,
        std::slice::from_ref(&url),
        &["--name", "cli-pyro-refused", "--label", &long],
        &[exe.to_str().unwrap(), "50"],
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let summary = run
        .stderr
        .lines()
        .find(|l| l.contains(&format!("to {url}")))
        .unwrap_or_else(|| panic!("no summary:\n{}", run.stderr));
    // Every window with samples is refused (its profile carries the label); a window without any (the start
    // of a run slowed by a busy machine) has no series for Pyroscope to check and may be taken.
    let empty = run.files.len() as u64 - run.with_samples;
    let pushed: u64 = summary
        .split("pushed ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of pushed windows: {summary}"));
    assert!(
        run.with_samples >= 1 && pushed <= empty && summary.contains("refused"),
        "{} windows with samples, {empty} without: {summary}",
        run.with_samples
    );
    assert!(
        summary.contains("backend refused the profile: HTTP 4"),
        "{summary}"
    );
    assert!(
        summary.to_ascii_lowercase().contains("label value"),
        "the backend's own words: {summary}"
    );
    let notes = run.report["run"]["notes"].to_string();
    assert!(notes.contains("were refused"), "{notes}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parca_grpc_and_http_windows_read_back_through_the_query_service() {
    let bin = backend("parca");
    let dir = scratch("cli-parca");
    let exe = workload(&dir);
    let (mut server, port) = readback::start_parca(&bin, &dir);
    for transport in ["grpc", "http"] {
        let url = format!("parca+{transport}://127.0.0.1:{port}");
        let name = format!("cli-parca-{transport}");
        let run = record(
            &dir,
            std::slice::from_ref(&url),
            &["--name", &name, "--label", "team=x"],
            &[exe.to_str().unwrap(), ROUNDS],
        );
        let sent = pushed_ok(&run, &url);
        let selector = format!("{{service_name=\"{name}\",team=\"x\"}}");
        let period = run.report["sources"][0]["sample_value"].as_i64().unwrap();
        let back = readback::parca(&mut server, port, &selector, period);
        assert!(
            back.windows >= 2 && back.windows <= sent,
            "{transport}: {} windows read back, {sent} sent",
            back.windows
        );
        let share = check_shares(&back.counts, &url);
        eprintln!(
            "{url}: {sent} windows sent, {} read back, push_three {share:.3} of {:?}",
            back.windows, back.counts
        );
        let window = fullest(&run, false);
        let at = (window.start_ns / 1_000_000) as i64;
        let one = readback::parca_merge(&server, port, &selector, period, (at, at + 500));
        check_window(&one, window, &url);
        for (label, want) in [
            ("team", "x".to_string()),
            ("host", hostname()),
            ("pid", pid_of(&run)),
        ] {
            // The labels of this transport's series only (the selector's): exactly the one value.
            assert_eq!(
                back.labels.get(label),
                Some(&vec![want.clone()]),
                "{transport}: {label}={want}, from the series of {selector}"
            );
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn otlp_http_and_grpc_windows_read_back_from_the_collector_file() {
    let bin = backend("otelcol");
    let dir = scratch("cli-otelcol");
    let exe = workload(&dir);
    let (server, grpc, http, file) = readback::start_collector(&bin, &dir);
    for (url, transport) in [
        (format!("otlp+http://127.0.0.1:{http}"), "http"),
        (format!("otlp+grpc://127.0.0.1:{grpc}"), "grpc"),
    ] {
        let name = format!("cli-otlp-{transport}");
        let run = record(
            &dir,
            std::slice::from_ref(&url),
            &["--name", &name, "--label", "team=x"],
            &[exe.to_str().unwrap(), ROUNDS],
        );
        let sent = pushed_ok(&run, &url);
        // The Collector files one export per window; a window without samples (the run's last can end a
        // moment after the workload) leaves no profile and the Collector writes nothing for it.
        let back = readback::collector(&server, &file, &name, run.with_samples);
        assert_eq!(
            back.windows, run.with_samples,
            "{url}: one export per window with samples ({sent} sent)"
        );
        let share = check_shares(&back.counts, &url);
        eprintln!(
            "{url}: {sent} windows sent, {} read back, push_three {share:.3} of {:?}",
            back.windows, back.counts
        );
        let window = fullest(&run, false);
        let one = back
            .each
            .iter()
            .find(|c| **c == window.counts)
            .unwrap_or_else(|| panic!("{url}: no export holds the window {:?}", window.counts));
        check_window(one, window, &url);
        for (label, want) in [
            ("team", "x".to_string()),
            ("host", hostname()),
            ("pid", pid_of(&run)),
            ("service.name", name.clone()),
        ] {
            assert_eq!(back.labels.get(label), Some(&vec![want]), "{label}");
        }
    }
    // Without --every the whole run is pushed as one window at its end: one export, the run's own samples.
    let url = format!("otlp+http://127.0.0.1:{http}");
    let pprof = dir.join("whole.pb.gz");
    let mut c = Command::new(env!("CARGO_BIN_EXE_ntprof"));
    c.args(["record", "--quiet", "--output", "/dev/null", "--pprof"])
        .arg(&pprof)
        .args(["--push", &url, "--name", "cli-otlp-whole", "--"])
        .args([exe.to_str().unwrap(), "150"]);
    let out = common::run_bounded(&mut c, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("pushed 1 window to {url}, 0 dropped")),
        "{stderr}"
    );
    let whole = servers::pprof_self_counts(&std::fs::read(&pprof).unwrap());
    let back = readback::collector(&server, &file, "cli-otlp-whole", 1);
    assert_eq!(back.windows, 1, "one export for the whole run");
    assert_eq!(back.counts, whole, "the run's samples, exactly");
    check_shares(&back.counts, "the whole run");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_backend_that_is_down_never_stalls_the_run_and_its_drops_are_counted() {
    let dir = scratch("cli-down");
    let exe = workload(&dir);
    // The workload alone, as a reference for the run's length (the same machine, the same load).
    let script = "\"$0\" 400 >/dev/null; exit 7";
    let t0 = Instant::now();
    let alone = Command::new("sh")
        .args(["-c", script])
        .arg(&exe)
        .status()
        .unwrap();
    let alone_wall = t0.elapsed();
    assert_eq!(alone.code(), Some(7));

    // Nothing listens there: every attempt fails and is retried with backoff while the run goes on.
    let port = free_port();
    let url = format!("parca+grpc://127.0.0.1:{port}");
    let run = record(
        &dir,
        std::slice::from_ref(&url),
        &["--name", "cli-down"],
        &["sh", "-c", script, exe.to_str().unwrap()],
    );
    assert_eq!(run.status, Some(7), "the workload's status: {}", run.stderr);
    // The end waits at most the grace (2 s) for the queue; the rest is the machine's noise.
    let limit = alone_wall.mul_f64(1.5) + Duration::from_secs(5);
    assert!(
        run.wall <= limit,
        "the run took {:?}, the workload alone {alone_wall:?}: stalled by the push",
        run.wall
    );
    let windows = run.report["run"]["window"]["index"].as_u64().unwrap() + 1;
    assert!(windows >= 2, "{windows} windows");
    // Every window is lost, and said to be: dropped unsent, or given up (when the grace ended during an
    // attempt), never silently.
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with(&format!("ntprof: pushed 0 windows to {url}, ")))
        .unwrap_or_else(|| panic!("no summary for {url}:\n{}", run.stderr));
    let count = |after: &str| -> u64 {
        let words: Vec<&str> = line
            .split([' ', ',', ';'])
            .filter(|w| !w.is_empty())
            .collect();
        words
            .windows(2)
            .find_map(|w| (w[1] == after).then(|| w[0].parse().ok()).flatten())
            .unwrap_or(0)
    };
    let (dropped, failed) = (count("dropped"), count("refused"));
    assert_eq!(dropped + failed, windows, "{line}");
    assert!(line.to_ascii_lowercase().contains("connect"), "{line}");
    let notes = run.report["run"]["notes"].to_string();
    if dropped > 0 {
        let want =
            format!("of {windows} pushed to {url} were dropped unsent: the backend was down");
        assert!(notes.contains(&want), "{want}: {notes}");
    }
    if failed > 0 {
        let want = format!(
            "of {windows} pushed to {url} were refused or given up after retries: the backend was down"
        );
        assert!(notes.contains(&want), "{want}: {notes}");
    }
    eprintln!(
        "down: {windows} windows dropped, run {:?} against {alone_wall:?} alone",
        run.wall
    );
    let _ = std::fs::remove_dir_all(&dir);
}
