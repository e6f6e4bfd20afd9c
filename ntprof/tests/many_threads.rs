//! `ntprof attach` to a running process of 2,000 threads at the usual descriptor limits (soft 1,024, hard
//! 20,000), as root and without privilege: the recording opens (as root with one event per processor for every
//! task, the target's samples kept; unprivileged with one per thread and processor, the soft limit raised to
//! the hard one; forced, with one per thread and a ring of its own), its report names the event layout with its
//! descriptors and rings, and the spinning thread is sampled once per millisecond of its CPU time, read apart.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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
        let spin = Spin::watch(pid);
        let out = run_ok(
            ntprof.arg(env!("CARGO_BIN_EXE_ntprof")).args([
                "attach",
                "--pid",
                &pid.to_string(),
                // Long beside the start's cost (opening thousands of events, when the spinning thread runs less),
                // so that the least busy stretch of that length holds most of the recording.
                "--duration",
                "3",
                "--format",
                "json",
            ]),
            Duration::from_secs(60),
        );
        let spin = spin.stop();
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
            assert!(u(&events["descriptors"]) >= 2000 * cpus, "{events}");
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
        // One sample per millisecond of the spinning thread's CPU time while the recording ran (the parked
        // threads take none): at most its CPU time from before ntprof started to after it ended, plus one for a
        // period begun before; at least its CPU time in the least busy stretch of the recording's duration
        // within that span, less 5 % for the kernel time charged to it that is not sampled (the sampling
        // interrupts, 1.5 % at 1 ms) and the time the host takes the virtual processor away. Half the
        // samples lost, or a recording of only some threads, falls below.
        let d = r["run"]["duration_s"].as_f64().unwrap();
        let (inner, outer) = bounds_ms(&spin, d);
        println!(
            "unprivileged {unprivileged}, {forced:?}: {samples} samples for {inner:.0}..{outer:.0} ms of the \
             spinning thread's CPU time in {d:.3} s"
        );
        assert!(
            samples as f64 >= 0.95 * inner && samples as f64 <= outer + 1.0,
            "unprivileged {unprivileged}, {forced:?}: {samples} samples of the spinning thread for \
             {inner:.0}..{outer:.0} ms of its CPU time in {d:.3} s ({} readings over {:?})",
            spin.len(),
            spin.last().unwrap().0 - spin[0].0
        );
    }
}

/// The spinning thread's CPU time (`/proc/PID/task/TID/schedstat`, nanoseconds on a processor), read every
/// 5 ms on a thread of its own while ntprof attaches.
struct Spin {
    stop: Arc<AtomicBool>,
    poller: std::thread::JoinHandle<Vec<(Instant, u64)>>,
}

impl Spin {
    /// Start polling the thread of `pid` that runs (the spinning one: the others wait in pause()).
    fn watch(pid: u32) -> Spin {
        let run_ns = move |tid: &str| -> Option<u64> {
            let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
            s.split_whitespace().next()?.parse().ok()
        };
        // The thread whose CPU time grows (the main thread, which created the others, may have more).
        let tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        let first: Vec<u64> = tids.iter().map(|t| run_ns(t).unwrap_or(0)).collect();
        std::thread::sleep(Duration::from_millis(200));
        let tid = tids
            .iter()
            .zip(first)
            .max_by_key(|(t, first)| run_ns(t).unwrap_or(0).saturating_sub(*first))
            .map(|(t, _)| t.clone())
            .expect("the target's threads");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let poller = std::thread::spawn(move || {
            let mut seen = Vec::new();
            // Acquire: pairs with the Release store of `stop`; nothing else is shared.
            while !flag.load(Ordering::Acquire) {
                seen.push((Instant::now(), run_ns(&tid).expect("the spinning thread")));
                std::thread::sleep(Duration::from_millis(5));
            }
            seen.push((Instant::now(), run_ns(&tid).expect("the spinning thread")));
            seen
        });
        // Readings from before ntprof starts.
        std::thread::sleep(Duration::from_millis(20));
        Spin { stop, poller }
    }

    fn stop(self) -> Vec<(Instant, u64)> {
        // Release: see the poller's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.poller.join().unwrap()
    }
}

/// The CPU time (ms) a thread read at `seen` surely ran in any `d` s within the span read (inner), and in
/// the span (outer). A stretch of `d` s holds two readings at least `d` less twice the longest gap between
/// readings apart; the least CPU time between such readings is the inner bound.
fn bounds_ms(seen: &[(Instant, u64)], d: f64) -> (f64, f64) {
    let gap = seen
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).as_secs_f64())
        .fold(0.0, f64::max);
    let reach = d - 2.0 * gap;
    let inner = (0..seen.len())
        .filter_map(|i| {
            let j = (i..seen.len()).find(|&j| (seen[j].0 - seen[i].0).as_secs_f64() >= reach)?;
            Some(seen[j].1 - seen[i].1)
        })
        .min()
        .unwrap_or(0);
    let outer = seen.last().unwrap().1 - seen[0].1;
    (inner as f64 / 1e6, outer as f64 / 1e6)
}
