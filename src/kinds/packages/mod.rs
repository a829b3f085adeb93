//! pacman packages. One `pacman -Qi` observes them all; missing ones install in one
//! `pacman -S --needed` (or a full `-Syu` when the declaration asks: never a partial upgrade), and
//! removals go in one `pacman -Rs`. Only packages the host installed are removed on release.
//! Declared packages are kept explicitly installed, so no `-Rs` (the host's or a person's) takes
//! one away as a dependency nobody needs any more. A full upgrade takes the keyrings first, alone;
//! a transaction that would not fit on disk is not started; `cache_keep` prunes pacman's cache.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use super::pacman::{pacman_failed, pacman_paths, target};
use super::{
    batch_then_each, query_by_halves, Action, Change, Env, Hints, Kind, KindError, LedgerAfter,
    Observations, Outcome, Place, RunContext, Step, STOPPING,
};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::spec::packages::{digest, Packages, Spec};
use crate::model::spec::KindSpec;
use crate::os::exec::{CommandError, Failure};
use crate::store::{Digest, Entry, Ledger, Origin};
use crate::tools::pacman::{self, InstallReason, Pacman, SyncInfo};
use crate::util::progress::Event;
use crate::util::sorted;

#[derive(Debug, PartialEq)]
pub enum Observed {
    Installed {
        version: String,
        /// pacman's install reason: explicitly installed, or only as a dependency.
        explicit: bool,
        /// Installed packages that depend on it (`Required By`).
        required_by: Vec<String>,
    },
    Missing,
}

#[derive(Debug, PartialEq)]
pub enum Op {
    Install,
    /// `pacman -D --asexplicit`: a declared package installed as a dependency.
    MarkExplicit,
    Remove,
    /// `pacman -D --asdeps`: an adopted package goes back to being a dependency on release.
    MarkDependency,
    Forget,
}

/// What packages tell later kinds about a run.
#[derive(Debug, Default)]
pub struct Facts {
    /// Packages that failed to install in this run: units naming them are skipped.
    pub failed: BTreeSet<String>,
}

impl Kind for Packages {
    // One pacman transaction for the kind: a package removed in one chunk may be needed by one
    // removed in a later chunk, which pacman refuses apart.
    const APPLIED_IN_CHUNKS: bool = false;
    type Observed = Observed;
    type Op = Op;
    type Facts = Facts;

    fn digest_observed(spec: &Spec, _: Option<&Observed>) -> Digest {
        Self::digest(spec)
    }

    fn observe(
        env: &Env,
        _cx: &RunContext,
        keys: &[&str],
    ) -> Result<Observations<Observed>, KindError> {
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let args = target(env)?.query_info();
        let results = query_by_halves(env.runner, "`pacman -Qi`", keys, |batch| {
            let observing = |error| pacman_failed("observe", error);
            let output = env
                .runner
                .query(&env.config.pacman, &args, batch)
                .map_err(observing)?;
            // It exits 1 for a name not installed, and for a conf it cannot use.
            let complaint = pacman::parse_messages(&output.stderr).iter().any(|m| {
                !matches!(
                    m,
                    pacman::Message::PackageNotFound(_) | pacman::Message::Warning(_)
                )
            });
            if !Pacman::answered(output.code) || complaint {
                return Err(observing(CommandError {
                    command: "pacman -Qi".into(),
                    failure: Failure::Exit(output.code, output.stderr),
                }));
            }
            let stdout = output.stdout_text();
            let mut installed = pacman::parse_info(&stdout);
            Ok(batch
                .iter()
                .map(|name| match installed.remove(name) {
                    Some(package) => Observed::Installed {
                        version: package.version,
                        explicit: package.reason == InstallReason::Explicit,
                        required_by: package.required_by,
                    },
                    None => Observed::Missing,
                })
                .collect())
        });
        Ok(keys.iter().map(|k| k.to_string()).zip(results).collect())
    }

