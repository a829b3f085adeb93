//! The store (state directory, mode 0700): the declaration in force and where it came from, the
//! ledger of what the host owns, recent runs, and backups of adopted files' originals. Every write
//! replaces a whole file atomically and durably, so a crash leaves the previous or the new state;
//! a file that cannot be read is reported, never silently replaced. Only no-op runs (`quiet.rs`)
//! and caches (`upkeep.rs`) are written without fsync, and read as absent when a crash cut them.

mod backups;
mod failures;
mod files_index;
mod generations;
mod in_force;
mod ledger;
mod lock;
mod outbox;
mod owed;
mod quiet;
mod secrets;
mod stats;
mod upkeep;

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::model::pacnew::QuietDirs;
use crate::model::run::RunRecord;
use crate::os::fsutil::{self, Dir};

pub use backups::OriginalAttrs;
pub use failures::Notice;
pub use files_index::{Cached, FilesIndex};
pub use generations::{
    confirm_deadline, words_revision, Confirmer, Generations, Revert, Reverted, State, GENERATIONS,
};
pub use in_force::{InForce, InForceHead, Source, IN_FORCE};
pub use ledger::{Digest, Entry, Ledger, Origin, Owned};
pub use lock::{Lock, LockError};
pub use outbox::QueuedReport;
pub use owed::Owed;
pub use stats::{Foreign, LastRun, RunStats};
pub use upkeep::PacmanPaths;

const SERVICE: &str = "service.json";
pub const LEDGER: &str = "ledger.json";
const RUNS: &str = "runs.json";
const PACNEW_QUIET: &str = "pacnew-quiet.json";
/// What `Dir::write_atomic` appends to the name of the file it writes before renaming it.
const TEMP_SUFFIX: &str = fsutil::TEMP_SUFFIX;
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

/// What the running service last said about itself, for `mesh-host status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServiceState {
    pub pid: u32,
    /// Unix seconds.
    pub started: u64,
    pub link: LinkStatus,
    /// Unix seconds: connected since, or the next attempt.
    pub link_at: Option<u64>,
    /// Unix seconds: since when the link has not been connected (the service's start when it
    /// never was); None while connected or with no control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_down_since: Option<u64>,
    pub last_error: Option<String>,
    /// Unix seconds of the next drift-timer run.
    pub next_timer: u64,
    pub state: ServicePhase,
    /// The inotify watcher, when the service has one to speak of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchState>,
}

/// The link to the control plane, as the service last published it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LinkStatus {
    /// No control plane is configured.
    None,
    Connecting,
    Connected,
    /// Lost or refused; the next attempt is at `link_at`.
    Retrying,
}

impl fmt::Display for LinkStatus {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            LinkStatus::None => "none",
            LinkStatus::Connecting => "connecting",
            LinkStatus::Connected => "connected",
            LinkStatus::Retrying => "retrying",
        })
    }
}

/// Whether the service runs, as it last said: `stopped` once it exited cleanly (a service that
/// died still reads `running`; `status` asks whether its pid is alive).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServicePhase {
    Running,
    Stopped,
}

/// How much of what the host owns the watcher sees.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum WatchMode {
    #[default]
    On,
    /// Some of it is seen only by the timer.
    Partial,
    /// None of it is: drift is found by the timer alone.
    Off,
}

impl fmt::Display for WatchMode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            WatchMode::On => "on",
            WatchMode::Partial => "partial",
            WatchMode::Off => "off",
        })
    }
}

