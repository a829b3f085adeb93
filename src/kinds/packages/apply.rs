//! Applying packages: pacman's transactions in order (mark explicit, install or full upgrade,
//! remove, mark dependency), each batched and retried one name at a time when pacman blames
//! the names; the room on disk checked first; pacman's cache pruned after.

use std::collections::{BTreeMap, BTreeSet};

use super::checks::{check_removals, check_sync_packages, not_found};
use super::lock::{keyrings_first, run_waiting_for_lock, TransactionError};
use super::room::{check_room, prune_cache, size, Pruned};
use super::state::Op;
use crate::kinds::pacman::target;
use crate::kinds::{batch_then_each, Change, Env, KindError, Outcome, RunContext, STOPPING};
use crate::tools::pacman::{InstallReason, Pacman};

/// pacman's arguments for one of the transactions, given the target.
type Arguments<'a> = dyn Fn(&Pacman) -> Vec<String> + 'a;

/// One outcome per change, in order.
pub(super) fn apply(
    env: &Env,
    cx: &RunContext,
    changes: &[Change<Op, InstallReason>],
) -> Vec<Outcome> {
    let pick = |op: Op| -> Vec<&str> {
        (changes.iter())
            .filter(|c| c.op == op)
            .map(|c| c.key.as_str())
            .collect()
    };
    let mut run = Transactions::new(env);
    // Marked explicit before any removal, so the `-Rs` cannot take a declared package along.
    let explicit = |p: &Pacman| p.mark(InstallReason::Explicit);
    run.transaction("mark explicit", &explicit, None, &pick(Op::MarkExplicit));
    run.install(pick(Op::Install), cx.declaration.packages_upgrade);
    let host_packages = &env.config.identity.package_names;
    let removals = check_removals(env, &pick(Op::Remove), host_packages, &mut run.results);
    run.transaction("remove", &|p| p.remove(), None, &removals);
    let dependency = |p: &Pacman| p.mark(InstallReason::Dependency);
    run.transaction(
        "mark dependency",
        &dependency,
        None,
        &pick(Op::MarkDependency),
    );
    run.prune_cache();
    changes
        .iter()
        .map(|c| match run.results.get(c.key.as_str()) {
            _ if run.stopped.contains(&c.key) => Outcome::Stopped,
            Some(Err(e)) => Outcome::Failed(e.clone()),
            _ => Outcome::Done,
        })
        .collect()
}

/// One apply's transactions and what each package's came to.
struct Transactions<'e, 'a, 'n> {
    env: &'e Env<'a>,
    results: BTreeMap<&'n str, Result<(), KindError>>,
    /// Once pacman itself fails (lock held past the wait, timeout, not startable), every later
    /// transaction of this run fails the same way without running: retrying would only wait
    /// again.
    pacman_failure: Option<KindError>,
    /// Checked before each transaction (never within one): once the host is stopping, the
    /// packages of the transactions left wait for the next run.
    stopped: BTreeSet<String>,
    /// Whether a transaction that may have added to pacman's cache ran (for `cache_keep`).
    transacted: bool,
}

impl<'e, 'a, 'n> Transactions<'e, 'a, 'n> {
    fn new(env: &'e Env<'a>) -> Self {
        Transactions {
            env,
            results: BTreeMap::new(),
            pacman_failure: None,
            stopped: BTreeSet::new(),
            transacted: false,
        }
    }

