//! `.pacnew` and `.pacsave` files beside the files the host owns. When pacman upgrades a package
//! whose configuration file was changed (here: by the host), it leaves the package's new default
//! beside it as `FILE.pacnew`; on removal it keeps the changed file as `FILE.pacsave`. Either
//! means the package's default moved since the host took the file, so the declaration deserves a
//! review. This finds them (through `fsutil`, never following a symlink) and sizes the difference.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::os::fsutil::{self, Dir, Stamp};

const SUFFIXES: [&str; 2] = ["pacnew", "pacsave"];

/// One owned file with a `.pacnew` or `.pacsave` beside it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pacnew {
    /// The owned file (absolute target path).
    pub path: String,
    /// `pacnew` or `pacsave`.
    pub suffix: String,
    /// Lines of the `.pacnew`/`.pacsave` that the owned file does not have.
    pub added: usize,
    /// Lines of the owned file that the `.pacnew`/`.pacsave` does not have.
    pub removed: usize,
    /// The owned file is secret (`files::is_secret`): its difference is not sized (both counts
    /// 0), as which package lines it lacks says something of its content.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

impl Pacnew {
    /// `/etc/x.conf.pacnew beside it (+3 -1 lines)`.
    pub fn describe(&self) -> String {
        if self.secret {
            return format!(
                "{}.{} beside it (a secret file: the difference is not shown)",
                self.path, self.suffix
            );
        }
        format!(
            "{}.{} beside it (+{} -{} lines)",
            self.path, self.suffix, self.added, self.removed
        )
    }
}

/// Directories last listed with no `.pacnew` or `.pacsave` in them, each with its stamp then: one
/// whose stamp has not changed since need not be listed again, as an entry added, removed or
/// renamed in a directory changes its mtime and ctime. Kept in the store between runs; a stamp is
/// kept only once it is older than the listing by more than the file clock's tick (the files
/// index's rule, `fsutil::is_cacheable`), so a name added in the same tick is not missed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuietDirs(BTreeMap<String, DirStamp>);

/// What `QuietDirs` keeps of a directory's stamp.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DirStamp {
    device: u64,
    inode: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl From<&Stamp> for DirStamp {
    fn from(s: &Stamp) -> DirStamp {
        DirStamp {
            device: s.device,
            inode: s.inode,
            mtime_ns: s.mtime_ns,
            ctime_ns: s.ctime_ns,
        }
    }
}

/// Looks beside each owned file of `paths` under `root`. Files that cannot be read (too large,
/// not regular, a symlink on the way) are logged and left out: they are not worth failing for.
/// Each parent directory is walked to and listed once, so the cost follows the number of
/// directories, not of owned files; one in `quiet` and unchanged is not listed (`QuietDirs`),
/// and `quiet` is left saying what this search found. `listed_from_ns`: the file clock
/// (`fsutil::file_clock_now_ns`) before the search.
pub fn find<'p>(
    root: &Path,
    paths: impl IntoIterator<Item = &'p str> + Clone,
    max_bytes: u64,
    quiet: &mut QuietDirs,
    listed_from_ns: i64,
) -> Vec<Pacnew> {
    let Ok(root) = Dir::open(root) else {
        return Vec::new();
    };
    // Owned paths are normalised and absolute: the parent is what stands before the last '/'.
    // They come sorted, so a directory's files mostly follow each other: one set insert each.
    let mut parents: HashSet<&str> = HashSet::new();
    let mut last = None;
    for path in paths.clone() {
        // A byte loop: the name after the last '/' is short, shorter than `rfind`'s setup.
        let parent = path
            .bytes()
            .rposition(|b| b == b'/')
            .map(|at| &path[..at.max(1)]);
        if parent != last {
            parents.extend(parent);
            last = parent;
        }
    }
    // Made only when some name ends so, which is rare: a no-op pays nothing for it.
    let mut owned: Option<HashSet<&str>> = None;
    let mut found = Vec::new();
    let mut still_quiet = BTreeMap::new();
    // Opened one step from a parent held (the walks from the root shared).
    let mut dirs = fsutil::Dirs::default();
    for parent in parents {
        let Ok(Some(dir)) = dirs.get_or_open(parent, &root, None) else {
            continue;
        };
        let stamp = dir.stamp().ok();
        let unchanged = |s: &Stamp| quiet.0.get(parent) == Some(&DirStamp::from(s));
        if let Some(stamp) = stamp.as_ref().filter(|s| unchanged(s)) {
            still_quiet.insert(parent.to_string(), DirStamp::from(stamp));
            continue;
        }
        let names = match dir.names_where(|n| beside_name(n).is_some()) {
            Ok(names) => names,
            Err(e) => {
                log::warn!("{parent}: cannot be listed: {e}");
                continue;
            }
        };
        if let Some(stamp) =
            stamp.filter(|s| names.is_empty() && fsutil::is_cacheable(s, listed_from_ns))
        {
            still_quiet.insert(parent.to_string(), DirStamp::from(&stamp));
        }
        for beside in &names {
            let Some((name, suffix)) = beside_name(beside) else {
                continue;
            };
            let path = match parent {
                "/" => format!("/{name}"),
                _ => format!("{parent}/{name}"),
            };
            let owned = owned.get_or_insert_with(|| paths.clone().into_iter().collect());
            if owned.contains(path.as_str()) {
                if let Some(p) = compare(dir, OsStr::new(name), beside, &path, suffix, max_bytes) {
                    found.push(p);
                }
            }
        }
    }
    quiet.0 = still_quiet;
    found.sort_by(|a, b| (&a.path, &a.suffix).cmp(&(&b.path, &b.suffix)));
    found
}

