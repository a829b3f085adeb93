//! Run statistics (`stats.json`): runs counted by trigger and outcome since the store was made,
//! the last run and the last success, and each kind's resources by state as the last run found
//! them. The metrics are rendered from these, so they survive restarts and count the command
//! line's runs as well as the service's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::model::pacnew::Pacnew;
use crate::model::run::{RunOutcome, Trigger};
use crate::model::upkeep::Needs;

pub(super) const FILE: &str = "stats.json";

/// One run, as far as the statistics need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastRun {
    /// Unix seconds.
    pub started: u64,
    pub ended: u64,
    pub outcome: RunOutcome,
    /// How long it took, on the monotonic clock; absent in statistics written before it was
    /// kept (then whole seconds from `started` and `ended`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
}

impl LastRun {
    pub fn duration_ms(&self) -> u64 {
        self.took_ms
            .unwrap_or_else(|| self.ended.saturating_sub(self.started).saturating_mul(1000))
    }
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStats {
    /// trigger -> outcome -> runs. A run several triggers collapsed into counts under the first.
    #[serde(default)]
    pub runs_total: BTreeMap<String, BTreeMap<String, u64>>,
    #[serde(default)]
    pub last_run: Option<LastRun>,
    /// Unix seconds the last converged run ended.
    #[serde(default)]
    pub last_success: Option<u64>,
    /// kind -> state -> resources, as the last run that reached the kind found them.
    #[serde(default)]
    pub resources: BTreeMap<String, BTreeMap<String, u64>>,
    /// `.pacnew`/`.pacsave` files beside owned files, as the last run (that got that far) found.
    #[serde(default)]
    pub pacnew: Vec<Pacnew>,
    /// What the machine needed after the last run that looked (`upkeep`); `None` until one did.
    #[serde(default)]
    pub needs: Option<Needs>,
    /// The foreign packages as the last run that counted them found (the facts carry it).
    #[serde(default)]
    pub foreign: Option<Foreign>,
}

/// A count of the foreign packages (`pacman -Qmq`), with the stamp of pacman's databases it was
/// made at (`engine::node::pacman_db_stamp`): a run counts again only when that stamp moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Foreign {
    pub count: u64,
    pub stamp: u64,
}

impl RunStats {
    /// Counts a run; `resources` replaces the counts of the kinds it names (the kinds the run
    /// reached), the others keep what an earlier run found, as `pacnew` does when `None`.
    pub fn record(
        &mut self,
        trigger: Option<Trigger>,
        run: LastRun,
        resources: BTreeMap<String, BTreeMap<String, u64>>,
        pacnew: Option<Vec<Pacnew>>,
        needs: Option<Needs>,
    ) {
        if let Some(pacnew) = pacnew {
            self.pacnew = pacnew;
        }
        if needs.is_some() {
            self.needs = needs;
        }
        *self
            .runs_total
            .entry(trigger.map_or("", Trigger::name).to_string())
            .or_default()
            .entry(run.outcome.name().to_string())
            .or_default() += 1;
        if run.outcome == RunOutcome::Converged {
            self.last_success = Some(run.ended);
        }
        self.last_run = Some(run);
        self.resources.extend(resources);
    }
}

impl Store {
    pub fn save_stats(&self, stats: &RunStats) -> Result<(), StoreError> {
        self.write_json(FILE, stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ended: u64, outcome: RunOutcome) -> LastRun {
        LastRun {
            started: ended - 1,
            ended,
            outcome,
            took_ms: None,
        }
    }

    #[test]
    fn counts_runs_and_keeps_the_last_success() {
        let mut stats = RunStats::default();
        let files = |n| {
            BTreeMap::from([(
                "files".to_string(),
                BTreeMap::from([("in_sync".to_string(), n)]),
            )])
        };
        let (timer, apply) = (Some(Trigger::Timer), Some(Trigger::Apply));
        stats.record(
            timer,
            run(10, RunOutcome::Converged),
            files(3),
            Some(Vec::new()),
            Some(Needs::default()),
        );
        stats.record(
            timer,
            run(20, RunOutcome::Failed),
            BTreeMap::new(),
            None,
            None,
        );
        stats.record(apply, run(30, RunOutcome::Failed), files(2), None, None);
        assert_eq!(
            stats.needs,
            Some(Needs::default()),
            "kept from the run that looked"
        );
        assert_eq!(stats.runs_total["timer"]["converged"], 1);
        assert_eq!(stats.runs_total["timer"]["failed"], 1);
        assert_eq!(stats.runs_total["apply"]["failed"], 1);
        assert_eq!(stats.last_success, Some(10));
        assert_eq!(stats.last_run, Some(run(30, RunOutcome::Failed)));
        assert_eq!(stats.resources["files"]["in_sync"], 2);
        let tmp = crate::util::testutil::TempDir::new("stats");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        store.save_stats(&stats).unwrap();
        assert_eq!(store.stats().unwrap(), stats);
    }
}
