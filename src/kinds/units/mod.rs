//! systemd units. One `systemctl show` and one `is-enabled` (of the loaded ones) observe them all
//! (asked again by halves when one name fails the batch; masked, aliased, symlinked or oversized
//! unit files fail or are reported only for their own unit, never followed);
//! unit files the declaration carries are written atomically to the unit directory with one
//! `daemon-reload` when any changed (or the files kind changed a unit file or drop-in, even with
//! no unit declared), before anything is enabled or started; enable, disable, start, stop,
//! restart and reload each go in one batched call. A restart or reload owed to a changed file is
//! read from the store (`store::Owed`) until it is done. A unit the host found enabled or running
//! gets that state back when it is released; a unit file the host wrote is removed. Under
//! `--root`, only enable/disable (offline) and unit files are done; the rest is deferred.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::{
    batch_then_each, query_by_halves, Action, Change, Env, Hints, Kind, KindError, LedgerAfter,
    Observations, Outcome, Place, RunContext, Step,
};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::units::{digest, is_secret, watched_files, Original, Spec, Units};
use crate::model::spec::KindSpec;
use crate::model::spec::Named;
use crate::model::unitfile::UnitName;
use crate::os::exec::Failure;
use crate::os::fsutil::{self, Dir, FileType, Found};
use crate::store::{Digest, Entry, Ledger, Origin, Owed};
use crate::tools::systemctl::{self, ActiveState, LoadState, UnitFileState, Verb};
use crate::util::diff::ContentDiff;

mod confirm;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    /// `None` offline.
    pub load: Option<LoadState>,
    /// `None` offline.
    pub active: Option<ActiveState>,
    /// `is-enabled` (or `show`'s `UnitFileState` for a unit not loaded); `None` when it has no
    /// unit file.
    pub enablement: Option<UnitFileState>,
    /// The unit's file in the unit directory, if there is one and it is a regular file.
    pub file: Option<Vec<u8>>,
    /// That file's permission bits: a secret unit's file readable by others is rewritten 0600.
    pub file_mode: Option<u32>,
    /// Where the unit's name in the unit directory links to, when it is a symlink (a masked unit
    /// links to /dev/null, an alias to its unit): reported, never followed or replaced.
    pub link: Option<String>,
    /// Files it restarts or reloads on that changed in an earlier run (or were about to) while
    /// it has not been restarted or reloaded since (the store's `Owed`).
    pub owed: BTreeSet<String>,
    /// An instance whose template the declaration ships with other content than its file holds
    /// now: the template is written in this run, and a running instance restarted for it.
    pub template_differs: bool,
    /// Its processes map files an upgrade deleted under /usr; looked for only for units declared
    /// `restart_when_stale`, on the running system.
    pub stale: bool,
    /// The unit file releasing an adopted unit puts back (its backup in the store), read only
    /// for a unit no longer declared when the plan shows diffs.
    pub original: Option<Vec<u8>>,
}

impl Observed {
    /// Its unit file and the file's mode, to show in a plan's diff when the plan shows them.
    fn file_diff(&self, cx: &RunContext) -> Option<(&[u8], Option<u32>)> {
        let file = self.file.as_deref().filter(|_| cx.diffs)?;
        Some((file, self.file_mode))
    }

    fn running(&self) -> bool {
        self.active.as_ref().is_some_and(ActiveState::running)
    }
    fn masked(&self) -> bool {
        self.load == Some(LoadState::Masked)
            || self.enablement.as_ref().is_some_and(UnitFileState::masked)
    }
    fn enabled(&self) -> bool {
        self.enablement.as_ref().is_some_and(UnitFileState::enabled)
    }
}

/// One unit's change: at most one thing each to its file, its enablement and its activation
/// (`apply` orders them: stop and disable while the file is still there, then the file, then
/// the rest).
#[derive(Debug, Default, PartialEq)]
pub struct Op {
    pub file: FileChange,
    pub enablement: Enablement,
    pub activation: Activation,
}

#[derive(Debug, Default, PartialEq)]
pub enum FileChange {
    #[default]
    Keep,
    Write(Vec<u8>),
    /// The original the host kept in the store, under this backup name.
    Restore(String),
    Remove,
}

#[derive(Debug, Default, PartialEq)]
pub enum Enablement {
    #[default]
    Keep,
    Enable,
    Disable,
}

#[derive(Debug, Default, PartialEq)]
pub enum Activation {
    #[default]
    Keep,
    Start,
    Stop,
    Restart,
    Reload,
}

impl Op {
    /// Whether this change asks systemctl for `verb`.
    fn asks(&self, verb: Verb) -> bool {
        match verb {
            Verb::Start => self.activation == Activation::Start,
            Verb::Stop => self.activation == Activation::Stop,
            Verb::Restart => self.activation == Activation::Restart,
            Verb::Reload => self.activation == Activation::Reload,
            Verb::Enable => self.enablement == Enablement::Enable,
            Verb::Disable => self.enablement == Enablement::Disable,
        }
    }
}

impl Kind for Units {
    // In phases over every unit (stop, disable, files, one daemon-reload, then each verb in one
    // systemctl call): split, a unit would start before a unit file it needs is written and
    // read, and every chunk would cost a daemon-reload.
    const APPLIED_IN_CHUNKS: bool = false;
    type Observed = Observed;
    type Op = Op;
    type Facts = ();

