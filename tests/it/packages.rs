//! The pacman packages driver against the real pacman of the sandbox. Each test has a pacman root,
//! database and conf of its own (syncing from the sandbox repo, or from a private copy of it), so
//! the tests run in parallel without meeting on one `db.lck`, and none sees another's packages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::ways::{Driver, Way};
use crate::support::{
    failure, failures, pacman_conf, sandbox, sh, status, sysroot_with_repo, wait_until, PacmanRoot,
    Sandbox, Scratch,
};

/// A pacman root with its own database and conf, removed when dropped.
/// A test's own pacman root `TEST` on the sandbox's repo, and its host `pkg-TEST`.
fn package_test(test: &str) -> (PacmanRoot, Scratch) {
    let sb = sandbox();
    let pacman = PacmanRoot::new(test, &sb.pacman_repo);
    let host = pacman.host(&sb, &format!("pkg-{test}"), "");
    (pacman, host)
}

/// The command lines of a `--trace-commands` report.
fn commands(report: &Value) -> Vec<String> {
    report["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c.as_str().expect("string").to_string())
        .collect()
}

/// `owned --json`: package name -> (origin, state).
fn owned(host: &Scratch) -> Vec<(String, String, String)> {
    let out = host.run(&["--json", "owned"]);
    assert_eq!(out.code, 0, "{out:?}");
    out.json()["owned"]
        .as_array()
        .expect("owned")
        .iter()
        .filter(|row| row["kind"] == "packages")
        .map(|row| {
            let field = |name: &str| row[name].as_str().expect("string").to_string();
            (field("key"), field("origin"), field("state"))
        })
        .collect()
}

fn row(key: &str, origin: &str, state: &str) -> (String, String, String) {
    (key.into(), origin.into(), state.into())
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn install_pulls_dependencies_and_a_second_apply_changes_nothing() {
    let (pacman, host) = package_test("install");
    let declaration = r#"{"schema": 1, "packages": {"mesh-b": {}}}"#;

    let first = host.apply_json(declaration, 0);
    assert_eq!(first["changes"][0]["key"], "mesh-b", "{first:#}");
    assert_eq!(pacman.version("mesh-b").as_deref(), Some("1.0-1"));
    assert_eq!(pacman.version("mesh-a").as_deref(), Some("1.0-1"));

    let second = host.apply_json(declaration, 0);
    assert_eq!(second["changes"], Value::Array(vec![]), "{second:#}");
    assert_eq!(second["in_sync"], 1);
    let commands = commands(&second);
    assert!(commands.iter().all(|c| !c.contains(" -S")), "{commands:?}");
    let text = host.run(&[
        "apply",
        host.dir.join("declaration.json").to_str().expect("utf-8"),
    ]);
    text.assert_stdout("0 changed");
    assert_eq!(owned(&host), vec![row("mesh-b", "created", "in sync")]);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn drift_is_seen_and_repaired() {
    let (pacman, host) = package_test("drift");
    let declaration = r#"{"schema": 1, "packages": {"mesh-e": {}}}"#;
    host.apply_json(declaration, 0);

    pacman.pacman("-R --noconfirm mesh-e");
    assert_eq!(owned(&host), vec![row("mesh-e", "created", "missing")]);

    let report = host.apply_json(declaration, 0);
    assert_eq!(report["changes"][0]["key"], "mesh-e", "{report:#}");
    assert!(pacman.version("mesh-e").is_some());
    assert_eq!(owned(&host), vec![row("mesh-e", "created", "in sync")]);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn release_removes_only_what_the_host_installed() {
    let (pacman, host) = package_test("release");
    // Installed by hand: mesh-e is then declared (adopted), mesh-d (pulling mesh-c) never is.
    pacman.pacman("-S --noconfirm mesh-e mesh-d");
    let report = host.apply_json(
        r#"{"schema": 1, "packages": {"mesh-b": {}, "mesh-e": {}}}"#,
        0,
    );
    assert_eq!(report["adopted"][0]["key"], "mesh-e", "{report:#}");
    assert_eq!(
        owned(&host),
        vec![
            row("mesh-b", "created", "in sync"),
            row("mesh-e", "adopted", "in sync")
        ]
    );

    let report = host.apply_json(r#"{"schema": 1}"#, 0);
    let commands = commands(&report);
    assert!(
        commands
            .iter()
            .any(|c| c.ends_with("-Rs --noconfirm -- mesh-b")),
        "{commands:?}"
    );
    assert!(
        commands
            .iter()
            .all(|c| !(c.contains(" -R") && c.contains("mesh-e"))),
        "{commands:?}"
    );
    assert_eq!(pacman.version("mesh-b"), None);
    assert_eq!(
        pacman.version("mesh-a"),
        None,
        "the dependency it pulled in"
    );
    assert!(
        pacman.version("mesh-e").is_some(),
        "adopted: left installed"
    );
    assert!(pacman.version("mesh-d").is_some(), "never declared");
    assert!(pacman.version("mesh-c").is_some(), "never declared");
    assert_eq!(owned(&host), vec![]);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_declared_dependency_survives_the_release_of_what_pulled_it_in() {
    let (pacman, host) = package_test("dependency");
    host.apply_json(r#"{"schema": 1, "packages": {"mesh-b": {}}}"#, 0);
    assert_eq!(
        pacman.reason("mesh-a"),
        "Installed as a dependency for another package"
    );

    // mesh-b goes (`-Rs`) while mesh-a, its dependency, is now declared: mesh-a stays.
    let report = host.apply_json(r#"{"schema": 1, "packages": {"mesh-a": {}}}"#, 0);
    assert_eq!(pacman.version("mesh-b"), None, "{report:#}");
    assert!(pacman.version("mesh-a").is_some(), "{report:#}");
    assert_eq!(pacman.reason("mesh-a"), "Explicitly installed");
    let again = host.apply_json(r#"{"schema": 1, "packages": {"mesh-a": {}}}"#, 0);
    assert_eq!(again["changes"], Value::Array(vec![]), "{again:#}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn an_adopted_dependency_is_left_a_dependency_on_release() {
    let (pacman, host) = package_test("adopted-dependency");
    pacman.pacman("-S --asdeps --noconfirm mesh-e");
    let report = host.apply_json(r#"{"schema": 1, "packages": {"mesh-e": {}}}"#, 0);
    assert_eq!(report["changes"][0]["action"], "update", "{report:#}");
    assert_eq!(pacman.reason("mesh-e"), "Explicitly installed");
    assert_eq!(owned(&host), vec![row("mesh-e", "adopted", "in sync")]);

    host.apply_json(r#"{"schema": 1}"#, 0);
    assert!(pacman.version("mesh-e").is_some());
    assert_eq!(
        pacman.reason("mesh-e"),
        "Installed as a dependency for another package"
    );
    assert_eq!(owned(&host), vec![]);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_released_package_something_else_needs_is_left_to_pacman() {
    let (pacman, host) = package_test("still-needed");
    host.apply_json(r#"{"schema": 1, "packages": {"mesh-a": {}}}"#, 0);
    // A person installs something that needs it; releasing it must not fail on every run.
    pacman.pacman("-S --noconfirm mesh-b");
    let report = host.apply_json(r#"{"schema": 1}"#, 0);
    assert!(
        report["changes"][0]["details"][0]
            .as_str()
            .unwrap_or_default()
            .contains("still required by mesh-b"),
        "{report:#}"
    );
    assert!(pacman.version("mesh-a").is_some());
    assert_eq!(
        pacman.reason("mesh-a"),
        "Installed as a dependency for another package"
    );
    assert_eq!(owned(&host), vec![]);
    // Once nothing needs it, pacman's own -Rs takes it along.
    pacman.pacman("-Rs --noconfirm mesh-b");
    assert_eq!(pacman.version("mesh-a"), None);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn declared_absent_removes_a_package_the_host_does_not_own() {
    let (pacman, host) = package_test("absent");
    pacman.pacman("-S --noconfirm mesh-e");
    let declaration = r#"{"schema": 1, "packages": {"mesh-e": {"state": "absent"}}}"#;
    let report = host.apply_json(declaration, 0);
    assert_eq!(report["changes"][0]["action"], "remove", "{report:#}");
    assert_eq!(pacman.version("mesh-e"), None);
    assert_eq!(owned(&host), vec![]);
    let again = host.apply_json(declaration, 0);
    assert_eq!(again["changes"], Value::Array(vec![]), "{again:#}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_held_database_lock_fails_the_packages_cleanly_and_the_rest_converges() {
    let sb = sandbox();
    let pacman = PacmanRoot::new("lock", &sb.pacman_repo);
    let host = pacman.host(&sb, "pkg-lock", r#""pacman_lock_wait_secs": 1"#);
    let unit = format!("mesh-pkgtest-lock-{}.service", std::process::id());
    // A live process holds the lock open, as a running pacman does.
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3>{}; exec sleep 60",
            pacman.lock_file().display()
        ))
        .spawn()
        .expect("lock holder");
    assert!(wait_until(Duration::from_secs(5), || pacman
        .lock_file()
        .exists()));
    let report = host.apply_json(&format!(
            r#"{{"schema": 1, "packages": {{"mesh-e": {{}}, "mesh-b": {{}}}},
                "units": {{"{unit}": {{"content": "[Service]\nExecStart=/bin/sleep infinity\n", "active": true}}}}}}"#
        ),
        1,
    );
    let unit_active = status(&format!("systemctl --user is-active --quiet {unit}"));
    let _ = status(&format!("systemctl --user stop {unit}"));
    let lock_left = pacman.lock_file().exists();
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = std::fs::remove_file(pacman.lock_file());

    let lock = pacman.lock_file().display().to_string();
    for name in ["mesh-b", "mesh-e"] {
        let detail = failure(&report, name).detail;
        assert!(detail.contains(&lock), "{detail}");
        assert!(detail.contains("pacman is busy"), "{detail}");
        // Given up after the configured wait, not a timeout of its own.
        assert!(detail.contains("for more than 1 s"), "{detail}");
        assert!(
            detail.contains(&format!("held by pid {} (sleep)", holder.id())),
            "{detail}"
        );
    }
    assert!(lock_left, "the lock file was deleted");
    assert_eq!(unit_active, 0, "{report:#}");
    // A lock fails the whole transaction: no retry of each package, each waiting again.
    let installs: Vec<String> = commands(&report)
        .into_iter()
        .filter(|c| c.contains(" -S "))
        .collect();
    assert!(
        installs.iter().all(|c| c.ends_with("-- mesh-b mesh-e")),
        "{installs:?}"
    );
    assert_eq!(pacman.version("mesh-e"), None);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_stale_database_lock_is_reported_by_name_and_removed_only_when_allowed_and_older_than_boot() {
    let sb = sandbox();
    let pacman = PacmanRoot::new("stale", &sb.pacman_repo);
    let lock = pacman.lock_file().display().to_string();
    let declaration = r#"{"schema": 1, "packages": {"mesh-e": {}}}"#;
    // Left by a pacman that was killed: nobody has it open.
    std::fs::write(pacman.lock_file(), "").expect("db.lck");
    let host = pacman.host(&sb, "pkg-stale", r#""pacman_lock_wait_secs": 30"#);
    let report = host.apply_json(declaration, 1);
    let detail = failure(&report, "mesh-e").detail;
    assert!(
        detail.contains(&format!(
            "pacman's database lock {lock} is stale: no process has it open;"
        )),
        "{detail}"
    );
    assert!(!detail.contains("busy"), "{detail}");
    // Stale is known at once, not after the whole lock wait (30 s of retries twice a second):
    // the transaction is tried once, and once more to see the lock still unheld.
    let tries = commands(&report)
        .iter()
        .filter(|c| c.contains(" -S "))
        .count();
    assert_eq!(tries, 2, "{report:#}");
    assert!(pacman.lock_file().exists(), "never deleted by default");
    let status = host.run(&["status"]);
    status.assert_stdout(&format!("{lock} is stale"));

    // Allowed to remove a stale lock, but this one is from this boot: still left alone.
    let allowed = pacman.host(
        &sb,
        "pkg-stale-allowed",
        r#""pacman_lock_wait_secs": 30, "pacman_remove_stale_lock": true"#,
    );
    let report = allowed.apply_json(declaration, 1);
    assert!(
        failure(&report, "mesh-e")
            .detail
            .contains("is stale: no process has it open;"),
        "{report:#}"
    );
    assert!(pacman.lock_file().exists());

    // Older than the boot: stale either way, and removed only where allowed.
    sh(&format!("touch -d @1000000000 {lock}"));
    let report = host.apply_json(declaration, 1);
    assert!(
        failure(&report, "mesh-e")
            .detail
            .contains("no process has it open and it predates this boot"),
        "{report:#}"
    );
    assert!(pacman.lock_file().exists());
    let out = allowed.run(&[
        "apply",
        allowed.declaration("d.json", declaration).to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    out.assert_stdout(&format!(
        "note: removed pacman's stale database lock {lock}"
    ));
    assert!(!pacman.lock_file().exists());
    assert!(pacman.version("mesh-e").is_some());
    let status = allowed.run(&["status"]);
    status.assert_stdout("note: removed pacman's stale database lock");
}

/// Under `apply` and under the service alike.
#[test]
fn a_hung_pacman_is_killed_at_its_timeout() {
    for way in Way::BOTH {
        let mut host = Scratch::with_config(
            &format!("pkg-hung-{}", way.name()),
            r#"{"pacman": {"command": ["sh", "-c", "sleep 30", "sh"], "timeout_secs": 1}}"#,
        );
        host.offline_root = false;
        let mut driver = Driver::start(way, host);
        let ran = driver.converge(r#"{"schema": 1, "packages": {"mesh-e": {}}}"#);
        let detail = failure(&ran.record, "mesh-e").detail;
        // Stopped at its timeout: left alone, `sleep 30` would have exited 0 and installed nothing.
        assert!(
            detail.contains("reached its timeout of 1 s: sent SIGINT"),
            "{way:?}: {detail}"
        );
    }
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn an_unknown_package_fails_only_itself() {
    let (pacman, host) = package_test("unknown");
    let report = host.apply_json(
        r#"{"schema": 1, "packages": {"mesh-nope": {}, "mesh-e": {}}}"#,
        1,
    );
    assert!(pacman.version("mesh-e").is_some(), "{report:#}");
    let detail = failure(&report, "mesh-nope").detail;
    assert!(detail.contains("target not found: mesh-nope"), "{detail}");
    assert_eq!(failures(&report).len(), 1);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn packages_upgrade_installs_through_a_full_upgrade() {
    let sb = sandbox();
    let (private, repo) = private_repo(&sb, "upgrade");
    let pacman = PacmanRoot::new("upgrade", &repo);
    let host = pacman.host(&sb, "pkg-upgrade", "");
    host.apply_json(r#"{"schema": 1, "packages": {"mesh-b": {}}}"#, 0);
    bump(&private, &repo, &[("mesh-a", "1.1"), ("mesh-e", "2.0")]);

    let report = host.apply_json(
        r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-b": {}, "mesh-e": {}}}"#,
        0,
    );
    let commands = commands(&report);
    assert!(
        commands
            .iter()
            .any(|c| c.ends_with("-Syu --ignore=nox-mesh-host --needed --noconfirm -- mesh-e")),
        "{commands:?}"
    );
    assert_eq!(pacman.version("mesh-e").as_deref(), Some("2.0-1"));
    assert_eq!(
        pacman.version("mesh-a").as_deref(),
        Some("1.1-1"),
        "upgraded"
    );
    drop(pacman);
    let _ = std::fs::remove_dir_all(&private);
}

/// Rescue mode through `--sysroot`, as pacman 6 runs it (chrooted: it prints paths inside the
/// root) and as pacman 7 does (it prints them with the root in front): install, a full upgrade
/// with `cache_keep` pruning the root's cache, a stale lock in the root's database removed, then
/// a removal. With pacman 7, reading its paths as pacman 6's put the root in front twice.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn rescue_mode_installs_upgrades_and_removes_through_sysroot() {
    let sb = sandbox();
    // `--sysroot` reads the root's own conf, database and repo.
    let mut host = Scratch::with_config(
        "pkg-rescue",
        r#"{"pacman": {"command": ["pacman"]}, "cache_keep": 1, "pacman_remove_stale_lock": true}"#,
    );
    host.offline_root = true;
    let root = host.root();
    sysroot_with_repo(&root, &sb.pacman_repo);
    let version = |name: &str| {
        let local = root.join("var/lib/pacman/local");
        std::fs::read_dir(&local)
            .expect("the root's local database")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .find_map(|entry| {
                let (rest, rel) = entry.rsplit_once('-')?;
                let (package, ver) = rest.rsplit_once('-')?;
                (package == name).then(|| format!("{ver}-{rel}"))
            })
    };

    let report = host.apply_json(r#"{"schema": 1, "packages": {"mesh-b": {}}}"#, 0);
    let commands = commands(&report);
    let sysroot = format!("pacman --sysroot {} -S", root.display());
    assert!(
        commands.iter().any(|c| c.starts_with(&sysroot)),
        "{commands:?}"
    );
    assert!(root.join("usr/share/mesh-b/marker").exists());
    assert!(root.join("usr/share/mesh-a/marker").exists());
    let again = host.apply_json(r#"{"schema": 1, "packages": {"mesh-b": {}}}"#, 0);
    assert_eq!(again["changes"], Value::Array(vec![]), "{again:#}");

    // A new mesh-b in the root's repo: the full upgrade (run as mesh-e is new) takes it, and
    // cache_keep 1 drops 1.0-1.
    let private = host.dir.join("bump");
    std::fs::create_dir_all(private.join("tmp")).expect("bump dir");
    std::fs::write(private.join(".mesh-sandbox"), "").expect("marker");
    let repo = root.join("repo");
    std::fs::write(
        private.join("env"),
        format!("export MESH_PACMAN_REPO={}\n", repo.display()),
    )
    .expect("env");
    bump(&private, &repo, &[("mesh-b", "2.0-1")]);
    let declaration =
        r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-b": {}, "mesh-e": {}}}"#;
    let report = host.apply_json(declaration, 0);
    assert_eq!(version("mesh-b").as_deref(), Some("2.0-1"), "{report:#}");
    assert_eq!(version("mesh-e").as_deref(), Some("1.0-1"), "{report:#}");
    let cache = root.join("var/cache/pacman/pkg");
    assert!(cache.join("mesh-b-2.0-1-any.pkg.tar.zst").exists());
    assert!(
        !cache.join("mesh-b-1.0-1-any.pkg.tar.zst").exists(),
        "cache_keep 1 left the old version: {report:#}"
    );

    // A lock from before this boot in the root's database: named as pacman names it, removed.
    let lock = root.join("var/lib/pacman/db.lck");
    sh(&format!("touch -d @1000000000 {}", lock.display()));
    let removed = r#"{"schema": 1, "packages": {"mesh-b": {"state": "absent"}, "mesh-e": {}}}"#;
    let report = host.apply_json(removed, 0);
    assert!(!lock.exists(), "{report:#}");
    assert_eq!(version("mesh-b"), None, "{report:#}");
    assert!(!root.join("usr/share/mesh-b/marker").exists());
}

/// pacman's major version, from `pacman --version`.
fn pacman_major() -> u32 {
    let out = Command::new("pacman")
        .arg("--version")
        .output()
        .expect("pacman --version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_once("Pacman v")
        .and_then(|(_, rest)| rest.split('.').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no version in `pacman --version`: {text}"))
}

/// pacman 7's download sandbox (pacman.conf's `DownloadUser`, which Arch sets) when pacman
/// cannot set it up: on a kernel without Landlock (made so for pacman, whatever this kernel
/// has, by tests/it/support/no-landlock.py's seccomp filter) the download fails; with a user that
/// does not exist every command does. The package fails naming the cause and the option that
/// turns it off, and the unit declared beside it is written all the same. pacman 6 knows no
/// `DownloadUser` (it warns of the line) and installs.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_download_sandbox_pacman_cannot_set_up_fails_the_packages_naming_the_option() {
    let sb = sandbox();
    let sandbox_dir = PathBuf::from(std::env::var("MESH_SANDBOX").expect("MESH_SANDBOX"));
    let dir = sandbox_dir
        .join("tmp")
        .join(format!("pacman-download-user-{}", std::process::id()));
    let root = dir.join("root");
    for sub in [
        "var/lib/pacman",
        "var/cache/pacman/pkg",
        "var/log",
        "etc/pacman.d/hooks",
        "etc/pacman.d/gnupg",
    ] {
        std::fs::create_dir_all(root.join(sub)).expect("pacman root");
    }
    // Without the sandbox, whatever the harness's conf sets: each case sets its own.
    let plain: String = pacman_conf(&root, Some(&sb.pacman_repo))
        .lines()
        .filter(|l| !l.starts_with("DownloadUser") && !l.starts_with("DisableSandbox"))
        .map(|l| format!("{l}\n"))
        .collect();
    let conf = dir.join("pacman.conf");
    std::fs::write(&conf, &plain).expect("pacman.conf");
    sh(&format!(
        "LC_ALL=C pacman --config {} -Sy --noconfirm",
        conf.display()
    ));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/no-landlock.py");
    let pacman7 = pacman_major() >= 7;
    for (label, user, wrapper, cause) in [
        (
            "landlock",
            "nobody",
            vec!["python3", script.to_str().expect("utf-8")],
            "Landlock is not available to pacman (the kernel lacks it, or a container's system \
             call filter refuses it) (restricting filesystem access failed because \
             Landlock is not supported by the kernel!); DisableSandboxFilesystem (or \
             DisableSandbox) in pacman.conf's [options] turns that part off",
        ),
        (
            "no-user",
            "mesh-no-such-user",
            vec![],
            "pacman's download user 'mesh-no-such-user' (DownloadUser in pacman.conf) does not \
             exist: create it",
        ),
    ] {
        let with_user = plain.replacen(
            "[options]\n",
            &format!("[options]\nDownloadUser = {user}\n"),
            1,
        );
        std::fs::write(&conf, with_user).expect("pacman.conf");
        let command: Vec<String> = wrapper
            .iter()
            .map(|s| s.to_string())
            .chain([
                "pacman".into(),
                "--config".into(),
                conf.display().to_string(),
            ])
            .collect();
        let host = Scratch::with_config(
            &format!("pkg-download-{label}"),
            &serde_json::json!({
                "pacman": {"command": command},
                "systemctl": {"command": ["systemctl", "--user"]},
                "podman": {"command": ["podman"]},
                "unit_dir": sb.unit_dir,
            })
            .to_string(),
        );
        let mut host = host;
        host.offline_root = false;
        let unit = format!("mesh-download-{label}-{}.service", std::process::id());
        let written = sb.unit_dir.join(&unit);
        let content = "[Service]\nExecStart=/bin/true\n";
        let declaration = serde_json::json!({
            "schema": 1,
            "packages": {"mesh-e": {}},
            "units": {&unit: {"content": content}},
        })
        .to_string();
        let cache = root.join("var/cache/pacman/pkg");
        sh(&format!("rm -f {}/mesh-e-*", cache.display()));
        if !pacman7 {
            let report = host.apply_json(&declaration, 0);
            assert_eq!(failures(&report).len(), 0, "{label}: {report:#}");
            assert!(root.join("usr/share/mesh-e/marker").exists(), "{label}");
            let _ = std::fs::remove_file(&written);
            std::fs::write(&conf, &plain).expect("pacman.conf");
            sh(&format!(
                "LC_ALL=C pacman --config {} -R --noconfirm mesh-e",
                conf.display()
            ));
            continue;
        }
        let report = host.apply_json(&declaration, 1);
        let detail = failure(&report, "mesh-e").detail;
        assert!(detail.contains(cause), "{label}: {detail}");
        assert_eq!(failures(&report).len(), 1, "{label}: {report:#}");
        assert!(!root.join("usr/share/mesh-e/marker").exists(), "{label}");
        assert_eq!(
            std::fs::read_to_string(&written).ok().as_deref(),
            Some(content),
            "{label}: the unit is written all the same"
        );
        let _ = std::fs::remove_file(&written);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A private copy of the sandbox repo, with an `env` naming it for bump-package.sh.
fn private_repo(sb: &Sandbox, label: &str) -> (PathBuf, PathBuf) {
    let sandbox_dir = PathBuf::from(std::env::var("MESH_SANDBOX").expect("MESH_SANDBOX"));
    let private = sandbox_dir
        .join("tmp")
        .join(format!("packages-{label}-repo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    let repo = private.join("repo");
    std::fs::create_dir_all(private.join("tmp")).expect("private sandbox");
    std::fs::write(private.join(".mesh-sandbox"), "").expect("marker");
    sh(&format!(
        "cp -r {} {repo} && echo 'export MESH_PACMAN_REPO={repo}' > {env}",
        sb.pacman_repo.display(),
        repo = repo.display(),
        env = private.join("env").display()
    ));
    (private, repo)
}

/// Re-versions `packages` in the private repo (bump-package.sh), with a database newer than
/// anything synced in this same second: pacman's `-Sy` sees a new database by its mtime, in
/// whole seconds.
fn bump(private: &Path, repo: &Path, packages: &[(&str, &str)]) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/bump-package.sh");
    for (name, version) in packages {
        sh(&format!(
            "MESH_SANDBOX={} {} {name} {version}",
            private.display(),
            script.display()
        ));
    }
    sh(&format!(
        "touch -d '+2 seconds' {}/meshtest.db*",
        repo.display()
    ));
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn packages_upgrade_never_upgrades_the_hosts_own_package() {
    let sb = sandbox();
    let (private, repo) = private_repo(&sb, "self-upgrade");
    let pacman = PacmanRoot::new("self-upgrade", &repo);
    let host = pacman.host(&sb, "pkg-self-upgrade", "");
    // Installed by the operator, as the host's package and an ordinary one are.
    pacman.pacman("-S --noconfirm nox-mesh-host mesh-a");
    bump(
        &private,
        &repo,
        &[("nox-mesh-host", "0.0.2"), ("mesh-a", "1.1")],
    );

    let report = host.apply_json(
        r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-e": {}}}"#,
        0,
    );
    assert!(
        commands(&report)
            .iter()
            .any(|c| c.ends_with("-Syu --ignore=nox-mesh-host --needed --noconfirm -- mesh-e")),
        "{report:#}"
    );
    assert_eq!(
        pacman.version("mesh-a").as_deref(),
        Some("1.1-1"),
        "the rest upgrades"
    );
    assert_eq!(pacman.version("mesh-e").as_deref(), Some("1.0-1"));
    assert_eq!(
        pacman.version("nox-mesh-host").as_deref(),
        Some("0.0.1-1"),
        "the host's package stays at its version"
    );
    drop(pacman);
    let _ = std::fs::remove_dir_all(&private);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_package_that_takes_the_host_over_fails_by_name_and_nothing_else_is_held_back() {
    let sb = sandbox();
    let pacman = PacmanRoot::new("usurper", &sb.pacman_repo);
    let unit = format!("mesh-pkgtest-usurper-{}.service", std::process::id());
    let host = pacman.host(&sb, "pkg-usurper", "");
    pacman.pacman("-S --noconfirm nox-mesh-host");
    for upgrade in [false, true] {
        let report = host.apply_json(&format!(
                r#"{{"schema": 1, "packages_upgrade": {upgrade},
                    "packages": {{"mesh-usurper": {{}}, "mesh-e": {{}}, "mesh-nope": {{}}}},
                    "units": {{"{unit}": {{"content": "[Service]\nExecStart=/bin/sleep infinity\n", "active": true}}}}}}"#
            ),
            1,
        );
        let detail = failure(&report, "mesh-usurper").detail;
        assert!(
            detail.contains(
                "refused: mesh-usurper replaces nox-mesh-host, the host's own package (pacman -Si)"
            ),
            "{detail}"
        );
        let detail = failure(&report, "mesh-nope").detail;
        assert!(detail.contains("target not found: mesh-nope"), "{detail}");
        assert_eq!(failures(&report).len(), 2, "{report:#}");
        // One batched look before any transaction, which never names it.
        let commands = commands(&report);
        let si = commands.iter().position(|c| c.contains(" -Si -- "));
        let install = commands.iter().position(|c| c.contains("--needed"));
        assert!(si.is_some() && si < install, "{commands:?}");
        assert!(
            commands
                .iter()
                .filter(|c| c.contains("--needed"))
                .all(|c| !c.contains("mesh-usurper")),
            "{commands:?}"
        );
        assert_eq!(pacman.version("nox-mesh-host").as_deref(), Some("0.0.1-1"));
        assert_eq!(pacman.version("mesh-usurper"), None);
        assert!(pacman.version("mesh-e").is_some(), "{report:#}");
        let unit_active = status(&format!("systemctl --user is-active --quiet {unit}"));
        assert_eq!(unit_active, 0, "the other kinds converge: {report:#}");
        pacman.pacman("-R --noconfirm mesh-e");
    }
    let _ = status(&format!("systemctl --user stop {unit}"));
    let _ = std::fs::remove_file(sb.unit_dir.join(&unit));
}

/// Adds the package `name` 1.0-1 (with `pkginfo` lines such as `depend = x`) to `repo`, with its
/// database newer than any root synced from it this second. No blank line in .PKGINFO when there
/// are none: pacman 7.1's repo-add complains of one (`declare: '=': not a valid identifier`).
fn publish(repo: &Path, name: &str, pkginfo: &[&str]) {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/lib.sh");
    let script = format!(
        "set -e; source {lib}; d=$(mktemp -d); mkdir -p $d/usr/share/{name}; \
         echo {name} > $d/usr/share/{name}/marker; sb_pkginfo $d {name} 1.0-1; \
         for l in {lines}; do echo \"$l\" >> $d/.PKGINFO; done; \
         sb_pack $d {repo}/{name}-1.0-1-any.pkg.tar.zst; rm -rf $d; \
         repo-add -q {repo}/meshtest.db.tar.gz {repo}/{name}-1.0-1-any.pkg.tar.zst; \
         touch -d '+2 seconds' {repo}/meshtest.db*",
        lib = lib.display(),
        repo = repo.display(),
        lines = pkginfo
            .iter()
            .map(|l| format!("'{l}'"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let status = Command::new("bash")
        .args(["-c", &script])
        .status()
        .expect("bash");
    assert!(status.success(), "{script}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn packages_upgrade_checks_packages_new_to_the_databases_after_refreshing_them() {
    let sb = sandbox();
    let (private, repo) = private_repo(&sb, "self-new");
    let pacman = PacmanRoot::new("self-new", &repo);
    let host = pacman.host(&sb, "pkg-self-new", "");
    pacman.pacman("-S --noconfirm nox-mesh-host");
    // Published after this root last synced: only the -Syu's refresh sees them.
    publish(&repo, "mesh-new", &[]);
    publish(&repo, "mesh-usurper-too", &["replaces = nox-mesh-host"]);

    let report = host.apply_json(r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-new": {}, "mesh-usurper-too": {}}}"#,
        1,
    );
    let detail = failure(&report, "mesh-usurper-too").detail;
    assert!(
        detail.contains("refused: mesh-usurper-too replaces nox-mesh-host"),
        "{detail}"
    );
    let commands: Vec<String> = commands(&report)
        .into_iter()
        .filter(|c| c.contains(" -S"))
        .map(|c| {
            c.split_once(" -S")
                .map(|(_, rest)| format!("-S{rest}"))
                .unwrap_or(c)
        })
        .collect();
    // The room checks (`-Sup`, `-Sp` and the `-Si` of what they would take) change nothing.
    let commands: Vec<&String> = commands
        .iter()
        .filter(|c| !c.starts_with("-Sp") && !c.starts_with("-Sup"))
        .collect();
    assert_eq!(
        commands,
        vec![
            "-Si -- mesh-new mesh-usurper-too",
            "-Syu --ignore=nox-mesh-host --needed --noconfirm",
            "-Si -- mesh-new mesh-usurper-too",
            "-Si -- mesh-new",
            "-S --needed --noconfirm -- mesh-new",
        ]
    );
    assert_eq!(pacman.version("mesh-new").as_deref(), Some("1.0-1"));
    assert_eq!(pacman.version("mesh-usurper-too"), None);
    assert_eq!(pacman.version("nox-mesh-host").as_deref(), Some("0.0.1-1"));
    drop(pacman);
    let _ = std::fs::remove_dir_all(&private);
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_release_that_would_remove_the_hosts_package_as_a_dependency_is_refused() {
    let sb = sandbox();
    let (private, repo) = private_repo(&sb, "self-remove");
    publish(&repo, "mesh-addon", &["depend = nox-mesh-host"]);
    let pacman = PacmanRoot::new("self-remove", &repo);
    let host = pacman.host(&sb, "pkg-self-remove", "");
    // The operator installed the add-on, and the host's package with it as its dependency.
    pacman.pacman("-S --noconfirm mesh-addon mesh-e");
    let report = host.apply_json(r#"{"schema": 1, "packages": {"mesh-addon": {"state": "absent"}, "mesh-e": {"state": "absent"}}}"#,
        1,
    );
    let detail = failure(&report, "mesh-addon").detail;
    assert!(
        detail.contains(
            "refused: removing mesh-addon with its dependencies would remove nox-mesh-host"
        ),
        "{detail}"
    );
    assert_eq!(failures(&report).len(), 1, "{report:#}");
    assert_eq!(pacman.version("nox-mesh-host").as_deref(), Some("0.0.1-1"));
    assert!(pacman.version("mesh-addon").is_some());
    assert_eq!(pacman.version("mesh-e"), None, "the rest is removed");
    drop(pacman);
    let _ = std::fs::remove_dir_all(&private);
}

/// SIGTERM between transactions, sent by a pacman wrapper during the `-S` (so no timing is
/// involved), under the service and under `apply`: that transaction runs to its end, the removal
/// after it is not started, and the next run does it. The service records the run `interrupted`
/// with the removal deferred and exits 0; `apply`, which has no signal handling of its own (a
/// person's Ctrl-C ends it), ends at once, and the pacman it started finishes on its own.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn sigterm_between_transactions_leaves_the_rest_for_the_next_run() {
    let sb = sandbox();
    for way in Way::BOTH {
        let pacman = PacmanRoot::new(&format!("sigterm-{}", way.name()), &sb.pacman_repo);
        let host = pacman.host(&sb, &format!("pkg-sigterm-{}", way.name()), "");
        pacman.pacman("-S --noconfirm mesh-e");
        let real = host.set_tool("pacman", &["true"]);
        // The wrapper gets the real pacman's arguments (`--config FILE`) before the run's own.
        let script = r#"for a; do [ "$a" = -S ] && kill -TERM $PPID; done; exec pacman "$@""#;
        let wrapper: Vec<&str> = ["sh", "-c", script, "sh"]
            .into_iter()
            .chain(real.iter().skip(1).map(String::as_str))
            .collect();
        host.set_tool("pacman", &wrapper);
        let mut driver = Driver::start(way, host);
        let ran = driver.converge(
            r#"{"schema": 1, "packages": {"mesh-b": {}, "mesh-e": {"state": "absent"}}}"#,
        );
        match &ran.output {
            None => driver.assert_stopped_mid_run(&ran.record, &["mesh-e"]),
            Some(out) => {
                assert_eq!(out.code, -1, "ended by the signal: {out:?}");
                // The wrapper's pacman starts after the signal: its transaction, not the lock
                // it has yet to take, says it is done.
                assert!(
                    wait_until(Duration::from_secs(30), || pacman
                        .version("mesh-b")
                        .is_some()
                        && !pacman.lock_file().exists()),
                    "the orphaned pacman never finished"
                );
            }
        }
        assert_eq!(
            pacman.version("mesh-b").as_deref(),
            Some("1.0-1"),
            "{way:?}"
        );
        assert!(
            pacman.version("mesh-e").is_some(),
            "{way:?}: the removal waited"
        );

        driver.host().set_tool("pacman", &real);
        let record = driver.rerun();
        assert_eq!(record["outcome"], "converged", "{way:?}: {record:#}");
        assert_eq!(pacman.version("mesh-e"), None, "{way:?}");
    }
}

/// The transactions pacman logged in `pacman`'s root, in order: the packages each installed or
/// upgraded (`[ALPM] installed NAME (...)`, `[ALPM] upgraded NAME (...)`).
fn logged_transactions(pacman: &PacmanRoot) -> Vec<Vec<String>> {
    let log = std::fs::read_to_string(pacman.dir.join("root/var/log/pacman.log")).expect("log");
    let mut transactions: Vec<Vec<String>> = Vec::new();
    for line in log.lines() {
        if line.contains("[ALPM] transaction started") {
            transactions.push(Vec::new());
        }
        for verb in ["] installed ", "] upgraded "] {
            if let (Some((_, rest)), Some(current)) =
                (line.split_once(verb), transactions.last_mut())
            {
                current.push(
                    rest.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
                current.sort();
            }
        }
    }
    transactions
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_full_upgrade_takes_the_keyring_first_in_its_own_transaction() {
    let sb = sandbox();
    let (private, repo) = private_repo(&sb, "keyring");
    let pacman = PacmanRoot::new("keyring", &repo);
    let host = pacman.host(&sb, "pkg-keyring", "");
    pacman.pacman("-S --noconfirm meshtest-keyring mesh-a");
    // A new keyring, an upgrade of mesh-a, and a package that needs the new keyring.
    bump(
        &private,
        &repo,
        &[("meshtest-keyring", "2.0"), ("mesh-a", "1.1")],
    );
    publish(&repo, "mesh-signed", &["depend = meshtest-keyring>=2.0"]);
    let before = logged_transactions(&pacman).len();

    let report = host.apply_json(
        r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-signed": {}}}"#,
        0,
    );
    assert_eq!(pacman.version("meshtest-keyring").as_deref(), Some("2.0-1"));
    assert_eq!(pacman.version("mesh-signed").as_deref(), Some("1.0-1"));
    assert_eq!(pacman.version("mesh-a").as_deref(), Some("1.1-1"));
    // The keyring alone first; then the upgrade, and mesh-signed, which the databases knew only
    // after the refresh, installed after it.
    let transactions = logged_transactions(&pacman);
    assert_eq!(
        transactions[before..],
        [
            vec!["meshtest-keyring".to_string()],
            vec!["mesh-a".to_string()],
            vec!["mesh-signed".to_string()]
        ],
        "{report:#}"
    );
    let commands = commands(&report);
    assert!(
        commands
            .iter()
            .any(|c| c.ends_with("-Sy --needed --noconfirm -- meshtest-keyring")),
        "{commands:?}"
    );

    // Nothing newer: the keyring's transaction does nothing, and the run upgrades as before.
    let report = host.apply_json(
        r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-signed": {}, "mesh-e": {}}}"#,
        0,
    );
    assert!(pacman.version("mesh-e").is_some(), "{report:#}");
    let transactions = logged_transactions(&pacman);
    assert_eq!(transactions.last(), Some(&vec!["mesh-e".to_string()]));
    drop(pacman);
    let _ = std::fs::remove_dir_all(&private);
}

/// A small tmpfs mounted over a directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        sh(&format!(
            "mount -t tmpfs -o size={size} mesh-test-tmpfs {}",
            dir.display()
        ));
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Adds `name` 1.0-1 to `repo` with `mib` MiB of incompressible payload.
fn publish_large(repo: &Path, name: &str, mib: u32) {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/lib.sh");
    let script = format!(
        "set -e; source {lib}; d=$(mktemp -d); mkdir -p $d/usr/share/{name}; \
         head -c {mib}M /dev/urandom > $d/usr/share/{name}/blob; sb_pkginfo $d {name} 1.0-1; \
         sb_pack $d {repo}/{name}-1.0-1-any.pkg.tar.zst; rm -rf $d; \
         repo-add -q {repo}/meshtest.db.tar.gz {repo}/{name}-1.0-1-any.pkg.tar.zst; \
         touch -d '+2 seconds' {repo}/meshtest.db*",
        lib = lib.display(),
        repo = repo.display(),
    );
    let status = Command::new("bash")
        .args(["-c", &script])
        .status()
        .expect("bash");
    assert!(status.success(), "{script}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_package_that_would_not_fit_in_the_cache_fails_by_name_and_changes_nothing() {
    let sb = sandbox();
    for way in Way::BOTH {
        let label = format!("room-{}", way.name());
        let (private, repo) = private_repo(&sb, &label);
        publish_large(&repo, "mesh-big", 4);
        let pacman = PacmanRoot::new(&label, &repo);
        let cache = pacman.dir.join("root/var/cache/pacman/pkg");
        let mount = Tmpfs::mount(&cache, "2m");
        let host = pacman.host(&sb, &format!("pkg-{label}"), r#""disk_margin_mib": 1"#);

        let mut driver = Driver::start(way, host);
        let ran = driver.converge(r#"{"schema": 1, "packages": {"mesh-big": {}, "mesh-e": {}}}"#);
        let report = &ran.record;
        let detail = failure(report, "mesh-big").detail;
        assert!(
            detail.contains("not enough room on disk for mesh-big (4.0 MiB to download"),
            "{way:?}: {detail}"
        );
        assert!(
            detail.contains(&format!(
                "missing on the filesystem of {}/ (pacman's cache)",
                cache.display()
            )),
            "{way:?}: {detail}"
        );
        assert!(
            detail.contains("with the margin of 1.0 MiB (disk_margin_mib)"),
            "{way:?}: {detail}"
        );
        assert_eq!(failures(report).len(), 1, "{way:?}: {report:#}");
        assert_eq!(pacman.version("mesh-big"), None);
        assert!(
            !pacman.dir.join("root/usr/share/mesh-big").exists(),
            "{way:?}: nothing of it installed"
        );
        assert_eq!(
            pacman.version("mesh-e").as_deref(),
            Some("1.0-1"),
            "{way:?}: the rest converges"
        );
        drop(driver);
        drop(mount);
        drop(pacman);
        let _ = std::fs::remove_dir_all(&private);
    }
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn cache_keep_leaves_the_newest_versions_of_each_package_in_the_cache() {
    let sb = sandbox();
    let (private, repo) = private_repo(&sb, "cache-keep");
    let pacman = PacmanRoot::new("cache-keep", &repo);
    let host = pacman.host(&sb, "pkg-cache-keep", r#""cache_keep": 2"#);
    let cache = pacman.dir.join("root/var/cache/pacman/pkg");
    // Three versions of mesh-a pass through the cache (1.0, 1.10, 1.9: 1.10 is the newest), and
    // files pacman did not name stay.
    pacman.pacman("-S --noconfirm mesh-a");
    bump(&private, &repo, &[("mesh-a", "1.9")]);
    pacman.pacman("-Syu --noconfirm");
    std::fs::write(cache.join("mesh-a-1.0-1-any.pkg.tar.zst.sig"), "sig").expect("sig");
    std::fs::write(cache.join("notes.txt"), "mine").expect("stranger");
    bump(&private, &repo, &[("mesh-a", "1.10")]);
    // Newer than the database the `-Syu` above synced in this same second.
    sh(&format!(
        "touch -d '+4 seconds' {}/meshtest.db*",
        repo.display()
    ));

    let file = host.declaration(
        "declaration.json",
        r#"{"schema": 1, "packages_upgrade": true, "packages": {"mesh-e": {}}}"#,
    );
    let out = host.run(&["apply", file.to_str().expect("utf-8")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(pacman.version("mesh-a").as_deref(), Some("1.10-1"));
    let mut left: Vec<String> = std::fs::read_dir(&cache)
        .expect("cache")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "mesh-a-1.10-1-any.pkg.tar.zst",
            "mesh-a-1.9-1-any.pkg.tar.zst",
            "mesh-e-1.0-1-any.pkg.tar.zst",
            "notes.txt"
        ]
    );
    out.assert_stdout("note: cache_keep 2: removed 2 older package files from");
    out.assert_stdout(" B freed");
    let status = host.run(&["status"]);
    status.assert_stdout("cache_keep 2: removed 2 older package files");
    drop(pacman);
    let _ = std::fs::remove_dir_all(&private);
}
