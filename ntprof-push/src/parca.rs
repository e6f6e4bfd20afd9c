//! Parca's `WriteRaw` (package `parca.profilestore.v1alpha1`): its messages, derived from the public field
//! numbers, and their JSON form for the REST gateway.

use base64::Engine as _;
use prost::Message;

use crate::Window;

/// The profile name Parca files the samples under (its `__name__` label): the conventional name of a CPU
/// profile, which makes the query `process_cpu:samples:count:cpu:nanoseconds`.
pub const PROFILE_NAME: &str = "process_cpu";

/// `WriteRawRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WriteRawRequest {
    /// The profile series.
    #[prost(message, repeated, tag = "2")]
    pub series: Vec<RawProfileSeries>,
    /// Whether the addresses are already normalized (they are not: pprof keeps runtime addresses).
    #[prost(bool, tag = "3")]
    pub normalized: bool,
}

/// `WriteRawResponse` (empty).
#[derive(Clone, PartialEq, Message)]
pub struct WriteRawResponse {}

/// `RawProfileSeries`.
#[derive(Clone, PartialEq, Message)]
pub struct RawProfileSeries {
    /// The series' labels.
    #[prost(message, optional, tag = "1")]
    pub labels: Option<LabelSet>,
    /// Its profiles.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `LabelSet`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelSet {
    /// The labels.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
}

/// `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// Name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `RawSample`: one pprof profile, gzipped or not.
#[derive(Clone, PartialEq, Message)]
pub struct RawSample {
    /// The pprof bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
}

/// The labels of a window's series: `__name__`, `service_name`, then the window's own, sorted by name as
/// Parca keeps them.
pub fn labels(w: &Window) -> Vec<Label> {
    let mut out = vec![
        Label {
            name: "__name__".into(),
            value: PROFILE_NAME.into(),
        },
        Label {
            name: "service_name".into(),
            value: w.service.clone(),
        },
    ];
    out.extend(w.labels.iter().map(|(k, v)| Label {
        name: k.clone(),
        value: v.clone(),
    }));
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The request for one window.
pub fn request(w: &Window) -> WriteRawRequest {
    WriteRawRequest {
        series: vec![RawProfileSeries {
            labels: Some(LabelSet { labels: labels(w) }),
            samples: vec![RawSample {
                raw_profile: w.pprof.clone(),
            }],
        }],
        normalized: false,
    }
}

/// The same request as the REST gateway reads it (protobuf's JSON mapping: lowerCamelCase names, bytes in
/// base64).
pub fn request_json(w: &Window) -> String {
    let labels: Vec<serde_json::Value> = labels(w)
        .into_iter()
        .map(|l| serde_json::json!({"name": l.name, "value": l.value}))
        .collect();
    serde_json::json!({
        "series": [{
            "labels": {"labels": labels},
            "samples": [{"rawProfile": base64::engine::general_purpose::STANDARD.encode(&w.pprof)}],
        }],
        "normalized": false,
    })
    .to_string()
}
