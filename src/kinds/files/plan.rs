//! Planning files, pure: what to do about one file, from its spec, what was observed and its
//! ledger entry; the diffs a plan shows, the original an adoption keeps.

use super::state::{Held, Observed, Op, State};
use crate::kinds::{Action, Change, LedgerAfter, RunContext, Step};
use crate::model::spec::files::{
    content_digest, Content, Files, Original, DEFAULT_MODE, DEFAULT_SECRET_MODE,
};
use crate::model::spec::Named as _;
use crate::os::fsutil::{FileType, Stat};
use crate::store::{Entry, Origin};
use crate::util::diff::ContentDiff;

/// `diffs`: whether the change carries a content diff (`RunContext::diffs`).
pub fn plan_present(
    cx: &RunContext,
    key: &str,
    content: &Content,
    observed: &Observed,
    owned: Option<&Entry<Original>>,
    diffs: bool,
) -> Step<Op, Original> {
    let ids = match (&observed.uid, &observed.gid) {
        (Ok(u), Ok(g)) => (*u, *g),
        (Err(e), _) => return Step::Fail(format!("owner: {e}")),
        (_, Err(e)) => return Step::Fail(format!("group: {e}")),
    };
    match &observed.state {
        State::Blocked(e) => Step::Fail(e.clone()),
        State::Other(t) => Step::Fail(format!(
            "{key} is {}; mesh-host does not replace it",
            t.describe()
        )),
        State::Missing => plan_missing(cx, key, content, owned, diffs, ids),
        State::Regular { stat, held } => {
            plan_regular(cx, key, content, owned, diffs, ids, (stat, held))
        }
    }
}

/// The declared owner and group's ids, where the declaration names them.
type Ids = (Option<u32>, Option<u32>);

/// A declared file that is not there: created.
fn plan_missing(
    cx: &RunContext,
    key: &str,
    content: &Content,
    owned: Option<&Entry<Original>>,
    diffs: bool,
    (uid, gid): Ids,
) -> Step<Op, Original> {
    let mode = match content.is_secret() {
        true => content.mode.unwrap_or(DEFAULT_SECRET_MODE),
        false => content.mode.unwrap_or(DEFAULT_MODE),
    };
    let owner = (uid.is_some() || gid.is_some()).then(|| (uid.unwrap_or(0), gid.unwrap_or(0)));
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Create,
        details: vec![match content.is_secret() {
            true => format!(
                "secret, {}, mode {mode:04o}",
                cx.secret_summary(&content.bytes)
            ),
            false => format!("{} bytes, mode {mode:04o}", content.bytes.len()),
        }]
        .into(),
        diff: diffs.then(|| {
            Box::new(ContentDiff::new(
                "absent",
                "declared",
                None,
                Some(&content.bytes),
                shows_content(Some(content), &[]),
            ))
        }),
        intent: owned.is_none().then(|| Box::new(Entry::created())),
        backup: None,
        // Only a change needs the digest: a no-op over many files must not hash each one again.
        after: LedgerAfter::Applied(content_digest(content)),
        op: Op::Write { mode, owner },
    })
}

/// A declared file that is a regular file: in sync, adopted as it is, or changed (written
/// anew, or its attributes set).
fn plan_regular(
    cx: &RunContext,
    key: &str,
    content: &Content,
    owned: Option<&Entry<Original>>,
    diffs: bool,
    ids: Ids,
    (stat, held): (&Stat, &Held),
) -> Step<Op, Original> {
    let original = match held {
        Held::Declared { .. } => &content.bytes[..],
        Held::Other(bytes) => &bytes[..],
        Held::Unread => return Step::Fail(format!("{key} was not read")),
    };
    let content_differs = matches!(held, Held::Other(_));
    let (mut details, mode, owner) = differences(cx, content, original, content_differs, stat, ids);
    let (intent, backup) = match owned {
        Some(_) => (None, None),
        None => (Some(adopted_entry(key, stat)), Some(original.to_vec())),
    };
    if details.is_empty() {
        return match (intent, backup) {
            (Some(intent), backup) => Step::Adopt { intent, backup },
            _ => Step::InSync,
        };
    }
    let owner = Some(owner);
    // A file with other links is never changed in place: they may be anywhere (another
    // directory, the store), and a new file at this name leaves them as they are.
    let op = if content_differs || stat.links > 1 {
        Op::Write { mode, owner }
    } else {
        Op::SetAttributes { mode, owner }
    };
    if stat.links > 1 {
        details.push(match stat.links - 1 {
            1 => "written as a new file: its other hard link keeps its own".to_string(),
            n => format!("written as a new file: its {n} other hard links keep theirs"),
        });
    }
    let diff = (content_differs && diffs).then(|| {
        Box::new(ContentDiff::new(
            "on the machine",
            "declared",
            Some(original),
            Some(&content.bytes),
            shows_content(Some(content), &[stat.mode]),
        ))
    });
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Update,
        details: details.into(),
        diff,
        intent: intent.map(Box::new),
        backup: backup.map(Vec::into_boxed_slice),
        after: LedgerAfter::Applied(content_digest(content)),
        op,
    })
}

