//! One kind's turn in a run: its keys observed a chunk at a time (one batched query each),
//! planned (pure), written ahead, applied, verified (observed again) and recorded.

use std::collections::BTreeMap;

use super::hooks::{owe_ahead, unowe};
use super::report::{result, Report, DIFFS_KEPT};
use super::scope::{
    save, Mode, Scope, APPLIED_AT_ONCE, OBSERVED_AT_ONCE, ORIGINAL_KEPT, VERIFIED_IN_CHUNKS_AT_ONCE,
};
use crate::kinds::{self, backup_key, Change, Env, Kind, LedgerAfter, Outcome, RunContext, Step};
use crate::model::run::ResultAction;
use crate::store::{Entry, Ledger, Origin, StoreError};
use crate::util::progress::{self, Event};
use crate::util::sorted::{self, Walk};

/// One kind's turn: its declared and owned keys in scope, observed a chunk at a time and each
/// planned; the changes applied a chunk at a time where the kind allows
/// (`Kind::APPLIED_IN_CHUNKS`), else all at once after planning.
pub(super) fn converge<K: Kind>(
    env: &Env,
    cx: &mut RunContext,
    ledger: &mut Ledger,
    mode: Mode,
    scope: &Scope,
    report: &mut Report,
) -> Result<(), StoreError> {
    report.checked.push(K::NAME);
    let desired = K::desired(cx.declaration);
    let released = released::<K>(desired, ledger);
    // Taken a chunk at a time: a list of all of them would be held through the whole turn.
    let mut keys = sorted::union(
        desired.keys().map(String::as_str),
        released.iter().map(String::as_str),
    )
    .filter(|key| scope.includes(K::NAME, key))
    .peekable();
    // A kind with no resource in the run is still applied when earlier kinds call on it (units
    // reload the manager for the unit files the files kind wrote, and systemd confirms them).
    let called = mode == Mode::Apply && K::called_by_facts(&cx.facts);
    if keys.peek().is_none() && !called {
        return Ok(());
    }
    let mut changes = Vec::new();
    let mut ledger_dirty = false;
    let in_chunks = mode == Mode::Apply && K::APPLIED_IN_CHUNKS;
    let at_once = match in_chunks {
        true => APPLIED_AT_ONCE,
        false => OBSERVED_AT_ONCE,
    };
    let mut wanted = Walk::new(desired);
    let mut at = 0;
    while keys.peek().is_some() {
        // Applied a chunk at a time, the kind stops between chunks as the run does between
        // kinds: what the chunks before did is recorded, the rest is left for the next run.
        if in_chunks && at > 0 && (report.interrupted || (env.interrupted)()) {
            report.interrupted = true;
            return save(env, ledger, ledger_dirty);
        }
        let chunk: Vec<&str> = keys.by_ref().take(at_once).collect();
        let chunk = chunk.as_slice();
        let Some(observed) = observe::<K>(env, cx, chunk, &mut keys, report) else {
            // Nothing observed, nothing to do: the kind is left as it is, as it always was.
            if at == 0 {
                return Ok(());
            }
            break;
        };
        let chunk = (chunk, observed, &mut wanted);
        ledger_dirty |= plan_chunk::<K>(env, cx, ledger, mode, chunk, &mut changes, report)?;
        if in_chunks && !changes.is_empty() {
            let dirty = std::mem::take(&mut ledger_dirty);
            apply_planned::<K>(env, cx, ledger, std::mem::take(&mut changes), dirty, report)?;
        }
        at += 1;
    }
    if mode == Mode::Plan {
        for change in &changes {
            K::note(
                cx.declaration,
                K::facts_mut(&mut cx.facts),
                change,
                &Outcome::Done,
            );
        }
        // Each change becomes its row (its details and diff moved, its key copied into the
        // report's one buffer of keys).
        for c in changes {
            report.push_change(K::NAME, &c.key, c.action, c.details, c.diff);
        }
        return Ok(());
    }
    apply_planned::<K>(env, cx, ledger, changes, ledger_dirty, report)
}

/// The keys the ledger owns that are no longer declared, to be released. Both lists are
/// sorted: merged, not sorted. Copied, as the run changes the ledger (a declared key is
/// borrowed from the declaration: declared files copy nothing, however many).
fn released<K: Kind>(desired: &BTreeMap<String, K::Spec>, ledger: &Ledger) -> Vec<String> {
    let mut declared = desired.keys().peekable();
    ledger
        .owned_keys::<K>()
        .filter(|key| {
            while declared
                .next_if(|d| sorted::compare(d, key).is_lt())
                .is_some()
            {}
            declared
                .peek()
                .is_none_or(|d| sorted::compare(d, key).is_ne())
        })
        .map(str::to_string)
        .collect()
}

