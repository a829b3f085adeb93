//! The error at the `Kind` boundary: why a kind could not observe or change a resource, kept as
//! a type (the step, the tool's command line, how it ended, its stderr) up to where it is shown,
//! and shown as the one message a person reads in reports, `status` and logs.

use std::fmt;

use crate::os::exec::{CommandError, Failure};

#[derive(Debug, Clone, PartialEq)]
pub enum KindError {
    /// A tool's command failed while the kind was at `step` (`observe`, `install`, `stop`,
    /// `daemon-reload`...): the error holds its command line, how it ended (exit status, signal,
    /// timeout, or could not start) and its stderr.
    Command {
        step: &'static str,
        error: CommandError,
    },
    /// A tool that cannot work as configured, whatever the names (pacman's download sandbox on a
    /// kernel without Landlock): `why` names the cause and the setting that changes it.
    Setup { why: String, error: CommandError },
    /// The kind's own reason: a refusal, a file it could not read or write, a lock it would not
    /// wait for, a tool's answer it could not read.
    Reason(String),
}

impl KindError {
    pub fn command(step: &'static str, error: CommandError) -> KindError {
        KindError::Command { step, error }
    }
}

impl From<String> for KindError {
    fn from(reason: String) -> KindError {
        KindError::Reason(reason)
    }
}

impl From<&str> for KindError {
    fn from(reason: &str) -> KindError {
        KindError::Reason(reason.to_string())
    }
}

/// The step is not shown: the message says what failed, as it always has.
impl fmt::Display for KindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindError::Command { error, .. } => error.fmt(f),
            KindError::Setup { why, error } => write!(f, "{why}: {error}"),
            KindError::Reason(reason) => f.write_str(reason),
        }
    }
}

/// A batch's failure: does it blame the names (so each alone may succeed), or the tool itself?
pub trait BatchFailure {
    fn blames_names(&self) -> bool;
}

impl BatchFailure for KindError {
    /// A tool that exited non-zero refused something; one that hung or could not start would do
    /// the same again for each name, multiplying its timeout. A reason of the kind's own is
    /// about the names it was given.
    fn blames_names(&self) -> bool {
        match self {
            KindError::Command { error, .. } => matches!(error.failure, Failure::Exit(..)),
            KindError::Setup { .. } => false,
            KindError::Reason(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_tools_message_and_keeps_its_parts() {
        let error = KindError::command(
            "install",
            CommandError {
                command: "pacman -S --needed --noconfirm -- nope".into(),
                failure: Failure::Exit(Some(1), "error: target not found: nope\n".into()),
            },
        );
        assert_eq!(
            error.to_string(),
            "`pacman -S --needed --noconfirm -- nope` exited with status 1: error: target not found: nope"
        );
        assert!(error.blames_names());
        let KindError::Command { step, error } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(*step, "install");
        assert!(
            matches!(&error.failure, Failure::Exit(Some(1), stderr) if stderr.contains("nope"))
        );
        let spawn = KindError::command(
            "observe",
            CommandError {
                command: "podman ps".into(),
                failure: Failure::Spawn("No such file or directory (os error 2)".into()),
            },
        );
        assert!(!spawn.blames_names());
        assert_eq!(
            spawn.to_string(),
            "`podman ps` could not be started: No such file or directory (os error 2)"
        );
        assert_eq!(KindError::from("refused: x").to_string(), "refused: x");
    }

    /// A tool that cannot work as configured says why first, and no name is retried alone.
    #[test]
    fn a_setup_failure_names_its_cause_and_blames_no_name() {
        let error = KindError::Setup {
            why: "pacman's download sandbox failed: the kernel does not support Landlock".into(),
            error: CommandError {
                command: "pacman -S --needed --noconfirm -- a".into(),
                failure: Failure::Exit(
                    Some(1),
                    "error: switching to sandbox user 'alpm' failed!\n".into(),
                ),
            },
        };
        assert_eq!(
            error.to_string(),
            "pacman's download sandbox failed: the kernel does not support Landlock: `pacman -S \
             --needed --noconfirm -- a` exited with status 1: error: switching to sandbox user \
             'alpm' failed!"
        );
        assert!(!error.blames_names());
    }
}
