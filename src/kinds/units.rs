//! systemd units. One `systemctl show` and one `is-enabled` (of the loaded ones) observe them all
//! (asked again by halves when one name fails the batch; masked, aliased, symlinked or oversized
//! unit files fail or are reported only for their own unit, never followed);
//! unit files the declaration carries are written atomically to the unit directory with one
//! `daemon-reload` when any changed; enable, disable, start, stop, restart and reload each go in
//! one batched call. A unit the host found enabled or running gets that state back when it is
//! released; a unit file the host wrote is removed. Under `--root`, only enable/disable (offline)
//! and unit files are done; the rest is deferred.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{
    batch_then_each, check_argument, query_by_halves, Action, Change, Env, Kind, LedgerAfter,
    Observations, Outcome, RunContext, Step,
};
use crate::config::{Identity, Limits};
use crate::declaration::{Declaration, Fields};
use crate::exec::CommandError;
use crate::fsutil::{self, Dir, FileType, Found};
use crate::store::{Entry, Ledger, Origin};
use crate::unitfile::UnitName;

pub struct Units;

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub present: bool,
    /// Unmanaged when `None`.
    pub enabled: Option<bool>,
    pub active: Option<bool>,
    /// The unit file, written to the unit directory; `None` for units a package ships.
    pub content: Option<String>,
    pub restart_on: Vec<String>,
    pub reload_on: Vec<String>,
    /// The package that ships the unit: if it fails to install, the unit is skipped.
    pub package: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    /// `LoadState`: `loaded`, `not-found`, ...; empty offline.
    pub load: String,
    /// `ActiveState`: `active`, `inactive`, `failed`, ...; empty offline.
    pub active: String,
    /// `UnitFileState` (or `is-enabled` offline): `enabled`, `disabled`, `static`, ...
    pub enablement: String,
    /// The unit's file in the unit directory, if there is one and it is a regular file.
    pub file: Option<Vec<u8>>,
    /// Where the unit's name in the unit directory links to, when it is a symlink (a masked unit
    /// links to /dev/null, an alias to its unit): reported, never followed or replaced.
    pub link: Option<String>,
}

impl Observed {
    fn running(&self) -> bool {
        matches!(self.active.as_str(), "active" | "activating" | "reloading")
    }
    fn masked(&self) -> bool {
        self.load == "masked" || self.enablement.starts_with("masked")
    }
    fn enabled(&self) -> bool {
        matches!(self.enablement.as_str(), "enabled" | "enabled-runtime")
    }
}

/// What the unit was before the host adopted it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Original {
    enabled: bool,
    active: bool,
    /// Backup name of its unit file in the unit directory, if the host overwrote one.
    file_backup: Option<String>,
}

#[derive(Debug, Default, PartialEq)]
pub struct Op {
    pub write_file: Option<Vec<u8>>,
    pub restore_file: Option<String>,
    pub remove_file: bool,
    pub enable: bool,
    pub disable: bool,
    pub start: bool,
    pub stop: bool,
    pub restart: bool,
    pub reload: bool,
}

impl Kind for Units {
    const NAME: &'static str = "units";
    type Spec = Spec;
    type Observed = Observed;
    type Op = Op;

    fn check_key(key: &str) -> Result<(), String> {
        check_unit_name(key)
    }

