//! What kinds do for each other in a run, asked of every kind (`Kind::take_refused`,
//! `Kind::owing`, `Kind::pacnew`): the reconciler names none.

use super::report::{result, Report};
use super::scope::save;
use crate::kinds::{self, Change, Env, Kind, Outcome, RunContext, Visit};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{Pacnew, QuietDirs};
use crate::model::run::ResultAction;
use crate::store::{Ledger, StoreError};

/// The changes a later kind refused and put back after their own kind's outcomes were recorded
/// (`Kind::take_refused`: files systemd's confirmation refused): each moves from the run's
/// changes to its failures with why, and the ledger, where the kind no longer has them as
/// applied, is saved so.
pub(super) fn fail_refused(
    env: &Env,
    facts: &mut kinds::Facts,
    ledger: &Ledger,
    report: &mut Report,
) -> Result<(), StoreError> {
    let mut any = false;
    for (kind, refused) in kinds::each(&mut Refused(facts)) {
        for (key, why) in refused {
            any = true;
            let action = match report.take_change(kind, &key) {
                Some(action) => action.into(),
                None => ResultAction::Update,
            };
            report.failures.push(result(kind, &key, action, why));
        }
    }
    save(env, ledger, any)
}

/// Each kind's refused changes, taken (`Kind::take_refused`).
pub(super) struct Refused<'r>(&'r mut kinds::Facts);

impl Visit for Refused<'_> {
    type Out = (&'static str, Vec<(String, String)>);
    fn visit<K: Kind>(&mut self) -> Self::Out {
        (K::NAME, K::take_refused(K::facts_mut(self.0)))
    }
}

/// What every kind's resources will owe once the changes `facts` note are done
/// (`Kind::owing`).
pub(super) struct Owing<'r, 'd>(&'d Declaration, &'r kinds::Facts);

impl<'d> Visit for Owing<'_, 'd> {
    type Out = Vec<(&'d str, &'d str)>;
    fn visit<K: Kind>(&mut self) -> Self::Out {
        K::owing(self.0, self.1)
    }
}

pub(super) fn owing<'d>(
    declaration: &'d Declaration,
    facts: &kinds::Facts,
) -> Vec<(&'d str, &'d str)> {
    kinds::each(&mut Owing(declaration, facts)).concat()
}

/// Each kind's `.pacnew` and `.pacsave` files (`Kind::pacnew`), by kind.
pub(super) struct Pacnews<'r, 'a> {
    env: &'r Env<'a>,
    declaration: &'r Declaration,
    ledger: &'r Ledger,
    quiet: &'r mut QuietDirs,
}

impl Visit for Pacnews<'_, '_> {
    type Out = (&'static str, Vec<Pacnew>);
    fn visit<K: Kind>(&mut self) -> Self::Out {
        let found = K::pacnew(self.env, self.declaration, self.ledger, self.quiet);
        (K::NAME, found)
    }
}

pub(super) fn pacnew_found(
    env: &Env,
    declaration: &Declaration,
    ledger: &Ledger,
    quiet: &mut QuietDirs,
) -> Vec<(&'static str, Vec<Pacnew>)> {
    kinds::each(&mut Pacnews {
        env,
        declaration,
        ledger,
        quiet,
    })
}

/// Write-ahead of what later kinds will owe these changes (a unit's restart or reload on a file
/// about to change, `store::Owed`), as if each were done: durable before anything is touched,
/// so whatever ends the run before the unit's turn (kill -9, SIGTERM, its restart failing), the
/// next run still does it. A mounted root runs nothing to restart. Returns what it added.
pub(super) fn owe_ahead<'d, K: Kind>(
    env: &Env,
    cx: &RunContext<'d>,
    changes: &[Change<K::Op, K::Original>],
) -> Result<Vec<(&'d str, &'d str)>, StoreError> {
    let (Some(store), false) = (env.store, env.offline) else {
        return Ok(Vec::new());
    };
    let mut ahead = kinds::Facts::default();
    for change in changes {
        let facts = K::facts_mut(&mut ahead);
        K::note(cx.declaration, facts, change, &Outcome::Done);
    }
    let mut owing = owing(cx.declaration, &ahead);
    if owing.is_empty() {
        return Ok(owing);
    }
    let mut owed = store.owed()?;
    owing.retain(|(unit, file)| owed.add(unit, file));
    if !owing.is_empty() {
        store.save_owed(&owed)?;
    }
    Ok(owing)
}

/// Takes back what `owe_ahead` added for files that did not change after all (failed, or not
/// attempted as the host was stopping): a file that always fails must not restart its unit
/// every run. What was owed before this run stays.
pub(super) fn unowe(
    env: &Env,
    cx: &RunContext,
    added: Vec<(&str, &str)>,
) -> Result<(), StoreError> {
    if added.is_empty() {
        return Ok(());
    }
    let owed = owing(cx.declaration, &cx.facts);
    let unchanged: Vec<_> = (added.into_iter())
        .filter(|added| !owed.contains(added))
        .collect();
    let (Some(store), false) = (env.store, unchanged.is_empty()) else {
        return Ok(());
    };
    let mut owed = store.owed()?;
    owed.retain(|unit, file| !unchanged.contains(&(unit, file)));
    store.save_owed(&owed)
}
