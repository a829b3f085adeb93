//! The files index (`files-index`): for each owned file, its stat when the host last knew its
//! content to be the declared one, and the digest of the spec declaring it (the ledger's, which
//! hashes the content), so a no-op run looks at each file once (`fstatat`) instead of reading it.
//! The step git's index takes; a cache only: a missing, corrupt or older-version index reads as
//! empty and is rebuilt by reading the files.
//!
//! The format is compact binary, written whole (atomically, durably) only when it changed: a
//! header line, records sorted by key (`u16` key length, the key, the stamp's fields and the
//! spec's 32-byte digest, little-endian), then a checksum of all that (`codec::Checksum`), so a
//! torn or mixed write (two commands saving at once) reads as corrupt, never as a wrong entry.
//! It is read as a stream and kept as its open file (`FilesIndex`), not as its bytes.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::io;

use super::{Store, StoreError};
use crate::os::fsutil::Stamp;
use crate::util::codec::Checksum;
use crate::util::sorted;

const FILE: &str = "files-index";
/// Version 3: a record's digest is its spec's (version 2 held the content's SHA-256).
const HEADER: &[u8] = b"mesh-host files-index 3\n";
/// After the header: the digest of the declaration every record of a file it declares agrees
/// with (`FilesIndex::agrees_with`), zeros for none.
const AGREES: usize = 32;
/// A record after its key: device, inode, size (u64), mode, uid, gid (u32), mtime, ctime (i64),
/// digest.
const FIXED: usize = 8 * 3 + 4 * 3 + 8 * 2 + 32;
const CHECKSUM: usize = 8;

/// What the index keeps of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    pub stamp: Stamp,
    /// The digest of the spec whose content the file held with that stamp (`content_digest`:
    /// the content's SHA-256 with the declared mode, owner and group, as the ledger keeps it).
    pub digest: [u8; 32],
}

/// The index as read, held as its open file and where each record starts (4 bytes a file), not
/// as its bytes: records are read when asked for, through a window that moves forward with the
/// lookups, so an index costs a few bytes a file of memory rather than its size. The file is
/// only ever replaced by a rename, so the open file keeps the content its checksum was checked on.
#[derive(Debug, Default)]
pub struct FilesIndex {
    /// The declaration (the SHA-256 of its bytes) whose spec every record of a file it
    /// declares holds the digest of: under it, a record's digest is the declared spec's,
    /// unmade. `None`: not known (see `kinds/files/observe.rs`, `IndexUse`).
    pub agrees_with: Option<[u8; 32]>,
    file: Option<std::fs::File>,
    records: Vec<u32>,
    /// Where the records end (the checksum follows).
    body_len: u32,
    window: RefCell<Window>,
}

/// Bytes of the index file from `start`, and the record after the last one found: observation
/// asks in key order, so the next key is usually there (one comparison, not a binary search).
#[derive(Debug, Default)]
struct Window {
    start: u32,
    bytes: Vec<u8>,
    next: usize,
}

/// How much of the index file is read at once when lookups move forward.
const WINDOW: usize = 64 * 1024;

/// The records of an index file as its body is read: where each starts, checked in key order.
#[derive(Default)]
struct Scan {
    records: Vec<u32>,
    /// Where the bytes fed next start in the body (0 until the header is in).
    at: u32,
    agrees_with: [u8; AGREES],
    previous: Vec<u8>,
    /// What is wrong with the records, told only once the checksum matched: a damaged file
    /// is reported as damaged, whatever the damage looks like.
    broken: Option<&'static str>,
}

impl Scan {
    /// Scans the whole records `body` starts with (the body from `at` on) and says how many
    /// bytes they take: the rest, part of a record, is fed again with the bytes that follow it.
    /// `Err` for a file of another version.
    fn feed(&mut self, body: &[u8]) -> Result<usize, String> {
        let mut at = 0;
        if self.at == 0 {
            let start = HEADER.len() + AGREES;
            if body.len() < start {
                return Ok(0);
            }
            if !body.starts_with(HEADER) {
                return Err("not a files index of this version".into());
            }
            self.agrees_with.copy_from_slice(&body[HEADER.len()..start]);
            at = start;
        }
        if self.broken.is_some() {
            return Ok(body.len());
        }
        // Keys are compared as bytes: one that is not UTF-8 (the checksum matched, so written
        // so) is no file's path, never found, and harmless.
        while let Some(key) = record_key(body, at) {
            if !self.previous.is_empty() && sorted::compare_bytes(&self.previous, key).is_ge() {
                self.broken = Some("its records are not in key order");
                break;
            }
            self.previous.clear();
            self.previous.extend_from_slice(key);
            self.records.push(self.at + at as u32);
            at += 2 + key.len() + FIXED;
        }
        self.at += at as u32;
        Ok(at)
    }
}