/// What differs between a regular file (`stat`, its content `original`) and its declaration,
/// for people, with the mode and owner it is to have.
fn differences(
    cx: &RunContext,
    content: &Content,
    original: &[u8],
    content_differs: bool,
    stat: &Stat,
    (uid, gid): Ids,
) -> (Vec<String>, u32, (u32, u32)) {
    let mut details = Vec::new();
    if content_differs && content.is_secret() {
        details.push(format!(
            "secret content ({} -> {})",
            cx.secret_summary(original),
            cx.secret_summary(&content.bytes)
        ));
    } else if content_differs {
        details.push(format!(
            "content ({} -> {} bytes)",
            original.len(),
            content.bytes.len()
        ));
    }
    let mode = content.mode.unwrap_or(stat.mode);
    if mode != stat.mode {
        details.push(format!("mode {:04o} -> {mode:04o}", stat.mode));
    }
    let (new_uid, new_gid) = (uid.unwrap_or(stat.uid), gid.unwrap_or(stat.gid));
    if new_uid != stat.uid {
        details.push(format!("owner {} -> {new_uid}", stat.uid));
    }
    if new_gid != stat.gid {
        details.push(format!("group {} -> {new_gid}", stat.gid));
    }
    (details, mode, (new_uid, new_gid))
}

/// Whether a file's content may be shown in a plan's diff: the one place that decides, for a
/// declared file (`declared`) and for one being removed or released (`None`), given the modes
/// its content has on the machine (`modes`: the file's now, an original's to be put back).
/// Never a secret (`is_secret`); nor, unless declared `"secret": false`, content the machine
/// keeps from others (by the same rule, a mode without read for others), as what a file no longer
/// declared held is judged by. Content not shown is summarised by its sizes.
pub fn shows_content(declared: Option<&Content>, modes: &[u32]) -> bool {
    let others_read = modes.iter().all(|mode| mode & 0o004 != 0);
    match declared {
        Some(c) if c.secret == Some(false) => true,
        Some(c) => !c.is_secret() && others_read,
        None => others_read,
    }
}

/// The diff of a file about to be removed (`put_back`: `None`) or to get its original back: what
/// it holds now (when it could be read) against what it will hold.
pub fn removal_diff(
    observed: &Observed,
    put_back: Option<(&[u8], u32)>,
) -> Option<Box<ContentDiff>> {
    let mut modes = Vec::new();
    let now = match &observed.state {
        State::Regular {
            held: Held::Other(bytes),
            stat,
        } => {
            modes.push(stat.mode);
            Some(&bytes[..])
        }
        State::Missing => None,
        _ => return None,
    };
    modes.extend(put_back.map(|(_, mode)| mode));
    let put_back = put_back.map(|(bytes, _)| bytes);
    let (from, to) = match (now, put_back) {
        (None, None) => return None,
        (Some(_), None) => ("on the machine", "absent"),
        (None, Some(_)) => ("absent", "original"),
        (Some(_), Some(_)) => ("on the machine", "original"),
    };
    Some(Box::new(ContentDiff::new(
        from,
        to,
        now,
        put_back,
        shows_content(None, &modes),
    )))
}

pub fn adopted_entry(key: &str, stat: &Stat) -> Entry<Original> {
    let original = Original {
        backup: crate::kinds::backup_key(Files::NAME, key),
        mode: stat.mode,
        uid: stat.uid,
        gid: stat.gid,
    };
    Entry::adopted(Some(original))
}

pub fn plan_absent(
    key: &str,
    observed: &Observed,
    owned: Option<&Entry<Original>>,
    diffs: bool,
) -> Step<Op, Original> {
    let (op, detail) = match &observed.state {
        State::Missing if owned.is_none() => return Step::InSync,
        State::Missing => (Op::Forget, "already absent"),
        State::Regular { .. } | State::Other(FileType::Symlink) => (Op::Remove, "declared absent"),
        State::Other(t) => {
            return Step::Fail(format!(
                "{key} is {}; mesh-host does not remove it",
                t.describe()
            ))
        }
        State::Blocked(e) => return Step::Fail(e.clone()),
    };
    Step::Change(Change {
        key: key.to_string(),
        action: Action::Remove,
        details: vec![detail.to_string()].into(),
        diff: diffs.then(|| removal_diff(observed, None)).flatten(),
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}

pub fn plan_release(
    key: &str,
    observed: &Observed,
    owned: Option<&Entry<Original>>,
    diffs: bool,
) -> Step<Op, Original> {
    let Some(entry) = owned else {
        return Step::InSync;
    };
    let (action, op, detail) = match (entry.origin, &observed.state) {
        (_, State::Blocked(e)) => return Step::Fail(e.clone()),
        (Origin::Created, State::Missing) => (
            Action::Remove,
            Op::Forget,
            "released; already gone".to_string(),
        ),
        (Origin::Created, State::Regular { .. } | State::Other(FileType::Symlink)) => (
            Action::Remove,
            Op::Remove,
            "released; mesh-host created it".to_string(),
        ),
        (Origin::Created, State::Other(t)) => {
            return Step::Fail(format!(
                "{key} is now {}; mesh-host does not remove it",
                t.describe()
            ))
        }
        (Origin::Adopted, _) => match &entry.original {
            Some(original) => (
                Action::Update,
                Op::Restore(Original::clone(original)),
                "released; original restored".to_string(),
            ),
            None => return Step::Fail("the ledger keeps no record of the original".to_string()),
        },
    };
    let diff = match &op {
        _ if !diffs => None,
        Op::Remove => removal_diff(observed, None),
        Op::Restore(original) => (observed.original.as_deref())
            .and_then(|o| removal_diff(observed, Some((o, original.mode)))),
        _ => None,
    };
    Step::Change(Change {
        key: key.to_string(),
        action,
        details: vec![detail].into(),
        diff,
        intent: None,
        backup: None,
        after: LedgerAfter::Disown,
        op,
    })
}