/// The file a `.pacnew`/`.pacsave` name is beside, and which suffix it has.
fn beside_name(beside: &OsStr) -> Option<(&str, &'static str)> {
    let beside = beside.to_str()?;
    SUFFIXES.iter().find_map(|&suffix| {
        let name = beside.strip_suffix(suffix)?.strip_suffix('.')?;
        Some((name, suffix))
    })
}

/// Sizes the difference between owned file `name` and `beside` (its `.pacnew`/`.pacsave`).
fn compare(
    dir: &Dir,
    name: &OsStr,
    beside: &OsStr,
    path: &str,
    suffix: &str,
    max_bytes: u64,
) -> Option<Pacnew> {
    let theirs = match dir.read(beside, max_bytes) {
        Ok(found) => found?.1,
        Err(e) => {
            log::warn!("{path}.{suffix}: cannot be read: {e}");
            return None;
        }
    };
    let ours = match dir.read(name, max_bytes) {
        Ok(found) => found.map(|(_, bytes)| bytes).unwrap_or_default(),
        Err(e) => {
            log::warn!("{path}: cannot be read: {e}");
            return None;
        }
    };
    let (added, removed) = diff_lines(&ours, &theirs);
    Some(Pacnew {
        path: path.to_string(),
        suffix: suffix.to_string(),
        added,
        removed,
        secret: false,
    })
}

/// Marks the `.pacnew` files beside secret files (`is_secret` of their path) as such, their
/// difference's size dropped: what the host reports of a secret file is its sizes alone.
pub fn withhold_secret(found: &mut [Pacnew], is_secret: impl Fn(&str) -> bool) {
    for pacnew in found.iter_mut().filter(|p| is_secret(&p.path)) {
        *pacnew = Pacnew {
            added: 0,
            removed: 0,
            secret: true,
            ..std::mem::take(pacnew)
        };
    }
}

/// How many lines `theirs` has that `ours` lacks, and the other way round, each line counted as
/// often as it occurs. Order is ignored (a moved line is no difference): a size for a person to
/// judge, cheap on any file, not a patch.
pub fn diff_lines(ours: &[u8], theirs: &[u8]) -> (usize, usize) {
    let mut balance: BTreeMap<&[u8], i64> = BTreeMap::new();
    for line in lines(ours) {
        *balance.entry(line).or_default() -= 1;
    }
    for line in lines(theirs) {
        *balance.entry(line).or_default() += 1;
    }
    let added = balance.values().filter(|n| **n > 0).sum::<i64>();
    let removed = -balance.values().filter(|n| **n < 0).sum::<i64>();
    (added as usize, removed as usize)
}

fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes
        .split(|b| *b == b'\n')
        .filter(move |_| !bytes.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    #[test]
    fn differing_lines_are_counted_both_ways() {
        for (ours, theirs, want) in [
            ("a\nb\nc\n", "a\nb\nc\n", (0, 0)),
            ("a\nb\nc\n", "a\nB\nc\nd\n", (2, 1)),
            ("a\nb\n", "b\na", (0, 0)),
            ("", "x\ny\n", (2, 0)),
            ("x\nx\n", "x\n", (0, 1)),
        ] {
            assert_eq!(
                diff_lines(ours.as_bytes(), theirs.as_bytes()),
                want,
                "{ours:?} vs {theirs:?}"
            );
        }
    }

    /// A directory found with nothing beside its files is kept as quiet and not listed while its
    /// stamp holds; one changed in the tick of its listing is not kept; a name added is found.
    #[test]
    fn a_quiet_directory_is_listed_again_only_once_it_changes() {
        let tmp = TempDir::new("pacnew-quiet");
        let etc = tmp.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("a.conf"), "port 1\n").unwrap();
        let owned = ["/etc/a.conf"];
        let search = |quiet: &mut QuietDirs, listed_from_ns| {
            find(tmp.path(), owned, 1 << 20, quiet, listed_from_ns)
        };
        let mut quiet = QuietDirs::default();
        assert!(search(&mut quiet, fsutil::file_clock_now_ns()).is_empty());
        // Its mtime set far back, so a name added below changes it whatever the clock's tick.
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
        let times = std::fs::FileTimes::new().set_modified(long_ago);
        std::fs::File::open(&etc).unwrap().set_times(times).unwrap();
        assert_eq!(
            quiet,
            QuietDirs::default(),
            "changed in the tick of its listing"
        );
        let later = fsutil::file_clock_now_ns() + 60_000_000_000;
        assert!(search(&mut quiet, later).is_empty());
        let stamp = DirStamp::from(&Dir::open(&etc).unwrap().stamp().unwrap());
        assert_eq!(quiet.0.get("/etc"), Some(&stamp));
        // Kept as quiet, it is not listed: a name that could only appear with a new stamp is
        // not seen while the stamp is the one kept.
        std::fs::write(etc.join("a.conf.pacnew"), "port 2\n").unwrap();
        let mut kept = QuietDirs(
            [(
                "/etc".to_string(),
                DirStamp::from(&Dir::open(&etc).unwrap().stamp().unwrap()),
            )]
            .into(),
        );
        assert!(search(&mut kept, later).is_empty());
        // As it really is, the new name changed the directory's stamp: listed, and found.
        let found = search(&mut quiet, later);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(quiet, QuietDirs::default());
    }

    #[test]
    fn finds_pacnew_and_pacsave_beside_owned_files_only() {
        let tmp = TempDir::new("pacnew");
        let etc = tmp.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("a.conf"), "port 1\n").unwrap();
        std::fs::write(etc.join("a.conf.pacnew"), "port 2\nnew\n").unwrap();
        std::fs::write(etc.join("b.conf.pacsave"), "old\n").unwrap();
        std::fs::write(etc.join("c.conf.pacnew"), "not owned\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", etc.join("d.conf.pacnew")).unwrap();
        let owned = [
            "/etc/a.conf",
            "/etc/b.conf",
            "/etc/d.conf",
            "/etc/none/x.conf",
        ]
        .map(String::from);
        let found = find(
            tmp.path(),
            owned.iter().map(String::as_str),
            1 << 20,
            &mut QuietDirs::default(),
            fsutil::file_clock_now_ns(),
        );
        assert_eq!(
            found,
            vec![
                Pacnew {
                    path: "/etc/a.conf".into(),
                    suffix: "pacnew".into(),
                    added: 2,
                    removed: 1,

                    secret: false,
                },
                Pacnew {
                    path: "/etc/b.conf".into(),
                    suffix: "pacsave".into(),
                    added: 1,
                    removed: 0,

                    secret: false,
                },
            ]
        );
        assert_eq!(
            found[0].describe(),
            "/etc/a.conf.pacnew beside it (+2 -1 lines)"
        );
    }
}
