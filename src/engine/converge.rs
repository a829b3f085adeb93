//! Converging: the one path `apply`, `reconcile` and the service share. It takes the store's
//! lock, settles the declaration to converge to, calls the reconciler, then keeps what the run
//! says: the failure history, the report queued for the control plane, the run record, the
//! statistics and the metrics. Nothing here prints; the commands hand the result to `render`.

use std::collections::BTreeMap;

pub use super::target::Target;
use super::target::{join_lines, Aim, Started};
use super::unwritten::{Backlog, Unwritten};
use super::{invalid, never, Fatal, Host, EXIT_FAILED, EXIT_OK};
use crate::engine::metrics;
use crate::engine::reconcile::{self, Changes, Mode, Report};
use crate::kinds::Action;
use crate::link;
use crate::model::declaration::Declaration;
use crate::model::run::{
    Failing, ResourceResult, RunOutcome, RunRecord, Trigger, Triggers, LISTED,
};
use crate::os::exec::Runner;
use crate::store::{
    LastRun, Ledger, LinkStatus, Notice, RunStats, ServicePhase, Source, State, Store, StoreError,
};
use crate::util::progress::Event;
use crate::util::words::expiry;

/// What one converging run did.
pub struct RunResult {
    pub report: Report,
    pub record: RunRecord,
    pub traced: Vec<String>,
    /// Why the run is kept in memory, not yet in the store (`Host::keep_run`).
    pub unwritten: Option<String>,
    /// What the run converged with, for the service's watcher (`Target::Service` only): handed
    /// back so its watches are set without reading and parsing the store again.
    pub converged: Option<Converged>,
}

/// The declaration a run converged to and the ledger as the run left it (and wrote it).
pub struct Converged {
    pub declaration: Declaration,
    pub ledger: Ledger,
}

impl RunResult {
    pub fn exit_code(&self) -> i32 {
        if self.report.failures.is_empty() {
            EXIT_OK
        } else {
            EXIT_FAILED
        }
    }
}

