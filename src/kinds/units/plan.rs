//! Planning units (pure): a declared unit's file, enablement and activation (restarts for the
//! files it restarts on); a removal; a release that puts an adopted unit's state back.

use super::state::{Activation, Enablement, FileChange, Observed, Op};
use crate::kinds::{backup_key, Action, Change, LedgerAfter, RunContext, Step};
use crate::model::spec::units::{digest, is_secret, Original, Spec, Units};
use crate::model::spec::Named as _;
use crate::model::unitfile::UnitName;
use crate::store::{Entry, Origin};
use crate::tools::systemctl::{LoadState, UnitFileState};
use crate::util::diff::ContentDiff;

/// A unit declared present: its file, enablement and activation as declared, restarted or
/// reloaded for what changed under it; or why it cannot be.
pub(super) fn plan_present(
    cx: &RunContext,
    key: &str,
    spec: &Spec,
    obs: &Observed,
    owned: Option<&Entry<Original>>,
) -> Step<Op, Original> {
    if let Some(refused) = refused(cx, key, spec, obs) {
        return refused;
    }
    let mut plan = Planning::default();
    let file_changed = plan.file(spec, obs);
    let config_changed = config_changed(cx, key);
    if let Some(not_loaded) = not_loaded(cx, key, spec, obs, config_changed) {
        return not_loaded;
    }
    plan.enablement(spec, obs);
    let restart_for = match (file_changed, obs.template_differs, config_changed) {
        (true, _, _) => Some("its unit file changed"),
        (_, true, _) => Some("its template changed"),
        (_, _, true) => Some("a unit file or drop-in of it changed"),
        _ => None,
    };
    plan.activation(cx, spec, obs, restart_for);
    let (intent, backup) = adoption(key, spec, obs, owned, file_changed);
    let Planning { op, details } = plan;
    if details.is_empty() {
        return match intent {
            Some(intent) => Step::Adopt { intent, backup },
            None => Step::InSync,
        };
    }
    let diff = match &op.file {
        FileChange::Write(content) if cx.diffs => Some(Box::new(ContentDiff::new(
            if obs.file.is_some() {
                "on the machine"
            } else {
                "absent"
            },
            "declared",
            obs.file.as_deref(),
            Some(content),
            shows_content(Some(spec), obs.file_mode),
        ))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action: if owned.is_none() && obs.file.is_none() && matches!(op.file, FileChange::Write(_))
        {
            Action::Create
        } else {
            Action::Update
        },
        details: details.into(),
        diff,
        intent: intent.map(Box::new),
        backup: backup.map(Vec::into_boxed_slice),
        after: LedgerAfter::Applied(digest(spec)),
        op,
    })
}

/// Why a declared unit is skipped or fails before anything is planned: its package failed in
/// this run, its file is a symlink, or it is masked and asked to run or be enabled.
fn refused(cx: &RunContext, key: &str, spec: &Spec, obs: &Observed) -> Option<Step<Op, Original>> {
    if let Some(package) = spec
        .package
        .as_ref()
        .filter(|p| cx.facts.packages.failed.contains(*p))
    {
        return Some(Step::Skip(format!(
            "its package {package} failed to install in this run"
        )));
    }
    if let (Some(_), Some(target)) = (&spec.content, &obs.link) {
        return Some(Step::Fail(format!(
            "its unit file is a symlink to {target}; mesh-host never writes through or replaces a symlink"
        )));
    }
    if obs.masked() && (spec.active == Some(true) || spec.enabled == Some(true)) {
        return Some(Step::Fail(format!(
            "unit {key} is masked; it cannot be enabled or started until a person unmasks it \
             (systemctl unmask {key})"
        )));
    }
    None
}

/// Whether the files kind wrote the unit's own or its template's unit file or drop-ins in this
/// run.
fn config_changed(cx: &RunContext, key: &str) -> bool {
    let template = UnitName::parse(key).ok().and_then(|name| name.template());
    let config = &cx.facts.files.unit_config;
    config.contains(key) || template.as_ref().is_some_and(|t| config.contains(t))
}

/// The failure of a unit systemd has not loaded and nothing of this run will make it load. An
/// instance of a template this declaration ships, or a unit whose file the files kind wrote, is
/// loaded once the file is written and the manager reloaded, which `apply` does before it
/// enables or starts anything.
fn not_loaded(
    cx: &RunContext,
    key: &str,
    spec: &Spec,
    obs: &Observed,
    config_changed: bool,
) -> Option<Step<Op, Original>> {
    let template = UnitName::parse(key).ok().and_then(|name| name.template());
    let template_declared = template
        .as_ref()
        .and_then(|t| cx.declaration.units.get(t))
        .is_some_and(|t| t.present && t.content.is_some());
    let loads = cx.offline
        || spec.content.is_some()
        || template_declared
        || config_changed
        || obs.load == Some(LoadState::Loaded)
        || obs.masked();
    (!loads).then(|| {
        Step::Fail(format!(
            "unit {key} is not loaded (LoadState={}) and the declaration gives no content",
            obs.load.as_ref().map_or("", LoadState::as_str)
        ))
    })
}

