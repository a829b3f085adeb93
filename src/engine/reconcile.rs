//! The reconciler: for each kind in order, observe (one batched query) -> plan (pure) -> apply ->
//! record. It owns the ledger's write-ahead discipline: originals are backed up and new ownership
//! is recorded durably *before* anything is touched, and outcomes are recorded after, so the
//! ledger never lies about what the host owns. A failing resource never stops the others.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use crate::engine::node;
use crate::kinds::{
    self, backup_key, units, Action, Change, Details, Env, Kind, LedgerAfter, Outcome, RunContext,
    Step, Visit,
};
use crate::model::declaration::Declaration;
use crate::model::pacnew::{self, Pacnew};
use crate::model::run::{Failing, ResourceResult, ResultAction};
use crate::model::spec::{self, files::Files, units::Units, Named as _};
use crate::model::upkeep::{self, Needs};
use crate::os::fsutil;
use crate::store::{Entry, Foreign, Ledger, Origin, Store, StoreError};
use crate::util::diff::ContentDiff;
use crate::util::progress::{self, Event};
use crate::util::sorted::{self, Walk};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Observe and plan only; nothing changes.
    Plan,
    Apply,
}

/// What a run did or (in plan mode) would do: the reconciler's own record, never serialized
/// (the run record, the wire report and the commands' output are made from it).
#[derive(Debug, Default)]
pub struct Report {
    pub changes: Vec<Planned>,
    pub failures: Vec<ResourceResult>,
    pub deferred: Vec<ResourceResult>,
    /// Resources found as declared and taken over (originals kept).
    pub adopted: Vec<ResourceResult>,
    pub in_sync: usize,
    /// The host was being stopped: kinds after the one being applied were left for the next run.
    pub interrupted: bool,
    /// The kinds this run went through: their resources not among `failures` have converged.
    pub checked: Vec<&'static str>,
    /// Owned files with a `.pacnew` or `.pacsave` beside them, looked for after the run.
    pub pacnew: Vec<Pacnew>,
    /// `in_sync` by kind, for the metrics.
    pub in_sync_by_kind: BTreeMap<&'static str, usize>,
    /// What the machine needs after the run (a reboot, restarts), looked for after every run
    /// that applies on the running system (`None`: planning, or under `--root`).
    pub needs: Option<Needs>,
    /// The foreign packages, counted after a run on the running system when pacman's databases
    /// changed since the count the store keeps (`None`: not counted by this run).
    pub foreign: Option<Foreign>,
    /// The diffs of the `changes` that have one, by their index there: apart, so a change
    /// without one (most in a large run, every one in the service's) costs nothing for them.
    pub diffs: Vec<(usize, Box<ContentDiff>)>,
    /// What the changes' diffs hold so far (`ContentDiff::weight`), bounded by `DIFFS_KEPT`.
    pub diff_bytes: usize,
    /// Changes were planned without their diff, the run's diffs having reached `DIFFS_KEPT`.
    pub diffs_cut: bool,
}

/// The most a run holds of its changes' diffs (each already capped by `diff.rs`), past which
/// changes are planned without theirs: some 3,000 lines, more than a person reads at once, and
/// little beside what a 20,000-file converge uses (docs/performance.md, figure 11).
pub const DIFFS_KEPT: usize = 256 << 10;

/// `diff`, if the `kept` bytes of diffs are still within `DIFFS_KEPT` (then counted in them).
fn within_bound(kept: &mut usize, diff: Option<Box<ContentDiff>>) -> Option<Box<ContentDiff>> {
    let diff = diff.filter(|_| *kept < DIFFS_KEPT)?;
    *kept += diff.weight();
    Some(diff)
}

/// One change a run made or (planning) would make: a run's report holds one for each of
/// thousands of changes, so its kind is the registry's name and its details one string.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    pub kind: &'static str,
    pub key: String,
    /// `+`, `~` or `-`: the action's sign, kept for the JSON of `plan` and `apply`.
    pub symbol: char,
    #[serde(serialize_with = "action_word")]
    pub action: Action,
    pub details: Details,
}

fn action_word<S: serde::Serializer>(action: &Action, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(action.word())
}

impl Planned {
    pub fn as_result(&self) -> ResourceResult {
        ResourceResult {
            kind: self.kind.to_string(),
            key: self.key.clone(),
            action: self.action.into(),
            detail: self.details.join(", "),
        }
    }
}

impl From<Action> for ResultAction {
    fn from(action: Action) -> ResultAction {
        match action {
            Action::Create => ResultAction::Create,
            Action::Update => ResultAction::Update,
            Action::Remove => ResultAction::Remove,
        }
    }
}

