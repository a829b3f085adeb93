//! `join`'s HTTPS client: one HTTP/1.1 request per connection over `std::net::TcpStream` and the
//! link's rustls (ring). Written instead of a client crate: two requests do not earn one.
//! No proxy, no redirects (a 3xx is just a status), no keep-alive, no compression.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
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
    /// The server's answer is not HTTP/1.x as read here.
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

/// An I/O error, told apart: rustls reports its errors inside `io::Error`s.
fn classify(e: io::Error) -> Error {
    if let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return Error::Tls(tls.clone());
    }
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Error::Timeout,
        _ => Error::Io(e),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Names lowercased, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Where to connect, from `https://HOST[:PORT][/PATH]`.
#[derive(Debug, PartialEq, Eq)]
struct Url<'a> {
    /// Without brackets for an IPv6 literal.
    host: &'a str,
    port: u16,
    /// `HOST` or `HOST:PORT` as given, for the `Host` header.
    authority: &'a str,
    path: &'a str,
}

fn parse_url(url: &str) -> Result<Url<'_>, Error> {
    let bad = |why: &str| Error::Url(format!("{url:?} {why}"));
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| bad("is not an https:// URL"))?;
    if rest.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("has spaces or control characters"));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err(bad("has a user name"));
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| bad("has an unclosed '['"))?;
        (
            host,
            after.strip_prefix(':').or(after.is_empty().then_some("")),
        )
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, Some("")),
        }
    };
    let port = match port {
        Some("") => 443,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| bad("has a bad port"))?,
        None => return Err(bad("has text after ']'")),
    };
    if host.is_empty() {
        return Err(bad("names no host"));
    }
    Ok(Url {
        host,
        port,
        authority,
        path,
    })
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

/// TLS 1.2 or 1.3 with ring; trusting `root` alone, or (`None`) any certificate.
fn tls_config(root: Option<&CertificateDer<'static>>) -> Result<ClientConfig, Error> {
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?;
    Ok(match root {
        Some(der) => {
            let mut roots = RootCertStore::empty();
            roots.add(der.clone()).map_err(Error::Tls)?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(algorithms)))
            .with_no_client_auth(),
    })
}

/// The time left before `deadline`, or a timeout.
fn left(deadline: Instant) -> Result<Duration, Error> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(Error::Timeout)
}

/// The socket's read and write timeouts set to what is left before `deadline`.
fn arm(socket: &TcpStream, deadline: Instant) -> Result<(), Error> {
    let left = left(deadline)?;
    socket.set_read_timeout(Some(left)).map_err(classify)?;
    socket.set_write_timeout(Some(left)).map_err(classify)
}

/// One request: `POST` with `body` (JSON) when given, `GET` otherwise. Each address the host
/// resolves to is tried in turn within `connect_timeout`; the whole exchange ends by `timeout`.
/// A body over `max_body` bytes is an error.
pub fn request(
    url: &str,
    json_body: Option<&str>,
    root: Option<&CertificateDer<'static>>,
    connect_timeout: Duration,
    timeout: Duration,
    max_body: usize,
) -> Result<Response, Error> {
    let deadline = Instant::now() + timeout;
    let url = parse_url(url)?;
    let name = ServerName::try_from(url.host.to_string())
        .map_err(|e| Error::Url(format!("{:?}: {e}", url.host)))?;
    let config = Arc::new(tls_config(root)?);

    let addresses: Vec<_> = (url.host, url.port)
        .to_socket_addrs()
        .map_err(Error::HostNotFound)?
        .collect();
    if addresses.is_empty() {
        return Err(Error::HostNotFound(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} has no address", url.host),
        )));
    }
    let mut failure = Error::Timeout;
    let mut connected = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, connect_timeout.min(left(deadline)?)) {
            Ok(socket) => {
                connected = Some(socket);
                break;
            }
            Err(e) => failure = classify(e),
        }
    }
    let socket = connected.ok_or(failure)?;
    let tls = ClientConnection::new(config, name).map_err(Error::Tls)?;
    let mut stream = rustls::StreamOwned::new(tls, socket);

    let (method, extra) = match json_body {
        Some(body) => (
            "POST",
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ),
        ),
        None => ("GET", String::new()),
    };
    let head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: mesh-host/{}\r\nAccept: \
         application/json\r\n{extra}Connection: close\r\n\r\n",
        url.path,
        url.authority,
        env!("CARGO_PKG_VERSION")
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(json_body.unwrap_or_default().as_bytes());
    // Both: the handshake reads and writes while the request is written.
    arm(&stream.sock, deadline)?;
    stream.write_all(&out).map_err(classify)?;
    stream.flush().map_err(classify)?;

    let mut received = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        arm(&stream.sock, deadline)?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            // A peer closing without close_notify ends the stream as a close does: a body that
            // says its length is still checked whole below.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(classify(e)),
        };
        received.extend_from_slice(&chunk[..n]);
        if let Some(response) =
            parse_response(&received, n == 0, max_body).map_err(Error::Response)?
        {
            return Ok(response);
        }
        if n == 0 {
            return Err(Error::Response("the connection closed early".into()));
        }
    }
}