impl Host {
    /// Converges to the declaration in force in the store; `None` when there is none yet.
    pub fn converge_in_force(
        &self,
        triggers: &Triggers,
        scope: &reconcile::Scope,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<RunResult>, Fatal> {
        self.converge(triggers, Target::InForce, scope, wait, interrupted)
    }

    /// What converging `scope` to the declaration in force would change, observed now without
    /// the lock and changing nothing: the service's watcher asks before it runs.
    pub fn drifted(&self, scope: &reconcile::Scope) -> Result<Changes, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Ok(Changes::default());
        };
        let Some(in_force) = store.in_force()? else {
            return Ok(Changes::default());
        };
        let d = self
            .validate(&in_force.text)
            .map_err(|p| invalid(&store.path().join("declaration.json"), p))?;
        drop(in_force); // its text, before the ledger is read
        let mut ledger = store.ledger()?;
        let runner = Runner::new(false);
        let env = self.env(Some(&store), &runner, &never);
        let report = reconcile::run_scoped(&env, &d, &mut ledger, Mode::Plan, scope)?;
        Ok(report.changes)
    }

    /// Locks the store, settles what to converge to (under the lock, so a declaration put in
    /// force meanwhile is the one applied), converges, records the run, and queues its report.
    pub fn converge(
        &self,
        triggers: &Triggers,
        target: Target,
        scope: &reconcile::Scope,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<RunResult>, Fatal> {
        let run = self.start_run(triggers, wait, interrupted)?;
        // What this run parsed or was handed: the service's target gets it back after the run.
        let mut owned = None;
        let hand_back = matches!(target, Target::Service { .. });
        let Some(aim) = self.aim(&run, target, &mut owned)? else {
            return Ok(None);
        };
        // Read only now: the declaration's text (stored, or parsed from the store) is dropped,
        // so it and the ledger are never held at once (each grows with the declaration).
        let digest = || Some(aim.declaration.digest.clone());
        let mut ledger = (run.store.ledger())
            .map_err(|e| self.refuse(&run, e.into(), aim.revision, digest()))?;
        // The same check the reconciler makes between resources also runs while a tool runs.
        let runner = self.runner().with_pulse(interrupted);
        runner.tell(|| Event::Run {
            triggers: triggers.to_string(),
            revision: aim.revision,
            digest: &aim.declaration.digest,
        });
        let outcome = reconcile::run_scoped_reporting(
            &self.env(Some(&run.store), &runner, interrupted),
            aim.declaration,
            &mut ledger,
            Mode::Apply,
            scope,
        );
        let (report, outcome_name) = match outcome {
            (report, None) if report.interrupted => (report, RunOutcome::Interrupted),
            (report, None) if report.failures.is_empty() => (report, RunOutcome::Converged),
            (report, None) => (report, RunOutcome::Failed),
            (report, Some(e)) => return Err(self.stopped_by_store(&run, &aim, &report, &runner, e)),
        };
        let record = record(
            triggers,
            (run.started, self.options.clock.unix()),
            outcome_name,
            aim.revision,
            aim.declaration,
            &report,
            &runner,
        );
        let unwritten = self.keep_finished(&run, &aim, &record, &report);
        let converged = match (hand_back, owned) {
            (true, Some(declaration)) => Some(Converged {
                declaration,
                ledger,
            }),
            (_, owned) => {
                crate::os::alloc::drop_or_leave((owned, ledger));
                None
            }
        };
        Ok(Some(RunResult {
            report,
            record,
            traced: runner.traced(),
            unwritten,
            converged,
        }))
    }

    /// What was changed before the store stopped the run is recorded and reported too.
    fn stopped_by_store(
        &self,
        run: &Started,
        aim: &Aim,
        report: &Report,
        runner: &Runner,
        e: StoreError,
    ) -> Fatal {
        let mut record = record(
            run.triggers,
            (run.started, self.options.clock.unix()),
            RunOutcome::Error,
            aim.revision,
            aim.declaration,
            report,
            runner,
        );
        record.notes.push(e.to_string());
        let message = join_lines(&run.runs_note, &e.to_string());
        // The run stopped before looking for `.pacnew` files and what the machine needs.
        if let Some(why) = self.keep_run(&run.store, &record, Some(report), &[], &message, false) {
            log::error!("{why}");
        }
        self.note_run(&run.store, &record, None, run.clock, false);
        e.into()
    }

    /// A finished run kept: its failure history first, since the report carries each streak;
    /// then the report before the record: a crash between the two leaves a report of a run the
    /// history lacks, never a recorded run the control plane is not told of. Returns why it is
    /// kept in memory, if it is.
    fn keep_finished(
        &self,
        run: &Started,
        aim: &Aim,
        record: &RunRecord,
        report: &Report,
    ) -> Option<String> {
        // Held past its expiry (a disconnected node keeps holding its machine), but said so.
        let mut notes = record.notes.clone();
        if let Some(expires) = aim.expires.filter(|e| *e <= run.started) {
            let note = format!(
                "the declaration in force {}; it is held until a newer one arrives",
                expiry(expires, run.started)
            );
            log::warn!("{note}");
            notes.push(note);
        }
        let failing = note_failures(&run.store, report, record.ended);
        let message = join_lines(&run.runs_note, &notes.join("; "));
        // A run that changed nothing and has nothing to say writes nothing durable.
        let quiet = record.outcome == RunOutcome::Converged
            && record.changes.is_empty()
            && record.failures.is_empty()
            && record.deferred.is_empty()
            && report.adopted.is_empty()
            && message.is_empty()
            && !aim.new_in_force
            && !record.trigger.contains(Trigger::Revert)
            && !self.has_unwritten();
        let store = &run.store;
        let unwritten = self.keep_run(store, record, Some(report), &failing, &message, quiet);
        // Its report's ack confirms the declaration the control plane pushed, if pending.
        if unwritten.is_none() && self.config.control_plane.is_some() {
            self.await_ack(store, &aim.declaration.digest);
        }
        self.note_run(store, record, Some(report), run.clock, quiet);
        unwritten
    }

    /// Queues a run's report in the outbox (for the control plane, when there is one; it lists
    /// every change of `run`, where the record keeps the first few, and what was found after
    /// it), then records the run, unless it is `quiet` (a no-op: `note_run` keeps it).
    /// What the store cannot take (its disk full) is kept in memory, behind any run kept
    /// before, to be written by the next run or `write_unwritten_now`; then says so.
    pub(super) fn keep_run(
        &self,
        store: &Store,
        record: &RunRecord,
        run: Option<&Report>,
        failing: &[Failing],
        message: &str,
        quiet: bool,
    ) -> Option<String> {
        let report = self.config.control_plane.as_ref().map(|_| {
            let none = Changes::default();
            let mut report = report_of(record, run.map_or(&none, |r| &r.changes), message);
            report.failing = failing.to_vec();
            if record.trigger.contains(Trigger::Revert) {
                report.reverted = store
                    .generations()
                    .ok()
                    .and_then(|g| g.reverted.map(Into::into));
            }
            if let Some(run) = run {
                report.pacnew = run.pacnew.clone();
                report.needs = run.needs.clone().map(Box::new);
            }
            report.abridge();
            report.into()
        });
        let mut backlog = self.unwritten.borrow_mut();
        backlog.push(Unwritten {
            report,
            record: (!quiet).then(|| record.clone()),
            lost_before: None,
        });
        write_runs(
            store,
            &mut backlog,
            self.config.outbox_bounds(),
            &self.options.clock,
        )
    }

    /// Writes the runs kept in memory, if any, under the store's lock (not waiting for it: the
    /// run holding it writes them first). The service calls it until they are written.
    pub fn write_unwritten_now(&self) {
        if self.unwritten.borrow().is_empty() {
            return;
        }
        let holder = format!(
            "pid {} (writing runs kept in memory) since {}",
            std::process::id(),
            crate::util::words::utc(self.options.clock.unix())
        );
        let store = match self.store() {
            Ok(store) => store,
            Err(e) => {
                log::debug!("runs kept in memory not written: {}", e.message());
                return;
            }
        };
        if let Ok(_lock) = store.lock(false, &holder) {
            self.write_unwritten(&store);
        }
    }

    /// Whether runs are kept in memory, waiting for the store.
    pub fn has_unwritten(&self) -> bool {
        !self.unwritten.borrow().is_empty()
    }

    /// Writes the runs kept in memory (the caller holds the store's lock).
    pub(super) fn write_unwritten(&self, store: &Store) {
        let mut backlog = self.unwritten.borrow_mut();
        if backlog.is_empty() {
            return;
        }
        let kept = backlog.len();
        match write_runs(
            store,
            &mut backlog,
            self.config.outbox_bounds(),
            &self.options.clock,
        ) {
            None => log::warn!(
                "{kept} run{} kept in memory while the store could not be written {} now recorded",
                if kept == 1 { "" } else { "s" },
                if kept == 1 { "is" } else { "are" }
            ),
            Some(e) => log::debug!("runs kept in memory still not written: {e}"),
        }
    }

    /// Counts a run in the store's statistics, then writes the metrics. Neither is worth failing
    /// a run that happened for: a problem is logged. `clock` is the monotonic clock
    /// (`Clock::mono_ms`) at the run's start. A `quiet` run (a no-op) is kept with its count
    /// without fsync (`store/quiet.rs`): a crash loses nothing a person needs.
    pub(super) fn note_run(
        &self,
        store: &Store,
        record: &RunRecord,
        report: Option<&Report>,
        clock: u64,
        quiet: bool,
    ) {
        let run = LastRun {
            started: record.started,
            ended: record.ended,
            outcome: record.outcome,
            took_ms: Some(self.options.clock.mono_ms().saturating_sub(clock)),
        };
        let count = |stats: &mut RunStats| {
            stats.record(
                record.trigger.first(),
                run,
                report.map(resource_states).unwrap_or_default(),
                report.map(|r| r.pacnew.clone()),
                report.and_then(|r| r.needs.clone()),
            );
            if let Some(foreign) = report.and_then(|r| r.foreign) {
                stats.foreign = Some(foreign);
            }
        };
        let counted = match quiet {
            true => store.record_quiet(record, count),
            false => store.stats().and_then(|mut stats| {
                count(&mut stats);
                store.save_stats(&stats)
            }),
        };
        match (counted, quiet) {
            (Ok(()), _) => {}
            (Err(e), true) => log::error!("the run (a no-op) was not recorded: {e}"),
            (Err(e), false) => log::error!("the run was not counted in the statistics: {e}"),
        }
        self.write_metrics(store, None);
    }

    /// Writes `metrics_file`, if configured. `link_up` is the service's word; without it, what
    /// the service last published (down when it does not run).
    pub fn write_metrics(&self, store: &Store, link_up: Option<bool>) {
        let Some(path) = &self.config.metrics_file else {
            return;
        };
        let written = self
            .metrics_text(store, link_up)
            .map_err(|e| e.to_string())
            .and_then(|text| metrics::write(path, &text));
        if let Err(e) = written {
            log::error!("metrics not written: {e}");
        }
    }

    fn metrics_text(&self, store: &Store, link_up: Option<bool>) -> Result<String, StoreError> {
        let stats = store.stats()?;
        let failing = store.failures()?.failing();
        let declaration = store.in_force_head()?.map(|f| metrics::DeclarationInfo {
            revision: f.revision,
            since: f.since,
            source: match f.source {
                Source::ControlPlane => "control_plane",
                Source::Local { .. } => "local",
            },
        });
        let link_up = match link_up {
            Some(up) => up,
            None => store.service_state()?.is_some_and(|s| {
                s.state == ServicePhase::Running
                    && s.link == LinkStatus::Connected
                    && crate::os::process::alive(s.pid)
            }),
        };
        let generations = store.generations()?;
        let confirmation = generations.current().map(|g| metrics::Confirmation {
            state: match g.state {
                State::Pending { .. } => "pending",
                State::Confirmed { .. } => "confirmed",
                State::Unconfirmed | State::Reverted { .. } => "unconfirmed",
            },
            deadline: generations.pending().map(|(deadline, _)| deadline),
            reverted: generations.reverted.as_ref().map(|r| r.at),
        });
        Ok(metrics::render(&metrics::Snapshot {
            now: self.options.clock.unix(),
            version: env!("CARGO_PKG_VERSION"),
            stats: &stats,
            failing: &failing,
            declaration,
            confirmation,
            link_up,
            outbox_reports: store.outbox_len()?,
        }))
    }
}

