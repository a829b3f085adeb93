//! `mesh-host run` end to end: the real binary as a service against the reference control plane
//! (TLS with a test CA), files in a scratch root. Timers and heartbeats are set to a second so
//! the tests wait on conditions, not on fixed sleeps.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support;
use crate::support::control_plane::{reconnect_policy, Behaviour, ControlPlane, CpConfig};
use crate::support::pki::Pki;
use crate::support::service::Service;
use crate::support::{wait_until, Scratch};

const WAIT: Duration = Duration::from_secs(20);

/// A node: a scratch host running `mesh-host run`, trusting `pki`'s CA and connecting to `cp`
/// (if any), with `extra` config members.
fn node(label: &str, pki: &Pki, cp: Option<&ControlPlane>, extra: &str) -> Service {
    node_with_env(label, pki, cp, extra, &[])
}

/// `node`, with extra environment variables for the service.
fn node_with_env(
    label: &str,
    pki: &Pki,
    cp: Option<&ControlPlane>,
    extra: &str,
    env: &[(&str, &std::path::Path)],
) -> Service {
    let host = Scratch::new(label);
    pki.write(&host.dir).expect("pki");
    std::fs::write(host.dir.join("secret"), "s3cret\n").expect("secret");
    let link = match cp {
        Some(cp) => format!(
            r#""control_plane": {{"address": "{}", "server_name": "localhost", "ca_file": "{}", "node": "n1", "secret_file": "{}"}},"#,
            cp.addr(),
            host.dir.join("ca.pem").display(),
            host.dir.join("secret").display()
        ),
        None => String::new(),
    };
    // A one-second drift timer unless the test sets its own.
    let interval = if extra.contains("interval_secs") {
        ""
    } else {
        r#""interval_secs": 1,"#
    };
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    let config = format!(r#"{{{link} {interval} "heartbeat_secs": 1{extra}}}"#);
    std::fs::write(host.dir.join("config.json"), config).expect("config");
    Service::start_with_env(host, env)
}

/// Waits until the node's /etc/motd is the line `text`; fails with the service's log.
fn assert_motd(node: &Service, text: &str) {
    let want = format!("{text}\n");
    assert!(
        wait_until(WAIT, || node.read("/etc/motd").as_deref()
            == Some(want.as_str())),
        "/etc/motd never became {want:?}\n{}",
        node.log()
    );
}

fn motd(text: &str) -> String {
    format!(
        r#"{{"schema": 1, "files": {{"/etc/motd": {{"content": "{text}\n", "mode": "0644"}}}}}}"#
    )
}

fn control_plane(pki: &Pki, behaviour: Behaviour) -> ControlPlane {
    let mut config = CpConfig::new("n1", "s3cret");
    config.behaviour = behaviour;
    ControlPlane::start(pki, config)
}

fn has_report(reports: &[Value], pred: impl Fn(&Value) -> bool) -> bool {
    reports.iter().any(pred)
}

fn triggers(report: &Value) -> Vec<String> {
    report["trigger"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(String::from))
        .collect()
}

#[test]
fn a_pushed_declaration_is_applied_and_reported() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd("one"));
    let node = node("push", &pki, Some(&cp), r#""interval_secs": 600"#);
    assert_motd(&node, "one");
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| r["revision"] == 1
                && r["outcome"] == "converged"
                && triggers(r).contains(&"declaration".into())
                && r["changes"][0]["key"] == "/etc/motd"),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
    assert_eq!(cp.hellos()[0]["node"], "n1");
    let status = node.status();
    assert_eq!(status["service"]["link"], "connected");
    assert_eq!(status["in_force"]["source"]["kind"], "control-plane");
    cp.declare(2, &motd("two"));
    assert_motd(&node, "two");
    // Back to the first declaration's bytes, whose content has the same size as the second's:
    // the files index agrees with the second, so the first's content is hashed and written.
    cp.declare(3, &motd("one"));
    assert_motd(&node, "one");
}

