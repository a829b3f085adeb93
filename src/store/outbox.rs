//! The outbox: reports waiting for the control plane's acknowledgement, one file per report in
//! `outbox/`, so a run made while the link is down (or by a person's `apply`) reaches the control
//! plane after the reconnect, oldest first. Bounded: past the limit the oldest are dropped.

use std::ffi::OsStr;
use std::path::PathBuf;

use super::{Store, StoreError, MAX_STORE_FILE};
use crate::fsutil::Dir;
use crate::link::Report;

const DIR: &str = "outbox";
const LAST_ID: &str = "last-report-id";

impl Store {
    fn outbox_dir(&self) -> Result<PathBuf, StoreError> {
        let dir = self.path().join(DIR);
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(dir),
            Err(e) => Err(self.error(DIR, format!("cannot be created: {e}"))),
        }
    }

    /// Gives `report` the next id and keeps it until acknowledged; returns the id.
    pub fn outbox_push(&self, report: &mut Report, max: usize) -> Result<u64, StoreError> {
        let dir = self.outbox_dir()?;
        let last: u64 = self.read_json(LAST_ID)?.unwrap_or(0);
        report.id = last + 1;
        self.write_json(LAST_ID, &report.id)?;
        let name = format!("{:020}.json", report.id);
        let bytes = serde_json::to_vec(report).map_err(|e| self.error(DIR, e))?;
        self.open_outbox(&dir)?
            .write_atomic(OsStr::new(&name), &bytes, 0o600, None)
            .map_err(|e| self.error(&format!("{DIR}/{name}"), format!("cannot be written: {e}")))?;
        let ids = self.outbox_ids(&dir)?;
        let excess = ids.len().saturating_sub(max);
        if excess > 0 {
            log::warn!("outbox holds more than {max} reports; dropping the {excess} oldest");
            for id in &ids[..excess] {
                self.remove_outbox_entry(&dir, *id)?;
            }
        }
        Ok(report.id)
    }

    /// Unacknowledged reports with ids after `after`, oldest first.
    pub fn outbox_pending(&self, after: u64) -> Result<Vec<Report>, StoreError> {
        let dir = self.outbox_dir()?;
        let fd = self.open_outbox(&dir)?;
        let mut out = Vec::new();
        for id in self.outbox_ids(&dir)?.into_iter().filter(|id| *id > after) {
            let name = format!("{id:020}.json");
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
                        std::fs::rename(dir.join(&name), dir.join(format!("{name}.unreadable")));
                }
            }
        }
        Ok(out)
    }

    /// The control plane has stored every report up to `id`.
    pub fn outbox_ack(&self, id: u64) -> Result<(), StoreError> {
        let dir = self.outbox_dir()?;
        for old in self.outbox_ids(&dir)?.into_iter().filter(|i| *i <= id) {
            self.remove_outbox_entry(&dir, old)?;
        }
        Ok(())
    }

    /// How many reports wait for the control plane's acknowledgement.
    pub fn outbox_len(&self) -> Result<usize, StoreError> {
        Ok(self.outbox_ids(&self.outbox_dir()?)?.len())
    }

    fn open_outbox(&self, dir: &std::path::Path) -> Result<Dir, StoreError> {
        Dir::open(dir).map_err(|e| self.error(DIR, format!("cannot be opened: {e}")))
    }

    fn outbox_ids(&self, dir: &PathBuf) -> Result<Vec<u64>, StoreError> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| self.error(DIR, format!("cannot be listed: {e}")))?;
        let mut ids: Vec<u64> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn remove_outbox_entry(&self, dir: &std::path::Path, id: u64) -> Result<(), StoreError> {
        match std::fs::remove_file(dir.join(format!("{id:020}.json"))) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.error(
                &format!("{DIR}/{id:020}.json"),
                format!("cannot be removed: {e}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn report() -> Report {
        Report {
            id: 0,
            revision: None,
            digest: None,
            trigger: vec!["timer".into()],
            outcome: "converged".into(),
            started: 0,
            ended: 0,
            changes: vec![],
            failures: vec![],
            deferred: vec![],
            drift: vec![],
            message: String::new(),
            failing: vec![],
            pacnew: vec![],
        }
    }

    #[test]
    fn push_ack_and_bound() {
        let tmp = TempDir::new("outbox");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        for expected in 1..=5 {
            assert_eq!(store.outbox_push(&mut report(), 3).unwrap(), expected);
        }
        let ids: Vec<u64> = store
            .outbox_pending(0)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![3, 4, 5], "the oldest are dropped past the bound");
        store.outbox_ack(4).unwrap();
        let ids: Vec<u64> = store
            .outbox_pending(0)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![5]);
        store.outbox_ack(5).unwrap();
        assert_eq!(
            store.outbox_push(&mut report(), 3).unwrap(),
            6,
            "ids keep increasing"
        );
    }
}
