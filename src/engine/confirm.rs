//! Generations as the engine carries them out: a pending declaration reverted once its deadline
//! has passed, a person's `rollback` and `confirm`, the control plane's ack that confirms. Each
//! changes the store under its lock, then converges as any run does (`converge_in_force`).

use super::{Fatal, Host, RunResult};
use crate::engine::reconcile::Scope;
use crate::model::run::{Trigger, Triggers};
use crate::store::{self, words_revision, Confirmer, Lock, Revert, Store};
use crate::util::words::expiry;

/// What a revert did: said for people and the log, and the run that converged to it.
pub struct Reverting {
    pub said: String,
    pub run: Option<RunResult>,
}

impl Host {
    fn hold(
        &self,
        store: &Store,
        what: &str,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Lock, Fatal> {
        let holder = format!(
            "pid {} ({what}) since {}",
            std::process::id(),
            crate::util::words::utc(self.options.clock.unix())
        );
        let locked = if wait {
            store.lock_pulsing(&holder, interrupted)
        } else {
            store.lock(false, &holder)
        };
        locked.map_err(Fatal::from)
    }

    /// The deadline (Unix seconds) of the declaration in force, when it is pending.
    pub fn pending_deadline(&self) -> Result<Option<u64>, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Ok(None);
        };
        Ok(store.generations()?.pending().map(|(deadline, _)| deadline))
    }

    /// When the declaration in force is pending past its deadline: the last confirmed generation
    /// is put back in force and converged (trigger `revert`). `link_error` is the link's last
    /// error, the likely reason the control plane's ack did not come.
    pub fn revert_if_due(
        &self,
        link_error: Option<&str>,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Reverting>, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Ok(None);
        };
        let now = self.options.clock.unix();
        let Some((_, by)) = store.generations()?.pending().filter(|(d, _)| *d <= now) else {
            return Ok(None);
        };
        let why = match by {
            Confirmer::Person => "not confirmed by `mesh-host confirm` in time".to_string(),
            Confirmer::ControlPlane => format!(
                "the control plane did not acknowledge the report of the run that applied it in \
                 time{}",
                link_error.map_or(String::new(), |e| format!(" (the link's last error: {e})"))
            ),
        };
        let lock = self.hold(&store, "reverting", wait, interrupted)?;
        let reverted = match store.revert_due(now, &why, self.config.generations)? {
            Revert::NotDue => return Ok(None),
            Revert::Nothing(said) => {
                log::warn!("{said}");
                return Ok(Some(Reverting { said, run: None }));
            }
            Revert::Reverted(reverted) => reverted,
        };
        drop(lock);
        let expired = match reverted.signature_expired {
            true => " (its signature has expired: it is held to get the machine back)",
            false => "",
        };
        let said = format!(
            "revision {} reverted: {why}; revision {} is back in force{expired}",
            words_revision(reverted.revision),
            words_revision(reverted.to_revision),
        );
        log::warn!("{said}");
        let run = self.converge_in_force(
            &Triggers::one(Trigger::Revert),
            &Scope::All,
            wait,
            interrupted,
        )?;
        Ok(Some(Reverting { said, run }))
    }

    /// `mesh-host rollback`: the generation of `to` (or the one before the declaration in force)
    /// back in force, converged (trigger `rollback`). One whose signature has expired needs
    /// `force`. Returns what it did, for people.
    pub fn rollback(
        &self,
        to: Option<u64>,
        force: bool,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(String, Option<RunResult>), Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Err(Fatal::invalid(format!(
                "nothing to roll back to: no store at {}",
                self.config.state_dir.display()
            )));
        };
        let lock = self.hold(&store, "rollback", wait, interrupted)?;
        let now = self.options.clock.unix();
        let generations = store.generations()?;
        let target = (generations.rollback_target(to))
            .map_err(|e| Fatal::invalid(format!("rollback: {e}")))?
            .clone();
        if target.expired(now) && !force {
            return Err(Fatal::invalid(format!(
                "rollback: revision {} is signed and its signature {}; `--force` rolls back to \
                 it anyway; nothing was changed",
                words_revision(target.revision),
                target.expires.map_or(String::new(), |e| expiry(e, now))
            )));
        }
        store.restore(&target, now, self.config.generations, None)?;
        drop(lock);
        let said = format!(
            "revision {} (put in force {}) is back in force",
            words_revision(target.revision),
            crate::util::words::utc(target.applied)
        );
        let run = self.converge_in_force(
            &Triggers::one(Trigger::Rollback),
            &Scope::All,
            wait,
            interrupted,
        )?;
        Ok((said, run))
    }

    /// `mesh-host confirm`: the pending declaration in force is confirmed.
    pub fn confirm(&self, wait: bool) -> Result<String, Fatal> {
        let nothing = || Fatal::invalid("nothing to confirm: no declaration is pending".into());
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Err(nothing());
        };
        let _lock = self.hold(&store, "confirm", wait, &super::never)?;
        let now = self.options.clock.unix();
        let mut revision = None;
        let confirmed = store.change_generations(|g| {
            revision = g.current().map(|c| c.revision);
            !g.due(now) && g.confirm(now)
        })?;
        if confirmed {
            self.write_metrics(&store, None);
        }
        match confirmed {
            true => Ok(format!(
                "revision {} confirmed",
                words_revision(revision.flatten())
            )),
            false => Err(nothing()),
        }
    }

    /// The control plane acked reports up to `id`: confirms the pending declaration whose run's
    /// report is among them. Never waits for the lock (the service calls it): `Fatal::Locked`
    /// says to try again.
    pub fn confirm_acked(&self, id: u64) -> Result<Option<String>, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Ok(None);
        };
        let current = store.generations()?;
        let waiting = matches!(
            current.current().map(|c| c.state),
            Some(store::State::Pending {
                by: Confirmer::ControlPlane,
                report: Some(report),
                ..
            }) if report <= id
        );
        if !waiting {
            return Ok(None);
        }
        let _lock = self.hold(&store, "confirming", false, &super::never)?;
        let now = self.options.clock.unix();
        let mut revision = None;
        let confirmed = store.change_generations(|g| {
            revision = g.current().map(|c| c.revision);
            !g.due(now) && g.confirm_by_ack(id, now)
        })?;
        if confirmed {
            self.write_metrics(&store, Some(true));
        }
        Ok(confirmed.then(|| {
            format!(
                "revision {} confirmed: the control plane acknowledged its run's report",
                words_revision(revision.flatten())
            )
        }))
    }

    /// After a run that applied the pending declaration `digest` queued its report: that
    /// report's ack will confirm it. The caller holds the store's lock.
    pub(super) fn await_ack(&self, store: &Store, digest: &str) {
        let noted = store.outbox_last_id().and_then(|id| {
            store.change_generations(|g| {
                g.pending()
                    .is_some_and(|(_, by)| by == Confirmer::ControlPlane)
                    && g.await_ack(digest, id)
            })
        });
        if let Err(e) = noted {
            log::error!("the pending declaration will not be confirmed by this run's ack: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{never, Target};
    use super::*;
    use crate::os::clock::Clock;
    use crate::store::{InForce, Source};

    /// The deadline of `apply --confirm` is wall time on the host's clock: in virtual time, a
    /// second before it nothing is reverted; a second after, the confirmed generation is back in
    /// force and converged.
    #[test]
    fn a_pending_declaration_is_reverted_at_its_deadline_in_virtual_time() {
        let tmp = crate::util::testutil::TempDir::new("revert-clock");
        let clock = Clock::manual(1_800_000_000);
        let (host, root) = super::super::scratch_host(&tmp, clock.clone());
        let apply = |name: &str, confirm_secs: Option<u64>| {
            let text =
                format!(r#"{{"schema": 1, "files": {{"/etc/{name}": {{"content": "x"}}}}}}"#);
            let declaration = host.validate(text.as_bytes()).expect("valid");
            let in_force = InForce {
                source: Source::Local { path: name.into() },
                revision: None,
                digest: declaration.digest.clone(),
                since: clock.unix(),
                text: text.into_bytes(),
                control_plane_revision: None,
                signed_by: Vec::new(),
                expires: None,
            };
            let target = Target::New {
                declaration: &declaration,
                in_force,
                confirm_secs,
            };
            let triggers = Triggers::one(Trigger::Apply);
            host.converge(&triggers, target, &Scope::All, false, &never)
                .expect("converged");
        };
        let present = |name: &str| root.join("etc").join(name).exists();

        apply("a", None);
        apply("b", Some(60));
        assert_eq!(host.pending_deadline().expect("read"), Some(1_800_000_060));
        clock.advance(59_000);
        let early = host.revert_if_due(None, false, &never).expect("checked");
        assert!(early.is_none(), "reverted a second before its deadline");
        assert!(present("b") && !present("a"));

        clock.advance(2_000);
        let reverted = host.revert_if_due(None, false, &never).expect("reverted");
        let said = reverted.map(|r| r.said).unwrap_or_default();
        assert!(
            said.contains("not confirmed by `mesh-host confirm` in time"),
            "{said}"
        );
        assert!(
            present("a") && !present("b"),
            "the confirmed generation converged"
        );
        assert_eq!(host.pending_deadline().expect("read"), None);
    }
}
