//! What the reboot and restart look keeps between runs: its last answer with the stamps it was
//! made on (`upkeep.json`, `model::upkeep::Looked`), and pacman's root and database as
//! `pacman -v -T` last said, with what they were asked under (`pacman-paths.json`). Both are
//! caches, written atomically without fsync: one lost or cut short by a crash reads as absent,
//! and costs one look or one `pacman -v -T`.

use std::ffi::OsStr;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, MAX_STORE_FILE};
use crate::model::upkeep::{Looked, Where};

pub const LOOKED: &str = "upkeep.json";
pub const PATHS: &str = "pacman-paths.json";

/// pacman's paths, with the pacman command line they were asked with and its pacman.conf's
/// modification time (ns): a config that runs pacman otherwise, or an edited pacman.conf, asks
/// again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacmanPaths {
    pub command: Vec<String>,
    pub conf: PathBuf,
    pub conf_modified: Option<u64>,
    pub paths: Where,
}

impl Store {
    /// The last look, if one is kept and readable.
    pub fn last_look(&self) -> Option<Looked> {
        self.read_cache(LOOKED)
    }

    /// Keeps a look (the run holds the store's lock).
    pub fn save_look(&self, looked: &Looked) -> Result<(), StoreError> {
        self.write_cache(LOOKED, looked)
    }

    /// pacman's paths as last asked, if kept and readable.
    pub fn pacman_paths(&self) -> Option<PacmanPaths> {
        self.read_cache(PATHS)
    }

    /// Keeps pacman's paths. Written by whichever process asked, without the store's lock: two at
    /// once leave one whole answer, or one the next reader takes as absent.
    pub fn save_pacman_paths(&self, paths: &PacmanPaths) -> Result<(), StoreError> {
        self.write_cache(PATHS, paths)
    }

    /// A cache file, if kept and readable: anything else (missing, cut short) is `None`.
    pub(super) fn read_cache<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        let read = self.dir.read(OsStr::new(name), MAX_STORE_FILE);
        let parsed = match read {
            Ok(None) => return None,
            Ok(Some((_, bytes))) => serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        parsed
            .map_err(|e| log::debug!("{}: not read: {e}", self.path.join(name).display()))
            .ok()
    }

    /// Replaces a cache file, without fsync (`Dir::write_volatile_cache`: a reader may find it
    /// missing for a moment, which reads as no cache).
    pub(super) fn write_cache<T: Serialize>(
        &self,
        name: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| self.error(name, e))?;
        self.dir
            .write_volatile_cache(OsStr::new(name), &bytes, 0o600)
            .map_err(|e| self.error(name, format!("cannot be written: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::upkeep::{Needs, Stamps};
    use crate::util::testutil::TempDir;

    #[test]
    fn kept_looks_and_paths_read_back_and_a_cut_one_reads_as_absent() {
        let tmp = TempDir::new("store-upkeep");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        assert_eq!(store.last_look(), None);
        let looked = Looked {
            at: 5,
            stamps: Stamps {
                boot: "b".into(),
                local_db: Some(1),
                modules: None,
                running_modules: None,
            },
            needs: Needs {
                reboot: Some("why".into()),
                ..Needs::default()
            },
            stale: Vec::new(),
        };
        store.save_look(&looked).unwrap();
        assert_eq!(store.last_look(), Some(looked));
        let paths = PacmanPaths {
            command: vec!["pacman".into()],
            conf: "/etc/pacman.conf".into(),
            conf_modified: Some(3),
            paths: Where {
                root: "/".into(),
                db: "/var/lib/pacman/".into(),
            },
        };
        store.save_pacman_paths(&paths).unwrap();
        assert_eq!(store.pacman_paths(), Some(paths));
        for name in [LOOKED, PATHS] {
            std::fs::write(tmp.path().join(name), "{\"at\":").unwrap();
        }
        assert_eq!(store.last_look(), None);
        assert_eq!(store.pacman_paths(), None);
    }
}