/// One chunk's observation; `None` when the kind's tool failed: these keys and the ones after
/// them (`rest`, taken) fail, unasked, and what the chunks before planned is still converged.
fn observe<'k, K: Kind>(
    env: &Env,
    cx: &RunContext,
    chunk: &[&'k str],
    rest: &mut dyn Iterator<Item = &'k str>,
    report: &mut Report,
) -> Option<kinds::Observations<'k, K::Observed>> {
    env.runner.tell(|| Event::Step {
        kind: K::NAME,
        step: progress::Step::Observe,
        total: chunk.len(),
        named: progress::named(chunk.iter().map(|key| (None, *key))),
    });
    match K::observe(env, cx, chunk) {
        Ok(observed) => Some(observed),
        Err(e) => {
            for key in chunk.iter().copied().chain(rest) {
                (report.failures).push(result(K::NAME, key, ResultAction::Observe, e.to_string()));
            }
            None
        }
    }
}

/// Plans each key of a chunk against its observation, the declaration (`wanted`, walked in step)
/// and the ledger: changes go to `changes`, the rest to the report; what planning changes in
/// the ledger (adoptions, applied digests brought up to date) is made once the chunk is
/// planned, before any of it is applied. Returns whether it changed the ledger.
fn plan_chunk<K: Kind>(
    env: &Env,
    cx: &mut RunContext,
    ledger: &mut Ledger,
    mode: Mode,
    (chunk, observed, wanted): (&[&str], Observations<K>, &mut Walk<K::Spec>),
    changes: &mut Vec<Change<K::Op, K::Original>>,
    report: &mut Report,
) -> Result<bool, StoreError> {
    let (failed_before, adopted_before) = (report.failures.len(), report.adopted.len());
    let changes_before = changes.len();
    let mut applied_now = Vec::new();
    let mut adopted = Vec::new();
    let mut in_sync = 0;
    let mut owned = Walk::from(ledger.section::<K>(), chunk[0]);
    let mut seen = observed.walk();
    for key in chunk {
        let (spec, entry) = (wanted.at(key), owned.at(key));
        let observed = match seen.at(key) {
            Some(Err(e)) => {
                (report.failures).push(result(K::NAME, key, ResultAction::Observe, e.to_string()));
                continue;
            }
            Some(Ok(observed)) => Some(observed),
            None => None,
        };
        // Diffs only while the run's stay within their bound.
        cx.diffs = env.diffs && report.diff_bytes < DIFFS_KEPT;
        match K::plan(cx, key, spec, observed, entry) {
            Step::InSync => {
                in_sync += 1;
                // Owned and as declared: make the ledger's digest say so (after a crash
                // mid-apply, or when an equivalent spec was declared).
                if let (Mode::Apply, Some(spec), Some(entry)) = (mode, spec, entry) {
                    let digest = K::digest_observed(spec, observed);
                    if entry.applied.as_ref() != Some(&digest) {
                        applied_now.push((*key, digest));
                    }
                }
            }
            Step::Adopt { intent, backup } => {
                let adoption = adopt::<K>(env, mode, key, spec, intent, backup, report)?;
                adopted.extend(adoption);
            }
            Step::Change(change) => {
                match &change.diff {
                    Some(diff) => report.diff_bytes += diff.weight(),
                    None => report.diffs_cut |= env.diffs && !cx.diffs,
                }
                changes.push(change);
            }
            Step::Fail(e) => (report.failures).push(result(K::NAME, key, ResultAction::Plan, e)),
            Step::Skip(e) => (report.failures).push(result(K::NAME, key, ResultAction::Skipped, e)),
        }
    }
    // Planned: the chunk's observation is not needed again (`verify` makes its own), so it is
    // not held beside the next one, nor beside the chunk's changes being applied.
    drop(observed);
    env.runner.tell(|| Event::Planned {
        kind: K::NAME,
        in_sync,
        adopted: report.adopted.len() - adopted_before,
        changes: changes.len() - changes_before,
        failed: report.failures.len() - failed_before,
    });
    if in_sync > 0 {
        report.in_sync += in_sync;
        *report.in_sync_by_kind.entry(K::NAME).or_default() += in_sync;
    }
    let dirty = !applied_now.is_empty() || !adopted.is_empty();
    for (key, digest) in applied_now {
        ledger.set_applied::<K>(key, digest);
    }
    ledger.insert_all::<K>(adopted);
    Ok(dirty)
}

