//! The service's decisions as a state machine with no I/O in it, as `link::Link` is for the
//! protocol: events come in with the time (`handle`), actions go out (`poll`), and it says when
//! it next needs the clock (`poll_timeout`). The shell (`shell.rs`) reads the clock, moves bytes
//! and carries the actions out; a run is one of them, blocking, and while it lasts the shell's
//! pulse still feeds signals in (`running`).

use std::collections::{BTreeSet, VecDeque};

mod events;

pub use events::{Accepted, Action, Confirmation, Input, Now, RunSummary, Settings, Signal};

use super::backoff::Backoff;
use super::drift::{self, Due, Resource, Watch};
use super::notify::{self, LastRun};
use super::retry::Retry;
use super::schedule::Schedule;
use crate::engine::reconcile::Scope;
use crate::engine::EXIT_OK;
use crate::link::Event;
use crate::model::run::ReportOutcome;

use crate::model::run::{RunOutcome, Trigger, Triggers};
use crate::store::LinkStatus;

/// How often runs kept in memory are offered to a store that could not take them.
pub const RETRY_WRITES_MS: u64 = 5_000;

/// How soon an ack the store's lock kept from confirming the pending declaration is tried again.
const CONFIRM_RETRY_MS: u64 = 1_000;

/// What the core knows of the link.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// No control plane configured: the host holds the declaration in force on its timer alone.
    None,
    Connecting,
    Up {
        since: u64,
    },
    Retrying {
        at: u64,
    },
}

pub struct Core {
    settings: Settings,
    schedule: Schedule,
    backoff: Backoff,
    phase: Phase,
    last_error: Option<String>,
    /// Every link so far; the first success is not a *re*-connection.
    connected_before: bool,
    /// A random stream for jitter (splitmix64), seeded by the shell: the core reads no entropy.
    seed: u64,
    queue: VecDeque<Action>,
    /// A run (or revert) is being carried out: signals are only noted.
    running: bool,
    stopping: bool,
    reload: bool,
    recheck: bool,
    /// The deadline (Unix seconds) of the pending declaration in force.
    pending: Option<u64>,
    /// The `Pending` answering a revert: a deadline still past means the revert failed.
    after_revert: bool,
    /// The newest ack the store's lock kept from confirming the pending declaration.
    acked: Option<u64>,
    watch: Watch,
    /// What a run with trigger `watch` alone converges: what drifted, or everything.
    watch_scope: Option<Scope>,
    /// What the check in progress looks at.
    checking: Option<BTreeSet<Resource>>,
    /// The scope of the run in progress.
    ran_scope: Option<Scope>,
    /// When an ack the store's lock kept from confirming is tried again.
    confirm_at: u64,
    retry: Retry,
    unwritten: bool,
    retry_writes_at: u64,
    last_run: Option<LastRun>,
    sent_status: String,
    ready: bool,
}

impl Core {
    /// A service starting at `now`: the start run is due at once, the first connection too.
    pub fn new(now: Now, settings: Settings, seed: u64) -> Core {
        let mut core = Core {
            schedule: Schedule::new(now.mono, settings.interval_ms, 0.5),
            backoff: Backoff::new(settings.reconnect_base_ms),
            phase: Phase::None,
            settings,
            last_error: None,
            connected_before: false,
            seed,
            queue: VecDeque::from([Action::LoadPending]),
            running: false,
            stopping: false,
            reload: false,
            recheck: false,
            pending: None,
            after_revert: false,
            acked: None,
            watch: Watch::default(),
            watch_scope: None,
            checking: None,
            ran_scope: None,
            confirm_at: 0,
            retry: Retry::default(),
            unwritten: false,
            retry_writes_at: now.mono,
            last_run: None,
            sent_status: String::new(),
            ready: false,
        };
        let random = core.random();
        core.schedule.rearm(now.mono, random);
        core.configure_link(now);
        core
    }

    /// A uniform number in [0, 1).
    fn random(&mut self) -> f64 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn configure_link(&mut self, now: Now) {
        self.phase = match self.settings.control_plane {
            true => Phase::Retrying { at: now.mono },
            false => Phase::None,
        };
    }

    /// Whether a stop was asked for (the run's pulse checks it between resources).
    pub fn stopping(&self) -> bool {
        self.stopping
    }

    /// Whether the link is up (reports may be sent).
    pub fn link_up(&self) -> bool {
        matches!(self.phase, Phase::Up { .. })
    }

    /// Whether a connection is open or being opened.
    pub fn connected(&self) -> bool {
        matches!(self.phase, Phase::Up { .. } | Phase::Connecting)
    }

