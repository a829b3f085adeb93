//! The inotify descriptor the service loop multiplexes, beside the timerfd and signalfd of
//! `sys.rs`: non-blocking, registered through mio's `SourceFd`, watching directories only
//! (never through a symlink). `Watcher` carries out what the pure `watch::Watch` decides.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::watch::{AddError, Event, Targets, Watch};

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
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Inotify(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn add(&self, dir: &Path) -> Result<i32, AddError> {
        let path = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| AddError::Other(format!("{} contains a NUL byte", dir.display())))?;
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
        unsafe { libc::inotify_rm_watch(self.0.as_raw_fd(), wd) };
    }

    /// Reads every queued event into `out` until the queue is empty.
    pub fn read(&self, out: &mut Vec<Event>) -> io::Result<()> {
        // Aligned for `inotify_event`; room for many events per read.
        let mut buf = vec![0u64; 8192];
        loop {
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

/// The watcher the loop owns: the descriptor (when inotify could be had and `watch` is on) and
/// the decisions.
pub struct Watcher {
    /// The config's `watch`.
    pub enabled: bool,
    fd: Option<Inotify>,
    pub watch: Watch,
    /// Why nothing is watched, when nothing is.
    pub off: Option<String>,
}

impl Watcher {
    /// A watcher when `enabled` and the kernel gives an inotify instance; otherwise one that
    /// says why not (the drift timer alone then finds drift).
    pub fn new(enabled: bool) -> Watcher {
        let (fd, off) = match enabled {
            false => (None, Some("`watch` is false in the config".to_string())),
            true => match Inotify::new() {
                Ok(fd) => (Some(fd), None),
                Err(e) => (None, Some(format!("no inotify ({e})"))),
            },
        };
        Watcher {
            enabled,
            fd,
            watch: Watch::default(),
            off,
        }
    }

    pub fn raw(&self) -> Option<RawFd> {
        self.fd.as_ref().map(Inotify::raw)
    }

    pub fn set_targets(&mut self, now: u64, targets: Targets) {
        if self.fd.is_some() {
            self.watch.set_targets(targets);
            self.sync(now);
        }
    }

    /// Makes the kernel's watches match what `watch` wants, looking again while directories
    /// come and go underneath.
    pub fn sync(&mut self, now: u64) {
        let Some(fd) = &self.fd else { return };
        // Bounded: a directory tree changing faster than it can be looked at is left to the
        // next event (or the timer).
        for _ in 0..8 {
            if !self.watch.needs_sync() {
                break;
            }
            let add = self.watch.plan(&|p: &Path| {
                std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
            });
            // Dropped first: a directory moved away and back is the same inode, and adding it
            // again would hand back the descriptor about to be dropped.
            for wd in self.watch.take_stale() {
                fd.remove(wd);
            }
            for dir in add {
                match fd.add(&dir) {
                    Ok(wd) => self.watch.added(dir, wd),
                    Err(e) => {
                        let newly = !self.watch.unwatched().contains_key(&dir);
                        match &e {
                            AddError::Other(why) if newly => {
                                log::warn!("not watched, left to the timer: {why}")
                            }
                            AddError::Limit if newly => log::warn!(
                                "{} not watched, left to the timer: the per-user inotify watch \
                                 limit (fs.inotify.max_user_watches) is reached",
                                dir.display()
                            ),
                            _ => {}
                        }
                        self.watch.add_failed(now, dir, e);
                    }
                }
            }
        }
    }

    /// Takes in every queued event.
    pub fn read(&mut self, now: u64) {
        let Some(fd) = &self.fd else { return };
        let mut events = Vec::new();
        if let Err(e) = fd.read(&mut events) {
            // Nothing else to learn from it: treat it as lost events.
            log::error!("inotify: {e}");
            events.push(Event::Overflow);
        }
        for event in events {
            self.watch.handle(now, event);
        }
        self.sync(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    fn wait_readable(fd: RawFd) -> bool {
        let mut fds = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 2000) == 1 }
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
