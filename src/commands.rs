//! The commands behind the command line. Each returns an exit code or a `Fatal` that `main` prints
//! once. Everything that changes the machine goes through `Host::converge`, the one path `apply`,
//! `reconcile` and the service share: one lock, one ledger, one run record, one report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::Args;
use crate::config::Config;
use crate::declaration::{self, Declaration, Problems};
use crate::envelope::{self, PublicKey, Verification};
use crate::exec::Runner;
use crate::kinds::Env;
use crate::link;
use crate::metrics;
use crate::pacnew::Pacnew;
use crate::reconcile::{self, Mode, Report};
use crate::store::{
    self, Failing, InForce, LastRun, Ledger, LockError, Notice, RunRecord, Source, Store,
    StoreError,
};

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_LOCKED: i32 = 3;
pub const EXIT_ERROR: i32 = 4;

/// Why a command could not do its job at all; each maps to an exit code.
#[derive(Debug)]
pub enum Fatal {
    /// Bad usage, config or declaration: nothing changed.
    Invalid(String),
    Locked(String),
    Error(String),
}

impl Fatal {
    pub fn exit_code(&self) -> i32 {
        match self {
            Fatal::Invalid(_) => EXIT_INVALID,
            Fatal::Locked(_) => EXIT_LOCKED,
            Fatal::Error(_) => EXIT_ERROR,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            Fatal::Invalid(m) | Fatal::Locked(m) | Fatal::Error(m) => m,
        }
    }
}

impl From<StoreError> for Fatal {
    fn from(e: StoreError) -> Fatal {
        Fatal::Error(e.to_string())
    }
}

pub fn invalid(file: &Path, problems: &Problems) -> Fatal {
    let count = problems.0.len();
    Fatal::Invalid(format!(
        "{}: {count} problem{}; nothing was applied:\n{problems}",
        file.display(),
        if count == 1 { "" } else { "s" }
    ))
}

/// A declaration file as read: the declaration's own bytes (taken out of the envelope when it
/// came in one), validated, and what its signatures proved against the config's trusted keys.
struct ReadDeclaration {
    bytes: Vec<u8>,
    declaration: Declaration,
    verification: Option<Verification>,
}

/// What one converging run did.
pub struct RunResult {
    pub report: Report,
    pub record: RunRecord,
    pub traced: Vec<String>,
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

/// What a run converges to.
pub enum Target<'a> {
    /// A declaration a person gave, which becomes the one in force.
    New {
        declaration: &'a Declaration,
        in_force: InForce,
    },
    /// Whatever is in force in the store once the lock is held.
    InForce,
}

/// Never interrupted: the command line has no signal handling of its own (Ctrl-C ends it).
fn never() -> bool {
    false
}

pub struct Host {
    pub args: Args,
    pub config: Config,
}

impl Host {
    pub fn new(args: Args) -> Result<Host, Fatal> {
        let config = Config::load(args.config.as_deref(), args.state_dir.as_deref())
            .map_err(Fatal::Invalid)?;
        Ok(Host { args, config })
    }

    /// Reads the config again (SIGHUP); on error the old one stays.
    pub fn reload_config(&mut self) -> Result<(), Fatal> {
        self.config = Config::load(self.args.config.as_deref(), self.args.state_dir.as_deref())
            .map_err(Fatal::Invalid)?;
        Ok(())
    }

    fn root(&self) -> &Path {
        self.args.root.as_deref().unwrap_or(Path::new("/"))
    }

