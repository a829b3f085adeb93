//! Probes of another process by its pid, for what the store says about the service: whether it
//! is alive, and whether it is mesh-host (a pid can be reused by another program).

/// Whether a process `pid` exists (signal 0 delivers nothing; it only checks).
pub fn alive(pid: u32) -> bool {
    // EPERM: it exists but belongs to another user (a caller that is not root, as in a
    // package's check()).
    let sent = unsafe { libc::kill(pid as libc::pid_t, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
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