/// How the body ends.
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// The response in `bytes`, if all of it is there (`Ok(None)`: read more). `eof`: nothing more
/// will come, so a close-delimited body is complete and anything short is truncated.
pub fn parse_response(
    bytes: &[u8],
    eof: bool,
    max_body: usize,
) -> Result<Option<Response>, String> {
    // Framing (chunk sizes, extensions, trailers) may not stretch the answer without bound.
    let most = MAX_HEAD + 2 * max_body;
    if bytes.len() > most {
        return Err(format!("the answer is over {most} bytes"));
    }
    let mut start = 0;
    loop {
        let rest = &bytes[start..];
        let Some(end) = find(rest, b"\r\n\r\n") else {
            if rest.len() > MAX_HEAD {
                return Err(format!("headers longer than {MAX_HEAD} bytes"));
            }
            if eof {
                return Err(if rest.is_empty() {
                    "no answer (the connection closed)".into()
                } else {
                    "the headers are cut short".into()
                });
            }
            return Ok(None);
        };
        if end > MAX_HEAD {
            return Err(format!("headers longer than {MAX_HEAD} bytes"));
        }
        let head = std::str::from_utf8(&rest[..end]).map_err(|_| "headers are not text")?;
        let mut lines = head.split("\r\n");
        let status = parse_status(lines.next().unwrap_or_default())?;
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .filter(|(name, _)| !name.is_empty() && !name.contains([' ', '\t']))
                .ok_or_else(|| format!("bad header line {line:?}"))?;
            headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
        }
        let body_at = start + end + 4;
        // An interim answer (100 Continue and the like) precedes the real one.
        if (100..200).contains(&status) && status != 101 {
            start = body_at;
            continue;
        }
        let body = &bytes[body_at..];
        let framing = framing(status, &headers)?;
        let body = match framing {
            Framing::Length(n) if n > max_body => {
                return Err(format!(
                    "the body is {n} bytes, over the {max_body} allowed"
                ))
            }
            Framing::Length(n) if body.len() >= n => body[..n].to_vec(),
            Framing::Length(n) if eof => {
                return Err(format!(
                    "the body is cut short ({} of {n} bytes)",
                    body.len()
                ))
            }
            Framing::Length(_) => return Ok(None),
            Framing::Chunked => match dechunk(body, max_body)? {
                Some(body) => body,
                None if eof => return Err("the chunked body is cut short".into()),
                None => return Ok(None),
            },
            Framing::Close if body.len() > max_body => {
                return Err(format!("the body is over the {max_body} bytes allowed"))
            }
            Framing::Close if eof => body.to_vec(),
            Framing::Close => return Ok(None),
        };
        return Ok(Some(Response {
            status,
            headers,
            body,
        }));
    }
}

