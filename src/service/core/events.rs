//! What goes into the core (`Input`, with the time: `Now`) and what comes out (`Action`).

use std::collections::BTreeSet;

use super::super::drift::Resource;
use crate::engine::reconcile::Scope;
use crate::link::Event;
use crate::model::run::ReportOutcome;
use crate::model::run::{RunOutcome, Triggers};
use crate::os::inotify;

/// The time an event happened: monotonic milliseconds for the loop's timers, wall milliseconds
/// for what the store keeps and the pending declaration's deadline (wall time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Now {
    pub mono: u64,
    pub unix_ms: u64,
}

impl Now {
    /// Wall time, Unix seconds.
    pub fn unix(self) -> u64 {
        self.unix_ms / 1000
    }

    /// A monotonic time as wall milliseconds.
    pub fn unix_ms_of(self, mono: u64) -> u64 {
        (self.unix_ms as i64 + (mono as i64 - self.mono as i64)).max(0) as u64
    }
}

/// What a signal asks of the service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Signal {
    /// SIGTERM or SIGINT: stop after the resource being applied.
    Stop,
    /// SIGHUP: read the config again.
    Reload,
    /// SIGUSR1: a run.
    Run,
    /// SIGUSR2: a person's `apply --confirm` made a declaration pending; its deadline is read.
    Recheck,
}

/// The config's part the core keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub interval_ms: u64,
    pub reconnect_base_ms: u64,
    /// Whether a control plane is configured.
    pub control_plane: bool,
}

/// How a run ended, as the core needs it (the report itself stays with the shell).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunSummary {
    /// `None`: no declaration in force, nothing to hold.
    pub outcome: Option<RunOutcome>,
    pub changed: usize,
    pub failed: usize,
    /// A watch run's failures, and its changes and failures (repairs done or fought), among
    /// the kinds the watcher has hints for.
    pub failed_watched: BTreeSet<Resource>,
    pub repaired: Vec<Resource>,
    /// Why the run is kept in memory, not in the store.
    pub unwritten: Option<String>,
}

/// Whether the pending declaration could be confirmed by the newest ack.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirmation {
    /// Confirmed (said for the log), or nothing waited for that ack.
    Done(Option<String>),
    /// The store's lock is held: tried again on the next wake.
    Locked,
    Failed(String),
}

/// What a declaration from the control plane became (`Host::accept_declaration`).
#[derive(Debug, Clone, PartialEq)]
pub enum Accepted {
    InForce,
    Refused(ReportOutcome, String),
}

/// What happened, fed to `Core::handle`.
#[derive(Debug)]
pub enum Input {
    Signal(Signal),
    /// The config was read again (`None`: it could not be, the previous one stays).
    Reloaded(Option<Settings>),
    /// The pending declaration's deadline as the store has it (wall seconds).
    Pending(Result<Option<u64>, String>),
    /// A run ended: `Err` when it could not be made at all; whether runs are kept in memory.
    RunDone {
        result: Result<RunSummary, String>,
        unwritten: bool,
    },
    /// A revert was due: the run that converged to the generation before, if one did.
    Reverted {
        run: Option<Result<RunSummary, String>>,
        unwritten: bool,
    },
    Confirmed(Confirmation),
    /// The check of what the watcher saw: how many drifted, and the first few by name.
    Checked(Result<(usize, Vec<String>), String>),
    /// The runs kept in memory were offered to the store; whether some are still kept.
    KeptRuns {
        left: bool,
    },
    /// inotify's events, decoded.
    Inotify(Vec<inotify::Event>),
    /// A connection was opened (the handshake and the hello follow).
    Connecting,
    /// The connection failed, or could not be opened.
    LinkClosed(String),
    Link(Event),
    Accepted {
        revision: u64,
        digest: String,
        accepted: Accepted,
    },
}

/// What the shell is asked to do.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Stop: the shell says goodbye, writes what it keeps and exits with the code.
    Exit(i32),
    /// Read the config again; answered with `Input::Reloaded`.
    Reload,
    /// Read the pending deadline; answered with `Input::Pending`.
    LoadPending,
    /// Revert the pending declaration past its deadline; answered with `Input::Reverted`.
    Revert { link_error: Option<String> },
    /// Confirm the pending declaration with this ack; answered with `Input::Confirmed`.
    ConfirmAcked(u64),
    /// Observe what the watcher saw; answered with `Input::Checked`.
    Check(BTreeSet<Resource>),
    /// A run (blocking); answered with `Input::RunDone`.
    Run { triggers: Triggers, scope: Scope },
    /// Offer the runs kept in memory to the store; answered with `Input::KeptRuns`.
    WriteKeptRuns,
    /// Open a connection; answered with `Input::Connecting` or `Input::LinkClosed`.
    Connect,
    /// Say goodbye on the connection and drop it.
    Disconnect(String),
    /// Send the outbox's reports the connection has not carried yet.
    SendOutbox,
    /// Drop the reports the control plane acknowledged.
    AckOutbox(u64),
    /// Accept a declaration; answered with `Input::Accepted`.
    Accept {
        revision: u64,
        text: Vec<u8>,
        confirm_secs: Option<u64>,
    },
    /// Queue the report of a refused declaration.
    ReportRefused {
        revision: u64,
        digest: String,
        outcome: ReportOutcome,
        message: String,
    },
    /// Queue the report naming a contested resource.
    ReportContested { resource: Resource, message: String },
    /// Point the watches at what the declaration in force and the ledger name (after a run:
    /// what it converged with).
    RefreshWatches { after_run: bool },
    /// Make the kernel's watches match what `Watch` wants.
    SyncWatches,
    /// A line for systemd (`READY=1`, `STATUS=...`).
    Notify(String),
    /// Write what `status` shows, when it changed.
    PublishStatus,
}
