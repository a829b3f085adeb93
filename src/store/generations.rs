//! Generations: the last declarations in force, each with where it came from, when it was put in
//! force and whether it was confirmed; their texts are kept in `generations/` by digest and
//! checked against it when read. A declaration put in force may be *pending*: unless confirmed
//! by its deadline (a person's `confirm`, or the control plane's ack of the report of the run
//! that applied it), the host reverts to the last confirmed generation. The decisions are pure
//! (`Generations`); `Store` reads and writes them, under the store's lock.

use std::ffi::OsStr;

use serde::{Deserialize, Serialize};

use super::{InForce, Source, Store, StoreError, MAX_STORE_FILE};
use crate::util::codec;

pub const GENERATIONS: &str = "generations.json";
const TEXTS: &str = "generations";

/// The generations, oldest first: the last is the declaration in force.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generations {
    pub list: Vec<Generation>,
    /// The last revert, until a declaration is next put in force: the hello and `status` say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted: Option<Reverted>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    pub revision: Option<u64>,
    pub digest: String,
    pub source: Source,
    /// Unix seconds it was put in force.
    pub applied: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signed_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    pub state: State,
}

impl Generation {
    /// Signed, and its signature's expiry has passed at `now`.
    pub fn expired(&self, now: u64) -> bool {
        !self.signed_by.is_empty() && self.expires.is_some_and(|e| e <= now)
    }
}

/// Whether a generation was confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "is", rename_all = "lowercase", deny_unknown_fields)]
pub enum State {
    /// Unix seconds: when it was confirmed (or put in force needing no confirmation).
    Confirmed { at: u64 },
    /// Reverted at `deadline` (Unix seconds) unless confirmed; by the control plane's ack of
    /// report `report` (the run that applied it), or by a person.
    Pending {
        deadline: u64,
        by: Confirmer,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<u64>,
    },
    /// Replaced while it was pending: never confirmed.
    Unconfirmed,
    /// Not confirmed in time, and reverted at `at`.
    Reverted { at: u64 },
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Confirmed { .. } => "confirmed",
            State::Pending { .. } => "pending",
            State::Unconfirmed => "unconfirmed",
            State::Reverted { .. } => "reverted",
        }
    }
}

/// Who confirms a pending declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confirmer {
    /// `mesh-host confirm` (after `apply --confirm SECS`).
    Person,
    /// The control plane, by acking the report of the run that applied it.
    ControlPlane,
}

/// A pending declaration taken back, not confirmed in time, as the store keeps it until the next
/// one is put in force (the link's `Reverted`, in the hello and the report, is made from it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reverted {
    /// The revision taken back, and its digest.
    pub revision: Option<u64>,
    pub digest: String,
    /// Unix seconds.
    pub at: u64,
    /// Why it was not confirmed, as the host knows it (the link's last error).
    pub why: String,
    /// The confirmed generation put back in force.
    pub to_revision: Option<u64>,
    pub to_digest: String,
    /// It is signed and its signature has expired: held anyway, to get the machine back.
    #[serde(default)]
    pub signature_expired: bool,
}

