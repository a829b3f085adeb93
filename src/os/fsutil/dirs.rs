//! Directories below a root kept open while many paths in them are looked at (`Dirs`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;

use super::{open_walk_root, walk_into_fenced, Dir, Fence};

/// Directories below a root opened as paths in them are asked for, so many files in one
/// directory cost one walk from the root, and a directory beside one already open costs one step
/// from their common parent (each still opened one component at a time, never through a
/// symlink, fenced off the store). At most `Dirs::KEPT` are held open, so paths in thousands of
/// directories stay far within the process's limit of open files (1,024 under systemd by
/// default).
#[derive(Default)]
pub struct Dirs {
    /// By the directory's path (absolute and normalised, so its text is its identity), without
    /// a trailing `/`: `""` is the root.
    held: HashMap<String, Result<Option<Dir>, String>>,
    /// The directory asked for last: paths come sorted, so a directory's files mostly follow
    /// each other and are found without hashing its path again.
    last: Option<(String, Result<Option<Dir>, String>)>,
}

impl Dirs {
    /// How many directories it holds open at most.
    pub const KEPT: usize = 64;

    /// The directory at `path` below `root` (`"/"` or `""`: the root itself), opened the first
    /// time it is asked for; `Ok(None)` when it is missing, `Err` says why it cannot be reached.
    pub fn get_or_open(
        &mut self,
        path: &str,
        root: &Dir,
        fence: Option<&Fence>,
    ) -> &Result<Option<Dir>, String> {
        let path = path.trim_end_matches('/');
        match self.last.take() {
            Some((last, dir)) if last == path => return &self.last.insert((last, dir)).1,
            Some((last, dir)) => self.keep(last, dir),
            None => {}
        }
        self.open(path, root, fence);
        let found = self.held.remove(path).unwrap_or(Ok(None));
        &self.last.insert((path.to_string(), found)).1
    }

    /// Holds the directory at `path`, opening its parent first (and so on up to the root),
    /// then walking one step from it.
    fn open(&mut self, path: &str, root: &Dir, fence: Option<&Fence>) {
        if self.held.contains_key(path) {
            return;
        }
        let found = match path.rsplit_once('/') {
            None => open_walk_root(root, fence).map(Some),
            Some((up, name)) => {
                self.open(up, root, fence);
                let at = Path::new(if up.is_empty() { "/" } else { up });
                match self.held.get(up) {
                    Some(Ok(Some(dir))) => walk_into_fenced(dir, at, OsStr::new(name), fence),
                    Some(Err(e)) => return self.keep(path.to_string(), Err(e.clone())),
                    Some(Ok(None)) | None => Ok(None),
                }
            }
        };
        self.keep(path.to_string(), found.map_err(|e| e.to_string()));
    }

    /// Holds `dir`, letting all others go first when `KEPT` are held.
    fn keep(&mut self, path: String, dir: Result<Option<Dir>, String>) {
        if self.held.len() >= Self::KEPT {
            self.held.clear();
        }
        self.held.insert(path, dir);
    }

    /// How many directories it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held.len() + usize::from(self.last.is_some())
    }
}
