//! A reference control plane for the link protocol (docs/protocol.md): std threads and blocking
//! rustls, one thread per connection. It checks the hello, pushes declarations, acks and keeps
//! reports; or, for hostile-peer tests, misbehaves in one of the ways `Behaviour` names. Messages
//! are plain `serde_json::Value`s so that it shares no code with the host it tests. A second
//! listener serves the join exchange (HTTPS, minimal HTTP/1.1 by hand): one-time tokens for node
//! identities, which the link then accepts alongside the configured node.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};
use serde_json::{json, Value};

use super::pki::Pki;

/// The largest frame the control plane reads; a longer one drops the link.
pub const MAX_FRAME: usize = 16 << 20;
/// How often a connection thread looks for declarations to push and for `stop`.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Behaviour {
    Normal,
    /// After the hello: a frame header for 64 bytes, then 64 bytes that are not JSON.
    Garbage,
    /// After the hello: a length prefix of 0xFFFFFFF0, then nothing.
    OversizedFrame,
    /// After the hello: a length of 100 and 10 bytes of body, then silence (connection open).
    HalfFrameThenSilence,
    /// Reads the hello, then never writes nor reads (no welcome, no pong).
    Silent,
}

impl Behaviour {
    /// Every behaviour but `Normal`: what the hostile-peer tests go through.
    pub const HOSTILE: [Behaviour; 4] = [
        Behaviour::Garbage,
        Behaviour::OversizedFrame,
        Behaviour::HalfFrameThenSilence,
        Behaviour::Silent,
    ];
}

#[derive(Debug, Clone)]
pub struct CpConfig {
    /// `None`: 127.0.0.1 on a free port. A stopped control plane's `addr()` brings it back there.
    pub bind: Option<SocketAddr>,
    pub node: String,
    pub secret: String,
    pub behaviour: Behaviour,
    /// Print each report as one JSON line to stdout, and connections and hellos to stderr.
    pub verbose: bool,
    /// Where the join endpoint listens; `None`: 127.0.0.1 on a free port.
    pub join_bind: Option<SocketAddr>,
    /// No byte from a host for this long and it is dead: the link is dropped (docs/protocol.md:
    /// three of the host's heartbeats; 90 s for the default 30 s).
    pub liveness: Duration,
    /// How many hosts it knows beyond the links it has seen (its registry): the reconnect
    /// policy it sends follows the larger.
    pub fleet_size: usize,
}

impl CpConfig {
    pub fn new(node: &str, secret: &str) -> CpConfig {
        CpConfig {
            bind: None,
            node: node.into(),
            secret: secret.into(),
            behaviour: Behaviour::Normal,
            verbose: false,
            join_bind: None,
            liveness: Duration::from_secs(90),
            fleet_size: 0,
        }
    }
}

#[derive(Default)]
struct State {
    stopped: bool,
    /// The declaration in force: pushed to every host that holds an older revision.
    declaration: Option<(u64, String)>,
    /// Declarations sent once to every welcomed host whatever its revision (`send_declare`).
    forced: Vec<(u64, String)>,
    /// Reports are recorded but not acked (`hold_acks`): the host's pending declaration is not
    /// confirmed.
    acks_held: bool,
    /// The `confirm_secs` every `declare` carries, when set (`set_confirm_secs`).
    confirm_secs: Option<u64>,
    reports: Vec<Value>,
    hellos: Vec<Value>,
    /// The facts a host sent last (in its hello, or a later report that carried them), by node.
    facts: BTreeMap<String, Value>,
    connection_times: Vec<Instant>,
    /// One-time join tokens: token, expiry, used.
    tokens: Vec<(String, Instant, bool)>,
    /// Identities handed out by joins: (node, secret); the link accepts them.
    joined: Vec<(String, String)>,
    /// Every join request's body, answered or not.
    join_requests: Vec<Value>,
    /// The longest time any host went without sending a byte on an open link.
    longest_silence: Duration,
    /// Links dropped because the host was silent beyond `liveness`.
    dead_hosts: usize,
    /// Why each connection ended, as this side saw it: `the host closes: "why"` for a host's
    /// `error` frame, the TLS error (an alert the host sent) or `end of stream`.
    ends: Vec<String>,
    /// Clones of the open connections' sockets, by connection number, shut down by `stop`.
    sockets: Vec<(usize, TcpStream)>,
    /// The most links open at once: with the identities it knows, how many hosts it has.
    peak_links: usize,
    threads: Vec<JoinHandle<()>>,
}