/// Writes each run kept in memory, oldest first: its report queued before its record, as every
/// run's is, and what was lost before it said in both. Reports and records each keep their order:
/// one the store cannot take holds back the later ones of its sort, not the other sort (an outbox
/// that refuses reports does not stop runs being recorded). Says why when any is left.
fn write_runs(
    store: &Store,
    backlog: &mut Backlog,
    bounds: crate::model::config::OutboxBounds,
    clock: &crate::os::clock::Clock,
) -> Option<String> {
    let mut reports_held = None;
    let mut records_held = None;
    for run in backlog.iter_mut() {
        let lost = run.lost_before.map(|lost| lost.note());
        if let (Some(report), None) = (&mut run.report, &reports_held) {
            let message = report.message.clone();
            if let Some(lost) = &lost {
                report.message = join_lines(lost, &message);
            }
            match store.outbox_push(report, bounds, clock.unix_ms()) {
                Ok(_) => run.report = None,
                Err(e) => {
                    report.message = message;
                    reports_held = Some(("report", e));
                }
            }
        }
        if let (Some(record), None) = (&mut run.record, &records_held) {
            let notes = record.notes.len();
            record.notes.extend(lost);
            match store.record_run(record, clock.unix()) {
                Ok(()) => run.record = None,
                Err(e) => {
                    record.notes.truncate(notes);
                    records_held = Some(("record", e));
                }
            }
        }
    }
    backlog.drop_written();
    let (what, e) = records_held.or(reports_held)?;
    Some(kept_in_memory(backlog.len(), what, &e))
}

