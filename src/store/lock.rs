//! Serialises reconciles with `flock` on the store's lock file: the kernel drops it when the holder
//! dies, so it can never go stale. The holder writes who it is, so a refused caller can say.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Held while it lives.
pub struct Lock {
    _file: File,
}

#[derive(Debug)]
pub enum LockError {
    /// Someone else holds it; what they wrote about themselves.
    Held(String),
    Io(PathBuf, io::Error),
    /// The wait was given up: the host is stopping.
    Stopped(String),
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Held(holder) => write!(f, "another reconcile holds the lock ({holder})"),
            LockError::Io(path, e) => write!(f, "lock {}: {e}", path.display()),
            LockError::Stopped(holder) => write!(
                f,
                "the host is stopping; it was waiting for the lock, held by {holder}"
            ),
        }
    }
}

impl Lock {
    pub fn acquire(path: &Path, wait: bool, holder: &str) -> Result<Lock, LockError> {
        let io_error = |e| LockError::Io(path.to_path_buf(), e);
        let mut file = crate::os::host::open_no_follow(path, 0o600).map_err(io_error)?;
        // A FIFO or device in its place would block or never end the holder's read below.
        if !file.metadata().map_err(io_error)?.is_file() {
            return Err(io_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "is not a regular file",
            )));
        }
        if !crate::os::host::lock_exclusive(&file, wait).map_err(io_error)? {
            let mut text = String::new();
            let _ = (&mut file).take(4096).read_to_string(&mut text);
            let text = text.trim();
            let who = if text.is_empty() {
                "holder unknown".to_string()
            } else {
                text.to_string()
            };
            return Err(LockError::Held(who));
        }
        // The same holder as last time (the outbox's, looked at on every wake-up of the service)
        // is left as it is: writing it dirtied the inode, which ext4 then journalled and wrote
        // back every 30 s while the service idled.
        let mut last = Vec::with_capacity(holder.len() + 1);
        let read = (&mut file)
            .take(holder.len() as u64 + 1)
            .read_to_end(&mut last);
        if read.is_ok() && last == holder.as_bytes() {
            return Ok(Lock { _file: file });
        }
        // Written over the last holder, then cut to its length: emptying the file first made
        // ext4 free its block and journal that on every run (116 µs of a 500-file no-op).
        file.rewind().map_err(io_error)?;
        file.write_all(holder.as_bytes()).map_err(io_error)?;
        file.set_len(holder.len() as u64).map_err(io_error)?;
        Ok(Lock { _file: file })
    }
}

/// How often a waiting caller tries the lock again and gives its pulse a turn.
const RETRY: std::time::Duration = std::time::Duration::from_millis(200);

impl Lock {
    /// Waits for the lock without blocking the caller's thread for good: tries it about every
    /// 200 ms and calls `pulse` between tries (the service keeps its link answered there); gives
    /// up when `pulse` says the host is stopping.
    pub fn acquire_pulsing(
        path: &Path,
        holder: &str,
        pulse: &dyn Fn() -> bool,
    ) -> Result<Lock, LockError> {
        loop {
            match Lock::acquire(path, false, holder) {
                Err(LockError::Held(who)) => {
                    if pulse() {
                        return Err(LockError::Stopped(who));
                    }
                    std::thread::sleep(RETRY);
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    #[test]
    fn second_holder_is_refused_with_who_holds_it() {
        let tmp = TempDir::new("lock");
        let path = tmp.path().join("lock");
        let held = Lock::acquire(&path, false, "pid 1 (apply) since 5").unwrap();
        match Lock::acquire(&path, false, "pid 2") {
            Err(LockError::Held(who)) => assert_eq!(who, "pid 1 (apply) since 5"),
            _ => panic!("second lock must be refused"),
        }
        drop(held);
        Lock::acquire(&path, false, "pid 2").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "pid 2");
    }

    #[test]
    fn the_same_holder_again_leaves_the_file_as_it_is() {
        let tmp = TempDir::new("lock-same");
        let path = tmp.path().join("lock");
        drop(Lock::acquire(&path, false, "a longer holder").unwrap());
        drop(Lock::acquire(&path, false, "outbox").unwrap());
        let written = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(Lock::acquire(&path, false, "outbox").unwrap());
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            written
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "outbox");
    }

    #[test]
    fn a_pulsing_wait_gives_turns_and_gives_up_when_stopping() {
        let tmp = TempDir::new("lock-pulse");
        let path = tmp.path().join("lock");
        let held = Lock::acquire(&path, false, "pid 1 (apply)").unwrap();
        let beats = std::cell::Cell::new(0);
        let stop_on_third = || {
            beats.set(beats.get() + 1);
            beats.get() == 3
        };
        match Lock::acquire_pulsing(&path, "pid 2", &stop_on_third) {
            Err(LockError::Stopped(who)) => assert_eq!(who, "pid 1 (apply)"),
            _ => panic!("the wait must give up when stopping"),
        }
        assert_eq!(beats.get(), 3);
        drop(held);
        Lock::acquire_pulsing(&path, "pid 2", &|| false).unwrap();
    }
}
