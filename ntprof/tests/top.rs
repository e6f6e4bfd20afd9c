//! `ntprof top` end to end: in a real terminal (a tmux pane: keys sent with send-keys, the screen read with
//! capture-pane), without one (piped: plain tables), and its usage errors.
//!
//! The designed program (tests/top/top_work.c) splits its main thread's CPU time 3 : 1 between burn_three and
//! burn_one while a helper thread naps, so the Timer table's order and ratio are known, the off_cpu source has a
//! wait, and the name order is the reverse of the share order. Every wait for the screen polls it against a generous deadline.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
/// How long any awaited state of the screen may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// The designed program, built once.
fn work() -> &'static Path {
    static W: OnceLock<PathBuf> = OnceLock::new();
    W.get_or_init(|| {
        let dir = common::build_dir("top");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/top/top_work.c");
        common::gcc(
            &[
                "-O2",
                "-g",
                "-pthread",
                "-o",
                "top_work",
                src.to_str().unwrap(),
            ],
            &dir,
        );
        dir.join("top_work")
    })
    .as_path()
}

/// A tmux server of its own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A detached 160x40 session running `script` with sh.
    fn start(tag: &str, script: &str) -> Tmux {
        let Some(_) = common::tool("tmux", common::on_path("tmux"), "apt-get install tmux") else {
            panic!("tmux is needed to test ntprof top in a terminal (apt-get install tmux)");
        };
        let t = Tmux {
            socket: format!("ntprof-top-{tag}-{}", std::process::id()),
        };
        let st = t
            .cmd()
            .args(["new-session", "-d", "-x", "160", "-y", "40", "-s", "top"])
            .args(["sh", "-c", script])
            .env("TERM", "xterm")
            .status()
            .expect("run tmux");
        assert!(st.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// The pane's text now.
    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        let st = self
            .cmd()
            .args(["send-keys", "-t", "top", keys])
            .status()
            .expect("tmux send-keys");
        assert!(st.success());
    }

    /// Poll the screen until `ok` holds; panic with the last screen after PATIENCE.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "waited {PATIENCE:?} for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// A row of a table: (share %, samples, function, module, process).
#[derive(Debug)]
struct Row {
    share: f64,
    samples: u64,
    function: String,
    process: String,
}

/// The rows of the first table in `text` (the lines that start with a share).
fn rows(text: &str) -> Vec<Row> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("SHARE"))
        .skip(1)
        .map_while(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let share = w.first()?.strip_suffix('%')?.parse().ok()?;
            Some(Row {
                share,
                samples: w.get(1)?.parse().unwrap_or(0),
                function: w.get(2)?.to_string(),
                process: w[4..].join(" "),
            })
        })
        .collect()
}

fn samples(rows: &[Row], f: &str) -> u64 {
    rows.iter()
        .find(|r| r.function == f)
        .map_or(0, |r| r.samples)
}

fn position(rows: &[Row], f: &str) -> Option<usize> {
    rows.iter().position(|r| r.function == f)
}

/// Samples of the two designed functions a table must hold before its split is judged: at 1,000 samples a
/// share's binomial sigma is sqrt(0.75 * 0.25 / 1000) = 1.37 points, so the accepted band (four sigma, 5.5
/// points) stops short of the nearest wrong split, 2 : 1 (66.7 %, 8.3 points away, six sigma). A table of
/// fewer samples could pass a wrong split, so check_ratio refuses it rather than judge it.
const SPLIT_SAMPLES: u64 = 1000;