    fn plan(
        _cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<InstallReason>>,
    ) -> Step<Op, InstallReason> {
        let Some(observed) = observed else {
            return Step::Fail(format!("package {key} was not observed"));
        };
        let installed = matches!(observed, Observed::Installed { .. });
        let dependency = matches!(
            observed,
            Observed::Installed {
                explicit: false,
                ..
            }
        );
        let required_by = match observed {
            Observed::Installed { required_by, .. } => required_by.join(" "),
            Observed::Missing => String::new(),
        };
        let change = |action, detail: &str, intent: Option<Entry<_>>, after, op| {
            Step::Change(Change {
                key: key.to_string(),
                action,
                details: vec![detail.to_string()].into(),
                diff: None,
                intent: intent.map(Box::new),
                backup: None,
                after,
                op,
            })
        };
        let applied = LedgerAfter::Applied(digest(&Spec { present: true }));
        match (desired, installed, owned) {
            // Else a `-Rs` of what needed it would remove it with it.
            (Some(Spec { present: true }), true, owned) if dependency => change(
                Action::Update,
                "installed as a dependency; mark explicitly installed",
                owned
                    .is_none()
                    .then(|| Entry::adopted(Some(InstallReason::Dependency))),
                applied,
                Op::MarkExplicit,
            ),
            (Some(Spec { present: true }), true, Some(_)) => Step::InSync,
            (Some(Spec { present: true }), true, None) => Step::Adopt {
                intent: Entry::adopted(Some(InstallReason::Explicit)),
                backup: None,
            },
            (Some(Spec { present: true }), false, owned) => change(
                Action::Create,
                "install",
                owned.is_none().then(Entry::created),
                applied,
                Op::Install,
            ),
            (Some(Spec { present: false }), true, _) => change(
                Action::Remove,
                "declared absent",
                None,
                LedgerAfter::Disown,
                Op::Remove,
            ),
            (Some(Spec { present: false }), false, None) => Step::InSync,
            (Some(Spec { present: false }), false, Some(_)) => change(
                Action::Remove,
                "already absent",
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
            (None, _, None) => Step::InSync,
            // `-Rs` would fail on every run; pacman removes it once nothing needs it.
            (None, true, Some(e)) if e.origin == Origin::Created && !required_by.is_empty() => {
                change(
                    Action::Update,
                    &format!(
                    "released; still required by {required_by}, so marked installed as a dependency"
                ),
                    None,
                    LedgerAfter::Disown,
                    Op::MarkDependency,
                )
            }
            (None, true, Some(e)) if e.origin == Origin::Created => change(
                Action::Remove,
                "released; mesh-host installed it",
                None,
                LedgerAfter::Disown,
                Op::Remove,
            ),
            (None, true, Some(e)) if e.original.as_deref() == Some(&InstallReason::Dependency) => {
                change(
                    Action::Update,
                    "released; was installed as a dependency before mesh-host, marked so again",
                    None,
                    LedgerAfter::Disown,
                    Op::MarkDependency,
                )
            }
            (None, true, Some(_)) => change(
                Action::Update,
                "released; was installed before mesh-host, left installed",
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
            (None, false, Some(_)) => change(
                Action::Remove,
                "released; already gone",
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
        }
    }

    fn apply(
        env: &Env,
        cx: &RunContext,
        _ledger: &mut Ledger,
        changes: &[Change<Op, InstallReason>],
    ) -> Vec<Outcome> {
        let pick = |op: Op| -> Vec<&str> {
            changes
                .iter()
                .filter(|c| c.op == op)
                .map(|c| c.key.as_str())
                .collect()
        };
        let host_packages = &env.config.identity.package_names;
        let upgrade = cx.declaration.packages_upgrade;
        // Once pacman itself fails (lock held past the wait, timeout, not startable), every later
        // transaction of this run fails the same way without running: retrying would only wait again.
        let pacman_failure: RefCell<Option<KindError>> = RefCell::new(None);
        // Checked before each transaction (never within one): once the host is stopping, the
        // packages of the transactions left wait for the next run.
        let stopped: RefCell<BTreeSet<String>> = RefCell::new(BTreeSet::new());
        // Whether a transaction that may have added to pacman's cache ran (for `cache_keep`).
        let transacted = std::cell::Cell::new(false);
        // `preview`: what an install or upgrade would download, for the room check before it runs.
        let transaction = |step: &'static str,
                           args: &Arguments,
                           preview: Option<&Arguments>,
                           names: &[&str]|
         -> Vec<Result<(), KindError>> {
            if !names.is_empty() && (env.interrupted)() {
                stopped
                    .borrow_mut()
                    .extend(names.iter().map(|n| n.to_string()));
                return names
                    .iter()
                    .map(|_| Err(STOPPING.to_string().into()))
                    .collect();
            }
            let (args, preview) = match target(env) {
                Ok(pacman) => (args(&pacman), preview.map(|p| p(&pacman))),
                Err(e) => return names.iter().map(|_| Err(e.clone().into())).collect(),
            };
            let mut results = batch_then_each(env.runner, names, |batch| {
                if let Some(e) = pacman_failure.borrow().as_ref() {
                    return Err(e.clone());
                }
                if let Some(preview) = &preview {
                    check_room(env, preview, batch)?;
                    transacted.set(true);
                }
                run_waiting_for_lock(env, step, &args, batch).map_err(|e| match e {
                    TransactionError::Packages(e) => e,
                    TransactionError::Pacman(e) => pacman_failure.borrow_mut().insert(e).clone(),
                })
            });
            // Cut short by the host stopping: the rest were not attempted.
            let left = &names[results.len()..];
            stopped
                .borrow_mut()
                .extend(left.iter().map(|n| n.to_string()));
            results.extend(left.iter().map(|_| Err(STOPPING.to_string().into())));
            results
        };
        let mut results: BTreeMap<&str, Result<(), KindError>> = BTreeMap::new();
        // Marked explicit before any removal, so the `-Rs` cannot take a declared package along.
        let names = pick(Op::MarkExplicit);
        let outcomes = transaction(
            "mark explicit",
            &|p| p.mark(InstallReason::Explicit),
            None,
            &names,
        );
        results.extend(names.into_iter().zip(outcomes));

        // What would be installed is checked against pacman's own metadata first: a package that
        // replaces, conflicts with or provides the host's would take the host over.
        let wanted = pick(Op::Install);
        let (checked, unknown) = check_sync_packages(env, &wanted, host_packages, &mut results);
        let install_preview = |pacman: &Pacman| pacman.install_preview();
        if upgrade && !(checked.is_empty() && unknown.is_empty()) {
            // The keyrings first, in their own transaction: packages signed by a packager the
            // installed keyring does not know yet would fail the whole upgrade.
            if !(env.interrupted)() {
                match keyrings_first(env) {
                    Ok(()) => {}
                    Err(TransactionError::Pacman(e)) => *pacman_failure.borrow_mut() = Some(e),
                    Err(TransactionError::Packages(e)) => env.runner.note(format!(
                        "the keyrings' own transaction before the full upgrade failed; the \
                         upgrade went on without it: {e}"
                    )),
                }
            }
            // The host's package is never upgraded with the rest (a static binary with no
            // dependencies, so holding it back is no partial upgrade).
            let full_upgrade = |pacman: &Pacman| pacman.upgrade(host_packages);
            let upgrade_preview = |pacman: &Pacman| pacman.upgrade_preview(host_packages);
            let outcomes = if checked.is_empty() {
                // Only packages the stale databases do not know: upgrade (which refreshes them)
                // first, then check and install those below.
                let outcome = match target(env) {
                    Ok(pacman) if pacman_failure.borrow().is_none() => {
                        check_room(env, &upgrade_preview(&pacman), &[]).and_then(|()| {
                            transacted.set(true);
                            run_waiting_for_lock(env, "upgrade", &full_upgrade(&pacman), &[])
                                .map_err(|e| match e {
                                    TransactionError::Packages(e) | TransactionError::Pacman(e) => {
                                        e
                                    }
                                })
                        })
                    }
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.into()),
                };
                if let Err(e) = outcome {
                    *pacman_failure.borrow_mut() = Some(e);
                }
                Vec::new()
            } else {
                transaction("upgrade", &full_upgrade, Some(&upgrade_preview), &checked)
            };
            results.extend(checked.iter().copied().zip(outcomes));
            if !unknown.is_empty() {
                let failure = pacman_failure.borrow().clone();
                if let Some(e) = failure {
                    for name in &unknown {
                        results.insert(name, Err(e.clone()));
                    }
                } else {
                    // The databases are fresh now and the system upgraded: `-S` is no partial upgrade.
                    let (checked, unknown) =
                        check_sync_packages(env, &unknown, host_packages, &mut results);
                    for name in unknown {
                        results.insert(name, Err(not_found(name).into()));
                    }
                    let outcomes = transaction(
                        "install",
                        &|p| p.install(),
                        Some(&install_preview),
                        &checked,
                    );
                    results.extend(checked.into_iter().zip(outcomes));
                }
            }
        } else {
            for name in unknown {
                results.insert(name, Err(not_found(name).into()));
            }
            let outcomes = transaction(
                "install",
                &|p| p.install(),
                Some(&install_preview),
                &checked,
            );
            results.extend(checked.into_iter().zip(outcomes));
        }

        let removals = pick(Op::Remove);
        let removals = check_removals(env, &removals, host_packages, &mut results);
        let outcomes = transaction("remove", &|p| p.remove(), None, &removals);
        results.extend(removals.into_iter().zip(outcomes));
        let names = pick(Op::MarkDependency);
        let outcomes = transaction(
            "mark dependency",
            &|p| p.mark(InstallReason::Dependency),
            None,
            &names,
        );
        results.extend(names.into_iter().zip(outcomes));
        if let (Some(keep), true) = (env.config.cache_keep, transacted.get()) {
            match prune_cache(env, keep) {
                Ok(Pruned { files: 0, .. }) => {}
                Ok(pruned) => env.runner.note(format!(
                    "cache_keep {keep}: removed {} older package files from {}, {} freed",
                    pruned.files,
                    pruned.dir.display(),
                    size(pruned.bytes)
                )),
                Err(e) => env
                    .runner
                    .note(format!("cache_keep {keep}: the cache was not pruned: {e}")),
            }
        }
        let stopped = stopped.into_inner();
        changes
            .iter()
            .map(|c| match results.get(c.key.as_str()) {
                _ if stopped.contains(&c.key) => Outcome::Stopped,
                Some(Err(e)) => Outcome::Failed(e.clone()),
                _ => Outcome::Done,
            })
            .collect()
    }

    fn note(
        _: &Declaration,
        facts: &mut Facts,
        change: &Change<Op, InstallReason>,
        outcome: &Outcome,
    ) {
        if change.op == Op::Install && *outcome != Outcome::Done {
            facts.failed.insert(change.key.clone());
        }
    }

    fn called_by_facts(_: &super::Facts) -> bool {
        false
    }

    fn take_refused(_: &mut Facts) -> Vec<(String, String)> {
        Vec::new()
    }

    fn owing<'d>(_: &'d Declaration, _: &super::Facts) -> Vec<(&'d str, &'d str)> {
        Vec::new()
    }

    fn pacnew(_: &Env, _: &Declaration, _: &Ledger, _: &mut QuietDirs) -> Vec<Pacnew> {
        Vec::new()
    }

    /// pacman's local database: a transaction, ours or anyone's, changes it, and may have
    /// changed any declared or owned package.
    fn watch<'d>(declaration: &'d Declaration, ledger: &'d Ledger, hints: &mut dyn Hints<'d>) {
        let declared = declaration.packages.keys().map(String::as_str);
        for name in sorted::union(declared, ledger.owned_keys::<Packages>()) {
            hints.any(Place::PacmanDb, name);
        }
    }
}

