//! The gRPC protocols: Parca's `WriteRaw` and the OTLP profiles `Export`, over tonic (rustls for TLS), each
//! call run to completion on a current-thread runtime owned by the pushing thread.

use std::time::Duration;

use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_client::ProfilesServiceClient;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::target::{Protocol, Target};
use crate::{PushError, Window, otlp, parca};

/// A runtime and a lazily connected channel to one target.
pub(crate) struct Conn {
    rt: tokio::runtime::Runtime,
    channel: Channel,
}

impl Conn {
    pub(crate) fn new(t: &Target, timeout: Duration) -> Result<Conn, PushError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PushError::Transport(format!("cannot start the gRPC runtime: {e}")))?;
        let uri = t.base();
        let mut ep = Endpoint::from_shared(uri.clone())
            .map_err(|e| PushError::Url(format!("{uri}: {e}")))?
            .connect_timeout(timeout)
            .timeout(timeout);
        if t.tls {
            let domain = t.host.trim_start_matches('[').trim_end_matches(']');
            ep = ep
                .tls_config(
                    ClientTlsConfig::new()
                        .with_webpki_roots()
                        .domain_name(domain),
                )
                .map_err(|e| PushError::Transport(format!("TLS for {uri}: {e}")))?;
        }
        // connect_lazy needs the runtime's context (it spawns the connection's task on it).
        let channel = {
            let _guard = rt.enter();
            ep.connect_lazy()
        };
        Ok(Conn { rt, channel })
    }

    pub(crate) fn push(&mut self, t: &Target, w: &Window) -> Result<(), PushError> {
        w.check(t.protocol == Protocol::OtlpGrpc)?;
        let auth = match t.auth.header() {
            Some(h) => Some(MetadataValue::try_from(h).map_err(|_| {
                PushError::Input("the credentials are not a valid header value".into())
            })?),
            None => None,
        };
        let channel = self.channel.clone();
        match t.protocol {
            Protocol::ParcaGrpc => {
                let mut req = tonic::Request::new(parca::request(w));
                if let Some(a) = auth {
                    req.metadata_mut().insert("authorization", a);
                }
                self.rt.block_on(async move {
                    let mut grpc = tonic::client::Grpc::new(channel);
                    grpc.ready()
                        .await
                        .map_err(|e| PushError::Transport(format!("{}: {e}", t.base())))?;
                    let path = PathAndQuery::from_static(
                        "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw",
                    );
                    let codec = tonic_prost::ProstCodec::<
                        parca::WriteRawRequest,
                        parca::WriteRawResponse,
                    >::default();
                    grpc.unary(req, path, codec)
                        .await
                        .map(|_| ())
                        .map_err(|s| status_error(t, s))
                })
            }
            Protocol::OtlpGrpc => {
                let mut req = tonic::Request::new(otlp::export_request(w)?);
                if let Some(a) = auth {
                    req.metadata_mut().insert("authorization", a);
                }
                self.rt.block_on(async move {
                    let resp = ProfilesServiceClient::new(channel)
                        .export(req)
                        .await
                        .map_err(|s| status_error(t, s))?;
                    otlp::check_partial(resp.get_ref())
                })
            }
            _ => unreachable!("HTTP protocols go through http.rs"),
        }
    }
}

/// A gRPC status as an error: a transport failure where the server was not reached, its refusal otherwise.
fn status_error(t: &Target, s: tonic::Status) -> PushError {
    use tonic::Code;
    let retryable = matches!(
        s.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Internal
            | Code::Unknown
    );
    // tonic reports a refused connection or a TLS failure as Unavailable with the transport's error as source.
    if s.code() == Code::Unavailable && s.message().contains("transport error") {
        return PushError::Transport(format!("{}: {}", t.base(), s.message()));
    }
    PushError::Rejected {
        status: format!("gRPC {:?}", s.code()),
        body: s.message().to_string(),
        retryable,
    }
}
