//! What a run looks for after the kinds: what the machine needs (the reboot-and-restart look,
//! or its last answer while it stands), the foreign packages, the backups no ledger entry names.

use crate::engine::node;
use crate::kinds::{self, backup_key, Env};
use crate::model::upkeep::{self, Needs};
use crate::store::{Foreign, Ledger, Store, StoreError};

/// What the machine needs: the last look's answer while it stands (`upkeep::look_again`, and
/// every process it found stale still is), else a new look, kept in the store. `changed`: the
/// run changed something.
pub(super) fn needs_now(env: &Env, at: &upkeep::Where, changed: bool) -> Needs {
    // Read before the look: whatever changes while it runs moves them for the next run.
    let stamps = upkeep::stamps(at);
    let now = env.clock.unix();
    let last = env.store.and_then(Store::last_look);
    let why = match upkeep::look_again(last.as_ref(), &stamps, now, changed) {
        None => match last {
            Some(last) if upkeep::still_stale(at, &last.stale) => {
                log::debug!("the reboot and restart look stands: nothing it depends on changed");
                return last.needs;
            }
            _ => "a process it found stale is not any more",
        },
        Some(why) => why,
    };
    log::debug!("the reboot and restart look is made again: {why}");
    let (needs, stale) = upkeep::look(at);
    if let Some(store) = env.store {
        let looked = upkeep::Looked {
            at: now,
            stamps,
            needs: needs.clone(),
            stale,
        };
        if let Err(e) = store.save_look(&looked) {
            log::warn!("{e}; the next run looks again");
        }
    }
    needs
}

/// The foreign packages (`pacman -Qmq`, through the run's runner), when pacman's databases
/// changed since the store's count: a run that changed nothing spawns nothing for them.
pub(super) fn count_foreign(env: &Env, at: &upkeep::Where) -> Option<Foreign> {
    let stamp = node::pacman_db_stamp(&at.db)?;
    let kept = env
        .store
        .and_then(|s| s.stats().ok())
        .and_then(|s| s.foreign);
    if kept.is_some_and(|k| k.stamp == stamp) {
        return None;
    }
    match kinds::pacman::foreign_count(env) {
        Ok(count) => Some(Foreign { count, stamp }),
        Err(e) => {
            log::warn!("the foreign packages were not counted: {e}");
            None
        }
    }
}

/// Originals are dropped only after the ledger stops pointing at them, so a crash in between
/// leaves one set aside (`Store::release_backup`); this clears such leftovers, and only those:
/// a backup the ledger does not list but that was never released is an original whose ledger
/// entry was lost, kept for the resource's next adoption.
pub(super) fn remove_unreferenced_backups(
    store: &Store,
    ledger: &Ledger,
) -> Result<(), StoreError> {
    store.remove_released_backups(|| {
        (ledger.adopted().into_iter())
            .map(|(kind, key)| backup_key(kind, &key))
            .collect()
    })
}
