//! Observing units: one `systemctl show` and one `is-enabled` (of the loaded ones) for them all,
//! asked again by halves when a name fails the batch; each unit's file read without following
//! a symlink; what they owe from earlier runs; the stale-process look.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::PathBuf;

use super::state::Observed;
use crate::kinds::{backup_key, query_by_halves, Env, KindError, Observations, RunContext};
use crate::model::spec::units::Units;
use crate::model::spec::Named as _;
use crate::model::unitfile::UnitName;
use crate::os::fsutil::{self, Dir, Found};
use crate::store::Owed;
use crate::tools::systemctl::{self, LoadState, UnitFileState};

/// Each of `keys` as systemd, its unit directory and the store see it.
pub(super) fn observe<'k>(
    env: &Env,
    cx: &RunContext,
    keys: &[&'k str],
) -> Result<Observations<'k, Observed>, KindError> {
    if keys.is_empty() {
        return Ok(Observations::default());
    }
    let states = query_states(env, keys);
    let dir = open_unit_dir(env, false)?;
    let max = env.config.limits.max_file_bytes;
    let mut owed = match (env.store, env.offline) {
        (Some(store), false) => store.owed().map_err(|e| e.to_string())?,
        _ => Owed::default(),
    };
    let stale = stale_units(env, cx, keys);
    let mut templates = Templates::default();
    Ok(keys
        .iter()
        .zip(states)
        .map(|(name, state)| {
            let owed = owed.units.remove(*name).unwrap_or_default();
            let observed = state.map(|obs| Observed { owed, ..obs });
            let observed = observed.and_then(|mut obs| {
                match read_unit_file(env, dir.as_ref(), name, max)? {
                    Found::Nothing => {}
                    Found::File(stat, bytes) => {
                        obs.file = Some(bytes);
                        obs.file_mode = Some(stat.mode);
                    }
                    Found::Link(target) => obs.link = Some(target.display().to_string()),
                }
                obs.template_differs = templates.differs(env, cx, dir.as_ref(), name)?;
                obs.stale = stale.contains(*name);
                if let (Some(store), true, false) = (
                    env.store,
                    env.diffs,
                    cx.declaration.units.contains_key(*name),
                ) {
                    obs.original = store.read_backup(&backup_key(Units::NAME, name)).ok();
                }
                Ok(obs)
            });
            (*name, observed)
        })
        .collect())
}

/// What systemd says of each of `keys`: under `--root`, only `is-enabled` of each; on the
/// running system, one `show` and one `is-enabled` of the loaded ones. A template
/// (`foo@.service`) is only its file: systemctl is asked about its instances, never about it
/// (`show` refuses the name and would fail the batch).
fn query_states(env: &Env, keys: &[&str]) -> Vec<Result<Observed, KindError>> {
    let names: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|name| !UnitName::parse(name).is_ok_and(|n| n.is_template()))
        .collect();
    let queried = match env.offline {
        true => names
            .iter()
            .map(|name| Ok(offline_state(env, name)))
            .collect(),
        false => shown_states(env, &names),
    };
    let mut queried: BTreeMap<&str, Result<Observed, KindError>> =
        names.into_iter().zip(queried).collect();
    keys.iter()
        .map(|key| {
            queried
                .remove(key)
                .unwrap_or_else(|| Ok(Observed::default()))
        })
        .collect()
}

/// A unit in a mounted root: whether it is enabled, if that can be told.
fn offline_state(env: &Env, name: &str) -> Observed {
    let args = systemctl::is_enabled(Some(env.root));
    let enablement = env
        .runner
        .query(&env.config.systemctl, &args, &[name])
        .ok()
        .and_then(|o| {
            systemctl::parse_is_enabled(&o.stdout_text())
                .into_iter()
                .next()
        });
    Observed {
        enablement,
        ..Observed::default()
    }
}

/// Units on the running system: one name systemctl cannot take fails the whole `show`: asked
/// again by halves, it fails only that unit.
fn shown_states(env: &Env, names: &[&str]) -> Vec<Result<Observed, KindError>> {
    let shown = query_by_halves(env.runner, "`systemctl show`", names, |batch| {
        env.runner
            .run(&env.config.systemctl, &systemctl::show(), batch)
            .map(|output| systemctl::parse_show(&output.stdout_text()))
            .map_err(|e| KindError::command("observe", e))
    });
    let loaded: Vec<&str> = names
        .iter()
        .zip(&shown)
        .filter(|(_, s)| s.as_ref().is_ok_and(|s| s.load == Some(LoadState::Loaded)))
        .map(|(name, _)| *name)
        .collect();
    let mut enablement = query_enablement(env, &loaded);
    names
        .iter()
        .zip(shown)
        .map(|(name, shown)| {
            shown.map(|s| Observed {
                enablement: enablement.remove(*name).unwrap_or(s.unit_file),
                load: s.load,
                active: s.active,
                ..Observed::default()
            })
        })
        .collect()
}

