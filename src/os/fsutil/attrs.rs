//! A file's attributes: mode and owner (on a copy when the file has other links), the owner of a
//! whole tree (the store's), and extended attributes read and set.

use super::{calls, read::readable, stat_of, with_c_name, write::target_temp_name, Dir};
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

impl Dir {
    /// `write_atomic_unsynced` of a declared file with its extended attributes (an original put
    /// back): through its own temp name (`target_temp_name`), which fits whatever the name's
    /// length. The attributes this process may not set are named in what it returns.
    pub fn replace_unsynced(
        &self,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
        xattrs: &[Xattr],
    ) -> io::Result<Vec<String>> {
        let mut refused = Vec::new();
        let tmp = target_temp_name(name);
        let pending = self.write_temp(tmp, name, mode, owner, true, |mut file| {
            io::Write::write_all(&mut file, bytes)?;
            refused = set_xattrs(file, xattrs);
            Ok(())
        })?;
        self.rename_pending(pending)?;
        Ok(refused)
    }

    /// Sets mode and owner of an existing regular file, without following a symlink: in place
    /// when `name` is its only link; otherwise on a copy renamed over `name` (synced; durable
    /// once the caller syncs this directory), so its other links, which may be anywhere on the
    /// filesystem (the store's key), keep theirs. Judged on the file opened, so a link made
    /// since it was observed is never changed either.
    pub fn set_attributes(
        &self,
        name: &OsStr,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> io::Result<()> {
        let fd = self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )?;
        let st = calls::fstat(fd.as_fd())?;
        if st.st_nlink > 1 {
            readable(&stat_of(&st), u64::MAX)?;
            let mut source = std::fs::File::from(fd);
            let tmp = target_temp_name(name);
            let pending = self.write_temp(tmp, name, mode, owner, true, |mut file| {
                io::copy(&mut source, &mut file).map(drop)
            })?;
            return self.rename_pending(pending);
        }
        if let Some((uid, gid)) = owner {
            calls::fchown(fd.as_fd(), uid, gid)?;
        }
        calls::fchmod(fd.as_fd(), mode)?;
        calls::fsync(fd.as_fd())?;
        Ok(())
    }

    /// The extended attributes of regular file `name` (never through a symlink), names with
    /// their values: `user.*`, `trusted.*`, `security.*` (file capabilities, SELinux labels) and
    /// POSIX ACLs (`system.posix_acl_access`), as far as this process may read them. None on a
    /// filesystem without them.
    pub fn xattrs(&self, name: &OsStr) -> io::Result<Vec<Xattr>> {
        let fd = self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )?;
        let fd = fd.as_fd();
        let unsupported = |e: &io::Error| e.raw_os_error() == Some(libc::ENOTSUP);
        // Each asked for its size first; grown and asked again if it grew meanwhile (ERANGE).
        let sized = |get: &dyn Fn(&mut [u8]) -> io::Result<usize>| -> io::Result<Vec<u8>> {
            loop {
                let size = get(&mut [])?;
                let mut buf = vec![0u8; size];
                match get(&mut buf) {
                    Ok(n) => {
                        buf.truncate(n);
                        return Ok(buf);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        let list = match sized(&|buf| calls::flistxattr(fd, buf)) {
            Ok(list) => list,
            Err(e) if unsupported(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut found = Vec::new();
        for attr in list.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let c = CString::new(attr)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "NUL in a name"))?;
            match sized(&|buf| calls::fgetxattr(fd, &c, buf)) {
                Ok(value) => found.push(Xattr {
                    name: attr.to_vec(),
                    value,
                }),
                // Removed meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// Gives this directory, and what is in it, the owner `uid` and group `gid` where they have
    /// another, never following a symlink: every name in it is looked at, and a directory's
    /// contents too when it or one above it had another owner (a `chown -R`), so a directory of
    /// many files with the right owner costs one look. A file with other hard links (which may be
    /// anywhere) gets it on a copy (`set_attributes`), so they keep theirs. The paths changed
    /// (below this directory) with the owner each had.
    pub fn enforce_owner(&self, uid: u32, gid: u32) -> io::Result<Vec<(PathBuf, u32, u32)>> {
        let mut changed = Vec::new();
        let st = calls::fstat(self.fd())?;
        let deep = (st.st_uid, st.st_gid) != (uid, gid);
        if deep {
            calls::fchown(self.fd(), uid, gid)?;
            changed.push((PathBuf::from("."), st.st_uid, st.st_gid));
        }
        self.enforce_owner_below(Path::new(""), uid, gid, deep, &mut changed)?;
        Ok(changed)
    }

    fn enforce_owner_below(
        &self,
        at: &Path,
        uid: u32,
        gid: u32,
        deep: bool,
        changed: &mut Vec<(PathBuf, u32, u32)>,
    ) -> io::Result<()> {
        for name in self.names_where(|_| true)? {
            let st = match with_c_name(&name, |c| calls::lstatat(self.fd(), c)) {
                Ok(st) => st,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let wrong = (st.st_uid, st.st_gid) != (uid, gid);
            // A name a writer removed meanwhile (the outbox, written without the lock) is skipped.
            let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
            let kind = st.st_mode & libc::S_IFMT;
            if wrong && kind != libc::S_IFDIR && st.st_nlink > 1 {
                // Another link, anywhere on the filesystem, would change owner too: a regular
                // file gets it on a copy renamed over this name; anything else is left as it is.
                if kind == libc::S_IFREG {
                    match self.set_attributes(&name, st.st_mode & 0o7777, Some((uid, gid))) {
                        Ok(()) => changed.push((at.join(&name), st.st_uid, st.st_gid)),
                        Err(e) if gone(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            if wrong {
                match with_c_name(&name, |c| calls::lchownat(self.fd(), c, uid, gid)) {
                    Ok(_) => changed.push((at.join(&name), st.st_uid, st.st_gid)),
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(e),
                }
            }
            if (deep || wrong) && kind == libc::S_IFDIR {
                match self.child(&name) {
                    Ok(dir) => dir.enforce_owner_below(&at.join(&name), uid, gid, true, changed)?,
                    Err(e) if gone(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Gives this directory exactly the permission bits `mode`; the bits it had if they differed.
    pub fn enforce_mode(&self, mode: u32) -> io::Result<Option<u32>> {
        let st = calls::fstat(self.fd())?;
        let had = st.st_mode & 0o7777;
        if had == mode {
            return Ok(None);
        }
        calls::fchmod(self.fd(), mode)?;
        Ok(Some(had))
    }
}

/// An extended attribute: its whole name (`user.x`, `security.capability`) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xattr {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// Sets `xattrs` on an open file; the names of those this process may not set (a
/// `security.*` one without the privilege, any on a filesystem without them), for the caller to
/// say. File capabilities go last: a change of owner, or a write, clears them.
fn set_xattrs(file: &std::fs::File, xattrs: &[Xattr]) -> Vec<String> {
    let mut refused = Vec::new();
    let capability = |x: &&Xattr| x.name == b"security.capability";
    let ordered = xattrs.iter().filter(|x| !capability(x));
    for xattr in ordered.chain(xattrs.iter().filter(capability)) {
        let named = String::from_utf8_lossy(&xattr.name).into_owned();
        let Ok(c) = CString::new(xattr.name.clone()) else {
            refused.push(named);
            continue;
        };
        if let Err(e) = calls::fsetxattr(file.as_fd(), &c, &xattr.value) {
            refused.push(format!("{named} ({e})"));
        }
    }
    refused
}