    pub fn link_status(&self) -> LinkStatus {
        match self.phase {
            Phase::None => LinkStatus::None,
            Phase::Connecting => LinkStatus::Connecting,
            Phase::Up { .. } => LinkStatus::Connected,
            Phase::Retrying { .. } => LinkStatus::Retrying,
        }
    }

    /// Since when the link is up, or when it is retried (monotonic).
    pub fn link_at(&self) -> Option<u64> {
        match self.phase {
            Phase::Up { since } => Some(since),
            Phase::Retrying { at } => Some(at),
            Phase::None | Phase::Connecting => None,
        }
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// When the drift timer's run is (monotonic).
    pub fn next_timer(&self) -> u64 {
        self.schedule.next_timer()
    }

    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// The watcher's decisions, for the shell to carry out on inotify (and to start afresh).
    pub fn watch_mut(&mut self) -> &mut Watch {
        &mut self.watch
    }

    pub fn retry(&self) -> &Retry {
        &self.retry
    }

    /// When the core must be woken at the latest (monotonic), whatever else happens.
    pub fn poll_timeout(&self, now: Now) -> u64 {
        let link = match self.phase {
            Phase::Retrying { at } => at,
            _ => u64::MAX,
        };
        let watch = [self.watch.deadline(), self.retry.deadline()];
        let watch = watch.into_iter().flatten().min().unwrap_or(u64::MAX);
        let writes = match self.unwritten {
            true => self.retry_writes_at,
            false => u64::MAX,
        };
        // The pending declaration's wall-clock deadline, on the monotonic clock.
        let pending = self.pending.map_or(u64::MAX, |deadline| {
            let left = deadline.saturating_mul(1000).saturating_sub(now.unix_ms);
            now.mono.saturating_add(left)
        });
        let confirm = match self.acked {
            Some(_) => self.confirm_at,
            None => u64::MAX,
        };
        let queued = match self.queue.is_empty() {
            true => u64::MAX,
            false => now.mono,
        };
        [
            self.schedule.deadline(now.mono),
            link,
            watch,
            writes,
            pending,
            confirm,
            queued,
        ]
        .into_iter()
        .min()
        .unwrap_or(u64::MAX)
    }

    /// The next thing to do at `now`, if any. An action answered by an input must be answered
    /// before the next poll.
    pub fn poll(&mut self, now: Now) -> Option<Action> {
        if let Some(action) = self.queue.pop_front() {
            return Some(action);
        }
        if self.running {
            return None;
        }
        self.decide(now);
        self.queue.pop_front()
    }

    /// What the inputs handled so far asked for, without deciding anything new (the shell takes
    /// the link's events one at a time, each carried out before the next).
    pub fn poll_queued(&mut self) -> Option<Action> {
        self.queue.pop_front()
    }

    /// Queues what is due, in the order the loop has always taken it: a stop, a reload, the
    /// pending deadline, a revert before anything else runs, the ack, the watcher, a run; then
    /// the link and what `status` shows.
    fn decide(&mut self, now: Now) {
        if self.stopping {
            self.queue.push_back(Action::Exit(EXIT_OK));
            return;
        }
        if std::mem::take(&mut self.reload) {
            return self.queue.push_back(Action::Reload);
        }
        if std::mem::take(&mut self.recheck) {
            return self.queue.push_back(Action::LoadPending);
        }
        if self.pending.is_some_and(|d| d <= now.unix()) {
            self.running = true;
            self.say("reverting", now);
            let link_error = self.last_error.clone();
            return self.queue.push_back(Action::Revert { link_error });
        }
        if let Some(id) = self.acked.filter(|_| now.mono >= self.confirm_at) {
            return self.queue.push_back(Action::ConfirmAcked(id));
        }
        if self.watch_due(now) {
            return;
        }
        if let Some(failed) = self.retry.take_due(now.mono) {
            log::info!("watch: trying the failed repair again");
            self.watch_scope = Some(widen(self.watch_scope.take(), Scope::Only(failed)));
            self.schedule.add(Trigger::Watch);
        }
        if self.unwritten && now.mono >= self.retry_writes_at {
            self.retry_writes_at = now.mono + RETRY_WRITES_MS;
            return self.queue.push_back(Action::WriteKeptRuns);
        }
        if let Some(triggers) = self.schedule.take_due(now.mono) {
            return self.start_run(now, triggers);
        }
        if let Phase::Retrying { at } = self.phase {
            if now.mono >= at {
                return self.queue.push_back(Action::Connect);
            }
        }
        if !self.schedule.pending() && self.watch.take_refresh() {
            let refresh = Action::RefreshWatches { after_run: false };
            self.queue.push_back(refresh);
        }
    }

    /// The debounced watch events: a check of what they touched (a run only on drift), or a full
    /// run when events were lost. Whether a check was asked for.
    fn watch_due(&mut self, now: Now) -> bool {
        let (due, settled) = self.watch.take_due(now.mono);
        for (kind, key) in settled {
            log::info!("{kind} {key} settled: watched again");
        }
        match due {
            None => false,
            Some(Due::Full) => {
                log::warn!("watch: events were lost or cannot all be had; a full run");
                self.watch_scope = Some(Scope::All);
                self.schedule.add(Trigger::Watch);
                false
            }
            Some(Due::Check(touched)) => {
                self.checking = Some(touched.clone());
                self.queue.push_back(Action::Check(touched));
                true
            }
        }
    }

    fn start_run(&mut self, now: Now, triggers: Triggers) {
        // Any other trigger makes it a full run, which covers whatever the watcher had pending.
        let scope = match self.watch_scope.take() {
            Some(scope) if triggers == Triggers::one(Trigger::Watch) => scope,
            _ => {
                self.watch.covered();
                Scope::All
            }
        };
        // Before the run: it may take minutes, and `status` should show the link as it is.
        self.queue.push_back(Action::PublishStatus);
        self.say("idle", now);
        self.say(&format!("reconciling ({triggers})"), now);
        log::info!("reconciling ({triggers})");
        self.running = true;
        self.ran_scope = Some(scope.clone());
        self.queue.push_back(Action::Run { triggers, scope });
    }

    /// The `STATUS=` line for `doing`, queued when it differs from the last one sent.
    fn say(&mut self, doing: &str, now: Now) {
        let next_timer = now.unix_ms_of(self.schedule.next_timer()) / 1000;
        let line = notify::status_text(
            doing,
            self.last_run.as_ref(),
            next_timer,
            self.link_status(),
        );
        if self.sent_status != line {
            self.queue
                .push_back(Action::Notify(format!("STATUS={line}")));
            self.sent_status = line;
        }
    }

    /// What the shell does when idle, after the inputs of a wake: `status` and `STATUS=`.
    pub fn idle(&mut self, now: Now) {
        self.queue.push_back(Action::PublishStatus);
        self.say("idle", now);
    }

    pub fn handle(&mut self, now: Now, input: Input) {
        match input {
            Input::Signal(signal) => self.on_signal(signal),
            Input::Reloaded(settings) => self.on_reloaded(now, settings),
            Input::Pending(pending) => self.on_pending(now, pending),
            Input::RunDone { result, unwritten } => self.on_run_done(now, result, unwritten),
            Input::Reverted { run, unwritten } => self.on_reverted(now, run, unwritten),
            Input::Confirmed(confirmation) => self.on_confirmed(now, confirmation),
            Input::Checked(checked) => self.on_checked(checked),
            Input::KeptRuns { left } => {
                self.unwritten = left;
                if !left {
                    self.queue.push_back(Action::SendOutbox);
                }
            }
            Input::Inotify(events) => {
                for event in events {
                    self.watch.handle(now.mono, event);
                }
                self.queue.push_back(Action::SyncWatches);
            }
            Input::Connecting => self.phase = Phase::Connecting,
            Input::LinkClosed(why) => self.drop_link(now, why, true),
            Input::Link(event) => self.on_link_event(now, event),
            Input::Accepted {
                revision,
                digest,
                accepted,
            } => self.on_accepted(revision, digest, accepted),
        }
    }

    /// The deadline as read (a problem reading it is logged, and the deadline kept as it was).
    fn on_pending(&mut self, now: Now, pending: Result<Option<u64>, String>) {
        match pending {
            Ok(deadline) => self.pending = deadline,
            Err(e) => log::error!("the pending declaration's deadline: {e}"),
        }
        let after_revert = std::mem::take(&mut self.after_revert);
        if after_revert && self.pending.is_some_and(|d| d <= now.unix()) {
            // Not reverted (the store failed): tried again after the next run, not in a loop.
            log::error!("the pending declaration is past its deadline but was not reverted");
            self.pending = None;
        }
    }

    fn on_signal(&mut self, signal: Signal) {
        match signal {
            Signal::Stop => self.stopping = true,
            Signal::Reload => self.reload = true,
            // Collapses with whatever else comes due into the next run.
            Signal::Run => self.schedule.add(Trigger::Signal),
            Signal::Recheck => self.recheck = true,
        }
    }

    fn on_reloaded(&mut self, now: Now, settings: Option<Settings>) {
        let Some(settings) = settings else { return };
        self.schedule.set_interval(settings.interval_ms);
        self.backoff.set_base(settings.reconnect_base_ms);
        self.settings = settings;
        let why = "the configuration was reloaded";
        if self.connected() {
            self.queue.push_back(Action::Disconnect(why.into()));
        }
        self.drop_link(now, why.into(), false);
        self.configure_link(now);
    }

    /// Ends the link; with `retry`, the next attempt comes after a backoff.
    fn drop_link(&mut self, now: Now, why: String, retry: bool) {
        let up_for = match self.phase {
            Phase::Up { since } => now.mono.saturating_sub(since),
            _ => 0,
        };
        if self.connected() {
            log::warn!("link ended: {why}");
        }
        self.backoff.link_ended(up_for);
        self.last_error = Some(why);
        self.phase = match (retry, self.settings.control_plane) {
            (true, true) => {
                let random = self.random();
                // At least a millisecond (as the timerfd's least): never a busy loop.
                let delay = self.backoff.next_delay(random).max(1);
                Phase::Retrying {
                    at: now.mono + delay,
                }
            }
            _ => Phase::None,
        };
    }

    fn on_link_event(&mut self, now: Now, event: Event) {
        match event {
            Event::Welcome => {
                if self.phase == Phase::Connecting {
                    log::info!("link up");
                    self.phase = Phase::Up { since: now.mono };
                    self.last_error = None;
                    if self.connected_before {
                        self.schedule.add(Trigger::Reconnect);
                    }
                    self.connected_before = true;
                    self.queue.push_back(Action::SendOutbox);
                }
            }
            Event::Declare {
                revision,
                text,
                confirm_secs,
            } => self.queue.push_back(Action::Accept {
                revision,
                text,
                confirm_secs,
            }),
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
                self.queue.push_back(Action::AckOutbox(id));
                if self.pending.is_some() {
                    self.acked = Some(id);
                }
            }
        }
    }

