//! What a run converges to, settled under the store's lock: the lock taken and the store made
//! ready, a person's declaration put in force, or the one in force (the service's, unparsed
//! while still the store's); what cannot be trusted refuses the run, recorded as any other.

use super::{invalid, Fatal, Host};
use crate::model::declaration::Declaration;
use crate::model::run::{RunOutcome, RunRecord, Triggers};
use crate::store::{self, Confirmer, InForce, Lock, State, Store};

/// What a run converges to.
pub enum Target<'a> {
    /// A declaration a person gave, which becomes the one in force.
    New {
        declaration: &'a Declaration,
        in_force: InForce,
        /// `apply --confirm SECS`: pending, reverted unless a person confirms it within SECS.
        confirm_secs: Option<u64>,
    },
    /// Whatever is in force in the store once the lock is held.
    InForce,
    /// The same, for the service. `accepted` is the declaration it took from the control plane
    /// and stored since its last run: converged unparsed while its digest is still the one in
    /// force under the lock (a person's `apply` may have replaced it meanwhile), else the store's
    /// is read. What the run converged with comes back in `RunResult::converged`.
    Service { accepted: Option<Declaration> },
}

pub(super) fn join_lines(a: &str, b: &str) -> String {
    [a, b]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// A run under way, under the store's lock: what its records need from its start.
pub(super) struct Started<'t> {
    pub(super) store: Store,
    _lock: Lock,
    pub(super) triggers: &'t Triggers,
    /// Wall time at the start (Unix seconds), and the monotonic clock then (`Clock::mono_ms`).
    pub(super) started: u64,
    pub(super) clock: u64,
    /// What the run's report says first: a runs history set aside as unreadable.
    pub(super) runs_note: String,
}

/// What a run converges to.
pub(super) struct Aim<'d> {
    pub(super) declaration: &'d Declaration,
    pub(super) revision: Option<u64>,
    pub(super) expires: Option<u64>,
    /// A person's `apply` put a new declaration in force: its run is recorded durably.
    pub(super) new_in_force: bool,
}

/// The declaration in force, parsed, with what the store says of it.
struct InForceParsed {
    declaration: Declaration,
    revision: Option<u64>,
    expires: Option<u64>,
}

