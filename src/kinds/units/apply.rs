//! Applying units, in three phases over every unit: deactivation, configuration (unit files
//! written and the manager reloaded), activation; systemd's confirmation between the last two
//! (`confirm.rs`); what units owed to changed files settled last.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;

use super::confirm;
use super::observe::{open_unit_dir, read_unit_file, unit_dir};
use super::state::{Enablement, FileChange, Op};
use crate::kinds::{batch_then_each, Change, Env, KindError, Outcome, RunContext};
use crate::model::declaration::Declaration;
use crate::model::spec::units::{is_secret, watched_files, Original};
use crate::os::exec::Failure;
use crate::os::fsutil::{FileType, Found};
use crate::store::{Ledger, Owed};
use crate::tools::systemctl::{self, Verb};

/// In three phases over every unit: deactivation (stop and disable while the unit files
/// are still there), configuration (every unit file written, templates included, and the
/// manager reloaded, also for drop-ins the files kind wrote), then activation (enable,
/// start, restart, reload): an instance finds its template, and a unit its drop-ins, however
/// the declaration orders them. What units owed to changed files is settled last.
pub(super) fn apply(
    env: &Env,
    cx: &RunContext,
    ledger: &mut Ledger,
    changes: &[Change<Op, Original>],
) -> Vec<Outcome> {
    let mut progress = Progress::default();
    let before = confirm_before(env, cx, changes, &mut progress.errors);
    for verb in [Verb::Stop, Verb::Disable] {
        progress.run_verb(env, changes, verb);
    }
    let configured = configure(env, cx, changes, before.as_ref(), &mut progress);
    // Here systemd has read every unit file and drop-in of this run, and nothing was
    // enabled or started yet. Enabling makes the `[Install]` links, so it is confirmed too.
    progress.run_verb(env, changes, Verb::Enable);
    // Files written, the manager reloaded, units enabled, nothing started: systemd confirms.
    if let Some(before) = &before {
        // `enable` reloads the manager itself, but not always: systemd 252 did not when the
        // unit's `Also=` named a unit already enabled, nor when an enable retried alone found
        // its links made (a batch failing part way), and the links would go unconfirmed.
        let enabled = changes
            .iter()
            .any(|c| c.op.enablement == Enablement::Enable);
        let reloaded = match (configured.reloaded, enabled) {
            (Ok(()), true) => (env.runner)
                .run(&env.config.systemctl, &systemctl::daemon_reload(), &[])
                .map(drop)
                .map_err(|e| e.to_string()),
            (reloaded, _) => reloaded,
        };
        confirm::after(
            env,
            cx,
            ledger,
            before,
            changes,
            reloaded,
            &configured.previous,
            &progress.links,
            &mut progress.errors,
        );
    }
    for verb in [Verb::Start, Verb::Restart, Verb::Reload] {
        progress.run_verb(env, changes, verb);
    }
    let outcomes: Vec<Outcome> = changes.iter().map(|c| progress.outcome(c)).collect();
    settle_owed(env, cx, changes, &outcomes);
    outcomes
}

/// How far `apply` got with each unit.
#[derive(Default)]
pub(super) struct Progress<'a> {
    errors: BTreeMap<&'a str, KindError>,
    deferred: BTreeMap<&'a str, Vec<&'static str>>,
    /// Checked before each unit file and each verb's call: once the host is stopping, what is
    /// left waits for the next run, which observes where it stopped.
    stopped: BTreeSet<&'a str>,
    /// The links `enable` said it created in this run, (link, target): what a rollback takes back.
    links: Vec<(String, String)>,
}

impl<'a> Progress<'a> {
    fn outcome(&self, change: &Change<Op, Original>) -> Outcome {
        let key = change.key.as_str();
        match (self.errors.get(key), self.deferred.get(key)) {
            (Some(e), _) => Outcome::Failed(e.clone()),
            _ if self.stopped.contains(key) => Outcome::Stopped,
            (None, Some(verbs)) => {
                Outcome::Deferred(format!("{} needs the running system", verbs.join(", ")))
            }
            (None, None) => Outcome::Done,
        }
    }

