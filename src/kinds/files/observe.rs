//! Observing declared and owned files: one walk per parent directory, each file's stat checked
//! against the files index (a file unchanged since it was last found as declared is not read again).

use super::state::{Held, State};
use crate::model::spec::files::{content_digest_of, Content};
use crate::os::fsutil::{self, Dir, Fence, FileType, Stamp};
use crate::store::{Cached, FilesIndex, Store};
use crate::util::codec;

/// The files index during one observation (see `store::FilesIndex`): the index as read, when
/// the observation began on the file clock, and the entries it changes.
///
/// Which declaration the index agrees with (`FilesIndex::agrees_with`): each observation
/// leaves every record of a file it looked at agreeing with the declaration it observed under
/// (the record holds the declared spec's digest, or is dropped), so an index that agreed with
/// it still does, and one that did not does once an observation has looked at every file the
/// declaration holds content for (`complete`). Under that declaration (the same bytes, so the
/// same specs) a record's digest is the declared spec's, which is then neither hashed nor made.
pub struct IndexUse<'k> {
    pub(super) old: FilesIndex,
    pub(super) observed_from_ns: i64,
    pub(super) updates: Vec<(&'k str, Option<Cached>)>,
    /// The declaration observed under, by its digest (`None` when it has none).
    declaration: Option<[u8; 32]>,
    /// The index agrees with it.
    agrees: bool,
}

impl<'k> IndexUse<'k> {
    /// Without a store (planning before the first apply) every file is read. `kept`: the index
    /// an earlier observation in this run read and left unchanged, used instead of reading it.
    /// `declaration`: the digest of the declaration observed under (`Declaration::digest`).
    pub(super) fn load(
        store: Option<&Store>,
        kept: Option<FilesIndex>,
        declaration: &str,
    ) -> IndexUse<'k> {
        let old = kept
            .or_else(|| store.map(Store::files_index))
            .unwrap_or_default();
        let declaration = codec::hex_decode_32(declaration);
        IndexUse {
            // Taken before any file is looked at: only files changed before it can be trusted.
            observed_from_ns: fsutil::file_clock_now_ns(),
            agrees: declaration.is_some() && old.agrees_with == declaration,
            old,
            updates: Vec::new(),
            declaration,
        }
    }

    /// Whether the index says the file `key`, now stamped `stamp`, holds `declared`: it had that
    /// stamp when the host last saw it hold the content of a spec with the declared spec's digest
    /// (which hashes the content). Then that digest, taken from the index, unmade, when it agrees
    /// with the declaration.
    pub(super) fn vouches(
        &self,
        key: &str,
        stamp: &Stamp,
        declared: &Declared,
    ) -> Option<[u8; 32]> {
        let cached = self.old.get(key)?;
        let same = cached.stamp == *stamp && stamp.size == declared.bytes.len() as u64;
        (same && (self.agrees || cached.digest == declared.digest())).then_some(cached.digest)
    }

    /// The file `key` was read with `stamp` and holds `declared`: kept, unless it changed too
    /// recently for its stamp to tell a later change (`fsutil::is_cacheable`).
    pub(super) fn confirm(&mut self, key: &'k str, stamp: Stamp, declared: &Declared) {
        if !fsutil::is_cacheable(&stamp, self.observed_from_ns) {
            return self.forget(key);
        }
        let cached = Cached {
            stamp,
            digest: declared.digest(),
        };
        if self.old.get(key) != Some(cached) {
            self.updates.push((key, Some(cached)));
        }
    }

    /// The file `key` is not (or no longer known to be) as declared.
    pub(super) fn forget(&mut self, key: &'k str) {
        if self.old.get(key).is_some() {
            self.updates.push((key, None));
        }
    }

    /// Writes the index back if any entry changed, or to say it now agrees with the declaration
    /// (`complete`: this run's observations have looked at every file it holds content for).
    /// A cache: failing to save it costs the next run reading files again, so it is only logged.
    /// The index as read when nothing changed (it is still the file's), to be used by the next
    /// observation.
    pub(super) fn save(self, store: Option<&Store>, complete: bool) -> Option<FilesIndex> {
        let store = store?;
        let agrees_with = match self.agrees || complete {
            true => self.declaration,
            false => None,
        };
        if self.updates.is_empty() && (self.agrees || !complete || agrees_with.is_none()) {
            return Some(self.old);
        }
        if let Err(e) = store.save_files_index(&self.old, self.updates, agrees_with) {
            log::warn!("{e}; the next run reads the files again");
        }
        None
    }
}

/// Declared content, with its spec's digest (`content_digest`: the ledger's, which the files
/// index keeps), made when first asked for: not when the index vouches for the file and agrees
/// with the declaration.
#[derive(Debug, Clone)]
pub struct Declared<'c> {
    pub(super) bytes: &'c [u8],
    content: &'c Content,
    digest: std::cell::OnceCell<[u8; 32]>,
}

impl<'c> Declared<'c> {
    pub(super) fn of(content: &'c Content) -> Declared<'c> {
        Declared {
            bytes: &content.bytes,
            content,
            digest: std::cell::OnceCell::new(),
        }
    }

    pub(super) fn digest(&self) -> [u8; 32] {
        *(self.digest)
            .get_or_init(|| content_digest_of(self.content, &codec::sha256(&self.content.bytes)))
    }
}

/// What one observation looks at files with: the root, the directories walked to so far, a
/// buffer each file is read into in turn, the files index, and the size limit.
pub struct Looking<'r, 'k> {
    pub(super) root: &'r Dir,
    pub(super) parents: fsutil::Dirs,
    pub(super) buffer: Vec<u8>,
    pub(super) index: IndexUse<'k>,
    pub(super) max: u64,
    /// Whether a file with no declared content is read (for a plan's diff of its removal).
    pub(super) read_undeclared: bool,
    /// The store, which no walk enters (`Store::fence`).
    pub(super) fence: Option<Fence>,
}

impl<'r, 'k> Looking<'r, 'k> {
    pub(super) fn new(
        root: &'r Dir,
        index: IndexUse<'k>,
        max: u64,
        read_undeclared: bool,
    ) -> Looking<'r, 'k> {
        Looking {
            root,
            parents: fsutil::Dirs::default(),
            buffer: Vec::new(),
            index,
            max,
            read_undeclared,
            fence: None,
        }
    }

    /// Observes one file. With `declared` content, the file is read and compared, unless the
    /// files index vouches for it; without, it is only looked at. A file not found as declared
    /// is forgotten by the index.
    pub(super) fn at(&mut self, key: &'k str, declared: Option<&Declared>) -> State {
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

    pub(super) fn stamped(&mut self, key: &'k str, declared: Option<&Declared>) -> State {
        let Looking {
            root,
            parents,
            buffer,
            index,
            max,
            read_undeclared,
            fence,
        } = self;
        let (root, max) = (*root, *max);
        let Some((parent_path, name)) = key.rsplit_once('/') else {
            return State::Blocked(format!("{key}: not a file path"));
        };
        let name = std::ffi::OsStr::new(name);
        let parent = parents.get_or_open(parent_path, root, fence.as_ref());
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
                if let Some(digest) = index.vouches(key, &stamp, declared) {
                    return State::Regular {
                        stat,
                        held: Held::Declared { digest },
                    };
                }
                match dir.read_after_stat(name, &stat, max, buffer) {
                    Ok(true) => {
                        let held = if buffer.as_slice() == declared.bytes {
                            index.confirm(key, stamp, declared);
                            Held::Declared {
                                digest: declared.digest(),
                            }
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
