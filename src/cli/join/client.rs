//! `join`'s HTTPS client: ureq (HTTP/1.1, name lookup, each address in turn, deadlines, size
//! limit) over the link's rustls (ring), joined by a connector of ours because ureq's TLS settings
//! cannot hold a verifier: trust in one root or (step 1) in the handshake signatures alone.
//! No proxy, no redirects (a 3xx is just a status), no compression.

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
    StreamOwned,
};
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::time::{self, Instant};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, TcpConnector, Transport,
    TransportAdapter,
};

/// The most a response's head (status line and headers) may take.
const MAX_HEAD: usize = 64 * 1024;

/// Why an exchange failed, classified as the caller explains it.
#[derive(Debug)]
pub enum Error {
    /// The URL is not `https://HOST[:PORT][/PATH]`.
    Url(String),
    /// The host name does not resolve (or resolves to nothing).
    HostNotFound(io::Error),
    /// The connection or the overall deadline ran out.
    Timeout,
    /// The TLS handshake or record layer failed.
    Tls(rustls::Error),
    /// Any other socket error.
    Io(io::Error),
    /// The server's answer is not HTTP/1.x as read here, or is cut short.
    Response(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Error::Url(why) => write!(f, "bad URL: {why}"),
            Error::HostNotFound(e) => write!(f, "host not found: {e}"),
            Error::Timeout => write!(f, "timed out"),
            Error::Tls(e) => write!(f, "TLS: {e}"),
            Error::Io(e) => write!(f, "io: {e}"),
            Error::Response(why) => write!(f, "bad answer: {why}"),
        }
    }
}

/// Carried through ureq as its `Error::Other`, from the connector and the resolver.
impl std::error::Error for Error {}

impl Error {
    /// What ureq reports, told apart; `head`: while the status line and headers were awaited.
    fn from_ureq(e: ureq::Error, head: bool) -> Error {
        use ureq::Error as U;
        match e {
            U::Other(other) => match other.downcast::<Error>() {
                Ok(ours) => *ours,
                Err(other) => Error::Io(io::Error::other(other)),
            },
            U::BadUri(why) => Error::Url(why),
            U::Http(e) => Error::Url(e.to_string()),
            U::RequireHttpsOnly(url) => Error::Url(format!("{url:?} is not an https:// URL")),
            U::HostNotFound => Error::HostNotFound(io::Error::new(
                io::ErrorKind::NotFound,
                "the name has no address",
            )),
            U::Timeout(_) => Error::Timeout,
            U::Protocol(e) if head => {
                Error::Response(format!("no HTTP status line and headers ({e})"))
            }
            U::Protocol(e) => Error::Response(e.to_string()),
            U::LargeResponseHeader(_, most) => {
                Error::Response(format!("headers longer than {most} bytes"))
            }
            U::BodyExceedsLimit(most) => {
                Error::Response(format!("the body is over the {most} bytes allowed"))
            }
            // A close ureq saw, after TLS ended cleanly: the answer stops short of its framing.
            U::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => Error::Response(
                if head {
                    "no answer, or its headers cut short (the connection closed)"
                } else {
                    "the body is cut short (the connection closed)"
                }
                .into(),
            ),
            U::Io(e) => match e.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Error::Timeout,
                _ => Error::Io(e),
            },
            other => Error::Io(io::Error::other(other)),
        }
    }
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// One request: `POST` with `body` (JSON) when given, `GET` otherwise. Each address the host
/// resolves to is tried in turn within `connect_timeout`; the whole exchange ends by `timeout`.
/// A body over `max_body` bytes is an error, and so is one ended without TLS's close_notify.
pub fn request(
    url: &str,
    json_body: Option<&str>,
    root: Option<&CertificateDer<'static>>,
    connect_timeout: Duration,
    timeout: Duration,
    max_body: usize,
) -> Result<Response, Error> {
    let config = ureq::Agent::config_builder()
        .https_only(true)
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .user_agent(concat!("mesh-host/", env!("CARGO_PKG_VERSION")))
        .accept("application/json")
        .max_response_header_size(MAX_HEAD)
        .timeout_connect(Some(connect_timeout))
        .timeout_global(Some(timeout))
        .build();
    let connector = ().chain(TcpConnector::default()).chain(Tls(tls_config(root)?));
    let agent = ureq::Agent::with_parts(config, connector, Lookup::default());
    // One request a connection, as docs/protocol.md says.
    let response = match json_body {
        Some(body) => agent
            .post(url)
            .header("Connection", "close")
            .header("Content-Type", "application/json")
            .send(body),
        None => agent.get(url).header("Connection", "close").call(),
    }
    .map_err(|e| Error::from_ureq(e, true))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .into_with_config()
        .limit(u64::try_from(max_body).unwrap_or(u64::MAX))
        .read_to_vec()
        .map_err(|e| Error::from_ureq(e, false))?;
    Ok(Response { status, body })
}

