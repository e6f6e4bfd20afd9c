//! The pprof encoder's tests, on the synthetic report.
use std::io::Read;

use super::*;
use crate::output::fixture;

fn decode(bytes: &[u8]) -> Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .unwrap();
    Profile::decode(raw.as_slice()).unwrap()
}

#[test]
fn one_sample_per_bucket_plus_outside_with_values_in_both_units() {
    let report = fixture::report();
    let p = decode(&render(&report).unwrap());
    let source = &report.sources[0];
    assert_eq!(p.string_table[0], "");
    assert_eq!(p.sample.len(), source.buckets.len() + 1);
    let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(total as u64, source.stats.counted + source.stats.outside);
    for s in &p.sample {
        assert_eq!(s.value[1], s.value[0] * source.sample_value as i64);
    }
    let st = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(
        (st(p.sample_type[0].r#type), st(p.sample_type[0].unit)),
        ("samples", "count")
    );
    assert_eq!(
        (st(p.sample_type[1].r#type), st(p.sample_type[1].unit)),
        ("cpu", "nanoseconds")
    );
    assert_eq!(p.duration_nanos, 2_000_000_000);
    assert_eq!(st(p.default_sample_type), "cpu");
    assert_eq!(p.period, 1_000_000);
}

#[test]
fn inlined_frames_innermost_first_in_the_module_mapping() {
    let report = fixture::report();
    let p = decode(&render(&report).unwrap());
    let st = |i: i64| p.string_table[i as usize].clone();
    let inlined = report.sources[0]
        .buckets
        .iter()
        .find(|b| b.frames.len() == 2)
        .unwrap();
    let loc = p
        .location
        .iter()
        .find(|l| l.address == inlined.address)
        .unwrap();
    let names: Vec<String> = loc
        .line
        .iter()
        .map(|l| st(p.function[l.function_id as usize - 1].name))
        .collect();
    assert_eq!(names, ["mix", "hot_a"]);
    let mapping = &p.mapping[loc.mapping_id as usize - 1];
    assert!(mapping.memory_start <= loc.address && loc.address < mapping.memory_limit);
    assert_eq!(st(mapping.filename), "/opt/demo/bin/demo");
    assert!(mapping.has_inline_frames && mapping.has_line_numbers);
}

#[test]
fn two_sources_have_their_own_columns() {
    let mut report = fixture::report();
    let mut faults = report.sources[0].clone();
    faults.name = "page-faults".into();
    faults.sample_unit = "events".into();
    faults.sample_value = 1;
    report.sources.push(faults);
    let p = decode(&render(&report).unwrap());
    assert_eq!(p.sample_type.len(), 4);
    let n = report.sources[0].buckets.len() + 1;
    assert!(
        p.sample[..n]
            .iter()
            .all(|s| s.value[2] == 0 && s.value[3] == 0)
    );
    assert!(
        p.sample[n..]
            .iter()
            .all(|s| s.value[0] == 0 && s.value[2] == s.value[3])
    );
}

#[test]
fn rfc3339_dates() {
    assert_eq!(rfc3339_nanos("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(
        rfc3339_nanos("2000-03-01T00:00:01.5Z"),
        Some(951_868_801_500_000_000)
    );
    assert_eq!(
        rfc3339_nanos("2026-11-23T13:46:41Z"),
        Some(1_795_441_601_000_000_000)
    );
    assert_eq!(rfc3339_nanos("yesterday"), None);
}

/// A window's profile is dated by the window, not by the run's start.
#[test]
fn a_window_is_dated_by_its_own_start_and_length() {
    let mut report = fixture::report();
    report.run.duration_s = 1.25;
    report.run.window = Some(crate::report::WindowInfo {
        index: 7,
        start_unix_ns: 1_795_441_601_250_000_000,
        end_unix_ns: 1_795_441_602_500_000_000,
        start: crate::collect::rfc3339(1_795_441_601_250_000_000, true),
        end: crate::collect::rfc3339(1_795_441_602_500_000_000, true),
        last: false,
    });
    let p = decode(&render(&report).unwrap());
    assert_eq!(p.time_nanos, 1_795_441_601_250_000_000);
    assert_eq!(p.duration_nanos, 1_250_000_000);
    assert_eq!(
        report.run.window.as_ref().unwrap().start,
        "2026-11-23T13:46:41.250000000Z"
    );
}

#[test]
fn the_executable_is_the_first_mapping_even_without_samples() {
    // A shell script: the command is the shell, whose samples are all in the programs it started.
    let mut report = fixture::report();
    report.run.executable = Some("/usr/bin/dash".into());
    let p = decode(&render(&report).unwrap());
    let st = |i: i64| p.string_table[i as usize].clone();
    assert_eq!(st(p.mapping[0].filename), "/usr/bin/dash");
    assert_eq!(p.mapping[0].id, 1);
    assert!(!p.mapping[0].has_functions);
    // The modules with samples follow, each once, every location in one of them.
    let ids: Vec<u64> = p.mapping.iter().map(|m| m.id).collect();
    assert_eq!(ids, (1..=p.mapping.len() as u64).collect::<Vec<_>>());
    assert!(p.mapping.len() > 1);
    assert!(p.location.iter().all(|l| l.mapping_id != 1));
}

#[test]
fn samples_carry_pid_and_command_labels_and_the_executable_is_the_first_mapping() {
    let mut report = fixture::report();
    // The executable listed second: the encoder still puts it first.
    report.sources[0].modules.reverse();
    let p = decode(&render(&report).unwrap());
    let st = |i: i64| p.string_table[i as usize].clone();
    assert_eq!(st(p.mapping[0].filename), "/opt/demo/bin/demo");
    for s in &p.sample {
        let pid = s.label.iter().find(|l| st(l.key) == "pid").unwrap();
        assert_eq!(pid.num, 4242);
        let command = s.label.iter().find(|l| st(l.key) == "command").unwrap();
        assert_eq!(st(command.str), "demo");
    }
}

/// A process's cgroup and container id label every sample of it (a push's backend selects a container by
/// them); a process without them adds no such label.
#[test]
fn samples_carry_the_cgroup_and_container_labels_of_their_process() {
    let id = "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a10";
    let label = |p: &Profile, key: &str| -> Vec<String> {
        let st = |i: i64| p.string_table[i as usize].clone();
        p.sample
            .iter()
            .filter_map(|s| s.label.iter().find(|l| st(l.key) == key).map(|l| st(l.str)))
            .collect()
    };
    let plain = decode(&render(&fixture::report()).unwrap());
    assert!(label(&plain, "cgroup").is_empty() && label(&plain, "container_id").is_empty());
    let mut report = fixture::report();
    report.processes[0].cgroup = Some(format!("/system.slice/docker-{id}.scope"));
    report.processes[0].container_id = Some(id.to_string());
    let p = decode(&render(&report).unwrap());
    let (cgroups, ids) = (label(&p, "cgroup"), label(&p, "container_id"));
    assert_eq!(cgroups.len(), p.sample.len(), "every sample has its cgroup");
    assert!(
        cgroups
            .iter()
            .all(|c| *c == format!("/system.slice/docker-{id}.scope"))
    );
    assert_eq!(ids.len(), p.sample.len(), "every sample has its container");
    assert!(ids.iter().all(|c| c == id));
}

#[test]
fn call_stacks_are_one_location_per_frame_leaf_first_with_truncation_marked() {
    let report = fixture::report_with_stacks();
    let p = decode(&render(&report).unwrap());
    let name_of = |loc_id: u64| {
        let loc = p.location.iter().find(|l| l.id == loc_id).unwrap();
        loc.line
            .iter()
            .map(|l| {
                let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
                p.string_table[f.name as usize].clone()
            })
            .collect::<Vec<_>>()
            .join("+")
    };
    let mut stacks: Vec<(Vec<String>, i64)> = p
        .sample
        .iter()
        .map(|s| {
            (
                s.location_id.iter().map(|&l| name_of(l)).collect(),
                s.value[0],
            )
        })
        .collect();
    stacks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let expect = |v: &[&str], n: i64| (v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), n);
    assert_eq!(
        stacks,
        [
            expect(&["mix+hot_a", "run_a", "main"], 400),
            expect(&["hot_b", "run_b", "main"], 280),
            expect(&["mix+hot_a", "run_b", "main"], 200),
            expect(&["[outside profiled modules]"], 100),
            expect(&["hot_b", TRUNCATED], 20),
        ]
    );
    // The same address is one location whichever stack it is in.
    let hot_a: Vec<u64> = p
        .sample
        .iter()
        .filter(|s| s.value[0] == 400 || s.value[0] == 200)
        .map(|s| s.location_id[0])
        .collect();
    assert_eq!(hot_a[0], hot_a[1]);
}

#[test]
fn an_off_cpu_sources_comment_counts_nanoseconds_and_stacks_mark_an_ended_fp_chain() {
    let mut report = fixture::report_with_stacks();
    report.run.call_graph = Some("fp".into());
    let mut off = report.sources[0].clone();
    off.name = "off_cpu".into();
    off.interval_unit = crate::report::OFF_CPU_UNIT.into();
    off.stats.counted = 1_189_664_249;
    report.sources.push(off);
    let p = decode(&render(&report).unwrap());
    let comments: Vec<&str> = p
        .comment
        .iter()
        .map(|&i| p.string_table[i as usize].as_str())
        .collect();
    let off = comments.iter().find(|c| c.starts_with("off_cpu:")).unwrap();
    assert!(
        off.contains("nanoseconds off CPU") && off.contains("counted 1189664249 ns"),
        "{off}"
    );
    let timer = comments.iter().find(|c| c.starts_with("Timer:")).unwrap();
    assert!(
        timer.contains("interval ") && !timer.contains(" ns,"),
        "{timer}"
    );
    // The fixture's stacks end at main, no entry: with frame pointers each whole one ends in the marker.
    let ended = p
        .function
        .iter()
        .find(|f| p.string_table[f.name as usize] == crate::report::FP_ENDED_FRAME)
        .expect("an [fp chain ended] function");
    let marked = p
        .sample
        .iter()
        .filter(|s| {
            let root = p
                .location
                .iter()
                .find(|l| Some(&l.id) == s.location_id.last());
            root.is_some_and(|l| l.line.iter().any(|l| l.function_id == ended.id))
        })
        .count();
    // Three whole stacks per source (the fourth is truncated), two sources.
    assert_eq!(marked, 6);
}
