//! The commands that read a declaration or the store and print what they found or did: each
//! asks the engine (`Host`) and hands the result to `render`, as text or `--json`; each returns
//! an exit code or a `Fatal` that `main` prints once.

use std::path::{Path, PathBuf};

use super::out::{errln, Out};
use super::render;
use crate::engine::reconcile::{self, Mode, OwnedState};
use crate::engine::{
    invalid, never, Fatal, Host, ReadDeclaration, RunResult, Target, EXIT_CHANGES, EXIT_DEGRADED,
    EXIT_ERROR, EXIT_FAILED, EXIT_OK,
};
use crate::model::declaration::Declaration;
use crate::model::envelope;
use crate::model::run::{Trigger, Triggers};
use crate::store::{InForce, Ledger, Source, Store};
use crate::util::words::{duration_words, utc};

/// The engine, as one command line asked for it.
pub struct Commands<'a> {
    pub host: &'a Host,
    /// Output as JSON, sorted keys (`--json`).
    pub json: bool,
    /// Wait for the store's lock instead of exiting 3 (`--wait`).
    pub wait: bool,
    /// Plan and owned exit 5 when there is something to change (`--detailed-exitcode`).
    pub detailed_exitcode: bool,
    pub out: &'a Out,
}

impl Commands<'_> {
    /// Prints what a converging run did; its exit code. A run the store could not take is
    /// lost when this process ends: said, and exit 4.
    fn print_converged(&self, result: &RunResult) -> i32 {
        self.print_run(
            &result.report,
            result.record.commands,
            &result.traced,
            false,
            &result.record.notes,
        );
        match &result.unwritten {
            Some(why) => {
                errln!("mesh-host: {why}; but this command ends here, and what was not written is lost");
                EXIT_ERROR
            }
            None => result.exit_code(),
        }
    }

    /// Prints what a run did or, planning, would do.
    fn print_run(
        &self,
        report: &reconcile::Report,
        command_count: usize,
        traced: &[String],
        planning: bool,
        notes: &[String],
    ) {
        let output = render::RunOutput {
            changes: render::Changes {
                planned: &report.changes,
                diffs: &report.diffs,
            },
            failures: &report.failures,
            deferred: &report.deferred,
            adopted: &report.adopted,
            in_sync: report.in_sync,
            pacnew: &report.pacnew,
            needs: report.needs.as_ref(),
            command_count,
            commands: self.host.options.trace_commands.then_some(traced),
            planning,
            notes,
            diffs_cut: report.diffs_cut,
        };
        render::run(self.out, self.json, &output, traced);
    }

    /// Validates a declaration and, for an envelope, says who signed it; refuses (exit 2) what
    /// the service would refuse for its signatures: with trusted keys set, one they do not
    /// satisfy; always, an envelope with a signature that does not verify.
    pub fn check(&self, file: &Path) -> Result<i32, Fatal> {
        let read = self.host.read_declaration(file)?;
        let d = &read.declaration;
        let refusal =
            envelope::refusal(read.verification.as_ref(), self.host.config.trust.as_ref())
                .map(|r| r.to_string());
        let signatures = read
            .verification
            .as_ref()
            .map_or(&[][..], |v| &v.signatures[..]);
        let checked = render::Checked {
            file,
            valid: true,
            revision: d.revision,
            digest: &d.digest,
            resources: d.count(),
            signed: read.verification.is_some(),
            signatures: signatures
                .iter()
                .map(|(key, state)| render::SignatureLine {
                    key: key.to_string(),
                    state: state.name(),
                })
                .collect(),
            signatures_accepted: refusal.is_none(),
            refusal: refusal.clone(),
            expires: d.expires,
        };
        render::check(
            self.out,
            self.json,
            &checked,
            self.host.options.clock.unix(),
        );
        match refusal {
            Some(refusal) => Err(Fatal::invalid(format!(
                "{}: refused: {refusal}",
                file.display()
            ))),
            None => Ok(EXIT_OK),
        }
    }

    /// What applying `file` would change or, with none, what `reconcile` would change now.
    pub fn plan(&self, file: Option<&Path>) -> Result<i32, Fatal> {
        let store = Store::open(&self.host.config.state_dir, false)?;
        let d = match file {
            Some(file) => self.host.read_declaration(file)?.declaration,
            None => self.in_force_declaration(store.as_ref())?,
        };
        let mut ledger = match &store {
            Some(s) => s.ledger()?,
            None => Ledger::default(),
        };
        let runner = self.host.runner();
        let report = reconcile::run(
            &self.host.env(store.as_ref(), &runner, &never),
            &d,
            &mut ledger,
            Mode::Plan,
        )?;
        let traced = runner.traced();
        self.print_run(&report, runner.count(), &traced, true, &[]);
        Ok(if !report.failures.is_empty() {
            EXIT_FAILED
        } else if self.detailed_exitcode && !report.changes.is_empty() {
            EXIT_CHANGES
        } else {
            EXIT_OK
        })
    }

    /// The declaration in force, parsed (`plan` with no FILE): refused, naming the store, when
    /// there is none.
    fn in_force_declaration(&self, store: Option<&Store>) -> Result<Declaration, Fatal> {
        let in_force = match store {
            Some(s) => s.in_force()?,
            None => None,
        };
        let Some(in_force) = in_force else {
            return Err(self.nothing_in_force());
        };
        let path = self.host.config.state_dir.join("declaration.json");
        self.host
            .validate(&in_force.text)
            .map_err(|p| invalid(&path, p))
    }

    fn nothing_in_force(&self) -> Fatal {
        Fatal::invalid(format!(
            "store {}: no declaration in force (nothing was applied here yet); \
             `mesh-host plan FILE` plans a file",
            self.host.config.state_dir.display()
        ))
    }

    /// `mesh-host show`: the declaration in force as it was declared, byte for byte (so that
    /// `show > FILE` and `apply FILE` put the same text back); `--json`, as a value beside its
    /// digest and where it came from.
    pub fn show(&self) -> Result<i32, Fatal> {
        let Some(store) = Store::open(&self.host.config.state_dir, false)? else {
            return Err(self.nothing_in_force());
        };
        let Some(in_force) = store.in_force()? else {
            return Err(self.nothing_in_force());
        };
        render::show(self.out, self.json, &in_force);
        Ok(EXIT_OK)
    }

    /// Applies a plain declaration or an envelope as a local override: root owns the machine, so
    /// no signature is required, but an envelope with a signature that does not verify (its text
    /// was altered after signing) is refused.
    pub fn apply(&self, file: &Path, confirm_secs: Option<u64>) -> Result<i32, Fatal> {
        self.revert_first()?;
        let ReadDeclaration {
            bytes,
            declaration: d,
            verification,
        } = self.host.read_declaration(file)?;
        if let Some(refusal) = envelope::refusal(verification.as_ref(), None) {
            return Err(Fatal::invalid(format!(
                "{}: refused: {refusal}; nothing was applied",
                file.display()
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| Fatal::invalid(format!("{}: not UTF-8", file.display())))?
            .into_bytes();
        let path = std::fs::canonicalize(file).unwrap_or_else(|_| PathBuf::from(file));
        let in_force = InForce {
            source: Source::Local {
                path: path.display().to_string(),
            },
            revision: d.revision,
            digest: d.digest.clone(),
            since: self.host.options.clock.unix(),
            text,
            control_plane_revision: None,
            signed_by: verification
                .map(|v| v.signers().iter().map(|k| k.to_string()).collect())
                .unwrap_or_default(),
            expires: d.expires,
        };
        let target = Target::New {
            declaration: &d,
            in_force,
            confirm_secs,
        };
        let converged = self.host.converge(
            &Triggers::one(Trigger::Apply),
            target,
            &reconcile::Scope::All,
            self.wait,
            &never,
        )?;
        if let Some(secs) = confirm_secs {
            // The running service keeps the deadline too (it may outlive this command).
            crate::service::signal_pending(self.host);
            let now = self.host.options.clock.unix();
            errln!(
                "mesh-host: pending: reverted {} (in {}) unless `mesh-host confirm` runs first",
                utc(now.saturating_add(secs)),
                duration_words(secs)
            );
        }
        crate::os::alloc::drop_or_leave(d);
        match converged {
            Some(result) => Ok(self.print_converged(&result)),
            None => Err(Fatal::error("the declaration was not put in force".into())),
        }
    }

    /// A pending declaration past its deadline is reverted before a command does anything else
    /// (after a crash or a reboot, whatever runs first); said on stderr.
    fn revert_first(&self) -> Result<(), Fatal> {
        let Some(reverting) = self.host.revert_if_due(None, self.wait, &never)? else {
            return Ok(());
        };
        errln!("mesh-host: {}", reverting.said);
        if let Some(run) = &reverting.run {
            errln!(
                "mesh-host: the revert's run {}: {} changed, {} failed",
                run.record.outcome,
                run.report.changes.len(),
                run.report.failures.len()
            );
        }
        Ok(())
    }

    /// `mesh-host confirm`.
    pub fn confirm(&self) -> Result<i32, Fatal> {
        self.revert_first()?;
        let said = self.host.confirm(self.wait)?;
        render::said(self.out, self.json, &said);
        Ok(EXIT_OK)
    }

    /// `mesh-host rollback [--to REVISION] [--force]`: says what it put back, then prints its
    /// run as `apply` does.
    pub fn rollback(&self, to: Option<u64>, force: bool) -> Result<i32, Fatal> {
        self.revert_first()?;
        let (said, converged) = self.host.rollback(to, force, self.wait, &never)?;
        errln!("mesh-host: {said}");
        match converged {
            Some(result) => Ok(self.print_converged(&result)),
            None => Err(Fatal::error("the generation was not put in force".into())),
        }
    }

    pub fn reconcile(&self) -> Result<i32, Fatal> {
        if Store::open(&self.host.config.state_dir, false)?.is_none() {
            return Err(Fatal::invalid(format!(
                "no store at {}: nothing was ever applied here",
                self.host.config.state_dir.display()
            )));
        }
        self.revert_first()?;
        match self.host.converge_in_force(
            &Triggers::one(Trigger::Reconcile),
            &reconcile::Scope::All,
            self.wait,
            &never,
        )? {
            Some(result) => Ok(self.print_converged(&result)),
            None => Err(Fatal::invalid(format!(
                "store {}: no declaration in force",
                self.host.config.state_dir.display()
            ))),
        }
    }

    pub fn owned(&self) -> Result<i32, Fatal> {
        let Some(store) = Store::open(&self.host.config.state_dir, false)? else {
            render::owned(
                self.out,
                self.json,
                &render::Owned { owned: &[] },
                self.host.options.clock.unix(),
            );
            return Ok(EXIT_OK);
        };
        // The text dropped once parsed, before the ledger is read: never both held at once.
        let declaration = match store.in_force()? {
            Some(in_force) => self
                .host
                .validate(&in_force.text)
                .map_err(|p| invalid(&store.path().join("declaration.json"), p))?,
            None => self
                .host
                .validate(br#"{"schema": 1}"#)
                .map_err(|_| Fatal::error("the empty declaration was refused".into()))?,
        };
        let ledger = store.ledger()?;
        let runner = self.host.runner();
        let history = store.failures()?;
        let now = self.host.options.clock.unix();
        let colour = render::Colour::for_stdout();
        // Text is printed row by row as observed; JSON is one document, so its rows are kept.
        let mut rows = Vec::new();
        let (mut any_row, mut errors, mut changes) = (false, false, false);
        reconcile::owned(
            &self.host.env(Some(&store), &runner, &never),
            declaration,
            &ledger,
            &mut |mut row| {
                row.failing = history.find(row.kind, row.key).map(Box::new);
                any_row = true;
                errors |= row.state == OwnedState::Error;
                changes |= matches!(
                    row.state,
                    OwnedState::Drifted | OwnedState::Missing | OwnedState::PendingRelease
                );
                match self.json {
                    true => rows.push(row),
                    false => render::owned_row(self.out, &row, colour, now),
                }
            },
        );
        if self.json || !any_row {
            render::owned(self.out, self.json, &render::Owned { owned: &rows }, now);
        }
        Ok(match self.detailed_exitcode {
            false => EXIT_OK,
            true if errors => EXIT_FAILED,
            true if changes => EXIT_CHANGES,
            true => EXIT_OK,
        })
    }

    pub fn status(&self) -> Result<i32, Fatal> {
        let store = Store::open(&self.host.config.state_dir, false)?;
        let (in_force, runs, service) = match &store {
            Some(s) => (s.in_force_head()?, s.runs()?, s.service_state()?),
            None => (None, Vec::new(), None),
        };
        let generations = match &store {
            Some(s) => s.generations()?,
            None => Default::default(),
        };
        let failing = match &store {
            Some(s) => s.failures()?.failing(),
            None => Vec::new(),
        };
        let (pacnew, needs) = match &store {
            Some(s) => {
                let stats = s.stats()?;
                (stats.pacnew, stats.needs)
            }
            None => (Vec::new(), None),
        };
        // What a run would refuse to start from, found the same way: the declaration in force
        // checked against its digest, the ledger read whole.
        let mut problems = Vec::new();
        if let Some(s) = &store {
            if let Err(e) = s.in_force() {
                problems.push(e.to_string());
            }
            if let Err(e) = s.ledger() {
                problems.push(e.to_string());
            }
        }
        let now = self.host.options.clock.unix();
        let mut status = render::Status {
            health: render::Health {
                state: render::HealthState::Healthy,
                reasons: Vec::new(),
            },
            state_dir: &self.host.config.state_dir,
            in_force: in_force.map(|f| render::InForceStatus::new(f, |k| self.host.trusts(k), now)),
            service: service.map(|s| render::ServiceStatus::new(s, crate::os::process::alive)),
            runs,
            failing,
            pacnew,
            needs,
            problems,
            generations,
        };
        let threshold = self.host.config.link_down_degraded.as_secs();
        status.health = render::Health::of(&status, now, threshold);
        render::status(self.out, self.json, &status, now);
        // The host cannot run as it stands, or its last run could not (4); it runs, not well (6).
        Ok(match status.health.state {
            render::HealthState::Error => EXIT_ERROR,
            render::HealthState::Degraded => EXIT_DEGRADED,
            render::HealthState::Healthy => EXIT_OK,
        })
    }
}
