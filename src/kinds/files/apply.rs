//! Applying files: each written atomically beside its target through the no-symlink walk, the
//! directories it needs made and fsynced, an adopted file's original put back on release, the
//! directories the host made removed once empty.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use super::state::Op;
use crate::kinds::{Change, Env, Outcome, RunContext};
use crate::model::spec::files::{Files, Original, Spec};
use crate::os::fsutil::{self, Dir, Fence, FileType, PendingWrite, WalkError};
use crate::store::{Entry, Ledger, Origin, OriginalAttrs, Store};

/// Puts the file `key` back as the host found it, for systemd's confirmation of unit changes
/// (`kinds::units::confirm`), which found that this run's write reaches the host's units: a file
/// the host created is removed, an adopted one gets its original, durably. The ledger still says
/// it is owned, no longer as applied (as its write-ahead left it), so the next run writes it
/// again and is refused again.
pub fn put_back(env: &Env, cx: &RunContext, ledger: &mut Ledger, key: &str) -> Result<(), String> {
    let op = match ledger.get::<Files>(key) {
        Some(entry) if entry.origin == Origin::Created => Op::Remove,
        Some(Entry {
            original: Some(original),
            ..
        }) => Op::Restore(Original::clone(original)),
        _ => {
            return Err(format!(
                "{key}: mesh-host keeps no original of it to put back"
            ))
        }
    };
    let root = Dir::open(env.root).map_err(|e| format!("root {}: {e}", env.root.display()))?;
    let mut parents = ParentDirs::new(&root, env);
    if let Some(mut entry) = ledger.remove::<Files>(key) {
        entry.applied = None;
        ledger.insert_all::<Files>(vec![(key.to_string(), entry)]);
    }
    apply_one(env, cx, &mut parents, ledger, key, &op)?;
    parents.sync_filesystems()?;
    match parents.sync().into_iter().next() {
        Some((dir, e)) => Err(format!("{key}: fsync {}: {e}", dir.display())),
        None => Ok(()),
    }
}

/// Records that systemd's confirmation refused this run's change to `key` (and put it back):
/// `reconcile` makes it the file's outcome.
pub fn refused(cx: &RunContext, key: &str, why: &str) {
    (cx.facts.files.refused.borrow_mut()).push((key.to_string(), why.to_string()));
}