/// pacman's arguments for one of the transactions, given the target.
type Arguments<'a> = dyn Fn(&Pacman) -> Vec<String> + 'a;

/// Looks `names` up in the sync databases with one `pacman -Si`. Those that replace, conflict with,
/// provide or depend on a host package fail here with that reason (so does every name, if pacman cannot
/// answer); returns the names that may be installed, and those no sync database has.
fn check_sync_packages<'n>(
    env: &Env,
    names: &[&'n str],
    host_packages: &[String],
    results: &mut BTreeMap<&'n str, Result<(), KindError>>,
) -> (Vec<&'n str>, Vec<&'n str>) {
    if names.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let output = target(env).map_err(KindError::from).and_then(|tool| {
        let output = env
            .runner
            .query(&env.config.pacman, &tool.sync_info(), names)
            .map_err(|e| pacman_failed("check what would be installed", e))?;
        // Its exit status counts the names not found; any other complaint is a real failure.
        let complaint = pacman::parse_messages(&output.stderr).iter().any(|m| {
            !matches!(
                m,
                pacman::Message::PackageNotFound(_) | pacman::Message::Warning(_)
            )
        });
        match output.code {
            Some(_) if !complaint => Ok((output.stdout_text(), output.stderr)),
            code if pacman::download_sandbox(&output.stderr).is_some() => Err(pacman_failed(
                "check what would be installed",
                CommandError {
                    command: "pacman -Si".into(),
                    failure: Failure::Exit(code, output.stderr),
                },
            )),
            code => Err(KindError::from(format!(
                "`pacman -Si` (checking what would be installed) exited with status {code:?}: {}",
                output.stderr.trim()
            ))),
        }
    });
    let (stdout, stderr) = match output {
        Ok(output) => output,
        Err(e) => {
            for name in names {
                results.insert(name, Err(e.clone()));
            }
            return (Vec::new(), Vec::new());
        }
    };
    let infos = pacman::parse_sync_info(&stdout);
    let missing = pacman::not_found(&stderr);
    let (mut checked, mut unknown) = (Vec::new(), Vec::new());
    for &name in names {
        let Some(info) = infos.iter().find(|i| i.name == name) else {
            // Not found, as pacman says; a tool that says nothing of it leaves the judgement
            // to the transaction (real pacman always says one or the other).
            if missing.contains(name) {
                unknown.push(name);
            } else {
                checked.push(name);
            }
            continue;
        };
        match takes_over(info, host_packages) {
            Some(why) => {
                results.insert(name, Err(why.into()));
            }
            None => checked.push(name),
        }
    }
    (checked, unknown)
}

