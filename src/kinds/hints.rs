//! Watch hints: where an inotify event may mean that one of a kind's resources changed, and
//! which it touches. Each kind gives its own (`Kind::watch`) to the service's watcher, which
//! names no kind: an event is a hint, never a verdict, and what it touched is observed again
//! before anything runs.

/// A directory the service knows the place of (from its config, or by asking pacman) where a
/// kind's resources live besides their declared paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The unit directory the host writes unit files to (`config.unit_dir`, in the target root).
    UnitDir,
    /// pacman's local database (`pacman::local_db_dir`): a transaction adds or removes an entry.
    PacmanDb,
}

/// What a kind tells the watcher for its declared and owned resources (`'d`: borrowed from the
/// declaration and the ledger), each touching a resource of that kind.
pub trait Hints<'d> {
    /// An event on the file at `path` (absolute in the target root, as declared) touches the
    /// resource that path is the key of.
    fn path(&mut self, path: &'d str);
    /// An event on the file at `path` touches the resource `key` (a unit restarted on it).
    fn path_touches(&mut self, path: &'d str, key: &'d str);
    /// An event on the entry `name` of `place` touches the resource `key`.
    fn entry(&mut self, place: Place, name: &'d str, key: &'d str);
    /// Any event in `place` touches the resource `key`.
    fn any(&mut self, place: Place, key: &'d str);
}
