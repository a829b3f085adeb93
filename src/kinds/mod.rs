//! Resource kinds. Each kind is one module with the same shape: parse and validate its resources,
//! refuse the host's own, observe every resource it needs in one batched query, plan (a pure
//! function of desired, observed and the ledger), apply the plan, and release what it owns when it
//! leaves the declaration. The reconciler drives all kinds through this one trait, in the order `reconcile::run` lists them
//! (packages, files, units, containers: what later kinds need comes first).

pub mod containers;
pub mod files;
pub mod packages;
pub mod units;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::config::{Config, Identity, Limits};
use crate::declaration::{Declaration, Fields};
use crate::exec::Runner;
use crate::store::{Entry, Ledger, Store};

/// The world a kind acts on.
pub struct Env<'a> {
    /// The target root: `/`, or a mounted root under `--root`.
    pub root: &'a Path,
    /// Applying into a mounted root: whatever needs the running system is deferred.
    pub offline: bool,
    pub config: &'a Config,
    pub runner: &'a Runner<'a>,
    /// Absent when planning against a store that does not exist yet.
    pub store: Option<&'a Store>,
    /// Whether the host is being stopped: checked between resources, so the one being applied
    /// finishes (a pacman transaction is never cut short) and the rest wait for the next run.
    pub interrupted: &'a dyn Fn() -> bool,
}

/// What earlier kinds did in this run, for later ones to act on.
pub struct RunContext<'a> {
    pub declaration: &'a Declaration,
    /// Files (absolute target paths) changed in this run: units restart or reload on them.
    pub changed_files: BTreeSet<String>,
    /// Packages that failed to install in this run: units naming them are skipped.
    pub failed_packages: BTreeSet<String>,
    pub offline: bool,
}