fn result(
    kind: &str,
    key: &str,
    action: ResultAction,
    detail: impl Into<String>,
) -> ResourceResult {
    ResourceResult {
        kind: kind.to_string(),
        key: key.to_string(),
        action,
        detail: detail.into(),
    }
}

/// Which resources a run observes and converges.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    All,
    /// Only these (kind, key) pairs: what a watch event touched. Nothing else is observed,
    /// changed or released.
    Only(BTreeSet<(&'static str, String)>),
}

impl Scope {
    fn includes(&self, kind: &'static str, key: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(set) => set.contains(&(kind, key.to_string())),
        }
    }
}

/// Converges (or plans) every kind. Errors are the store's only: a resource's failure is reported
/// in the `Report`, while a store that cannot record ownership must stop the run.
pub fn run(
    env: &Env,
    declaration: &Declaration,
    ledger: &mut Ledger,
    mode: Mode,
) -> Result<Report, StoreError> {
    run_scoped(env, declaration, ledger, mode, &Scope::All)
}

/// `run` over the resources `scope` names only.
pub fn run_scoped(
    env: &Env,
    declaration: &Declaration,
    ledger: &mut Ledger,
    mode: Mode,
    scope: &Scope,
) -> Result<Report, StoreError> {
    match run_scoped_reporting(env, declaration, ledger, mode, scope) {
        (report, None) => Ok(report),
        (_, Some(e)) => Err(e),
    }
}

/// `run_scoped`, with what the run did before a store error stopped it (changes already made,
/// to be recorded and reported with the error).
pub fn run_scoped_reporting(
    env: &Env,
    declaration: &Declaration,
    ledger: &mut Ledger,
    mode: Mode,
    scope: &Scope,
) -> (Report, Option<StoreError>) {
    let mut run = Converging {
        env,
        cx: secret_context(env, declaration),
        ledger,
        mode,
        scope,
        report: Report::default(),
        failed: None,
    };
    kinds::each(&mut run);
    let Converging {
        ledger,
        mut report,
        failed,
        ..
    } = run;
    if let Some(e) = failed {
        return (report, Some(e));
    }
    if let (Mode::Apply, Some(store)) = (mode, env.store) {
        if let Err(e) = remove_unreferenced_backups(store, ledger) {
            return (report, Some(e));
        }
    }
    // After the run's pacman transactions, and on every run (someone else may have upgraded).
    let mut quiet = env.store.map(Store::pacnew_quiet_dirs).unwrap_or_default();
    let before = quiet.clone();
    report.pacnew = pacnew::find(
        env.root,
        ledger.owned_keys::<Files>(),
        env.config.limits.max_file_bytes,
        &mut quiet,
        fsutil::file_clock_now_ns(),
    );
    pacnew::withhold_secret(&mut report.pacnew, |path| {
        declaration
            .files
            .get(path)
            .is_some_and(spec::files::is_secret)
    });
    // After the run's transactions and restarts; planning (the watcher's checks) leaves it.
    if let (Mode::Apply, Some(at)) = (mode, env.upkeep) {
        report.needs = Some(needs_now(env, at, !report.changes.is_empty()));
        report.foreign = count_foreign(env, at);
    }
    // Only a run writes it: it holds the store's lock (planning and `owned` do not).
    if let (Mode::Apply, Some(store), true) = (mode, env.store, quiet != before) {
        if let Err(e) = store.save_pacnew_quiet_dirs(&quiet) {
            log::warn!("{e}; the next run lists every directory for .pacnew files");
        }
    }
    (report, None)
}

/// What the machine needs: the last look's answer while it stands (`upkeep::look_again`, and
/// every process it found stale still is), else a new look, kept in the store. `changed`: the
/// run changed something.
fn needs_now(env: &Env, at: &upkeep::Where, changed: bool) -> Needs {
    // Read before the look: whatever changes while it runs moves them for the next run.
    let stamps = upkeep::stamps(at);
    let now = crate::store::unix_now();
    let last = env.store.and_then(Store::last_look);
    let why = match upkeep::look_again(last.as_ref(), &stamps, now, changed) {
        None => match last {
            Some(last) if upkeep::still_stale(at, &last.stale) => {
                log::debug!("the reboot and restart look stands: nothing it depends on changed");
                return last.needs;
            }
            _ => "a process it found stale is not any more",
        },
        Some(why) => why,
    };
    log::debug!("the reboot and restart look is made again: {why}");
    let (needs, stale) = upkeep::look(at);
    if let Some(store) = env.store {
        let looked = upkeep::Looked {
            at: now,
            stamps,
            needs: needs.clone(),
            stale,
        };
        if let Err(e) = store.save_look(&looked) {
            log::warn!("{e}; the next run looks again");
        }
    }
    needs
}

