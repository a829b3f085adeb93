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
}

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
    /// Observes `keys` (declared and owned) in one batched query.
    fn observe(
        env: &Env,
        cx: &RunContext,
        keys: &[String],
    ) -> Result<BTreeMap<String, Self::Observed>, String>;
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
/// alone, so one bad name fails only its own resource. Returns one result per name, in order.
pub fn batch_then_each<E: BatchFailure>(
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
        Err(_) => names
            .iter()
            .map(|name| batch(std::slice::from_ref(name)).map_err(|e| e.to_string()))
            .collect(),
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
