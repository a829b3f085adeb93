//! The commands behind the command line. Each reads its inputs, calls the orchestration
//! (`converge` for anything that changes the machine: the one path `apply`, `reconcile` and the
//! service share) and hands the result to `render`; each returns an exit code or a `Fatal` that
//! `main` prints once.

mod converge;
mod render;
mod unwritten;

use std::cell::{OnceCell, RefCell};
use std::path::{Path, PathBuf};

use crate::cli::Args;
use crate::config::Config;
use crate::declaration::{self, Declaration, Problems};
use crate::envelope::{self, PublicKey, Verification};
use crate::exec::Runner;
use crate::kinds::Env;
use crate::reconcile::{self, Mode};
use crate::store::{
    self, InForce, Ledger, RunOutcome, Source, Store, StoreError, Trigger, Triggers,
};
use unwritten::Backlog;

pub use converge::{RunResult, Target};

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

/// Never interrupted: the command line has no signal handling of its own (Ctrl-C ends it).
fn never() -> bool {
    false
}

pub struct Host {
    pub args: Args,
    pub config: Config,
    /// Runs the store could not take yet, oldest first (`converge::keep_run`).
    unwritten: RefCell<Backlog>,
    /// Where the reboot and restart look is made, asked of pacman once (`pacman -v -T`) by the
    /// first run of this process and again after the config is reloaded: a timer run spawns
    /// nothing for it.
    upkeep: OnceCell<Option<crate::upkeep::Where>>,
}

impl Host {
    pub fn new(args: Args) -> Result<Host, Fatal> {
        let config = Config::load(args.config.as_deref(), args.state_dir.as_deref())
            .map_err(Fatal::Invalid)?;
        Ok(Host {
            args,
            config,
            unwritten: RefCell::default(),
            upkeep: OnceCell::new(),
        })
    }

    /// Reads the config again (SIGHUP); on error the old one stays.
    pub fn reload_config(&mut self) -> Result<(), Fatal> {
        self.config = Config::load(self.args.config.as_deref(), self.args.state_dir.as_deref())
            .map_err(Fatal::Invalid)?;
        self.upkeep = OnceCell::new();
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
            upkeep: self.upkeep_where(),
            ..self.env_without_upkeep(store, runner, interrupted)
        }
    }

    fn env_without_upkeep<'a>(
        &'a self,
        store: Option<&'a Store>,
        runner: &'a Runner<'a>,
        interrupted: &'a dyn Fn() -> bool,
    ) -> Env<'a> {
        Env {
            root: self.root(),
            offline: self.args.root.is_some(),
            diffs: self.args.command != crate::cli::Command::Run,
            config: &self.config,
            runner,
            store,
            interrupted,
            upkeep: None,
        }
    }

    /// Where the reboot and restart look is made, on the running system only. pacman is asked
    /// by a runner of its own, as the watcher's database is: a question of the process, not of
    /// the run whose commands are counted.
    fn upkeep_where(&self) -> Option<&crate::upkeep::Where> {
        if self.args.root.is_some() {
            return None;
        }
        self.upkeep
            .get_or_init(|| {
                let runner = Runner::new(false);
                let env = self.env_without_upkeep(None, &runner, &never);
                crate::kinds::packages::paths(&env)
                    .map_err(|e| log::info!("no reboot and restart look: pacman's root: {e}"))
                    .ok()
            })
            .as_ref()
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
        let (bytes, verification) = if envelope::is_envelope(&raw) {
            // The file's bytes become the declaration's text (unescaped in place).
            let envelope = envelope::open_in_place(raw).map_err(|p| invalid(file, &p))?;
            let verification = envelope.verify(self.trusted_keys());
            (envelope.declaration.into_bytes(), Some(verification))
        } else {
            (raw, None)
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
                eprintln!("mesh-host: {why}; but this command ends here, and what was not written is lost");
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
            commands: self.args.trace_commands.then_some(traced),
            planning,
            notes,
            diffs_cut: report.diffs_cut,
        };
        render::run(self.args.json, &output, traced);
    }

    /// The store, created if missing (mode 0700).
    pub fn store(&self) -> Result<Store, Fatal> {
        Store::open(&self.config.state_dir, true)?
            .ok_or_else(|| Fatal::Error("the store vanished".into()))
    }

    /// pacman's local database directory as a run of this process already asked pacman for it,
    /// or None: asks nothing (the hello's facts, gathered in the service loop).
    pub fn pacman_local_db_known(&self) -> Option<PathBuf> {
        let at = self.upkeep.get()?.as_ref()?;
        Some(at.db.join("local"))
    }

    /// pacman's local database directory (where every transaction adds or removes an entry).
    pub fn pacman_local_db(&self) -> Result<PathBuf, String> {
        let runner = Runner::new(false);
        let env = self.env(None, &runner, &never);
        match env.upkeep {
            Some(at) => Ok(at.db.join("local")),
            None => crate::kinds::packages::local_db_dir(&env),
        }
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
        render::check(self.args.json, &checked, store::unix_now());
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
        let traced = runner.traced();
        self.print_run(&report, runner.count(), &traced, true, &[]);
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
            &Triggers::one(Trigger::Apply),
            target,
            &reconcile::Scope::All,
            self.args.wait,
            &never,
        )? {
            Some(result) => Ok(self.print_converged(&result)),
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
            &Triggers::one(Trigger::Reconcile),
            &reconcile::Scope::All,
            self.args.wait,
            &never,
        )? {
            Some(result) => Ok(self.print_converged(&result)),
            None => Err(Fatal::Invalid(format!(
                "store {}: no declaration in force",
                self.config.state_dir.display()
            ))),
        }
    }

    pub fn owned(&self) -> Result<i32, Fatal> {
        let Some(store) = Store::open(&self.config.state_dir, false)? else {
            render::owned(
                self.args.json,
                &render::Owned { owned: &[] },
                store::unix_now(),
            );
            return Ok(EXIT_OK);
        };
        // The text dropped once parsed, before the ledger is read: never both held at once.
        let declaration = match store.in_force()? {
            Some(in_force) => self
                .validate(in_force.text.as_bytes())
                .map_err(|p| invalid(&store.path().join("declaration.json"), &p))?,
            None => self
                .validate(br#"{"schema": 1}"#)
                .map_err(|_| Fatal::Error("the empty declaration was refused".into()))?,
        };
        let ledger = store.ledger()?;
        let runner = Runner::new(self.args.trace_commands);
        let mut rows = reconcile::owned(
            &self.env(Some(&store), &runner, &never),
            declaration,
            &ledger,
        );
        let history = store.failures()?;
        for row in &mut rows {
            row.failing = history.find(row.kind, &row.key).map(Box::new);
        }
        render::owned(
            self.args.json,
            &render::Owned { owned: &rows },
            store::unix_now(),
        );
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
        let last_failed = runs.last().is_some_and(|r| r.outcome == RunOutcome::Error);
        let now = store::unix_now();
        let status = render::Status {
            state_dir: &self.config.state_dir,
            in_force: in_force.map(|f| render::InForceStatus::new(f, |k| self.trusts(k), now)),
            service: service.map(|s| render::ServiceStatus::new(s, crate::process::alive)),
            runs,
            failing,
            pacnew,
            needs,
            problems,
        };
        render::status(self.args.json, &status, now);
        // The host cannot run as it stands, or its last run could not: said by the exit code too.
        Ok(if status.problems.is_empty() && !last_failed {
            EXIT_OK
        } else {
            EXIT_ERROR
        })
    }
}
