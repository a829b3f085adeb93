//! The core driven in virtual time: events with a made-up `now`, assertions on the actions.

use super::*;
use crate::link::ReconnectPolicy;
use crate::os::inotify;
use std::collections::BTreeSet;

const T0: Now = Now {
    mono: 3_600_000,
    unix_ms: 1_700_000_000_000,
};

/// A core and its virtual clock, answering what the core asks as a test says.
struct Pair {
    core: Core,
    now: Now,
}

impl Pair {
    fn new(control_plane: bool) -> Pair {
        let settings = Settings {
            interval_ms: 600_000,
            reconnect_base_ms: 1_000,
            control_plane,
        };
        Pair {
            core: Core::new(T0, settings, 42),
            now: T0,
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now.mono += ms;
        self.now.unix_ms += ms;
    }

    fn handle(&mut self, input: Input) {
        self.core.handle(self.now, input);
    }

    /// Every action until the core asks nothing more, answering the routine ones (no deadline
    /// pending, a run that ends as `run` says) and leaving the rest to the test.
    fn drain(&mut self, run: &dyn Fn(&Scope) -> Result<RunSummary, String>) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(action) = self.core.poll(self.now) {
            match &action {
                Action::LoadPending => self.handle(Input::Pending(Ok(None))),
                Action::Run { scope, .. } => {
                    let result = run(scope);
                    self.handle(Input::RunDone {
                        result,
                        unwritten: false,
                    });
                }
                Action::Connect => self.handle(Input::Connecting),
                _ => {}
            }
            let stop = matches!(action, Action::Exit(_));
            out.push(action);
            if stop {
                break;
            }
        }
        out
    }

    /// The next action that is not for systemd, `status` or inotify.
    fn next(&mut self) -> Option<Action> {
        loop {
            match self.core.poll(self.now)? {
                Action::Notify(_) | Action::PublishStatus | Action::SyncWatches => {}
                action => return Some(action),
            }
        }
    }

    fn quiet(&mut self) -> Vec<Action> {
        self.drain(&|_| Ok(converged()))
    }
}

fn converged() -> RunSummary {
    RunSummary {
        outcome: Some(RunOutcome::Converged),
        ..RunSummary::default()
    }
}

fn runs(actions: &[Action]) -> Vec<(Triggers, Scope)> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::Run { triggers, scope } => Some((triggers.clone(), scope.clone())),
            _ => None,
        })
        .collect()
}

fn one(trigger: Trigger) -> Triggers {
    Triggers::one(trigger)
}

fn motd() -> BTreeSet<Resource> {
    BTreeSet::from([("files", "/etc/motd".to_string())])
}

#[test]
fn the_start_run_then_the_timer_with_jitter() {
    let mut p = Pair::new(false);
    let actions = p.quiet();
    assert_eq!(runs(&actions), [(one(Trigger::Start), Scope::All)]);
    assert!(actions.contains(&Action::Notify("READY=1".into())));
    let next = p.core.next_timer();
    assert!((T0.mono + 540_000..=T0.mono + 660_000).contains(&next));
    assert_eq!(p.core.poll_timeout(p.now), next);
    p.advance(next - p.now.mono - 1);
    assert!(runs(&p.quiet()).is_empty(), "not before the timer");
    p.advance(1);
    assert_eq!(runs(&p.quiet()), [(one(Trigger::Timer), Scope::All)]);
}

#[test]
fn a_pending_declaration_is_reverted_at_its_deadline_and_not_before() {
    let mut p = Pair::new(false);
    p.quiet();
    let deadline = T0.unix_ms / 1000 + 120;
    p.handle(Input::Pending(Ok(Some(deadline))));
    // The deadline is wall time, woken for on the monotonic clock.
    assert_eq!(p.core.poll_timeout(p.now), p.now.mono + 120_000);
    p.advance(119_999);
    assert!(!p.quiet().iter().any(|a| matches!(a, Action::Revert { .. })));
    p.advance(1);
    let actions = p.quiet();
    assert_eq!(
        actions.last(),
        Some(&Action::Revert { link_error: None }),
        "nothing else runs first"
    );
    assert!(p.next().is_none(), "a revert is in progress");
    // A signal during the revert is only noted.
    p.handle(Input::Signal(Signal::Run));
    assert!(p.next().is_none());
    p.handle(Input::Reverted {
        run: Some(Ok(converged())),
        unwritten: false,
    });
    let after = p.quiet();
    assert!(after.contains(&Action::LoadPending));
    assert!(after.contains(&Action::RefreshWatches { after_run: false }));
    assert_eq!(runs(&after), [(one(Trigger::Signal), Scope::All)]);
}