impl Generations {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty() && self.reverted.is_none()
    }

    pub fn current(&self) -> Option<&Generation> {
        self.list.last()
    }

    /// The deadline of the declaration in force, when it is pending.
    pub fn pending(&self) -> Option<(u64, Confirmer)> {
        match self.current()?.state {
            State::Pending { deadline, by, .. } => Some((deadline, by)),
            _ => None,
        }
    }

    /// Whether the declaration in force is pending and its deadline has passed at `now`.
    pub fn due(&self, now: u64) -> bool {
        self.pending().is_some_and(|(deadline, _)| deadline <= now)
    }

    /// Adds the declaration put in force (one pending before it was never confirmed), keeping
    /// the newest `keep` but never the newest confirmed one (what a revert goes back to); forgets
    /// the last revert. Returns the digests no generation refers to any more.
    pub fn push(&mut self, generation: Generation, keep: usize) -> Vec<String> {
        if let Some(last) = self.list.last_mut() {
            if matches!(last.state, State::Pending { .. }) {
                last.state = State::Unconfirmed;
            }
        }
        self.list.push(generation);
        self.reverted = None;
        self.prune(keep)
    }

    fn prune(&mut self, keep: usize) -> Vec<String> {
        let confirmed = self.last_confirmed(self.list.len());
        let mut excess = self.list.len().saturating_sub(keep.max(1));
        let mut dropped = Vec::new();
        let mut i = 0;
        while excess > 0 && i < self.list.len() {
            if Some(i) == confirmed.map(|c| c - dropped.len()) {
                i += 1;
                continue;
            }
            dropped.push(self.list.remove(i).digest);
            excess -= 1;
        }
        dropped.retain(|d| self.list.iter().all(|g| &g.digest != d));
        dropped.sort();
        dropped.dedup();
        dropped
    }

    /// The newest confirmed generation before index `before`.
    fn last_confirmed(&self, before: usize) -> Option<usize> {
        self.list[..before.min(self.list.len())]
            .iter()
            .rposition(|g| matches!(g.state, State::Confirmed { .. }))
    }

    /// What a revert of the declaration in force goes back to: the newest confirmed generation
    /// before it.
    pub fn revert_target(&self) -> Option<&Generation> {
        let before = self.list.len().checked_sub(1)?;
        self.last_confirmed(before).map(|i| &self.list[i])
    }

    /// What `rollback` goes back to: the generation of `to`, or the newest one before the
    /// declaration in force that differs from it. The error says why there is none.
    pub fn rollback_target(&self, to: Option<u64>) -> Result<&Generation, String> {
        let Some(current) = self.current() else {
            return Err("nothing to roll back to: no generation is kept".into());
        };
        let earlier = &self.list[..self.list.len() - 1];
        let differs = |g: &&Generation| g.digest != current.digest;
        match to {
            None => earlier.iter().rev().find(differs).ok_or_else(|| {
                "nothing to roll back to: no earlier generation differs from the declaration in \
                 force"
                    .into()
            }),
            Some(revision) => {
                let of = |g: &&Generation| g.revision == Some(revision);
                if let Some(g) = earlier.iter().rev().filter(of).find(differs) {
                    return Ok(g);
                }
                if current.revision == Some(revision) {
                    return Err(format!(
                        "revision {revision} is the declaration in force; nothing was changed"
                    ));
                }
                let kept: Vec<String> = (self.list.iter())
                    .map(|g| g.revision.map_or("none".into(), |r| r.to_string()))
                    .collect();
                Err(format!(
                    "no such revision: {revision} is not among the generations kept (revisions {})",
                    kept.join(", ")
                ))
            }
        }
    }

    /// A person's `confirm`: whether a pending declaration was confirmed.
    pub fn confirm(&mut self, now: u64) -> bool {
        match self.list.last_mut() {
            Some(g) if matches!(g.state, State::Pending { .. }) => {
                g.state = State::Confirmed { at: now };
                true
            }
            _ => false,
        }
    }

    /// The run that applied the pending declaration `digest` queued report `id`: its ack
    /// confirms it. Whether anything changed.
    pub fn await_ack(&mut self, digest: &str, id: u64) -> bool {
        match self.list.last_mut() {
            Some(Generation {
                digest: d,
                state:
                    State::Pending {
                        by: Confirmer::ControlPlane,
                        report: report @ None,
                        ..
                    },
                ..
            }) if d == digest => {
                *report = Some(id);
                true
            }
            _ => false,
        }
    }

    /// The control plane acked every report up to `id`: confirms the pending declaration whose
    /// run's report is among them. Whether it did.
    pub fn confirm_by_ack(&mut self, id: u64, now: u64) -> bool {
        match self.list.last_mut() {
            Some(g) => match g.state {
                State::Pending {
                    by: Confirmer::ControlPlane,
                    report: Some(report),
                    ..
                } if report <= id => {
                    g.state = State::Confirmed { at: now };
                    true
                }
                _ => false,
            },
            None => false,
        }
    }
}

/// What `Store::revert_due` did.
pub enum Revert {
    /// Nothing pending past its deadline.
    NotDue,
    /// Pending past its deadline, but no confirmed generation before it: it stays in force,
    /// no longer pending, and this says why.
    Nothing(String),
    Reverted(Reverted),
}

impl Store {
    /// `generations.json`; none kept yet reads as empty.
    pub fn generations(&self) -> Result<Generations, StoreError> {
        Ok(self.read_json(GENERATIONS)?.unwrap_or_default())
    }

