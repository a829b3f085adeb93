//! What a run is doing, told as it starts doing it, for a person waiting at a terminal: the engine
//! prints nothing, so it hands these events to the `Sink` its caller gave (the command line
//! renders them on stderr: `cli/progress.rs`). Without a sink nothing is built for them.

use std::fmt;
use std::rc::Rc;
use std::time::Duration;

/// How many resources a step names; the rest are counted ("and 17 more").
pub const NAMED: usize = 5;

/// One thing a run starts doing (or, for `Planned` and `Exited`, has just done).
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// A converging run starts: what triggered it and the declaration it converges to.
    Run {
        triggers: String,
        revision: Option<u64>,
        digest: &'a str,
    },
    /// A kind starts a step over `total` resources, the first `NAMED` of them in `named`, each
    /// with its change's sign (`+`, `~`, `-`) when the step applies changes.
    Step {
        kind: &'a str,
        step: Step,
        total: usize,
        named: Vec<(Option<char>, &'a str)>,
    },
    /// What a kind's observation came to, once planned.
    Planned {
        kind: &'a str,
        in_sync: usize,
        adopted: usize,
        changes: usize,
        failed: usize,
    },
    /// An external command starts: its command line, as `--trace-commands` lists it.
    Command(&'a str),
    /// A line a pacman transaction printed, as it printed it (without its line break).
    Line(&'a str),
    /// The command last started ended: its exit code (`None`: a signal) and how long it ran.
    Exited { code: Option<i32>, took: Duration },
    /// Waiting for another process to let go of something (pacman's database lock).
    Waiting(&'a str),
}

/// The steps of a kind a person sees start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Its one batched query of the resources' state.
    Observe,
    /// Applying the planned changes.
    Apply,
    /// Observing the changed resources again (a tool's word is not taken for it).
    Verify,
}

/// Where events go: a closure of the caller's, cheap to clone (the engine's options and each
/// run's runner hold one).
#[derive(Clone)]
pub struct Sink(Rc<dyn Fn(&Event)>);

impl Sink {
    pub fn new(show: impl Fn(&Event) + 'static) -> Sink {
        Sink(Rc::new(show))
    }

    pub fn send(&self, event: &Event) {
        (self.0)(event)
    }
}

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sink")
    }
}

/// The first `NAMED` of `keys`, each with `sign`, for a `Step`.
pub fn named<'a>(
    keys: impl IntoIterator<Item = (Option<char>, &'a str)>,
) -> Vec<(Option<char>, &'a str)> {
    keys.into_iter().take(NAMED).collect()
}