/// The foreign packages (`pacman -Qmq`, through the run's runner), when pacman's databases
/// changed since the store's count: a run that changed nothing spawns nothing for them.
fn count_foreign(env: &Env, at: &upkeep::Where) -> Option<Foreign> {
    let stamp = node::pacman_db_stamp(&at.db)?;
    let kept = env
        .store
        .and_then(|s| s.stats().ok())
        .and_then(|s| s.foreign);
    if kept.is_some_and(|k| k.stamp == stamp) {
        return None;
    }
    match kinds::packages::foreign_count(env) {
        Ok(count) => Some(Foreign { count, stamp }),
        Err(e) => {
            log::warn!("the foreign packages were not counted: {e}");
            None
        }
    }
}

/// Originals are dropped only after the ledger stops pointing at them, so a crash in between
/// leaves one set aside (`Store::release_backup`); this clears such leftovers, and only those:
/// a backup the ledger does not list but that was never released is an original whose ledger
/// entry was lost, kept for the resource's next adoption.
fn remove_unreferenced_backups(store: &Store, ledger: &Ledger) -> Result<(), StoreError> {
    let referenced: BTreeSet<String> = ledger
        .adopted()
        .into_iter()
        .map(|(kind, key)| backup_key(kind, &key))
        .collect();
    store.remove_released_backups(&referenced)
}

/// What a run says of an adoption whose original was already in the store.
const ORIGINAL_KEPT: &str = "the original kept in the store from an earlier adoption stays the \
    original (the ledger no longer listed it)";

/// How many resources of a kind are observed at once: a chunk's observations are planned and
/// dropped before the next chunk is observed, so a large run holds one chunk's at a time, while
/// a batched query (pacman, systemctl) still asks about thousands of names in one spawn (a
/// handful of spawns however many packages: `tests/it/noop.rs`).
const OBSERVED_AT_ONCE: usize = 4096;

/// How many resources of a kind applied a chunk at a time (`Kind::APPLIED_IN_CHUNKS`) a chunk
/// holds: its changes are held while it is applied, on top of what the chunks before recorded.
/// Each chunk writes the ledger two or three times, so smaller chunks cost more writes for
/// little less memory: this size keeps the converge within its memory goal
/// (docs/performance.md, figure 11) with few ledger writes.
const APPLIED_AT_ONCE: usize = 2048;

/// How many changed resources of a kind applied a chunk at a time (`Kind::APPLIED_IN_CHUNKS`)
/// `verify` observes at once: that observation sits on top of the chunk's changes and what the
/// chunks before recorded, the peak of a converge: a batch smaller than the chunk keeps that
/// peak within its memory goal (docs/performance.md, figure 11).
const VERIFIED_IN_CHUNKS_AT_ONCE: usize = 1024;

/// One run's kinds, converged in the registry's order; a store error or the host being stopped
/// ends it before the next kind.
struct Converging<'r, 'a> {
    env: &'r Env<'a>,
    cx: RunContext<'r>,
    ledger: &'r mut Ledger,
    mode: Mode,
    scope: &'r Scope,
    report: Report,
    failed: Option<StoreError>,
}

impl Visit for Converging<'_, '_> {
    type Out = ();
    fn visit<K: Kind>(&mut self) {
        if self.failed.is_some() || self.report.interrupted {
            return;
        }
        if self.mode == Mode::Apply && (self.env.interrupted)() {
            self.report.interrupted = true;
            return;
        }
        let (env, cx, mode, scope) = (self.env, &mut self.cx, self.mode, self.scope);
        let converged = converge::<K>(env, cx, self.ledger, mode, scope, &mut self.report)
            .and_then(|()| fail_refused_files(env, cx, self.ledger, &mut self.report));
        if let Err(e) = converged {
            self.failed = Some(e);
        }
    }
}

/// The files kind's changes that systemd's confirmation (run by the units kind, after the files
/// kind's outcomes were recorded) refused and put back: each moves from the run's changes to its
/// failures with what systemd said, and the ledger, where `files::put_back` no longer has them
/// as applied, is saved so.
fn fail_refused_files(
    env: &Env,
    cx: &RunContext,
    ledger: &Ledger,
    report: &mut Report,
) -> Result<(), StoreError> {
    let refused = cx.facts.files.take_refused();
    if refused.is_empty() {
        return Ok(());
    }
    for (key, why) in refused {
        let at = (report.changes.iter()).position(|c| c.kind == Files::NAME && c.key == key);
        let action = match at.map(|at| report.remove_change(at)) {
            Some(change) => change.action.into(),
            None => ResultAction::Update,
        };
        report.failures.push(result(Files::NAME, &key, action, why));
    }
    save(env, ledger, true)
}