/// What the log says when a run's record or report waits in memory: which, why, and how many
/// runs wait.
fn kept_in_memory(kept: usize, what: &str, e: &StoreError) -> String {
    format!(
        "the run's {what} could not be written ({e}); {kept} run{} kept in memory until the \
         store can take {}",
        if kept == 1 { " is" } else { "s are" },
        if kept == 1 { "it" } else { "them" }
    )
}

/// Each kind the run reached, its resources by state as the run left them (the metrics describe
/// the machine after it): in sync (found so, adopted, created or updated), failed, deferred.
fn resource_states(report: &Report) -> BTreeMap<String, BTreeMap<String, u64>> {
    let found = report
        .changes
        .iter()
        // What the run created or updated is as declared now; what it removed is gone.
        .filter(|c| c.action != Action::Remove)
        .map(|c| (c.kind, "in_sync", 1))
        .chain(
            report
                .adopted
                .iter()
                .map(|a| (a.kind.as_str(), "in_sync", 1)),
        )
        .chain(
            report
                .failures
                .iter()
                .map(|f| (f.kind.as_str(), "failed", 1)),
        )
        .chain(
            report
                .deferred
                .iter()
                .map(|d| (d.kind.as_str(), "deferred", 1)),
        )
        .chain(
            report
                .in_sync_by_kind
                .iter()
                .map(|(kind, n)| (*kind, "in_sync", *n as u64)),
        );
    let mut states = metrics::count_states(found);
    for kind in &report.checked {
        states.entry(kind.to_string()).or_default();
    }
    states
}

