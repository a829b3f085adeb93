//! Failure history: for each resource failing now, its current streak (first and last run it
//! failed in, how many runs in a row, the last error, bounded), kept in `failures.json` and cleared
//! once the resource converges. It lets the log say a failure once rather than every run, and lets
//! `owned`, `status`, reports and metrics tell a new failure from an old one.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::model::run::Failing;
use crate::model::run::ResourceResult;
use crate::util::words::duration_words;

const FILE: &str = "failures.json";
/// The longest error kept per resource: a tool's stderr can be long, the history must stay small.
pub const MAX_ERROR_BYTES: usize = 1024;
/// While a failure repeats, the log says it again at most this often.
pub const REPEAT_LOG_SECS: u64 = 3600;

/// One resource's current failure streak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Streak {
    /// Unix seconds of the first run of the streak that failed it.
    pub first_seen: u64,
    /// Unix seconds of the latest run that failed it.
    pub last_seen: u64,
    /// Runs in a row that failed it.
    pub runs: u64,
    /// The latest failure: the step that failed and why (at most `MAX_ERROR_BYTES`).
    pub last_error: String,
    /// Unix seconds the log last said it (when it started, then at most hourly).
    pub logged: u64,
}

/// What the log should say about one resource after a run.
#[derive(Debug, PartialEq)]
pub enum Notice {
    Started(Failing),
    /// Still failing, and the log has not said so for `REPEAT_LOG_SECS`.
    Repeating(Failing),
    /// Converged after failing for `runs` runs since `first_seen`.
    Cleared {
        kind: String,
        key: String,
        first_seen: u64,
        runs: u64,
        now: u64,
    },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Started(s) => write!(f, "{} {}: failing: {}", s.kind, s.key, s.last_error),
            Notice::Repeating(s) => write!(
                f,
                "{} {}: still failing, {} runs over {}: {}",
                s.kind,
                s.key,
                s.runs,
                duration_words(s.last_seen.saturating_sub(s.first_seen)),
                s.last_error
            ),
            Notice::Cleared {
                kind,
                key,
                first_seen,
                runs,
                now,
            } => write!(
                f,
                "{kind} {key}: converged again after failing {runs} run{} over {}",
                if *runs == 1 { "" } else { "s" },
                duration_words(now.saturating_sub(*first_seen))
            ),
        }
    }
}

/// Every resource's current streak, by kind and key.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureHistory {
    #[serde(default)]
    streaks: BTreeMap<String, BTreeMap<String, Streak>>,
}

impl FailureHistory {
    /// One resource's streak, if it is failing.
    pub fn find(&self, kind: &str, key: &str) -> Option<Failing> {
        let streak = self.streaks.get(kind)?.get(key)?;
        Some(failing(kind, key, streak))
    }

    /// Every streak, by kind then key.
    pub fn failing(&self) -> Vec<Failing> {
        self.streaks
            .iter()
            .flat_map(|(kind, keys)| keys.iter().map(move |(key, s)| failing(kind, key, s)))
            .collect()
    }

    /// Records one run at `now`. `checked` are the kinds the run went through: a resource of
    /// those that is neither among `failed` nor `deferred` has converged (or left the
    /// declaration). A deferred resource (not attempted: the host was stopping, or it needs the
    /// running system) and the kinds the run never reached keep their streaks as they were.
    /// Returns what to log.
    pub fn record(
        &mut self,
        now: u64,
        checked: &[&str],
        failed: &[ResourceResult],
        deferred: &[ResourceResult],
    ) -> Vec<Notice> {
        let mut notices = Vec::new();
        let mut seen: BTreeMap<&str, BTreeMap<&str, &ResourceResult>> = BTreeMap::new();
        for f in failed {
            seen.entry(&f.kind).or_default().insert(&f.key, f);
        }
        let untouched =
            |kind: &str, key: &str| deferred.iter().any(|d| d.kind == kind && d.key == key);
        for kind in checked {
            let Some(keys) = self.streaks.get_mut(*kind) else {
                continue;
            };
            keys.retain(|key, streak| {
                let still = seen.get(kind).is_some_and(|s| s.contains_key(key.as_str()))
                    || untouched(kind, key);
                if !still {
                    notices.push(Notice::Cleared {
                        kind: kind.to_string(),
                        key: key.clone(),
                        first_seen: streak.first_seen,
                        runs: streak.runs,
                        now,
                    });
                }
                still
            });
        }
        for (kind, results) in seen {
            for (key, result) in results {
                let error = bounded(&format!("{} failed: {}", result.action, result.detail));
                let section = self.streaks.entry(kind.to_string()).or_default();
                match section.get_mut(key) {
                    Some(streak) => {
                        streak.runs += 1;
                        streak.last_seen = now;
                        streak.last_error = error;
                        if now.saturating_sub(streak.logged) >= REPEAT_LOG_SECS {
                            streak.logged = now;
                            notices.push(Notice::Repeating(failing(kind, key, streak)));
                        }
                    }
                    None => {
                        let streak = Streak {
                            first_seen: now,
                            last_seen: now,
                            runs: 1,
                            last_error: error,
                            logged: now,
                        };
                        notices.push(Notice::Started(failing(kind, key, &streak)));
                        section.insert(key.to_string(), streak);
                    }
                }
            }
        }
        self.streaks.retain(|_, keys| !keys.is_empty());
        notices
    }
}

