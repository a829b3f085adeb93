//! Signed declarations end to end: keys made and declarations signed by the real binary
//! (`keygen`, `sign`), checked and applied on the command line, relayed unchanged by the reference
//! control plane to `mesh-host run` on a scratch host that trusts some of the keys, and trust
//! written by `join --trust-key`. Files in scratch roots; no sandbox needed.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support;
use crate::support::control_plane::{ControlPlane, CpConfig};
use crate::support::pki::Pki;
use crate::support::service::Service;
use crate::support::{snapshot, wait_until, Scratch};

const WAIT: Duration = Duration::from_secs(20);

/// An operator's offline workstation: a directory with keys, signing with the real binary.
struct Signer {
    dir: Scratch,
}

impl Signer {
    fn new() -> Signer {
        Signer {
            dir: Scratch::new("signer"),
        }
    }

    /// `keygen --out NAME.pem`; returns the public key it printed.
    fn keygen(&self, name: &str) -> String {
        let out = self.dir.run(&["keygen", "--out", &self.key(name)]);
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout.trim().to_string()
    }

    fn key(&self, name: &str) -> String {
        self.dir
            .dir
            .join(format!("{name}.pem"))
            .display()
            .to_string()
    }

    /// `sign --key NAME.pem` over `text` (a declaration or an envelope); returns the envelope.
    fn sign(&self, name: &str, text: &str) -> String {
        let file = self.dir.declaration("to-sign.json", text);
        let out = self
            .dir
            .run(&["sign", "--key", &self.key(name), path(&file)]);
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn motd(revision: u64, text: &str, expires: Option<u64>) -> String {
    let expires = expires
        .map(|e| format!(r#", "expires": {e}"#))
        .unwrap_or_default();
    format!(
        r#"{{"schema": 1, "revision": {revision}{expires}, "files": {{"/etc/motd": {{"content": "{text}\n"}}}}}}"#
    )
}

/// The envelope with one byte of its declaration changed after signing.
fn tampered(envelope: &str) -> String {
    let mut value: Value = serde_json::from_str(envelope).expect("envelope JSON");
    let text = value["declaration"]
        .as_str()
        .expect("declaration")
        .replace("\\n\"", "!\\n\"");
    value["declaration"] = Value::String(text);
    value.to_string()
}

fn trust_config(keys: &[&str], required: usize) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    format!(
        r#""trusted_keys": [{}], "signatures_required": {required}"#,
        keys.join(", ")
    )
}

#[test]
fn keygen_sign_check_apply_and_status_on_the_command_line() {
    let signer = Signer::new();
    let (alice, bob) = (signer.keygen("alice"), signer.keygen("bob"));
    assert!(
        alice.starts_with("ed25519:") && alice != bob,
        "{alice} {bob}"
    );
    let again = signer.dir.run(&["keygen", "--out", &signer.key("alice")]);
    assert_eq!(again.code, 2, "{again:?}");
    again.assert_stderr("never overwrites a key");

    // sign refuses what no host would apply, and a key file that is not one.
    let invalid = signer
        .dir
        .declaration("invalid.json", r#"{"schema": 1, "revison": 1}"#);
    let out = signer
        .dir
        .run(&["sign", "--key", &signer.key("alice"), path(&invalid)]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("unknown field \"revison\"");
    assert!(out.stdout.is_empty(), "{out:?}");
    let out = signer
        .dir
        .run(&["sign", "--key", path(&invalid), path(&invalid)]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("not a PEM private key");

    let plain = motd(1, "signed", None);
    let by_alice = signer.sign("alice", &plain);
    let by_both = signer.sign("bob", &by_alice);
    let host = Scratch::with_config(
        "signed-cli",
        &format!("{{{}}}", trust_config(&[&alice, &bob], 2)),
    );
    let file = |name: &str, text: &str| host.declaration(name, text);

    // check: who signed, and exit 2 while the config's keys are not satisfied.
    let out = host.run(&["check", path(&file("both.json", &by_both))]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout(&format!("signed by {alice}: trusted"));
    out.assert_stdout(&format!("signed by {bob}: trusted"));
    let out = host.run(&["check", path(&file("alice.json", &by_alice))]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("too few signatures: 1 valid signature by distinct trusted keys, 2 required");
    let out = host.run(&["check", path(&file("plain.json", &plain))]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("unsigned");
    let out = host.run(&[
        "check",
        "--json",
        path(&file("tampered.json", &tampered(&by_both))),
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.json()["signatures"][0]["state"], "bad signature");
    let out = host.run(&[
        "check",
        path(&file("broken.json", r#"{"envelope": 1, "declaration": 7}"#)),
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("declaration: must be a string, not a number");
    out.assert_stderr("signatures: missing");

    // Without trusted keys nothing is required, but a signature that does not verify still refuses.
    let untrusting = Scratch::new("signed-cli-untrusting");
    let out = untrusting.run(&["check", path(&host.dir.join("alice.json"))]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout(&format!(
        "signed by {alice}: valid, by a key not trusted here"
    ));
    let out = untrusting.run(&["check", path(&host.dir.join("tampered.json"))]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("refused: bad signature");

    // apply: root owns the machine; a tampered envelope is refused, anything else applied.
    let before = snapshot(&host.dir.join("root"));
    let out = host.run(&["apply", path(&host.dir.join("tampered.json"))]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr(
        "refused: bad signature: the text is not what every signer signed (signatures[0] by",
    );
    assert_eq!(snapshot(&host.dir.join("root")), before);
    host.apply(&host.dir.join("alice.json"), 0);
    assert_eq!(
        std::fs::read_to_string(host.target("/etc/motd")).unwrap(),
        "signed\n"
    );
    let status = host.run(&["status", "--json"]).json();
    assert_eq!(status["in_force"]["signed_by"][0]["key"], alice.as_str());
    assert_eq!(status["in_force"]["signed_by"][0]["trusted"], true);
    let digest = status["in_force"]["digest"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert_eq!(
        digest,
        sha256_hex(plain.as_bytes()),
        "the bytes signed are the bytes hashed"
    );
    let out = host.run(&["status"]);
    out.assert_stdout(&format!("signed by {alice} (trusted)"));

    // Expiry does not stop a local apply, but status says it.
    let expired = signer.sign("alice", &motd(2, "old", Some(now() - 100)));
    host.apply(&file("expired.json", &expired), 0);
    let out = host.run(&["status"]);
    // A date people read, not Unix seconds (issue 31).
    out.assert_stdout("expired 20");
    out.assert_stdout(" UTC (");
    out.assert_stdout("held until a newer one arrives");
    assert_eq!(
        host.run(&["status", "--json"]).json()["in_force"]["expired"],
        true
    );
}

#[test]
fn the_control_plane_relays_envelopes_and_the_host_accepts_only_what_its_keys_signed() {
    let signer = Signer::new();
    let (alice, _bob) = (signer.keygen("alice"), signer.keygen("bob"));
    let pki = Pki::new();
    let cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
    cp.declare(1, &signer.sign("alice", &motd(1, "one", None)));
    let node = node("signed-link", &pki, &cp, &trust_config(&[&alice], 1));
    assert!(
        wait_until(WAIT, || node.read("/etc/motd").as_deref() == Some("one\n")),
        "{}",
        node.log()
    );
    let status = node.status();
    assert_eq!(status["in_force"]["source"]["kind"], "control-plane");
    assert_eq!(status["in_force"]["signed_by"][0]["key"], alice.as_str());

    // Each refused with its reason, reported, and the previous one holds.
    let old = signer.sign("alice", &motd(1, "one", None));
    let cases = [
        (2, motd(2, "plain", None), "refused: unsigned"),
        (
            3,
            signer.sign("bob", &motd(3, "bob's", None)),
            "refused: unknown key",
        ),
        (
            4,
            tampered(&signer.sign("alice", &motd(4, "altered", None))),
            "refused: bad signature",
        ),
        (
            5,
            old.clone(),
            "carries revision 1, not the declare frame's 5",
        ),
        (
            6,
            signer.sign("alice", &motd(6, "late", Some(now() - 5))),
            "expired 20",
        ),
        (
            7,
            r#"{"envelope": 1, "declaration": "{}", "signatures": [{}]}"#.to_string(),
            "signatures[0].key: missing",
        ),
    ];
    for (revision, text, want) in &cases {
        cp.send_declare(*revision, text);
        assert!(
            cp.wait_for(
                |r| r.iter().any(|r| r["revision"] == *revision
                    && r["outcome"] == "rejected"
                    && r["message"].as_str().is_some_and(|m| m.contains(want))),
                WAIT
            ),
            "revision {revision}: {:#?}\n{}",
            cp.reports(),
            node.log()
        );
    }
    // A replay of the accepted revision under its own number is merely stale.
    cp.send_declare(1, &old);
    assert!(cp.wait_for(
        |r| r
            .iter()
            .any(|r| r["revision"] == 1 && r["outcome"] == "ignored"),
        WAIT
    ));
    assert_eq!(node.read("/etc/motd").as_deref(), Some("one\n"));
    assert_eq!(node.status()["in_force"]["revision"], 1);

    // A declaration that expires soon is accepted, then held past its expiry and said to be.
    let expires = now() + 8;
    cp.declare(8, &signer.sign("alice", &motd(8, "brief", Some(expires))));
    assert!(
        wait_until(WAIT, || node.read("/etc/motd").as_deref()
            == Some("brief\n")),
        "{}",
        node.log()
    );
    assert!(
        cp.wait_for(
            |r| r.iter().any(|r| r["outcome"] == "converged"
                && r["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("expired 20") && m.contains(" UTC ("))),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
    assert_eq!(node.read("/etc/motd").as_deref(), Some("brief\n"));
    assert_eq!(node.status()["in_force"]["expired"], true);
}

#[test]
#[ignore = "needs root (join): run ./tests/run.sh as root"]
fn join_trust_key_writes_the_trusted_keys_and_refuses_an_impossible_threshold_first() {
    support::require_root("mesh-host join refuses to run as anyone else");
    let signer = Signer::new();
    let (alice, bob) = (signer.keygen("alice"), signer.keygen("bob"));
    let pki = Pki::new();
    let cp = ControlPlane::start(&pki, CpConfig::new("", ""));
    cp.add_token("t1", Duration::from_secs(3600));
    let two_of_two = format!("{{{}}}", trust_config(&[&alice, &bob], 2));
    let mut host = Scratch::with_config("join-trust", &two_of_two);
    host.offline_root = false;
    let join = |host: &Scratch, extra: &[&str]| {
        let args = cp.join_command("t1", extra);
        host.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = join(&host, &["--trust-key", &alice]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr("signatures_required: 2, more than the 1 trusted_keys");
    assert!(cp.join_requests().is_empty(), "the token was not spent");

    std::fs::write(host.dir.join("config.json"), "{}").expect("config");
    let out = join(&host, &["--trust-key", &alice]);
    assert_eq!(out.code, 0, "{out:?}");
    // join.json holds what the join wrote; config.json, the package's file, is left alone.
    let joined: Value = serde_json::from_str(
        &std::fs::read_to_string(host.dir.join("join.json")).expect("join.json"),
    )
    .expect("join.json JSON");
    assert_eq!(joined["trusted_keys"], serde_json::json!([alice]));
    assert!(joined["control_plane"]["node"].is_string());
    assert_eq!(
        std::fs::read_to_string(host.dir.join("config.json")).expect("config"),
        "{}"
    );
}

/// A scratch host running `mesh-host run` against `cp`, with `extra` config members.
fn node(label: &str, pki: &Pki, cp: &ControlPlane, extra: &str) -> Service {
    let host = Scratch::new(label);
    pki.write(&host.dir).expect("pki");
    std::fs::write(host.dir.join("secret"), "s3cret\n").expect("secret");
    let config = format!(
        r#"{{"control_plane": {{"address": "{}", "server_name": "localhost", "ca_file": "{}", "node": "n1", "secret_file": "{}"}}, "interval_secs": 1, "heartbeat_secs": 1, {extra}}}"#,
        cp.addr(),
        host.dir.join("ca.pem").display(),
        host.dir.join("secret").display()
    );
    std::fs::write(host.dir.join("config.json"), config).expect("config");
    Service::start(host)
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}