#[test]
fn the_timer_repairs_drift_with_the_link_up_and_with_the_control_plane_gone() {
    let pki = Pki::new();
    let mut cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd("held"));
    // The watcher would repair the edits first (tests/it/watch.rs): this is the timer's test.
    let node = node("drift", &pki, Some(&cp), r#""watch": false"#);
    assert_motd(&node, "held");
    std::fs::write(node.host.target("/etc/motd"), "edited\n").unwrap();
    assert_motd(&node, "held");
    assert!(cp.wait_for(
        |r| has_report(r, |r| triggers(r).contains(&"timer".into())
            && r["drift"][0]["key"] == "/etc/motd"),
        WAIT
    ));

    cp.stop();
    std::fs::write(
        node.host.target("/etc/motd"),
        "edited while the mesh is down\n",
    )
    .unwrap();
    assert_motd(&node, "held");
    assert!(wait_until(WAIT, || node.status()["service"]["link"] == "retrying"));
}

#[test]
fn after_a_control_plane_restart_the_host_reconnects_and_reports_from_its_outbox() {
    let pki = Pki::new();
    let mut cp = control_plane(&pki, Behaviour::Normal);
    let addr = cp.addr();
    cp.declare(1, &motd("held"));
    let node = node("outbox", &pki, Some(&cp), r#""watch": false"#);
    assert_motd(&node, "held");
    cp.stop();
    // A run the control plane cannot hear about yet: drift repaired while it is down.
    std::fs::write(node.host.target("/etc/motd"), "edited\n").unwrap();
    assert_motd(&node, "held");
    // The run record is written just after the file: wait for it rather than race it.
    let runs_with_changes = || {
        node.runs()
            .iter()
            .filter(|r| r["changes"].as_array().is_some_and(|c| !c.is_empty()))
            .count()
    };
    assert!(
        wait_until(WAIT, || runs_with_changes() >= 2),
        "{}",
        node.log()
    );

    let mut config = CpConfig::new("n1", "s3cret");
    config.bind = Some(addr);
    let cp = ControlPlane::start(&pki, config);
    cp.declare(1, &motd("held"));
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| triggers(r).contains(&"timer".into())
                && r["drift"][0]["key"] == "/etc/motd"),
            Duration::from_secs(30)
        ),
        "the run made while the control plane was down is reported after the reconnect: {:#?}\n{}",
        cp.reports(),
        node.log()
    );
    assert!(cp.wait_for(
        |r| has_report(r, |r| triggers(r).contains(&"reconnect".into())),
        WAIT
    ));
    // Reports come oldest first.
    let ids: Vec<u64> = cp
        .reports()
        .iter()
        .filter_map(|r| r["id"].as_u64())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}

#[test]
fn the_control_planes_reconnect_policy_spreads_a_large_fleets_return() {
    let pki = Pki::new();
    let mut config = CpConfig::new("n1", "s3cret");
    // A control plane that knows 3,000 hosts: they must not all come back in the same second.
    config.fleet_size = 3_000;
    let mut cp = ControlPlane::start(&pki, config);
    let node = node("policy", &pki, Some(&cp), "");
    let taken =
        "reconnect policy from the control plane: first retry within 50000 ms, at most 300 s";
    assert!(
        wait_until(WAIT, || node.log().contains(taken)),
        "{}",
        node.log()
    );
    cp.stop();
    assert!(wait_until(WAIT, || node.status()["service"]["link"] == "retrying"));
    let service = &node.status()["service"];
    let (at, now) = (service["link_at"].as_u64(), node_now());
    let wait = at.map(|at| at.saturating_sub(now));
    assert!(
        wait.is_some_and(|w| w <= 51),
        "the first retry comes within the policy's base: {service:#}"
    );
}

/// The base grows with the fleet, a lone host's a second, up to 50 s from 300 hosts on.
#[test]
fn the_reference_reconnect_base_grows_with_the_fleet_to_50_s() {
    let bases: Vec<u64> = [0, 1, 6, 150, 300, 1_000, 100_000]
        .iter()
        .map(|&hosts| reconnect_policy(hosts).0)
        .collect();
    assert_eq!(bases, [1_000, 1_000, 1_000, 25_000, 50_000, 50_000, 50_000]);
    assert_eq!(reconnect_policy(1_000).1, 300_000);
}

