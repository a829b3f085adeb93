//! The core's actions that need the Host, carried out by the shell: runs and reverts (with the
//! pulse), a declaration accepted, the ack's confirmation, the check, the connection opened with
//! its hello, the outbox sent, the config reloaded, and what `status` shows.

use std::cell::RefCell;
use std::collections::BTreeSet;

use super::core::{Accepted, Confirmation, Input, Now, RunSummary};
use super::drift::{self, Resource};
use super::shell::{self, Live, Pulse, LINK};
use super::{connection, watch_targets, Shell};
use crate::engine::accept::Acceptance;
use crate::engine::reconcile::Scope;
use crate::engine::{node, Fatal, Reverting, RunResult, Target};
use crate::link::{messages, Link, Message, Node};
use crate::model::run::Triggers;
use crate::store::{LinkStatus, ServicePhase, ServiceState, Store};
use crate::tools::pacman;

/// What the core needs of a run's result; `watched`: a watch run's failures and repairs too.
fn summary(
    converged: &Result<Option<RunResult>, Fatal>,
    watched: bool,
) -> Result<RunSummary, String> {
    let result = match converged {
        Ok(Some(result)) => result,
        Ok(None) => return Ok(RunSummary::default()),
        Err(e) => return Err(e.message().to_string()),
    };
    let report = &result.report;
    let resource = |kind: &str, key: &str| Some((drift::kind(kind)?, key.to_string()));
    let failed: BTreeSet<Resource> = match watched {
        true => (report.failures.iter())
            .filter_map(|f| resource(&f.kind, &f.key))
            .collect(),
        false => BTreeSet::new(),
    };
    // A repair that failed (changed back before it could be checked) was fought too.
    let repaired = match watched {
        true => (report.changes.iter().map(|c| (c.kind, c.key)))
            .chain(
                report
                    .failures
                    .iter()
                    .map(|f| (f.kind.as_str(), f.key.as_str())),
            )
            .filter_map(|(kind, key)| resource(kind, key))
            .collect(),
        false => Vec::new(),
    };
    Ok(RunSummary {
        outcome: Some(result.record.outcome),
        changed: report.changes.len(),
        failed: report.failures.len(),
        failed_watched: failed,
        repaired,
        unwritten: result.unwritten.clone(),
    })
}

