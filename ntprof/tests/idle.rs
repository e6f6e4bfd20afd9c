//! The recorder's fixed cost: a command that sleeps and starts nothing costs one read round per 100 ms (a
//! fork, exec or mapping wakes the recorder for a round of its own, and rounds every 2 ms run only while a new
//! program's command line is still to be read). Rounds are counted, not CPU time, so that the bound holds on a
//! loaded machine: `run.recorder_rounds` of the JSON report, and held against the kernel's own count of
//! ntprof's waits (its voluntary context switches, from getrusage of the children). The command's end
//! costs no extra rounds either: once its threads are gone the recorder waits for its exit rather than reading
//! rounds that return at once (under load the exit completes long after the threads' events end, and 155 to
//! 5,533 rounds in 3 s had been seen).

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{run_ok, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

#[test]
fn a_sleeping_command_costs_one_round_per_100_ms() {
    let dir = common::build_dir("idle");
    let json = dir.join("sleep.json");
    let mut cmd = Command::new(NTPROF);
    cmd.args(["record", "-q", "--json"])
        .arg(&json)
        .args(["--", "sleep", "3"]);
    // ntprof's own wake-ups, read apart from what it reports: the kernel's count of its voluntary context
    // switches (every round ends a wait; each thread's), ntprof's and the sleep's, which it waits for. This
    // test binary runs one test, so no other child ends meanwhile.
    let children =
        || nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    let before = children();
    run_ok(cmd, Duration::from_secs(120));
    let after = children();
    let waits = (after.voluntary_context_switches() - before.voluntary_context_switches()) as u64;
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let run = &r["run"];
    let rounds = u(&run["recorder_rounds"]);
    let seconds = run["duration_s"].as_f64().unwrap();
    let cpu_ms = run["recorder_cpu_ms"].as_f64().unwrap();
    eprintln!(
        "sleep 3: {rounds} rounds in {seconds:.2} s, recorder CPU {cpu_ms:.1} ms ({:.2} ms/s)",
        cpu_ms / seconds
    );
    // One round per 100 ms, and a few more for the start and the end: fast rounds (every 2 ms) would be
    // hundreds. A late wake-up on a loaded machine makes rounds fewer, never more.
    let bound = (seconds * 10.0).ceil() as u64 + 10;
    assert!(
        (1..=bound).contains(&rounds),
        "{rounds} read rounds in {seconds:.2} s (at most {bound} for a command that starts nothing)"
    );
    // The kernel's count agrees: about one wait per round, and a few dozen for ntprof's start and end (its
    // threads' starts and joins, the report) and the sleep's own. Rounds every 2 ms that were not counted as
    // rounds, or any wake-up loop, make it hundreds.
    eprintln!("voluntary context switches of ntprof and the sleep: {waits}");
    let allowed = bound + 60;
    assert!(
        waits <= allowed,
        "ntprof and the sleep waited {waits} times in {seconds:.2} s (at most {allowed}: {bound} rounds and 60 \
         for the start, the end and the sleep)"
    );
}