#[test]
fn a_revert_that_fails_is_not_tried_in_a_loop() {
    let mut p = Pair::new(false);
    p.quiet();
    p.handle(Input::Pending(Ok(Some(T0.unix_ms / 1000))));
    assert!(matches!(p.quiet().last(), Some(Action::Revert { .. })));
    p.handle(Input::Reverted {
        run: Some(Err("the store failed".into())),
        unwritten: false,
    });
    // The store still says pending, past its deadline: dropped until it is read again.
    assert_eq!(p.next(), Some(Action::LoadPending));
    p.handle(Input::Pending(Ok(Some(T0.unix_ms / 1000))));
    assert!(!p.quiet().iter().any(|a| matches!(a, Action::Revert { .. })));
}

#[test]
fn the_revert_names_the_links_last_error() {
    let mut p = Pair::new(true);
    p.quiet();
    p.handle(Input::LinkClosed("connection refused".into()));
    p.handle(Input::Pending(Ok(Some(T0.unix_ms / 1000))));
    let actions = p.quiet();
    assert_eq!(
        actions.last(),
        Some(&Action::Revert {
            link_error: Some("connection refused".into())
        })
    );
}

#[test]
fn an_ack_confirms_the_pending_declaration_and_a_held_lock_is_tried_again() {
    let mut p = Pair::new(true);
    p.quiet();
    p.handle(Input::Link(Event::Welcome));
    p.handle(Input::Pending(Ok(Some(T0.unix_ms / 1000 + 600))));
    p.quiet();
    p.handle(Input::Link(Event::Ack { id: 7 }));
    assert_eq!(p.next(), Some(Action::AckOutbox(7)));
    assert_eq!(p.next(), Some(Action::ConfirmAcked(7)));
    p.handle(Input::Confirmed(Confirmation::Locked));
    assert!(
        !p.quiet().contains(&Action::ConfirmAcked(7)),
        "not in a loop"
    );
    assert_eq!(p.core.poll_timeout(p.now), p.now.mono + CONFIRM_RETRY_MS);
    p.advance(CONFIRM_RETRY_MS);
    assert_eq!(p.next(), Some(Action::ConfirmAcked(7)));
    p.handle(Input::Confirmed(Confirmation::Done(Some(
        "confirmed".into(),
    ))));
    assert_eq!(p.next(), Some(Action::LoadPending));
    p.handle(Input::Pending(Ok(None)));
    p.advance(600_000);
    assert!(!p.quiet().iter().any(|a| matches!(a, Action::Revert { .. })));
    // Without a pending declaration an ack only drops reports.
    p.handle(Input::Link(Event::Ack { id: 8 }));
    let acked = p.quiet();
    assert!(acked.contains(&Action::AckOutbox(8)));
    assert!(!acked.contains(&Action::ConfirmAcked(8)));
}

/// The wait before each reconnect, failing every attempt.
fn retries(p: &mut Pair, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            p.handle(Input::LinkClosed("refused".into()));
            let at = p.core.link_at().unwrap_or(p.now.mono) - p.now.mono;
            p.advance(at);
            let actions = p.quiet();
            assert!(actions.contains(&Action::Connect), "{at} {actions:?}");
            at
        })
        .collect()
}

#[test]
fn reconnects_back_off_with_full_jitter_and_reset_after_a_good_link() {
    let mut p = Pair::new(true);
    let first = p.quiet();
    assert!(
        first.contains(&Action::Connect),
        "the first attempt at once"
    );
    let waits = retries(&mut p, 12);
    for (i, wait) in waits.iter().enumerate() {
        let ceiling = (1_000u64 << i).min(300_000);
        assert!(*wait < ceiling, "attempt {i}: {wait} within {ceiling}");
    }
    // It grows, doubling once a ceiling has been waited through (backoff.rs), not per attempt.
    assert!(waits[8..].iter().any(|w| *w > 4_000), "it grows: {waits:?}");
    // A link up for a minute resets it; a shorter one does not.
    p.handle(Input::Link(Event::Welcome));
    p.advance(59_999);
    retries(&mut p, 1);
    p.handle(Input::Link(Event::Welcome));
    p.advance(60_000);
    let reset = retries(&mut p, 1)[0];
    assert!(reset < 1_000, "reset: {reset}");
    // The control plane's policy is taken.
    p.handle(Input::Link(Event::Policy(ReconnectPolicy {
        base_ms: 20_000,
        cap_ms: 30_000,
    })));
    let waits = retries(&mut p, 6);
    assert!(waits.iter().all(|w| *w < 30_000), "{waits:?}");
}