    fn on_accepted(&mut self, revision: u64, digest: String, accepted: Accepted) {
        let (outcome, message) = match accepted {
            Accepted::InForce => {
                log::info!("declaration revision {revision} accepted");
                self.schedule.add(Trigger::Declaration);
                self.queue.push_back(Action::LoadPending);
                return;
            }
            Accepted::Refused(outcome, message) => (outcome, message),
        };
        // A huge bad declaration has as many problems: its count and the first ones say enough.
        let message =
            crate::link::messages::abridge_text(&message, crate::link::messages::MAX_MESSAGE_BYTES);
        // A rejected declaration is a failure (`journalctl -p err` shows it); a stale one is not.
        if outcome == ReportOutcome::Ignored {
            log::warn!("declaration revision {revision} {outcome}: {message}");
        } else {
            log::error!("declaration revision {revision} {outcome}: {message}");
        }
        self.queue.push_back(Action::ReportRefused {
            revision,
            digest,
            outcome,
            message,
        });
        self.queue.push_back(Action::SendOutbox);
    }

    fn on_confirmed(&mut self, now: Now, confirmation: Confirmation) {
        match confirmation {
            Confirmation::Locked => self.confirm_at = now.mono + CONFIRM_RETRY_MS,
            Confirmation::Done(said) => {
                self.acked = None;
                if let Some(said) = said {
                    log::info!("{said}");
                    self.queue.push_back(Action::LoadPending);
                }
            }
            Confirmation::Failed(e) => {
                self.acked = None;
                log::error!("the pending declaration was not confirmed: {e}");
            }
        }
    }

