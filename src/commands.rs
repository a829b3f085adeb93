//! The commands behind the command line. Each returns an exit code or a `Fatal` that `main` prints
//! once; every command that changes the machine goes through `reconcile::run` under the store lock.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::Args;
use crate::config::Config;
use crate::declaration::{self, Declaration, Problems};
use crate::exec::Runner;
use crate::kinds::Env;
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

fn invalid(file: &Path, problems: &Problems) -> Fatal {
    let count = problems.0.len();
    Fatal::Invalid(format!(
        "{}: {count} problem{}; nothing was applied:\n{problems}",
        file.display(),
        if count == 1 { "" } else { "s" }
    ))
}

pub struct Host {
    pub args: Args,
    pub config: Config,
    pub runner: Runner,
}

impl Host {
    pub fn new(args: Args) -> Result<Host, Fatal> {
        let config = Config::load(args.config.as_deref(), args.state_dir.as_deref())
            .map_err(Fatal::Invalid)?;
        let runner = Runner::new(args.trace_commands);
        Ok(Host {
            args,
            config,
            runner,
        })
    }

    fn root(&self) -> &Path {
        self.args.root.as_deref().unwrap_or(Path::new("/"))
    }

    fn env<'a>(&'a self, store: Option<&'a Store>) -> Env<'a> {
        Env {
            root: self.root(),
            offline: self.args.root.is_some(),
            config: &self.config,
            runner: &self.runner,
            store,
        }
    }

    fn validate(&self, bytes: &[u8]) -> Result<Declaration, Problems> {
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
        let report = reconcile::run(&self.env(store.as_ref()), &d, &mut ledger, Mode::Plan)?;
        self.print_report(&report, true);
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
        };
        self.converge("apply", &d, Some(&in_force))
    }

    pub fn reconcile(&self) -> Result<i32, Fatal> {
        let store = Store::open(&self.config.state_dir, false)?.ok_or_else(|| {
            Fatal::Invalid(format!(
                "no store at {}: nothing was ever applied here",
                self.config.state_dir.display()
            ))
        })?;
        let in_force = store.in_force()?.ok_or_else(|| {
            Fatal::Invalid(format!(
                "store {}: no declaration in force",
                self.config.state_dir.display()
            ))
        })?;
        let d = self
            .validate(in_force.text.as_bytes())
            .map_err(|p| invalid(&store.path().join("declaration.json"), &p))?;
        drop(store);
        self.converge("reconcile", &d, None)
    }

    /// Locks the store, makes `in_force` the declaration in force (if given), converges, records.
    fn converge(
        &self,
        trigger: &str,
        d: &Declaration,
        in_force: Option<&InForce>,
    ) -> Result<i32, Fatal> {
        let store = Store::open(&self.config.state_dir, true)?
            .ok_or_else(|| Fatal::Error("store vanished".into()))?;
        let started = store::unix_now();
        let holder = format!(
            "pid {} ({trigger}) since unix time {started}",
            std::process::id()
        );
        let _lock = store.lock(self.args.wait, &holder).map_err(|e| match e {
            LockError::Held(_) => Fatal::Locked(e.to_string()),
            LockError::Io(..) => Fatal::Error(e.to_string()),
        })?;
        let mut ledger = store.ledger()?;
        if let Some(in_force) = in_force {
            store.set_in_force(in_force)?;
        }
        let env = self.env(Some(&store));
        let outcome = reconcile::run(&env, d, &mut ledger, Mode::Apply);
        let report = match outcome {
            Ok(report) => report,
            Err(e) => {
                let _ = store.record_run(&record(
                    trigger,
                    started,
                    "error",
                    d,
                    &Report::default(),
                    self.runner.count(),
                ));
                return Err(e.into());
            }
        };
        let outcome = if report.failures.is_empty() {
            "converged"
        } else {
            "failed"
        };
        store.record_run(&record(
            trigger,
            started,
            outcome,
            d,
            &report,
            self.runner.count(),
        ))?;
        self.print_report(&report, false);
        Ok(if report.failures.is_empty() {
            EXIT_OK
        } else {
            EXIT_FAILED
        })
    }

    fn print_report(&self, report: &Report, planning: bool) {
        let traced = self.runner.traced();
        if self.args.json {
            let mut value = json!({
                "changes": report.changes,
                "failures": report.failures,
                "deferred": report.deferred,
                "adopted": report.adopted,
                "in_sync": report.in_sync,
                "command_count": self.runner.count(),
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
            "{} {verb}, {} in sync, {} adopted, {} deferred, {} failed ({} commands run)",
            report.changes.len(),
            report.in_sync,
            report.adopted.len(),
            report.deferred.len(),
            report.failures.len(),
            self.runner.count()
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
                .map_err(|_| Fatal::Error("empty declaration refused".into()))?,
        };
        let rows = reconcile::owned(&self.env(Some(&store)), &declaration, &ledger);
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
        let in_force = match &store {
            Some(s) => s.in_force()?,
            None => None,
        };
        let runs = match &store {
            Some(s) => s.runs()?,
            None => Vec::new(),
        };
        let now = store::unix_now();
        if self.args.json {
            let in_force = in_force.as_ref().map(|f| {
                json!({"source": f.source, "revision": f.revision, "digest": f.digest, "since": f.since})
            });
            self.print_json(
                json!({"state_dir": self.config.state_dir, "in_force": in_force, "runs": runs}),
            );
            return Ok(EXIT_OK);
        }
        println!("store: {}", self.config.state_dir.display());
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
                "{} ago: {} {} ({} changed, {} failed, {} deferred, {} in sync, {} s)",
                age(now.saturating_sub(run.ended)),
                run.trigger,
                run.outcome,
                run.changes.len(),
                run.failures.len(),
                run.deferred.len(),
                run.in_sync,
                run.ended.saturating_sub(run.started)
            );
            for f in &run.failures {
                println!("    ! {} {}: {}", f.kind, f.key, f.detail);
            }
        }
        Ok(EXIT_OK)
    }
}

fn count(d: &Declaration) -> usize {
    d.packages.len() + d.files.len() + d.units.len() + d.containers.len()
}

fn record(
    trigger: &str,
    started: u64,
    outcome: &str,
    d: &Declaration,
    report: &Report,
    commands: usize,
) -> RunRecord {
    RunRecord {
        trigger: trigger.to_string(),
        started,
        ended: store::unix_now(),
        outcome: outcome.to_string(),
        revision: d.revision,
        digest: Some(d.digest.clone()),
        changes: report.changes.iter().map(|c| c.as_result()).collect(),
        failures: report.failures.clone(),
        deferred: report.deferred.clone(),
        in_sync: report.in_sync,
        commands,
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