fn node_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A declaration from the link is parsed once, on arrival: the run that converges it and the
/// watches set after that run use what was parsed then (the engine logs each parse at debug).
/// No run writes a file already watched, so no watch check (which parses) comes in between.
#[test]
fn a_declaration_from_the_link_is_parsed_once() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd("one"));
    let debug = std::path::Path::new("info,mesh_host::engine=debug");
    let node = node_with_env(
        "parsed-once",
        &pki,
        Some(&cp),
        r#""interval_secs": 600"#,
        &[("RUST_LOG", debug)],
    );
    let converged = |revision: u64| {
        cp.wait_for(
            |r| {
                has_report(r, |r| {
                    r["revision"] == revision && r["outcome"] == "converged"
                })
            },
            WAIT,
        )
    };
    let parses = || node.log().matches("declaration parsed").count();
    // The report goes out once the watches are set from the run.
    assert!(converged(1), "{:#?}", cp.reports());
    assert_eq!(parses(), 1, "{}", node.log());
    // /etc/motd as it is, and a file in a directory not watched yet.
    cp.declare(
        2,
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "one\n", "mode": "0644"},
            "/etc/two/app.conf": {"content": "two\n", "mode": "0644"}}}"#,
    );
    assert!(converged(2), "{:#?}", cp.reports());
    assert_eq!(parses(), 2, "{}", node.log());
    // The watches follow the run's declaration: an edit of the new file is repaired.
    assert_eq!(node.status()["service"]["watch"]["state"], "on");
    std::fs::write(node.host.target("/etc/two/app.conf"), "edited\n").expect("edit");
    assert!(
        wait_until(WAIT, || node.read("/etc/two/app.conf").as_deref()
            == Some("two\n")),
        "{}",
        node.log()
    );
    assert!(node
        .log()
        .contains("watch: drift in files /etc/two/app.conf"));
}

#[test]
fn a_stale_revision_is_ignored_and_an_invalid_declaration_rejected() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(5, &motd("five"));
    let node = node("stale", &pki, Some(&cp), r#""interval_secs": 600"#);
    assert_motd(&node, "five");
    cp.send_declare(3, &motd("three"));
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| r["revision"] == 3 && r["outcome"] == "ignored"),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
    cp.send_declare(
        6,
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "x", "mode": "0999"}}}"#,
    );
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| r["revision"] == 6
                && r["outcome"] == "rejected"
                && r["message"].as_str().unwrap_or("").contains(
                    r#"files["/etc/motd"].mode: "0999" is not an octal mode"#
                )),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
    assert_eq!(node.read("/etc/motd").as_deref(), Some("five\n"));
    assert_eq!(node.status()["in_force"]["revision"], 5);
}

#[test]
fn a_control_plane_not_signed_by_the_pinned_ca_is_refused() {
    let pinned = Pki::new();
    let rogue = Pki::rogue();
    let cp = control_plane(&rogue, Behaviour::Normal);
    cp.declare(1, &motd("impostor"));
    let node = node("rogue", &pinned, Some(&cp), "");
    assert!(cp.wait_for_connections(2, WAIT), "the host keeps retrying");
    assert!(
        cp.hellos().is_empty(),
        "no credentials are ever sent to an impostor"
    );
    assert!(node.read("/etc/motd").is_none());
    let error = node.status()["service"]["last_error"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        error.contains("TLS") || error.contains("certificate"),
        "{error}"
    );
    // The impostor learns why: the TLS alert rustls produced, not a bare end of stream.
    assert!(
        cp.wait_for_end("received fatal alert: ", WAIT),
        "{:?}",
        cp.ends()
    );
}