    fn on_checked(&mut self, checked: Result<(usize, Vec<String>), String>) {
        let Some(touched) = self.checking.take() else {
            return;
        };
        match checked {
            Ok((0, _)) => {}
            Ok((count, mut names)) => {
                if count > names.len() {
                    names.push(format!("{} more", count - names.len()));
                }
                log::info!("watch: drift in {}", names.join(", "));
                let scope = Scope::Only(touched);
                self.watch_scope = Some(widen(self.watch_scope.take(), scope));
                self.schedule.add(Trigger::Watch);
            }
            Err(e) => log::error!("watch: could not check: {e}"),
        }
    }

    /// A revert's run (or none) ended.
    fn on_reverted(&mut self, now: Now, run: Option<Result<RunSummary, String>>, unwritten: bool) {
        self.running = false;
        self.unwritten = unwritten;
        let ran = run.is_some();
        if let Some(result) = run {
            if let Err(e) = &result {
                log::error!("revert failed: {e}");
            }
            self.log_run(now, &result);
        }
        self.after_revert = true;
        self.queue.push_back(Action::LoadPending);
        if ran {
            self.watch.covered();
            let random = self.random();
            self.schedule.rearm(now.mono, random);
            self.queue
                .push_back(Action::RefreshWatches { after_run: false });
            self.queue.push_back(Action::SendOutbox);
        }
    }

