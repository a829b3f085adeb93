//! The mio shell around `Core`: reads the clock, the signalfd, the timerfd, inotify and the
//! socket, feeds what it reads to the core and carries out the actions the core returns (those
//! that need the Host are in `actions.rs`). It decides nothing.

use std::cell::RefCell;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::connection::Connection;
use super::core::{Action, Core, Input, Now, Settings, Signal};
use super::inotify_watch::Watcher;
use super::Shell;
use crate::engine::{Fatal, Host};
use crate::os::clock::Clock;
use crate::os::sys;
use crate::store::ServicePhase;

const SIGNALS: Token = Token(0);
const TIMER: Token = Token(1);
pub(super) const LINK: Token = Token(2);
pub(super) const WATCH: Token = Token(3);

/// The connection and how far the outbox went out on it.
pub(super) struct Live {
    pub conn: Box<Connection>,
    pub sent_through: u64,
}

pub(super) fn now(clock: &Clock) -> Now {
    Now {
        mono: clock.mono_ms(),
        unix_ms: clock.unix_ms(),
    }
}

/// The config's part the core keeps.
pub(super) fn settings(host: &Host) -> Settings {
    Settings {
        interval_ms: host.config.interval.as_millis() as u64,
        reconnect_base_ms: host.config.reconnect_base.as_millis() as u64,
        control_plane: host.config.control_plane.is_some(),
    }
}

/// Reads every pending signal into the core.
fn read_signals(signals: &sys::SignalFd, core: &mut Core, now: Now) {
    while let Some(signal) = signals.next() {
        let signal = match signal {
            sys::Signal::Terminate(n) => {
                log::info!("signal {n}: stopping after the resource being applied");
                Signal::Stop
            }
            sys::Signal::Hangup => Signal::Reload,
            sys::Signal::User1 => Signal::Run,
            sys::Signal::User2 => Signal::Recheck,
        };
        core.handle(now, Input::Signal(signal));
    }
}

pub fn run(host: &mut Host) -> Result<i32, Fatal> {
    let io = |what: &str, error: std::io::Error| {
        let context = what.to_string();
        Fatal::Error(crate::engine::Failed::Io { context, error })
    };
    let signals = sys::SignalFd::new().map_err(|e| io("signalfd", e))?;
    let timer = sys::TimerFd::new().map_err(|e| io("timerfd", e))?;
    let poll = Poll::new().map_err(|e| io("epoll", e))?;
    let register = |fd, token| {
        (poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE))
        .map_err(|e| io("epoll", e))
    };
    register(signals.raw(), SIGNALS)?;
    register(timer.raw(), TIMER)?;
    let watcher = Watcher::new(host.config.watch);
    if let Some(fd) = watcher.raw() {
        register(fd, WATCH)?;
    }
    let start = now(&host.options.clock);
    let seed = (sys::random() * (1u64 << 53) as f64) as u64;
    let core = Core::new(start, settings(host), seed);
    let mut shell = Shell::new(host, core, poll, signals, watcher, start);
    let mut events = Events::with_capacity(16);
    read_signals(&shell.signals, &mut shell.core, start);
    loop {
        if let Some(code) = shell.settle()? {
            return Ok(code);
        }
        shell.maintain_link();
        if let Some(code) = shell.settle()? {
            return Ok(code);
        }
        let now = shell.now();
        shell.core.idle(now);
        if let Some(code) = shell.settle()? {
            return Ok(code);
        }
        let now = shell.now();
        let mut deadline = shell.core.poll_timeout(now);
        if let Some(live) = &shell.live {
            deadline = deadline.min(live.conn.link.poll_timeout());
        }
        timer
            .arm(deadline.saturating_sub(now.mono))
            .map_err(|e| io("timerfd", e))?;
        if let Err(e) = shell.poll.poll(&mut events, None) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(io("epoll", e));
            }
        }
        let now = shell.now();
        read_signals(&shell.signals, &mut shell.core, now);
        for event in events.iter() {
            match event.token() {
                TIMER => timer.drain(),
                WATCH => {
                    let read = shell.watcher.read();
                    shell.core.handle(now, Input::Inotify(read));
                }
                LINK => shell
                    .on_socket(event.is_readable() || event.is_read_closed() || event.is_error()),
                _ => {}
            }
        }
        shell.link_events();
    }
}