#[test]
fn hostile_control_planes_drop_the_link_and_the_host_reconnects() {
    let pki = Pki::new();
    for behaviour in Behaviour::HOSTILE {
        let cp = control_plane(&pki, behaviour);
        let mut node = node("hostile", &pki, Some(&cp), "");
        assert!(
            cp.wait_for_connections(2, Duration::from_secs(30)),
            "{behaviour:?}: no reconnect\n{}",
            node.log()
        );
        assert!(node.alive(), "{behaviour:?}: the host died");
        let error = node.status()["service"]["last_error"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(!error.is_empty(), "{behaviour:?}: no error recorded");
        // Before it closes, the host names the problem in an `error` frame.
        let named = match behaviour {
            Behaviour::Garbage => {
                Some("the host closes: \"protocol error: a frame that is not a message")
            }
            Behaviour::OversizedFrame => {
                Some("the host closes: \"frame of 4294967280 bytes announced")
            }
            Behaviour::HalfFrameThenSilence => {
                Some("the host closes: \"no bytes from the control plane for 3 s")
            }
            _ => None,
        };
        if let Some(named) = named {
            assert!(
                cp.wait_for_end(named, WAIT),
                "{behaviour:?}: {:?}",
                cp.ends()
            );
        }
        assert_eq!(node.stop(), Some(0));
    }
}

/// A huge bad declaration is rejected with a report the control plane can take (its problem
/// count and the first problems, under 1 MiB), and the declarations after it still go through.
#[test]
fn the_rejection_of_a_huge_bad_declaration_is_capped() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    let node = node("huge-bad", &pki, Some(&cp), r#""interval_secs": 600"#);
    let problems = 100_000;
    let files: serde_json::Map<String, Value> = (0..problems)
        .map(|i| {
            (
                format!("etc/bad-{i:06}"),
                serde_json::json!({"content": "a"}),
            )
        })
        .collect();
    let bad = serde_json::json!({"schema": 1, "files": files}).to_string();
    cp.send_declare(5, &bad);
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| r["outcome"] == "rejected"),
            Duration::from_secs(60)
        ),
        "{}",
        node.log()
    );
    let report = cp
        .reports()
        .into_iter()
        .find(|r| r["outcome"] == "rejected")
        .unwrap_or_default();
    let size = report.to_string().len();
    let message = report["message"].as_str().unwrap_or_default().to_string();
    eprintln!("a rejection of {problems} problems: a report of {size} bytes");
    assert!(size <= 1 << 20, "{size} bytes");
    assert!(
        message.starts_with(&format!("revision 5: {problems} problems")),
        "{}",
        &message[..200.min(message.len())]
    );
    assert!(message.contains(r#"files["etc/bad-000000"]: path is not absolute"#));
    assert!(message.contains("more lines"), "the rest is counted");
    cp.declare(6, &motd("after"));
    assert_motd(&node, "after");
}

#[test]
fn on_sigterm_the_control_plane_is_told_the_host_is_stopping() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    let mut node = node("goodbye", &pki, Some(&cp), r#""interval_secs": 600"#);
    assert!(
        wait_until(WAIT, || node.status()["service"]["link"] == "connected"),
        "{}",
        node.log()
    );
    assert_eq!(node.stop(), Some(0), "{}", node.log());
    assert!(
        cp.wait_for_end("the host closes: \"the host is stopping\"", WAIT),
        "the goodbye is written before close_notify: {:?}",
        cp.ends()
    );
}

#[test]
fn sigterm_during_a_run_ends_cleanly_and_records_it_interrupted() {
    let pki = Pki::new();
    // A package manager that takes its time: the run is still in its first kind when SIGTERM comes.
    let slow = r#""pacman": {"command": ["sh", "-c", "sleep 1", "sh"]}"#;
    let mut node = node("sigterm", &pki, None, slow);
    let declaration = node.host.declaration(
        "d.json",
        r#"{"schema": 1, "packages": {"slowpkg": {}}, "files": {"/etc/motd": {"content": "x"}}}"#,
    );
    // The store's declaration in force is what the start run applies.
    let _ = node.stop();
    let out = node.host.run(&["apply", declaration.to_str().unwrap()]);
    // The stub exits 0 without installing anything, which the host catches.
    assert_eq!(out.code, 1, "{out:?}");
    out.assert_stdout("the tool reported success, but it still differs");
    std::fs::remove_file(node.host.target("/etc/motd")).unwrap();
    node.restart(&[]);
    assert!(
        wait_until(WAIT, || node.log().contains("reconciling (start")),
        "{}",
        node.log()
    );
    assert_eq!(node.stop(), Some(0), "{}", node.log());
    let last = node.runs().last().cloned().unwrap_or_default();
    assert_eq!(last["outcome"], "interrupted", "{last:#}");
    assert!(
        node.read("/etc/motd").is_none(),
        "the kinds after the interrupted one waited"
    );
    assert_eq!(node.status()["service"]["state"], "stopped");
}

#[test]
fn sigusr1_reconciles_now() {
    let pki = Pki::new();
    let node = node("usr1", &pki, None, r#""interval_secs": 600"#);
    let declaration = node.host.declaration("d.json", &motd("hello"));
    node.host.apply_waiting(&declaration, 0);
    assert!(wait_until(WAIT, || node
        .log()
        .contains("reconciling (start)")));
    std::fs::write(node.host.target("/etc/motd"), "edited\n").unwrap();
    node.signal(libc::SIGUSR1);
    assert_motd(&node, "hello");
    assert!(wait_until(WAIT, || node
        .runs()
        .iter()
        .any(|r| r["trigger"] == "signal")));
}

#[test]
fn a_local_apply_is_reported_and_replaced_by_the_next_declaration() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd("from the mesh"));
    let node = node("local", &pki, Some(&cp), r#""interval_secs": 600"#);
    assert_motd(&node, "from the mesh");
    let local: PathBuf = node
        .host
        .declaration("local.json", &motd("rescued by hand"));
    let out = node.host.run(&["apply", "--wait", local.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(node.read("/etc/motd").as_deref(), Some("rescued by hand\n"));
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| triggers(r).contains(&"apply".into())),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
    assert_eq!(node.status()["in_force"]["source"]["kind"], "local");
    cp.declare(2, &motd("from the mesh again"));
    assert_motd(&node, "from the mesh again");
}

#[test]
fn sighup_reloads_the_config_and_a_bad_one_keeps_the_old() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd("joined later"));
    let mut node = node("sighup", &pki, None, r#""interval_secs": 600"#);
    assert!(wait_until(WAIT, || node
        .log()
        .contains("reconciling (start)")));
    // A config the host cannot read: the old one stays and the service lives.
    node.reload_config(r#"{"interval_secs": "often"}"#);
    assert!(
        wait_until(WAIT, || node.log().contains("configuration not reloaded")),
        "{}",
        node.log()
    );
    assert!(node.alive());
    let config = format!(
        r#"{{"control_plane": {{"address": "{}", "server_name": "localhost", "ca_file": "{}", "node": "n1", "secret_file": "{}"}}, "heartbeat_secs": 1}}"#,
        cp.addr(),
        node.host.dir.join("ca.pem").display(),
        node.host.dir.join("secret").display()
    );
    node.reload_config(&config);
    assert_motd(&node, "joined later");
    assert_eq!(cp.hellos().len(), 1);
}

#[test]
fn systemd_is_told_ready_after_the_start_run_and_stopping_at_the_end() {
    use std::os::unix::net::UnixDatagram;
    let pki = Pki::new();
    let mut node = node("notify", &pki, None, r#""interval_secs": 600"#);
    let _ = node.stop();
    let socket_path = node.host.dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let declaration = node.host.declaration("d.json", &motd("ready"));
    assert_eq!(
        node.host
            .run(&["apply", declaration.to_str().unwrap()])
            .code,
        0
    );
    std::fs::remove_file(node.host.target("/etc/motd")).unwrap();
    node.restart(&[("NOTIFY_SOCKET", &socket_path)]);
    let mut buf = [0u8; 512];
    let mut seen: Vec<String> = Vec::new();
    // Reads datagrams up to `want`; only STATUS= lines may come before it.
    let mut until = |want: &str| loop {
        let n = socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("{want} within the wait (after {seen:?}): {e}"));
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        seen.push(message.clone());
        if message == want {
            break;
        }
        assert!(
            message.starts_with("STATUS="),
            "only STATUS= before {want}: {seen:?}"
        );
    };
    until("READY=1");
    assert_eq!(
        node.read("/etc/motd").as_deref(),
        Some("ready\n"),
        "READY comes after the start run"
    );
    assert_eq!(node.stop(), Some(0));
    until("STOPPING=1");
    let status = |prefix: &str| seen.iter().any(|m| m.starts_with(prefix));
    assert!(
        status("STATUS=reconciling (start); no run yet; next timer run at "),
        "the start run in STATUS=: {seen:?}"
    );
    assert!(
        status("STATUS=idle; last run converged at "),
        "the last run's outcome in STATUS=: {seen:?}"
    );
}

/// `pacman -R` of a package a test installed, even when the test fails first.
struct Installed<'a>(&'a support::Sandbox, &'a str);

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("pacman")
            .args(["--config", &self.0.pacman_conf, "-R", "--noconfirm", self.1])
            .output();
    }
}

