//! Records of recent runs: why each ran, when, how it ended, and what it changed or failed to.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// How many runs the store keeps.
pub const KEEP: usize = 50;
/// How many resources of each list a kept record lists: the history stays small however large
/// the runs (the control plane's report of each run is complete). A run's record is made with
/// no more changes than this (`engine::converge`), the rest counted in `omitted`.
pub const LISTED: usize = 100;

/// Why a run happens; a run lists every trigger that collapsed into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// The service started.
    Start,
    /// A new declaration from the control plane was put in force.
    Declaration,
    /// The drift timer.
    Timer,
    /// The link came back after it was lost.
    Reconnect,
    /// SIGUSR1: a person asked for a reconcile now.
    Signal,
    /// The inotify watcher saw what the host owns drift (or lost events).
    Watch,
    /// `mesh-host apply`.
    Apply,
    /// `mesh-host reconcile`.
    Reconcile,
    /// A pending declaration was not confirmed in time: the last confirmed one is back in force.
    Revert,
    /// `mesh-host rollback`: a person put an earlier generation back in force.
    Rollback,
}

impl Trigger {
    const ALL: [Trigger; 10] = [
        Trigger::Start,
        Trigger::Declaration,
        Trigger::Timer,
        Trigger::Reconnect,
        Trigger::Signal,
        Trigger::Watch,
        Trigger::Apply,
        Trigger::Reconcile,
        Trigger::Revert,
        Trigger::Rollback,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Declaration => "declaration",
            Trigger::Timer => "timer",
            Trigger::Reconnect => "reconnect",
            Trigger::Signal => "signal",
            Trigger::Watch => "watch",
            Trigger::Apply => "apply",
            Trigger::Reconcile => "reconcile",
            Trigger::Revert => "revert",
            Trigger::Rollback => "rollback",
        }
    }

    fn from_name(name: &str) -> Option<Trigger> {
        Trigger::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// The triggers of one run, each once, in a fixed order (start, declaration, timer, reconnect,
/// signal, watch, apply, reconcile, revert, rollback). As JSON, a list of names (the wire report's `trigger`);
/// the run record keeps them joined (`start, timer`), see `joined`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Triggers(BTreeSet<Trigger>);

impl Triggers {
    pub fn one(trigger: Trigger) -> Triggers {
        Triggers(BTreeSet::from([trigger]))
    }

    /// The first in order: what the statistics count a run under.
    pub fn first(&self) -> Option<Trigger> {
        self.0.first().copied()
    }

    pub fn insert(&mut self, trigger: Trigger) {
        self.0.insert(trigger);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, trigger: Trigger) -> bool {
        self.0.contains(&trigger)
    }

    pub fn iter(&self) -> impl Iterator<Item = Trigger> + '_ {
        self.0.iter().copied()
    }
}

impl FromIterator<Trigger> for Triggers {
    fn from_iter<I: IntoIterator<Item = Trigger>>(iter: I) -> Triggers {
        Triggers(iter.into_iter().collect())
    }
}

/// `start, timer`: how the run record, the lock's holder and the logs name them.
impl fmt::Display for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, trigger) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(trigger.name())?;
        }
        Ok(())
    }
}

/// The run record's `trigger`: one string, the names joined by `, ` (as runs.json has always
/// kept it).
mod joined {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    use super::{Trigger, Triggers};

