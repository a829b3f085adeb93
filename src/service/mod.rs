//! `mesh-host run`: the service. One thread; a mio `Poll` multiplexes the control-plane
//! connection, a timerfd (drift timer, heartbeats, reconnect backoff: whichever is next) and a
//! signalfd. When a run is due, the loop calls the same blocking reconciler `apply` uses
//! (`Host::converge`: one lock, one ledger), checking for SIGTERM between resources.

// What systemd shows and asks: `STATUS=` and `ExecReload=`.
mod notify;
mod reload;

mod backoff;
mod connection;
mod retry;
mod schedule;
mod watcher;

mod watch;
mod watching;

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use mio::unix::SourceFd;
use mio::{Events, Poll, Token};

use crate::engine::facts;
use crate::engine::reconcile::Scope;
use crate::engine::{Fatal, Host, Reverting, Target, EXIT_OK};
use crate::link::{messages, Event, Facts, Link, Message, Report, ReportOutcome};
use crate::model::declaration::Declaration;
use crate::model::envelope;
use crate::os::sys;
use crate::store::{
    self, Confirmer, InForce, LinkStatus, RunOutcome, ServicePhase, ServiceState, Source, State,
    Store, Trigger, Triggers,
};
use crate::tools::pacman;
use backoff::Backoff;
use connection::Connection;
use schedule::Schedule;

pub use reload::{reload, signal_pending, signal_reload};

const SIGNALS: Token = Token(0);
const TIMER: Token = Token(1);
const LINK: Token = Token(2);
const WATCH: Token = Token(3);
/// How often runs kept in memory are offered to a store that could not take them.
const RETRY_WRITES_MS: u64 = 5_000;

/// What the loop knows about the link, for `status` and for the backoff.
enum LinkState {
    /// No control plane configured: the host holds the declaration in force on its timer alone.
    None,
    Connecting {
        conn: Box<Connection>,
    },
    Up {
        conn: Box<Connection>,
        since: u64,
        sent_through: u64,
    },
    Retrying {
        at: u64,
    },
}

impl LinkState {
    /// What `status` and `STATUS=` call it.
    fn status(&self) -> LinkStatus {
        match self {
            LinkState::None => LinkStatus::None,
            LinkState::Connecting { .. } => LinkStatus::Connecting,
            LinkState::Up { .. } => LinkStatus::Connected,
            LinkState::Retrying { .. } => LinkStatus::Retrying,
        }
    }
}

struct Service<'h> {
    host: &'h mut Host,
    schedule: Schedule,
    backoff: Backoff,
    link: LinkState,
    tls: Option<Arc<rustls::ClientConfig>>,
    last_error: Option<String>,
    /// Every link so far; the first success is not a *re*-connection.
    connected_before: bool,
    started_unix: u64,
    /// This process's last run, and the `STATUS=` line last sent to systemd.
    last_run: Option<notify::LastRun>,
    sent_status: RefCell<String>,
    /// What the signals read so far ask of the loop.
    signalled: Signalled,
    /// The deadline (Unix seconds) of the pending declaration in force, when there is one: the
    /// timer wakes the loop for it, which then reverts it.
    pending: Option<u64>,
    /// The newest ack the store's lock kept from confirming the pending declaration: tried again.
    acked: Option<u64>,
    signals: sys::SignalFd,
    status: RefCell<Option<ServiceState>>,
    watcher: watcher::Watcher,
    /// What a run with trigger `watch` alone converges: what drifted, or everything.
    watch_scope: Option<Scope>,
    /// Watch repairs that failed, tried again within seconds (`retry.rs`).
    repair_retry: retry::Retry,
    /// pacman's local database, once looked up (`Err`: packages are on the timer, and why).
    pacman_db: Option<Result<std::path::PathBuf, String>>,
    /// The facts last sent (in the hello or a report): a report carries them only when changed.
    facts_sent: Option<Facts>,
    /// A digest of the declaration's digest and the owned files and packages the watches were set
    /// for (`watching::watch_source`): not the lists themselves, which the service would keep.
    watched_for: Option<[u8; 32]>,
    /// Why the watches could not be worked out from the store (it could not be read), for
    /// `status`, until it can.
    watch_problem: Option<String>,
    /// When runs kept in memory are next offered to the store (`write_kept_runs`).
    retry_writes_at: u64,
    /// The declaration last accepted from the control plane, as parsed then, until the next run
    /// takes it (`Target::Service`): it is not parsed again, nor kept past that run.
    accepted: Option<Declaration>,
}