/// A change to a unit as it is planned: what to do, and what to say of it.
#[derive(Default)]
struct Planning {
    op: Op,
    details: Vec<String>,
}

impl Planning {
    /// The unit file as declared; returns whether its content changes.
    fn file(&mut self, spec: &Spec, obs: &Observed) -> bool {
        let Some(content) = &spec.content else {
            return false;
        };
        let changed = obs.file.as_deref() != Some(content.as_bytes());
        if changed {
            self.op.file = FileChange::Write(content.as_bytes().to_vec());
            self.details.push(
                match obs.file.is_some() {
                    true => "unit file changed",
                    false => "unit file written",
                }
                .to_string(),
            );
        }
        // A secret unit's file others can read (written before it was declared secret) is
        // written again 0600; its content is as declared, so nothing restarts for it.
        let exposed = obs.file_mode.filter(|mode| mode & 0o077 != 0);
        if let (false, true, Some(mode)) = (changed, is_secret(spec), exposed) {
            self.op.file = FileChange::Write(content.as_bytes().to_vec());
            (self.details).push(format!("unit file mode {mode:04o} -> 0600 (secret)"));
        }
        changed
    }

    fn enablement(&mut self, spec: &Spec, obs: &Observed) {
        let enableable = || !(obs.enablement.as_ref()).is_some_and(UnitFileState::not_enableable);
        match spec.enabled {
            Some(true) if !obs.enabled() && enableable() => {
                self.op.enablement = Enablement::Enable;
                self.details.push("enable".into());
            }
            Some(false) if obs.enabled() => {
                self.op.enablement = Enablement::Disable;
                self.details.push("disable".into());
            }
            _ => {}
        }
    }

    /// Started or stopped as declared; a running unit restarted for `restart_for` (its unit
    /// configuration changed), or for a file it restarts on that changed, or because it maps
    /// deleted files; else reloaded for a file it reloads on.
    fn activation(
        &mut self,
        cx: &RunContext,
        spec: &Spec,
        obs: &Observed,
        restart_for: Option<&str>,
    ) {
        let (op, details) = (&mut self.op, &mut self.details);
        if cx.offline {
            // A mounted root runs nothing: the start is planned so that it is reported as
            // deferred.
            if spec.active == Some(true) {
                op.activation = Activation::Start;
                details.push("start".into());
            }
            return;
        }
        let running = obs.running();
        let want_running = spec.active.unwrap_or(running);
        // Changed in this run, or in an earlier one whose restart or reload is still owed.
        let changed = |p: &&String| cx.facts.files.changed.contains(*p) || obs.owed.contains(*p);
        let listed = |files: Vec<&String>| {
            let list: Vec<&str> = files.iter().map(|s| s.as_str()).collect();
            list.join(", ")
        };
        let touched: Vec<&String> = spec.restart_on.iter().filter(changed).collect();
        let reload_touched: Vec<&String> = spec.reload_on.iter().filter(changed).collect();
        let stale = spec.restart_when_stale && obs.stale;
        if want_running && !running {
            op.activation = Activation::Start;
            details.push("start".into());
        } else if !want_running && running {
            op.activation = Activation::Stop;
            details.push("stop".into());
        } else if running && (restart_for.is_some() || !touched.is_empty() || stale) {
            op.activation = Activation::Restart;
            let why = match restart_for {
                Some(why) => why.to_string(),
                None if touched.is_empty() => "it maps files an upgrade deleted".to_string(),
                None => format!("{} changed", listed(touched)),
            };
            details.push(format!("restart ({why})"));
        } else if running && !reload_touched.is_empty() {
            op.activation = Activation::Reload;
            details.push(format!("reload ({} changed)", listed(reload_touched)));
        }
    }
}