    fn save_generations(&self, generations: &Generations) -> Result<(), StoreError> {
        self.write_json(GENERATIONS, generations)
    }

    fn texts(&self) -> Result<crate::os::fsutil::Dir, StoreError> {
        self.dir
            .mkdir_durable(OsStr::new(TEXTS), 0o700)
            .and_then(|_| self.dir.child(OsStr::new(TEXTS)))
            .map_err(|e| self.error(TEXTS, format!("cannot be opened: {e}")))
    }

    /// The text kept under `digest`, unchecked.
    pub(super) fn text(&self, digest: &str) -> Result<Vec<u8>, StoreError> {
        let file = text_file(digest);
        match self.texts()?.read(OsStr::new(&file), MAX_STORE_FILE) {
            Ok(Some((_, bytes))) => Ok(bytes),
            Ok(None) => Err(self.error(&text_name(digest), "is missing")),
            Err(e) => Err(self.error(&text_name(digest), format!("cannot be read: {e}"))),
        }
    }

    /// A generation's text, checked against its digest: a damaged one is refused, never applied.
    pub fn generation_text(&self, generation: &Generation) -> Result<Vec<u8>, StoreError> {
        let bytes = self.text(&generation.digest)?;
        let found = codec::sha256_hex(&bytes);
        if found != generation.digest {
            return Err(self.error(
                &text_name(&generation.digest),
                format!(
                    "its text does not match its digest ({found} found): it is damaged, and \
                     nothing of it is applied; it was left as it is for you to inspect"
                ),
            ));
        }
        Ok(bytes)
    }

    /// Keeps `text` under `digest`, unless a file whose bytes match it is there already (hashed
    /// as it is read: a large declaration's text is not held twice).
    pub(super) fn save_text(&self, digest: &str, text: &[u8]) -> Result<(), StoreError> {
        let texts = self.texts()?;
        let file = text_file(digest);
        let name = OsStr::new(&file);
        let kept = match texts.open_reader(name, MAX_STORE_FILE) {
            Ok(Some(stored)) => codec::sha256_of_reader(stored)
                .is_ok_and(|sha| codec::hex32(&sha).as_slice() == digest.as_bytes()),
            _ => false,
        };
        if kept {
            return Ok(());
        }
        texts
            .write_atomic(name, text, 0o600, None)
            .map_err(|e| self.error(&text_name(digest), format!("cannot be written: {e}")))
    }

    /// Puts `in_force` in force as a new generation in `state`, keeping `keep`. The generation is
    /// durable before the declaration in force names it: a crash between the two leaves a
    /// generation whose revert is to what is still in force. A store from before generations has
    /// its declaration in force kept first, as confirmed.
    pub fn put_in_force(
        &self,
        in_force: &InForce,
        state: State,
        keep: usize,
    ) -> Result<(), StoreError> {
        // What cannot be read never stops a new declaration (the way out of a damaged store):
        // the history starts again, and the unreadable file is set aside for a person.
        let mut generations = match self.generations() {
            Ok(generations) => generations,
            Err(e) => {
                self.set_aside_generations(&e, in_force.since);
                Generations::default()
            }
        };
        if generations.list.is_empty() {
            if let Ok(Some(old)) = self.in_force() {
                self.save_text(&old.digest, &old.text)?;
                generations
                    .list
                    .push(generation_of(&old, State::Confirmed { at: old.since }));
            }
        }
        self.save_text(&in_force.digest, &in_force.text)?;
        let unused = generations.push(generation_of(in_force, state), keep);
        self.save_generations(&generations)?;
        self.write_in_force_record(in_force)?;
        self.remove_texts(&unused);
        Ok(())
    }

    /// Removes the temp files of texts a crash left half written (the store's lock is held).
    pub(super) fn remove_generation_temps(&self) -> Result<(), StoreError> {
        let Ok(texts) = self.dir.child(OsStr::new(TEXTS)) else {
            return Ok(());
        };
        let entries = std::fs::read_dir(self.path.join(TEXTS))
            .map_err(|e| self.error(TEXTS, format!("cannot be listed: {e}")))?;
        for name in entries.flatten().map(|e| e.file_name()) {
            let temp = name
                .to_str()
                .is_some_and(|n| n.starts_with('.') && n.ends_with(super::TEMP_SUFFIX));
            if temp {
                texts
                    .remove(&name)
                    .map_err(|e| self.error(TEXTS, format!("cannot be cleaned: {e}")))?;
            }
        }
        Ok(())
    }