    fn digest_observed(spec: &Spec, _: Option<&Observed>) -> Digest {
        Self::digest(spec)
    }

    fn observe(
        env: &Env,
        cx: &RunContext,
        keys: &[&str],
    ) -> Result<Observations<Observed>, KindError> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        // A template (`foo@.service`) is only its file: systemctl is asked about its instances,
        // never about it (`show` refuses the name and would fail the batch).
        let names: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|name| !UnitName::parse(name).is_ok_and(|n| n.is_template()))
            .collect();
        let queried: Vec<Result<Observed, KindError>> = if env.offline {
            names
                .iter()
                .map(|name| {
                    let args = systemctl::is_enabled(Some(env.root));
                    let enablement = env
                        .runner
                        .query(&env.config.systemctl, &args, &[name])
                        .ok()
                        .and_then(|o| {
                            systemctl::parse_is_enabled(&o.stdout_text())
                                .into_iter()
                                .next()
                        });
                    Ok(Observed {
                        enablement,
                        ..Observed::default()
                    })
                })
                .collect()
        } else {
            // One name systemctl cannot take fails the whole `show`: asked again by halves, it
            // fails only that unit.
            let shown = query_by_halves(env.runner, "`systemctl show`", &names, |batch| {
                env.runner
                    .run(&env.config.systemctl, &systemctl::show(), batch)
                    .map(|output| systemctl::parse_show(&output.stdout_text()))
                    .map_err(|e| KindError::command("observe", e))
            });
            let loaded: Vec<&str> = names
                .iter()
                .zip(&shown)
                .filter(|(_, s)| s.as_ref().is_ok_and(|s| s.load == Some(LoadState::Loaded)))
                .map(|(name, _)| *name)
                .collect();
            let mut enablement = query_enablement(env, &loaded);
            names
                .iter()
                .zip(shown)
                .map(|(name, shown)| {
                    shown.map(|s| Observed {
                        enablement: enablement.remove(*name).unwrap_or(s.unit_file),
                        load: s.load,
                        active: s.active,
                        ..Observed::default()
                    })
                })
                .collect()
        };
        let mut queried: BTreeMap<&str, Result<Observed, KindError>> =
            names.into_iter().zip(queried).collect();
        let states: Vec<Result<Observed, KindError>> = keys
            .iter()
            .map(|key| {
                queried
                    .remove(key)
                    .unwrap_or_else(|| Ok(Observed::default()))
            })
            .collect();
        let dir = open_unit_dir(env, false)?;
        let max = env.config.limits.max_file_bytes;
        let mut owed = match (env.store, env.offline) {
            (Some(store), false) => store.owed().map_err(|e| e.to_string())?,
            _ => Owed::default(),
        };
        // One look through /proc for every unit that asked, none when none did, nor while the
        // last look's answer stands.
        let asked = |name: &&str| {
            (cx.declaration.units.get(*name)).is_some_and(|s| s.present && s.restart_when_stale)
        };
        let stale: BTreeSet<String> = match (env.offline, env.upkeep) {
            (false, Some(at)) if keys.iter().any(asked) => {
                let last = env.store.and_then(crate::store::Store::last_look);
                let now = env.clock.unix();
                let units = crate::model::upkeep::stale_units(at, last.as_ref(), now);
                units.into_iter().collect()
            }
            _ => BTreeSet::new(),
        };
        // Each declared template's file read once, however many instances it has.
        let mut templates: BTreeMap<String, bool> = BTreeMap::new();
        let mut template_differs = |name: &str| -> Result<bool, String> {
            let Some(template) = UnitName::parse(name).ok().and_then(|n| n.template()) else {
                return Ok(false);
            };
            let Some(content) = (cx.declaration.units.get(&template))
                .filter(|t| t.present)
                .and_then(|t| t.content.as_deref())
            else {
                return Ok(false);
            };
            if let Some(differs) = templates.get(&template) {
                return Ok(*differs);
            }
            let differs = match read_unit_file(env, dir.as_ref(), &template, max)? {
                Found::File(_, bytes) => bytes != content.as_bytes(),
                Found::Nothing | Found::Link(_) => true,
            };
            templates.insert(template, differs);
            Ok(differs)
        };
        Ok(keys
            .iter()
            .zip(states)
            .map(|(name, state)| {
                let owed = owed.units.remove(*name).unwrap_or_default();
                let observed = state.map(|obs| Observed { owed, ..obs });
                let observed = observed.and_then(|mut obs| {
                    match read_unit_file(env, dir.as_ref(), name, max)? {
                        Found::Nothing => {}
                        Found::File(stat, bytes) => {
                            obs.file = Some(bytes);
                            obs.file_mode = Some(stat.mode);
                        }
                        Found::Link(target) => obs.link = Some(target.display().to_string()),
                    }
                    obs.template_differs = template_differs(name)?;
                    obs.stale = stale.contains(*name);
                    if let (Some(store), true, false) = (
                        env.store,
                        env.diffs,
                        cx.declaration.units.contains_key(*name),
                    ) {
                        obs.original = store
                            .read_backup(&super::backup_key(Units::NAME, name))
                            .ok();
                    }
                    Ok(obs)
                });
                (name.to_string(), observed)
            })
            .collect())
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<Original>>,
    ) -> Step<Op, Original> {
        let Some(obs) = observed else {
            return Step::Fail(format!("unit {key} was not observed"));
        };
        match desired {
            Some(spec) if spec.present => plan_present(cx, key, spec, obs, owned),
            Some(_) => plan_absent(key, obs, obs.file_diff(cx), owned),
            None => match owned {
                Some(entry) => plan_release(cx, key, obs, entry),
                None => Step::InSync,
            },
        }
    }

    /// Later kinds need nothing of units.
    fn note(_: &Declaration, _: &mut (), _: &Change<Op, Original>, _: &Outcome) {}

    /// In three phases over every unit: deactivation (stop and disable while the unit files
    /// are still there), configuration (every unit file written, templates included, and the
    /// manager reloaded, also for drop-ins the files kind wrote), then activation (enable,
    /// start, restart, reload): an instance finds its template, and a unit its drop-ins, however
    /// the declaration orders them. What units owed to changed files is settled last.
    fn apply(
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

    /// Unit files and drop-ins the files kind changed in this run, or other files in systemd's
    /// directories: the manager is reloaded for them and, on a live machine, systemd confirms
    /// them, even when no unit is declared or owned.
    fn called_by_facts(facts: &super::Facts) -> bool {
        !facts.files.unit_config.is_empty() || !facts.files.in_systemd_dirs.is_empty()
    }

    fn take_refused(_: &mut ()) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Units declared present that restart or reload on a file the files kind changed.
    fn owing<'d>(declaration: &'d Declaration, facts: &super::Facts) -> Vec<(&'d str, &'d str)> {
        owing(declaration, &facts.files.changed)
    }

    fn pacnew(_: &Env, _: &Declaration, _: &Ledger, _: &mut QuietDirs) -> Vec<Pacnew> {
        Vec::new()
    }

    /// The files each declared unit restarts or reloads on (files the declaration writes, so
    /// watched as files too), and the unit files the declaration carries.
    fn watch<'d>(declaration: &'d Declaration, _: &'d Ledger, hints: &mut dyn Hints<'d>) {
        for (unit, spec) in &declaration.units {
            for file in watched_files(spec) {
                hints.path_touches(file, unit);
            }
            if spec.content.is_some() {
                hints.entry(Place::UnitDir, unit, unit);
            }
        }
    }
}