/// Write-ahead for directories too: the ledger lists every directory this run will create
/// before it exists, so a crash cannot leave one the host would never remove.
pub fn directories_ahead(
    env: &Env,
    root: &Dir,
    ledger: &mut Ledger,
    changes: &[Change<Op, Original>],
) -> Result<(), String> {
    let mut looked_at = HashSet::new();
    let upcoming: Vec<PathBuf> = changes
        .iter()
        .filter(|c| matches!(c.op, Op::Write { .. } | Op::Restore(_)))
        .filter(|c| looked_at.insert(Path::new(&c.key).parent()))
        .flat_map(|c| missing_directories(root, Path::new(&c.key)))
        .filter(|d| !ledger.directories.contains(d))
        .collect();
    if upcoming.is_empty() {
        return Ok(());
    }
    ledger.directories.extend(upcoming);
    match env.store {
        Some(store) => store.save_ledger(ledger).map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// Each change carried out, in order, until the host is stopping; with the writes whose new
/// content waits beside its file (by the change's index), to be put in place.
pub fn apply_each(
    env: &Env,
    cx: &RunContext,
    parents: &mut ParentDirs,
    ledger: &mut Ledger,
    changes: &[Change<Op, Original>],
) -> (Vec<Outcome>, Vec<(usize, PendingWrite)>) {
    let mut written = Vec::new();
    let outcomes = changes
        .iter()
        .enumerate()
        .map(|(i, change)| {
            if (env.interrupted)() {
                return Outcome::Stopped;
            }
            match apply_one(env, cx, parents, ledger, &change.key, &change.op) {
                Ok(Some(pending)) => {
                    written.push((i, pending));
                    Outcome::Done
                }
                Ok(None) => Outcome::Done,
                Err(e) => Outcome::Failed(e.into()),
            }
        })
        .collect();
    (outcomes, written)
}

/// The new contents are written but not in place: made durable all at once (one sync per
/// filesystem instead of an fsync per file), then renamed, so no name ever points at data that
/// is not on disk. The renames are durable once their directories are: a write whose directory
/// cannot be synced has not happened as far as the ledger is concerned.
pub fn put_in_place(
    parents: &mut ParentDirs,
    changes: &[Change<Op, Original>],
    written: Vec<(usize, PendingWrite)>,
    outcomes: &mut [Outcome],
) {
    let synced = match written.is_empty() {
        true => Ok(()),
        false => parents.sync_filesystems(),
    };
    for (i, pending) in written {
        let key = &changes[i].key;
        let dir = Path::new(key).parent().unwrap_or(Path::new("/"));
        outcomes[i] = match (&synced, parents.dirs.get(dir)) {
            (Ok(()), Some((dir, _))) => match dir.rename_pending(pending) {
                Ok(()) => Outcome::Done,
                Err(e) => Outcome::Failed(format!("{key}: cannot write: {e}").into()),
            },
            (Err(e), Some((dir, _))) => {
                dir.discard_pending(pending);
                Outcome::Failed(format!("{key}: cannot make the write durable: {e}").into())
            }
            (_, None) => Outcome::Failed(format!("{key}: its directory was lost").into()),
        };
    }
    for (dir, e) in parents.sync() {
        for (change, outcome) in changes.iter().zip(outcomes.iter_mut()) {
            if *outcome == Outcome::Done && Path::new(&change.key).parent() == Some(&dir) {
                *outcome = Outcome::Failed(
                    format!(
                        "{}: cannot make the write durable (fsync {}): {e}",
                        change.key,
                        dir.display()
                    )
                    .into(),
                );
            }
        }
    }
}

/// Carries out one change; a write gives back its temp file, to be renamed once every written
/// file is durable (see `Files::apply`).
pub fn apply_one(
    env: &Env,
    cx: &RunContext,
    parents: &mut ParentDirs,
    ledger: &mut Ledger,
    key: &str,
    op: &Op,
) -> Result<Option<PendingWrite>, String> {
    let path = Path::new(key);
    let create = matches!(op, Op::Write { .. } | Op::Restore(_));
    let parent = match parents.get(path, create) {
        Ok(Some(parent)) => parent,
        Ok(None) => return Ok(None), // removing: a missing parent means nothing to remove
        Err(e) => return Err(e.to_string()),
    };
    ledger.directories.extend(parent.created.iter().cloned());
    let io = |what: &str, e: std::io::Error| format!("{key}: cannot {what}: {e}");
    if matches!(op, Op::Write { .. } | Op::SetAttributes { .. }) {
        keep_original_attrs(env, ledger, &parent, key)?;
    }
    match op {
        Op::Write { mode, owner } => {
            let Some(Spec::Present(content)) = cx.declaration.files.get(key) else {
                return Err(format!("{key}: the declaration has no content to write"));
            };
            refuse_non_file(&parent, key)?;
            parent
                .dir
                .write_temp_unsynced(&parent.name, &content.bytes, *mode, *owner)
                .map(Some)
                .map_err(|e| io("write", e))
        }
        Op::SetAttributes { mode, owner } => refuse_non_file(&parent, key).and_then(|()| {
            parent
                .dir
                .set_attributes(&parent.name, *mode, *owner)
                .map(|()| None)
                .map_err(|e| io("set mode and owner", e))
        }),
        // With the temp file a crash between a write and its rename may have left beside it: the
        // file was owned (written ahead in the ledger) before that write began.
        Op::Remove => parent
            .dir
            .remove(&parent.name)
            .and_then(|_| parent.dir.remove_temp(&parent.name))
            .map(|()| None)
            .map_err(|e| io("remove", e)),
        Op::Restore(original) => restore(env, &parent, key, original).map(|()| None),
        Op::Forget => parent
            .dir
            .remove_temp(&parent.name)
            .map(|()| None)
            .map_err(|e| io("remove", e)),
    }
}

/// Puts an adopted file's original back: its content, and the mode, owner and extended
/// attributes kept with its backup.
fn restore(env: &Env, parent: &ParentRef, key: &str, original: &Original) -> Result<(), String> {
    let store = env.store.ok_or("no store to restore the original from")?;
    let bytes = store
        .read_backup(&original.backup)
        .map_err(|e| e.to_string())?;
    // What was kept with the backup is the original's, whatever the ledger says (it may have
    // been lost, and the file adopted again as the host had left it).
    let attrs = store
        .backup_attrs(&original.backup)
        .map_err(|e| e.to_string())?;
    let (mode, owner, xattrs) = match &attrs {
        Some(a) => (
            a.mode,
            (a.uid, a.gid),
            a.xattrs().map_err(|e| format!("{key}: {e}"))?,
        ),
        None => (original.mode, (original.uid, original.gid), Vec::new()),
    };
    refuse_non_file(parent, key)?;
    let refused = parent
        .dir
        .replace_unsynced(&parent.name, &bytes, mode, Some(owner), &xattrs)
        .map_err(|e| format!("{key}: cannot restore the original: {e}"))?;
    if !refused.is_empty() {
        log::warn!(
            "{key}: put back without the extended attributes this process may not set: {}",
            refused.join(", ")
        );
    }
    Ok(())
}

/// Before the host first changes an adopted file, keeps what it has besides its bytes (mode,
/// owner, extended attributes: ACLs, capabilities, labels) with its backup, durably: a write
/// replaces the file with a new one, which has none of them, and the original is put back with
/// them. Once kept, never again: the file then holds what the host wrote.
fn keep_original_attrs(
    env: &Env,
    ledger: &Ledger,
    parent: &ParentRef,
    key: &str,
) -> Result<(), String> {
    let (Some(store), Some(entry)) = (env.store, ledger.get::<Files>(key)) else {
        return Ok(());
    };
    let (Origin::Adopted, Some(original)) = (entry.origin, &entry.original) else {
        return Ok(());
    };
    if store
        .has_backup_attrs(&original.backup)
        .map_err(|e| e.to_string())?
    {
        return Ok(());
    }
    let xattrs = match parent.dir.xattrs(&parent.name) {
        Ok(xattrs) => xattrs,
        // Gone or replaced meanwhile: its write says so.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("{key}: cannot read its extended attributes: {e}")),
    };
    let (attrs, left_out) = OriginalAttrs::new(original.mode, original.uid, original.gid, xattrs);
    if !left_out.is_empty() {
        log::warn!(
            "{key}: extended attributes whose names are not UTF-8 are not kept: {}",
            left_out.join(", ")
        );
    }
    store
        .save_backup_attrs(&original.backup, &attrs)
        .map_err(|e| e.to_string())
}

/// The parent directories one `apply` writes into, each walked to once (not once per file), with
/// the ones that took an unsynced rename.
pub struct ParentDirs<'r> {
    pub(super) root: &'r Dir,
    pub(super) dirs: HashMap<PathBuf, (Dir, bool)>,
    /// The store, which no walk enters (`Store::fence`): checked again here, at the write.
    fence: Option<Fence>,
}

/// A file's parent directory as `apply_one` needs it.
pub struct ParentRef<'d> {
    pub(super) dir: &'d Dir,
    pub(super) name: std::ffi::OsString,
    /// Directories the walk to it created (only the first time).
    pub(super) created: Vec<PathBuf>,
}

