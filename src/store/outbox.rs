//! The outbox: reports waiting for the control plane's acknowledgement, one file per report in
//! `outbox/`, so a run made while the link is down (or by a person's `apply`) reaches the control
//! plane after the reconnect, oldest first. Bounded by count and by bytes: past either limit the
//! oldest are dropped. A report's file *is* its id: `last-report-id` is only a floor (for when
//! every report has been acknowledged), so a crash can neither burn an id nor lose a report.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Lock, Reverted, Store, StoreError, MAX_STORE_FILE};
use crate::model::config::OutboxBounds;
use crate::model::pacnew::Pacnew;
use crate::model::run::{Failing, ReportOutcome, ResourceResult, Triggers};
use crate::model::upkeep::Needs;
use crate::os::fsutil::Dir;
use crate::util::counted::Counted;

const DIR: &str = "outbox";
const LAST_ID: &str = "last-report-id";
/// What `Dir::write_atomic` calls the file it writes before renaming it into place.
const TEMP_SUFFIX: &str = ".json.mesh-host.tmp";

/// A report as the outbox keeps it, one file each: the store's own record, which the link's
/// `Report` is made from when it is sent (and made into when it is queued: `engine/wire.rs`).
/// Its JSON is the report's as the control plane reads it (docs/protocol.md, "Report"), so the
/// files earlier versions queued read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedReport {
    /// Given by `outbox_push`; increasing per host.
    pub id: u64,
    pub revision: Option<u64>,
    pub digest: Option<String>,
    pub trigger: Triggers,
    pub outcome: ReportOutcome,
    pub started: u64,
    pub ended: u64,
    pub changes: Vec<ResourceResult>,
    pub failures: Vec<ResourceResult>,
    pub deferred: Vec<ResourceResult>,
    pub drift: Vec<ResourceResult>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<Failing>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pacnew: Vec<Pacnew>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<Box<Needs>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted: Option<Reverted>,
}

impl Store {
    fn outbox_dir(&self) -> Result<PathBuf, StoreError> {
        self.dir
            .mkdir_durable(OsStr::new(DIR), 0o700)
            .map_err(|e| self.error(DIR, format!("cannot be created: {e}")))?;
        Ok(self.path().join(DIR))
    }

    /// Serialises changes to the outbox between the service and a person's `apply`.
    fn outbox_lock(&self, dir: &Path) -> Result<Lock, StoreError> {
        Lock::acquire(&dir.join(".lock"), true, "outbox")
            .map_err(|e| self.error(DIR, format!("cannot be locked: {e}")))
    }

    /// Gives `report` the next id and keeps it until acknowledged; returns the id. The report's
    /// file is written (durably) before the id floor: a crash between the two leaves the report,
    /// whose file name keeps its id taken. `unix_ms`: Unix milliseconds, for a lost floor.
    pub fn outbox_push(
        &self,
        report: &mut QueuedReport,
        bounds: OutboxBounds,
        unix_ms: u64,
    ) -> Result<u64, StoreError> {
        let dir = self.outbox_dir()?;
        let _lock = self.outbox_lock(&dir)?;
        let fd = self.open_outbox(&dir)?;
        let entries = self.outbox_entries(&dir, &fd)?;
        let floor = self.id_floor(&dir, &entries, unix_ms)?;
        let newest = entries.last().map_or(0, |(id, _)| *id);
        report.id = floor.max(newest).checked_add(1).ok_or_else(|| {
            self.error(
                LAST_ID,
                "has reached the largest id; no report can be given one",
            )
        })?;
        let name = entry_name(report.id);
        // Streamed to its file, measured as it goes: a report of up to a MiB is not built whole
        // in memory beside it.
        let mut size = 0;
        fd.write_atomic_streamed(OsStr::new(&name), 0o600, |out| {
            let mut counted = Counted::new(out);
            serde_json::to_writer(&mut counted, report).map_err(std::io::Error::from)?;
            size = counted.bytes as u64;
            Ok(())
        })
        .map_err(|e| self.error(&format!("{DIR}/{name}"), format!("cannot be written: {e}")))?;
        self.write_json(LAST_ID, &report.id)?;
        let mut kept: Vec<(u64, u64)> = entries;
        kept.push((report.id, size));
        let mut total: u64 = kept.iter().map(|(_, size)| size).sum();
        let mut dropped = 0;
        // The newest report always stays.
        while kept.len() - dropped > 1
            && (kept.len() - dropped > bounds.reports || total > bounds.bytes)
        {
            let (id, size) = kept[dropped];
            self.remove_outbox_entry(&dir, id)?;
            total -= size;
            dropped += 1;
        }
        if dropped > 0 {
            self.sync_outbox(&fd)?;
            log::warn!(
                "outbox over its bounds ({} reports, {} bytes); dropped the {dropped} oldest",
                bounds.reports,
                bounds.bytes
            );
        }
        Ok(report.id)
    }