    /// One transaction over `names`. `preview`: what an install or upgrade would download, for
    /// the room check before it runs.
    fn transaction(
        &mut self,
        step: &'static str,
        args: &Arguments,
        preview: Option<&Arguments>,
        names: &[&'n str],
    ) {
        let env = self.env;
        if !names.is_empty() && (env.interrupted)() {
            return self.stop(names);
        }
        let (args, preview) = match target(env) {
            Ok(pacman) => (args(&pacman), preview.map(|p| p(&pacman))),
            Err(e) => return self.fail(names, &e.into()),
        };
        let (failure, transacted) = (&mut self.pacman_failure, &mut self.transacted);
        let results = batch_then_each(env.runner, names, |batch| {
            if let Some(e) = failure.as_ref() {
                return Err(e.clone());
            }
            if let Some(preview) = &preview {
                check_room(env, preview, batch)?;
                *transacted = true;
            }
            run_waiting_for_lock(env, step, &args, batch).map_err(|e| match e {
                TransactionError::Packages(e) => e,
                TransactionError::Pacman(e) => failure.insert(e).clone(),
            })
        });
        // Cut short by the host stopping: the rest were not attempted.
        let left = &names[results.len()..];
        self.results.extend(names.iter().copied().zip(results));
        self.stop(left);
    }

    fn stop(&mut self, names: &[&'n str]) {
        for name in names {
            self.stopped.insert(name.to_string());
            self.results.insert(name, Err(STOPPING.to_string().into()));
        }
    }

    fn fail(&mut self, names: &[&'n str], e: &KindError) {
        for name in names {
            self.results.insert(name, Err(e.clone()));
        }
    }

    /// The installs, with a full upgrade when the declaration asks. What would be installed is
    /// checked against pacman's own metadata first: a package that replaces, conflicts with or
    /// provides the host's would take the host over.
    fn install(&mut self, wanted: Vec<&'n str>, upgrade: bool) {
        let env = self.env;
        let host_packages = &env.config.identity.package_names;
        let install_preview = |pacman: &Pacman| pacman.install_preview();
        let (checked, unknown) =
            check_sync_packages(env, &wanted, host_packages, &mut self.results);
        if !upgrade || (checked.is_empty() && unknown.is_empty()) {
            self.not_found(unknown);
            let install = |p: &Pacman| p.install();
            return self.transaction("install", &install, Some(&install_preview), &checked);
        }
        self.keyrings_first();
        // The host's package is never upgraded with the rest (a static binary with no
        // dependencies, so holding it back is no partial upgrade).
        let full_upgrade = |pacman: &Pacman| pacman.upgrade(host_packages);
        let upgrade_preview = |pacman: &Pacman| pacman.upgrade_preview(host_packages);
        match checked.is_empty() {
            true => self.upgrade_alone(),
            false => {
                let preview: &Arguments = &upgrade_preview;
                self.transaction("upgrade", &full_upgrade, Some(preview), &checked)
            }
        }
        if unknown.is_empty() {
            return;
        }
        if let Some(e) = self.pacman_failure.clone() {
            return self.fail(&unknown, &e);
        }
        // The databases are fresh now and the system upgraded: `-S` is no partial upgrade.
        let (checked, unknown) =
            check_sync_packages(env, &unknown, host_packages, &mut self.results);
        self.not_found(unknown);
        let install = |p: &Pacman| p.install();
        self.transaction("install", &install, Some(&install_preview), &checked);
    }

    fn not_found(&mut self, names: Vec<&'n str>) {
        for name in names {
            self.results.insert(name, Err(not_found(name).into()));
        }
    }

    /// The keyrings first, in their own transaction: packages signed by a packager the
    /// installed keyring does not know yet would fail the whole upgrade.
    fn keyrings_first(&mut self) {
        if (self.env.interrupted)() {
            return;
        }
        match keyrings_first(self.env) {
            Ok(()) => {}
            Err(TransactionError::Pacman(e)) => self.pacman_failure = Some(e),
            Err(TransactionError::Packages(e)) => self.env.runner.note(format!(
                "the keyrings' own transaction before the full upgrade failed; the upgrade went \
                 on without it: {e}"
            )),
        }
    }

    /// The full upgrade alone, when every package to install is one the stale databases do not
    /// know: the upgrade (which refreshes them) first, then those are checked and installed.
    fn upgrade_alone(&mut self) {
        let env = self.env;
        let host_packages = &env.config.identity.package_names;
        let outcome = match target(env) {
            Ok(pacman) if self.pacman_failure.is_none() => {
                check_room(env, &pacman.upgrade_preview(host_packages), &[]).and_then(|()| {
                    self.transacted = true;
                    let args = pacman.upgrade(host_packages);
                    (run_waiting_for_lock(env, "upgrade", &args, &[])).map_err(|e| match e {
                        TransactionError::Packages(e) | TransactionError::Pacman(e) => e,
                    })
                })
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        };
        if let Err(e) = outcome {
            self.pacman_failure = Some(e);
        }
    }

    /// `cache_keep`, after transactions that may have added to pacman's cache.
    fn prune_cache(&self) {
        let (Some(keep), true) = (self.env.config.cache_keep, self.transacted) else {
            return;
        };
        let runner = self.env.runner;
        match prune_cache(self.env, keep) {
            Ok(Pruned { files: 0, .. }) => {}
            Ok(pruned) => runner.note(format!(
                "cache_keep {keep}: removed {} older package files from {}, {} freed",
                pruned.files,
                pruned.dir.display(),
                size(pruned.bytes)
            )),
            Err(e) => runner.note(format!("cache_keep {keep}: the cache was not pruned: {e}")),
        }
    }
}