pub fn run(host: &mut Host) -> Result<i32, Fatal> {
    let io = |what: &str, error: std::io::Error| {
        Fatal::Error(crate::engine::Failed::Io {
            context: what.to_string(),
            error,
        })
    };
    let signals = sys::SignalFd::new().map_err(|e| io("signalfd", e))?;
    let timer = sys::TimerFd::new().map_err(|e| io("timerfd", e))?;
    let mut poll = Poll::new().map_err(|e| io("epoll", e))?;
    poll.registry()
        .register(
            &mut SourceFd(&signals.raw()),
            SIGNALS,
            mio::Interest::READABLE,
        )
        .map_err(|e| io("epoll", e))?;
    poll.registry()
        .register(&mut SourceFd(&timer.raw()), TIMER, mio::Interest::READABLE)
        .map_err(|e| io("epoll", e))?;
    let watcher = watcher::Watcher::new(host.config.watch);
    if let Some(fd) = watcher.raw() {
        poll.registry()
            .register(&mut SourceFd(&fd), WATCH, mio::Interest::READABLE)
            .map_err(|e| io("epoll", e))?;
    }
    let now = sys::now_ms();
    let interval = host.config.interval.as_millis() as u64;
    let host_reconnect_base = host.config.reconnect_base.as_millis() as u64;
    let mut service = Service {
        host,
        schedule: Schedule::new(now, interval, sys::random()),
        backoff: Backoff::new(host_reconnect_base),
        link: LinkState::None,
        tls: None,
        last_error: None,
        connected_before: false,
        started_unix: store::unix_now(),
        last_run: None,
        sent_status: RefCell::new(String::new()),
        signalled: Signalled::default(),
        pending: None,
        acked: None,
        signals,
        status: RefCell::new(None),
        watcher,
        watch_scope: None,
        repair_retry: retry::Retry::default(),
        pacman_db: None,
        facts_sent: None,
        watched_for: None,
        watch_problem: None,
        retry_writes_at: now,
        accepted: None,
    };
    service.configure_link(now);
    service.load_pending();
    let mut events = Events::with_capacity(16);
    let mut ready = false;
    loop {
        service.drain_signals();
        if service.signalled.reload.take() {
            service.reload_config();
            service
                .rewatch(sys::now_ms(), &poll)
                .map_err(|e| io("epoll", e))?;
        }
        if service.signalled.signal_run.take() {
            service.schedule.add(Trigger::Signal);
        }
        if service.signalled.recheck.take() {
            service.load_pending();
        }
        if service.signalled.stopping.get() {
            break;
        }
        // A pending declaration past its deadline is reverted before anything else runs.
        if service.revert_if_due() {
            continue;
        }
        service.confirm_acked();
        service.on_watch_due(sys::now_ms());
        service.on_retry_due(sys::now_ms());
        service.write_kept_runs(sys::now_ms());
        // Before a run too: a run may take minutes, and `status` should show the link as it is.
        service.publish_status(sys::now_ms());
        if let Some(triggers) = service.schedule.take_due(sys::now_ms()) {
            service.reconcile(&triggers);
            if !ready {
                ready = true;
                sys::sd_notify("READY=1");
            }
            continue; // signals may have come in during the run
        }
        let now = sys::now_ms();
        service.maintain_link(now, &poll);
        // Declarations and acks that came in during a run.
        service.handle_link_events(now);
        service.publish_status(now);
        let deadline = service.deadline(now);
        timer
            .arm(deadline.saturating_sub(now))
            .map_err(|e| io("timerfd", e))?;
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(io("epoll", e));
            }
        }
        let now = sys::now_ms();
        for event in events.iter() {
            match event.token() {
                TIMER => timer.drain(),
                WATCH => service.watcher.read(now),
                SIGNALS => {} // drained at the top of the loop
                LINK => service.on_socket(
                    now,
                    event.is_readable() || event.is_read_closed() || event.is_error(),
                ),
                _ => {}
            }
        }
        service.handle_link_events(now);
        // A run due refreshes the watches itself, from what it converged with.
        if !service.schedule.pending() && service.watcher.watch.take_refresh() {
            service.refresh_watch(now, None);
        }
    }
    sys::sd_notify("STOPPING=1");
    service.host.write_unwritten_now();
    if service.host.has_unwritten() {
        log::error!("runs kept in memory could not be written to the store before stopping");
    }
    let now = sys::now_ms();
    if let LinkState::Up { conn, .. } | LinkState::Connecting { conn } = &mut service.link {
        conn.close(now, "the host is stopping");
    }
    service.publish_status(now);
    if let Ok(store) = service.host.store() {
        if let Some(mut state) = service.status.borrow().clone() {
            state.state = ServicePhase::Stopped;
            let _ = store.set_service_state(&state);
            service.host.write_metrics(&store, Some(false));
        }
    }
    Ok(EXIT_OK)
}

