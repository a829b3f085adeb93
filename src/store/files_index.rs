//! The files index (`files-index`): for each owned file, its stat when the host last knew its
//! content to be the declared one, and the digest of that content, so a no-op run looks at each
//! file once (`fstatat`) instead of reading it. The step git's index takes; a cache only: a
//! missing, corrupt or older-version index reads as empty and is rebuilt by reading the files.
//!
//! The format is compact binary, written whole (atomically, durably) only when it changed: a
//! header line, records sorted by key (`u16` key length, the key, the stamp's fields and the
//! 32-byte SHA-256 of the content, little-endian), then the SHA-256 of all that, so a torn or
//! mixed write (two commands saving at once) reads as corrupt, never as a wrong entry.

use std::cell::Cell;
use std::ffi::OsStr;
use std::io;

use super::{Store, StoreError};
use crate::codec;
use crate::fsutil::Stamp;

const FILE: &str = "files-index";
const HEADER: &[u8] = b"mesh-host files-index 1\n";
/// A record after its key: device, inode, size (u64), mode, uid, gid (u32), mtime, ctime (i64),
/// digest.
const FIXED: usize = 8 * 3 + 4 * 3 + 8 * 2 + 32;
const CHECKSUM: usize = 32;

/// How long before an observation a file must have last changed for its stamp to be trusted.
/// A change within the same tick of the file clock as the host's read would keep the stamp the
/// host recorded (git's "racy" case), so such a stamp is not kept. Filesystems with nanosecond
/// timestamps tick with the kernel's coarse clock (at most 10 ms); a stamp whose nanoseconds are
/// both zero is taken to come from a filesystem that keeps whole seconds (or two, as FAT).
const RACY_NS: i64 = 20_000_000;
const RACY_WHOLE_SECONDS_NS: i64 = 2_000_000_000;

/// What the index keeps of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    pub stamp: Stamp,
    /// SHA-256 of the content the file held with that stamp.
    pub digest: [u8; 32],
}

/// The index as read: its bytes, and where each record starts (in key order).
#[derive(Debug, Default)]
pub struct FilesIndex {
    bytes: Vec<u8>,
    records: Vec<u32>,
    /// The record after the last one found: observation asks in key order, so the next key is
    /// usually there (one comparison, not a binary search).
    next: Cell<usize>,
}

/// Whether a file with `stamp`, looked at by an observation that began when the file clock read
/// `observed_from_ns` (`fsutil::file_clock_now_ns`), can be trusted by its stamp from now on: it
/// last changed clearly before that, so any later change gets another ctime.
pub fn is_cacheable(stamp: &Stamp, observed_from_ns: i64) -> bool {
    let whole_seconds = stamp.ctime_ns % 1_000_000_000 == 0 && stamp.mtime_ns % 1_000_000_000 == 0;
    let margin = match whole_seconds {
        true => RACY_WHOLE_SECONDS_NS,
        false => RACY_NS,
    };
    let cutoff = observed_from_ns.saturating_sub(margin);
    stamp.ctime_ns < cutoff && stamp.mtime_ns < cutoff
}

impl FilesIndex {
    /// Parses an index file; `Err` says what is wrong with it.
    pub fn decode(bytes: Vec<u8>) -> Result<FilesIndex, String> {
        let body_len = bytes
            .len()
            .checked_sub(CHECKSUM)
            .filter(|&n| n >= HEADER.len())
            .ok_or("too short")?;
        if !bytes.starts_with(HEADER) {
            return Err("not a files index of this version".into());
        }
        if codec::sha256(&bytes[..body_len])[..] != bytes[body_len..] {
            return Err("its checksum does not match".into());
        }
        let mut records = Vec::new();
        let mut at = HEADER.len();
        let mut previous: Option<&[u8]> = None;
        while at < body_len {
            let start = u32::try_from(at).map_err(|_| "too large")?;
            let key = record_key(&bytes[..body_len], at).ok_or("a record is cut short")?;
            if std::str::from_utf8(key).is_err() {
                return Err("a key is not UTF-8".into());
            }
            if previous.is_some_and(|p| p >= key) {
                return Err("its records are not in key order".into());
            }
            previous = Some(key);
            at += 2 + key.len() + FIXED;
            records.push(start);
        }
        Ok(FilesIndex {
            bytes,
            records,
            next: Cell::new(0),
        })
    }

    pub fn get(&self, key: &str) -> Option<Cached> {
        let next = self.next.get();
        let found = match self.records.get(next) {
            Some(&at) if self.key_at(at) == key.as_bytes() => next,
            _ => self
                .records
                .binary_search_by(|&at| self.key_at(at).cmp(key.as_bytes()))
                .ok()?,
        };
        self.next.set(found + 1);
        Some(self.cached_at(self.records[found]))
    }