impl FilesIndex {
    /// Checks an index file, reading it once as a stream; `Err` says what is wrong with it.
    pub fn open(mut file: std::fs::File) -> Result<FilesIndex, String> {
        let size = file.metadata().map_err(|e| e.to_string())?.len();
        let body_len = size
            .checked_sub(CHECKSUM as u64)
            .filter(|&n| n >= (HEADER.len() + AGREES) as u64)
            .ok_or("too short")?;
        let body_len = u32::try_from(body_len).map_err(|_| "too large")?;
        let mut checksum = Checksum::default();
        let mut scan = Scan::default();
        // Read into the room after the bytes not yet scanned (`kept`, part of a record), so each
        // byte is copied once, from the file.
        let mut buffer = vec![0; WINDOW];
        let mut kept = 0;
        let mut read: u64 = 0;
        let mut tail = Vec::with_capacity(CHECKSUM);
        loop {
            if buffer.len() - kept < WINDOW / 2 {
                // A record longer than half the window (a key of tens of KiB).
                buffer.resize(kept + WINDOW, 0);
            }
            let n = match io::Read::read(&mut file, &mut buffer[kept..]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.to_string()),
            };
            let body_end = kept + (u64::from(body_len).saturating_sub(read) as usize).min(n);
            read += n as u64;
            tail.extend_from_slice(&buffer[body_end..kept + n]);
            checksum.update(&buffer[kept..body_end]);
            let scanned = scan.feed(&buffer[..body_end])?;
            buffer.copy_within(scanned..body_end, 0);
            kept = body_end - scanned;
        }
        if read != size || tail.len() != CHECKSUM {
            return Err("it changed while being read".into());
        }
        if scan.at == 0 {
            return Err("not a files index of this version".into());
        }
        if checksum.finish().as_slice() != tail.as_slice() {
            return Err("its checksum does not match".into());
        }
        if let Some(broken) = scan.broken {
            return Err(broken.into());
        }
        if kept != 0 {
            return Err("a record is cut short".into());
        }
        Ok(FilesIndex {
            agrees_with: Some(scan.agrees_with).filter(|d| *d != [0; AGREES]),
            file: Some(file),
            records: scan.records,
            body_len,
            window: RefCell::default(),
        })
    }

    pub fn get(&self, key: &str) -> Option<Cached> {
        let key = key.as_bytes();
        let next = self.window.borrow().next;
        let same = |r: &[u8]| sorted::compare_bytes(record_key_of(r), key).is_eq();
        let found = match self.with_record(next, true, same) {
            Some(true) => next,
            _ => {
                // Binary search, reading only the records it looks at.
                let (mut low, mut high) = (0, self.records.len());
                loop {
                    if low >= high {
                        return None;
                    }
                    let middle = low + (high - low) / 2;
                    match self.with_record(middle, false, |r| record_key_of(r).cmp(key))? {
                        std::cmp::Ordering::Less => low = middle + 1,
                        std::cmp::Ordering::Greater => high = middle,
                        std::cmp::Ordering::Equal => break middle,
                    }
                }
            }
        };
        self.window.borrow_mut().next = found + 1;
        self.with_record(found, true, cached_of)
    }

    /// Calls `f` with the bytes of record `i`, read into the window if they are not there
    /// (`ahead`: with the records after it, for lookups moving forward). `None` when there is no
    /// such record or the file cannot be read (the entry is then unknown, as in a lost index).
    fn with_record<R>(&self, i: usize, ahead: bool, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        use std::os::unix::fs::FileExt;
        let start = *self.records.get(i)?;
        let end = self.records.get(i + 1).copied().unwrap_or(self.body_len);
        let mut window = self.window.borrow_mut();
        let window_end = window.start as usize + window.bytes.len();
        if start < window.start || end as usize > window_end {
            let len = match ahead {
                true => (end - start).max(WINDOW as u32).min(self.body_len - start),
                false => end - start,
            };
            window.bytes.resize(len as usize, 0);
            window.start = start;
            let file = self.file.as_ref()?;
            if let Err(e) = file.read_exact_at(&mut window.bytes, u64::from(start)) {
                log::warn!("the files index cannot be read: {e}");
                window.bytes.clear();
                return None;
            }
        }
        let from = (start - window.start) as usize;
        Some(f(&window.bytes[from..from + (end - start) as usize]))
    }

    /// Writes this index with `updates` (an entry set, or dropped with `None`) to `out`, merged
    /// as both are in key order: the old records are read from the file as they are copied, and
    /// no copy of the whole index is built in memory (the first run after a large converge
    /// records every file). `agrees_with`: what the written index says it agrees with.
    pub fn write_updated(
        &self,
        mut updates: Vec<(&str, Option<Cached>)>,
        agrees_with: Option<[u8; 32]>,
        out: &mut dyn io::Write,
    ) -> io::Result<()> {
        // Stable: of two updates of one key, the later is written.
        updates.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Checksummed {
            out,
            checksum: Checksum::default(),
        };
        out.write(HEADER)?;
        out.write(&agrees_with.unwrap_or([0; AGREES]))?;
        let mut old = 0;
        let mut updates = updates.into_iter().peekable();
        loop {
            if old < self.records.len() {
                let update_key = updates.peek().map(|(key, _)| key.as_bytes());
                let copied = self
                    .with_record(old, true, |record| {
                        let key = record_key_of(record);
                        match update_key {
                            Some(u) if u <= key => Ok((false, u == key)),
                            _ => out.write(record).map(|()| (true, false)),
                        }
                    })
                    .ok_or_else(|| io::Error::other("the old files index cannot be read"))?;
                match copied? {
                    (true, _) => {
                        old += 1;
                        continue;
                    }
                    (false, replaced) => old += usize::from(replaced),
                }
            }
            let Some((key, cached)) = updates.next() else {
                break;
            };
            let superseded = updates.peek().is_some_and(|(next, _)| *next == key);
            if let (Some(cached), false) = (cached, superseded) {
                write_record(&mut out, key, &cached)?;
            }
        }
        let checksum = out.checksum.finish();
        out.out.write_all(&checksum)
    }

    /// An index file holding `bytes`, opened.
    #[cfg(test)]
    pub fn decode(bytes: Vec<u8>) -> Result<FilesIndex, String> {
        let dir = crate::util::testutil::TempDir::new("files-index");
        let path = dir.path().join(FILE);
        std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
        // The open file outlives its directory's removal, as an index replaced by a rename.
        FilesIndex::open(std::fs::File::open(&path).map_err(|e| e.to_string())?)
    }

    /// This index with `updates`, as its file's bytes, agreeing with what it agreed with.
    #[cfg(test)]
    pub fn updated(&self, updates: Vec<(&str, Option<Cached>)>) -> Vec<u8> {
        let mut bytes = Vec::new();
        if let Err(e) = self.write_updated(updates, self.agrees_with, &mut bytes) {
            panic!("writing to memory: {e}");
        }
        bytes
    }
}

