//! The watcher's decisions, as pure bookkeeping over events and times the loop passes in: what
//! to watch for what the host owns (a file's parent directory, or its nearest existing ancestor
//! while the parent is missing), which resources an inotify event touches, when the debounced
//! check is due, which resources are contested, and when only a full run will do. An event is a
//! hint, never a verdict: the loop observes what it touched before anything runs. The syscalls
//! are in `os/inotify.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::kinds::{self, Hints, Kind, Place, Visit};
use crate::model::declaration::Declaration;
use crate::model::spec::NAMES;
use crate::os::inotify::{AddError, Event};
use crate::store::{self, Ledger};

mod contest;
mod marks;
mod packed;

use contest::Contest;
#[cfg(test)]
use contest::Contested;
use marks::Marks;
use packed::Packed;

/// A resource as the ledger names it: (kind, key).
pub type Resource = (&'static str, String);

/// A kind by the name runs report it under, as the registry spells it.
pub fn kind(name: &str) -> Option<&'static str> {
    NAMES.iter().copied().find(|k| *k == name)
}

/// Quiet time after the last event before the check: an editor's save is several events.
pub const DEBOUNCE_MS: u64 = 300;
/// A steady trickle of events still gets its check this long after the first one.
pub const MAX_DELAY_MS: u64 = 2_000;
/// This many repairs by watch runs within `CONTEST_WINDOW_MS` make a resource contested.
pub const CONTEST_REPAIRS: usize = 5;
pub const CONTEST_WINDOW_MS: u64 = 60_000;
/// A contested resource nobody changed for this long is watched again.
pub const SETTLE_MS: u64 = 60_000;

/// Where the watched things are: the target root, the unit directory inside it, and pacman's
/// local database (when it could be found).
pub struct Places<'a> {
    pub root: &'a Path,
    pub store: &'a Path,
    pub unit_dir: &'a Path,
    pub pacman_db: Option<&'a Path>,
}

/// What to watch for `declaration` and `ledger`: what each kind hints (`Kind::watch`: declared
/// and owned files, the unit files the declaration carries, pacman's local database), and the
/// store's declaration and ledger. A kind without hints stays on the timer.
pub fn targets<'a>(
    places: &Places<'a>,
    declaration: &'a Declaration,
    ledger: &'a Ledger,
) -> Targets {
    let mut builder = Builder::new(places.root);
    builder.unit_dir = Some(places.unit_dir);
    builder.pacman_db = places.pacman_db;
    builder.store(places.store);
    kinds::each(&mut Hinting {
        builder: &mut builder,
        declaration,
        ledger,
    });
    builder.finish()
}

/// Each kind's hints, given to the builder as that kind's.
struct Hinting<'r, 'a> {
    builder: &'r mut Builder<'a>,
    declaration: &'a Declaration,
    ledger: &'a Ledger,
}

impl Visit for Hinting<'_, '_> {
    type Out = ();
    fn visit<K: Kind>(&mut self) {
        self.builder.kind = K::NAME;
        K::watch(self.declaration, self.ledger, self.builder);
    }
}

/// The store's declaration and ledger: what to watch before anything is in force.
pub fn store_targets(store: &Path) -> Targets {
    let mut builder = Builder::new(Path::new("/"));
    builder.store(store);
    builder.finish()
}

fn under(root: &Path, absolute: &str) -> PathBuf {
    root.join(absolute.trim_start_matches('/'))
}

/// An event on the entry (a file of the store) means the targets must be worked out again.
const REFRESH: u8 = 0x80;
/// The other bits of an entry's flags: an event on it touches the resource keyed by its declared
/// path (`files_in` + `/` + its name), of the kind at this index + 1 in the registry (`NAMES`);
/// 0 when none is.
const KEYED: u8 = !REFRESH;

/// The flags of an entry whose path is the key of a resource of `kind`.
fn keyed(kind: &str) -> u8 {
    NAMES
        .iter()
        .position(|k| *k == kind)
        .map_or(0, |i| i as u8 + 1)
}

/// The resource keyed by an entry's path, with `flags`.
fn keyed_by(flags: u8, path: String) -> Option<Resource> {
    let kind = NAMES.get(usize::from(flags & KEYED).checked_sub(1)?)?;
    Some((kind, path))
}

/// What to watch: each directory, the entries in it whose events mean something, and what they
/// touch. Kept as a few buffers for all directories (every name one after another, where each
/// ends, a flag byte each, and a short list of the few names that touch more than their own
/// file) rather than an allocation per directory or name: with thousands of owned files these
/// are what the service keeps between runs, and allocations made among a large declaration's
/// would pin its freed memory long after it is gone. 20,000 files in 200 directories hold 200
/// paths and 20,000 names.
#[derive(Debug, Default, PartialEq)]
pub struct Targets {
    /// The watched directories' paths, sorted by their bytes.
    dirs: Packed,
    /// By directory: the declared paths of its files, without their names (`/etc/nginx`).
    files_in: Packed,
    /// By directory: its entries and what any entry touches.
    groups: Vec<Group>,
    /// The entries' names, each directory's sorted, one directory after another.
    names: Packed,
    /// By entry: `REFRESH`, `KEYED`.
    flags: Vec<u8>,
    /// What else an entry's event touches (units restarted on the file, a unit file), by the
    /// entry's index, sorted.
    resources: Vec<(u32, Resource)>,
}

/// One watched directory's part of `Targets`.
#[derive(Debug, Default, PartialEq)]
struct Group {
    /// Its entries' indices in `Targets::names`.
    start: u32,
    end: u32,
    /// What an event on any entry touches (pacman's local database: every package).
    any: Vec<Resource>,
}

impl Targets {
    fn dirs(&self) -> impl Iterator<Item = &Path> {
        (0..self.groups.len()).map(|g| Path::new(self.dirs.get(g)))
    }