/// What the signals read so far ask of the loop, each taken when the loop acts on it.
#[derive(Default)]
struct Signalled {
    /// SIGTERM or SIGINT: stop after the resource being applied.
    stopping: Cell<bool>,
    /// SIGHUP: read the config again.
    reload: Cell<bool>,
    /// SIGUSR1 seen while a run was in progress.
    signal_run: Cell<bool>,
    /// SIGUSR2: a person's `apply --confirm` made a declaration pending; its deadline is read.
    recheck: Cell<bool>,
}

/// Reads pending signals: TERM/INT stop, HUP reloads the config, USR1 asks for a run, USR2
/// rereads the pending deadline. Returns whether the host is stopping.
fn read_signals(signals: &sys::SignalFd, flags: &Signalled) -> bool {
    let Signalled {
        stopping,
        reload,
        signal_run,
        recheck,
    } = flags;
    while let Some(signal) = signals.read() {
        match signal {
            libc::SIGTERM | libc::SIGINT => {
                log::info!("signal {signal}: stopping after the resource being applied");
                stopping.set(true);
            }
            libc::SIGHUP => reload.set(true),
            libc::SIGUSR1 => signal_run.set(true),
            libc::SIGUSR2 => recheck.set(true),
            _ => {}
        }
    }
    stopping.get()
}

/// What the loop still does while a run (or a wait for the store's lock) blocks it: reads signals
/// and keeps the link answered. Called between resources and, through the runner, about every
/// 200 ms while a tool runs; never blocks.
struct Pulse<'a> {
    link: RefCell<&'a mut LinkState>,
    /// The first error the link hit, for the loop to drop it with after the run.
    error: RefCell<Option<String>>,
    signals: &'a sys::SignalFd,
    flags: &'a Signalled,
}

impl<'a> Pulse<'a> {
    fn new(link: &'a mut LinkState, signals: &'a sys::SignalFd, flags: &'a Signalled) -> Pulse<'a> {
        Pulse {
            link: RefCell::new(link),
            error: RefCell::new(None),
            signals,
            flags,
        }
    }

    /// Reads what the control plane sent (pongs; declarations and acks stay queued in the link
    /// until the run ends), sends the heartbeat's pings, writes; reads the signals. Returns
    /// whether the host is stopping.
    fn beat(&self) -> bool {
        if self.error.borrow().is_none() {
            // Connecting too: the handshake and the welcome proceed while a run holds the loop.
            if let LinkState::Up { conn, .. } | LinkState::Connecting { conn } =
                &mut **self.link.borrow_mut()
            {
                let now = sys::now_ms();
                let result = conn
                    .read(now)
                    .and_then(|()| conn.handle_timeout(now))
                    .and_then(|()| conn.write());
                if let Err(e) = result {
                    *self.error.borrow_mut() = Some(e);
                }
            }
        }
        read_signals(self.signals, self.flags)
    }

    fn link_error(self) -> Option<String> {
        self.error.into_inner()
    }
}

impl Service<'_> {
    /// Reads pending signals: TERM/INT stop, HUP reloads the config, USR1 asks for a run.
    /// Returns whether the host is stopping, so the reconciler can check between resources.
    fn drain_signals(&self) -> bool {
        read_signals(&self.signals, &self.signalled)
    }

    fn reload_config(&mut self) {
        match self.host.reload_config() {
            Ok(()) => {
                log::info!("configuration reloaded");
                // Validated under the old limits and identity: the run reads the store's.
                self.accepted = None;
                // The unit directory or pacman may have moved: the watches are worked out again.
                self.pacman_db = None;
                self.watched_for = None;
                self.schedule
                    .set_interval(self.host.config.interval.as_millis() as u64);
                self.backoff
                    .set_base(self.host.config.reconnect_base.as_millis() as u64);
                let why = "the configuration was reloaded";
                if let LinkState::Up { conn, .. } | LinkState::Connecting { conn } = &mut self.link
                {
                    conn.close(sys::now_ms(), why);
                }
                self.drop_link(sys::now_ms(), why.into(), false);
                self.configure_link(sys::now_ms());
            }
            Err(e) => log::error!(
                "configuration not reloaded, the previous one stays: {}",
                e.message()
            ),
        }
    }