fn converge<K: Kind>(
    env: &Env,
    cx: &mut RunContext,
    ledger: &mut Ledger,
    mode: Mode,
    scope: &Scope,
    report: &mut Report,
) -> Result<(), StoreError> {
    report.checked.push(K::NAME);
    let desired = K::desired(cx.declaration);
    // Declared and owned (both lists are sorted: merged, not sorted). A declared key is borrowed
    // from the declaration; one only owned (to be released) is copied, as the run changes the
    // ledger: declared files copy nothing, however many.
    let mut declared = desired.keys().peekable();
    let released: Vec<String> = ledger
        .owned_keys::<K>()
        .filter(|key| {
            while declared.next_if(|d| d.as_str() < *key).is_some() {}
            declared.peek().map(|d| d.as_str()) != Some(*key)
        })
        .map(str::to_string)
        .collect();
    let keys: Vec<&str> = sorted::union(
        desired.keys().map(String::as_str),
        released.iter().map(String::as_str),
    )
    .into_iter()
    .filter(|key| scope.includes(K::NAME, key))
    .collect();
    // The units kind with no unit of its own is still applied when the files kind changed unit
    // files or drop-ins: the manager is reloaded for them, and systemd confirms them.
    let for_files = mode == Mode::Apply && K::NAME == Units::NAME && units::reloads_for(cx);
    if keys.is_empty() && !for_files {
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
    for (at, chunk) in keys.chunks(at_once).enumerate() {
        // Applied a chunk at a time, the kind stops between chunks as the run does between
        // kinds: what the chunks before did is recorded, the rest is left for the next run.
        if in_chunks && at > 0 && (report.interrupted || (env.interrupted)()) {
            report.interrupted = true;
            return save(env, ledger, ledger_dirty);
        }
        let (failed_before, adopted_before) = (report.failures.len(), report.adopted.len());
        let changes_before = changes.len();
        env.runner.tell(|| Event::Step {
            kind: K::NAME,
            step: progress::Step::Observe,
            total: chunk.len(),
            named: progress::named(chunk.iter().map(|key| (None, *key))),
        });
        let observed = match K::observe(env, cx, chunk) {
            Ok(observed) => observed,
            Err(e) => {
                // The kind's tool failed: these and the keys after them fail, unasked; what the
                // chunks before planned (observed as they are) is still converged.
                for key in &keys[at * at_once..] {
                    report.failures.push(result(
                        K::NAME,
                        key,
                        ResultAction::Observe,
                        e.to_string(),
                    ));
                }
                // Nothing observed, nothing to do: the kind is left as it is, as it always was.
                if at == 0 {
                    return Ok(());
                }
                break;
            }
        };
        // The ledger is read in step with the chunk's keys; what planning changes in it is kept
        // here and made once the chunk is planned (before any of it is applied).
        let mut applied_now = Vec::new();
        let mut adopted = Vec::new();
        let mut in_sync = 0;
        let mut owned = Walk::from(ledger.section::<K>(), chunk[0]);
        let mut seen = Walk::new(&observed);
        for key in chunk {
            let (spec, entry) = (wanted.at(key), owned.at(key));
            let observed = match seen.at(key) {
                Some(Err(e)) => {
                    report.failures.push(result(
                        K::NAME,
                        key,
                        ResultAction::Observe,
                        e.to_string(),
                    ));
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
                    // Owned and as declared: make the ledger's digest say so (after a crash mid-apply,
                    // or when an equivalent spec was declared).
                    if let (Mode::Apply, Some(spec), Some(entry)) = (mode, spec, entry) {
                        let digest = K::digest_observed(spec, observed);
                        if entry.applied.as_ref() != Some(&digest) {
                            applied_now.push((key, digest));
                        }
                    }
                }
                Step::Adopt { mut intent, backup } => {
                    let mut kept = false;
                    if mode == Mode::Apply {
                        if let (Some(bytes), Some(store)) = (&backup, env.store) {
                            kept = store.save_backup(&backup_key(K::NAME, key), bytes)?;
                        }
                        intent.applied = spec.map(K::digest);
                        adopted.push((key.to_string(), intent));
                    }
                    let detail = match kept {
                        true => format!("already as declared; {ORIGINAL_KEPT}"),
                        false => "already as declared".to_string(),
                    };
                    report
                        .adopted
                        .push(result(K::NAME, key, ResultAction::Adopt, detail));
                }
                Step::Change(change) => {
                    match &change.diff {
                        Some(diff) => report.diff_bytes += diff.weight(),
                        None => report.diffs_cut |= env.diffs && !cx.diffs,
                    }
                    changes.push(change);
                }
                Step::Fail(e) => report
                    .failures
                    .push(result(K::NAME, key, ResultAction::Plan, e)),
                Step::Skip(e) => {
                    report
                        .failures
                        .push(result(K::NAME, key, ResultAction::Skipped, e))
                }
            }
        }
        // Planned: the chunk's observation is not needed again (`verify` makes its own), so it
        // is not held beside the next one, nor beside the chunk's changes being applied.
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
        ledger_dirty |= !applied_now.is_empty() || !adopted.is_empty();
        for (key, digest) in applied_now {
            ledger.set_applied::<K>(key, digest);
        }
        ledger.insert_all::<K>(adopted);
        if in_chunks && !changes.is_empty() {
            let dirty = std::mem::take(&mut ledger_dirty);
            apply_planned::<K>(env, cx, ledger, std::mem::take(&mut changes), dirty, report)?;
        }
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
        // Each change becomes its row (its key, details and diff moved, not copied).
        for c in changes {
            report.push_change(K::NAME, c.key, c.action, c.details, c.diff);
        }
        return Ok(());
    }
    apply_planned::<K>(env, cx, ledger, changes, ledger_dirty, report)
}

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
    // Write-ahead: originals and new ownership are durable before anything is touched.
    let mut intents = Vec::new();
    for change in &mut changes {
        if let (Some(bytes), Some(store)) = (&change.backup, env.store) {
            if store.save_backup(&backup_key(K::NAME, &change.key), bytes)? {
                change.details = change.details.with(ORIGINAL_KEPT);
            }
        }
        if let Some(intent) = &change.intent {
            intents.push((change.key.clone(), Entry::clone(intent)));
        }
    }
    ledger_dirty |= !intents.is_empty();
    ledger.insert_all::<K>(intents);
    save(env, ledger, ledger_dirty)?;
    let owed_ahead = owe_ahead::<K>(env, cx, &changes)?;
    let mut outcomes = K::apply(env, cx, ledger, &changes);
    let mut released_backups = Vec::new();
    verify::<K>(env, cx, ledger, &changes, &mut outcomes);
    let changed = !changes.is_empty();
    for (change, outcome) in changes.into_iter().zip(&outcomes) {
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
                    change.key,
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

impl Report {
    /// Lists a change made (or planned), with its diff if it has one.
    fn push_change(
        &mut self,
        kind: &'static str,
        key: String,
        action: Action,
        details: Details,
        diff: Option<Box<ContentDiff>>,
    ) {
        if let Some(diff) = diff {
            self.diffs.push((self.changes.len(), diff));
        }
        self.changes.push(Planned {
            kind,
            key,
            symbol: action.symbol(),
            action,
            details,
        });
    }

    /// Takes the change at `at` out of the run's changes, with its diff; the other diffs keep
    /// pointing at their changes.
    fn remove_change(&mut self, at: usize) -> Planned {
        self.diffs.retain(|(i, _)| *i != at);
        for (i, _) in &mut self.diffs {
            if *i > at {
                *i -= 1;
            }
        }
        self.changes.remove(at)
    }
}

/// Write-ahead of what later kinds will owe these changes (a unit's restart or reload on a file
/// about to change, `store::Owed`), as if each were done: durable before anything is touched,
/// so whatever ends the run before the unit's turn (kill -9, SIGTERM, its restart failing), the
/// next run still does it. A mounted root runs nothing to restart. Returns what it added.
fn owe_ahead<'d, K: Kind>(
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
    let mut owing = units::owing(cx.declaration, &ahead.files.changed);
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
fn unowe(env: &Env, cx: &RunContext, added: Vec<(&str, &str)>) -> Result<(), StoreError> {
    let unchanged: Vec<_> = (added.into_iter())
        .filter(|(_, file)| !cx.facts.files.changed.contains(*file))
        .collect();
    let (Some(store), false) = (env.store, unchanged.is_empty()) else {
        return Ok(());
    };
    let mut owed = store.owed()?;
    owed.retain(|unit, file| !unchanged.contains(&(unit, file)));
    store.save_owed(&owed)
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

fn save(env: &Env, ledger: &Ledger, dirty: bool) -> Result<(), StoreError> {
    match (dirty, env.store) {
        (true, Some(store)) => store.save_ledger(ledger),
        _ => Ok(()),
    }
}

/// One owned resource as observed now.
#[derive(Debug, Serialize)]
pub struct OwnedRow {
    pub kind: &'static str,
    pub key: String,
    pub origin: Origin,
    pub state: OwnedState,
    pub detail: String,
    /// What differs in a drifted file's or unit file's content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<Box<ContentDiff>>,
    /// Its failure streak, if recent runs failed it (filled in from the store's history); boxed,
    /// as most rows have none and `owned` may list thousands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing: Option<Box<Failing>>,
    /// A `.pacnew` or `.pacsave` beside an owned file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pacnew: Vec<Pacnew>,
}

/// How an owned resource is now, against the declaration in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OwnedState {
    #[serde(rename = "in sync")]
    InSync,
    #[serde(rename = "drifted")]
    Drifted,
    #[serde(rename = "missing")]
    Missing,
    /// No longer declared: the next reconcile releases it.
    #[serde(rename = "pending release")]
    PendingRelease,
    /// It could not be observed or judged.
    #[serde(rename = "error")]
    Error,
}

impl OwnedState {
    pub fn words(self) -> &'static str {
        match self {
            OwnedState::InSync => "in sync",
            OwnedState::Drifted => "drifted",
            OwnedState::Missing => "missing",
            OwnedState::PendingRelease => "pending release",
            OwnedState::Error => "error",
        }
    }
}

impl std::fmt::Display for OwnedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.words())
    }
}