    /// Writes this index with `updates` (an entry set, or dropped with `None`) to `out`, merged
    /// as both are in key order: no copy of the whole index is built in memory (the first run
    /// after a large converge records every file).
    pub fn write_updated(
        &self,
        mut updates: Vec<(&str, Option<Cached>)>,
        out: &mut dyn io::Write,
    ) -> io::Result<()> {
        // Stable: of two updates of one key, the later is written.
        updates.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Checksummed {
            out,
            digest: ring::digest::Context::new(&ring::digest::SHA256),
        };
        out.write(HEADER)?;
        let mut old = self.records.iter().peekable();
        let mut updates = updates.into_iter().peekable();
        loop {
            let old_key = old.peek().map(|&&at| self.key_at(at));
            let update_key = updates.peek().map(|(key, _)| key.as_bytes());
            let old_first = match (old_key, update_key) {
                (None, None) => break,
                (Some(o), Some(u)) => o < u,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if old_first {
                if let (Some(&at), Some(key)) = (old.next(), old_key) {
                    let len = 2 + key.len() + FIXED;
                    out.write(&self.bytes[at as usize..at as usize + len])?;
                }
                continue;
            }
            if old_key.is_some() && old_key == update_key {
                old.next();
            }
            let Some((key, cached)) = updates.next() else {
                break;
            };
            let superseded = updates.peek().is_some_and(|(next, _)| *next == key);
            if let (Some(cached), false) = (cached, superseded) {
                write_record(&mut out, key, &cached)?;
            }
        }
        let checksum = out.digest.finish();
        out.out.write_all(checksum.as_ref())
    }

    /// This index with `updates`, as its file's bytes.
    #[cfg(test)]
    pub fn updated(&self, updates: Vec<(&str, Option<Cached>)>) -> Vec<u8> {
        let mut bytes = Vec::new();
        if let Err(e) = self.write_updated(updates, &mut bytes) {
            panic!("writing to memory: {e}");
        }
        bytes
    }

    fn key_at(&self, at: u32) -> &[u8] {
        record_key(&self.bytes, at as usize).unwrap_or_default()
    }

    fn cached_at(&self, at: u32) -> Cached {
        let key = self.key_at(at);
        let mut fields = Fields(&self.bytes[at as usize + 2 + key.len()..]);
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
}

/// The key of the record at `at`, if the whole record is there.
fn record_key(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let len = u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?) as usize;
    bytes.get(at + 2 + len + FIXED - 1)?;
    bytes.get(at + 2..at + 2 + len)
}

/// Reads a record's fixed fields in order (`decode` checked they are all there).
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
    digest: ring::digest::Context,
}

impl Checksummed<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.digest.update(bytes);
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
        match self.dir.read(OsStr::new(FILE), super::MAX_STORE_FILE) {
            Ok(None) => FilesIndex::default(),
            Ok(Some((_, bytes))) => FilesIndex::decode(bytes).unwrap_or_else(|e| {
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

    /// Replaces the files index with `old` and `updates` (see `FilesIndex::write_updated`).
    pub fn save_files_index(
        &self,
        old: &FilesIndex,
        updates: Vec<(&str, Option<Cached>)>,
    ) -> Result<(), StoreError> {
        self.dir
            .write_atomic_streamed(OsStr::new(FILE), 0o600, |out| {
                old.write_updated(updates, out)
            })
            .map_err(|e| self.error(FILE, format!("cannot be written: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(ctime_ns: i64) -> Stamp {
        Stamp {
            device: 1,
            inode: 2,
            size: 3,
            mode: 0o100644,
            uid: 4,
            gid: 5,
            mtime_ns: ctime_ns,
            ctime_ns,
        }
    }

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

    #[test]
    fn a_stamp_is_trusted_only_once_its_tick_is_past() {
        let now = 1_700_000_000_123_456_789;
        assert!(is_cacheable(&stamp(now - 3_000_000_000), now));
        assert!(is_cacheable(&stamp(now - RACY_NS - 1), now));
        // Changed within the racy window before the observation, or after it began.
        assert!(!is_cacheable(&stamp(now - RACY_NS), now));
        assert!(!is_cacheable(&stamp(now), now));
        assert!(!is_cacheable(&stamp(now + 5), now));
        // A whole-seconds filesystem: the second it changed in must be well past.
        let second = 1_700_000_000_000_000_000;
        assert!(!is_cacheable(&stamp(second), second + 1_500_000_000));
        assert!(is_cacheable(&stamp(second), second + 2_500_000_000));
        // An mtime set into the future keeps it uncached, whatever the ctime.
        let mut future = stamp(now - 3_000_000_000);
        future.mtime_ns = now + 1;
        assert!(!is_cacheable(&future, now));
    }
}