    /// The group watching `dir`: binary search, the paths are sorted.
    fn group(&self, dir: &Path) -> Option<usize> {
        self.dirs.find(0..self.groups.len(), dir.as_os_str())
    }

    /// The entries of group `g` an event on `name` touches (every entry when `None`: the
    /// directory itself went).
    fn entries(&self, g: usize, name: Option<&OsStr>) -> Range<usize> {
        let group = &self.groups[g];
        let all = group.start as usize..group.end as usize;
        match name {
            None => all,
            Some(name) => self.names.find(all, name).map_or(0..0, |i| i..i + 1),
        }
    }

    /// Whether an event on `entries` means the targets must be worked out again.
    fn refreshes(&self, entries: Range<usize>) -> bool {
        self.flags[entries].iter().any(|f| f & REFRESH != 0)
    }

    /// Whether an event on `entries` of group `g` touches any resource at all.
    fn touches(&self, g: usize, entries: Range<usize>) -> bool {
        !self.groups[g].any.is_empty()
            || self.flags[entries.clone()].iter().any(|f| f & KEYED != 0)
            || !self.more(entries).is_empty()
    }

    /// What `entries` touch besides their files.
    fn more(&self, entries: Range<usize>) -> &[(u32, Resource)] {
        let from = self
            .resources
            .partition_point(|(i, _)| (*i as usize) < entries.start);
        let to = self
            .resources
            .partition_point(|(i, _)| (*i as usize) < entries.end);
        &self.resources[from..to]
    }

    /// The resources an event on `entries` of group `g` touches, without what any entry of
    /// the group touches (`Group::any`).
    fn resources(&self, g: usize, entries: Range<usize>, out: &mut Vec<Resource>) {
        for i in entries.clone() {
            if self.flags[i] & KEYED != 0 {
                let files_in = self.files_in.get(g).to_string_lossy();
                let name = self.names.get(i).to_string_lossy();
                out.extend(keyed_by(self.flags[i], format!("{files_in}/{name}")));
            }
        }
        out.extend(self.more(entries).iter().map(|(_, r)| r.clone()));
    }
}

/// Gathers targets as borrowed entries, then packs them into `Targets` in one go: counted, each
/// buffer allocated at its exact size, then filled, so no growing buffer leaves holes.
struct Builder<'a> {
    root: &'a Path,
    /// The configured unit directory and pacman's local database, when known (`Place`).
    unit_dir: Option<&'a Path>,
    pacman_db: Option<&'a Path>,
    /// Their indices in `dirs`, once a hint is in them.
    places: [Option<u32>; 2],
    /// The kind whose hints are being given.
    kind: &'static str,
    dirs: Vec<Dir<'a>>,
    /// Files' directories by their declared text, to their index in `dirs`.
    file_dirs: BTreeMap<&'a str, u32>,
    entries: Vec<Entry<'a>>,
}

struct Dir<'a> {
    path: PathBuf,
    files_in: Option<&'a str>,
    any: Vec<Resource>,
}

struct Entry<'a> {
    dir: u32,
    name: &'a str,
    flags: u8,
    /// What else an event on the entry touches (a unit restarted on the file).
    touches: Option<(&'static str, &'a str)>,
}