    pub fn serialize<S: Serializer>(triggers: &Triggers, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(triggers)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Triggers, D::Error> {
        let text = String::deserialize(d)?;
        text.split(", ")
            .filter(|name| !name.is_empty())
            .map(|name| {
                Trigger::from_name(name)
                    .ok_or_else(|| D::Error::custom(format!("unknown trigger `{name}`")))
            })
            .collect()
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunOutcome {
    /// Every resource is as declared.
    Converged,
    /// Some resources failed (the others converged).
    Failed,
    /// The host was being stopped: the kinds after the one being applied were left.
    Interrupted,
    /// The run itself could not proceed (the store could not record ownership).
    Error,
}

impl RunOutcome {
    pub fn name(self) -> &'static str {
        match self {
            RunOutcome::Converged => "converged",
            RunOutcome::Failed => "failed",
            RunOutcome::Interrupted => "interrupted",
            RunOutcome::Error => "error",
        }
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a reported run ended, or why a declaration did not lead to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportOutcome {
    Converged,
    Failed,
    Interrupted,
    Error,
    /// A declaration with a revision older than the one in force.
    Ignored,
    /// An invalid declaration, or one its signatures do not allow.
    Rejected,
    /// A resource another process keeps changing back.
    Contested,
}

impl From<RunOutcome> for ReportOutcome {
    fn from(outcome: RunOutcome) -> ReportOutcome {
        match outcome {
            RunOutcome::Converged => ReportOutcome::Converged,
            RunOutcome::Failed => ReportOutcome::Failed,
            RunOutcome::Interrupted => ReportOutcome::Interrupted,
            RunOutcome::Error => ReportOutcome::Error,
        }
    }
}

impl fmt::Display for ReportOutcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            ReportOutcome::Converged => "converged",
            ReportOutcome::Failed => "failed",
            ReportOutcome::Interrupted => "interrupted",
            ReportOutcome::Error => "error",
            ReportOutcome::Ignored => "ignored",
            ReportOutcome::Rejected => "rejected",
            ReportOutcome::Contested => "contested",
        })
    }
}

/// One run as the store keeps it in runs.json (`status` shows them; the control plane's report
/// of a run is its own type, `link::Report`, made from this one).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// What caused it.
    #[serde(with = "joined")]
    pub trigger: Triggers,
    pub started: u64,
    pub ended: u64,
    pub outcome: RunOutcome,
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

impl RunRecord {
    /// A run that listed nothing and spawned nothing, for the caller to fill in the rest (a run
    /// refused before it observed anything).
    pub fn bare(trigger: Triggers, started: u64, ended: u64, outcome: RunOutcome) -> RunRecord {
        RunRecord {
            trigger,
            started,
            ended,
            outcome,
            revision: None,
            digest: None,
            changes: Vec::new(),
            failures: Vec::new(),
            deferred: Vec::new(),
            in_sync: 0,
            commands: 0,
            retries: 0,
            notes: Vec::new(),
            omitted: 0,
        }
    }

    /// A converged run that did nothing, for a test to fill in what it needs.
    #[cfg(test)]
    pub fn empty(trigger: Trigger) -> RunRecord {
        RunRecord::bare(Triggers::one(trigger), 1, 2, RunOutcome::Converged)
    }
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

/// A streak with the resource it belongs to: what `status`, reports and metrics show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failing {
    pub kind: String,
    pub key: String,
    pub first_seen: u64,
    pub last_seen: u64,
    pub runs: u64,
    pub last_error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_records_list_at_most_a_hundred_of_each() {
        let result = ResourceResult {
            kind: "files".into(),
            key: "/etc/x".into(),
            action: ResultAction::Create,
            detail: String::new(),
        };
        let run = RunRecord {
            changes: vec![result.clone(); 500],
            failures: vec![result; 3],
            ..RunRecord::empty(Trigger::Apply)
        };
        let kept = run.abridged();
        assert_eq!(
            (kept.changes.len(), kept.failures.len(), kept.omitted),
            (100, 3, 400)
        );
    }