fn sh_out(script: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh");
    assert!(out.status.success(), "{script}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
#[ignore = "needs the sandbox: the facts count the sandbox's real pacman database"]
fn the_hello_carries_the_facts_and_a_report_repeats_them_only_when_changed() {
    // Alone: it counts every package of the sandbox's root, and installs and removes some.
    let sb = support::sandbox_alone();
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    // Nothing to hold (this host is live, not in a scratch root); its runs are still reported.
    cp.declare(1, r#"{"schema": 1}"#);
    let mut host = Scratch::with_config("facts", "{}");
    host.offline_root = false;
    let timers = r#""interval_secs": 1, "heartbeat_secs": 1"#;
    std::fs::write(host.dir.join("config.json"), sb.config(timers)).expect("config");
    support::ways::link_only(&host, &pki, &cp);
    // A foreign package (in no sync database), installed from a file.
    let pacman = format!("pacman --config {}", sb.pacman_conf);
    let _foreign = Installed(&sb, "mesh-foreign");
    let file = host.dir.join("mesh-foreign-1.0-1-any.pkg.tar.zst");
    let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sandbox/lib.sh");
    sh_out(&format!(
        "exec bash -c 'set -e; . {lib}; d=$(mktemp -d); mkdir -p $d/usr/share/mesh-foreign; \
         echo x > $d/usr/share/mesh-foreign/marker; sb_pkginfo $d mesh-foreign 1.0-1; \
         sb_pack $d {file}; rm -rf $d; {pacman} -U --noconfirm {file} >/dev/null'",
        file = file.display()
    ));
    let mut node = Service::start(host);
    assert!(cp.wait_for_hello("n1", WAIT), "{}", node.log());
    let facts = cp.facts("n1");
    assert_eq!(facts, cp.hellos()[0]["facts"]);
    // pacman -Qm exits 1 when there are none, so the count goes through `wc` in every case.
    let count = |args: &str| -> u64 {
        sh_out(&format!("{{ {pacman} {args} || true; }} | wc -l"))
            .parse()
            .unwrap()
    };
    assert_eq!(facts["kernel_running"], sh_out("uname -r"), "{facts:#}");
    assert_eq!(facts["arch"], sh_out("uname -m"));
    assert_eq!(
        facts["cpus"],
        sh_out("getconf _NPROCESSORS_ONLN").parse::<u64>().unwrap()
    );
    assert_eq!(
        facts["boot_id"],
        sh_out("cat /proc/sys/kernel/random/boot_id")
    );
    let mem_kib: u64 = sh_out("awk '/^MemTotal:/ {print $2}' /proc/meminfo")
        .parse()
        .unwrap();
    assert_eq!(facts["memory_bytes"], mem_kib * 1024);
    assert_eq!(facts["os_id"], sh_out(". /etc/os-release; echo $ID"));
    assert!(facts["uptime_secs"].as_u64().unwrap() > 0);
    assert_eq!(facts["packages"], count("-Q"));
    assert!(facts["kernels_installed"].is_array());

    // The first run counts the foreign packages (the hello may have come before it): at most
    // one report carries the facts for it; after that, with nothing changed, none does.
    assert!(cp.wait_for(|r| r.len() >= 3, WAIT), "{}", node.log());
    let foreign = count("-Qmq");
    assert_eq!(foreign, 1);
    assert_eq!(
        cp.facts("n1")["foreign_packages"],
        foreign,
        "{}",
        node.log()
    );
    let reports = cp.reports();
    let counted = reports.iter().filter(|r| r.get("facts").is_some()).count();
    assert!(counted <= 1, "{reports:#?}");
    assert!(
        reports[reports.len() - 2..]
            .iter()
            .all(|r| r.get("facts").is_none()),
        "{reports:#?}"
    );

    // A package installed behind the host's back: the next report carries the new count. One
    // no other test left installed in the shared sandbox, so the count does change.
    let absent = ["mesh-e", "mesh-a", "mesh-c", "mesh-conf"]
        .into_iter()
        .find(|name| {
            !std::process::Command::new("pacman")
                .args(["--config", &sb.pacman_conf, "-Q", name])
                .output()
                .expect("pacman -Q")
                .status
                .success()
        })
        .expect("a sandbox package not installed");
    let _installed = Installed(&sb, absent);
    sh_out(&format!("{pacman} -S --noconfirm {absent} >/dev/null"));
    let want = count("-Q");
    assert!(
        cp.wait_for(|r| has_report(r, |r| r["facts"]["packages"] == want), WAIT),
        "{:#?}\n{}",
        cp.reports(),
        node.log()
    );
    let reports = cp.reports();
    let carrying = reports.iter().filter(|r| r.get("facts").is_some()).count();
    assert_eq!(carrying, counted + 1, "{reports:#?}");
    assert_eq!(cp.facts("n1")["packages"], want);
    assert_eq!(cp.facts("n1")["foreign_packages"], foreign);
    assert_eq!(cp.facts("n1")["boot_id"], facts["boot_id"]);

    // The foreign package removed: a run counts again, none is 0 (pacman -Qm exits 1).
    sh_out(&format!("{pacman} -R --noconfirm mesh-foreign >/dev/null"));
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| r["facts"]["foreign_packages"] == 0),
            WAIT
        ),
        "{:#?}\n{}",
        cp.reports(),
        node.log()
    );
    assert_eq!(count("-Qmq"), 0);

    // Restarted, the host's hello carries the last count, from the store.
    node.restart(&[]);
    let deadline = std::time::Instant::now() + WAIT;
    while cp.hellos().len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let hellos = cp.hellos();
    assert_eq!(hellos.len(), 2, "{}", node.log());
    assert_eq!(hellos[1]["facts"]["foreign_packages"], 0, "{hellos:#?}");
}

