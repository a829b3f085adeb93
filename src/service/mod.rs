//! `mesh-host run`: the service. One thread: `Core` (`core.rs`) decides, a state machine fed
//! events and the time; the mio shell (`shell.rs`) multiplexes the control-plane connection, a
//! timerfd, a signalfd and inotify, and carries out what the core asks (`actions.rs` and
//! `watch_targets.rs` for what needs the Host). A run is the same blocking reconciler `apply`
//! uses (`Host::converge`: one lock, one ledger), checking for SIGTERM between resources.

// What systemd shows and asks: `STATUS=` and `ExecReload=`.
mod notify;
mod reload;

mod actions;
mod backoff;
mod connection;
mod core;
mod retry;
mod schedule;
mod shell;

mod drift;
mod inotify_watch;
mod watch_targets;

use std::sync::Arc;

use mio::Poll;

use crate::engine::{Converged, Host};
use crate::link::Node;
use crate::model::declaration::Declaration;
use crate::os::sys;
use crate::store::ServiceState;
use inotify_watch::Watcher;
use shell::Live;

pub use reload::{reload, signal_pending, signal_reload};
pub use shell::run;

/// The shell's state: the Host and what only the shell touches (descriptors, the connection,
/// what was read from the store and the machine), beside the core.
struct Shell<'h> {
    host: &'h mut Host,
    core: core::Core,
    poll: Poll,
    signals: sys::SignalFd,
    watcher: Watcher,
    live: Option<Live>,
    tls: Option<Arc<rustls::ClientConfig>>,
    started_unix: u64,
    /// The declaration last accepted from the control plane, as parsed then, until the next run
    /// takes it (`Target::Service`): it is not parsed again, nor kept past that run.
    accepted: Option<Declaration>,
    /// What the last run converged with, until the watches are set from it.
    held: Option<Converged>,
    /// pacman's local database, once looked up (`Err`: packages are on the timer, and why).
    pacman_db: Option<Result<std::path::PathBuf, String>>,
    /// The facts last sent (in the hello or a report): a report carries them only when changed.
    facts_sent: Option<Node>,
    /// A digest of the declaration's digest and the owned files and packages the watches were set
    /// for (`watch_targets::watch_source`): not the lists themselves, which the service would keep.
    watched_for: Option<[u8; 32]>,
    /// Why the watches could not be worked out from the store (it could not be read), for
    /// `status`, until it can.
    watch_problem: Option<String>,
    /// What `status` shows, as last written.
    status: Option<ServiceState>,
}

impl<'h> Shell<'h> {
    fn new(
        host: &'h mut Host,
        core: core::Core,
        poll: Poll,
        signals: sys::SignalFd,
        watcher: Watcher,
        start: core::Now,
    ) -> Shell<'h> {
        Shell {
            host,
            core,
            poll,
            signals,
            watcher,
            live: None,
            tls: None,
            started_unix: start.unix_ms / 1000,
            accepted: None,
            held: None,
            pacman_db: None,
            facts_sent: None,
            watched_for: None,
            watch_problem: None,
            status: None,
        }
    }
}
