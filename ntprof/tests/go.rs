//! Go programs as production builds them, end to end: `tests/go/hot.go` built stripped (`-ldflags='-s -w'`:
//! no `.symtab`, no DWARF), as an executable and as a PIE, is recorded with frame-pointer stacks (`-g`):
//!
//! - every sample in the program is named from its `.gopclntab`, `main.hot` has the designed share, and no
//!   address is left `module+0x…`;
//! - at every sampled address, the function and the innermost file and line equal what `go tool addr2line`
//!   prints for that address on the unstripped twin (the same code at the same addresses);
//! - the stacks go through Go code by its frame pointers: `main.main` calls `main.hot` in the JSON stacks, the
//!   folded stacks, the flame graph and the pprof profile (read by Google's pprof).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{function_samples, run_ok, source, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
const LIMIT: Duration = Duration::from_secs(300);

/// `target/tools/go`: the Go caches and the built programs, kept between runs.
fn tools() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("tools/go")
}

fn go_env(cmd: &mut Command) -> &mut Command {
    let t = tools();
    cmd.env("GOENV", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", "local")
        .env("GOPATH", t.join("path"))
        .env("GOMODCACHE", t.join("mod"))
        .env("GOCACHE", t.join("cache"))
}

/// `tests/go/hot.go` built with `flags` by this machine's Go, kept under `target/tools/go/programs`; `None`
/// (said) without Go outside CI, a failure in CI.
fn build(flags: &[&str]) -> Option<PathBuf> {
    let go = common::tool(
        "go",
        common::on_path("go"),
        "apt-get install golang-go, or Go from its release archive",
    )?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/hot.go");
    let text = std::fs::read(&src).unwrap();
    let hash = text
        .iter()
        .fold(0u32, |h, &b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let tag: String = flags
        .concat()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let dir = tools().join("programs");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("gohot-{tag}-{hash:08x}"));
    if !out.exists() {
        // Tests in this file run in parallel and may build the same program at once: each build writes its
        // own name, and the atomic rename keeps one complete build.
        static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Relaxed: the counter only makes names unique within this process.
        let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let part = out.with_extension(format!("part-{}-{n}", std::process::id()));
        run_ok(
            go_env(
                Command::new(&go)
                    .arg("build")
                    .args(flags)
                    .arg("-o")
                    .arg(&part)
                    .arg(&src),
            ),
            LIMIT,
        );
        std::fs::rename(&part, &out).unwrap();
    }
    Some(out)
}

/// `go tool addr2line`'s function and `file:line` for each of `addrs` in `binary`.
fn addr2line(binary: &Path, addrs: &[u64]) -> Vec<(String, String)> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let dir = common::build_dir("go");
    let file = dir.join("addresses");
    std::fs::write(&file, input).unwrap();
    let out = run_ok(
        go_env(Command::new("sh").arg("-c").arg(format!(
            "go tool addr2line {} < {}",
            binary.display(),
            file.display()
        )))
        .stdin(Stdio::null()),
        LIMIT,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * addrs.len(), "{text}");
    // A marker without a line table is `:-1`: no file, no line.
    lines
        .chunks(2)
        .map(|p| {
            let place = if p[1] == ":-1" { "?:0" } else { p[1] };
            (p[0].to_string(), place.to_string())
        })
        .collect()
}

/// Record `program` (2500 calls of main.hot: about 0.5 s of CPU) with stacks into `dir`: the JSON report.
fn record(program: &Path, dir: &Path) -> Value {
    run_ok(
        Command::new(NTPROF)
            .args(["record", "-q", "-g", "-F", "2000", "--json"])
            .arg(dir.join("p.json"))
            .arg("--pprof")
            .arg(dir.join("p.pb.gz"))
            .arg("--flamegraph")
            .arg(dir.join("p.svg"))
            .arg("-o")
            .arg(dir.join("p.folded"))
            .arg("--")
            .arg(program)
            .arg("2500"),
        LIMIT,
    );
    serde_json::from_slice(&std::fs::read(dir.join("p.json")).unwrap()).unwrap()
}

