//! The watcher's decisions, as pure bookkeeping over events and times the loop passes in: what
//! to watch for what the host owns (a file's parent directory, or its nearest existing ancestor
//! while the parent is missing), which resources an inotify event touches, when the debounced
//! check is due, which resources are contested, and when only a full run will do. An event is a
//! hint, never a verdict: the loop observes what it touched before anything runs. The syscalls
//! are in `inotify.rs`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::declaration::Declaration;
use crate::kinds::files::Files;
use crate::kinds::packages::Packages;
use crate::kinds::units::{self, Units};
use crate::kinds::Listed;
use crate::store::{self, Ledger};

/// A resource as the ledger names it: (kind, key).
pub type Resource = (&'static str, String);

/// The kinds the watcher has hints for, by the name runs report them under.
pub fn kind(name: &str) -> Option<&'static str> {
    [Packages::NAME, Files::NAME, Units::NAME]
        .into_iter()
        .find(|k| *k == name)
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

/// One thing to watch: the entry `name` of directory `dir` (any entry when `None`, as for pacman's
/// local database), and the resources a change to it touches; or, with `refresh`, a file of the
/// store whose change (a person's `apply`) means the targets themselves must be worked out again.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub dir: PathBuf,
    pub name: Option<OsString>,
    /// The declared path, when the entry is a resource of kind `files`.
    pub file: Option<String>,
    /// What else a change touches: units restarted on the file, a unit file, the packages.
    pub resources: Vec<Resource>,
    pub refresh: bool,
}

impl Target {
    fn entry(path: &Path, resources: Vec<Resource>) -> Option<Target> {
        Some(Target {
            dir: path.parent()?.to_path_buf(),
            name: Some(path.file_name()?.to_os_string()),
            file: None,
            resources,
            refresh: false,
        })
    }
}

/// Where the watched things are: the target root, the unit directory inside it, and pacman's
/// local database (when it could be found).
pub struct Places<'a> {
    pub root: &'a Path,
    pub store: &'a Path,
    pub unit_dir: &'a Path,
    pub pacman_db: Option<&'a Path>,
}

/// What to watch for `declaration` and `ledger`: every declared or owned file; the unit files the
/// declaration carries; pacman's local database for the packages; the store's declaration and
/// ledger. A file's event also touches the units restarted or reloaded on it, so the check plans
/// their restart. Containers have no cheap hint; they, and units without a file of ours, stay on
/// the timer.
pub fn targets(places: &Places, declaration: &Declaration, ledger: &Ledger) -> Vec<Target> {
    let mut out = store_targets(places.store);
    let mut units_on: BTreeMap<&str, Vec<Resource>> = BTreeMap::new();
    for (unit, spec) in &declaration.units {
        for file in units::watched_files(spec) {
            units_on
                .entry(file)
                .or_default()
                .push((Units::NAME, unit.clone()));
        }
    }
    let files: BTreeSet<String> = declaration
        .files
        .keys()
        .cloned()
        .chain(ledger.keys::<Files>())
        .collect();
    for key in files {
        let units = units_on.remove(key.as_str()).unwrap_or_default();
        if let Some(target) = Target::entry(&under(places.root, &key), units) {
            out.push(Target {
                file: Some(key),
                ..target
            });
        }
    }
    let unit_dir = under(places.root, &places.unit_dir.to_string_lossy());
    for (unit, spec) in &declaration.units {
        if spec.content.is_some() {
            let resources = vec![(Units::NAME, unit.clone())];
            out.extend(Target::entry(&unit_dir.join(unit), resources));
        }
    }
    let packages: Vec<Resource> = declaration
        .packages
        .keys()
        .cloned()
        .chain(ledger.keys::<Packages>())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|name| (Packages::NAME, name))
        .collect();
    if let (Some(db), false) = (places.pacman_db, packages.is_empty()) {
        out.push(Target {
            dir: db.to_path_buf(),
            name: None,
            file: None,
            resources: packages,
            refresh: false,
        });
    }
    out
}

