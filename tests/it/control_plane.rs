//! The reference control plane (tests/it/support/control_plane.rs) on its own, against a tiny
//! blocking rustls client: what the host's link tests rely on it to do.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use serde_json::{json, Value};

use crate::support::control_plane::{Behaviour, ControlPlane, CpConfig};
use crate::support::pki::{Pki, SERVER_NAME};

const WAIT: Duration = Duration::from_secs(5);
/// How long "nothing more arrives" is watched for.
const QUIET: Duration = Duration::from_millis(200);

struct Client(StreamOwned<ClientConnection, TcpStream>);

impl Client {
    fn connect(cp: &ControlPlane, pki: &Pki) -> Client {
        let tcp = TcpStream::connect(cp.addr()).expect("connect");
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        let name = ServerName::try_from(SERVER_NAME).unwrap();
        let tls = ClientConnection::new(pki.client_config(), name).unwrap();
        Client(StreamOwned::new(tls, tcp))
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.0
            .write_all(bytes)
            .and_then(|()| self.0.flush())
            .expect("write");
    }

    fn send(&mut self, message: Value) {
        self.raw(&frame(message));
    }

    fn hello(&mut self, node: &str, secret: &str, revision: Option<u64>) {
        self.raw(&hello(node, secret, revision));
    }

    fn read(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        self.0.read_exact(&mut buf).expect("read");
        buf
    }

    fn recv(&mut self) -> Value {
        serde_json::from_slice(&self.recv_bytes()).expect("JSON")
    }

    /// One frame's body, as it is (a declaration's, after its `declare`).
    fn recv_bytes(&mut self) -> Vec<u8> {
        let length = u32::from_be_bytes(self.read(4).try_into().unwrap());
        self.read(length as usize)
    }

    /// A `declare` and the declaration after it: its revision and text.
    fn recv_declare(&mut self) -> (Value, Vec<u8>) {
        let head = self.recv();
        assert_eq!(head["type"], "declare", "{head}");
        (head, self.recv_bytes())
    }

    /// Nothing arrives for `QUIET`, and the connection is still open.
    fn assert_quiet(&mut self) {
        self.0.sock.set_read_timeout(Some(QUIET)).unwrap();
        let got = self.0.read(&mut [0; 64]);
        assert!(timed_out(&got), "{got:?}");
        self.0.sock.set_read_timeout(Some(WAIT)).unwrap();
    }

    /// The control plane closed the connection (without close_notify, as a crash would).
    fn assert_closed(&mut self) {
        let got = self.0.read(&mut [0; 64]);
        assert!(!matches!(got, Ok(1..)) && !timed_out(&got), "{got:?}");
    }
}

