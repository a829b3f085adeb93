//! The watcher's targets, worked out by the shell: starting and stopping the watcher with the
//! config, pointing it at what the declaration in force and the ledger name (from a run, or
//! from the store), the report of a contested resource, and what `status` says about it. The
//! decisions are `drift.rs`'s and the core's, the syscalls `os/inotify.rs`'s.

use mio::unix::SourceFd;

use super::shell::WATCH;
use super::{drift, inotify_watch, retry, Shell};
use crate::engine::{invalid, Converged, Fatal};
use crate::link;
use crate::model::declaration::Declaration;
use crate::model::spec::{files::Files, packages::Packages};
use crate::store::{self, Ledger, Store};

impl Shell<'_> {
    /// After a reload: a watcher started or stopped as the config's `watch` now says.
    pub(super) fn rewatch(&mut self, now: u64) -> std::io::Result<()> {
        if self.host.config.watch == self.watcher.enabled {
            return Ok(());
        }
        if let Some(fd) = self.watcher.raw() {
            self.poll.registry().deregister(&mut SourceFd(&fd))?;
        }
        self.watcher = inotify_watch::Watcher::new(self.host.config.watch);
        *self.core.watch_mut() = drift::Watch::default();
        if let Some(fd) = self.watcher.raw() {
            self.poll
                .registry()
                .register(&mut SourceFd(&fd), WATCH, mio::Interest::READABLE)?;
        }
        self.watched_for = None;
        self.refresh_watch(now, None);
        Ok(())
    }

    /// What `status` says about the watcher.
    pub(super) fn watch_state(&self, unix_ms: &dyn Fn(u64) -> u64) -> store::WatchState {
        let w = self.core.watch();
        let (overflows, last_overflow) = w.overflows();
        let contested = w
            .contested()
            .into_iter()
            .map(|c| store::ContestedState {
                kind: c.resource.0.to_string(),
                key: c.resource.1,
                since: unix_ms(c.since),
                repairs: c.repairs,
                last_change: unix_ms(c.last_change),
            })
            .collect();
        // A few by name: past the watch limit there may be hundreds, all for the same reason.
        const NAMED: usize = 3;
        let unwatched = w.unwatched();
        let mut timer_only: Vec<String> = unwatched
            .iter()
            .take(NAMED)
            .map(|(dir, why)| format!("{}: {why}", dir.display()))
            .collect();
        if unwatched.len() > NAMED {
            timer_only.push(format!("{} more directories", unwatched.len() - NAMED));
        }
        if let Some(Err(e)) = &self.pacman_db {
            timer_only.push(format!("packages: {e}"));
        }
        for (kind, key) in self.core.retry().given_up() {
            timer_only.push(format!(
                "{kind} {key}: its repair failed {} times in a row",
                retry::DELAYS_MS.len() + 1
            ));
        }
        let (state, detail) = match (&self.watcher.off, &self.watch_problem) {
            (Some(why), _) => (store::WatchMode::Off, Some(why.clone())),
            // What the store holds could not be read: the watches set before stay, or (none
            // yet) only the store is watched, for the repair.
            (None, Some(why)) if self.watched_for.is_some() => (
                store::WatchMode::Partial,
                Some(format!(
                    "the watches are as the store last read, not updated since: {why}"
                )),
            ),
            (None, Some(why)) => (
                store::WatchMode::Off,
                Some(format!("nothing owned is watched, only the store: {why}")),
            ),
            (None, None) if timer_only.is_empty() => (store::WatchMode::On, None),
            (None, None) => (
                store::WatchMode::Partial,
                Some(format!("on the timer only: {}", timer_only.join("; "))),
            ),
        };
        store::WatchState {
            state,
            detail,
            directories: w.directories(),
            overflows,
            last_overflow: last_overflow.map(unix_ms),
            contested,
        }
    }

    /// Tells the control plane by name: a report with outcome `contested`.
    pub(super) fn report_contested(&self, resource: &drift::Resource, message: String) {
        let (kind, key) = resource;
        let result = (|| -> Result<(), Fatal> {
            let store = self.host.store()?;
            let in_force = store.in_force_head()?;
            let now = self.host.options.clock.unix();
            let report = link::Report {
                revision: in_force.as_ref().and_then(|f| f.revision),
                digest: in_force.map(|f| f.digest),
                id: 0,
                trigger: crate::model::run::Triggers::one(crate::model::run::Trigger::Watch),
                outcome: crate::model::run::ReportOutcome::Contested,
                started: now,
                ended: now,
                changes: Vec::new(),
                failures: vec![crate::model::run::ResourceResult {
                    kind: kind.to_string(),
                    key: key.clone(),
                    action: crate::model::run::ResultAction::Contested,
                    detail: message.clone(),
                }],
                deferred: Vec::new(),
                drift: Vec::new(),
                message,
                failing: Vec::new(),
                facts: None,
                pacnew: Vec::new(),
                needs: None,
                reverted: None,
            };
            self.host.queue_report(&store, report)?;
            Ok(())
        })();
        if let Err(e) = result {
            log::error!("the contested report could not be queued: {}", e.message());
        }
    }

    /// Points the watches at what the declaration in force and the ledger name now: after a run,
    /// `converged` (what it converged with, nothing read again); else as the store has them.
    pub(super) fn refresh_watch(&mut self, now: u64, converged: Option<Converged>) {
        if self.watcher.off.is_some() {
            return;
        }
        let loaded = match converged {
            Some(Converged {
                declaration,
                ledger,
            }) => {
                let source = watch_source(&declaration.digest, &ledger);
                let changed = self.watched_for.as_ref() != Some(&source);
                self.watched_for = Some(source);
                Ok(Some(changed.then_some((declaration, ledger))))
            }
            None => self.watch_source_in_store(),
        };
        let (d, ledger) = match loaded {
            Ok(Some(None)) => {
                self.watch_problem = None;
                return;
            }
            Ok(Some(Some(loaded))) => loaded,
            Ok(None) => {
                self.watch_problem = None;
                self.watched_for = None;
                let targets = drift::store_targets(&self.host.config.state_dir);
                return (self.watcher).set_targets(self.core.watch_mut(), now, targets);
            }
            Err(e) => {
                // Said once, in the log and in `status`, until the store reads again.
                let why = e.message().to_string();
                if self.watch_problem.as_ref() != Some(&why) {
                    log::error!("watches not updated: {why}");
                }
                if self.watched_for.is_none() {
                    let targets = drift::store_targets(&self.host.config.state_dir);
                    (self.watcher).set_targets(self.core.watch_mut(), now, targets);
                }
                self.watch_problem = Some(why);
                return;
            }
        };
        self.watch_problem = None;
        let has_packages =
            !d.packages.is_empty() || ledger.owned_keys::<Packages>().next().is_some();
        if has_packages && self.pacman_db.is_none() {
            let db = self.host.pacman_local_db();
            if let Err(e) = &db {
                log::warn!("packages are left to the drift timer: {e}");
            }
            self.pacman_db = Some(db);
        }
        let root = self
            .host
            .options
            .root
            .as_deref()
            .unwrap_or(std::path::Path::new("/"));
        let places = drift::Places {
            root,
            store: &self.host.config.state_dir,
            unit_dir: &self.host.config.unit_dir,
            pacman_db: self.pacman_db.as_ref().and_then(|db| db.as_deref().ok()),
        };
        let targets = drift::targets(&places, &d, &ledger);
        // Freed before the watches are set, so what that allocates goes where they were.
        drop((d, ledger));
        (self.watcher).set_targets(self.core.watch_mut(), now, targets);
    }

    /// The declaration in force and the ledger, for the watches: `None` when there is no
    /// declaration, `Some(None)` when what they depend on is what they were set for.
    fn watch_source_in_store(&mut self) -> Result<Option<Option<(Declaration, Ledger)>>, Fatal> {
        let Some(store) = Store::open(&self.host.config.state_dir, false)? else {
            return Ok(None);
        };
        let Some(head) = store.in_force_head()? else {
            return Ok(None);
        };
        // What the targets depend on: unchanged, the watches stay (and nothing is parsed,
        // not even the declaration's text read).
        let source = watch_source(&head.digest, &store.ledger()?);
        if self.watched_for.as_ref() == Some(&source) {
            return Ok(Some(None));
        }
        let Some(in_force) = store.in_force()? else {
            return Ok(None);
        };
        let d = self
            .host
            .validate(&in_force.text)
            .map_err(|p| invalid(&store.path().join("declaration.json"), p))?;
        // Read again once the text is dropped: the ledger, the text and the declaration
        // parsed from it are never held at once (each grows with the declaration). One
        // changed between the two reads is seen by the next refresh, its source differing.
        drop(in_force);
        let ledger = store.ledger()?;
        self.watched_for = Some(source);
        Ok(Some(Some((d, ledger))))
    }
}

