//! File operations relative to an open directory, for the files kind and the store alike. Paths are
//! walked one component at a time with `O_NOFOLLOW`, so a symlink anywhere below the starting
//! directory is refused rather than followed, and every replacement is atomic and durable: a temp
//! file beside the target, fsync, rename over it, fsync the directory.

//!
//! Split by what is done: `read.rs`, `write.rs` (atomic replacement, temps, removal),
//! `attrs.rs` (mode, owner, extended attributes), `walk.rs` (paths from a root, the `Fence`),
//! `dirs.rs` (directories kept open while paths in them are looked at);
//! `calls.rs` holds each system call as a safe function, fsutil's only `unsafe`.

mod attrs;
mod calls;
mod dirs;
mod read;
#[cfg(test)]
pub mod tests;
mod walk;
mod write;

pub use attrs::Xattr;
pub use dirs::Dirs;
#[cfg(test)]
pub use walk::walk_to_dir;
pub use walk::{
    create_dir_all, open_dir_below, open_walk_root, read_below, walk_into_fenced, walk_to_parent,
    walk_to_parent_fenced, Fence, Parent, WalkError,
};
pub use write::{PendingWrite, TEMP_SUFFIX};

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a name in a directory is, without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Other,
}

impl FileType {
    pub fn describe(self) -> &'static str {
        match self {
            FileType::Regular => "a regular file",
            FileType::Directory => "a directory",
            FileType::Symlink => "a symlink",
            FileType::Other => "a special file",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub file_type: FileType,
    /// Permission bits, including setuid/setgid/sticky (`0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Hard links to it (`st_nlink`): more than one, and a change in place would reach the
    /// others.
    pub links: u64,
}

/// How long before an observation a file must have last changed for its stamp to be trusted.
/// A change within the same tick of the file clock as the host's read would keep the stamp the
/// host recorded (git's "racy" case), so such a stamp is not kept. Filesystems with nanosecond
/// timestamps tick with the kernel's coarse clock (at most 10 ms); a stamp whose nanoseconds are
/// both zero is taken to come from a filesystem that keeps whole seconds (or two, as FAT).
const RACY_NS: i64 = 20_000_000;
const RACY_WHOLE_SECONDS_NS: i64 = 2_000_000_000;

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

/// Everything `fstatat` says of a file that changes when its content or attributes do, as git's
/// index keeps it: no user process can set the ctime, so any write, chmod or chown changes the
/// stamp (see `store::FilesIndex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub device: u64,
    pub inode: u64,
    pub size: u64,
    /// The whole `st_mode`: type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Unix nanoseconds.
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// The time the kernel stamps files with (`CLOCK_REALTIME_COARSE`), in unix nanoseconds: a file
/// changed from now on gets a ctime at least this.
pub fn file_clock_now_ns() -> i64 {
    let ts = calls::realtime_coarse();
    ts.tv_sec.saturating_mul(1_000_000_000) + ts.tv_nsec
}

/// A file's identity and modification time (unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    pub device: u64,
    pub inode: u64,
    pub modified: i64,
}

/// What is at a name, found without following it: a symlink is reported with its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Nothing,
    File(Stat, Vec<u8>),
    Link(PathBuf),
}

/// An open directory; the anchor of every operation here.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

/// Runs `f` with `name` as a NUL-terminated string for a system call: in a buffer on the stack
/// when it is short (every name under 256 bytes, which is every name most filesystems allow), so
/// looking at thousands of files allocates nothing, and the buffer is never moved.
fn with_c_name<T>(name: &OsStr, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
    let bytes = name.as_bytes();
    if bytes.len() >= 256 {
        return f(&cstring(name)?);
    }
    let mut buffer = [0u8; 256];
    buffer[..bytes.len()].copy_from_slice(bytes);
    // Up to its first NUL: a name with one of its own is refused.
    match CStr::from_bytes_until_nul(&buffer[..=bytes.len()]) {
        Ok(c) if c.to_bytes().len() == bytes.len() => f(c),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in name")),
    }
}

fn stat_of(st: &libc::stat) -> Stat {
    let file_type = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => FileType::Regular,
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        _ => FileType::Other,
    };
    Stat {
        file_type,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        links: st.st_nlink,
    }
}

fn stamp_of(st: &libc::stat) -> Stamp {
    let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
    Stamp {
        device: st.st_dev,
        inode: st.st_ino,
        size: st.st_size as u64,
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
        ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
    }
}

impl Dir {
    /// Opens a directory the caller names (a root, the store); symlinks in it are the caller's choice.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = cstring(path.as_os_str())?;
        let fd = calls::open(&c, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)?;
        Ok(Dir { fd })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `openat` of `name` in this directory with `flags` (never creating), retried on EINTR.
    fn open_at(&self, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        with_c_name(name, |c| calls::openat(self.fd(), c, flags, 0))
    }

    /// Opens child directory `name` without following a symlink.
    pub fn child(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = self.open_at(
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )?;
        Ok(Dir { fd })
    }

    /// This directory's own `Stamp`.
    pub fn stamp(&self) -> io::Result<Stamp> {
        Ok(stamp_of(&calls::fstat(self.fd())?))
    }

    /// Makes renames and removals in this directory durable.
    pub fn sync(&self) -> io::Result<()> {
        calls::fsync(self.fd())
    }

    /// The device this directory is on: which filesystem `sync_filesystem` flushes.
    pub fn device(&self) -> io::Result<u64> {
        Ok(calls::fstat(self.fd())?.st_dev)
    }

    /// The bytes an unprivileged writer may still use on this directory's filesystem (`fstatvfs`:
    /// blocks available times the fragment size).
    pub fn free_space(&self) -> io::Result<u64> {
        let st = calls::fstatvfs(self.fd())?;
        Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }

    /// Flushes every written file of this directory's filesystem to disk (`syncfs`).
    pub fn sync_filesystem(&self) -> io::Result<()> {
        calls::syncfs(self.fd())
    }
}
