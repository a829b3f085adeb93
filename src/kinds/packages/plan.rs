//! Planning packages (pure): install, mark explicitly installed, remove, or put back as a
//! dependency on release, from what is declared, installed and owned.

use super::state::{Observed, Op};
use crate::kinds::{Action, Change, LedgerAfter, Step};
use crate::model::spec::packages::{digest, Spec};
use crate::store::{Entry, Origin};
use crate::tools::pacman::InstallReason;

/// What to do about package `key`.
pub(super) fn plan(
    key: &str,
    desired: Option<&Spec>,
    observed: Option<&Observed>,
    owned: Option<&Entry<InstallReason>>,
) -> Step<Op, InstallReason> {
    let Some(observed) = observed else {
        return Step::Fail(format!("package {key} was not observed"));
    };
    let installed = matches!(observed, Observed::Installed { .. });
    let dependency = matches!(
        observed,
        Observed::Installed {
            explicit: false,
            ..
        }
    );
    let applied = LedgerAfter::Applied(digest(&Spec { present: true }));
    match (desired, installed, owned) {
        // Else a `-Rs` of what needed it would remove it with it.
        (Some(Spec { present: true }), true, owned) if dependency => change(
            key,
            Action::Update,
            "installed as a dependency; mark explicitly installed",
            owned
                .is_none()
                .then(|| Entry::adopted(Some(InstallReason::Dependency))),
            applied,
            Op::MarkExplicit,
        ),
        (Some(Spec { present: true }), true, Some(_)) => Step::InSync,
        (Some(Spec { present: true }), true, None) => Step::Adopt {
            intent: Entry::adopted(Some(InstallReason::Explicit)),
            backup: None,
        },
        (Some(Spec { present: true }), false, owned) => change(
            key,
            Action::Create,
            "install",
            owned.is_none().then(Entry::created),
            applied,
            Op::Install,
        ),
        (Some(Spec { present: false }), true, _) => change(
            key,
            Action::Remove,
            "declared absent",
            None,
            LedgerAfter::Disown,
            Op::Remove,
        ),
        (Some(Spec { present: false }), false, None) => Step::InSync,
        (Some(Spec { present: false }), false, Some(_)) => change(
            key,
            Action::Remove,
            "already absent",
            None,
            LedgerAfter::Disown,
            Op::Forget,
        ),
        (None, _, None) => Step::InSync,
        (None, _, Some(entry)) => plan_release(key, observed, entry),
    }
}

/// What releasing owned package `key` does: only what the host installed is removed, and what
/// was a dependency before it becomes one again.
fn plan_release(
    key: &str,
    observed: &Observed,
    entry: &Entry<InstallReason>,
) -> Step<Op, InstallReason> {
    let required_by = match observed {
        Observed::Installed { required_by, .. } => required_by.join(" "),
        Observed::Missing => {
            let detail = "released; already gone";
            return change(
                key,
                Action::Remove,
                detail,
                None,
                LedgerAfter::Disown,
                Op::Forget,
            );
        }
    };
    let (action, detail, op) = match entry {
        // `-Rs` would fail on every run; pacman removes it once nothing needs it.
        e if e.origin == Origin::Created && !required_by.is_empty() => (
            Action::Update,
            format!(
                "released; still required by {required_by}, so marked installed as a dependency"
            ),
            Op::MarkDependency,
        ),
        e if e.origin == Origin::Created => (
            Action::Remove,
            "released; mesh-host installed it".to_string(),
            Op::Remove,
        ),
        e if e.original.as_deref() == Some(&InstallReason::Dependency) => (
            Action::Update,
            "released; was installed as a dependency before mesh-host, marked so again".to_string(),
            Op::MarkDependency,
        ),
        _ => (
            Action::Update,
            "released; was installed before mesh-host, left installed".to_string(),
            Op::Forget,
        ),
    };
    change(key, action, &detail, None, LedgerAfter::Disown, op)
}

/// A change to package `key`.
fn change(
    key: &str,
    action: Action,
    detail: &str,
    intent: Option<Entry<InstallReason>>,
    after: LedgerAfter,
    op: Op,
) -> Step<Op, InstallReason> {
    Step::Change(Change {
        key: key.to_string(),
        action,
        details: vec![detail.to_string()].into(),
        diff: None,
        intent: intent.map(Box::new),
        backup: None,
        after,
        op,
    })
}
