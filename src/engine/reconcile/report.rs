//! What a run did or would do, as the reconciler keeps it: its changes (with their diffs,
//! bounded), failures, deferrals, adoptions and what was found after it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::kinds::{Action, Details};
use crate::model::pacnew::Pacnew;
use crate::model::run::{ResourceResult, ResultAction};
use crate::model::spec::NAMES;
use crate::model::upkeep::Needs;
use crate::store::Foreign;
use crate::util::diff::ContentDiff;

/// What a run did or (in plan mode) would do: the reconciler's own record, never serialized
/// (the run record, the wire report and the commands' output are made from it).
#[derive(Debug, Default)]
pub struct Report {
    pub changes: Changes,
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
pub(super) fn within_bound(
    kept: &mut usize,
    diff: Option<Box<ContentDiff>>,
) -> Option<Box<ContentDiff>> {
    let diff = diff.filter(|_| *kept < DIFFS_KEPT)?;
    *kept += diff.weight();
    Some(diff)
}

/// A run's changes, one compact row each: a 20,000-file converge holds 20,000 of them until
/// they are printed and reported, so the keys share one buffer, end to end, and a row is where
/// its key ends, its kind (by its place in the registry), its action and its details.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    rows: Vec<Row>,
    keys: String,
}

#[derive(Debug, Clone)]
struct Row {
    key_end: usize,
    details: Details,
    kind: u8,
    action: Action,
}

/// A kind's place in the registry's list of names, which holds every kind's `NAME`.
fn kind_index(kind: &'static str) -> u8 {
    let at = NAMES.iter().position(|name| *name == kind);
    at.and_then(|at| u8::try_from(at).ok())
        .expect("a kind's name is in the registry")
}

impl Changes {
    pub fn push(&mut self, kind: &'static str, key: &str, action: Action, details: Details) {
        self.keys.push_str(key);
        self.rows.push(Row {
            key_end: self.keys.len(),
            details,
            kind: kind_index(kind),
            action,
        });
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Each change, in the order made.
    pub fn iter(&self) -> impl Iterator<Item = Planned<'_>> + Clone {
        let starts = std::iter::once(0).chain(self.rows.iter().map(|r| r.key_end));
        self.rows.iter().zip(starts).map(|(row, start)| Planned {
            kind: NAMES
                .get(usize::from(row.kind))
                .copied()
                .unwrap_or_default(),
            key: self.keys.get(start..row.key_end).unwrap_or_default(),
            symbol: row.action.symbol(),
            action: row.action,
            details: &row.details,
        })
    }

    /// Takes the change at `at` out, returning its action.
    fn remove(&mut self, at: usize) -> Action {
        let start = match at {
            0 => 0,
            at => self.rows[at - 1].key_end,
        };
        let row = self.rows.remove(at);
        self.keys.replace_range(start..row.key_end, "");
        let len = row.key_end - start;
        for later in &mut self.rows[at..] {
            later.key_end -= len;
        }
        row.action
    }
}

/// One change a run made or (planning) would make, as `Changes` gives it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Planned<'c> {
    pub kind: &'static str,
    pub key: &'c str,
    /// `+`, `~` or `-`: the action's sign, kept for the JSON of `plan` and `apply`.
    pub symbol: char,
    #[serde(serialize_with = "action_word")]
    pub action: Action,
    pub details: &'c Details,
}

fn action_word<S: serde::Serializer>(action: &Action, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(action.word())
}

impl Planned<'_> {
    pub fn as_result(&self) -> ResourceResult {
        ResourceResult {
            kind: self.kind.to_string(),
            key: self.key.to_string(),
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

pub(super) fn result(
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

impl Report {
    /// Lists a change made (or planned), with its diff if it has one.
    pub(super) fn push_change(
        &mut self,
        kind: &'static str,
        key: &str,
        action: Action,
        details: Details,
        diff: Option<Box<ContentDiff>>,
    ) {
        if let Some(diff) = diff {
            self.diffs.push((self.changes.len(), diff));
        }
        self.changes.push(kind, key, action, details);
    }

    /// Takes the change of `kind` and `key` out of the run's changes, with its diff (the other
    /// diffs keep pointing at their changes); returns its action, if it was there.
    pub(super) fn take_change(&mut self, kind: &str, key: &str) -> Option<Action> {
        let at = (self.changes.iter()).position(|c| c.kind == kind && c.key == key)?;
        self.diffs.retain(|(i, _)| *i != at);
        for (i, _) in &mut self.diffs {
            if *i > at {
                *i -= 1;
            }
        }
        Some(self.changes.remove(at))
    }
}