impl<'a> Builder<'a> {
    fn new(root: &'a Path) -> Builder<'a> {
        Builder {
            root,
            unit_dir: None,
            pacman_db: None,
            places: [None; 2],
            kind: "",
            dirs: Vec::new(),
            file_dirs: BTreeMap::new(),
            entries: Vec::new(),
        }
    }

    fn dir(&mut self, path: PathBuf) -> u32 {
        self.dirs.push(Dir {
            path,
            files_in: None,
            any: Vec::new(),
        });
        self.dirs.len() as u32 - 1
    }

    /// The store's declaration and ledger: a change means the targets must be worked out again.
    fn store(&mut self, store: &'a Path) {
        let dir = self.dir(store.to_path_buf());
        for name in [store::IN_FORCE, store::LEDGER] {
            self.add(dir, name, REFRESH, None);
        }
    }

    /// The directory of `place`, made the first time a hint is in it; `None` where it is not
    /// known.
    fn place(&mut self, place: Place) -> Option<u32> {
        let at = place as usize;
        if self.places[at].is_none() {
            let path = match place {
                Place::UnitDir => under(self.root, &self.unit_dir?.to_string_lossy()),
                Place::PacmanDb => self.pacman_db?.to_path_buf(),
            };
            self.places[at] = Some(self.dir(path));
        }
        self.places[at]
    }

    /// The declared file `key` (a normalised absolute path), with `flags` and what else an event
    /// on it touches.
    fn file(&mut self, key: &'a str, flags: u8, touches: Option<(&'static str, &'a str)>) {
        let Some((files_in, name)) = key.rsplit_once('/') else {
            return;
        };
        let dir = match self.file_dirs.get(files_in) {
            Some(dir) => *dir,
            None => {
                let path = match files_in {
                    "" => self.root.to_path_buf(),
                    _ => under(self.root, files_in),
                };
                let dir = self.dir(path);
                self.dirs[dir as usize].files_in = Some(files_in);
                self.file_dirs.insert(files_in, dir);
                dir
            }
        };
        self.add(dir, name, flags, touches);
    }

    fn add(
        &mut self,
        dir: u32,
        name: &'a str,
        flags: u8,
        touches: Option<(&'static str, &'a str)>,
    ) {
        if !name.is_empty() {
            let entry = Entry {
                dir,
                name,
                flags,
                touches,
            };
            self.entries.push(entry);
        }
    }

    fn finish(self) -> Targets {
        let Builder {
            mut dirs,
            mut entries,
            ..
        } = self;
        let mut anys: Vec<Vec<Resource>> = dirs
            .iter_mut()
            .map(|d| std::mem::take(&mut d.any))
            .collect();
        let path = |d: u32| dirs[d as usize].path.as_os_str().as_bytes();
        let (order, runs, renumbered) = group_dirs(&dirs);
        for entry in &mut entries {
            entry.dir = renumbered[entry.dir as usize];
        }
        // By directory and name, so that each directory's names are sorted and the same entry
        // (a file both declared and owned) comes together, what else it touches in order.
        let order_of = |e: &Entry<'a>| (e.dir, e.name, e.touches);
        entries.sort_unstable_by(|a, b| order_of(a).cmp(&order_of(b)));
        let firsts = entries.iter().enumerate().filter(|(i, e)| {
            let before = i.checked_sub(1).map(|i| &entries[i]);
            before.is_none_or(|b| (b.dir, b.name) != (e.dir, e.name))
        });
        let (count, name_bytes) = firsts.fold((0, 0), |(n, b), (_, e)| (n + 1, b + e.name.len()));
        let files_in = |run: &Range<usize>| {
            let mut texts = order[run.clone()]
                .iter()
                .filter_map(|d| dirs[*d as usize].files_in);
            texts.next().unwrap_or("")
        };
        let dir_bytes = runs.iter().map(|run| path(order[run.start]).len()).sum();
        let files_in_bytes = runs.iter().map(|run| files_in(run).len()).sum();
        let mut targets = Targets {
            dirs: Packed::with_capacity(runs.len(), dir_bytes),
            files_in: Packed::with_capacity(runs.len(), files_in_bytes),
            groups: Vec::with_capacity(runs.len()),
            names: Packed::with_capacity(count, name_bytes),
            flags: Vec::with_capacity(count),
            resources: Vec::new(),
        };
        let mut entries = entries.iter().peekable();
        for (g, run) in runs.iter().enumerate() {
            targets.dirs.push(path(order[run.start]));
            targets.files_in.push(files_in(run).as_bytes());
            let start = targets.flags.len() as u32;
            let mut last = None;
            while let Some(entry) = entries.next_if(|e| e.dir as usize == g) {
                if last != Some(entry.name) {
                    targets.names.push(entry.name.as_bytes());
                    targets.flags.push(0);
                    last = Some(entry.name);
                }
                let i = targets.flags.len() - 1;
                // A path is the key of one kind's resource at most: its kind bits are the same.
                targets.flags[i] |= entry.flags;
                if let Some((kind, key)) = entry.touches {
                    targets.resources.push((i as u32, (kind, key.to_string())));
                }
            }
            let any = order[run.clone()]
                .iter()
                .flat_map(|d| std::mem::take(&mut anys[*d as usize]));
            targets.groups.push(Group {
                start,
                end: targets.flags.len() as u32,
                any: any.collect(),
            });
        }
        targets.resources.dedup();
        targets
    }
}

/// A kind's hints, as the builder takes them: each touches a resource of `Builder::kind`.
impl<'a> Hints<'a> for Builder<'a> {
    fn path(&mut self, path: &'a str) {
        self.file(path, keyed(self.kind), None);
    }

    fn path_touches(&mut self, path: &'a str, key: &'a str) {
        self.file(path, 0, Some((self.kind, key)));
    }

    fn entry(&mut self, place: Place, name: &'a str, key: &'a str) {
        if let Some(dir) = self.place(place) {
            self.add(dir, name, 0, Some((self.kind, key)));
        }
    }

    fn any(&mut self, place: Place, key: &'a str) {
        if let Some(dir) = self.place(place) {
            self.dirs[dir as usize]
                .any
                .push((self.kind, key.to_string()));
        }
    }
}

/// The directories in path order, each path once (a unit directory may hold declared files
/// too): `order[runs[g]]` are the `dirs` of group `g`, and `renumbered[d]` is the group of
/// `dirs[d]`.
fn group_dirs(dirs: &[Dir]) -> (Vec<u32>, Vec<Range<usize>>, Vec<u32>) {
    let path = |d: u32| dirs[d as usize].path.as_os_str().as_bytes();
    let mut order: Vec<u32> = (0..dirs.len() as u32).collect();
    order.sort_unstable_by(|a, b| path(*a).cmp(path(*b)));
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut renumbered = vec![0; dirs.len()];
    for (at, d) in order.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if path(order[run.start]) == path(*d) => run.end = at + 1,
            _ => runs.push(at..at + 1),
        }
        renumbered[*d as usize] = runs.len() as u32 - 1;
    }
    (order, runs, renumbered)
}

/// What the loop should do once the debounce is over.
#[derive(Debug, Clone, PartialEq)]
pub enum Due {
    /// Observe these again; run (trigger `watch`) only if they drifted.
    Check(BTreeSet<Resource>),
    /// Events were lost or cannot be had: converge everything.
    Full,
}

/// What one watched directory stands for: its own group of targets (`own`), and groups in
/// directories below its entries while the directories on the way are missing (`below`, by
/// their index in `Targets`).
#[derive(Debug, Default)]
struct Watched {
    own: bool,
    below: BTreeMap<OsString, Vec<usize>>,
}