    fn parse(key: &str, fields: &mut Fields, limits: &Limits) -> Option<Spec> {
        let present = fields.present();
        let enabled = fields.bool("enabled");
        let active = fields.bool("active");
        // A template is a file to ship; systemd enables and starts its instances, never it.
        if UnitName::parse(key).is_ok_and(|name| name.is_template()) {
            for (name, given) in [("enabled", enabled.is_some()), ("active", active.is_some())] {
                if given {
                    fields.problem(
                        name,
                        format!("{key} is a template: declare its instances to enable or start them (such as {})", key.replacen("@.", "@NAME.", 1)),
                    );
                }
            }
        }
        let content = fields.str("content").map(str::to_string);
        // The same bound as files: what the host writes it must be able to read back.
        if let Some(c) = content
            .as_ref()
            .filter(|c| c.len() as u64 > limits.max_file_bytes)
        {
            fields.problem(
                "content",
                format!(
                    "is {} bytes, more than the limit of {} bytes",
                    c.len(),
                    limits.max_file_bytes
                ),
            );
        }
        let mut paths = |name: &'static str| -> Vec<String> {
            let list = fields.strings(name).unwrap_or_default();
            let mut out = Vec::new();
            for (i, path) in list.into_iter().enumerate() {
                match super::files::check_path(path) {
                    Ok(()) => out.push(path.to_string()),
                    Err(e) => {
                        let at = format!("{}[{i}]", fields.at(name));
                        fields.problems.push(at, e);
                    }
                }
            }
            out
        };
        let restart_on = paths("restart_on");
        let reload_on = paths("reload_on");
        let package = fields.str("package").map(str::to_string);
        if !present {
            for (name, given) in [
                ("enabled", enabled.is_some()),
                ("active", active.is_some()),
                ("content", content.is_some()),
            ] {
                if given {
                    fields.problem(name, "makes no sense for a unit declared absent (it is stopped, disabled and its file removed)");
                }
            }
        }
        Some(Spec {
            present,
            enabled,
            active,
            content,
            restart_on,
            reload_on,
            package,
        })
    }

    fn refuse_self(key: &str, spec: &Spec, identity: &Identity) -> Option<String> {
        crate::selfref::refuse_unit(key, spec.content.as_deref(), identity)
    }

    fn desired(declaration: &Declaration) -> &BTreeMap<String, Spec> {
        &declaration.units
    }

    fn digest(spec: &Spec) -> String {
        digest(spec)
    }

    fn observe(
        env: &Env,
        _cx: &RunContext,
        keys: &[String],
    ) -> Result<Observations<Observed>, String> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        // A template (`foo@.service`) is only its file: systemctl is asked about its instances,
        // never about it (`show` refuses the name and would fail the batch).
        let names: Vec<&str> = keys
            .iter()
            .map(String::as_str)
            .filter(|name| !UnitName::parse(name).is_ok_and(|n| n.is_template()))
            .collect();
        let queried: Vec<Result<Observed, String>> = if env.offline {
            names
                .iter()
                .map(|name| {
                    let args = offline_args(env, "is-enabled");
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let enablement = env
                        .runner
                        .query(&env.config.systemctl, &args, &[name])
                        .map(|o| o.stdout_text().trim().to_string())
                        .unwrap_or_default();
                    Ok(Observed {
                        enablement,
                        ..Observed::default()
                    })
                })
                .collect()
        } else {
            // One name systemctl cannot take fails the whole `show`: asked again by halves, it
            // fails only that unit.
            let blocks = query_by_halves(env.runner, "`systemctl show`", &names, |batch| {
                env.runner
                    .run(
                        &env.config.systemctl,
                        &["show", "-p", "Id,LoadState,ActiveState,UnitFileState"],
                        batch,
                    )
                    .map(|output| parse_show(&output.stdout_text()))
            });
            let loaded: Vec<&str> = names
                .iter()
                .zip(&blocks)
                .filter(|(_, b)| {
                    b.as_ref()
                        .is_ok_and(|b| b.get("LoadState").map(String::as_str) == Some("loaded"))
                })
                .map(|(name, _)| *name)
                .collect();
            let mut enablement = query_enablement(env, &loaded);
            names
                .iter()
                .zip(blocks)
                .map(|(name, block)| {
                    block.map(|b| Observed {
                        load: b.get("LoadState").cloned().unwrap_or_default(),
                        active: b.get("ActiveState").cloned().unwrap_or_default(),
                        enablement: enablement
                            .remove(*name)
                            .or_else(|| b.get("UnitFileState").cloned())
                            .unwrap_or_default(),
                        ..Observed::default()
                    })
                })
                .collect()
        };
        let mut queried: BTreeMap<&str, Result<Observed, String>> =
            names.into_iter().zip(queried).collect();
        let states: Vec<Result<Observed, String>> = keys
            .iter()
            .map(|key| {
                queried
                    .remove(key.as_str())
                    .unwrap_or_else(|| Ok(Observed::default()))
            })
            .collect();
        let dir = open_unit_dir(env, false)?;
        let max = env.config.limits.max_file_bytes;
        Ok(keys
            .iter()
            .zip(states)
            .map(|(name, state)| {
                let observed = state.and_then(|mut obs| {
                    match read_unit_file(env, dir.as_ref(), name, max)? {
                        Found::Nothing => {}
                        Found::File(_, bytes) => obs.file = Some(bytes),
                        Found::Link(target) => obs.link = Some(target.display().to_string()),
                    }
                    Ok(obs)
                });
                (name.clone(), observed)
            })
            .collect())
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry>,
    ) -> Step<Op> {
        let Some(obs) = observed else {
            return Step::Fail(format!("unit {key} was not observed"));
        };
        match desired {
            Some(spec) if spec.present => plan_present(cx, key, spec, obs, owned),
            Some(_) => plan_absent(key, obs, owned),
            None => match owned {
                Some(entry) => plan_release(key, obs, entry),
                None => Step::InSync,
            },
        }
    }

    fn apply(
        env: &Env,
        _cx: &RunContext,
        _ledger: &mut Ledger,
        changes: &[Change<Op>],
    ) -> Vec<Outcome> {
        let mut errors: BTreeMap<&str, String> = BTreeMap::new();
        let mut deferred: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        // Checked before each unit file and each verb's call: once the host is stopping, what is
        // left waits for the next run, which observes where it stopped.
        let mut stopped: BTreeSet<&str> = BTreeSet::new();
        // Stop and disable while the unit file still exists, then files, one reload, then the rest.
        run_verb(
            env,
            changes,
            "stop",
            |op| op.stop,
            &mut errors,
            &mut deferred,
            &mut stopped,
        );
        run_verb(
            env,
            changes,
            "disable",
            |op| op.disable,
            &mut errors,
            &mut deferred,
            &mut stopped,
        );
        let dir = unit_dir(env);
        let mut files_changed = false;
        for change in changes {
            if errors.contains_key(change.key.as_str()) || stopped.contains(change.key.as_str()) {
                continue;
            }
            if (env.interrupted)() {
                stopped.insert(&change.key);
                continue;
            }
            match apply_file(env, &dir, &change.key, &change.op) {
                Ok(changed) => files_changed |= changed,
                Err(e) => {
                    errors.insert(&change.key, e);
                }
            }
        }
        // Not skipped when stopping: a unit file written is only whole once systemd has read it
        // (the next run would find the file as declared and reload nothing).
        if files_changed && !env.offline {
            if let Err(e) = env
                .runner
                .run(&env.config.systemctl, &["daemon-reload"], &[])
            {
                for change in changes {
                    errors.entry(&change.key).or_insert_with(|| e.to_string());
                }
            }
        }
        run_verb(
            env,
            changes,
            "enable",
            |op| op.enable,
            &mut errors,
            &mut deferred,
            &mut stopped,
        );
        run_verb(
            env,
            changes,
            "start",
            |op| op.start,
            &mut errors,
            &mut deferred,
            &mut stopped,
        );
        run_verb(
            env,
            changes,
            "restart",
            |op| op.restart,
            &mut errors,
            &mut deferred,
            &mut stopped,
        );
        run_verb(
            env,
            changes,
            "reload",
            |op| op.reload,
            &mut errors,
            &mut deferred,
            &mut stopped,
        );
        changes
            .iter()
            .map(
                |c| match (errors.get(c.key.as_str()), deferred.get(c.key.as_str())) {
                    (Some(e), _) => Outcome::Failed(e.clone()),
                    _ if stopped.contains(c.key.as_str()) => Outcome::Stopped,
                    (None, Some(verbs)) => {
                        Outcome::Deferred(format!("{} needs the running system", verbs.join(", ")))
                    }
                    (None, None) => Outcome::Done,
                },
            )
            .collect()
    }
}

