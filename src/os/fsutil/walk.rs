//! Paths walked from a root one component at a time, never through a symlink, and never into
//! the `Fence` (the host's store); directories made on the way when asked.

use super::{Dir, FileType, Stat};
use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path could not be walked: names the offending component.
#[derive(Debug)]
pub enum WalkError {
    /// A component is a symlink or not a directory (for `read_below`, the file itself a
    /// symlink); mesh-host never follows symlinks.
    NotADirectory {
        path: PathBuf,
        found: FileType,
    },
    Io {
        path: PathBuf,
        error: io::Error,
    },
    /// A directory on the way is the `Fence`'s: the host's own store.
    Fenced {
        path: PathBuf,
        store: PathBuf,
    },
}

/// A directory no walk may enter, known by device and inode, so no spelling of a path reaches
/// it (a symlinked or bind-mounted parent, a `--root` that holds it): the host's own store.
#[derive(Debug, Clone)]
pub struct Fence {
    pub device: u64,
    pub inode: u64,
    /// How the host names it, for the error.
    pub path: PathBuf,
}

impl Fence {
    /// The fence around directory `dir`, opened at `path`.
    pub fn around(dir: &Dir, path: &Path) -> io::Result<Fence> {
        let stamp = dir.stamp()?;
        Ok(Fence {
            device: stamp.device,
            inode: stamp.inode,
            path: path.to_path_buf(),
        })
    }

    /// Refuses `dir`, walked to at `at`, when it is the fenced directory: asked of the open
    /// directory itself, so nothing swapped in after a look gets past.
    fn check(&self, dir: &Dir, at: &Path) -> Result<(), WalkError> {
        let stamp = dir.stamp().map_err(|error| WalkError::Io {
            path: at.to_path_buf(),
            error,
        })?;
        match (stamp.device, stamp.inode) == (self.device, self.inode) {
            true => Err(WalkError::Fenced {
                path: at.to_path_buf(),
                store: self.path.clone(),
            }),
            false => Ok(()),
        }
    }
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkError::NotADirectory {
                path,
                found: FileType::Symlink,
            } => write!(
                f,
                "{} is a symlink; mesh-host never follows symlinks",
                path.display()
            ),
            WalkError::NotADirectory { path, found } => {
                write!(
                    f,
                    "{} is {}, not a directory",
                    path.display(),
                    found.describe()
                )
            }
            WalkError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            WalkError::Fenced { path, store } => write!(
                f,
                "{} is the host's own store {} (the same directory, by device and inode); \
                 mesh-host never writes into it",
                path.display(),
                store.display()
            ),
        }
    }
}

/// The parent directory of an absolute, normalised `path` below `root`, and the final name.
/// With `create`, missing directories are made (mode 0755) and returned, outermost first, as
/// absolute paths; otherwise a missing directory gives `Ok(None)`.
pub struct Parent {
    pub dir: Dir,
    pub name: std::ffi::OsString,
    pub created: Vec<PathBuf>,
}

pub fn walk_to_parent(root: &Dir, path: &Path, create: bool) -> Result<Option<Parent>, WalkError> {
    walk_to_parent_fenced(root, path, create, None)
}

/// `walk_to_parent` that refuses to enter `fence`'s directory (the root included) at any
/// component.
pub fn walk_to_parent_fenced(
    root: &Dir,
    path: &Path,
    create: bool,
    fence: Option<&Fence>,
) -> Result<Option<Parent>, WalkError> {
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = names.split_last() else {
        return Err(WalkError::Io {
            path: path.to_path_buf(),
            error: io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"),
        });
    };
    let mut current = PathBuf::from("/");
    let mut created = Vec::new();
    let mut dir = open_walk_root(root, fence)?;
    for name in dirs {
        current.push(name);
        let Some((next, made)) = enter(&dir, &current, name, create)? else {
            return Ok(None);
        };
        if made {
            created.push(current.clone());
        }
        if let Some(fence) = fence {
            fence.check(&next, &current)?;
        }
        dir = next;
    }
    Ok(Some(Parent {
        dir,
        name: last.to_os_string(),
        created,
    }))
}

/// Opens directory `path` below `root` the same way as `walk_to_parent`, never through a
/// symlink; with `create`, missing directories are made (mode 0755). `Ok(None)` when it is
/// missing and not to be created. (The host's own walks keep their directories, `Dirs`, or
/// reach them through `open_dir_below`.)
#[cfg(test)]
pub fn walk_to_dir(root: &Dir, path: &Path, create: bool) -> Result<Option<Dir>, WalkError> {
    walk_to_dir_fenced(root, path, create, None)
}

/// `walk_to_dir` that refuses to enter `fence`'s directory at any component, the last included.
fn walk_to_dir_fenced(
    root: &Dir,
    path: &Path,
    create: bool,
    fence: Option<&Fence>,
) -> Result<Option<Dir>, WalkError> {
    let Some(parent) = walk_to_parent_fenced(root, path, create, fence)? else {
        return Ok(None);
    };
    let Some((dir, _)) = enter(&parent.dir, path, &parent.name, create)? else {
        return Ok(None);
    };
    if let Some(fence) = fence {
        fence.check(&dir, path)?;
    }
    Ok(Some(dir))
}