impl<'a> RunContext<'a> {
    /// The start of a run: nothing changed or failed yet.
    pub fn new(declaration: &'a Declaration, offline: bool) -> RunContext<'a> {
        RunContext {
            declaration,
            changed_files: BTreeSet::new(),
            failed_packages: BTreeSet::new(),
            offline,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Remove,
}

impl Action {
    pub fn symbol(self) -> char {
        match self {
            Action::Create => '+',
            Action::Update => '~',
            Action::Remove => '-',
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Remove => "remove",
        }
    }
}

/// What the ledger says once a change succeeded.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerAfter {
    /// Owned, with this spec digest applied.
    Applied(String),
    /// No longer owned (released or explicitly removed).
    Disown,
}

/// One planned change to one resource.
#[derive(Debug)]
pub struct Change<Op> {
    pub key: String,
    pub action: Action,
    /// What differs, for people: `content`, `mode 0600 -> 0644`, `restore original`.
    pub details: Vec<String>,
    /// Written to the ledger before acting, for a resource the host does not own yet.
    pub intent: Option<Entry>,
    /// An original to keep in the store before acting (`Store::save_backup(backup_key(..))`).
    pub backup: Option<Vec<u8>>,
    pub after: LedgerAfter,
    pub op: Op,
}

pub enum Step<Op> {
    InSync,
    /// Already as declared but not owned yet: the host takes it over, keeping its original.
    Adopt {
        intent: Entry,
        backup: Option<Vec<u8>>,
    },
    Change(Change<Op>),
    /// The resource cannot be converged (e.g. an unknown owner); the rest go on.
    Fail(String),
    /// Not attempted because something it needs failed in this run.
    Skip(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Done,
    /// Cannot be done into a mounted root; a running system must do it.
    Deferred(String),
    Failed(String),
    /// Not attempted because the host is stopping: the intent stays in the ledger and the next
    /// run does it. Reported as deferred, saying `STOPPING`.
    Stopped,
}

/// What the report says of a change `Outcome::Stopped`.
pub const STOPPING: &str = "not applied: the host was stopping";

/// The name an adopted resource's original is kept under in the store.
pub fn backup_key(kind: &str, key: &str) -> String {
    crate::codec::sha256_hex(format!("{kind}:{key}").as_bytes())
}

pub trait Kind {
    /// The declaration's key for this kind, and its section of the ledger.
    const NAME: &'static str;
    type Spec: std::fmt::Debug + Clone;
    type Observed: std::fmt::Debug;
    type Op: std::fmt::Debug;

    /// Validates a resource's identity (a path, a package or unit name).
    fn check_key(key: &str) -> Result<(), String>;
    /// Validates one resource's fields; problems go to `fields`.
    fn parse(key: &str, fields: &mut Fields, limits: &Limits) -> Option<Self::Spec>;
    /// Why this resource is the host itself, if it is.
    fn refuse_self(key: &str, spec: &Self::Spec, identity: &Identity) -> Option<String>;
    fn desired(declaration: &Declaration) -> &BTreeMap<String, Self::Spec>;
    /// The digest the ledger keeps of an applied spec.
    fn digest(spec: &Self::Spec) -> String;
    /// Observes `keys` (declared and owned) in one batched query: a result per key, so one odd
    /// resource fails only itself; `Err` only when the kind as a whole could not be observed
    /// (its tool hung or could not start, the root cannot be opened).
    fn observe(
        env: &Env,
        cx: &RunContext,
        keys: &[String],
    ) -> Result<Observations<Self::Observed>, String>;
    /// Pure: what to do about one resource.
    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Self::Spec>,
        observed: Option<&Self::Observed>,
        owned: Option<&Entry>,
    ) -> Step<Self::Op>;
    /// Carries out the changes (batched where the tool allows); one outcome per change, in order.
    /// `ledger` is for kind-specific bookkeeping; the reconciler records intents and outcomes.
    fn apply(
        env: &Env,
        cx: &RunContext,
        ledger: &mut Ledger,
        changes: &[Change<Self::Op>],
    ) -> Vec<Outcome>;
    /// Tells later kinds what happened to a change.
    fn note(_cx: &mut RunContext, _change: &Change<Self::Op>, _outcome: &Outcome) {}
}

/// What observation found of each key: its state, or why that one key could not be observed.
pub type Observations<O> = BTreeMap<String, Result<O, String>>;

/// A batch's failure: does it blame the names (so each alone may succeed), or the tool itself?
pub trait BatchFailure: std::fmt::Display {
    fn blames_names(&self) -> bool;
}

impl BatchFailure for String {
    fn blames_names(&self) -> bool {
        true
    }
}

impl BatchFailure for crate::exec::CommandError {
    /// A tool that exited non-zero refused something; one that hung or could not start would do
    /// the same again for each name, multiplying its timeout.
    fn blames_names(&self) -> bool {
        matches!(self.failure, crate::exec::Failure::Exit(..))
    }
}

/// Runs `batch` over all `names` at once; if that fails because of the names, over each name
/// alone, so one bad name fails only its own resource. Returns one result per name, in order,
/// except when the host starts stopping during the calls one name at a time: they end there, and
/// the names past the results' end were not attempted. The calls after the first are counted as
/// retries of the run.
pub fn batch_then_each<E: BatchFailure>(
    runner: &Runner,
    names: &[&str],
    mut batch: impl FnMut(&[&str]) -> Result<(), E>,
) -> Vec<Result<(), String>> {
    if names.is_empty() {
        return Vec::new();
    }
    match batch(names) {
        Ok(()) => names.iter().map(|_| Ok(())).collect(),
        Err(e) if names.len() == 1 || !e.blames_names() => {
            let message = e.to_string();
            names.iter().map(|_| Err(message.clone())).collect()
        }
        Err(_) => {
            let mut results = Vec::with_capacity(names.len());
            for name in names {
                if runner.stopping() {
                    break;
                }
                runner.count_retry();
                results.push(batch(std::slice::from_ref(name)).map_err(|e| e.to_string()));
            }
            results
        }
    }
}

/// How many extra queries one batched observation may spend finding the names that made it
/// fail: enough to single out a handful among thousands (each costs about 2 log2 n), while a
/// tool that refuses everything for its own reasons is not asked thousands of times.
pub const RETRY_BUDGET: usize = 64;

/// Runs the observation `query` over all `names` at once (it answers one item per name, in
/// order; `what` names it when it answers short); if that fails because of the names, over each
/// half, and so on, so the failure lands on the names that caused it and every other name is
/// still observed. A failure that does not blame the names (a timeout, a tool that cannot start)
/// is given to every name of its batch without retrying, as is any batch left when
/// `RETRY_BUDGET` is spent. Retries are counted.
pub fn query_by_halves<T, E: BatchFailure>(
    runner: &Runner,
    what: &str,
    names: &[&str],
    mut query: impl FnMut(&[&str]) -> Result<Vec<T>, E>,
) -> Vec<Result<T, String>> {
    let mut budget = RETRY_BUDGET;
    let mut out = Vec::with_capacity(names.len());
    halves(runner, what, names, &mut query, &mut budget, &mut out);
    out
}

fn halves<T, E: BatchFailure>(
    runner: &Runner,
    what: &str,
    names: &[&str],
    query: &mut impl FnMut(&[&str]) -> Result<Vec<T>, E>,
    budget: &mut usize,
    out: &mut Vec<Result<T, String>>,
) {
    if names.is_empty() {
        return;
    }
    let (message, blames_names) = match query(names) {
        Ok(items) if items.len() == names.len() => {
            out.extend(items.into_iter().map(Ok));
            return;
        }
        Ok(items) => (
            format!(
                "{what} answered for {} of the {} asked about",
                items.len(),
                names.len()
            ),
            true,
        ),
        Err(e) => (e.to_string(), e.blames_names()),
    };
    if names.len() == 1 || !blames_names || *budget < 2 {
        out.extend(names.iter().map(|_| Err(message.clone())));
        return;
    }
    *budget -= 2;
    let (left, right) = names.split_at(names.len() / 2);
    for half in [left, right] {
        runner.count_retry();
        halves(runner, what, half, query, budget, out);
    }
}

/// Checks names that end up as arguments of a tool: never empty, never option-like.
pub fn check_argument(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} name is empty"));
    }
    if name.starts_with('-') {
        return Err(format!(
            "{what} name {name:?} starts with '-' and could be taken for an option"
        ));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "{what} name {name:?} contains whitespace or control characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query that fails as a whole when any of `bad` is in its batch, blaming the names (or
    /// not), and answers each name's length otherwise.
    fn ask(
        names: &[&str],
        bad: &[&str],
        blames_names: bool,
    ) -> (Vec<Result<usize, String>>, usize, usize) {
        struct Refused(bool);
        impl fmt::Display for Refused {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("refused")
            }
        }
        impl BatchFailure for Refused {
            fn blames_names(&self) -> bool {
                self.0
            }
        }
        use std::fmt;
        let runner = Runner::new(false);
        let mut queries = 0;
        let results = query_by_halves(&runner, "the query", names, |batch| {
            queries += 1;
            if batch.iter().any(|n| bad.contains(n)) {
                Err(Refused(blames_names))
            } else {
                Ok(batch.iter().map(|n| n.len()).collect())
            }
        });
        (results, queries, runner.retries())
    }

