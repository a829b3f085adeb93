//! systemd's confirmation of unit changes (`kinds::units::confirm`), against the sandbox's real
//! `systemd --user` manager: with the unit model switched off (a build with
//! `--features test-no-unit-model` and `MESH_TEST_NO_UNIT_MODEL=1`), the confirmation alone puts
//! back one case of each way a unit file or link reaches the host's unit, and the host's unit is
//! as before; an ordinary unit ordered after the host's passes. Each test has its own host unit
//! (`unit_name` in the config), a packaged unit below the admin's directory in priority, as
//! /usr/lib is below /etc.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::{sandbox, systemctl_user as systemctl, Output, Sandbox, Scratch};

/// What the confirmation asks of the host's unit, less the ordering and runtime state: compared
/// whole before and after.
const PROPERTIES: &str = "Id,Names,LoadState,FragmentPath,SourcePath,DropInPaths,UnitFileState,\
    Requires,Requisite,Wants,BindsTo,PartOf,Upholds,RequiredBy,RequisiteOf,WantedBy,BoundBy,\
    UpheldBy,ConsistsOf,Conflicts,ConflictedBy,OnSuccess,OnSuccessOf,OnFailure,OnFailureOf,\
    Triggers,TriggeredBy,PropagatesReloadTo,ReloadPropagatedFrom,PropagatesStopTo,\
    StopPropagatedFrom,JoinsNamespaceOf";

/// The host's unit as systemd has it, each property's words sorted (their order varies).
fn standing(unit: &str) -> Vec<String> {
    let shown = systemctl(&["show", "-p", PROPERTIES, "--", unit]);
    let mut lines: Vec<String> = shown
        .lines()
        .map(|line| {
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            let mut words: Vec<&str> = value.split_whitespace().collect();
            words.sort_unstable();
            format!("{key}={}", words.join(" "))
        })
        .collect();
    lines.sort();
    lines
}

/// The packaged unit directory the sandbox's manager reads below the admin's (`XDG_DATA_HOME`).
fn packaged_dir() -> PathBuf {
    let data = std::env::var("XDG_DATA_HOME").expect("XDG_DATA_HOME: source the sandbox's env");
    PathBuf::from(data).join("systemd/user")
}

/// A test's own host unit, installed as a package would, removed with whatever the test made.
struct HostUnit {
    name: String,
    unit_dir: PathBuf,
    made: Vec<String>,
    /// Drop-in directories under /etc/systemd/user (which the sandbox's manager reads too).
    etc_dirs: Vec<PathBuf>,
}

impl HostUnit {
    fn install(sb: &Sandbox, test: &str) -> HostUnit {
        let name = format!("mesh-it-{}-{test}-host.service", std::process::id());
        let dir = packaged_dir();
        std::fs::create_dir_all(&dir).expect("packaged unit dir");
        std::fs::write(
            dir.join(&name),
            "[Unit]\nDescription=the host, as packaged\n\n[Service]\nExecStart=/bin/sleep infinity\n\n\
             [Install]\nWantedBy=default.target\n",
        )
        .expect("host unit");
        systemctl(&["daemon-reload"]);
        HostUnit {
            name,
            unit_dir: sb.unit_dir.clone(),
            made: Vec::new(),
            etc_dirs: Vec::new(),
        }
    }

    /// A unit name for the test's other units, cleaned up with it.
    fn other(&mut self, suffix: &str) -> String {
        let name = self.name.replace("-host.service", &format!("-{suffix}"));
        self.made.push(name.clone());
        name
    }

    /// The host's activation sibling of `kind` (`socket`, `timer`, `path`).
    #[cfg(feature = "test-no-unit-model")]
    fn sibling(&mut self, kind: &str) -> String {
        let name = self.name.replace(".service", &format!(".{kind}"));
        self.made.push(name.clone());
        name
    }
}