#[test]
fn a_reconnect_runs_and_the_outbox_goes_out() {
    let mut p = Pair::new(true);
    p.quiet();
    p.handle(Input::Link(Event::Welcome));
    let first = p.quiet();
    assert!(first.contains(&Action::SendOutbox));
    assert!(runs(&first).is_empty(), "the first link is no reconnection");
    p.handle(Input::LinkClosed("reset".into()));
    p.advance(p.core.poll_timeout(p.now) - p.now.mono);
    p.quiet();
    p.handle(Input::Link(Event::Welcome));
    assert_eq!(runs(&p.quiet()), [(one(Trigger::Reconnect), Scope::All)]);
}

#[test]
fn triggers_during_a_run_collapse_into_one_next_run() {
    let mut p = Pair::new(true);
    p.quiet();
    p.handle(Input::Link(Event::Welcome));
    p.quiet();
    p.handle(Input::Signal(Signal::Run));
    let mut actions = Vec::new();
    while let Some(action) = p.next() {
        let run = matches!(action, Action::Run { .. });
        actions.push(action);
        if run {
            break;
        }
    }
    assert_eq!(runs(&actions), [(one(Trigger::Signal), Scope::All)]);
    // During the run: the timer comes due, a declaration is accepted, a watch sees drift.
    p.advance(700_000);
    p.handle(Input::Signal(Signal::Run));
    p.handle(Input::Link(Event::Declare {
        revision: 3,
        text: "{}".into(),
        confirm_secs: None,
    }));
    p.handle(Input::RunDone {
        result: Ok(converged()),
        unwritten: false,
    });
    // The link's events are carried out before anything new is decided.
    while !matches!(p.next(), Some(Action::Accept { revision: 3, .. })) {}
    p.handle(Input::Accepted {
        revision: 3,
        digest: "d".into(),
        accepted: Accepted::InForce,
    });
    let next = p.quiet();
    // The timer came due during the run too, but a full run rearms it.
    let all = Triggers::from_iter([Trigger::Signal, Trigger::Declaration]);
    assert_eq!(runs(&next), [(all, Scope::All)]);
}

#[test]
fn a_refused_declaration_is_reported_and_runs_nothing() {
    let mut p = Pair::new(true);
    p.quiet();
    p.handle(Input::Accepted {
        revision: 2,
        digest: "d".into(),
        accepted: Accepted::Refused(ReportOutcome::Ignored, "stale".into()),
    });
    let actions = p.quiet();
    assert!(actions.contains(&Action::ReportRefused {
        revision: 2,
        digest: "d".into(),
        outcome: ReportOutcome::Ignored,
        message: "stale".into()
    }));
    assert!(runs(&actions).is_empty());
}

/// Feeds an inotify event on `/etc/motd` (watched as wd 1) at `now`.
fn touch_motd(p: &mut Pair) {
    p.handle(Input::Inotify(vec![inotify::Event::Entry {
        wd: 1,
        name: "motd".into(),
    }]));
}

fn watching_motd() -> Pair {
    let mut p = Pair::new(true);
    p.quiet();
    let targets = drift::test_files(&["/etc/motd"]);
    let watch = p.core.watch_mut();
    watch.set_targets(targets);
    let add = watch.plan(&|_| true);
    watch.added(add[0].clone(), 1);
    p
}

