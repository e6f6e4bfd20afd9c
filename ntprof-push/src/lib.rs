//! Sends profiles (pprof, as `ntprof record --pprof` writes them) to the backends fleets aggregate them in:
//! Grafana Pyroscope, Parca and anything that takes OpenTelemetry (OTLP) profiles.
//!
//! A push URL's scheme names the protocol ([`Target::parse`]):
//!
//! | scheme | request |
//! |---|---|
//! | `pyroscope+http(s)://HOST:PORT` | `POST /ingest?name=APP{labels}&from=&until=&format=pprof`, the pprof as body |
//! | `parca+http(s)://HOST:PORT` | `WriteRaw` through Parca's REST gateway, `POST /api/profiles/writeraw` |
//! | `parca+grpc(s)://HOST:PORT` | `parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw` |
//! | `otlp+http(s)://HOST:PORT` | `POST /v1development/profiles`, an `ExportProfilesServiceRequest` (protobuf) |
//! | `otlp+grpc(s)://HOST:PORT` | `opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export` |
//!
//! [`Client::push`] sends one [`Window`] and returns once the backend answered; a refusal comes back as
//! [`PushError::Rejected`] with the backend's status and answer. [`Pusher`] does the same from a background
//! thread behind a bounded queue, with retries and backoff, so that a backend that is down or slow never stalls
//! the recorder: when the queue is full the oldest window is dropped and counted.

mod error;
mod grpc;
mod http;
mod otlp;
mod parca;
pub mod pprof;
mod queue;
mod target;

use std::time::{Duration, SystemTime};

pub use error::PushError;
pub use otlp::export_request;
pub use queue::{Pusher, QueueConfig, Stats};
pub use target::{Auth, Protocol, Target};

/// One profile to push: a window of a recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The pprof profile, gzipped or not.
    pub pprof: Vec<u8>,
    /// When the window began.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// The service name: Pyroscope's application name, the `service_name` label of Parca, `service.name` of
    /// the OTLP resource.
    pub service: String,
    /// Further labels (host, pid, ...), in order. Keys are `[A-Za-z_][A-Za-z0-9_.]*` (a dot only for OTLP);
    /// `__name__` and `service_name` are set by the push itself.
    pub labels: Vec<(String, String)>,
}

impl Window {
    /// Checks what every backend needs: a service name, a window that ends after it starts, label keys the
    /// backends take, each once.
    pub(crate) fn check(&self, dots_allowed: bool) -> Result<(), PushError> {
        if self.service.trim().is_empty() {
            return Err(PushError::Input("the service name is empty".into()));
        }
        if self.end < self.start {
            return Err(PushError::Input("the window ends before it starts".into()));
        }
        for (i, (k, _)) in self.labels.iter().enumerate() {
            let mut chars = k.chars();
            let first_ok = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
            let rest_ok =
                chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (dots_allowed && c == '.'));
            if !first_ok || !rest_ok {
                return Err(PushError::Input(format!(
                    "label key {k:?}: keys are a letter or '_' followed by letters, digits or '_'"
                )));
            }
            if k == "__name__" || k == "service_name" {
                return Err(PushError::Input(format!(
                    "label key {k:?} is set by the push itself"
                )));
            }
            if self.labels[..i].iter().any(|(j, _)| j == k) {
                return Err(PushError::Input(format!("label key {k:?} given twice")));
            }
        }
        Ok(())
    }

    /// Start and end as nanoseconds since the epoch.
    pub(crate) fn span_nanos(&self) -> (u64, u64) {
        let ns = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_nanos()
                .min(u64::MAX as u128) as u64
        };
        (ns(self.start), ns(self.end))
    }
}

/// Sends windows to one target, waiting for each answer. Holds the connection (HTTP keep-alive, one gRPC
/// channel) between pushes.
pub struct Client {
    target: Target,
    timeout: Duration,
    http: Option<ureq::Agent>,
    grpc: Option<grpc::Conn>,
}

impl Client {
    /// A client for `target`; each push gives up after `timeout` (connecting included).
    pub fn new(target: Target, timeout: Duration) -> Client {
        Client {
            target,
            timeout,
            http: None,
            grpc: None,
        }
    }

    /// The target pushed to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Sends one window; `Ok` once the backend accepted it.
    pub fn push(&mut self, window: &Window) -> Result<(), PushError> {
        match self.target.protocol {
            Protocol::Pyroscope | Protocol::ParcaHttp | Protocol::OtlpHttp => {
                let agent = self.http.get_or_insert_with(|| http::agent(self.timeout));
                http::push(agent, &self.target, window)
            }
            Protocol::ParcaGrpc | Protocol::OtlpGrpc => {
                if self.grpc.is_none() {
                    self.grpc = Some(grpc::Conn::new(&self.target, self.timeout)?);
                }
                let conn = self.grpc.as_mut().expect("set above");
                let r = conn.push(&self.target, window);
                if matches!(r, Err(PushError::Transport(_))) {
                    // A fresh channel for the next attempt: this one may be wedged.
                    self.grpc = None;
                }
                r
            }
        }
    }
}
