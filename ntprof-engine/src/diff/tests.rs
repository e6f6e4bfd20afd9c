//! The comparison read from JSON and from pprof, its order, and the flame graph.

use super::*;
use crate::output::fixture;

fn json(report: &report::Report) -> Vec<u8> {
    serde_json::to_vec(report).unwrap()
}

#[test]
fn json_and_pprof_of_one_run_give_the_same_functions_shares_and_time() {
    for report in [fixture::report(), fixture::report_with_stacks()] {
        let from_json = side_of(&json(&report), "run.json", None).unwrap();
        let from_pprof = side_of(&pprof::render(&report).unwrap(), "run.pb.gz", None).unwrap();
        assert_eq!(from_json.total, 1000);
        assert_eq!(from_pprof.total, from_json.total);
        assert_eq!(from_pprof.functions, from_json.functions);
        // Both name the executable's module as the main one (pprof: its first mapping).
        assert_eq!(from_json.main.as_deref(), Some("demo"));
        assert_eq!(from_pprof.main, from_json.main);
        assert_eq!(from_json.ns_per_sample, Some(1_000_000.0));
        assert_eq!(from_pprof.ns_per_sample, from_json.ns_per_sample);
        assert!(!from_pprof.folded.is_empty() && !from_json.folded.is_empty());
    }
}

#[test]
fn rows_come_largest_change_first_with_shares_of_each_side() {
    let old = side_of(&json(&fixture::report()), "old", None).unwrap();
    let mut new = old.clone();
    // hot_b doubles (300 -> 600), hot_a stays: the new total is 1300.
    for (k, v) in new.functions.iter_mut() {
        if k.1 == "hot_b" {
            *v *= 2;
        }
    }
    new.total += 300;
    let rows = compare(&old, &new);
    assert_eq!(rows[0].function, "hot_b");
    assert_eq!((rows[0].old, rows[0].new), (300, 600));
    assert!((rows[0].change_points() - (600.0 / 1300.0 - 0.3) * 100.0).abs() < 1e-9);
    assert_eq!(rows[0].new_ns, Some(600.0 * 1e6));
    let a = rows.iter().find(|r| r.function == "hot_a").unwrap();
    assert_eq!((a.old, a.new), (600, 600));
    assert!(
        a.change_points() < 0.0,
        "the same samples are a smaller share of more"
    );
    for w in rows.windows(2) {
        assert!(w[0].change_points().abs() >= w[1].change_points().abs());
    }
}

#[test]
fn a_function_in_one_profile_only_is_a_row_with_zero_on_the_other_side() {
    let old = side_of(&json(&fixture::report()), "old", None).unwrap();
    let mut new = old.clone();
    new.functions
        .insert(("prog".into(), "brand_new".into()), 50);
    new.total += 50;
    let rows = compare(&old, &new);
    let r = rows.iter().find(|r| r.function == "brand_new").unwrap();
    assert_eq!((r.old, r.new, r.old_share), (0, 50, 0.0));
}

#[test]
fn the_flame_graph_draws_both_profiles_stacks() {
    let old = side_of(&json(&fixture::report_with_stacks()), "old", None).unwrap();
    let svg = String::from_utf8(flame_graph(&old, &old, "same").unwrap()).unwrap();
    assert!(svg.contains("<svg") && svg.contains("hot_a") && svg.contains("same"));
    assert!(flame_graph(&Side::default(), &Side::default(), "t").is_err());
}

#[test]
fn bad_inputs_and_unknown_sources_say_what_there_is() {
    let e = side_of(
        b"\x08\x96\x01 not a profile at all \xff\xff",
        "junk.bin",
        None,
    )
    .unwrap_err();
    assert!(e.contains("junk.bin") && e.contains("pprof"), "{e}");
    let e = side_of(b"{\"x\": 1}", "x.json", None).unwrap_err();
    assert!(e.contains("schema_version"), "{e}");
    let e = side_of(&json(&fixture::report()), "run.json", Some("cycles")).unwrap_err();
    assert!(e.contains("Timer"), "{e}");
    let e = side_of(
        &pprof::render(&fixture::report()).unwrap(),
        "p.pb.gz",
        Some("cycles"),
    )
    .unwrap_err();
    assert!(e.contains("samples/count"), "{e}");
    let gz_junk = [0x1f, 0x8b, 0x08, 0, 0, 0];
    assert!(
        side_of(&gz_junk, "cut.gz", None)
            .unwrap_err()
            .contains("cannot be unpacked")
    );
}

#[test]
fn a_renamed_executable_and_a_new_library_version_compare_by_function_name() {
    let old = side_of(&json(&fixture::report()), "old", None).unwrap();
    assert_eq!(old.main.as_deref(), Some("demo"));
    // The same program rebuilt as demo2, its library as a new version: every function under another module.
    let rename = |m: &str| match m {
        "demo" => "demo2".to_string(),
        "libhot.so" => "libhot.so.2".to_string(),
        other => other.to_string(),
    };
    let mut old = old;
    old.functions = old
        .functions
        .into_iter()
        .map(|((m, f), n)| {
            (
                (
                    if m == "libhot.so" {
                        "libhot.so.1".into()
                    } else {
                        m
                    },
                    f,
                ),
                n,
            )
        })
        .collect();
    let mut new = old.clone();
    new.functions = old
        .functions
        .iter()
        .map(|((m, f), &n)| ((rename(m.trim_end_matches(".1")), f.clone()), n))
        .collect();
    new.main = Some("demo2".into());
    new.folded = old
        .folded
        .iter()
        .map(|l| l.replace("demo;", "demo2;"))
        .collect();
    let matched = module_matches(&old, &new);
    assert_eq!(
        matched,
        vec![
            Matched {
                old: "demo".into(),
                new: "demo2".into(),
                reason: Reason::MainExecutable
            },
            Matched {
                old: "libhot.so.1".into(),
                new: "libhot.so.2".into(),
                reason: Reason::LibraryVersion
            },
        ]
    );
    let rows = compare(&old, &new);
    let hot_a: Vec<&Row> = rows.iter().filter(|r| r.function == "hot_a").collect();
    assert_eq!(hot_a.len(), 1, "{rows:?}");
    assert_eq!(
        (hot_a[0].old, hot_a[0].new, hot_a[0].module.as_str()),
        (600, 600, "demo2")
    );
    let hot_b = rows.iter().find(|r| r.function == "hot_b").unwrap();
    assert_eq!((hot_b.old, hot_b.new), (300, 300));
    assert!(rows.iter().all(|r| r.change_points() == 0.0), "{rows:?}");
    // The same names on both sides: nothing to match. A second executable-like name left in the new profile
    // (the old name is still there): no rename, the modules stay apart.
    assert!(module_matches(&old, &old).is_empty());
    let mut both = new.clone();
    both.functions.insert(("demo".into(), "other".into()), 1);
    assert!(
        module_matches(&old, &both)
            .iter()
            .all(|m| m.reason != Reason::MainExecutable)
    );
}
