//! The HTTP protocols: Pyroscope's `/ingest`, Parca's REST gateway and OTLP/HTTP, over ureq (rustls for TLS).

use std::time::Duration;

use prost::Message;

use crate::error::{PushError, http_retryable};
use crate::target::{Protocol, Target};
use crate::{Window, otlp, parca};

/// At most this much of a refusal's body is kept in the error.
const MAX_ANSWER: u64 = 16 * 1024;

/// An agent that returns error statuses as responses (their body is the backend's answer).
pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .user_agent(concat!("ntprof-push/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Characters a Pyroscope label value cannot hold: they delimit its `APP{k=v,...}` form.
const PYROSCOPE_DELIMITERS: [char; 4] = [',', '{', '}', '='];

/// Pyroscope's `name` parameter: `APP{k=v,...}`.
pub(crate) fn pyroscope_name(w: &Window) -> Result<String, PushError> {
    if w.service.contains(PYROSCOPE_DELIMITERS) {
        return Err(PushError::Input(format!(
            "service name {:?}: Pyroscope names cannot hold ',', '{{', '}}' or '='",
            w.service
        )));
    }
    let mut parts = Vec::with_capacity(w.labels.len());
    for (k, v) in &w.labels {
        if v.contains(PYROSCOPE_DELIMITERS) {
            return Err(PushError::Input(format!(
                "label {k}={v:?}: Pyroscope label values cannot hold ',', '{{', '}}' or '='"
            )));
        }
        parts.push(format!("{k}={v}"));
    }
    Ok(format!("{}{{{}}}", w.service, parts.join(",")))
}

/// Sends one window over HTTP.
pub(crate) fn push(agent: &ureq::Agent, t: &Target, w: &Window) -> Result<(), PushError> {
    w.check(t.protocol == Protocol::OtlpHttp)?;
    let (url, content_type, body) = match t.protocol {
        Protocol::Pyroscope => {
            let (from, until) = w.span_nanos();
            let from = from / 1_000_000_000;
            let until = until.div_ceil(1_000_000_000).max(from + 1);
            let url = format!(
                "{}/ingest?name={}&from={from}&until={until}&format=pprof",
                t.base(),
                encode_component(&pyroscope_name(w)?)
            );
            (url, "application/octet-stream", w.pprof.clone())
        }
        Protocol::ParcaHttp => (
            format!("{}/api/profiles/writeraw", t.base()),
            "application/json",
            parca::request_json(w).into_bytes(),
        ),
        Protocol::OtlpHttp => {
            let req = otlp::export_request(w)?;
            (
                format!("{}/v1development/profiles", t.base()),
                "application/x-protobuf",
                req.encode_to_vec(),
            )
        }
        Protocol::ParcaGrpc | Protocol::OtlpGrpc => {
            unreachable!("gRPC protocols go through grpc.rs")
        }
    };
    let mut req = agent.post(&url).header("Content-Type", content_type);
    if let Some(h) = t.auth.header() {
        req = req.header("Authorization", h);
    }
    let mut resp = req
        .send(&body[..])
        .map_err(|e| PushError::Transport(format!("POST {url}: {e}")))?;
    let status = resp.status().as_u16();
    let answer = resp
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_vec()
        .unwrap_or_default();
    if !(200..300).contains(&status) {
        return Err(PushError::Rejected {
            status: format!("HTTP {status}"),
            body: String::from_utf8_lossy(&answer).into_owned(),
            retryable: http_retryable(status),
        });
    }
    if t.protocol == Protocol::OtlpHttp {
        otlp::check_response(&answer)?;
    }
    Ok(())
}

/// Percent-encodes a query parameter value (RFC 3986 unreserved characters kept).
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn window(labels: &[(&str, &str)]) -> Window {
        Window {
            pprof: vec![],
            start: SystemTime::UNIX_EPOCH,
            end: SystemTime::UNIX_EPOCH,
            service: "my app".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn pyroscope_names_carry_the_labels_in_order() {
        let w = window(&[("host", "h1"), ("pid", "42")]);
        assert_eq!(pyroscope_name(&w).unwrap(), "my app{host=h1,pid=42}");
        assert_eq!(
            encode_component("my app{host=h1}"),
            "my%20app%7Bhost%3Dh1%7D"
        );
        let e = pyroscope_name(&window(&[("cmd", "a,b")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cmd=\"a,b\""), "{e}");
    }
}