/// Of `names` to remove with `-Rs`, those whose removal would take a host package along (one
/// installed as their dependency) fail with that reason, asked of `pacman -Rsp` (which changes
/// nothing); returns the rest. Each is asked alone when the batch would take a host package or
/// pacman refuses the batch (one name's broken dependency hides what the others would remove).
fn check_removals<'n>(
    env: &Env,
    names: &[&'n str],
    host_packages: &[String],
    results: &mut BTreeMap<&'n str, Result<(), KindError>>,
) -> Vec<&'n str> {
    if names.is_empty() {
        return Vec::new();
    }
    let removed_hosts = |batch: &[&str]| -> Option<Vec<String>> {
        let args = target(env).ok()?.removal_preview();
        let output = env.runner.query(&env.config.pacman, &args, batch).ok()?;
        (output.code == Some(0)).then(|| {
            pacman::parse_removal(&output.stdout_text())
                .into_iter()
                .filter(|name| host_packages.iter().any(|h| h == name))
                .map(str::to_string)
                .collect()
        })
    };
    match removed_hosts(names) {
        Some(hosts) if hosts.is_empty() => return names.to_vec(),
        None if names.len() == 1 => return names.to_vec(),
        _ => {}
    }
    let mut allowed = Vec::new();
    for &name in names {
        match removed_hosts(&[name]).and_then(|hosts| hosts.into_iter().next()) {
            Some(host) => {
                results.insert(
                    name,
                    Err(KindError::from(format!(
                        "refused: removing {name} with its dependencies would remove {host}, \
                         the host's own package (installed as its dependency; pacman -Rsp); \
                         mesh-host never manages itself"
                    ))),
                );
            }
            None => allowed.push(name),
        }
    }
    allowed
}

fn not_found(name: &str) -> String {
    format!(
        "target not found: {name} (no sync database has a package of that name; mesh-host \
         declares packages by name, not groups or provisions)"
    )
}