#[test]
fn stripped_go_is_named_from_its_pclntab_as_go_tool_addr2line_names_it() {
    for pie in [false, true] {
        let mode: &[&str] = if pie { &["-buildmode=pie"] } else { &[] };
        let Some(full) = build(mode) else { return };
        let stripped = build(&[mode, &["-ldflags=-s -w"]].concat()).unwrap();
        let dir = common::build_dir(if pie { "go-pie" } else { "go-exe" });
        let report = record(&stripped, &dir);
        let timer = source(&report, "Timer");
        let module = stripped.file_name().unwrap().to_str().unwrap();
        let in_module: Vec<&Value> = timer["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["module"] == module)
            .collect();
        let total: u64 = in_module.iter().map(|f| u(&f["samples"])).sum();
        // The program does nothing but main.hot after the runtime's start (a few milliseconds of CPU of about
        // 500): at 2 kHz, ~1000 samples of its CPU time (200 would be 0.1 s, five times less work than it
        // does on any machine that runs this test); a share of 50 % is far below main.hot's whatever the
        // noise (the sigma of a share near 1 with 1000 samples is under 1 %).
        assert!(total > 200, "pie={pie}: {total} samples in {module}");
        let hot = function_samples(timer, "main.hot");
        assert!(
            hot * 2 > total,
            "pie={pie}: main.hot has {hot} of {total} samples: {in_module:?}"
        );
        let unnamed: Vec<&&Value> = in_module
            .iter()
            .filter(|f| f["name"].as_str().unwrap().contains("+0x"))
            .collect();
        assert!(unnamed.is_empty(), "pie={pie}: unnamed {unnamed:?}");

        // Address by address against go tool addr2line on the unstripped twin.
        let buckets: Vec<&Value> = timer["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["module"] == module)
            .collect();
        let addrs: Vec<u64> = buckets.iter().map(|b| u(&b["offset"])).collect();
        let expected = addr2line(&full, &addrs);
        let mut wrong = Vec::new();
        for (b, (name, place)) in buckets.iter().zip(&expected) {
            let frames = b["frames"].as_array().unwrap();
            let outer = frames
                .last()
                .map_or("?", |f| f["function"].as_str().unwrap());
            let inner = &frames[0];
            let got = format!(
                "{}:{}",
                inner["file"].as_str().unwrap_or("?"),
                inner["line"].as_u64().unwrap_or(0)
            );
            if (outer, got.as_str()) != (name.as_str(), place.as_str()) {
                wrong.push(format!(
                    "{:#x}: {outer} {got} != {name} {place}",
                    u(&b["offset"])
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "pie={pie}: {} of {} addresses differ: {wrong:?}",
            wrong.len(),
            addrs.len()
        );
        // The inlined call is a frame of its own, inside main.hot.
        let inlined = buckets.iter().any(|b| {
            let f = b["frames"].as_array().unwrap();
            f.len() >= 2
                && f[0]["function"] == "main.mix"
                && f[f.len() - 1]["function"] == "main.hot"
        });
        assert!(
            inlined,
            "pie={pie}: no sample shows main.mix inlined into main.hot"
        );

        // Frame-pointer stacks through Go code, in every format.
        let folded = std::fs::read_to_string(dir.join("p.folded")).unwrap();
        assert!(
            folded.contains("main.main;main.hot"),
            "pie={pie}: folded stacks: {}",
            &folded[..folded.len().min(2000)]
        );
        let svg = std::fs::read_to_string(dir.join("p.svg")).unwrap();
        assert!(
            svg.contains("main.hot") && svg.contains("main.main"),
            "pie={pie}"
        );
        if let Some(pprof) = common::pprof() {
            let out = run_ok(
                Command::new(pprof)
                    .args(["-peek", "^main\\.hot$"])
                    .arg(dir.join("p.pb.gz")),
                LIMIT,
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("main.main") && text.contains("main.hot"),
                "pie={pie}: pprof -peek main.hot: {text}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