    fn env<'a>(
        &'a self,
        store: Option<&'a Store>,
        runner: &'a Runner<'a>,
        interrupted: &'a dyn Fn() -> bool,
    ) -> Env<'a> {
        Env {
            root: self.root(),
            offline: self.args.root.is_some(),
            config: &self.config,
            runner,
            store,
            interrupted,
        }
    }

    pub fn validate(&self, bytes: &[u8]) -> Result<Declaration, Problems> {
        declaration::parse(
            bytes,
            &declaration::Context {
                limits: &self.config.limits,
                identity: &self.config.identity,
            },
        )
    }

    /// Reads a declaration file (plain, or an envelope whose signatures are checked against the
    /// trusted keys), refusing one over the size limit before reading it.
    fn read_declaration(&self, file: &Path) -> Result<ReadDeclaration, Fatal> {
        let cannot =
            |e: std::io::Error| Fatal::Invalid(format!("{}: cannot be read: {e}", file.display()));
        let len = std::fs::metadata(file).map_err(cannot)?.len();
        let max = self.config.limits.max_declaration_bytes;
        if len > max {
            return Err(Fatal::Invalid(format!(
                "{}: {len} bytes, more than the limit of {max} bytes; nothing was applied",
                file.display()
            )));
        }
        let raw = std::fs::read(file).map_err(cannot)?;
        let (bytes, verification) = match envelope::open(&raw).map_err(|p| invalid(file, &p))? {
            Some(envelope) => {
                drop(raw); // the envelope holds its own copy of the declaration
                let verification = envelope.verify(self.trusted_keys());
                (envelope.declaration.into_bytes(), Some(verification))
            }
            None => (raw, None),
        };
        let declaration = self.validate(&bytes).map_err(|p| invalid(file, &p))?;
        Ok(ReadDeclaration {
            bytes,
            declaration,
            verification,
        })
    }

    fn trusted_keys(&self) -> &[PublicKey] {
        self.config.trust.as_ref().map_or(&[], |t| &t.keys)
    }

    /// Whether `key` (as the store keeps it) is one of the config's trusted keys now.
    fn trusts(&self, key: &str) -> bool {
        PublicKey::parse(key).is_ok_and(|k| self.trusted_keys().contains(&k))
    }

    /// The store, created if missing (mode 0700).
    pub fn store(&self) -> Result<Store, Fatal> {
        Store::open(&self.config.state_dir, true)?
            .ok_or_else(|| Fatal::Error("the store vanished".into()))
    }

    fn print_json(&self, value: serde_json::Value) {
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    }

    /// Validates a declaration and, for an envelope, says who signed it; refuses (exit 2) what
    /// the service would refuse for its signatures: with trusted keys set, one they do not
    /// satisfy; always, an envelope with a signature that does not verify.
    pub fn check(&self, file: &Path) -> Result<i32, Fatal> {
        let read = self.read_declaration(file)?;
        let d = &read.declaration;
        let refusal = envelope::refusal(read.verification.as_ref(), self.config.trust.as_ref())
            .map(|r| r.to_string());
        let signatures = read
            .verification
            .as_ref()
            .map_or(&[][..], |v| &v.signatures[..]);
        let now = store::unix_now();
        if self.args.json {
            let signatures: Vec<_> = signatures
                .iter()
                .map(|(key, state)| json!({"key": key.to_string(), "state": state.name()}))
                .collect();
            self.print_json(
                json!({"valid": true, "revision": d.revision, "digest": d.digest,
                "resources": count(d), "signed": read.verification.is_some(),
                "signatures": signatures, "signatures_accepted": refusal.is_none(),
                "refusal": refusal, "expires": d.expires}),
            );
        } else {
            println!(
                "{}: valid ({} resources, sha256 {})",
                file.display(),
                count(d),
                d.digest
            );
            for (key, state) in signatures {
                println!("signed by {key}: {}", state.name());
            }
            if let Some(expires) = d.expires {
                println!("{}", expiry(expires, now));
            }
        }
        match refusal {
            Some(refusal) => Err(Fatal::Invalid(format!(
                "{}: refused: {refusal}",
                file.display()
            ))),
            None => Ok(EXIT_OK),
        }
    }

    pub fn plan(&self, file: &Path) -> Result<i32, Fatal> {
        let d = self.read_declaration(file)?.declaration;
        let store = Store::open(&self.config.state_dir, false)?;
        let mut ledger = match &store {
            Some(s) => s.ledger()?,
            None => Ledger::default(),
        };
        let runner = Runner::new(self.args.trace_commands);
        let report = reconcile::run(
            &self.env(store.as_ref(), &runner, &never),
            &d,
            &mut ledger,
            Mode::Plan,
        )?;
        self.print_report(&report, true, runner.count(), &runner.traced());
        Ok(if report.failures.is_empty() {
            EXIT_OK
        } else {
            EXIT_FAILED
        })
    }

    /// Applies a plain declaration or an envelope as a local override: root owns the machine, so
    /// no signature is required, but an envelope with a signature that does not verify (its text
    /// was altered after signing) is refused.
    pub fn apply(&self, file: &Path) -> Result<i32, Fatal> {
        let ReadDeclaration {
            bytes,
            declaration: d,
            verification,
        } = self.read_declaration(file)?;
        if let Some(refusal) = envelope::refusal(verification.as_ref(), None) {
            return Err(Fatal::Invalid(format!(
                "{}: refused: {refusal}; nothing was applied",
                file.display()
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| Fatal::Invalid(format!("{}: not UTF-8", file.display())))?;
        let path = std::fs::canonicalize(file).unwrap_or_else(|_| PathBuf::from(file));
        let in_force = InForce {
            source: Source::Local {
                path: path.display().to_string(),
            },
            revision: d.revision,
            digest: d.digest.clone(),
            since: store::unix_now(),
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
        };
        match self.converge(
            &["apply"],
            target,
            &reconcile::Scope::All,
            self.args.wait,
            &never,
        )? {
            Some(result) => {
                self.print_run(&result);
                Ok(result.exit_code())
            }
            None => Err(Fatal::Error("the declaration was not put in force".into())),
        }
    }

    pub fn reconcile(&self) -> Result<i32, Fatal> {
        if Store::open(&self.config.state_dir, false)?.is_none() {
            return Err(Fatal::Invalid(format!(
                "no store at {}: nothing was ever applied here",
                self.config.state_dir.display()
            )));
        }
        match self.converge_in_force(
            &["reconcile"],
            &reconcile::Scope::All,
            self.args.wait,
            &never,
        )? {
            Some(result) => {
                self.print_run(&result);
                Ok(result.exit_code())
            }
            None => Err(Fatal::Invalid(format!(
                "store {}: no declaration in force",
                self.config.state_dir.display()
            ))),
        }
    }

    /// Converges to the declaration in force in the store; `None` when there is none yet.
    pub fn converge_in_force(
        &self,
        triggers: &[&str],
        scope: &reconcile::Scope,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<RunResult>, Fatal> {
        self.converge(triggers, Target::InForce, scope, wait, interrupted)
    }

    /// What converging `scope` to the declaration in force would change, observed now without
    /// the lock and changing nothing: the service's watcher asks before it runs.
    pub fn drifted(&self, scope: &reconcile::Scope) -> Result<Vec<reconcile::Planned>, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return Ok(Vec::new());
        };
        let Some(in_force) = store.in_force()? else {
            return Ok(Vec::new());
        };
        let d = self
            .validate(in_force.text.as_bytes())
            .map_err(|p| invalid(&store.path().join("declaration.json"), &p))?;
        let mut ledger = store.ledger()?;
        let runner = Runner::new(false);
        let env = self.env(Some(&store), &runner, &never);
        let report = reconcile::run_scoped(&env, &d, &mut ledger, Mode::Plan, scope)?;
        Ok(report.changes)
    }

    /// pacman's local database directory (where every transaction adds or removes an entry).
    pub fn pacman_local_db(&self) -> Result<PathBuf, String> {
        let runner = Runner::new(false);
        crate::kinds::packages::local_db_dir(&self.env(None, &runner, &never))
    }

    /// Locks the store, settles what to converge to (under the lock, so a declaration put in
    /// force meanwhile is the one applied), converges, records the run, and queues its report.
    pub fn converge(
        &self,
        triggers: &[&str],
        target: Target,
        scope: &reconcile::Scope,
        wait: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<RunResult>, Fatal> {
        let store = self.store()?;
        let started = store::unix_now();
        let holder = format!(
            "pid {} ({}) since unix time {started}",
            std::process::id(),
            triggers.join(", ")
        );
        // Waiting, the same check as between resources runs: the service's link stays answered.
        let locked = if wait {
            store.lock_pulsing(&holder, interrupted)
        } else {
            store.lock(false, &holder)
        };
        let _lock = locked.map_err(|e| match e {
            LockError::Held(_) => Fatal::Locked(e.to_string()),
            LockError::Io(..) | LockError::Stopped(_) => Fatal::Error(e.to_string()),
        })?;
        // What a crash left half written: removed (an outbox report recovered), under the lock.
        if let Err(e) = store.clean_after_crash() {
            log::warn!("{e}");
        }
        let mut ledger = store.ledger()?;
        // A run that changes the machine is always recorded: an unreadable history is set aside
        // now, before anything changes, and the run's report says so.
        let runs_note = store.set_aside_unreadable_runs()?;
        if let Some(note) = &runs_note {
            log::warn!("{note}");
        }
        let runs_note = runs_note.unwrap_or_default();
        let from_store;
        let expires;
        let (d, revision) = match target {
            Target::New {
                declaration,
                mut in_force,
            } => {
                // A local override keeps the control plane's revision: only a newer one replaces it.
                let current = store.in_force_head()?;
                in_force.control_plane_revision =
                    current.as_ref().and_then(|f| f.control_plane_revision);
                // The same file applied again is already in force (and has been since then).
                let unchanged = current.is_some_and(|f| {
                    f.digest == in_force.digest
                        && f.source == in_force.source
                        && f.signed_by == in_force.signed_by
                });
                if !unchanged {
                    store.set_in_force(&in_force)?;
                }
                expires = in_force.expires;
                (declaration, declaration.revision)
            }
            Target::InForce => {
                let Some(in_force) = store.in_force()? else {
                    return Ok(None);
                };
                from_store = self
                    .validate(in_force.text.as_bytes())
                    .map_err(|p| invalid(&store.path().join("declaration.json"), &p))?;
                expires = in_force.expires;
                (&from_store, in_force.revision)
            }
        };
        // The same check the reconciler makes between resources also runs while a tool runs.
        let runner = Runner::new(self.args.trace_commands).with_pulse(interrupted);
        let outcome = reconcile::run_scoped(
            &self.env(Some(&store), &runner, interrupted),
            d,
            &mut ledger,
            Mode::Apply,
            scope,
        );
        let (report, outcome_name) = match outcome {
            Ok(report) if report.interrupted => (report, "interrupted"),
            Ok(report) if report.failures.is_empty() => (report, "converged"),
            Ok(report) => (report, "failed"),
            Err(e) => {
                let record = record(
                    triggers,
                    started,
                    "error",
                    revision,
                    d,
                    &Report::default(),
                    &runner,
                );
                let message = join_lines(&runs_note, &e.to_string());
                self.queue_report(&store, &record, &[], &[], &message);
                let _ = store.record_run(&record);
                self.note_run(&store, &record, None);
                return Err(e.into());
            }
        };
        let record = record(
            triggers,
            started,
            outcome_name,
            revision,
            d,
            &report,
            &runner,
        );
        // Held past its expiry (a disconnected node keeps holding its machine), but said so.
        let mut notes = record.notes.clone();
        if let Some(expires) = expires.filter(|e| *e <= started) {
            let note = format!(
                "the declaration in force {}; it is held until a newer one arrives",
                expiry(expires, started)
            );
            log::warn!("{note}");
            notes.push(note);
        }
        // The failure history first, since the report carries each streak; then the report
        // before the record: a crash between the two leaves a report of a run the history lacks,
        // never a recorded run the control plane is not told of.
        let failing = note_failures(&store, &report, record.ended);
        let message = join_lines(&runs_note, &notes.join("; "));
        self.queue_report(&store, &record, &failing, &report.pacnew, &message);
        store.record_run(&record)?;
        self.note_run(&store, &record, Some(&report));
        Ok(Some(RunResult {
            report,
            record,
            traced: runner.traced(),
        }))
    }

    /// Puts a run's report in the outbox, for the control plane, when there is one.
    fn queue_report(
        &self,
        store: &Store,
        record: &RunRecord,
        failing: &[Failing],
        pacnew: &[Pacnew],
        message: &str,
    ) {
        if self.config.control_plane.is_none() {
            return;
        }
        let mut report = report_of(record, message);
        report.failing = failing.to_vec();
        report.pacnew = pacnew.to_vec();
        if let Err(e) = store.outbox_push(&mut report, self.config.outbox_bounds()) {
            log::error!("the run's report could not be queued for the control plane: {e}");
        }
    }

    /// Counts a run in the store's statistics, then writes the metrics. Neither is worth failing
    /// a run that happened for: a problem is logged.
    fn note_run(&self, store: &Store, record: &RunRecord, report: Option<&Report>) {
        let trigger = record.trigger.split(", ").next().unwrap_or_default();
        let run = LastRun {
            started: record.started,
            ended: record.ended,
            outcome: record.outcome.clone(),
        };
        let counted = store.stats().and_then(|mut stats| {
            stats.record(
                trigger,
                run,
                report.map(resource_states).unwrap_or_default(),
                report.map(|r| r.pacnew.clone()),
            );
            store.save_stats(&stats)
        });
        if let Err(e) = counted {
            log::error!("the run was not counted in the statistics: {e}");
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
                s.state == "running" && s.link == "connected" && process_alive(s.pid)
            }),
        };
        Ok(metrics::render(&metrics::Snapshot {
            now: store::unix_now(),
            version: env!("CARGO_PKG_VERSION"),
            stats: &stats,
            failing: &failing,
            declaration,
            link_up,
            outbox_reports: store.outbox_len()?,
        }))
    }

    fn print_run(&self, result: &RunResult) {
        self.print_report(
            &result.report,
            false,
            result.record.commands,
            &result.traced,
        );
        if !self.args.json {
            for note in &result.record.notes {
                println!("note: {note}");
            }
        }
    }

    fn print_report(&self, report: &Report, planning: bool, commands: usize, traced: &[String]) {
        if self.args.json {
            let mut value = json!({
                "changes": report.changes,
                "failures": report.failures,
                "deferred": report.deferred,
                "adopted": report.adopted,
                "in_sync": report.in_sync,
                "pacnew": report.pacnew,
                "command_count": commands,
            });
            if self.args.trace_commands {
                value["commands"] = json!(traced);
            }
            self.print_json(value);
            return;
        }
        for c in &report.changes {
            println!(
                "{} {} {}: {}",
                c.symbol,
                c.kind,
                c.key,
                c.details.join(", ")
            );
        }
        for a in &report.adopted {
            println!("= {} {}: adopted, already as declared", a.kind, a.key);
        }
        for d in &report.deferred {
            println!("> {} {}: deferred: {}", d.kind, d.key, d.detail);
        }
        for f in &report.failures {
            println!("! {} {}: {} failed: {}", f.kind, f.key, f.action, f.detail);
        }
        for p in &report.pacnew {
            println!("? files {}: {}", p.path, pacnew_advice(p));
        }
        let verb = if planning { "would change" } else { "changed" };
        println!(
            "{} {verb}, {} in sync, {} adopted, {} deferred, {} failed ({commands} commands run)",
            report.changes.len(),
            report.in_sync,
            report.adopted.len(),
            report.deferred.len(),
            report.failures.len(),
        );
        for command in traced {
            eprintln!("command: {command}");
        }
    }

    pub fn owned(&self) -> Result<i32, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            return self.print_owned(&[]);
        };
        let ledger = store.ledger()?;
        let declaration = match store.in_force()? {
            Some(in_force) => self
                .validate(in_force.text.as_bytes())
                .map_err(|p| invalid(&store.path().join("declaration.json"), &p))?,
            None => self
                .validate(br#"{"schema": 1}"#)
                .map_err(|_| Fatal::Error("the empty declaration was refused".into()))?,
        };
        let runner = Runner::new(self.args.trace_commands);
        let mut rows = reconcile::owned(
            &self.env(Some(&store), &runner, &never),
            &declaration,
            &ledger,
        );
        let history = store.failures()?;
        for row in &mut rows {
            row.failing = history.find(&row.kind, &row.key);
        }
        self.print_owned(&rows)
    }

    fn print_owned(&self, rows: &[reconcile::OwnedRow]) -> Result<i32, Fatal> {
        if self.args.json {
            self.print_json(json!({ "owned": rows }));
        } else if rows.is_empty() {
            println!("mesh-host owns nothing");
        } else {
            for r in rows {
                let origin = format!("{:?}", r.origin).to_lowercase();
                let detail = if r.detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.detail)
                };
                println!(
                    "{:<10} {:<40} {:<8} {}{detail}",
                    r.kind, r.key, origin, r.state
                );
                if let Some(f) = &r.failing {
                    println!("    ! {}", failing_words(f, store::unix_now()));
                }
                for p in &r.pacnew {
                    println!("    ? {}", pacnew_advice(p));
                }
            }
        }
        Ok(EXIT_OK)
    }

    pub fn status(&self) -> Result<i32, Fatal> {
        let store = Store::open(&self.config.state_dir, false)?;
        let (in_force, runs, service) = match &store {
            Some(s) => (s.in_force_head()?, s.runs()?, s.service_state()?),
            None => (None, Vec::new(), None),
        };
        let failing = match &store {
            Some(s) => s.failures()?.failing(),
            None => Vec::new(),
        };
        let pacnew = match &store {
            Some(s) => s.stats()?.pacnew,
            None => Vec::new(),
        };
        let service = service.map(|mut s| {
            if s.state == "running" && !process_alive(s.pid) {
                s.state = "not running (it did not stop cleanly)".into();
            }
            s
        });
        let now = store::unix_now();
        if self.args.json {
            let in_force = in_force.as_ref().map(|f| {
                let signed_by: Vec<_> = f
                    .signed_by
                    .iter()
                    .map(|key| json!({"key": key, "trusted": self.trusts(key)}))
                    .collect();
                json!({"source": f.source, "revision": f.revision, "digest": f.digest, "since": f.since,
                       "control_plane_revision": f.control_plane_revision, "signed_by": signed_by,
                       "expires": f.expires, "expired": f.expires.is_some_and(|e| e <= now)})
            });
            self.print_json(json!({"state_dir": self.config.state_dir, "in_force": in_force, "service": service, "runs": runs,
                                   "failing": failing, "pacnew": pacnew}));
            return Ok(EXIT_OK);
        }
        println!("store: {}", self.config.state_dir.display());
        match &service {
            None => println!("service: never ran"),
            Some(s) if s.state != "running" => println!("service: {}", s.state),
            Some(s) => {
                let link = match (s.link.as_str(), s.link_at) {
                    ("connected", Some(at)) => {
                        format!("connected since {} ago", age(now.saturating_sub(at)))
                    }
                    ("retrying", Some(at)) => {
                        format!("retrying in {}", age(at.saturating_sub(now)))
                    }
                    (other, _) => other.to_string(),
                };
                let error = s
                    .last_error
                    .as_ref()
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default();
                println!(
                    "service: running (pid {}), link {link}{error}, next timer run in {}",
                    s.pid,
                    age(s.next_timer.saturating_sub(now))
                );
                if let Some(w) = &s.watch {
                    print_watch(w, now);
                }
            }
        }
        match &in_force {
            None => println!("declaration in force: none"),
            Some(f) => {
                let source = match &f.source {
                    Source::Local { path } => format!("local file {path}"),
                    Source::ControlPlane => "the control plane".to_string(),
                };
                let revision = f
                    .revision
                    .map(|r| format!("revision {r}, "))
                    .unwrap_or_default();
                println!(
                    "declaration in force: {revision}from {source}, sha256 {}, since {} ago",
                    f.digest,
                    age(now.saturating_sub(f.since))
                );
                for key in &f.signed_by {
                    let trust = if self.trusts(key) {
                        "trusted"
                    } else {
                        "not trusted here"
                    };
                    println!("    signed by {key} ({trust})");
                }
                if let Some(expires) = f.expires {
                    let held = if expires <= now {
                        "; held until a newer one arrives"
                    } else {
                        ""
                    };
                    println!("    {}{held}", expiry(expires, now));
                }
            }
        }
        if !failing.is_empty() {
            println!("failing: {} resources", failing.len());
            for f in &failing {
                println!("  ! {} {}: {}", f.kind, f.key, failing_words(f, now));
            }
        }
        for p in &pacnew {
            println!("? files {}: {}", p.path, pacnew_advice(p));
        }
        if runs.is_empty() {
            println!("no runs recorded");
        }
        for run in runs.iter().rev().take(10) {
            println!(
                "{} ago: {} {} ({} changed, {} failed, {} deferred, {} in sync, {} commands)",
                age(now.saturating_sub(run.ended)),
                run.trigger,
                run.outcome,
                run.changes.len(),
                run.failures.len(),
                run.deferred.len(),
                run.in_sync,
                run.commands
            );
            for note in &run.notes {
                println!("    note: {note}");
            }
            if run.retries > 0 {
                println!(
                    "    ({} of the commands were retries of failed batched queries)",
                    run.retries
                );
            }
            for f in &run.failures {
                println!("    ! {} {}: {}", f.kind, f.key, f.detail);
            }
            if run.omitted > 0 {
                println!(
                    "    ({} more resources not kept in the history)",
                    run.omitted
                );
            }
        }
        Ok(EXIT_OK)
    }
}