/// Accepts any certificate (`join`'s first step trusts the CA by its hash alone) but still checks
/// that the server holds the key it presents (the handshake signatures).
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// The link's TLS versions with ring; trusting `root` alone, or (`None`) any certificate.
fn tls_config(root: Option<&CertificateDer<'static>>) -> Result<Arc<ClientConfig>, Error> {
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?;
    Ok(Arc::new(match root {
        Some(der) => {
            let mut roots = RootCertStore::empty();
            roots.add(der.clone()).map_err(Error::Tls)?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(algorithms)))
            .with_no_client_auth(),
    }))
}

/// ureq's name lookup, its failures told apart from the socket's.
#[derive(Debug, Default)]
struct Lookup(DefaultResolver);

impl Resolver for Lookup {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        self.0.resolve(uri, config, timeout).map_err(|e| match e {
            ureq::Error::Io(e) => ours(Error::HostNotFound(e)),
            e => e,
        })
    }
}

fn ours(e: Error) -> ureq::Error {
    ureq::Error::Other(Box::new(e))
}

/// A socket or TLS failure as ureq carries it: rustls's own errors kept whole.
fn socket_error(e: io::Error) -> ureq::Error {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => ours(Error::Tls(tls.clone())),
        None => ureq::Error::from(e),
    }
}

/// Wraps the TCP transport ureq connected in rustls with our config.
#[derive(Debug)]
struct Tls(Arc<ClientConfig>);

impl<In: Transport> Connector<In> for Tls {
    type Out = TlsTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<TlsTransport>, ureq::Error> {
        let Some(tcp) = chained else {
            return Err(ureq::Error::ConnectionFailed);
        };
        let host = details.uri.host().unwrap_or_default();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(bare.to_string())
            .map_err(|e| ours(Error::Url(format!("{host:?}: {e}"))))?;
        let mut conn =
            ClientConnection::new(self.0.clone(), name).map_err(|e| ours(Error::Tls(e)))?;
        let mut socket = TransportAdapter::new(tcp.boxed(), details.current_time.clone());
        socket.set_timeout(connect_left(details));
        conn.complete_io(&mut socket).map_err(socket_error)?;
        let config = details.config;
        Ok(Some(TlsTransport {
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
            stream: StreamOwned::new(conn, socket),
        }))
    }
}

/// The connect budget ureq gave, less what the TCP connect took.
fn connect_left(details: &ConnectionDetails) -> NextTimeout {
    let mut timeout = details.timeout;
    if let (time::Duration::Exact(after), Instant::Exact(now), Instant::Exact(start)) =
        (timeout.after, (details.current_time)(), details.now)
    {
        timeout.after =
            time::Duration::Exact(after.saturating_sub(now.saturating_duration_since(start)));
    }
    timeout
}

struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output).map_err(socket_error)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let n = self.stream.read(input).map_err(|e| match e.kind() {
            // ureq takes these for the end of a body that runs to the close; over TLS only
            // close_notify is that end, anything else may have cut the body short.
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted => ours(Error::Response(format!(
                "the connection ended without TLS close_notify ({}), so the answer may be cut \
                 short",
                e.kind()
            ))),
            _ => socket_error(e),
        })?;
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(e: ureq::Error, head: bool) -> String {
        Error::from_ureq(e, head).to_string()
    }

    #[test]
    fn ureq_errors_are_told_apart() {
        let ours = ours(Error::Response("the connection ended".into()));
        assert_eq!(told(ours, false), "bad answer: the connection ended");
        let limit = ureq::Error::BodyExceedsLimit(1 << 20);
        assert_eq!(
            told(limit, false),
            "bad answer: the body is over the 1048576 bytes allowed"
        );
        let closed = || ureq::Error::Io(io::ErrorKind::UnexpectedEof.into());
        assert!(told(closed(), true).contains("no answer, or its headers cut short"));
        assert!(told(closed(), false).contains("the body is cut short"));
        let timeout = ureq::Error::Timeout(ureq::Timeout::Connect);
        assert_eq!(told(timeout, true), "timed out");
        assert!(told(ureq::Error::HostNotFound, true).starts_with("host not found"));
        let refused = ureq::Error::Io(io::ErrorKind::ConnectionRefused.into());
        assert!(told(refused, true).starts_with("io: "));
    }
}