#[derive(Debug, Default)]
pub struct Watch {
    targets: Targets,
    /// Wanted directory -> what it watches; `wds` maps the kernel's descriptors to them.
    dirs: BTreeMap<PathBuf, Watched>,
    wds: BTreeMap<i32, PathBuf>,
    /// Descriptors to drop: their directory is no longer wanted, or was moved away.
    stale: Vec<i32>,
    /// Directories wanted but not watched, and why (their targets are on the timer).
    unwatched: BTreeMap<PathBuf, String>,
    resync: bool,
    /// The store's declaration or ledger changed: work out the targets again.
    refresh: bool,
    /// Touched since the last check: entries and groups (whose `any` was touched) by their
    /// index in `targets`, so that a storm over 20,000 files makes no key per event; and
    /// resources touched under targets since replaced, or while some are contested.
    pending_entries: Marks,
    pending_groups: Marks,
    pending: BTreeSet<Resource>,
    full: bool,
    first_at: Option<u64>,
    last_at: u64,
    contests: BTreeMap<Resource, Contest>,
    /// Whether any of `contests` is contested (their events are then looked at one by one).
    any_contested: bool,
    /// When the repairs of resources nobody fights over are all older than the window and
    /// can be forgotten.
    forget_at: Option<u64>,
    overflows: u64,
    last_overflow: Option<u64>,
    /// The watch limit was met before: a full run is owed only the first time.
    limited: bool,
}

impl Watch {
    /// Replaces what is watched (after every run: the declaration or ledger may have changed).
    pub fn set_targets(&mut self, targets: Targets) {
        if targets != self.targets {
            // What is pending was named by the old targets' indices: kept by name.
            let pending = self.take_pending();
            self.pending = pending;
            self.pending_entries = Marks::new(targets.flags.len());
            self.pending_groups = Marks::new(targets.groups.len());
            self.targets = targets;
            self.resync = true;
        }
    }

    /// Whether the directories must be looked at again (`plan`).
    pub fn needs_sync(&self) -> bool {
        self.resync
    }

    /// Works out the wanted directories, `is_dir` telling which exist (never following a
    /// symlink), and returns the ones to add; `take_stale` gives the descriptors to drop.
    pub fn plan(&mut self, is_dir: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
        self.resync = false;
        let mut dirs: BTreeMap<PathBuf, Watched> = BTreeMap::new();
        for (g, dir) in self.targets.dirs().enumerate() {
            let mut at = dir;
            while !is_dir(at) {
                match at.parent() {
                    Some(parent) => at = parent,
                    None => break,
                }
            }
            let watched = dirs.entry(at.to_path_buf()).or_default();
            if at == dir {
                watched.own = true;
            } else if let Some(Component::Normal(next)) = dir
                .strip_prefix(at)
                .ok()
                .and_then(|rest| rest.components().next())
            {
                let below = watched.below.entry(next.to_os_string()).or_default();
                below.push(g);
            }
        }
        let have: BTreeSet<&PathBuf> = self.wds.values().collect();
        let add: Vec<PathBuf> = dirs.keys().filter(|d| !have.contains(d)).cloned().collect();
        let gone: Vec<i32> = self
            .wds
            .iter()
            .filter(|(_, d)| !dirs.contains_key(*d))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.wds.remove(&wd);
            self.stale.push(wd);
        }
        self.unwatched.retain(|d, _| dirs.contains_key(d));
        self.dirs = dirs;
        add
    }

    /// Whether the targets must be worked out again (and clears it).
    pub fn take_refresh(&mut self) -> bool {
        std::mem::take(&mut self.refresh)
    }

    pub fn take_stale(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.stale)
    }

    /// The kernel watches `dir` as `wd`.
    pub fn added(&mut self, dir: PathBuf, wd: i32) {
        self.unwatched.remove(&dir);
        self.wds.insert(wd, dir);
    }

    /// `dir` could not be watched at `now`.
    pub fn add_failed(&mut self, now: u64, dir: PathBuf, error: AddError) {
        let why = match error {
            AddError::Vanished => {
                self.resync = true;
                return;
            }
            AddError::Limit => {
                if !self.limited {
                    // Changes there are seen only by the timer from now on; one full run now.
                    self.limited = true;
                    self.full = true;
                    self.note(now);
                }
                "the per-user inotify watch limit (fs.inotify.max_user_watches) is reached".into()
            }
            AddError::Other(e) => e,
        };
        self.unwatched.insert(dir, why);
    }

    /// Takes in one event at `now`.
    pub fn handle(&mut self, now: u64, event: Event) {
        // (group, the entry's name or every entry) pairs the event touches.
        let touched: Vec<(usize, Option<OsString>)> = match event {
            Event::Overflow => {
                self.overflows += 1;
                self.last_overflow = Some(now);
                self.full = true;
                self.resync = true;
                self.note(now);
                return;
            }
            Event::Gone { wd } => {
                let Some(dir) = self.wds.remove(&wd) else {
                    return;
                };
                // A directory moved away keeps its watch: drop it, then look for the path again.
                self.stale.push(wd);
                self.resync = true;
                let Some(watched) = self.dirs.get(&dir) else {
                    return;
                };
                let own = self.targets.group(&dir).filter(|_| watched.own);
                let below = watched.below.values().flatten().copied();
                own.into_iter().chain(below).map(|g| (g, None)).collect()
            }
            Event::Entry { wd, name } => {
                let Some(dir) = self.wds.get(&wd) else {
                    return;
                };
                let Some(watched) = self.dirs.get(dir) else {
                    return;
                };
                let below = watched.below.get(&name);
                if below.is_some() {
                    // A directory on the way came or went: the watch moves.
                    self.resync = true;
                }
                let below = below.into_iter().flatten().map(|g| (*g, None));
                let own = self.targets.group(dir).filter(|_| watched.own);
                let own = own.map(|g| (g, Some(name)));
                own.into_iter().chain(below).collect()
            }
        };
        for (g, name) in touched {
            let entries = self.targets.entries(g, name.as_deref());
            self.refresh |= self.targets.refreshes(entries.clone());
            if self.any_contested {
                let mut resources = Vec::new();
                self.targets.resources(g, entries, &mut resources);
                resources.extend(self.targets.groups[g].any.iter().cloned());
                for resource in resources {
                    self.touch(now, resource);
                }
            } else if self.targets.touches(g, entries.clone()) {
                self.pending_entries.mark(entries);
                self.pending_groups.mark(g..g + 1);
                self.note(now);
            }
        }
    }

    /// Everything pending, by name; none of it is pending any more.
    fn take_pending(&mut self) -> BTreeSet<Resource> {
        let mut pending = std::mem::take(&mut self.pending);
        let mut resources = Vec::new();
        for g in 0..self.targets.groups.len() {
            let group = &self.targets.groups[g];
            let all = group.start as usize..group.end as usize;
            for i in all.filter(|i| self.pending_entries.is_marked(*i)) {
                self.targets.resources(g, i..i + 1, &mut resources);
            }
            if self.pending_groups.is_marked(g) {
                resources.extend(group.any.iter().cloned());
            }
        }
        self.pending_entries.clear();
        self.pending_groups.clear();
        pending.extend(resources);
        pending
    }

    fn touch(&mut self, now: u64, resource: Resource) {
        if let Some(contest) = self.contests.get_mut(&resource) {
            if contest.contested.is_some() {
                contest.last_change = now;
                return;
            }
        }
        self.pending.insert(resource);
        self.note(now);
    }

    fn note(&mut self, now: u64) {
        self.first_at.get_or_insert(now);
        self.last_at = now;
    }

    /// When the loop must wake for the watcher, if at all.
    pub fn deadline(&self) -> Option<u64> {
        let check = self
            .first_at
            .map(|first| (self.last_at + DEBOUNCE_MS).min(first + MAX_DELAY_MS));
        let settle = self
            .contests
            .values()
            .filter(|c| c.contested.is_some())
            .map(|c| c.last_change + SETTLE_MS)
            .min();
        [check, settle, self.forget_at].into_iter().flatten().min()
    }

    /// What is due at `now`, if anything; contested resources left alone long enough settle
    /// (and are returned, for the log).
    pub fn take_due(&mut self, now: u64) -> (Option<Due>, Vec<Resource>) {
        let settled: Vec<Resource> = self
            .contests
            .iter()
            .filter(|(_, c)| c.contested.is_some() && now >= c.last_change + SETTLE_MS)
            .map(|(r, _)| r.clone())
            .collect();
        for resource in &settled {
            self.contests.remove(resource);
        }
        if !settled.is_empty() || self.forget_at.is_some_and(|at| now >= at) {
            self.forget(now);
        }
        let due = match self.first_at {
            Some(first) if now >= (self.last_at + DEBOUNCE_MS).min(first + MAX_DELAY_MS) => {
                self.first_at = None;
                let pending = self.take_pending();
                if std::mem::take(&mut self.full) {
                    Some(Due::Full)
                } else if pending.is_empty() {
                    None
                } else {
                    Some(Due::Check(pending))
                }
            }
            _ => None,
        };
        (due, settled)
    }

    /// A full run is about to converge everything: nothing pending is owed any more.
    pub fn covered(&mut self) {
        self.pending.clear();
        self.pending_entries.clear();
        self.pending_groups.clear();
        self.full = false;
        self.first_at = None;
    }

    pub fn directories(&self) -> usize {
        self.wds.len()
    }

    /// Directories that could not be watched, and why.
    pub fn unwatched(&self) -> &BTreeMap<PathBuf, String> {
        &self.unwatched
    }

    /// How often the kernel's queue overflowed, and when last.
    pub fn overflows(&self) -> (u64, Option<u64>) {
        (self.overflows, self.last_overflow)
    }
}