    /// Moves an unreadable `generations.json` aside, named after `now` (Unix seconds).
    fn set_aside_generations(&self, why: &StoreError, now: u64) {
        let aside = format!("{GENERATIONS}.unreadable-{now}");
        let moved = std::fs::rename(self.path.join(GENERATIONS), self.path.join(&aside))
            .and_then(|()| self.dir.sync());
        match moved {
            Ok(()) => log::error!("{why}; set aside as {aside}: the generations start again"),
            Err(e) => log::error!("{why}; and it cannot be set aside: {e}"),
        }
    }

    fn remove_texts(&self, digests: &[String]) {
        let Ok(texts) = self.texts() else { return };
        for digest in digests {
            let file = text_file(digest);
            if let Err(e) = texts.remove(OsStr::new(&file)) {
                log::warn!(
                    "{}: not removed: {e}",
                    self.path.join(TEXTS).join(&file).display()
                );
            }
        }
    }

    /// Changes the generations with `change` (which says whether it changed them), saved when
    /// it did. The caller holds the store's lock.
    pub fn change_generations(
        &self,
        change: impl FnOnce(&mut Generations) -> bool,
    ) -> Result<bool, StoreError> {
        let mut generations = self.generations()?;
        let changed = change(&mut generations);
        if changed {
            self.save_generations(&generations)?;
        }
        Ok(changed)
    }

    /// Puts `target` back in force as a new generation (confirmed: a person chose it, or it was
    /// confirmed before), keeping the control plane's newest revision so it is not pushed again
    /// as new. The caller holds the store's lock.
    pub fn restore(
        &self,
        target: &Generation,
        now: u64,
        keep: usize,
        reverted: Option<Reverted>,
    ) -> Result<(), StoreError> {
        let text = self.generation_text(target)?;
        let newest = self.in_force_head()?.and_then(|f| f.control_plane_revision);
        let mut generations = self.generations()?;
        if let (Some(last), Some(_)) = (generations.list.last_mut(), &reverted) {
            last.state = State::Reverted { at: now };
        }
        let in_force = InForce {
            source: target.source.clone(),
            revision: target.revision,
            digest: target.digest.clone(),
            since: now,
            text,
            control_plane_revision: newest,
            signed_by: target.signed_by.clone(),
            expires: target.expires,
        };
        let state = State::Confirmed { at: now };
        let unused = generations.push(generation_of(&in_force, state), keep);
        generations.reverted = reverted;
        self.save_generations(&generations)?;
        self.write_in_force_record(&in_force)?;
        self.remove_texts(&unused);
        Ok(())
    }

    /// When the declaration in force is pending past its deadline at `now`: the newest confirmed
    /// generation before it is put back in force, and the revert is kept for the report, the
    /// hello and `status`. `why` is what the host knows of why it was not confirmed. The caller
    /// holds the store's lock.
    pub fn revert_due(&self, now: u64, why: &str, keep: usize) -> Result<Revert, StoreError> {
        let generations = self.generations()?;
        if !generations.due(now) {
            return Ok(Revert::NotDue);
        }
        let Some(current) = generations.current().cloned() else {
            return Ok(Revert::NotDue);
        };
        let Some(target) = generations.revert_target().cloned() else {
            self.change_generations(|g| {
                if let Some(last) = g.list.last_mut() {
                    last.state = State::Unconfirmed;
                }
                true
            })?;
            return Ok(Revert::Nothing(format!(
                "revision {} was not confirmed in time, but no confirmed generation is kept to \
                 go back to: it stays in force",
                words_revision(current.revision)
            )));
        };
        let reverted = Reverted {
            revision: current.revision,
            digest: current.digest.clone(),
            at: now,
            why: why.to_string(),
            to_revision: target.revision,
            to_digest: target.digest.clone(),
            signature_expired: target.expired(now),
        };
        self.restore(&target, now, keep, Some(reverted.clone()))?;
        Ok(Revert::Reverted(reverted))
    }
}

/// Where a generation's text is kept, in `generations/`: its digest, as a JSON file.
fn text_file(digest: &str) -> String {
    format!("{digest}.json")
}

