//! Watch repairs that failed, tried again within seconds rather than left to the drift timer.
//! A repair can lose a race it cannot see coming: a person's `systemctl stop` (or
//! `disable --now`) issued while the repair's start or restart job runs cancels that job
//! ("Job for X canceled"), and the unit then stays stopped with no inotify hint left to wake the
//! watcher. A few short, growing delays cover such a race; past them the timer takes over, and
//! `status` says so. Pure bookkeeping over the loop's monotonic milliseconds.

use std::collections::BTreeSet;

use super::drift::Resource;

/// The waits before each retry of a failed watch repair; after the last, the timer's.
pub const DELAYS_MS: [u64; 3] = [1_000, 2_000, 4_000];

#[derive(Debug, Default)]
pub struct Retry {
    /// What failed in the last watch run, to converge again at `at`.
    failed: BTreeSet<Resource>,
    at: Option<u64>,
    /// Retries made for the current failures.
    tries: usize,
    /// What is left to the timer after every retry failed, for `status`, until a run repairs it.
    given_up: BTreeSet<Resource>,
}

impl Retry {
    /// After a watch run that ended at `now` with `failed` among what it converged: the next
    /// retry scheduled, or, past the last, a sentence for the log saying the timer takes over.
    pub fn after_watch_run(&mut self, now: u64, failed: BTreeSet<Resource>) -> Option<String> {
        self.at = None;
        self.given_up.retain(|r| failed.contains(r));
        if failed.is_empty() {
            self.tries = 0;
            self.failed.clear();
            return None;
        }
        if let Some(delay) = DELAYS_MS.get(self.tries) {
            self.tries += 1;
            self.at = Some(now.saturating_add(*delay));
            self.failed = failed;
            return None;
        }
        let names: Vec<String> = failed.iter().map(|(k, key)| format!("{k} {key}")).collect();
        let said = format!(
            "watch: the repair of {} failed {} times in a row; left to the drift timer",
            names.join(", "),
            DELAYS_MS.len() + 1
        );
        self.given_up.extend(failed);
        self.failed.clear();
        self.tries = 0;
        Some(said)
    }

    /// A full run covered everything: nothing is retried, nothing is left to the timer alone.
    pub fn covered(&mut self) {
        *self = Retry::default();
    }

    /// When the loop must wake for a retry.
    pub fn deadline(&self) -> Option<u64> {
        self.at
    }

    /// The resources to converge again, once their retry is due at `now`.
    pub fn take_due(&mut self, now: u64) -> Option<BTreeSet<Resource>> {
        match self.at {
            Some(at) if now >= at => {
                self.at = None;
                Some(std::mem::take(&mut self.failed))
            }
            _ => None,
        }
    }

    /// What every retry failed to repair (the drift timer's now).
    pub fn given_up(&self) -> &BTreeSet<Resource> {
        &self.given_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(name: &str) -> BTreeSet<Resource> {
        BTreeSet::from([("units", name.to_string())])
    }

    #[test]
    fn a_failed_repair_is_retried_with_growing_delays_then_left_to_the_timer() {
        let mut retry = Retry::default();
        let mut now = 10_000;
        for delay in DELAYS_MS {
            assert_eq!(retry.after_watch_run(now, unit("a.service")), None);
            assert_eq!(retry.deadline(), Some(now + delay));
            assert_eq!(retry.take_due(now + delay - 1), None);
            now += delay;
            assert_eq!(retry.take_due(now), Some(unit("a.service")));
            assert_eq!(retry.deadline(), None);
        }
        let said = retry.after_watch_run(now, unit("a.service")).unwrap();
        assert_eq!(
            said,
            "watch: the repair of units a.service failed 4 times in a row; left to the drift timer"
        );
        assert_eq!(retry.deadline(), None);
        assert_eq!(retry.given_up(), &unit("a.service"));
        // A later watch run that repairs it clears it, and the count starts again.
        assert_eq!(retry.after_watch_run(now, BTreeSet::new()), None);
        assert!(retry.given_up().is_empty());
        assert_eq!(retry.after_watch_run(now, unit("a.service")), None);
        assert_eq!(retry.deadline(), Some(now + DELAYS_MS[0]));
    }

    #[test]
    fn a_repair_that_works_or_a_full_run_ends_the_retries() {
        let mut retry = Retry::default();
        retry.after_watch_run(0, unit("a.service"));
        assert_eq!(retry.after_watch_run(500, BTreeSet::new()), None);
        assert_eq!(retry.deadline(), None);
        retry.after_watch_run(600, unit("a.service"));
        retry.covered();
        assert_eq!((retry.deadline(), retry.take_due(u64::MAX)), (None, None));
    }
}