    /// Runs one systemctl verb over every unit whose op asks for it and has not failed yet;
    /// offline, verbs that need the running system are deferred; once the host is stopping,
    /// none is run.
    fn run_verb(&mut self, env: &Env, changes: &'a [Change<Op, Original>], verb: Verb) {
        let Progress {
            errors,
            deferred,
            stopped,
            links,
        } = self;
        let names: Vec<&str> = changes
            .iter()
            .filter(|c| c.op.asks(verb) && !errors.contains_key(c.key.as_str()))
            .map(|c| c.key.as_str())
            .collect();
        if !names.is_empty() && (env.interrupted)() {
            stopped.extend(names);
            return;
        }
        if env.offline && verb.needs_running_system() {
            for name in names {
                deferred.entry(name).or_default().push(verb.as_str());
            }
            return;
        }
        let args = systemctl::verb(verb, env.offline.then_some(env.root));
        // What `enable` says it linked, also when it failed part way (systemd 252 says so on
        // stderr before its error): a rollback takes back exactly those links.
        let results = batch_then_each(env.runner, &names, |batch| {
            let output = env.runner.run(&env.config.systemctl, &args, batch);
            let said = match (&output, verb) {
                (Ok(out), Verb::Enable) => format!("{}{}", out.stderr, out.stdout_text()),
                (Err(e), Verb::Enable) => match &e.failure {
                    Failure::Exit(_, stderr) | Failure::Timeout(_, _, stderr) => stderr.clone(),
                    Failure::Spawn(_) => String::new(),
                },
                _ => String::new(),
            };
            links.extend(systemctl::parse_created_links(&said));
            output
                .map(drop)
                .map_err(|e| KindError::command(verb.as_str(), e))
        });
        // Cut short by the host stopping: the rest were not attempted.
        stopped.extend(names.iter().skip(results.len()));
        for (name, result) in names.iter().zip(results) {
            if let Err(e) = result {
                errors.insert(name, e);
            }
        }
    }
}

/// Whether this change writes or restores a unit file or enables a unit: what systemd's
/// confirmation is asked about. A removal or a disable only takes away.
pub(super) fn touches_unit_files(op: &Op) -> bool {
    matches!(op.file, FileChange::Write(_) | FileChange::Restore(_))
        || op.enablement == Enablement::Enable
}

/// When the run writes unit files or makes links (the units kind's, or the files kind's files
/// in systemd's directories): on a live machine, what systemd says of the host's units before
/// (one `systemctl show`; if it cannot be asked, those units fail untouched); under `--root`, a
/// note that the model alone decided.
pub(super) fn confirm_before<'a>(
    env: &Env,
    cx: &RunContext,
    changes: &'a [Change<Op, Original>],
    errors: &mut BTreeMap<&'a str, KindError>,
) -> Option<confirm::Before> {
    let touching: Vec<&'a str> = changes
        .iter()
        .filter(|c| touches_unit_files(&c.op))
        .map(|c| c.key.as_str())
        .collect();
    let files = &cx.facts.files.in_systemd_dirs;
    if touching.is_empty() && files.is_empty() {
        return None;
    }
    if env.offline {
        env.runner.note(
            "unit files changed under --root: no running systemd to confirm them, the model \
             alone decided that they do not reach the host's units"
                .to_string(),
        );
        return None;
    }
    match confirm::before(env, &touching, files) {
        Ok(before) => Some(before),
        Err(e) => {
            let why = format!(
                "not changed: what systemd says of the host's own units could not be asked \
                 before, so the change could not be confirmed: {e}"
            );
            for name in touching {
                errors.insert(name, KindError::Reason(why.clone()));
            }
            None
        }
    }
}

/// The unit's file as it is before this run changes it, to put back: `None` when there is none.
pub(super) fn previous_file(env: &Env, name: &str) -> Result<Option<Vec<u8>>, String> {
    let dir = open_unit_dir(env, false)?;
    match read_unit_file(env, dir.as_ref(), name, env.config.limits.max_file_bytes)? {
        Found::Nothing => Ok(None),
        Found::File(_, bytes) => Ok(Some(bytes)),
        Found::Link(target) => Err(format!(
            "its unit file is a symlink to {}; mesh-host never writes through or replaces a symlink",
            target.display()
        )),
    }
}

/// What the configuration phase did: each unit file's bytes before this run changed it (`None`:
/// there was none), to put back, and the reload's failure, if it failed: then nothing is confirmed.
pub(super) struct Configured<'a> {
    previous: Vec<(&'a str, Option<Vec<u8>>)>,
    reloaded: Result<(), String>,
}

