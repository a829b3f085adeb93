//! Secret content never leaves the machine (docs/declaration.md "Secrets"): a canary string in
//! secret files and in a container's environment is looked for in everything the host prints,
//! logs (at debug, journal-style), records, reports and exports, and found in none of it. The
//! only places it may be are the store's declarations (the one in force, and the generations
//! kept for rollback and revert) and the files themselves.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support;
use crate::support::{Output, Scratch};

/// What no output may contain: every secret below holds it.
const CANARY: &str = "canary-4f1d9c2e";

/// Every file under `dir` but the declarations (in force, generations/) and the digest key, as
/// (path, bytes).
fn store_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("store dir").flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                // The declarations once in force, kept by digest, hold what the one in force does.
                if !(d == dir && name == "generations") {
                    stack.push(path);
                }
            } else if d == dir && (name == "declaration.json" || name == "digest-key") {
                continue;
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out
}

/// Asserts that none of `texts` (what was printed, logged, sent) nor any store file but the
/// declarations (in force, and its generations') and the key holds the canary or the plain
/// SHA-256 of a secret content.
#[track_caller]
fn assert_no_secret(texts: &[(String, String)], store: &Path, secrets: &[&str]) {
    let plain: Vec<String> = secrets.iter().map(|s| sha256_hex(s.as_bytes())).collect();
    let mut places: Vec<(String, String)> = texts.to_vec();
    for (path, bytes) in store_files(store) {
        places.push((
            path.display().to_string(),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    assert!(places.len() > texts.len(), "the store has files");
    for (place, text) in &places {
        assert!(!text.contains(CANARY), "the canary is in {place}:\n{text}");
        for digest in &plain {
            assert!(
                !text.contains(digest.as_str()),
                "a plain digest of secret content is in {place}:\n{text}"
            );
        }
    }
}

/// SHA-256 in hex, through `sha256sum` (the tests share no code with the host).
fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("write");
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

/// Runs `mesh-host ARGS` at debug, keeping what it printed (both streams) under a name.
fn run(host: &Scratch, outputs: &mut Vec<(String, String)>, args: &[&str]) -> Output {
    let out = support::Output::from(
        host.command(args)
            .env("RUST_LOG", "debug")
            .output()
            .expect("run mesh-host"),
    );
    outputs.push((format!("`{}`", args.join(" ")), format!("{out:?}")));
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// Secret files on a scratch root: plan, apply (one of them failing), owned, status, a drift, a
/// `.pacnew` beside one, then the service's runs (journal-style log at debug) and its reports
/// to the control plane, the run history, the failure history, the outbox and the metrics.
#[test]
fn a_canary_in_secret_files_is_in_no_output_log_record_report_or_metric() {
    use support::control_plane::{ControlPlane, CpConfig};
    use support::pki::Pki;
    use support::service::Service;

    let by_mode = format!("user=app\npassword={CANARY}-mode\n");
    let declared = format!("{CANARY}-declared");
    let failing = format!("key={CANARY}-failing\n");
    let drift = format!("password={CANARY}-drift\n");
    let pacnew = format!("password={CANARY}-pacnew\n");
    let json = format!(
        r#"{{"schema": 1, "files": {{
            "/etc/app/secret.conf": {{"content": {}, "mode": "0600"}},
            "/etc/app/token": {{"content": {}, "secret": true}},
            "/etc/app/bad.conf": {{"content": {}, "mode": "0640", "owner": "nosuchuser"}},
            "/etc/app/public.conf": {{"content": "public\n"}}}}}}"#,
        serde_json::Value::from(by_mode.as_str()),
        serde_json::Value::from(declared.as_str()),
        serde_json::Value::from(failing.as_str()),
    );

    let pki = Pki::new();
    let mut cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
    cp.declare(1, &json);
    let host = Scratch::new("secrets-files");
    let prom = host.dir.join("mesh_host.prom");
    host.edit_config(|config| {
        *config =
            serde_json::json!({"interval_secs": 600, "heartbeat_secs": 1, "metrics_file": prom});
    });
    support::ways::link_only(&host, &pki, &cp);
    let file = host.declaration("declaration.json", &json);
    let file = file.to_str().expect("utf-8");
    let mut outputs = Vec::new();

    for args in [["plan", file].as_slice(), &["--json", "plan", file]] {
        let out = run(&host, &mut outputs, args);
        assert_eq!(out.code, 1, "{out:?}");
    }
    // No store yet, so no key: sizes alone.
    let out = run(&host, &mut outputs, &["plan", file]);
    out.assert_stdout("secret, 39 bytes, mode 0600");
    let out = run(&host, &mut outputs, &["apply", file]);
    assert_eq!(out.code, 1, "{out:?}");
    out.assert_stdout("nosuchuser");
    assert_eq!(
        std::fs::read_to_string(host.target("/etc/app/secret.conf")).expect("written"),
        by_mode
    );
    assert_eq!(mode(&host.target("/etc/app/secret.conf")), 0o600);
    // Declared secret with no mode: created 0600, not 0644.
    assert_eq!(mode(&host.target("/etc/app/token")), 0o600);
    assert_eq!(mode(&host.state().join("digest-key")), 0o600);
    assert_eq!(mode(&host.state().join("declaration.json")), 0o600);

    // Drifted, then with a .pacnew beside it.
    std::fs::write(host.target("/etc/app/secret.conf"), &drift).expect("drift");
    std::fs::write(host.target("/etc/app/secret.conf.pacnew"), &pacnew).expect("pacnew");
    for args in [
        ["owned"].as_slice(),
        &["--json", "owned"],
        &["status"],
        &["--json", "status"],
        &["plan", file],
        &["--json", "plan", file],
    ] {
        run(&host, &mut outputs, args);
    }
    let out = run(&host, &mut outputs, &["owned"]);
    out.assert_stdout("a secret file: the difference is not shown");
    let out = run(&host, &mut outputs, &["plan", file]);
    out.assert_stdout("secret content (31 bytes, keyed digest ");

    // The service, at debug, its stderr taken for the journal: it sends the queued report of
    // the apply above and runs on its start.
    let log = host.dir.join("service.log");
    std::fs::write(&log, "").expect("log");
    let meta = std::fs::metadata(&log).expect("log");
    let journal = PathBuf::from(format!("{}:{}", meta.dev(), meta.ino()));
    let state = host.state();
    let mut node = Service::start_with_env(
        host,
        &[
            ("RUST_LOG", Path::new("debug")),
            ("JOURNAL_STREAM", &journal),
        ],
    );
    assert!(
        cp.wait_for(|reports| reports.len() >= 2, Duration::from_secs(30)),
        "{:#?}\n{}",
        cp.reports(),
        node.log()
    );
    assert!(
        support::wait_until(Duration::from_secs(20), || std::fs::read_to_string(&prom)
            .is_ok_and(|m| m.contains("mesh_host_pacnew"))),
        "{}",
        node.log()
    );
    node.stop();
    let service_log = node.log();
    assert!(service_log.starts_with('<'), "journal-style: {service_log}");
    assert!(
        service_log.contains("DEBUG") || service_log.contains("<7>"),
        "{service_log}"
    );
    outputs.push(("the service's log".into(), service_log));
    outputs.push((
        "the control plane's reports".into(),
        serde_json::to_string(&cp.reports()).expect("json"),
    ));
    outputs.push((
        "the metrics file".into(),
        std::fs::read_to_string(&prom).expect("metrics"),
    ));
    let failures = std::fs::read_to_string(state.join("failures.json")).expect("failures");
    assert!(failures.contains("/etc/app/bad.conf"), "{failures}");
    assert!(std::fs::read_to_string(state.join("runs.json")).is_ok());
    assert_no_secret(
        &outputs,
        &state,
        &[&by_mode, &declared, &failing, &drift, &pacnew],
    );
    cp.stop();
}

