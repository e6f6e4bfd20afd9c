//! debuginfod, end to end: a C program built with `-g` and a build-id, its debug part split off with `objcopy
//! --only-keep-debug` and the executable stripped, so that only the debug file names its function.
//!
//! - Against Debian's own `debuginfod` server, started here on 127.0.0.1 over a folder holding that debug file:
//!   the first run names the function through the server and fills the cache (`CACHE/BUILDID/debuginfo`, the
//!   very file served); a second run with the server stopped names it from the cache; the server stopped and
//!   an empty cache leave `module+0x…` with a note naming the server; `--no-debuginfod`, and no
//!   `DEBUGINFOD_URLS` at all, fetch nothing; `--debuginfod URL` alone fetches.
//! - Against a small server of the test's own (`TcpListener`), each hostile case names nothing, caches nothing,
//!   says why in a note, and costs bounded time and memory: a server that never answers (`DEBUGINFOD_TIMEOUT`
//!   2 s), one that answers garbage, one that sends an endless file (`DEBUGINFOD_MAXSIZE`) or announces 100 GB,
//!   one that redirects in a loop, and one that serves the valid debug file of another build.
//!
//! The figures of each case are printed (`--nocapture` shows them).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{gcc, run_raw};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
/// Any run here takes about a second; this is the hang detector.
const LIMIT: Duration = Duration::from_secs(90);
/// The function only the debug file names.
const HOT: &str = "debuginfod_spin";

/// The programs and debug files, built once.
struct Built {
    dir: PathBuf,
    /// The stripped executable.
    prog: PathBuf,
    /// Its build-id, hex.
    id: String,
    /// Its debug file, in the folder the real server serves.
    debug: PathBuf,
    /// The debug file of another build (other build-id, same code).
    other_debug: PathBuf,
}

fn tools_or_skip() -> bool {
    for (tool, how) in [
        ("debuginfod", "apt-get install debuginfod"),
        ("objcopy", "apt-get install binutils"),
        ("strip", "apt-get install binutils"),
    ] {
        if common::tool(tool, common::on_path(tool), how).is_none() {
            return false;
        }
    }
    common::tool(
        "GNU time",
        Some(PathBuf::from("/usr/bin/time")).filter(|p| p.is_file()),
        "apt-get install time",
    )
    .is_some()
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = common::build_dir("debuginfod");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/debuginfod/spin.c");
        let src = src.to_str().unwrap();
        let build = |name: &str, variant: &str| {
            let define = format!("-DVARIANT=\"{variant}\"");
            gcc(
                &["-g", "-O1", "-Wl,--build-id", &define, "-o", name, src],
                &dir,
            );
            run(
                Command::new("objcopy").args(["--only-keep-debug", name, &format!("{name}.debug")]),
                &dir,
            );
            std::fs::copy(dir.join(name), dir.join(format!("{name}_full"))).unwrap();
            run(Command::new("strip").args(["--strip-all", name]), &dir);
        };
        build("spin", "served");
        build("spin_other", "another build");
        let served = dir.join("served");
        std::fs::create_dir_all(&served).unwrap();
        let debug = served.join("spin.debug");
        std::fs::rename(dir.join("spin.debug"), &debug).unwrap();
        let id = build_id(&dir.join("spin"));
        assert_ne!(
            id,
            build_id(&dir.join("spin_other")),
            "the two builds must differ"
        );
        let other_debug = dir.join("spin_other.debug");
        // A stripped twin that names its debug file with .gnu_debuglink, the file beside it.
        std::fs::copy(dir.join("spin"), dir.join("spin_link")).unwrap();
        std::fs::copy(&debug, dir.join("spin_link.debug")).unwrap();
        run(
            Command::new("objcopy").args(["--add-gnu-debuglink=spin_link.debug", "spin_link"]),
            &dir,
        );
        Built {
            prog: dir.join("spin"),
            id,
            debug,
            other_debug,
            dir,
        }
    })
}

