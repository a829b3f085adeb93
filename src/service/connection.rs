//! One connection to the control plane: the mio socket, the rustls client session over it, and
//! the link state machine over that. This file only moves bytes between the three.

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::Interest;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::link::{Link, LinkError};
use crate::model::config::ControlPlane;
use crate::os::clock::Clock;

/// TLS settings trusting only the pinned CA (never the system's roots).
pub fn tls_config(cp: &ControlPlane) -> Result<Arc<ClientConfig>, String> {
    let ca = |e: &dyn std::fmt::Display| format!("control plane CA {}: {e}", cp.ca_file.display());
    let mut roots = RootCertStore::empty();
    let pem = crate::os::input::read_bounded(&cp.ca_file, crate::os::input::MAX_SMALL_INPUT)
        .map_err(|e| ca(&e))?;
    let certs: Vec<CertificateDer> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| ca(&e))?;
    if certs.is_empty() {
        return Err(ca(&"no certificate in the file"));
    }
    for cert in certs {
        roots.add(cert).map_err(|e| ca(&e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ca(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// How much of the link's output is handed to TLS at a time.
const WRITE_CHUNK: usize = 64 * 1024;
/// How long a closing host waits for the socket to take its last words (the `error` frame, TLS
/// close_notify or an alert). Bounded: the loop is blocked meanwhile.
const GOODBYE_MS: u64 = 1_000;

pub struct Connection {
    pub stream: TcpStream,
    tls: ClientConnection,
    pub link: Link,
    /// The goodbye was said; nothing more is sent.
    closed: bool,
    /// Bounds the goodbye's wait.
    clock: Clock,
}

impl Connection {
    /// Starts a non-blocking connect; the TLS handshake and the hello follow as the socket allows.
    pub fn open(
        cp: &ControlPlane,
        tls: Arc<ClientConfig>,
        link: Link,
        clock: Clock,
    ) -> Result<Connection, String> {
        let addr = cp
            .address
            .to_socket_addrs()
            .map_err(|e| format!("{}: {e}", cp.address))?
            .next()
            .ok_or_else(|| format!("{}: no address", cp.address))?;
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let name = ServerName::try_from(cp.server_name.clone())
            .map_err(|e| format!("server name {:?}: {e}", cp.server_name))?;
        let mut tls = ClientConnection::new(tls, name).map_err(|e| format!("TLS: {e}"))?;
        // The link has its own frame limit; rustls need not cap what is queued before the handshake.
        tls.set_buffer_limit(None);
        Ok(Connection {
            stream,
            tls,
            link,
            closed: false,
            clock,
        })
    }

    /// Reads all that is available and feeds it to the link. `Err` ends the connection.
    pub fn read(&mut self, now: u64) -> Result<(), String> {
        loop {
            match self.tls.read_tls(&mut self.stream) {
                Ok(0) => return Err("the control plane closed the connection".into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read: {e}")),
            }
            let state = match self.tls.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    // rustls queued the alert that says why (a refused certificate: UnknownCA).
                    self.flush(GOODBYE_MS);
                    return Err(format!("TLS: {e}"));
                }
            };
            let available = state.plaintext_bytes_to_read();
            if available > 0 {
                let mut buf = vec![0u8; available];
                self.tls
                    .reader()
                    .read_exact(&mut buf)
                    .map_err(|e| format!("TLS read: {e}"))?;
                if let Err(e) = self.link.handle_input(now, &buf) {
                    return Err(self.fail(now, e));
                }
            }
            if state.peer_has_closed() {
                return Err("the control plane closed the connection".into());
            }
        }
    }

    /// Moves what the link has to say into TLS and TLS records onto the socket, until it would
    /// block. TLS holds at most one chunk that the socket has not taken: a peer that stops
    /// reading leaves the rest queued in the link, never growing the host without bound.
    pub fn write(&mut self) -> Result<(), String> {
        loop {
            while self.tls.wants_write() {
                match self.tls.write_tls(&mut self.stream) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(format!("write: {e}")),
                }
            }
            // Before the handshake is done, plaintext would only pile up inside rustls.
            let pending = self.link.pending_output().len().min(WRITE_CHUNK);
            if pending == 0 || self.tls.is_handshaking() {
                return Ok(());
            }
            self.tls
                .writer()
                .write_all(&self.link.pending_output()[..pending])
                .map_err(|e| format!("TLS write: {e}"))?;
            self.link.consume_output(pending);
        }
    }

    /// What to wait for: always readable; writable while TLS has records queued.
    pub fn interest(&self) -> Interest {
        if self.tls.wants_write() {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        }
    }

    /// The link's heartbeat; a dead link gets a goodbye saying so.
    pub fn handle_timeout(&mut self, now: u64) -> Result<(), String> {
        self.link.handle_timeout(now).map_err(|e| self.fail(now, e))
    }

    /// The link failed: unless the control plane said why itself, it is told why (an `error`
    /// frame naming the problem) before the connection ends.
    fn fail(&mut self, now: u64, e: LinkError) -> String {
        let why = e.to_string();
        if !matches!(e, LinkError::Refused(_)) {
            self.close(now, &why);
        }
        why
    }

    /// Says goodbye: an `error` frame, then TLS close_notify, written within `GOODBYE_MS`. What the
    /// link still holds goes into TLS first: once close_notify is queued, TLS sends nothing more.
    pub fn close(&mut self, now: u64, why: &str) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        self.link.send_error(now, why);
        if !self.tls.is_handshaking() {
            let pending = self.link.pending_output().len();
            if self
                .tls
                .writer()
                .write_all(self.link.pending_output())
                .is_ok()
            {
                self.link.consume_output(pending);
            }
        }
        self.tls.send_close_notify();
        self.flush(GOODBYE_MS);
        // Unread input at close would make the kernel reset the connection, and a reset can
        // destroy the goodbye before the control plane reads it: FIN, then drain what is there.
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 16 * 1024];
        while matches!(self.stream.read(&mut sink), Ok(n) if n > 0) {}
    }

    /// Writes what TLS holds, waiting for the socket at most `within`.
    fn flush(&mut self, within_ms: u64) {
        let deadline = self.clock.mono_ms() + within_ms;
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.stream) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
            let left = deadline.saturating_sub(self.clock.mono_ms());
            if left == 0 {
                return;
            }
            let millis = left.clamp(1, 1000) as i32;
            let writable = crate::os::sys::Ready::Writable;
            let _ = crate::os::sys::wait_until(self.stream.as_raw_fd(), writable, millis);
        }
    }
}
