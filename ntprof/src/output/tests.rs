//! Output selection, writing and failures, and the schema document's completeness.

use super::*;

#[test]
fn format_from_extension() {
    let f = |p: &str| Format::from_path(Path::new(p));
    assert_eq!(f("run.json"), Some(Format::Json));
    assert_eq!(f("run.CSV"), Some(Format::Csv));
    assert_eq!(f("cpu.pb.gz"), Some(Format::Pprof));
    assert_eq!(f("flame.svg"), Some(Format::Flamegraph));
    assert_eq!(f("report.txt"), None);
    let args = OutputArgs {
        output: Some("x.csv".into()),
        ..OutputArgs::default()
    };
    assert_eq!(args.main_format(), Format::Csv);
    let args = OutputArgs {
        output: Some("x.csv".into()),
        format: Some(Format::Json),
        ..OutputArgs::default()
    };
    assert_eq!(args.main_format(), Format::Json);
}

#[test]
fn write_failures_name_the_file() {
    let e = write_all(&Sink::File("/nonexistent-dir/x.json".into()), b"{}").unwrap_err();
    assert_eq!(
        e,
        WriteError::Failed(
            "cannot write /nonexistent-dir/x.json: No such file or directory (os error 2)".into()
        )
    );
    let e = write_all(&Sink::File("/dev/full".into()), b"{}").unwrap_err();
    assert_eq!(
        e,
        WriteError::Failed("cannot write /dev/full: No space left on device (os error 28)".into())
    );
}

#[test]
fn every_output_is_attempted_and_every_failure_reported() {
    let dir = std::env::temp_dir().join(format!("ntprof-emit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = fixture::report();
    let args = OutputArgs {
        format: Some(Format::Json),
        output: Some(dir.join("main.json")),
        json: Some("/nonexistent-dir/a.json".into()),
        csv: Some(dir.join("rows.csv")),
        pprof: Some("/dev/full".into()),
        flamegraph: Some(dir.join("flame.svg")),
        ..OutputArgs::default()
    };
    let err = emit(&report, &args, Emit::default()).unwrap_err();
    assert!(
        err.contains("/nonexistent-dir/a.json") && err.contains("/dev/full"),
        "{err}"
    );
    let back: Report =
        serde_json::from_slice(&std::fs::read(dir.join("main.json")).unwrap()).unwrap();
    assert_eq!(back, report);
    assert!(
        std::fs::read_to_string(dir.join("rows.csv"))
            .unwrap()
            .starts_with("source,")
    );
    assert!(
        std::fs::read_to_string(dir.join("flame.svg"))
            .unwrap()
            .contains("hot_a")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every key the JSON writer produces has its row in docs/json-schema.md.
#[test]
fn the_schema_document_describes_every_field() {
    fn keys(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    out.push(k.clone());
                    keys(v, out);
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let doc = include_str!("../../../docs/json-schema.md");
    let value: serde_json::Value =
        serde_json::from_slice(&json(&fixture::report_with_stacks()).unwrap()).unwrap();
    let mut all = Vec::new();
    keys(&value, &mut all);
    assert!(all.len() > 50);
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !doc.contains(&format!("| `{k}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/json-schema.md lacks rows for {missing:?}"
    );
    assert!(
        doc.contains(&format!("schema version {}", crate::report::SCHEMA_VERSION))
            || doc.contains(&format!("(version {})", crate::report::SCHEMA_VERSION))
    );
}

#[test]
fn one_flame_graph_per_source() {
    let mut report = fixture::report();
    let mut second = report.sources[0].clone();
    second.name = "page-faults".into();
    report.sources.push(second);
    let out = flamegraphs(&report, Some(Path::new("/tmp/x/flame.svg")));
    let sinks: Vec<Sink> = out.into_iter().map(|(s, _)| s).collect();
    let on_stdout = flamegraphs(&report, None);
    assert!(on_stdout[0].1.is_ok() && on_stdout[1].1.as_ref().unwrap_err().contains("FILE.svg"));
    assert_eq!(
        sinks,
        [
            Sink::File("/tmp/x/flame.svg".into()),
            Sink::File("/tmp/x/flame.page-faults.svg".into())
        ]
    );
}
