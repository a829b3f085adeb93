//! Files under /etc: content, mode, owner and group. Written atomically beside the target, never
//! through a symlink; an adopted file's original is kept in the store and put back on release;
//! directories the host had to create are removed again once empty.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::{
    Action, Change, Env, Kind, KindError, LedgerAfter, Observations, Outcome, RunContext, Step,
};
use crate::model::declaration::Declaration;
use crate::model::spec::files::{
    configures_unit, content_digest, content_digest_of, digest, Content, Files, Original, Spec,
    DEFAULT_MODE, DEFAULT_SECRET_MODE,
};
use crate::model::spec::Named as _;
use crate::os::accounts::{Account, Accounts};
use crate::os::fsutil::{self, Dir, FileType, PendingWrite, Stamp, Stat, WalkError};
use crate::store::{Cached, Digest, Entry, FilesIndex, Ledger, Origin, Store};
use crate::util::codec;
use crate::util::diff::ContentDiff;
use crate::util::sorted;

#[derive(Debug)]
pub struct Observed {
    state: State,
    /// Declared owner and group resolved against the target's own tables.
    uid: Result<Option<u32>, String>,
    gid: Result<Option<u32>, String>,
    /// What releasing an adopted file puts back (its backup in the store), read only for a file
    /// no longer declared, for the plan's diff.
    original: Option<Vec<u8>>,
}

#[derive(Debug)]
enum State {
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
    units_act_on: Option<HashSet<String>>,
    /// Files changed in this run in a directory systemd may read units from (a path with a
    /// `systemd` component): systemd's confirmation (`kinds::units::confirm`) asks about them
    /// and puts them back (`put_back`) when they reach the host's units.
    pub in_systemd_dirs: BTreeSet<String>,
    /// Files of this run that systemd's confirmation put back, with why (`refused`): written by
    /// the units kind after this kind's outcomes were recorded, so `reconcile` fails them
    /// (`take_refused`) once the units kind is done.
    refused: std::cell::RefCell<Vec<(String, String)>>,
    /// The files index as the run's last observation left it unchanged: kept for the next
    /// chunk of files, so a run reads and checks the index once, not once per chunk.
    index: std::cell::RefCell<Option<FilesIndex>>,
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
enum Held {
    /// As declared; the content's SHA-256, computed once to compare it with the files index, is
    /// kept for the ledger's digest of a file found in sync (`Kind::digest_observed`).
    Declared { sha: [u8; 32] },
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

impl Kind for Files {
    // Each file is written, renamed and synced on its own: nothing spans two chunks but the
    // directories they share, which are looked up and made again as needed.
    const APPLIED_IN_CHUNKS: bool = true;
    type Observed = Observed;
    type Op = Op;
    type Facts = Facts;

    fn digest_observed(spec: &Spec, observed: Option<&Observed>) -> Digest {
        match (spec, observed.map(|o| &o.state)) {
            (
                Spec::Present(c),
                Some(State::Regular {
                    held: Held::Declared { sha },
                    ..
                }),
            ) => content_digest_of(c, sha),
            _ => digest(spec),
        }
    }

    fn observe(
        env: &Env,
        cx: &RunContext,
        keys: &[&str],
    ) -> Result<Observations<Observed>, KindError> {
        let root = Dir::open(env.root).map_err(|e| format!("root {}: {e}", env.root.display()))?;
        let mut accounts: Option<Accounts> = None;
        let index = IndexUse::load(env.store, cx.facts.files.index.take());
        let max = env.config.limits.max_file_bytes;
        let mut looking = Looking::new(&root, index, max, env.diffs);
        // Listed, then made a map at once: full B-tree nodes (see `declaration`'s sections).
        let mut out = Vec::with_capacity(keys.len());
        // Keys come in order: the declared files are walked beside them, not searched for each.
        let mut declared_files = cx.declaration.files.iter().peekable();
        for &key in keys {
            while declared_files
                .next_if(|(k, _)| sorted::compare(k, key).is_lt())
                .is_some()
            {}
            let spec = match declared_files.peek() {
                Some((k, spec)) if sorted::compare(k, key).is_eq() => Some(*spec),
                _ => cx.declaration.files.get(key),
            };
            let content = match spec {
                Some(Spec::Present(c)) => Some(c),
                _ => None,
            };
            let (owner, group) = match content {
                Some(c) => (c.owner(), c.group()),
                None => (None, None),
            };
            let mut resolve =
                |account: Option<&Account>, user: bool| -> Result<Option<u32>, String> {
                    let Some(account) = account else {
                        return Ok(None);
                    };
                    let table = accounts.get_or_insert_with(|| Accounts::read(env.root));
                    if user {
                        table.uid(account)
                    } else {
                        table.gid(account)
                    }
                    .map(Some)
                };
            let uid = resolve(owner, true);
            let gid = resolve(group, false);
            let declared = content.map(|c| Declared::of(&c.bytes));
            let state = looking.at(key, declared.as_ref());
            // Released (not declared at all): an adopted file's original is put back.
            let original = match (spec, env.store) {
                (None, Some(store)) if env.diffs => {
                    store.read_backup(&super::backup_key(Files::NAME, key)).ok()
                }
                _ => None,
            };
            // A path that cannot be read is that file's own problem (`State::Blocked`).
            let observed = Observed {
                state,
                uid,
                gid,
                original,
            };
            out.push((key.to_string(), Ok(observed)));
        }
        *cx.facts.files.index.borrow_mut() = looking.index.save(env.store);
        Ok(out.into_iter().collect())
    }

    fn plan(
        cx: &RunContext,
        key: &str,
        desired: Option<&Spec>,
        observed: Option<&Observed>,
        owned: Option<&Entry<Original>>,
    ) -> Step<Op, Original> {
        let Some(observed) = observed else {
            return Step::Fail(format!("{key} was not observed"));
        };
        match desired {
            Some(Spec::Present(content)) => {
                plan_present(cx, key, content, observed, owned, cx.diffs)
            }
            Some(Spec::Absent) => plan_absent(key, observed, owned, cx.diffs),
            None => plan_release(key, observed, owned, cx.diffs),
        }
    }