impl Shell<'_> {
    /// Runs `f` with the pulse (between resources, while a tool runs, while waiting for the
    /// store's lock); a link error it met drops the connection afterwards.
    fn pulsing<T>(&mut self, f: impl FnOnce(&crate::engine::Host, &dyn Fn() -> bool) -> T) -> T {
        let pulse = Pulse {
            core: RefCell::new(&mut self.core),
            live: RefCell::new(self.live.as_mut()),
            error: RefCell::new(None),
            signals: &self.signals,
            clock: &self.host.options.clock,
        };
        let result = f(self.host, &|| pulse.beat());
        if let Some(e) = pulse.error.into_inner() {
            self.link_failed(e);
        }
        result
    }

    pub(super) fn reconcile(&mut self, triggers: &Triggers, scope: Scope) {
        let accepted = self.accepted.take();
        let mut converged = self.pulsing(|host, beat| {
            host.converge(triggers, Target::Service { accepted }, &scope, true, beat)
        });
        let result = summary(&converged, scope != Scope::All);
        // The run's report is freed before the watches are set, as it grows with the run.
        self.held = match &mut converged {
            Ok(Some(result)) => result.converged.take(),
            _ => None,
        };
        drop(converged);
        let unwritten = self.host.has_unwritten();
        let now = self.now();
        self.core.handle(now, Input::RunDone { result, unwritten });
    }

    pub(super) fn revert(&mut self, link_error: Option<String>) {
        let reverted =
            self.pulsing(|host, beat| host.revert_if_due(link_error.as_deref(), true, beat));
        let run = match reverted {
            Ok(Some(Reverting { run: Some(run), .. })) => Some(summary(&Ok(Some(run)), false)),
            Ok(_) => None,
            Err(e) => Some(Err(e.message().to_string())),
        };
        let unwritten = self.host.has_unwritten();
        let now = self.now();
        self.core.handle(now, Input::Reverted { run, unwritten });
    }

    /// A declaration from the control plane: the engine accepts or refuses it; accepted, it is
    /// kept as parsed for the run that applies it.
    pub(super) fn accept(&mut self, revision: u64, text: Vec<u8>, confirm_secs: Option<u64>) {
        let digest = crate::util::codec::sha256_hex(&text);
        let acceptance =
            self.pulsing(|host, beat| host.accept_declaration(revision, text, confirm_secs, beat));
        let accepted = match acceptance.refusal() {
            Some((outcome, message)) => Accepted::Refused(outcome, message.to_string()),
            None => Accepted::InForce,
        };
        if let Acceptance::InForce(declaration) = acceptance {
            self.accepted = Some(*declaration);
        }
        let now = self.now();
        let accepted = Input::Accepted {
            revision,
            digest,
            accepted,
        };
        self.core.handle(now, accepted);
    }

    pub(super) fn confirm_acked(&mut self, id: u64) {
        let confirmation = match self.host.confirm_acked(id) {
            Ok(said) => Confirmation::Done(said),
            Err(Fatal::Locked { .. }) => Confirmation::Locked,
            Err(e) => Confirmation::Failed(e.message().to_string()),
        };
        let now = self.now();
        self.core.handle(now, Input::Confirmed(confirmation));
    }

    /// Observes what the watcher saw, in plan mode.
    pub(super) fn check(&mut self, touched: BTreeSet<Resource>) {
        // A few by name: the logger keeps the room a line took, and drift in every file of a
        // large declaration would make one line of all their names.
        const NAMED: usize = 10;
        let checked = match self.host.drifted(&Scope::Only(touched)) {
            Ok(changes) => Ok((
                changes.len(),
                (changes.iter().take(NAMED))
                    .map(|c| format!("{} {}", c.kind, c.key))
                    .collect(),
            )),
            Err(e) => Err(e.message().to_string()),
        };
        let now = self.now();
        self.core.handle(now, Input::Checked(checked));
    }

    pub(super) fn reload(&mut self, now: Now) {
        let settings = match self.host.reload_config() {
            Ok(()) => {
                log::info!("configuration reloaded");
                // Validated under the old limits and identity: the run reads the store's.
                self.accepted = None;
                // The unit directory or pacman may have moved: the watches are worked out again.
                self.pacman_db = None;
                self.watched_for = None;
                self.tls = None;
                Some(shell::settings(self.host))
            }
            Err(e) => {
                let e = e.message();
                log::error!("configuration not reloaded, the previous one stays: {e}");
                None
            }
        };
        self.core.handle(now, Input::Reloaded(settings));
        if let Err(e) = self.rewatch(now.mono) {
            log::error!("epoll: {e}");
        }
    }

    /// Opens the connection to the configured control plane; its TLS is set up on the first
    /// attempt that reads the CA.
    pub(super) fn connect(&mut self, now: Now) {
        match self.open(now) {
            Ok(live) => {
                self.live = Some(live);
                self.core.handle(now, Input::Connecting);
            }
            Err(e) => {
                log::error!("no link yet, retrying: {e}");
                self.core.handle(now, Input::LinkClosed(e));
            }
        }
    }

    fn open(&mut self, now: Now) -> Result<Live, String> {
        // After a restart or a reconnect the hello carries them whatever was sent before.
        let facts = self.facts();
        self.facts_sent = Some(facts.clone());
        let cp = (self.host.config.control_plane.as_ref()).ok_or("no control plane")?;
        // Read on every attempt until it reads: a CA file missing or damaged now (a reload
        // before `join` wrote it, a disk not yet mounted) is retried with the backoff, and
        // `status` says why meanwhile.
        let tls = match &self.tls {
            Some(tls) => tls.clone(),
            None => connection::tls_config(cp)?,
        };
        self.tls = Some(tls.clone());
        let hello = self.hello(facts)?;
        let config = &self.host.config;
        let heartbeat = config.heartbeat.as_millis() as u64;
        let link = Link::new(now.mono, hello, heartbeat, config.max_frame_bytes);
        let clock = self.host.options.clock.clone();
        let mut conn = connection::Connection::open(cp, tls, link, clock)?;
        let interest = conn.interest();
        (self
            .poll
            .registry()
            .register(&mut conn.stream, LINK, interest))
        .map_err(|e| format!("epoll: {e}"))?;
        log::info!("connecting to {}", cp.address);
        Ok(Live {
            conn: Box::new(conn),
            sent_through: 0,
        })
    }

    fn hello(&self, facts: Node) -> Result<Message, String> {
        let cp = (self.host.config.control_plane.as_ref()).ok_or("no control plane")?;
        let secret =
            crate::os::input::read_text(&cp.secret_file, crate::os::input::MAX_SMALL_INPUT)
                .map_err(|e| format!("secret {}: {e}", cp.secret_file.display()))?;
        let store = self.host.store().ok();
        let in_force = (store.as_ref()).and_then(|s| s.in_force_head().ok().flatten());
        let reverted =
            (store.as_ref()).and_then(|s| s.generations().ok()?.reverted.map(Into::into));
        Ok(Message::Hello {
            protocol: messages::PROTOCOL,
            node: cp.node.clone(),
            secret: secret.trim().to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            revision: in_force.as_ref().and_then(|f| f.control_plane_revision),
            digest: in_force.map(|f| f.digest),
            facts: Some(facts),
            reverted,
        })
    }

    /// The node's facts now, read from files with nothing spawned: pacman's local database is
    /// where `pacman -v -T` said when a run or the watcher asked, else where the pacman.conf its
    /// command reads says; the foreign packages and what the machine needs are the store's last
    /// (`stats.json`).
    fn facts(&self) -> Node {
        let root = self.host.options.root.as_deref();
        let asked = (self.pacman_db.as_ref()).and_then(|d| d.as_ref().ok().cloned());
        let db = match asked.or_else(|| self.host.pacman_local_db_known()) {
            Some(db) => db,
            None => {
                let conf = pacman::conf_file(&self.host.config.pacman.command);
                // Under --root pacman runs with --sysroot: its paths are inside the root.
                let inside = |p: &std::path::Path| match root {
                    Some(root) => root.join(p.strip_prefix("/").unwrap_or(p)),
                    None => p.to_path_buf(),
                };
                let max = crate::os::input::MAX_SMALL_INPUT;
                let text = crate::os::input::read_text(&inside(&conf), max).unwrap_or_default();
                inside(&pacman::conf_local_db(&text))
            }
        };
        let stats = match Store::open(&self.host.config.state_dir, false) {
            Ok(Some(store)) => store.stats().ok(),
            _ => None,
        };
        let (foreign, needs) = stats.map_or((None, None), |s| (s.foreign, s.needs));
        Node {
            foreign_packages: foreign.map(|f| f.count),
            needs,
            ..node::collect(root.unwrap_or(std::path::Path::new("/")), &db)
        }
    }

    /// Sends every queued report the link has not carried yet, oldest first.
    pub(super) fn send_outbox(&mut self) {
        if !self.core.link_up() {
            return;
        }
        let Some(sent_through) = self.live.as_ref().map(|l| l.sent_through) else {
            return;
        };
        let mut pending = match Store::open(&self.host.config.state_dir, false) {
            Ok(Some(store)) => self
                .host
                .pending_reports(&store, sent_through)
                .unwrap_or_else(|e| {
                    log::error!("{e}");
                    Vec::new()
                }),
            _ => Vec::new(),
        };
        // The newest report carries the facts when they changed since they were last sent.
        if !pending.is_empty() {
            let facts = self.facts();
            if (self.facts_sent.as_ref()).is_none_or(|s| facts.changed_from(s)) {
                if let Some(last) = pending.last_mut() {
                    last.facts = Some(facts.clone());
                }
                self.facts_sent = Some(facts);
            }
        }
        let now = self.now().mono;
        let Some(live) = &mut self.live else { return };
        for report in &pending {
            live.conn.link.send_report(now, report);
            live.sent_through = report.id;
        }
        if let Err(e) = live.conn.write() {
            self.link_failed(e);
        }
    }

    /// Writes what `status` shows, when it changed; at the start and on every change of the
    /// link, the metrics say so.
    pub(super) fn publish_status(&mut self, now: Now) {
        let unix = |mono: u64| now.unix_ms_of(mono) / 1000;
        let link = self.core.link_status();
        // Down since the last state that was connected, kept while it stays down.
        let link_down_since = match (link, &self.status) {
            (LinkStatus::Connected | LinkStatus::None, _) => None,
            (_, Some(old)) if old.link == LinkStatus::Connected => Some(now.unix_ms / 1000),
            (_, Some(old)) => old.link_down_since.or(Some(self.started_unix)),
            (_, None) => Some(self.started_unix),
        };
        let state = ServiceState {
            pid: std::process::id(),
            started: self.started_unix,
            link,
            link_at: self.core.link_at().map(unix),
            link_down_since,
            last_error: self.core.last_error().map(str::to_string),
            next_timer: unix(self.core.next_timer()),
            state: ServicePhase::Running,
            watch: Some(self.watch_state(&unix)),
        };
        let (changed, link_changed) = match &self.status {
            // Rounding of the converted times must not rewrite the file on every wake.
            Some(old) => (
                old.link != state.link
                    || old.last_error != state.last_error
                    || watch_targets::changed(&old.watch, &state.watch)
                    || old.next_timer.abs_diff(state.next_timer) > 1,
                old.link != state.link,
            ),
            None => (true, true),
        };
        if changed {
            if let Ok(store) = self.host.store() {
                if let Err(e) = store.set_service_state(&state) {
                    log::error!("{e}");
                }
                if link_changed {
                    let up = link == LinkStatus::Connected;
                    self.host.write_metrics(&store, Some(up));
                }
            }
            self.status = Some(state);
        }
    }
}