/// The key of a whole record (`open` checked its length).
fn record_key_of(record: &[u8]) -> &[u8] {
    record
        .get(2..record.len().saturating_sub(FIXED))
        .unwrap_or_default()
}

/// The entry of a whole record.
fn cached_of(record: &[u8]) -> Cached {
    let mut fields = Fields(&record[record.len().saturating_sub(FIXED)..]);
    Cached {
        stamp: Stamp {
            device: fields.u64(),
            inode: fields.u64(),
            size: fields.u64(),
            mode: fields.u32(),
            uid: fields.u32(),
            gid: fields.u32(),
            mtime_ns: fields.u64() as i64,
            ctime_ns: fields.u64() as i64,
        },
        digest: fields.digest(),
    }
}

/// The key of the record at `at`, if the whole record is there.
fn record_key(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let len = u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?) as usize;
    bytes.get(at + 2 + len + FIXED - 1)?;
    bytes.get(at + 2..at + 2 + len)
}

/// Reads a record's fixed fields in order (`open` checked they are all there).
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        if let Some((head, rest)) = self.0.split_at_checked(N) {
            out.copy_from_slice(head);
            self.0 = rest;
        }
        out
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    fn digest(&mut self) -> [u8; 32] {
        self.take()
    }
}

/// What is written to the index file, hashed on the way for its trailing checksum.
struct Checksummed<'a> {
    out: &'a mut dyn io::Write,
    checksum: Checksum,
}