impl<'r> ParentDirs<'r> {
    pub(super) fn new(root: &'r Dir, env: &Env) -> Self {
        ParentDirs {
            root,
            dirs: HashMap::new(),
            fence: env.store.and_then(Store::fence),
        }
    }

    /// `None` when the parent is missing and `create` is false. Marks the directory as one to
    /// sync, since every caller changes a name in it.
    pub(super) fn get(
        &mut self,
        path: &Path,
        create: bool,
    ) -> Result<Option<ParentRef<'_>>, WalkError> {
        let (Some(dir_path), Some(name)) = (path.parent(), path.file_name()) else {
            return fsutil::walk_to_parent(self.root, path, create).map(|_| None);
        };
        let mut created = Vec::new();
        if !self.dirs.contains_key(dir_path) {
            let fence = self.fence.as_ref();
            let Some(parent) = fsutil::walk_to_parent_fenced(self.root, path, create, fence)?
            else {
                return Ok(None);
            };
            created = parent.created;
            self.dirs
                .insert(dir_path.to_path_buf(), (parent.dir, false));
        }
        let Some((dir, dirty)) = self.dirs.get_mut(dir_path) else {
            return Ok(None);
        };
        *dirty = true;
        Ok(Some(ParentRef {
            dir,
            name: name.to_os_string(),
            created,
        }))
    }

    /// Makes the data of every file written so far durable: one `syncfs` per filesystem the
    /// directories written into are on.
    pub(super) fn sync_filesystems(&self) -> Result<(), String> {
        let mut synced = HashSet::new();
        for (path, (dir, _)) in self.dirs.iter().filter(|(_, (_, dirty))| *dirty) {
            let device = dir
                .device()
                .map_err(|e| format!("fstat {}: {e}", path.display()))?;
            if synced.insert(device) {
                dir.sync_filesystem()
                    .map_err(|e| format!("syncfs {}: {e}", path.display()))?;
            }
        }
        Ok(())
    }

    /// Syncs each directory written into; the ones that failed, with why.
    pub(super) fn sync(&self) -> Vec<(PathBuf, std::io::Error)> {
        self.dirs
            .iter()
            .filter(|(_, (_, dirty))| *dirty)
            .filter_map(|(path, (dir, _))| dir.sync().err().map(|e| (path.clone(), e)))
            .collect()
    }
}

