//! What every part of a run shares: its mode and scope, how many resources it holds at once,
//! the ledger's save, and a run's context ready for secret content.

use std::collections::BTreeSet;

use crate::kinds::{Env, RunContext};
use crate::model::declaration::Declaration;
use crate::store::{Ledger, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Observe and plan only; nothing changes.
    Plan,
    Apply,
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
    pub(super) fn includes(&self, kind: &'static str, key: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(set) => set.contains(&(kind, key.to_string())),
        }
    }
}

/// What a run says of an adoption whose original was already in the store.
pub(super) const ORIGINAL_KEPT: &str =
    "the original kept in the store from an earlier adoption stays the \
    original (the ledger no longer listed it)";

/// How many resources of a kind are observed at once: a chunk's observations are planned and
/// dropped before the next chunk is observed, so a large run holds one chunk's at a time, while
/// a batched query (pacman, systemctl) still asks about thousands of names in one spawn (a
/// handful of spawns however many packages: `tests/it/noop.rs`).
pub(super) const OBSERVED_AT_ONCE: usize = 4096;

/// How many resources of a kind applied a chunk at a time (`Kind::APPLIED_IN_CHUNKS`) a chunk
/// holds: its changes are held while it is applied, on top of what the chunks before recorded.
/// Each chunk writes the ledger two or three times, so smaller chunks cost more writes for
/// little less memory: this size keeps the converge within its memory goal
/// (docs/performance.md, figure 11) with few ledger writes.
pub(super) const APPLIED_AT_ONCE: usize = 2048;

/// How many changed resources of a kind applied a chunk at a time (`Kind::APPLIED_IN_CHUNKS`)
/// `verify` observes at once: that observation sits on top of the chunk's changes and what the
/// chunks before recorded, the peak of a converge: a batch smaller than the chunk keeps that
/// peak within its memory goal (docs/performance.md, figure 11).
pub(super) const VERIFIED_IN_CHUNKS_AT_ONCE: usize = 1024;

pub(super) fn save(env: &Env, ledger: &Ledger, dirty: bool) -> Result<(), StoreError> {
    match (dirty, env.store) {
        (true, Some(store)) => store.save_ledger(ledger),
        _ => Ok(()),
    }
}

/// A run's context, ready for secret content (docs/declaration.md "Secrets"): with any, the
/// runner scrubs it from every tool's stderr, and changes show its keyed digests, under the
/// store's key (made the first time it is needed).
pub(super) fn secret_context<'a>(env: &Env, declaration: &'a Declaration) -> RunContext<'a> {
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