/// Observes every owned resource and compares it with the declaration in force.
/// The declaration is taken to be dropped once the kinds are inspected: the `.pacnew` search
/// after them does not hold it too.
pub fn owned(env: &Env, declaration: Declaration, ledger: &Ledger) -> Vec<OwnedRow> {
    let mut cx = secret_context(env, &declaration);
    cx.diffs = env.diffs;
    let mut inspecting = Inspecting {
        env,
        cx: &cx,
        ledger,
        rows: Vec::with_capacity(ledger.owned_count()),
        diffs: 0,
    };
    kinds::each(&mut inspecting);
    let mut rows = inspecting.rows;
    drop(cx);
    let secret: HashSet<String> = (declaration.files.iter())
        .filter(|(_, spec)| spec::files::is_secret(spec))
        .map(|(path, _)| path.clone())
        .collect();
    drop(declaration);
    let mut found = pacnew::find(
        env.root,
        ledger.owned_keys::<Files>(),
        env.config.limits.max_file_bytes,
        &mut env.store.map(Store::pacnew_quiet_dirs).unwrap_or_default(),
        fsutil::file_clock_now_ns(),
    );
    pacnew::withhold_secret(&mut found, |path| secret.contains(path));
    for row in rows.iter_mut().filter(|r| r.kind == Files::NAME) {
        row.pacnew = found
            .iter()
            .filter(|p| p.path == row.key)
            .cloned()
            .collect();
    }
    rows
}

