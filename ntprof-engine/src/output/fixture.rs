//! A synthetic report with known numbers, for tests of renderers: the engine's writers, the command's text
//! report, or your own.
//!
//! Timer at 1 ms (10000 x 100 ns): 1000 samples, of which `hot_a` in the executable 600 (one bucket of it in the
//! inlined helper `mix`), `hot_b` in `libhot.so` 300, and 100 outside every module. One sample was lost.

use crate::report::{
    BucketReport, CommandReport, Frame, FunctionReport, LineReport, LocationReport, ModuleReport,
    ProcessReport, ProcessSamples, Report, RunInfo, SCHEMA_VERSION, SourceReport, StackReport,
    Stats,
};

fn frame(function: &str, file: &str, line: u32, inlined: bool) -> Frame {
    Frame {
        function: function.into(),
        file: Some(file.into()),
        line: Some(line),
        inlined,
    }
}

fn bucket(module: &str, address: u64, bias: u64, samples: u64, frames: Vec<Frame>) -> BucketReport {
    BucketReport {
        process: 0,
        pid: 4242,
        command: "demo".into(),
        module: module.into(),
        address,
        offset: address - bias,
        size: 16,
        samples,
        frames,
    }
}

/// The report.
pub fn report() -> Report {
    let exe_bias = 0x5555_0000_0000;
    let lib_bias = 0x7f00_0000_0000;
    let buckets = vec![
        bucket(
            "demo",
            exe_bias + 0x1130,
            exe_bias,
            350,
            vec![frame("hot_a", "/src/demo.c", 12, false)],
        ),
        bucket(
            "demo",
            exe_bias + 0x1140,
            exe_bias,
            250,
            vec![
                frame("mix", "/src/mix.h", 3, true),
                frame("hot_a", "/src/demo.c", 13, false),
            ],
        ),
        bucket(
            "libhot.so",
            lib_bias + 0x1100,
            lib_bias,
            300,
            vec![frame("hot_b", "/src/hot, \"b\".c", 7, false)],
        ),
    ];
    let module = |name: &str, path: &str, bias: u64, samples: u64| ModuleReport {
        name: name.into(),
        path: path.into(),
        build_id: Some(format!("{:x}", 0x0123_abcd_u64 + samples)),
        start: bias + 0x1000,
        end: bias + 0x2000,
        file_offset: 0x1000,
        bias,
        samples,
        share: samples as f64 / 1000.0,
        profiled_from_ms: 0.0,
        names: vec!["symtab".into(), "dwarf".into()],
        unnamed: None,
    };
    let function = |module: &str, name: &str, address: u64, file: &str, line: u32, samples: u64| {
        FunctionReport {
            command: "demo".into(),
            module: module.into(),
            name: name.into(),
            address,
            size: 64,
            file: Some(file.into()),
            line: Some(line),
            samples,
            share: samples as f64 / 1000.0,
        }
    };
    let line = |module: &str, function: &str, file: &str, line: u32, samples: u64| LineReport {
        command: "demo".into(),
        module: module.into(),
        function: function.into(),
        file: file.into(),
        line,
        samples,
        share: samples as f64 / 1000.0,
        text: None,
    };
    Report {
        schema_version: SCHEMA_VERSION,
        tool: "ntprof 0.1.0".into(),
        run: RunInfo {
            mode: "record".into(),
            command: vec!["./demo".into(), "--seconds".into(), "2".into()],
            pid: Some(4242),
            duration_s: 2.0,
            started_at: "2026-11-23T13:46:41Z".into(),
            exit_status: Some(0),
            ended_by: "exited".into(),
            cpus: None,
            bucket_log2: 4,
            module_poll_ms: 0.0,
            executable: Some("/opt/demo/bin/demo".into()),
            follow_children: true,
            symbolize_ms: 1.5,
            call_graph: None,
            recorder_cpu_ms: 12.5,
            recorder_rounds: 0,
            events: None,
            notes: vec!["every mapping was reported by the kernel as it was made".into()],
            expected: vec![],
            explanations: vec![],
            jit: vec![crate::report::JitReport {
                pid: 4242,
                kind: "jitdump".into(),
                path: "/opt/demo/jit-4242.dump".into(),
                records: 12,
                reused: 1,
                samples: 0,
                named_by_time: 0,
                mixed: 0,
                problem: None,
            }],
            window: None,
            cgroup: None,
        },
        processes: vec![ProcessReport {
            id: 0,
            pid: 4242,
            ns_pid: None,
            ppid: 4000,
            parent: None,
            command: "demo".into(),
            commands: vec!["demo".into()],
            command_line: vec!["./demo".into(), "--seconds".into(), "2".into()],
            started_ms: 0.0,
            ended_ms: Some(2000.0),
            ended: "exit status 0".into(),
            cgroup: None,
            container_id: None,
        }],
        sources: vec![SourceReport {
            name: "Timer".into(),
            value: 0,
            interval: 10_000,
            interval_unit: "100ns".into(),
            sample_value: 1_000_000,
            sample_unit: "nanoseconds".into(),
            achieved_rate_hz: 500.0,
            jitter_percent: 0,
            stats: Stats {
                counted: 900,
                outside: 100,
                lost: 1,
                throttled: 0,
            },
            commands: vec![CommandReport {
                command: "demo".into(),
                processes: 1,
                samples: 1000,
                share: 1.0,
            }],
            processes: vec![ProcessSamples {
                process: 0,
                pid: 4242,
                counted: 900,
                outside: 100,
                share: 1.0,
            }],
            modules: vec![
                module("demo", "/opt/demo/bin/demo", exe_bias, 600),
                module("libhot.so", "/opt/demo/lib/libhot.so", lib_bias, 300),
            ],
            functions: vec![
                function("demo", "hot_a", exe_bias + 0x1120, "/src/demo.c", 10, 600),
                function(
                    "libhot.so",
                    "hot_b",
                    lib_bias + 0x1100,
                    "/src/hot, \"b\".c",
                    5,
                    300,
                ),
            ],
            lines: vec![
                line("demo", "hot_a", "/src/demo.c", 12, 350),
                line("libhot.so", "hot_b", "/src/hot, \"b\".c", 7, 300),
                line("demo", "mix", "/src/mix.h", 3, 250),
            ],
            buckets,
            stacks: vec![],
            locations: vec![],
        }],
        off_cpu: None,
    }
}

