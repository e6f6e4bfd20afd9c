//! How far an unprivileged off-CPU wait is from the scheduler's own switch times (docs/ntprof.md, *How
//! exact*): a thread sleeps 1 ms 1,000 times under `ntprof record --off-cpu` run as nobody, while `perf`
//! (as root) records the `sched_switch` tracepoint on the monotonic clock. Each wait is measured from the
//! thread's switch-out record to its switch-in record, which the kernel writes after the tracepoint, the
//! switch-in record once the thread's events are running again (some 5 to 12 µs later here): the waits are
//! as many as the tracepoint's, and each is longer by a few microseconds, never shorter, and by less than
//! 40 µs on average.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{ntprof_command, run_ok, u};

const SLEEPER: &str = r#"
#include <time.h>
int main(void) {
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < 1000; i++)
        nanosleep(&ts, 0);
    return 0;
}
"#;

/// A directory everyone can enter (the recorder runs as nobody).
fn dir() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("ntprof-offcpu-bias-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

/// The voluntary waits of thread `tid` in `perf script` lines of `sched_switch`: (switch-out, switch-in)
/// times in nanoseconds, from the thread's switch-out (prev_state not R) to its next switch-in.
fn reference_waits(script: &str, tid: u32) -> Vec<(u64, u64)> {
    let field = |line: &str, key: &str| -> Option<String> {
        let at = line.find(key)? + key.len();
        Some(line[at..].split_whitespace().next()?.to_string())
    };
    let mut out = None;
    let mut waits = Vec::new();
    for line in script.lines() {
        let Some(colon) = line.find(": prev_comm=") else {
            continue;
        };
        let Some((sec, ns)) = line[..colon]
            .rsplit(' ')
            .next()
            .and_then(|t| t.split_once('.'))
        else {
            continue;
        };
        let (Ok(sec), Ok(ns)) = (sec.parse::<u64>(), format!("{ns:0<9}")[..9].parse::<u64>())
        else {
            continue;
        };
        let time = sec * 1_000_000_000 + ns;
        let prev: Option<u32> = field(line, "prev_pid=").and_then(|p| p.parse().ok());
        let next: Option<u32> = field(line, "next_pid=").and_then(|p| p.parse().ok());
        let state = field(line, "prev_state=").unwrap_or_default();
        if prev == Some(tid) {
            out = (!state.starts_with('R')).then_some(time);
        } else if next == Some(tid)
            && let Some(start) = out.take()
        {
            waits.push((start, time));
        }
    }
    waits
}

#[test]
#[ignore = "its reference, perf record -a of sched_switch, drops events on a busy machine (792-998 of 1,000 waits kept in three of the last CI-like runs): run it by hand on a quiet machine with --ignored"]
fn unprivileged_waits_are_a_few_microseconds_longer_than_the_scheduler_says() {
    let Some(perf) = common::tool(
        "perf",
        common::on_path("perf"),
        "apt-get install linux-perf",
    ) else {
        return;
    };
    assert!(
        common::is_root(),
        "the sched_switch reference needs root (the recorder itself runs as nobody)"
    );
    let dir = dir();
    std::fs::write(dir.join("sleeper.c"), SLEEPER).unwrap();
    common::gcc(&["-O2", "-o", "sleeper", "sleeper.c"], &dir);
    let json = dir.join("sleeper.json");
    let data = dir.join("sched.data");
    // `perf record -a` drops tracepoint events when the machine is busy (928 of 1,000 waits were seen, and far
    // fewer beside a fuzzing run): a run whose reference lacks waits is made again, up to three times.
    let mut attempt = 1;
    let (script, r) = loop {
        let recorder = ntprof_command(true);
        let mut cmd = Command::new(&perf);
        cmd.args([
            "record",
            "-q",
            "-e",
            "sched:sched_switch",
            "-k",
            "CLOCK_MONOTONIC",
            "-a",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(recorder.get_program())
        .args(recorder.get_args())
        .args(["record", "-q", "--off-cpu", "--json"])
        .arg(&json)
        .arg("--")
        .arg(dir.join("sleeper"));
        run_ok(cmd, Duration::from_secs(300));
        let script = run_ok(
            Command::new(&perf)
                .args(["script", "-F", "time,trace", "--ns", "-i"])
                .arg(&data),
            Duration::from_secs(300),
        );
        let script = String::from_utf8_lossy(&script.stdout).into_owned();
        let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let pid = u(&r["processes"][0]["pid"]) as u32;
        let complete = reference_waits(&script, pid).len() >= 990;
        if complete || attempt == 3 {
            break (script, r);
        }
        attempt += 1;
    };
    let pid = u(&r["processes"][0]["pid"]) as u32;
    let threads: HashMap<u64, &Value> = r["off_cpu"]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (u(&t["tid"]), t))
        .collect();
    let ours = threads.get(&u64::from(pid)).expect("the sleeper's thread");
    let reference = reference_waits(&script, pid);
    let (waits, ns) = (u(&ours["waits"]), u(&ours["voluntary_ns"]));
    let voluntary: u64 = r["off_cpu"]["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["preempted"] == false)
        .map(|k| u(&k["waits"]))
        .sum();
    // The tracepoint's first waits are the stop before the command's first instruction, which the recorder
    // leaves out: compare the last ones, as many as the recorder counted. `perf record -a` may drop tracepoint
    // events on a loaded machine (998 of 1,000 seen at load average 7, 928 on a machine busy with other tests), so the
    // offset is the difference of the mean waits, which waits missing at random leave unchanged.
    let used = &reference[reference.len().saturating_sub(voluntary as usize)..];
    let ref_ns: u64 = used.iter().map(|(a, b)| b - a).sum();
    let offset = ns as f64 / voluntary.max(1) as f64 - ref_ns as f64 / used.len().max(1) as f64;
    eprintln!(
        "{} reference waits, {ref_ns} ns; ntprof {waits} waits ({voluntary} voluntary), {ns} ns: {offset:.0} ns per wait",
        reference.len()
    );
    // The 1,000 sleeps; the tracepoint also sees the waits before the first instruction (the stop at the
    // start), which the recorder leaves out, and preemptions are not in either count.
    assert!(
        (990..=1003).contains(&reference.len()) && (1000..=1002).contains(&voluntary),
        "reference {} voluntary waits, ntprof {voluntary}",
        reference.len()
    );
    assert!(
        (0.0..40_000.0).contains(&offset),
        "each wait {offset:.0} ns longer than sched_switch says (documented: +4 to +11 µs here)"
    );
}