/// A container's environment values are secret: a podman that echoes its `--env-file` in its
/// complaint (as podman does about a line it cannot take) fails the create, and the canary is
/// in no output, record, report (queued in the outbox), failure or metric. The wrapper stands
/// in for podman entirely, so this needs neither root nor the sandbox; nothing else is
/// declared, so the live root is not touched.
#[test]
fn a_canary_in_a_container_env_value_is_withheld_from_a_tool_that_echoes_it() {
    let host = Scratch::new("secrets-env");
    let prom = host.dir.join("mesh_host.prom");
    let podman = host.dir.join("podman");
    std::fs::write(
        &podman,
        r#"#!/bin/sh
case "$1" in
ps) echo '[]'; exit 0 ;;
create)
    for arg in "$@"; do
        case "$arg" in --env-file=*) file="${arg#--env-file=}" ;; esac
    done
    echo "Error: parsing env file: invalid line: $(cat "$file")" >&2
    exit 125 ;;
esac
exit 0
"#,
    )
    .expect("wrapper");
    std::fs::set_permissions(&podman, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(
        host.dir.join("config.json"),
        format!(
            r#"{{"control_plane": {{"address": "127.0.0.1:9", "ca_file": "/nonexistent/ca.pem",
                 "node": "n1", "secret_file": "/nonexistent/secret"}},
                 "podman": {{"command": ["{}"]}}, "metrics_file": "{}"}}"#,
            podman.display(),
            prom.display()
        ),
    )
    .expect("config");
    let mut host = host;
    host.offline_root = false;
    let value = format!("{CANARY}-env");
    let json = format!(
        r#"{{"schema": 1, "containers": {{"canary-web": {{"image": "localhost/web:1",
             "env": {{"DB_PASSWORD": "{value}", "MODE": "production"}}}}}}}}"#
    );
    let file = host.declaration("declaration.json", &json);
    let file = file.to_str().expect("utf-8");
    let mut outputs = Vec::new();
    run(&host, &mut outputs, &["plan", file]);
    for args in [
        ["apply", file].as_slice(),
        &["--json", "--trace-commands", "apply", file],
    ] {
        let out = run(&host, &mut outputs, args);
        assert_eq!(out.code, 1, "{out:?}");
        assert!(out.stdout.contains("[secret withheld]"), "{out:?}");
    }
    for args in [
        ["owned"].as_slice(),
        &["--json", "owned"],
        &["status"],
        &["--json", "status"],
    ] {
        run(&host, &mut outputs, args);
    }
    outputs.push((
        "the metrics file".into(),
        std::fs::read_to_string(&prom).expect("metrics"),
    ));
    let state = host.state();
    let outbox = std::fs::read_dir(state.join("outbox"))
        .expect("outbox")
        .count();
    assert!(outbox >= 2, "the reports are queued");
    assert!(
        !state.join("container-env/canary-web").exists(),
        "the env file lives only while podman create runs"
    );
    let failures = std::fs::read_to_string(state.join("failures.json")).expect("failures");
    assert!(failures.contains("canary-web"), "{failures}");
    assert_no_secret(&outputs, &state, &[&value]);
}