/// Runs one systemctl verb over every unit whose op asks for it and has not failed yet; offline,
/// verbs that need the running system are deferred; once the host is stopping, none is run.
fn run_verb<'a>(
    env: &Env,
    changes: &'a [Change<Op>],
    verb: &'static str,
    pick: fn(&Op) -> bool,
    errors: &mut BTreeMap<&'a str, String>,
    deferred: &mut BTreeMap<&'a str, Vec<&'static str>>,
    stopped: &mut BTreeSet<&'a str>,
) {
    let names: Vec<&str> = changes
        .iter()
        .filter(|c| pick(&c.op) && !errors.contains_key(c.key.as_str()))
        .map(|c| c.key.as_str())
        .collect();
    if !names.is_empty() && (env.interrupted)() {
        stopped.extend(names);
        return;
    }
    if env.offline && !matches!(verb, "enable" | "disable") {
        for name in names {
            deferred.entry(name).or_default().push(verb);
        }
        return;
    }
    let args = if env.offline {
        offline_args(env, verb)
    } else {
        vec![verb.to_string()]
    };
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let results = batch_then_each(env.runner, &names, |batch| {
        env.runner
            .run(&env.config.systemctl, &args, batch)
            .map(drop)
    });
    // Cut short by the host stopping: the rest were not attempted.
    stopped.extend(names.iter().skip(results.len()));
    for (name, result) in names.iter().zip(results) {
        if let Err(e) = result {
            errors.insert(name, e);
        }
    }
}

pub fn digest(spec: &Spec) -> String {
    let text = format!(
        "{}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        spec.present,
        spec.enabled,
        spec.active,
        spec.content
            .as_deref()
            .map(|c| crate::codec::sha256_hex(c.as_bytes())),
        spec.restart_on,
        spec.reload_on
    );
    crate::codec::sha256_hex(text.as_bytes())
}