    /// Schedules the first connection to the configured control plane; its TLS is set up
    /// then (`connect`).
    fn configure_link(&mut self, now: u64) {
        self.tls = None;
        self.link = match &self.host.config.control_plane {
            Some(_) => LinkState::Retrying { at: now },
            None => LinkState::None,
        };
    }

    fn reconcile(&mut self, triggers: &Triggers) {
        self.notify_status(&format!("reconciling ({triggers})"));
        log::info!("reconciling ({triggers})");
        // Any other trigger makes it a full run, which covers whatever the watcher had pending.
        let scope = match self.watch_scope.take() {
            Some(scope) if *triggers == Triggers::one(Trigger::Watch) => scope,
            _ => {
                self.watcher.watch.covered();
                Scope::All
            }
        };
        // Between resources, while a tool runs and while waiting for the store's lock.
        let pulse = Pulse::new(&mut self.link, &self.signals, &self.signalled);
        let beat = || pulse.beat();
        let target = Target::Service {
            accepted: self.accepted.take(),
        };
        let mut converged = self.host.converge(triggers, target, &scope, true, &beat);
        if let Some(e) = pulse.link_error() {
            self.drop_link(sys::now_ms(), e, true);
        }
        self.log_run(&converged);
        let now = sys::now_ms();
        // A run over what a watch touched checked nothing else: the timer keeps its time.
        if scope == Scope::All {
            self.schedule.rearm(now, sys::random());
            self.repair_retry.covered();
        } else {
            self.retry_failed_repairs(now, &scope, &converged);
            // A repair that failed (changed back before it could be checked) was fought too.
            let repaired: Vec<_> = match &converged {
                Ok(Some(result)) => {
                    let changes = result.report.changes.iter().map(|c| (c.kind, &c.key));
                    let failures =
                        (result.report.failures.iter()).map(|f| (f.kind.as_str(), &f.key));
                    changes
                        .chain(failures)
                        .filter_map(|(kind, key)| Some((watch::kind(kind)?, key.clone())))
                        .collect()
                }
                _ => Vec::new(),
            };
            self.contest(now, &repaired);
        }
        // What the run converged with sets the watches (what the watcher saw of the store before
        // the run is covered by it); the run's report is freed first, as it grows with the run.
        let held = match &mut converged {
            Ok(Some(result)) => result.converged.take(),
            _ => None,
        };
        drop(converged);
        self.watcher.watch.take_refresh();
        self.refresh_watch(now, held);
        self.load_pending();
        self.send_outbox();
    }

    /// Reads the pending declaration's deadline from the store (a problem reading it is logged,
    /// and the deadline kept as it was).
    fn load_pending(&mut self) {
        match self.host.pending_deadline() {
            Ok(pending) => self.pending = pending,
            Err(e) => log::error!("the pending declaration's deadline: {}", e.message()),
        }
    }

    /// Reverts the pending declaration once its deadline has passed (the link's last error says
    /// why the ack did not come); whether a run happened.
    fn revert_if_due(&mut self) -> bool {
        if self
            .pending
            .is_none_or(|deadline| deadline > store::unix_now())
        {
            return false;
        }
        self.notify_status("reverting");
        let pulse = Pulse::new(&mut self.link, &self.signals, &self.signalled);
        let beat = || pulse.beat();
        let reverted = self
            .host
            .revert_if_due(self.last_error.as_deref(), true, &beat);
        if let Some(e) = pulse.link_error() {
            self.drop_link(sys::now_ms(), e, true);
        }
        let ran = match reverted {
            Ok(Some(Reverting { run: Some(run), .. })) => {
                self.log_run(&Ok(Some(run)));
                true
            }
            Ok(_) => false,
            Err(e) => {
                log::error!("revert failed: {}", e.message());
                self.log_run(&Err(e));
                true
            }
        };
        self.load_pending();
        if self.pending.is_some_and(|d| d <= store::unix_now()) {
            // Not reverted (the store failed): tried again after the next run, not in a loop.
            log::error!("the pending declaration is past its deadline but was not reverted");
            self.pending = None;
        }
        if ran {
            let now = sys::now_ms();
            self.watcher.watch.covered();
            self.schedule.rearm(now, sys::random());
            self.refresh_watch(now, None);
            self.send_outbox();
        }
        ran
    }

    /// Confirms the pending declaration with the newest ack, if the store's lock kept it from
    /// being confirmed when the ack came.
    fn confirm_acked(&mut self) {
        let Some(id) = self.acked else { return };
        match self.host.confirm_acked(id) {
            Ok(confirmed) => {
                self.acked = None;
                if let Some(said) = confirmed {
                    log::info!("{said}");
                    self.load_pending();
                }
            }
            Err(Fatal::Locked { .. }) => {}
            Err(e) => {
                self.acked = None;
                log::error!("the pending declaration was not confirmed: {}", e.message());
            }
        }
    }