/// The store's declaration and ledger: what to watch before anything is in force.
pub fn store_targets(store: &Path) -> Vec<Target> {
    [store::IN_FORCE, store::LEDGER]
        .into_iter()
        .filter_map(|name| Target::entry(&store.join(name), Vec::new()))
        .map(|t| Target { refresh: true, ..t })
        .collect()
}

fn under(root: &Path, absolute: &str) -> PathBuf {
    root.join(absolute.trim_start_matches('/'))
}

/// An inotify event, reduced to what the decisions need.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `name` in the watched directory `wd` was created, written, closed after writing, changed
    /// attributes, deleted or moved in or out.
    Entry { wd: i32, name: OsString },
    /// The watched directory itself was deleted, moved or unmounted (or its watch dropped).
    Gone { wd: i32 },
    /// The kernel's queue overflowed: events were lost.
    Overflow,
}

/// Why a directory could not be watched.
#[derive(Debug, Clone, PartialEq)]
pub enum AddError {
    /// It went away between the look and the watch: look again.
    Vanished,
    /// The per-user watch limit (`fs.inotify.max_user_watches`) is reached.
    Limit,
    Other(String),
}

/// What the loop should do once the debounce is over.
#[derive(Debug, Clone, PartialEq)]
pub enum Due {
    /// Observe these again; run (trigger `watch`) only if they drifted.
    Check(BTreeSet<Resource>),
    /// Events were lost or cannot be had: converge everything.
    Full,
}

/// The targets in one directory, by entry name (or for any entry). Kept per directory rather
/// than per target, and a file's key made from the directory's and its name, so that 20,000
/// files in 200 directories hold 200 paths and 20,000 names.
#[derive(Debug, Default, PartialEq)]
struct Group {
    /// The declared paths of this directory's files, without their names: `/etc/nginx`.
    files_in: String,
    names: Names,
    any: Option<Hint>,
}

/// A directory's watched names with their hints, sorted and packed into one buffer rather than
/// an allocation each: with thousands of owned files they are the bulk of what the service keeps
/// between runs, and small allocations made among a large declaration's would pin its freed
/// memory long after it is gone.
#[derive(Debug, Default, PartialEq)]
struct Names {
    /// The names one after another.
    bytes: Vec<u8>,
    /// Where each name ends in `bytes`.
    ends: Vec<u32>,
    hints: Vec<Hint>,
}

impl Names {
    fn packed(names: BTreeMap<OsString, Hint>) -> Names {
        let mut packed = Names {
            bytes: Vec::with_capacity(names.keys().map(|n| n.len()).sum()),
            ends: Vec::with_capacity(names.len()),
            hints: Vec::with_capacity(names.len()),
        };
        for (name, hint) in names {
            packed.bytes.extend_from_slice(name.as_bytes());
            packed.ends.push(packed.bytes.len() as u32);
            packed.hints.push(hint);
        }
        packed
    }

    fn name(&self, i: usize) -> &OsStr {
        let start = i
            .checked_sub(1)
            .map_or(0, |before| self.ends[before] as usize);
        OsStr::from_bytes(&self.bytes[start..self.ends[i] as usize])
    }

    /// Binary search: the names are sorted.
    fn get(&self, name: &OsStr) -> Option<(&OsStr, &Hint)> {
        let (mut low, mut high) = (0, self.ends.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.name(mid).cmp(name) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return Some((self.name(mid), &self.hints[mid])),
            }
        }
        None
    }

    fn iter(&self) -> impl Iterator<Item = (&OsStr, &Hint)> {
        let names = (0..self.hints.len()).map(|i| self.name(i));
        names.zip(&self.hints)
    }
}

/// What an event on one entry means.
#[derive(Debug, Default, PartialEq)]
struct Hint {
    /// The entry is a file of the declaration (`files`, `Group::files_in` + `/` + its name).
    file: bool,
    resources: Vec<Resource>,
    refresh: bool,
}

