//! Push URLs: the scheme names the protocol (`pyroscope+http`, `parca+grpcs`, `otlp+http`, ...), plus the
//! credentials to send with each push.

use crate::error::PushError;

/// The wire protocol a URL's scheme names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Grafana Pyroscope's `POST /ingest` (`pyroscope+http`, `pyroscope+https`).
    Pyroscope,
    /// Parca's `WriteRaw` through its REST gateway, `POST /api/profiles/writeraw` (`parca+http`, `parca+https`).
    ParcaHttp,
    /// Parca's `WriteRaw` over gRPC (`parca+grpc`, `parca+grpcs`).
    ParcaGrpc,
    /// An OTLP profiles export over HTTP, `POST /v1development/profiles` (`otlp+http`, `otlp+https`).
    OtlpHttp,
    /// An OTLP profiles export over gRPC (`otlp+grpc`, `otlp+grpcs`).
    OtlpGrpc,
}

/// Credentials sent with every push.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Auth {
    /// Nothing.
    #[default]
    None,
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// `Authorization: Basic base64(USER:PASSWORD)`.
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    // Never prints a secret (a Debug of a target may end up in a log).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(..)"),
            Auth::Basic { user, .. } => write!(f, "Basic({user}:..)"),
        }
    }
}

impl Auth {
    /// The `Authorization` header value, if any.
    pub(crate) fn header(&self) -> Option<String> {
        use base64::Engine as _;
        match self {
            Auth::None => None,
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::Basic { user, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
        }
    }
}

/// Where and how to push: a parsed push URL and its credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The protocol named by the scheme.
    pub protocol: Protocol,
    /// TLS (`+https`, `+grpcs`).
    pub tls: bool,
    /// Host name or address (an IPv6 address keeps its brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// A path prefix the backend is served under (`/pyroscope` in `pyroscope+http://h:4040/pyroscope`), without
    /// a trailing slash; empty for none.
    pub path: String,
    /// Credentials.
    pub auth: Auth,
}

impl Target {
    /// Parses `PROTOCOL+TRANSPORT://[USER:PASSWORD@]HOST:PORT[/PREFIX]`. Credentials in the URL become basic
    /// auth; [`Target::with_auth`] sets them otherwise. The port is required: the backends' defaults differ
    /// between their HTTP and gRPC listeners.
    pub fn parse(url: &str) -> Result<Target, PushError> {
        let bad = |why: &str| PushError::Url(format!("{url:?}: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("no scheme (e.g. pyroscope+http://HOST:PORT)"))?;
        let (protocol, tls) = match scheme.to_ascii_lowercase().as_str() {
            "pyroscope+http" => (Protocol::Pyroscope, false),
            "pyroscope+https" => (Protocol::Pyroscope, true),
            "parca+http" => (Protocol::ParcaHttp, false),
            "parca+https" => (Protocol::ParcaHttp, true),
            "parca+grpc" => (Protocol::ParcaGrpc, false),
            "parca+grpcs" => (Protocol::ParcaGrpc, true),
            "otlp+http" => (Protocol::OtlpHttp, false),
            "otlp+https" => (Protocol::OtlpHttp, true),
            "otlp+grpc" => (Protocol::OtlpGrpc, false),
            "otlp+grpcs" => (Protocol::OtlpGrpc, true),
            _ => {
                return Err(bad(
                    "unknown scheme; one of pyroscope+http(s), parca+http(s), parca+grpc(s), otlp+http(s), otlp+grpc(s)",
                ));
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if path.contains(['?', '#']) {
            return Err(bad("a query or fragment is not part of a push URL"));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = hostport
            .rsplit_once(':')
            .ok_or_else(|| bad("no port (HOST:PORT)"))?;
        if host.is_empty()
            || (host.contains(':') && !(host.starts_with('[') && host.ends_with(']')))
        {
            return Err(bad("no host, or an IPv6 address without brackets"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is not a number from 1 to 65535"))?;
        if port == 0 {
            return Err(bad("port 0"));
        }
        let auth = match userinfo {
            None => Auth::None,
            Some(u) => {
                let (user, password) = u.split_once(':').unwrap_or((u, ""));
                Auth::Basic {
                    user: user.to_string(),
                    password: password.to_string(),
                }
            }
        };
        Ok(Target {
            protocol,
            tls,
            host: host.to_string(),
            port,
            path: path.to_string(),
            auth,
        })
    }

    /// The same target with these credentials.
    pub fn with_auth(mut self, auth: Auth) -> Target {
        self.auth = auth;
        self
    }

    /// `http(s)://HOST:PORT/PREFIX`: the base every request path is appended to.
    pub(crate) fn base(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_name_protocol_and_tls() {
        let t = Target::parse("pyroscope+http://127.0.0.1:4040").unwrap();
        assert_eq!(
            (t.protocol, t.tls, t.host.as_str(), t.port),
            (Protocol::Pyroscope, false, "127.0.0.1", 4040)
        );
        let t = Target::parse("parca+grpcs://parca.example:443/").unwrap();
        assert_eq!(
            (t.protocol, t.tls, t.path.as_str()),
            (Protocol::ParcaGrpc, true, "")
        );
        let t = Target::parse("otlp+https://u:p%@[::1]:4318/prefix/").unwrap();
        assert_eq!(
            (t.protocol, t.tls, t.host.as_str(), t.path.as_str()),
            (Protocol::OtlpHttp, true, "[::1]", "/prefix")
        );
        assert_eq!(
            t.auth,
            Auth::Basic {
                user: "u".into(),
                password: "p%".into()
            }
        );
        assert_eq!(t.base(), "https://[::1]:4318/prefix");
    }

    #[test]
    fn bad_urls_say_why() {
        for (url, why) in [
            ("http://h:1", "unknown scheme"),
            ("pyroscope+http://h", "no port"),
            ("parca+grpc://h:x", "not a number"),
            ("otlp+grpc://:4317", "no host"),
            ("otlp+grpc://::1:4317", "IPv6"),
            ("otlp+http://h:4318/?a=b", "query"),
            ("pyroscope+http//h:1", "no scheme"),
        ] {
            let e = Target::parse(url).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn auth_headers_and_debug_hide_secrets() {
        assert_eq!(Auth::Bearer("t0k".into()).header().unwrap(), "Bearer t0k");
        let basic = Auth::Basic {
            user: "Aladdin".into(),
            password: "open sesame".into(),
        };
        assert_eq!(
            basic.header().unwrap(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert!(!format!("{basic:?}").contains("sesame"));
        assert!(!format!("{:?}", Auth::Bearer("t0k".into())).contains("t0k"));
    }
}