/// The directories above `path` that do not exist yet, outermost first. An unreachable path
/// gives what was found so far; applying it reports the problem.
pub fn missing_directories(root: &Dir, path: &Path) -> Vec<PathBuf> {
    let mut ancestors: Vec<&Path> = path
        .ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .collect();
    ancestors.reverse();
    let mut missing = Vec::new();
    for dir in ancestors {
        if missing.is_empty() {
            let exists = match fsutil::walk_to_parent(root, dir, false) {
                Ok(Some(parent)) => !matches!(parent.dir.stat(&parent.name), Ok(None)),
                Ok(None) => false,
                Err(_) => return missing,
            };
            if exists {
                continue;
            }
        }
        missing.push(dir.to_path_buf());
    }
    missing
}

/// A directory or symlink where a file goes is an error, never overwritten.
pub fn refuse_non_file(parent: &ParentRef, key: &str) -> Result<(), String> {
    match parent.dir.stat(&parent.name) {
        Ok(Some(st)) if st.file_type != FileType::Regular => Err(format!(
            "{key} is {}; mesh-host does not replace it",
            st.file_type.describe()
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{key}: {e}")),
    }
}

/// Removes directories the host created that are empty and hold no declared file, deepest first.
pub fn remove_unneeded_directories(root: &Dir, cx: &RunContext, ledger: &mut Ledger) {
    let files = &cx.declaration.files;
    let mut dirs: Vec<PathBuf> = ledger
        .directories
        .iter()
        .filter(|d| !d.to_str().is_some_and(|d| holds_declared(files, d)))
        .cloned()
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in dirs {
        let removed = match fsutil::walk_to_parent(root, &dir, false) {
            Ok(Some(parent)) => match parent.dir.rmdir(&parent.name) {
                Ok(_) => true,
                Err(e)
                    if e.kind() == std::io::ErrorKind::DirectoryNotEmpty
                        || e.kind() == std::io::ErrorKind::AlreadyExists =>
                {
                    false
                }
                Err(e) => {
                    log::warn!("cannot remove directory {}: {e}", dir.display());
                    false
                }
            },
            Ok(None) => true,
            Err(WalkError::NotADirectory { .. }) => true,
            Err(e) => {
                log::warn!("cannot remove directory {}: {e}", dir.display());
                false
            }
        };
        if removed {
            ledger.directories.remove(&dir);
        }
    }
}

/// Whether a file is declared present below the directory `dir`. Keys are normalised absolute
/// paths, kept sorted: those below `dir` follow `dir/` at once, so this is one search, whatever
/// the number of declared files (each chunk of a large converge asks it of every directory).
fn holds_declared(files: &BTreeMap<String, Spec>, dir: &str) -> bool {
    let below = format!("{dir}/");
    (files.range::<str, _>((Bound::Included(below.as_str()), Bound::Unbounded)))
        .take_while(|(path, _)| path.starts_with(&below))
        .any(|(_, spec)| matches!(spec, Spec::Present(_)))
}
