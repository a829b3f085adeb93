//! `owned`: every owned resource observed now and compared with the declaration in force.

use serde::Serialize;

use super::hooks::pacnew_found;
use super::report::within_bound;
use super::scope::{secret_context, OBSERVED_AT_ONCE};
use crate::kinds::{self, Action, Env, Kind, RunContext, Step, Visit};
use crate::model::declaration::Declaration;
use crate::model::pacnew::Pacnew;
use crate::model::run::Failing;
use crate::store::{Ledger, Origin, Store};
use crate::util::diff::ContentDiff;
use crate::util::sorted::Walk;

/// One owned resource as observed now. `owned` lists thousands: its key is borrowed from the
/// ledger, its detail (empty when in sync) and `.pacnew` files are boxed, not grown.
#[derive(Debug, Serialize)]
pub struct OwnedRow<'l> {
    pub kind: &'static str,
    pub key: &'l str,
    pub origin: Origin,
    pub state: OwnedState,
    pub detail: Box<str>,
    /// What differs in a drifted file's or unit file's content.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<Box<ContentDiff>>,
    /// Its failure streak, if recent runs failed it (filled in from the store's history); boxed,
    /// as most rows have none and `owned` may list thousands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing: Option<Box<Failing>>,
    /// A `.pacnew` or `.pacsave` beside an owned file.
    #[serde(skip_serializing_if = "<[Pacnew]>::is_empty")]
    pub pacnew: Box<[Pacnew]>,
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

/// Observes every owned resource and compares it with the declaration in force, handing each
/// row to `emit` as it is made, with the `.pacnew` files beside it (looked for first): `owned`
/// prints thousands of rows without holding them all.
pub fn owned<'l>(
    env: &Env,
    declaration: Declaration,
    ledger: &'l Ledger,
    emit: &mut dyn FnMut(OwnedRow<'l>),
) {
    let mut quiet = env.store.map(Store::pacnew_quiet_dirs).unwrap_or_default();
    let pacnew = pacnew_found(env, &declaration, ledger, &mut quiet);
    let mut cx = secret_context(env, &declaration);
    cx.diffs = env.diffs;
    let mut inspecting = Inspecting {
        env,
        cx: &cx,
        ledger,
        rows: Rows {
            pacnew: &pacnew,
            emit,
            diffs: 0,
        },
    };
    kinds::each(&mut inspecting);
}

/// Where `owned`'s rows go: each given its `.pacnew` files and handed on.
struct Rows<'r, 'l> {
    pacnew: &'r [(&'static str, Vec<Pacnew>)],
    emit: &'r mut dyn FnMut(OwnedRow<'l>),
    /// The bytes of diffs the rows held, at most about `DIFFS_KEPT`.
    diffs: usize,
}

impl<'l> Rows<'_, 'l> {
    fn push(&mut self, mut row: OwnedRow<'l>) {
        let found = (self.pacnew.iter())
            .filter(|(kind, _)| *kind == row.kind)
            .flat_map(|(_, found)| found);
        let beside: Vec<Pacnew> = found.filter(|p| p.path == row.key).cloned().collect();
        row.pacnew = beside.into_boxed_slice();
        (self.emit)(row);
    }
}

/// `owned`'s walk over the kinds, in the registry's order.
struct Inspecting<'r, 'a, 'l> {
    env: &'r Env<'a>,
    cx: &'r RunContext<'r>,
    ledger: &'l Ledger,
    rows: Rows<'r, 'l>,
}

impl Visit for Inspecting<'_, '_, '_> {
    type Out = ();
    fn visit<K: Kind>(&mut self) {
        inspect::<K>(self.env, self.cx, self.ledger, &mut self.rows);
    }
}

fn inspect<'l, K: Kind>(env: &Env, cx: &RunContext, ledger: &'l Ledger, rows: &mut Rows<'_, 'l>) {
    let mut keys = ledger.owned_keys::<K>().peekable();
    while keys.peek().is_some() {
        let chunk = keys.by_ref().take(OBSERVED_AT_ONCE);
        inspect_chunk::<K>(env, cx, ledger, chunk.collect(), rows);
    }
}

/// `inspect` of some of the owned keys, observed at once (see `OBSERVED_AT_ONCE`).
fn inspect_chunk<'l, K: Kind>(
    env: &Env,
    cx: &RunContext,
    ledger: &'l Ledger,
    keys: Vec<&'l str>,
    rows: &mut Rows<'_, 'l>,
) {
    let Some(&first) = keys.first() else {
        return;
    };
    let observed = K::observe(env, cx, &keys);
    let mut seen = observed.as_ref().map(|o| o.walk());
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
                    diff = within_bound(&mut rows.diffs, c.diff);
                    (OwnedState::Drifted, c.details.join(", "))
                }
                Step::Fail(e) | Step::Skip(e) => (OwnedState::Error, e),
            },
        };
        rows.push(OwnedRow {
            kind: K::NAME,
            key,
            origin: entry.origin,
            state,
            detail: detail.into_boxed_str(),
            diff,
            failing: None,
            pacnew: Box::default(),
        });
    }
}