/// What the ledger is told ahead of a change to a unit the host does not own yet, with its
/// file's original when that is replaced: created (its file is the host's), or adopted with
/// the state to put back.
fn adoption(
    key: &str,
    spec: &Spec,
    obs: &Observed,
    owned: Option<&Entry<Original>>,
    file_changed: bool,
) -> (Option<Entry<Original>>, Option<Vec<u8>>) {
    match owned {
        Some(_) => (None, None),
        None if obs.file.is_none() && spec.content.is_some() => (Some(Entry::created()), None),
        None => {
            let file_backup =
                (file_changed && obs.file.is_some()).then(|| backup_key(Units::NAME, key));
            let original = Original {
                enabled: obs.enabled(),
                active: obs.running(),
                file_backup: file_backup.clone(),
            };
            let backup = file_backup.and(obs.file.clone());
            (Some(Entry::adopted(Some(original))), backup)
        }
    }
}

/// A removal's plan: `shown`, the unit file as it is, when the plan shows diffs.
pub(super) fn plan_absent(
    key: &str,
    obs: &Observed,
    shown: Option<(&[u8], Option<u32>)>,
    owned: Option<&Entry<Original>>,
) -> Step<Op, Original> {
    remove_step(key, shown, removal(obs), owned.is_some(), "declared absent")
}

/// Stopped, disabled and its file removed, as far as it is any of those now.
pub(super) fn removal(obs: &Observed) -> Op {
    Op {
        activation: match obs.running() {
            true => Activation::Stop,
            false => Activation::Keep,
        },
        enablement: match obs.enabled() {
            true => Enablement::Disable,
            false => Enablement::Keep,
        },
        file: match obs.file {
            Some(_) => FileChange::Remove,
            None => FileChange::Keep,
        },
    }
}

pub(super) fn plan_release(
    cx: &RunContext,
    key: &str,
    obs: &Observed,
    entry: &Entry<Original>,
) -> Step<Op, Original> {
    if entry.origin == Origin::Created {
        return remove_step(
            key,
            obs.file_diff(cx),
            removal(obs),
            true,
            "released; mesh-host wrote it",
        );
    }
    let Some(original) = &entry.original else {
        return Step::Fail("the ledger keeps no record of the original".to_string());
    };
    let op = Op {
        enablement: match (original.enabled, obs.enabled()) {
            (true, false) => Enablement::Enable,
            (false, true) => Enablement::Disable,
            _ => Enablement::Keep,
        },
        activation: match (original.active, obs.running()) {
            (true, false) => Activation::Start,
            (false, true) => Activation::Stop,
            _ => Activation::Keep,
        },
        file: match &original.file_backup {
            Some(backup) => FileChange::Restore(backup.clone()),
            None => FileChange::Keep,
        },
    };
    let mut details = vec!["released; original state restored".to_string()];
    details.extend(describe(&op));
    // The file as it is (when the plan shows diffs) against the original put back.
    let diff = match (&op.file, &obs.original) {
        (FileChange::Restore(_), Some(original)) if cx.diffs => Some(Box::new(ContentDiff::new(
            if obs.file.is_some() {
                "on the machine"
            } else {
                "absent"
            },
            "original",
            obs.file.as_deref(),
            Some(original),
            shows_content(None, obs.file_mode),
        ))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Update,
        details: details.into(),
        diff,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

pub(super) fn remove_step(
    key: &str,
    shown: Option<(&[u8], Option<u32>)>,
    op: Op,
    owned: bool,
    why: &str,
) -> Step<Op, Original> {
    if op == Op::default() && !owned {
        return Step::InSync;
    }
    let mut details = vec![why.to_string()];
    details.extend(describe(&op));
    let diff = match (&op.file, shown) {
        (FileChange::Remove, Some((file, mode))) => Some(Box::new(ContentDiff::new(
            "on the machine",
            "absent",
            Some(file),
            None,
            shows_content(None, mode),
        ))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Remove,
        details: details.into(),
        diff,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

/// Whether a unit file's content may be shown in a plan's diff: the one place that decides, for
/// a declared unit (`spec`) and for one being removed or released (`None`), given its file's
/// mode now (`mode`). Never a secret unit's (`is_secret`), nor a unit file others may not read
/// (a secret unit's file is 0600): what a unit no longer declared held is judged by that.
/// Content not shown is summarised by its sizes.
pub(super) fn shows_content(spec: Option<&Spec>, mode: Option<u32>) -> bool {
    !spec.is_some_and(is_secret) && mode.is_none_or(|mode| mode & 0o004 != 0)
}

pub(super) fn describe(op: &Op) -> Vec<String> {
    [
        (op.activation == Activation::Stop, "stop"),
        (op.enablement == Enablement::Disable, "disable"),
        (op.file == FileChange::Remove, "remove unit file"),
        (
            matches!(op.file, FileChange::Restore(_)),
            "restore unit file",
        ),
        (op.enablement == Enablement::Enable, "enable"),
        (op.activation == Activation::Start, "start"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, s)| s.to_string())
    .collect()
}
