//! Originals of adopted resources (`backups/`, each named by `kinds::backup_key`): kept once and
//! never overwritten, so a backup on disk stays the original even when the ledger that named it
//! was lost; a file's mode, owner and extended attributes beside it (`NAME.attrs`); dropped in
//! two steps on release (renamed `NAME.released`, removed once the ledger no longer names it),
//! so what a crash leaves is never taken for an original.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError, MAX_STORE_FILE};
use crate::os::fsutil::{Dir, FileType, Xattr};
use crate::util::codec;

pub const BACKUPS: &str = "backups";
/// Beside a backup: its file's attributes (`OriginalAttrs`).
const ATTRS: &str = ".attrs";
/// After a backup's name once its original was put back, until the ledger no longer names it.
const RELEASED: &str = ".released";

/// What an adopted file had besides its bytes, kept with its backup before the host first
/// changes the file: what is put back with it, whatever the ledger says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginalAttrs {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Extended attributes (POSIX ACLs, file capabilities, labels, `user.*`) by name, each
    /// value in base64.
    #[serde(default)]
    pub xattrs: BTreeMap<String, String>,
}

impl OriginalAttrs {
    /// With `xattrs` as read from the file; the names that are not UTF-8 (which no tool sets)
    /// are left out and returned, for the caller to say.
    pub fn new(mode: u32, uid: u32, gid: u32, xattrs: Vec<Xattr>) -> (OriginalAttrs, Vec<String>) {
        let mut left_out = Vec::new();
        let mut kept = BTreeMap::new();
        for xattr in xattrs {
            match String::from_utf8(xattr.name) {
                Ok(name) => {
                    kept.insert(name, codec::base64_encode(&xattr.value));
                }
                Err(e) => left_out.push(String::from_utf8_lossy(e.as_bytes()).into_owned()),
            }
        }
        let attrs = OriginalAttrs {
            mode,
            uid,
            gid,
            xattrs: kept,
        };
        (attrs, left_out)
    }

    /// The extended attributes to set again.
    pub fn xattrs(&self) -> Result<Vec<Xattr>, String> {
        (self.xattrs.iter())
            .map(|(name, value)| {
                let value = codec::base64_decode(value).map_err(|e| format!("{name}: {e}"))?;
                Ok(Xattr {
                    name: name.as_bytes().to_vec(),
                    value,
                })
            })
            .collect()
    }
}

impl Store {
    fn backups(&self) -> Result<Dir, StoreError> {
        self.dir
            .child(OsStr::new(BACKUPS))
            .map_err(|e| self.error(BACKUPS, format!("cannot be opened: {e}")))
    }

    fn backup_error(&self, name: &str, what: &str, e: impl std::fmt::Display) -> StoreError {
        self.error(&format!("{BACKUPS}/{name}"), format!("{what}: {e}"))
    }

    /// Keeps an adopted resource's original bytes under `name`, unless an original is already
    /// kept there: a resource the ledger does not list (which is when one is adopted) whose
    /// backup is on disk was adopted before and its ledger entry lost, and what the backup
    /// holds is its original; what the resource holds now may be what the host wrote. `true`
    /// when the one on disk was kept.
    pub fn save_backup(&self, name: &str, bytes: &[u8]) -> Result<bool, StoreError> {
        let backups = self.backups()?;
        match backups.stat(OsStr::new(name)) {
            // What the host keeps is a regular file of one link; anything else there (a
            // symlink, a FIFO, a directory, a link to another file) holds no original, and
            // taking it for one would let the file's real original be overwritten.
            Ok(Some(st)) if st.file_type != FileType::Regular || st.links > 1 => {
                let found = match st.file_type {
                    FileType::Regular => format!("a file with {} hard links", st.links),
                    other => other.describe().to_string(),
                };
                return Err(self.backup_error(
                    name,
                    "cannot hold this resource's original",
                    format!(
                        "it is {found}, not a backup mesh-host wrote; nothing was changed \
                         (remove it, or put the original back there, and run again)"
                    ),
                ));
            }
            Ok(Some(_)) => return Ok(true),
            Ok(None) => {}
            Err(e) => return Err(self.backup_error(name, "cannot be looked at", e)),
        }
        // Left by a release that ended before it removed them: not originals any more.
        for stale in [
            format!("{name}{RELEASED}"),
            format!("{name}{ATTRS}{RELEASED}"),
            format!("{name}{ATTRS}"),
        ] {
            (backups.remove(OsStr::new(&stale)))
                .map_err(|e| self.backup_error(&stale, "cannot be removed", e))?;
        }
        backups
            .write_atomic(OsStr::new(name), bytes, 0o600, None)
            .map_err(|e| self.backup_error(name, "cannot be written", e))?;
        Ok(false)
    }

