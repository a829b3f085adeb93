//! Where the store's records meet the link's messages, each converted here and nowhere else:
//! a run's report queued in the outbox (`store::QueuedReport`) and sent (`link::Report`), a
//! revert kept in the generations (`store::Reverted`) and said in the hello and reports.

use crate::engine::Host;
use crate::link;
use crate::store::{QueuedReport, Reverted, Store, StoreError};

impl From<Reverted> for link::Reverted {
    fn from(r: Reverted) -> link::Reverted {
        link::Reverted {
            revision: r.revision,
            digest: r.digest,
            at: r.at,
            why: r.why,
            to_revision: r.to_revision,
            to_digest: r.to_digest,
            signature_expired: r.signature_expired,
        }
    }
}

impl From<link::Reverted> for Reverted {
    fn from(r: link::Reverted) -> Reverted {
        Reverted {
            revision: r.revision,
            digest: r.digest,
            at: r.at,
            why: r.why,
            to_revision: r.to_revision,
            to_digest: r.to_digest,
            signature_expired: r.signature_expired,
        }
    }
}

/// What the outbox keeps of a report: all of it but what the node is, which the service adds to
/// the newest report it sends when that changed.
impl From<link::Report> for QueuedReport {
    fn from(r: link::Report) -> QueuedReport {
        QueuedReport {
            id: r.id,
            revision: r.revision,
            digest: r.digest,
            trigger: r.trigger,
            outcome: r.outcome,
            started: r.started,
            ended: r.ended,
            changes: r.changes,
            failures: r.failures,
            deferred: r.deferred,
            drift: r.drift,
            message: r.message,
            failing: r.failing,
            pacnew: r.pacnew,
            needs: r.needs,
            reverted: r.reverted.map(Reverted::from),
        }
    }
}

impl From<QueuedReport> for link::Report {
    fn from(r: QueuedReport) -> link::Report {
        link::Report {
            id: r.id,
            revision: r.revision,
            digest: r.digest,
            trigger: r.trigger,
            outcome: r.outcome,
            started: r.started,
            ended: r.ended,
            changes: r.changes,
            failures: r.failures,
            deferred: r.deferred,
            drift: r.drift,
            message: r.message,
            failing: r.failing,
            facts: None,
            pacnew: r.pacnew,
            needs: r.needs,
            reverted: r.reverted.map(link::Reverted::from),
        }
    }
}

impl Host {
    /// Queues `report` in the outbox, abridged to what a control plane must accept, under the
    /// config's bounds; returns the id it was given.
    pub fn queue_report(&self, store: &Store, mut report: link::Report) -> Result<u64, StoreError> {
        report.abridge();
        let mut queued = QueuedReport::from(report);
        let bounds = self.config.outbox_bounds();
        store.outbox_push(&mut queued, bounds, self.options.clock.unix_ms())
    }

    /// The reports the outbox keeps after `after`, oldest first, as the link sends them.
    pub fn pending_reports(
        &self,
        store: &Store,
        after: u64,
    ) -> Result<Vec<link::Report>, StoreError> {
        let queued = store.outbox_pending(after)?;
        Ok(queued.into_iter().map(link::Report::from).collect())
    }
}