/// The last generation's state (`pending`, `confirmed`, ...) and revision, as `status` says.
fn last_generation(node: &Service) -> (String, u64) {
    let status = node.status();
    let last = status["generations"]["list"]
        .as_array()
        .and_then(|l| l.last().cloned())
        .unwrap_or_default();
    (
        last["state"]["is"].as_str().unwrap_or_default().to_string(),
        last["revision"].as_u64().unwrap_or(0),
    )
}

/// Revision 1 pushed and confirmed by the ack of its run's report, then revision 2 pushed with
/// acks held: its run's report reaches the control plane, which does not ack it.
fn second_revision_unacked(cp: &ControlPlane, node: &Service) {
    assert!(
        wait_until(WAIT, || last_generation(node) == ("confirmed".into(), 1)),
        "{:?}\n{}",
        last_generation(node),
        node.log()
    );
    cp.hold_acks(true);
    cp.declare(2, &motd_revision(2, "two"));
    assert_motd(node, "two");
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| r["revision"] == 2
                && triggers(r).contains(&"declaration".into())),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
    assert_eq!(last_generation(node), ("pending".into(), 2));
}

fn motd_revision(revision: u64, text: &str) -> String {
    format!(
        r#"{{"schema": 1, "revision": {revision}, "files": {{"/etc/motd": {{"content": "{text}\n"}}}}}}"#
    )
}