/// `is-enabled` of loaded units, by name. `show`'s `UnitFileState` is the manager's cached view
/// and can lag an enable or disable (systemd 252 still said `enabled` after `systemctl disable`);
/// `is-enabled` reads the unit files. It stops at the first unit without a file, so when the
/// batch answers short it is asked again by halves; a unit whose file is gone gets `""`.
fn query_enablement(env: &Env, names: &[&str]) -> BTreeMap<String, String> {
    let states = query_by_halves(env.runner, "`systemctl is-enabled`", names, |batch| {
        let output = env
            .runner
            .query(&env.config.systemctl, &["is-enabled"], batch)?;
        let states: Vec<String> = output.stdout_text().lines().map(str::to_string).collect();
        Ok::<_, CommandError>(states)
    });
    names
        .iter()
        .zip(states)
        .map(|(name, state)| (name.to_string(), state.unwrap_or_default()))
        .collect()
}

/// systemd's rules: a name prefix of letters, digits and `:-_.\@`, a known suffix, at most 255 bytes.
pub fn check_unit_name(name: &str) -> Result<(), String> {
    check_argument("unit", name)?;
    UnitName::parse(name).map(|_| ())
}

/// Property blocks of `systemctl show`, one per unit, in argument order.
pub fn parse_show(stdout: &str) -> Vec<BTreeMap<String, String>> {
    let mut blocks = Vec::new();
    let mut current = BTreeMap::new();
    for line in stdout.lines() {
        if line.is_empty() {
            if !current.is_empty() {
                blocks.push(std::mem::take(&mut current));
            }
        } else if let Some((k, v)) = line.split_once('=') {
            // A unit's properties never repeat: one seen again starts the next unit, so the
            // outputs of a batch split over several commands join without a blank line.
            if current.contains_key(k) {
                blocks.push(std::mem::take(&mut current));
            }
            current.insert(k.to_string(), v.to_string());
        }
    }
    if !current.is_empty() {
        blocks.push(current);
    }
    blocks
}

/// `systemctl --root=DIR VERB`: the offline form, which only knows unit-file verbs.
fn offline_args(env: &Env, verb: &str) -> Vec<String> {
    vec![format!("--root={}", env.root.display()), verb.to_string()]
}

/// The unit directory, opened from the target root one component at a time, never through a
/// symlink (under `--root`, a link in the mounted disk must not lead onto the rescue system).
/// `None` when it does not exist and `create` is not asked.
fn open_unit_dir(env: &Env, create: bool) -> Result<Option<Dir>, String> {
    fsutil::open_dir_below(env.root, &env.config.unit_dir, create)
        .map_err(|e| format!("unit directory {}: {e}", unit_dir(env).display()))
}

/// The unit directory as seen from the target root, for messages.
fn unit_dir(env: &Env) -> PathBuf {
    let dir = &env.config.unit_dir;
    env.root.join(dir.strip_prefix("/").unwrap_or(dir))
}

/// Reads the unit's file, never following a symlink: a link is reported with its target. A file
/// over the limit or unreadable fails only this unit.
fn read_unit_file(env: &Env, dir: Option<&Dir>, name: &str, max: u64) -> Result<Found, String> {
    let Some(d) = dir else {
        return Ok(Found::Nothing);
    };
    d.read_entry(OsStr::new(name), max)
        .map_err(|e| format!("unit file {}: {e}", unit_dir(env).join(name).display()))
}

/// Writes, restores or removes the unit's file; `Ok(true)` when the file changed.
fn apply_file(env: &Env, dir: &Path, name: &str, op: &Op) -> Result<bool, String> {
    if op.write_file.is_none() && op.restore_file.is_none() && !op.remove_file {
        return Ok(false);
    }
    // Only a removal finds the directory missing (anything else creates it): nothing to remove.
    let Some(d) = open_unit_dir(env, !op.remove_file)? else {
        return Ok(false);
    };
    let at = |e: std::io::Error| format!("{}: {e}", dir.join(name).display());
    if let Some(bytes) = &op.write_file {
        d.write_atomic(OsStr::new(name), bytes, 0o644, None)
            .map_err(at)?;
    } else if let Some(backup) = &op.restore_file {
        let store = env
            .store
            .ok_or("no store to restore the original unit file from")?;
        let bytes = store.read_backup(backup).map_err(|e| e.to_string())?;
        d.write_atomic(OsStr::new(name), &bytes, 0o644, None)
            .map_err(at)?;
    } else {
        match d.stat(OsStr::new(name)).map_err(at)? {
            Some(st) if st.file_type == FileType::Symlink => {
                return Err(format!(
                    "{} became a symlink; mesh-host never removes what it did not write",
                    dir.join(name).display()
                ))
            }
            Some(_) => {
                d.remove(OsStr::new(name)).map_err(at)?;
            }
            None => return Ok(false),
        }
    }
    Ok(true)
}

