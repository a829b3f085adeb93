//! Contested resources: a resource repaired by watch runs again and again within a window is
//! fought over by another process, and left to the drift timer until it is left alone.

use super::{Resource, Watch, CONTEST_REPAIRS, CONTEST_WINDOW_MS};

#[derive(Debug)]
pub(super) struct Contest {
    /// Times of the last repairs by watch runs within the window, oldest first: the first
    /// `repaired` of them (no more are needed to tell a contest).
    pub(super) repairs: [u64; CONTEST_REPAIRS],
    pub(super) repaired: usize,
    /// When it became contested, and how many repairs it took.
    pub(super) contested: Option<(u64, usize)>,
    /// The last change seen while contested: it settles once this is `SETTLE_MS` old.
    pub(super) last_change: u64,
}

/// A contested resource, for `status`: times are the loop's milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Contested {
    pub resource: Resource,
    pub since: u64,
    pub repairs: usize,
    pub last_change: u64,
}

impl Watch {
    /// A watch run at `now` repaired `resources`; returns those that just became contested.
    pub fn repaired(&mut self, now: u64, resources: &[Resource]) -> Vec<Contested> {
        let mut newly = Vec::new();
        for resource in resources {
            let contest = self
                .contests
                .entry(resource.clone())
                .or_insert_with(|| Contest {
                    repairs: [0; CONTEST_REPAIRS],
                    repaired: 0,
                    contested: None,
                    last_change: now,
                });
            let before = &contest.repairs[..contest.repaired];
            let outside = before
                .iter()
                .take_while(|t| now.saturating_sub(**t) > CONTEST_WINDOW_MS)
                .count();
            // The oldest go: those outside the window, and one more when all are needed.
            let gone = outside.max((contest.repaired + 1).saturating_sub(CONTEST_REPAIRS));
            contest.repairs.copy_within(gone..contest.repaired, 0);
            contest.repaired -= gone;
            contest.repairs[contest.repaired] = now;
            contest.repaired += 1;
            if contest.contested.is_none() && contest.repaired >= CONTEST_REPAIRS {
                contest.contested = Some((now, contest.repaired));
                contest.last_change = now;
                newly.push(contested(resource, contest));
            }
        }
        self.forget(now);
        newly
    }

    /// Resources nobody fights over need no bookkeeping once their window has passed: what is
    /// left is forgotten when it has (`forget_at`), not only at the next repair.
    pub(super) fn forget(&mut self, now: u64) {
        self.contests.retain(|_, c| {
            c.contested.is_some()
                || c.repairs[..c.repaired]
                    .last()
                    .is_some_and(|t| now.saturating_sub(*t) <= CONTEST_WINDOW_MS)
        });
        let watched = self.contests.values().any(|c| c.contested.is_none());
        self.forget_at = watched.then_some(now + CONTEST_WINDOW_MS + 1);
        self.any_contested = self.contests.values().any(|c| c.contested.is_some());
    }

    pub fn contested(&self) -> Vec<Contested> {
        self.contests
            .iter()
            .filter(|(_, c)| c.contested.is_some())
            .map(|(r, c)| contested(r, c))
            .collect()
    }
}

pub(super) fn contested(resource: &Resource, contest: &Contest) -> Contested {
    let (since, repairs) = contest.contested.unwrap_or((contest.last_change, 0));
    Contested {
        resource: resource.clone(),
        since,
        repairs,
        last_change: contest.last_change,
    }
}
