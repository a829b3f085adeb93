//! The engine: what a command or the service asks of the machine. `Host` holds the config and
//! its options, reads a declaration (file or store), and runs the one converging path
//! (`converge`: `apply`, `reconcile` and the service share it) through the reconciler; it
//! prints nothing. Exit codes and `Fatal` are its answer to whoever called it.

pub mod accept;
pub mod confirm;
pub mod converge;
pub mod metrics;
pub mod node;
pub mod reconcile;
mod target;
mod unwritten;
mod wire;

use std::cell::{OnceCell, RefCell};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::kinds::Env;
use crate::model::config::Config;
use crate::model::declaration::{self, Declaration};
use crate::model::envelope::{self, Verification};
use crate::model::fields::Problems;
use crate::model::trust::PublicKey;
use crate::os::exec::Runner;
use crate::store::{LockError, PacmanPaths, Store, StoreError};
use crate::util::progress::Sink;
use unwritten::Backlog;

pub use confirm::Reverting;
pub use converge::{Converged, RunResult, Target};

/// What the engine is asked to work with: where its config, store and target are, and how it
/// runs. The command line fills it (`cli`), the engine never sees the command line itself.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The config file (`--config`); the default path when `None`.
    pub config: Option<PathBuf>,
    /// The store, over the config's `state_dir` (`--state-dir`).
    pub state_dir: Option<PathBuf>,
    /// A mounted root to apply into (`--root`): whatever needs the running system is deferred.
    pub root: Option<PathBuf>,
    /// Keep every command line run, for printing (`--trace-commands`).
    pub trace_commands: bool,
    /// The service: no content diffs in plans, as it prints none.
    pub service: bool,
    /// Where each run tells what it starts doing (a person's terminal); nothing when `None`.
    pub progress: Option<Sink>,
    /// Where every run, deadline and record takes its time (a manual clock in tests).
    pub clock: crate::os::clock::Clock,
}

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_LOCKED: i32 = 3;
pub const EXIT_ERROR: i32 = 4;
/// `plan` and `owned` with `--detailed-exitcode`: the machine differs from the declaration.
pub const EXIT_CHANGES: i32 = 5;
/// `status`: the host runs, but not well (failing resources, contested drift, the link down
/// too long, a pending declaration past its deadline, the service gone).
pub const EXIT_DEGRADED: i32 = 6;

/// Why a command could not do its job at all; each maps to an exit code, and each carries its
/// cause typed, for a caller to match (the service reports `Invalid` as a rejection, waits out
/// `Locked`); its `Display` is the message people read.
#[derive(Debug)]
pub enum Fatal {
    /// Bad usage, config or declaration: nothing changed.
    Invalid(Invalid),
    /// Another run holds the store's lock: who, as its lock file says.
    Locked { holder: String },
    /// What stopped the command once it had begun.
    Error(Failed),
}

/// What was invalid.
#[derive(Debug)]
pub enum Invalid {
    /// A declaration file's problems, every one with its place.
    Declaration { file: PathBuf, problems: Problems },
    /// Anything else (usage, the config, a key, a declaration refused on arrival), as said.
    Said(String),
}

/// What failed.
#[derive(Debug)]
pub enum Failed {
    /// The store could not be read or written.
    Store(StoreError),
    /// The lock could not be taken though no other run holds it (I/O, or the host stopping).
    Lock(LockError),
    /// A system call or file: what was being done, and the error.
    Io {
        context: String,
        error: std::io::Error,
    },
    /// Anything else, as said.
    Said(String),
}

impl Fatal {
    /// `Fatal::Invalid` of a message.
    pub fn invalid(message: String) -> Fatal {
        Fatal::Invalid(Invalid::Said(message))
    }

    /// `Fatal::Error` of a message.
    pub fn error(message: String) -> Fatal {
        Fatal::Error(Failed::Said(message))
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Fatal::Invalid(_) => EXIT_INVALID,
            Fatal::Locked { .. } => EXIT_LOCKED,
            Fatal::Error(_) => EXIT_ERROR,
        }
    }

    /// The kind's name, as `--json` errors carry it.
    pub fn kind(&self) -> &'static str {
        match self {
            Fatal::Invalid(_) => "invalid",
            Fatal::Locked { .. } => "locked",
            Fatal::Error(_) => "error",
        }
    }

    /// What people read: the `Display`.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fatal::Invalid(Invalid::Declaration { file, problems }) => {
                let count = problems.0.len();
                write!(
                    f,
                    "{}: {count} problem{}; nothing was applied:\n{problems}",
                    file.display(),
                    if count == 1 { "" } else { "s" }
                )
            }
            Fatal::Invalid(Invalid::Said(message)) | Fatal::Error(Failed::Said(message)) => {
                f.write_str(message)
            }
            Fatal::Locked { holder } => write!(f, "{}", LockError::Held(holder.clone())),
            Fatal::Error(Failed::Store(e)) => write!(f, "{e}"),
            Fatal::Error(Failed::Lock(e)) => write!(f, "{e}"),
            Fatal::Error(Failed::Io { context, error }) => write!(f, "{context}: {error}"),
        }
    }
}