/// burn_three's part of the two designed functions is 3/4 within sampling noise: four binomial standard
/// deviations of a share of that many samples (5.5 points at 1,000 samples, 3.5 at 2,500; a 2 : 1 split lies
/// at least six sigma from 75 %). No allowance for load: the program splits its own CPU time 3 : 1, which a busy machine slows but
/// does not shift, and the samples are taken per millisecond of that CPU time.
fn check_ratio(rows: &[Row], what: &str) {
    let (a, b) = (samples(rows, "burn_three"), samples(rows, "burn_one"));
    let n = (a + b) as f64;
    assert!(
        a + b >= SPLIT_SAMPLES,
        "{what}: {a} + {b} samples of the designed functions, fewer than the {SPLIT_SAMPLES} that tell 3 : 1 \
         from 2 : 1 in {rows:?}"
    );
    let p = a as f64 / n;
    let margin = 4.0 * (0.75 * 0.25 / n).sqrt();
    assert!(
        (p - 0.75).abs() <= margin,
        "{what}: burn_three has {:.1} % of the designed samples ({a} : {b}), designed 75 % +- {:.1}",
        100.0 * p,
        100.0 * margin
    );
    eprintln!(
        "{what}: burn_three {a}, burn_one {b}: {:.1} % (designed 75 +- {:.1})",
        100.0 * p,
        100.0 * margin
    );
}

/// The header's "(N refreshes)".
fn refreshes(screen: &str) -> u64 {
    let head = screen.lines().next().unwrap_or("");
    head.split(" refreshes)")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn dir_of(path: &Path) -> String {
    path.parent().unwrap().to_str().unwrap().to_string()
}

#[test]
fn the_live_view_answers_its_keys_in_a_terminal_and_restores_it() {
    let work = work();
    let d = dir_of(work);
    let script = format!(
        "stty -a > '{d}/stty-before'; '{NTPROF}' top --off-cpu --window 60 -- '{}'; \
         echo ntprof-exit=$?; stty -a > '{d}/stty-after'; exec sleep 3600",
        work.display()
    );
    let t = Tmux::start("keys", &script);

    // The designed functions, in share order and ratio, once the window holds enough samples.
    let s = t.wait("the designed functions with enough samples", |s| {
        let r = rows(s);
        s.contains("source Timer (1/3)")
            && samples(&r, "burn_three") + samples(&r, "burn_one") >= SPLIT_SAMPLES
    });
    eprintln!("the live view:\n{s}");
    assert!(s.contains("sort share"), "{s}");
    assert!(
        s.contains("q quit  s sort  e/Tab source  f/space freeze  ? help"),
        "{s}"
    );
    let r = rows(&s);
    assert!(position(&r, "burn_three") < position(&r, "burn_one"), "{s}");
    assert!(r[0].function == "burn_three", "the hottest first: {s}");
    check_ratio(&r, "share sort");
    let pid: u32 = r[0]
        .process
        .strip_prefix("top_work ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("process column {:?}", r[0].process));
    assert!(r[0].share > 50.0, "{s}");

    // s: the last refresh's samples, then the names (burn_one before burn_three).
    t.keys("s");
    t.wait("sort by the last refresh", |s| {
        s.contains("sort last refresh")
    });
    t.keys("s");
    let s = t.wait("sort by name", |s| s.contains("sort name"));
    let r = rows(&s);
    assert!(position(&r, "burn_one") < position(&r, "burn_three"), "{s}");

    // e: the off-CPU waits, in time.
    t.keys("e");
    let s = t.wait("the off_cpu source", |s| {
        s.contains("source off_cpu (2/3: off-CPU waits)")
            && rows(s).iter().any(|r| r.function == "clock_nanosleep")
    });
    assert!(s.contains("TIME") && s.contains(" s off CPU/s"), "{s}");

    // f: frozen, the screen stands still for three refreshes while sampling goes on.
    t.keys("f");
    let frozen = t.wait("FROZEN", |s| {
        s.lines().next().unwrap_or("").contains("FROZEN")
    });
    let held = refreshes(&frozen);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        assert_eq!(t.screen(), frozen, "the frozen screen changed");
        std::thread::sleep(Duration::from_millis(200));
    }
    t.keys("f");
    let s = t.wait(
        "the live windows again, two more refreshes than when frozen",
        |s| !s.lines().next().unwrap_or("").contains("FROZEN") && refreshes(s) >= held + 2,
    );
    assert!(s.contains("source off_cpu"), "{s}");

    // q: the run ends, the command with it, ntprof exits 0 and the terminal is as it was.
    t.keys("q");
    let s = t.wait("ntprof's exit", |s| s.contains("ntprof-exit="));
    assert!(s.contains("ntprof-exit=0"), "{s}");
    assert!(s.contains("ended: quit"), "{s}");
    let before = std::fs::read_to_string(format!("{d}/stty-before")).unwrap();
    let after = std::fs::read_to_string(format!("{d}/stty-after")).unwrap();
    assert!(
        before.contains("icanon") && before.contains(" echo"),
        "{before}"
    );
    assert_eq!(before, after, "the terminal's modes after ntprof top");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the command {pid} still runs after q"
    );
}

