//! Watch hints: where an inotify event may mean that one of a kind's resources changed, and
//! which it touches. Each kind gives its own (`Kind::watch`) to the service's watcher, which
//! names no kind: an event is a hint, never a verdict, and what it touched is observed again
//! before anything runs.

use super::{each, Kind, Visit};
use crate::model::declaration::Declaration;
use crate::store::Ledger;

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

/// Whether any kind's hints for `declaration` and `ledger` are in `place`: the service finds
/// where pacman's local database is (asking pacman) only then.
pub fn wants(place: Place, declaration: &Declaration, ledger: &Ledger) -> bool {
    struct Wants(Place, bool);
    impl<'d> Hints<'d> for Wants {
        fn path(&mut self, _: &'d str) {}
        fn path_touches(&mut self, _: &'d str, _: &'d str) {}
        fn entry(&mut self, place: Place, _: &'d str, _: &'d str) {
            self.1 |= place == self.0;
        }
        fn any(&mut self, place: Place, _: &'d str) {
            self.1 |= place == self.0;
        }
    }
    struct Asking<'r, 'd>(&'r mut Wants, &'d Declaration, &'d Ledger);
    impl Visit for Asking<'_, '_> {
        type Out = ();
        fn visit<K: Kind>(&mut self) {
            K::watch(self.1, self.2, self.0);
        }
    }
    let mut wants = Wants(place, false);
    each(&mut Asking(&mut wants, declaration, ledger));
    wants.1
}
