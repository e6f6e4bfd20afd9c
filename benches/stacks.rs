//! Call stacks and symbolization, ntprof side by side with perf in one run, written into BENCHMARKS.md between
//! `<!-- stacks:begin -->` and `<!-- stacks:end -->` (next to the recorder's section, which `benches/recorder`
//! writes):
//!
//! - the designed call tree (`ntprof/tests/stacks/calltree.c`, a fixed amount of work) unprofiled, under
//!   `ntprof record -g` and `perf record -g` (frame pointers, the program built with them), and under
//!   `ntprof record --call-graph dwarf` and `perf record --call-graph dwarf` (8 KiB stack copies, the program built
//!   without frame pointers), all at 1 ms of CPU time, user space: the CPU time added to the profiled thread per
//!   sample, the recorder's CPU (ntprof: recording, unwinding and its report; perf: `perf record`), the report
//!   (ntprof: its symbolization, inside the recorder's CPU; perf: `perf report --stdio`), and the whole job;
//! - the symbolization of `node` (99 MB): ntprof's `symbolize_ms` against the time of `perf report --stdio` on a
//!   profile of the same program at the same rate.
//!
//! Needs gcc, perf and node. `cargo bench --bench stacks` (builds ntprof in release first). Repetitions are
//! interleaved and each figure is the median.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};

const REPS: usize = 5;
const ROUNDS: &str = "1000";
/// 1 ms of CPU time: ntprof's interval in 100 ns units, perf's period in ns.
const NTPROF_INTERVAL: &str = "10000";
const PERF_PERIOD: &str = "1000000";
const NODE_SCRIPT: &str = "let x=0; for(let i=0;i<3e8;i++) x+=i%7; console.log(x)";

fn children_cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let t =
        |tv: nix::sys::time::TimeVal| Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000);
    t(u.user_time()) + t(u.system_time())
}

/// Run `cmd`; its (and its descendants') CPU time, its wall time, its stderr.
fn measure(cmd: &mut Command) -> (Duration, Duration, String) {
    let before = children_cpu();
    let t0 = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    let wall = t0.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        children_cpu() - before,
        wall,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The CPU seconds the workload reports for itself.
fn workload_cpu(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("calltree: done"))
        .expect(stderr);
    let s = line.rsplit(" in ").next().unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

fn json_number(path: &Path, key: &str) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let at = text
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("{key} in {}", path.display()));
    let rest = &text[at + key.len() + 4..];
    rest[..rest.find([',', '\n']).unwrap()]
        .trim()
        .parse()
        .unwrap()
}

fn ntprof_samples(json: &Path) -> f64 {
    json_number(json, "counted") + json_number(json, "outside")
}

