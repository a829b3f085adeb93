//! Restarts and reloads owed to changed files (`owed.json`): what a unit owes is written ahead,
//! before the file it restarts or reloads on changes, and cleared once it was restarted or
//! reloaded, so whatever ends a run between the two (kill -9, SIGTERM, a failed restart) the next
//! run still does it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

pub(super) const OWED: &str = "owed.json";

/// By unit, the files it restarts or reloads on that changed (or were about to) since it was
/// last restarted or reloaded.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Owed {
    pub units: BTreeMap<String, BTreeSet<String>>,
}

impl Owed {
    /// Owes `unit` its restart or reload on `file`; whether it was not owed yet.
    pub fn add(&mut self, unit: &str, file: &str) -> bool {
        let files = self.units.entry(unit.to_string()).or_default();
        files.insert(file.to_string())
    }

    /// Whatever `unit` owed is done; whether it owed anything.
    pub fn settle(&mut self, unit: &str) -> bool {
        self.units.remove(unit).is_some()
    }

    /// Keeps only what `still_owed(unit, file)` says is still owed (the declaration may have
    /// dropped the unit or the file); whether anything was dropped.
    pub fn retain(&mut self, still_owed: impl Fn(&str, &str) -> bool) -> bool {
        let before = self.clone();
        for (unit, files) in self.units.iter_mut() {
            files.retain(|file| still_owed(unit, file));
        }
        self.units.retain(|_, files| !files.is_empty());
        *self != before
    }
}

impl Store {
    /// What units owe; none when the file does not exist.
    pub fn owed(&self) -> Result<Owed, StoreError> {
        Ok(self.read_json(OWED)?.unwrap_or_default())
    }

    /// Written by a run, under the store's lock.
    pub fn save_owed(&self, owed: &Owed) -> Result<(), StoreError> {
        self.write_json(OWED, owed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    #[test]
    fn owed_work_is_kept_until_settled_and_written_as_plain_json() {
        let scratch = TempDir::new("owed");
        let store = Store::open(&scratch.path().join("state"), true)
            .unwrap()
            .unwrap();
        assert_eq!(store.owed().unwrap(), Owed::default());
        let mut owed = Owed::default();
        assert!(owed.add("a.service", "/etc/app.conf"));
        assert!(!owed.add("a.service", "/etc/app.conf"));
        assert!(owed.add("b.service", "/etc/b.conf"));
        store.save_owed(&owed).unwrap();
        let text = std::fs::read_to_string(scratch.path().join("state/owed.json")).unwrap();
        assert_eq!(
            text,
            "{\n  \"units\": {\n    \"a.service\": [\n      \"/etc/app.conf\"\n    ],\n    \
             \"b.service\": [\n      \"/etc/b.conf\"\n    ]\n  }\n}"
        );
        let mut read = store.owed().unwrap();
        assert_eq!(read, owed);
        assert!(read.settle("a.service"));
        assert!(!read.settle("a.service"));
        assert!(read.retain(|unit, _| unit != "b.service"));
        assert!(read.units.is_empty());
    }
}
