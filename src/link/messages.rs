//! The link's messages as they are on the wire (documented in docs/protocol.md). Only this file
//! knows their JSON shape; unknown fields are ignored so either side can grow.

use serde::{Deserialize, Serialize};

use crate::store::ResourceResult;

/// Protocol version spoken by this host.
pub const PROTOCOL: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Host -> control plane, first: who it is and what it holds.
    Hello {
        protocol: u32,
        node: String,
        secret: String,
        version: String,
        revision: Option<u64>,
        digest: Option<String>,
    },
    /// Control plane -> host: the hello was accepted.
    Welcome {},
    /// Control plane -> host: a declaration (its JSON text, verbatim, so digests hold).
    Declare {
        revision: u64,
        declaration: String,
    },
    /// Host -> control plane: one per run, or for a declaration ignored or rejected.
    Report(Report),
    /// Control plane -> host: reports up to `id` are stored; the host drops them from its outbox.
    Ack {
        id: u64,
    },
    Ping {},
    Pong {},
    /// Either side, before closing: why.
    Error {
        message: String,
    },
}

/// One run (or one refused declaration), as the control plane receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Report {
    /// Increasing per host; acknowledged by `ack`.
    pub id: u64,
    pub revision: Option<u64>,
    pub digest: Option<String>,
    /// What caused the run: `start`, `declaration`, `timer`, `reconnect`, `signal`, `apply`, ...
    pub trigger: Vec<String>,
    /// `converged`, `failed`, `interrupted`, `error`, `ignored` (stale revision), `rejected`
    /// (invalid), `contested` (a resource another process keeps changing back).
    pub outcome: String,
    pub started: u64,
    pub ended: u64,
    pub changes: Vec<ResourceResult>,
    pub failures: Vec<ResourceResult>,
    pub deferred: Vec<ResourceResult>,
    /// Changes that repaired drift: made in a run no new declaration caused.
    pub drift: Vec<ResourceResult>,
    /// Human text for `ignored`, `rejected` and `error`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
