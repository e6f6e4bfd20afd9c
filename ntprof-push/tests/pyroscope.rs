//! Grafana Pyroscope's server built by `.ci/backends`: the designed workload recorded by ntprof is pushed to
//! `/ingest` and read back through Pyroscope's own query API (`QuerierService/SelectMergeProfile` over the
//! connect protocol, which answers with a pprof profile), where the designed shares must hold and the labels be
//! those pushed (`QuerierService/LabelValues`).

mod common;

use std::time::{Duration, Instant, UNIX_EPOCH};

use common::{backend, check_shares, pprof_self_counts, record_workload, scratch};
use ntprof_push::{Client, Target, Window};
use prost::Message;
use serde_json::Value;

/// `querier.v1.SelectMergeProfileRequest`.
#[derive(Clone, PartialEq, Message)]
struct SelectMergeProfileRequest {
    #[prost(string, tag = "1")]
    profile_type_id: String,
    #[prost(string, tag = "2")]
    label_selector: String,
    /// Milliseconds since the epoch.
    #[prost(int64, tag = "3")]
    start: i64,
    #[prost(int64, tag = "4")]
    end: i64,
}

fn post(url: &str, content_type: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .post(url)
        .header("Content-Type", content_type)
        .send(body)
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    (
        r.status().as_u16(),
        r.body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .unwrap(),
    )
}

#[test]
fn ingest_reads_back_through_select_merge_profile() {
    let pyroscope = backend("pyroscope");
    let dir = scratch("pyroscope");
    let (pprof, start, end) = record_workload(&dir);
    let pushed = pprof_self_counts(&pprof);
    check_shares(&pushed, "the recorded pprof");

    let (server, http) = common::start_pyroscope(&pyroscope, &dir);
    let base = format!("http://127.0.0.1:{http}");

    let window = Window {
        pprof: pprof.clone(),
        start,
        end,
        service: "push-pyroscope".into(),
        labels: vec![
            ("host".into(), "test-host".into()),
            ("transport".into(), "ingest".into()),
        ],
    };
    let url = format!("pyroscope+http://127.0.0.1:{http}");
    let mut client = Client::new(Target::parse(&url).unwrap(), Duration::from_secs(30));
    client
        .push(&window)
        .unwrap_or_else(|e| panic!("{url}: {e}\n{}", server.log_text()));

    let ms = |t: std::time::SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    let req = SelectMergeProfileRequest {
        profile_type_id: "process_cpu:samples:count:cpu:nanoseconds".into(),
        label_selector: "{service_name=\"push-pyroscope\",host=\"test-host\",transport=\"ingest\"}"
            .into(),
        start: ms(start) - 60_000,
        end: ms(end) + 60_000,
    };
    let until = Instant::now() + Duration::from_secs(60);
    let counts = loop {
        let (status, body) = post(
            &format!("{base}/querier.v1.QuerierService/SelectMergeProfile"),
            "application/proto",
            &req.encode_to_vec(),
        );
        if status == 200 && !body.is_empty() {
            let c = pprof_self_counts(&body);
            if c.values().sum::<i64>() > 0 {
                break c;
            }
        }
        assert!(
            Instant::now() < until,
            "no samples: HTTP {status}: {}\n{}",
            String::from_utf8_lossy(&body),
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(counts, pushed, "read back against pushed");
    let share = check_shares(&counts, "pyroscope");
    eprintln!("ingest: push_three share {share:.3}, counts {counts:?}");

    for (label, want) in [
        ("host", "test-host"),
        ("transport", "ingest"),
        ("service_name", "push-pyroscope"),
    ] {
        let body = serde_json::json!({
            "name": label,
            "matchers": ["{service_name=\"push-pyroscope\"}"],
            "start": ms(start) - 60_000,
            "end": ms(end) + 60_000,
        });
        let (status, answer) = post(
            &format!("{base}/querier.v1.QuerierService/LabelValues"),
            "application/json",
            body.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        let v: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(v["names"], serde_json::json!([want]), "{label}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