impl Drop for HostUnit {
    fn drop(&mut self) {
        // A test may have enabled the host's unit (its link is in the admin's directory).
        systemctl(&["disable", "--", &self.name]);
        for unit in &self.made {
            // Not `disable --now`: systemctl 262 stops nothing with it unless systemd is PID 1.
            systemctl(&["disable", "--", unit]);
            systemctl(&["stop", "--", unit]);
            let _ = std::fs::remove_file(self.unit_dir.join(unit));
        }
        for made in [
            &self.unit_dir.join(&self.name),
            &packaged_dir().join(&self.name),
        ] {
            let _ = std::fs::remove_file(made);
        }
        for links in [".wants", ".requires"] {
            let _ = std::fs::remove_dir_all(self.unit_dir.join(format!("{}{links}", self.name)));
        }
        for dir in &self.etc_dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        systemctl(&["daemon-reload"]);
    }
}

impl HostUnit {
    /// A drop-in file under /etc/systemd/user (the files kind's reach: only /etc), for the
    /// drop-in directory of `unit`, removed with the test.
    fn etc_drop_in(&mut self, unit: &str) -> String {
        let dir = PathBuf::from(format!("/etc/systemd/user/{unit}.d"));
        let path = dir.join("mesh-test.conf").display().to_string();
        self.etc_dirs.push(dir);
        path
    }
}

