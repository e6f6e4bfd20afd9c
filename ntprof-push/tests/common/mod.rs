//! What the real-server tests share: the servers `.ci/backends` builds, free ports, the designed workload
//! recorded by the release `ntprof`, and the share check.

#![allow(dead_code)]

pub mod fake;

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The binary of a backend built by `.ci/backends` (which says where it keeps it). A missing one is built
/// first, by that script (from the Go module proxy: tens of minutes the first time on 2 processors; the script
/// locks, so test binaries running at once build it once); one that cannot be built fails the test with the
/// reason and the command that builds it.
pub fn backend(name: &str) -> PathBuf {
    let script = root().join(".ci/backends");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--path", name])
        .output()
        .expect("run .ci/backends --path");
    assert!(
        out.status.success(),
        ".ci/backends --path {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    if !path.is_file() {
        eprintln!(
            "the {name} server is not built yet: building it with {} {name}",
            script.display()
        );
        let built = Command::new("bash").arg(&script).arg(name).status();
        eprintln!("{} {name}: {built:?}", script.display());
    }
    if !path.is_file() {
        let blocked = path.with_file_name("BLOCKED");
        let why = std::fs::read_to_string(&blocked)
            .unwrap_or_else(|_| "it was not built on this machine".into());
        panic!(
            "the {name} server is missing ({}): {}\nbuild it with: {} {name}",
            path.display(),
            why.trim(),
            script.display()
        );
    }
    path
}

