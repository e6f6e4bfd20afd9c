//! Nothing a run measured is lost at its end: every output is checked before the command starts (a missing
//! folder refuses the run, the command never runs); a disk that fills during the run leaves the profile in the
//! fallback file; a hang-up (SIGHUP, or the terminal itself going away) is passed on to the command and the
//! recording is written, windows included; an attach ends at a hang-up with its profile; standard output and
//! error that are gone stop nothing; `top` ends cleanly at a hang-up. And the profile never mixes with the
//! recorded command's output: a machine format to stdout is refused before the command starts, the text report
//! goes to stderr when stdout is not a terminal.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::{run_raw, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
/// Generous: the machine may be shared and loaded.
const LIMIT: Duration = Duration::from_secs(120);

/// A fresh scratch folder for one test.
fn scratch(tag: &str) -> PathBuf {
    let d = common::build_dir("outputs").join(tag);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Wait until `path` exists; panic after [`LIMIT`].
fn wait_for(path: &Path) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < LIMIT, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for `child` to end; kill it (and its process group) and panic after [`LIMIT`].
fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > LIMIT {
            kill_group(child.id());
            let _ = child.wait();
            panic!("pid {} did not end within {LIMIT:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL to the process group `pgid` (a test's leftovers: a command an old ntprof left running).
fn kill_group(pgid: u32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

fn hup(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
}

/// A shell script (written into `dir`, its path returned) that touches `started`, then burns CPU until a
/// hang-up, which it writes into `mark` before it exits with status 3. Bounded (about a minute of CPU at most)
/// so that a command an old ntprof left behind ends by itself.
fn hangup_command(dir: &Path) -> String {
    let script = dir.join("until-hup.sh");
    std::fs::write(
        &script,
        format!(
            "trap 'echo HUP > {mark}; exit 3' HUP\ntouch {started}\ni=0\nwhile [ $i -lt 60000000 ]; do \
             i=$((i+1)); done\n",
            mark = dir.join("mark").display(),
            started = dir.join("started").display()
        ),
    )
    .unwrap();
    script.display().to_string()
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Samples of the first source of a JSON report, counted and outside.
fn samples(r: &Value) -> u64 {
    let s = &r["sources"][0]["stats"];
    u(&s["counted"]) + u(&s["outside"])
}

/// `ntprof report FILE` renders the file again (the text report, with its source's section).
fn reads_back(path: &Path) {
    let out = run_raw(Command::new(NTPROF).arg("report").arg(path), LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("== Timer"),
        "ntprof report {}: {}{text}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_output_is_checked_before_the_command_runs() {
    let dir = scratch("check");
    let marker = dir.join("RAN");
    let touch = format!("touch {}", marker.display());
    std::fs::write(dir.join("a-file"), b"").unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &["-o", "/nonexistent-dir/x.json"],
            "the folder /nonexistent-dir does not exist",
        ),
        (
            &["--json", "/nonexistent-dir/x.json"],
            "the folder /nonexistent-dir does not exist",
        ),
        (
            &["--csv", "/nonexistent-dir/x.csv"],
            "the folder /nonexistent-dir does not exist",
        ),
        (
            &["--pprof", "/nonexistent-dir/x.pb.gz"],
            "the folder /nonexistent-dir does not exist",
        ),
        (
            &["--flamegraph", "/nonexistent-dir/x.svg"],
            "the folder /nonexistent-dir does not exist",
        ),
        // A file system that takes no new file (root is not stopped by permissions, a read-only one is).
        (&["-o", "/proc/x.json"], "cannot create a file in /proc"),
        // The windows' folder cannot be made under a file.
        (
            &["--every", "1", "-o", "a-file/windows/"],
            "cannot create the folder",
        ),
    ];
    for (options, reason) in cases {
        let out = run_raw(
            Command::new(NTPROF)
                .current_dir(&dir)
                .args(["record", "-q"])
                .args(options)
                .args(["--", "sh", "-c", &touch]),
            LIMIT,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        let path = options[options.len() - 1];
        assert_eq!(out.status.code(), Some(2), "{options:?}: {err}");
        assert!(
            err.contains(path) && err.contains(reason),
            "{options:?}: {err}"
        );
        assert!(!marker.exists(), "{options:?}: the command ran: {err}");
    }
    // An attach is refused before it begins: at once, with the same status, not after its --duration.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let t0 = Instant::now();
    let out = run_raw(
        Command::new(NTPROF).args([
            "attach",
            "-q",
            "-p",
            &sleeper.id().to_string(),
            "--duration",
            "20",
            "-o",
            "/nonexistent-dir/x.json",
        ]),
        LIMIT,
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent-dir/x.json"), "{err}");
    // Physical bound: the attach's --duration is 20 s; a refusal before it takes a fraction of that.
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
}

/// A disk that fills during the run: the requested file cannot be written at the end, the profile is kept in
/// the fallback file under `$TMPDIR`, which `ntprof report` reads, and nothing half-written is left on the disk.
#[test]
fn a_full_disk_keeps_the_profile_in_the_fallback_file() {
    if !common::is_root() {
        assert!(!common::in_ci(), "mounting the small tmpfs needs root");
        eprintln!("SKIPPED: mounting the small tmpfs needs root; with CI=true this is a failure");
        return;
    }
    let Some(unshare) = common::tool(
        "unshare",
        common::on_path("unshare"),
        "apt-get install util-linux",
    ) else {
        return;
    };
    let dir = scratch("full");
    let (disk, keep) = (dir.join("disk"), dir.join("keep"));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&keep).unwrap();
    // In a mount namespace of its own (gone with it): a 256 KiB tmpfs, empty when ntprof checks its output, which
    // the command fills before it burns CPU (about 0.3 s of dash's arithmetic loop here).
    let d = disk.display();
    let script = format!(
        "mount -t tmpfs -o size=256k ntprof-test {d} || exit 99; {NTPROF} record -q -o {d}/out.json -- sh -c \
         'head -c 4M /dev/zero > {d}/fill 2>/dev/null; i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; \
         rc=$?; ls -A {d} > {listing}; exit $rc",
        listing = dir.join("listing").display()
    );
    let out = run_raw(
        Command::new(unshare)
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env("TMPDIR", &keep),
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(99), "cannot mount a tmpfs: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "cannot write {d}/out.json: No space left on device"
        )),
        "{err}"
    );
    // Only the filler is on the full disk: no half-written out.json, no temporary file.
    let listing = std::fs::read_to_string(dir.join("listing")).unwrap();
    assert_eq!(listing.trim(), "fill", "{listing}");
    let kept: Vec<PathBuf> = std::fs::read_dir(&keep)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}: {err}");
    let name = kept[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("ntprof-") && name.ends_with(".json"),
        "{name}"
    );
    assert!(
        err.contains(&format!("the profile is kept in {}", kept[0].display())),
        "{err}"
    );
    let r = json(&kept[0]);
    // Physical bound: the loop ran at least 0.1 s of CPU at the Timer's 1 kHz: far more than 10 samples.
    assert!(samples(&r) >= 10, "{}", samples(&r));
    reads_back(&kept[0]);
}

/// `ntprof record` started in a process group of its own (so that the test can end what an old ntprof left
/// running), with stdin closed and stdout/stderr captured.
fn spawn_record(dir: &Path, options: &[&str]) -> Child {
    Command::new(NTPROF)
        .current_dir(dir)
        .args(["record", "-q"])
        .args(options)
        .args(["--", "sh", &hangup_command(dir)])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_hangup_is_passed_on_to_the_command_and_the_profile_written() {
    let dir = scratch("hup");
    let mut child = spawn_record(&dir, &["-o", "out.json"]);
    wait_for(&dir.join("started"));
    std::thread::sleep(Duration::from_millis(500));
    hup(child.id());
    let status = wait_bounded(&mut child);
    kill_group(child.id());
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    // ntprof ends with the command's status: the command got the hang-up and exited 3.
    assert_eq!(status.code(), Some(3), "{status:?} {err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("mark")).unwrap().trim(),
        "HUP"
    );
    let r = json(&dir.join("out.json"));
    assert_eq!(r["run"]["ended_by"], "hangup");
    assert_eq!(r["run"]["exit_status"], 3);
    let notes = r["run"]["notes"].to_string();
    assert!(notes.contains("hung up (SIGHUP)"), "{notes}");
    assert!(samples(&r) > 0);
    reads_back(&dir.join("out.json"));
}

#[test]
fn a_hangup_closes_the_last_window() {
    let dir = scratch("hup-windows");
    let mut child = spawn_record(&dir, &["--every", "0.5", "-o", "w/"]);
    wait_for(&dir.join("started"));
    // Physical: a window closes every 0.5 s; 1.5 s gives at least one before the last.
    std::thread::sleep(Duration::from_millis(1500));
    hup(child.id());
    let status = wait_bounded(&mut child);
    kill_group(child.id());
    assert_eq!(status.code(), Some(3), "{status:?}");
    let mut windows: Vec<PathBuf> = std::fs::read_dir(dir.join("w"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    windows.sort();
    assert!(windows.len() >= 2, "{windows:?}");
    let last = json(windows.last().unwrap());
    assert_eq!(last["run"]["window"]["last"], true, "{}", last["run"]);
    assert_eq!(last["run"]["ended_by"], "hangup");
    for w in &windows[..windows.len() - 1] {
        assert_eq!(json(w)["run"]["window"]["last"], false, "{}", w.display());
    }
}

#[test]
fn an_attach_ends_at_a_hangup_with_its_profile() {
    let dir = scratch("hup-attach");
    let mut target = Command::new("sh")
        .arg(hangup_command(&dir))
        .process_group(0)
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
    let mut ntprof = Command::new(NTPROF)
        .current_dir(&dir)
        .args([
            "attach",
            "-q",
            "-p",
            &target.id().to_string(),
            "-o",
            "out.json",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Time for the attach to open its events (a few rounds of 100 ms on a loaded machine).
    std::thread::sleep(Duration::from_millis(1500));
    hup(ntprof.id());
    let status = wait_bounded(&mut ntprof);
    // The attached process is not ntprof's: it runs on, untouched by the hang-up.
    let still = target.try_wait().unwrap();
    kill_group(target.id());
    let _ = target.wait();
    assert!(status.success(), "{status:?}");
    assert!(still.is_none() && !dir.join("mark").exists());
    let r = json(&dir.join("out.json"));
    assert_eq!(r["run"]["ended_by"], "hangup");
    assert!(samples(&r) > 0);
    reads_back(&dir.join("out.json"));
}

/// The terminal itself goes away (as when an ssh session drops): ntprof runs as the session leader of a
/// pseudo-terminal (`script`), which is then closed. The kernel hangs up ntprof alone; ntprof passes it on to the
/// command, records to its end and writes the profile: the requested file, or, when the report was for the
/// terminal that is gone (EIO), the fallback file.
#[test]
fn a_terminal_that_goes_away_loses_nothing() {
    let Some(script) = common::tool(
        "script",
        common::on_path("script"),
        "apt-get install bsdutils",
    ) else {
        return;
    };
    for to_file in [true, false] {
        let dir = scratch(if to_file { "tty-file" } else { "tty-report" });
        let keep = dir.join("keep");
        std::fs::create_dir_all(&keep).unwrap();
        let output = if to_file { "-o out.json" } else { "" };
        // No -q: the progress line is drawn on the terminal, and goes on drawing after the hang-up.
        let line = format!(
            "exec {NTPROF} record {output} -- sh {}",
            hangup_command(&dir)
        );
        let mut term = Command::new(&script)
            .args(["-qec", &line, "/dev/null"])
            .current_dir(&dir)
            .env("TMPDIR", &keep)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&dir.join("started"));
        std::thread::sleep(Duration::from_millis(500));
        // The terminal's other end closes: its master side dies with `script`.
        let _ = term.kill();
        let _ = term.wait();
        wait_for(&dir.join("mark"));
        let written = if to_file {
            dir.join("out.json")
        } else {
            let t0 = Instant::now();
            loop {
                let kept: Vec<PathBuf> = std::fs::read_dir(&keep)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "json"))
                    .collect();
                if let [one] = kept.as_slice() {
                    break one.clone();
                }
                assert!(
                    t0.elapsed() < LIMIT,
                    "no fallback file in {}",
                    keep.display()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        // The file is renamed into place whole: once it exists, it is complete.
        wait_for(&written);
        let r = json(&written);
        assert_eq!(r["run"]["ended_by"], "hangup", "{}", written.display());
        assert_eq!(r["run"]["exit_status"], 3);
        assert!(samples(&r) > 0);
        reads_back(&written);
    }
}

/// Standard output and standard error are pipes whose readers have gone (EPIPE on every write): the run, its
/// windows and its files are all written, and ntprof ends with the command's status.
#[test]
fn closed_stdout_and_stderr_stop_nothing() {
    let dir = scratch("closed");
    let busy = "i=0; while [ $i -lt 1500000 ]; do i=$((i+1)); done; exit 5";
    for options in [
        &["--every", "0.5", "-o", "w/"][..],
        &["--json", "out.json"][..],
    ] {
        let mut child = Command::new(NTPROF)
            .current_dir(&dir)
            .arg("record")
            .args(options)
            .args(["--", "sh", "-c", busy])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = wait_bounded(&mut child);
        kill_group(child.id());
        assert_eq!(status.code(), Some(5), "{options:?}: {status:?}");
    }
    let windows: Vec<PathBuf> = std::fs::read_dir(dir.join("w"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert!(!windows.is_empty());
    assert!(
        windows
            .iter()
            .any(|w| json(w)["run"]["window"]["last"] == true)
    );
    let r = json(&dir.join("out.json"));
    assert!(samples(&r) > 0);
}

/// `top` (plain tables on a pipe) at a hang-up: the command is told and ends, top ends with its status, and
/// nothing is left running.
#[test]
fn top_ends_cleanly_at_a_hangup() {
    let dir = scratch("top");
    let mut child = Command::new(NTPROF)
        .current_dir(&dir)
        .args(["top", "--", "sh", &hangup_command(&dir)])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
    std::thread::sleep(Duration::from_millis(500));
    hup(child.id());
    let status = wait_bounded(&mut child);
    kill_group(child.id());
    assert_eq!(status.signal(), None, "ntprof top was killed by {status:?}");
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("mark")).unwrap().trim(),
        "HUP"
    );
}

/// `record -- CMD` shares its standard output with CMD: a machine format there is refused before CMD starts (it
/// would begin with CMD's own output), given a file it is clean, and the text report stays out of CMD's `> log`.
#[test]
fn the_profile_never_mixes_with_the_commands_output() {
    let dir = scratch("apart");
    let prints = ["--", "sh", "-c", "echo done"];
    let refused: [&[&str]; 6] = [
        &["--format", "json"],
        &["--format", "pprof"],
        &["--format", "csv"],
        &["--format", "folded"],
        &["--format", "flamegraph", "-o", "-"],
        &["--json", "-"],
    ];
    for options in refused {
        let out = run_raw(
            Command::new(NTPROF)
                .current_dir(&dir)
                .args(["record", "-q"])
                .args(options)
                .args(prints),
            LIMIT,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{options:?}: {err}");
        assert!(
            err.contains("standard output")
                && (err.contains("-o FILE") || err.contains("file name")),
            "{options:?}: {err}"
        );
        // Refused before the command started: it printed nothing.
        assert!(out.stdout.is_empty(), "{options:?}: {:?}", out.stdout);
    }
    // With -o FILE: the command's output is its own, the file clean JSON that `ntprof report` reads.
    let out = run_raw(
        Command::new(NTPROF)
            .current_dir(&dir)
            .args(["record", "-q", "--format", "json", "-o", "out.json"])
            .args(prints),
        LIMIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    let r = json(&dir.join("out.json"));
    assert_eq!(r["run"]["exit_status"], 0);
    reads_back(&dir.join("out.json"));
    // `ntprof report` runs no command: its standard output is the profile's, in any format.
    let again = run_raw(
        Command::new(NTPROF)
            .args(["report", "--format", "json"])
            .arg(dir.join("out.json")),
        LIMIT,
    );
    assert_eq!(serde_json::from_slice::<Value>(&again.stdout).unwrap(), r);
    // The text report: not in the program's log (stdout is a file, not a terminal), but on stderr.
    let line = format!("{NTPROF} record -q -- sh -c 'echo done' > log");
    let out = run_raw(
        Command::new("sh").current_dir(&dir).args(["-c", &line]),
        LIMIT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("log")).unwrap(), "done\n");
    assert!(
        err.contains("ntprof record: sh -c") && err.contains("== Timer"),
        "{err}"
    );
}
