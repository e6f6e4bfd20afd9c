//! Parca's server built by `.ci/backends`: the designed workload recorded by ntprof is written with WriteRaw
//! through the REST gateway and over gRPC, and read back through Parca's own QueryService (its HTTP gateway,
//! a merge of the series selected by the pushed labels, as pprof), where the designed shares must hold and
//! the labels be those pushed.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use common::{
    Server, backend, check_shares, free_port, pprof_self_counts, pprof_self_values,
    record_workload, scratch,
};
use ntprof_push::{Client, Target, Window};
use serde_json::Value;

fn get(url: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

/// RFC 3339 (UTC) of a time, as the gateway reads a Timestamp.
fn rfc3339(t: SystemTime) -> String {
    let s = t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let (days, rem) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn writeraw_over_rest_and_grpc_reads_back_through_the_query_service() {
    let parca = backend("parca");
    let dir = scratch("parca");
    let (pprof, start, end) = record_workload(&dir);
    let pushed = pprof_self_counts(&pprof);
    check_shares(&pushed, "the recorded pprof");
    let period = pprof_self_values(&pprof).2;
    assert!(period > 0, "the recorded pprof has no period");

    let port = free_port();
    std::fs::write(
        dir.join("parca.yaml"),
        "object_storage:\n  bucket:\n    type: FILESYSTEM\n    config:\n      directory: ./data\n",
    )
    .unwrap();
    let mut server = Server::start(
        Command::new(&parca)
            .current_dir(&dir)
            .arg("--config-path=parca.yaml")
            .arg(format!("--http-address=127.0.0.1:{port}"))
            .arg(format!(
                "--debuginfo-cache-dir={}",
                dir.join("debuginfo").display()
            )),
        dir.join("parca.log"),
    );
    server.wait_port(port, Duration::from_secs(120));

    for (scheme, transport) in [("parca+http", "rest"), ("parca+grpc", "grpc")] {
        let window = Window {
            pprof: pprof.clone(),
            start,
            end,
            service: "push-parca".into(),
            labels: vec![
                ("host".into(), "test-host".into()),
                ("transport".into(), transport.into()),
            ],
        };
        let url = format!("{scheme}://127.0.0.1:{port}");
        let mut client = Client::new(Target::parse(&url).unwrap(), Duration::from_secs(30));
        client
            .push(&window)
            .unwrap_or_else(|e| panic!("{url}: {e}\n{}", server.log_text()));
    }

    let base = format!("http://127.0.0.1:{port}/api/profiles");
    let (from, to) = (
        rfc3339(start - Duration::from_secs(60)),
        rfc3339(end + Duration::from_secs(60)),
    );
    // The profile type Parca filed the samples under: process_cpu, samples/count.
    let until = Instant::now() + Duration::from_secs(60);
    let profile_type = loop {
        let (status, body) = get(&format!("{base}/types"));
        assert_eq!(status, 200, "{body}");
        let types: Value = serde_json::from_str(&body).unwrap();
        let found = types["types"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == "process_cpu" && t["sampleType"] == "samples")
            .cloned();
        if let Some(t) = found {
            let mut s = format!(
                "process_cpu:samples:{}:{}:{}",
                t["sampleUnit"].as_str().unwrap(),
                t["periodType"].as_str().unwrap(),
                t["periodUnit"].as_str().unwrap()
            );
            if t["delta"].as_bool() == Some(true) {
                s.push_str(":delta");
            }
            break s;
        }
        assert!(
            Instant::now() < until,
            "Parca lists no process_cpu samples type: {body}\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for transport in ["rest", "grpc"] {
        let query = format!(
            "{profile_type}{{service_name=\"push-parca\",host=\"test-host\",transport=\"{transport}\"}}"
        );
        let url = format!(
            "{base}/query?mode=MODE_MERGE&reportType=REPORT_TYPE_PPROF&merge.query={}&merge.start={from}&merge.end={to}",
            encode(&query)
        );
        let until = Instant::now() + Duration::from_secs(60);
        let counts: BTreeMap<String, i64> = loop {
            let (status, body) = get(&url);
            if status == 200 {
                let v: Value = serde_json::from_str(&body).unwrap();
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v["pprof"].as_str().unwrap_or(""))
                    .unwrap();
                if !bytes.is_empty() {
                    // Parca answers a samples/count query in the period's unit: each count times the
                    // period (cpu nanoseconds here); the counts are those values over the period.
                    let (kind, values, _) = pprof_self_values(&bytes);
                    if values.values().sum::<i64>() > 0 {
                        assert_eq!(
                            kind,
                            ("cpu".to_string(), "nanoseconds".to_string()),
                            "{transport}"
                        );
                        let counts = values.iter().map(|(f, v)| {
                            assert_eq!(
                                v % period,
                                0,
                                "{f}: {v} ns is not a whole number of {period} ns periods"
                            );
                            (f.clone(), v / period)
                        });
                        break counts.collect();
                    }
                }
            }
            assert!(
                Instant::now() < until,
                "{query}: no samples: HTTP {status}: {body}\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(counts, pushed, "{transport}: read back against pushed");
        let share = check_shares(&counts, transport);
        eprintln!("{transport}: push_three share {share:.3}, counts {counts:?}");
    }
    // The label values Parca stored.
    let (status, body) = get(&format!(
        "{base}/labels/transport/values?start={from}&end={to}"
    ));
    assert_eq!(status, 200, "{body}");
    let mut values: Vec<String> = serde_json::from_str::<Value>(&body).unwrap()["labelValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    values.sort();
    assert_eq!(values, ["grpc", "rest"]);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
