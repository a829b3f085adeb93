//! Writing: atomic, durable replacement through a temp file beside the target (created with no
//! permission, given its owner and mode, filled, fsynced, renamed), the temps' names, removal.

use super::{calls, cstring, Dir};
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

/// A temp file written beside its target and not yet renamed over it (`Dir::write_temp_unsynced`).
#[derive(Debug)]
pub struct PendingWrite {
    tmp: CString,
    target: CString,
}

/// What every temp file mesh-host makes ends with: a declared file may not (`model::spec::files`),
/// so no declared name is ever one of the host's temps.
pub const TEMP_SUFFIX: &str = ".mesh-host.tmp";

/// `.NAME.mesh-host.tmp`: where an atomic write of store file `name` (a name the host chose) is
/// prepared.
pub(super) fn temp_name(name: &OsStr) -> io::Result<CString> {
    temp_name_with(name, "")
}

/// `.HASH.mesh-host.tmp`, HASH the first 128 bits of the SHA-256 of `name` in hex: where a write
/// of a declared file `name` is prepared. 47 bytes whatever the name's length (a 255-byte name
/// has a temp within NAME_MAX), one per name (so a crash's is found again), and in the host's
/// own namespace, which no declared name may enter.
pub(super) fn target_temp_name(name: &OsStr) -> CString {
    let digest = crate::util::codec::hex(&crate::util::codec::sha256(name.as_bytes())[..16]);
    let mut tmp_name = Vec::with_capacity(1 + 32 + TEMP_SUFFIX.len());
    tmp_name.push(b'.');
    tmp_name.extend_from_slice(digest.as_bytes());
    tmp_name.extend_from_slice(TEMP_SUFFIX.as_bytes());
    // Hex digits and a fixed suffix: no NUL.
    CString::new(tmp_name).unwrap_or_default()
}

/// `.NAME.PID-N.mesh-host.tmp`: a temp of `name` no other writer uses, this process's `N`th.
fn own_temp_name(name: &OsStr) -> io::Result<CString> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    temp_name_with(name, &format!(".{}-{n}", std::process::id()))
}