/// What the watches depend on, as one digest: the declaration in force (its digest) and the
/// files and packages the ledger owns, hashed as they are listed (the keys are not copied). A NUL
/// cannot be in a key, so it separates them.
fn watch_source(declaration_digest: &str, ledger: &store::Ledger) -> [u8; 32] {
    struct Source<'a>(&'a str, &'a store::Ledger);
    impl std::fmt::Display for Source<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            let Source(digest, ledger) = self;
            f.write_str(digest)?;
            f.write_str("\n")?;
            for key in ledger.owned_keys::<Files>() {
                write!(f, "{key}\0")?;
            }
            f.write_str("\n")?;
            for key in ledger.owned_keys::<Packages>() {
                write!(f, "{key}\0")?;
            }
            Ok(())
        }
    }
    crate::util::codec::sha256_of_text(format_args!("{}", Source(declaration_digest, ledger)))
}

/// Whether `status` must be written again for the watcher. Times converted from the monotonic
/// clock may differ by a second from one wake to the next with nothing having happened.
pub(super) fn changed(old: &Option<store::WatchState>, new: &Option<store::WatchState>) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return old.is_some() != new.is_some();
    };
    let near = |a: u64, b: u64| a.abs_diff(b) <= 1;
    let overflow_moved = match (old.last_overflow, new.last_overflow) {
        (Some(a), Some(b)) => !near(a, b),
        (a, b) => a != b,
    };
    let contest_moved = old.contested.len() != new.contested.len()
        || old.contested.iter().zip(&new.contested).any(|(a, b)| {
            (&a.kind, &a.key, a.repairs) != (&b.kind, &b.key, b.repairs)
                || !near(a.since, b.since)
                || !near(a.last_change, b.last_change)
        });
    (&old.state, &old.detail, old.directories, old.overflows)
        != (&new.state, &new.detail, new.directories, new.overflows)
        || overflow_moved
        || contest_moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_of_rounding_is_no_change() {
        let contested = |since, last_change| store::ContestedState {
            kind: "files".into(),
            key: "/etc/motd".into(),
            since,
            repairs: 5,
            last_change,
        };
        let state = |dirs, last_change| {
            Some(store::WatchState {
                state: store::WatchMode::On,
                directories: dirs,
                contested: vec![contested(100, last_change)],
                ..Default::default()
            })
        };
        assert!(!changed(&state(3, 200), &state(3, 201)));
        assert!(changed(&state(3, 200), &state(3, 205)));
        assert!(changed(&state(3, 200), &state(4, 200)));
        assert!(changed(&None, &state(3, 200)));
        assert!(!changed(&None, &None));
    }
}
