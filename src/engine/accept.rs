//! A declaration from the control plane, accepted or refused under the store's lock: checked
//! (`envelope::accept`: stale, signatures, revision, expiry, validation) and, accepted, put in
//! force durably before any run applies it. The service reports and schedules from the outcome.

use super::{Fatal, Host};
use crate::link::{messages, Report};
use crate::model::declaration::Declaration;
use crate::model::envelope;
use crate::model::run::ReportOutcome;
use crate::model::run::{Trigger, Triggers};
use crate::store::{Confirmer, InForce, Source, State};

/// What became of a declaration from the control plane.
#[derive(Debug)]
pub enum Acceptance {
    /// In force (pending or confirmed), kept as parsed for the run that applies it.
    InForce(Box<Declaration>),
    /// Not newer than the one in force: ignored, the previous one holds.
    Stale(String),
    /// Invalid, or not signed as the config requires.
    Rejected(String),
    /// The store or its lock failed: nothing changed.
    Failed(String),
}

impl Acceptance {
    /// How the control plane's report names a refusal; `None` when accepted.
    pub fn refusal(&self) -> Option<(ReportOutcome, &str)> {
        match self {
            Acceptance::InForce(_) => None,
            Acceptance::Stale(m) => Some((ReportOutcome::Ignored, m)),
            Acceptance::Rejected(m) => Some((ReportOutcome::Rejected, m)),
            Acceptance::Failed(m) => Some((ReportOutcome::Error, m)),
        }
    }
}

impl Host {
    /// Takes the store's lock (pulsing `interrupted`: a person's `apply` may hold it for
    /// minutes), checks the declaration `text` of `revision` and puts it in force, pending for
    /// `confirm_secs` (the config's when the frame carries none; 0 confirms at once).
    pub fn accept_declaration(
        &self,
        revision: u64,
        text: Vec<u8>,
        confirm_secs: Option<u64>,
        interrupted: &dyn Fn() -> bool,
    ) -> Acceptance {
        match self.put_accepted(revision, text, confirm_secs, interrupted) {
            Ok(Ok(declaration)) => Acceptance::InForce(Box::new(declaration)),
            Ok(Err(envelope::Refused::Stale(m))) => Acceptance::Stale(m),
            Ok(Err(envelope::Refused::Rejected(m))) => Acceptance::Rejected(m),
            Err(e @ Fatal::Invalid(_)) => Acceptance::Rejected(e.message()),
            Err(e) => Acceptance::Failed(e.message()),
        }
    }

    fn put_accepted(
        &self,
        revision: u64,
        text: Vec<u8>,
        confirm_secs: Option<u64>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Result<Declaration, envelope::Refused>, Fatal> {
        let store = self.store()?;
        let clock = &self.options.clock;
        let holder = format!(
            "pid {} (declaration) since {}",
            std::process::id(),
            crate::util::words::utc(clock.unix())
        );
        let _lock = store
            .lock_pulsing(&holder, interrupted)
            .map_err(|e| Fatal::error(e.to_string()))?;
        let current = store.in_force_head()?;
        let arrival = envelope::Arrival {
            revision,
            newest: current.as_ref().and_then(|f| f.control_plane_revision),
            now: clock.unix(),
            trust: self.config.trust.as_ref(),
        };
        let accepted = match envelope::accept(text, &arrival, |b| self.validate(b)) {
            Ok(accepted) => accepted,
            Err(refused) => return Ok(Err(refused)),
        };
        let now = clock.unix();
        let state = match confirm_secs.unwrap_or(self.config.confirm_secs) {
            0 => State::Confirmed { at: now },
            secs => State::Pending {
                deadline: crate::store::confirm_deadline(now, secs, "confirm_secs")
                    .map_err(Fatal::invalid)?,
                by: Confirmer::ControlPlane,
                report: None,
            },
        };
        let in_force = InForce {
            source: Source::ControlPlane,
            revision: Some(revision),
            digest: accepted.declaration.digest.clone(),
            since: now,
            text: accepted.text,
            control_plane_revision: Some(revision),
            signed_by: accepted.signed_by.iter().map(|k| k.to_string()).collect(),
            expires: accepted.declaration.expires,
        };
        store.put_in_force(&in_force, state, self.config.generations)?;
        Ok(Ok(accepted.declaration))
    }

    /// Queues the report of a refused declaration (`digest`: of its text as it came) for the
    /// control plane; a failure to queue it is logged.
    pub fn report_refused(
        &self,
        revision: u64,
        digest: String,
        outcome: ReportOutcome,
        message: String,
    ) {
        let now = self.options.clock.unix();
        let report = Report {
            id: 0,
            revision: Some(revision),
            digest: Some(digest),
            trigger: Triggers::one(Trigger::Declaration),
            outcome,
            started: now,
            ended: now,
            changes: Vec::new(),
            failures: Vec::new(),
            deferred: Vec::new(),
            drift: Vec::new(),
            message: messages::abridge_text(&message, messages::MAX_MESSAGE_BYTES),
            failing: Vec::new(),
            facts: None,
            pacnew: Vec::new(),
            needs: None,
            reverted: None,
        };
        if let Ok(store) = self.store() {
            if let Err(e) = self.queue_report(&store, report) {
                log::error!("report not queued: {e}");
            }
        }
    }
}
