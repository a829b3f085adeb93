//! Probes of another process by its pid, for what the store says about the service: whether it
//! is alive, and whether it is mesh-host (a pid can be reused by another program).

/// Whether a process `pid` exists (signal 0 delivers nothing; it only checks).
pub fn alive(pid: u32) -> bool {
    // EPERM: it exists but belongs to another user (a caller that is not root, as in a
    // package's check()).
    // SAFETY: kill(2) takes no pointer, and signal 0 delivers nothing.
    let sent = unsafe { libc::kill(pid as libc::pid_t, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The signals the layers above send another process.
pub use libc::{SIGHUP, SIGUSR2};

/// Sends `signal` to process `pid`; a pid that is no process id (0, or past `pid_t`) is refused
/// rather than taken for a process group.
pub fn signal(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a process id"))?;
    // SAFETY: kill(2) takes no pointer; `pid` is positive, so it names one process.
    match unsafe { libc::kill(pid, signal) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Whether process `pid` runs a program of the same name as this one (after an upgrade its
/// executable reads "mesh-host (deleted)").
pub fn is_mesh_host(pid: u32) -> bool {
    let name = |link: &str| {
        std::fs::read_link(link).ok().and_then(|p| {
            p.file_name().map(|n| {
                n.to_string_lossy()
                    .trim_end_matches(" (deleted)")
                    .to_string()
            })
        })
    };
    match (name(&format!("/proc/{pid}/exe")), name("/proc/self/exe")) {
        (Some(theirs), Some(ours)) => theirs == ours,
        _ => false,
    }
}

/// A file's first page mapped into this process (read-only, private), unmapped on drop: a test
/// of what /proc shows of a process that maps a file.
#[cfg(test)]
pub struct Mapping(*mut libc::c_void);

#[cfg(test)]
impl Mapping {
    pub fn of(file: &std::fs::File) -> std::io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        let (prot, flags) = (libc::PROT_READ, libc::MAP_PRIVATE);
        // SAFETY: a new mapping at an address the kernel chooses, so no memory of this process
        // is replaced; the descriptor is `file`'s, open for the call.
        let at =
            unsafe { libc::mmap(std::ptr::null_mut(), 4096, prot, flags, file.as_raw_fd(), 0) };
        match at == libc::MAP_FAILED {
            true => Err(std::io::Error::last_os_error()),
            false => Ok(Mapping(at)),
        }
    }
}

#[cfg(test)]
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the page `of` mapped, unmapped once; nothing of it is borrowed.
        unsafe { libc::munmap(self.0, 4096) };
    }
}
