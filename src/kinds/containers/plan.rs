//! Planning containers (pure): create (or recreate when the spec's label differs), start, stop,
//! unpause, remove; under `--root`, every change deferred and every owned container kept.

use super::state::{label_matches, Observed, Op};
use crate::kinds::{Action, Change, LedgerAfter, RunContext, Step};
use crate::model::spec::containers::{digest, Spec};
use crate::model::spec::NoOriginal;
use crate::store::Entry;

/// What to do about container `key`.
pub(super) fn plan(
    cx: &RunContext,
    key: &str,
    desired: Option<&Spec>,
    observed: Option<&Observed>,
    owned: Option<&Entry<NoOriginal>>,
) -> Step<Op, NoOriginal> {
    let Some(obs) = observed else {
        return Step::Fail(format!("container {key} was not observed"));
    };
    if cx.offline {
        return plan_offline(key, desired, owned);
    }
    match desired {
        Some(spec) if spec.present => plan_present(cx, key, spec, obs, owned),
        Some(_) if obs.exists => change(
            key,
            Action::Remove,
            vec!["declared absent".into()],
            None,
            LedgerAfter::Disown,
            Op::Remove,
        ),
        Some(_) => match owned {
            Some(_) => change(
                key,
                Action::Remove,
                vec!["already absent".into()],
                None,
                LedgerAfter::Disown,
                Op::Forget,
            ),
            None => Step::InSync,
        },
        None => plan_release(key, obs, owned),
    }
}

/// Under `--root`: podman was not asked, so nothing is known about the container: whatever the
/// declaration wants waits for the running system, and the ledger keeps what it owns
/// (forgetting an owned container here would leave it running and never released).
fn plan_offline(
    key: &str,
    desired: Option<&Spec>,
    owned: Option<&Entry<NoOriginal>>,
) -> Step<Op, NoOriginal> {
    let needs_system = || vec!["needs the running system".to_string()];
    match (desired, owned) {
        (Some(spec), _) if spec.present => change(
            key,
            Action::Update,
            needs_system(),
            None,
            LedgerAfter::Applied(digest(spec)),
            Op::Forget,
        ),
        (_, Some(_)) => change(
            key,
            Action::Remove,
            needs_system(),
            None,
            LedgerAfter::Disown,
            Op::Forget,
        ),
        (_, None) => Step::InSync,
    }
}

/// A container declared present: created, recreated when its spec's label differs, unpaused,
/// started or stopped as declared; one of someone else's by that name fails.
fn plan_present(
    cx: &RunContext,
    key: &str,
    spec: &Spec,
    obs: &Observed,
    owned: Option<&Entry<NoOriginal>>,
) -> Step<Op, NoOriginal> {
    let after = LedgerAfter::Applied(digest(spec));
    let intent = owned.is_none().then(Entry::created);
    let create = |remove_first| Op::Create {
        remove_first,
        start: spec.running,
    };
    if !obs.exists {
        let details = vec![format!("create from {}", spec.image)];
        return change(key, Action::Create, details, intent, after, create(false));
    }
    if !obs.ours {
        return Step::Fail(format!(
            "a container named {key} exists and was not created by mesh-host; remove or rename it to let mesh-host manage it"
        ));
    }
    if !label_matches(obs.spec_digest.as_deref(), spec, cx.digest_key.as_ref()) {
        let details = vec!["spec changed: recreate".into()];
        return change(key, Action::Update, details, intent, after, create(true));
    }
    if obs.paused {
        let (details, stop) = match spec.running {
            true => (vec!["unpause".into()], false),
            false => (vec!["unpause".into(), "stop".into()], true),
        };
        return change(
            key,
            Action::Update,
            details,
            intent,
            after,
            Op::Unpause { stop },
        );
    }
    match (spec.running, obs.running) {
        (true, false) => change(
            key,
            Action::Update,
            vec!["start".into()],
            intent,
            after,
            Op::Start,
        ),
        (false, true) => change(
            key,
            Action::Update,
            vec!["stop".into()],
            intent,
            after,
            Op::Stop,
        ),
        _ => match intent {
            Some(intent) => Step::Adopt {
                intent,
                backup: None,
            },
            None => Step::InSync,
        },
    }
}

/// A container no longer declared: removed if the host created it, else only forgotten.
fn plan_release(
    key: &str,
    obs: &Observed,
    owned: Option<&Entry<NoOriginal>>,
) -> Step<Op, NoOriginal> {
    let (why, op) = match (owned, obs.exists && obs.ours) {
        (None, _) => return Step::InSync,
        (Some(_), true) => ("released; mesh-host created it", Op::Remove),
        (Some(_), false) if obs.exists => {
            ("released; not created by mesh-host, left alone", Op::Forget)
        }
        (Some(_), false) => ("released; already gone", Op::Forget),
    };
    change(
        key,
        Action::Remove,
        vec![why.into()],
        None,
        LedgerAfter::Disown,
        op,
    )
}

/// A change to container `key`.
fn change(
    key: &str,
    action: Action,
    details: Vec<String>,
    intent: Option<Entry<NoOriginal>>,
    after: LedgerAfter,
    op: Op,
) -> Step<Op, NoOriginal> {
    Step::Change(Change {
        key: key.to_string(),
        action,
        details: details.into(),
        diff: None,
        intent: intent.map(Box::new),
        backup: None,
        after,
        op,
    })
}
