//! `ntprof attach` to a running process of 2,000 threads at the usual descriptor limits (soft 1,024, hard
//! 20,000), as root and without privilege: the recording opens (as root with one event per processor for every
//! task, the target's samples kept; unprivileged with one per thread and processor, the soft limit raised to
//! the hard one; forced, with one per thread and a ring of its own), its report names the event layout with its
//! descriptors and rings, and the spinning thread is sampled.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{build_dir, gcc, is_root, run_ok, u};

#[test]
fn attach_to_two_thousand_threads_at_a_soft_limit_of_1024() {
    let dir = build_dir("many-threads");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/many_threads.c");
    gcc(&["-O2", "-pthread", src, "-o", "threads"], &dir);
    // nobody must reach the program and its directory.
    for p in [dir.parent().unwrap(), &dir, &dir.join("threads")] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode | 0o755)).unwrap();
    }
    // (unprivileged, the layout forced): per-thread as root (unprivileged, 2,000 rings do not fit the locked
    // memory allowed here; on more than two processors it is what an unprivileged recorder takes).
    for (unprivileged, forced) in [(false, None), (true, None), (false, Some("per-thread"))] {
        // The target runs as the user who attaches (nobody may profile only its own processes).
        let mut target = Command::new("prlimit");
        target.arg("--nofile=1024:20000").arg("--");
        let mut ntprof = Command::new("prlimit");
        ntprof.arg("--nofile=1024:20000").arg("--");
        if unprivileged && is_root() {
            for c in [&mut target, &mut ntprof] {
                c.args([
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--inh-caps=-all",
                ]);
            }
        }
        let mut child = target.arg(dir.join("threads")).arg("2000").spawn().unwrap();
        let pid = child.id();
        // Wait until every thread exists (prlimit and setpriv exec the program: the pid stays).
        for _ in 0..200 {
            let n = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
            if n >= 2000 {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        match forced {
            Some(layout) => ntprof.env("NTPROFILE_EVENTS", layout),
            None => ntprof.env_remove("NTPROFILE_EVENTS"),
        };
        let out = run_ok(
            ntprof.arg(env!("CARGO_BIN_EXE_ntprof")).args([
                "attach",
                "--pid",
                &pid.to_string(),
                "--duration",
                "1",
                "--format",
                "json",
            ]),
            Duration::from_secs(60),
        );
        let _ = child.kill();
        let _ = child.wait();
        let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        let events = &r["run"]["events"];
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        if forced == Some("per-thread") {
            // One event per thread with a ring of its own, and a counter per thread of the start.
            assert_eq!(events["mode"], "per-thread", "{events}");
            let d = u(&events["descriptors"]);
            assert!((2000..=2 * 2001 + 16).contains(&d), "{events}");
            assert!(u(&events["rings"]) >= 2000, "{events}");
        } else if unprivileged || !is_root() {
            // One event per thread and processor, one ring per processor.
            assert_eq!(events["mode"], "thread-cpu", "{events}");
            assert!(u(&events["descriptors"]) >= 2000 * cpus.min(2), "{events}");
        } else {
            // One event per processor for every task, the target's samples kept.
            assert_eq!(events["mode"], "cpu-filtered", "{events}");
            assert_eq!(u(&events["descriptors"]), cpus, "{events}");
        }
        assert!(u(&events["rings"]) >= 1, "{events}");
        let samples: u64 = r["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| u(&s["stats"]["counted"]) + u(&s["stats"]["outside"]))
            .sum();
        assert!(
            samples > 0,
            "unprivileged {unprivileged}: no sample of the spinning thread"
        );
    }
}