/// A resource found as declared and taken over: its original kept in the store (applying) and
/// reported; returns the ledger's entry for it when applying.
fn adopt<K: Kind>(
    env: &Env,
    mode: Mode,
    key: &str,
    spec: Option<&K::Spec>,
    mut intent: Entry<K::Original>,
    backup: Option<Vec<u8>>,
    report: &mut Report,
) -> Result<Option<Owning<K>>, StoreError> {
    let mut kept = false;
    let mut adopted = None;
    if mode == Mode::Apply {
        if let (Some(bytes), Some(store)) = (&backup, env.store) {
            kept = store.save_backup(&backup_key(K::NAME, key), bytes)?;
        }
        intent.applied = spec.map(K::digest);
        adopted = Some((key.to_string(), intent));
    }
    let detail = match kept {
        true => format!("already as declared; {ORIGINAL_KEPT}"),
        false => "already as declared".to_string(),
    };
    (report.adopted).push(result(K::NAME, key, ResultAction::Adopt, detail));
    Ok(adopted)
}

/// A key and its ledger entry, as the ledger takes them.
type Owning<K> = (String, Entry<<K as crate::model::spec::KindSpec>::Original>);

/// One chunk's observations of a kind.
type Observations<'k, K> = kinds::Observations<'k, <K as Kind>::Observed>;

/// Applies planned changes of a kind (all of them, or one chunk's: `Kind::APPLIED_IN_CHUNKS`):
/// written ahead, applied, verified, recorded. `ledger_dirty` says planning changed the ledger
/// (an adoption, an applied digest brought up to date), which is then saved with the intents.
fn apply_planned<K: Kind>(
    env: &Env,
    cx: &mut RunContext,
    ledger: &mut Ledger,
    mut changes: Vec<Change<K::Op, K::Original>>,
    mut ledger_dirty: bool,
    report: &mut Report,
) -> Result<(), StoreError> {
    if !changes.is_empty() {
        env.runner.tell(|| Event::Step {
            kind: K::NAME,
            step: progress::Step::Apply,
            total: changes.len(),
            named: progress::named(changes.iter().map(|c| (Some(c.action.symbol()), &*c.key))),
        });
    }
    ledger_dirty |= write_ahead::<K>(env, ledger, &mut changes)?;
    save(env, ledger, ledger_dirty)?;
    let owed_ahead = owe_ahead::<K>(env, cx, &changes)?;
    let mut outcomes = K::apply(env, cx, ledger, &changes);
    verify::<K>(env, cx, ledger, &changes, &mut outcomes);
    let changed = !changes.is_empty();
    let released_backups = record::<K>(cx, ledger, changes, &outcomes, report);
    // Set aside before the ledger stops naming them: never taken for an original after a crash.
    if let Some(store) = env.store {
        for name in &released_backups {
            store.release_backup(name)?;
        }
    }
    // The kind may have changed its own bookkeeping (directories it created) even when nothing
    // else changed, so the ledger is written whenever there were changes.
    save(env, ledger, changed)?;
    unowe(env, cx, owed_ahead)?;
    // Only once the ledger no longer points at them: a crash before this leaves an unused
    // backup, never an adopted resource whose original is gone.
    if let Some(store) = env.store {
        for name in released_backups {
            store.remove_backup(&name)?;
        }
    }
    Ok(())
}

/// Write-ahead: originals and new ownership are durable before anything is touched. Returns
/// whether the ledger took intents (to be saved).
fn write_ahead<K: Kind>(
    env: &Env,
    ledger: &mut Ledger,
    changes: &mut [Change<K::Op, K::Original>],
) -> Result<bool, StoreError> {
    let mut intents = Vec::new();
    for change in changes.iter_mut() {
        if let (Some(bytes), Some(store)) = (&change.backup, env.store) {
            if store.save_backup(&backup_key(K::NAME, &change.key), bytes)? {
                change.details = change.details.with(ORIGINAL_KEPT);
            }
        }
        if let Some(intent) = &change.intent {
            intents.push((change.key.clone(), Entry::clone(intent)));
        }
    }
    let any = !intents.is_empty();
    ledger.insert_all::<K>(intents);
    Ok(any)
}

