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