fn temp_name_with(name: &OsStr, writer: &str) -> io::Result<CString> {
    let mut tmp_name = Vec::from(b".".as_slice());
    tmp_name.extend_from_slice(name.as_bytes());
    tmp_name.extend_from_slice(writer.as_bytes());
    tmp_name.extend_from_slice(TEMP_SUFFIX.as_bytes());
    CString::new(tmp_name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// The pid in an `own_temp_name` of `name`, if `entry` is one.
fn own_temp_pid(name: &OsStr, entry: &OsStr) -> Option<u32> {
    let rest = entry.as_bytes().strip_prefix(b".")?;
    let rest = rest.strip_prefix(name.as_bytes())?.strip_prefix(b".")?;
    let writer = rest.strip_suffix(b".mesh-host.tmp")?;
    let (pid, n) = std::str::from_utf8(writer).ok()?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

impl Dir {
    /// Creates child directory `name` with exactly `mode` (set after creation, so the umask never
    /// decides it); `Ok(false)` when it already existed, whose mode is left as it is.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> io::Result<bool> {
        let c = cstring(name)?;
        match calls::mkdirat(self.fd(), &c, mode) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        }
        let created = self.child(name)?;
        calls::fchmod(created.fd(), mode)?;
        Ok(true)
    }

    /// `mkdir`, then, when it created the directory, fsyncs this one so the new entry survives a
    /// crash: the store's subdirectories, and directories made outside a target root.
    pub fn mkdir_durable(&self, name: &OsStr, mode: u32) -> io::Result<bool> {
        let created = self.mkdir(name, mode)?;
        if created {
            self.sync()?;
        }
        Ok(created)
    }

    /// Replaces `name` atomically and durably with `bytes`, `mode` and, if given, `owner` (uid, gid),
    /// all set on the temp file before the rename so the target never has the wrong attributes.
    pub fn write_atomic(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        self.write_atomic_unsynced(name, bytes, mode, owner)?;
        self.sync()
    }

    /// `write_atomic` of what `fill` writes, streamed to the temp file through a buffer: a large
    /// store file (the ledger, the declaration in force) is never built whole in memory first.
    pub fn write_atomic_streamed(
        &self,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.write_streamed(temp_name(name)?, name, mode, fill)
    }

    /// `write_atomic_streamed` through a temp file of this writer's own (`own_temp_name`), for a
    /// file written by writers that do not exclude each other (the files index, written by runs
    /// under the store's lock and by checks without it): one writer's temp is never removed or
    /// renamed by another, the last rename wins. A crash leaves the temp, for the store to remove
    /// once its process is gone (`own_temps`).
    pub fn write_atomic_streamed_own(
        &self,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.write_streamed(own_temp_name(name)?, name, mode, fill)
    }

    fn write_streamed(
        &self,
        tmp: CString,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut dyn io::Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let pending = self.write_temp(tmp, name, mode, None, true, |file| {
            let mut out = io::BufWriter::with_capacity(64 * 1024, file);
            fill(&mut out)?;
            io::Write::flush(&mut out)
        })?;
        self.rename_pending(pending)?;
        self.sync()
    }

    /// The temps of `name` writers made with `write_atomic_streamed_own`, with each writer's pid:
    /// one whose process is gone was left by a crash.
    pub fn own_temps(&self, name: &OsStr) -> io::Result<Vec<(OsString, u32)>> {
        let names = self.names_where(|entry| own_temp_pid(name, entry).is_some())?;
        Ok(names
            .into_iter()
            .filter_map(|entry| {
                let pid = own_temp_pid(name, &entry)?;
                Some((entry, pid))
            })
            .collect())
    }

    /// `write_atomic` whose rename is durable only once the caller syncs this directory: many
    /// files written into one directory then cost one directory fsync, not one each. The file's
    /// own bytes are durable before the rename, so the name never points at unwritten data.
    pub fn write_atomic_unsynced(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        self.write_temp_then_rename(name, mode, owner, |mut file| {
            io::Write::write_all(&mut file, bytes)
        })
    }

    /// `write_atomic` with no fsync at all: readers see the old file or the new one whole, but a
    /// crash may lose the write or leave the file empty. For store files whose loss costs nothing
    /// a person needs (no-op runs, caches), which a reader that cannot parse takes as absent.
    pub fn write_atomic_volatile(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
        let pending = self.write_temp(temp_name(name)?, name, mode, None, false, |mut file| {
            io::Write::write_all(&mut file, bytes)
        })?;
        self.rename_pending(pending)
    }

    /// `write_atomic_volatile` for a cache, which a reader may find missing: the old file is
    /// removed before the new one takes its name, because ext4 (`auto_da_alloc`) writes a file
    /// back to disk at once when a rename replaces another, and a no-op run that only rewrites
    /// its cache must not write to disk every time. A reader in between finds no file.
    pub fn write_volatile_cache(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
        let pending = self.write_temp(temp_name(name)?, name, mode, None, false, |mut file| {
            io::Write::write_all(&mut file, bytes)
        })?;
        if let Err(e) = calls::unlinkat(self.fd(), &pending.target, 0) {
            if e.kind() != io::ErrorKind::NotFound {
                self.discard_pending(pending);
                return Err(e);
            }
        }
        self.rename_pending(pending)
    }

    /// The temp file beside `name`, filled by `fill`, given its attributes, synced and renamed
    /// over `name`; removed again on any failure.
    fn write_temp_then_rename(
        &self,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
        fill: impl FnOnce(&std::fs::File) -> io::Result<()>,
    ) -> io::Result<()> {
        let pending = self.write_temp(temp_name(name)?, name, mode, owner, true, fill)?;
        self.rename_pending(pending)
    }

    /// The first half of an atomic write: the temp file beside `name`, filled by `fill` and given
    /// its attributes, fsynced when `sync` is set. Without it, the caller makes the data durable
    /// for many files at once (`sync_filesystem`) before any of them is renamed.
    pub(super) fn write_temp(
        &self,
        tmp: CString,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
        sync: bool,
        fill: impl FnOnce(&std::fs::File) -> io::Result<()>,
    ) -> io::Result<PendingWrite> {
        let target = cstring(name)?;
        // A temp file left by a crash is ours: remove it so O_EXCL can create a fresh one.
        let _ = calls::unlinkat(self.fd(), &tmp, 0);
        // Created with no permission at all (whatever the umask), then given its owner and its
        // exact mode, and only then filled: a secret file is never readable by anyone its
        // declaration does not allow, not even while it is written.
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let file = std::fs::File::from(calls::openat(self.fd(), &tmp, flags, 0)?);
        let chmod = || calls::fchmod(file.as_fd(), mode);
        let result = (|| {
            if let Some((uid, gid)) = owner {
                calls::fchown(file.as_fd(), uid, gid)?;
            }
            // After fchown, which clears setuid/setgid bits.
            chmod()?;
            fill(&file)?;
            // A write by a process without CAP_FSETID clears setuid/setgid bits again.
            if mode & 0o6000 != 0 {
                chmod()?;
            }
            if sync {
                file.sync_all()?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(PendingWrite { tmp, target }),
            Err(e) => {
                let _ = calls::unlinkat(self.fd(), &tmp, 0);
                Err(e)
            }
        }
    }

    /// `write_atomic_unsynced` in two halves for writing many files: this one leaves the temp
    /// file beside `name` written but neither synced nor renamed. Once every file is written,
    /// `sync_filesystem` makes all their data durable at once (one call, not an fsync each), and
    /// only then does `rename_pending` put each in place, so a name never points at unwritten
    /// data. A crash before the rename leaves the old file and a temp that the next write of
    /// `name`, or `remove_temp`, removes.
    pub fn write_temp_unsynced(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<PendingWrite> {
        self.write_temp(
            target_temp_name(name),
            name,
            mode,
            owner,
            false,
            |mut file| io::Write::write_all(&mut file, bytes),
        )
    }

    /// Renames a written temp file over its target (removing it if that fails); durable once the
    /// caller syncs this directory.
    pub fn rename_pending(&self, pending: PendingWrite) -> io::Result<()> {
        let result = calls::renameat(self.fd(), &pending.tmp, &pending.target);
        if result.is_err() {
            let _ = calls::unlinkat(self.fd(), &pending.tmp, 0);
        }
        result
    }

    /// Removes a written temp file instead of renaming it.
    pub fn discard_pending(&self, pending: PendingWrite) {
        let _ = calls::unlinkat(self.fd(), &pending.tmp, 0);
    }

    /// Removes the temp file a crash may have left beside declared file `name` (nothing when
    /// there is none), and the one an earlier version named `.NAME.mesh-host.tmp`.
    pub fn remove_temp(&self, name: &OsStr) -> io::Result<()> {
        let temps = [Some(target_temp_name(name)), temp_name(name).ok()];
        for tmp in temps.into_iter().flatten() {
            match calls::unlinkat(self.fd(), &tmp, 0) {
                Ok(_) => {}
                // ENAMETOOLONG: an earlier version could not have written it either.
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ENAMETOOLONG) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Renames `from` to `to` in this directory (replacing `to`); `Ok(false)` when `from` is
    /// absent. Durable once the caller syncs this directory.
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<bool> {
        let (from, to) = (cstring(from)?, cstring(to)?);
        match calls::renameat(self.fd(), &from, &to) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes non-directory `name` (a symlink itself, never its target); `Ok(false)` if absent.
    pub fn remove(&self, name: &OsStr) -> io::Result<bool> {
        self.unlink(name, 0)
    }

    /// Removes empty directory `name`; `Ok(false)` if absent.
    pub fn rmdir(&self, name: &OsStr) -> io::Result<bool> {
        self.unlink(name, libc::AT_REMOVEDIR)
    }

    fn unlink(&self, name: &OsStr, flags: libc::c_int) -> io::Result<bool> {
        let c = cstring(name)?;
        match calls::unlinkat(self.fd(), &c, flags) {
            Ok(_) => {
                self.sync()?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}