    /// The original kept under `name`, or the one a release in progress set aside.
    pub fn read_backup(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let backups = self.backups()?;
        for at in [name.to_string(), format!("{name}{RELEASED}")] {
            match backups.read(OsStr::new(&at), MAX_STORE_FILE) {
                Ok(Some((_, bytes))) => return Ok(bytes),
                Ok(None) => {}
                Err(e) => return Err(self.backup_error(&at, "cannot be read", e)),
            }
        }
        Err(self.error(&format!("{BACKUPS}/{name}"), "is missing"))
    }

    /// The attributes kept with backup `name`, if any were.
    pub fn backup_attrs(&self, name: &str) -> Result<Option<OriginalAttrs>, StoreError> {
        let backups = self.backups()?;
        for at in [format!("{name}{ATTRS}"), format!("{name}{ATTRS}{RELEASED}")] {
            match backups.read(OsStr::new(&at), MAX_STORE_FILE) {
                Ok(Some((_, bytes))) => {
                    return serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                        self.backup_error(
                            &at,
                            "cannot be read (left as it is for you to inspect)",
                            e,
                        )
                    })
                }
                Ok(None) => {}
                Err(e) => return Err(self.backup_error(&at, "cannot be read", e)),
            }
        }
        Ok(None)
    }

    /// Whether attributes are kept with backup `name` (`save_backup_attrs` was called).
    pub fn has_backup_attrs(&self, name: &str) -> Result<bool, StoreError> {
        let at = format!("{name}{ATTRS}");
        (self.backups()?.stat(OsStr::new(&at)))
            .map(|found| found.is_some())
            .map_err(|e| self.backup_error(&at, "cannot be looked at", e))
    }

    /// Keeps `attrs` with backup `name`, durably: before the host first changes the file.
    pub fn save_backup_attrs(&self, name: &str, attrs: &OriginalAttrs) -> Result<(), StoreError> {
        let at = format!("{name}{ATTRS}");
        let json = serde_json::to_vec(attrs)
            .map_err(|e| self.backup_error(&at, "cannot be written", e))?;
        (self.backups()?)
            .write_atomic(OsStr::new(&at), &json, 0o600, None)
            .map_err(|e| self.backup_error(&at, "cannot be written", e))
    }

    /// Sets backup `name` aside once its original is put back, before the ledger stops naming
    /// it: a crash after this leaves a backup no adoption takes for an original; one before the
    /// ledger is saved leaves it where `read_backup` still finds it.
    pub fn release_backup(&self, name: &str) -> Result<(), StoreError> {
        let backups = self.backups()?;
        for at in [format!("{name}{ATTRS}"), name.to_string()] {
            let aside = format!("{at}{RELEASED}");
            (backups.rename(OsStr::new(&at), OsStr::new(&aside)))
                .map_err(|e| self.backup_error(&at, "cannot be set aside", e))?;
        }
        backups
            .sync()
            .map_err(|e| self.error(BACKUPS, format!("cannot be synced: {e}")))
    }

    /// Removes backup `name` and its attributes, released or not.
    pub fn remove_backup(&self, name: &str) -> Result<(), StoreError> {
        let backups = self.backups()?;
        for at in [
            format!("{name}{RELEASED}"),
            format!("{name}{ATTRS}{RELEASED}"),
            name.to_string(),
            format!("{name}{ATTRS}"),
        ] {
            (backups.remove(OsStr::new(&at)))
                .map_err(|e| self.backup_error(&at, "cannot be removed", e))?;
        }
        Ok(())
    }

    /// Removes what releases set aside and a crash left (`release_backup`), unless `referenced`
    /// names it still. A backup not set aside is an original, whether the ledger names it or
    /// not (a lost ledger), and stays.
    /// `referenced` is asked for only when there is something set aside (a listing is all a
    /// run without leftovers costs, not a digest per adopted resource).
    pub fn remove_released_backups(
        &self,
        referenced: impl FnOnce() -> BTreeSet<String>,
    ) -> Result<(), StoreError> {
        let backups = self.backups()?;
        let released = (backups
            .names_where(|n| n.as_encoded_bytes().ends_with(RELEASED.as_bytes())))
        .map_err(|e| self.error(BACKUPS, format!("cannot be listed: {e}")))?;
        if released.is_empty() {
            return Ok(());
        }
        let referenced = referenced();
        for at in released {
            let text = at.to_string_lossy();
            let base = text.trim_end_matches(RELEASED).trim_end_matches(ATTRS);
            if !referenced.contains(base) {
                (backups.remove(&at))
                    .map_err(|e| self.backup_error(&text, "cannot be removed", e))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    #[test]
    fn backups_round_trip() {
        let tmp = TempDir::new("store-backup");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        let name = "0123abcd";
        assert!(!store.save_backup(name, b"original").unwrap());
        assert_eq!(store.read_backup(name).unwrap(), b"original");
        store.remove_backup(name).unwrap();
        assert!(store
            .read_backup(name)
            .unwrap_err()
            .to_string()
            .contains("is missing"));
    }

    /// An original on disk is kept whoever asks to save another under its name; attributes
    /// round-trip; a release sets both aside, where they are still read, and only what was set
    /// aside and is no longer named is removed.
    #[test]
    fn an_original_is_kept_once_and_released_in_two_steps() {
        let tmp = TempDir::new("store-backup-kept");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        assert!(!store.save_backup("a", b"first").unwrap());
        assert!(store.save_backup("a", b"what the host wrote").unwrap());
        assert_eq!(store.read_backup("a").unwrap(), b"first");
        let xattrs = vec![Xattr {
            name: b"user.x".to_vec(),
            value: vec![0, 1, 255],
        }];
        let (attrs, left_out) = OriginalAttrs::new(0o600, 1, 2, xattrs.clone());
        assert!(left_out.is_empty());
        assert!(!store.has_backup_attrs("a").unwrap());
        store.save_backup_attrs("a", &attrs).unwrap();
        assert!(store.has_backup_attrs("a").unwrap());
        assert_eq!(
            store.backup_attrs("a").unwrap().unwrap().xattrs().unwrap(),
            xattrs
        );
        assert!(!store.save_backup("b", b"b's").unwrap());
        store.release_backup("a").unwrap();
        assert_eq!(store.read_backup("a").unwrap(), b"first");
        assert_eq!(store.backup_attrs("a").unwrap(), Some(attrs));
        store
            .remove_released_backups(|| ["a".to_string()].into())
            .unwrap();
        assert_eq!(store.read_backup("a").unwrap(), b"first");
        store.remove_released_backups(BTreeSet::new).unwrap();
        assert!(store.read_backup("a").is_err());
        assert!(store.backup_attrs("a").unwrap().is_none());
        assert_eq!(store.read_backup("b").unwrap(), b"b's", "an original stays");
        // A release that left its backup set aside: a new adoption keeps a new original.
        store.release_backup("b").unwrap();
        assert!(!store.save_backup("b", b"new").unwrap());
        assert_eq!(store.read_backup("b").unwrap(), b"new");
    }
}
