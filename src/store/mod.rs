//! The store (state directory, mode 0700): the declaration in force and where it came from, the
//! ledger of what the host owns, recent runs, and backups of adopted files' originals. Every write
//! replaces a whole file atomically and durably, so a crash leaves the previous or the new state;
//! a file that cannot be read is reported, never silently replaced.

mod ledger;
mod lock;
mod outbox;
mod runs;

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::fsutil::Dir;

pub use ledger::{Entry, Ledger, Origin};
pub use lock::{Lock, LockError};
pub use runs::{ResourceResult, RunRecord};

pub const IN_FORCE: &str = "declaration.json";
const SERVICE: &str = "service.json";
pub const LEDGER: &str = "ledger.json";
const RUNS: &str = "runs.json";
const BACKUPS: &str = "backups";
/// Largest store file read back (the declaration in force is the largest: 64 MiB by default).
const MAX_STORE_FILE: u64 = 1 << 30;

#[derive(Debug)]
pub struct StoreError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store {}: {}", self.path.display(), self.message)
    }
}

/// Where the declaration in force came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Source {
    /// Given by a person with `mesh-host apply FILE`.
    Local { path: String },
    /// Pushed by the control plane.
    ControlPlane,
}

/// The declaration the host holds the machine to, kept verbatim so its digest stays meaningful.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InForce {
    pub source: Source,
    pub revision: Option<u64>,
    pub digest: String,
    /// Unix seconds when it became the declaration in force.
    pub since: u64,
    pub text: String,
    /// The newest revision accepted from the control plane, kept across local overrides: a
    /// `declare` must be newer than this to be applied.
    #[serde(default)]
    pub control_plane_revision: Option<u64>,
}

/// What the running service last said about itself, for `mesh-host status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceState {
    pub pid: u32,
    /// Unix seconds.
    pub started: u64,
    /// `none` (no control plane configured), `connecting`, `connected` or `retrying`.
    pub link: String,
    /// Unix seconds: connected since, or the next attempt.
    pub link_at: Option<u64>,
    pub last_error: Option<String>,
    /// Unix seconds of the next drift-timer run.
    pub next_timer: u64,
    /// `running`, or `stopped` once it exited cleanly.
    pub state: String,
    /// The inotify watcher, when the service has one to speak of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchState>,
}

/// What the service's watcher is doing, for `mesh-host status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct WatchState {
    /// `on`; `partial` (some of what is owned is seen only by the timer); `off` (all of it is).
    pub state: String,
    /// Why it is partial or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub directories: usize,
    /// Times the kernel's event queue overflowed (each answered by a full run).
    pub overflows: u64,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_overflow: Option<u64>,
    pub contested: Vec<ContestedState>,
}

/// A resource another process keeps changing back: left to the drift timer until it settles.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContestedState {
    pub kind: String,
    pub key: String,
    /// Unix seconds it became contested.
    pub since: u64,
    /// Repairs by watch runs within a minute that made it contested.
    pub repairs: usize,
    /// Unix seconds of the last change seen since.
    pub last_change: u64,
}

pub struct Store {
    path: PathBuf,
    dir: Dir,
}