/// Updates the failure history with a run and logs what it says: a failure when it starts, when
/// it clears, and at most hourly while it repeats. Returns every resource failing now. A history
/// that cannot be read or written is reported, and then each failure of the run is logged, so
/// none goes unsaid.
fn note_failures(store: &Store, report: &Report, now: u64) -> Vec<Failing> {
    let recorded = store.failures().and_then(|mut history| {
        let before = history.clone();
        let notices = history.record(now, &report.checked, &report.failures, &report.deferred);
        // A run with nothing failing, before or now, costs no durable write.
        if history != before {
            store.save_failures(&history)?;
        }
        Ok((history, notices))
    });
    match recorded {
        Ok((history, notices)) => {
            for notice in notices {
                // A failure starting or still repeating is an error (`journalctl -p err` lists
                // it); one that cleared is worth a warning beside it.
                if matches!(notice, Notice::Cleared { .. }) {
                    log::warn!("{notice}");
                } else {
                    log::error!("{notice}");
                }
            }
            history.failing()
        }
        Err(e) => {
            log::error!("{e}");
            for f in &report.failures {
                log::warn!("{} {}: {} failed: {}", f.kind, f.key, f.action, f.detail);
            }
            Vec::new()
        }
    }
}

fn record(
    triggers: &Triggers,
    (started, ended): (u64, u64),
    outcome: RunOutcome,
    revision: Option<u64>,
    d: &Declaration,
    report: &Report,
    runner: &Runner,
) -> RunRecord {
    RunRecord {
        trigger: triggers.clone(),
        started,
        ended,
        outcome,
        revision,
        digest: Some(d.digest.clone()),
        // As many as the store keeps: a large run's changes are not listed twice in memory (the
        // wire report lists them all, from `report`).
        changes: (report.changes.iter().take(LISTED))
            .map(|c| c.as_result())
            .collect(),
        failures: report.failures.clone(),
        deferred: report.deferred.clone(),
        in_sync: report.in_sync,
        commands: runner.count(),
        retries: runner.retries(),
        notes: runner.notes(),
        omitted: report.changes.len().saturating_sub(LISTED),
    }
}

