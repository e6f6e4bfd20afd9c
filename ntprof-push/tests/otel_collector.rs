//! The OpenTelemetry Collector built by `.ci/backends` (OTLP receiver, file exporter, profiles enabled):
//! the designed workload recorded by ntprof is exported over OTLP/HTTP and OTLP/gRPC, and read back from the
//! Collector's file, where the shares of the designed functions, the exact sample total and the labels must
//! be what was pushed.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{
    Server, backend, check_shares, free_port, pprof_self_counts, record_workload, scratch,
};
use ntprof_push::{Client, Target, Window};
use serde_json::Value;

/// One export as the file exporter wrote it: resource attributes, and samples per leaf function of the
/// `samples/count` profile.
struct ReadBack {
    attributes: BTreeMap<String, String>,
    counts: BTreeMap<String, i64>,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_i64().unwrap(),
        _ => 0,
    }
}

fn index(v: &Value, key: &str) -> usize {
    v.get(key).map_or(0, int) as usize
}

/// Reads one line of the exporter's OTLP JSON (the Collector may store attribute keys and values in the
/// dictionary's string table: `keyStrindex`, `stringValueStrindex`).
fn read_back(line: &str) -> ReadBack {
    let doc: Value = serde_json::from_str(line).unwrap();
    let dict = &doc["dictionary"];
    let strings: Vec<String> = dict["stringTable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    let text = |v: &Value, plain: &str, strindex: &str| match v.get(plain) {
        Some(s) => s.as_str().map_or_else(|| s.to_string(), str::to_string),
        None => strings[index(v, strindex)].clone(),
    };
    let rp = &doc["resourceProfiles"][0];
    let mut attributes = BTreeMap::new();
    for kv in rp["resource"]["attributes"].as_array().unwrap() {
        let value = &kv["value"];
        let v = if value.get("intValue").is_some() {
            int(&value["intValue"]).to_string()
        } else {
            text(value, "stringValue", "stringValueStrindex")
        };
        attributes.insert(text(kv, "key", "keyStrindex"), v);
    }
    let mut counts = BTreeMap::new();
    for p in rp["scopeProfiles"][0]["profiles"].as_array().unwrap() {
        let st = &p["sampleType"];
        if strings[index(st, "typeStrindex")] != "samples" {
            continue;
        }
        for s in p["samples"].as_array().unwrap() {
            let stack = &dict["stackTable"][index(s, "stackIndex")];
            let leaf = &dict["locationTable"][int(&stack["locationIndices"][0]) as usize];
            let f = &dict["functionTable"][index(&leaf["lines"][0], "functionIndex")];
            let name = strings[index(f, "nameStrindex")].clone();
            *counts.entry(name).or_insert(0) += int(&s["values"][0]);
        }
    }
    ReadBack { attributes, counts }
}

#[test]
fn otlp_http_and_grpc_exports_read_back_from_the_collector_file() {
    let collector = backend("otelcol");
    let dir = scratch("otelcol");
    let (pprof, start, end) = record_workload(&dir);
    let pushed = pprof_self_counts(&pprof);
    check_shares(&pushed, "the recorded pprof");

    let (grpc, http) = (free_port(), free_port());
    let out = dir.join("profiles.json");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\n      http:\n        endpoint: 127.0.0.1:{http}\n\
             exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
             service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [file]\n",
            out.display()
        ),
    )
    .unwrap();
    let mut server = Server::start(
        Command::new(&collector)
            .arg("--config")
            .arg(&config)
            .arg("--feature-gates=service.profilesSupport"),
        dir.join("collector.log"),
    );
    server.wait_port(grpc, Duration::from_secs(60));
    server.wait_port(http, Duration::from_secs(60));

    for (url, transport) in [
        (format!("otlp+http://127.0.0.1:{http}"), "http"),
        (format!("otlp+grpc://127.0.0.1:{grpc}"), "grpc"),
    ] {
        let window = Window {
            pprof: pprof.clone(),
            start,
            end,
            service: "push-workload".into(),
            labels: vec![
                ("host".into(), "test-host".into()),
                ("transport".into(), transport.into()),
            ],
        };
        let mut client = Client::new(Target::parse(&url).unwrap(), Duration::from_secs(30));
        client
            .push(&window)
            .unwrap_or_else(|e| panic!("{url}: {e}\n{}", server.log_text()));
    }

    // The exporter writes one JSON line per export; wait for both.
    let until = Instant::now() + Duration::from_secs(60);
    let lines = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        // Complete lines only: the exporter may be half-way through writing one.
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let lines: Vec<String> = complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        if lines.len() >= 2 {
            break lines;
        }
        assert!(
            Instant::now() < until,
            "the collector wrote {} of 2 exports:\n{}",
            lines.len(),
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(lines.len(), 2, "one line per export");
    let mut transports = Vec::new();
    for line in &lines {
        let back = read_back(line);
        assert_eq!(
            back.attributes.get("service.name").map(String::as_str),
            Some("push-workload"),
            "{:?}",
            back.attributes
        );
        assert_eq!(
            back.attributes.get("host").map(String::as_str),
            Some("test-host"),
            "{:?}",
            back.attributes
        );
        transports.push(back.attributes["transport"].clone());
        // Exactly the samples pushed, function by function; the shares then hold as they did in the pprof.
        assert_eq!(back.counts, pushed, "read back against pushed");
        let share = check_shares(&back.counts, "read back");
        eprintln!(
            "{}: push_three share {share:.3}, counts {:?}",
            back.attributes["transport"], back.counts
        );
    }
    transports.sort();
    assert_eq!(transports, ["grpc", "http"]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
