//! What observing a unit finds and what a plan does to one.

use std::collections::BTreeSet;

use crate::kinds::RunContext;
use crate::tools::systemctl::{ActiveState, LoadState, UnitFileState, Verb};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    /// `None` offline.
    pub load: Option<LoadState>,
    /// `None` offline.
    pub active: Option<ActiveState>,
    /// `is-enabled` (or `show`'s `UnitFileState` for a unit not loaded); `None` when it has no
    /// unit file.
    pub enablement: Option<UnitFileState>,
    /// The unit's file in the unit directory, if there is one and it is a regular file.
    pub file: Option<Vec<u8>>,
    /// That file's permission bits: a secret unit's file readable by others is rewritten 0600.
    pub file_mode: Option<u32>,
    /// Where the unit's name in the unit directory links to, when it is a symlink (a masked unit
    /// links to /dev/null, an alias to its unit): reported, never followed or replaced.
    pub link: Option<String>,
    /// Files it restarts or reloads on that changed in an earlier run (or were about to) while
    /// it has not been restarted or reloaded since (the store's `Owed`).
    pub owed: BTreeSet<String>,
    /// An instance whose template the declaration ships with other content than its file holds
    /// now: the template is written in this run, and a running instance restarted for it.
    pub template_differs: bool,
    /// Its processes map files an upgrade deleted under /usr; looked for only for units declared
    /// `restart_when_stale`, on the running system.
    pub stale: bool,
    /// The unit file releasing an adopted unit puts back (its backup in the store), read only
    /// for a unit no longer declared when the plan shows diffs.
    pub original: Option<Vec<u8>>,
}

impl Observed {
    /// Its unit file and the file's mode, to show in a plan's diff when the plan shows them.
    pub(super) fn file_diff(&self, cx: &RunContext) -> Option<(&[u8], Option<u32>)> {
        let file = self.file.as_deref().filter(|_| cx.diffs)?;
        Some((file, self.file_mode))
    }

    pub(super) fn running(&self) -> bool {
        self.active.as_ref().is_some_and(ActiveState::running)
    }
    pub(super) fn masked(&self) -> bool {
        self.load == Some(LoadState::Masked)
            || self.enablement.as_ref().is_some_and(UnitFileState::masked)
    }
    pub(super) fn enabled(&self) -> bool {
        self.enablement.as_ref().is_some_and(UnitFileState::enabled)
    }
}

/// One unit's change: at most one thing each to its file, its enablement and its activation
/// (`apply` orders them: stop and disable while the file is still there, then the file, then
/// the rest).
#[derive(Debug, Default, PartialEq)]
pub struct Op {
    pub file: FileChange,
    pub enablement: Enablement,
    pub activation: Activation,
}

#[derive(Debug, Default, PartialEq)]
pub enum FileChange {
    #[default]
    Keep,
    Write(Vec<u8>),
    /// The original the host kept in the store, under this backup name.
    Restore(String),
    Remove,
}

#[derive(Debug, Default, PartialEq)]
pub enum Enablement {
    #[default]
    Keep,
    Enable,
    Disable,
}

#[derive(Debug, Default, PartialEq)]
pub enum Activation {
    #[default]
    Keep,
    Start,
    Stop,
    Restart,
    Reload,
}

impl Op {
    /// Whether this change asks systemctl for `verb`.
    pub(super) fn asks(&self, verb: Verb) -> bool {
        match verb {
            Verb::Start => self.activation == Activation::Start,
            Verb::Stop => self.activation == Activation::Stop,
            Verb::Restart => self.activation == Activation::Restart,
            Verb::Reload => self.activation == Activation::Reload,
            Verb::Enable => self.enablement == Enablement::Enable,
            Verb::Disable => self.enablement == Enablement::Disable,
        }
    }
}