/// The configuration phase: writes, restores or removes every unit file, then one
/// `daemon-reload` if any changed here or the files kind changed a unit file or drop-in (or any
/// file in systemd's directories, when systemd is to confirm them). With `before`, each unit
/// file's bytes are read before it changes, to put back if systemd's confirmation fails.
pub(super) fn configure<'a>(
    env: &Env,
    cx: &RunContext,
    changes: &'a [Change<Op, Original>],
    before: Option<&confirm::Before>,
    progress: &mut Progress<'a>,
) -> Configured<'a> {
    let dir = unit_dir(env);
    let mut files_changed =
        !cx.facts.files.unit_config.is_empty() || before.is_some_and(confirm::Before::has_files);
    let mut previous = Vec::new();
    for change in changes {
        let key = change.key.as_str();
        if progress.errors.contains_key(key) || progress.stopped.contains(key) {
            continue;
        }
        if (env.interrupted)() {
            progress.stopped.insert(key);
            continue;
        }
        let was = match (before, &change.op.file) {
            (None, _) | (_, FileChange::Keep) => None,
            (Some(_), _) => match previous_file(env, key) {
                Ok(was) => Some(was),
                Err(e) => {
                    progress.errors.insert(key, e.into());
                    continue;
                }
            },
        };
        let secret = cx.declaration.units.get(key).is_some_and(is_secret);
        match apply_file(env, &dir, key, &change.op.file, secret) {
            Ok(changed) => {
                files_changed |= changed;
                previous.extend(was.filter(|_| changed).map(|was| (key, was)));
            }
            Err(e) => {
                progress.errors.insert(key, e.into());
            }
        }
    }
    // Not skipped when stopping: a unit file written is only whole once systemd has read it
    // (the next run would find the file as declared and reload nothing).
    let mut reloaded = Ok(());
    if files_changed && !env.offline {
        if let Err(e) = env
            .runner
            .run(&env.config.systemctl, &systemctl::daemon_reload(), &[])
        {
            reloaded = Err(e.to_string());
            for change in changes {
                (progress.errors)
                    .entry(&change.key)
                    .or_insert_with(|| KindError::command("daemon-reload", e.clone()));
            }
        }
    }
    Configured { previous, reloaded }
}

/// Units declared present that restart or reload on any of `files`, with the file: what they
/// will owe once the files change (`reconcile` writes it ahead, before they do).
pub(super) fn owing<'d>(
    declaration: &'d Declaration,
    files: &BTreeSet<String>,
) -> Vec<(&'d str, &'d str)> {
    let mut out = Vec::new();
    if files.is_empty() {
        return out;
    }
    for (unit, spec) in declaration.units.iter().filter(|(_, s)| s.present) {
        for file in spec.restart_on.iter().chain(&spec.reload_on) {
            if files.contains(file) {
                out.push((unit.as_str(), file.as_str()));
            }
        }
    }
    out
}

/// Whether `unit` still owes its restart or reload on `file` to the declaration: it is declared
/// present and acts on the file.
pub(super) fn still_owed(declaration: &Declaration, unit: &str, file: &str) -> bool {
    declaration
        .units
        .get(unit)
        .is_some_and(|s| s.present && watched_files(s).contains(file))
}

/// Clears what units owed once their change is done (a restart or reload, or a start or stop,
/// which leaves no process running the old files), and what the declaration no longer asks.
/// A failed or stopped change stays owed for the next run. Failing to write it only costs a
/// restart too many in the next run, never one lost: logged.
pub(super) fn settle_owed(
    env: &Env,
    cx: &RunContext,
    changes: &[Change<Op, Original>],
    outcomes: &[Outcome],
) {
    let (Some(store), false) = (env.store, env.offline) else {
        return;
    };
    let result = store.owed().and_then(|mut owed: Owed| {
        let mut settled = owed.retain(|unit, file| still_owed(cx.declaration, unit, file));
        for (change, outcome) in changes.iter().zip(outcomes) {
            if *outcome == Outcome::Done {
                settled |= owed.settle(&change.key);
            }
        }
        match settled {
            true => store.save_owed(&owed),
            false => Ok(()),
        }
    });
    if let Err(e) = result {
        log::warn!("{e}; units restarted or reloaded in this run may be again in the next");
    }
}

/// Writes, restores or removes the unit's file; `Ok(true)` when the file changed.
/// A secret unit's file is written 0600: systemd reads it as root (or as the user its user
/// manager runs as, who owns it).
pub(super) fn apply_file(
    env: &Env,
    dir: &Path,
    name: &str,
    change: &FileChange,
    secret: bool,
) -> Result<bool, String> {
    if *change == FileChange::Keep {
        return Ok(false);
    }
    // Only a removal finds the directory missing (anything else creates it): nothing to remove.
    let Some(d) = open_unit_dir(env, *change != FileChange::Remove)? else {
        return Ok(false);
    };
    let at = |e: std::io::Error| format!("{}: {e}", dir.join(name).display());
    if let FileChange::Write(bytes) = change {
        let mode = if secret { 0o600 } else { 0o644 };
        d.write_atomic(OsStr::new(name), bytes, mode, None)
            .map_err(at)?;
    } else if let FileChange::Restore(backup) = change {
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
