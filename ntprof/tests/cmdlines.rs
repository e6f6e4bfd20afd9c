//! Command lines of short-lived processes: the exec record holds only the program's 15-character name, so
//! the recorder reads `/proc/PID/cmdline` while the process runs. A side-band sampler wakes it at each fork,
//! exec, mapping or exit, so a process is read within a scheduling delay of its exec, however long the tree
//! was quiet before (rounds read every 2 ms for 3 s after a fork had missed the first process after a quiet
//! spell: the gcc driver or `ar` after a long compiler pass).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::run_ok;

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");

/// Busy loops on every CPU for the life of the value (a loaded machine), killed when it drops.
struct Load(Vec<Child>);

impl Load {
    fn start(n: usize) -> Load {
        Load(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("sh")
                })
                .collect(),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Record `script` (a shell script) and return every process's (command, command line).
fn record_script(dir: &Path, name: &str, script: &str) -> Vec<(String, String)> {
    let path = dir.join(format!("{name}.sh"));
    std::fs::write(&path, script).unwrap();
    let json = dir.join(format!("{name}.json"));
    let mut cmd = Command::new(NTPROF);
    cmd.args(["record", "-q", "--json"])
        .arg(&json)
        .args(["--", "sh"])
        .arg(&path);
    run_ok(cmd, Duration::from_secs(300));
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let line: Vec<&str> = p["command_line"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            (
                p["command"].as_str().unwrap_or("").to_string(),
                line.join(" "),
            )
        })
        .collect()
}

/// The lines of `wanted` that no process of `procs` has.
fn short_ones(procs: &[(String, String)], wanted: &[String]) -> Vec<String> {
    let lines: Vec<&str> = procs.iter().map(|p| p.1.as_str()).collect();
    wanted
        .iter()
        .filter(|w| !lines.contains(&w.as_str()))
        .cloned()
        .collect()
}

#[test]
fn the_first_process_after_a_quiet_spell_has_its_command_line() {
    let dir = common::build_dir("cmdlines");
    // Each spell is longer than the 3 s the rounds used to stay fast after a fork (a round every 100 ms then
    // missed such a process about every other time); each process after it lives about 50 ms, the least the
    // documentation promises on a loaded machine.
    let wanted: Vec<String> = (1..=4).map(|g| format!("/bin/sleep 0.05{g}")).collect();
    let script: String = wanted.iter().map(|w| format!("sleep 3.3\n{w}\n")).collect();
    let procs = record_script(&dir, "quiet", &script);
    let missing = short_ones(&procs, &wanted);
    assert!(
        missing.is_empty(),
        "no command line for {missing:?} (processes: {procs:?})"
    );
}

#[test]
fn a_hundred_short_processes_under_load_have_their_command_lines() {
    let dir = common::build_dir("cmdlines");
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let _load = Load::start(cpus);
    // 100 processes living 50 to 99 ms each, one after the other; a last argument numbers each (sleep adds its
    // arguments up), so that every line is different.
    let wanted: Vec<String> = (0..100)
        .map(|i| format!("/bin/sleep 0.{:03} 0.0000{i:02}", 50 + i % 50))
        .collect();
    let script: String = wanted.iter().map(|w| format!("{w}\n")).collect();
    let procs = record_script(&dir, "hundred", &script);
    let missing = short_ones(&procs, &wanted);
    assert!(
        missing.is_empty(),
        "{} of 100 processes living 50-99 ms have no command line under load: {missing:?}",
        missing.len()
    );
}