/// The scratch host whose own unit is `host`.
fn host_of(sb: &Sandbox, label: &str, host: &HostUnit) -> Scratch {
    sb.host(label, &format!(r#""unit_name": "{}""#, host.name))
}

/// `--json apply` of `units`, with the unit model switched off when `model_off`.
fn apply(host: &Scratch, units: Value, model_off: bool) -> (Output, Value) {
    let file = host.declaration("d.json", &json!({"schema": 1, "units": units}).to_string());
    let mut command = host.command(&["--json", "apply", file.to_str().expect("utf-8 path")]);
    if model_off {
        command.env("MESH_TEST_NO_UNIT_MODEL", "1");
    }
    let out = Output::from(command.output().expect("run mesh-host"));
    let report = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    (out, report)
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn an_ordinary_unit_ordered_after_the_host_passes_confirmation() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "after");
    let unit = host_unit.other("after.service");
    let host = host_of(&sb, "confirm-after", &host_unit);
    let before = standing(&host_unit.name);
    let content = format!(
        "[Unit]\nAfter={h}\n\n[Service]\nExecStart=/bin/sleep infinity\n\n\
         [Install]\nWantedBy=default.target\n",
        h = host_unit.name
    );
    let (out, report) = apply(
        &host,
        json!({&unit: {"content": content, "enabled": true, "active": true}}),
        false,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(report["failures"], json!([]), "{report:#}");
    assert_eq!(systemctl(&["is-active", "--", &unit]), "active");
    assert!(!out.stdout.contains("rolled back"), "{out:?}");
    // Ordering is the only thing the host's unit gained, and it is not asked about.
    assert_eq!(standing(&host_unit.name), before);
}

/// One unit the declaration adds for each way a unit file or link reaches the host's unit `h`:
/// (what it shows, the unit's name, its declared spec).
#[cfg(feature = "test-no-unit-model")]
fn families(host_unit: &mut HostUnit) -> Vec<(&'static str, String, Value)> {
    let h = host_unit.name.clone();
    let service =
        |unit: &str| format!("[Unit]\n{unit}\n\n[Service]\nExecStart=/bin/sleep infinity\n");
    let mut cases = vec![(
        "the host's own name, shadowed in the admin's directory",
        h.clone(),
        json!({"content": service("Description=someone else")}),
    )];
    for directive in [
        "Wants",
        "Requires",
        "Requisite",
        "BindsTo",
        "PartOf",
        "Upholds",
        "Conflicts",
        "OnFailure",
        "OnSuccess",
        "PropagatesReloadTo",
        "PropagatesStopTo",
    ] {
        let name = host_unit.other(&format!("{}.service", directive.to_lowercase()));
        let spec = json!({"content": service(&format!("{directive}={h}"))});
        cases.push(("a [Unit] dependency naming it", name, spec));
    }
    // (`UpheldBy=` in [Install] is not known to systemd 252's systemctl: ignored, harmless.)
    for install in ["Alias", "WantedBy", "RequiredBy", "Also"] {
        let name = host_unit.other(&format!("install-{}.service", install.to_lowercase()));
        let content = format!("{}[Install]\n{install}={h}\n", service("Description=x"));
        let spec = json!({"content": content, "enabled": true});
        cases.push(("an [Install] link made by enable", name, spec));
    }
    for (kind, section, key) in [("timer", "Timer", "Unit"), ("path", "Path", "Unit")] {
        let name = host_unit.other(&format!("trigger.{kind}"));
        let extra = match kind {
            "timer" => "OnActiveSec=1h\n",
            _ => "PathExists=/nonexistent\n",
        };
        let spec = json!({"content": format!("[{section}]\n{key}={h}\n{extra}")});
        cases.push(("a trigger of it", name, spec));
    }
    let socket = host_unit.other("trigger.socket");
    let spec =
        json!({"content": format!("[Socket]\nListenFIFO=/tmp/{socket}.fifo\nService={h}\n")});
    cases.push(("a socket starting it", socket, spec));
    let sibling = host_unit.sibling("timer");
    cases.push((
        "its activation sibling",
        sibling,
        json!({"content": "[Timer]\nOnActiveSec=1h\n"}),
    ));
    cases
}

#[cfg(feature = "test-no-unit-model")]
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_confirmation_alone_puts_back_every_family() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "families");
    let host = host_of(&sb, "confirm-families", &host_unit);
    let cases = families(&mut host_unit);
    let before = standing(&host_unit.name);
    assert!(
        before.contains(&"LoadState=loaded".to_string()),
        "{before:?}"
    );
    for (family, unit, spec) in cases {
        let (out, report) = apply(&host, json!({&unit: spec}), true);
        let context = format!("{family} ({unit}): {out:?}");
        assert_eq!(out.code, 1, "{context}");
        let failure = report["failures"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["key"] == unit.as_str()))
            .unwrap_or_else(|| panic!("{unit} did not fail: {context}"));
        let why = failure["detail"].as_str().unwrap_or_default();
        assert!(
            why.contains("systemd, reloaded, says the host's own units changed")
                && why.contains("systemd confirms the host's units are as before"),
            "{context}"
        );
        assert_eq!(standing(&host_unit.name), before, "{context}");
        assert!(!sb.unit_dir.join(&unit).exists(), "{context}");
        // No link left by enable: no alias of the host's name, nothing in its .wants/.requires.
        let links = ["", ".wants", ".requires"].map(|dir| {
            let path = sb.unit_dir.join(format!("{}{dir}", host_unit.name));
            std::fs::read_dir(&path).map_or(0, Iterator::count)
                + usize::from(dir.is_empty() && std::fs::symlink_metadata(&path).is_ok())
        });
        assert_eq!(links, [0, 0, 0], "{context}");
        assert_eq!(
            systemctl(&["is-active", "--", &unit]),
            "inactive",
            "{context}"
        );
    }
    // The model on (no switch): the same declarations never get that far.
    let (out, _) = apply(
        &host,
        json!({&host_unit.name: {"content": "[Service]\nExecStart=/bin/true\n"}}),
        false,
    );
    assert_eq!(out.code, 2, "{out:?}");
}