    /// Offers the runs kept in memory (the store could not take them) to the store again, every
    /// `RETRY_WRITES_MS`; once written, their reports go out.
    fn write_kept_runs(&mut self, now: u64) {
        if !self.host.has_unwritten() || now < self.retry_writes_at {
            return;
        }
        self.host.write_unwritten_now();
        self.retry_writes_at = now + RETRY_WRITES_MS;
        if !self.host.has_unwritten() {
            self.send_outbox();
        }
    }

    /// Logs how a run ended and says it in `STATUS=`: each failed resource at error (so
    /// `journalctl -p err` lists exactly the failures), the summary at info when all converged and
    /// at warning otherwise. (The loop sends the line again once the timer is rearmed.)
    fn log_run(&mut self, converged: &Result<Option<crate::engine::RunResult>, Fatal>) {
        let ended = store::unix_now();
        match converged {
            Ok(Some(result)) => {
                // Each failure itself is logged by the failure history (at err when it starts
                // and hourly while it repeats), not every run.
                let (changed, failed) = (result.report.changes.len(), result.report.failures.len());
                let outcome = result.record.outcome;
                let summary = format!("run {outcome}: {changed} changed, {failed} failed");
                if failed == 0 && outcome != RunOutcome::Interrupted {
                    log::info!("{summary}");
                } else {
                    log::warn!("{summary}");
                }
                if let Some(why) = &result.unwritten {
                    log::error!("{why}");
                }
                self.last_run = Some(notify::LastRun {
                    outcome,
                    ended,
                    changed,
                    failed,
                });
            }
            Ok(None) => log::info!("no declaration in force yet; nothing to hold"),
            Err(e) => {
                log::error!("run failed: {}", e.message());
                self.last_run = Some(notify::LastRun {
                    outcome: RunOutcome::Error,
                    ended,
                    changed: 0,
                    failed: 0,
                });
            }
        }
        self.notify_status("idle");
    }

    /// Sends systemd the `STATUS=` line for `doing`, when it differs from the last one sent.
    fn notify_status(&self, doing: &str) {
        let link = self.link.status();
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let next_timer =
            (unix_ms + self.schedule.next_timer()).saturating_sub(sys::now_ms()) / 1000;
        let text = notify::status_text(doing, self.last_run.as_ref(), next_timer, link);
        if *self.sent_status.borrow() != text {
            sys::sd_notify(&format!("STATUS={text}"));
            *self.sent_status.borrow_mut() = text;
        }
    }

    /// The node's facts now, read from files with nothing spawned: pacman's local database is
    /// where `pacman -v -T` said when a run or the watcher asked, else where the pacman.conf its
    /// command reads says; the foreign packages and what the machine needs are the store's last
    /// (`stats.json`).
    fn facts(&self) -> Facts {
        let root = self.host.options.root.as_deref();
        let asked = self
            .pacman_db
            .as_ref()
            .and_then(|d| d.as_ref().ok().cloned());
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
        Facts {
            foreign_packages: foreign.map(|f| f.count),
            needs,
            ..facts::collect(root.unwrap_or(std::path::Path::new("/")), &db)
        }
    }