impl Checksummed<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.checksum.update(bytes);
        self.out.write_all(bytes)
    }
}

/// One record. Keys longer than a `u16` cannot be file paths (`check_path` allows 4096 bytes)
/// and are left out.
fn write_record(out: &mut Checksummed, key: &str, cached: &Cached) -> io::Result<()> {
    let Ok(len) = u16::try_from(key.len()) else {
        return Ok(());
    };
    let s = &cached.stamp;
    let mut record = Vec::with_capacity(2 + key.len() + FIXED);
    record.extend_from_slice(&len.to_le_bytes());
    record.extend_from_slice(key.as_bytes());
    for n in [s.device, s.inode, s.size] {
        record.extend_from_slice(&n.to_le_bytes());
    }
    for n in [s.mode, s.uid, s.gid] {
        record.extend_from_slice(&n.to_le_bytes());
    }
    for n in [s.mtime_ns, s.ctime_ns] {
        record.extend_from_slice(&n.to_le_bytes());
    }
    record.extend_from_slice(&cached.digest);
    out.write(&record)
}

impl Store {
    /// The files index; empty when there is none or it cannot be used (it is rebuilt).
    pub fn files_index(&self) -> FilesIndex {
        match self
            .dir
            .open_reader(OsStr::new(FILE), super::MAX_STORE_FILE)
        {
            Ok(None) => FilesIndex::default(),
            Ok(Some(file)) => FilesIndex::open(file.into_inner()).unwrap_or_else(|e| {
                log::info!(
                    "{}: {e}; files are read and compared to rebuild it",
                    self.path.join(FILE).display()
                );
                FilesIndex::default()
            }),
            Err(e) => {
                log::warn!("{}: cannot be read: {e}", self.path.join(FILE).display());
                FilesIndex::default()
            }
        }
    }

    /// Replaces the files index with `old` and `updates`, saying it agrees with `agrees_with`
    /// (see `FilesIndex::write_updated`).
    pub fn save_files_index(
        &self,
        old: &FilesIndex,
        updates: Vec<(&str, Option<Cached>)>,
        agrees_with: Option<[u8; 32]>,
    ) -> Result<(), StoreError> {
        // Checks write it without the store's lock, beside a run writing it under the lock: each
        // writer its own temp, so neither removes nor renames the other's half-written file.
        self.dir
            .write_atomic_streamed_own(OsStr::new(FILE), 0o600, |out| {
                old.write_updated(updates, agrees_with, out)
            })
            .map_err(|e| self.error(FILE, format!("cannot be written: {e}")))
    }

