//! What observing a file finds and what its plan says to do: the types the observation, the
//! plan and the apply of files pass between them.

use std::collections::{BTreeSet, HashSet};

use crate::model::declaration::Declaration;
use crate::model::spec::files::{Original, Spec};
use crate::os::fsutil::{FileType, Stat};
use crate::store::FilesIndex;
use crate::util::sorted;

#[derive(Debug)]
pub struct Observed {
    pub(super) state: State,
    /// Declared owner and group resolved against the target's own tables.
    pub(super) uid: Result<Option<u32>, String>,
    pub(super) gid: Result<Option<u32>, String>,
    /// What releasing an adopted file puts back (its backup in the store), read only for a file
    /// no longer declared, for the plan's diff.
    pub(super) original: Option<Vec<u8>>,
}

#[derive(Debug)]
pub enum State {
    Missing,
    Regular {
        stat: Stat,
        held: Held,
    },
    /// A directory, symlink or special file where a file is declared.
    Other(FileType),
    /// The path cannot be reached: a symlinked or non-directory parent, or an I/O error.
    Blocked(String),
}

/// What files tell later kinds about a run.
#[derive(Debug, Default)]
pub struct Facts {
    /// Files (absolute target paths) changed in this run that a declared unit restarts or
    /// reloads on: only those, as a run may change 20,000 files.
    pub changed: BTreeSet<String>,
    /// Unit files and drop-ins changed in this run, known by their look (a unit's name, or
    /// `*.conf` in a `NAME.d/` directory), by the name of the unit or drop-in directory they
    /// configure (`a.service`, `web@.service`, `web-.service`, `service`): the units kind
    /// reloads the manager for them before it starts anything, and restarts a running unit
    /// whose own or template's changed.
    pub unit_config: BTreeSet<String>,
    /// Every path a declared unit restarts or reloads on, gathered when the first change is
    /// noted.
    pub(super) units_act_on: Option<HashSet<String>>,
    /// Files changed in this run in a directory systemd may read units from (a path with a
    /// `systemd` component): systemd's confirmation (`kinds::units::confirm`) asks about them
    /// and puts them back (`put_back`) when they reach the host's units.
    pub in_systemd_dirs: BTreeSet<String>,
    /// Files of this run that systemd's confirmation put back, with why (`refused`): written by
    /// the units kind after this kind's outcomes were recorded, so `reconcile` fails them
    /// (`take_refused`) once the units kind is done.
    pub(super) refused: std::cell::RefCell<Vec<(String, String)>>,
    /// The files index as the run's last observation left it unchanged: kept for the next
    /// chunk of files, so a run reads and checks the index once, not once per chunk.
    pub(super) index: std::cell::RefCell<Option<FilesIndex>>,
    /// Which declared files the run's observations have looked at (when the index may say it
    /// agrees with the declaration).
    pub(super) coverage: std::cell::RefCell<Coverage>,
}

impl Facts {
    /// The files systemd's confirmation put back in this run, with why, taken once.
    pub fn take_refused(&self) -> Vec<(String, String)> {
        self.refused.take()
    }
}

/// What planning needs of a regular file's content. Observation compares it with the declared
/// content as it reads it and keeps the bytes only when they differ (the original to back up if
/// the host adopts the file), so a no-op over many files holds none of them.
#[derive(Debug)]
pub enum Held {
    /// As declared; the declared spec's digest (the ledger's, `content_digest`: made once to
    /// compare it with the files index, or the index's own under the declaration it agrees
    /// with), for the ledger's digest of a file found in sync (`Kind::digest_observed`).
    Declared { digest: [u8; 32] },
    /// Other than declared; or, with no content declared (declared absent, or being released),
    /// what removing or replacing it loses, for the plan's diff.
    Other(Vec<u8>),
    /// No content is declared for it and it is not read (the plan shows no diffs) or could not
    /// be (its removal goes on regardless).
    Unread,
}

#[derive(Debug)]
pub enum Op {
    /// Writes the declared content (taken from the declaration when applied, not copied into the
    /// plan).
    Write {
        mode: u32,
        owner: Option<(u32, u32)>,
    },
    SetAttributes {
        mode: u32,
        owner: Option<(u32, u32)>,
    },
    Remove,
    Restore(Original),
    /// Already as wanted; only the ledger changes.
    Forget,
}

/// How far a run's observations have looked at the declared files (`IndexUse`): the files with
/// declared content they looked at, counted while the keys come in ascending order across the
/// run's observations (each key once); a key out of order means the count proves nothing.
#[derive(Debug, Default)]
pub struct Coverage {
    /// The last key looked at.
    after: Option<String>,
    with_content: usize,
    out_of_order: bool,
    /// How many files the declaration holds content for, counted when first needed.
    declared: Option<usize>,
}

impl Coverage {
    /// One observation's keys, in the order looked at, `with_content` of them declared with
    /// content.
    pub(super) fn look(&mut self, keys: &[&str], with_content: usize) {
        let mut before = self.after.as_deref();
        for key in keys {
            if before.is_some_and(|before| sorted::compare(before, key).is_ge()) {
                self.out_of_order = true;
            }
            before = Some(key);
        }
        self.with_content += with_content;
        if let Some(last) = keys.last() {
            self.after = Some(last.to_string());
        }
    }

    /// Whether the observations looked at every file `declaration` holds content for.
    pub(super) fn complete(&mut self, declaration: &Declaration) -> bool {
        let declared = *self.declared.get_or_insert_with(|| {
            (declaration.files.values())
                .filter(|spec| matches!(spec, Spec::Present(_)))
                .count()
        });
        !self.out_of_order && self.with_content == declared
    }
}