impl Store {
    /// Opens the store at `path`, creating it (mode 0700) when `create` is set. Without `create`,
    /// a store that does not exist yet gives `Ok(None)`: nothing is owned and nothing was run.
    pub fn open(path: &Path, create: bool) -> Result<Option<Store>, StoreError> {
        let error = |message: String| StoreError {
            path: path.to_path_buf(),
            message,
        };
        if create {
            match std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/"))) {
                Ok(()) => {}
                Err(e) => return Err(error(format!("cannot create its parent directory: {e}"))),
            }
            match std::fs::DirBuilder::new().mode_0700().create(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(error(format!("cannot be created: {e}"))),
            }
        }
        let dir = match Dir::open(path) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(error(format!("cannot be opened: {e}"))),
        };
        if create {
            dir.mkdir(OsStr::new(BACKUPS), 0o700)
                .map_err(|e| error(format!("cannot create {BACKUPS}/: {e}")))?;
        }
        Ok(Some(Store {
            path: path.to_path_buf(),
            dir,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, name: &str, message: impl fmt::Display) -> StoreError {
        StoreError {
            path: self.path.join(name),
            message: message.to_string(),
        }
    }

    /// Reads and parses `name`; `Ok(None)` if it does not exist.
    fn read_json<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StoreError> {
        match self.dir.read(OsStr::new(name), MAX_STORE_FILE) {
            Ok(None) => Ok(None),
            Ok(Some((_, bytes))) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                self.error(
                    name,
                    format!("cannot be read ({e}); it was left as it is for you to inspect"),
                )
            }),
            Err(e) => Err(self.error(name, format!("cannot be read: {e}"))),
        }
    }

    fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| self.error(name, e))?;
        self.dir
            .write_atomic(OsStr::new(name), &bytes, 0o600, None)
            .map_err(|e| self.error(name, format!("cannot be written: {e}")))
    }

    pub fn lock(&self, wait: bool, holder: &str) -> Result<Lock, LockError> {
        Lock::acquire(&self.path.join("lock"), wait, holder)
    }

    pub fn in_force(&self) -> Result<Option<InForce>, StoreError> {
        self.read_json(IN_FORCE)
    }

    pub fn set_in_force(&self, in_force: &InForce) -> Result<(), StoreError> {
        self.write_json(IN_FORCE, in_force)
    }

    pub fn service_state(&self) -> Result<Option<ServiceState>, StoreError> {
        self.read_json(SERVICE)
    }

    pub fn set_service_state(&self, state: &ServiceState) -> Result<(), StoreError> {
        self.write_json(SERVICE, state)
    }

    pub fn ledger(&self) -> Result<Ledger, StoreError> {
        let ledger: Ledger = self.read_json(LEDGER)?.unwrap_or_default();
        ledger.check().map_err(|e| self.error(LEDGER, e))?;
        Ok(ledger)
    }

    pub fn save_ledger(&self, ledger: &Ledger) -> Result<(), StoreError> {
        self.write_json(LEDGER, ledger)
    }

    pub fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        Ok(self.read_json(RUNS)?.unwrap_or_default())
    }

    /// Appends a run (abridged), keeping the most recent `runs::KEEP`.
    pub fn record_run(&self, run: &RunRecord) -> Result<(), StoreError> {
        let mut runs = self.runs()?;
        runs.push(run.abridged());
        let excess = runs.len().saturating_sub(runs::KEEP);
        runs.drain(..excess);
        self.write_json(RUNS, &runs)
    }

    fn backups(&self) -> Result<Dir, StoreError> {
        self.dir
            .child(OsStr::new(BACKUPS))
            .map_err(|e| self.error(BACKUPS, format!("cannot be opened: {e}")))
    }

    /// Keeps an adopted resource's original bytes under `name` (see `kinds::backup_key`).
    pub fn save_backup(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.backups()?
            .write_atomic(OsStr::new(name), bytes, 0o600, None)
            .map_err(|e| {
                self.error(
                    &format!("{BACKUPS}/{name}"),
                    format!("cannot be written: {e}"),
                )
            })
    }

    pub fn read_backup(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let path = format!("{BACKUPS}/{name}");
        match self.backups()?.read(OsStr::new(name), MAX_STORE_FILE) {
            Ok(Some((_, bytes))) => Ok(bytes),
            Ok(None) => Err(self.error(&path, "is missing")),
            Err(e) => Err(self.error(&path, format!("cannot be read: {e}"))),
        }
    }

    /// The names of every backup kept.
    pub fn backup_names(&self) -> Result<Vec<String>, StoreError> {
        let entries = std::fs::read_dir(self.path.join(BACKUPS))
            .map_err(|e| self.error(BACKUPS, format!("cannot be listed: {e}")))?;
        Ok(entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect())
    }

    pub fn remove_backup(&self, name: &str) -> Result<(), StoreError> {
        self.backups()?
            .remove(OsStr::new(name))
            .map(drop)
            .map_err(|e| {
                self.error(
                    &format!("{BACKUPS}/{name}"),
                    format!("cannot be removed: {e}"),
                )
            })
    }
}

trait DirBuilderExt {
    fn mode_0700(&mut self) -> &mut Self;
}

impl DirBuilderExt for std::fs::DirBuilder {
    fn mode_0700(&mut self) -> &mut Self {
        std::os::unix::fs::DirBuilderExt::mode(self, 0o700)
    }
}

/// Unix seconds now; the store's timestamps.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn missing_store_reads_as_empty_and_is_created_0700() {
        let tmp = TempDir::new("store-open");
        let path = tmp.path().join("state");
        assert!(Store::open(&path, false).unwrap().is_none());
        let store = Store::open(&path, true).unwrap().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(store.in_force().unwrap().is_none());
        assert!(store.ledger().unwrap().is_empty());
        assert!(store.runs().unwrap().is_empty());
    }

    #[test]
    fn corrupt_store_file_is_reported_not_replaced() {
        let tmp = TempDir::new("store-corrupt");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        std::fs::write(tmp.path().join(LEDGER), "{ torn").unwrap();
        let err = store.ledger().unwrap_err().to_string();
        assert!(err.contains("ledger.json: cannot be read"), "{err}");
        assert_eq!(std::fs::read(tmp.path().join(LEDGER)).unwrap(), b"{ torn");
    }

    #[test]
    fn backups_round_trip() {
        let tmp = TempDir::new("store-backup");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        let name = "0123abcd";
        store.save_backup(name, b"original").unwrap();
        assert_eq!(store.read_backup(name).unwrap(), b"original");
        store.remove_backup(name).unwrap();
        assert!(store
            .read_backup(name)
            .unwrap_err()
            .to_string()
            .contains("is missing"));
    }
}
