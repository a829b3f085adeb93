//! The service's side of inotify: `Watcher` carries out what the pure `drift::Watch` decides,
//! on the descriptor `os::inotify` keeps.

use std::os::fd::RawFd;
use std::path::Path;

use super::drift::{Targets, Watch};
use crate::os::inotify::{AddError, Event, Inotify};

/// The watcher the shell owns: the descriptor, when inotify could be had and `watch` is on.
pub struct Watcher {
    /// The config's `watch`.
    pub enabled: bool,
    fd: Option<Inotify>,
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
        Watcher { enabled, fd, off }
    }

    pub fn raw(&self) -> Option<RawFd> {
        self.fd.as_ref().map(Inotify::raw)
    }

    pub fn set_targets(&self, watch: &mut Watch, now: u64, targets: Targets) {
        if self.fd.is_some() {
            watch.set_targets(targets);
            self.sync(watch, now);
        }
    }

    /// Makes the kernel's watches match what `watch` wants, looking again while directories
    /// come and go underneath.
    pub fn sync(&self, watch: &mut Watch, now: u64) {
        let Some(fd) = &self.fd else { return };
        // Bounded: a directory tree changing faster than it can be looked at is left to the
        // next event (or the timer).
        for _ in 0..8 {
            if !watch.needs_sync() {
                break;
            }
            let add = watch.plan(&|p: &Path| {
                std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
            });
            // Dropped first: a directory moved away and back is the same inode, and adding it
            // again would hand back the descriptor about to be dropped.
            for wd in watch.take_stale() {
                fd.remove(wd);
            }
            for dir in add {
                match fd.add(&dir) {
                    Ok(wd) => watch.added(dir, wd),
                    Err(e) => {
                        let newly = !watch.unwatched().contains_key(&dir);
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
                        watch.add_failed(now, dir, e);
                    }
                }
            }
        }
    }

    /// Every queued event (a failed read counts as lost events: nothing else is learnt).
    pub fn read(&self) -> Vec<Event> {
        let Some(fd) = &self.fd else {
            return Vec::new();
        };
        let mut events = Vec::new();
        if let Err(e) = fd.read(&mut events) {
            log::error!("inotify: {e}");
            events.push(Event::Overflow);
        }
        events
    }
}