fn perf_samples(data: &Path) -> f64 {
    let out = Command::new("perf")
        .args([
            "report", "--stdio", "--sort", "comm", "-g", "none", "-n", "-i",
        ])
        .arg(data)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        // `children% self% samples comm`: the first field that is a plain number.
        .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
        .map(|n| n as f64)
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[derive(Default, Clone)]
struct Figures {
    workload: Vec<f64>,
    samples: Vec<f64>,
    recorder: Vec<f64>,
    report_cpu: Vec<f64>,
    report_wall: Vec<f64>,
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(&cargo)
        .args(["build", "--release", "-p", "ntprof"])
        .current_dir(root)
        .status()
        .unwrap();
    assert!(st.success(), "building ntprof");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let ntprof = target.join("release/ntprof");
    let dir = target.join("bench-stacks");
    std::fs::create_dir_all(&dir).unwrap();
    let src = root.join("ntprof/tests/stacks/calltree.c");
    let build = |name: &str, flags: &[&str]| {
        let exe = dir.join(name);
        let st = Command::new("gcc")
            .args(["-O2", "-g"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        exe
    };
    let fp = build(
        "calltree_fp",
        &["-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"],
    );
    let nofp = build("calltree_nofp", &["-fomit-frame-pointer"]);

    // name, program, profiler (None: unprofiled), stack options
    let configs: [(&str, &Path, Option<&str>, &[&str]); 6] = [
        ("unprofiled (fp build)", &fp, None, &[]),
        ("unprofiled (no-fp build)", &nofp, None, &[]),
        ("ntprof record -g", &fp, Some("ntprof"), &["-g"]),
        ("perf record -g", &fp, Some("perf"), &["--call-graph", "fp"]),
        (
            "ntprof record --call-graph dwarf",
            &nofp,
            Some("ntprof"),
            &["--call-graph", "dwarf"],
        ),
        (
            "perf record --call-graph dwarf",
            &nofp,
            Some("perf"),
            &["--call-graph", "dwarf,8192"],
        ),
    ];
    let mut figures = vec![Figures::default(); configs.len()];
    for rep in 0..REPS {
        for (i, (name, prog, profiler, opts)) in configs.iter().enumerate() {
            eprintln!("rep {rep}: {name}");
            let f = &mut figures[i];
            match profiler {
                None => {
                    let (_, _, err) = measure(Command::new(prog).args(["0", ROUNDS]));
                    f.workload.push(workload_cpu(&err));
                }
                Some("ntprof") => {
                    let json = dir.join("run.json");
                    let (cpu, _, err) = measure(
                        Command::new(&ntprof)
                            .args(["record", "-q", "--interval", NTPROF_INTERVAL])
                            .args(*opts)
                            .arg("-o")
                            .arg(&json)
                            .arg("--")
                            .arg(prog)
                            .args(["0", ROUNDS]),
                    );
                    let w = workload_cpu(&err);
                    f.workload.push(w);
                    f.samples.push(ntprof_samples(&json));
                    f.recorder.push(cpu.as_secs_f64() - w);
                    let sym = json_number(&json, "symbolize_ms") / 1000.0;
                    f.report_cpu.push(sym);
                    f.report_wall.push(sym);
                }
                Some(_) => {
                    let data = dir.join("perf.data");
                    let (cpu, _, err) = measure(
                        Command::new("perf")
                            .args(["record", "-q", "-e", "cpu-clock:u", "-c", PERF_PERIOD])
                            .args(*opts)
                            .arg("-o")
                            .arg(&data)
                            .arg("--")
                            .arg(prog)
                            .args(["0", ROUNDS]),
                    );
                    let w = workload_cpu(&err);
                    f.workload.push(w);
                    f.recorder.push(cpu.as_secs_f64() - w);
                    let (rcpu, rwall, _) = measure(
                        Command::new("perf")
                            .args(["report", "--stdio", "-i"])
                            .arg(&data),
                    );
                    f.report_cpu.push(rcpu.as_secs_f64());
                    f.report_wall.push(rwall.as_secs_f64());
                    f.samples.push(perf_samples(&data));
                }
            }
        }
    }

    // node: symbolization against perf report on the same program and rate.
    let mut node_ntprof = Vec::new();
    let mut node_perf = Vec::new();
    let mut node_perf_cpu = Vec::new();
    for rep in 0..3 {
        eprintln!("rep {rep}: node");
        let json = dir.join("node.json");
        measure(
            Command::new(&ntprof)
                .args(["record", "-q", "--interval", NTPROF_INTERVAL, "-o"])
                .arg(&json)
                .args(["--", "node", "-e", NODE_SCRIPT]),
        );
        node_ntprof.push(json_number(&json, "symbolize_ms") / 1000.0);
        let data = dir.join("node.perf.data");
        measure(
            Command::new("perf")
                .args(["record", "-q", "-e", "cpu-clock:u", "-c", PERF_PERIOD, "-o"])
                .arg(&data)
                .args(["--", "node", "-e", NODE_SCRIPT]),
        );
        let (cpu, wall, _) = measure(
            Command::new("perf")
                .args(["report", "--stdio", "-i"])
                .arg(&data),
        );
        node_perf.push(wall.as_secs_f64());
        node_perf_cpu.push(cpu.as_secs_f64());
    }

    let m = |v: &Vec<f64>| if v.is_empty() { 0.0 } else { median(v.clone()) };
    let base_fp = m(&figures[0].workload);
    let base_nofp = m(&figures[1].workload);
    let mut out = String::new();
    out.push_str(&format!(
        "Call stacks: the designed call tree (`ntprof/tests/stacks/calltree.c 0 {ROUNDS}`, a fixed amount of work), \
         1 ms of CPU time, user space, medians of {REPS} interleaved repetitions (`cargo bench --bench stacks`). \
         *Per sample* is the CPU time the profiler added to the profiled thread (its CPU time profiled minus \
         unprofiled, over the samples); the *recorder* is the profiler's own CPU time (ntprof: sampling, unwinding, \
         symbolizing and writing its report; perf: `perf record`); the *report* is ntprof's symbolization (wall time, \
         already inside its recorder CPU) and `perf report --stdio` (CPU time); the *whole job* is the recorder plus \
         the report for perf and the recorder alone for ntprof. The workload's CPU time varies by a few percent from \
         run to run on this shared machine (the unprofiled rows show the range), so per-sample costs of a few \
         microseconds are within that spread; ntprof and perf open the same perf_event sampling (a callchain, or \
         the user registers and an 8 KiB stack copy, per sample), so the kernel's work per sample is the same for \
         both.\n\n"
    ));
    out.push_str("| profiler | samples | workload CPU s | per sample on the thread | recorder CPU s | report s | whole job CPU s |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for (i, (name, _, profiler, _)) in configs.iter().enumerate() {
        let f = &figures[i];
        let w = m(&f.workload);
        if profiler.is_none() {
            let (lo, hi) = f
                .workload
                .iter()
                .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
            out.push_str(&format!(
                "| {name} | - | {w:.3} (runs {lo:.3} to {hi:.3}) | - | - | - | - |\n"
            ));
            continue;
        }
        let base = if i == 2 || i == 3 { base_fp } else { base_nofp };
        let n = m(&f.samples);
        let per = (w - base) / n.max(1.0) * 1e6;
        let rec = m(&f.recorder);
        let rep = m(&f.report_cpu);
        let whole = if *profiler == Some("ntprof") {
            rec
        } else {
            rec + rep
        };
        out.push_str(&format!(
            "| {name} | {n:.0} | {w:.3} | {per:.1} µs | {rec:.3} | {rep:.3} | {whole:.3} |\n"
        ));
    }
    let whole = |i: usize| {
        let f = &figures[i];
        if i % 2 == 0 {
            m(&f.recorder)
        } else {
            m(&f.recorder) + m(&f.report_cpu)
        }
    };
    out.push_str(&format!(
        "\nWhole job, ntprof / perf: frame pointers {:.2}, DWARF {:.2} (perf writes every 8 KiB stack copy to \
         perf.data and unwinds it again in `perf report`; ntprof unwinds each copy once, as it is read, and keeps \
         only the interned stack).\n",
        whole(2) / whole(3),
        whole(4) / whole(5)
    ));
    out.push_str(&format!(
        "\nSymbolization of `node` (99 MB executable, {} C++ symbols and more): ntprof's `symbolize_ms` {:.3} s \
         against `perf report --stdio` {:.3} s wall ({:.3} s CPU) on a profile of the same script at the same rate \
         (medians of 3): ratio {:.2}.\n",
        "hundreds of thousands of",
        m(&node_ntprof),
        m(&node_perf),
        m(&node_perf_cpu),
        m(&node_ntprof) / m(&node_perf)
    ));
    println!("{out}");

    let path = root.join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let (begin, end) = ("<!-- stacks:begin -->", "<!-- stacks:end -->");
    let section =
        format!("{begin}\n## ntprof: call stacks and symbolization against perf\n\n{out}{end}");
    let new = match (text.find(begin), text.find(end)) {
        (Some(a), Some(b)) if a < b => format!("{}{section}{}", &text[..a], &text[b + end.len()..]),
        _ => format!("{}\n\n{section}\n", text.trim_end()),
    };
    std::fs::write(&path, new).unwrap();
    eprintln!("wrote {}", path.display());
}
