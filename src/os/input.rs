//! Files the host reads as input (declarations, its config, keys, credentials, the token of
//! `join`): only regular files, never more than a limit, and never blocking. A size from `stat`
//! is not trusted (a device or FIFO says 0; a file can grow), so at most `max + 1` bytes are read
//! and one more than `max` is refused; anything but a regular file is refused by name before any
//! read, judged by `fstat` of the descriptor actually read, opened `O_NONBLOCK` so that opening a
//! FIFO nobody writes to returns at once.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The most of a small input read (a key, a secret, a CA, a lock's holder): none is near it.
pub const MAX_SMALL_INPUT: u64 = 1 << 20;

/// Reads `path` (symlinks followed, as any path a person gives) if it is a regular file of at
/// most `max` bytes. A missing file keeps `ErrorKind::NotFound`; anything refused says why.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    // The size said is only room made ahead (one allocation for a 64 MiB declaration rather
    // than doublings); what is read is bounded by `max` alone.
    let said = file.metadata().map_or(0, |m| m.len()).min(max);
    let mut bytes = Vec::with_capacity(said as usize + 1);
    populate(&mut bytes);
    read_limited_into(file, max, bytes)
}

/// Gives the room of `bytes` its memory in one system call, where a read into fresh pages would
/// fault on each (hundreds for a large declaration). Only an optimisation: older kernels refuse
/// it, and the read faults them in as before.
fn populate(bytes: &mut Vec<u8>) {
    const PAGE: usize = 4096;
    let start = bytes.as_mut_ptr() as usize;
    let (first, end) = (start.next_multiple_of(PAGE), start + bytes.capacity());
    if end < first + 64 * PAGE {
        return;
    }
    let length = (end - first) / PAGE * PAGE;
    // SAFETY: [first, first + length) lies inside `bytes`'s allocation, owned here and holding
    // nothing yet; MADV_POPULATE_WRITE only maps its pages as a write would, changing no byte.
    unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            length,
            libc::MADV_POPULATE_WRITE,
        )
    };
}

/// `read_bounded` of text.
pub fn read_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

/// `path` opened to be read, if it is a regular file; the descriptor is blocking again once
/// known to be one (a regular file never blocks a read, and a caller may stream it).
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "has a NUL byte"))?;
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
    let fd = loop {
        // SAFETY: `c` is NUL-terminated and outlives the call; without O_CREAT no mode is read.
        let fd = unsafe { libc::open(c.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: `fd` is the descriptor open just returned, owned by nothing else.
            break unsafe { OwnedFd::from_raw_fd(fd) };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // SAFETY: libc::stat is plain integers, for which all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes no more than the libc::stat it is given.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {}, not a regular file", describe(kind)),
        ));
    }
    // SAFETY: F_SETFL takes an int argument, given; no pointer.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_RDONLY) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::fs::File::from(fd))
}

/// At most `max` bytes of `input`, after what `bytes` holds: `max + 1` are asked for, and getting
/// them is a refusal.
fn read_limited_into(input: impl Read, max: u64, mut bytes: Vec<u8>) -> io::Result<Vec<u8>> {
    input.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is more than the limit of {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// A file type for people, with its article.
fn describe(kind: libc::mode_t) -> &'static str {
    match kind {
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symlink",
        _ => "not a regular file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    #[test]
    fn a_regular_file_within_the_limit_is_read_whole() {
        let tmp = TempDir::new("input");
        let path = tmp.path().join("a");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), b"12345");
        let err = read_bounded(&path, 4).unwrap_err();
        assert_eq!(err.to_string(), "is more than the limit of 4 bytes");
    }

    #[test]
    fn a_missing_file_keeps_its_kind() {
        let tmp = TempDir::new("input");
        let err = read_bounded(&tmp.path().join("none"), 5).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn anything_but_a_regular_file_is_refused_by_name_without_reading_or_blocking() {
        let tmp = TempDir::new("input");
        let fifo = tmp.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is NUL-terminated and outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (path, what) in [
            (fifo.as_path(), "is a FIFO"),
            (Path::new("/dev/zero"), "is a character device"),
            (tmp.path(), "is a directory"),
        ] {
            let err = read_bounded(path, 1 << 30).unwrap_err();
            assert_eq!(err.to_string(), format!("{what}, not a regular file"));
        }
    }

    #[test]
    fn an_endless_stream_is_cut_at_the_limit() {
        let err = read_limited_into(io::repeat(b'x'), 10, Vec::new()).unwrap_err();
        assert_eq!(err.to_string(), "is more than the limit of 10 bytes");
        let read = read_limited_into(&b"0123456789"[..], 10, Vec::new());
        assert_eq!(read.unwrap().len(), 10);
    }
}
