//! `mesh-host join` end to end: the real binary against the reference control plane's join
//! endpoint (HTTPS with a test CA), writing into scratch config directories; then `mesh-host run`
//! with what it wrote, to see the joined node's hello arrive.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use serde_json::Value;

use crate::support;
use crate::support::control_plane::{ControlPlane, CpConfig};
use crate::support::pki::Pki;
use crate::support::service::Service;
use crate::support::{snapshot, wait_until, Output, Scratch};

const WAIT: Duration = Duration::from_secs(20);
const HOUR: Duration = Duration::from_secs(3600);

/// A control plane that serves no node until one joins.
fn control_plane(pki: &Pki) -> ControlPlane {
    ControlPlane::start(pki, CpConfig::new("", ""))
}

/// A scratch host whose config holds `config`; `join` and `run` are not given `--root`.
fn host(label: &str, config: &str) -> Scratch {
    let mut host = Scratch::with_config(label, config);
    host.offline_root = false;
    host
}

fn join(host: &Scratch, cp: &ControlPlane, token: &str, extra: &[&str]) -> Output {
    let args = cp.join_command(token, extra);
    host.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn config(host: &Scratch) -> Value {
    read_json(host, "config.json")
}

/// join.json, what a join writes beside the config.
fn join_json(host: &Scratch) -> Value {
    read_json(host, "join.json")
}

fn read_json(host: &Scratch, name: &str) -> Value {
    let text = std::fs::read_to_string(host.dir.join(name)).expect(name);
    serde_json::from_str(&text).expect(name)
}

/// Mode (permission bits) and owner of a file in the scratch dir.
fn mode_owner(host: &Scratch, name: &str) -> (u32, u32) {
    let meta = std::fs::metadata(host.dir.join(name)).expect(name);
    (meta.mode() & 0o7777, meta.uid())
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_join_writes_the_identity_and_the_service_then_connects() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("tok-1", HOUR);
    let host = host(
        "ok",
        r#"{"interval_secs": 600, "heartbeat_secs": 1, "max_file_bytes": 1000}"#,
    );
    std::fs::set_permissions(
        host.dir.join("config.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .expect("chmod");
    let out = join(&host, &cp, "tok-1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let joined = cp.joined();
    assert_eq!(joined.len(), 1);
    let (node, secret) = &joined[0];
    out.assert_stdout(&format!("as node {node:?}"));
    out.assert_stdout("the service is not running");

    // The config is left as it was; join.json beside it, with the config's mode, holds the
    // control plane (a file the package does not own: a reinstall keeps it).
    let c = config(&host);
    assert_eq!(
        c,
        serde_json::json!({"interval_secs": 600, "heartbeat_secs": 1, "max_file_bytes": 1000})
    );
    let j = join_json(&host);
    assert_eq!(j.as_object().map(|m| m.len()), Some(1), "{j}");
    let dir = std::fs::canonicalize(&host.dir).expect("dir");
    assert_eq!(
        j["control_plane"],
        serde_json::json!({"address": cp.addr().to_string(), "server_name": "localhost",
            "ca_file": dir.join("ca.pem"), "node": node, "secret_file": dir.join("secret")})
    );
    assert_eq!(mode_owner(&host, "config.json"), (0o640, 0));
    assert_eq!(mode_owner(&host, "join.json"), (0o640, 0));
    assert_eq!(
        std::fs::read_to_string(host.dir.join("ca.pem")).expect("ca.pem"),
        pki.ca_pem
    );
    assert_eq!(mode_owner(&host, "ca.pem"), (0o644, 0));
    assert_eq!(
        std::fs::read_to_string(host.dir.join("secret")).expect("secret"),
        format!("{secret}\n")
    );
    assert_eq!(mode_owner(&host, "secret"), (0o600, 0));
    // The request named this machine; the join made no store.
    assert!(cp.join_requests()[0]["hostname"].is_string());
    assert!(!host.state().exists());

    // What it wrote is enough for the service to connect as the joined node.
    let service = Service::start(host);
    assert!(cp.wait_for_hello(node, WAIT), "{}", service.log());
    assert_eq!(
        cp.hellos().last().expect("hello")["secret"],
        secret.as_str()
    );
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_running_service_is_signalled_and_connects() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("tok-hup", HOUR);
    let host = host("hup", r#"{"interval_secs": 600, "heartbeat_secs": 1}"#);
    let service = Service::start(host);
    let host = &service.host;
    assert!(
        wait_until(WAIT, || {
            let status = host.run(&["status", "--json"]);
            status.code == 0 && status.json()["service"]["state"] == "running"
        }),
        "{}",
        service.log()
    );
    let out = join(host, &cp, "tok-hup", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout(&format!("the service (pid {}) reloads", service.pid()));
    let node = cp.joined()[0].0.clone();
    assert!(cp.wait_for_hello(&node, WAIT), "{}", service.log());
    assert!(service.log().contains("configuration reloaded"));
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_wrong_ca_hash_writes_nothing_and_spends_no_token() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("tok-2", HOUR);
    let host = host("hash", r#"{"interval_secs": 600}"#);
    let before = snapshot(&host.dir);
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let url = format!("https://{}", cp.join_addr());
    let out = host.run(&[
        "join",
        "--control-plane",
        &url,
        "--token",
        "tok-2",
        "--ca-hash",
        &wrong,
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    let actual = cp.ca_hash();
    out.assert_stderr(&format!(
        "the control plane's CA has {actual}, not the {wrong} you gave: check --ca-hash with \
             the control plane's operator"
    ));
    assert_eq!(snapshot(&host.dir), before);
    assert!(cp.join_requests().is_empty(), "the token was sent");
    // The same token still works with the right hash.
    assert_eq!(join(&host, &cp, "tok-2", &[]).code, 0);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_reused_expired_or_unknown_token_is_refused_with_what_to_do() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("once", HOUR);
    cp.add_token("stale", Duration::ZERO);
    let first = host("first", "{}");
    assert_eq!(join(&first, &cp, "once", &[]).code, 0);

    let host = host("refused", r#"{"interval_secs": 600}"#);
    let before = snapshot(&host.dir);
    for (token, why, status) in [
        ("once", "token already used", 403),
        ("stale", "token expired", 403),
        ("never-issued", "unknown token", 401),
    ] {
        let out = join(&host, &cp, token, &[]);
        assert_eq!(out.code, 2, "{token}: {out:?}");
        assert!(
            out.stderr.contains(&format!(
                "the control plane refused the token (HTTP {status}: {why})"
            )) && out
                .stderr
                .contains("ask the control plane's operator for a new one"),
            "{token}: {out:?}"
        );
        assert_eq!(snapshot(&host.dir), before, "{token}");
    }
    assert_eq!(cp.joined().len(), 1);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn an_unreachable_control_plane_is_reported() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let host = host("unreachable", "{}");
    let before = snapshot(&host.dir);
    let url = format!("https://127.0.0.1:{port}");
    let hash = format!("sha256:{}", "00".repeat(32));
    let out = host.run(&[
        "join",
        "--control-plane",
        &url,
        "--token",
        "t",
        "--ca-hash",
        &hash,
    ]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr.contains("could not reach the control plane")
            && out.stderr.contains("that the control plane is up"),
        "{out:?}"
    );
    assert_eq!(snapshot(&host.dir), before);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn joining_twice_is_refused_unless_forced() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    for token in ["a", "b"] {
        cp.add_token(token, HOUR);
    }
    let host = host("twice", r#"{"heartbeat_secs": 5}"#);
    assert_eq!(join(&host, &cp, "a", &[]).code, 0);
    let before = snapshot(&host.dir);
    let out = join(&host, &cp, "b", &[]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("this node already joined") && out.stderr.contains("--force"),
        "{out:?}"
    );
    assert_eq!(snapshot(&host.dir), before);
    assert_eq!(cp.join_requests().len(), 1, "the token was spent");

    let out = join(&host, &cp, "b", &["--force"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (node, secret) = cp.joined()[1].clone();
    assert_eq!(join_json(&host)["control_plane"]["node"], node.as_str());
    assert_eq!(config(&host), serde_json::json!({"heartbeat_secs": 5}));
    assert_eq!(
        std::fs::read_to_string(host.dir.join("secret")).expect("secret"),
        format!("{secret}\n")
    );
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_missing_config_stays_missing_and_join_json_holds_the_join() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("fresh", HOUR);
    let host = host("fresh", "{}");
    std::fs::remove_file(host.dir.join("config.json")).expect("rm");
    let out = join(&host, &cp, "fresh", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!host.dir.join("config.json").exists());
    assert_eq!(mode_owner(&host, "join.json"), (0o644, 0));
    let j = join_json(&host);
    assert_eq!(j.as_object().map(|m| m.len()), Some(1), "{j}");
}

/// A node an older mesh-host joined has its `control_plane` in config.json: it stays joined (the
/// section still counts there), and a new join moves it to join.json, leaving the rest.
#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn an_older_joins_section_moves_from_the_config_to_join_json() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("again", HOUR);
    let host = host(
        "older",
        r#"{"heartbeat_secs": 5, "control_plane": {"address": "old.example:1",
            "ca_file": "/etc/mesh-host/ca.pem", "node": "old", "secret_file": "/etc/mesh-host/secret"}}"#,
    );
    let out = host.run(&["status"]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = join(&host, &cp, "again", &[]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("config.json has a control_plane section (node \"old\"");
    let out = join(&host, &cp, "again", &["--force"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (node, _) = cp.joined()[0].clone();
    assert_eq!(config(&host), serde_json::json!({"heartbeat_secs": 5}));
    assert_eq!(join_json(&host)["control_plane"]["node"], node.as_str());
    let out = host.run(&["status"]);
    assert_eq!(out.code, 0, "{out:?}");
}

/// `join` with the token read from `source` (`--token-file FILE` or `--token -`), never on argv.
fn join_reading_token(host: &Scratch, cp: &ControlPlane, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let url = format!("https://{}", cp.join_addr());
    let hash = cp.ca_hash();
    let mut child = host
        .command(&["join", "--control-plane", &url, "--ca-hash", &hash])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn join");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).expect("write stdin");
    drop(input);
    Output::from(child.wait_with_output().expect("join"))
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn the_token_can_come_from_a_file_or_standard_input() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let cp = control_plane(&pki);
    cp.add_token("tok-file", HOUR);
    cp.add_token("tok-stdin", HOUR);

    let from_file = host("token-file", "{}");
    let token_file = from_file.dir.join("token");
    std::fs::write(&token_file, "tok-file\n").expect("token file");
    let path = token_file.to_str().expect("utf-8");
    let out = join_reading_token(&from_file, &cp, &["--token-file", path], "");
    assert_eq!(out.code, 0, "{out:?}");

    let from_stdin = host("token-stdin", "{}");
    let out = join_reading_token(&from_stdin, &cp, &["--token", "-"], "tok-stdin\n");
    assert_eq!(out.code, 0, "{out:?}");
    let tokens: Vec<Value> = cp
        .join_requests()
        .iter()
        .map(|r| r["token"].clone())
        .collect();
    assert_eq!(tokens, vec!["tok-file", "tok-stdin"]);
    assert_eq!(cp.joined().len(), 2);

    // A missing, empty or multi-word token is refused before anything is sent or written.
    let refused = host("token-bad", "{}");
    let before = snapshot(&refused.dir);
    let missing = refused.dir.join("nonexistent");
    for (args, stdin, want) in [
        (
            vec!["--token-file", missing.to_str().expect("utf-8")],
            "",
            "cannot be read",
        ),
        (vec!["--token", "-"], "", "the token is empty"),
        (vec!["--token", "-"], "two words\n", "without spaces"),
    ] {
        let out = join_reading_token(&refused, &cp, &args, stdin);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(want), "{args:?}: {out:?}");
    }
    assert_eq!(snapshot(&refused.dir), before);
    assert_eq!(cp.join_requests().len(), 2, "nothing more was sent");
}

#[test]
fn not_root_and_bad_arguments_are_refused() {
    let host = host("args", "{}");
    let before = snapshot(&host.dir);
    let hash = format!("sha256:{}", "00".repeat(32));
    // As nobody: refused before anything is read or sent.
    let out = support::mesh_host()
        .args(["--config", "/nonexistent/config.json", "join"])
        .args(["--control-plane", "https://127.0.0.1:1", "--token", "t"])
        .args(["--ca-hash", &hash])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("join must run as root"), "{stderr}");

    for (args, want) in [
        (
            vec!["join", "--token", "t", "--ca-hash", &hash],
            "join needs --control-plane",
        ),
        (
            vec![
                "join",
                "--control-plane",
                "http://cp:1",
                "--token",
                "t",
                "--ca-hash",
                &hash,
            ],
            "is not an https:// URL",
        ),
        (
            vec![
                "join",
                "--control-plane",
                "https://cp:1",
                "--token",
                "t",
                "--ca-hash",
                "md5:00",
            ],
            "does not start with sha256:",
        ),
    ] {
        let out = host.run(&args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(want), "{args:?}: {out:?}");
    }
    assert_eq!(snapshot(&host.dir), before);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_server_whose_certificate_does_not_chain_to_the_pinned_ca_gets_no_token() {
    support::require_root("mesh-host join refuses to run as anyone else");
    // Serves the real CA on /v1/ca (so the hash matches) but presents another CA's certificate.
    let real = Pki::new();
    let rogue = Pki::rogue();
    let impostor = Pki {
        ca_pem: real.ca_pem.clone(),
        server_pem: rogue.server_pem.clone(),
        key_pem: rogue.key_pem.clone(),
    };
    let cp = control_plane(&impostor);
    cp.add_token("stolen", HOUR);
    assert_eq!(cp.ca_hash(), support::control_plane::ca_hash(&real.ca_pem));
    let host = host("impostor", "{}");
    let before = snapshot(&host.dir);
    let out = join(&host, &cp, "stolen", &[]);
    assert_eq!(out.code, 4, "{out:?}");
    out.assert_stderr("TLS handshake failed");
    assert!(
        cp.join_requests().is_empty(),
        "the token reached the impostor"
    );
    assert_eq!(snapshot(&host.dir), before);
}

/// A TLS server with the test PKI's certificate that answers the nth connection with
/// `answers[n]`, raw, then closes (with close_notify); returns its `https://` URL.
fn raw_server(pki: &Pki, answers: Vec<Vec<u8>>) -> String {
    raw_server_closing(pki, answers, true)
}

/// `raw_server`, closing the TCP connection without close_notify unless `close_notify`.
fn raw_server_closing(pki: &Pki, answers: Vec<Vec<u8>>, close_notify: bool) -> String {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let tls = pki.server_config();
    std::thread::spawn(move || {
        for answer in answers {
            let Ok((tcp, _)) = listener.accept() else {
                return;
            };
            let Ok(conn) = rustls::ServerConnection::new(tls.clone()) else {
                return;
            };
            let mut stream = rustls::StreamOwned::new(conn, tcp);
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(&answer);
            if close_notify {
                stream.conn.send_close_notify();
            }
            let _ = stream.flush();
        }
    });
    format!("https://127.0.0.1:{port}")
}

fn join_at(host: &Scratch, url: &str, ca_hash: &str) -> Output {
    host.run(&[
        "join",
        "--control-plane",
        url,
        "--token",
        "t",
        "--ca-hash",
        ca_hash,
    ])
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn an_answer_without_an_http_status_line_is_refused_naming_the_endpoint() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let url = raw_server(&pki, vec![b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec()]);
    let host = host("no-http", "{}");
    let before = snapshot(&host.dir);
    let out = join_at(&host, &url, &support::control_plane::ca_hash(&pki.ca_pem));
    assert_eq!(out.code, 4, "{out:?}");
    out.assert_stderr(&format!(
        "{url}/v1/ca: reading the answer: no HTTP status line"
    ));
    assert_eq!(snapshot(&host.dir), before);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn chunked_answers_are_read_whole() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let chunked = |status: &str, body: &str| {
        let (a, b) = body.split_at(body.len() / 2);
        format!(
            "HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n\r\n{:x};ext=1\r\n{a}\r\n{:x}\r\n\
             {b}\r\n0\r\nX-Trailer: t\r\n\r\n",
            a.len(),
            b.len()
        )
        .into_bytes()
    };
    let ca = serde_json::json!({"ca_pem": pki.ca_pem}).to_string();
    let url = raw_server(
        &pki,
        vec![
            chunked("200 OK", &ca),
            chunked("403 Forbidden", r#"{"error": "token already used"}"#),
        ],
    );
    let host = host("chunked", "{}");
    let before = snapshot(&host.dir);
    let out = join_at(&host, &url, &support::control_plane::ca_hash(&pki.ca_pem));
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("refused the token (HTTP 403: token already used)");
    assert_eq!(snapshot(&host.dir), before);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn a_body_ended_without_close_notify_is_refused_not_cut() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    // A whole CA answer, its body running to the close, but the close is not TLS's: an attacker
    // (or a crash) could have cut it anywhere, so it is not taken.
    let ca = serde_json::json!({"ca_pem": pki.ca_pem}).to_string();
    let answer = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{ca}");
    let url = raw_server_closing(&pki, vec![answer.into_bytes()], false);
    let host = host("no-close-notify", "{}");
    let before = snapshot(&host.dir);
    let out = join_at(&host, &url, &support::control_plane::ca_hash(&pki.ca_pem));
    assert_eq!(out.code, 4, "{out:?}");
    out.assert_stderr(&format!(
        "{url}/v1/ca: reading the answer: the connection ended without TLS \
         close_notify"
    ));
    assert_eq!(snapshot(&host.dir), before);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn an_answer_over_the_size_limit_is_refused() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let pki = Pki::new();
    let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    answer.extend(std::iter::repeat_n(b' ', (1 << 20) + 1));
    let url = raw_server(&pki, vec![answer]);
    let host = host("too-big", "{}");
    let before = snapshot(&host.dir);
    let out = join_at(&host, &url, &support::control_plane::ca_hash(&pki.ca_pem));
    assert_eq!(out.code, 4, "{out:?}");
    out.assert_stderr(&format!(
        "{url}/v1/ca: reading the answer: the body is over the 1048576 bytes allowed"
    ));
    assert_eq!(snapshot(&host.dir), before);
}