#[cfg(feature = "test-no-unit-model")]
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_confirmation_alone_puts_back_drop_ins_the_files_kind_wrote() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "dropins");
    let host = host_of(&sb, "confirm-dropins", &host_unit);
    let h = host_unit.name.clone();
    // An ordinary unit beside them (the units kind writes it, and reloads the manager).
    let plain = host_unit.other("plain.service");
    // The drop-in directory of a prefix of the host's name: every unit of the test (its `-`
    // prefix, as a type-level `service.d/` is for all services, kept to this test's units here).
    let prefix = h.replace("dropins-host.service", "dropins-.service");
    let cases = [
        (
            "a drop-in of the host's unit",
            host_unit.etc_drop_in(&h),
            "[Service]\nExecStartPre=/bin/true\n".to_string(),
        ),
        (
            "a drop-in for every unit with its prefix",
            host_unit.etc_drop_in(&prefix),
            "[Unit]\nDescription=every one\n".to_string(),
        ),
        (
            "a drop-in of another unit wanting it",
            host_unit.etc_drop_in(&plain),
            format!("[Unit]\nWants={h}\n"),
        ),
    ];
    let before = standing(&h);
    for (family, path, content) in cases {
        let declaration = json!({
            "schema": 1,
            "files": {&path: {"content": content}},
            "units": {&plain: {"content": "[Service]\nExecStart=/bin/sleep infinity\n"}},
        });
        let file = host.declaration("d.json", &declaration.to_string());
        let mut command = host.command(&["--json", "apply", file.to_str().expect("utf-8 path")]);
        command.env("MESH_TEST_NO_UNIT_MODEL", "1");
        let out = Output::from(command.output().expect("run mesh-host"));
        let context = format!("{family} ({path}): {out:?}");
        assert_eq!(out.code, 1, "{context}");
        assert!(out.stdout.contains("files put back"), "{context}");
        assert!(!std::path::Path::new(&path).exists(), "{context}");
        assert_eq!(standing(&h), before, "{context}");
    }
    // The unit in sync, only the files kind's drop-in new: still put back, and the run says so.
    let unit = json!({&plain: {"content": "[Service]\nExecStart=/bin/sleep infinity\n"}});
    let (out, _) = apply(&host, unit.clone(), true);
    assert_eq!(out.code, 0, "{out:?}");
    let path = host_unit.etc_drop_in(&h);
    let declaration = json!({
        "schema": 1,
        "files": {&path: {"content": "[Unit]\nDescription=overridden\n"}},
        "units": unit,
    });
    let file = host.declaration("d.json", &declaration.to_string());
    let mut command = host.command(&["apply", file.to_str().expect("utf-8 path")]);
    command.env("MESH_TEST_NO_UNIT_MODEL", "1");
    let out = Output::from(command.output().expect("run mesh-host"));
    out.assert_stdout(&format!(
        "note: rolled back, as systemd said the host's own units changed: {path}"
    ));
    assert!(!std::path::Path::new(&path).exists(), "{out:?}");
    assert_eq!(standing(&h), before, "{out:?}");
    // The drop-in alone was refused: its own resource fails, and the run with it.
    assert_eq!(out.code, 1, "{out:?}");
    assert_files_refused(&host, &file, &path);
}