/// The control plane's view of a run, with its `changes`. Changes in a run no new declaration
/// caused repair drift.
pub fn report_of(record: &RunRecord, changes: &Changes, message: &str) -> link::Report {
    let changes_len = changes.len();
    // No more entries than a report lists (`REPORTED_CHANGES`) or can carry are made (a large
    // converge would make many times what `abridge` then cuts to `MAX_REPORT_BYTES`); the rest
    // are counted as left out.
    let mut room = link::MAX_REPORT_BYTES;
    let fits = |entry: &ResourceResult| {
        let len = link::json_len(entry) + 1;
        room = room.saturating_sub(len);
        room > 0
    };
    let changes: Vec<ResourceResult> = changes
        .iter()
        .take(link::REPORTED_CHANGES)
        .map(|c| c.as_result())
        .take_while(fits)
        .collect();
    let new_declaration =
        record.trigger.contains(Trigger::Declaration) || record.trigger.contains(Trigger::Apply);
    // Drift repeats the changes: what is left out of one is left out of both.
    let lists = if new_declaration { 1 } else { 2 };
    let left_out = (changes_len - changes.len()) * lists;
    let mut report = link::Report {
        id: 0,
        revision: record.revision,
        digest: record.digest.clone(),
        trigger: record.trigger.clone(),
        outcome: record.outcome.into(),
        started: record.started,
        ended: record.ended,
        drift: if new_declaration {
            Vec::new()
        } else {
            changes.clone()
        },
        changes,
        failures: record.failures.clone(),
        deferred: record.deferred.clone(),
        message: message.to_string(),
        failing: Vec::new(),
        facts: None,
        pacnew: Vec::new(),
        needs: None,
        reverted: None,
    };
    if left_out > 0 {
        report.abridge_counting(left_out);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InForce;

    fn record(trigger: Trigger) -> RunRecord {
        RunRecord {
            revision: Some(1),
            ..RunRecord::empty(trigger)
        }
    }

    /// The service's run converges the declaration it accepted, unparsed, while its digest is
    /// the one in force under the lock; once a person's `apply` replaced it, the store's.
    #[test]
    fn the_service_converges_what_it_accepted_only_while_it_is_in_force() {
        let tmp = crate::util::testutil::TempDir::new("accepted");
        let (host, root) = super::super::scratch_host(&tmp, Default::default());
        let file = |name: &str| {
            format!(
                r#"{{"schema": 1, "files": {{"/etc/{name}": {{"content": "{name}\n", "mode": "0644"}}}}}}"#
            )
        };
        let digest = |text: &str| crate::util::codec::sha256_hex(text.as_bytes());
        let put_in_force = |text: &str| {
            let in_force = InForce {
                source: Source::ControlPlane,
                revision: Some(1),
                digest: digest(text),
                since: 0,
                text: text.as_bytes().to_vec(),
                control_plane_revision: Some(1),
                signed_by: Vec::new(),
                expires: None,
            };
            host.store().and_then(|s| Ok(s.set_in_force(&in_force)?))
        };
        let run = |accepted: Declaration| {
            let target = Target::Service {
                accepted: Some(accepted),
            };
            let triggers = Triggers::one(Trigger::Declaration);
            host.converge(&triggers, target, &reconcile::Scope::All, false, &never)
        };
        let present = |name: &str| root.join("etc").join(name).exists();

        // Accepted `a`, then a person's `apply` put `b` in force: `b` is converged.
        let a = host.validate(file("a").as_bytes()).expect("a");
        put_in_force(&file("b")).expect("b in force");
        let ran = run(a).expect("run").expect("in force");
        assert!(present("b") && !present("a"));
        let converged = ran.converged.expect("handed back");
        assert_eq!(converged.declaration.digest, digest(&file("b")));

        // Its digest the one in force: the declaration held is converged as it is, not parsed
        // again (here one that says it is `c`'s text while it declares `d`).
        let mut held = host.validate(file("d").as_bytes()).expect("d");
        held.digest = digest(&file("c"));
        put_in_force(&file("c")).expect("c in force");
        run(held).expect("run").expect("in force");
        assert!(present("d") && !present("c") && !present("b"));
    }

    /// A run of 30,000 changes makes a report of its first `REPORTED_CHANGES`, and of fewer when
    /// those would not fit, and says how many it left out, drift counted too; a small one is whole.
    #[test]
    fn a_report_makes_no_more_entries_than_it_lists_and_fit() {
        let changes_of = |n: usize, key_len: usize| {
            let mut changes = Changes::default();
            for i in 0..n {
                let key = format!("/etc/scale/d{}/f{i}.conf", i / 500);
                let key = format!("{key:x<key_len$}");
                let details = vec!["80 bytes, mode 0644".to_string()].into();
                changes.push("files", &key, Action::Create, details);
            }
            changes
        };
        // Keys of 30 bytes: the first thousand fit; of 4,000 bytes, only some 260.
        for (key_len, listed) in [(30, link::REPORTED_CHANGES), (4000, 1)] {
            let changes = changes_of(30_000, key_len);
            for (trigger, lists) in [(Trigger::Declaration, 1), (Trigger::Timer, 2)] {
                let report = report_of(&record(trigger), &changes, "");
                assert!(link::json_len(&report) <= link::MAX_REPORT_BYTES);
                let kept = report.changes.len() + report.drift.len();
                match listed {
                    1 => assert!((100..link::REPORTED_CHANGES).contains(&kept), "{kept}"),
                    _ => assert_eq!(kept, listed * lists),
                }
                let left_out = 30_000 * lists - kept;
                assert!(
                    (report.message).starts_with(&format!("{left_out} resource entries left out")),
                    "{}",
                    report.message
                );
            }
        }
        let small = report_of(&record(Trigger::Timer), &changes_of(3, 30), "note");
        assert_eq!((small.changes.len(), small.drift.len()), (3, 3));
        assert_eq!(small.message, "note");
    }
}