    /// Recovers or removes what a crash left half written in the outbox.
    pub fn outbox_recover(&self) -> Result<(), StoreError> {
        if !self.path().join(DIR).is_dir() {
            return Ok(());
        }
        let dir = self.outbox_dir()?;
        let _lock = self.outbox_lock(&dir)?;
        self.outbox_entries(&dir, &self.open_outbox(&dir)?)
            .map(drop)
    }

    /// Unacknowledged reports with ids after `after`, oldest first.
    pub fn outbox_pending(&self, after: u64) -> Result<Vec<QueuedReport>, StoreError> {
        let dir = self.outbox_dir()?;
        let fd = self.open_outbox(&dir)?;
        let entries = {
            let _lock = self.outbox_lock(&dir)?;
            self.outbox_entries(&dir, &fd)?
        };
        let mut out = Vec::new();
        for (id, _) in entries.into_iter().filter(|(id, _)| *id > after) {
            let name = entry_name(id);
            let at = format!("{DIR}/{name}");
            let bytes = match fd.read(OsStr::new(&name), MAX_STORE_FILE) {
                Ok(Some((_, bytes))) => bytes,
                Ok(None) => continue,
                Err(e) => return Err(self.error(&at, format!("cannot be read: {e}"))),
            };
            match serde_json::from_slice(&bytes) {
                Ok(report) => out.push(report),
                // A report is not worth stopping the host for: set it aside for a person.
                Err(e) => {
                    log::warn!(
                        "{}: unreadable report ({e}); moved aside",
                        self.path().join(&at).display()
                    );
                    let _ =
                        std::fs::rename(dir.join(&name), dir.join(format!("{name}.unreadable")))
                            .and_then(|()| fd.sync());
                }
            }
        }
        Ok(out)
    }

    /// The control plane has stored every report up to `id`. The id floor is raised first, so
    /// ids are never given twice however the outbox empties.
    pub fn outbox_ack(&self, id: u64) -> Result<(), StoreError> {
        let dir = self.outbox_dir()?;
        let _lock = self.outbox_lock(&dir)?;
        let fd = self.open_outbox(&dir)?;
        let acked: Vec<u64> = self
            .outbox_entries(&dir, &fd)?
            .into_iter()
            .map(|(i, _)| i)
            .filter(|i| *i <= id)
            .collect();
        let Some(newest) = acked.last() else {
            return Ok(());
        };
        // A damaged floor is replaced by the newest acknowledged id (`id_floor` covers the rest).
        let floor: u64 = self.read_json(LAST_ID).ok().flatten().unwrap_or(0);
        if *newest > floor {
            self.write_json(LAST_ID, newest)?;
        }
        for old in acked {
            self.remove_outbox_entry(&dir, old)?;
        }
        // One fsync for every removal: an acknowledged report must not come back after a crash
        // (the control plane would store it twice).
        self.sync_outbox(&fd)
    }