    fn hello(&self, facts: Facts) -> Result<Message, String> {
        let cp = self
            .host
            .config
            .control_plane
            .as_ref()
            .ok_or("no control plane")?;
        let secret =
            crate::os::input::read_text(&cp.secret_file, crate::os::input::MAX_SMALL_INPUT)
                .map_err(|e| format!("secret {}: {e}", cp.secret_file.display()))?;
        let store = self.host.store().ok();
        let in_force = (store.as_ref()).and_then(|s| s.in_force_head().ok().flatten());
        let reverted = (store.as_ref()).and_then(|s| s.generations().ok()?.reverted);
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

    fn maintain_link(&mut self, now: u64, poll: &Poll) {
        if let LinkState::Retrying { at } = self.link {
            if now >= at {
                self.connect(now, poll);
            }
        }
        // What arrived while a run blocked the loop is read before any deadline is judged.
        let result = match &mut self.link {
            LinkState::Up { conn, .. } | LinkState::Connecting { conn } => conn
                .read(now)
                .and_then(|()| conn.handle_timeout(now))
                .and_then(|()| conn.write()),
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.drop_link(now, e, true);
            return;
        }
        // Reports a person's `apply` queued meanwhile go out at the latest on the next heartbeat.
        self.send_outbox();
        if let LinkState::Up { conn, .. } | LinkState::Connecting { conn } = &mut self.link {
            let interest = conn.interest();
            if let Err(e) = poll.registry().reregister(&mut conn.stream, LINK, interest) {
                self.drop_link(now, format!("epoll: {e}"), true);
            }
        }
    }

    fn connect(&mut self, now: u64, poll: &Poll) {
        if self.host.config.control_plane.is_none() {
            return;
        }
        // After a restart or a reconnect the hello carries them whatever was sent before.
        let facts = self.facts();
        self.facts_sent = Some(facts.clone());
        let Some(cp) = &self.host.config.control_plane else {
            return;
        };
        // Read on every attempt until it reads: a CA file missing or damaged now (a reload
        // before `join` wrote it, a disk not yet mounted) is retried with the backoff, and
        // `status` says why meanwhile.
        let tls = match &self.tls {
            Some(tls) => tls.clone(),
            None => match connection::tls_config(cp) {
                Ok(tls) => {
                    self.tls = Some(tls.clone());
                    tls
                }
                Err(e) => {
                    log::error!("no link yet, retrying: {e}");
                    return self.drop_link(now, e, true);
                }
            },
        };
        let hello = match self.hello(facts) {
            Ok(hello) => hello,
            Err(e) => {
                log::error!("no link yet, retrying: {e}");
                return self.drop_link(now, e, true);
            }
        };
        let link = Link::new(
            now,
            hello,
            self.host.config.heartbeat.as_millis() as u64,
            self.host.config.max_frame_bytes,
        );
        let opened = Connection::open(cp, tls, link);
        let registered = opened.and_then(|mut conn| {
            let interest = conn.interest();
            match poll.registry().register(&mut conn.stream, LINK, interest) {
                Ok(()) => Ok(conn),
                Err(e) => Err(format!("epoll: {e}")),
            }
        });
        match registered {
            Ok(conn) => {
                log::info!("connecting to {}", cp.address);
                self.link = LinkState::Connecting {
                    conn: Box::new(conn),
                };
            }
            Err(e) => self.drop_link(now, e, true),
        }
    }

    /// Ends the link; with `retry`, the next attempt comes after a backoff.
    fn drop_link(&mut self, now: u64, why: String, retry: bool) {
        let up_for = match &self.link {
            LinkState::Up { since, .. } => now.saturating_sub(*since),
            _ => 0,
        };
        if matches!(
            self.link,
            LinkState::Up { .. } | LinkState::Connecting { .. }
        ) {
            log::warn!("link ended: {why}");
        }
        self.backoff.link_ended(up_for);
        self.last_error = Some(why);
        self.link = match (retry, &self.host.config.control_plane) {
            (true, Some(_)) => LinkState::Retrying {
                at: now + self.backoff.next_delay(sys::random()),
            },
            _ => LinkState::None,
        };
    }

    fn on_socket(&mut self, now: u64, readable: bool) {
        let result = match &mut self.link {
            LinkState::Up { conn, .. } | LinkState::Connecting { conn } => {
                let read = if readable { conn.read(now) } else { Ok(()) };
                read.and_then(|()| conn.write())
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.drop_link(now, e, true);
        }
    }

    fn handle_link_events(&mut self, now: u64) {
        loop {
            let event = match &mut self.link {
                LinkState::Up { conn, .. } | LinkState::Connecting { conn } => {
                    conn.link.poll_event()
                }
                _ => None,
            };
            let Some(event) = event else { break };
            match event {
                Event::Welcome => {
                    if let LinkState::Connecting { conn } =
                        std::mem::replace(&mut self.link, LinkState::None)
                    {
                        log::info!("link up");
                        self.link = LinkState::Up {
                            conn,
                            since: now,
                            sent_through: 0,
                        };
                        self.last_error = None;
                        if self.connected_before {
                            self.schedule.add(Trigger::Reconnect);
                        }
                        self.connected_before = true;
                        self.send_outbox();
                    }
                }
                Event::Declare {
                    revision,
                    text,
                    confirm_secs,
                } => self.on_declare(revision, text, confirm_secs),
                Event::Policy(policy) => {
                    if self.backoff.set_policy(policy.base_ms, policy.cap_ms) {
                        let (base, cap) = self.backoff.policy();
                        log::info!(
                            "reconnect policy from the control plane: first retry within {} ms, \
                             at most {} s",
                            base,
                            cap / 1000
                        );
                    }
                }
                Event::Ack { id } => {
                    if let Err(e) = self
                        .host
                        .store()
                        .and_then(|s| s.outbox_ack(id).map_err(Fatal::from))
                    {
                        log::error!("acknowledged reports could not be dropped: {}", e.message());
                    }
                    if self.pending.is_some() {
                        self.acked = Some(id);
                        self.confirm_acked();
                    }
                }
            }
        }
    }

    /// A declaration from the control plane: stored durably before it is applied, unless it is
    /// stale, invalid or (with trusted keys) not signed as the config requires: then reported,
    /// and the previous one stays in force (`envelope::accept` decides). Accepted, it is kept as
    /// parsed for the run that applies it.
    fn on_declare(&mut self, revision: u64, text: String, confirm_secs: Option<u64>) {
        let digest = crate::util::codec::sha256_hex(text.as_bytes());
        // A person's `apply` may hold the lock for minutes: the link is kept answered meanwhile.
        let pulse = Pulse::new(&mut self.link, &self.signals, &self.signalled);
        let beat = || pulse.beat();
        let host = &*self.host;
        let mut kept = None;
        let verdict = (|| -> Result<Option<String>, Fatal> {
            let store = host.store()?;
            let holder = format!(
                "pid {} (declaration) since {}",
                std::process::id(),
                crate::util::words::utc(store::unix_now())
            );
            let _lock = store
                .lock_pulsing(&holder, &beat)
                .map_err(|e| Fatal::error(e.to_string()))?;
            let current = store.in_force_head()?;
            let arrival = envelope::Arrival {
                revision,
                newest: current.as_ref().and_then(|f| f.control_plane_revision),
                now: store::unix_now(),
                trust: host.config.trust.as_ref(),
            };
            let accepted = match envelope::accept(text, &arrival, |b| host.validate(b)) {
                Ok(accepted) => accepted,
                Err(envelope::Refused::Stale(message)) => return Ok(Some(message)),
                Err(envelope::Refused::Rejected(message)) => return Err(Fatal::invalid(message)),
            };
            let now = store::unix_now();
            let state = match confirm_secs.unwrap_or(host.config.confirm_secs) {
                0 => State::Confirmed { at: now },
                secs => State::Pending {
                    deadline: store::confirm_deadline(now, secs, "confirm_secs")
                        .map_err(Fatal::invalid)?,
                    by: Confirmer::ControlPlane,
                    report: None,
                },
            };
            let in_force = InForce {
                source: Source::ControlPlane,
                revision: Some(revision),
                digest: accepted.declaration.digest.clone(),
                since: now,
                text: accepted.text,
                control_plane_revision: Some(revision),
                signed_by: accepted.signed_by.iter().map(|k| k.to_string()).collect(),
                expires: accepted.declaration.expires,
            };
            store.put_in_force(&in_force, state, host.config.generations)?;
            kept = Some(accepted.declaration);
            Ok(None)
        })();
        if let Some(e) = pulse.link_error() {
            self.drop_link(sys::now_ms(), e, true);
        }
        let (outcome, message) = match verdict {
            Ok(None) => {
                log::info!("declaration revision {revision} accepted");
                self.accepted = kept;
                self.schedule.add(Trigger::Declaration);
                self.load_pending();
                return;
            }
            Ok(Some(message)) => (ReportOutcome::Ignored, message),
            Err(e @ Fatal::Invalid(_)) => (ReportOutcome::Rejected, e.message()),
            Err(e) => (ReportOutcome::Error, e.message()),
        };
        // A huge bad declaration has as many problems: its count and the first ones say enough.
        let message = messages::abridge_text(&message, messages::MAX_MESSAGE_BYTES);
        // A rejected declaration is a failure (`journalctl -p err` shows it); a stale one is not.
        if outcome == ReportOutcome::Ignored {
            log::warn!("declaration revision {revision} {outcome}: {message}");
        } else {
            log::error!("declaration revision {revision} {outcome}: {message}");
        }
        let now = store::unix_now();
        let mut report = Report {
            id: 0,
            revision: Some(revision),
            digest: Some(digest),
            trigger: Triggers::one(Trigger::Declaration),
            outcome,
            started: now,
            ended: now,
            changes: Vec::new(),
            failures: Vec::new(),
            deferred: Vec::new(),
            drift: Vec::new(),
            message,
            failing: Vec::new(),
            facts: None,
            pacnew: Vec::new(),
            needs: None,
            reverted: None,
        };
        if let Ok(store) = self.host.store() {
            if let Err(e) = store.outbox_push(&mut report, self.host.config.outbox_bounds()) {
                log::error!("report not queued: {e}");
            }
        }
        self.send_outbox();
    }

    /// Sends every queued report the link has not carried yet, oldest first.
    fn send_outbox(&mut self) {
        let LinkState::Up { sent_through, .. } = &self.link else {
            return;
        };
        let mut pending = match Store::open(&self.host.config.state_dir, false) {
            Ok(Some(store)) => store.outbox_pending(*sent_through).unwrap_or_else(|e| {
                log::error!("{e}");
                Vec::new()
            }),
            _ => Vec::new(),
        };
        // The newest report carries the facts when they changed since they were last sent.
        if !pending.is_empty() {
            let facts = self.facts();
            if self
                .facts_sent
                .as_ref()
                .is_none_or(|s| facts.changed_from(s))
            {
                if let Some(last) = pending.last_mut() {
                    last.facts = Some(facts.clone());
                }
                self.facts_sent = Some(facts);
            }
        }
        let LinkState::Up {
            conn, sent_through, ..
        } = &mut self.link
        else {
            return;
        };
        let now = sys::now_ms();
        for report in &pending {
            conn.link.send_report(now, report);
            *sent_through = report.id;
        }
        if let Err(e) = conn.write() {
            self.drop_link(now, e, true);
        }
    }

    fn deadline(&self, now: u64) -> u64 {
        let link = match &self.link {
            LinkState::Up { conn, .. } | LinkState::Connecting { conn } => conn.link.poll_timeout(),
            LinkState::Retrying { at } => *at,
            LinkState::None => u64::MAX,
        };
        // Reports a person's `apply` queued are picked up at least every heartbeat.
        let watch = [self.watcher.watch.deadline(), self.repair_retry.deadline()];
        let watch = watch.into_iter().flatten().min().unwrap_or(u64::MAX);
        let writes = match self.host.has_unwritten() {
            true => self.retry_writes_at,
            false => u64::MAX,
        };
        // The pending declaration's wall-clock deadline, on the loop's monotonic clock.
        let pending = self.pending.map_or(u64::MAX, |deadline| {
            let unix_ms = store::unix_now().saturating_mul(1000);
            now.saturating_add(deadline.saturating_mul(1000).saturating_sub(unix_ms))
        });
        (self.schedule.deadline(now).min(link).min(watch))
            .min(writes)
            .min(pending)
    }

    /// Writes what `status` shows, when it changed.
    fn publish_status(&self, now: u64) {
        let unix_ms = |mono: u64| {
            let delta = mono as i64 - now as i64;
            ((store::unix_now() as i64 * 1000 + delta) / 1000).max(0) as u64
        };
        let link = self.link.status();
        let link_at = match &self.link {
            LinkState::Up { since, .. } => Some(unix_ms(*since)),
            LinkState::Retrying { at } => Some(unix_ms(*at)),
            LinkState::None | LinkState::Connecting { .. } => None,
        };
        // Down since the last state that was connected, kept while it stays down.
        let link_down_since = match (link, &*self.status.borrow()) {
            (LinkStatus::Connected | LinkStatus::None, _) => None,
            (_, Some(old)) if old.link == LinkStatus::Connected => Some(store::unix_now()),
            (_, Some(old)) => old.link_down_since.or(Some(self.started_unix)),
            (_, None) => Some(self.started_unix),
        };
        let state = ServiceState {
            pid: std::process::id(),
            started: self.started_unix,
            link,
            link_at,
            link_down_since,
            last_error: self.last_error.clone(),
            next_timer: unix_ms(self.schedule.next_timer()),
            state: ServicePhase::Running,
            watch: Some(self.watch_state(&|mono| unix_ms(mono))),
        };
        let changed = match &*self.status.borrow() {
            // Rounding of the converted times must not rewrite the file on every wake.
            Some(old) => {
                old.link != state.link
                    || old.last_error != state.last_error
                    || watching::changed(&old.watch, &state.watch)
                    || old.next_timer.abs_diff(state.next_timer) > 1
            }
            None => true,
        };
        // At the start and on every change of the link, the metrics say so.
        let link_changed = self
            .status
            .borrow()
            .as_ref()
            .is_none_or(|old| old.link != state.link);
        if changed {
            if let Ok(store) = self.host.store() {
                if let Err(e) = store.set_service_state(&state) {
                    log::error!("{e}");
                }
                if link_changed {
                    self.host
                        .write_metrics(&store, Some(link == LinkStatus::Connected));
                }
            }
            *self.status.borrow_mut() = Some(state);
        }
        self.notify_status("idle");
    }
}
