//! The benchmark suite: every sampler on the designed-truth workload at equal rates, in interleaved rounds;
//! the highest rate without loss; start and stop latency; the consumer's hot path in instructions. Writes
//! `BENCHMARKS.md` at the repository root.
//!
//! Run: `cargo bench --bench suite` (about 10 minutes), or `cargo bench --bench suite -- --quick` (about three).
//! `-- --out FILE` writes elsewhere; `-- --loss-only` and `-- --replay-only` run one section and print it.
//! Needs gcc; `perf` for the `perf record` column and `valgrind` for instruction counts (each skipped with a
//! note when missing); `ntprof record` is measured when the `ntprof` binary is built (`cargo build --release
//! -p ntprof`).

mod harness;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{Config, Group, Sampler};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where `libntprofile.so` is: `NTPROFILE_LIB_DIR`, else the `deps/` folder this binary runs from (cargo
/// builds every crate type of the library for a bench), else its parent.
fn lib_dir() -> PathBuf {
    harness::built_lib_dir().unwrap_or_else(|| {
        let exe = std::env::current_exe().expect("current_exe");
        exe.parent().expect("directory").to_path_buf()
    })
}

/// The `ntprof` binary next to this one's profile directory, if it has a `record` command.
fn ntprof() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir.join("ntprof");
    let help = Command::new(&bin)
        .args(["record", "--help"])
        .output()
        .ok()?;
    help.status.success().then_some(bin)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn cmd_out(prog: &str, args: &[&str]) -> String {
    Command::new(prog)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn machine() -> String {
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("?")
        .to_string();
    let mem = read("/proc/meminfo")
        .lines()
        .next()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .unwrap_or("0")
                .parse::<f64>()
                .unwrap_or(0.0)
                / 1048576.0
        })
        .unwrap_or(0.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "- date: {} UTC",
        cmd_out("date", &["-u", "+%Y-%m-%d %H:%M"])
    );
    let _ = writeln!(
        s,
        "- machine: {} CPUs ({model}), {mem:.1} GiB; hardware PMU: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if Path::new("/sys/bus/event_source/devices/cpu").exists() {
            "yes"
        } else {
            "none (software events only)"
        }
    );
    let _ = writeln!(s, "- kernel: {}", cmd_out("uname", &["-srvm"]));
    let _ = writeln!(
        s,
        "- sysctls: kernel.perf_event_max_sample_rate = {}, kernel.perf_cpu_time_max_percent = {}, \
         kernel.perf_event_paranoid = {}, kernel.perf_event_mlock_kb = {}",
        read("/proc/sys/kernel/perf_event_max_sample_rate"),
        read("/proc/sys/kernel/perf_cpu_time_max_percent"),
        read("/proc/sys/kernel/perf_event_paranoid"),
        read("/proc/sys/kernel/perf_event_mlock_kb"),
    );
    let _ = writeln!(
        s,
        "- tools: {}; {}; {}",
        cmd_out("gcc", &["-dumpfullversion"])
            .lines()
            .next()
            .map_or("gcc ?".into(), |v| format!("gcc {v}")),
        cmd_out("perf", &["--version"]),
        cmd_out("valgrind", &["--version"]),
    );
    s
}

fn max_rate() -> u64 {
    read("/proc/sys/kernel/perf_event_max_sample_rate")
        .parse()
        .unwrap_or(100_000)
}

struct Mode {
    label: &'static str,
    rounds: usize,
    iters: u64,
    groups: Vec<Group>,
    loss_seconds: u64,
    latency_threads: Vec<u32>,
    latency_rounds: usize,
    replay_samples: u64,
}

fn mode(quick: bool) -> Mode {
    let max = max_rate();
    let all = vec![100, 250, 1_000, 10_000, max];
    if quick {
        Mode {
            label: "quick",
            rounds: 3,
            iters: 300_000_000,
            groups: vec![
                Group {
                    threads: 1,
                    rates: vec![100, 10_000, max],
                },
                Group {
                    threads: 8,
                    rates: vec![10_000],
                },
            ],
            loss_seconds: 3,
            latency_threads: vec![2, 100, 200, 1000],
            latency_rounds: 2,
            replay_samples: 20_000,
        }
    } else {
        Mode {
            label: "full",
            rounds: 5,
            iters: 400_000_000,
            groups: vec![
                Group {
                    threads: 1,
                    rates: all,
                },
                Group {
                    threads: 2,
                    rates: vec![10_000],
                },
                Group {
                    threads: 8,
                    rates: vec![100, 10_000],
                },
            ],
            loss_seconds: 10,
            latency_threads: vec![2, 100, 200, 1000],
            latency_rounds: 5,
            replay_samples: 50_000,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--replay-child") {
        // Run under callgrind by the replay section: IPS_FILE PROFILES OVERLAPPING REPEATS.
        harness::replay_child(
            Path::new(&args[2]),
            args[3].parse().expect("profiles"),
            args[4] == "true",
            args[5].parse().expect("repeats"),
        );
        return;
    }
    // `cargo test --benches` runs bench binaries without `--bench`: only measure under `cargo bench`.
    if !args.iter().any(|a| a == "--bench") {
        println!("suite: run with `cargo bench --bench suite` (or `-- --quick`)");
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("BENCHMARKS.md"));
    let m = mode(quick);
    let ntprof = ntprof();
    let cfg = Config {
        rounds: m.rounds,
        iters: m.iters,
        groups: m.groups.clone(),
        samplers: vec![
            Sampler::Ntprofile,
            Sampler::NtprofileTask,
            Sampler::NtprofRecord,
            Sampler::Perf,
            Sampler::Timer,
            Sampler::Profil,
            Sampler::Sprofil,
        ],
        lib_dir: lib_dir(),
        repo: repo(),
        ntprof,
        label: m.label.into(),
    };
    if args.iter().any(|a| a == "--loss-only") {
        match harness::loss_at_max(&cfg, m.loss_seconds) {
            Ok(text) => println!("{text}"),
            Err(e) => eprintln!("suite: {e}"),
        }
        return;
    }
    if args.iter().any(|a| a == "--replay-only") {
        println!("{}", harness::replay_section(m.replay_samples));
        return;
    }
    let header = machine();
    eprintln!("suite ({}): comparison …", m.label);
    let res = match harness::run(&cfg, true) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("suite: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("suite: highest rate without loss …");
    let loss = harness::loss_at_max(&cfg, m.loss_seconds)
        .unwrap_or_else(|e| format!("not measured: {e}\n"));
    eprintln!("suite: start and stop latency …");
    let lat = harness::latency(&cfg, &m.latency_threads, m.latency_rounds)
        .unwrap_or_else(|e| format!("not measured: {e}\n"));
    eprintln!("suite: consumer replay …");
    let replay = harness::replay_section(m.replay_samples);
    let text = harness::document(&cfg, &res, &header, &loss, &lat, &replay);
    // The section the recorder's benchmark wrote between its markers survives the rewrite.
    let text =
        harness::keep_recorder_section(&std::fs::read_to_string(&out).unwrap_or_default(), text);
    if let Err(e) = std::fs::write(&out, &text) {
        eprintln!("suite: cannot write {out:?}: {e}");
        std::process::exit(1);
    }
    println!("{text}");
    eprintln!("suite: wrote {} in {:.0} s", out.display(), res.seconds);
}