    #[test]
    fn a_failed_batch_lands_on_the_name_that_caused_it() {
        let names: Vec<String> = (0..16).map(|i| format!("n{i:02}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (results, queries, retries) = ask(&names, &["n05"], true);
        for (name, result) in names.iter().zip(&results) {
            match *name {
                "n05" => assert_eq!(*result, Err("refused".to_string())),
                _ => assert_eq!(*result, Ok(3)),
            }
        }
        // 1 + 2 per level of halving (16 -> 8 -> 4 -> 2 -> 1).
        assert_eq!((queries, retries), (9, 8));
        let (results, _, _) = ask(&names, &[], true);
        assert!(results.iter().all(|r| *r == Ok(3)));
    }

    #[test]
    fn a_failure_that_does_not_blame_the_names_is_not_retried() {
        let (results, queries, retries) = ask(&["a", "b", "c"], &["b"], false);
        assert!(results.iter().all(|r| *r == Err("refused".to_string())));
        assert_eq!((queries, retries), (1, 0));
    }

    #[test]
    fn retries_are_bounded() {
        let names: Vec<String> = (0..1000).map(|i| format!("n{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // Everything refused: the budget stops the halving, every name still gets its answer.
        let (results, queries, retries) = ask(&names, &names, true);
        assert_eq!(results.len(), 1000);
        assert!(results.iter().all(|r| r.is_err()));
        assert_eq!(retries, RETRY_BUDGET);
        assert_eq!(queries, RETRY_BUDGET + 1);
    }

    #[test]
    fn one_name_at_a_time_ends_where_the_host_starts_stopping() {
        // The pulse says "stopping" from its third turn on: two names are tried alone, the rest
        // are left (not attempted, not failed).
        let turns = std::cell::Cell::new(0);
        let pulse = || {
            turns.set(turns.get() + 1);
            turns.get() > 2
        };
        let runner = Runner::new(false).with_pulse(&pulse);
        let mut calls = Vec::new();
        let results = batch_then_each(&runner, &["a", "b", "c", "d"], |batch| {
            calls.push(batch.join(" "));
            match batch {
                [one] if *one != "a" => Ok(()),
                _ => Err("refused".to_string()),
            }
        });
        assert_eq!(results, vec![Err("refused".to_string()), Ok(())]);
        assert_eq!(calls, ["a b c d", "a", "b"]);
        assert_eq!(runner.retries(), 2);
        // Never stopping: every name gets its answer.
        let runner = Runner::new(false);
        let results = batch_then_each(&runner, &["a", "b"], |batch| match batch {
            [_] => Ok(()),
            _ => Err("refused".to_string()),
        });
        assert_eq!(results, vec![Ok(()), Ok(())]);
    }

    #[test]
    fn a_short_answer_is_a_failure_of_the_names() {
        let runner = Runner::new(false);
        let results = query_by_halves(&runner, "`tool`", &["a", "b"], |batch| {
            // One item whatever it is asked: short for two names, right for one.
            Ok::<_, String>(vec![batch.len().min(1)])
        });
        assert_eq!(results, vec![Ok(1), Ok(1)]);
        let results = query_by_halves(&runner, "`tool`", &["a"], |_| Ok::<Vec<u8>, String>(vec![]));
        assert_eq!(
            results,
            vec![Err("`tool` answered for 0 of the 1 asked about".to_string())]
        );
    }
}
