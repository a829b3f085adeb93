//! The service's inotify watcher end to end: the real binary as a service on a scratch root, its
//! drift timer at ten minutes so that every repair seen here is a watch run's. Where a test must
//! show that something did *not* happen, it edits a second file afterwards and waits for that
//! repair: events are handled in order, so anything the first would have caused came before.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::control_plane::{ControlPlane, CpConfig};
use crate::support::pki::Pki;
use crate::support::service::Service;
use crate::support::{sandbox, sh, wait_until, PacmanRoot, Sandbox, Scratch};

const WAIT: Duration = Duration::from_secs(20);

const DECLARATION: &str = r#"{"schema": 1, "files": {
    "/etc/motd": {"content": "held\n", "mode": "0644"},
    "/etc/marker": {"content": "marker\n", "mode": "0644"},
    "/etc/app/conf.d/app.conf": {"content": "app\n", "mode": "0644"}}}"#;

/// A service holding `DECLARATION` (applied before it starts), once its watches are set.
fn watched(label: &str) -> Service {
    watched_with(label, |_| String::new())
}

/// `watched`, with extra config members made for the scratch directory.
fn watched_with(label: &str, extra: impl Fn(&Path) -> String) -> Service {
    let host = Scratch::new(label);
    let config = format!(r#"{{"interval_secs": 600{}}}"#, extra(&host.dir));
    std::fs::write(host.dir.join("config.json"), config).unwrap();
    started(host, DECLARATION, 1)
}

/// `declaration` applied on `host`, then its service started, once it watches more than
/// `directories` directories.
fn started(host: Scratch, declaration: &str, directories: u64) -> Service {
    let file = host.declaration("d.json", declaration);
    host.apply(&file, 0);
    let node = Service::start(host);
    assert!(
        wait_until(WAIT, || node.status()["service"]["watch"]["directories"]
            .as_u64()
            .is_some_and(|n| n >= directories)),
        "{}",
        node.log()
    );
    node
}

fn watch_runs(node: &Service) -> Vec<Value> {
    node.runs()
        .into_iter()
        .filter(|r| r["trigger"] == "watch")
        .collect()
}

fn changed_keys(run: &Value) -> Vec<String> {
    run["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["key"].as_str().map(String::from))
        .collect()
}

/// Waits until a watch run repaired `key`, and returns the watch runs so far.
fn repaired_by_watch(node: &Service, key: &str) -> Vec<Value> {
    let mut runs = Vec::new();
    let found = wait_until(WAIT, || {
        runs = watch_runs(node);
        runs.iter()
            .any(|r| changed_keys(r).contains(&key.to_string()))
    });
    assert!(
        found,
        "no watch run repaired {key}: {runs:#?}\n{}",
        node.log()
    );
    runs
}

/// Edits the marker file and waits for its repair: every event before it has been handled.
fn after_the_marker(node: &Service) -> Vec<Value> {
    let before = watch_runs(node)
        .iter()
        .filter(|r| changed_keys(r).contains(&"/etc/marker".to_string()))
        .count();
    std::fs::write(node.host.target("/etc/marker"), "edited\n").unwrap();
    let mut runs = Vec::new();
    let found = wait_until(WAIT, || {
        runs = watch_runs(node);
        runs.iter()
            .filter(|r| changed_keys(r).contains(&"/etc/marker".to_string()))
            .count()
            > before
    });
    assert!(
        found,
        "the marker was not repaired: {runs:#?}\n{}",
        node.log()
    );
    runs
}

fn read(node: &Service, path: &str) -> Option<String> {
    node.read(path)
}

fn mode(node: &Service, path: &str) -> u32 {
    std::fs::metadata(node.host.target(path))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn an_edit_in_place_is_repaired_by_one_watch_run_and_its_own_write_triggers_none() {
    let node = watched("edit");
    std::fs::write(node.host.target("/etc/motd"), "edited\n").unwrap();
    let runs = repaired_by_watch(&node, "/etc/motd");
    assert_eq!(read(&node, "/etc/motd").as_deref(), Some("held\n"));
    let run = &runs[runs.len() - 1];
    assert_eq!(run["outcome"], "converged");
    assert_eq!(
        changed_keys(run),
        ["/etc/motd"],
        "only what was touched is converged"
    );
    // The repair's own write came back as events; they must not have made another run.
    let runs = after_the_marker(&node);
    assert_eq!(runs.len(), 2, "{runs:#?}");
}

#[test]
fn a_file_replaced_by_rename_is_repaired() {
    let node = watched("rename");
    let tmp = node.host.target("/etc/.motd.swp");
    std::fs::write(&tmp, "replaced\n").unwrap();
    std::fs::rename(&tmp, node.host.target("/etc/motd")).unwrap();
    repaired_by_watch(&node, "/etc/motd");
    assert_eq!(read(&node, "/etc/motd").as_deref(), Some("held\n"));
    // The watch is on the directory, so it outlives the replaced file: a second save is seen too.
    std::fs::write(&tmp, "again\n").unwrap();
    std::fs::rename(&tmp, node.host.target("/etc/motd")).unwrap();
    assert!(
        wait_until(WAIT, || watch_runs(&node).len() >= 2
            && read(&node, "/etc/motd").as_deref() == Some("held\n")),
        "{}",
        node.log()
    );
}

#[test]
fn a_chmod_is_repaired() {
    let node = watched("chmod");
    std::fs::set_permissions(
        node.host.target("/etc/motd"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    repaired_by_watch(&node, "/etc/motd");
    assert_eq!(mode(&node, "/etc/motd"), 0o644);
}

#[test]
fn a_deleted_file_is_put_back() {
    let node = watched("delete");
    std::fs::remove_file(node.host.target("/etc/motd")).unwrap();
    repaired_by_watch(&node, "/etc/motd");
    assert_eq!(read(&node, "/etc/motd").as_deref(), Some("held\n"));
}

#[test]
fn a_removed_parent_is_recreated_and_watched_again() {
    let node = watched("parent");
    std::fs::remove_dir_all(node.host.target("/etc/app")).unwrap();
    repaired_by_watch(&node, "/etc/app/conf.d/app.conf");
    assert_eq!(
        read(&node, "/etc/app/conf.d/app.conf").as_deref(),
        Some("app\n")
    );
    // The watch followed the directories back: an edit of the recreated file is seen.
    std::fs::write(node.host.target("/etc/app/conf.d/app.conf"), "edited\n").unwrap();
    assert!(
        wait_until(WAIT, || watch_runs(&node)
            .iter()
            .filter(|r| changed_keys(r).contains(&"/etc/app/conf.d/app.conf".into()))
            .count()
            == 2),
        "{}",
        node.log()
    );
    assert_eq!(
        read(&node, "/etc/app/conf.d/app.conf").as_deref(),
        Some("app\n")
    );

    // Removed and recreated by someone else, with other content, before the host looks.
    let dir = node.host.target("/etc/app");
    let moved = node.host.dir.join("app.moved");
    std::fs::rename(&dir, &moved).unwrap();
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    std::fs::write(dir.join("conf.d/app.conf"), "theirs\n").unwrap();
    assert!(
        wait_until(WAIT, || read(&node, "/etc/app/conf.d/app.conf").as_deref()
            == Some("app\n")),
        "{}",
        node.log()
    );
    // The directory moved away is no longer what is watched.
    std::fs::write(moved.join("conf.d/app.conf"), "elsewhere\n").unwrap();
    let runs = after_the_marker(&node);
    assert_eq!(
        runs.iter()
            .filter(|r| changed_keys(r).contains(&"/etc/app/conf.d/app.conf".into()))
            .count(),
        3,
        "{runs:#?}"
    );
}

#[test]
fn a_persons_apply_is_not_taken_for_drift_and_the_watches_follow_it() {
    let node = watched("apply");
    let directories = || node.status()["service"]["watch"]["directories"].as_u64();
    let before = directories();
    let next = DECLARATION.replace("held\\n", "new\\n").replace(
        r#""/etc/marker""#,
        r#""/etc/extra/new.conf": {"content": "x\n"}, "/etc/marker""#,
    );
    let file = node.host.declaration("next.json", &next);
    node.host.apply_waiting(&file, 0);
    // Its writes are the host's own: no watch run for them.
    let runs = after_the_marker(&node);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    // The new file is watched.
    std::fs::write(node.host.target("/etc/extra/new.conf"), "edited\n").unwrap();
    repaired_by_watch(&node, "/etc/extra/new.conf");
    assert_eq!(read(&node, "/etc/extra/new.conf").as_deref(), Some("x\n"));
    assert_eq!(
        directories(),
        before.map(|n| n + 1),
        "/etc/extra is watched"
    );
    // Declared no more: released, and its directory no longer watched.
    let file = node.host.declaration("d.json", DECLARATION);
    node.host.apply_waiting(&file, 0);
    assert!(node.read("/etc/extra/new.conf").is_none());
    assert!(
        wait_until(WAIT, || directories() == before),
        "{:?} -> {:?}\n{}",
        before,
        directories(),
        node.log()
    );
}

#[test]
fn a_fought_over_file_is_reported_contested_and_left_to_the_timer() {
    let pki = Pki::new();
    let cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
    let link = |dir: &Path| {
        pki.write(dir).unwrap();
        std::fs::write(dir.join("secret"), "s3cret\n").unwrap();
        format!(
            r#", "control_plane": {{"address": "{}", "server_name": "localhost", "ca_file": "{}", "node": "n1", "secret_file": "{}"}}"#,
            cp.addr(),
            dir.join("ca.pem").display(),
            dir.join("secret").display()
        )
    };
    let node = watched_with("contest", link);
    // Another agent that puts its own content back after every repair. An edit that lands in the
    // middle of a run makes that run fail its check and another repair it: count until contested.
    let is_contested = || node.status()["service"]["watch"]["contested"][0]["key"] == "/etc/motd";
    let mut edits = 0;
    while !is_contested() {
        assert!(
            edits < 10,
            "not contested after {edits} edits\n{}",
            node.log()
        );
        std::fs::write(node.host.target("/etc/motd"), "theirs\n").unwrap();
        assert!(
            wait_until(WAIT, || read(&node, "/etc/motd").as_deref()
                == Some("held\n")
                || is_contested()),
            "{}",
            node.log()
        );
        edits += 1;
    }
    let mut contested = Value::Null;
    assert!(
        wait_until(WAIT, || {
            contested = node.status()["service"]["watch"]["contested"].clone();
            contested[0]["key"] == "/etc/motd"
        }),
        "{contested:#?}\n{}",
        node.log()
    );
    assert_eq!(contested[0]["kind"], "files");
    assert_eq!(contested[0]["repairs"], 5);
    assert!(contested[0]["since"].as_u64().is_some_and(|t| t > 0));
    assert!(node.log().contains("files /etc/motd is contested"));
    let text = node.host.run(&["status"]).stdout;
    assert!(text.contains("contested: files /etc/motd since"), "{text}");
    // No more busy loop: its next change waits for the timer.
    let before = watch_runs(&node).len();
    std::fs::write(node.host.target("/etc/motd"), "theirs\n").unwrap();
    let runs = after_the_marker(&node);
    assert_eq!(read(&node, "/etc/motd").as_deref(), Some("theirs\n"));
    assert_eq!(runs.len(), before + 1, "only the marker's run: {runs:#?}");
    // The control plane hears of it by name.
    assert!(
        cp.wait_for(
            |reports| reports.iter().any(|r| r["outcome"] == "contested"
                && r["failures"][0]["key"] == "/etc/motd"
                && r["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("repaired 5 times within 60 s"))),
            WAIT
        ),
        "{:#?}",
        cp.reports()
    );
}

#[test]
fn an_overflowed_event_queue_brings_a_full_run() {
    let node = watched("overflow");
    // A real overflow: the service is stopped while more events than the kernel queues arrive.
    let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(16384);
    node.signal(libc::SIGSTOP);
    std::fs::write(node.host.target("/etc/motd"), "edited while stopped\n").unwrap();
    // Each new empty file in the watched /etc is two events: created, closed after writing.
    for i in 0..max / 2 + 100 {
        std::fs::File::create(node.host.target(&format!("/etc/s{i}"))).unwrap();
    }
    node.signal(libc::SIGCONT);
    let mut runs = Vec::new();
    assert!(
        wait_until(WAIT, || {
            runs = watch_runs(&node);
            runs.iter().any(|r| r["in_sync"].as_u64() == Some(2))
        }),
        "a full run (every resource observed): {runs:#?}\n{}",
        node.log()
    );
    assert_eq!(read(&node, "/etc/motd").as_deref(), Some("held\n"));
    assert_eq!(runs.len(), 1, "one run for the whole storm: {runs:#?}");
    let watch = &node.status()["service"]["watch"];
    assert!(
        watch["overflows"].as_u64().is_some_and(|n| n >= 1),
        "{watch}"
    );
    assert!(watch["last_overflow"].as_u64().is_some());
    let text = node.host.run(&["status"]).stdout;
    assert!(text.contains("the event queue overflowed"), "{text}");
    // Watching goes on afterwards.
    std::fs::write(node.host.target("/etc/motd"), "edited\n").unwrap();
    repaired_by_watch(&node, "/etc/motd");
}

#[test]
fn watch_off_in_the_config_leaves_drift_to_the_timer_and_says_so() {
    let config = r#"{"interval_secs": 600, "watch": false}"#;
    let host = Scratch::with_config("off", config);
    let file = host.declaration("d.json", DECLARATION);
    host.apply(&file, 0);
    let node = Service::start(host);
    let mut watch = Value::Null;
    assert!(
        wait_until(WAIT, || {
            watch = node.status()["service"]["watch"].clone();
            watch["state"] == "off"
        }),
        "{watch}\n{}",
        node.log()
    );
    let text = node.host.run(&["status"]).stdout;
    assert!(
        text.contains(
            "watch: off (`watch` is false in the config); drift is found by the timer alone"
        ),
        "{text}"
    );
}

#[test]
fn sighup_turns_the_watcher_on() {
    let host = Scratch::with_config("hup", r#"{"interval_secs": 600, "watch": false}"#);
    let file = host.declaration("d.json", DECLARATION);
    host.apply(&file, 0);
    let node = Service::start(host);
    assert!(wait_until(WAIT, || node.status()["service"]["watch"]
        ["state"]
        == "off"));
    node.reload_config(r#"{"interval_secs": 600, "watch": true}"#);
    assert!(
        wait_until(WAIT, || node.status()["service"]["watch"]["directories"]
            .as_u64()
            .is_some_and(|n| n > 0)),
        "{}",
        node.log()
    );
    std::fs::write(node.host.target("/etc/motd"), "edited\n").unwrap();
    repaired_by_watch(&node, "/etc/motd");
}

/// A service on the sandbox's real tools (no `--root`) holding `declaration`, once it watches.
fn watched_in_sandbox(sb: &Sandbox, label: &str, pacman_conf: &Path, declaration: &str) -> Service {
    let sandbox = Sandbox {
        pacman_conf: pacman_conf.display().to_string(),
        pacman_root: sb.pacman_root.clone(),
        pacman_repo: sb.pacman_repo.clone(),
        unit_dir: sb.unit_dir.clone(),
        offline_root: sb.offline_root.clone(),
        image: sb.image.clone(),
    };
    // The store's directory and the package database or unit directory.
    started(
        sandbox.host(label, r#""interval_secs": 600"#),
        declaration,
        2,
    )
}

/// Removes what a sandbox test made in shared places, however the test ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else if std::fs::remove_file(&self.0).is_ok() {
            let _ = std::process::Command::new("systemctl")
                .args(["--user", "daemon-reload"])
                .status();
        }
    }
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_package_removed_by_hand_is_put_back_on_the_database_hint() {
    let sb = sandbox();
    let pacman = PacmanRoot::new("watch-pkg", &sb.pacman_repo);
    let conf = pacman.conf.clone();
    let node = watched_in_sandbox(
        &sb,
        "watch-pkg",
        &conf,
        r#"{"schema": 1, "packages": {"mesh-e": {}}}"#,
    );
    sh(&format!(
        "LC_ALL=C pacman --config {} --noconfirm -R mesh-e",
        conf.display()
    ));
    repaired_by_watch(&node, "mesh-e");
    sh(&format!(
        "LC_ALL=C pacman --config {} -Q mesh-e",
        conf.display()
    ));
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_unit_file_edited_by_hand_is_written_back() {
    let sb = sandbox();
    let unit = format!("mesh-it-{}-watch.service", std::process::id());
    let content = "[Service]\nExecStart=/bin/sleep infinity\n";
    let declaration = serde_json::json!({"schema": 1, "units": {&unit: {"content": content}}});
    let path = sb.unit_dir.join(&unit);
    let _cleanup = Cleanup(path.clone());
    let node = watched_in_sandbox(
        &sb,
        "watch-unit",
        Path::new(&sb.pacman_conf),
        &declaration.to_string(),
    );
    std::fs::write(&path, "[Service]\nExecStart=/bin/false\n").unwrap();
    repaired_by_watch(&node, &unit);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
}