fn run(cmd: &mut Command, cwd: &Path) {
    let out = cmd.current_dir(cwd).output().expect("run a tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The build-id `readelf -n` prints.
fn build_id(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build-id in {}", file.display()))
        .to_string()
}

/// One ntprof run: its JSON report, stderr, wall time and peak resident size (KiB, GNU time's).
struct Run {
    report: Value,
    stderr: String,
    took: Duration,
    peak_kib: u64,
}

impl Run {
    fn functions(&self) -> Vec<String> {
        self.report["sources"][0]["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn named(&self) -> bool {
        self.functions().iter().any(|f| f == HOT)
    }

    fn notes(&self) -> String {
        self.report["run"]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The program's module row.
    fn module(&self) -> &Value {
        self.module_named("spin")
    }

    fn module_named(&self, name: &str) -> &Value {
        self.report["sources"][0]["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no module spin: {}", self.report))
    }

    /// The stripped program's own code shows as `spin+0x…`.
    fn unnamed(&self) -> bool {
        !self.named() && self.functions().iter().any(|f| f.starts_with("spin+0x"))
    }
}

/// `ntprof record --json` of the program, with the debuginfod variables `env` (and none of the caller's),
/// `args` before the command.
fn record(tag: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    record_said(tag, env, args, false)
}

/// [`record`], with ntprof's progress on stderr when `said`.
fn record_said(tag: &str, env: &[(&str, &str)], args: &[&str], said: bool) -> Run {
    record_of(&built().prog, tag, env, args, said)
}

/// [`record_said`] of the program `prog`.
fn record_of(prog: &Path, tag: &str, env: &[(&str, &str)], args: &[&str], said: bool) -> Run {
    let b = built();
    let json = b.dir.join(format!("{tag}.json"));
    let peak = b.dir.join(format!("{tag}.peak"));
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-f").arg("%M").arg("-o").arg(&peak).arg(NTPROF);
    cmd.arg("record").args((!said).then_some("-q"));
    cmd.arg("--json").arg(&json).args(args).arg("--").arg(prog);
    for (k, _) in std::env::vars() {
        if k.starts_with("DEBUGINFOD_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let t0 = Instant::now();
    let out = run_raw(&mut cmd, LIMIT);
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{cmd:?}: {stderr}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let peak_kib = std::fs::read_to_string(&peak)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Run {
        report,
        stderr,
        took,
        peak_kib,
    }
}

/// A port free now on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Debian's debuginfod serving `dir`, stopped (killed and waited for) on drop.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start debuginfod over `dir` and wait until it serves `id`'s debug file (it indexes the folder after
/// starting).
fn debuginfod(dir: &Path, id: &str) -> Server {
    let port = free_port();
    let db = dir.join(format!("index-{port}.sqlite"));
    let child = Command::new("debuginfod")
        .arg("-F")
        .arg(dir)
        .arg("-p")
        .arg(port.to_string())
        .arg("-d")
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start debuginfod");
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let url = format!("{}/buildid/{id}/debuginfo", server.url);
    let t0 = Instant::now();
    loop {
        if let Ok(r) = ureq::get(&url).call() {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "debuginfod did not serve {url} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

#[test]
fn the_real_server_names_then_the_cache_then_nothing() {
    if !tools_or_skip() {
        return;
    }
    let b = built();
    let cache = b.dir.join("cache-real");
    let cache_s = cache.to_str().unwrap();
    let server = debuginfod(b.debug.parent().unwrap(), &b.id);
    let url = server.url.clone();

    // Off unless asked: no DEBUGINFOD_URLS, nothing fetched.
    let off = record("off", &[("DEBUGINFOD_CACHE_PATH", cache_s)], &[]);
    assert!(off.unnamed(), "{:?}", off.functions());
    assert!(!cache.exists(), "nothing fetched without DEBUGINFOD_URLS");

    let first = record(
        "first",
        &[
            ("DEBUGINFOD_URLS", &url),
            ("DEBUGINFOD_CACHE_PATH", cache_s),
        ],
        &[],
    );
    assert!(first.named(), "{:?}\n{}", first.functions(), first.notes());
    let cached = cache.join(&b.id).join("debuginfo");
    assert_eq!(
        std::fs::read(&cached).expect("the cache holds the file"),
        std::fs::read(&b.debug).unwrap(),
        "the cache holds the very file served, where elfutils keeps it"
    );
    assert_eq!(first.module()["names"], serde_json::json!(["debuginfod"]));

    // --no-debuginfod wins over the variable (and the cache).
    let refused = record(
        "no-debuginfod",
        &[
            ("DEBUGINFOD_URLS", &url),
            ("DEBUGINFOD_CACHE_PATH", cache_s),
        ],
        &["--no-debuginfod"],
    );
    assert!(refused.unnamed(), "{:?}", refused.functions());

    drop(server);
    let second = record(
        "second",
        &[
            ("DEBUGINFOD_URLS", &url),
            ("DEBUGINFOD_CACHE_PATH", cache_s),
        ],
        &[],
    );
    assert!(
        second.named(),
        "{:?}\n{}",
        second.functions(),
        second.notes()
    );

    // --debuginfod URL alone, the server stopped and an empty cache: unnamed, with why.
    let empty = b.dir.join("cache-empty");
    let stopped = record(
        "stopped",
        &[("DEBUGINFOD_CACHE_PATH", empty.to_str().unwrap())],
        &["--debuginfod", &url],
    );
    assert!(stopped.unnamed(), "{:?}", stopped.functions());
    let notes = stopped.notes();
    assert!(
        notes.contains(&format!(
            "debuginfod has no debug file for build-id {}",
            b.id
        )) && notes.contains(&url),
        "{notes}"
    );
    let why = stopped.module()["unnamed"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("debuginfod"), "{}", stopped.module());
    assert!(
        !empty.join(&b.id).exists(),
        "a failed fetch leaves nothing in the cache"
    );
    eprintln!(
        "real debuginfod: first run {:.2} s (fetched), second {:.2} s (cache, server stopped), server stopped \
         and no cache {:.2} s; without debuginfod {:.2} s; peak {} / {} / {} / {} KiB",
        first.took.as_secs_f64(),
        second.took.as_secs_f64(),
        stopped.took.as_secs_f64(),
        off.took.as_secs_f64(),
        first.peak_kib,
        second.peak_kib,
        stopped.peak_kib,
        off.peak_kib
    );
}

/// What the test's own server does with a request for a debug file.
#[derive(Clone, Copy)]
enum Hostile {
    /// Reads the request and never answers.
    Silent,
    /// 200, and a megabyte of text.
    Garbage,
    /// 200 with an ELF magic number and then bytes without end (no length).
    Endless,
    /// 200 announcing a 100 GB file.
    Announced,
    /// 302 to itself.
    Loop,
    /// 200 and the valid debug file of another build.
    OtherBuild,
}

/// The test's server: its URL, and the requests it got and the bytes it sent.
struct Own {
    url: String,
    requests: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
}

fn own_server(how: Hostile) -> Own {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let (r, s) = (requests.clone(), sent.clone());
    let other = std::fs::read(&built().other_debug).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (r, s, other) = (r.clone(), s.clone(), other.clone());
            std::thread::spawn(move || serve(stream, how, &r, &s, &other));
        }
    });
    Own {
        url,
        requests,
        sent,
    }
}

fn serve(
    mut stream: TcpStream,
    how: Hostile,
    requests: &AtomicU64,
    sent: &AtomicU64,
    other: &[u8],
) {
    // The request's head: up to the blank line.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    // Counted by request; the statistics are read after the run (no other memory depends on them).
    requests.fetch_add(1, Ordering::Relaxed);
    let path = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let mut send = |bytes: &[u8]| -> bool {
        let ok = stream.write_all(bytes).is_ok();
        if ok {
            sent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        ok
    };
    match how {
        Hostile::Silent => std::thread::sleep(Duration::from_secs(600)),
        Hostile::Garbage => {
            let body = b"this is not a debug file\n".repeat(40_000);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
            let _ = send(head.as_bytes()) && send(&body);
        }
        Hostile::Endless => {
            if send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n\x7fELF") {
                let block = vec![0u8; 64 << 10];
                while send(&block) {}
            }
        }
        Hostile::Announced => {
            let _ = send(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n\x7fELF");
            std::thread::sleep(Duration::from_secs(600));
        }
        Hostile::Loop => {
            let head = format!(
                "HTTP/1.1 302 Found\r\nLocation: {path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = send(head.as_bytes());
        }
        Hostile::OtherBuild => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", other.len());
            let _ = send(head.as_bytes()) && send(other);
        }
    }
}

/// A run against a hostile server: nothing named, nothing cached, a note saying `why`. Returns the run and
/// the server's counts.
fn hostile(tag: &str, how: Hostile, env: &[(&str, &str)], why: &str) -> (Run, Own) {
    hostile_said(tag, how, env, why, false)
}

/// [`hostile`], with ntprof's progress on stderr when `said`.
fn hostile_said(
    tag: &str,
    how: Hostile,
    env: &[(&str, &str)],
    why: &str,
    said: bool,
) -> (Run, Own) {
    let b = built();
    let server = own_server(how);
    let cache = b.dir.join(format!("cache-{tag}"));
    let mut vars = vec![
        ("DEBUGINFOD_URLS", server.url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap()),
    ];
    vars.extend_from_slice(env);
    let run = record_said(tag, &vars, &[], said);
    assert!(run.unnamed(), "{tag}: {:?}", run.functions());
    assert!(
        !cache.join(&b.id).exists(),
        "{tag}: nothing of a refused file stays in the cache"
    );
    let notes = run.notes();
    assert!(
        notes.contains(why),
        "{tag}: no note saying '{why}':\n{notes}"
    );
    eprintln!(
        "hostile {tag}: {:.2} s, peak {} KiB, {} requests, {} bytes sent",
        run.took.as_secs_f64(),
        run.peak_kib,
        server.requests.load(Ordering::Relaxed),
        server.sent.load(Ordering::Relaxed)
    );
    (run, server)
}

/// The time and memory of the same run with nothing fetched, for the bounds.
fn baseline() -> &'static Run {
    static B: OnceLock<Run> = OnceLock::new();
    B.get_or_init(|| record("baseline", &[], &[]))
}

#[test]
fn a_server_that_never_answers_costs_the_timeout() {
    if !tools_or_skip() {
        return;
    }
    let (run, _) = hostile_said(
        "silent",
        Hostile::Silent,
        &[("DEBUGINFOD_TIMEOUT", "2")],
        "no answer in time",
        true,
    );
    // The response is awaited 2 s (DEBUGINFOD_TIMEOUT) while the report is built (its symbolize_ms, which
    // the baseline's noise does not touch); objects are fetched in parallel, so that is one timeout, plus the
    // scheduling of a loaded 2-processor machine (allowed 4 s more). The whole run is bounded the same way.
    let symbolize_ms = run.report["run"]["symbolize_ms"].as_f64().unwrap();
    assert!(
        (1900.0..6000.0).contains(&symbolize_ms),
        "symbolizing took {symbolize_ms} ms"
    );
    let extra = run.took.saturating_sub(baseline().took);
    assert!(
        extra < Duration::from_secs(6),
        "the run took {extra:?} more than without debuginfod"
    );
    // A wait that lasts is said, with what it waits for.
    assert!(
        run.stderr
            .contains("ntprof: waiting for debuginfod: the debug file of")
            && run.stderr.contains("up to 2 s"),
        "{}",
        run.stderr
    );
}

#[test]
fn garbage_is_not_used() {
    if !tools_or_skip() {
        return;
    }
    hostile("garbage", Hostile::Garbage, &[], "not an ELF file");
}

#[test]
fn an_endless_file_is_cut_off_and_memory_stays_bounded() {
    if !tools_or_skip() {
        return;
    }
    // Large beside the noise of a peak measured while other tests run (up to 35 MiB seen), small enough to
    // send over the loopback in about a second.
    let cap: u64 = 256 << 20;
    let (run, server) = hostile(
        "endless",
        Hostile::Endless,
        &[("DEBUGINFOD_MAXSIZE", &cap.to_string())],
        "more than the 268435456 bytes fetched",
    );
    // Reading stops at the cap: the server got no further than it plus what the loopback's socket buffers
    // hold (the kernel's largest receive and send buffers, tcp_rmem and tcp_wmem).
    let buffers: u64 = ["tcp_rmem", "tcp_wmem"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}"))
                .unwrap()
                .split_whitespace()
                .nth(2)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    let sent = server.sent.load(Ordering::Relaxed);
    assert!(sent <= cap + buffers + (1 << 20), "{sent} bytes sent");
    // The body goes to disk as it comes, a block at a time: ntprof's peak grows by far less than the 64 MiB
    // it read (a copy in memory would add all of it); a quarter of it leaves room for the HTTP client's
    // buffers and the thread.
    let grew = run.peak_kib.saturating_sub(baseline().peak_kib);
    assert!(
        grew < (cap >> 10) / 4,
        "peak grew {grew} KiB over {} KiB",
        baseline().peak_kib
    );

    let (announced, _) = hostile(
        "announced",
        Hostile::Announced,
        &[],
        "its file is 100000000000 bytes, more than the 4294967296 bytes fetched",
    );
    assert!(
        announced.took < baseline().took + Duration::from_secs(4),
        "{:?}",
        announced.took
    );
}

#[test]
fn a_redirect_loop_ends() {
    if !tools_or_skip() {
        return;
    }
    let (_, server) = hostile("loop", Hostile::Loop, &[], "redirected more than 8 times");
    let requests = server.requests.load(Ordering::Relaxed);
    assert!((2..=9).contains(&requests), "{requests} requests");
}

#[test]
fn the_debug_file_of_another_build_never_names() {
    if !tools_or_skip() {
        return;
    }
    let other = build_id(&built().other_debug);
    hostile(
        "other-build",
        Hostile::OtherBuild,
        &[],
        &format!("the debug file of another build (build-id {other}); not used"),
    );
}

/// The module table says where names came from: the unstripped program's own `.symtab` and DWARF, the stripped
/// twin's debug file through `.gnu_debuglink`, and for the stripped program alone nothing, with why.
#[test]
fn module_rows_say_where_their_names_came_from() {
    if !tools_or_skip() {
        return;
    }
    let b = built();
    let full = record_of(&b.dir.join("spin_full"), "full", &[], &[], false);
    assert!(full.named(), "{:?}", full.functions());
    let row = full.module_named("spin_full");
    let names: Vec<&str> = row["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"symtab") && names.contains(&"dwarf"),
        "{row}"
    );
    assert!(row["unnamed"].is_null(), "{row}");

    let link = record_of(&b.dir.join("spin_link"), "link", &[], &[], false);
    assert!(link.named(), "{:?}", link.functions());
    let row = link.module_named("spin_link");
    assert_eq!(
        row["names"],
        serde_json::json!(["debug file by debuglink"]),
        "{row}"
    );

    let bare = baseline();
    assert!(bare.unnamed(), "{:?}", bare.functions());
    let row = bare.module();
    assert_eq!(row["names"], serde_json::json!([]), "{row}");
    let why = row["unnamed"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason: {row}"));
    assert!(
        why.contains("stripped")
            && why.contains(&format!(
                "/usr/lib/debug/.build-id/{}/{}.debug (absent)",
                &b.id[..2],
                &b.id[2..]
            ))
            && why.contains("debuginfod is off"),
        "{why}"
    );
    // The text report says it too.
    assert!(
        bare.stderr.is_empty() || bare.stderr.contains("has no names"),
        "{}",
        bare.stderr
    );
}