/// How far `apply` got with each unit.
#[derive(Default)]
struct Progress<'a> {
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
fn touches_unit_files(op: &Op) -> bool {
    matches!(op.file, FileChange::Write(_) | FileChange::Restore(_))
        || op.enablement == Enablement::Enable
}

/// When the run writes unit files or makes links (the units kind's, or the files kind's files
/// in systemd's directories): on a live machine, what systemd says of the host's units before
/// (one `systemctl show`; if it cannot be asked, those units fail untouched); under `--root`, a
/// note that the model alone decided.
fn confirm_before<'a>(
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
fn previous_file(env: &Env, name: &str) -> Result<Option<Vec<u8>>, String> {
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
struct Configured<'a> {
    previous: Vec<(&'a str, Option<Vec<u8>>)>,
    reloaded: Result<(), String>,
}

/// The configuration phase: writes, restores or removes every unit file, then one
/// `daemon-reload` if any changed here or the files kind changed a unit file or drop-in (or any
/// file in systemd's directories, when systemd is to confirm them). With `before`, each unit
/// file's bytes are read before it changes, to put back if systemd's confirmation fails.
fn configure<'a>(
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
fn owing<'d>(declaration: &'d Declaration, files: &BTreeSet<String>) -> Vec<(&'d str, &'d str)> {
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
fn still_owed(declaration: &Declaration, unit: &str, file: &str) -> bool {
    declaration
        .units
        .get(unit)
        .is_some_and(|s| s.present && watched_files(s).contains(file))
}

/// Clears what units owed once their change is done (a restart or reload, or a start or stop,
/// which leaves no process running the old files), and what the declaration no longer asks.
/// A failed or stopped change stays owed for the next run. Failing to write it only costs a
/// restart too many in the next run, never one lost: logged.
fn settle_owed(env: &Env, cx: &RunContext, changes: &[Change<Op, Original>], outcomes: &[Outcome]) {
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

/// `is-enabled` of loaded units, by name. `show`'s `UnitFileState` is the manager's cached view
/// and can lag an enable or disable (systemd 252 still said `enabled` after `systemctl disable`);
/// `is-enabled` reads the unit files. systemd 252 stops at the first unit without a file, so when
/// the batch answers short it is asked again by halves; a unit whose file is gone gets `""`
/// (systemd 262 says `not-found` for it and goes on).
fn query_enablement(env: &Env, names: &[&str]) -> BTreeMap<String, Option<UnitFileState>> {
    let states = query_by_halves(env.runner, "`systemctl is-enabled`", names, |batch| {
        env.runner
            .query(&env.config.systemctl, &systemctl::is_enabled(None), batch)
            .map(|output| systemctl::parse_is_enabled(&output.stdout_text()))
            .map_err(|e| KindError::command("observe", e))
    });
    names
        .iter()
        .zip(states)
        .map(|(name, state)| (name.to_string(), state.ok()))
        .collect()
}

/// The unit directory, opened from the target root one component at a time, never through a
/// symlink (under `--root`, a link in the mounted disk must not lead onto the rescue system),
/// nor into the store, whatever path reaches it (`Store::fence`). `None` when it does not exist
/// and `create` is not asked.
fn open_unit_dir(env: &Env, create: bool) -> Result<Option<Dir>, String> {
    let fence = env.store.and_then(crate::store::Store::fence);
    fsutil::open_dir_below(env.root, &env.config.unit_dir, create, fence.as_ref())
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
/// A secret unit's file is written 0600: systemd reads it as root (or as the user its user
/// manager runs as, who owns it).
fn apply_file(
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

fn plan_present(
    cx: &RunContext,
    key: &str,
    spec: &Spec,
    obs: &Observed,
    owned: Option<&Entry<Original>>,
) -> Step<Op, Original> {
    if let Some(package) = spec
        .package
        .as_ref()
        .filter(|p| cx.facts.packages.failed.contains(*p))
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
        if let Some(content) = &spec.content {
            op.file = FileChange::Write(content.as_bytes().to_vec());
        }
        details.push(
            if obs.file.is_some() {
                "unit file changed"
            } else {
                "unit file written"
            }
            .to_string(),
        );
    }
    // A secret unit's file others can read (written before it was declared secret) is written
    // again 0600; its content is as declared, so nothing restarts for it.
    let exposed = obs.file_mode.filter(|mode| mode & 0o077 != 0);
    if let (false, true, Some(mode), Some(content)) =
        (file_changed, is_secret(spec), exposed, &spec.content)
    {
        op.file = FileChange::Write(content.as_bytes().to_vec());
        details.push(format!("unit file mode {mode:04o} -> 0600 (secret)"));
    }
    // Its own or its template's unit file or drop-ins, written by the files kind in this run.
    let template = UnitName::parse(key).ok().and_then(|name| name.template());
    let config = &cx.facts.files.unit_config;
    let config_changed =
        config.contains(key) || template.as_ref().is_some_and(|t| config.contains(t));
    // An instance of a template this declaration ships, or a unit whose file the files kind
    // wrote, is loaded once the file is written and the manager reloaded, which `apply` does
    // before it enables or starts anything.
    let template_declared = template
        .as_ref()
        .and_then(|t| cx.declaration.units.get(t))
        .is_some_and(|t| t.present && t.content.is_some());
    if !cx.offline
        && spec.content.is_none()
        && !template_declared
        && !config_changed
        && obs.load != Some(LoadState::Loaded)
        && !obs.masked()
    {
        return Step::Fail(format!(
            "unit {key} is not loaded (LoadState={}) and the declaration gives no content",
            obs.load.as_ref().map_or("", LoadState::as_str)
        ));
    }
    match spec.enabled {
        Some(true)
            if !obs.enabled()
                && !obs
                    .enablement
                    .as_ref()
                    .is_some_and(UnitFileState::not_enableable) =>
        {
            op.enablement = Enablement::Enable;
            details.push("enable".into());
        }
        Some(false) if obs.enabled() => {
            op.enablement = Enablement::Disable;
            details.push("disable".into());
        }
        _ => {}
    }
    let running = obs.running();
    let want_running = spec.active.unwrap_or(running);
    // Changed in this run, or in an earlier one whose restart or reload is still owed.
    let changed = |p: &&String| cx.facts.files.changed.contains(*p) || obs.owed.contains(*p);
    let touched: Vec<&String> = spec.restart_on.iter().filter(changed).collect();
    let reload_touched: Vec<&String> = spec.reload_on.iter().filter(changed).collect();
    if !cx.offline {
        if want_running && !running {
            op.activation = Activation::Start;
            details.push("start".into());
        } else if !want_running && running {
            op.activation = Activation::Stop;
            details.push("stop".into());
        } else if running
            && (file_changed
                || obs.template_differs
                || config_changed
                || !touched.is_empty()
                || (spec.restart_when_stale && obs.stale))
        {
            op.activation = Activation::Restart;
            let why = if file_changed {
                "its unit file changed".to_string()
            } else if obs.template_differs {
                "its template changed".to_string()
            } else if config_changed {
                "a unit file or drop-in of it changed".to_string()
            } else if touched.is_empty() {
                "it maps files an upgrade deleted".to_string()
            } else {
                let list: Vec<&str> = touched.iter().map(|s| s.as_str()).collect();
                format!("{} changed", list.join(", "))
            };
            details.push(format!("restart ({why})"));
        } else if running && !reload_touched.is_empty() {
            op.activation = Activation::Reload;
            let list: Vec<&str> = reload_touched.iter().map(|s| s.as_str()).collect();
            details.push(format!("reload ({} changed)", list.join(", ")));
        }
    } else if spec.active == Some(true) {
        // A mounted root runs nothing: the start is planned so that it is reported as deferred.
        op.activation = Activation::Start;
        details.push("start".into());
    }
    let (intent, backup) = match owned {
        Some(_) => (None, None),
        None if obs.file.is_none() && spec.content.is_some() => (Some(Entry::created()), None),
        None => {
            let file_backup =
                (file_changed && obs.file.is_some()).then(|| super::backup_key(Units::NAME, key));
            let original = Original {
                enabled: obs.enabled(),
                active: running,
                file_backup: file_backup.clone(),
            };
            let backup = file_backup.and(obs.file.clone());
            (Some(Entry::adopted(Some(original))), backup)
        }
    };
    if details.is_empty() {
        return match intent {
            Some(intent) => Step::Adopt { intent, backup },
            None => Step::InSync,
        };
    }
    let diff = match &op.file {
        FileChange::Write(content) if cx.diffs => Some(Box::new(ContentDiff::new(
            if obs.file.is_some() {
                "on the machine"
            } else {
                "absent"
            },
            "declared",
            obs.file.as_deref(),
            Some(content),
            shows_content(Some(spec), obs.file_mode),
        ))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action: if owned.is_none() && obs.file.is_none() && matches!(op.file, FileChange::Write(_))
        {
            Action::Create
        } else {
            Action::Update
        },
        details: details.into(),
        diff,
        intent: intent.map(Box::new),
        backup: backup.map(Vec::into_boxed_slice),
        after: LedgerAfter::Applied(digest(spec)),
        op,
    })
}

/// A removal's plan: `shown`, the unit file as it is, when the plan shows diffs.
fn plan_absent(
    key: &str,
    obs: &Observed,
    shown: Option<(&[u8], Option<u32>)>,
    owned: Option<&Entry<Original>>,
) -> Step<Op, Original> {
    remove_step(key, shown, removal(obs), owned.is_some(), "declared absent")
}

/// Stopped, disabled and its file removed, as far as it is any of those now.
fn removal(obs: &Observed) -> Op {
    Op {
        activation: match obs.running() {
            true => Activation::Stop,
            false => Activation::Keep,
        },
        enablement: match obs.enabled() {
            true => Enablement::Disable,
            false => Enablement::Keep,
        },
        file: match obs.file {
            Some(_) => FileChange::Remove,
            None => FileChange::Keep,
        },
    }
}

fn plan_release(
    cx: &RunContext,
    key: &str,
    obs: &Observed,
    entry: &Entry<Original>,
) -> Step<Op, Original> {
    if entry.origin == Origin::Created {
        return remove_step(
            key,
            obs.file_diff(cx),
            removal(obs),
            true,
            "released; mesh-host wrote it",
        );
    }
    let Some(original) = &entry.original else {
        return Step::Fail("the ledger keeps no record of the original".to_string());
    };
    let op = Op {
        enablement: match (original.enabled, obs.enabled()) {
            (true, false) => Enablement::Enable,
            (false, true) => Enablement::Disable,
            _ => Enablement::Keep,
        },
        activation: match (original.active, obs.running()) {
            (true, false) => Activation::Start,
            (false, true) => Activation::Stop,
            _ => Activation::Keep,
        },
        file: match &original.file_backup {
            Some(backup) => FileChange::Restore(backup.clone()),
            None => FileChange::Keep,
        },
    };
    let mut details = vec!["released; original state restored".to_string()];
    details.extend(describe(&op));
    // The file as it is (when the plan shows diffs) against the original put back.
    let diff = match (&op.file, &obs.original) {
        (FileChange::Restore(_), Some(original)) if cx.diffs => Some(Box::new(ContentDiff::new(
            if obs.file.is_some() {
                "on the machine"
            } else {
                "absent"
            },
            "original",
            obs.file.as_deref(),
            Some(original),
            shows_content(None, obs.file_mode),
        ))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Update,
        details: details.into(),
        diff,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

fn remove_step(
    key: &str,
    shown: Option<(&[u8], Option<u32>)>,
    op: Op,
    owned: bool,
    why: &str,
) -> Step<Op, Original> {
    if op == Op::default() && !owned {
        return Step::InSync;
    }
    let mut details = vec![why.to_string()];
    details.extend(describe(&op));
    let diff = match (&op.file, shown) {
        (FileChange::Remove, Some((file, mode))) => Some(Box::new(ContentDiff::new(
            "on the machine",
            "absent",
            Some(file),
            None,
            shows_content(None, mode),
        ))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Remove,
        details: details.into(),
        diff,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

/// Whether a unit file's content may be shown in a plan's diff: the one place that decides, for
/// a declared unit (`spec`) and for one being removed or released (`None`), given its file's
/// mode now (`mode`). Never a secret unit's (`is_secret`), nor a unit file others may not read
/// (a secret unit's file is 0600): what a unit no longer declared held is judged by that.
/// Content not shown is summarised by its sizes.
fn shows_content(spec: Option<&Spec>, mode: Option<u32>) -> bool {
    !spec.is_some_and(is_secret) && mode.is_none_or(|mode| mode & 0o004 != 0)
}

fn describe(op: &Op) -> Vec<String> {
    [
        (op.activation == Activation::Stop, "stop"),
        (op.enablement == Enablement::Disable, "disable"),
        (op.file == FileChange::Remove, "remove unit file"),
        (
            matches!(op.file, FileChange::Restore(_)),
            "restore unit file",
        ),
        (op.enablement == Enablement::Enable, "enable"),
        (op.activation == Activation::Start, "start"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, s)| s.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::declaration::tests::{check_refused, parse_with_defaults, problems};
    use crate::util::diff::Body;

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
                serde_json::Value::String(name.into())
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
        let details: Vec<&str> = c.details.iter().collect();
        assert_eq!(details, ["unit file written", "enable", "start"]);
        assert_eq!(c.op.activation, Activation::Start);
    }

    #[test]
    fn a_unit_file_written_or_removed_carries_its_diff() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"a.service": {"content": "[Service]\nExecStart=/bin/b\n"},
                "gone.service": {"state": "absent"}}}"#,
        )
        .unwrap();
        let mut cx = RunContext::new(&d, true);
        cx.diffs = true;
        let obs = |file: &str| Observed {
            file: Some(file.as_bytes().to_vec()),
            ..Observed::default()
        };
        let diff = |key: &str, obs: Observed| {
            let Step::Change(c) = Units::plan(&cx, key, d.units.get(key), Some(&obs), None) else {
                panic!("expected a change of {key}");
            };
            let diff = c.diff.expect("a diff");
            let Body::Text { hunks, .. } = diff.body else {
                panic!("{diff:?}");
            };
            let lines: Vec<String> = (hunks.iter().flat_map(|h| &h.lines))
                .map(|l| format!("{}{}", l.tag.mark(), l.text))
                .collect();
            (diff.from, diff.to, lines)
        };
        assert_eq!(
            diff("a.service", obs("[Service]\nExecStart=/bin/a\n")),
            (
                "on the machine",
                "declared",
                vec![
                    " [Service]".into(),
                    "-ExecStart=/bin/a".into(),
                    "+ExecStart=/bin/b".into()
                ]
            )
        );
        assert_eq!(diff("a.service", Observed::default()).1, "declared",);
        assert_eq!(
            diff("gone.service", obs("[Service]\n")),
            ("on the machine", "absent", vec!["-[Service]".into()])
        );
    }

    fn plan(
        spec_json: &str,
        obs: Observed,
        owned: Option<&Entry<Original>>,
        changed: &[&str],
    ) -> String {
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/app.conf": {{"content": ""}}}}, "units": {{"a.service": {spec_json}}}}}"#
        ))
        .unwrap();
        let mut cx = RunContext::new(&d, false);
        cx.facts.files.changed = changed.iter().map(|s| s.to_string()).collect();
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
            load: Some(LoadState::Loaded),
            active: Some(ActiveState::parse(active)),
            enablement: Some(UnitFileState::parse(enablement)),
            ..Observed::default()
        }
    }

    #[test]
    fn masked_and_symlinked_units_fail_only_themselves() {
        let masked = Observed {
            load: Some(LoadState::Masked),
            active: Some(ActiveState::Inactive),
            enablement: Some(UnitFileState::Masked),
            link: Some("/dev/null".into()),
            ..Observed::default()
        };
        let owned = Entry::created();
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
    fn a_unit_is_secret_only_when_declared_so() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"a.service": {"content": "[Service]\n", "secret": true},
                "b.service": {"content": "[Service]\n"}}}"#,
        )
        .unwrap();
        assert!(is_secret(&d.units["a.service"]));
        assert!(!is_secret(&d.units["b.service"]));
        check_refused(
            r#"{"schema": 1, "units": {"a.service": {"state": "absent", "secret": true}}}"#,
            &["secret: makes no sense for a unit declared absent"],
        );
    }

    /// A secret unit's file that others can read is written again 0600, without a restart;
    /// one already private, or not secret, is left alone.
    #[test]
    fn a_secret_units_file_readable_by_others_is_made_private() {
        let owned = Entry::created();
        let file = |mode| Observed {
            file: Some(b"[Service]\n".to_vec()),
            file_mode: Some(mode),
            ..loaded("active", "enabled")
        };
        let secret = r#"{"content": "[Service]\n", "active": true, "secret": true}"#;
        let plain = r#"{"content": "[Service]\n", "active": true}"#;
        assert_eq!(
            plan(secret, file(0o644), Some(&owned), &[]),
            "~ unit file mode 0644 -> 0600 (secret)"
        );
        assert_eq!(plan(secret, file(0o600), Some(&owned), &[]), "in sync");
        assert_eq!(plan(plain, file(0o644), Some(&owned), &[]), "in sync");
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
        let owned = Entry::adopted(Some(Original {
            enabled: false,
            active: false,
            file_backup: None,
        }));
        let missing = Observed {
            load: Some(LoadState::NotFound),
            ..Observed::default()
        };
        let with_file = Observed {
            file: Some(b"old".to_vec()),
            ..loaded("active", "enabled")
        };
        let running = || loaded("active", "enabled");
        let restart_on = r#"{"active": true, "restart_on": ["/etc/app.conf"]}"#;
        let reload_on = r#"{"active": true, "reload_on": ["/etc/app.conf"]}"#;
        let changed: &[&str] = &["/etc/app.conf"];
        /// The spec, what was observed, the ledger's entry, the files changed in the run, the plan.
        type Case<'a> = (
            &'a str,
            Observed,
            Option<&'a Entry<Original>>,
            &'a [&'a str],
            &'a str,
        );
        let cases: [Case; 10] = [
            (
                r#"{"enabled": true, "active": true}"#,
                loaded("inactive", "disabled"),
                None,
                &[],
                "~ enable, start",
            ),
            (
                r#"{"enabled": true, "active": true}"#,
                running(),
                None,
                &[],
                "adopt Adopted",
            ),
            (
                r#"{"enabled": true, "active": true}"#,
                running(),
                Some(&owned),
                &[],
                "in sync",
            ),
            (
                restart_on,
                running(),
                Some(&owned),
                changed,
                "~ restart (/etc/app.conf changed)",
            ),
            (restart_on, running(), Some(&owned), &[], "in sync"),
            (
                reload_on,
                running(),
                Some(&owned),
                changed,
                "~ reload (/etc/app.conf changed)",
            ),
            (
                r#"{"active": false}"#,
                running(),
                Some(&owned),
                &[],
                "~ stop",
            ),
            (
                r#"{"content": "[Service]\n", "active": true}"#,
                missing.clone(),
                None,
                &[],
                "+ unit file written, start",
            ),
            (
                r#"{"content": "new"}"#,
                with_file,
                Some(&owned),
                &[],
                "~ unit file changed, restart (its unit file changed)",
            ),
            (
                r#"{"state": "absent"}"#,
                running(),
                None,
                &[],
                "- declared absent, stop, disable",
            ),
        ];
        for (spec, observed, owned, changed, want) in cases {
            assert_eq!(plan(spec, observed, owned, changed), want, "{spec}");
        }
        assert!(plan(r#"{"active": true}"#, missing, None, &[])
            .starts_with("fail: unit a.service is not loaded"));
    }

    #[test]
    fn a_unit_restarts_when_stale_only_if_it_asked_and_runs() {
        let stale = |active: &str| Observed {
            stale: true,
            ..loaded(active, "enabled")
        };
        let owned = Entry::created();
        for (spec, obs, want) in [
            (
                r#"{"restart_when_stale": true}"#,
                stale("active"),
                "~ restart (it maps files an upgrade deleted)",
            ),
            (r#"{}"#, stale("active"), "in sync"),
            (
                r#"{"restart_when_stale": true}"#,
                stale("inactive"),
                "in sync",
            ),
            (
                r#"{"restart_when_stale": true}"#,
                loaded("active", "enabled"),
                "in sync",
            ),
        ] {
            assert_eq!(plan(spec, obs, Some(&owned), &[]), want, "{spec}");
        }
        check_refused_units(
            r#"{"state": "absent", "restart_when_stale": true}"#,
            "restart_when_stale: makes no sense for a unit declared absent",
        );
    }

    fn check_refused_units(spec_json: &str, want: &str) {
        let problems = crate::model::declaration::tests::problems(&format!(
            r#"{{"schema": 1, "units": {{"a.service": {spec_json}}}}}"#
        ));
        assert!(problems.iter().any(|p| p.contains(want)), "{problems:?}");
    }

    #[test]
    fn a_restart_owed_since_an_earlier_run_is_planned_until_settled() {
        let owed = Observed {
            owed: ["/etc/app.conf".to_string()].into(),
            ..loaded("active", "enabled")
        };
        let owned = Entry::created();
        for (spec, want) in [
            (
                r#"{"active": true, "restart_on": ["/etc/app.conf"]}"#,
                "~ restart (/etc/app.conf changed)",
            ),
            (
                r#"{"active": true, "reload_on": ["/etc/app.conf"]}"#,
                "~ reload (/etc/app.conf changed)",
            ),
            // Stopped: no process runs the old file.
            (
                r#"{"active": false, "restart_on": ["/etc/app.conf"]}"#,
                "~ stop",
            ),
        ] {
            assert_eq!(plan(spec, owed.clone(), Some(&owned), &[]), want, "{spec}");
        }
        let d = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/app.conf": {"content": ""},
                "/etc/b.conf": {"content": ""}},
                "units": {"a.service": {"restart_on": ["/etc/app.conf"]},
                          "b.service": {"reload_on": ["/etc/app.conf", "/etc/b.conf"]},
                          "c.service": {"state": "absent"}}}"#,
        )
        .unwrap();
        let files = ["/etc/app.conf".to_string()].into();
        assert_eq!(
            owing(&d, &files),
            [
                ("a.service", "/etc/app.conf"),
                ("b.service", "/etc/app.conf")
            ]
        );
        assert!(still_owed(&d, "b.service", "/etc/b.conf"));
        assert!(!still_owed(&d, "a.service", "/etc/b.conf"));
        assert!(!still_owed(&d, "c.service", "/etc/app.conf"));
    }

    #[test]
    fn an_instance_of_a_declared_template_and_a_unit_whose_drop_in_changed() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "units": {"web@.service": {"content": "[Service]\n"},
                "web@a.service": {"enabled": true, "active": true}, "db@a.service": {"active": true}}}"#,
        )
        .unwrap();
        let mut cx = RunContext::new(&d, false);
        let not_found = Observed {
            load: Some(LoadState::NotFound),
            ..Observed::default()
        };
        let details = |cx: &RunContext, key: &str, obs: &Observed| match Units::plan(
            cx,
            key,
            d.units.get(key),
            Some(obs),
            None,
        ) {
            Step::Change(c) => c.details.join(", "),
            Step::Fail(e) => format!("fail: {e}"),
            _ => "other".into(),
        };
        // Not loaded yet: its template is written and the manager reloaded before the start.
        assert_eq!(details(&cx, "web@a.service", &not_found), "enable, start");
        assert!(details(&cx, "db@a.service", &not_found)
            .starts_with("fail: unit db@a.service is not loaded"));
        // Running when its template is rewritten: restarted to take it.
        let stale = Observed {
            template_differs: true,
            ..loaded("active", "enabled")
        };
        assert_eq!(
            details(&cx, "web@a.service", &stale),
            "restart (its template changed)"
        );
        // Its unit file written by the files kind in this run: loaded once the manager reloads.
        cx.facts.files.unit_config = ["db@a.service".to_string()].into();
        assert_eq!(details(&cx, "db@a.service", &not_found), "start");
        // Running when a drop-in of its template changed: restarted to take it.
        cx.facts.files.unit_config = ["web@.service".to_string()].into();
        assert_eq!(
            details(&cx, "web@a.service", &loaded("active", "enabled")),
            "restart (a unit file or drop-in of it changed)"
        );
    }

    #[test]
    fn release_restores_an_adopted_units_state() {
        let d = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let owned = Entry::adopted(Some(Original {
            enabled: true,
            active: true,
            file_backup: None,
        }));
        let Step::Change(c) = Units::plan(
            &cx,
            "a.service",
            None,
            Some(&loaded("inactive", "disabled")),
            Some(&owned),
        ) else {
            panic!("expected a change");
        };
        assert_eq!(
            c.op,
            Op {
                file: FileChange::Keep,
                enablement: Enablement::Enable,
                activation: Activation::Start
            }
        );
        let created = Entry::created();
        let obs = Observed {
            file: Some(b"x".to_vec()),
            ..loaded("active", "enabled")
        };
        let Step::Change(c) = Units::plan(&cx, "a.service", None, Some(&obs), Some(&created))
        else {
            panic!("expected a change");
        };
        assert_eq!(
            c.op,
            Op {
                file: FileChange::Remove,
                enablement: Enablement::Disable,
                activation: Activation::Stop
            }
        );
    }

    #[test]
    fn skipped_when_its_package_failed() {
        let d = parse_with_defaults(r#"{"schema": 1, "packages": {"web": {}}, "units": {"web.service": {"package": "web", "active": true}}}"#).unwrap();
        let mut cx = RunContext::new(&d, false);
        cx.facts.packages.failed = ["web".to_string()].into();
        let step = Units::plan(
            &cx,
            "web.service",
            d.units.get("web.service"),
            Some(&Observed::default()),
            None,
        );
        assert!(matches!(step, Step::Skip(ref why) if why.contains("package web failed")));
    }

    /// The ledger's digests, pinned (a unit a package ships, one declared absent, unicode and
    /// secret content, lists), and one written out byte by byte.
    #[test]
    fn digests_are_pinned_to_their_canonical_encoding() {
        let unit =
            |present, enabled, active, content: Option<&str>, restart: &[&str], reload: &[&str]| {
                Spec {
                    present,
                    enabled,
                    active,
                    content: content.map(str::to_string),
                    restart_on: restart.iter().map(|s| s.to_string()).collect(),
                    reload_on: reload.iter().map(|s| s.to_string()).collect(),
                    package: None,
                    secret: false,
                    restart_when_stale: false,
                }
            };
        let shipped = unit(true, None, None, None, &[], &[]);
        let secret = Spec {
            secret: true,
            package: Some("app".into()),
            restart_when_stale: true,
            ..unit(
                true,
                Some(false),
                None,
                Some("[Service]\nEnvironment=TOKEN=s3cret \u{2713}\nExecStart=/bin/true\n"),
                &["/etc/a", "/etc/\u{e9}.conf"],
                &["/etc/owned"],
            )
        };
        for (spec, hex) in [
            (
                unit(
                    true,
                    Some(true),
                    Some(true),
                    Some("[Service]\nExecStart=/bin/true\n"),
                    &[],
                    &[],
                ),
                "384a7279967b5777e3e8ff1347ae787563004ac35dbbd70765cc3558f9da5b3e",
            ),
            (
                shipped.clone(),
                "a4230303ca3bf32e209216d2c9efa16e75c7ee82df792678ff394d9ee599d653",
            ),
            (
                unit(false, None, None, None, &[], &[]),
                "a81ef8a78daa3a23a9579055aea67322d2e4d3552fbd1bbe6ddc47a4220123ea",
            ),
            (
                secret,
                "4d9bba4c98b4b4acfc6d7affd6b4a7c17e2d222897e994e55f3c29bc8454b2f8",
            ),
        ] {
            assert_eq!(digest(&spec).to_string(), hex, "{spec:?}");
        }
        // present, enabled none, active none, content none, two empty lists.
        let by_hand = b"units\x00\x01\x01\x00\x00\x00\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
        assert_eq!(
            digest(&shipped),
            Digest::Sha256(crate::util::codec::sha256(by_hand))
        );
    }
}