/// The test targets the core's tests watch with.
#[cfg(test)]
pub(super) use tests::files as test_files;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::spec::files::Files;
    use crate::model::spec::packages::Packages;
    use crate::model::spec::Named as _;

    /// The targets of declared files at `paths`, under root `/`.
    pub(in crate::service) fn files(paths: &[&str]) -> Targets {
        let mut builder = Builder::new(Path::new("/"));
        builder.kind = Files::NAME;
        for path in paths {
            builder.path(path);
        }
        builder.finish()
    }

    fn res(key: &str) -> Resource {
        ("files", key.into())
    }

    /// A watch over `targets` with `dirs` existing; wds are handed out in order from 1.
    struct Fake {
        watch: Watch,
        dirs: BTreeSet<PathBuf>,
        next_wd: i32,
    }

    impl Fake {
        fn new(targets: Targets, dirs: &[&str]) -> Fake {
            let mut fake = Fake {
                watch: Watch::default(),
                dirs: dirs.iter().map(PathBuf::from).collect(),
                next_wd: 1,
            };
            fake.watch.set_targets(targets);
            fake.sync();
            fake
        }

        fn sync(&mut self) {
            let dirs = self.dirs.clone();
            for dir in self
                .watch
                .plan(&|p: &Path| p == Path::new("/") || dirs.contains(p))
            {
                self.watch.added(dir, self.next_wd);
                self.next_wd += 1;
            }
        }

        fn watched(&self) -> Vec<String> {
            self.watch
                .wds
                .values()
                .map(|d| d.display().to_string())
                .collect()
        }

        fn wd(&self, dir: &str) -> i32 {
            *self
                .watch
                .wds
                .iter()
                .find(|(_, d)| *d == Path::new(dir))
                .unwrap()
                .0
        }

        fn entry(&mut self, now: u64, dir: &str, name: &str) {
            let wd = self.wd(dir);
            self.watch.handle(
                now,
                Event::Entry {
                    wd,
                    name: name.into(),
                },
            );
        }
    }

    fn check(keys: &[&str]) -> Option<Due> {
        Some(Due::Check(keys.iter().map(|k| res(k)).collect()))
    }

    #[test]
    fn packed_names_are_found_by_binary_search() {
        let mut packed = Packed::default();
        for name in ["a", "ab", "b.conf", "c", "a", "z"] {
            packed.push(name.as_bytes());
        }
        let within = 0..4;
        for (i, name) in ["a", "ab", "b.conf", "c"].into_iter().enumerate() {
            assert_eq!(packed.find(within.clone(), OsStr::new(name)), Some(i));
        }
        for name in ["", "b", "aa", "d", "z"] {
            assert_eq!(
                packed.find(within.clone(), OsStr::new(name)),
                None,
                "{name}"
            );
        }
        assert_eq!(packed.find(4..6, OsStr::new("a")), Some(4));
        assert_eq!(packed.find(4..6, OsStr::new("z")), Some(5));
        assert_eq!(Packed::default().find(0..0, OsStr::new("a")), None);
    }

    /// Each watched entry as `dir name refresh=… [what its event touches]`, `*` for any entry.
    fn listed(targets: &Targets) -> Vec<String> {
        let mut out = Vec::new();
        let show = |resources: Vec<Resource>| {
            let shown: Vec<String> = resources.iter().map(|(k, r)| format!("{k} {r}")).collect();
            shown.join(", ")
        };
        for (g, group) in targets.groups.iter().enumerate() {
            let dir = targets.dirs.get(g).to_string_lossy();
            for i in group.start as usize..group.end as usize {
                let name = targets.names.get(i).to_string_lossy();
                let mut resources = Vec::new();
                let files_in = targets.files_in.get(g).to_string_lossy();
                resources.extend(keyed_by(targets.flags[i], format!("{files_in}/{name}")));
                let more = targets.resources.iter().filter(|(at, _)| *at as usize == i);
                resources.extend(more.map(|(_, r)| r.clone()));
                let refresh = targets.flags[i] & REFRESH != 0;
                out.push(format!(
                    "{dir} {name} refresh={refresh} [{}]",
                    show(resources)
                ));
            }
            if !group.any.is_empty() {
                out.push(format!(
                    "{dir} * refresh=false [{}]",
                    show(group.any.clone())
                ));
            }
        }
        out
    }

    fn declared(json: &str) -> Declaration {
        let config = crate::model::declaration::tests::test_config();
        let context = crate::model::declaration::Context {
            limits: &config.limits,
            identity: &config.identity,
        };
        crate::model::declaration::parse(json.as_bytes(), &context).unwrap()
    }

    fn places() -> Places<'static> {
        Places {
            root: Path::new("/mnt"),
            store: Path::new("/var/lib/mesh-host"),
            unit_dir: Path::new("/etc/systemd/system"),
            pacman_db: Some(Path::new("/mnt/var/lib/pacman/local")),
        }
    }

    #[test]
    fn targets_of_a_declaration_and_ledger() {
        let d = declared(
            r#"{"schema": 1,
            "packages": {"nginx": {}},
            "files": {"/etc/nginx/nginx.conf": {"content": "x"}},
            "units": {"nginx.service": {"reload_on": ["/etc/nginx/nginx.conf"]},
                      "app.service": {"content": "[Service]\nExecStart=/bin/true\n"}}}"#,
        );
        let mut ledger = Ledger::default();
        ledger.insert::<Files>("/etc/old.conf", crate::store::Entry::created());
        ledger.insert::<Packages>("vim", crate::store::Entry::created());
        assert_eq!(
            listed(&targets(&places(), &d, &ledger)),
            [
                "/mnt/etc old.conf refresh=false [files /etc/old.conf]",
                "/mnt/etc/nginx nginx.conf refresh=false [files /etc/nginx/nginx.conf, units nginx.service]",
                "/mnt/etc/systemd/system app.service refresh=false [units app.service]",
                "/mnt/var/lib/pacman/local * refresh=false [packages nginx, packages vim]",
                "/var/lib/mesh-host declaration.json refresh=true []",
                "/var/lib/mesh-host ledger.json refresh=true []",
            ]
        );
        assert_eq!(
            listed(&store_targets(places().store)),
            [
                "/var/lib/mesh-host declaration.json refresh=true []",
                "/var/lib/mesh-host ledger.json refresh=true []",
            ]
        );
    }

    #[test]
    fn an_entry_named_twice_is_one_entry_with_everything_it_touches() {
        // Declared and owned, restarting two units; a unit file also declared as a file (which
        // validation refuses: joined here from two declarations, as a store from before could
        // still hold it).
        let mut d = declared(
            r#"{"schema": 1,
            "files": {"/etc/app.conf": {"content": "x"}},
            "units": {"a.service": {"restart_on": ["/etc/app.conf"]},
                      "b.service": {"restart_on": ["/etc/app.conf"],
                                    "content": "[Service]\nExecStart=/bin/true\n"}}}"#,
        );
        d.files.extend(
            declared(
                r#"{"schema": 1, "files": {"/etc/systemd/system/b.service":
                    {"content": "[Service]\nExecStart=/bin/true\n"}}}"#,
            )
            .files,
        );
        let mut ledger = Ledger::default();
        ledger.insert::<Files>("/etc/app.conf", crate::store::Entry::created());
        // Units without a unit file of ours: the unit directory is not watched for them.
        let no_unit_files = declared(
            r#"{"schema": 1, "files": {"/etc/app.conf": {"content": "x"}},
            "units": {"a.service": {"restart_on": ["/etc/app.conf"]}}}"#,
        );
        let without = targets(&places(), &no_unit_files, &ledger);
        let dirs: Vec<&Path> = without.dirs().collect();
        assert_eq!(
            dirs,
            [Path::new("/mnt/etc"), Path::new("/var/lib/mesh-host")]
        );
        let places = Places {
            pacman_db: None,
            ..places()
        };
        let targets = targets(&places, &d, &ledger);
        assert_eq!(
            listed(&targets),
            [
                "/mnt/etc app.conf refresh=false [files /etc/app.conf, units a.service, units b.service]",
                "/mnt/etc/systemd/system b.service refresh=false [files /etc/systemd/system/b.service, units b.service]",
                "/var/lib/mesh-host declaration.json refresh=true []",
                "/var/lib/mesh-host ledger.json refresh=true []",
            ]
        );
        let mut f = Fake::new(
            targets,
            &[
                "/mnt",
                "/mnt/etc",
                "/mnt/etc/systemd",
                "/mnt/etc/systemd/system",
                "/var",
                "/var/lib",
                "/var/lib/mesh-host",
            ],
        );
        f.entry(0, "/mnt/etc", "app.conf");
        let touched = [
            ("files", "/etc/app.conf"),
            ("units", "a.service"),
            ("units", "b.service"),
        ];
        let touched = touched.map(|(k, r)| (k, r.to_string()));
        assert_eq!(
            f.watch.take_due(DEBOUNCE_MS).0,
            Some(Due::Check(touched.into()))
        );
        f.entry(1_000, "/var/lib/mesh-host", "ledger.json");
        assert!(
            f.watch.take_refresh(),
            "a change to the store works the targets out again"
        );
        assert!(!f.watch.take_refresh());
    }

    #[test]
    fn parents_are_watched_once_and_events_map_to_their_files() {
        let mut f = Fake::new(
            files(&["/r/etc/motd", "/r/etc/hosts", "/r/etc/ssh/sshd_config"]),
            &["/r", "/r/etc", "/r/etc/ssh"],
        );
        assert_eq!(f.watched(), ["/r/etc", "/r/etc/ssh"]);
        f.entry(0, "/r/etc", "unrelated.tmp");
        assert_eq!(f.watch.deadline(), None, "an unowned name is no hint");
        f.entry(10, "/r/etc", "motd");
        f.entry(20, "/r/etc/ssh", "sshd_config");
        assert_eq!(f.watch.deadline(), Some(20 + DEBOUNCE_MS));
        assert_eq!(f.watch.take_due(20 + DEBOUNCE_MS - 1).0, None);
        assert_eq!(
            f.watch.take_due(20 + DEBOUNCE_MS).0,
            check(&["/r/etc/motd", "/r/etc/ssh/sshd_config"])
        );
        assert_eq!(f.watch.deadline(), None);
    }

    #[test]
    fn a_steady_trickle_is_checked_after_the_longest_delay() {
        let mut f = Fake::new(files(&["/etc/motd"]), &["/etc"]);
        let mut now = 0;
        while now < 5_000 {
            f.entry(now, "/etc", "motd");
            if let (Some(due), _) = f.watch.take_due(now) {
                assert_eq!(Some(due), check(&["/etc/motd"]));
                break;
            }
            now += 100;
        }
        assert_eq!(now, MAX_DELAY_MS);
    }

    #[test]
    fn a_missing_parent_is_watched_through_its_nearest_ancestor() {
        let mut f = Fake::new(files(&["/r/etc/nginx/conf.d/site.conf"]), &["/r", "/r/etc"]);
        assert_eq!(f.watched(), ["/r/etc"]);
        // nginx/ appears: the file below it is checked and the watch moves down.
        f.dirs.insert("/r/etc/nginx".into());
        f.entry(0, "/r/etc", "nginx");
        assert!(f.watch.needs_sync());
        f.sync();
        assert_eq!(f.watched(), ["/r/etc/nginx"]);
        assert_eq!(f.watch.take_stale(), vec![1]);
        f.dirs.insert("/r/etc/nginx/conf.d".into());
        f.entry(5, "/r/etc/nginx", "conf.d");
        f.sync();
        assert_eq!(f.watched(), ["/r/etc/nginx/conf.d"]);
        assert_eq!(
            f.watch.take_due(1_000).0,
            check(&["/r/etc/nginx/conf.d/site.conf"])
        );
        // Removed again: the watch's directory is gone, the ancestor takes over.
        f.dirs.remove(Path::new("/r/etc/nginx/conf.d"));
        f.dirs.remove(Path::new("/r/etc/nginx"));
        let wd = f.wd("/r/etc/nginx/conf.d");
        f.watch.handle(2_000, Event::Gone { wd });
        f.sync();
        assert_eq!(f.watched(), ["/r/etc"]);
        assert_eq!(
            f.watch.take_due(3_000).0,
            check(&["/r/etc/nginx/conf.d/site.conf"])
        );
    }

    #[test]
    fn any_entry_of_the_package_database_touches_every_package() {
        let packages: Vec<Resource> = vec![("packages", "a".into()), ("packages", "b".into())];
        let mut f = Fake::new(
            {
                let mut builder = Builder::new(Path::new("/"));
                builder.pacman_db = Some(Path::new("/var/lib/pacman/local"));
                builder.kind = Packages::NAME;
                for (_, name) in &packages {
                    builder.any(Place::PacmanDb, name);
                }
                builder.finish()
            },
            &[
                "/var",
                "/var/lib",
                "/var/lib/pacman",
                "/var/lib/pacman/local",
            ],
        );
        f.entry(0, "/var/lib/pacman/local", "b-1.0-1");
        assert_eq!(
            f.watch.take_due(DEBOUNCE_MS).0,
            Some(Due::Check(packages.into_iter().collect()))
        );
    }

    #[test]
    fn targets_follow_the_declaration() {
        let mut f = Fake::new(files(&["/etc/motd", "/srv/x/y"]), &["/etc", "/srv/x"]);
        assert_eq!(f.watched(), ["/etc", "/srv/x"]);
        f.watch.set_targets(files(&["/etc/motd"]));
        assert!(f.watch.needs_sync());
        f.sync();
        assert_eq!(f.watched(), ["/etc"]);
        assert_eq!(f.watch.take_stale(), vec![2]);
        f.watch.set_targets(files(&["/etc/motd"]));
        assert!(!f.watch.needs_sync(), "the same targets need no look");
    }

    #[test]
    fn overflow_and_the_watch_limit_ask_for_a_full_run() {
        let mut f = Fake::new(files(&["/etc/motd"]), &["/etc"]);
        f.entry(0, "/etc", "motd");
        f.watch.handle(10, Event::Overflow);
        assert_eq!(f.watch.take_due(10 + DEBOUNCE_MS).0, Some(Due::Full));
        assert_eq!(f.watch.overflows(), (1, Some(10)));
        assert!(f.watch.needs_sync());

        let mut w = Watch::default();
        w.set_targets(files(&["/etc/motd", "/srv/a"]));
        let add = w.plan(&|_| true);
        assert_eq!(add.len(), 2);
        w.added(add[0].clone(), 1);
        w.add_failed(0, add[1].clone(), AddError::Limit);
        assert_eq!(w.take_due(DEBOUNCE_MS).0, Some(Due::Full));
        assert!(w.unwatched()[Path::new("/srv")].contains("max_user_watches"));
        w.add_failed(1_000, add[1].clone(), AddError::Limit);
        assert_eq!(
            w.take_due(5_000).0,
            None,
            "one full run, not one per attempt"
        );
        w.add_failed(5_000, "/gone".into(), AddError::Vanished);
        assert!(w.needs_sync());
    }

    #[test]
    fn a_fought_over_resource_is_contested_then_settles() {
        let mut f = Fake::new(files(&["/etc/motd"]), &["/etc"]);
        let motd = vec![res("/etc/motd")];
        for t in 0..CONTEST_REPAIRS as u64 - 1 {
            assert!(f.watch.repaired(t * 10_000, &motd).is_empty());
        }
        let newly = f.watch.repaired(40_000, &motd);
        assert_eq!(
            newly,
            vec![Contested {
                resource: res("/etc/motd"),
                since: 40_000,
                repairs: CONTEST_REPAIRS,
                last_change: 40_000
            }]
        );
        // While contested, its events are left to the timer.
        f.entry(41_000, "/etc", "motd");
        assert_eq!(f.watch.take_due(50_000), (None, vec![]));
        assert_eq!(f.watch.contested()[0].last_change, 41_000);
        assert_eq!(f.watch.deadline(), Some(41_000 + SETTLE_MS));
        let (due, settled) = f.watch.take_due(41_000 + SETTLE_MS);
        assert_eq!((due, settled), (None, motd.clone()));
        assert!(f.watch.contested().is_empty());
        f.entry(200_000, "/etc", "motd");
        assert_eq!(f.watch.take_due(201_000).0, check(&["/etc/motd"]));
    }

    #[test]
    fn repairs_nobody_fights_over_are_forgotten_after_the_window() {
        let mut f = Fake::new(files(&["/etc/motd", "/etc/hosts"]), &["/etc"]);
        let motd = vec![res("/etc/motd")];
        for t in 0..CONTEST_REPAIRS as u64 {
            f.watch.repaired(t * 10_000, &motd);
        }
        // Contested: the events on it are left to the timer, the other file's are not.
        f.watch.repaired(45_000, &[res("/etc/hosts")]);
        f.entry(46_000, "/etc", "motd");
        f.entry(46_000, "/etc", "hosts");
        assert_eq!(f.watch.take_due(47_000).0, check(&["/etc/hosts"]));
        // The one repair of hosts is forgotten once its window has passed, waking for it.
        let forget = 45_000 + CONTEST_WINDOW_MS + 1;
        assert_eq!(f.watch.deadline(), Some(forget));
        assert_eq!(f.watch.take_due(forget), (None, vec![]));
        assert_eq!(f.watch.contests.len(), 1, "only the contested one is kept");
        assert_eq!(f.watch.deadline(), Some(46_000 + SETTLE_MS));
        assert_eq!(f.watch.take_due(46_000 + SETTLE_MS).1, motd);
        assert!(f.watch.contests.is_empty());
        assert_eq!(f.watch.deadline(), None);
    }

    #[test]
    fn what_is_pending_survives_new_targets() {
        let mut f = Fake::new(files(&["/etc/motd", "/etc/hosts"]), &["/etc"]);
        f.entry(0, "/etc", "motd");
        f.watch.set_targets(files(&["/etc/a", "/etc/hosts"]));
        f.sync();
        f.entry(10, "/etc", "hosts");
        f.entry(10, "/etc", "motd");
        assert_eq!(
            f.watch.take_due(10 + DEBOUNCE_MS).0,
            check(&["/etc/hosts", "/etc/motd"]),
            "motd was touched while it was a target"
        );
        assert_eq!(f.watch.take_due(5_000).0, None, "nothing is pending twice");
    }

    #[test]
    fn repairs_spread_out_are_no_contest() {
        let mut w = Watch::default();
        let motd = vec![res("/etc/motd")];
        for minute in 0..10 {
            assert!(w.repaired(minute * 61_000, &motd).is_empty());
        }
        assert!(w.contested().is_empty());
    }

    #[test]
    fn a_storm_of_events_makes_one_check() {
        let mut f = Fake::new(files(&["/etc/motd", "/etc/hosts"]), &["/etc"]);
        let mut dues = 0;
        for i in 0..10_000u64 {
            let now = i / 10; // 10,000 events in one second
            let name = ["motd", "hosts", "other"][i as usize % 3];
            f.entry(now, "/etc", name);
            dues += usize::from(f.watch.take_due(now).0.is_some());
        }
        dues += usize::from(f.watch.take_due(2_000).0.is_some());
        assert_eq!(dues, 1);
    }
}