    fn apply(
        env: &Env,
        cx: &RunContext,
        ledger: &mut Ledger,
        changes: &[Change<Op, Original>],
    ) -> Vec<Outcome> {
        let fail_all = |message: String| -> Vec<Outcome> {
            changes
                .iter()
                .map(|_| Outcome::Failed(message.clone().into()))
                .collect()
        };
        // The index a chunk's observation kept describes the files before this apply: the next
        // chunk reads the one `verify` leaves.
        cx.facts.files.index.take();
        let root = match Dir::open(env.root) {
            Ok(root) => root,
            Err(e) => return fail_all(format!("root {}: {e}", env.root.display())),
        };
        // Write-ahead for directories too: the ledger lists every directory this run will create
        // before it exists, so a crash cannot leave one the host would never remove.
        let mut looked_at = HashSet::new();
        let upcoming: Vec<PathBuf> = changes
            .iter()
            .filter(|c| matches!(c.op, Op::Write { .. } | Op::Restore(_)))
            .filter(|c| looked_at.insert(Path::new(&c.key).parent()))
            .flat_map(|c| missing_directories(&root, Path::new(&c.key)))
            .filter(|d| !ledger.directories.contains(d))
            .collect();
        if !upcoming.is_empty() {
            ledger.directories.extend(upcoming);
            if let Some(store) = env.store {
                if let Err(e) = store.save_ledger(ledger) {
                    return fail_all(e.to_string());
                }
            }
        }
        let mut parents = ParentDirs::new(&root);
        let mut written = Vec::new();
        let mut outcomes: Vec<Outcome> = changes
            .iter()
            .enumerate()
            .map(|(i, change)| {
                if (env.interrupted)() {
                    return Outcome::Stopped;
                }
                match apply_one(env, cx, &mut parents, ledger, &change.key, &change.op) {
                    Ok(Some(pending)) => {
                        written.push((i, pending));
                        Outcome::Done
                    }
                    Ok(None) => Outcome::Done,
                    Err(e) => Outcome::Failed(e.into()),
                }
            })
            .collect();
        // The new contents are written but not in place: made durable all at once (one sync per
        // filesystem instead of an fsync per file), then renamed, so no name ever points at data
        // that is not on disk.
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
        // The renames are durable once their directories are: a write whose directory cannot be
        // synced has not happened as far as the ledger is concerned.
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
        drop(parents);
        remove_unneeded_directories(&root, cx, ledger);
        outcomes
    }

    fn note(
        declaration: &Declaration,
        facts: &mut Facts,
        change: &Change<Op, Original>,
        outcome: &Outcome,
    ) {
        if *outcome != Outcome::Done || matches!(change.op, Op::Forget) {
            return;
        }
        if let Some(unit) = configures_unit(&change.key) {
            facts.unit_config.insert(unit.to_string());
        }
        if Path::new(&change.key)
            .components()
            .any(|c| c.as_os_str() == "systemd")
        {
            facts.in_systemd_dirs.insert(change.key.clone());
        }
        let units_act_on = facts.units_act_on.get_or_insert_with(|| {
            (declaration.units.values())
                .flat_map(|unit| unit.restart_on.iter().chain(&unit.reload_on))
                .cloned()
                .collect()
        });
        if units_act_on.contains(&change.key) {
            facts.changed.insert(change.key.clone());
        }
    }
}

/// Parent directories opened during one observation, so many files in one directory cost one
/// walk from the root (each still opened one component at a time, never through a symlink).
#[derive(Default)]
struct ParentCache {
    /// By the directory's path (keys are normalised, so its text is its identity).
    dirs: HashMap<String, Result<Option<Dir>, String>>,
}

/// The files index during one observation (see `store::FilesIndex`): the index as read, when
/// the observation began on the file clock, and the entries it changes.
struct IndexUse<'k> {
    old: FilesIndex,
    observed_from_ns: i64,
    updates: Vec<(&'k str, Option<Cached>)>,
}

impl<'k> IndexUse<'k> {
    /// Without a store (planning before the first apply) every file is read. `kept`: the index
    /// an earlier observation in this run read and left unchanged, used instead of reading it.
    fn load(store: Option<&Store>, kept: Option<FilesIndex>) -> IndexUse<'k> {
        IndexUse {
            // Taken before any file is looked at: only files changed before it can be trusted.
            observed_from_ns: fsutil::file_clock_now_ns(),
            old: kept
                .or_else(|| store.map(Store::files_index))
                .unwrap_or_default(),
            updates: Vec::new(),
        }
    }

    /// Whether the index says the file `key`, now stamped `stamp`, holds `declared`: it had that
    /// stamp when the host last saw it hold content with the declared digest.
    fn vouches(&self, key: &str, stamp: &Stamp, declared: &Declared) -> bool {
        match self.old.get(key) {
            Some(cached) => {
                cached.stamp == *stamp
                    && stamp.size == declared.bytes.len() as u64
                    && cached.digest == declared.sha
            }
            None => false,
        }
    }

    /// The file `key` was read with `stamp` and holds `declared`: kept, unless it changed too
    /// recently for its stamp to tell a later change (`fsutil::is_cacheable`).
    fn confirm(&mut self, key: &'k str, stamp: Stamp, declared: &Declared) {
        if !fsutil::is_cacheable(&stamp, self.observed_from_ns) {
            return self.forget(key);
        }
        let cached = Cached {
            stamp,
            digest: declared.sha,
        };
        if self.old.get(key) != Some(cached) {
            self.updates.push((key, Some(cached)));
        }
    }

    /// The file `key` is not (or no longer known to be) as declared.
    fn forget(&mut self, key: &'k str) {
        if self.old.get(key).is_some() {
            self.updates.push((key, None));
        }
    }

    /// Writes the index back if any entry changed. A cache: failing to save it costs the next
    /// run reading files again, so it is only logged. The index as read when nothing changed
    /// (it is still the file's), to be used by the next observation.
    fn save(self, store: Option<&Store>) -> Option<FilesIndex> {
        let store = store?;
        if self.updates.is_empty() {
            return Some(self.old);
        }
        if let Err(e) = store.save_files_index(&self.old, self.updates) {
            log::warn!("{e}; the next run reads the files again");
        }
        None
    }
}

/// Declared content, with its SHA-256 (what the files index keeps of it).
#[derive(Debug, Clone, Copy)]
struct Declared<'c> {
    bytes: &'c [u8],
    sha: [u8; 32],
}

impl<'c> Declared<'c> {
    fn of(bytes: &'c [u8]) -> Declared<'c> {
        Declared {
            bytes,
            sha: codec::sha256(bytes),
        }
    }
}

/// What one observation looks at files with: the root, the directories walked to so far, a
/// buffer each file is read into in turn, the files index, and the size limit.
struct Looking<'r, 'k> {
    root: &'r Dir,
    parents: ParentCache,
    buffer: Vec<u8>,
    index: IndexUse<'k>,
    max: u64,
    /// Whether a file with no declared content is read (for a plan's diff of its removal).
    read_undeclared: bool,
}

impl<'r, 'k> Looking<'r, 'k> {
    fn new(root: &'r Dir, index: IndexUse<'k>, max: u64, read_undeclared: bool) -> Looking<'r, 'k> {
        Looking {
            root,
            parents: ParentCache::default(),
            buffer: Vec::new(),
            index,
            max,
            read_undeclared,
        }
    }

    /// Observes one file. With `declared` content, the file is read and compared, unless the
    /// files index vouches for it; without, it is only looked at. A file not found as declared
    /// is forgotten by the index.
    fn at(&mut self, key: &'k str, declared: Option<&Declared>) -> State {
        let state = self.stamped(key, declared);
        if !matches!(
            state,
            State::Regular {
                held: Held::Declared { .. },
                ..
            }
        ) {
            self.index.forget(key);
        }
        state
    }