#[test]
fn the_last_table_stays_and_ntprof_exits_with_the_commands_status() {
    let work = work();
    let script = format!(
        "'{NTPROF}' top --window 60 -- sh -c \"'{}' 3.5; exit 7\"; echo ntprof-exit=$?; exec sleep 3600",
        work.display()
    );
    let t = Tmux::start("exit", &script);
    let s = t.wait("ntprof's exit", |s| s.contains("ntprof-exit="));
    eprintln!("after the command's exit:\n{s}");
    assert!(s.contains("ntprof-exit=7"), "{s}");
    assert!(s.contains("ended: sh exited with status 7"), "{s}");
    let r = rows(&s);
    assert!(r.first().is_some_and(|r| r.function == "burn_three"), "{s}");
    check_ratio(&r, "last table");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_by_a_second_q() {
    // The shell ignores SIGTERM and the program it execs keeps ignoring it.
    let script = format!(
        "'{NTPROF}' top -- sh -c \"trap '' TERM; exec '{}'\"; echo ntprof-exit=$?; exec sleep 3600",
        work().display()
    );
    let t = Tmux::start("stubborn", &script);
    let s = t.wait("the designed functions", |s| {
        samples(&rows(s), "burn_three") > 0
    });
    let pid: u32 = rows(&s)[0]
        .process
        .strip_prefix("top_work ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process column: {s}"));
    t.keys("q");
    t.wait("the quitting footer", |s| {
        s.contains(&format!(
            "quitting: command {pid} sent SIGTERM, waiting for its exit (q again: SIGKILL)"
        ))
    });
    // SIGTERM is ignored: the command and ntprof go on (a second, to let a wrong exit show).
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        assert!(
            !t.screen().contains("ntprof-exit="),
            "ntprof ended on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    t.keys("q");
    let s = t.wait("ntprof's exit", |s| s.contains("ntprof-exit="));
    assert!(
        s.contains("ntprof-exit=0") && s.contains("ended: quit"),
        "{s}"
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "{pid} still runs"
    );
}

#[test]
fn without_a_terminal_a_plain_table_per_refresh() {
    let out = common::run_ok(
        Command::new(NTPROF)
            .args(["top", "--duration", "4", "--refresh", "1", "--"])
            .arg(work()),
        Duration::from_secs(120),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    eprintln!("{text}");
    assert!(!text.contains('\x1b'), "escape codes in the plain output");
    let blocks: Vec<&str> = text.split("--- refresh ").skip(1).collect();
    assert!(blocks.len() >= 2, "{} tables:\n{text}", blocks.len());
    for b in &blocks {
        let head = b.lines().next().unwrap();
        let (start, end) = head.split_once(": ").unwrap().1.split_once(" .. ").unwrap();
        assert!(
            start.ends_with('Z') && end.ends_with('Z') && start < end,
            "{head}"
        );
        assert!(b.contains("source Timer (1/1)"), "{b}");
        let r = rows(b);
        for f in ["burn_three", "burn_one"] {
            assert!(samples(&r, f) > 0, "{f} missing from\n{b}");
        }
    }
    check_ratio(&rows(blocks[blocks.len() - 1]), "last plain table");
    assert!(
        text.trim_end().ends_with("--- ended: --duration reached"),
        "{text}"
    );
}

#[test]
fn a_pid_and_its_tree_live_and_ctrl_c_leaves_them_running() {
    // A shell that starts the designed program and waits for it: the program is the attached pid's child.
    let mut tree = Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' & wait", work().display()))
        .spawn()
        .expect("start the tree");
    let root = tree.id();
    let script =
        format!("'{NTPROF}' top --window 60 -p {root}; echo ntprof-exit=$?; exec sleep 3600");
    let t = Tmux::start("pid", &script);
    let s = t.wait("the child's designed functions with enough samples", |s| {
        let r = rows(s);
        samples(&r, "burn_three") + samples(&r, "burn_one") >= SPLIT_SAMPLES
    });
    eprintln!("attached:\n{s}");
    assert!(s.contains(&format!("pid {root} and descendants")), "{s}");
    let r = rows(&s);
    let child: u32 = r[0]
        .process
        .strip_prefix("top_work ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the hottest row is not the child's: {s}"));
    assert!(r[0].function == "burn_three" && child != root, "{s}");
    check_ratio(&r, "attached tree");
    t.keys("C-c");
    let s = t.wait("ntprof's exit", |s| s.contains("ntprof-exit="));
    assert!(
        s.contains("ntprof-exit=0") && s.contains("ended: quit"),
        "{s}"
    );
    // An attach ends without touching its targets.
    let alive = tree.try_wait().unwrap().is_none();
    let child_alive = Path::new(&format!("/proc/{child}")).exists();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = tree.wait();
    assert!(child_alive, "the attached program ended with ntprof");
    assert!(alive, "the attached shell ended with ntprof");
}

#[test]
fn the_kernel_without_a_terminal() {
    if !common::root_or_skip("profiling the kernel needs privilege (the refusal is tested apart)") {
        return;
    }
    let out = common::run_ok(
        Command::new(NTPROF).args(["top", "--kernel", "--duration", "2.5"]),
        Duration::from_secs(120),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let tables = text.matches("--- refresh ").count();
    assert!(tables >= 2, "{text}");
    assert!(
        text.contains("kernel (system-wide)") && text.contains("source Timer (1/1)"),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with("--- ended: --duration reached"),
        "{text}"
    );
}

/// `ntprof ARGS`: its exit status and standard error.
fn usage(args: &[&str]) -> (Option<i32>, String) {
    let out = common::run_bounded(Command::new(NTPROF).args(args), Duration::from_secs(60));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn one_target_and_a_valid_refresh_or_a_usage_error() {
    let cases: &[(&[&str], &str)] = &[
        (&["top"], "no target"),
        (&["top", "--refresh", "1"], "no target"),
        (&["top", "-p", "1", "--", "true"], "give one target"),
        (&["top", "--kernel", "-p", "1"], "give one target"),
        (&["top", "--kernel", "--", "true"], "give one target"),
        (
            &["top", "--expect", "f=50", "--", "true"],
            "writes no report",
        ),
        (&["top", "--refresh", "0", "--", "true"], "--refresh"),
        (
            &["top", "--refresh", "soon", "--", "true"],
            "not a number of seconds",
        ),
        (&["top", "--refresh=-1", "--", "true"], "--refresh"),
        (
            &["top", "--window", "1", "--refresh", "2", "--", "true"],
            "shorter than --refresh",
        ),
    ];
    let help = common::run_ok(
        Command::new(NTPROF).args(["top", "--help"]),
        Duration::from_secs(60),
    );
    let help = String::from_utf8(help.stdout).unwrap();
    for key in [
        "q, Ctrl-C",
        "s  ",
        "e, Tab",
        "f, space",
        "?  ",
        "--refresh",
        "--delay",
        "--window",
        "--duration",
    ] {
        assert!(
            help.contains(key),
            "ntprof top --help lacks {key:?}:\n{help}"
        );
    }
    for (args, says) in cases {
        let (code, err) = usage(args);
        assert_eq!(code, Some(2), "ntprof {args:?}: {err}");
        assert!(
            err.contains(says),
            "ntprof {args:?} does not say {says:?}: {err}"
        );
    }
}

#[test]
fn the_kernel_refused_without_privilege_says_what_record_says() {
    let mut cmd = common::ntprof_command(true);
    cmd.args(["top", "--kernel", "--duration", "1"]);
    let out = common::run_bounded(cmd, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    if !common::is_root() && !err.contains("CAP_PERFMON") {
        common::skip("this user may profile the kernel: there is no refusal to see (run as root)");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("(every process, the kernel) needs CAP_PERFMON")
            && err.contains("perf_event_paranoid <= 0"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
