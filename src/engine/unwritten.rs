//! Runs the store could not take (its disk full, say): each run's record and report kept in
//! memory, oldest first, until the store can take them, so a run that changed the machine is
//! never left without a trace. Bounded: past `KEPT` runs the oldest is dropped, and the next run
//! written says how many were lost and when.

use std::collections::VecDeque;

use crate::model::run::RunRecord;
use crate::store::QueuedReport;

/// Runs kept at most; a report may be up to a MiB (`link::MAX_REPORT_BYTES`).
pub const KEPT: usize = 8;

/// One run not yet written whole: its report (when there is a control plane) and its record,
/// each `None` once written.
pub struct Unwritten {
    pub report: Option<QueuedReport>,
    pub record: Option<RunRecord>,
    /// Runs before this one that were dropped unwritten, said when this one is written.
    pub lost_before: Option<Lost>,
}

/// Runs dropped unwritten: how many, and when the first started and the last ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lost {
    pub runs: usize,
    pub from: u64,
    pub to: u64,
}

impl Lost {
    /// What the next run written says of them (its report's message and its record's notes).
    pub fn note(&self) -> String {
        format!(
            "{} earlier run{} ({} to {}) could not be recorded or reported in full: the store \
             could not be written, and no more than {KEPT} runs are kept in memory",
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            crate::util::words::utc(self.from),
            crate::util::words::utc(self.to)
        )
    }
}

/// The runs not yet written whole, oldest first: one per `engine::Host`, so the service keeps
/// them from run to run.
#[derive(Default)]
pub struct Backlog {
    runs: VecDeque<Unwritten>,
}

impl Backlog {
    /// Keeps a run behind the others; past `KEPT`, the oldest is dropped and counted on the next.
    pub fn push(&mut self, run: Unwritten) {
        self.runs.push_back(run);
        while self.runs.len() > KEPT {
            let Some(dropped) = self.runs.pop_front() else {
                break;
            };
            let (started, ended) = match (&dropped.record, &dropped.report) {
                (Some(record), _) => (record.started, record.ended),
                (None, Some(report)) => (report.started, report.ended),
                (None, None) => continue,
            };
            let mut lost = dropped.lost_before.unwrap_or(Lost {
                runs: 0,
                from: started,
                to: ended,
            });
            lost.runs += 1;
            lost.to = ended;
            if let Some(next) = self.runs.front_mut() {
                next.lost_before = Some(lost);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Unwritten> {
        self.runs.iter_mut()
    }

    /// Forgets the runs written whole.
    pub fn drop_written(&mut self) {
        self.runs
            .retain(|run| run.report.is_some() || run.record.is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::run::Trigger;

    fn run(started: u64) -> Unwritten {
        Unwritten {
            report: None,
            record: Some(RunRecord {
                started,
                ended: started + 1,
                ..RunRecord::empty(Trigger::Watch)
            }),
            lost_before: None,
        }
    }

    /// Past `KEPT`, the oldest go, and the oldest kept says how many and from when to when.
    #[test]
    fn the_oldest_runs_are_dropped_and_counted_on_the_next() {
        let mut backlog = Backlog::default();
        for started in 0..KEPT as u64 + 3 {
            backlog.push(run(started * 10));
        }
        assert_eq!(backlog.len(), KEPT);
        let front = backlog.iter_mut().next().unwrap();
        assert_eq!(front.record.as_ref().unwrap().started, 30);
        assert_eq!(
            front.lost_before,
            Some(Lost {
                runs: 3,
                from: 0,
                to: 21
            })
        );
        assert!(front.lost_before.unwrap().note().starts_with(
            "3 earlier runs (1970-01-01 00:00:00 UTC to 1970-01-01 00:00:21 UTC) could not be \
                 recorded"
        ));
        front.record = None;
        backlog.drop_written();
        assert_eq!(backlog.len(), KEPT - 1);
        assert_eq!(backlog.iter_mut().next().unwrap().lost_before, None);
    }
}
