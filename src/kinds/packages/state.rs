//! What observing packages finds and what a plan does to one, and what the kind tells later
//! kinds of a run.

use std::collections::BTreeSet;

#[derive(Debug, PartialEq)]
pub enum Observed {
    Installed {
        version: String,
        /// pacman's install reason: explicitly installed, or only as a dependency.
        explicit: bool,
        /// Installed packages that depend on it (`Required By`).
        required_by: Vec<String>,
    },
    Missing,
}

#[derive(Debug, PartialEq)]
pub enum Op {
    Install,
    /// `pacman -D --asexplicit`: a declared package installed as a dependency.
    MarkExplicit,
    Remove,
    /// `pacman -D --asdeps`: an adopted package goes back to being a dependency on release.
    MarkDependency,
    Forget,
}

/// What packages tell later kinds about a run.
#[derive(Debug, Default)]
pub struct Facts {
    /// Packages that failed to install in this run: units naming them are skipped.
    pub failed: BTreeSet<String>,
}
