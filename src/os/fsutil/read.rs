//! Reading: a name's `Stat` and `Stamp`, a regular file's bytes within a limit, a symlink's
//! target, a directory's names; never through a symlink and never blocking on a FIFO.

use super::{
    calls, cstring, stamp_of, stat_of, with_c_name, Dir, FileIdentity, FileType, Found, Stamp, Stat,
};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

impl Dir {
    /// `None` when `name` does not exist.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        match with_c_name(name, |c| calls::lstatat(self.fd(), c)) {
            Ok(st) => Ok(Some(stat_of(&st))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `stat` with the file's `Stamp`, from the same one system call.
    pub fn stat_stamped(&self, name: &OsStr) -> io::Result<Option<(Stat, Stamp)>> {
        match with_c_name(name, |c| calls::lstatat(self.fd(), c)) {
            Ok(st) => Ok(Some((stat_of(&st), stamp_of(&st)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads regular file `name` (never through a symlink) with its metadata, refusing files larger
    /// than `max` bytes. `None` when it does not exist.
    pub fn read(&self, name: &OsStr, max: u64) -> io::Result<Option<(Stat, Vec<u8>)>> {
        let mut bytes = Vec::new();
        Ok(self
            .read_into(name, max, &mut bytes)?
            .map(|stat| (stat, bytes)))
    }

    /// Regular file `name` (never through a symlink) opened to be read as a stream, no further
    /// than `max` bytes (a larger file is refused), for a caller that parses as it reads rather
    /// than holding the whole file. `None` when it does not exist.
    pub fn open_reader(
        &self,
        name: &OsStr,
        max: u64,
    ) -> io::Result<Option<io::Take<std::fs::File>>> {
        let Some(fd) = self.open_to_read(name)? else {
            return Ok(None);
        };
        let stat = stat_of(&calls::fstat(fd.as_fd())?);
        readable(&stat, max)?;
        Ok(Some(io::Read::take(std::fs::File::from(fd), max)))
    }

    /// `read` into `bytes` (cleared first), so a caller reading many files to compare them reuses
    /// one buffer instead of allocating one per file.
    pub fn read_into(
        &self,
        name: &OsStr,
        max: u64,
        bytes: &mut Vec<u8>,
    ) -> io::Result<Option<Stat>> {
        bytes.clear();
        let Some(fd) = self.open_to_read(name)? else {
            return Ok(None);
        };
        let stat = stat_of(&calls::fstat(fd.as_fd())?);
        read_opened(fd, &stat, max, bytes)?;
        Ok(Some(stat))
    }

    /// `read_into` of a file the caller has just looked at (`stat`, from `Dir::stat`), without a
    /// second look through the opened file: one system call less a file when observing
    /// thousands. A file swapped meanwhile is still never read through a symlink (`O_NOFOLLOW`),
    /// a directory fails the read, and a longer file is read to its end within `max`; at worst
    /// the caller gets content newer than `stat`, which the next run sees. `false` when gone.
    pub fn read_after_stat(
        &self,
        name: &OsStr,
        stat: &Stat,
        max: u64,
        bytes: &mut Vec<u8>,
    ) -> io::Result<bool> {
        bytes.clear();
        let Some(fd) = self.open_to_read(name)? else {
            return Ok(false);
        };
        read_opened(fd, stat, max, bytes)?;
        Ok(true)
    }

    /// Opens `name` for reading, never through a symlink and never blocking on a FIFO.
    fn open_to_read(&self, name: &OsStr) -> io::Result<Option<OwnedFd>> {
        match self.open_at(
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Which file `name` is (device and inode) and when it was last modified, without following
    /// a symlink: to tell whether some process has that very file open. `None` when absent.
    pub fn identity(&self, name: &OsStr) -> io::Result<Option<FileIdentity>> {
        let c = cstring(name)?;
        match calls::lstatat(self.fd(), &c) {
            Ok(st) => Ok(Some(FileIdentity {
                device: st.st_dev,
                inode: st.st_ino,
                modified: st.st_mtime,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Where symlink `name` points (read, never followed); `None` when it does not exist.
    pub fn read_link(&self, name: &OsStr) -> io::Result<Option<PathBuf>> {
        let c = cstring(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        let n = match calls::readlinkat(self.fd(), &c, &mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        buf.truncate(n);
        Ok(Some(PathBuf::from(OsStr::from_bytes(&buf))))
    }

    /// What is at `name`: a regular file read (within `max` bytes, as `read`), a symlink's target
    /// (never followed), or nothing. Anything else (a directory, a device) is an error.
    pub fn read_entry(&self, name: &OsStr, max: u64) -> io::Result<Found> {
        match self.stat(name)? {
            None => Ok(Found::Nothing),
            Some(st) if st.file_type == FileType::Symlink => {
                Ok(self.read_link(name)?.map_or(Found::Nothing, Found::Link))
            }
            Some(_) => Ok(self
                .read(name, max)?
                .map_or(Found::Nothing, |(st, bytes)| Found::File(st, bytes))),
        }
    }

    /// The names in this directory (not `.` and `..`) that `keep` accepts, read in one pass:
    /// cheaper than asking after each of many names that are usually absent, and only the names
    /// kept are copied.
    pub fn names_where(&self, keep: impl Fn(&OsStr) -> bool) -> io::Result<Vec<OsString>> {
        calls::names_where(self.fd(), keep)
    }
}

/// Refuses a file that is not regular or is larger than `max`, before it is read.
pub(super) fn readable(stat: &Stat, max: u64) -> io::Result<()> {
    if stat.file_type != FileType::Regular {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is {}", stat.file_type.describe()),
        ));
    }
    if stat.size > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is {} bytes, more than the limit of {max}", stat.size),
        ));
    }
    Ok(())
}

/// Reads an opened file of `stat`'s type and size into `bytes` (empty), refusing one that is not
/// regular or is larger than `max`.
fn read_opened(fd: OwnedFd, stat: &Stat, max: u64, bytes: &mut Vec<u8>) -> io::Result<()> {
    readable(stat, max)?;
    let mut file = std::fs::File::from(fd);
    // One read of the size the stat gave, with no second read to find the end: on a no-op over
    // thousands of files that probe is a system call per file. A file that grew meanwhile
    // (the read filled the extra byte) is read on to its end, within the limit.
    let size = stat.size as usize;
    bytes.resize(size + 1, 0);
    let mut filled = 0;
    loop {
        match io::Read::read(&mut file, &mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if (size > 0 && filled == size) || filled == bytes.len() {
            break;
        }
    }
    bytes.truncate(filled);
    if filled > size {
        let rest = (max + 1).saturating_sub(filled as u64);
        io::Read::read_to_end(&mut io::Read::take(&mut file, rest), bytes)?;
    }
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("grew past the limit of {max} bytes while being read"),
        ));
    }
    Ok(())
}