/// A port nobody listens on now, below the kernel's ephemeral range, and never the same twice in a process.
///
/// A port the kernel picks for `bind(0)` comes from the ephemeral range, which also supplies the local port
/// of every outgoing connection: between this call and the server's own bind, a client connection (the
/// server's own, another test's) could take it. A loaded run saw exactly that (Pyroscope's memberlist port
/// "bind: address already in use"). Below the range only another listener can take it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Ports 10000 up to the range's start, walked from a point that depends on the process, so that two test
    // processes rarely walk the same ports. Relaxed: the counter only has to hand out distinct values.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (first, span) = if low > 11000 {
        (10000, low - 10000)
    } else {
        (1024, low.saturating_sub(1024).max(1))
    };
    let offset = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (first + (offset + n * 97) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every one of them taken: the kernel's choice, as before.
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scratch directory of this test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ntprof-push-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A server process, killed when dropped; its output goes to `log`.
pub struct Server {
    pub child: Child,
    pub log: PathBuf,
}

impl Server {
    pub fn start(cmd: &mut Command, log: PathBuf) -> Server {
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Server { child, log }
    }

    /// Waits until `port` takes connections (the server is up), failing with its log if it exits or
    /// takes longer than `limit`.
    pub fn wait_port(&mut self, port: u16, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the server exited ({status}) before listening:\n{}",
                    self.log_text()
                );
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < until,
                "the server did not listen on {port} within {limit:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The designed workload's profile: `tests/workload.c` (push_three and push_one, CPU work 3:1) built with gcc
/// and recorded by `target/release/ntprof record --pprof`. Returns the gzipped pprof and the window.
pub fn record_workload(dir: &Path) -> (Vec<u8>, SystemTime, SystemTime) {
    let ntprof = root().join("target/release/ntprof");
    assert!(
        ntprof.is_file(),
        "{} is missing: build it with cargo build --release -p ntprof",
        ntprof.display()
    );
    let exe = dir.join("workload");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-fno-inline", "-o"])
        .arg(&exe)
        .arg(root().join("ntprof-push/tests/workload.c"))
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
    let pprof = dir.join("workload.pb.gz");
    let start = SystemTime::now();
    let out = Command::new(&ntprof)
        .arg("record")
        .arg("--pprof")
        .arg(&pprof)
        .arg("--")
        .arg(&exe)
        .arg("250")
        .output()
        .unwrap();
    let end = SystemTime::now();
    assert!(
        out.status.success(),
        "ntprof record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (std::fs::read(&pprof).unwrap(), start, end)
}

/// Samples per function of the leaf frames of a pprof profile (its first sample type, which counts samples).
pub fn pprof_self_counts(bytes: &[u8]) -> BTreeMap<String, i64> {
    let (kind, counts, _) = pprof_self_values(bytes);
    assert_eq!(
        kind.1, "count",
        "the first sample type counts samples: {kind:?}"
    );
    counts
}

/// The first sample type of a pprof profile (type, unit), its values per function of the leaf frames, and the
/// profile's period.
pub fn pprof_self_values(bytes: &[u8]) -> ((String, String), BTreeMap<String, i64>, i64) {
    let p = ntprof_push::pprof::decode(bytes).unwrap();
    let st = |i: i64| p.string_table[i as usize].clone();
    let kind = (st(p.sample_type[0].r#type), st(p.sample_type[0].unit));
    let mut out = BTreeMap::new();
    for s in &p.sample {
        let loc = p
            .location
            .iter()
            .find(|l| l.id == s.location_id[0])
            .unwrap();
        let f = p
            .function
            .iter()
            .find(|f| f.id == loc.line[0].function_id)
            .unwrap();
        *out.entry(st(f.name)).or_insert(0) += s.value[0];
    }
    (kind, out, p.period)
}

/// Checks the designed shares in per-function sample counts: push_three / (push_three + push_one) is 3/4
/// within five standard deviations of a binomial share of that many samples (plus 2 points for the loop's
/// entry and exit), and the two make nearly every sample.
pub fn check_shares(counts: &BTreeMap<String, i64>, what: &str) -> f64 {
    let three = *counts.get("push_three").unwrap_or(&0) as f64;
    let one = *counts.get("push_one").unwrap_or(&0) as f64;
    let total: i64 = counts.values().sum();
    let n = three + one;
    assert!(
        n >= 200.0,
        "{what}: only {n} samples of the designed functions: {counts:?}"
    );
    assert!(
        n >= 0.95 * total as f64,
        "{what}: the designed functions hold {n} of {total} samples: {counts:?}"
    );
    let share = three / n;
    let margin = 5.0 * (0.75f64 * 0.25 / n).sqrt() + 0.02;
    assert!(
        (share - 0.75).abs() <= margin,
        "{what}: push_three's share {share:.3} is not 0.75 +- {margin:.3}: {counts:?}"
    );
    share
}

/// Start Pyroscope's server `bin` on free 127.0.0.1 ports with its data in `dir` (every ring member at
/// 127.0.0.1, where its gRPC server listens: the default is the first network interface's address); returns it
/// and its HTTP port once it is ready (its ring has an ingester).
pub fn start_pyroscope(bin: &Path, dir: &Path) -> (Server, u16) {
    // A port taken by another listener between the choice and Pyroscope's bind fails one of its modules and
    // leaves the server never ready: started again on other ports (up to 3 times).
    for attempt in 1..=3 {
        match try_start_pyroscope(bin, dir) {
            Ok(started) => return started,
            Err(log) => {
                println!("Pyroscope could not bind a port (attempt {attempt} of 3):\n{log}")
            }
        }
    }
    panic!("Pyroscope could not bind its ports 3 times (its logs are above)")
}

/// [`start_pyroscope`] once: `Err` with its log when a port it was given was already in use.
fn try_start_pyroscope(bin: &Path, dir: &Path) -> Result<(Server, u16), String> {
    let (http, grpc, memberlist) = (free_port(), free_port(), free_port());
    let mut server = Server::start(
        Command::new(bin)
            .current_dir(dir)
            .arg("-server.http-listen-address=127.0.0.1")
            .arg(format!("-server.http-listen-port={http}"))
            .arg("-server.grpc-listen-address=127.0.0.1")
            .arg(format!("-server.grpc-listen-port={grpc}"))
            .arg("-memberlist.bind-addr=127.0.0.1")
            .arg(format!("-memberlist.bind-port={memberlist}"))
            .arg("-storage.backend=filesystem")
            .arg(format!(
                "-storage.filesystem.dir={}",
                dir.join("blocks").display()
            ))
            .arg(format!(
                "-pyroscopedb.data-path={}",
                dir.join("data").display()
            ))
            .arg("-self-profiling.disable-push=true")
            .args([
                "-ingester.lifecycler.addr=127.0.0.1",
                "-distributor.ring.instance-addr=127.0.0.1",
                "-compactor.ring.instance-addr=127.0.0.1",
                "-store-gateway.sharding-ring.instance-addr=127.0.0.1",
                "-query-frontend.instance-addr=127.0.0.1",
                "-query-scheduler.ring.instance-addr=127.0.0.1",
                "-overrides-exporter.ring.instance-addr=127.0.0.1",
            ]),
        dir.join("pyroscope.log"),
    );
    server.wait_port(http, Duration::from_secs(120));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let until = Instant::now() + Duration::from_secs(120);
    while !agent
        .get(&format!("http://127.0.0.1:{http}/ready"))
        .call()
        .is_ok_and(|r| r.status() == 200)
    {
        let log = server.log_text();
        if log.contains("address already in use") {
            return Err(log);
        }
        assert!(
            Instant::now() < until,
            "Pyroscope not ready within 120 s:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok((server, http))
}