/// Applies `declaration` (the model off) and asserts that `path`, a file the files kind writes
/// and systemd's confirmation puts back, fails by name with what systemd said (exit 1), is not
/// among the run's changes, is gone, and is owned by the ledger but not as applied (so the next
/// run tries it again rather than taking it as in sync).
#[cfg(feature = "test-no-unit-model")]
fn assert_files_refused(host: &Scratch, declaration: &std::path::Path, path: &str) {
    let mut command = host.command(&["--json", "apply", declaration.to_str().expect("utf-8")]);
    command.env("MESH_TEST_NO_UNIT_MODEL", "1");
    let out = Output::from(command.output().expect("run mesh-host"));
    let report: Value = serde_json::from_str(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(out.code, 1, "{out:?}");
    let failure = (report["failures"].as_array().into_iter().flatten())
        .find(|f| f["key"] == path && f["kind"] == "files")
        .unwrap_or_else(|| panic!("{path} did not fail: {report:#}"));
    let why = failure["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("systemd, reloaded, says the host's own units changed")
            && why.contains("files put back"),
        "{report:#}"
    );
    assert!(
        !out.stdout.contains(&format!(r#""key":"{path}","symbol""#)),
        "{report:#}"
    );
    assert!(!std::path::Path::new(path).exists(), "{out:?}");
    let ledger: Value = serde_json::from_str(
        &std::fs::read_to_string(host.state().join("ledger.json")).expect("ledger"),
    )
    .expect("ledger json");
    let entry = ["/files", "/resources/files"]
        .iter()
        .find_map(|section| ledger.pointer(section).and_then(|s| s.get(path)))
        .unwrap_or_else(|| panic!("{path} not owned: {ledger:#}"));
    assert_eq!(entry["applied"], Value::Null, "{ledger:#}");
}

/// Issue 25: a drop-in the files kind writes is reloaded and confirmed with no unit declared
/// or owned at all (the units kind used to return before it had a unit to work on).
#[cfg(feature = "test-no-unit-model")]
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_drop_in_of_the_host_with_no_unit_declared_is_put_back_and_fails() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "nounits");
    let host = host_of(&sb, "confirm-nounits", &host_unit);
    let h = host_unit.name.clone();
    let before = standing(&h);
    let path = host_unit.etc_drop_in(&h);
    let declaration = json!({
        "schema": 1,
        "files": {&path: {"content": "[Service]\nExecStartPre=/bin/true\n"}},
    });
    let file = host.declaration("d.json", &declaration.to_string());
    assert_files_refused(&host, &file, &path);
    assert_eq!(standing(&h), before);
}

/// Issue 25: rolling back never disables the host. A unit whose `[Install]` names the host in
/// `Also=` (enabled before the run, so `enable` makes none of its links) and links itself into
/// the host's `.wants/` is refused; only the link `enable` made is taken back (`disable` would
/// have followed `Also=` and taken the host's own links too).
#[cfg(feature = "test-no-unit-model")]
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn the_rollback_takes_back_only_the_links_enable_made() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "also");
    let h = host_unit.name.clone();
    let unit = host_unit.other("also.service");
    let host = host_of(&sb, "confirm-also", &host_unit);
    systemctl(&["enable", "--", &h]);
    systemctl(&["daemon-reload"]);
    let links = |dir: &std::path::Path| -> Vec<(PathBuf, PathBuf)> {
        let mut found = Vec::new();
        let mut dirs = vec![dir.to_path_buf()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                match std::fs::read_link(&path) {
                    Ok(target) => found.push((path, target)),
                    Err(_) if path.is_dir() => dirs.push(path),
                    Err(_) => {}
                }
            }
        }
        found.sort();
        found
    };
    let links_before = links(&sb.unit_dir);
    assert!(
        links_before.iter().any(|(link, _)| link.ends_with(&h)),
        "{links_before:?}"
    );
    assert_eq!(systemctl(&["is-enabled", "--", &h]), "enabled");
    let before = standing(&h);
    let content =
        format!("[Service]\nExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy={h}\nAlso={h}\n");
    // Enabled in the same `systemctl enable`, a unit whose alias is taken fails it part way,
    // after the links of the unit before it were made: those are taken back too.
    let taken = host_unit.other("taken.service");
    std::fs::write(sb.unit_dir.join(&taken), "[Service]\nExecStart=/bin/true\n").expect("taken");
    let conflict = host_unit.other("conflict.service");
    let conflicting = format!("[Service]\nExecStart=/bin/true\n\n[Install]\nAlias={taken}\n");
    let (out, report) = apply(
        &host,
        json!({
            &unit: {"content": content, "enabled": true},
            &conflict: {"content": conflicting, "enabled": true},
        }),
        true,
    );
    let failed = |key: &str| {
        (report["failures"].as_array().into_iter().flatten())
            .find(|f| f["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} did not fail: {out:?}"))
    };
    assert!(
        failed(&conflict)["detail"]
            .as_str()
            .is_some_and(|d| d.contains("already exists")),
        "{out:?}"
    );
    let failure = failed(&unit);
    let why = failure["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("systemd confirms the host's units are as before"),
        "{out:?}"
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(systemctl(&["is-enabled", "--", &h]), "enabled", "{out:?}");
    assert_eq!(links(&sb.unit_dir), links_before, "{out:?}");
    assert_eq!(standing(&h), before, "{out:?}");
}

