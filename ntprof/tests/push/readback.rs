//! The push tests' servers and read-back: each backend started on 127.0.0.1 free ports, and what it holds read
//! through its own query API: the windows that arrived, the samples per leaf function of their merge, and the
//! label values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use prost::Message;
use serde_json::{Value, json};

use crate::otlp_json;
use crate::servers::{Server, free_port, pprof_self_counts, pprof_self_values};

/// What a backend gave back for one selector.
pub struct ReadBack {
    /// Profiles (windows) stored at distinct times.
    pub windows: u64,
    /// Samples per leaf function, all windows merged.
    pub counts: BTreeMap<String, i64>,
    /// Every value of each label.
    pub labels: BTreeMap<String, Vec<String>>,
    /// The Collector's file: each export's own samples per leaf function (empty for the other backends).
    pub each: Vec<BTreeMap<String, i64>>,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn post(url: &str, content_type: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut r = agent()
        .post(url)
        .header("Content-Type", content_type)
        .send(body)
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let body = r.body_mut().with_config().limit(64 << 20).read_to_vec();
    (r.status().as_u16(), body.unwrap())
}

fn get(url: &str) -> (u16, String) {
    let mut r = agent()
        .get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The last ten minutes to a minute ahead, in milliseconds.
fn range_ms() -> (i64, i64) {
    let now = ms(SystemTime::now());
    (now - 600_000, now + 60_000)
}

/// Retries `f` for up to a minute (a backend files what it takes a moment later), failing with the server's
/// log.
fn until<T>(server: &Server, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= end => {
                panic!("{what}: {e}\nserver log:\n{}", server.log_text())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// `querier.v1.SelectMergeProfileRequest`.
#[derive(Clone, PartialEq, Message)]
struct SelectMergeProfileRequest {
    #[prost(string, tag = "1")]
    profile_type_id: String,
    #[prost(string, tag = "2")]
    label_selector: String,
    #[prost(int64, tag = "3")]
    start: i64,
    #[prost(int64, tag = "4")]
    end: i64,
}

const PYROSCOPE_TYPE: &str = "process_cpu:samples:count:cpu:nanoseconds";

/// Pyroscope's `SelectMergeProfile` of `selector` over `range` (milliseconds): samples per leaf function.
pub fn pyroscope_merge(
    server: &Server,
    http: u16,
    selector: &str,
    range: (i64, i64),
) -> BTreeMap<String, i64> {
    let url = format!("http://127.0.0.1:{http}/querier.v1.QuerierService/SelectMergeProfile");
    until(server, "SelectMergeProfile", || {
        let req = SelectMergeProfileRequest {
            profile_type_id: PYROSCOPE_TYPE.into(),
            label_selector: selector.into(),
            start: range.0,
            end: range.1,
        };
        let (status, body) = post(&url, "application/proto", &req.encode_to_vec());
        if status != 200 || body.is_empty() {
            return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)));
        }
        let c = pprof_self_counts(&body);
        if c.values().sum::<i64>() == 0 {
            return Err("no samples yet".into());
        }
        Ok(c)
    })
}

/// Pyroscope: the merged profile (`SelectMergeProfile`), the windows (`SelectSeries`, one point per profile
/// at one-second steps) and the label values (`LabelValues`) of `selector`.
pub fn pyroscope(server: &mut Server, http: u16, selector: &str) -> ReadBack {
    let base = format!("http://127.0.0.1:{http}/querier.v1.QuerierService");
    let (start, end) = range_ms();
    let counts = pyroscope_merge(server, http, selector, (start, end));
    let series = json!({
        "profileTypeID": PYROSCOPE_TYPE, "labelSelector": selector,
        "start": start, "end": end, "step": 1.0,
    });
    let (status, body) = post(
        &format!("{base}/SelectSeries"),
        "application/json",
        series.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    let mut stamps: Vec<String> = Vec::new();
    for s in v["series"].as_array().into_iter().flatten() {
        for p in s["points"].as_array().into_iter().flatten() {
            if p["value"].as_f64().unwrap_or(0.0) > 0.0 {
                stamps.push(p["timestamp"].to_string());
            }
        }
    }
    stamps.sort();
    stamps.dedup();
    let mut labels = BTreeMap::new();
    for name in ["team", "host", "pid", "service_name", "command_line"] {
        let body = json!({"name": name, "matchers": [selector], "start": start, "end": end});
        let (status, answer) = post(
            &format!("{base}/LabelValues"),
            "application/json",
            body.to_string().as_bytes(),
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        let v: Value = serde_json::from_slice(&answer).unwrap();
        labels.insert(name.to_string(), strings(&v["names"]));
    }
    ReadBack {
        windows: stamps.len() as u64,
        counts,
        labels,
        each: Vec::new(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Parca with filesystem storage in `dir`. Returns it and its port (gRPC and HTTP on one listener).
pub fn start_parca(bin: &Path, dir: &Path) -> (Server, u16) {
    let port = free_port();
    std::fs::write(
        dir.join("parca.yaml"),
        "object_storage:\n  bucket:\n    type: FILESYSTEM\n    config:\n      directory: ./data\n",
    )
    .unwrap();
    let mut server = Server::start(
        Command::new(bin)
            .current_dir(dir)
            .arg("--config-path=parca.yaml")
            .arg(format!("--http-address=127.0.0.1:{port}"))
            .arg(format!(
                "--debuginfo-cache-dir={}",
                dir.join("debuginfo").display()
            )),
        dir.join("parca.log"),
    );
    server.wait_port(port, Duration::from_secs(120));
    (server, port)
}

fn rfc3339(ms: i64) -> String {
    let s = ms / 1000;
    let (days, rem) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, se) = (rem / 3600, rem / 60 % 60, rem % 60);
    let milli = ms.rem_euclid(1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{se:02}.{milli:03}Z")
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Parca files a CPU profile as a delta profile; a samples/count query answers in the period's unit.
const PARCA_TYPE: &str = "process_cpu:samples:count:cpu:nanoseconds:delta";

/// Parca's `Query` (MODE_MERGE, as pprof) of `selector` over `range` (milliseconds): samples per leaf
/// function, the answer's nanoseconds over `period`.
pub fn parca_merge(
    server: &Server,
    port: u16,
    selector: &str,
    period: i64,
    range: (i64, i64),
) -> BTreeMap<String, i64> {
    let base = format!("http://127.0.0.1:{port}/api/profiles");
    let (from, to) = (rfc3339(range.0), rfc3339(range.1));
    let query = encode(&format!("{PARCA_TYPE}{selector}"));
    until(server, "Parca query", || {
        let (status, body) = get(&format!(
            "{base}/query?mode=MODE_MERGE&reportType=REPORT_TYPE_PPROF&merge.query={query}&merge.start={from}&merge.end={to}"
        ));
        if status != 200 {
            return Err(format!("HTTP {status}: {body}"));
        }
        let v: Value = serde_json::from_str(&body).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["pprof"].as_str().unwrap_or(""))
            .unwrap();
        if bytes.is_empty() {
            return Err("no profile yet".into());
        }
        let (kind, values, _) = pprof_self_values(&bytes);
        if values.values().sum::<i64>() == 0 {
            return Err("no samples yet".into());
        }
        assert_eq!(kind.1, "nanoseconds", "{kind:?}");
        for (f, v) in &values {
            assert_eq!(
                v % period,
                0,
                "{f}: {v} ns is not a whole number of {period} ns samples"
            );
        }
        Ok(values.into_iter().map(|(f, v)| (f, v / period)).collect())
    })
}

/// Parca: the merged profile (`Query`, MODE_MERGE, as pprof; its values over the period are the counts), the
/// windows (`QueryRange`, one sample per stored profile) and the label values. `period`: the nanoseconds a
/// sample stands for (the report's `sample_value`): Parca answers in nanoseconds, with no period.
pub fn parca(server: &mut Server, port: u16, selector: &str, period: i64) -> ReadBack {
    let base = format!("http://127.0.0.1:{port}/api/profiles");
    let (start, end) = range_ms();
    let (from, to) = (rfc3339(start), rfc3339(end));
    let query = encode(&format!("{PARCA_TYPE}{selector}"));
    let counts = parca_merge(server, port, selector, period, (start, end));
    // Summed by the labels the tests check: without sum_by Parca sums every matched profile into one series
    // with no labels at all; with it, one series per combination of their values, each labelled with them.
    let sum_by: String = ["team", "host", "pid", "service_name", "command_line"]
        .iter()
        .map(|l| format!("&sumBy={l}"))
        .collect();
    let (status, body) = get(&format!(
        "{base}/query_range?query={query}&start={from}&end={to}&step=1s{sum_by}"
    ));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let mut stamps: Vec<String> = Vec::new();
    // The labels of the series the selector matched, and of those only (the label-values endpoint answers for
    // every profile stored, the other transport's and runs' included).
    let mut labels: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in v["series"].as_array().into_iter().flatten() {
        for p in s["samples"].as_array().into_iter().flatten() {
            stamps.push(p["timestamp"].to_string());
        }
        for l in s["labelset"]["labels"].as_array().into_iter().flatten() {
            let (Some(name), Some(value)) = (l["name"].as_str(), l["value"].as_str()) else {
                continue;
            };
            labels
                .entry(name.to_string())
                .or_default()
                .push(value.to_string());
        }
    }
    for values in labels.values_mut() {
        values.sort();
        values.dedup();
    }
    stamps.sort();
    stamps.dedup();
    assert!(
        !labels.is_empty(),
        "no labels in the series of {selector}: {body}"
    );
    ReadBack {
        windows: stamps.len() as u64,
        counts,
        labels,
        each: Vec::new(),
    }
}

/// The Collector with the OTLP receiver (gRPC and HTTP) and a file exporter writing one JSON line per
/// export. Returns it, its gRPC and HTTP ports and the file.
pub fn start_collector(bin: &Path, dir: &Path) -> (Server, u16, u16, PathBuf) {
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
        Command::new(bin)
            .arg("--config")
            .arg(&config)
            .arg("--feature-gates=service.profilesSupport"),
        dir.join("collector.log"),
    );
    server.wait_port(grpc, Duration::from_secs(60));
    server.wait_port(http, Duration::from_secs(60));
    (server, grpc, http, out)
}

/// The Collector's file: the exports whose `service.name` is `service` (one per window; waits for `sent` of
/// them), their samples merged and their resource attributes.
pub fn collector(server: &Server, file: &Path, service: &str, sent: u64) -> ReadBack {
    let exports = until(server, "the Collector's file", || {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // Complete lines only: the exporter may be half-way through one.
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let found: Vec<otlp_json::Export> = complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(otlp_json::read)
            .filter(|e| e.attributes.get("service.name").map(String::as_str) == Some(service))
            .collect();
        if (found.len() as u64) < sent {
            return Err(format!("{} of {sent} exports of {service}", found.len()));
        }
        Ok(found)
    });
    let mut counts = BTreeMap::new();
    let mut labels: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &exports {
        for (f, n) in &e.counts {
            *counts.entry(f.clone()).or_insert(0) += n;
        }
        for (k, v) in &e.attributes {
            let values = labels.entry(k.clone()).or_default();
            if !values.contains(v) {
                values.push(v.clone());
            }
        }
    }
    ReadBack {
        windows: exports.len() as u64,
        counts,
        labels,
        each: exports.iter().map(|e| e.counts.clone()).collect(),
    }
}