    fn on_run_done(&mut self, now: Now, result: Result<RunSummary, String>, unwritten: bool) {
        self.running = false;
        self.unwritten = unwritten;
        self.log_run(now, &result);
        let scope = self.ran_scope.take().unwrap_or(Scope::All);
        // A run over what a watch touched checked nothing else: the timer keeps its time.
        match scope {
            Scope::All => {
                let random = self.random();
                self.schedule.rearm(now.mono, random);
                self.retry.covered();
            }
            Scope::Only(all) => {
                let (failed, repaired) = match &result {
                    Ok(run) => (run.failed_watched.clone(), run.repaired.clone()),
                    // The run could not be made at all (the store, the lock): all of it again.
                    Err(_) => (all, Vec::new()),
                };
                if let Some(said) = self.retry.after_watch_run(now.mono, failed) {
                    log::warn!("{said}");
                }
                self.contest(now, &repaired);
            }
        }
        // What the run converged with sets the watches (what the watcher saw of the store before
        // the run is covered by it).
        self.watch.take_refresh();
        self.queue
            .push_back(Action::RefreshWatches { after_run: true });
        self.queue.push_back(Action::LoadPending);
        self.queue.push_back(Action::SendOutbox);
        if !std::mem::replace(&mut self.ready, true) {
            self.queue.push_back(Action::Notify("READY=1".into()));
        }
    }

    /// Counts a watch run's repairs (done or failed); a resource fought over is named, reported
    /// and left to the timer.
    fn contest(&mut self, now: Now, repaired: &[Resource]) {
        let newly = self.watch.repaired(now.mono, repaired);
        for c in &newly {
            let (kind, key) = &c.resource;
            let message = format!(
                "{kind} {key} is contested: repaired {} times within {} s, each time changed \
                 back by another process; left to the drift timer until it is left alone for {} s",
                c.repairs,
                drift::CONTEST_WINDOW_MS / 1000,
                drift::SETTLE_MS / 1000
            );
            log::warn!("{message}");
            if self.settings.control_plane {
                let resource = c.resource.clone();
                self.queue
                    .push_back(Action::ReportContested { resource, message });
            }
        }
        if !newly.is_empty() {
            self.queue.push_back(Action::SendOutbox);
        }
    }

    /// Logs how a run ended and says it in `STATUS=`: the summary at info when all converged and
    /// at warning otherwise (each failure is logged by the failure history).
    fn log_run(&mut self, now: Now, result: &Result<RunSummary, String>) {
        let ended = now.unix();
        match result {
            Ok(RunSummary { outcome: None, .. }) => {
                log::info!("no declaration in force yet; nothing to hold")
            }
            Ok(run) => {
                let outcome = run.outcome.unwrap_or(RunOutcome::Error);
                let summary = format!(
                    "run {outcome}: {} changed, {} failed",
                    run.changed, run.failed
                );
                if run.failed == 0 && outcome != RunOutcome::Interrupted {
                    log::info!("{summary}");
                } else {
                    log::warn!("{summary}");
                }
                if let Some(why) = &run.unwritten {
                    log::error!("{why}");
                }
                self.last_run = Some(LastRun {
                    outcome,
                    ended,
                    changed: run.changed,
                    failed: run.failed,
                });
            }
            Err(e) => {
                log::error!("run failed: {e}");
                self.last_run = Some(LastRun {
                    outcome: RunOutcome::Error,
                    ended,
                    changed: 0,
                    failed: 0,
                });
            }
        }
        self.say("idle", now);
    }
}

/// The scope a watch run waits with, and `more`.
fn widen(scope: Option<Scope>, more: Scope) -> Scope {
    match (scope, more) {
        (Some(Scope::Only(mut before)), Scope::Only(more)) => {
            before.extend(more);
            Scope::Only(before)
        }
        (Some(Scope::All), _) | (_, Scope::All) => Scope::All,
        (None, more) => more,
    }
}

#[cfg(test)]
mod tests;