/// Issue 25: an ordinary drop-in the files kind writes, with no unit declared, is read by the
/// manager in the same run (one daemon-reload): a loaded unit lists it among its drop-ins.
#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_drop_in_with_no_unit_declared_is_reloaded() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "reload");
    let unit = host_unit.other("reload.service");
    let host = host_of(&sb, "confirm-reload", &host_unit);
    std::fs::write(
        sb.unit_dir.join(&unit),
        "[Service]\nExecStart=/bin/sleep infinity\n",
    )
    .expect("unit file");
    systemctl(&["daemon-reload"]);
    systemctl(&["start", "--", &unit]);
    assert_eq!(systemctl(&["is-active", "--", &unit]), "active");
    let path = host_unit.etc_drop_in(&unit);
    let declaration = json!({
        "schema": 1,
        "files": {&path: {"content": "[Unit]\nDescription=from a drop-in\n"}},
    });
    let file = host.declaration("d.json", &declaration.to_string());
    let out = host.apply(&file, 0);
    let drop_ins = systemctl(&["show", "-p", "DropInPaths", "--", &unit]);
    assert!(drop_ins.contains(&path), "{drop_ins}: {out:?}");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_unit_file_is_not_written_when_systemd_cannot_be_asked_first() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "unasked");
    let unit = host_unit.other("unasked.service");
    let host = host_of(&sb, "confirm-unasked", &host_unit);
    // systemctl as configured, except that the confirmation's `show` fails.
    let script = r#"case "$*" in *FragmentPath*) echo "no bus" >&2; exit 1;; esac; exec systemctl --user "$@""#;
    host.set_tool("systemctl", &["sh", "-c", script, "sh"]);
    let (out, report) = apply(
        &host,
        json!({&unit: {"content": "[Service]\nExecStart=/bin/sleep infinity\n", "active": true}}),
        false,
    );
    assert_eq!(out.code, 1, "{out:?}");
    let failure = &report["failures"][0];
    assert_eq!(failure["key"], unit.as_str(), "{report:#}");
    let why = failure["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("could not be asked before") && why.contains("no bus"),
        "{report:#}"
    );
    assert!(!sb.unit_dir.join(&unit).exists(), "{report:#}");
    assert_eq!(systemctl(&["is-active", "--", &unit]), "inactive");
}

#[test]
#[ignore = "needs the sandbox: run ./tests/run.sh as root"]
fn a_unit_file_is_put_back_when_the_reload_that_would_confirm_it_fails() {
    let sb = sandbox();
    let mut host_unit = HostUnit::install(&sb, "noreload");
    let unit = host_unit.other("noreload.service");
    let host = host_of(&sb, "confirm-noreload", &host_unit);
    // The first daemon-reload fails; the one after the rollback succeeds.
    let marker = host.state().with_extension("reload-failed");
    let script = format!(
        r#"if [ "$1" = daemon-reload ] && [ ! -e {m} ]; then touch {m}; echo "timed out" >&2; exit 1; fi; exec systemctl --user "$@""#,
        m = marker.display()
    );
    host.set_tool("systemctl", &["sh", "-c", &script, "sh"]);
    let (out, report) = apply(
        &host,
        json!({&unit: {"content": "[Service]\nExecStart=/bin/sleep infinity\n", "active": true}}),
        false,
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(marker.exists(), "{out:?}");
    let why = report["failures"][0]["detail"].as_str().unwrap_or_default();
    assert!(why.contains("timed out"), "{report:#}");
    assert!(!sb.unit_dir.join(&unit).exists(), "{report:#}");
    assert_eq!(systemctl(&["is-active", "--", &unit]), "inactive");
    let _ = std::fs::remove_file(marker);
}