    fn stamped(&mut self, key: &'k str, declared: Option<&Declared>) -> State {
        let Looking {
            root,
            parents,
            buffer,
            index,
            max,
            read_undeclared,
        } = self;
        let (root, max) = (*root, *max);
        let Some((parent_path, name)) = key.rsplit_once('/') else {
            return State::Blocked(format!("{key}: not a file path"));
        };
        let name = std::ffi::OsStr::new(name);
        if !parents.dirs.contains_key(parent_path) {
            let found = match fsutil::walk_to_parent(root, Path::new(key), false) {
                Ok(found) => Ok(found.map(|p| p.dir)),
                Err(e) => Err(e.to_string()),
            };
            parents.dirs.insert(parent_path.to_string(), found);
        }
        let Some(parent) = parents.dirs.get(parent_path) else {
            return State::Blocked(format!("{key}: its directory was not looked at"));
        };
        let dir = match parent {
            Ok(Some(dir)) => dir,
            Ok(None) => return State::Missing,
            Err(e) => return State::Blocked(e.clone()),
        };
        match dir.stat_stamped(name) {
            Ok(None) => State::Missing,
            Ok(Some((st, _))) if st.file_type != FileType::Regular => State::Other(st.file_type),
            Ok(Some((stat, stamp))) => {
                let Some(declared) = declared else {
                    // To be removed or replaced: read for the plan's diff, if it can be.
                    let held = match read_undeclared {
                        false => Held::Unread,
                        true => match dir.read_after_stat(name, &stat, max, buffer) {
                            Ok(true) => Held::Other(std::mem::take(buffer)),
                            Ok(false) => return State::Missing,
                            Err(_) => Held::Unread,
                        },
                    };
                    return State::Regular { stat, held };
                };
                if index.vouches(key, &stamp, declared) {
                    return State::Regular {
                        stat,
                        held: Held::Declared { sha: declared.sha },
                    };
                }
                match dir.read_after_stat(name, &stat, max, buffer) {
                    Ok(true) => {
                        let held = if buffer.as_slice() == declared.bytes {
                            index.confirm(key, stamp, declared);
                            Held::Declared { sha: declared.sha }
                        } else {
                            Held::Other(std::mem::take(buffer))
                        };
                        State::Regular { stat, held }
                    }
                    Ok(false) => State::Missing,
                    Err(e) => State::Blocked(format!("{key}: {e}")),
                }
            }
            Err(e) => State::Blocked(format!("{key}: {e}")),
        }
    }
}

/// `diffs`: whether the change carries a content diff (`RunContext::diffs`).
fn plan_present(
    cx: &RunContext,
    key: &str,
    content: &Content,
    observed: &Observed,
    owned: Option<&Entry<Original>>,
    diffs: bool,
) -> Step<Op, Original> {
    let (uid, gid) = match (&observed.uid, &observed.gid) {
        (Ok(u), Ok(g)) => (*u, *g),
        (Err(e), _) => return Step::Fail(format!("owner: {e}")),
        (_, Err(e)) => return Step::Fail(format!("group: {e}")),
    };
    // Only a change needs the digest: a no-op over many files must not hash each one again.
    let after = || LedgerAfter::Applied(content_digest(content));
    match &observed.state {
        State::Blocked(e) => Step::Fail(e.clone()),
        State::Other(t) => Step::Fail(format!(
            "{key} is {}; mesh-host does not replace it",
            t.describe()
        )),
        State::Missing => {
            let mode = match content.is_secret() {
                true => content.mode.unwrap_or(DEFAULT_SECRET_MODE),
                false => content.mode.unwrap_or(DEFAULT_MODE),
            };
            let owner =
                (uid.is_some() || gid.is_some()).then(|| (uid.unwrap_or(0), gid.unwrap_or(0)));
            Step::Change(Change {
                key: key.to_string(),
                action: Action::Create,
                details: vec![match content.is_secret() {
                    true => format!(
                        "secret, {}, mode {mode:04o}",
                        cx.secret_summary(&content.bytes)
                    ),
                    false => format!("{} bytes, mode {mode:04o}", content.bytes.len()),
                }]
                .into(),
                diff: diffs.then(|| {
                    Box::new(ContentDiff::new(
                        "absent",
                        "declared",
                        None,
                        Some(&content.bytes),
                        shows_content(Some(content), &[]),
                    ))
                }),
                intent: owned.is_none().then(|| Box::new(Entry::created())),
                backup: None,
                after: after(),
                op: Op::Write { mode, owner },
            })
        }
        State::Regular { stat, held } => {
            let mut details = Vec::new();
            let original = match held {
                Held::Declared { .. } => &content.bytes[..],
                Held::Other(bytes) => &bytes[..],
                Held::Unread => return Step::Fail(format!("{key} was not read")),
            };
            let content_differs = matches!(held, Held::Other(_));
            if content_differs && content.is_secret() {
                details.push(format!(
                    "secret content ({} -> {})",
                    cx.secret_summary(original),
                    cx.secret_summary(&content.bytes)
                ));
            } else if content_differs {
                details.push(format!(
                    "content ({} -> {} bytes)",
                    original.len(),
                    content.bytes.len()
                ));
            }
            let mode = content.mode.unwrap_or(stat.mode);
            if mode != stat.mode {
                details.push(format!("mode {:04o} -> {mode:04o}", stat.mode));
            }
            let (new_uid, new_gid) = (uid.unwrap_or(stat.uid), gid.unwrap_or(stat.gid));
            if new_uid != stat.uid {
                details.push(format!("owner {} -> {new_uid}", stat.uid));
            }
            if new_gid != stat.gid {
                details.push(format!("group {} -> {new_gid}", stat.gid));
            }
            let (intent, backup) = match owned {
                Some(_) => (None, None),
                None => (Some(adopted_entry(key, stat)), Some(original.to_vec())),
            };
            if details.is_empty() {
                return match (intent, backup) {
                    (Some(intent), backup) => Step::Adopt { intent, backup },
                    _ => Step::InSync,
                };
            }
            let owner = Some((new_uid, new_gid));
            let op = if content_differs {
                Op::Write { mode, owner }
            } else {
                Op::SetAttributes { mode, owner }
            };
            let diff = (content_differs && diffs).then(|| {
                Box::new(ContentDiff::new(
                    "on the machine",
                    "declared",
                    Some(original),
                    Some(&content.bytes),
                    shows_content(Some(content), &[stat.mode]),
                ))
            });
            Step::Change(Change {
                key: key.to_string(),
                action: Action::Update,
                details: details.into(),
                diff,
                intent: intent.map(Box::new),
                backup: backup.map(Vec::into_boxed_slice),
                after: after(),
                op,
            })
        }
    }
}

/// Whether a file's content may be shown in a plan's diff: the one place that decides, for a
/// declared file (`declared`) and for one being removed or released (`None`), given the modes
/// its content has on the machine (`modes`: the file's now, an original's to be put back).
/// Never a secret (`is_secret`); nor, unless declared `"secret": false`, content the machine
/// keeps from others (by the same rule, a mode without read for others), as what a file no longer
/// declared held is judged by. Content not shown is summarised by its sizes.
fn shows_content(declared: Option<&Content>, modes: &[u32]) -> bool {
    let others_read = modes.iter().all(|mode| mode & 0o004 != 0);
    match declared {
        Some(c) if c.secret == Some(false) => true,
        Some(c) => !c.is_secret() && others_read,
        None => others_read,
    }
}

/// The diff of a file about to be removed (`put_back`: `None`) or to get its original back: what
/// it holds now (when it could be read) against what it will hold.
fn removal_diff(observed: &Observed, put_back: Option<(&[u8], u32)>) -> Option<Box<ContentDiff>> {
    let mut modes = Vec::new();
    let now = match &observed.state {
        State::Regular {
            held: Held::Other(bytes),
            stat,
        } => {
            modes.push(stat.mode);
            Some(&bytes[..])
        }
        State::Missing => None,
        _ => return None,
    };
    modes.extend(put_back.map(|(_, mode)| mode));
    let put_back = put_back.map(|(bytes, _)| bytes);
    let (from, to) = match (now, put_back) {
        (None, None) => return None,
        (Some(_), None) => ("on the machine", "absent"),
        (None, Some(_)) => ("absent", "original"),
        (Some(_), Some(_)) => ("on the machine", "original"),
    };
    Some(Box::new(ContentDiff::new(
        from,
        to,
        now,
        put_back,
        shows_content(None, &modes),
    )))
}

fn adopted_entry(key: &str, stat: &Stat) -> Entry<Original> {
    let original = Original {
        backup: super::backup_key(Files::NAME, key),
        mode: stat.mode,
        uid: stat.uid,
        gid: stat.gid,
    };
    Entry::adopted(Some(original))
}

fn plan_absent(
    key: &str,
    observed: &Observed,
    owned: Option<&Entry<Original>>,
    diffs: bool,
) -> Step<Op, Original> {
    let (op, detail) = match &observed.state {
        State::Missing if owned.is_none() => return Step::InSync,
        State::Missing => (Op::Forget, "already absent"),
        State::Regular { .. } | State::Other(FileType::Symlink) => (Op::Remove, "declared absent"),
        State::Other(t) => {
            return Step::Fail(format!(
                "{key} is {}; mesh-host does not remove it",
                t.describe()
            ))
        }
        State::Blocked(e) => return Step::Fail(e.clone()),
    };
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Remove,
        details: vec![detail.to_string()].into(),
        diff: diffs.then(|| removal_diff(observed, None)).flatten(),
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

fn plan_release(
    key: &str,
    observed: &Observed,
    owned: Option<&Entry<Original>>,
    diffs: bool,
) -> Step<Op, Original> {
    let Some(entry) = owned else {
        return Step::InSync;
    };
    let (action, op, detail) = match (entry.origin, &observed.state) {
        (_, State::Blocked(e)) => return Step::Fail(e.clone()),
        (Origin::Created, State::Missing) => (
            Action::Remove,
            Op::Forget,
            "released; already gone".to_string(),
        ),
        (Origin::Created, State::Regular { .. } | State::Other(FileType::Symlink)) => (
            Action::Remove,
            Op::Remove,
            "released; mesh-host created it".to_string(),
        ),
        (Origin::Created, State::Other(t)) => {
            return Step::Fail(format!(
                "{key} is now {}; mesh-host does not remove it",
                t.describe()
            ))
        }
        (Origin::Adopted, _) => match &entry.original {
            Some(original) => (
                Action::Update,
                Op::Restore(Original::clone(original)),
                "released; original restored".to_string(),
            ),
            None => return Step::Fail("the ledger keeps no record of the original".to_string()),
        },
    };
    let diff = match &op {
        _ if !diffs => None,
        Op::Remove => removal_diff(observed, None),
        Op::Restore(original) => (observed.original.as_deref())
            .and_then(|o| removal_diff(observed, Some((o, original.mode)))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action,
        details: vec![detail].into(),
        diff,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

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
    let mut parents = ParentDirs::new(&root);
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

/// Carries out one change; a write gives back its temp file, to be renamed once every written
/// file is durable (see `Files::apply`).
fn apply_one(
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
        Op::Restore(original) => {
            let store = env.store.ok_or("no store to restore the original from")?;
            let bytes = store
                .read_backup(&original.backup)
                .map_err(|e| e.to_string())?;
            refuse_non_file(&parent, key)?;
            parent
                .dir
                .write_atomic_unsynced(
                    &parent.name,
                    &bytes,
                    original.mode,
                    Some((original.uid, original.gid)),
                )
                .map(|()| None)
                .map_err(|e| io("restore the original", e))
        }
        Op::Forget => parent
            .dir
            .remove_temp(&parent.name)
            .map(|()| None)
            .map_err(|e| io("remove", e)),
    }
}

/// The parent directories one `apply` writes into, each walked to once (not once per file), with
/// the ones that took an unsynced rename.
struct ParentDirs<'r> {
    root: &'r Dir,
    dirs: HashMap<PathBuf, (Dir, bool)>,
}

/// A file's parent directory as `apply_one` needs it.
struct ParentRef<'d> {
    dir: &'d Dir,
    name: std::ffi::OsString,
    /// Directories the walk to it created (only the first time).
    created: Vec<PathBuf>,
}

impl<'r> ParentDirs<'r> {
    fn new(root: &'r Dir) -> Self {
        ParentDirs {
            root,
            dirs: HashMap::new(),
        }
    }

    /// `None` when the parent is missing and `create` is false. Marks the directory as one to
    /// sync, since every caller changes a name in it.
    fn get(&mut self, path: &Path, create: bool) -> Result<Option<ParentRef<'_>>, WalkError> {
        let (Some(dir_path), Some(name)) = (path.parent(), path.file_name()) else {
            return fsutil::walk_to_parent(self.root, path, create).map(|_| None);
        };
        let mut created = Vec::new();
        if !self.dirs.contains_key(dir_path) {
            let Some(parent) = fsutil::walk_to_parent(self.root, path, create)? else {
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
    fn sync_filesystems(&self) -> Result<(), String> {
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
    fn sync(&self) -> Vec<(PathBuf, std::io::Error)> {
        self.dirs
            .iter()
            .filter(|(_, (_, dirty))| *dirty)
            .filter_map(|(path, (dir, _))| dir.sync().err().map(|e| (path.clone(), e)))
            .collect()
    }
}

/// The directories above `path` that do not exist yet, outermost first. An unreachable path
/// gives what was found so far; applying it reports the problem.
fn missing_directories(root: &Dir, path: &Path) -> Vec<PathBuf> {
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
fn refuse_non_file(parent: &ParentRef, key: &str) -> Result<(), String> {
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
fn remove_unneeded_directories(root: &Dir, cx: &RunContext, ledger: &mut Ledger) {
    // Every directory above a declared file, once: one pass over the files, not one per directory.
    // Keys are normalised absolute paths, so their ancestors are their prefixes before each '/'.
    let needed: HashSet<&str> = cx
        .declaration
        .files
        .iter()
        .filter(|(_, spec)| matches!(spec, Spec::Present(_)))
        .flat_map(|(path, _)| path.rmatch_indices('/').map(|(at, _)| &path[..at]))
        .collect();
    let mut dirs: Vec<PathBuf> = ledger
        .directories
        .iter()
        .filter(|d| !d.to_str().is_some_and(|d| needed.contains(d)))
        .cloned()
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in dirs {
        let removed = match fsutil::walk_to_parent(root, &dir, false) {
            Ok(Some(parent)) => match parent.dir.rmdir(&parent.name) {
                Ok(_) => true,
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOTEMPTY)
                        || e.raw_os_error() == Some(libc::EEXIST) =>
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Details;
    use crate::model::declaration::tests::{check_refused, parse_with_defaults, problems};
    use crate::model::spec::files::is_secret;

    #[test]
    fn path_rules() {
        for (path, message) in [
            ("etc/x", "not absolute"),
            ("/etc/x/", "ends with '/'"),
            ("/etc//x", "empty component"),
            ("/etc/./x", "\".\" component"),
            ("/etc/../root/x", "\"..\" component"),
            ("/root/x", "not under /etc"),
            ("/etc", "not under /etc"),
            ("/etc\u{0}x", "NUL"),
        ] {
            let json = format!(
                r#"{{"schema": 1, "files": {{{}: {{"content": ""}}}}}}"#,
                serde_json::Value::String(path.into())
            );
            check_refused(&json, &[message]);
        }
    }

    #[test]
    fn field_rules() {
        let cases = [
            (
                r#"{"content": "x", "mode": "0999"}"#,
                r#"files["/etc/x"].mode: "0999" is not an octal mode"#,
            ),
            (
                r#"{"content": "x", "mode": "644x"}"#,
                "is not an octal mode",
            ),
            (
                r#"{"content": "x", "mode": 644}"#,
                "mode: must be a string, not a number",
            ),
            (r#"{"content": "x", "content_base64": "eA=="}"#, "not both"),
            (r#"{"mode": "0644"}"#, "content: missing"),
            (
                r#"{"content_base64": "e!=="}"#,
                "content_base64: is not valid base64",
            ),
            (
                r#"{"content": "x", "owner": "-r"}"#,
                "owner: \"-r\" is not a valid user or group name",
            ),
            (
                r#"{"state": "absent", "content": "x"}"#,
                "content: makes no sense for a file declared absent",
            ),
            (
                r#"{"state": "gone", "content": ""}"#,
                "state: \"gone\" is not a state",
            ),
            (
                r#"{"content": "x", "contnet": "y"}"#,
                "unknown field \"contnet\"",
            ),
        ];
        for (body, message) in cases {
            check_refused(
                &format!(r#"{{"schema": 1, "files": {{"/etc/x": {body}}}}}"#),
                &[message],
            );
        }
    }

    #[test]
    fn content_limit() {
        let mut config = crate::model::declaration::tests::test_config();
        config.limits.max_file_bytes = 4;
        let json = r#"{"schema": 1, "files": {"/etc/x": {"content": "12345"}}}"#;
        let err = crate::model::declaration::parse(
            json.as_bytes(),
            &crate::model::declaration::Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("content: is 5 bytes, more than the limit of 4 bytes"),
            "{err}"
        );
    }

    #[test]
    fn refuses_the_hosts_own_config_directory() {
        check_refused(
            r#"{"schema": 1, "files": {"/etc/mesh-host/config.json": {"content": "{}"}}}"#,
            &["refused", "/etc/mesh-host is the host's own configuration"],
        );
    }

    #[test]
    fn refuses_the_hosts_own_unit_file() {
        check_refused(
            r#"{"schema": 1, "files": {"/etc/systemd/system/mesh-host.service": {"content": ""}}}"#,
            &["refused", "own unit mesh-host.service"],
        );
    }

    #[test]
    fn refuses_the_hosts_own_drop_ins_and_links() {
        for path in [
            "/etc/systemd/system/mesh-host.service.d/override.conf",
            "/etc/systemd/system/multi-user.target.wants/mesh-host.service",
            "/etc/systemd/system/agent.service",
        ] {
            let json = format!(r#"{{"schema": 1, "files": {{"{path}": {{"content": ""}}}}}}"#);
            check_refused(&json, &["refused", "the host's own unit"]);
        }
    }

    #[test]
    fn refuses_the_hosts_own_store() {
        // The test config puts the store at /srv/mesh-store; files must be under /etc, so use a
        // store under /etc to show the refusal names the store.
        let mut config = crate::model::declaration::tests::test_config();
        config
            .identity
            .state_dirs
            .push(PathBuf::from("/etc/mesh-store"));
        let json = r#"{"schema": 1, "files": {"/etc/mesh-store/ledger.json": {"content": "{}"}}}"#;
        let err = crate::model::declaration::parse(
            json.as_bytes(),
            &crate::model::declaration::Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("/etc/mesh-store is the host's own store"),
            "{err}"
        );
    }

    #[test]
    fn other_units_files_are_fine() {
        assert!(problems(r#"{"schema": 1, "files": {"/etc/systemd/system/mesh-hostile.service": {"content": ""}}}"#).is_empty());
    }

    fn observed(state: State) -> Observed {
        Observed {
            state,
            uid: Ok(None),
            gid: Ok(None),
            original: None,
        }
    }

    fn stat(size: usize, mode: u32) -> Stat {
        Stat {
            file_type: FileType::Regular,
            mode,
            uid: 0,
            gid: 0,
            size: size as u64,
        }
    }

    /// A file holding something other than the declared content.
    fn regular(bytes: &[u8], mode: u32) -> State {
        State::Regular {
            stat: stat(bytes.len(), mode),
            held: Held::Other(bytes.to_vec()),
        }
    }

    /// A file holding the declared content.
    fn as_declared(size: usize, mode: u32) -> State {
        State::Regular {
            stat: stat(size, mode),
            held: Held::Declared { sha: [0; 32] },
        }
    }

    fn plan_for(
        json_spec: &str,
        state: State,
        owned: Option<&Entry<Original>>,
    ) -> Step<Op, Original> {
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/x": {json_spec}}}}}"#
        ))
        .unwrap();
        let cx = RunContext::new(&d, false);
        Files::plan(
            &cx,
            "/etc/x",
            d.files.get("/etc/x"),
            Some(&observed(state)),
            owned,
        )
    }

    fn summary(step: Step<Op, Original>) -> String {
        match step {
            Step::InSync => "in sync".into(),
            Step::Adopt { intent, .. } => format!("adopt {:?}", intent.origin),
            Step::Fail(e) | Step::Skip(e) => format!("fail: {e}"),
            Step::Change(c) => format!(
                "{} {} intent={:?} backup={} {:?}",
                c.action.symbol(),
                c.details.join(", "),
                c.intent.map(|e| e.origin),
                c.backup.is_some(),
                c.op
            )
            .split(" {")
            .next()
            .unwrap_or_default()
            .to_string(),
        }
    }

    #[test]
    fn planner_cases() {
        let created = Entry::created();
        let adopted = adopted_entry(
            "/etc/x",
            &Stat {
                file_type: FileType::Regular,
                mode: 0o600,
                uid: 0,
                gid: 0,
                size: 3,
            },
        );
        let cases: Vec<(&str, State, Option<&Entry<Original>>, &str)> = vec![
            (
                r#"{"content": "hi"}"#,
                State::Missing,
                None,
                "+ 2 bytes, mode 0644 intent=Some(Created) backup=false Write",
            ),
            (
                r#"{"content": "hi"}"#,
                as_declared(2, 0o600),
                None,
                "adopt Adopted",
            ),
            (
                r#"{"content": "hi"}"#,
                as_declared(2, 0o600),
                Some(&created),
                "in sync",
            ),
            (
                r#"{"content": "hi", "mode": "0644"}"#,
                as_declared(2, 0o600),
                Some(&created),
                "~ mode 0600 -> 0644 intent=None backup=false SetAttributes",
            ),
            (
                r#"{"content": "hi"}"#,
                regular(b"old", 0o600),
                None,
                "~ content (3 -> 2 bytes) intent=Some(Adopted) backup=true Write",
            ),
            (
                r#"{"content": "hi"}"#,
                State::Other(FileType::Directory),
                None,
                "fail: /etc/x is a directory; mesh-host does not replace it",
            ),
            (
                r#"{"content": "hi"}"#,
                State::Other(FileType::Symlink),
                None,
                "fail: /etc/x is a symlink; mesh-host does not replace it",
            ),
            (
                r#"{"content": "hi"}"#,
                State::Blocked("/etc is a symlink".into()),
                None,
                "fail: /etc is a symlink",
            ),
            (r#"{"state": "absent"}"#, State::Missing, None, "in sync"),
            (
                r#"{"state": "absent"}"#,
                regular(b"x", 0o644),
                None,
                "- declared absent intent=None backup=false Remove",
            ),
            (
                r#"{"state": "absent"}"#,
                State::Missing,
                Some(&created),
                "- already absent intent=None backup=false Forget",
            ),
        ];
        for (spec, state, owned, want) in cases {
            assert_eq!(summary(plan_for(spec, state, owned)), want, "{spec}");
        }
        let d = parse_with_defaults(r#"{"schema": 1}"#).unwrap();
        let cx = RunContext::new(&d, false);
        let release = |state, owned| {
            summary(Files::plan(
                &cx,
                "/etc/x",
                None,
                Some(&observed(state)),
                owned,
            ))
        };
        assert_eq!(release(regular(b"x", 0o644), None), "in sync");
        assert_eq!(
            release(regular(b"x", 0o644), Some(&created)),
            "- released; mesh-host created it intent=None backup=false Remove"
        );
        assert_eq!(
            release(State::Missing, Some(&created)),
            "- released; already gone intent=None backup=false Forget"
        );
        assert!(release(regular(b"x", 0o644), Some(&adopted))
            .starts_with("~ released; original restored"));
    }

    /// `is_secret`: declared, or by default a mode that lets others not read the file.
    #[test]
    fn a_file_is_secret_when_declared_or_by_its_mode() {
        for (spec, secret) in [
            (r#"{"content": "x"}"#, false),
            (r#"{"content": "x", "mode": "0644"}"#, false),
            (r#"{"content": "x", "mode": "0600"}"#, true),
            (r#"{"content": "x", "mode": "0640"}"#, true),
            (r#"{"content": "x", "mode": "0400"}"#, true),
            (r#"{"content": "x", "mode": "4750"}"#, true),
            (
                r#"{"content": "x", "mode": "0600", "secret": false}"#,
                false,
            ),
            (r#"{"content": "x", "mode": "0644", "secret": true}"#, true),
            (r#"{"content": "x", "secret": true}"#, true),
            (r#"{"state": "absent"}"#, false),
        ] {
            let d = parse_with_defaults(&format!(
                r#"{{"schema": 1, "files": {{"/etc/x": {spec}}}}}"#
            ))
            .unwrap();
            assert_eq!(is_secret(&d.files["/etc/x"]), secret, "{spec}");
        }
        check_refused(
            r#"{"schema": 1, "files": {"/etc/x": {"state": "absent", "secret": true}}}"#,
            &["secret: makes no sense for a file declared absent"],
        );
        check_refused(
            r#"{"schema": 1, "files": {"/etc/x": {"content": "x", "secret": "yes"}}}"#,
            &["secret: must be"],
        );
    }

    /// A secret file's change shows sizes and keyed digests (the same content, the same digest;
    /// another key, another digest), never the content nor its plain SHA-256.
    #[test]
    fn a_secret_files_change_shows_sizes_and_keyed_digests_only() {
        let canary = "password=canary-7f3a";
        let d = parse_with_defaults(&format!(
            r#"{{"schema": 1, "files": {{"/etc/x": {{"content": "{canary}\n", "mode": "0600"}}}}}}"#
        ))
        .unwrap();
        let details = |key: Option<[u8; 32]>, state: State| {
            let mut cx = RunContext::new(&d, false);
            cx.digest_key = key;
            let step = Files::plan(
                &cx,
                "/etc/x",
                d.files.get("/etc/x"),
                Some(&observed(state)),
                None,
            );
            summary(step)
        };
        let key = Some([7; 32]);
        let keyed =
            |bytes: &[u8]| codec::hex(&codec::hmac_sha256(&[7; 32], bytes))[..16].to_string();
        let new = keyed(
            format!(
                "{canary}
"
            )
            .as_bytes(),
        );
        assert_eq!(
            details(
                key,
                regular(
                    b"password=old
",
                    0o600
                )
            ),
            format!(
                "~ secret content (13 bytes, keyed digest {} -> 21 bytes, keyed digest {new}) \
                 intent=Some(Adopted) backup=true Write",
                keyed(
                    b"password=old
"
                )
            )
        );
        assert_eq!(
            details(key, State::Missing),
            format!("+ secret, 21 bytes, keyed digest {new}, mode 0600 intent=Some(Created) backup=false Write")
        );
        let other_key = details(Some([8; 32]), State::Missing);
        assert!(!other_key.contains(&new), "{other_key}");
        let plain = codec::sha256_hex(
            format!(
                "{canary}
"
            )
            .as_bytes(),
        );
        for shown in [
            details(key, State::Missing),
            details(None, regular(b"x", 0o600)),
            other_key,
        ] {
            assert!(
                !shown.contains("canary") && !shown.contains(&plain[..16]),
                "{shown}"
            );
        }
        assert_eq!(
            details(None, regular(b"x", 0o600)),
            "~ secret content (1 bytes -> 21 bytes) intent=Some(Adopted) backup=true Write"
        );
        let undeclared_mode = plan_for(r#"{"content": "x", "secret": true}"#, State::Missing, None);
        assert_eq!(
            summary(undeclared_mode),
            "+ secret, 1 bytes, mode 0600 intent=Some(Created) backup=false Write"
        );
    }

    /// A refusal quoting a line of secret content (a directive naming the host's unit) is
    /// shown with the line scrubbed.
    #[test]
    fn a_refusal_of_secret_content_does_not_quote_it() {
        let json = r#"{"schema": 1, "files": {"/etc/systemd/system/a.service.d/x.conf": {"content": "[Unit]\nRequires=mesh-host.service canary-unit\n", "secret": true}}}"#;
        let err = problems(json).join("\n");
        assert!(err.contains("the host's own unit"), "{err}");
        assert!(!err.contains("canary-unit"), "{err}");
        let plain = json.replace(r#", "secret": true"#, "");
        assert!(problems(&plain).join("\n").contains("canary-unit"));
    }

    #[test]
    fn missing_directories_are_found_outermost_first() {
        let tmp = crate::util::testutil::TempDir::new("missing-dirs");
        std::fs::create_dir_all(tmp.path().join("etc/app")).unwrap();
        let root = Dir::open(tmp.path()).unwrap();
        assert_eq!(
            missing_directories(&root, Path::new("/etc/app/a/b/conf")),
            vec![PathBuf::from("/etc/app/a"), PathBuf::from("/etc/app/a/b")]
        );
        assert!(missing_directories(&root, Path::new("/etc/app/conf")).is_empty());
    }

    #[test]
    fn observation_keeps_a_files_content_only_when_it_differs() {
        let tmp = crate::util::testutil::TempDir::new("observe-held");
        std::fs::create_dir_all(tmp.path().join("etc/app")).unwrap();
        std::fs::write(tmp.path().join("etc/app/same"), "declared").unwrap();
        std::fs::write(tmp.path().join("etc/app/other"), "edited").unwrap();
        let root = Dir::open(tmp.path()).unwrap();
        let mut looking = Looking::new(&root, IndexUse::load(None, None), 100, true);
        let mut observe = |key: &'static str, declared: Option<&[u8]>| {
            held(looking.at(key, declared.map(Declared::of).as_ref()))
        };
        assert_eq!(observe("/etc/app/same", Some(b"declared")), "Declared");
        assert_eq!(
            observe("/etc/app/other", Some(b"declared")),
            format!("{:?}", Held::Other(b"edited".to_vec()))
        );
        // No content declared (to be removed or released): what it holds, for the plan's diff.
        assert_eq!(
            observe("/etc/app/other", None),
            format!("{:?}", Held::Other(b"edited".to_vec()))
        );
        assert_eq!(observe("/etc/app/gone", Some(b"declared")), "Missing");
        // The directory was walked to once for all four.
        assert_eq!(looking.parents.dirs.len(), 1);
    }

    #[test]
    fn unknown_owner_fails_that_file_only() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/x": {"content": "a", "owner": "www"}}}"#,
        )
        .unwrap();
        let cx = RunContext::new(&d, false);
        let obs = Observed {
            state: State::Missing,
            uid: Err("user \"www\" does not exist".into()),
            gid: Ok(None),
            original: None,
        };
        let step = Files::plan(&cx, "/etc/x", d.files.get("/etc/x"), Some(&obs), None);
        assert_eq!(summary(step), "fail: owner: user \"www\" does not exist");
    }

    /// A scratch root holding `/etc/app/conf` ("declared") and a store beside it.
    fn root_with_one_file(label: &str) -> (crate::util::testutil::TempDir, Dir, Store) {
        let tmp = crate::util::testutil::TempDir::new(label);
        std::fs::create_dir_all(tmp.path().join("root/etc/app")).unwrap();
        std::fs::write(tmp.path().join("root/etc/app/conf"), "declared").unwrap();
        let root = Dir::open(&tmp.path().join("root")).unwrap();
        let store = Store::open(&tmp.path().join("store"), true)
            .unwrap()
            .unwrap();
        (tmp, root, store)
    }

    /// Observes `/etc/app/conf` against `declared` with the store's index, saving it after; the
    /// `Held` found. `observed_from_ns` stands for when the observation began.
    fn observe_indexed(
        root: &Dir,
        store: &Store,
        declared: &[u8],
        observed_from_ns: i64,
    ) -> String {
        let mut index = IndexUse::load(Some(store), None);
        index.observed_from_ns = observed_from_ns;
        let mut looking = Looking::new(root, index, 100, false);
        let state = looking.at("/etc/app/conf", Some(&Declared::of(declared)));
        looking.index.save(Some(store));
        held(state)
    }

    /// What a state holds, `Declared` without its digest.
    fn held(state: State) -> String {
        match state {
            State::Regular {
                held: Held::Declared { .. },
                ..
            } => "Declared".to_string(),
            State::Regular { held, .. } => format!("{held:?}"),
            other => format!("{other:?}"),
        }
    }

    fn stamp_of_conf(root: &Dir) -> Stamp {
        let etc = fsutil::walk_to_dir(root, Path::new("/etc/app"), false)
            .unwrap()
            .unwrap();
        etc.stat_stamped(std::ffi::OsStr::new("conf"))
            .unwrap()
            .unwrap()
            .1
    }

    /// Well after any file in the test changed.
    const LATER: i64 = i64::MAX / 2;

    #[test]
    fn an_index_is_kept_for_the_next_chunk_only_while_unchanged() {
        let (_tmp, root, store) = root_with_one_file("index-kept");
        let observe = |mut index: IndexUse<'static>| {
            index.observed_from_ns = LATER;
            let mut looking = Looking::new(&root, index, 100, false);
            looking.at("/etc/app/conf", Some(&Declared::of(b"declared")));
            looking.index
        };
        // The first observation records the file: the index changed, so it is read again.
        let index = observe(IndexUse::load(Some(&store), None));
        assert!(index.save(Some(&store)).is_none());
        // The next finds it as recorded: the index as read is handed on, and vouches again.
        let index = observe(IndexUse::load(Some(&store), None));
        let kept = index.save(Some(&store)).expect("unchanged, kept");
        let index = IndexUse::load(None, Some(kept));
        assert!(index.vouches(
            "/etc/app/conf",
            &stamp_of_conf(&root),
            &Declared::of(b"declared")
        ));
    }

    /// `/etc/app/conf` observed as declared, and the entry the index then keeps of it.
    fn recorded(root: &Dir, store: &Store) -> Cached {
        assert_eq!(observe_indexed(root, store, b"declared", LATER), "Declared");
        store.files_index().get("/etc/app/conf").expect("recorded")
    }

    #[test]
    fn a_file_the_index_vouches_for_is_not_read() {
        let (_tmp, root, store) = root_with_one_file("index-hit");
        let cached = recorded(&root, &store);
        assert_eq!(cached.stamp, stamp_of_conf(&root));
        assert_eq!(cached.digest, crate::util::codec::sha256(b"declared"));
        // An index claiming the file holds other content of the same size, with the file's very
        // stamp: believed, which shows the file was not read.
        let forged = Cached {
            digest: crate::util::codec::sha256(b"12345678"),
            ..cached
        };
        store
            .save_files_index(
                &FilesIndex::default(),
                vec![("/etc/app/conf", Some(forged))],
            )
            .unwrap();
        assert_eq!(
            observe_indexed(&root, &store, b"12345678", LATER),
            "Declared"
        );
        // Another declared content does not match the entry's digest: read and compared.
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            "Declared",
            "read: the file does hold it"
        );
        assert_eq!(
            store.files_index().get("/etc/app/conf").map(|c| c.digest),
            Some(crate::util::codec::sha256(b"declared"))
        );
    }

    #[test]
    fn every_stamp_field_that_differs_means_the_file_is_read() {
        let (_tmp, root, store) = root_with_one_file("index-fields");
        let cached = recorded(&root, &store);
        let changes: [fn(&mut Stamp); 8] = [
            |s| s.device += 1,
            |s| s.inode += 1,
            |s| s.size += 1,
            |s| s.mode ^= 0o002,
            |s| s.uid += 1,
            |s| s.gid += 1,
            |s| s.mtime_ns += 1,
            |s| s.ctime_ns += 1,
        ];
        for change in changes {
            // The index says the file held other content with a stamp differing in one field:
            // not believed, the file is read (and holds the declared content after all).
            let mut stamp = cached.stamp;
            change(&mut stamp);
            let other = Cached {
                stamp,
                digest: crate::util::codec::sha256(b"12345678"),
            };
            let mut index = IndexUse::load(None, None);
            index.old = FilesIndex::decode(
                FilesIndex::default().updated(vec![("/etc/app/conf", Some(other))]),
            )
            .unwrap();
            assert!(!index.vouches("/etc/app/conf", &cached.stamp, &Declared::of(b"12345678")));
        }
        let mut index = IndexUse::load(Some(&store), None);
        assert!(index.vouches("/etc/app/conf", &cached.stamp, &Declared::of(b"declared")));
        index.old = FilesIndex::default();
        assert!(!index.vouches("/etc/app/conf", &cached.stamp, &Declared::of(b"declared")));
    }

    #[test]
    fn a_file_changed_in_the_tick_of_its_read_is_not_kept_in_the_index() {
        let (tmp, root, store) = root_with_one_file("index-racy");
        // The observation began when the file was just written (git's "racy" case): a change
        // right after the read could keep the stamp, so it is not recorded.
        let ctime = stamp_of_conf(&root).ctime_ns;
        assert_eq!(
            observe_indexed(&root, &store, b"declared", ctime),
            "Declared"
        );
        assert_eq!(store.files_index().get("/etc/app/conf"), None);
        // A later observation, once that tick is past, records it.
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            "Declared"
        );
        assert!(store.files_index().get("/etc/app/conf").is_some());
        // A file found to differ is dropped from the index.
        std::fs::write(tmp.path().join("root/etc/app/conf"), "edited!!").unwrap();
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            format!("{:?}", Held::Other(b"edited!!".to_vec()))
        );
        assert_eq!(store.files_index().get("/etc/app/conf"), None);
    }

    #[test]
    fn a_corrupt_index_is_rebuilt_by_reading_the_files() {
        let (tmp, root, store) = root_with_one_file("index-corrupt");
        std::fs::write(tmp.path().join("store/files-index"), "{not an index").unwrap();
        assert!(store.files_index().get("/etc/app/conf").is_none());
        assert_eq!(
            observe_indexed(&root, &store, b"declared", LATER),
            "Declared"
        );
        assert!(store.files_index().get("/etc/app/conf").is_some());
    }

    #[test]
    fn a_run_keeps_only_the_changed_files_a_unit_acts_on() {
        let d = parse_with_defaults(
            r#"{"schema": 1, "files": {"/etc/app.conf": {"content": "a"},
                "/etc/other.conf": {"content": "b"}, "/etc/app.env": {"content": "c"}},
                "units": {"app.service": {"restart_on": ["/etc/app.conf"],
                    "reload_on": ["/etc/app.env"]}}}"#,
        )
        .unwrap();
        let change = |key: &str, op| Change {
            key: key.to_string(),
            action: Action::Update,
            details: Details::default(),
            diff: None,
            intent: None,
            backup: None,
            after: LedgerAfter::Disown,
            op,
        };
        let mut facts = Facts::default();
        let write = || Op::Write {
            mode: 0o644,
            owner: None,
        };
        for key in ["/etc/app.conf", "/etc/other.conf", "/etc/app.env"] {
            Files::note(&d, &mut facts, &change(key, write()), &Outcome::Done);
        }
        // Failed, or only the ledger changed: the file did not change.
        let failed = Outcome::Failed("no".into());
        Files::note(&d, &mut facts, &change("/etc/app.conf", write()), &failed);
        let kept: Vec<&str> = facts.changed.iter().map(String::as_str).collect();
        assert_eq!(kept, ["/etc/app.conf", "/etc/app.env"]);
        let mut facts = Facts::default();
        Files::note(
            &d,
            &mut facts,
            &change("/etc/app.conf", Op::Forget),
            &Outcome::Done,
        );
        Files::note(&d, &mut facts, &change("/etc/app.env", write()), &failed);
        assert!(facts.changed.is_empty());
    }

    #[test]
    fn unit_files_and_drop_ins_are_known_by_their_look() {
        for (path, unit) in [
            (
                "/etc/systemd/system/a.service.d/override.conf",
                Some("a.service"),
            ),
            (
                "/etc/systemd/system/web@.service.d/10-x.conf",
                Some("web@.service"),
            ),
            ("/etc/systemd/system/service.d/all.conf", Some("service")),
            ("/etc/systemd/system/b.timer", Some("b.timer")),
            ("/etc/sysctl.d/99-x.conf", None),
            ("/etc/app.conf", None),
            ("/etc/systemd/system/a.service.d/notes.txt", None),
        ] {
            assert_eq!(configures_unit(path), unit, "{path}");
        }
    }

    /// The ledger's digests, pinned (empty content, unicode, secret content, owner and group by
    /// name and by id), and one written out byte by byte; found in sync, the same digest is
    /// made from the SHA-256 observation computed.
    #[test]
    fn digests_are_pinned_to_their_canonical_encoding() {
        assert_eq!(
            digest(&Spec::Absent).to_string(),
            "83b208da4b97f67861bad0f796de033f9c12769ae201077e08d187657cdc1a5c"
        );
        for (spec, hex) in [
            (
                r#"{"content": "a"}"#,
                "c91ca32061cdb2f9949baa0522e740bdc4a6431346349e8abfea4a0996fdccbd",
            ),
            (
                r#"{"content": "", "mode": "0600"}"#,
                "885a21c7e247344d8bfa613d6c772b6d4ea6f43a6dbf1e6808362cdf4db0ece6",
            ),
            (
                r#"{"content": "h\u00e9llo \u2713\n", "mode": "0644", "owner": "0", "group": "0"}"#,
                "c1c3e1870650384b0559e488ce62afa7d023178fff7c19d11f1c889256f1b67d",
            ),
            (
                r#"{"content": "token = s3cret \u2713\n", "secret": true, "mode": "0640", "group": "0"}"#,
                "2de80b889511c825f56dc78606eaff7d36ba1176124763d8f913330f391f0ad3",
            ),
            (
                r#"{"content": "x", "owner": "www-data", "group": "wheel"}"#,
                "8a65a67550d085435887f5d17c1312f479310f4a376510473021099d5bc88ca7",
            ),
        ] {
            let d = parse_with_defaults(&format!(
                r#"{{"schema": 1, "files": {{"/etc/x": {spec}}}}}"#
            ))
            .unwrap();
            let Some(Spec::Present(c)) = d.files.get("/etc/x") else {
                panic!("{spec}: not present");
            };
            assert_eq!(content_digest(c).to_string(), hex, "{spec}");
            // Found in sync, the digest is made from the SHA-256 observation computed.
            let obs = observed(State::Regular {
                stat: stat(c.bytes.len(), 0o644),
                held: Held::Declared {
                    sha: Declared::of(&c.bytes).sha,
                },
            });
            let spec = Spec::Present(c.clone());
            assert_eq!(Files::digest_observed(&spec, Some(&obs)), digest(&spec));
            assert_eq!(Files::digest_observed(&spec, None), digest(&spec));
        }
        assert_eq!(
            Files::digest_observed(&Spec::Absent, Some(&observed(State::Missing))),
            digest(&Spec::Absent)
        );
        // "a": present, the SHA-256 of "a", no mode, owner or group.
        let mut by_hand = b"files\x00\x01\x01".to_vec();
        by_hand.extend_from_slice(&codec::sha256(b"a"));
        by_hand.extend_from_slice(b"\x00\x00\x00");
        assert_eq!(
            digest(&Spec::Present(Content {
                bytes: Box::new(*b"a"),
                mode: None,
                ownership: None,
                secret: None,
            })),
            Digest::Sha256(codec::sha256(&by_hand))
        );
    }
}
