//! What the machine needs after upgrades, against the sandbox's real pacman and systemd: a
//! kernel-like package whose module directory an upgrade takes away (reboot), a library a unit's
//! process maps that an upgrade replaces (restart), and a unit declared `restart_when_stale`
//! restarted for it in the run whose transaction replaced the library; and the look made only
//! when its answer can have changed, yet right after a person's own upgrade.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::support;
use crate::support::ways::{Driver, Launch, Way};
use crate::support::{sandbox, wait_until, PacmanRoot, Sandbox};

/// A repository of the test's own (`meshtest`), its packages made here.
struct Repo {
    dir: PathBuf,
    /// Seconds ahead the database was last dated.
    ahead: std::cell::Cell<u32>,
}

impl Repo {
    fn new(label: &str) -> Repo {
        let sandbox_dir = PathBuf::from(std::env::var("MESH_SANDBOX").expect("MESH_SANDBOX"));
        let dir = sandbox_dir
            .join("tmp")
            .join(format!("upkeep-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("repo")).expect("repo");
        Repo {
            dir,
            ahead: std::cell::Cell::new(0),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join("repo")
    }

    /// Adds (or replaces) package `name` at `version` holding `files` (paths under usr/), with
    /// the sandbox's own packers (tests/sandbox/lib.sh); its database is dated further ahead at
    /// each change, so the next `-Sy` sees it even within the same second (pacman compares
    /// whole seconds).
    fn package(&self, name: &str, version: &str, files: &[(&str, &[u8])]) {
        let build = self.dir.join(format!("build-{name}-{version}"));
        for (path, content) in files {
            let at = build.join(path);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("dir");
            std::fs::write(at, content).expect("file");
        }
        let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sandbox/lib.sh");
        let repo = self.path();
        let file = repo.join(format!("{name}-{version}-any.pkg.tar.zst"));
        self.ahead.set(self.ahead.get() + 2);
        let script = format!(
            "set -e; . {lib}; sb_pkginfo {b} {name} {version}; sb_pack {b} {f}; \
             repo-add -q -R {r}/meshtest.db.tar.gz {f}; touch -d '+{a} seconds' {r}/meshtest.db*",
            a = self.ahead.get(),
            b = build.display(),
            f = file.display(),
            r = repo.display()
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn running_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("osrelease")
        .trim()
        .to_string()
}

fn status_needs(host: &support::Scratch) -> Value {
    let out = host.run(&["--json", "status"]);
    out.json()["needs"].clone()
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_kernel_upgrade_that_takes_the_running_modules_away_needs_a_reboot() {
    let sb = sandbox();
    let repo = Repo::new("kernel");
    let release = running_release();
    let modules = |r: &str| format!("usr/lib/modules/{r}/pkgbase");
    repo.package("linux", "1.0-1", &[(&modules(&release), b"linux\n")]);
    let pacman = PacmanRoot::new("upkeep-kernel", &repo.path());
    let prom = pacman.dir.join("metrics.prom");
    let host = pacman.host(
        &sb,
        "upkeep-kernel",
        &format!(r#""metrics_file": "{}""#, prom.display()),
    );
    let declaration = r#"{"schema": 1, "packages": {"linux": {}}}"#;

    // The running release's modules installed, by a package older than the running kernel.
    let report = host.apply_json(declaration, 0);
    assert_eq!(
        report["needs"]["reboot_required"],
        Value::Null,
        "{report:#}"
    );

    // A kernel upgrade by someone else: the running release's directory is gone.
    repo.package(
        "linux",
        "2.0-1",
        &[(&modules("99.0.0-mesh1-1"), b"linux\n")],
    );
    pacman.pacman("-Syu --noconfirm");
    assert!(!pacman.dir.join("root").join(modules(&release)).exists());
    let report = host.apply_json(declaration, 0);
    let reason = report["needs"]["reboot_required"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains(&format!("the running kernel {release}'s modules are gone"))
            && reason.contains("99.0.0-mesh1-1"),
        "{report:#}"
    );
    assert_eq!(status_needs(&host)["reboot_required"], json!(reason));
    host.run(&["status"])
        .assert_stdout(&format!("needs: a reboot: {reason}\n"));
    let metrics = std::fs::read_to_string(&prom).expect("metrics");
    assert!(
        metrics.contains(&format!(
            "mesh_host_reboot_required{{reason=\"{}\"}} 1",
            reason.replace('"', "\\\"")
        )),
        "{metrics}"
    );

    // The running modules kept (as kernel-modules-hook does) beside a newer kernel package.
    repo.package(
        "linux",
        "100.0-1",
        &[
            (&modules(&release), b"linux\n"),
            (&modules("100.0.0-mesh1-1"), b"linux\n"),
        ],
    );
    pacman.pacman("-Syu --noconfirm");
    let report = host.apply_json(declaration, 0);
    let reason = report["needs"]["reboot_required"]
        .as_str()
        .unwrap_or_default();
    // Only an Arch-like release (`VERSION-REL`) names a package version to compare with.
    if release.contains('-') {
        assert!(
            reason.starts_with("linux 100.0-1 is installed; the running kernel is "),
            "{report:#}"
        );
    } else {
        assert_eq!(reason, "", "{report:#}");
    }
    host.apply_json(r#"{"schema": 1}"#, 0);
}

/// The unit file of a service whose process maps `lib` (python's mmap: a file only held open is
/// not in /proc/PID/maps) and sleeps.
fn mapping_unit(lib: &Path) -> String {
    format!(
        "[Service]\nExecStart=/usr/bin/python3 -c \"import mmap, time; f = open('{}', 'rb'); \
         m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); time.sleep(100000)\"\n",
        lib.display()
    )
}

fn systemctl_show(unit: &str, property: &str) -> String {
    support::sh(&format!(
        "systemctl --user show -p {property} --value -- {unit}"
    ))
    .trim()
    .to_string()
}

/// Waits (up to 10 s) until `unit`'s main process maps `lib`; its pid.
fn wait_mapping(unit: &str, lib: &Path) -> String {
    let want = lib.display().to_string();
    for _ in 0..100 {
        let pid = systemctl_show(unit, "MainPID");
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if pid != "0" && maps.contains(&want) {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{unit} never mapped {want}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_unit_mapping_a_library_an_upgrade_replaced_needs_a_restart() {
    let sb: Sandbox = sandbox();
    let repo = Repo::new("library");
    let lib_path = "usr/lib/mesh-lib/libmesh.so.1";
    repo.package("mesh-lib", "1.0-1", &[(lib_path, &[1u8; 8192])]);
    repo.package(
        "mesh-extra",
        "1.0-1",
        &[("usr/share/mesh-extra/marker", b"x")],
    );
    let pacman = PacmanRoot::new("upkeep-library", &repo.path());
    let host = pacman.host(&sb, "upkeep-library", "");
    let lib = pacman.dir.join("root").join(lib_path);
    let pid = std::process::id();
    let (kept, fresh) = (
        format!("mesh-stale-kept-{pid}.service"),
        format!("mesh-stale-fresh-{pid}.service"),
    );
    let unit = json!(mapping_unit(&lib));
    let declaration = |extra: &str| {
        format!(
            r#"{{"schema": 1, {extra} "packages": {{"mesh-lib": {{}} {more}}},
                "units": {{"{kept}": {{"content": {unit}, "active": true}},
                           "{fresh}": {{"content": {unit}, "active": true,
                                        "restart_when_stale": true}}}}}}"#,
            more = if extra.is_empty() {
                ""
            } else {
                r#", "mesh-extra": {}"#
            }
        )
    };
    let report = host.apply_json(&declaration(""), 0);
    let kept_pid = wait_mapping(&kept, &lib);
    let fresh_pid = wait_mapping(&fresh, &lib);
    let ours = |needs: &Value| -> Vec<String> {
        needs["restart_required"]
            .as_array()
            .unwrap_or_else(|| panic!("{needs:#}"))
            .iter()
            .filter_map(|u| u.as_str())
            .filter(|u| u.contains(&format!("-{pid}.service")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(ours(&report["needs"]), Vec::<String>::new(), "{report:#}");

    // The host's own transaction (a full upgrade with something to install) replaces the
    // library: the unit that asked is restarted in the same run, the other is listed.
    repo.package("mesh-lib", "1.1-1", &[(lib_path, &[2u8; 8192])]);
    let report = host.apply_json(&declaration(r#""packages_upgrade": true,"#), 0);
    assert_eq!(pacman.version("mesh-lib").as_deref(), Some("1.1-1"));
    let restarted: Vec<&Value> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|c| c["kind"] == "units")
        .collect();
    assert_eq!(restarted.len(), 1, "{report:#}");
    assert_eq!(restarted[0]["key"], json!(fresh), "{report:#}");
    assert!(
        restarted[0]["details"]
            .as_array()
            .is_some_and(|d| d.contains(&json!("restart (it maps files an upgrade deleted)"))),
        "{report:#}"
    );
    assert_eq!(ours(&report["needs"]), vec![kept.clone()], "{report:#}");
    assert_eq!(ours(&status_needs(&host)), vec![kept.clone()]);
    host.run(&["status"])
        .assert_stdout(&format!("needs: a restart of {kept}"));
    assert_eq!(
        systemctl_show(&kept, "MainPID"),
        kept_pid,
        "never restarted unasked"
    );
    assert_ne!(wait_mapping(&fresh, &lib), fresh_pid);

    // A person restarts it: the next run finds nothing stale of ours.
    support::sh(&format!("systemctl --user restart -- {kept}"));
    wait_mapping(&kept, &lib);
    let report = host.apply_json(&declaration(r#""packages_upgrade": true,"#), 0);
    assert_eq!(ours(&report["needs"]), Vec::<String>::new(), "{report:#}");
    host.apply_json(r#"{"schema": 1}"#, 0);
}

/// The service's start run looks too, and the control plane receives what it found in the
/// report (`needs`), a field it can act on.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_control_plane_hears_that_the_machine_needs_a_reboot() {
    use support::control_plane::{ControlPlane, CpConfig};
    use support::pki::Pki;
    use support::service::Service;
    let sb = sandbox();
    let repo = Repo::new("service");
    // Only another release's modules: the running kernel's are gone.
    repo.package(
        "linux",
        "2.0-1",
        &[("usr/lib/modules/99.0.0-mesh1-1/pkgbase", b"linux\n")],
    );
    let pacman = PacmanRoot::new("upkeep-service", &repo.path());
    pacman.pacman("-S --noconfirm linux");

    let pki = Pki::new();
    let mut cp = ControlPlane::start(&pki, CpConfig::new("n1", "s3cret"));
    cp.declare(1, r#"{"schema": 1}"#);
    let dir = Path::new(support::SCRATCH_BASE)
        .join(format!("mesh-host-it-upkeep-{}", std::process::id()));
    let control_plane = format!(
        r#""control_plane": {{"address": "{}", "server_name": "localhost", "ca_file": "{}",
             "node": "n1", "secret_file": "{}"}}, "interval_secs": 600, "heartbeat_secs": 1"#,
        cp.addr(),
        dir.join("ca.pem").display(),
        dir.join("secret").display()
    );
    let host = pacman.host(&sb, "upkeep-service", &control_plane);
    std::fs::create_dir_all(&dir).expect("dir");
    pki.write(&dir).expect("pki");
    std::fs::write(dir.join("secret"), "s3cret\n").expect("secret");
    let node = Service::start(host);
    let wait = std::time::Duration::from_secs(20);
    assert!(
        cp.wait_for(
            |reports| reports.iter().any(|r| r["needs"]["reboot_required"]
                .as_str()
                .is_some_and(|why| why.contains("modules are gone"))),
            wait
        ),
        "{:#?}\n{}",
        cp.reports(),
        node.log()
    );
    // Started again, its hello says so before any run: the facts carry the last look.
    let mut node = node;
    node.restart(&[]);
    assert!(
        wait_until(wait, || cp.hellos().len() >= 2),
        "{}",
        node.log()
    );
    let hello = &cp.hellos()[1];
    let why = hello["facts"]["needs"]["reboot_required"].as_str();
    assert!(
        why.is_some_and(|why| why.contains("modules are gone")),
        "{hello:#}"
    );
    cp.stop();
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The next run of the declaration in force, with the debug log it wrote: `reconcile` on the
/// command line; SIGUSR1 to the service (its record once it is in `status`).
fn next_run(driver: &mut Driver, launch: &Launch) -> (Value, String) {
    match driver.way {
        Way::Apply => {
            let mut command = driver.host().command(&["reconcile"]);
            for (key, value) in &launch.env {
                command.env(key, value);
            }
            let out = command.output().expect("mesh-host reconcile");
            let log = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(out.status.success(), "{log}");
            (driver.last_run(), log)
        }
        Way::Service => {
            let before = driver.runs().len();
            let log_before = driver.service().map(|s| s.log().len()).unwrap_or_default();
            driver.service().expect("the service").signal(libc::SIGUSR1);
            assert!(
                wait_until(support::ways::RUN_WAIT, || driver.runs().len() > before),
                "no run after SIGUSR1"
            );
            let log = driver.service().map(|s| s.log()).unwrap_or_default();
            (driver.last_run(), log[log_before..].to_string())
        }
    }
}

/// The look is made only when its answer can have changed: a no-op after a no-op asks pacman
/// nothing (`pacman -v -T`: its paths are kept in the store) and reads no process's maps; yet a
/// library a person upgrades outside the host (`pacman -U`) is seen by the next run, on the
/// command line and through the service (whose no-op runs `status` still lists).
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_look_is_kept_until_a_person_upgrades_a_library_outside_the_host() {
    let sb = sandbox();
    for way in Way::BOTH {
        let label = format!("upkeep-kept-{}", way.name());
        let repo = Repo::new(&label);
        let lib_path = "usr/lib/mesh-lib/libmesh.so.1";
        repo.package("mesh-lib", "1.0-1", &[(lib_path, &[1u8; 8192])]);
        let pacman = PacmanRoot::new(&label, &repo.path());
        let lib = pacman.dir.join("root").join(lib_path);
        let unit = format!("mesh-kept-{}-{}.service", way.name(), std::process::id());
        let declaration = json!({
            "schema": 1,
            "packages": {"mesh-lib": {}},
            "units": {&unit: {"content": mapping_unit(&lib), "active": true}},
        })
        .to_string();
        let launch = Launch {
            env: vec![("RUST_LOG".into(), PathBuf::from("mesh_host=debug"))],
            umask: None,
        };
        let host = pacman.host(&sb, &label, "");
        let mut driver = Driver::start_with(way, host, launch.clone());
        let ran = driver.converge(&declaration);
        assert_eq!(ran.record["outcome"], "converged", "{:#}", ran.record);
        wait_mapping(&unit, &lib);
        let ours = |needs: &Value| -> Vec<String> {
            needs["restart_required"]
                .as_array()
                .unwrap_or_else(|| panic!("{needs:#}"))
                .iter()
                .filter_map(|u| u.as_str())
                .filter(|u| *u == unit)
                .map(str::to_string)
                .collect()
        };
        assert_eq!(ours(&status_needs(driver.host())), Vec::<String>::new());

        // Two no-op runs: the second asks pacman nothing and keeps the last look's answer.
        for _ in 0..2 {
            let (record, _) = next_run(&mut driver, &launch);
            assert_eq!(record["changes"], json!([]), "{record:#}");
        }
        let (record, log) = next_run(&mut driver, &launch);
        assert_eq!(record["outcome"], "converged", "{record:#}");
        assert!(
            !log.contains("-v -T`"),
            "{way:?}: pacman asked again\n{log}"
        );
        assert!(
            log.contains("the reboot and restart look stands"),
            "{way:?}\n{log}"
        );
        assert_eq!(ours(&status_needs(driver.host())), Vec::<String>::new());

        // A person upgrades the library: the next run looks again and says what needs a restart.
        repo.package("mesh-lib", "1.1-1", &[(lib_path, &[2u8; 8192])]);
        let file = repo.path().join("mesh-lib-1.1-1-any.pkg.tar.zst");
        pacman.pacman(&format!("-U --noconfirm {}", file.display()));
        let (record, log) = next_run(&mut driver, &launch);
        assert_eq!(record["changes"], json!([]), "{record:#}");
        assert!(
            log.contains(
                "the reboot and restart look is made again: pacman's local database changed"
            ),
            "{way:?}\n{log}"
        );
        assert_eq!(
            ours(&status_needs(driver.host())),
            vec![unit.clone()],
            "{way:?}"
        );
        // And it stands on the next no-op, from the store.
        let (_, log) = next_run(&mut driver, &launch);
        assert!(log.contains("the reboot and restart look stands"), "{log}");
        assert_eq!(
            ours(&status_needs(driver.host())),
            vec![unit.clone()],
            "{way:?}"
        );

        // Restarted by a person: the process it found stale is gone, and the answer with it.
        support::sh(&format!("systemctl --user restart -- {unit}"));
        wait_mapping(&unit, &lib);
        let (_, log) = next_run(&mut driver, &launch);
        assert!(
            log.contains("a process it found stale is not any more"),
            "{log}"
        );
        assert_eq!(
            ours(&status_needs(driver.host())),
            Vec::<String>::new(),
            "{way:?}"
        );
        driver.converge(r#"{"schema": 1}"#);
    }
}