fn timed_out(got: &std::io::Result<usize>) -> bool {
    matches!(got, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

fn frame(message: Value) -> Vec<u8> {
    let body = message.to_string();
    [&(body.len() as u32).to_be_bytes(), body.as_bytes()].concat()
}

fn hello(node: &str, secret: &str, revision: Option<u64>) -> Vec<u8> {
    frame(
        json!({"type": "hello", "protocol": 2, "node": node, "secret": secret,
                 "version": "test", "revision": revision, "digest": null}),
    )
}

fn start(pki: &Pki, behaviour: Behaviour) -> ControlPlane {
    let config = CpConfig {
        behaviour,
        ..CpConfig::new("n1", "s3cret")
    };
    ControlPlane::start(pki, config)
}

#[test]
fn welcome_declare_report_ack_and_pong() {
    let pki = Pki::new();
    let cp = start(&pki, Behaviour::Normal);
    cp.declare(3, r#"{"schema": 1}"#);

    let mut host = Client::connect(&cp, &pki);
    host.hello("n1", "s3cret", Some(1));
    assert_eq!(
        host.recv(),
        json!({"type": "welcome", "reconnect": {"base_ms": 1000, "cap_ms": 300000}})
    );
    assert_eq!(
        host.recv_declare(),
        (
            json!({"type": "declare", "revision": 3}),
            br#"{"schema": 1}"#.to_vec()
        )
    );
    host.send(json!({"type": "ping"}));
    assert_eq!(
        host.recv(),
        json!({"type": "pong", "reconnect": {"base_ms": 1000, "cap_ms": 300000}})
    );
    for _ in 0..2 {
        host.send(json!({"type": "report", "id": 7, "outcome": "converged"}));
        assert_eq!(host.recv(), json!({"type": "ack", "id": 7}));
    }
    assert!(cp.wait_for(|r| r.len() == 1 && r[0]["outcome"] == "converged", WAIT));
    cp.declare(4, "{}");
    let declared = host.recv_declare();
    assert_eq!(declared.0["revision"], 4, "pushed to a connected host");

    // A host already at revision 4 gets no declare (the pong comes first), until one is forced.
    let mut current = Client::connect(&cp, &pki);
    current.hello("n1", "s3cret", Some(4));
    assert_eq!(
        current.recv(),
        json!({"type": "welcome", "reconnect": {"base_ms": 1000, "cap_ms": 300000}})
    );
    current.send(json!({"type": "ping"}));
    assert_eq!(
        current.recv(),
        json!({"type": "pong", "reconnect": {"base_ms": 1000, "cap_ms": 300000}})
    );
    cp.send_declare(2, "{}");
    assert_eq!(current.recv_declare().0["revision"], 2);
    assert_eq!(
        host.recv_declare(),
        (json!({"type": "declare", "revision": 2}), b"{}".to_vec())
    );
    assert_eq!(cp.hellos().len(), 2);
    assert_eq!(cp.connections(), 2);
    assert_eq!(cp.reports().len(), 1, "deduplicated by id");
}

#[test]
fn refuses_bad_credentials_and_bad_frames() {
    let pki = Pki::new();
    let cp = start(&pki, Behaviour::Normal);
    let cases = [
        ("bad credentials", hello("n1", "wrong", None)),
        ("bad credentials", hello("n2", "s3cret", None)),
        ("expected hello", frame(json!({"type": "ping"}))),
        ("over", vec![0xff, 0xff, 0xff, 0xff]),
    ];
    for (want, bytes) in cases {
        let mut host = Client::connect(&cp, &pki);
        host.raw(&bytes);
        let error = host.recv();
        assert_eq!(error["type"], "error");
        assert!(error["message"].as_str().unwrap().contains(want), "{error}");
        host.assert_closed();
    }
}

#[test]
fn hostile_behaviours_send_what_they_say() {
    let pki = Pki::new();
    for behaviour in Behaviour::HOSTILE {
        let cp = start(&pki, behaviour);
        let mut host = Client::connect(&cp, &pki);
        host.hello("n1", "s3cret", None);
        match behaviour {
            Behaviour::Garbage => {
                assert_eq!(host.read(4), [0, 0, 0, 64]);
                let body = host.read(64);
                assert!(serde_json::from_slice::<Value>(&body).is_err());
            }
            Behaviour::OversizedFrame => assert_eq!(host.read(4), [0xff, 0xff, 0xff, 0xf0]),
            Behaviour::HalfFrameThenSilence => assert_eq!(host.read(14)[..4], [0, 0, 0, 100]),
            Behaviour::Silent | Behaviour::Normal => host.send(json!({"type": "ping"})),
        }
        host.assert_quiet();
        assert!(cp.wait_for_connections(1, WAIT));
        assert_eq!(cp.hellos().len(), 1, "{behaviour:?}");
    }
}

#[test]
fn stop_is_a_crash_and_a_restart_comes_back_on_the_same_port() {
    let pki = Pki::new();
    let mut cp = start(&pki, Behaviour::Normal);
    let mut host = Client::connect(&cp, &pki);
    host.hello("n1", "s3cret", None);
    assert_eq!(host.recv()["type"], "welcome");
    cp.stop();
    host.assert_closed();
    assert!(
        TcpStream::connect(cp.addr()).is_err(),
        "the listener is closed"
    );

    let again = ControlPlane::start(
        &pki,
        CpConfig {
            bind: Some(cp.addr()),
            ..CpConfig::new("n1", "s3cret")
        },
    );
    assert_eq!(again.addr(), cp.addr());
    let mut host = Client::connect(&again, &pki);
    host.hello("n1", "s3cret", None);
    assert_eq!(host.recv()["type"], "welcome");
    assert_eq!((cp.connections(), again.connections()), (1, 1));

    // A control plane with a certificate from another CA fails the client's handshake.
    let rogue = start(&Pki::rogue(), Behaviour::Normal);
    let mut host = Client::connect(&rogue, &pki);
    let err = host.0.write_all(b"x").and_then(|()| host.0.flush());
    let err = err.and_then(|()| host.0.read(&mut [0; 1]).map(|_| ()));
    assert!(err.unwrap_err().to_string().contains("certificate"));
    assert!(rogue.wait_for_connections(1, WAIT));
    assert!(rogue.hellos().is_empty());
}
