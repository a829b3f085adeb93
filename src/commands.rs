//! The commands behind the command line. Each returns an exit code or a `Fatal` that `main` prints
//! once. Everything that changes the machine goes through `Host::converge`, the one path `apply`,
//! `reconcile` and the service share: one lock, one ledger, one run record, one report.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::Args;
use crate::config::Config;
use crate::declaration::{self, Declaration, Problems};
use crate::exec::Runner;
use crate::kinds::Env;
use crate::link;
use crate::reconcile::{self, Mode, Report};
use crate::store::{self, InForce, Ledger, LockError, RunRecord, Source, Store, StoreError};

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
        runner: &'a Runner,
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

    /// Reads a declaration file, refusing one over the size limit before reading it.
    fn read_declaration(&self, file: &Path) -> Result<(Vec<u8>, Declaration), Fatal> {
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
        let bytes = std::fs::read(file).map_err(cannot)?;
        let declaration = self.validate(&bytes).map_err(|p| invalid(file, &p))?;
        Ok((bytes, declaration))
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

    pub fn check(&self, file: &Path) -> Result<i32, Fatal> {
        let (_, d) = self.read_declaration(file)?;
        if self.args.json {
            self.print_json(json!({"valid": true, "revision": d.revision, "digest": d.digest, "resources": count(&d)}));
        } else {
            println!(
                "{}: valid ({} resources, sha256 {})",
                file.display(),
                count(&d),
                d.digest
            );
        }
        Ok(EXIT_OK)
    }

    pub fn plan(&self, file: &Path) -> Result<i32, Fatal> {
        let (_, d) = self.read_declaration(file)?;
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

    pub fn apply(&self, file: &Path) -> Result<i32, Fatal> {
        let (bytes, d) = self.read_declaration(file)?;
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
        let _lock = store.lock(wait, &holder).map_err(|e| match e {
            LockError::Held(_) => Fatal::Locked(e.to_string()),
            LockError::Io(..) => Fatal::Error(e.to_string()),
        })?;
        let mut ledger = store.ledger()?;
        let from_store;
        let (d, revision) = match target {
            Target::New {
                declaration,
                mut in_force,
            } => {
                // A local override keeps the control plane's revision: only a newer one replaces it.
                let current = store.in_force()?;
                in_force.control_plane_revision =
                    current.as_ref().and_then(|f| f.control_plane_revision);
                // The same file applied again is already in force (and has been since then).
                let unchanged = current
                    .is_some_and(|f| f.digest == in_force.digest && f.source == in_force.source);
                if !unchanged {
                    store.set_in_force(&in_force)?;
                }
                (declaration, declaration.revision)
            }
            Target::InForce => {
                let Some(in_force) = store.in_force()? else {
                    return Ok(None);
                };
                from_store = self
                    .validate(in_force.text.as_bytes())
                    .map_err(|p| invalid(&store.path().join("declaration.json"), &p))?;
                (&from_store, in_force.revision)
            }
        };
        let runner = Runner::new(self.args.trace_commands);
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
                    runner.count(),
                );
                let _ = store.record_run(&record);
                self.queue_report(&store, &record, &e.to_string());
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
            runner.count(),
        );
        store.record_run(&record)?;
        self.queue_report(&store, &record, "");
        Ok(Some(RunResult {
            report,
            record,
            traced: runner.traced(),
        }))
    }

    /// Puts a run's report in the outbox, for the control plane, when there is one.
    fn queue_report(&self, store: &Store, record: &RunRecord, message: &str) {
        if self.config.control_plane.is_none() {
            return;
        }
        let mut report = report_of(record, message);
        if let Err(e) = store.outbox_push(&mut report, self.config.outbox_max) {
            log::error!("the run's report could not be queued for the control plane: {e}");
        }
    }

    fn print_run(&self, result: &RunResult) {
        self.print_report(
            &result.report,
            false,
            result.record.commands,
            &result.traced,
        );
    }

    fn print_report(&self, report: &Report, planning: bool, commands: usize, traced: &[String]) {
        if self.args.json {
            let mut value = json!({
                "changes": report.changes,
                "failures": report.failures,
                "deferred": report.deferred,
                "adopted": report.adopted,
                "in_sync": report.in_sync,
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
        let rows = reconcile::owned(
            &self.env(Some(&store), &runner, &never),
            &declaration,
            &ledger,
        );
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
            }
        }
        Ok(EXIT_OK)
    }

    pub fn status(&self) -> Result<i32, Fatal> {
        let store = Store::open(&self.config.state_dir, false)?;
        let (in_force, runs, service) = match &store {
            Some(s) => (s.in_force()?, s.runs()?, s.service_state()?),
            None => (None, Vec::new(), None),
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
                json!({"source": f.source, "revision": f.revision, "digest": f.digest, "since": f.since,
                       "control_plane_revision": f.control_plane_revision})
            });
            self.print_json(json!({"state_dir": self.config.state_dir, "in_force": in_force, "service": service, "runs": runs}));
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
            }
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

fn process_alive(pid: u32) -> bool {
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn count(d: &Declaration) -> usize {
    d.packages.len() + d.files.len() + d.units.len() + d.containers.len()
}

fn record(
    triggers: &[&str],
    started: u64,
    outcome: &str,
    revision: Option<u64>,
    d: &Declaration,
    report: &Report,
    commands: usize,
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
        commands,
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
    }
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