    /// The id the next report must exceed: `last-report-id`, or, when it is lost or damaged,
    /// one rebuilt so that no id is given twice (a control plane drops an id it already stored,
    /// and the outbox may have been emptied by acks): the newest report kept or set aside and,
    /// for a store that recorded runs (so ids were given before), the unix time in
    /// milliseconds (`unix_ms`), which ids given at fewer than a thousand a second never reach.
    /// Called under the outbox lock.
    fn id_floor(
        &self,
        dir: &Path,
        entries: &[(u64, u64)],
        unix_ms: u64,
    ) -> Result<u64, StoreError> {
        let why = match self.read_json::<u64>(LAST_ID) {
            Ok(Some(floor)) => return Ok(floor),
            Ok(None) if !self.path().join(super::RUNS).exists() => return Ok(0),
            Ok(None) => "is missing".to_string(),
            Err(_) => "cannot be read (damaged)".to_string(),
        };
        let set_aside = std::fs::read_dir(dir).into_iter().flatten().flatten();
        let set_aside = set_aside.filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".json.unreadable")?.parse::<u64>().ok()
        });
        let floor = (entries.iter().map(|(id, _)| *id))
            .chain(set_aside)
            .fold(unix_ms, u64::max);
        log::warn!(
            "{}: {why}; report ids go on after {floor} (the newest report kept, or the time in \
             milliseconds), so none is given twice",
            self.path().join(LAST_ID).display()
        );
        Ok(floor)
    }

    /// The id the last report queued was given (0 before any): right after `outbox_push`, that
    /// report's.
    pub fn outbox_last_id(&self) -> Result<u64, StoreError> {
        Ok(self.read_json(LAST_ID)?.unwrap_or(0))
    }

    /// How many reports wait for the control plane's acknowledgement.
    pub fn outbox_len(&self) -> Result<usize, StoreError> {
        let dir = self.outbox_dir()?;
        let fd = self.open_outbox(&dir)?;
        let _lock = self.outbox_lock(&dir)?;
        Ok(self.outbox_entries(&dir, &fd)?.len())
    }

    fn open_outbox(&self, dir: &Path) -> Result<Dir, StoreError> {
        Dir::open(dir).map_err(|e| self.error(DIR, format!("cannot be opened: {e}")))
    }

    /// The reports kept, as (id, size), oldest first; called under the outbox lock. A temp file
    /// a crash left is recovered when it holds a whole report whose file is missing (the crash
    /// came between its fsync and its rename), and removed otherwise.
    fn outbox_entries(&self, dir: &Path, fd: &Dir) -> Result<Vec<(u64, u64)>, StoreError> {
        let listing = std::fs::read_dir(dir)
            .map_err(|e| self.error(DIR, format!("cannot be listed: {e}")))?;
        let mut entries = Vec::new();
        let mut temps = Vec::new();
        for entry in listing.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(id) = name
                .strip_suffix(".json")
                .and_then(|n| n.parse::<u64>().ok())
            {
                let size = entry.metadata().map_or(0, |m| m.len());
                entries.push((id, size));
            } else if let Some(id) = name
                .strip_prefix('.')
                .and_then(|n| n.strip_suffix(TEMP_SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            {
                temps.push((id, name.to_string()));
            }
        }
        for (id, temp) in temps {
            let whole = fd
                .read(OsStr::new(&temp), MAX_STORE_FILE)
                .ok()
                .flatten()
                .filter(|(_, bytes)| {
                    serde_json::from_slice::<QueuedReport>(bytes).is_ok_and(|r| r.id == id)
                });
            let present = entries.iter().any(|(i, _)| *i == id);
            match whole {
                Some((_, bytes)) if !present => {
                    std::fs::rename(dir.join(&temp), dir.join(entry_name(id)))
                        .and_then(|()| fd.sync())
                        .map_err(|e| {
                            self.error(
                                &format!("{DIR}/{temp}"),
                                format!("cannot be recovered: {e}"),
                            )
                        })?;
                    log::warn!("outbox: report {id}, left half written by a crash, recovered");
                    entries.push((id, bytes.len() as u64));
                }
                _ => {
                    log::warn!("outbox: removed {temp}, left incomplete by a crash");
                    let _ = fd.remove(OsStr::new(&temp));
                }
            }
        }
        entries.sort_unstable();
        Ok(entries)
    }

    /// Makes the removals from the outbox durable.
    fn sync_outbox(&self, fd: &Dir) -> Result<(), StoreError> {
        fd.sync()
            .map_err(|e| self.error(DIR, format!("cannot be synced: {e}")))
    }

    fn remove_outbox_entry(&self, dir: &Path, id: u64) -> Result<(), StoreError> {
        match std::fs::remove_file(dir.join(entry_name(id))) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.error(
                &format!("{DIR}/{}", entry_name(id)),
                format!("cannot be removed: {e}"),
            )),
        }
    }
}

