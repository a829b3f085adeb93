//! What reaches a person or a monitoring system: the failure history (a repeating failure is
//! logged once, shown with its streak by `owned` and `status`), and the Prometheus textfile
//! metrics scraped through the real node_exporter.

mod support;

use serde_json::Value;
use support::Scratch;

/// stderr lines of `out` that mention `needle`.
fn log_lines(stderr: &str, needle: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_failure_repeating_for_ten_runs_is_logged_once_and_shown_with_its_streak() {
    let host = Scratch::new("failure-history");
    let good = host.declaration(
        "good.json",
        r#"{"schema": 1, "files": {"/etc/fail.conf": {"content": "a\n"}}}"#,
    );
    let bad = host.declaration(
        "bad.json",
        r#"{"schema": 1, "files": {"/etc/fail.conf": {"content": "a\n", "owner": "nosuchuser"}}}"#,
    );
    host.apply(&good, 0);
    let mut said = Vec::new();
    for _ in 0..10 {
        let out = host.apply(&bad, 1);
        said.extend(log_lines(&out.stderr, "/etc/fail.conf"));
    }
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(
        said[0].contains("files /etc/fail.conf: failing: plan failed"),
        "{said:?}"
    );

    let owned = host.run(&["owned"]);
    assert!(
        owned.stdout.contains("! failing since ")
            && owned.stdout.contains(", 10 runs: plan failed"),
        "{owned:?}"
    );
    let owned = host.run(&["--json", "owned"]).json();
    assert_eq!(owned["owned"][0]["failing"]["runs"], 10, "{owned:#}");
    let status = host.run(&["--json", "status"]).json();
    let failing = &status["failing"][0];
    assert_eq!(
        (&failing["kind"], &failing["key"], &failing["runs"]),
        (
            &Value::from("files"),
            &Value::from("/etc/fail.conf"),
            &Value::from(10)
        ),
        "{status:#}"
    );
    assert!(failing["first_seen"].as_u64() <= failing["last_seen"].as_u64());
    let status = host.run(&["status"]);
    assert!(status.stdout.contains("failing: 1 resources"), "{status:?}");

    let out = host.apply(&good, 0);
    let cleared = log_lines(&out.stderr, "/etc/fail.conf");
    assert_eq!(cleared.len(), 1, "{out:?}");
    assert!(
        cleared[0].contains("converged again after failing 10 runs"),
        "{cleared:?}"
    );
    let status = host.run(&["--json", "status"]).json();
    assert_eq!(status["failing"], Value::Array(vec![]), "{status:#}");
}