    /// Removes the index's temps whose writers are gone (a crash mid-write); one being written
    /// by a live process (a check, without the lock) is left to it.
    pub(super) fn remove_files_index_temps(&self) -> Result<(), StoreError> {
        let error = |e: std::io::Error| self.error(FILE, format!("its temp files: {e}"));
        // The one temp name versions before writers had their own shared.
        let shared = format!(".{FILE}{}", super::TEMP_SUFFIX);
        self.dir.remove(OsStr::new(&shared)).map_err(error)?;
        for (temp, pid) in self.dir.own_temps(OsStr::new(FILE)).map_err(error)? {
            if pid != std::process::id() && !crate::os::process::alive(pid) {
                self.dir.remove(&temp).map_err(error)?;
                log::warn!(
                    "store {}: removed {}, left by a crash",
                    self.path.display(),
                    temp.to_string_lossy()
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::fsutil::tests::stamp;

    fn cached(ctime_ns: i64, digest: u8) -> Cached {
        Cached {
            stamp: stamp(ctime_ns),
            digest: [digest; 32],
        }
    }

    fn two_entries() -> Vec<u8> {
        FilesIndex::default().updated(vec![
            ("/etc/b", Some(cached(20, 2))),
            ("/etc/a", Some(cached(9, 9))),
            ("/etc/a", Some(cached(10, 1))),
        ])
    }

    #[test]
    fn the_declaration_an_index_agrees_with_round_trips_none_as_zeros() {
        let index = FilesIndex::decode(two_entries()).expect("valid");
        assert_eq!(index.agrees_with, None);
        let mut bytes = Vec::new();
        index
            .write_updated(Vec::new(), Some([7; 32]), &mut bytes)
            .unwrap();
        assert_eq!(bytes[HEADER.len()..HEADER.len() + AGREES], [7; 32]);
        let agreeing = FilesIndex::decode(bytes).expect("valid");
        assert_eq!(agreeing.agrees_with, Some([7; 32]));
        assert_eq!(agreeing.get("/etc/b"), Some(cached(20, 2)));
        let none = FilesIndex::decode(agreeing.updated(Vec::new())).expect("valid");
        assert_eq!(none.agrees_with, Some([7; 32]), "kept by `updated`");
    }

    #[test]
    fn entries_round_trip_and_updates_set_and_drop() {
        let index = FilesIndex::decode(two_entries()).expect("valid");
        assert_eq!(index.get("/etc/a"), Some(cached(10, 1)));
        assert_eq!(index.get("/etc/b"), Some(cached(20, 2)));
        assert_eq!(index.get("/etc/c"), None);
        let updated = index.updated(vec![
            ("/etc/a", None),
            ("/etc/c", Some(cached(30, 3))),
            ("/etc/b", Some(cached(21, 2))),
        ]);
        let index = FilesIndex::decode(updated).expect("valid");
        assert_eq!(index.get("/etc/a"), None);
        assert_eq!(index.get("/etc/b"), Some(cached(21, 2)));
        assert_eq!(index.get("/etc/c"), Some(cached(30, 3)));
    }

    /// An index of `keys`, the i-th with the entry `cached(i, i)`.
    fn numbered(keys: &[String]) -> FilesIndex {
        let entries = keys.iter().enumerate();
        let updates = entries.map(|(i, k)| (k.as_str(), Some(cached(i as i64, i as u8))));
        FilesIndex::decode(FilesIndex::default().updated(updates.collect())).expect("valid")
    }

    #[test]
    fn a_large_index_is_read_across_its_windows_in_any_order() {
        // 3,000 records of ~120 bytes: several windows, records cut by a window's end.
        let keys: Vec<String> = (0..3000)
            .map(|i| format!("/etc/scale/f{i:05}.conf"))
            .collect();
        let index = numbered(&keys);
        for (i, key) in keys.iter().enumerate().chain(keys.iter().enumerate().rev()) {
            assert_eq!(index.get(key), Some(cached(i as i64, i as u8)), "{key}");
        }
        assert_eq!(index.get("/etc/scale/f99999.conf"), None);
        let updated = index.updated(vec![(keys[1500].as_str(), None)]);
        let index = FilesIndex::decode(updated).expect("valid");
        assert_eq!(index.get(&keys[1500]), None);
        assert_eq!(index.get(&keys[2999]), Some(cached(2999, 2999_u32 as u8)));
    }

    /// A record longer than half the window that reads it (a key of 60,000 bytes, read from
    /// well into the first window) is read whole, and those around it too.
    #[test]
    fn a_record_longer_than_half_the_window_is_read() {
        let mut keys: Vec<String> = (0..200).map(|i| format!("/etc/a/f{i:03}")).collect();
        keys.push(format!("/etc/b/{}", "x".repeat(60_000)));
        keys.push("/etc/c".into());
        let index = numbered(&keys);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(index.get(key), Some(cached(i as i64, i as u8)));
        }
    }

    #[test]
    fn a_damaged_or_other_version_index_is_refused() {
        let good = two_entries();
        let mut flipped = good.clone();
        flipped[HEADER.len() + 12] ^= 1;
        let mut other_version = good.clone();
        other_version[HEADER.len() - 2] = b'0';
        for (bytes, why) in [
            (good[..good.len() - 1].to_vec(), "checksum"),
            (good[..10].to_vec(), "too short"),
            (flipped, "checksum"),
            (other_version, "version"),
            (b"{\"files\": {}}".to_vec(), "too short"),
        ] {
            let e = FilesIndex::decode(bytes).expect_err(why);
            assert!(e.contains(why), "{e}");
        }
    }
}
