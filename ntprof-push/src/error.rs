//! What a push can fail with: a bad URL or input, a transport failure, or the backend's refusal with its answer.

use std::fmt;

/// Why a profile was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// The push URL cannot be used (unknown scheme, missing host or port, ...).
    Url(String),
    /// The profile or its labels cannot be sent as given (not a pprof profile, a label the backend cannot take).
    Input(String),
    /// The backend was not reached or did not answer (connection refused, timeout, TLS failure).
    Transport(String),
    /// The backend answered and refused the profile: its status and the body (or gRPC message) it sent.
    Rejected {
        /// The HTTP status (`"HTTP 400"`) or the gRPC code (`"gRPC InvalidArgument"`).
        status: String,
        /// The backend's own words.
        body: String,
        /// True where trying again may succeed (HTTP 408, 429, 5xx; gRPC Unavailable and the like).
        retryable: bool,
    },
}

impl PushError {
    /// True where the same push may succeed later: the backend was not reached, or it said so (overload).
    pub fn is_retryable(&self) -> bool {
        match self {
            PushError::Url(_) | PushError::Input(_) => false,
            PushError::Transport(_) => true,
            PushError::Rejected { retryable, .. } => *retryable,
        }
    }
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Url(m) => write!(f, "bad push URL: {m}"),
            PushError::Input(m) => write!(f, "cannot push this profile: {m}"),
            PushError::Transport(m) => write!(f, "backend not reached: {m}"),
            PushError::Rejected { status, body, .. } => {
                let body = body.trim();
                if body.is_empty() {
                    write!(f, "backend refused the profile: {status} (empty answer)")
                } else {
                    write!(f, "backend refused the profile: {status}: {body}")
                }
            }
        }
    }
}

impl std::error::Error for PushError {}

/// Whether an HTTP status is worth another attempt.
pub(crate) fn http_retryable(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}