/// The units among `keys` whose processes map files an upgrade deleted, of those that asked
/// (`restart_when_stale`): one look through /proc for every unit that asked, none when none
/// did, nor while the last look's answer stands.
fn stale_units(env: &Env, cx: &RunContext, keys: &[&str]) -> BTreeSet<String> {
    let asked = |name: &&str| {
        (cx.declaration.units.get(*name)).is_some_and(|s| s.present && s.restart_when_stale)
    };
    match (env.offline, env.upkeep) {
        (false, Some(at)) if keys.iter().any(asked) => {
            let last = env.store.and_then(crate::store::Store::last_look);
            let now = env.clock.unix();
            let units = crate::model::upkeep::stale_units(at, last.as_ref(), now);
            units.into_iter().collect()
        }
        _ => BTreeSet::new(),
    }
}

/// Whether each declared template's file differs from its declared content: read once, however
/// many instances it has.
#[derive(Default)]
struct Templates(BTreeMap<String, bool>);

impl Templates {
    /// Whether `name` is an instance of a template the declaration ships with other content
    /// than its file holds now.
    fn differs(
        &mut self,
        env: &Env,
        cx: &RunContext,
        dir: Option<&Dir>,
        name: &str,
    ) -> Result<bool, String> {
        let Some(template) = UnitName::parse(name).ok().and_then(|n| n.template()) else {
            return Ok(false);
        };
        let Some(content) = (cx.declaration.units.get(&template))
            .filter(|t| t.present)
            .and_then(|t| t.content.as_deref())
        else {
            return Ok(false);
        };
        if let Some(differs) = self.0.get(&template) {
            return Ok(*differs);
        }
        let max = env.config.limits.max_file_bytes;
        let differs = match read_unit_file(env, dir, &template, max)? {
            Found::File(_, bytes) => bytes != content.as_bytes(),
            Found::Nothing | Found::Link(_) => true,
        };
        self.0.insert(template, differs);
        Ok(differs)
    }
}

/// `is-enabled` of loaded units, by name. `show`'s `UnitFileState` is the manager's cached view
/// and can lag an enable or disable (systemd 252 still said `enabled` after `systemctl disable`);
/// `is-enabled` reads the unit files. systemd 252 stops at the first unit without a file, so when
/// the batch answers short it is asked again by halves; a unit whose file is gone gets `""`
/// (systemd 262 says `not-found` for it and goes on).
pub(super) fn query_enablement(
    env: &Env,
    names: &[&str],
) -> BTreeMap<String, Option<UnitFileState>> {
    let states = query_by_halves(env.runner, "`systemctl is-enabled`", names, |batch| {
        env.runner
            .query(&env.config.systemctl, &systemctl::is_enabled(None), batch)
            .map(|output| systemctl::parse_is_enabled(&output.stdout_text()))
            .map_err(|e| KindError::command("observe", e))
    });
    names
        .iter()
        .zip(states)
        .map(|(name, state)| (name.to_string(), state.ok()))
        .collect()
}

/// The unit directory, opened from the target root one component at a time, never through a
/// symlink (under `--root`, a link in the mounted disk must not lead onto the rescue system),
/// nor into the store, whatever path reaches it (`Store::fence`). `None` when it does not exist
/// and `create` is not asked.
pub(super) fn open_unit_dir(env: &Env, create: bool) -> Result<Option<Dir>, String> {
    let fence = env.store.and_then(crate::store::Store::fence);
    fsutil::open_dir_below(env.root, &env.config.unit_dir, create, fence.as_ref())
        .map_err(|e| format!("unit directory {}: {e}", unit_dir(env).display()))
}

/// The unit directory as seen from the target root, for messages.
pub(super) fn unit_dir(env: &Env) -> PathBuf {
    let dir = &env.config.unit_dir;
    env.root.join(dir.strip_prefix("/").unwrap_or(dir))
}

/// Reads the unit's file, never following a symlink: a link is reported with its target. A file
/// over the limit or unreadable fails only this unit.
pub(super) fn read_unit_file(
    env: &Env,
    dir: Option<&Dir>,
    name: &str,
    max: u64,
) -> Result<Found, String> {
    let Some(d) = dir else {
        return Ok(Found::Nothing);
    };
    d.read_entry(OsStr::new(name), max)
        .map_err(|e| format!("unit file {}: {e}", unit_dir(env).join(name).display()))
}
