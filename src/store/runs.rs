//! Records of recent runs: why each ran, when, how it ended, and what it changed or failed to.

use serde::{Deserialize, Serialize};

/// How many runs the store keeps.
pub const KEEP: usize = 50;
/// How many resources of each list a kept record lists: the history stays small however large
/// the runs (the control plane's report of each run is complete).
const LISTED: usize = 100;

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
    /// Of those, queries repeated on part of a batch that failed as a whole, to find the
    /// resource that made it fail.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: usize,
    /// What the run did beside its resources that a person should know (a stale lock removed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Entries left out of the lists above to keep the history small.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RunRecord {
    /// The record as the store keeps it: each list cut to its first `LISTED` entries.
    pub fn abridged(&self) -> RunRecord {
        let mut kept = self.clone();
        for list in [&mut kept.changes, &mut kept.failures, &mut kept.deferred] {
            kept.omitted += list.len().saturating_sub(LISTED);
            list.truncate(LISTED);
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_records_list_at_most_a_hundred_of_each() {
        let result = ResourceResult {
            kind: "files".into(),
            key: "/etc/x".into(),
            action: "create".into(),
            detail: String::new(),
        };
        let run = RunRecord {
            trigger: "apply".into(),
            started: 0,
            ended: 0,
            outcome: "converged".into(),
            revision: None,
            digest: None,
            changes: vec![result.clone(); 500],
            failures: vec![result; 3],
            deferred: Vec::new(),
            in_sync: 0,
            commands: 0,
            retries: 0,
            notes: Vec::new(),
            omitted: 0,
        };
        let kept = run.abridged();
        assert_eq!(
            (kept.changes.len(), kept.failures.len(), kept.omitted),
            (100, 3, 400)
        );
    }
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