/// Why installing `info` would take a host package over, if it would.
fn takes_over(info: &SyncInfo, host_packages: &[String]) -> Option<String> {
    let names = |entries: &[&str]| -> Option<String> {
        entries.iter().find_map(|entry| {
            let bare = entry.split(['<', '>', '=']).next().unwrap_or(entry);
            host_packages
                .iter()
                .find(|h| h.as_str() == bare)
                .map(|h| h.to_string())
        })
    };
    for (relation, entries, effect) in [
        ("replaces", &info.replaces, "would remove the host"),
        ("conflicts with", &info.conflicts, "would remove the host"),
        ("provides", &info.provides, "would stand in for the host"),
        // --ignore or not: `--noconfirm` answers yes to installing an ignored dependency.
        (
            "depends on",
            &info.depends,
            "would install or upgrade the host",
        ),
    ] {
        if let Some(host) = names(entries) {
            return Some(format!(
                "refused: {} {relation} {host}, the host's own package (pacman -Si); installing \
                 it {effect}; mesh-host never manages itself",
                info.name
            ));
        }
    }
    None
}

/// Why a pacman transaction failed.
enum TransactionError {
    /// pacman refused the packages (one not found, a dependency broken): each alone may succeed.
    Packages(KindError),
    /// pacman could not run at all (lock held past the wait, timeout, not startable).
    Pacman(KindError),
}