impl Host {
    /// What the run converges to, settled under the lock: a person's declaration put in force,
    /// or the one in force (`owned` takes it when parsed here); `None` when there is none.
    pub(super) fn aim<'d>(
        &self,
        run: &Started,
        target: Target<'d>,
        owned: &'d mut Option<Declaration>,
    ) -> Result<Option<Aim<'d>>, Fatal> {
        Ok(Some(match target {
            Target::New {
                declaration,
                mut in_force,
                confirm_secs,
            } => Aim {
                declaration,
                revision: declaration.revision,
                expires: in_force.expires,
                new_in_force: self.put_new_in_force(run, &mut in_force, confirm_secs)?,
            },
            Target::InForce | Target::Service { .. } => {
                let accepted = match target {
                    Target::Service { accepted } => accepted,
                    _ => None,
                };
                let Some(found) = self.in_force_for(run, accepted)? else {
                    return Ok(None);
                };
                Aim {
                    revision: found.revision,
                    expires: found.expires,
                    declaration: owned.insert(found.declaration),
                    new_in_force: false,
                }
            }
        }))
    }

    /// A run's start: the store's lock (waiting, the same check as between resources runs: the
    /// service's link stays answered), then what a crash left half written removed, an
    /// unreadable runs history set aside, and the runs kept in memory written first.
    pub(super) fn start_run<'t>(
        &self,
        triggers: &'t Triggers,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Started<'t>, Fatal> {
        let store = self.store()?;
        let started = self.options.clock.unix();
        let clock = self.options.clock.mono_ms();
        let holder = format!(
            "pid {} ({}) since {}",
            std::process::id(),
            triggers,
            crate::util::words::utc(started)
        );
        let locked = if wait {
            store.lock_pulsing(&holder, interrupted)
        } else {
            store.lock(false, &holder)
        };
        let lock = locked?;
        // What a crash left half written: removed (an outbox report recovered), under the lock.
        if let Err(e) = store.clean_after_crash() {
            log::warn!("{e}");
        }
        // A run that changes the machine is always recorded: an unreadable history is set aside
        // now, before anything changes, and the run's report says so.
        let runs_note = store.set_aside_unreadable_runs(started)?;
        if let Some(note) = &runs_note {
            log::warn!("{note}");
        }
        // Runs the store could not take before are written first, in order.
        self.write_unwritten(&store);
        Ok(Started {
            store,
            _lock: lock,
            triggers,
            started,
            clock,
            runs_note: runs_note.unwrap_or_default(),
        })
    }

    /// A declaration in force or a ledger that cannot be trusted stops the run before anything
    /// is observed, and the run is recorded and reported `error` as any other run.
    pub(super) fn refuse(
        &self,
        run: &Started,
        e: Fatal,
        revision: Option<u64>,
        digest: Option<String>,
    ) -> Fatal {
        let record = RunRecord {
            revision,
            digest,
            // Why, for `status` (the report's message says it whole).
            notes: e.message().lines().take(1).map(str::to_string).collect(),
            ..RunRecord::bare(
                run.triggers.clone(),
                run.started,
                self.options.clock.unix(),
                RunOutcome::Error,
            )
        };
        let message = join_lines(&run.runs_note, &e.message());
        if let Some(why) = self.keep_run(&run.store, &record, None, &[], &message, false) {
            log::error!("{why}");
        }
        self.note_run(&run.store, &record, None, run.clock, false);
        e
    }

    /// A person's declaration put in force (pending with `--confirm`), unless the same file is
    /// already; returns whether it was.
    fn put_new_in_force(
        &self,
        run: &Started,
        in_force: &mut InForce,
        confirm_secs: Option<u64>,
    ) -> Result<bool, Fatal> {
        // A local override keeps the control plane's revision: only a newer one replaces it.
        let current = run.store.in_force_head()?;
        in_force.control_plane_revision = current.as_ref().and_then(|f| f.control_plane_revision);
        // The same file applied again is already in force (and has been since then).
        let unchanged = current.is_some_and(|f| {
            f.digest == in_force.digest
                && f.source == in_force.source
                && f.signed_by == in_force.signed_by
        });
        if unchanged {
            return Ok(false);
        }
        let state = match confirm_secs {
            Some(secs) => State::Pending {
                deadline: store::confirm_deadline(self.options.clock.unix(), secs, "--confirm")
                    .map_err(Fatal::invalid)?,
                by: Confirmer::Person,
                report: None,
            },
            None => State::Confirmed { at: run.started },
        };
        (run.store).put_in_force(in_force, state, self.config.generations)?;
        Ok(true)
    }

    /// The declaration in force: the one the service `accepted`, unparsed, while its digest is
    /// still the store's (a head that cannot be read is reported by reading the store whole),
    /// else the store's, read and validated; `None` when there is none yet.
    fn in_force_for(
        &self,
        run: &Started,
        accepted: Option<Declaration>,
    ) -> Result<Option<InForceParsed>, Fatal> {
        let head = accepted
            .as_ref()
            .and(run.store.in_force_head().ok().flatten());
        match accepted.zip(head) {
            Some((d, head)) if d.digest == head.digest => Ok(Some(InForceParsed {
                declaration: d,
                revision: head.revision,
                expires: head.expires,
            })),
            _ => self.read_in_force(run),
        }
    }

    /// The declaration in force, read and validated (its text dropped on return, before the
    /// ledger is read), with its revision and expiry; `None` when there is none yet.
    fn read_in_force(&self, run: &Started) -> Result<Option<InForceParsed>, Fatal> {
        let in_force = match run.store.in_force() {
            Ok(Some(in_force)) => in_force,
            Ok(None) => return Ok(None),
            Err(e) => {
                let (revision, digest) = match run.store.in_force_head() {
                    Ok(Some(head)) => (head.revision, Some(head.digest)),
                    _ => (None, None),
                };
                return Err(self.refuse(run, e.into(), revision, digest));
            }
        };
        let d = self.validate(&in_force.text).map_err(|p| {
            let e = invalid(&run.store.path().join(store::IN_FORCE), p);
            self.refuse(run, e, in_force.revision, Some(in_force.digest.clone()))
        })?;
        Ok(Some(InForceParsed {
            declaration: d,
            revision: in_force.revision,
            expires: in_force.expires,
        }))
    }
}