/// Issue 22 (1): the control plane stops after pushing a declaration (its run's report never
/// acked) and stays down past the window (the `declare`'s own `confirm_secs`): the host reverts
/// by itself; when the control plane is back it receives `reverted` (what, to what, why: the
/// link's last error) and a hello naming both revisions, and does not push it again.
#[test]
fn an_unconfirmed_declaration_is_reverted_while_the_control_plane_is_down() {
    let pki = Pki::new();
    let mut cp = control_plane(&pki, Behaviour::Normal);
    let addr = cp.addr();
    cp.set_confirm_secs(Some(3));
    cp.declare(1, &motd_revision(1, "one"));
    let node = node("revert-link", &pki, Some(&cp), r#""interval_secs": 600"#);
    second_revision_unacked(&cp, &node);
    cp.stop();
    assert_motd(&node, "one");
    assert!(
        wait_until(WAIT, || node.status()["generations"]["reverted"]
            ["revision"]
            == 2),
        "{}",
        node.log()
    );
    assert_eq!(node.status()["in_force"]["control_plane_revision"], 2);

    let mut config = CpConfig::new("n1", "s3cret");
    config.bind = Some(addr);
    let cp = ControlPlane::start(&pki, config);
    cp.declare(2, &motd_revision(2, "two"));
    assert!(
        cp.wait_for(
            |r| has_report(r, |r| triggers(r).contains(&"revert".into())
                && r["reverted"]["revision"] == 2
                && r["reverted"]["to_revision"] == 1
                && r["revision"] == 1),
            Duration::from_secs(30)
        ),
        "{:#?}\n{}",
        cp.reports(),
        node.log()
    );
    let reverted = cp
        .reports()
        .into_iter()
        .find(|r| !r["reverted"].is_null())
        .unwrap_or_default();
    let why = reverted["reverted"]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("did not acknowledge") && why.contains("the link's last error"),
        "{why}"
    );
    let hello = cp.hellos().last().cloned().unwrap_or_default();
    assert_eq!(hello["revision"], 2, "{hello:#}");
    assert_eq!(hello["reverted"]["revision"], 2, "{hello:#}");
    assert_eq!(hello["reverted"]["to_revision"], 1, "{hello:#}");
    // Not pushed again unasked: revision 1 stays.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(node.read("/etc/motd").as_deref(), Some("one\n"));
}

