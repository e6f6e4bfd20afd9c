//! `--cgroup PATH`: a cgroup made here (under the cgroup v2 mount, a unique name, removed after) with two
//! working processes in it and one outside it, a third that joins it during the run and a fourth that leaves it:
//! the report holds exactly those four, the samples of the three in the CPU shares they were designed to burn
//! (`tests/c/cgroup_spin.c`), none of the leaver's after it left, nothing of the outsider; as root (the kernel's
//! cgroup filter) and as nobody with the cgroup delegated to it (its processes followed). And the errors: a
//! cgroup that does not exist, a relative path resolved against the cgroup v2 root.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod common;
use common::{in_ci, is_root, ntprof_command, run_bounded, u};

use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(180);
/// The CPU time each worker burns, in ms: `a` twice `b` and `c` (`c` joins the cgroup during the run).
const BURN_MS: [(&str, f64); 3] = [("a", 400.0), ("b", 200.0), ("c", 200.0)];

/// The first cgroup v2 mount point of `/proc/self/mountinfo`.
fn v2_mount() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount = left.split(' ').nth(4)?;
            (right.split(' ').next()? == "cgroup2").then(|| PathBuf::from(mount))
        })
        .expect("a cgroup v2 mount (these tests need one)")
}

/// Root is needed to make a cgroup and move processes into it: false (skipped, said) outside CI.
fn can_run() -> bool {
    if is_root() {
        return true;
    }
    assert!(
        !in_ci(),
        "the cgroup tests make a cgroup and move processes into it: run them as root"
    );
    eprintln!(
        "SKIPPED: the cgroup tests need root (they make a cgroup); with CI=true this is a failure"
    );
    false
}

/// A cgroup of this test and the workers started for it: the workers killed and the cgroup removed on drop.
struct Scene {
    cgroup: PathBuf,
    work: PathBuf,
    children: Vec<Child>,
}