/// A run's context, ready for secret content (docs/declaration.md "Secrets"): with any, the
/// runner scrubs it from every tool's stderr, and changes show its keyed digests, under the
/// store's key (made the first time it is needed).
fn secret_context<'a>(env: &Env, declaration: &'a Declaration) -> RunContext<'a> {
    let mut cx = RunContext::new(declaration, env.offline);
    if declaration.has_secrets() {
        env.runner.withhold(declaration.secret_texts());
        cx.digest_key = env.store.and_then(|store| {
            store
                .digest_key()
                .map_err(|e| log::warn!("{e}; secret content is shown by its sizes alone"))
                .ok()
        });
    }
    cx
}

/// `owned`'s walk over the kinds, in the registry's order.
struct Inspecting<'r, 'a> {
    env: &'r Env<'a>,
    cx: &'r RunContext<'r>,
    ledger: &'r Ledger,
    rows: Vec<OwnedRow>,
    /// The bytes of diffs the rows hold, at most about `DIFFS_KEPT`.
    diffs: usize,
}

impl Visit for Inspecting<'_, '_> {
    type Out = ();
    fn visit<K: Kind>(&mut self) {
        inspect::<K>(
            self.env,
            self.cx,
            self.ledger,
            &mut self.rows,
            &mut self.diffs,
        );
    }
}

fn inspect<K: Kind>(
    env: &Env,
    cx: &RunContext,
    ledger: &Ledger,
    rows: &mut Vec<OwnedRow>,
    kept: &mut usize,
) {
    let mut keys = ledger.owned_keys::<K>().peekable();
    while keys.peek().is_some() {
        let chunk = keys.by_ref().take(OBSERVED_AT_ONCE);
        inspect_chunk::<K>(env, cx, ledger, chunk.collect(), rows, kept);
    }
}