/// Each change's outcome noted for later kinds and recorded, in the ledger and in the report;
/// returns the backups of adopted resources released, to be removed once the ledger is saved.
fn record<K: Kind>(
    cx: &mut RunContext,
    ledger: &mut Ledger,
    changes: Vec<Change<K::Op, K::Original>>,
    outcomes: &[Outcome],
    report: &mut Report,
) -> Vec<String> {
    let mut released_backups = Vec::new();
    for (change, outcome) in changes.into_iter().zip(outcomes) {
        K::note(
            cx.declaration,
            K::facts_mut(&mut cx.facts),
            &change,
            outcome,
        );
        match outcome {
            Outcome::Done => {
                match change.after {
                    LedgerAfter::Applied(digest) => ledger.set_applied::<K>(&change.key, digest),
                    LedgerAfter::Disown => {
                        if let Some(entry) = ledger.remove::<K>(&change.key) {
                            if entry.origin == Origin::Adopted {
                                released_backups.push(backup_key(K::NAME, &change.key));
                            }
                        }
                    }
                }
                report.push_change(
                    K::NAME,
                    &change.key,
                    change.action,
                    change.details,
                    change.diff,
                );
            }
            Outcome::Deferred(why) => report.deferred.push(result(
                K::NAME,
                &change.key,
                change.action.into(),
                why.clone(),
            )),
            Outcome::Stopped => {
                report.interrupted = true;
                report.deferred.push(result(
                    K::NAME,
                    &change.key,
                    change.action.into(),
                    crate::kinds::STOPPING,
                ))
            }
            Outcome::Failed(e) => report.failures.push(result(
                K::NAME,
                &change.key,
                change.action.into(),
                e.to_string(),
            )),
        }
    }
    released_backups
}

/// A tool that exits 0 having done nothing must not pass for success: resources whose change
/// reported done are observed again (one more batched query, only in runs that changed
/// something), and any that still differ from the declaration fail, saying what differs.
fn verify<K: Kind>(
    env: &Env,
    cx: &RunContext,
    ledger: &Ledger,
    changes: &[Change<K::Op, K::Original>],
    outcomes: &mut [Outcome],
) {
    let done = |change: &Change<K::Op, K::Original>, outcome: &Outcome| {
        *outcome == Outcome::Done && matches!(change.after, LedgerAfter::Applied(_))
    };
    // What this run changed must not count again: a restart on a changed file is done.
    let mut fresh = RunContext::new(cx.declaration, cx.offline);
    fresh.digest_key = cx.digest_key;
    // Observed a chunk at a time, as when planned; a kind applied in chunks has its chunk's
    // changes held meanwhile, so it is observed in smaller ones.
    let at_once = match K::APPLIED_IN_CHUNKS {
        true => VERIFIED_IN_CHUNKS_AT_ONCE,
        false => OBSERVED_AT_ONCE,
    };
    let mut pending = changes.iter().zip(outcomes.iter_mut()).peekable();
    while pending.peek().is_some() {
        let chunk: Vec<_> = pending
            .by_ref()
            .filter(|(c, o)| done(c, o))
            .take(at_once)
            .collect();
        if chunk.is_empty() {
            return;
        }
        let keys: Vec<&str> = chunk.iter().map(|(c, _)| c.key.as_str()).collect();
        env.runner.tell(|| Event::Step {
            kind: K::NAME,
            step: progress::Step::Verify,
            total: keys.len(),
            named: progress::named(keys.iter().map(|key| (None, *key))),
        });
        let observed = K::observe(env, &fresh, &keys);
        for (change, outcome) in chunk {
            check::<K>(&fresh, cx, ledger, change, outcome, &observed);
        }
    }
}

/// Checks one change against its observation after it was applied.
fn check<K: Kind>(
    fresh: &RunContext,
    cx: &RunContext,
    ledger: &Ledger,
    change: &Change<K::Op, K::Original>,
    outcome: &mut Outcome,
    observed: &Result<kinds::Observations<K::Observed>, kinds::KindError>,
) {
    let observed = match observed.as_ref().map(|o| o.get(&change.key)) {
        Ok(Some(Ok(observed))) => Some(observed),
        Ok(None) => None,
        Err(e) | Ok(Some(Err(e))) => {
            *outcome =
                Outcome::Failed(format!("could not be checked after the change: {e}").into());
            return;
        }
    };
    let desired = K::desired(cx.declaration).get(&change.key);
    let owned = ledger.get::<K>(&change.key);
    match K::plan(fresh, &change.key, desired, observed, owned) {
        Step::Change(still) => {
            *outcome = Outcome::Failed(
                format!(
                    "the tool reported success, but it still differs from the declaration: {}",
                    still.details.join(", ")
                )
                .into(),
            )
        }
        Step::Fail(e) | Step::Skip(e) => *outcome = Outcome::Failed(e.into()),
        Step::InSync | Step::Adopt { .. } => {}
    }
}