/// Where a fenced walk starts: `root` opened again, checked against the fence (the root may be
/// the store itself).
pub fn open_walk_root(root: &Dir, fence: Option<&Fence>) -> Result<Dir, WalkError> {
    let top = Path::new("/");
    let dir = (root.child(OsStr::new("."))).map_err(|error| WalkError::Io {
        path: top.to_path_buf(),
        error,
    })?;
    if let Some(fence) = fence {
        fence.check(&dir, top)?;
    }
    Ok(dir)
}

/// One more step of a fenced walk (`walk_to_parent_fenced`, `open_walk_root`): directory `name`
/// in `parent`, which a walk reached at `path`, opened never through a symlink and checked
/// against the fence. `Ok(None)` when it is missing. For callers that keep the directories they
/// walked to and go on from them.
pub fn walk_into_fenced(
    parent: &Dir,
    path: &Path,
    name: &OsStr,
    fence: Option<&Fence>,
) -> Result<Option<Dir>, WalkError> {
    let path = path.join(name);
    let Some((dir, _)) = enter(parent, &path, name, false)? else {
        return Ok(None);
    };
    if let Some(fence) = fence {
        fence.check(&dir, &path)?;
    }
    Ok(Some(dir))
}

/// Directory `name` in `parent` (`path` is its own path), opened never through a symlink; with
/// `create`, made (mode 0755, `parent` then synced) when missing, which the second value says.
/// `Ok(None)` when it is missing and not to be made.
fn enter(
    parent: &Dir,
    path: &Path,
    name: &OsStr,
    create: bool,
) -> Result<Option<(Dir, bool)>, WalkError> {
    let io_error = |error| WalkError::Io {
        path: path.to_path_buf(),
        error,
    };
    let made = match parent.stat(name).map_err(io_error)? {
        Some(st) if st.file_type == FileType::Directory => false,
        Some(st) => {
            return Err(WalkError::NotADirectory {
                path: path.to_path_buf(),
                found: st.file_type,
            })
        }
        None if !create => return Ok(None),
        None => {
            let made = parent.mkdir(name, 0o755).map_err(io_error)?;
            if made {
                parent.sync().map_err(io_error)?;
            }
            made
        }
    };
    let dir = parent
        .child(name)
        .map_err(|error| match error.raw_os_error() {
            // Replaced by a symlink between the stat and the open: still never followed.
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => WalkError::NotADirectory {
                path: path.to_path_buf(),
                found: FileType::Symlink,
            },
            _ => io_error(error),
        })?;
    Ok(Some((dir, made)))
}

/// Opens the target root `root`, as the walks below start from it.
fn open_root(root: &Path) -> Result<Dir, WalkError> {
    Dir::open(root).map_err(|error| WalkError::Io {
        path: root.to_path_buf(),
        error,
    })
}

/// `walk_to_dir` from the target root at `root`: directory `path` (absolute, as seen on the
/// target) opened one component at a time, never through a symlink; with `create`, missing
/// directories are made (0755), never in `fence`'s directory, nor it. `Ok(None)` when it is
/// missing and not to be created.
pub fn open_dir_below(
    root: &Path,
    path: &Path,
    create: bool,
    fence: Option<&Fence>,
) -> Result<Option<Dir>, WalkError> {
    walk_to_dir_fenced(&open_root(root)?, path, create, fence)
}

/// Reads regular file `path` (absolute, as seen on the target) below the target root at `root`,
/// within `max` bytes, never through a symlink: one anywhere on the way, or the file itself, is
/// refused and named. `Ok(None)` when it or a directory on the way is missing.
pub fn read_below(
    root: &Path,
    path: &Path,
    max: u64,
) -> Result<Option<(Stat, Vec<u8>)>, WalkError> {
    let Some(parent) = walk_to_parent(&open_root(root)?, path, false)? else {
        return Ok(None);
    };
    parent
        .dir
        .read(&parent.name, max)
        .map_err(|error| match error.raw_os_error() {
            // O_NOFOLLOW's answer when the file itself is a symlink.
            Some(libc::ELOOP) => WalkError::NotADirectory {
                path: path.to_path_buf(),
                found: FileType::Symlink,
            },
            _ => WalkError::Io {
                path: path.to_path_buf(),
                error,
            },
        })
}

/// Creates `path` and any missing parents, each with exactly `mode` (never the umask's) and
/// durably (its parent fsynced), for directories the host makes outside a target root (its config
/// directory, the store's parents). Existing ones are left as they are; symlinks on the way are
/// followed, as for any path an operator names.
pub fn create_dir_all(path: &Path, mode: u32) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = path;
    while !current.as_os_str().is_empty() && std::fs::symlink_metadata(current).is_err() {
        missing.push(current);
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    for dir in missing.into_iter().rev() {
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            continue;
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        Dir::open(parent)?.mkdir_durable(name, mode)?;
    }
    Ok(())
}