impl From<StoreError> for Fatal {
    fn from(e: StoreError) -> Fatal {
        Fatal::Error(Failed::Store(e))
    }
}

impl From<LockError> for Fatal {
    fn from(e: LockError) -> Fatal {
        match e {
            LockError::Held(holder) => Fatal::Locked { holder },
            e => Fatal::Error(Failed::Lock(e)),
        }
    }
}

pub fn invalid(file: &Path, problems: Problems) -> Fatal {
    Fatal::Invalid(Invalid::Declaration {
        file: file.to_path_buf(),
        problems,
    })
}

/// Whether `bytes` are the store's `declaration.json` (its `InForce` record: the digest, source
/// and time of the declaration in force), which people hand to `plan` for the declaration in force.
fn is_store_record(bytes: &[u8]) -> bool {
    let value: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    ["digest", "source", "since"]
        .iter()
        .all(|k| value.get(k).is_some())
}

/// A declaration file as read: the declaration's own bytes (taken out of the envelope when it
/// came in one), validated, and what its signatures proved against the config's trusted keys.
pub struct ReadDeclaration {
    pub bytes: Vec<u8>,
    pub declaration: Declaration,
    pub verification: Option<Verification>,
}

/// Never interrupted: the command line has no signal handling of its own (Ctrl-C ends it).
pub fn never() -> bool {
    false
}

pub struct Host {
    pub options: Options,
    pub config: Config,
    /// Runs the store could not take yet, oldest first (`converge::keep_run`).
    unwritten: RefCell<Backlog>,
    /// Where the reboot and restart look is made, read once by the first run of this process
    /// and again after the config is reloaded (`upkeep_where`): a timer run spawns nothing for it.
    upkeep: OnceCell<Option<crate::model::upkeep::Where>>,
}