/// What the service's watcher is doing, for `mesh-host status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct WatchState {
    pub state: WatchMode,
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
            // Each directory made is fsynced into its parent: a crash must not lose the store
            // its files were durably written into.
            if let Some(parent) = path.parent() {
                fsutil::create_dir_all(parent, 0o755)
                    .map_err(|e| error(format!("cannot create its parent directory: {e}")))?;
            }
            fsutil::create_dir_all(path, 0o700)
                .map_err(|e| error(format!("cannot be created: {e}")))?;
        }
        let dir = match Dir::open(path) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(error(format!("cannot be opened: {e}"))),
        };
        // It holds the node's history and originals of adopted files: no one else reads it.
        match dir.enforce_mode(0o700) {
            Ok(None) => {}
            Ok(Some(had)) => log::warn!(
                "store {}: had mode {had:04o}; set to 0700 (only root may read it)",
                path.display()
            ),
            Err(e) => log::warn!(
                "store {}: its mode could not be set to 0700: {e}",
                path.display()
            ),
        }
        // Its owner too: a store another user owns is one that user can rewrite (a ledger that
        // claims files, originals put back as /etc files).
        let (uid, gid) = crate::os::host::effective_ids();
        match dir.enforce_owner(uid, gid) {
            Ok(changed) if changed.is_empty() => {}
            Ok(changed) => {
                let (path0, had_uid, had_gid) = &changed[0];
                log::warn!(
                    "store {}: {} of its files and directories had another owner ({} had \
                     {had_uid}:{had_gid}); given back to {uid}:{gid}, who runs mesh-host",
                    path.display(),
                    changed.len(),
                    path.join(path0).display(),
                )
            }
            Err(e) => log::warn!(
                "store {}: its owner could not be set to {uid}:{gid}: {e}",
                path.display()
            ),
        }
        if create {
            dir.mkdir_durable(OsStr::new(backups::BACKUPS), 0o700)
                .map_err(|e| error(format!("cannot create {}/: {e}", backups::BACKUPS)))?;
        }
        let store = Store {
            path: path.to_path_buf(),
            dir,
        };
        store.upgrade_in_force();
        Ok(Some(store))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store as a `Fence` no walk to a declared file may enter, known by device and inode
    /// whatever path reaches it: a declaration never writes into the host's own store.
    pub fn fence(&self) -> Option<fsutil::Fence> {
        fsutil::Fence::around(&self.dir, &self.path).ok()
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

    /// `read_json`, parsed as it is read through a 64 KiB buffer: for a large file (the ledger of
    /// thousands of resources, the declaration in force) whose bytes would otherwise be held
    /// beside what is parsed from them.
    fn read_json_streamed<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StoreError> {
        match self.dir.open_reader(OsStr::new(name), MAX_STORE_FILE) {
            Ok(None) => Ok(None),
            Ok(Some(file)) => {
                let reader = io::BufReader::with_capacity(64 << 10, file);
                serde_json::from_reader(reader).map(Some).map_err(|e| {
                    self.error(
                        name,
                        format!("cannot be read ({e}); it was left as it is for you to inspect"),
                    )
                })
            }
            Err(e) => Err(self.error(name, format!("cannot be read: {e}"))),
        }
    }

    /// Streams `value` as JSON into the file's replacement (see `Dir::write_atomic_streamed`).
    fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), StoreError> {
        self.dir
            .write_atomic_streamed(OsStr::new(name), 0o600, |out| {
                serde_json::to_writer_pretty(out, value).map_err(io::Error::from)
            })
            .map_err(|e| self.error(name, format!("cannot be written: {e}")))
    }

    pub fn lock(&self, wait: bool, holder: &str) -> Result<Lock, LockError> {
        Lock::acquire(&self.path.join("lock"), wait, holder)
    }

    /// Waits for the lock, giving `pulse` a turn between tries (see `Lock::acquire_pulsing`).
    pub fn lock_pulsing(&self, holder: &str, pulse: &dyn Fn() -> bool) -> Result<Lock, LockError> {
        Lock::acquire_pulsing(&self.path.join("lock"), holder, pulse)
    }

    pub fn service_state(&self) -> Result<Option<ServiceState>, StoreError> {
        self.read_json(SERVICE)
    }

    pub fn set_service_state(&self, state: &ServiceState) -> Result<(), StoreError> {
        self.write_json(SERVICE, state)
    }

    /// Read a line at a time as `save_ledger` writes it (`Ledger::read_lines`); a ledger laid out
    /// otherwise (edited by hand, written by an earlier version, or damaged) is parsed as JSON,
    /// which says what is wrong with it.
    pub fn ledger(&self) -> Result<Ledger, StoreError> {
        let by_lines = match self.dir.open_reader(OsStr::new(LEDGER), MAX_STORE_FILE) {
            Ok(Some(file)) => Ledger::read_lines(io::BufReader::with_capacity(64 << 10, file)),
            Ok(None) | Err(_) => None,
        };
        let ledger: Ledger = match by_lines {
            Some(ledger) => ledger,
            None => self.read_json_streamed(LEDGER)?.unwrap_or_default(),
        };
        ledger.check().map_err(|e| self.error(LEDGER, e))?;
        Ok(ledger)
    }

    /// Written a resource a line (`Ledger::write`).
    pub fn save_ledger(&self, ledger: &Ledger) -> Result<(), StoreError> {
        self.dir
            .write_atomic_streamed(OsStr::new(LEDGER), 0o600, |out| ledger.write(out))
            .map_err(|e| self.error(LEDGER, format!("cannot be written: {e}")))
    }

    /// The directories the last `.pacnew` search found nothing in (`pacnew::QuietDirs`): a
    /// cache, so one that cannot be read is as none (every directory is listed).
    pub fn pacnew_quiet_dirs(&self) -> QuietDirs {
        self.read_json(PACNEW_QUIET)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Written by a run, under the store's lock.
    pub fn save_pacnew_quiet_dirs(&self, dirs: &QuietDirs) -> Result<(), StoreError> {
        self.write_json(PACNEW_QUIET, dirs)
    }

    /// Removes the temp files a crash left beside the store's files (the file each was to
    /// replace is whole: atomic writes), and recovers or removes the outbox's. Call it holding
    /// the store's lock (every run does), so that no writer is mid-write.
    pub fn clean_after_crash(&self) -> Result<(), StoreError> {
        // Only the files written under the store's lock: others (service.json, the outbox's id
        // floor) have writers that do not take it, and their own next write replaces the temp.
        for name in [
            IN_FORCE,
            LEDGER,
            RUNS,
            PACNEW_QUIET,
            quiet::QUIET,
            upkeep::LOOKED,
            owed::OWED,
            GENERATIONS,
        ] {
            let temp = format!(".{name}{TEMP_SUFFIX}");
            let removed = self
                .dir
                .remove(OsStr::new(&temp))
                .map_err(|e| self.error(&temp, format!("cannot be removed: {e}")))?;
            if removed {
                log::warn!(
                    "store {}: removed {temp}, left by a crash",
                    self.path.display()
                );
            }
        }
        self.remove_files_index_temps()?;
        self.remove_generation_temps()?;
        self.outbox_recover()
    }

    /// Moves an unreadable `runs.json` aside (to `runs.json.unreadable-UNIXTIME`), so the next
    /// run is recorded in a fresh history; says where it went. Any other store file that cannot
    /// be read stops the run instead: only the history is safe to start again. `now`: Unix
    /// seconds.
    pub fn set_aside_unreadable_runs(&self, now: u64) -> Result<Option<String>, StoreError> {
        let why = match self.durable_runs() {
            Ok(_) => return Ok(None),
            Err(e) => e.message,
        };
        let aside = format!("{RUNS}.unreadable-{now}");
        std::fs::rename(self.path.join(RUNS), self.path.join(&aside))
            .and_then(|()| self.dir.sync())
            .map_err(|e| self.error(RUNS, format!("{why}; and it cannot be set aside: {e}")))?;
        Ok(Some(format!(
            "store {}: {RUNS} was unreadable ({why}); it was set aside as {aside} and the run \
             history starts again",
            self.path.display()
        )))
    }

    /// Appends a run (abridged), keeping the most recent `crate::model::run::KEEP`; an
    /// unreadable history is set aside at `now` first.
    pub fn record_run(&self, run: &RunRecord, now: u64) -> Result<(), StoreError> {
        if let Some(note) = self.set_aside_unreadable_runs(now)? {
            log::warn!("{note}");
        }
        let mut runs = self.runs()?;
        runs.push(run.abridged());
        let excess = runs.len().saturating_sub(crate::model::run::KEEP);
        runs.drain(..excess);
        self.write_json(RUNS, &runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    #[test]
    fn missing_store_reads_as_empty_and_is_created_0700() {
        let tmp = TempDir::new("store-open");
        let path = tmp.path().join("var/lib/state");
        assert!(Store::open(&path, false).unwrap().is_none());
        let store = Store::open(&path, true).unwrap().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        // Explicit modes, never the umask's: the store and its directories 0700, parents 0755.
        for (dir, expected) in [
            ("var", 0o755),
            ("var/lib", 0o755),
            ("var/lib/state", 0o700),
            ("var/lib/state/backups", 0o700),
        ] {
            assert_eq!(mode(&tmp.path().join(dir)), expected, "{dir}");
        }
        store.outbox_len().unwrap();
        assert_eq!(mode(&path.join("outbox")), 0o700);
        assert!(store.in_force().unwrap().is_none());
        assert!(store.ledger().unwrap().is_empty());
        assert!(store.runs().unwrap().is_empty());
    }

    #[test]
    fn an_open_store_is_made_0700_again() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TempDir::new("store-mode");
        let path = tmp.path().join("state");
        Store::open(&path, true).unwrap();
        for loose in [0o755, 0o777, 0o1700] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
            Store::open(&path, false).unwrap().unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o700, "from {loose:o}");
        }
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
    fn an_unreadable_run_history_is_set_aside_and_the_run_recorded() {
        let tmp = TempDir::new("store-runs");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        std::fs::write(tmp.path().join(RUNS), "[{ torn").unwrap();
        let note = store.set_aside_unreadable_runs(7).unwrap().unwrap();
        assert!(note.contains("runs.json was unreadable"), "{note}");
        let aside: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|n| n.starts_with("runs.json.unreadable-"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert!(note.contains(&aside[0]), "named: {note}");
        assert_eq!(
            std::fs::read(tmp.path().join(&aside[0])).unwrap(),
            b"[{ torn"
        );
        assert!(store.set_aside_unreadable_runs(8).unwrap().is_none());
        // Corrupted again after the run started: record_run sets it aside itself.
        std::fs::write(tmp.path().join(RUNS), "nope").unwrap();
        let run = RunRecord::empty(crate::model::run::Trigger::Apply);
        store.record_run(&run, 7).unwrap();
        assert_eq!(store.runs().unwrap().len(), 1);
    }

    /// The ledger is parsed as it is read: what was saved reads back, and a file that is not
    /// one ledger (trailing bytes, a symlink, larger than the limit) is refused, never half read.
    #[test]
    fn a_streamed_ledger_reads_back_and_a_bad_one_is_refused() {
        use crate::model::spec::files::Files;
        let tmp = TempDir::new("store-streamed");
        let store = Store::open(&tmp.path().join("s"), true).unwrap().unwrap();
        let mut ledger = Ledger::default();
        ledger.insert::<Files>("/etc/a", Entry::created());
        ledger.set_applied::<Files>("/etc/a", Digest::of(b"a"));
        store.save_ledger(&ledger).unwrap();
        let back = store.ledger().unwrap();
        assert_eq!(back.get::<Files>("/etc/a"), ledger.get::<Files>("/etc/a"));
        let file = store.path().join(LEDGER);
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, format!("{text} {{}}")).unwrap();
        let e = store.ledger().unwrap_err().to_string();
        assert!(
            e.contains("ledger.json: cannot be read (trailing characters"),
            "{e}"
        );
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &file).unwrap();
        let e = store.ledger().unwrap_err().to_string();
        assert!(e.contains("ledger.json: cannot be read:"), "{e}");
        std::fs::remove_file(&file).unwrap();
        let big = std::fs::File::create(&file).unwrap();
        big.set_len(MAX_STORE_FILE + 1).unwrap();
        let e = store.ledger().unwrap_err().to_string();
        assert!(e.contains("more than the limit"), "{e}");
    }

    /// Saved compact, one owned resource a line; a ledger a person pretty-printed by hand reads
    /// the same.
    #[test]
    fn the_ledger_is_saved_a_resource_a_line_and_read_in_any_layout() {
        use crate::model::spec::files::Files;
        use crate::model::spec::packages::Packages;
        let tmp = TempDir::new("store-lines");
        let store = Store::open(&tmp.path().join("s"), true).unwrap().unwrap();
        let mut ledger = Ledger::default();
        for key in ["/etc/a", "/etc/b"] {
            ledger.insert::<Files>(key, Entry::created());
            ledger.set_applied::<Files>(key, Digest::of(key.as_bytes()));
        }
        ledger.insert::<Packages>("vim", Entry::created());
        store.save_ledger(&ledger).unwrap();
        let file = store.path().join(LEDGER);
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let entry = |key: &str| {
            format!(
                "\"{key}\":{{\"origin\":\"created\",\"applied\":\"{}\"}}",
                Digest::of(key.as_bytes())
            )
        };
        assert!(
            lines.contains(&format!("{},", entry("/etc/a")).as_str()),
            "{text}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with(&entry("/etc/b"))),
            "{text}"
        );
        assert!(
            lines.contains(&"\"vim\":{\"origin\":\"created\",\"applied\":null}},"),
            "{text}"
        );
        let reread = |store: &Store| {
            let back = store.ledger().unwrap();
            for key in ["/etc/a", "/etc/b"] {
                assert_eq!(back.get::<Files>(key), ledger.get::<Files>(key));
            }
            assert_eq!(back.get::<Packages>("vim"), ledger.get::<Packages>("vim"));
        };
        reread(&store);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        std::fs::write(&file, serde_json::to_string_pretty(&value).unwrap()).unwrap();
        reread(&store);
    }

    #[test]
    fn temp_files_a_crash_left_are_removed() {
        let tmp = TempDir::new("store-temps");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        store
            .set_in_force(&InForce {
                source: Source::ControlPlane,
                revision: Some(1),
                digest: crate::util::codec::sha256_hex(b"{}"),
                since: 0,
                text: b"{}".to_vec(),
                control_plane_revision: Some(1),
                signed_by: Vec::new(),
                expires: None,
            })
            .unwrap();
        let temp = tmp.path().join(".declaration.json.mesh-host.tmp");
        std::fs::write(&temp, "half a declar").unwrap();
        // The files index's temps are each writer's own: a gone writer's is removed, a live
        // one's (a check writes it without the lock) is left to it.
        // Above the largest pid the kernel gives (PID_MAX_LIMIT, 2^22): no such process.
        let gone = (1 << 22) + 1;
        let index_temp = |pid: u32| {
            tmp.path()
                .join(format!(".files-index.{pid}-0.mesh-host.tmp"))
        };
        let (crashed, live) = (index_temp(gone), index_temp(std::process::id()));
        let live_other = index_temp(1);
        for temp in [&crashed, &live, &live_other] {
            std::fs::write(temp, "half an index").unwrap();
        }
        store.clean_after_crash().unwrap();
        assert!(!temp.exists());
        assert!(!crashed.exists());
        assert!(live.exists() && live_other.exists());
        assert_eq!(store.in_force().unwrap().unwrap().revision, Some(1));
    }
}