struct Shared {
    config: CpConfig,
    state: Mutex<State>,
    /// Notified on every change of `state`.
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.lock());
        self.changed.notify_all();
        out
    }
}

pub struct ControlPlane {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    join_addr: SocketAddr,
    join_acceptor: Option<JoinHandle<()>>,
    ca_pem: String,
}

impl ControlPlane {
    pub fn start(pki: &Pki, config: CpConfig) -> ControlPlane {
        let bind = config.bind.unwrap_or_else(|| ([127, 0, 0, 1], 0).into());
        // std sets SO_REUSEADDR on Unix: a restart can bind a port left in TIME_WAIT.
        let listener = TcpListener::bind(bind).unwrap_or_else(|e| panic!("bind {bind}: {e}"));
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let tls = pki.server_config();
        let join_bind = shared
            .config
            .join_bind
            .unwrap_or_else(|| ([127, 0, 0, 1], 0).into());
        let join_listener =
            TcpListener::bind(join_bind).unwrap_or_else(|e| panic!("bind {join_bind}: {e}"));
        let join_addr = join_listener.local_addr().expect("local address");
        let join_acceptor = {
            let (shared, tls, ca_pem) = (shared.clone(), tls.clone(), pki.ca_pem.clone());
            std::thread::spawn(move || accept_joins(join_listener, tls, shared, addr, ca_pem))
        };
        let acceptor = {
            let shared = shared.clone();
            std::thread::spawn(move || accept(listener, tls, shared))
        };
        ControlPlane {
            addr,
            shared,
            acceptor: Some(acceptor),
            join_addr,
            join_acceptor: Some(join_acceptor),
            ca_pem: pki.ca_pem.clone(),
        }
    }

    /// Where the join endpoint listens: `https://{join_addr}` is `join --control-plane`.
    pub fn join_addr(&self) -> SocketAddr {
        self.join_addr
    }

    /// `sha256:HEX` of the CA's DER encoding: what `join --ca-hash` takes.
    pub fn ca_hash(&self) -> String {
        ca_hash(&self.ca_pem)
    }