fn failing(kind: &str, key: &str, s: &Streak) -> Failing {
    Failing {
        kind: kind.to_string(),
        key: key.to_string(),
        first_seen: s.first_seen,
        last_seen: s.last_seen,
        runs: s.runs,
        last_error: s.last_error.clone(),
    }
}

/// `text` cut to at most `MAX_ERROR_BYTES` on a character boundary, marked when cut.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_string();
    }
    let mut end = MAX_ERROR_BYTES - "...".len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

impl Store {
    pub fn failures(&self) -> Result<FailureHistory, StoreError> {
        Ok(self.read_json(FILE)?.unwrap_or_default())
    }

    pub fn save_failures(&self, history: &FailureHistory) -> Result<(), StoreError> {
        self.write_json(FILE, history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(key: &str, detail: &str) -> ResourceResult {
        ResourceResult {
            kind: "files".into(),
            key: key.into(),
            action: crate::model::run::ResultAction::Plan,
            detail: detail.into(),
        }
    }

    /// Runs every `interval` seconds from 1000, each failing `failed`; returns the notices.
    fn runs(history: &mut FailureHistory, count: u64, interval: u64) -> Vec<Notice> {
        (0..count)
            .flat_map(|i| {
                history.record(
                    1000 + i * interval,
                    &["files"],
                    &[failure("/etc/a", "unknown owner")],
                    &[],
                )
            })
            .collect()
    }

    #[test]
    fn a_failure_repeating_for_ten_runs_is_said_once() {
        let mut history = FailureHistory::default();
        let notices = runs(&mut history, 10, 300);
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(matches!(&notices[0], Notice::Started(s) if s.runs == 1));
        assert_eq!(
            notices[0].to_string(),
            "files /etc/a: failing: plan failed: unknown owner"
        );
        let streak = history.find("files", "/etc/a").unwrap();
        assert_eq!(
            (streak.first_seen, streak.last_seen, streak.runs),
            (1000, 1000 + 9 * 300, 10)
        );
    }

    #[test]
    fn a_repeating_failure_is_said_again_at_most_hourly() {
        let mut history = FailureHistory::default();
        // Every 10 minutes for 2 hours and 10 minutes: started, then after 1 h and after 2 h.
        let notices = runs(&mut history, 14, 600);
        let said: Vec<String> = notices.iter().map(ToString::to_string).collect();
        assert_eq!(
            said,
            vec![
                "files /etc/a: failing: plan failed: unknown owner",
                "files /etc/a: still failing, 7 runs over 1 h 0 min: plan failed: unknown owner",
                "files /etc/a: still failing, 13 runs over 2 h 0 min: plan failed: unknown owner",
            ]
        );
    }

    #[test]
    fn converging_clears_the_streak_and_says_so_once() {
        let mut history = FailureHistory::default();
        runs(&mut history, 3, 600);
        let notices = history.record(5000, &["files"], &[], &[]);
        assert_eq!(
            notices.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["files /etc/a: converged again after failing 3 runs over 1 h 6 min"]
        );
        assert_eq!(history, FailureHistory::default());
        assert!(history.record(5600, &["files"], &[], &[]).is_empty());
        // Failing again is a new streak.
        let again = history.record(6200, &["files"], &[failure("/etc/a", "x")], &[]);
        assert!(matches!(&again[..], [Notice::Started(s)] if s.first_seen == 6200));
    }

    #[test]
    fn kinds_a_run_did_not_reach_and_deferred_resources_keep_their_streaks() {
        let mut history = FailureHistory::default();
        runs(&mut history, 2, 600);
        assert!(history.record(3000, &["packages"], &[], &[]).is_empty());
        assert_eq!(history.find("files", "/etc/a").map(|s| s.runs), Some(2));
        // Not attempted (the host was stopping): neither cleared nor counted.
        let deferred = [failure("/etc/a", "not applied: the host was stopping")];
        assert!(history.record(3600, &["files"], &[], &deferred).is_empty());
        assert_eq!(history.find("files", "/etc/a").map(|s| s.runs), Some(2));
    }

    #[test]
    fn the_last_error_is_bounded() {
        let mut history = FailureHistory::default();
        let long = "é".repeat(5000);
        history.record(1, &["files"], &[failure("/etc/a", &long)], &[]);
        let kept = &history.find("files", "/etc/a").unwrap().last_error;
        assert!(
            kept.len() <= MAX_ERROR_BYTES && kept.ends_with("..."),
            "{kept}"
        );
    }

    #[test]
    fn history_round_trips_through_the_store() {
        let tmp = crate::util::testutil::TempDir::new("failures");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        assert_eq!(store.failures().unwrap(), FailureHistory::default());
        let mut history = FailureHistory::default();
        history.record(7, &["files"], &[failure("/etc/a", "boom")], &[]);
        store.save_failures(&history).unwrap();
        assert_eq!(store.failures().unwrap(), history);
    }
}