impl Group {
    fn hints(&self) -> impl Iterator<Item = (Option<&OsStr>, &Hint)> {
        let named = self.names.iter().map(|(name, hint)| (Some(name), hint));
        named.chain(self.any.iter().map(|hint| (None, hint)))
    }

    /// Every resource an event on `name` (with `hint`) touches.
    fn resources(&self, name: Option<&OsStr>, hint: &Hint, out: &mut Vec<Resource>) {
        if let (true, Some(name)) = (hint.file, name) {
            let key = format!("{}/{}", self.files_in, name.to_string_lossy());
            out.push((Files::NAME, key));
        }
        out.extend(hint.resources.iter().cloned());
    }
}

/// What one watched directory stands for: its own group of targets (`own`), and groups in
/// directories below its entries while the directories on the way are missing (`below`).
#[derive(Debug, Default)]
struct Watched {
    own: bool,
    below: BTreeMap<OsString, Vec<PathBuf>>,
}

#[derive(Debug)]
struct Contest {
    /// Times of repairs by watch runs within the window.
    repairs: VecDeque<u64>,
    /// When it became contested, and how many repairs it took.
    contested: Option<(u64, usize)>,
    /// The last change seen while contested: it settles once this is `SETTLE_MS` old.
    last_change: u64,
}

/// A contested resource, for `status`: times are the loop's milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Contested {
    pub resource: Resource,
    pub since: u64,
    pub repairs: usize,
    pub last_change: u64,
}

#[derive(Debug, Default)]
pub struct Watch {
    groups: BTreeMap<PathBuf, Group>,
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
    pending: BTreeSet<Resource>,
    full: bool,
    first_at: Option<u64>,
    last_at: u64,
    contests: BTreeMap<Resource, Contest>,
    overflows: u64,
    last_overflow: Option<u64>,
    /// The watch limit was met before: a full run is owed only the first time.
    limited: bool,
}