/// Issue 22 (2): killed (SIGKILL) inside the window, started after it: the revert is the first
/// run of the new process, before its start run.
#[test]
fn a_host_started_after_the_window_reverts_first() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd_revision(1, "one"));
    let mut node = node(
        "revert-crash",
        &pki,
        Some(&cp),
        r#""interval_secs": 600, "confirm_secs": 4"#,
    );
    second_revision_unacked(&cp, &node);
    let runs_before = node.runs().len();
    let deadline = node.status()["generations"]["list"][1]["state"]["deadline"]
        .as_u64()
        .unwrap_or(0);
    node.kill();
    // Started once the deadline has passed (wall time: waited for, not slept through).
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    assert!(
        wait_until(WAIT, || unix() > deadline),
        "deadline {deadline}"
    );
    assert_eq!(node.read("/etc/motd").as_deref(), Some("two\n"));
    node.restart(&[]);
    assert_motd(&node, "one");
    assert!(
        wait_until(WAIT, || node.runs().len() >= runs_before + 2),
        "{}",
        node.log()
    );
    let runs = node.runs();
    let first = &runs[runs_before];
    assert_eq!(first["trigger"], "revert", "{runs:#?}");
    assert_eq!(runs[runs_before + 1]["trigger"], "start", "{runs:#?}");
    assert_eq!(
        node.status()["generations"]["reverted"]["to_revision"],
        1,
        "{}",
        node.log()
    );
}

/// Issue 22 (3): the control plane acks in time: no revert, long after the window.
#[test]
fn an_acked_declaration_is_confirmed_and_stays() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd_revision(1, "one"));
    let node = node(
        "confirmed",
        &pki,
        Some(&cp),
        r#""interval_secs": 600, "confirm_secs": 2"#,
    );
    assert!(wait_until(WAIT, || last_generation(&node) == ("confirmed".into(), 1)));
    cp.declare(2, &motd_revision(2, "two"));
    assert!(
        wait_until(WAIT, || last_generation(&node) == ("confirmed".into(), 2)),
        "{}",
        node.log()
    );
    // That no revert comes later is the core's test (`an_ack_confirms_the_pending_...`, in
    // virtual time): here, what the store and the machine hold.
    assert_eq!(node.read("/etc/motd").as_deref(), Some("two\n"));
    assert_eq!(last_generation(&node), ("confirmed".into(), 2));
    assert!(node.status()["generations"]["reverted"].is_null());
    assert!(!cp
        .reports()
        .iter()
        .any(|r| triggers(r).contains(&"revert".into())));
}

/// Issue 22 (2), inside the window: a host killed and started again before the deadline does not
/// revert at once; it waits out the rest of the window, then reverts.
#[test]
fn a_host_started_inside_the_window_waits_out_the_rest() {
    let pki = Pki::new();
    let cp = control_plane(&pki, Behaviour::Normal);
    cp.declare(1, &motd_revision(1, "one"));
    let mut node = node(
        "revert-wait",
        &pki,
        Some(&cp),
        r#""interval_secs": 600, "confirm_secs": 6"#,
    );
    second_revision_unacked(&cp, &node);
    let deadline = node.status()["generations"]["list"][1]["state"]["deadline"]
        .as_u64()
        .unwrap_or_default();
    let runs_before = node.runs().len();
    node.kill();
    node.restart(&[]);
    assert!(
        wait_until(WAIT, || node
            .runs()
            .get(runs_before)
            .is_some_and(|r| r["trigger"] == "start")),
        "{}",
        node.log()
    );
    assert_eq!(node.read("/etc/motd").as_deref(), Some("two\n"));
    assert_eq!(last_generation(&node), ("pending".into(), 2));
    assert_motd(&node, "one");
    let reverted = node.status()["generations"]["reverted"]["at"]
        .as_u64()
        .unwrap_or_default();
    assert!(
        reverted >= deadline,
        "reverted at {reverted}, deadline {deadline}"
    );
}
