//! What reaches a person or a monitoring system: the failure history (a repeating failure is
//! logged once, shown with its streak by `owned` and `status`), and the Prometheus textfile
//! metrics scraped through the real node_exporter.

use serde_json::Value;

use crate::support;
use crate::support::Scratch;

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
    status.assert_stdout("failing: 1 resources");

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

/// Debian's node_exporter, started on a free loopback port with only the textfile collector,
/// reading `dir`; stopped when dropped.
struct NodeExporter {
    child: std::process::Child,
    port: u16,
}

impl NodeExporter {
    /// Panics when it is not installed (tests/sandbox/apt-packages installs it).
    fn start(dir: &std::path::Path) -> NodeExporter {
        let program = "prometheus-node-exporter";
        let installed = std::process::Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            installed,
            "{program} is not installed (tests/sandbox/apt-packages): {}",
            support::SETUP
        );
        // A port that was free a moment ago; if another process takes it meanwhile, try again.
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = std::process::Command::new(program)
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--collector.disable-defaults")
                .arg("--collector.textfile")
                .arg(format!("--collector.textfile.directory={}", dir.display()))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start node_exporter");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while std::time::Instant::now() < deadline {
                if child.try_wait().expect("node_exporter status").is_some() {
                    break; // the port was taken: another one
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return NodeExporter { child, port };
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("node_exporter did not come up");
    }