    /// `mesh-host join` of this control plane with `token`, then `extra`: the whole command line.
    pub fn join_command(&self, token: &str, extra: &[&str]) -> Vec<String> {
        let mut args = vec![
            "join".to_string(),
            "--control-plane".into(),
            format!("https://{}", self.join_addr()),
            "--token".into(),
            token.into(),
            "--ca-hash".into(),
            self.ca_hash(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    /// Issues `token`, good for one join within `ttl`.
    pub fn add_token(&self, token: &str, ttl: Duration) {
        self.shared.update(|s| {
            s.tokens
                .push((token.to_string(), Instant::now() + ttl, false))
        });
    }

    /// The identities handed out by joins, in order: (node, secret).
    pub fn joined(&self) -> Vec<(String, String)> {
        self.shared.lock().joined.clone()
    }

    /// Every join request's JSON body (answered or refused).
    pub fn join_requests(&self) -> Vec<Value> {
        self.shared.lock().join_requests.clone()
    }

    /// Waits until a hello from `node` has arrived.
    pub fn wait_for_hello(&self, node: &str, timeout: Duration) -> bool {
        self.wait_state(timeout, |s| s.hellos.iter().any(|h| h["node"] == node))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Makes `revision` the declaration in force and pushes it to every host holding an older one
    /// (and, later, to every host whose hello names an older one). `text` is relayed as it is, a
    /// plain declaration or a signed envelope: this control plane holds no key, never looks inside.
    pub fn declare(&self, revision: u64, text: &str) {
        self.shared
            .update(|s| s.declaration = Some((revision, text.to_string())));
    }

    /// Sends a `declare` once to every host connected now or later, whatever its revision (to
    /// make a host ignore or reject one); the declaration in force does not change.
    pub fn send_declare(&self, revision: u64, text: &str) {
        self.shared
            .update(|s| s.forced.push((revision, text.to_string())));
    }

    /// With `hold`, reports are recorded but no longer acked: a declaration pushed meanwhile
    /// stays pending on the host, and is reverted once its window passes.
    pub fn hold_acks(&self, hold: bool) {
        self.shared.update(|s| s.acks_held = hold);
    }

    /// Every `declare` sent from now on carries `confirm_secs` (None: none, the host's own).
    pub fn set_confirm_secs(&self, secs: Option<u64>) {
        self.shared.update(|s| s.confirm_secs = secs);
    }

    /// Every report received, in order of arrival, one per `id`.
    pub fn reports(&self) -> Vec<Value> {
        self.shared.lock().reports.clone()
    }

    /// Every hello received, accepted or not.
    pub fn hellos(&self) -> Vec<Value> {
        self.shared.lock().hellos.clone()
    }

    /// What `node` last said it is: its hello's facts, or a later report's (null if none).
    pub fn facts(&self, node: &str) -> Value {
        let state = self.shared.lock();
        state.facts.get(node).cloned().unwrap_or(Value::Null)
    }

    /// The longest any host was silent on an open link (a busy host keeps answering).
    pub fn longest_silence(&self) -> Duration {
        self.shared.lock().longest_silence
    }

    /// Links the control plane dropped because their host was silent beyond `liveness`.
    pub fn dead_hosts(&self) -> usize {
        self.shared.lock().dead_hosts
    }

    /// Why each connection ended, in order (see `State::ends`).
    pub fn ends(&self) -> Vec<String> {
        self.shared.lock().ends.clone()
    }

    /// Waits until a connection has ended for a reason that contains `text`.
    pub fn wait_for_end(&self, text: &str, timeout: Duration) -> bool {
        self.wait_state(timeout, |s| s.ends.iter().any(|e| e.contains(text)))
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.lock().connection_times.len()
    }

    /// When each TCP connection was accepted (the example prints them).
    #[allow(dead_code)] // examples/control-plane.rs's alone
    pub fn connection_times(&self) -> Vec<Instant> {
        self.shared.lock().connection_times.clone()
    }

    /// Waits until `done(reports)` holds; false if it still does not after `timeout`.
    pub fn wait_for(&self, done: impl Fn(&[Value]) -> bool, timeout: Duration) -> bool {
        self.wait_state(timeout, |s| done(&s.reports))
    }

    /// Waits until at least `n` TCP connections have been accepted.
    pub fn wait_for_connections(&self, n: usize, timeout: Duration) -> bool {
        self.wait_state(timeout, |s| s.connection_times.len() >= n)
    }

    fn wait_state(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.lock();
        while !done(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Closes the listener and every connection at once, like a crash (no TLS close_notify).
    /// When it returns the port is free to bind again.
    pub fn stop(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.shared.update(|s| s.stopped = true);
        // Wake the acceptor blocked in accept(); it sees `stopped` and drops the listener.
        let _ = TcpStream::connect(self.addr);
        let _ = acceptor.join();
        if let Some(join_acceptor) = self.join_acceptor.take() {
            let _ = TcpStream::connect(self.join_addr);
            let _ = join_acceptor.join();
        }
        let threads = self.shared.update(|s| {
            for (_, socket) in s.sockets.drain(..) {
                let _ = socket.shutdown(Shutdown::Both);
            }
            std::mem::take(&mut s.threads)
        });
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept(listener: TcpListener, tls: Arc<rustls::ServerConfig>, shared: Arc<Shared>) {
    for tcp in listener.incoming() {
        let Ok(tcp) = tcp else { continue };
        let mut state = shared.lock();
        if state.stopped {
            return;
        }
        let (Ok(clone), Ok(())) = (tcp.try_clone(), tcp.set_read_timeout(Some(POLL))) else {
            continue;
        };
        let Ok(tls) = ServerConnection::new(tls.clone()) else {
            continue;
        };
        let id = state.connection_times.len();
        state.sockets.push((id, clone));
        state.peak_links = state.peak_links.max(state.sockets.len());
        state.connection_times.push(Instant::now());
        if shared.config.verbose {
            eprintln!(
                "connection from {}",
                tcp.peer_addr().map_or("?".into(), |a| a.to_string())
            );
        }
        let conn = Conn {
            id,
            tls: StreamOwned::new(tls, tcp),
            inbound: Vec::new(),
            shared: shared.clone(),
            last_byte: Instant::now(),
        };
        state.threads.push(std::thread::spawn(move || conn.serve()));
        shared.changed.notify_all();
    }
}

/// Why a connection ends (only reported on stderr, when verbose).
type End = String;
const STOPPED: &str = "stopped";

struct Conn {
    id: usize,
    tls: StreamOwned<ServerConnection, TcpStream>,
    inbound: Vec<u8>,
    shared: Arc<Shared>,
    /// When the host last sent a byte: how the control plane tells a live host from a dead one.
    last_byte: Instant,
}

impl Conn {
    fn serve(mut self) {
        let result = self
            .hello()
            .and_then(|hello| match self.shared.config.behaviour {
                Behaviour::Normal => self.normal(hello),
                Behaviour::Garbage => {
                    let mut bytes = vec![0, 0, 0, 64];
                    let mut x: u32 = 0x9e37_79b9;
                    for _ in 0..64 {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        bytes.push(0x80 | x as u8); // never a byte JSON can start with
                    }
                    self.write_raw(&bytes)?;
                    self.listen()
                }
                Behaviour::OversizedFrame => {
                    self.write_raw(&0xFFFF_FFF0u32.to_be_bytes())?;
                    self.listen()
                }
                Behaviour::HalfFrameThenSilence => {
                    self.write_raw(&[
                        0, 0, 0, 100, b'{', b'"', b't', b'y', b'p', b'e', b'"', b':', b' ', b'"',
                    ])?;
                    self.listen()
                }
                Behaviour::Silent => self.idle(),
            });
        let why = result.err().unwrap_or_default();
        if why != STOPPED {
            self.linger_close();
        }
        self.shared.update(|s| s.ends.push(why.clone()));
        if self.shared.config.verbose {
            eprintln!("connection {} closed: {why}", self.id);
        }
        self.shared
            .update(|s| s.sockets.retain(|(id, _)| *id != self.id));
    }

    /// The reconnect policy for the hosts this control plane knows (docs/protocol.md,
    /// "Reconnecting"), sent in the welcome and in every pong so hosts that came early in a
    /// growing fleet learn the newer one.
    fn reconnect_policy(&self) -> Value {
        let hosts = {
            let s = self.shared.lock();
            let identities = usize::from(!self.shared.config.node.is_empty()) + s.joined.len();
            s.peak_links
                .max(identities)
                .max(self.shared.config.fleet_size)
        };
        let (base_ms, cap_ms) = reconnect_policy(hosts);
        json!({"base_ms": base_ms, "cap_ms": cap_ms})
    }

    /// Waits for the first frame, which must be a hello, and records it.
    fn hello(&mut self) -> Result<Value, End> {
        let hello = loop {
            if let Some(message) = self.poll()? {
                break message;
            }
        };
        if hello["type"] != "hello" {
            return self.refuse(&format!("expected hello, got {}", hello["type"]));
        }
        if self.shared.config.verbose {
            eprintln!("hello: {hello}");
        }
        self.shared.update(|s| {
            s.hellos.push(hello.clone());
            if let (Some(node), Some(facts)) = (hello["node"].as_str(), hello.get("facts")) {
                s.facts.insert(node.to_string(), facts.clone());
            }
        });
        Ok(hello)
    }

    fn normal(&mut self, hello: Value) -> Result<(), End> {
        let shared = self.shared.clone();
        let config = &shared.config;
        let is = |node: &str, secret: &str| {
            !node.is_empty() && hello["node"] == node && hello["secret"] == secret
        };
        let known_node =
            is(&config.node, &config.secret) || shared.lock().joined.iter().any(|(n, s)| is(n, s));
        if !known_node {
            return self.refuse("bad credentials");
        }
        self.send(&json!({"type": "welcome", "reconnect": self.reconnect_policy()}))?;
        let node = hello["node"].as_str().unwrap_or_default().to_string();
        let mut known = hello["revision"].as_u64();
        let mut forced_sent = 0;
        loop {
            let (newer, forced, confirm_secs) = {
                let s = shared.lock();
                let newer = s.declaration.clone().filter(|(r, _)| known < Some(*r));
                (newer, s.forced[forced_sent..].to_vec(), s.confirm_secs)
            };
            forced_sent += forced.len();
            for (revision, text) in newer.into_iter().chain(forced) {
                let mut declare = json!({"type": "declare", "revision": revision});
                if let Some(secs) = confirm_secs {
                    declare["confirm_secs"] = json!(secs);
                }
                // The head, then the declaration's bytes as a frame of their own.
                self.send(&declare)?;
                self.send_bytes(text.as_bytes())?;
                known = known.max(Some(revision));
            }
            let Some(message) = self.poll()? else {
                continue;
            };
            match message["type"].as_str() {
                Some("ping") => {
                    self.send(&json!({"type": "pong", "reconnect": self.reconnect_policy()}))?
                }
                Some("pong") => {}
                Some("report") => {
                    let Some(id) = message["id"].as_u64() else {
                        return self.refuse("a report without an id");
                    };
                    if config.verbose {
                        println!("{message}");
                    }
                    shared.update(|s| {
                        if !s.reports.iter().any(|r| r["id"] == id) {
                            s.reports.push(message.clone());
                        }
                        if let Some(facts) = message.get("facts") {
                            s.facts.insert(node.clone(), facts.clone());
                        }
                    });
                    if !shared.lock().acks_held {
                        self.send(&json!({"type": "ack", "id": id}))?;
                    }
                }
                Some("error") => return Err(format!("the host closes: {}", message["message"])),
                _ => return self.refuse(&format!("unexpected message {}", message["type"])),
            }
        }
    }

    /// After misbehaving: writes nothing more and reads what the host says until it closes (its
    /// `error` frame ends the connection with the host's reason).
    fn listen(&mut self) -> Result<(), End> {
        loop {
            if let Some(message) = self.poll()? {
                if message["type"] == "error" {
                    return Err(format!("the host closes: {}", message["message"]));
                }
            }
        }
    }

    /// Holds the connection open, reading and writing nothing, until `stop`.
    fn idle(&mut self) -> Result<(), End> {
        let mut state = self.shared.lock();
        while !state.stopped {
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        Err(STOPPED.into())
    }

    /// The next message, `Ok(None)` if none came within `POLL`, `Err` when the link is over.
    fn poll(&mut self) -> Result<Option<Value>, End> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            if self.shared.lock().stopped {
                return Err(STOPPED.into());
            }
            if let Some(header) = self.inbound.get(..4) {
                let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
                let length = length as usize;
                if length > MAX_FRAME {
                    return self.refuse(&format!("frame of {length} bytes, over {MAX_FRAME}"));
                }
                if self.inbound.len() >= 4 + length {
                    let frame: Vec<u8> = self.inbound.drain(..4 + length).collect();
                    return match serde_json::from_slice::<Value>(&frame[4..]) {
                        Ok(message) if message.is_object() => Ok(Some(message)),
                        _ => self.refuse("a frame that is not a JSON object"),
                    };
                }
            }
            match self.tls.read(&mut buf) {
                Ok(0) => return Err("end of stream".into()),
                Ok(n) => {
                    self.heard();
                    self.inbound.extend_from_slice(&buf[..n]);
                }
                Err(e) if is_timeout(&e) => {
                    let silent = self.last_byte.elapsed();
                    if silent > self.shared.config.liveness {
                        self.shared.update(|s| s.dead_hosts += 1);
                        return self.refuse(&format!(
                            "no bytes from the host for {} ms: it is dead",
                            silent.as_millis()
                        ));
                    }
                    return Ok(None);
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Bytes came from the host: the silence before them counts towards the longest.
    fn heard(&mut self) {
        let silent = self.last_byte.elapsed();
        self.last_byte = Instant::now();
        let mut state = self.shared.lock();
        if silent > state.longest_silence {
            state.longest_silence = silent;
        }
    }

    /// Ends the link gracefully for the peer: our last bytes, then FIN, and what the peer still
    /// sends is read (for up to 2 s) so that closing does not reset the connection under them.
    fn linger_close(&mut self) {
        let _ = self.tls.sock.shutdown(Shutdown::Write);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            match self.tls.sock.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(_) => return,
            }
        }
    }

    fn send(&mut self, message: &Value) -> Result<(), End> {
        self.send_bytes(message.to_string().as_bytes())
    }

    /// One frame of `body`: a message's JSON, or a declaration's bytes after its `declare`.
    fn send_bytes(&mut self, body: &[u8]) -> Result<(), End> {
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        self.write_raw(&frame)
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Result<(), End> {
        self.tls
            .write_all(bytes)
            .and_then(|()| self.tls.flush())
            .map_err(|e| e.to_string())
    }

    /// Sends `error` with `why` and ends the connection.
    fn refuse<T>(&mut self, why: &str) -> Result<T, End> {
        self.send(&json!({"type": "error", "message": why}))?;
        Err(why.to_string())
    }
}

/// How many hosts a second a small fleet comes back at after a restart (its base is
/// `hosts / RECONNECTS_PER_SECOND`): from 300 hosts up the base stays at `MAX_BASE_MS`.
pub const RECONNECTS_PER_SECOND: u64 = 6;

/// The largest base sent: a fleet is back within its base of the control plane's return (the
/// ceiling doubles only once a host waited through it), so this keeps every host back within a
/// minute with 10 s to spare; it is large enough that no second takes more than 5 % of a fleet
/// of 1,000 (docs/performance.md, figure 6, has the simulation).
pub const MAX_BASE_MS: u64 = 50_000;

/// The first backoff ceiling (ms) and the cap for a fleet of `hosts`: with full jitter, hosts
/// come back at about `hosts / base` a second, so the base grows with the fleet, from 1 s (a
/// lone host is back within a second of a blip) to `MAX_BASE_MS`, past which each second takes
/// a smaller share of the fleet; the cap stays the host's default 5 minutes.
pub fn reconnect_policy(hosts: usize) -> (u64, u64) {
    let base = (hosts as u64).saturating_mul(1000) / RECONNECTS_PER_SECOND;
    (base.clamp(1_000, MAX_BASE_MS), 300_000)
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// `sha256:HEX` of the first certificate's DER encoding in `ca_pem`.
pub fn ca_hash(ca_pem: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA PEM");
    let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Random lower-case hex, `bytes` bytes of it.
pub fn random_hex(bytes: usize) -> String {
    use ring::rand::SecureRandom;
    let mut buf = vec![0u8; bytes];
    ring::rand::SystemRandom::new()
        .fill(&mut buf)
        .expect("randomness");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The join endpoint: one thread per connection, one request per connection.
fn accept_joins(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    shared: Arc<Shared>,
    link: SocketAddr,
    ca_pem: String,
) {
    for tcp in listener.incoming() {
        let Ok(tcp) = tcp else { continue };
        if shared.lock().stopped {
            return;
        }
        let Ok(conn) = ServerConnection::new(tls.clone()) else {
            continue;
        };
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
        let (shared, ca_pem) = (shared.clone(), ca_pem.clone());
        std::thread::spawn(move || {
            let mut stream = StreamOwned::new(conn, tcp);
            let (status, body) = match read_request(&mut stream) {
                Ok((method, path, body)) => answer(&shared, link, &ca_pem, &method, &path, &body),
                Err(why) => (400, json!({"error": why})),
            };
            let body = body.to_string();
            let reason = match status {
                200 => "OK",
                400 => "Bad Request",
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "Not Found",
                _ => "Error",
            };
            let response = format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
            let _ = stream.flush();
            stream.conn.send_close_notify();
            let _ = stream.flush();
        });
    }
}

/// Method, path and body of one HTTP/1.1 request (`Content-Length` bodies only).
fn read_request(stream: &mut impl Read) -> Result<(String, String, Vec<u8>), String> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if data.len() > 64 * 1024 {
            return Err("request head too large".into());
        }
        match stream.read(&mut buf) {
            Ok(0) => return Err("end of stream in the request head".into()),
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_string();
    let path = request_line.next().unwrap_or_default().to_string();
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.trim().parse::<usize>().map_err(|e| e.to_string()))
        .transpose()?
        .unwrap_or(0);
    if length > 1 << 20 {
        return Err("body too large".into());
    }
    let mut body = data[head_end..].to_vec();
    while body.len() < length {
        match stream.read(&mut buf) {
            Ok(0) => return Err("end of stream in the body".into()),
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
    body.truncate(length);
    Ok((method, path, body))
}

/// The join exchange (docs/protocol.md, "Joining").
fn answer(
    shared: &Shared,
    link: SocketAddr,
    ca_pem: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Value) {
    match (method, path) {
        ("GET", "/v1/ca") => (200, json!({"ca_pem": ca_pem})),
        ("POST", "/v1/join") => {
            let Ok(request) = serde_json::from_slice::<Value>(body) else {
                return (400, json!({"error": "the body is not JSON"}));
            };
            shared.update(|s| s.join_requests.push(request.clone()));
            let (Some(token), hostname) = (request["token"].as_str(), request["hostname"].as_str())
            else {
                return (400, json!({"error": "no token"}));
            };
            let now = Instant::now();
            let outcome = shared.update(|s| {
                let Some(entry) = s.tokens.iter_mut().find(|(t, _, _)| t == token) else {
                    return Err((401, "unknown token"));
                };
                if entry.2 {
                    return Err((403, "token already used"));
                }
                if now >= entry.1 {
                    return Err((403, "token expired"));
                }
                entry.2 = true;
                let name: String = hostname
                    .unwrap_or_default()
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .take(32)
                    .collect();
                let node = format!(
                    "{}-{}",
                    if name.is_empty() { "node" } else { &name },
                    s.joined.len() + 1
                );
                let secret = random_hex(16);
                s.joined.push((node.clone(), secret.clone()));
                Ok((node, secret))
            });
            match outcome {
                Ok((node, secret)) => {
                    if shared.config.verbose {
                        eprintln!("joined: node {node} ({request})");
                    }
                    (
                        200,
                        json!({"node": node, "secret": secret, "address": link.to_string(),
                               "server_name": super::pki::SERVER_NAME, "ca_pem": ca_pem}),
                    )
                }
                Err((status, why)) => (status, json!({"error": why})),
            }
        }
        _ => (404, json!({"error": format!("no {method} {path}")})),
    }
}