/// A secret unit against the sandbox's systemd: its file is written 0600, and a systemctl that
/// echoes the unit file when asked to start it (as systemd quotes a line it cannot take) fails
/// the run without the canary reaching any output, record, failure or the store.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_canary_in_a_secret_unit_is_withheld_from_a_systemctl_that_echoes_it() {
    let sb = support::sandbox();
    let unit = format!("mesh-it-secret-{}.service", std::process::id());
    struct Cleanup(PathBuf, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let systemctl = |args: &[&str]| {
                let _ = std::process::Command::new("systemctl")
                    .arg("--user")
                    .args(args)
                    .output();
            };
            // Not `disable --now`: systemctl 262 stops nothing with it unless systemd is PID 1.
            systemctl(&["disable", "--", &self.1]);
            systemctl(&["stop", "--", &self.1]);
            let _ = std::fs::remove_file(self.0.join(&self.1));
            systemctl(&["daemon-reload"]);
            systemctl(&["reset-failed", "--", &self.1]);
        }
    }
    let _cleanup = Cleanup(sb.unit_dir.clone(), unit.clone());
    let host = sb.host("secrets-unit", "");
    let wrapper = host.dir.join("systemctl");
    std::fs::write(
        &wrapper,
        format!(
            r#"#!/bin/sh
for arg in "$@"; do
    if [ "$arg" = start ]; then
        echo "Failed to start: bad setting in $(cat '{}/{unit}')" >&2
        exit 1
    fi
done
exec systemctl --user "$@"
"#,
            sb.unit_dir.display()
        ),
    )
    .expect("wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    host.set_tool("systemctl", &[wrapper.to_str().expect("utf-8")]);
    let content = format!(
        "[Service]\nType=oneshot\nRemainAfterExit=yes\nEnvironment=API_TOKEN={CANARY}-unit\nExecStart=/bin/true\n"
    );
    let json = serde_json::json!({"schema": 1, "units": {&unit: {
        "content": content, "active": true, "secret": true}}})
    .to_string();
    let file = host.declaration("declaration.json", &json);
    let file = file.to_str().expect("utf-8");
    let mut outputs = Vec::new();
    run(&host, &mut outputs, &["plan", file]);
    let out = run(
        &host,
        &mut outputs,
        &["--json", "--trace-commands", "apply", file],
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("[secret withheld]"), "{out:?}");
    assert_eq!(mode(&sb.unit_dir.join(&unit)), 0o600);
    for args in [
        ["apply", file].as_slice(),
        &["owned"],
        &["--json", "owned"],
        &["status"],
    ] {
        run(&host, &mut outputs, args);
    }
    let failures = std::fs::read_to_string(host.state().join("failures.json")).expect("failures");
    assert!(failures.contains(&unit), "{failures}");
    assert_no_secret(&outputs, &host.state(), &[&content]);
}
