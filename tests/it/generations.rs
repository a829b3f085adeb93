//! Generations on the command line (issue 22): `rollback`, `apply --confirm` with `confirm`, and
//! a pending declaration that nobody confirms reverted by the next command that starts. The real
//! binary on scratch roots (files kind); windows of a couple of seconds.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::Scratch;

fn path(file: &Path) -> &str {
    file.to_str().expect("utf-8 path")
}

/// Waits (polling the wall clock) until `unix` seconds are past: a deadline or an expiry.
fn wait_past(unix: u64) {
    while now() <= unix {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// Revision `revision`: `/etc/a` holding `a`, and `/etc/b` when given.
fn declaration(host: &Scratch, revision: u64, a: &str, b: Option<&str>) -> std::path::PathBuf {
    let b = b.map_or(String::new(), |b| {
        format!(r#", "/etc/b": {{"content": "{b}"}}"#)
    });
    host.declaration(
        &format!("d{revision}.json"),
        &format!(
            r#"{{"schema": 1, "revision": {revision}, "files": {{"/etc/a": {{"content": "{a}"}}{b}}}}}"#
        ),
    )
}

fn read(host: &Scratch, file: &str) -> Option<String> {
    std::fs::read_to_string(host.target(file)).ok()
}

fn states(host: &Scratch) -> Vec<(u64, String)> {
    let status = host.run(&["status", "--json"]).json();
    status["generations"]["list"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|g| {
                    (
                        g["revision"].as_u64().unwrap_or(0),
                        g["state"]["is"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `rollback` goes back to the generation before (a file the later one created is removed, the
/// earlier content is back), `--to` to a named one; errors name the problem and change nothing.
#[test]
fn rollback_puts_an_earlier_generation_back_and_converges_to_it() {
    let host = Scratch::new("rollback");
    let nothing = host.run(&["rollback"]);
    assert_eq!(nothing.code, 2, "{nothing:?}");
    nothing.assert_stderr("nothing to roll back to");
    host.apply(&declaration(&host, 1, "one", None), 0);
    let only = host.run(&["rollback"]);
    assert_eq!(only.code, 2, "{only:?}");
    only.assert_stderr("nothing to roll back to");
    host.apply(&declaration(&host, 2, "two", Some("b")), 0);
    assert_eq!(read(&host, "/etc/b").as_deref(), Some("b"));

    let back = host.run(&["rollback"]);
    assert_eq!(back.code, 0, "{back:?}");
    back.assert_stderr("revision 1");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("one"));
    assert_eq!(
        read(&host, "/etc/b"),
        None,
        "created by revision 2: removed"
    );
    let status = host.run(&["status"]);
    status.assert_stdout("generations (newest first):");
    status.assert_stdout("rollback converged");
    assert_eq!(
        states(&host),
        [
            (1, "confirmed".into()),
            (2, "confirmed".into()),
            (1, "confirmed".into())
        ]
    );

    let missing = host.run(&["rollback", "--to", "9"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    missing
        .assert_stderr("no such revision: 9 is not among the generations kept (revisions 1, 2, 1)");
    let same = host.run(&["rollback", "--to", "1"]);
    assert_eq!(same.code, 2, "{same:?}");
    same.assert_stderr("revision 1 is the declaration in force");
    let forward = host.run(&["rollback", "--to", "2"]);
    assert_eq!(forward.code, 0, "{forward:?}");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("two"));
    assert_eq!(read(&host, "/etc/b").as_deref(), Some("b"));
}

/// A signed generation whose signature has expired is rolled back to only with `--force`.
#[test]
fn rollback_to_an_expired_signature_needs_force() {
    let host = Scratch::new("rollback-expired");
    let key = host.dir.join("k.pem");
    let out = host.run(&["keygen", "--out", path(&key)]);
    assert_eq!(out.code, 0, "{out:?}");
    let expires = now() + 2;
    let plain = host.declaration(
        "signed.json",
        &format!(
            r#"{{"schema": 1, "revision": 1, "expires": {expires}, "files": {{"/etc/a": {{"content": "one"}}}}}}"#
        ),
    );
    let signed = host.run(&["sign", "--key", path(&key), path(&plain)]);
    assert_eq!(signed.code, 0, "{signed:?}");
    let envelope = host.declaration("envelope.json", &signed.stdout);
    host.apply(&envelope, 0);
    host.apply(&declaration(&host, 2, "two", None), 0);
    wait_past(expires);
    let refused = host.run(&["rollback"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    refused.assert_stderr("revision 1 is signed and its signature expired");
    refused.assert_stderr("`--force`");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("two"));
    let forced = host.run(&["rollback", "--force"]);
    assert_eq!(forced.code, 0, "{forced:?}");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("one"));
}

/// `apply --confirm` then `confirm` within the window: no revert, however long after.
#[test]
fn a_confirmed_apply_stays() {
    let host = Scratch::new("confirm");
    let metrics = host.dir.join("metrics.prom");
    let file = metrics.display().to_string();
    host.edit_config(|c| c["metrics_file"] = serde_json::json!(file));
    let metric = |line: &str| {
        std::fs::read_to_string(&metrics)
            .unwrap_or_default()
            .lines()
            .any(|l| l == line)
    };
    host.apply(&declaration(&host, 1, "one", None), 0);
    let out = host.run(&[
        "apply",
        "--confirm",
        "2",
        path(&declaration(&host, 2, "two", None)),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let deadline = now() + 2;
    out.assert_stderr(" UTC (in 2 s) unless `mesh-host confirm` runs first");
    host.run(&["status"]).assert_stdout("pending: reverted in");
    assert!(metric(
        r#"mesh_host_declaration_confirmation{state="pending"} 1"#
    ));
    assert!(metric(
        "# TYPE mesh_host_declaration_confirm_deadline_timestamp_seconds gauge"
    ));
    let confirmed = host.run(&["confirm"]);
    assert_eq!(confirmed.code, 0, "{confirmed:?}");
    confirmed.assert_stdout("revision 2 confirmed");
    assert!(metric(
        r#"mesh_host_declaration_confirmation{state="confirmed"} 1"#
    ));
    assert!(!metric(
        "# TYPE mesh_host_declaration_confirm_deadline_timestamp_seconds gauge"
    ));
    let again = host.run(&["confirm"]);
    assert_eq!(again.code, 2, "{again:?}");
    again.assert_stderr("nothing to confirm");
    wait_past(deadline);
    let later = host.run(&["reconcile"]);
    assert_eq!(later.code, 0, "{later:?}");
    assert!(!later.stderr.contains("reverted"), "{later:?}");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("two"));
    assert_eq!(
        states(&host),
        [(1, "confirmed".into()), (2, "confirmed".into())]
    );
}

/// `apply --confirm` and nobody confirms: the next command to start after the deadline reverts
/// first (files back to the last confirmed generation, what only the pending one created
/// removed), then does its own work; `confirm` is then too late.
#[test]
fn an_unconfirmed_apply_is_reverted_by_the_next_command() {
    let host = Scratch::new("unconfirmed");
    host.apply(&declaration(&host, 1, "one", None), 0);
    let out = host.run(&[
        "apply",
        "--confirm",
        "1",
        path(&declaration(&host, 2, "two", Some("b"))),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("two"));
    // Reading changes nothing: status says it is past its deadline (asked until it is).
    let past = || {
        host.run(&["status"])
            .stdout
            .contains("reverted by the next run")
    };
    let asked_until = now() + 30;
    while !past() && now() < asked_until {
        std::thread::sleep(Duration::from_millis(200));
    }
    host.run(&["status"])
        .assert_stdout("reverted by the next run");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("two"));
    let late = host.run(&["confirm"]);
    assert_eq!(late.code, 2, "{late:?}");
    late.assert_stderr("revision 2 reverted: not confirmed by `mesh-host confirm` in time; revision 1 is back in force");
    late.assert_stderr("nothing to confirm");
    assert_eq!(read(&host, "/etc/a").as_deref(), Some("one"));
    assert_eq!(read(&host, "/etc/b"), None);
    assert_eq!(
        states(&host),
        [
            (1, "confirmed".into()),
            (2, "reverted".into()),
            (1, "confirmed".into())
        ]
    );
    let status = host.run(&["status"]);
    status.assert_stdout("reverted: revision 2");
    status.assert_stdout("revert converged");
}