/// `inspect` of some of the owned keys, observed at once (see `OBSERVED_AT_ONCE`).
fn inspect_chunk<K: Kind>(
    env: &Env,
    cx: &RunContext,
    ledger: &Ledger,
    keys: Vec<&str>,
    rows: &mut Vec<OwnedRow>,
    kept: &mut usize,
) {
    let Some(&first) = keys.first() else {
        return;
    };
    let observed = K::observe(env, cx, &keys);
    let mut seen = observed.as_ref().map(Walk::new);
    let (mut wanted, mut owned) = (
        Walk::from(K::desired(cx.declaration), first),
        Walk::from(ledger.section::<K>(), first),
    );
    for key in keys {
        let Some(entry) = owned.at(key) else {
            continue;
        };
        let spec = wanted.at(key);
        let mut diff = None;
        let (state, detail) = match seen.as_mut().map(|s| s.at(key)).map_err(|e| *e) {
            Err(e) | Ok(Some(Err(e))) => (OwnedState::Error, e.to_string()),
            Ok(observed) => match K::plan(
                cx,
                key,
                spec,
                observed.and_then(|o| o.as_ref().ok()),
                Some(entry),
            ) {
                _ if spec.is_none() => (
                    OwnedState::PendingRelease,
                    "no longer declared; the next reconcile releases it".into(),
                ),
                Step::InSync | Step::Adopt { .. } => (OwnedState::InSync, String::new()),
                Step::Change(c) if c.action == Action::Create => {
                    (OwnedState::Missing, c.details.join(", "))
                }
                Step::Change(c) => {
                    diff = within_bound(kept, c.diff);
                    (OwnedState::Drifted, c.details.join(", "))
                }
                Step::Fail(e) | Step::Skip(e) => (OwnedState::Error, e),
            },
        };
        rows.push(OwnedRow {
            kind: K::NAME,
            key: key.to_string(),
            origin: entry.origin,
            state,
            detail,
            diff,
            failing: None,
            pacnew: Vec::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::declaration::tests::{parse_with_defaults, test_config};
    use crate::os::exec::Runner;
    use crate::util::testutil::TempDir;

    /// A file the files kind changed and systemd's confirmation (in the units kind) put back
    /// leaves the run's changes for its failures, with what systemd said; the others stay.
    #[test]
    fn files_the_confirmation_put_back_fail_by_name() {
        let declaration = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let (config, runner) = (test_config(), Runner::new(false));
        let env = Env {
            root: std::path::Path::new("/nonexistent"),
            offline: false,
            config: &config,
            runner: &runner,
            store: None,
            interrupted: &|| false,
            upkeep: None,
            diffs: false,
        };
        let cx = RunContext::new(&declaration, false);
        let d = "/etc/systemd/system/mesh-host.service.d/x.conf";
        let diff = |key: &str| {
            let new = format!("{key}\n");
            Some(Box::new(ContentDiff::new(
                "(absent)",
                "(declared)",
                None,
                Some(new.as_bytes()),
                true,
            )))
        };
        let mut report = Report::default();
        for key in ["/etc/a.conf", d, "/etc/b.conf"] {
            report.push_change(
                Files::NAME,
                key.into(),
                Action::Create,
                vec![].into(),
                diff(key),
            );
        }
        fail_refused_files(&env, &cx, &Ledger::default(), &mut report).unwrap();
        assert_eq!(report.changes.len(), 3);
        kinds::files::refused(&cx, d, "systemd says the host's units changed");
        fail_refused_files(&env, &cx, &Ledger::default(), &mut report).unwrap();
        let keys: Vec<&str> = report.changes.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["/etc/a.conf", "/etc/b.conf"]);
        // Each remaining change keeps its own diff.
        assert_eq!(
            report.diffs,
            [
                (0, diff("/etc/a.conf").unwrap()),
                (1, diff("/etc/b.conf").unwrap())
            ]
        );
        let failed = &report.failures[0];
        assert_eq!((failed.kind.as_str(), failed.key.as_str()), ("files", d));
        assert_eq!(failed.action, ResultAction::Create);
        assert_eq!(failed.detail, "systemd says the host's units changed");
        // Taken once: the next kind finds none.
        assert!(cx.facts.files.take_refused().is_empty());
    }

    /// A run tells each kind's steps as they start: what it observes, what that came to, what it
    /// changes (with each change's sign) and what it checks again, naming the first few.
    #[test]
    fn a_run_tells_each_step_as_it_starts() {
        let scratch = TempDir::new("reconcile-progress");
        let root = scratch.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/g"), "as declared\n").unwrap();
        let store = Store::open(&scratch.path().join("state"), true)
            .unwrap()
            .unwrap();
        let files: Vec<String> = ["a", "b", "c", "d", "e", "f", "g"]
            .iter()
            .map(|name| format!(r#""/etc/{name}": {{"content": "as declared\n"}}"#))
            .collect();
        let text = format!(r#"{{"schema": 1, "files": {{{}}}}}"#, files.join(", "));
        let declaration = parse_with_defaults(&text).unwrap();
        let told = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let keep = std::rc::Rc::clone(&told);
        let sink = progress::Sink::new(move |event| keep.borrow_mut().push(format!("{event:?}")));
        let config = test_config();
        let runner = Runner::new(false).with_progress(Some(sink));
        let env = Env {
            root: &root,
            offline: true,
            config: &config,
            runner: &runner,
            store: Some(&store),
            interrupted: &|| false,
            upkeep: None,
            diffs: false,
        };
        let mut ledger = store.ledger().unwrap();
        run(&env, &declaration, &mut ledger, Mode::Apply).unwrap();
        let named = |sign: Option<char>, keys: &[&str]| {
            keys.iter()
                .map(|k| format!("({sign:?}, \"/etc/{k}\")"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let step = |step: &str, total: usize, named: String| {
            format!(r#"Step {{ kind: "files", step: {step}, total: {total}, named: [{named}] }}"#)
        };
        assert_eq!(
            *told.borrow(),
            [
                step("Observe", 7, named(None, &["a", "b", "c", "d", "e"])),
                r#"Planned { kind: "files", in_sync: 0, adopted: 1, changes: 6, failed: 0 }"#
                    .to_string(),
                step("Apply", 6, named(Some('+'), &["a", "b", "c", "d", "e"])),
                step("Verify", 6, named(None, &["a", "b", "c", "d", "e"])),
            ]
        );
    }

    /// Applies `text` in a scratch root (with an empty `/etc`) and store, the host starting to
    /// stop once `stopping(root)` holds: the scratch (kept until the caller is done), the root,
    /// the store and the run's report.
    fn apply_until_stopping(
        label: &str,
        text: &str,
        offline: bool,
        stopping: impl Fn(&std::path::Path) -> bool,
    ) -> (TempDir, std::path::PathBuf, Store, Report) {
        let scratch = TempDir::new(label);
        let root = scratch.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let store = Store::open(&scratch.path().join("state"), true)
            .unwrap()
            .unwrap();
        let declaration = parse_with_defaults(text).unwrap();
        let (config, runner) = (test_config(), Runner::new(false));
        let interrupted = || stopping(&root);
        let env = Env {
            root: &root,
            offline,
            config: &config,
            runner: &runner,
            store: Some(&store),
            interrupted: &interrupted,
            upkeep: None,
            diffs: false,
        };
        let mut ledger = store.ledger().unwrap();
        let report = run(&env, &declaration, &mut ledger, Mode::Apply).unwrap();
        (scratch, root, store, report)
    }

    /// Stopping between the chunks of a kind applied in chunks, as between kinds: what the first
    /// chunk did is recorded, the chunks after are not observed, the run is interrupted.
    #[test]
    fn a_host_stopping_between_chunks_keeps_the_first_and_leaves_the_rest() {
        let path = |i: usize| format!("/etc/many/f{i:05}.conf");
        let files: Vec<String> = (0..APPLIED_AT_ONCE + 10)
            .map(|i| format!(r#""{}": {{"content": "{i}"}}"#, path(i)))
            .collect();
        let text = format!(r#"{{"schema": 1, "files": {{{}}}}}"#, files.join(","));
        // The host starts stopping once the first chunk's files are in place.
        let last_of_first = path(APPLIED_AT_ONCE - 1);
        let (_scratch, root, store, report) =
            apply_until_stopping("chunks-stop", &text, true, |root| {
                root.join(&last_of_first[1..]).exists()
            });
        assert!(report.interrupted);
        assert_eq!(report.changes.len(), APPLIED_AT_ONCE);
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert!(report.deferred.is_empty(), "{:?}", report.deferred);
        assert!(root.join(&last_of_first[1..]).exists());
        assert!(!root.join(&path(APPLIED_AT_ONCE)[1..]).exists());
        // The stored ledger says the same: the first chunk owned, with its digests; the rest not.
        let stored = store.ledger().unwrap();
        assert_eq!(stored.owned_keys::<Files>().count(), APPLIED_AT_ONCE);
        let first = stored.get::<Files>(&path(0)).unwrap();
        assert!(first.applied.is_some());
    }

    /// What units owe is written before the files change and kept when the run stops before
    /// the units' turn; what was written ahead for a file that did not change is taken back.
    #[test]
    fn restarts_owed_are_written_ahead_and_taken_back_for_files_left_unchanged() {
        let text = r#"{"schema": 1, "files": {"/etc/a.conf": {"content": "a"},
                "/etc/b.conf": {"content": "b"}},
                "units": {"a.service": {"restart_on": ["/etc/a.conf"]},
                          "b.service": {"reload_on": ["/etc/b.conf"]}}}"#;
        // The host starts stopping once the first file is being written (its new content put
        // beside it): the second is not written, and the units kind is not reached (nothing is
        // spawned).
        let (_scratch, root, store, report) =
            apply_until_stopping("owed-ahead", text, false, |root| {
                std::fs::read_dir(root.join("etc")).is_ok_and(|mut d| d.next().is_some())
            });
        assert!(report.interrupted);
        assert!(root.join("etc/a.conf").exists());
        assert!(!root.join("etc/b.conf").exists());
        let owed = store.owed().unwrap();
        let owed: Vec<(&str, Vec<&str>)> = (owed.units.iter())
            .map(|(u, f)| (u.as_str(), f.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(owed, [("a.service", vec!["/etc/a.conf"])]);
    }
}