impl Host {
    pub fn new(options: Options) -> Result<Host, Fatal> {
        // Before the config, the store or anything else: a mistyped root must not get a store
        // made and a declaration put in force for it.
        if let Some(root) = &options.root {
            match std::fs::metadata(root) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Fatal::invalid(format!(
                        "--root {}: not a directory; nothing was done",
                        root.display()
                    )))
                }
                Err(e) => {
                    return Err(Fatal::invalid(format!(
                        "--root {}: {e} (mount the target root there first); nothing was done",
                        root.display()
                    )))
                }
            }
        }
        let config = Config::load(options.config.as_deref(), options.state_dir.as_deref())
            .map_err(Fatal::invalid)?;
        Ok(Host {
            options,
            config,
            unwritten: RefCell::default(),
            upkeep: OnceCell::new(),
        })
    }

    /// Reads the config again (SIGHUP); on error the old one stays.
    pub fn reload_config(&mut self) -> Result<(), Fatal> {
        self.config = Config::load(
            self.options.config.as_deref(),
            self.options.state_dir.as_deref(),
        )
        .map_err(Fatal::invalid)?;
        self.upkeep = OnceCell::new();
        Ok(())
    }

    /// A runner for one command's or run's commands: traced with `--trace-commands`, each told
    /// to the progress sink as it starts.
    pub fn runner<'p>(&self) -> Runner<'p> {
        Runner::new(self.options.trace_commands).with_progress(self.options.progress.clone())
    }

    fn root(&self) -> &Path {
        self.options.root.as_deref().unwrap_or(Path::new("/"))
    }

    pub fn env<'a>(
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
            offline: self.options.root.is_some(),
            diffs: !self.options.service,
            config: &self.config,
            runner,
            store,
            interrupted,
            upkeep: None,
            clock: &self.options.clock,
        }
    }

    /// Where the reboot and restart look is made, on the running system only: as the store
    /// kept it while the config's pacman command line and its pacman.conf are unchanged, else
    /// asked of pacman (`pacman -v -T`) and kept. pacman is asked by a runner of its own, as the
    /// watcher's database is: a question of the process, not of the run whose commands are
    /// counted.
    fn upkeep_where(&self) -> Option<&crate::model::upkeep::Where> {
        if self.options.root.is_some() {
            return None;
        }
        self.upkeep
            .get_or_init(|| {
                let command = &self.config.pacman.command;
                let conf = crate::tools::pacman::conf_file(command);
                let conf_modified = crate::model::upkeep::modified_ns(&conf);
                let store = Store::open(&self.config.state_dir, false).ok().flatten();
                let kept = store.as_ref().and_then(Store::pacman_paths);
                if let Some(kept) = kept.filter(|k| {
                    (&k.command, &k.conf, k.conf_modified) == (command, &conf, conf_modified)
                }) {
                    return Some(kept.paths);
                }
                let runner = Runner::new(false);
                let env = self.env_without_upkeep(None, &runner, &never);
                let paths = crate::kinds::pacman::paths(&env)
                    .map_err(|e| log::info!("no reboot and restart look: pacman's root: {e}"))
                    .ok()?;
                let asked = PacmanPaths {
                    command: command.clone(),
                    conf,
                    conf_modified,
                    paths,
                };
                if let Some(Err(e)) = store.map(|s| s.save_pacman_paths(&asked)) {
                    log::warn!("{e}; the next process asks pacman again");
                }
                Some(asked.paths)
            })
            .as_ref()
    }

    pub fn validate(&self, bytes: &[u8]) -> Result<Declaration, Problems> {
        // Counted by tests/it/service.rs: the service parses each declaration once.
        log::debug!("declaration parsed ({} bytes)", bytes.len());
        declaration::parse(
            bytes,
            &declaration::Context {
                limits: &self.config.limits,
                identity: &self.config.identity,
            },
        )
    }

    /// Reads a declaration file (plain, or an envelope whose signatures are checked against the
    /// trusted keys): only a regular file, no more of it read than the size limit (`os::input`).
    pub fn read_declaration(&self, file: &Path) -> Result<ReadDeclaration, Fatal> {
        let cannot =
            |e: std::io::Error| Fatal::invalid(format!("{}: cannot be read: {e}", file.display()));
        let max = self.config.limits.max_declaration_bytes;
        let raw = crate::os::input::read_bounded(file, max).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                Fatal::invalid(format!("{}: {e}; nothing was applied", file.display()))
            } else {
                cannot(e)
            }
        })?;
        let refused = |bytes: &[u8], problems| match is_store_record(bytes) {
            true => Fatal::invalid(format!(
                "{}: this is the store's record of the declaration in force (the declaration \
                 is kept beside it, by its digest), not a declaration: `mesh-host plan` with \
                 no FILE plans it, `mesh-host show` prints it as declared",
                file.display()
            )),
            false => invalid(file, problems),
        };
        // Validated as a plain declaration first, as nearly every file is one: then it is not
        // searched for an envelope's member too (a scan of the whole file). An envelope is never
        // a valid declaration (`envelope` is no field of one): only a file refused is opened as
        // one, and refused for what the declaration has wrong when it is not one.
        let (bytes, declaration, verification) = match self.validate(&raw) {
            Ok(declaration) => (raw, declaration, None),
            Err(problems) => match envelope::open(&raw).map_err(|p| invalid(file, p))? {
                Some(envelope) => {
                    let verification = envelope.verify(self.trusted_keys());
                    let bytes = envelope.declaration.into_bytes();
                    let declaration = self.validate(&bytes).map_err(|p| refused(&bytes, p))?;
                    (bytes, declaration, Some(verification))
                }
                None => return Err(refused(&raw, problems)),
            },
        };
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
    pub fn trusts(&self, key: &str) -> bool {
        PublicKey::parse(key).is_ok_and(|k| self.trusted_keys().contains(&k))
    }

    /// The store, created if missing (mode 0700).
    pub fn store(&self) -> Result<Store, Fatal> {
        Store::open(&self.config.state_dir, true)?
            .ok_or_else(|| Fatal::error("the store vanished".into()))
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
            None => crate::kinds::pacman::local_db_dir(&env),
        }
    }
}

/// A host for the engine's unit tests: a scratch store and target root, tools that do nothing
/// (`true`), time from `clock`. Returns it with the target root.
#[cfg(test)]
pub(crate) fn scratch_host(
    tmp: &crate::util::testutil::TempDir,
    clock: crate::os::clock::Clock,
) -> (Host, PathBuf) {
    let config = tmp.path().join("config.json");
    let stub = r#"{"command": ["true"]}"#;
    let text = format!(r#"{{"pacman": {stub}, "systemctl": {stub}, "podman": {stub}}}"#);
    std::fs::write(&config, text).expect("config");
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("etc")).expect("root");
    let host = Host::new(Options {
        config: Some(config),
        state_dir: Some(tmp.path().join("state")),
        root: Some(root.clone()),
        clock,
        ..Default::default()
    })
    .expect("host");
    (host, root)
}
