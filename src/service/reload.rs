//! `mesh-host reload [PID]`: what `ExecReload=` runs, and the word `apply --confirm` sends of a
//! new pending declaration. The host signals the service itself, so reloading needs no `kill`
//! binary (a minimal system has none) and never signals a process that is not mesh-host.

use crate::engine::{Fatal, Host, EXIT_OK};
use crate::store::Store;

/// Sends SIGHUP to `pid` (systemd's `$MAINPID`), which must be a mesh-host process.
pub fn signal_reload(pid: u32) -> Result<i32, Fatal> {
    if !crate::os::process::is_mesh_host(pid) {
        return Err(Fatal::error(format!(
            "reload: process {pid} is not mesh-host (or is gone); nothing was signalled"
        )));
    }
    match crate::os::process::signal(pid, crate::os::process::SIGHUP) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(Fatal::error(format!("reload: {pid} is not a process id")))
        }
        Err(e) => {
            return Err(Fatal::error(format!(
                "reload: SIGHUP to process {pid}: {e}"
            )))
        }
    }
    Ok(EXIT_OK)
}

/// Sends SIGHUP to `pid`, or without one to the running service the store names (a person's
/// `mesh-host reload`).
pub fn reload(host: &Host, pid: Option<u32>) -> Result<i32, Fatal> {
    if let Some(pid) = pid {
        return signal_reload(pid);
    }
    let state = Store::open(&host.config.state_dir, false)?
        .map(|store| store.service_state())
        .transpose()?
        .flatten();
    match state {
        Some(state) if state.state == crate::store::ServicePhase::Running && state.pid != 0 => {
            signal_reload(state.pid)
        }
        _ => Err(Fatal::error(
            "reload: the store names no running service; nothing was signalled".into(),
        )),
    }
}

/// Tells the running service, if any, that the store holds a new pending declaration, so it
/// keeps its deadline (SIGUSR2); with no service running, whatever `mesh-host` runs first after
/// the deadline reverts it.
pub fn signal_pending(host: &Host) {
    let state = Store::open(&host.config.state_dir, false)
        .ok()
        .flatten()
        .and_then(|store| store.service_state().ok().flatten());
    let Some(state) = state.filter(|s| s.state == crate::store::ServicePhase::Running) else {
        return;
    };
    if !crate::os::process::is_mesh_host(state.pid) {
        return;
    }
    let pid = state.pid;
    if let Err(e) = crate::os::process::signal(pid, crate::os::process::SIGUSR2) {
        log::warn!(
            "the service (pid {pid}) was not told of the pending declaration: {e}; it reverts \
             it on its next wake"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_is_not_mesh_host_is_never_signalled() {
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let err = signal_reload(other.id()).unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                "reload: process {} is not mesh-host (or is gone); nothing was signalled",
                other.id()
            )
        );
        assert!(other.try_wait().unwrap().is_none(), "sleep was signalled");
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