/// `HTTP/1.x NNN reason`.
fn parse_status(line: &str) -> Result<u16, String> {
    let bad = || format!("no HTTP status line (got {:?})", truncate(line));
    let rest = line.strip_prefix("HTTP/1.").ok_or_else(bad)?;
    let mut parts = rest.splitn(3, ' ');
    let minor = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if minor.len() != 1 || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    code.parse::<u16>()
        .ok()
        .filter(|c| (100..600).contains(c))
        .ok_or_else(bad)
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

fn framing(status: u16, headers: &[(String, String)]) -> Result<Framing, String> {
    if status == 204 || status == 304 {
        return Ok(Framing::Length(0));
    }
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some(last) = values("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .rfind(|c| !c.is_empty())
    {
        // RFC 9112 6.3: chunked last frames the body; any other coding runs to the close.
        return Ok(if last.eq_ignore_ascii_case("chunked") {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    let mut length = None;
    for value in values("content-length")
        .flat_map(|v| v.split(','))
        .map(str::trim)
    {
        let n = value
            .parse::<usize>()
            .ok()
            .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("bad Content-Length {value:?}"))?;
        if length.is_some_and(|l| l != n) {
            return Err("conflicting Content-Length headers".into());
        }
        length = Some(n);
    }
    Ok(length.map_or(Framing::Close, Framing::Length))
}

/// The body of a chunked encoding, if all of it (through the trailers) is in `bytes`.
fn dechunk(bytes: &[u8], max_body: usize) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = find(&bytes[at..], b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&bytes[at..at + eol]).map_err(|_| "bad chunk size line")?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .ok()
            .filter(|_| !size.is_empty() && size.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| format!("bad chunk size {:?}", truncate(line)))?;
        at += eol + 2;
        if size == 0 {
            // Trailer lines (ignored) up to an empty one.
            loop {
                let Some(eol) = find(&bytes[at..], b"\r\n") else {
                    return Ok(None);
                };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some(body));
                }
            }
        }
        if body.len().saturating_add(size) > max_body {
            return Err(format!("the body is over the {max_body} bytes allowed"));
        }
        let Some(data) = bytes.get(at..at + size + 2) else {
            return Ok(None);
        };
        if !data.ends_with(b"\r\n") {
            return Err("a chunk does not end with CRLF".into());
        }
        body.extend_from_slice(&data[..size]);
        at += size + 2;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1024;

    fn complete(bytes: &[u8], eof: bool) -> Response {
        match parse_response(bytes, eof, MAX) {
            Ok(Some(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    fn error(bytes: &[u8], eof: bool) -> String {
        match parse_response(bytes, eof, MAX) {
            Err(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn content_length_frames_the_body() {
        let bytes =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-LENGTH: 2\r\n\r\n{}";
        let r = complete(bytes, false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"{}");
        assert_eq!(
            r.headers[0],
            ("content-type".into(), "application/json".into())
        );
        // Short of the length: read more, then truncated at the close.
        assert_eq!(
            parse_response(&bytes[..bytes.len() - 1], false, MAX),
            Ok(None)
        );
        assert!(error(&bytes[..bytes.len() - 1], true).contains("cut short (1 of 2 bytes)"));
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            4;name=value\r\n{\"a\"\r\nB\r\n: \"bcdefg\"}\r\n0\r\nX-Trailer: yes\r\n\r\n";
        assert_eq!(complete(bytes, false).body, b"{\"a\": \"bcdefg\"}");
        for cut in [60, bytes.len() - 2] {
            assert_eq!(parse_response(&bytes[..cut], false, MAX), Ok(None), "{cut}");
            assert!(error(&bytes[..cut], true).contains("chunked body is cut short"));
        }
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(error(bad, false).contains("bad chunk size \"zz\""));
    }

    #[test]
    fn without_a_length_the_body_runs_to_the_close() {
        let bytes = b"HTTP/1.0 500 Internal Server Error\r\n\r\noops";
        assert_eq!(parse_response(bytes, false, MAX), Ok(None));
        let r = complete(bytes, true);
        assert_eq!((r.status, r.body.as_slice()), (500, b"oops".as_slice()));
    }

    #[test]
    fn interim_answers_are_skipped() {
        let bytes = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 302 Found\r\nLocation: /x\r\n\
            Content-Length: 0\r\n\r\n";
        assert_eq!(complete(bytes, false).status, 302);
    }

    #[test]
    fn a_body_over_the_limit_is_an_error() {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", MAX + 1);
        assert!(error(head.as_bytes(), false).contains("over the 1024 allowed"));
        let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        chunked.extend_from_slice(format!("{:x}\r\n", MAX + 1).as_bytes());
        assert!(error(&chunked, false).contains("over the 1024 bytes allowed"));
        let mut stretched = chunked.clone();
        stretched.extend_from_slice(b"1;");
        stretched.extend(std::iter::repeat_n(b'x', MAX_HEAD + 2 * MAX));
        assert!(error(&stretched, false).contains("the answer is over"));
        let mut closed = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        closed.extend(std::iter::repeat_n(b'x', MAX + 1));
        assert!(error(&closed, false).contains("over the 1024 bytes allowed"));
    }

    #[test]
    fn a_malformed_status_line_is_an_error() {
        for bytes in [
            &b"SSH-2.0-OpenSSH_9.6\r\n\r\n"[..],
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/2 200\r\n\r\n",
            b"HTTP/1.1 999 What\r\n\r\n",
        ] {
            assert!(
                error(bytes, false).contains("no HTTP status line"),
                "{bytes:?}"
            );
        }
        assert!(error(b"", true).contains("no answer"));
        assert!(error(b"HTTP/1.1 200 OK\r\nCont", true).contains("headers are cut short"));
        let bad_header = b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n";
        assert!(error(bad_header, false).contains("bad header line"));
        let conflict = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert!(error(conflict, false).contains("conflicting"));
    }

    #[test]
    fn urls() {
        let url = parse_url("https://cp.example").map_err(|e| e.to_string());
        let want = Url {
            host: "cp.example",
            port: 443,
            authority: "cp.example",
            path: "/",
        };
        assert_eq!(url.as_ref().ok(), Some(&want));
        let url = parse_url("https://[::1]:8443/v1/ca").map_err(|e| e.to_string());
        let want = Url {
            host: "::1",
            port: 8443,
            authority: "[::1]:8443",
            path: "/v1/ca",
        };
        assert_eq!(url.as_ref().ok(), Some(&want));
        for (url, why) in [
            ("http://cp:1/", "is not an https:// URL"),
            ("ftp://cp", "is not an https:// URL"),
            ("https://cp:0/", "bad port"),
            ("https://cp:x/", "bad port"),
            ("https://u@cp/", "user name"),
            ("https://[::1/", "unclosed"),
            ("https://:443/", "names no host"),
            ("https://cp/a b", "spaces"),
        ] {
            match parse_url(url) {
                Err(Error::Url(e)) => assert!(e.contains(why), "{url}: {e}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