/// Runs a transaction, waiting (bounded) while someone else holds pacman's database lock. A lock
/// no process holds is stale: reported at once, by name, rather than waited on; the lock file is
/// never removed unless `pacman_remove_stale_lock` allows it and it also predates this boot
/// (only then is it sure that no transaction is half done under it).
fn run_waiting_for_lock(
    env: &Env,
    step: &'static str,
    args: &[String],
    names: &[&str],
) -> Result<(), TransactionError> {
    let wait = env.config.pacman_lock_wait;
    let deadline = env.clock.mono_ms().saturating_add(wait.as_millis() as u64);
    // pacman closes its lock a moment before it unlinks it: one sighting of a lock nobody
    // holds is checked again before it is called stale.
    let mut unheld_before = false;
    // Said once per holder, not at every retry (twice a second for minutes).
    let mut said_busy: Option<String> = None;
    let mut again = false;
    loop {
        let ran = match again {
            false => env.runner.transaction(&env.config.pacman, args, names),
            true => env
                .runner
                .transaction_again(&env.config.pacman, args, names),
        };
        let e = match ran {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        again = true;
        let Some(lock) = locked_by(&e) else {
            return Err(match pacman_failed(step, e) {
                e @ KindError::Command {
                    error:
                        CommandError {
                            failure: Failure::Exit(Some(_), _),
                            ..
                        },
                    ..
                } => TransactionError::Packages(e),
                e => TransactionError::Pacman(e),
            });
        };
        let state = match lock_state(env, &lock) {
            Ok(state) => state,
            Err(why) => LockState::Held(format!("a process it could not check ({why})")),
        };
        match state {
            LockState::Gone => unheld_before = false,
            LockState::Held(by) if env.clock.mono_ms() < deadline => {
                unheld_before = false;
                if said_busy.as_ref() != Some(&by) {
                    log::info!("pacman is busy: its database lock {lock} is held by {by}; waiting");
                    let what = format!("pacman's database lock {lock}, held by {by}");
                    env.runner.tell(|| Event::Waiting(&what));
                    said_busy = Some(by);
                }
            }
            LockState::Held(by) => {
                return Err(TransactionError::Pacman(KindError::from(format!(
                    "pacman is busy: its database lock {lock} was held by {by} for more than {} \
                     s; it was left alone",
                    wait.as_secs()
                ))))
            }
            LockState::Unheld { predates_boot }
                if predates_boot && env.config.pacman_remove_stale_lock =>
            {
                remove_lock(env, &lock).map_err(|e| TransactionError::Pacman(e.into()))?;
                env.runner.note(format!(
                    "removed pacman's stale database lock {lock}: no process had it open and it \
                     predated this boot (pacman_remove_stale_lock)"
                ));
                continue;
            }
            LockState::Unheld { predates_boot } if predates_boot || unheld_before => {
                let why = if predates_boot {
                    "no process has it open and it predates this boot"
                } else {
                    "no process has it open"
                };
                return Err(TransactionError::Pacman(KindError::from(format!(
                    "pacman's database lock {lock} is stale: {why}; it was left alone (remove it \
                     if no package manager is running; pacman_remove_stale_lock lets mesh-host \
                     remove a stale lock older than the boot)"
                ))));
            }
            LockState::Unheld { .. } => unheld_before = true,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What is behind a `db.lck` pacman reported.
enum LockState {
    /// Gone since pacman reported it: try again.
    Gone,
    /// Held by these processes (or assumed held when they could not be checked).
    Held(String),
    Unheld {
        predates_boot: bool,
    },
}

/// The lock pacman named, as this process reaches it (under `--root`, pacman 6 names it inside
/// the root, pacman 7 with the root in front: `Printed`). Opened through the no-symlink walk.
fn lock_parent(env: &Env, lock: &str) -> Result<Option<crate::os::fsutil::Parent>, String> {
    let slash = std::path::Path::new("/");
    let lock = match env.offline {
        true => pacman_paths(env)?.printed.seen(std::path::Path::new(lock)),
        false => PathBuf::from(lock),
    };
    // Walked from the root, as anything in it is.
    let (root, inside) = match lock.strip_prefix(env.root) {
        Ok(inside) => (env.root, slash.join(inside)),
        Err(_) => (slash, lock),
    };
    let dir = crate::os::fsutil::Dir::open(root).map_err(|e| format!("{}: {e}", root.display()))?;
    crate::os::fsutil::walk_to_parent(&dir, &inside, false).map_err(|e| e.to_string())
}

fn lock_state(env: &Env, lock: &str) -> Result<LockState, String> {
    let at = |e: std::io::Error| format!("{lock}: {e}");
    let Some(parent) = lock_parent(env, lock)? else {
        return Ok(LockState::Gone);
    };
    let Some(identity) = parent.dir.identity(&parent.name).map_err(at)? else {
        return Ok(LockState::Gone);
    };
    let holders = crate::os::lockfile::holders(&identity);
    if !holders.is_empty() {
        let list: Vec<String> = holders
            .iter()
            .map(|h| format!("pid {} ({})", h.pid, h.name))
            .collect();
        return Ok(LockState::Held(list.join(", ")));
    }
    let predates_boot =
        crate::os::lockfile::boot_time().is_some_and(|boot| identity.modified < boot);
    Ok(LockState::Unheld { predates_boot })
}

fn remove_lock(env: &Env, lock: &str) -> Result<(), String> {
    let parent = lock_parent(env, lock)?.ok_or_else(|| format!("{lock}: its directory is gone"))?;
    parent
        .dir
        .remove(&parent.name)
        .map(drop)
        .map_err(|e| format!("pacman's stale database lock {lock} could not be removed: {e}"))
}

/// The lock file named in pacman's "unable to lock database" error, if that is the failure.
fn locked_by(error: &CommandError) -> Option<String> {
    match &error.failure {
        Failure::Exit(_, stderr) => pacman::locked_database(stderr).map(str::to_string),
        _ => None,
    }
}

/// The keyrings' own transaction before a full upgrade (`-Sy --needed` of the installed
/// `*-keyring` packages): Arch's advice for a keyring older than the packages' signatures. The
/// full upgrade follows in the same run, so the refresh is never left without its `-u`.
fn keyrings_first(env: &Env) -> Result<(), TransactionError> {
    let pacman = target(env).map_err(|e| TransactionError::Pacman(e.into()))?;
    let output = env
        .runner
        .query(&env.config.pacman, &pacman.installed_names(), &[])
        .map_err(|e| TransactionError::Pacman(pacman_failed("list the keyrings", e)))?;
    // It exits 1 when nothing is installed at all.
    if !Pacman::answered(output.code) {
        return Err(TransactionError::Packages(KindError::from(format!(
            "`pacman -Qq` (listing the keyrings) exited with status {:?}: {}",
            output.code,
            output.stderr.trim()
        ))));
    }
    let stdout = output.stdout_text();
    let keyrings = pacman::keyrings(&pacman::parse_names(&stdout));
    if keyrings.is_empty() {
        return Ok(());
    }
    run_waiting_for_lock(
        env,
        "upgrade the keyrings first",
        &pacman.keyrings_first(),
        &keyrings,
    )
}

/// Fails `names` (all of them: the transaction is not started) when what it would download and
/// install does not fit on the filesystems of pacman's cache and root with `disk_margin_mib` to
/// spare. The sizes are pacman's own: `-Sp` for the downloads (0 for a file already in the
/// cache), `-Si` and `-Qi` for the installed sizes of the new and the replaced versions. A
/// preview pacman refuses (a name it does not know) is left to the transaction to report.
fn check_room(env: &Env, preview: &[String], names: &[&str]) -> Result<(), KindError> {
    let pacman = target(env)?;
    let query = |args: &[String], names: &[&str]| {
        env.runner
            .query(&env.config.pacman, args, names)
            .map_err(|e| pacman_failed("check the room on disk", e))
    };
    let output = query(preview, names)?;
    if output.code != Some(0) {
        return Ok(());
    }
    let stdout = output.stdout_text();
    let taken = pacman::parse_preview(&stdout);
    if taken.is_empty() {
        return Ok(());
    }
    let taken_names: Vec<&str> = taken.iter().map(|p| p.name).collect();
    let download: u64 = taken.iter().map(|p| p.download).sum();
    let new = query(&pacman.sync_info(), &taken_names)?.stdout_text();
    let old = query(&pacman.query_info(), &taken_names)?.stdout_text();
    let (new, old) = (
        pacman::parse_installed_sizes(&new),
        pacman::parse_installed_sizes(&old),
    );
    let install = new
        .values()
        .sum::<u64>()
        .saturating_sub(old.values().sum::<u64>());
    let paths = pacman_paths(env)?;
    let cache = paths.path(pacman::parse_cache_dir, "Cache Dirs")?;
    let root = paths.path(pacman::parse_root, "Root")?;
    let filesystem = |path: &std::path::Path| {
        crate::os::fsutil::Dir::open(path)
            .and_then(|dir| Ok((dir.device()?, dir.free_space()?)))
            .map_err(|e| {
                KindError::from(format!(
                    "checking the room on disk: {}: {e}",
                    path.display()
                ))
            })
    };
    let (cache_device, cache_free) = filesystem(&cache)?;
    let (root_device, root_free) = filesystem(&root)?;
    let needs = if cache_device == root_device {
        vec![(
            format!("{} (pacman's cache and root)", cache.display()),
            download + install,
            cache_free,
        )]
    } else {
        vec![
            (
                format!("{} (pacman's cache)", cache.display()),
                download,
                cache_free,
            ),
            (
                format!("{} (pacman's root)", root.display()),
                install,
                root_free,
            ),
        ]
    };
    let margin = env.config.disk_margin_bytes;
    let short: Vec<String> = needs
        .into_iter()
        .filter(|(_, need, free)| need.saturating_add(margin) > *free)
        .map(|(place, need, free)| {
            format!(
                "{} missing on the filesystem of {place}: {} needed with the margin of {} \
                 (disk_margin_mib), {} free",
                size(need.saturating_add(margin) - free),
                size(need.saturating_add(margin)),
                size(margin),
                size(free)
            )
        })
        .collect();
    if short.is_empty() {
        return Ok(());
    }
    Err(KindError::from(format!(
        "not enough room on disk for {} ({} to download, {} more installed; pacman -Sp, -Si): \
         {}; nothing was changed",
        taken_names.join(" "),
        size(download),
        size(install),
        short.join("; ")
    )))
}

/// A size for people, in pacman's binary units.
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1 << 10 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        b => format!("{:.2} GiB", b as f64 / (1 << 30) as f64),
    }
}

/// What `prune_cache` removed.
struct Pruned {
    dir: PathBuf,
    files: usize,
    bytes: u64,
}

/// `cache_keep`: the newest `keep` versions of each package stay in pacman's cache, older ones
/// go with their signatures (what `paccache -rk N` does). Files not named as pacman names them
/// are left alone.
fn prune_cache(env: &Env, keep: usize) -> Result<Pruned, String> {
    let path = pacman_paths(env)?.path(pacman::parse_cache_dir, "Cache Dirs")?;
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let dir = crate::os::fsutil::Dir::open(&path).map_err(at)?;
    let names = dir
        .names_where(|name| name.to_str().and_then(pacman::parse_cache_file).is_some())
        .map_err(at)?;
    let files: Vec<(&str, pacman::CacheFile)> = names
        .iter()
        .filter_map(|n| n.to_str())
        .filter_map(|n| Some((n, pacman::parse_cache_file(n)?)))
        .collect();
    let mut by_package: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (_, file) in &files {
        let versions = by_package.entry(file.name).or_default();
        if !versions.contains(&file.version) {
            versions.push(file.version);
        }
    }
    let mut pruned = Pruned {
        dir: path.clone(),
        files: 0,
        bytes: 0,
    };
    for (package, mut versions) in by_package {
        versions.sort_by(|a, b| pacman::vercmp(b, a));
        for old in versions.iter().skip(keep) {
            for (name, _) in files
                .iter()
                .filter(|(_, f)| f.name == package && f.version == *old)
            {
                let name = std::ffi::OsStr::new(name);
                let bytes = dir.stat(name).map_err(at)?.map_or(0, |s| s.size);
                if dir.remove(name).map_err(at)? {
                    pruned.files += 1;
                    pruned.bytes += bytes;
                }
            }
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::declaration::tests::{check_refused, problems};

    #[test]
    fn names_follow_pacmans_rules_and_never_become_options() {
        for (name, message) in [
            ("-Syu", "starts with '-'"),
            ("--config=/tmp/x", "starts with '-'"),
            (".hidden", "starts with '.'"),
            ("a b", "whitespace"),
            ("nginx;rm", "contains ';'"),
            ("", "empty"),
        ] {
            let json = format!(
                r#"{{"schema": 1, "packages": {{{}: {{}}}}}}"#,
                serde_json::Value::String(name.into())
            );
            check_refused(&json, &[message]);
        }
        assert!(problems(r#"{"schema": 1, "packages": {"lib32-gcc-libs": {}, "gtk+3": {}, "x@y_z.1": {"state": "absent"}}}"#).is_empty());
    }

    #[test]
    fn refuses_the_hosts_own_package() {
        check_refused(
            r#"{"schema": 1, "packages": {"nox-mesh-host": {"state": "absent"}}}"#,
            &[
                "packages[\"nox-mesh-host\"]: refused",
                "the host's own package",
            ],
        );
        assert!(problems(
            r#"{"schema": 1, "packages": {"nox-mesh-hostile": {}, "mesh-host": {}, "Nox-Mesh-Host": {}}}"#
        )
        .is_empty());
    }

    #[test]
    fn sync_info_shows_what_would_take_the_host_over() {
        let host = vec!["nox-mesh-host".to_string()];
        for g in crate::tools::generations("pacman") {
            let text = g.read("pacman-Si.txt");
            let infos = pacman::parse_sync_info(&text);
            let why = takes_over(&infos[0], &host).unwrap();
            assert!(
                why.contains("mesh-usurper replaces nox-mesh-host, the host's own package"),
                "{}: {why}",
                g.name
            );
            assert_eq!(takes_over(&infos[1], &host), None, "{}", g.name);
        }
        for (field, entry, relation) in [
            ("conflicts", "nox-mesh-host>=1.0", "conflicts with"),
            ("provides", "nox-mesh-host", "provides"),
            ("depends", "nox-mesh-host>1.0", "depends on"),
        ] {
            let mut info = SyncInfo {
                name: "x",
                replaces: vec![],
                conflicts: vec![],
                provides: vec![],
                depends: vec![],
            };
            match field {
                "conflicts" => info.conflicts.push(entry),
                "provides" => info.provides.push(entry),
                _ => info.depends.push(entry),
            }
            let why = takes_over(&info, &host).unwrap();
            assert!(
                why.contains(&format!("x {relation} nox-mesh-host")),
                "{why}"
            );
        }
        // A look-alike is not the host's package.
        let info = SyncInfo {
            name: "x",
            replaces: vec!["nox-mesh-hostile"],
            conflicts: vec!["nox-mesh"],
            provides: vec!["mesh-host"],
            depends: vec!["nox-mesh-host-tools"],
        };
        assert_eq!(takes_over(&info, &host), None);
    }

    fn installed(version: &str, explicit: bool) -> Observed {
        Observed::Installed {
            version: version.into(),
            explicit,
            required_by: Vec::new(),
        }
    }

    /// Installed as a dependency of `by`.
    fn required(version: &str, by: &[&str]) -> Observed {
        Observed::Installed {
            version: version.into(),
            explicit: false,
            required_by: by.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn planner_cases() {
        let d = crate::model::declaration::tests::parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let created = Entry::created();
        let adopted = Entry::adopted(Some(InstallReason::Explicit));
        let by_older_version = Entry::adopted(None);
        let was_dependency = Entry::adopted(Some(InstallReason::Dependency));
        let dependency = installed("1", false);
        let installed = installed("1", true);
        let present = Spec { present: true };
        let absent = Spec { present: false };
        let op = |s: Step<Op, InstallReason>| match s {
            Step::InSync => "in sync".to_string(),
            Step::Adopt { .. } => "adopt".into(),
            Step::Change(c) => format!("{:?} {}", c.op, c.details.join("")),
            Step::Fail(e) | Step::Skip(e) => e,
        };
        let plan = |d, o, e| op(Packages::plan(&cx, "p", d, Some(o), e));
        assert_eq!(
            plan(Some(&present), &Observed::Missing, None),
            "Install install"
        );
        assert_eq!(plan(Some(&present), &installed, None), "adopt");
        assert_eq!(plan(Some(&present), &installed, Some(&created)), "in sync");
        assert_eq!(
            plan(Some(&absent), &installed, None),
            "Remove declared absent"
        );
        assert_eq!(
            plan(None, &installed, Some(&created)),
            "Remove released; mesh-host installed it"
        );
        let needed = required("1", &["web", "db"]);
        assert_eq!(
            plan(None, &needed, Some(&created)),
            "MarkDependency released; still required by web db, so marked installed as a dependency"
        );
        assert_eq!(
            plan(None, &installed, Some(&adopted)),
            "Forget released; was installed before mesh-host, left installed"
        );
        assert_eq!(
            plan(None, &installed, Some(&by_older_version)),
            "Forget released; was installed before mesh-host, left installed"
        );
        assert_eq!(plan(None, &installed, None), "in sync");
        assert_eq!(
            plan(Some(&present), &dependency, None),
            "MarkExplicit installed as a dependency; mark explicitly installed"
        );
        assert_eq!(
            plan(Some(&present), &dependency, Some(&created)),
            "MarkExplicit installed as a dependency; mark explicitly installed"
        );
        assert_eq!(
            plan(None, &installed, Some(&was_dependency)),
            "MarkDependency released; was installed as a dependency before mesh-host, marked so again"
        );
        assert_eq!(
            plan(None, &Observed::Missing, Some(&was_dependency)),
            "Forget released; already gone"
        );
    }

    /// The ledger's digests, pinned: `packages 0x00 0x01` and `present`, hashed.
    #[test]
    fn digests_are_pinned_to_their_canonical_encoding() {
        for (present, hex) in [
            (
                true,
                "36bdd7effe739b2dd6fbe11f951d6e3343f5f9c6c7379ade0ce86fc38c191ccd",
            ),
            (
                false,
                "ad0969de169591205fa8aa12ee1eee72d810c66546bc2a827c00a4d645e5bd27",
            ),
        ] {
            assert_eq!(digest(&Spec { present }).to_string(), hex);
        }
        let by_hand = crate::util::codec::sha256(b"packages\x00\x01\x01");
        assert_eq!(digest(&Spec { present: true }), Digest::Sha256(by_hand));
    }
}
