//! The inotify descriptor the service loop multiplexes, beside the timerfd and signalfd of
//! `sys.rs`: non-blocking, registered through mio's `SourceFd`, watching directories only
//! (never through a symlink); its events decoded.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Changes to a directory's entries, and the directory itself going away.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

pub struct Inotify(OwnedFd);

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: inotify_init1 takes no pointer.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is the descriptor inotify_init1 just returned (not negative), owned by
        // nothing else.
        Ok(Inotify(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn add(&self, dir: &Path) -> Result<i32, AddError> {
        let path = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| AddError::Other(format!("{} contains a NUL byte", dir.display())))?;
        // SAFETY: `path` is NUL-terminated and outlives the call.
        let wd = unsafe { libc::inotify_add_watch(self.0.as_raw_fd(), path.as_ptr(), MASK) };
        if wd >= 0 {
            return Ok(wd);
        }
        let e = io::Error::last_os_error();
        Err(match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => AddError::Vanished,
            Some(libc::ENOSPC) => AddError::Limit,
            _ => AddError::Other(format!("inotify_add_watch {}: {e}", dir.display())),
        })
    }

    /// Drops a watch; one the kernel dropped already (its directory deleted) is no error.
    pub fn remove(&self, wd: i32) {
        // SAFETY: inotify_rm_watch takes no pointer; an unknown watch is an error, not UB.
        unsafe { libc::inotify_rm_watch(self.0.as_raw_fd(), wd) };
    }

    /// Reads every queued event into `out` until the queue is empty.
    pub fn read(&self, out: &mut Vec<Event>) -> io::Result<()> {
        // Aligned for `inotify_event`; room for many events per read.
        let mut buf = vec![0u64; 8192];
        loop {
            // SAFETY: read(2) writes at most the buffer's length in bytes into `buf`.
            let n = unsafe {
                libc::read(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len() * std::mem::size_of::<u64>(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(()),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            if n == 0 {
                return Ok(());
            }
            // SAFETY: read returned `n` > 0, within the buffer, and wrote those bytes; any byte
            // pattern is a valid u8, and `buf` is not touched while the slice lives.
            let bytes =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            parse(bytes, out);
        }
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Decodes a buffer of `struct inotify_event`s (header, then `len` bytes of NUL-padded name).
fn parse(bytes: &[u8], out: &mut Vec<Event>) {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let mut at = 0;
    while at + HEADER <= bytes.len() {
        let field = |i: usize| {
            let b = &bytes[at + i * 4..at + i * 4 + 4];
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
        };
        let (wd, mask, len) = (field(0) as i32, field(1), field(3) as usize);
        let end = (at + HEADER + len).min(bytes.len());
        let name = &bytes[at + HEADER..end];
        let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
        at = end;
        if mask & libc::IN_Q_OVERFLOW != 0 {
            out.push(Event::Overflow);
        } else if mask
            & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_UNMOUNT | libc::IN_IGNORED)
            != 0
        {
            out.push(Event::Gone { wd });
        } else if !name.is_empty() {
            out.push(Event::Entry {
                wd,
                name: OsStr::from_bytes(name).to_os_string(),
            });
        }
    }
}

/// An inotify event, reduced to what the decisions need.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `name` in the watched directory `wd` was created, written, closed after writing, changed
    /// attributes, deleted or moved in or out.
    Entry { wd: i32, name: OsString },
    /// The watched directory itself was deleted, moved or unmounted (or its watch dropped).
    Gone { wd: i32 },
    /// The kernel's queue overflowed: events were lost.
    Overflow,
}

/// Why a directory could not be watched.
#[derive(Debug, Clone, PartialEq)]
pub enum AddError {
    /// It went away between the look and the watch: look again.
    Vanished,
    /// The per-user watch limit (`fs.inotify.max_user_watches`) is reached.
    Limit,
    Other(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    fn wait_readable(fd: RawFd) -> bool {
        crate::os::sys::wait_until(fd, crate::os::sys::Ready::Readable, 2000).unwrap_or(false)
    }

    #[test]
    fn events_name_the_entry_and_the_directory_going_away() {
        let tmp = TempDir::new("inotify");
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let fd = Inotify::new().unwrap();
        let wd = fd.add(&dir).unwrap();
        std::fs::write(dir.join("f"), "x").unwrap();
        assert!(wait_readable(fd.raw()));
        let mut events = Vec::new();
        fd.read(&mut events).unwrap();
        assert!(events.contains(&Event::Entry {
            wd,
            name: "f".into()
        }));
        std::fs::remove_file(dir.join("f")).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(wait_readable(fd.raw()));
        events.clear();
        fd.read(&mut events).unwrap();
        assert!(events.contains(&Event::Gone { wd }), "{events:?}");
        assert_eq!(fd.add(&dir), Err(AddError::Vanished));
    }

    #[test]
    fn a_symlink_is_not_watched_through() {
        let tmp = TempDir::new("inotify-link");
        std::os::unix::fs::symlink(tmp.path(), tmp.path().join("link")).unwrap();
        let fd = Inotify::new().unwrap();
        assert!(matches!(
            fd.add(&tmp.path().join("link")),
            Err(AddError::Vanished)
        ));
    }
}
