//! What this process and machine are, as the layers above ask: the effective user and group,
//! the hostname, the kernel's release and machine, the CPUs online, whether a directory may be
//! written; and the exclusive `flock` the store is held by.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The effective user and group ids of this process.
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid and getegid take nothing and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    effective_ids().0 == 0
}

/// The machine's hostname; empty when it cannot be read.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The running kernel's release and the machine (`uname -r`, `uname -m`); empty when unknown.
pub fn uname() -> (String, String) {
    // SAFETY: utsname is arrays of bytes, for which all zeroes is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes no more than the utsname it is given.
    if unsafe { libc::uname(&mut u) } != 0 {
        return (String::new(), String::new());
    }
    let text = |field: &[libc::c_char]| {
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (text(&u.release), text(&u.machine))
}

/// CPUs online (what `getconf _NPROCESSORS_ONLN` says): the machine's, not this process's share.
pub fn cpus_online() -> u32 {
    // SAFETY: sysconf takes no pointer and only reads a limit.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).unwrap_or(0)
}

/// Whether this process may write into `dir` (`access(W_OK)`: its real ids, as root's are);
/// why not when it may not.
pub fn writable(dir: &Path) -> io::Result<()> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    match unsafe { libc::access(c.as_ptr(), libc::W_OK) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Takes the exclusive `flock` on `file`, waiting for it with `wait`; retried when a signal
/// interrupts the wait. `Ok(false)` when another holds it and `wait` is not set.
pub fn lock_exclusive(file: &std::fs::File, wait: bool) -> io::Result<bool> {
    let operation = match wait {
        true => libc::LOCK_EX,
        false => libc::LOCK_EX | libc::LOCK_NB,
    };
    loop {
        // SAFETY: flock takes no pointer; the descriptor is `file`'s, open for the call.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Opens `path` to be read and written, creating it with `mode`, never through a symlink: a lock
/// file.
pub fn open_no_follow(path: &Path, mode: u32) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
}
