//! pacman's database lock: a transaction waits (bounded) while someone else holds it, and a
//! stale one is reported by name (removed only when allowed and older than the boot); the
//! keyrings' own transaction before a full upgrade.

use std::path::PathBuf;
use std::time::Duration;

use crate::kinds::pacman::{pacman_failed, pacman_paths, target};
use crate::kinds::{Env, KindError};
use crate::os::exec::{CommandError, Failure};
use crate::tools::pacman::{self, Pacman};
use crate::util::progress::Event;

/// Why a pacman transaction failed.
pub(super) enum TransactionError {
    /// pacman refused the packages (one not found, a dependency broken): each alone may succeed.
    Packages(KindError),
    /// pacman could not run at all (lock held past the wait, timeout, not startable).
    Pacman(KindError),
}

/// Runs a transaction, waiting (bounded) while someone else holds pacman's database lock. A lock
/// no process holds is stale: reported at once, by name, rather than waited on; the lock file is
/// never removed unless `pacman_remove_stale_lock` allows it and it also predates this boot
/// (only then is it sure that no transaction is half done under it).
pub(super) fn run_waiting_for_lock(
    env: &Env,
    step: &'static str,
    args: &[String],
    names: &[&str],
) -> Result<(), TransactionError> {
    let mut waiting = Waiting::new(env);
    let mut again = false;
    loop {
        let ran = match again {
            false => env.runner.transaction(&env.config.pacman, args, names),
            true => env
                .runner
                .transaction_again(&env.config.pacman, args, names),
        };
        let e = match ran {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        again = true;
        let Some(lock) = locked_by(&e) else {
            return Err(match pacman_failed(step, e) {
                e @ KindError::Command {
                    error:
                        CommandError {
                            failure: Failure::Exit(Some(_), _),
                            ..
                        },
                    ..
                } => TransactionError::Packages(e),
                e => TransactionError::Pacman(e),
            });
        };
        if waiting.on(&lock)? == Retry::Later {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// When a transaction pacman refused for its lock is tried again.
#[derive(PartialEq)]
enum Retry {
    /// At once: the stale lock was removed.
    Now,
    /// After a pause: the lock is held, or was just gone.
    Later,
}

/// A transaction waiting for pacman's database lock.
struct Waiting<'e, 'a> {
    env: &'e Env<'a>,
    /// When waiting for a held lock ends (`Clock::mono_ms`).
    deadline: u64,
    /// pacman closes its lock a moment before it unlinks it: one sighting of a lock nobody
    /// holds is checked again before it is called stale.
    unheld_before: bool,
    /// Said once per holder, not at every retry (twice a second for minutes).
    said_busy: Option<String>,
}

impl<'e, 'a> Waiting<'e, 'a> {
    fn new(env: &'e Env<'a>) -> Self {
        let wait = env.config.pacman_lock_wait.as_millis() as u64;
        Waiting {
            env,
            deadline: env.clock.mono_ms().saturating_add(wait),
            unheld_before: false,
            said_busy: None,
        }
    }

    /// What to do about `lock`, which pacman could not take: retry, or fail.
    fn on(&mut self, lock: &str) -> Result<Retry, TransactionError> {
        let env = self.env;
        let state = match lock_state(env, lock) {
            Ok(state) => state,
            Err(why) => LockState::Held(format!("a process it could not check ({why})")),
        };
        match state {
            LockState::Gone => self.unheld_before = false,
            LockState::Held(by) if env.clock.mono_ms() < self.deadline => {
                self.unheld_before = false;
                if self.said_busy.as_ref() != Some(&by) {
                    log::info!("pacman is busy: its database lock {lock} is held by {by}; waiting");
                    let what = format!("pacman's database lock {lock}, held by {by}");
                    env.runner.tell(|| Event::Waiting(&what));
                    self.said_busy = Some(by);
                }
            }
            LockState::Held(by) => {
                return Err(TransactionError::Pacman(KindError::from(format!(
                    "pacman is busy: its database lock {lock} was held by {by} for more than {} \
                     s; it was left alone",
                    env.config.pacman_lock_wait.as_secs()
                ))))
            }
            LockState::Unheld { predates_boot }
                if predates_boot && env.config.pacman_remove_stale_lock =>
            {
                remove_lock(env, lock).map_err(|e| TransactionError::Pacman(e.into()))?;
                env.runner.note(format!(
                    "removed pacman's stale database lock {lock}: no process had it open and it \
                     predated this boot (pacman_remove_stale_lock)"
                ));
                return Ok(Retry::Now);
            }
            LockState::Unheld { predates_boot } if predates_boot || self.unheld_before => {
                let why = if predates_boot {
                    "no process has it open and it predates this boot"
                } else {
                    "no process has it open"
                };
                return Err(TransactionError::Pacman(KindError::from(format!(
                    "pacman's database lock {lock} is stale: {why}; it was left alone (remove it \
                     if no package manager is running; pacman_remove_stale_lock lets mesh-host \
                     remove a stale lock older than the boot)"
                ))));
            }
            LockState::Unheld { .. } => self.unheld_before = true,
        }
        Ok(Retry::Later)
    }
}

/// What is behind a `db.lck` pacman reported.
enum LockState {
    /// Gone since pacman reported it: try again.
    Gone,
    /// Held by these processes (or assumed held when they could not be checked).
    Held(String),
    Unheld {
        predates_boot: bool,
    },
}

/// The lock pacman named, as this process reaches it (under `--root`, pacman 6 names it inside
/// the root, pacman 7 with the root in front: `Printed`). Opened through the no-symlink walk.
fn lock_parent(env: &Env, lock: &str) -> Result<Option<crate::os::fsutil::Parent>, String> {
    let slash = std::path::Path::new("/");
    let lock = match env.offline {
        true => pacman_paths(env)?.printed.seen(std::path::Path::new(lock)),
        false => PathBuf::from(lock),
    };
    // Walked from the root, as anything in it is.
    let (root, inside) = match lock.strip_prefix(env.root) {
        Ok(inside) => (env.root, slash.join(inside)),
        Err(_) => (slash, lock),
    };
    let dir = crate::os::fsutil::Dir::open(root).map_err(|e| format!("{}: {e}", root.display()))?;
    crate::os::fsutil::walk_to_parent(&dir, &inside, false).map_err(|e| e.to_string())
}

fn lock_state(env: &Env, lock: &str) -> Result<LockState, String> {
    let at = |e: std::io::Error| format!("{lock}: {e}");
    let Some(parent) = lock_parent(env, lock)? else {
        return Ok(LockState::Gone);
    };
    let Some(identity) = parent.dir.identity(&parent.name).map_err(at)? else {
        return Ok(LockState::Gone);
    };
    let holders = crate::os::lockfile::holders(&identity);
    if !holders.is_empty() {
        let list: Vec<String> = holders
            .iter()
            .map(|h| format!("pid {} ({})", h.pid, h.name))
            .collect();
        return Ok(LockState::Held(list.join(", ")));
    }
    let predates_boot =
        crate::os::lockfile::boot_time().is_some_and(|boot| identity.modified < boot);
    Ok(LockState::Unheld { predates_boot })
}

fn remove_lock(env: &Env, lock: &str) -> Result<(), String> {
    let parent = lock_parent(env, lock)?.ok_or_else(|| format!("{lock}: its directory is gone"))?;
    parent
        .dir
        .remove(&parent.name)
        .map(drop)
        .map_err(|e| format!("pacman's stale database lock {lock} could not be removed: {e}"))
}

/// The lock file named in pacman's "unable to lock database" error, if that is the failure.
fn locked_by(error: &CommandError) -> Option<String> {
    match &error.failure {
        Failure::Exit(_, stderr) => pacman::locked_database(stderr).map(str::to_string),
        _ => None,
    }
}

/// The keyrings' own transaction before a full upgrade (`-Sy --needed` of the installed
/// `*-keyring` packages): Arch's advice for a keyring older than the packages' signatures. The
/// full upgrade follows in the same run, so the refresh is never left without its `-u`.
pub(super) fn keyrings_first(env: &Env) -> Result<(), TransactionError> {
    let pacman = target(env).map_err(|e| TransactionError::Pacman(e.into()))?;
    let output = env
        .runner
        .query(&env.config.pacman, &pacman.installed_names(), &[])
        .map_err(|e| TransactionError::Pacman(pacman_failed("list the keyrings", e)))?;
    // It exits 1 when nothing is installed at all.
    if !Pacman::answered(output.code) {
        return Err(TransactionError::Packages(KindError::from(format!(
            "`pacman -Qq` (listing the keyrings) exited with status {:?}: {}",
            output.code,
            output.stderr.trim()
        ))));
    }
    let stdout = output.stdout_text();
    let keyrings = pacman::keyrings(&pacman::parse_names(&stdout));
    if keyrings.is_empty() {
        return Ok(());
    }
    run_waiting_for_lock(
        env,
        "upgrade the keyrings first",
        &pacman.keyrings_first(),
        &keyrings,
    )
}