impl Watch {
    /// Replaces what is watched (after every run: the declaration or ledger may have changed).
    pub fn set_targets(&mut self, targets: Vec<Target>) {
        // Gathered by name first, then each directory's names packed (`Names`).
        let mut gathered: BTreeMap<PathBuf, (Group, BTreeMap<OsString, Hint>)> = BTreeMap::new();
        for target in targets {
            let (group, names) = gathered.entry(target.dir).or_default();
            if let Some((files_in, _)) = target.file.as_deref().and_then(|k| k.rsplit_once('/')) {
                if group.files_in.is_empty() {
                    group.files_in = files_in.to_string();
                }
            }
            let hint = match target.name {
                Some(name) => names.entry(name).or_default(),
                None => group.any.get_or_insert_with(Hint::default),
            };
            hint.file |= target.file.is_some();
            hint.resources.extend(target.resources);
            hint.refresh |= target.refresh;
        }
        let groups: BTreeMap<PathBuf, Group> = gathered
            .into_iter()
            .map(|(dir, (group, names))| {
                let names = Names::packed(names);
                (dir, Group { names, ..group })
            })
            .collect();
        if groups != self.groups {
            self.groups = groups;
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
        for dir in self.groups.keys() {
            let mut at = dir.as_path();
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
                below.push(dir.clone());
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
        let touched: Vec<(&Group, Option<&OsStr>, &Hint)> = match event {
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
                let own = self.groups.get(&dir).filter(|_| watched.own);
                let below = watched.below.values().flatten();
                own.into_iter()
                    .chain(below.filter_map(|d| self.groups.get(d)))
                    .flat_map(|g| g.hints().map(move |(name, hint)| (g, name, hint)))
                    .collect()
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
                let own = self.groups.get(dir).filter(|_| watched.own);
                let exact = own.and_then(|g| Some((g, g.names.get(&name)?)));
                let exact = exact.map(|(g, (name, hint))| (g, Some(name), hint));
                let any = own.and_then(|g| Some((g, None, g.any.as_ref()?)));
                let below = below.into_iter().flatten();
                exact
                    .into_iter()
                    .chain(any)
                    .chain(
                        below
                            .filter_map(|d| self.groups.get(d))
                            .flat_map(|g| g.hints().map(move |(name, hint)| (g, name, hint))),
                    )
                    .collect()
            }
        };
        let refresh = touched.iter().any(|(_, _, h)| h.refresh);
        let mut resources = Vec::new();
        for (group, name, hint) in touched {
            group.resources(name, hint, &mut resources);
        }
        self.refresh |= refresh;
        for resource in resources {
            self.touch(now, resource);
        }
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
        match (check, settle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
        let due = match self.first_at {
            Some(first) if now >= (self.last_at + DEBOUNCE_MS).min(first + MAX_DELAY_MS) => {
                self.first_at = None;
                let pending = std::mem::take(&mut self.pending);
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
        self.full = false;
        self.first_at = None;
    }

    /// A watch run at `now` repaired `resources`; returns those that just became contested.
    pub fn repaired(&mut self, now: u64, resources: &[Resource]) -> Vec<Contested> {
        let mut newly = Vec::new();
        for resource in resources {
            let contest = self
                .contests
                .entry(resource.clone())
                .or_insert_with(|| Contest {
                    repairs: VecDeque::new(),
                    contested: None,
                    last_change: now,
                });
            contest.repairs.push_back(now);
            while contest
                .repairs
                .front()
                .is_some_and(|t| now.saturating_sub(*t) > CONTEST_WINDOW_MS)
            {
                contest.repairs.pop_front();
            }
            if contest.contested.is_none() && contest.repairs.len() >= CONTEST_REPAIRS {
                contest.contested = Some((now, contest.repairs.len()));
                contest.last_change = now;
                newly.push(contested(resource, contest));
            }
        }
        // Resources nobody fights over need no bookkeeping once their window has passed.
        self.contests.retain(|_, c| {
            c.contested.is_some()
                || c.repairs
                    .back()
                    .is_some_and(|t| now.saturating_sub(*t) <= CONTEST_WINDOW_MS)
        });
        newly
    }

    pub fn contested(&self) -> Vec<Contested> {
        self.contests
            .iter()
            .filter(|(_, c)| c.contested.is_some())
            .map(|(r, c)| contested(r, c))
            .collect()
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

fn contested(resource: &Resource, contest: &Contest) -> Contested {
    let (since, repairs) = contest.contested.unwrap_or((contest.last_change, 0));
    Contested {
        resource: resource.clone(),
        since,
        repairs,
        last_change: contest.last_change,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> Target {
        let target = Target::entry(Path::new(path), Vec::new()).unwrap();
        Target {
            file: Some(path.to_string()),
            ..target
        }
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
        fn new(targets: Vec<Target>, dirs: &[&str]) -> Fake {
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
        let names: BTreeMap<OsString, Hint> = ["b.conf", "a", "c", "ab"]
            .into_iter()
            .map(|n| {
                (
                    OsString::from(n),
                    Hint {
                        file: true,
                        ..Hint::default()
                    },
                )
            })
            .collect();
        let packed = Names::packed(names);
        let listed: Vec<&OsStr> = packed.iter().map(|(name, _)| name).collect();
        assert_eq!(listed, ["a", "ab", "b.conf", "c"]);
        for name in ["a", "ab", "b.conf", "c"] {
            assert_eq!(
                packed.get(OsStr::new(name)).map(|(n, _)| n),
                Some(OsStr::new(name))
            );
        }
        for name in ["", "b", "aa", "d"] {
            assert!(packed.get(OsStr::new(name)).is_none(), "{name}");
        }
        assert!(Names::default().get(OsStr::new("a")).is_none());
    }

    #[test]
    fn targets_of_a_declaration_and_ledger() {
        let config = crate::declaration::tests::test_config();
        let json = r#"{"schema": 1,
            "packages": {"nginx": {}},
            "files": {"/etc/nginx/nginx.conf": {"content": "x"}},
            "units": {"nginx.service": {"reload_on": ["/etc/nginx/nginx.conf"]},
                      "app.service": {"content": "[Service]\nExecStart=/bin/true\n"}}}"#;
        let d = crate::declaration::parse(
            json.as_bytes(),
            &crate::declaration::Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
        .unwrap();
        let mut ledger = Ledger::default();
        ledger.insert::<Files>("/etc/old.conf", crate::store::Entry::created());
        ledger.insert::<Packages>("vim", crate::store::Entry::created());
        let places = Places {
            root: Path::new("/mnt"),
            store: Path::new("/var/lib/mesh-host"),
            unit_dir: Path::new("/etc/systemd/system"),
            pacman_db: Some(Path::new("/mnt/var/lib/pacman/local")),
        };
        let got: Vec<String> = targets(&places, &d, &ledger)
            .iter()
            .map(|t| {
                let name = t.name.as_ref().map(|n| n.to_string_lossy().into_owned());
                let file = t.file.iter().map(|key| ("files", key.clone()));
                let resources: Vec<String> = file
                    .chain(t.resources.iter().cloned())
                    .map(|(k, r)| format!("{k} {r}"))
                    .collect();
                format!(
                    "{} {} refresh={} [{}]",
                    t.dir.display(),
                    name.as_deref().unwrap_or("*"),
                    t.refresh,
                    resources.join(", ")
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                "/var/lib/mesh-host declaration.json refresh=true []",
                "/var/lib/mesh-host ledger.json refresh=true []",
                "/mnt/etc/nginx nginx.conf refresh=false [files /etc/nginx/nginx.conf, units nginx.service]",
                "/mnt/etc old.conf refresh=false [files /etc/old.conf]",
                "/mnt/etc/systemd/system app.service refresh=false [units app.service]",
                "/mnt/var/lib/pacman/local * refresh=false [packages nginx, packages vim]",
            ]
        );
    }

    #[test]
    fn parents_are_watched_once_and_events_map_to_their_files() {
        let mut f = Fake::new(
            vec![
                file("/r/etc/motd"),
                file("/r/etc/hosts"),
                file("/r/etc/ssh/sshd_config"),
            ],
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
        let mut f = Fake::new(vec![file("/etc/motd")], &["/etc"]);
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
        let mut f = Fake::new(
            vec![file("/r/etc/nginx/conf.d/site.conf")],
            &["/r", "/r/etc"],
        );
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
        let packages = vec![("packages", "a".into()), ("packages", "b".into())];
        let mut f = Fake::new(
            vec![Target {
                dir: "/var/lib/pacman/local".into(),
                name: None,
                file: None,
                resources: packages.clone(),
                refresh: false,
            }],
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
        let mut f = Fake::new(
            vec![file("/etc/motd"), file("/srv/x/y")],
            &["/etc", "/srv/x"],
        );
        assert_eq!(f.watched(), ["/etc", "/srv/x"]);
        f.watch.set_targets(vec![file("/etc/motd")]);
        assert!(f.watch.needs_sync());
        f.sync();
        assert_eq!(f.watched(), ["/etc"]);
        assert_eq!(f.watch.take_stale(), vec![2]);
        f.watch.set_targets(vec![file("/etc/motd")]);
        assert!(!f.watch.needs_sync(), "the same targets need no look");
    }

    #[test]
    fn overflow_and_the_watch_limit_ask_for_a_full_run() {
        let mut f = Fake::new(vec![file("/etc/motd")], &["/etc"]);
        f.entry(0, "/etc", "motd");
        f.watch.handle(10, Event::Overflow);
        assert_eq!(f.watch.take_due(10 + DEBOUNCE_MS).0, Some(Due::Full));
        assert_eq!(f.watch.overflows(), (1, Some(10)));
        assert!(f.watch.needs_sync());

        let mut w = Watch::default();
        w.set_targets(vec![file("/etc/motd"), file("/srv/a")]);
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
        let mut f = Fake::new(vec![file("/etc/motd")], &["/etc"]);
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
        let mut f = Fake::new(vec![file("/etc/motd"), file("/etc/hosts")], &["/etc"]);
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