    /// Scrapes /metrics over HTTP: series (labels sorted) -> value.
    fn scrape(&self) -> std::collections::BTreeMap<String, f64> {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect node_exporter");
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .expect("request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("response");
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        body.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((normalise(series), value.parse().ok()?))
            })
            .collect()
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name{b="2",a="1"}` as `name{a="1",b="2"}`: node_exporter orders labels its own way.
fn normalise(series: &str) -> String {
    let Some((name, labels)) = series.split_once('{') else {
        return series.to_string();
    };
    let labels = labels.strip_suffix('}').unwrap_or(labels);
    let mut parts = Vec::new();
    let (mut current, mut quoted, mut escaped) = (String::new(), false, false);
    for c in labels.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts.sort();
    format!("{name}{{{}}}", parts.join(","))
}

fn value(metrics: &std::collections::BTreeMap<String, f64>, series: &str) -> Option<f64> {
    metrics.get(&normalise(series)).copied()
}

/// Issue 31: the metrics describe the machine after the run. An apply that created two files
/// says they are in sync (not missing until the next run), the duration has its fraction, and
/// the timestamps are named `_timestamp_seconds`.
#[test]
fn metrics_after_an_apply_that_created_files_count_them_in_sync() {
    let probe = Scratch::new("metrics-after");
    let prom = probe.dir.join("mesh_host.prom");
    let host = Scratch::with_config(
        "metrics-after",
        &format!(r#"{{"metrics_file": "{}"}}"#, prom.display()),
    );
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/one.conf": {"content": "1\n"},
            "/etc/two.conf": {"content": "2\n"}, "/etc/bad.conf": {"content": "b\n", "owner": "nosuchuser"}}}"#,
    );
    host.apply(&file, 1);
    let text = std::fs::read_to_string(&prom).expect("the metrics file");
    let files = |state: &str| {
        metric(
            &prom,
            &format!(r#"mesh_host_resources{{kind="files",state="{state}"}}"#),
        )
    };
    assert_eq!(files("in_sync").as_deref(), Some("2"), "{text}");
    assert_eq!(files("missing").as_deref(), Some("0"), "{text}");
    assert_eq!(files("failed").as_deref(), Some("1"), "{text}");
    let duration = metric(&prom, "mesh_host_last_run_duration_seconds").expect("a duration");
    let seconds: f64 = duration.parse().expect("a number");
    assert!(
        seconds > 0.0,
        "a run takes some time, said in fractions: {text}"
    );
    assert!(
        metric(
            &prom,
            r#"mesh_host_resource_failing_since_timestamp_seconds{kind="files",key="/etc/bad.conf"}"#
        )
        .is_some(),
        "{text}"
    );
}

#[test]
#[ignore = "needs prometheus-node-exporter: run ./tests/run.sh as root"]
fn metrics_reach_prometheus_through_node_exporters_textfile_collector() {
    let probe = Scratch::new("metrics-probe");
    let textfile = probe.dir.join("textfile");
    std::fs::create_dir_all(&textfile).expect("textfile dir");
    let exporter = NodeExporter::start(&textfile);
    let prom = textfile.join("mesh_host.prom");
    let host = Scratch::with_config(
        "metrics",
        &format!(r#"{{"metrics_file": "{}"}}"#, prom.display()),
    );
    let failing = host.declaration(
        "failing.json",
        r#"{"schema": 1, "revision": 7, "files": {"/etc/ok.conf": {"content": "a\n"},
            "/etc/bad.conf": {"content": "b\n", "owner": "nosuchuser"}}}"#,
    );
    host.apply(&failing, 1);
    let status = host.run(&["--json", "status"]).json();
    let first_seen = status["failing"][0]["first_seen"].as_f64();
    let ended = status["runs"][0]["ended"].as_f64();

    let m = exporter.scrape();
    let version = format!(
        r#"mesh_host_info{{version="{}"}}"#,
        env!("CARGO_PKG_VERSION")
    );
    for (series, want) in [
        ("node_textfile_scrape_error", Some(0.0)),
        (version.as_str(), Some(1.0)),
        ("mesh_host_last_run_timestamp_seconds", ended),
        ("mesh_host_last_success_timestamp_seconds", Some(0.0)),
        (r#"mesh_host_last_run_outcome{outcome="failed"}"#, Some(1.0)),
        (
            r#"mesh_host_last_run_outcome{outcome="converged"}"#,
            Some(0.0),
        ),
        (
            r#"mesh_host_runs_total{trigger="apply",outcome="failed"}"#,
            Some(1.0),
        ),
        // After the run: ok.conf was created, so it is in sync now.
        (
            r#"mesh_host_resources{kind="files",state="missing"}"#,
            Some(0.0),
        ),
        (
            r#"mesh_host_resources{kind="files",state="failed"}"#,
            Some(1.0),
        ),
        (
            r#"mesh_host_resources{kind="files",state="in_sync"}"#,
            Some(1.0),
        ),
        (
            r#"mesh_host_resource_failing_since_timestamp_seconds{kind="files",key="/etc/bad.conf"}"#,
            first_seen,
        ),
        ("mesh_host_declaration_revision", Some(7.0)),
        (r#"mesh_host_declaration_source{source="local"}"#, Some(1.0)),
        (
            r#"mesh_host_declaration_source{source="control_plane"}"#,
            Some(0.0),
        ),
        ("mesh_host_link_up", Some(0.0)),
        ("mesh_host_outbox_reports", Some(0.0)),
        ("mesh_host_pacnew_files", Some(0.0)),
    ] {
        assert!(
            want.is_some(),
            "{series}: nothing to compare with in {status:#}"
        );
        assert_eq!(value(&m, series), want, "{series} in {m:#?}");
    }
    assert!(value(&m, "mesh_host_declaration_age_seconds").is_some());
    assert!(value(&m, "mesh_host_last_run_duration_seconds").is_some());

    let fixed = host.declaration(
        "fixed.json",
        r#"{"schema": 1, "revision": 8, "files": {"/etc/ok.conf": {"content": "a\n"},
            "/etc/bad.conf": {"content": "b\n"}}}"#,
    );
    host.apply(&fixed, 0);
    let m = exporter.scrape();
    let status = host.run(&["--json", "status"]).json();
    for (series, want) in [
        ("node_textfile_scrape_error", Some(0.0)),
        (
            "mesh_host_last_success_timestamp_seconds",
            status["runs"][1]["ended"].as_f64(),
        ),
        (
            r#"mesh_host_last_run_outcome{outcome="converged"}"#,
            Some(1.0),
        ),
        (
            r#"mesh_host_runs_total{trigger="apply",outcome="converged"}"#,
            Some(1.0),
        ),
        (
            r#"mesh_host_runs_total{trigger="apply",outcome="failed"}"#,
            Some(1.0),
        ),
        // ok.conf was in sync, bad.conf created by this run: both in sync after it.
        (
            r#"mesh_host_resources{kind="files",state="in_sync"}"#,
            Some(2.0),
        ),
        (
            r#"mesh_host_resources{kind="files",state="failed"}"#,
            Some(0.0),
        ),
        (
            r#"mesh_host_resource_failing_since_timestamp_seconds{kind="files",key="/etc/bad.conf"}"#,
            None,
        ),
        ("mesh_host_declaration_revision", Some(8.0)),
    ] {
        assert_eq!(value(&m, series), want, "{series} in {m:#?}");
    }
    drop(exporter);
}

/// The sample of `series` in a metrics file, if written.
fn metric(prom: &std::path::Path, series: &str) -> Option<String> {
    let text = std::fs::read_to_string(prom).ok()?;
    text.lines()
        .find_map(|l| Some(l.strip_prefix(series)?.strip_prefix(' ')?.to_string()))
}

#[test]
fn the_service_writes_metrics_on_link_changes_and_reports_carry_the_failure_streak() {
    use support::control_plane::{ControlPlane, CpConfig};
    use support::pki::Pki;
    use support::service::Service;
    use support::wait_until;
    let wait = std::time::Duration::from_secs(20);

    let pki = Pki::new();
    let mut cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
    cp.declare(
        3,
        r#"{"schema": 1, "files": {"/etc/bad.conf": {"content": "b\n", "owner": "nosuchuser"}}}"#,
    );
    let host = Scratch::new("metrics-service");
    let prom = host.dir.join("mesh_host.prom");
    host.edit_config(|config| {
        *config =
            serde_json::json!({"interval_secs": 600, "heartbeat_secs": 1, "metrics_file": prom});
    });
    support::ways::link_only(&host, &pki, &cp);
    let node = Service::start(host);
    assert!(
        wait_until(wait, || {
            metric(&prom, "mesh_host_link_up").as_deref() == Some("1")
                && metric(&prom, "mesh_host_declaration_revision").as_deref() == Some("3")
        }),
        "{}\n{}",
        std::fs::read_to_string(&prom).unwrap_or_default(),
        node.log()
    );
    assert_eq!(
        metric(
            &prom,
            r#"mesh_host_declaration_source{source="control_plane"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert!(
        cp.wait_for(
            |reports| reports
                .iter()
                .any(|r| r["failing"][0]["key"] == "/etc/bad.conf"
                    && r["failing"][0]["runs"] == 1
                    && r["failing"][0]["first_seen"].is_u64()),
            wait
        ),
        "{:#?}",
        cp.reports()
    );
    cp.stop();
    assert!(
        wait_until(wait, || metric(&prom, "mesh_host_link_up").as_deref()
            == Some("0")),
        "{}\n{}",
        std::fs::read_to_string(&prom).unwrap_or_default(),
        node.log()
    );
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_package_upgrade_that_leaves_a_pacnew_for_an_owned_file_is_shown_everywhere() {
    use support::{sandbox, sh, sysroot_with_repo};
    let sb = sandbox();
    // A mounted root (pacman --sysroot) holding its own conf, database and a copy of the repo, so
    // the owned file under /etc and pacman's .pacnew are in the same scratch root.
    let metrics =
        std::env::temp_dir().join(format!("mesh-host-pacnew-{}.prom", std::process::id()));
    let host = Scratch::with_config(
        "pacnew",
        &format!(
            r#"{{"pacman": {{"command": ["pacman"]}}, "metrics_file": "{}"}}"#,
            metrics.display()
        ),
    );
    let root = host.root();
    sysroot_with_repo(&root, &sb.pacman_repo);
    let pacman = |args: &str| {
        sh(&format!(
            "LC_ALL=C pacman --sysroot {} {args}",
            root.display()
        ))
    };

    let managed = "# managed by mesh\nlisten = 8080\nworkers = 2\n";
    let declaration = host.declaration(
        "conf.json",
        &format!(
            r#"{{"schema": 1, "packages": {{"mesh-conf": {{}}}},
                "files": {{"/etc/mesh-conf.conf": {{"content": {managed:?}}}}}}}"#
        ),
    );
    host.apply(&declaration, 0);
    assert_eq!(
        std::fs::read_to_string(host.target("/etc/mesh-conf.conf"))
            .ok()
            .as_deref(),
        Some(managed)
    );

    // Upstream ships a new default; the machine's own upgrade keeps the host's file and leaves
    // the new default beside it.
    sh(&format!(
        "printf 'export MESH_PACMAN_REPO=%s\\n' {repo} > {dir}/env && touch {dir}/.mesh-sandbox && \
         MESH_SANDBOX={dir} {bump} mesh-conf 1.1 && touch -d '+2 seconds' {repo}/meshtest.db*",
        repo = root.join("repo").display(),
        dir = root.display(),
        bump = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sandbox/bump-package.sh"),
    ));
    let upgrade = pacman("-Syu --noconfirm");
    let pacnew = host.target("/etc/mesh-conf.conf.pacnew");
    assert_eq!(
        std::fs::read_to_string(&pacnew).ok().as_deref(),
        Some("# mesh-conf 1.1-1 default\nlisten = 80\nworkers = 2\n"),
        "{upgrade}"
    );
    let want = serde_json::json!({"path": "/etc/mesh-conf.conf", "suffix": "pacnew", "added": 2, "removed": 2});

    let owned = host.run(&["--json", "owned"]).json();
    let row = owned["owned"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["key"] == "/etc/mesh-conf.conf"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(row["pacnew"], serde_json::json!([want]), "{owned:#}");
    assert_eq!(row["state"], "in sync", "{owned:#}");
    let text = host.run(&["owned"]).stdout;
    assert!(
        text.contains(
            "? /etc/mesh-conf.conf.pacnew beside it (+2 -2 lines): the package's default changed"
        ),
        "{text}"
    );

    let plan = host.run(&["--json", "plan", declaration.to_str().expect("utf-8")]);
    assert_eq!(plan.json()["pacnew"], serde_json::json!([want]), "{plan:?}");
    let plan = host.run(&["plan", declaration.to_str().expect("utf-8")]);
    plan.assert_stdout("? files /etc/mesh-conf.conf: /etc/mesh-conf.conf.pacnew beside it");

    let run = host.run(&["--json", "reconcile"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["pacnew"], serde_json::json!([want]), "{run:?}");
    let status = host.run(&["--json", "status"]).json();
    assert_eq!(status["pacnew"], serde_json::json!([want]), "{status:#}");
    assert!(host
        .run(&["status"])
        .stdout
        .contains(".pacnew beside it (+2 -2 lines)"));
    assert_eq!(
        metric(&metrics, "mesh_host_pacnew_files").as_deref(),
        Some("1")
    );
    assert_eq!(
        metric(
            &metrics,
            r#"mesh_host_pacnew_diff_lines{path="/etc/mesh-conf.conf",suffix="pacnew"}"#
        )
        .as_deref(),
        Some("4")
    );

    // The operator merged it: the next run says nothing more.
    std::fs::remove_file(&pacnew).expect("remove .pacnew");
    host.run(&["reconcile"]);
    let status = host.run(&["--json", "status"]).json();
    assert_eq!(status["pacnew"], serde_json::json!([]), "{status:#}");
    assert_eq!(
        metric(&metrics, "mesh_host_pacnew_files").as_deref(),
        Some("0")
    );
    let _ = std::fs::remove_file(&metrics);
}