impl Drop for Scene {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A cgroup is removed once its last process is gone (reaped above; the kernel may lag a moment).
        for _ in 0..100 {
            if std::fs::remove_dir(&self.cgroup).is_ok() || !self.cgroup.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// A fresh cgroup `ntprof-test-PID-TAG` (handed to nobody when `unprivileged`: its directory and cgroup.procs
/// chowned, as a delegation does) and a work directory everyone may write, with the worker built in it.
fn scene(tag: &str, unprivileged: bool) -> Scene {
    use std::os::unix::fs::PermissionsExt;
    let name = format!("ntprof-test-{}-{tag}", std::process::id());
    let cgroup = v2_mount().join(&name);
    std::fs::create_dir(&cgroup).unwrap_or_else(|e| panic!("mkdir {}: {e}", cgroup.display()));
    let work = std::env::temp_dir().join(format!("{name}-work"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let scene = Scene {
        cgroup,
        work,
        children: Vec::new(),
    };
    if unprivileged {
        for p in [scene.cgroup.clone(), scene.cgroup.join("cgroup.procs")] {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cgroup_spin.c");
    common::gcc(
        &["-O2", "-g", "-o", "cgroup_spin", src.to_str().unwrap()],
        &scene.work,
    );
    scene
}

impl Scene {
    /// Start worker `name` (burning `ms`), in the cgroup when `inside` (it moves itself there before its exec,
    /// then drops to nobody when `unprivileged`); its pid.
    fn start(&mut self, name: &str, ms: f64, inside: bool, unprivileged: bool) -> u32 {
        let spin = self.work.join("cgroup_spin");
        let mut argv: Vec<String> = Vec::new();
        if unprivileged {
            argv.extend(
                [
                    "setpriv",
                    "--reuid",
                    "65534",
                    "--regid",
                    "65534",
                    "--clear-groups",
                    "--inh-caps=-all",
                ]
                .map(String::from),
            );
        }
        argv.extend([
            spin.to_string_lossy().into_owned(),
            name.to_string(),
            ms.to_string(),
            self.work.to_string_lossy().into_owned(),
        ]);
        let into = if inside {
            self.cgroup
                .join("cgroup.procs")
                .to_string_lossy()
                .into_owned()
        } else {
            "/dev/null".to_string()
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(into)
            .args(&argv)
            .spawn()
            .expect("start a worker");
        let pid = child.id();
        self.children.push(child);
        pid
    }
}

/// The scenario: `a`, `b` and `l` in the cgroup from the start, `c` moved in and `l` moved out 300 ms after the
/// run began, `outside` burning beside them the whole time. Returns the JSON report and the pids (a, b, c, l,
/// outside).
fn cgroup_run(
    tag: &str,
    unprivileged: bool,
    spelling: impl Fn(&Path) -> String,
) -> (Value, [u32; 5]) {
    let mut s = scene(tag, unprivileged);
    let a = s.start("a", BURN_MS[0].1, true, unprivileged);
    let b = s.start("b", BURN_MS[1].1, true, unprivileged);
    let c = s.start("c", BURN_MS[2].1, false, unprivileged);
    let l = s.start("l", 200.0, true, unprivileged);
    let outside = s.start("outside", 0.0, false, unprivileged);
    // a, b and l inside before the run starts (the shell moves itself, then execs the worker).
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(s.cgroup.join("cgroup.procs"))
        .unwrap()
        .lines()
        .count()
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "the workers did not enter the cgroup"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And each runs the worker itself: before, it is still the root shell that moved itself (or setpriv), which
    // an unprivileged ntprof may not profile and, met at its first read of the cgroup, leaves out.
    for pid in [a, b, l] {
        while !std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|e| e.ends_with("cgroup_spin"))
        {
            assert!(Instant::now() < deadline, "worker {pid} did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let work = s.work.clone();
    let procs = s.cgroup.join("cgroup.procs");
    let root_procs = v2_mount().join("cgroup.procs");
    // The mover: once the run has begun (the command made `go`), c joins the cgroup and l leaves it; each then
    // waits 2 s before it burns.
    let mover = std::thread::spawn(move || {
        let deadline = Instant::now() + LIMIT;
        while !work.join("go").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(&procs, c.to_string()).expect("move c into the cgroup");
        std::fs::write(&root_procs, l.to_string()).expect("move l out of the cgroup");
        std::fs::write(work.join("moved"), "").unwrap();
        std::fs::write(work.join("moved_out"), "").unwrap();
    });
    let json = s.work.join("report.json");
    let script = "touch go; while [ ! -e done_a ] || [ ! -e done_b ] || [ ! -e done_c ] || [ ! -e done_l ]; \
                  do sleep 0.05; done; touch done_all";
    let out = run_bounded(
        ntprof_command(unprivileged)
            .current_dir(&s.work)
            .args(["record", "-q", "--cgroup"])
            .arg(spelling(&s.cgroup))
            .arg("--json")
            .arg(&json)
            .args(["--", "sh", "-c", script]),
        LIMIT,
    );
    mover.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "record --cgroup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (report, [a, b, c, l, outside])
}

/// What every mechanism must give: exactly a, b, c and l, each labelled with the cgroup (l, which left, with
/// the cgroup it was first seen in); the samples of a, b and c in the designed shares; none of l after it left;
/// nothing of the outsider.
fn check(report: &Value, pids: [u32; 5], name: &str, mechanism: &str) {
    let cg = &report["run"]["cgroup"];
    assert_eq!(cg["mechanism"], mechanism, "{cg}");
    assert_eq!(cg["path"], format!("/{name}"), "{cg}");
    let procs = report["processes"].as_array().unwrap();
    let mut listed: Vec<u32> = procs.iter().map(|p| u(&p["pid"]) as u32).collect();
    listed.sort_unstable();
    let mut want = pids[..4].to_vec();
    want.sort_unstable();
    assert_eq!(
        listed, want,
        "the report lists exactly a, b, c and l: {procs:?}"
    );
    for p in procs {
        assert_eq!(p["cgroup"], format!("/{name}"), "{p}");
    }
    let timer = &report["sources"][0];
    let samples = |f: &str| common::function_samples(timer, f);
    assert_eq!(samples("burn_outside"), 0, "no sample of the outsider");
    assert_eq!(
        samples("burn_l"),
        0,
        "no sample of l after it left the cgroup"
    );
    let got: Vec<u64> = ["burn_a", "burn_b", "burn_c"]
        .iter()
        .map(|f| samples(f))
        .collect();
    let n: u64 = got.iter().sum();
    let total_ms: f64 = BURN_MS.iter().map(|b| b.1).sum();
    // One sample per interval of CPU time (100 ns units); at least half of them: samples taken in the kernel
    // (the workers read their CPU clock with a system call) are not user samples, and a loaded machine
    // throttles none of a task's own CPU time away.
    let interval_ms = u(&timer["interval"]) as f64 / 1e4;
    let expected_n = total_ms / interval_ms;
    assert!(
        n as f64 >= 0.5 * expected_n,
        "{n} samples in the workers, for {expected_n:.0} intervals of their CPU time"
    );
    for (i, (worker, ms)) in BURN_MS.iter().enumerate() {
        let p = ms / total_ms;
        let share = got[i] as f64 / n as f64;
        // Binomial: n samples, each the worker's with probability p.
        let sigma = (p * (1.0 - p) / n as f64).sqrt();
        println!(
            "burn_{worker}: {} samples, share {:.3} (designed {p:.3}, sigma {sigma:.3})",
            got[i], share
        );
        assert!(
            (share - p).abs() <= 4.0 * sigma,
            "burn_{worker}: share {share:.3}, designed {p:.3} ± 4 × {sigma:.3}"
        );
    }
}

#[test]
fn root_kernel_filter_holds_exactly_the_cgroup() {
    if !can_run() {
        return;
    }
    let tag = "root";
    let name = format!("ntprof-test-{}-{tag}", std::process::id());
    // Relative to the cgroup v2 root, with a leading '/', as /proc/PID/cgroup shows it.
    let (report, pids) = cgroup_run(tag, false, |dir| {
        format!("/{}", dir.file_name().unwrap().to_string_lossy())
    });
    check(&report, pids, &name, "kernel-filter");
    assert_eq!(u(&report["run"]["cgroup"]["joined"]), 1, "c joined");
    assert_eq!(report["run"]["events"]["mode"], "cgroup");
}

#[test]
fn unprivileged_following_holds_exactly_the_cgroup() {
    if !can_run() {
        return;
    }
    let tag = "nobody";
    let name = format!("ntprof-test-{}-{tag}", std::process::id());
    // The cgroup's directory, as the file system has it.
    let (report, pids) = cgroup_run(tag, true, |dir| dir.to_string_lossy().into_owned());
    check(&report, pids, &name, "following");
    let cg = &report["run"]["cgroup"];
    assert_eq!(
        (u(&cg["joined"]), u(&cg["left"]), u(&cg["rescan_ms"])),
        (1, 1, 250),
        "c joined, l left: {cg}"
    );
}

#[test]
fn a_missing_cgroup_is_an_error_naming_the_fix() {
    let mount = v2_mount();
    for arg in [
        mount
            .join("ntprof-no-such-cgroup")
            .to_string_lossy()
            .into_owned(),
        "ntprof-no-such-cgroup".to_string(),
    ] {
        let out = run_bounded(
            Command::new(env!("CARGO_BIN_EXE_ntprof")).args([
                "attach",
                "-q",
                "--cgroup",
                &arg,
                "--duration",
                "1",
            ]),
            LIMIT,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        println!("--cgroup {arg}: {err}");
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("does not exist") && err.contains("Fix:"),
            "{err}"
        );
        // Both spellings name the same directory.
        assert!(
            err.contains(&*mount.join("ntprof-no-such-cgroup").to_string_lossy()),
            "{err}"
        );
    }
}