fn plan_present(
    cx: &RunContext,
    key: &str,
    spec: &Spec,
    obs: &Observed,
    owned: Option<&Entry>,
) -> Step<Op> {
    if let Some(package) = spec
        .package
        .as_ref()
        .filter(|p| cx.failed_packages.contains(*p))
    {
        return Step::Skip(format!(
            "its package {package} failed to install in this run"
        ));
    }
    if let (Some(_), Some(target)) = (&spec.content, &obs.link) {
        return Step::Fail(format!(
            "its unit file is a symlink to {target}; mesh-host never writes through or replaces a symlink"
        ));
    }
    if obs.masked() && (spec.active == Some(true) || spec.enabled == Some(true)) {
        return Step::Fail(format!(
            "unit {key} is masked; it cannot be enabled or started until a person unmasks it \
             (systemctl unmask {key})"
        ));
    }
    let mut op = Op::default();
    let mut details = Vec::new();
    let file_changed = match &spec.content {
        Some(content) => obs.file.as_deref() != Some(content.as_bytes()),
        None => false,
    };
    if file_changed {
        op.write_file = spec.content.as_ref().map(|c| c.as_bytes().to_vec());
        details.push(
            if obs.file.is_some() {
                "unit file changed"
            } else {
                "unit file written"
            }
            .to_string(),
        );
    }
    if !cx.offline && spec.content.is_none() && obs.load != "loaded" && !obs.masked() {
        return Step::Fail(format!(
            "unit {key} is not loaded (LoadState={}) and the declaration gives no content",
            obs.load
        ));
    }
    match spec.enabled {
        Some(true)
            if !obs.enabled()
                && !matches!(
                    obs.enablement.as_str(),
                    "static" | "alias" | "indirect" | "generated"
                ) =>
        {
            op.enable = true;
            details.push("enable".into());
        }
        Some(false) if obs.enabled() => {
            op.disable = true;
            details.push("disable".into());
        }
        _ => {}
    }
    let running = obs.running();
    let want_running = spec.active.unwrap_or(running);
    let touched: Vec<&String> = spec
        .restart_on
        .iter()
        .filter(|p| cx.changed_files.contains(*p))
        .collect();
    let reload_touched: Vec<&String> = spec
        .reload_on
        .iter()
        .filter(|p| cx.changed_files.contains(*p))
        .collect();
    if !cx.offline {
        if want_running && !running {
            op.start = true;
            details.push("start".into());
        } else if !want_running && running {
            op.stop = true;
            details.push("stop".into());
        } else if running && (file_changed || !touched.is_empty()) {
            op.restart = true;
            let why = if file_changed {
                "its unit file changed".to_string()
            } else {
                let list: Vec<&str> = touched.iter().map(|s| s.as_str()).collect();
                format!("{} changed", list.join(", "))
            };
            details.push(format!("restart ({why})"));
        } else if running && !reload_touched.is_empty() {
            op.reload = true;
            let list: Vec<&str> = reload_touched.iter().map(|s| s.as_str()).collect();
            details.push(format!("reload ({} changed)", list.join(", ")));
        }
    } else if spec.active == Some(true) {
        // A mounted root runs nothing: the start is planned so that it is reported as deferred.
        op.start = true;
        details.push("start".into());
    }
    let (intent, backup) = match owned {
        Some(_) => (None, None),
        None if obs.file.is_none() && spec.content.is_some() => {
            (Some(Entry::new(Origin::Created, Value::Null)), None)
        }
        None => {
            let file_backup =
                (file_changed && obs.file.is_some()).then(|| super::backup_key(Units::NAME, key));
            let original = Original {
                enabled: obs.enabled(),
                active: running,
                file_backup: file_backup.clone(),
            };
            let backup = file_backup.and(obs.file.clone());
            (Some(Entry::new(Origin::Adopted, json!(original))), backup)
        }
    };
    if details.is_empty() {
        return match intent {
            Some(intent) => Step::Adopt { intent, backup },
            None => Step::InSync,
        };
    }
    Step::Change(Change {
        key: key.to_string(),
        action: if owned.is_none() && obs.file.is_none() && op.write_file.is_some() {
            Action::Create
        } else {
            Action::Update
        },
        details,
        intent,
        backup,
        after: LedgerAfter::Applied(digest(spec)),
        op,
    })
}

fn plan_absent(key: &str, obs: &Observed, owned: Option<&Entry>) -> Step<Op> {
    let op = Op {
        stop: obs.running(),
        disable: obs.enabled(),
        remove_file: obs.file.is_some(),
        ..Op::default()
    };
    remove_step(key, op, owned.is_some(), "declared absent")
}