/// The same run recorded with call stacks: `hot_a` (with `mix` inlined) called from `run_a` (400) and `run_b`
/// (200), `hot_b` from `run_b` (300, one stack of them truncated: 20), all under `main`.
pub fn report_with_stacks() -> Report {
    let mut r = report();
    r.run.call_graph = Some("dwarf,8192".into());
    let loc = |module: &str, address: u64, frames: &[(&str, bool)]| LocationReport {
        module: module.into(),
        address,
        offset: address & 0xffff,
        function: frames.last().unwrap().0.into(),
        frames: frames
            .iter()
            .map(|&(f, inlined)| Frame {
                function: f.into(),
                file: None,
                line: None,
                inlined,
            })
            .collect(),
    };
    let s = &mut r.sources[0];
    s.locations = vec![
        loc("demo", 0x5555_0000_1130, &[("mix", true), ("hot_a", false)]),
        loc("demo", 0x5555_0000_1210, &[("run_a", false)]),
        loc("demo", 0x5555_0000_1250, &[("run_b", false)]),
        loc("demo", 0x5555_0000_1300, &[("main", false)]),
        loc("libhot.so", 0x7f00_0000_1100, &[("hot_b", false)]),
    ];
    let stack = |samples: u64, truncated: bool, frames: &[u32]| StackReport {
        process: 0,
        pid: 4242,
        command: "demo".into(),
        samples,
        truncated,
        fp_chain_ended: false,
        frames: frames.to_vec(),
    };
    s.stacks = vec![
        stack(400, false, &[0, 1, 3]),
        stack(280, false, &[4, 2, 3]),
        stack(200, false, &[0, 2, 3]),
        stack(20, true, &[4]),
    ];
    r
}