impl Shell<'_> {
    pub(super) fn now(&self) -> Now {
        now(&self.host.options.clock)
    }

    /// Carries out what the core asks until it asks nothing more; `Some` once it exits.
    fn settle(&mut self) -> Result<Option<i32>, Fatal> {
        while let Some(action) = self.core.poll(self.now()) {
            if let Action::Exit(code) = action {
                self.stop();
                return Ok(Some(code));
            }
            self.carry_out(action);
        }
        Ok(None)
    }

    fn carry_out(&mut self, action: Action) {
        let now = self.now();
        match action {
            Action::Exit(_) => {}
            Action::Reload => self.reload(now),
            Action::LoadPending => {
                let pending = self.host.pending_deadline();
                let pending = pending.map_err(|e| e.message().to_string());
                self.core.handle(now, Input::Pending(pending));
            }
            Action::Revert { link_error } => self.revert(link_error),
            Action::ConfirmAcked(id) => self.confirm_acked(id),
            Action::Check(touched) => self.check(touched),
            Action::Run { triggers, scope } => self.reconcile(&triggers, scope),
            Action::WriteKeptRuns => {
                self.host.write_unwritten_now();
                let left = self.host.has_unwritten();
                self.core.handle(now, Input::KeptRuns { left });
            }
            Action::Connect => self.connect(now),
            Action::Disconnect(why) => {
                if let Some(mut live) = self.live.take() {
                    live.conn.close(now.mono, &why);
                }
            }
            Action::SendOutbox => self.send_outbox(),
            Action::AckOutbox(id) => {
                let acked = (self.host.store()).and_then(|s| s.outbox_ack(id).map_err(Fatal::from));
                if let Err(e) = acked {
                    log::error!("acknowledged reports could not be dropped: {}", e.message());
                }
            }
            Action::Accept {
                revision,
                text,
                confirm_secs,
            } => self.accept(revision, text, confirm_secs),
            Action::ReportRefused {
                revision,
                digest,
                outcome,
                message,
            } => (self.host).report_refused(revision, digest, outcome, message),
            Action::ReportContested { resource, message } => {
                self.report_contested(&resource, message)
            }
            Action::RefreshWatches { after_run } => {
                let held = if after_run { self.held.take() } else { None };
                self.refresh_watch(now.mono, held);
            }
            Action::SyncWatches => self.watcher.sync(self.core.watch_mut(), now.mono),
            Action::Notify(line) => sys::sd_notify(&line),
            Action::PublishStatus => self.publish_status(now),
        }
    }

    /// The link failed (read, write, heartbeat): the connection goes, the core retries.
    pub(super) fn link_failed(&mut self, why: String) {
        self.live = None;
        let now = self.now();
        self.core.handle(now, Input::LinkClosed(why));
    }

    /// Reads what arrived (also while a run blocked the loop), the heartbeat, writes; the outbox
    /// (reports a person's `apply` queued go out at the latest on the next heartbeat).
    fn maintain_link(&mut self) {
        let now = self.now().mono;
        let Some(live) = &mut self.live else { return };
        let conn = &mut live.conn;
        let result = (conn.read(now))
            .and_then(|()| conn.handle_timeout(now))
            .and_then(|()| conn.write());
        if let Err(e) = result {
            return self.link_failed(e);
        }
        self.link_events();
        self.send_outbox();
        if let Some(live) = &mut self.live {
            let interest = live.conn.interest();
            let stream = &mut live.conn.stream;
            if let Err(e) = self.poll.registry().reregister(stream, LINK, interest) {
                self.link_failed(format!("epoll: {e}"));
            }
        }
    }

    fn on_socket(&mut self, readable: bool) {
        let now = self.now().mono;
        let Some(live) = &mut self.live else { return };
        let read = match readable {
            true => live.conn.read(now),
            false => Ok(()),
        };
        if let Err(e) = read.and_then(|()| live.conn.write()) {
            self.link_failed(e);
        }
    }

    /// The link's events, one at a time, each carried out before the next is taken.
    fn link_events(&mut self) {
        loop {
            let Some(event) = self.live.as_mut().and_then(|l| l.conn.link.poll_event()) else {
                return;
            };
            let now = self.now();
            self.core.handle(now, Input::Link(event));
            while let Some(action) = self.core.poll_queued() {
                self.carry_out(action);
            }
        }
    }

    /// Says goodbye, writes what is kept in memory and what `status` shows last.
    fn stop(&mut self) {
        sys::sd_notify("STOPPING=1");
        self.host.write_unwritten_now();
        if self.host.has_unwritten() {
            log::error!("runs kept in memory could not be written to the store before stopping");
        }
        let now = self.now();
        if let Some(live) = &mut self.live {
            live.conn.close(now.mono, "the host is stopping");
        }
        self.publish_status(now);
        if let Ok(store) = self.host.store() {
            if let Some(mut state) = self.status.clone() {
                state.state = ServicePhase::Stopped;
                let _ = store.set_service_state(&state);
                self.host.write_metrics(&store, Some(false));
            }
        }
    }
}

/// What the loop still does while a run (or a wait for the store's lock) blocks it: reads
/// signals into the core and keeps the link answered. Called between resources and, through
/// the runner, about every 200 ms while a tool runs; never blocks.
pub(super) struct Pulse<'a> {
    pub core: RefCell<&'a mut Core>,
    pub live: RefCell<Option<&'a mut Live>>,
    /// The first error the link hit, for the shell to drop it with after the run.
    pub error: RefCell<Option<String>>,
    pub signals: &'a sys::SignalFd,
    pub clock: &'a Clock,
}

impl Pulse<'_> {
    /// Reads what the control plane sent (pongs; declarations and acks stay queued in the link
    /// until the run ends), sends the heartbeat's pings, writes; reads the signals. Returns
    /// whether the host is stopping.
    pub fn beat(&self) -> bool {
        let now = now(self.clock);
        if self.error.borrow().is_none() {
            // Connecting too: the handshake and the welcome proceed while a run holds the loop.
            if let Some(live) = &mut *self.live.borrow_mut() {
                let conn = &mut live.conn;
                let result = (conn.read(now.mono))
                    .and_then(|()| conn.handle_timeout(now.mono))
                    .and_then(|()| conn.write());
                if let Err(e) = result {
                    *self.error.borrow_mut() = Some(e);
                }
            }
        }
        let mut core = self.core.borrow_mut();
        read_signals(self.signals, &mut core, now);
        core.stopping()
    }
}