fn entry_name(id: u64) -> String {
    format!("{id:020}.json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    use crate::model::run::{RunOutcome, RunRecord, Trigger};

    /// A millisecond past every id the tests give.
    const UNIX_MS: u64 = 1_800_000_000_000;

    fn report() -> QueuedReport {
        QueuedReport {
            id: 0,
            revision: None,
            digest: None,
            trigger: Triggers::one(Trigger::Timer),
            outcome: ReportOutcome::Converged,
            started: 0,
            ended: 0,
            changes: vec![],
            failures: vec![],
            deferred: vec![],
            drift: vec![],
            message: String::new(),
            failing: vec![],
            pacnew: vec![],
            needs: None,
            reverted: None,
        }
    }

    fn bounds(reports: usize) -> OutboxBounds {
        OutboxBounds {
            reports,
            bytes: 1 << 30,
        }
    }

    fn pending_ids(store: &Store) -> Vec<u64> {
        store
            .outbox_pending(0)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect()
    }

    #[test]
    fn push_ack_and_bound() {
        let tmp = TempDir::new("outbox");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        for expected in 1..=5 {
            assert_eq!(
                store
                    .outbox_push(&mut report(), bounds(3), UNIX_MS)
                    .unwrap(),
                expected
            );
        }
        assert_eq!(
            pending_ids(&store),
            vec![3, 4, 5],
            "the oldest are dropped past the bound"
        );
        store.outbox_ack(4).unwrap();
        assert_eq!(pending_ids(&store), vec![5]);
        store.outbox_ack(5).unwrap();
        assert_eq!(
            store
                .outbox_push(&mut report(), bounds(3), UNIX_MS)
                .unwrap(),
            6,
            "ids keep increasing"
        );
    }

    /// Issue 32: `last-report-id` lost or damaged after every report was acknowledged; the next
    /// id still exceeds every id given (it was 1 again, which a control plane drops as stored).
    #[test]
    fn a_lost_or_damaged_id_floor_is_rebuilt_and_never_gives_an_id_twice() {
        let tmp = TempDir::new("outbox-floor");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        for _ in 0..3 {
            store
                .outbox_push(&mut report(), bounds(10), UNIX_MS)
                .unwrap();
        }
        store.outbox_ack(3).unwrap();
        let bare = RunRecord::bare(Triggers::one(Trigger::Timer), 0, 0, RunOutcome::Converged);
        store.record_run(&bare, 0).unwrap();
        let floor = tmp.path().join(LAST_ID);
        let mut given = 3;
        for damage in [None, Some("{ torn"), Some("-1")] {
            match damage {
                None => std::fs::remove_file(&floor).unwrap(),
                Some(text) => std::fs::write(&floor, text).unwrap(),
            }
            let id = store
                .outbox_push(&mut report(), bounds(10), UNIX_MS)
                .unwrap();
            assert!(id > given, "{damage:?}: {id} after {given}");
            let next = store
                .outbox_push(&mut report(), bounds(10), UNIX_MS)
                .unwrap();
            assert_eq!(next, id + 1, "the floor was written back");
            given = next;
        }
        // Kept reports above the time floor are counted too.
        std::fs::remove_file(&floor).unwrap();
        let mut far = report();
        far.id = u64::MAX / 2;
        let name = entry_name(far.id);
        std::fs::write(
            tmp.path().join(DIR).join(name),
            serde_json::to_vec(&far).unwrap(),
        )
        .unwrap();
        assert_eq!(
            store
                .outbox_push(&mut report(), bounds(10), UNIX_MS)
                .unwrap(),
            u64::MAX / 2 + 1
        );
    }

    #[test]
    fn past_the_largest_id_no_report_is_numbered() {
        let tmp = TempDir::new("outbox-max");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        std::fs::write(tmp.path().join(LAST_ID), u64::MAX.to_string()).unwrap();
        let err = store
            .outbox_push(&mut report(), bounds(3), UNIX_MS)
            .unwrap_err();
        assert!(
            err.to_string().contains("has reached the largest id"),
            "{err}"
        );
    }

    #[test]
    fn a_new_store_gives_ids_from_one() {
        let tmp = TempDir::new("outbox-new");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        assert_eq!(
            store
                .outbox_push(&mut report(), bounds(3), UNIX_MS)
                .unwrap(),
            1
        );
    }

    #[test]
    fn bounded_by_bytes_too_keeping_the_newest() {
        let tmp = TempDir::new("outbox-bytes");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        let size = serde_json::to_vec(&report()).unwrap().len() as u64;
        let bytes = OutboxBounds {
            reports: 100,
            bytes: 3 * size + size / 2,
        };
        for _ in 0..5 {
            store.outbox_push(&mut report(), bytes, UNIX_MS).unwrap();
        }
        assert_eq!(pending_ids(&store), vec![3, 4, 5]);
        let tiny = OutboxBounds {
            reports: 100,
            bytes: 1,
        };
        store.outbox_push(&mut report(), tiny, UNIX_MS).unwrap();
        assert_eq!(
            pending_ids(&store),
            vec![6],
            "the newest stays whatever the bound"
        );
    }

    /// The windows a kill -9 can hit inside a push, replayed by hand.
    #[test]
    fn a_crash_mid_push_burns_no_id_and_loses_no_whole_report() {
        let tmp = TempDir::new("outbox-crash");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        store
            .outbox_push(&mut report(), bounds(10), UNIX_MS)
            .unwrap();
        let dir = tmp.path().join(DIR);
        // Killed after the report's file, before the id floor: the file keeps its id taken.
        let mut second = report();
        second.id = 2;
        std::fs::write(
            dir.join(entry_name(2)),
            serde_json::to_vec(&second).unwrap(),
        )
        .unwrap();
        // Killed between the temp file's fsync and its rename: the whole report is recovered.
        let mut third = report();
        third.id = 3;
        let temp = |id: u64| dir.join(format!(".{id:020}{TEMP_SUFFIX}"));
        std::fs::write(temp(3), serde_json::to_vec(&third).unwrap()).unwrap();
        // Killed mid-write: a torn temp file is removed.
        std::fs::write(temp(4), b"{\"id\": 4, \"revis").unwrap();
        assert_eq!(
            store
                .outbox_push(&mut report(), bounds(10), UNIX_MS)
                .unwrap(),
            4
        );
        assert_eq!(pending_ids(&store), vec![1, 2, 3, 4]);
        assert!(!temp(3).exists() && !temp(4).exists());
        // Everything acknowledged, the floor says 4 even though no file does.
        store.outbox_ack(4).unwrap();
        assert_eq!(
            store
                .outbox_push(&mut report(), bounds(10), UNIX_MS)
                .unwrap(),
            5
        );
    }
}