#[test]
fn drift_seen_by_the_watcher_is_checked_then_repaired_alone() {
    let mut p = watching_motd();
    touch_motd(&mut p);
    assert!(runs(&p.quiet()).is_empty());
    p.advance(drift::DEBOUNCE_MS);
    assert_eq!(p.next(), Some(Action::Check(motd())));
    p.handle(Input::Checked(Ok((0, vec![]))));
    assert!(runs(&p.quiet()).is_empty(), "no drift, no run");
    touch_motd(&mut p);
    p.advance(drift::DEBOUNCE_MS);
    assert_eq!(p.next(), Some(Action::Check(motd())));
    p.handle(Input::Checked(Ok((1, vec!["files /etc/motd".into()]))));
    let timer = p.core.next_timer();
    let actions = p.quiet();
    assert_eq!(runs(&actions), [(one(Trigger::Watch), Scope::Only(motd()))]);
    assert_eq!(
        p.core.next_timer(),
        timer,
        "a watch run keeps the timer's time"
    );
}

#[test]
fn a_resource_repaired_again_and_again_is_contested_and_left_to_the_timer() {
    let mut p = watching_motd();
    let repaired = || {
        Ok(RunSummary {
            repaired: vec![("files", "/etc/motd".to_string())],
            changed: 1,
            ..converged()
        })
    };
    let mut reported = Vec::new();
    for _ in 0..drift::CONTEST_REPAIRS {
        touch_motd(&mut p);
        p.quiet();
        p.advance(drift::DEBOUNCE_MS);
        assert_eq!(p.next(), Some(Action::Check(motd())));
        p.handle(Input::Checked(Ok((1, vec!["files /etc/motd".into()]))));
        let actions = p.drain(&|_| repaired());
        assert_eq!(runs(&actions).len(), 1);
        reported
            .extend((actions.into_iter()).filter(|a| matches!(a, Action::ReportContested { .. })));
        p.advance(1_000);
    }
    assert_eq!(reported.len(), 1, "named once: {reported:?}");
    assert_eq!(p.core.watch().contested().len(), 1);
    // While contested, its events are left to the timer.
    touch_motd(&mut p);
    p.quiet();
    p.advance(drift::DEBOUNCE_MS);
    assert!(!p.quiet().iter().any(|a| matches!(a, Action::Check(_))));
    // Left alone, it settles and is watched again.
    p.advance(drift::SETTLE_MS);
    p.quiet();
    assert!(p.core.watch().contested().is_empty());
    touch_motd(&mut p);
    p.advance(drift::DEBOUNCE_MS);
    assert!(p.quiet().contains(&Action::Check(motd())));
}

#[test]
fn a_failed_watch_repair_is_tried_again_then_left_to_the_timer() {
    let mut p = watching_motd();
    let failed = || {
        Ok(RunSummary {
            failed: 1,
            failed_watched: motd(),
            ..converged()
        })
    };
    touch_motd(&mut p);
    p.advance(drift::DEBOUNCE_MS);
    assert_eq!(p.next(), Some(Action::Check(motd())));
    p.handle(Input::Checked(Ok((1, vec!["files /etc/motd".into()]))));
    assert_eq!(runs(&p.drain(&|_| failed())).len(), 1);
    for delay in super::super::retry::DELAYS_MS {
        assert_eq!(p.core.poll_timeout(p.now), p.now.mono + delay);
        p.advance(delay - 1);
        assert!(runs(&p.drain(&|_| failed())).is_empty(), "not before");
        p.advance(1);
        let again = runs(&p.drain(&|_| failed()));
        assert_eq!(again, [(one(Trigger::Watch), Scope::Only(motd()))]);
    }
    assert!(p
        .core
        .retry()
        .given_up()
        .contains(&("files", "/etc/motd".to_string())));
    // A full run covers it.
    p.handle(Input::Signal(Signal::Run));
    p.quiet();
    assert!(p.core.retry().given_up().is_empty());
}

#[test]
fn a_stop_is_taken_after_the_run_and_a_reload_resets_the_link() {
    let mut p = Pair::new(true);
    p.quiet();
    p.handle(Input::Link(Event::Welcome));
    p.quiet();
    p.handle(Input::Signal(Signal::Reload));
    assert_eq!(p.next(), Some(Action::Reload));
    let settings = Settings {
        interval_ms: 60_000,
        reconnect_base_ms: 2_000,
        control_plane: true,
    };
    p.handle(Input::Reloaded(Some(settings)));
    let actions = p.quiet();
    assert_eq!(
        actions.first(),
        Some(&Action::Disconnect("the configuration was reloaded".into()))
    );
    assert!(actions.contains(&Action::Connect), "connects again at once");
    p.handle(Input::Signal(Signal::Stop));
    assert_eq!(p.quiet().last(), Some(&Action::Exit(EXIT_OK)));
}