/// Each kind the run reached, its resources by state as the run found them: in sync (or
/// adopted), missing (created), drifted (changed or removed), failed, deferred.
fn resource_states(report: &Report) -> BTreeMap<String, BTreeMap<String, u64>> {
    let found = report
        .changes
        .iter()
        .map(|c| {
            (
                c.kind.as_str(),
                if c.symbol == '+' {
                    "missing"
                } else {
                    "drifted"
                },
            )
        })
        .chain(report.adopted.iter().map(|a| (a.kind.as_str(), "in_sync")))
        .chain(report.failures.iter().map(|f| (f.kind.as_str(), "failed")))
        .chain(
            report
                .deferred
                .iter()
                .map(|d| (d.kind.as_str(), "deferred")),
        )
        .chain(
            report
                .in_sync_by_kind
                .iter()
                .flat_map(|(kind, n)| std::iter::repeat_n((*kind, "in_sync"), *n)),
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

/// What a `.pacnew` beside an owned file means, for people.
fn pacnew_advice(p: &Pacnew) -> String {
    format!(
        "{}: the package's default changed since the host took the file; review the declaration",
        p.describe()
    )
}

/// `failing since 3 h 10 min, 19 runs: update failed: ...`
fn failing_words(f: &Failing, now: u64) -> String {
    format!(
        "failing since {}, {} run{}: {}",
        store::duration_words(now.saturating_sub(f.first_seen)),
        f.runs,
        if f.runs == 1 { "" } else { "s" },
        f.last_error
    )
}

/// `expires at unix time T (in 3 h)` or `expired at unix time T (2 h ago)`.
fn expiry(expires: u64, now: u64) -> String {
    if expires > now {
        format!("expires at unix time {expires} (in {})", age(expires - now))
    } else {
        format!(
            "expired at unix time {expires} ({} ago)",
            age(now - expires)
        )
    }
}

fn process_alive(pid: u32) -> bool {
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn count(d: &Declaration) -> usize {
    d.count()
}

fn record(
    triggers: &[&str],
    started: u64,
    outcome: &str,
    revision: Option<u64>,
    d: &Declaration,
    report: &Report,
    runner: &Runner,
) -> RunRecord {
    RunRecord {
        trigger: triggers.join(", "),
        started,
        ended: store::unix_now(),
        outcome: outcome.to_string(),
        revision,
        digest: Some(d.digest.clone()),
        changes: report.changes.iter().map(|c| c.as_result()).collect(),
        failures: report.failures.clone(),
        deferred: report.deferred.clone(),
        in_sync: report.in_sync,
        commands: runner.count(),
        retries: runner.retries(),
        notes: runner.notes(),
        omitted: 0,
    }
}

/// The control plane's view of a run. Changes in a run no new declaration caused repair drift.
pub fn report_of(record: &RunRecord, message: &str) -> link::Report {
    let trigger: Vec<String> = record.trigger.split(", ").map(str::to_string).collect();
    let new_declaration = trigger.iter().any(|t| t == "declaration" || t == "apply");
    link::Report {
        id: 0,
        revision: record.revision,
        digest: record.digest.clone(),
        trigger,
        outcome: record.outcome.clone(),
        started: record.started,
        ended: record.ended,
        changes: record.changes.clone(),
        failures: record.failures.clone(),
        deferred: record.deferred.clone(),
        drift: if new_declaration {
            Vec::new()
        } else {
            record.changes.clone()
        },
        message: message.to_string(),
        failing: Vec::new(),
        pacnew: Vec::new(),
    }
}

fn join_lines(a: &str, b: &str) -> String {
    [a, b]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}

/// The watcher's lines of `status`: what it watches, what it cannot, what it leaves to the timer.
fn print_watch(w: &store::WatchState, now: u64) {
    let detail = w
        .detail
        .as_ref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    match w.state.as_str() {
        "off" => println!("watch: off{detail}; drift is found by the timer alone"),
        state => println!("watch: {state}, {} directories{detail}", w.directories),
    }
    if let Some(at) = w.last_overflow {
        println!(
            "    the event queue overflowed {} times, last {} ago: each time a full run",
            w.overflows,
            age(now.saturating_sub(at))
        );
    }
    for c in &w.contested {
        println!(
            "    contested: {} {} since {} ago ({} repairs within a minute, changed again {} ago): \
             another process keeps changing it; left to the timer until it is left alone",
            c.kind,
            c.key,
            age(now.saturating_sub(c.since)),
            c.repairs,
            age(now.saturating_sub(c.last_change))
        );
    }
}
