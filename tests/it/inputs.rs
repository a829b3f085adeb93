//! Hostile inputs (issue 32): files that are not regular files or lie about their size, numbers
//! out of range, a lost `last-report-id`. Every run here is bounded in time and memory, so a
//! host that would hang or read forever fails the test instead of blocking it.

// System calls the test needs (Cargo.toml, [lints]): each block says why it holds.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::control_plane::{ControlPlane, CpConfig};
use crate::support::pki::Pki;
use crate::support::service::Service;
use crate::support::ways::{link_only, Driver, Way};
use crate::support::{wait_until, Output, Scratch};

/// How long a refusal may take: it should be instant; past this the host hung.
const HANG: Duration = Duration::from_secs(15);

/// Runs `command` with its address space capped (a read that never ends fails fast instead of
/// eating the machine's memory) and kills it if it has not ended within `HANG`.
fn bounded(mut command: Command) -> Output {
    // SAFETY: the closure runs in the child between fork and exec and calls setrlimit alone, on
    // a struct on its stack: async-signal-safe, and nothing is allocated.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &limit);
            Ok(())
        });
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mesh-host");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > HANG {
            let _ = child.kill();
            let out = Output::from(child.wait_with_output().expect("output"));
            panic!("mesh-host hung for {HANG:?} on its input: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Output::from(child.wait_with_output().expect("output"))
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: `c` is NUL-terminated and outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

fn fifo(host: &Scratch, name: &str) -> PathBuf {
    let path = host.dir.join(name);
    mkfifo(&path);
    path
}

#[track_caller]
fn refused(out: &Output, text: &str) {
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr(text);
}

#[test]
fn a_device_is_refused_as_a_declaration_before_any_read() {
    let host = Scratch::new("input-dev");
    for command in ["check", "plan", "apply"] {
        let out = bounded(host.command(&[command, "/dev/zero"]));
        refused(
            &out,
            "/dev/zero: cannot be read: is a character device, not a regular file",
        );
    }
    let key = host.dir.join("key.pem");
    let out = host.run(&["keygen", "--out", key.to_str().expect("path")]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = bounded(host.command(&["sign", "--key", key.to_str().expect("path"), "/dev/zero"]));
    refused(&out, "is a character device, not a regular file");
    let out = bounded(host.command(&["sign", "--key", "/dev/zero", "/dev/zero"]));
    refused(
        &out,
        "--key /dev/zero: cannot be read: is a character device",
    );
}

#[test]
fn a_fifo_nobody_writes_to_is_refused_as_a_declaration_or_config_without_blocking() {
    let host = Scratch::new("input-fifo");
    let declaration = fifo(&host, "declaration.json");
    let shown = declaration.display().to_string();
    for command in ["check", "apply"] {
        let out = bounded(host.command(&[command, &shown]));
        refused(
            &out,
            &format!("{shown}: cannot be read: is a FIFO, not a regular file"),
        );
    }
    let config = fifo(&host, "config-fifo.json");
    let mut command = support::mesh_host();
    command
        .arg("--state-dir")
        .arg(host.state())
        .arg("--config")
        .arg(&config)
        .arg("status");
    let out = bounded(command);
    refused(
        &out,
        &format!("config {}: is a FIFO, not a regular file", config.display()),
    );
    let token = fifo(&host, "token");
    let command = host.command(&[
        "join",
        "--control-plane",
        "https://127.0.0.1:1",
        "--token-file",
        token.to_str().expect("path"),
        "--ca-hash",
        &format!("sha256:{}", "0".repeat(64)),
    ]);
    let out = bounded(command);
    refused(&out, "is a FIFO, not a regular file");
}

/// A file whose `stat` says 0 bytes but reads as more (as /proc's): the limit holds on what is
/// read, not on the size the file claims.
#[test]
fn a_declaration_over_the_limit_is_refused_whatever_size_it_claims() {
    let host = Scratch::with_config("input-proc", r#"{"max_declaration_bytes": 100}"#);
    let maps = "/proc/self/maps";
    assert_eq!(std::fs::metadata(maps).expect("maps").len(), 0);
    let out = bounded(host.command(&["check", maps]));
    refused(
        &out,
        "/proc/self/maps: is more than the limit of 100 bytes; nothing was applied",
    );
}

/// The service's secret a FIFO: its hello is refused naming the file and the service still
/// answers SIGTERM (it used to block in `open` for good).
#[test]
fn the_service_refuses_a_fifo_for_its_secret_and_stays_responsive() {
    let host = Scratch::new("input-secret");
    let pki = Pki::new();
    let cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
    link_only(&host, &pki, &cp);
    let secret = host.dir.join("secret");
    std::fs::remove_file(&secret).expect("secret");
    mkfifo(&secret);
    let mut service = Service::start(host);
    let said = wait_until(Duration::from_secs(20), || {
        service.log().contains("is a FIFO, not a regular file")
    });
    assert!(said, "{}", service.log());
    assert_eq!(service.stop(), Some(0), "{}", service.log());
}

/// A config value of the wrong type or out of range is named by file and key, with what it
/// expects and what it found (it was serde's "invalid type ... at line 1 column 20").
#[test]
fn a_bad_config_value_names_the_file_and_the_key() {
    for (json, said) in [
        (
            r#"{"max_file_bytes": -1}"#,
            "max_file_bytes: expected a whole number from 0 to 1099511627776, found -1",
        ),
        (
            r#"{"max_file_bytes": 1.5}"#,
            "max_file_bytes: expected a whole number from 0 to 1099511627776, found 1.5",
        ),
        (
            r#"{"interval_secs": "600"}"#,
            r#"interval_secs: expected a whole number from 1 to 31536000, found "600""#,
        ),
        (
            r#"{"confirm_secs": 18446744073709551615}"#,
            "confirm_secs: expected a whole number from 0 to 31536000, found 18446744073709551615",
        ),
        (
            r#"{"podman": {"timeout_secs": -5}}"#,
            "podman.timeout_secs: expected a whole number from 1 to 31536000, found -5",
        ),
    ] {
        let host = Scratch::with_config("input-config", json);
        let out = bounded(host.command(&["status"]));
        let file = host.dir.join("config.json");
        refused(&out, &format!("config {}: {said}", file.display()));
    }
}

/// A `declare` whose `confirm_secs` is past the range (a deadline that would wrap) is rejected
/// by name, reported, and the declaration before it stays in force; the service lives on.
#[test]
fn a_confirm_secs_from_the_link_past_its_range_is_rejected() {
    let driver = Driver::start(Way::Service, Scratch::new("input-confirm"));
    let cp = driver.control_plane().expect("control plane");
    cp.set_confirm_secs(Some(u64::MAX));
    cp.send_declare(
        1,
        r#"{"schema": 1, "revision": 1, "files": {"/etc/motd": {"content": "one\n"}}}"#,
    );
    let said = "confirm_secs: expected a whole number of seconds from 0 to 31536000, found \
                18446744073709551615";
    let rejected = cp.wait_for(
        |reports| {
            reports.iter().any(|r| {
                r["revision"] == 1
                    && r["outcome"] == "rejected"
                    && r["message"].as_str().unwrap_or("").contains(said)
            })
        },
        Duration::from_secs(30),
    );
    let log = std::fs::read_to_string(driver.host().dir.join("service.log")).unwrap_or_default();
    assert!(rejected, "{:#?}\n{log}", cp.reports());
    assert!(!driver.host().target("/etc/motd").exists());
    cp.set_confirm_secs(Some(60));
    cp.send_declare(
        2,
        r#"{"schema": 1, "revision": 2, "files": {"/etc/motd": {"content": "two\n"}}}"#,
    );
    let converged = cp.wait_for(
        |reports| (reports.iter()).any(|r| r["revision"] == 2 && r["outcome"] == "converged"),
        Duration::from_secs(30),
    );
    assert!(converged, "{:#?}", cp.reports());
    let motd = std::fs::read_to_string(driver.host().target("/etc/motd"));
    assert_eq!(motd.ok().as_deref(), Some("two\n"));
}

/// Whether every report the host queued has been acknowledged (its outbox holds none).
fn outbox_empty(state: &Path) -> bool {
    std::fs::read_dir(state.join("outbox")).is_ok_and(|entries| {
        !entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".json"))
    })
}

/// `last-report-id` lost after every report was acknowledged, between runs of one service and
/// across a restart: the ids go on increasing and every report reaches the reference control
/// plane, which drops an id it already stored (the host used to give id 1 again, lost at once).
#[test]
fn report_ids_never_repeat_when_the_id_floor_is_lost() {
    let mut driver = Driver::start(Way::Service, Scratch::new("input-ids"));
    let ran = driver.converge(r#"{"schema": 1, "files": {"/etc/motd": {"content": "one\n"}}}"#);
    assert_eq!(ran.record["outcome"], "converged", "{:#}", ran.record);
    let state = driver.host().state();
    let wait = Duration::from_secs(30);
    for restart in [false, true, false] {
        assert!(
            wait_until(wait, || outbox_empty(&state)),
            "never acknowledged"
        );
        let before = driver.control_plane().expect("cp").reports().len();
        std::fs::remove_file(state.join("last-report-id")).expect("last-report-id");
        let service = driver.service().expect("service");
        if restart {
            service.restart(&[]);
        } else {
            service.signal(libc::SIGUSR1);
        }
        let cp = driver.control_plane().expect("cp");
        let arrived = cp.wait_for(|reports| reports.len() > before, wait);
        let ids: Vec<u64> = (cp.reports().iter())
            .filter_map(|r| r["id"].as_u64())
            .collect();
        assert!(
            arrived,
            "the report after the lost floor never arrived: {ids:?}"
        );
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }
}

/// `apply --confirm` past the range: refused (exit 2) before anything is put in force; its
/// deadline used to wrap into the past, and the next command reverted the declaration.
#[test]
fn apply_confirm_past_its_range_puts_nothing_in_force() {
    let host = Scratch::new("input-apply-confirm");
    let file = host.declaration(
        "d.json",
        r#"{"schema": 1, "files": {"/etc/motd": {"content": "one\n"}}}"#,
    );
    let shown = file.to_str().expect("path");
    let out = bounded(host.command(&["apply", "--confirm", "18446744073709551615", shown]));
    refused(&out, "--confirm");
    assert!(!host.target("/etc/motd").exists(), "{out:?}");
    let status = host.run(&["status", "--json"]).json();
    assert_eq!(status["in_force"], serde_json::Value::Null, "{status:#}");
}

/// Through the service: a config reloaded (SIGHUP) with a bad value is refused naming the file
/// and the key, and one replaced by a FIFO is refused without blocking the loop (it used to
/// wait in `open` for a writer, deaf to SIGTERM); the previous config stays in both cases.
#[test]
fn a_reloaded_config_that_is_bad_or_a_fifo_is_refused_and_the_service_lives_on() {
    let host = Scratch::with_config("input-reload", r#"{"interval_secs": 600}"#);
    let config = host.dir.join("config.json");
    let mut service = Service::start(host);
    let wait = Duration::from_secs(20);
    assert!(
        wait_until(wait, || service.log().contains("reconciling (start)")),
        "{}",
        service.log()
    );
    service.reload_config(r#"{"interval_secs": -1}"#);
    let said = format!(
        "configuration not reloaded, the previous one stays: config {}: interval_secs: expected \
         a whole number from 1 to 31536000, found -1",
        config.display()
    );
    assert!(
        wait_until(wait, || service.log().contains(&said)),
        "{}",
        service.log()
    );
    std::fs::remove_file(&config).expect("config");
    mkfifo(&config);
    service.signal(libc::SIGHUP);
    let said = format!("config {}: is a FIFO, not a regular file", config.display());
    assert!(
        wait_until(wait, || service.log().contains(&said)),
        "{}",
        service.log()
    );
    assert_eq!(service.stop(), Some(0), "{}", service.log());
}

/// The store's lock a FIFO: refused by name (the holder's name would be read from it).
#[test]
fn a_fifo_for_the_stores_lock_is_refused_by_name() {
    let host = Scratch::new("input-lock");
    let file = host.declaration("d.json", r#"{"schema": 1}"#);
    host.apply(&file, 0);
    let lock = host.state().join("lock");
    std::fs::remove_file(&lock).expect("lock");
    mkfifo(&lock);
    let out = bounded(host.command(&["apply", file.to_str().expect("path")]));
    assert_ne!(out.code, 0, "{out:?}");
    out.assert_stderr(&format!("lock {}: is not a regular file", lock.display()));
}

/// An owner or group of 4294967295 is (uid_t)-1, which `chown` takes for "leave it unchanged":
/// refused by field (exit 2) before anything is applied. It used to pass validation, and the run
/// created the file as root and then failed it ("still differs").
#[test]
fn an_owner_of_uid_t_minus_one_is_refused_by_field() {
    let host = Scratch::new("input-uid-minus-one");
    for field in ["owner", "group"] {
        let file = host.declaration(
            "d.json",
            &format!(
                r#"{{"schema": 1, "files": {{"/etc/motd": {{"content": "m", "{field}": "4294967295"}}}}}}"#
            ),
        );
        let out = bounded(host.command(&["apply", file.to_str().expect("path")]));
        refused(
            &out,
            &format!(r#"files["/etc/motd"].{field}: "4294967295""#),
        );
        out.assert_stderr("(uid_t)-1");
        assert!(!host.target("/etc/motd").exists(), "{field}: {out:?}");
    }
}

/// A container's port past 65535, 0 in the container, or not a number: refused by field (exit
/// 2) before anything is applied. It used to pass validation (only its characters were looked
/// at) and fail in `podman create`, the run's other resources applied.
#[test]
fn a_container_port_out_of_range_is_refused_by_field() {
    let host = Scratch::new("input-ports");
    for port in [
        "99999:80",
        "8080:0",
        "1.5:80",
        "18446744073709551616:80",
        "80/xyz",
    ] {
        let file = host.declaration(
            "d.json",
            &format!(
                r#"{{"schema": 1, "files": {{"/etc/motd": {{"content": "m"}}}},
                    "containers": {{"c": {{"image": "localhost/x:1", "ports": ["{port}"]}}}}}}"#
            ),
        );
        let out = bounded(host.command(&["apply", file.to_str().expect("path")]));
        refused(
            &out,
            &format!(r#"containers["c"].ports[0]: "{port}" is not a port mapping"#),
        );
        assert!(!host.target("/etc/motd").exists(), "{port}: {out:?}");
    }
}
