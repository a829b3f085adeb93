//! Records of recent runs: why each ran, when, how it ended, and what it changed or failed to.

use serde::{Deserialize, Serialize};

/// How many runs the store keeps.
pub const KEEP: usize = 50;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// What caused it: `apply`, `reconcile`, and later the service's triggers.
    pub trigger: String,
    pub started: u64,
    pub ended: u64,
    /// `converged`, `failed` (some resources) or `error` (the run itself could not proceed).
    pub outcome: String,
    pub revision: Option<u64>,
    pub digest: Option<String>,
    pub changes: Vec<ResourceResult>,
    pub failures: Vec<ResourceResult>,
    pub deferred: Vec<ResourceResult>,
    pub in_sync: usize,
    /// External commands the run spawned.
    pub commands: usize,
}

/// One resource's part in a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResourceResult {
    pub kind: String,
    pub key: String,
    /// `create`, `update`, `remove`, or for failures the step that failed.
    pub action: String,
    pub detail: String,
}