    /// runs.json as written before the triggers, outcomes and actions were enums: it loads, and
    /// written again it is the same text, byte for byte.
    #[test]
    fn old_runs_files_load_and_are_written_back_unchanged() {
        let old = concat!(
            r#"[{"trigger":"apply","started":1,"ended":2,"outcome":"converged","revision":null,"#,
            r#""digest":"ab","changes":[{"kind":"files","key":"/etc/x","action":"create","#,
            r#""detail":"content"}],"failures":[],"deferred":[],"in_sync":3,"commands":4},"#,
            r#"{"trigger":"start, timer","started":5,"ended":6,"outcome":"failed","revision":7,"#,
            r#""digest":null,"changes":[],"failures":[{"kind":"units","key":"a.service","#,
            r#""action":"observe","detail":"no"},{"kind":"files","key":"/etc/y","action":"plan","#,
            r#""detail":"refused"},{"kind":"units","key":"b.service","action":"skipped","#,
            r#""detail":"needs a"}],"deferred":[{"kind":"packages","key":"vim","action":"remove","#,
            r#""detail":"later"}],"in_sync":0,"commands":1,"retries":2,"notes":["stale lock"],"#,
            r#""omitted":5},"#,
            r#"{"trigger":"declaration, reconnect, signal, watch","started":8,"ended":9,"#,
            r#""outcome":"interrupted","revision":null,"digest":null,"changes":[{"kind":"files","#,
            r#""key":"/etc/z","action":"update","detail":""}],"failures":[],"deferred":[],"#,
            r#""in_sync":0,"commands":0},"#,
            r#"{"trigger":"reconcile","started":10,"ended":11,"outcome":"error","revision":null,"#,
            r#""digest":null,"changes":[],"failures":[],"deferred":[],"in_sync":0,"commands":0}]"#,
        );
        let runs: Vec<RunRecord> = serde_json::from_str(old).unwrap();
        assert_eq!(
            runs[1].trigger,
            Triggers::from_iter([Trigger::Start, Trigger::Timer])
        );
        assert_eq!(runs[1].outcome, RunOutcome::Failed);
        assert_eq!(runs[1].failures[0].action, ResultAction::Observe);
        assert_eq!(serde_json::to_string(&runs).unwrap(), old);
    }

    #[test]
    fn a_trigger_the_host_never_wrote_is_refused_by_name() {
        let text = r#"{"trigger":"timer, cron","started":1,"ended":2,"outcome":"converged",
            "revision":null,"digest":null,"changes":[],"failures":[],"deferred":[],"in_sync":0,
            "commands":0}"#;
        let e = serde_json::from_str::<RunRecord>(text).unwrap_err();
        assert!(e.to_string().contains("unknown trigger `cron`"), "{e}");
    }

    #[test]
    fn triggers_keep_one_order_whatever_order_they_came_in() {
        let triggers = Triggers::from_iter([Trigger::Watch, Trigger::Start, Trigger::Timer]);
        assert_eq!(triggers.to_string(), "start, timer, watch");
        assert_eq!(triggers.first(), Some(Trigger::Start));
        assert_eq!(
            serde_json::to_string(&triggers).unwrap(),
            r#"["start","timer","watch"]"#
        );
    }
}

/// One resource's part in a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResourceResult {
    pub kind: String,
    pub key: String,
    pub action: ResultAction,
    pub detail: String,
}

/// What a run did with a resource: the change it made (or failed or deferred), or the step at
/// which it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultAction {
    Create,
    Update,
    Remove,
    /// Found as declared and taken over.
    Adopt,
    /// Its state could not be read.
    Observe,
    /// The kind could not plan it (a refusal, say).
    Plan,
    /// Left alone because something it needs failed.
    Skipped,
    /// Another process keeps changing it back (the watcher's report).
    Contested,
}

impl ResultAction {
    pub fn name(self) -> &'static str {
        match self {
            ResultAction::Create => "create",
            ResultAction::Update => "update",
            ResultAction::Remove => "remove",
            ResultAction::Adopt => "adopt",
            ResultAction::Observe => "observe",
            ResultAction::Plan => "plan",
            ResultAction::Skipped => "skipped",
            ResultAction::Contested => "contested",
        }
    }
}

impl fmt::Display for ResultAction {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}