/// The text's file as the store's errors name it.
pub(super) fn text_name(digest: &str) -> String {
    format!("{TEXTS}/{}", text_file(digest))
}

/// The deadline of a declaration pending `secs` (from `what`: the link's `confirm_secs`,
/// `apply --confirm`) from unix time `now`. Refused past `MAX_CONFIRM_SECS`: a deadline that
/// wrapped would be in the past, and the next command would revert the declaration at once.
pub fn confirm_deadline(now: u64, secs: u64, what: &str) -> Result<u64, String> {
    let max = crate::model::config::MAX_CONFIRM_SECS;
    match now.checked_add(secs) {
        Some(deadline) if secs <= max => Ok(deadline),
        _ => Err(format!(
            "{what}: expected a whole number of seconds from 0 to {max}, found {secs}"
        )),
    }
}

/// A revision as people read it (`none` for a declaration without one).
pub fn words_revision(revision: Option<u64>) -> String {
    revision.map_or("none".into(), |r| r.to_string())
}

fn generation_of(in_force: &InForce, state: State) -> Generation {
    Generation {
        revision: in_force.revision,
        digest: in_force.digest.clone(),
        source: in_force.source.clone(),
        applied: in_force.since,
        signed_by: in_force.signed_by.clone(),
        expires: in_force.expires,
        state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_window_past_its_range_or_the_clock_is_refused() {
        assert_eq!(confirm_deadline(1000, 300, "confirm_secs"), Ok(1300));
        let max = crate::model::config::MAX_CONFIRM_SECS;
        assert_eq!(confirm_deadline(1000, max, "x"), Ok(1000 + max));
        for (now, secs) in [(1000, max + 1), (1000, u64::MAX), (u64::MAX, 1)] {
            let err = confirm_deadline(now, secs, "--confirm").unwrap_err();
            assert_eq!(
                err,
                format!(
                    "--confirm: expected a whole number of seconds from 0 to {max}, found {secs}"
                )
            );
        }
    }
    use crate::util::testutil::TempDir;

    fn generation(revision: u64, state: State) -> Generation {
        Generation {
            revision: Some(revision),
            digest: format!("d{revision}"),
            source: Source::ControlPlane,
            applied: revision,
            signed_by: Vec::new(),
            expires: None,
            state,
        }
    }

    const OK: State = State::Confirmed { at: 0 };

    fn pending(deadline: u64, by: Confirmer) -> State {
        State::Pending {
            deadline,
            by,
            report: None,
        }
    }

    fn revisions(g: &Generations) -> Vec<u64> {
        g.list.iter().filter_map(|g| g.revision).collect()
    }

    /// The newest `keep` are kept, but never at the cost of the newest confirmed one; a digest
    /// still used by a kept generation is not given back for removal.
    #[test]
    fn pruning_keeps_the_newest_and_the_last_confirmed() {
        let mut g = Generations::default();
        for r in 1..=3 {
            assert!(g.push(generation(r, OK), 3).is_empty());
        }
        assert_eq!(g.push(generation(4, OK), 3), vec!["d1".to_string()]);
        assert_eq!(revisions(&g), [2, 3, 4]);
        // Pending ones pile up: the confirmed 4 stays, the older ones go.
        for r in 5..=7 {
            g.push(generation(r, pending(100, Confirmer::ControlPlane)), 3);
        }
        assert_eq!(revisions(&g), [4, 6, 7]);
        assert_eq!(g.list[1].state, State::Unconfirmed);
        assert_eq!(g.revert_target().and_then(|t| t.revision), Some(4));
        // The same declaration twice: its text stays while one of them is kept.
        let mut same = Generations::default();
        same.push(generation(1, OK), 2);
        same.push(generation(2, OK), 2);
        let mut again = generation(3, OK);
        again.digest = "d1".into();
        assert!(same.push(again, 2).is_empty());
        assert_eq!(same.push(generation(4, OK), 2), vec!["d2".to_string()]);
    }

    /// Due only past the deadline and only while pending; a person confirms it, an ack confirms
    /// it only once the run's report is known and covered.
    #[test]
    fn deadlines_and_confirmations() {
        let mut g = Generations::default();
        g.push(generation(1, OK), 5);
        assert!(!g.due(1000));
        g.push(generation(2, pending(100, Confirmer::ControlPlane)), 5);
        assert!(!g.due(99));
        assert!(g.due(100));
        assert!(!g.confirm_by_ack(50, 10), "no report of its run yet");
        assert!(!g.await_ack("d1", 7), "another declaration's run");
        assert!(g.await_ack("d2", 7));
        assert!(!g.confirm_by_ack(6, 10));
        assert!(g.confirm_by_ack(9, 10));
        assert_eq!(
            g.current().map(|c| c.state),
            Some(State::Confirmed { at: 10 })
        );
        assert!(!g.due(1000));
        g.push(generation(3, pending(100, Confirmer::Person)), 5);
        assert!(!g.await_ack("d3", 1) && !g.confirm_by_ack(100, 10));
        assert!(g.confirm(11));
        assert!(!g.confirm(12), "nothing pending");
    }

    #[test]
    fn rollback_targets_and_their_errors() {
        let mut g = Generations::default();
        assert!(g
            .rollback_target(None)
            .unwrap_err()
            .contains("nothing to roll back to"));
        g.push(generation(1, OK), 5);
        assert!(g
            .rollback_target(None)
            .unwrap_err()
            .contains("nothing to roll back to"));
        g.push(generation(2, OK), 5);
        g.push(generation(3, OK), 5);
        assert_eq!(g.rollback_target(None).unwrap().revision, Some(2));
        assert_eq!(g.rollback_target(Some(1)).unwrap().revision, Some(1));
        let e = g.rollback_target(Some(9)).unwrap_err();
        assert_eq!(
            e,
            "no such revision: 9 is not among the generations kept (revisions 1, 2, 3)"
        );
        let e = g.rollback_target(Some(3)).unwrap_err();
        assert!(e.contains("revision 3 is the declaration in force"), "{e}");
    }

    /// The store: a generation is kept with its text, a damaged text is refused, a revert puts
    /// the last confirmed one back and says so; a store from before generations keeps its
    /// declaration in force as the first, confirmed.
    #[test]
    fn put_in_force_revert_and_damaged_texts() {
        let tmp = TempDir::new("generations");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        let in_force = |r: u64, text: &str| InForce {
            source: Source::ControlPlane,
            revision: Some(r),
            digest: codec::sha256_hex(text.as_bytes()),
            since: r,
            text: text.as_bytes().to_vec(),
            control_plane_revision: Some(r),
            signed_by: Vec::new(),
            expires: None,
        };
        store.set_in_force(&in_force(1, "{\"a\": 1}")).unwrap();
        let two = in_force(2, "{\"a\": 2}");
        let state = pending(50, Confirmer::ControlPlane);
        store.put_in_force(&two, state, 5).unwrap();
        let g = store.generations().unwrap();
        assert_eq!(revisions(&g), [1, 2]);
        assert_eq!(g.list[0].state, State::Confirmed { at: 1 });
        assert!(matches!(
            store.revert_due(49, "x", 5).unwrap(),
            Revert::NotDue
        ));
        let Revert::Reverted(r) = store.revert_due(50, "link down", 5).unwrap() else {
            panic!("not reverted")
        };
        assert_eq!(
            (r.revision, r.to_revision, r.why.as_str()),
            (Some(2), Some(1), "link down")
        );
        let now = store.in_force().unwrap().unwrap();
        assert_eq!(
            (now.revision, now.control_plane_revision),
            (Some(1), Some(2))
        );
        let g = store.generations().unwrap();
        assert_eq!(revisions(&g), [1, 2, 1]);
        assert_eq!(g.list[1].state, State::Reverted { at: 50 });
        assert_eq!(g.reverted.as_ref(), Some(&r));
        // An unreadable history never stops a new declaration: set aside, started again.
        std::fs::write(tmp.path().join(GENERATIONS), "{ torn").unwrap();
        assert!(store.generations().is_err());
        store
            .put_in_force(&in_force(3, "{\"a\": 3}"), OK, 5)
            .unwrap();
        assert_eq!(revisions(&store.generations().unwrap()), [1, 3]);
        let g = store.generations().unwrap();
        // Damaged: refused by name.
        let file = tmp.path().join(TEXTS).join(text_file(&g.list[0].digest));
        std::fs::write(&file, "{\"a\": 4}").unwrap();
        let e = store.generation_text(&g.list[0]).unwrap_err().to_string();
        assert!(e.contains("its text does not match its digest"), "{e}");
    }
}