fn plan_release(key: &str, obs: &Observed, entry: &Entry) -> Step<Op> {
    if entry.origin == Origin::Created {
        let op = Op {
            stop: obs.running(),
            disable: obs.enabled(),
            remove_file: obs.file.is_some(),
            ..Op::default()
        };
        return remove_step(key, op, true, "released; mesh-host wrote it");
    }
    let original: Original = match serde_json::from_value(entry.original.clone()) {
        Ok(o) => o,
        Err(e) => {
            return Step::Fail(format!(
                "the ledger's record of the original is unreadable: {e}"
            ))
        }
    };
    let op = Op {
        enable: original.enabled && !obs.enabled(),
        disable: !original.enabled && obs.enabled(),
        start: original.active && !obs.running(),
        stop: !original.active && obs.running(),
        restore_file: original.file_backup.clone(),
        ..Op::default()
    };
    let mut details = vec!["released; original state restored".to_string()];
    details.extend(describe(&op));
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Update,
        details,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

fn remove_step(key: &str, op: Op, owned: bool, why: &str) -> Step<Op> {
    if op == Op::default() && !owned {
        return Step::InSync;
    }
    let mut details = vec![why.to_string()];
    details.extend(describe(&op));
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Remove,
        details,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

fn describe(op: &Op) -> Vec<String> {
    [
        (op.stop, "stop"),
        (op.disable, "disable"),
        (op.remove_file, "remove unit file"),
        (op.restore_file.is_some(), "restore unit file"),
        (op.enable, "enable"),
        (op.start, "start"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, s)| s.to_string())
    .collect()
}

/// Files named by `restart_on`/`reload_on` must be files this declaration manages.
pub fn watched_files(spec: &Spec) -> BTreeSet<&str> {
    spec.restart_on
        .iter()
        .chain(&spec.reload_on)
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declaration::tests::{check_refused, parse_with_defaults, problems};

    #[test]
    fn unit_names() {
        for (name, message) in [
            ("nginx", "no known suffix"),
            ("-x.service", "starts with '-'"),
            (".service", "nothing before its suffix"),
            ("a b.service", "whitespace"),
            ("a/b.service", "contains '/'"),
            ("@b.service", "starts with '@'"),
            ("x.scope", "no known suffix"),
            ("x.service.d", "no known suffix"),
        ] {
            let json = format!(
                r#"{{"schema": 1, "units": {{{}: {{}}}}}}"#,
                Value::String(name.into())
            );
            check_refused(&json, &[message]);
        }
        assert!(problems(r#"{"schema": 1, "units": {"getty@tty1.service": {}, "backup.timer": {"enabled": true}, "a\\x2db.mount": {}}}"#).is_empty());
        let long = format!("{}.service", "a".repeat(248));
        check_refused(
            &format!(r#"{{"schema": 1, "units": {{"{long}": {{}}}}}}"#),
            &["longer than 255 bytes"],
        );
        // The instance is everything after the first '@', further '@'s included.
        assert!(
            problems(r#"{"schema": 1, "units": {"foo@bar@baz.service": {"active": true}}}"#)
                .is_empty()
        );
    }

    #[test]
    fn a_template_ships_its_file_but_is_never_enabled_or_started() {
        assert!(problems(
            r#"{"schema": 1, "units": {"web@.service": {"content": "[Service]\nExecStart=/bin/true %i\n"}, "web@a.service": {"active": true}}}"#
        )
        .is_empty());
        for field in ["enabled", "active"] {
            check_refused(
                &format!(r#"{{"schema": 1, "units": {{"web@.service": {{"{field}": true}}}}}}"#),
                &[
                    &format!(r#"units["web@.service"].{field}: web@.service is a template"#),
                    "web@NAME.service",
                ],
            );
        }
    }

    #[test]
    fn refuses_the_hosts_own_unit() {
        check_refused(
            r#"{"schema": 1, "units": {"mesh-host.service": {"enabled": true}}}"#,
            &["refused", "own unit"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"mesh-host.service": {"active": false}}}"#,
            &["refused"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"agent.service": {"active": true}}}"#,
            &["refused", "agent.service"],
        );
    }

    #[test]
    fn fields() {
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"enabeld": true}}}"#,
            &["unknown field \"enabeld\""],
        );
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"enabled": "yes"}}}"#,
            &["enabled: must be true or false"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"restart_on": ["relative"]}}}"#,
            &["restart_on[0]: path is not absolute"],
        );
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"state": "absent", "enabled": true}}}"#,
            &["makes no sense"],
        );
    }

    #[test]
    fn parses_show_blocks_in_order() {
        let text = "Id=a.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n\nId=b.service\nLoadState=not-found\nActiveState=inactive\nUnitFileState=\n";
        let blocks = parse_show(text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0]["ActiveState"], "active");
        assert_eq!(blocks[1]["LoadState"], "not-found");
        assert_eq!(blocks[1]["UnitFileState"], "");
        // Two commands' outputs joined with no blank line between them (a batch split under the
        // argument limit) still give one block per unit.
        let joined = "Id=a.service\nLoadState=loaded\nId=b.service\nLoadState=not-found\n";
        let blocks = parse_show(joined);
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert_eq!(blocks[1]["Id"], "b.service");
    }

    #[test]
    fn parses_saved_show_output() {
        let blocks = parse_show(include_str!("../../tests/fixtures/systemctl-show.txt"));
        let summary: Vec<[&str; 4]> = blocks
            .iter()
            .map(|b| ["Id", "LoadState", "ActiveState", "UnitFileState"].map(|k| b[k].as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ["a.service", "loaded", "active", "enabled"],
                ["b.service", "loaded", "inactive", "disabled"],
                ["nonexistent.service", "not-found", "inactive", ""],
            ]
        );
        assert_eq!(blocks[2]["FragmentPath"], "");
        // A name without a suffix comes back mangled, exit 0: why names are checked first.
        let mangled = parse_show(include_str!(
            "../../tests/fixtures/systemctl-show-nosuffix.txt"
        ));
        assert_eq!(mangled.len(), 1);
        assert_eq!(mangled[0]["Id"], "foo.service");
    }

    #[test]
    fn offline_plans_start_so_that_it_is_deferred() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"a.service": {"content": "x", "enabled": true, "active": true}}}"#,
        )
        .unwrap();
        let cx = RunContext::new(&d, true);
        let Step::Change(c) = Units::plan(
            &cx,
            "a.service",
            d.units.get("a.service"),
            Some(&Observed::default()),
            None,
        ) else {
            panic!("expected a change");
        };
        assert_eq!(c.details, ["unit file written", "enable", "start"]);
        assert!(c.op.start && !c.op.restart);
    }

    fn plan(spec_json: &str, obs: Observed, owned: Option<&Entry>, changed: &[&str]) -> String {
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/app.conf": {{"content": ""}}}}, "units": {{"a.service": {spec_json}}}}}"#
        ))
        .unwrap();
        let cx = RunContext {
            declaration: &d,
            changed_files: changed.iter().map(|s| s.to_string()).collect(),
            failed_packages: Default::default(),
            offline: false,
        };
        match Units::plan(
            &cx,
            "a.service",
            d.units.get("a.service"),
            Some(&obs),
            owned,
        ) {
            Step::InSync => "in sync".into(),
            Step::Adopt { intent, .. } => format!("adopt {:?}", intent.origin),
            Step::Change(c) => format!("{} {}", c.action.symbol(), c.details.join(", ")),
            Step::Fail(e) => format!("fail: {e}"),
            Step::Skip(e) => format!("skip: {e}"),
        }
    }

    fn loaded(active: &str, enablement: &str) -> Observed {
        Observed {
            load: "loaded".into(),
            active: active.into(),
            enablement: enablement.into(),
            ..Observed::default()
        }
    }

    #[test]
    fn masked_and_symlinked_units_fail_only_themselves() {
        let masked = Observed {
            load: "masked".into(),
            active: "inactive".into(),
            enablement: "masked".into(),
            link: Some("/dev/null".into()),
            ..Observed::default()
        };
        let owned = Entry::new(Origin::Created, Value::Null);
        let fail = plan(r#"{"active": true}"#, masked.clone(), None, &[]);
        assert!(
            fail.starts_with("fail: unit a.service is masked") && fail.contains("systemctl unmask"),
            "{fail}"
        );
        assert!(plan(r#"{"enabled": true}"#, masked.clone(), None, &[]).contains("is masked"));
        // Wanting it stopped or disabled: a masked unit is both already.
        assert_eq!(
            plan(
                r#"{"active": false, "enabled": false}"#,
                masked.clone(),
                Some(&owned),
                &[]
            ),
            "in sync"
        );
        assert_eq!(
            plan(r#"{"state": "absent"}"#, masked.clone(), None, &[]),
            "in sync"
        );
        // Its file is a link: never written through, never removed as if it were the host's.
        let fail = plan(r#"{"content": "[Service]\n"}"#, masked.clone(), None, &[]);
        assert!(
            fail.contains("symlink to /dev/null") && fail.contains("never writes through"),
            "{fail}"
        );
        let alias = Observed {
            link: Some("gdm.service".into()),
            ..loaded("active", "alias")
        };
        assert_eq!(
            plan(
                r#"{"enabled": true, "active": true}"#,
                alias.clone(),
                Some(&owned),
                &[]
            ),
            "in sync"
        );
        assert!(plan(r#"{"content": "x"}"#, alias, None, &[]).contains("symlink to gdm.service"));
    }

    #[test]
    fn content_has_the_file_size_limit() {
        let big = "x".repeat((8 << 20) + 1);
        check_refused(
            &format!(r#"{{"schema": 1, "units": {{"a.service": {{"content": "{big}"}}}}}}"#),
            &[
                "units[\"a.service\"].content",
                "is 8388609 bytes, more than the limit of 8388608 bytes",
            ],
        );
    }

    #[test]
    fn planner_cases() {
        let owned = Entry::new(
            Origin::Adopted,
            json!({"enabled": false, "active": false, "file_backup": null}),
        );
        assert_eq!(
            plan(
                r#"{"enabled": true, "active": true}"#,
                loaded("inactive", "disabled"),
                None,
                &[]
            ),
            "~ enable, start"
        );
        assert_eq!(
            plan(
                r#"{"enabled": true, "active": true}"#,
                loaded("active", "enabled"),
                None,
                &[]
            ),
            "adopt Adopted"
        );
        assert_eq!(
            plan(
                r#"{"enabled": true, "active": true}"#,
                loaded("active", "enabled"),
                Some(&owned),
                &[]
            ),
            "in sync"
        );
        assert_eq!(
            plan(
                r#"{"active": true, "restart_on": ["/etc/app.conf"]}"#,
                loaded("active", "enabled"),
                Some(&owned),
                &["/etc/app.conf"]
            ),
            "~ restart (/etc/app.conf changed)"
        );
        assert_eq!(
            plan(
                r#"{"active": true, "restart_on": ["/etc/app.conf"]}"#,
                loaded("active", "enabled"),
                Some(&owned),
                &[]
            ),
            "in sync"
        );
        assert_eq!(
            plan(
                r#"{"active": true, "reload_on": ["/etc/app.conf"]}"#,
                loaded("active", "enabled"),
                Some(&owned),
                &["/etc/app.conf"]
            ),
            "~ reload (/etc/app.conf changed)"
        );
        assert_eq!(
            plan(
                r#"{"active": false}"#,
                loaded("active", "enabled"),
                Some(&owned),
                &[]
            ),
            "~ stop"
        );
        let missing = Observed {
            load: "not-found".into(),
            ..Observed::default()
        };
        assert_eq!(
            plan(
                r#"{"content": "[Service]\n", "active": true}"#,
                missing.clone(),
                None,
                &[]
            ),
            "+ unit file written, start"
        );
        assert!(plan(r#"{"active": true}"#, missing, None, &[])
            .starts_with("fail: unit a.service is not loaded"));
        let with_file = Observed {
            file: Some(b"old".to_vec()),
            ..loaded("active", "enabled")
        };
        assert_eq!(
            plan(r#"{"content": "new"}"#, with_file, Some(&owned), &[]),
            "~ unit file changed, restart (its unit file changed)"
        );
        assert_eq!(
            plan(
                r#"{"state": "absent"}"#,
                loaded("active", "enabled"),
                None,
                &[]
            ),
            "- declared absent, stop, disable"
        );
    }

    #[test]
    fn release_restores_an_adopted_units_state() {
        let d = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let owned = Entry::new(
            Origin::Adopted,
            json!({"enabled": true, "active": true, "file_backup": null}),
        );
        let Step::Change(c) = Units::plan(
            &cx,
            "a.service",
            None,
            Some(&loaded("inactive", "disabled")),
            Some(&owned),
        ) else {
            panic!("expected a change");
        };
        assert!(c.op.enable && c.op.start && !c.op.remove_file);
        let created = Entry::new(Origin::Created, Value::Null);
        let obs = Observed {
            file: Some(b"x".to_vec()),
            ..loaded("active", "enabled")
        };
        let Step::Change(c) = Units::plan(&cx, "a.service", None, Some(&obs), Some(&created))
        else {
            panic!("expected a change");
        };
        assert!(c.op.stop && c.op.disable && c.op.remove_file);
    }

    #[test]
    fn skipped_when_its_package_failed() {
        let d = parse_with_defaults(r#"{"schema": 1, "packages": {"web": {}}, "units": {"web.service": {"package": "web", "active": true}}}"#).unwrap();
        let cx = RunContext {
            declaration: &d,
            changed_files: Default::default(),
            failed_packages: ["web".to_string()].into(),
            offline: false,
        };
        let step = Units::plan(
            &cx,
            "web.service",
            d.units.get("web.service"),
            Some(&Observed::default()),
            None,
        );
        assert!(matches!(step, Step::Skip(ref why) if why.contains("package web failed")));
    }
}
