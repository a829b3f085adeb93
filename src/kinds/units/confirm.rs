//! systemd's own word on the host's units, the second layer of self-protection: the model
//! (`selfref`) predicts at `check`; on a live machine this confirms. What the manager says of the
//! host's units and their activation siblings is taken before a run touches a unit file or link,
//! and again once the files are written, the manager reloaded and the units enabled, before any
//! is started; whatever they gained (a name, a fragment, a drop-in, a dependency), or a touched
//! unit's new dependency on them, means the run reaches the host, and its unit files and links
//! are put back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{apply_file, unit_dir, Change, Enablement, FileChange, Op, Original};
use crate::kinds::{files, Env, KindError, RunContext};
use crate::model::unitfile::UnitName;
use crate::os::fsutil::{self, Dir};
use crate::store::Ledger;
use crate::tools::systemctl::{self, Standing};

/// What systemd said before the run touched a unit file, in the order `look` asks: the units
/// whose files or links the units kind changes, the units the files kind's files in systemd's
/// directories name (drop-ins, links), then the host's units.
pub struct Before {
    touched: Vec<String>,
    named: Vec<String>,
    /// The files kind's files in systemd's directories changed in this run.
    files: Vec<String>,
    units: Vec<Standing>,
}

impl Before {
    /// Whether the files kind changed files systemd reads: the manager is reloaded for them.
    pub fn has_files(&self) -> bool {
        !self.files.is_empty()
    }

    /// What `look` asks about, in order: the touched units, the named ones, the host's.
    fn names<'a>(&'a self, host: &'a [String]) -> Vec<&'a str> {
        let all = self.touched.iter().chain(&self.named).chain(host);
        all.map(String::as_str).collect()
    }
}

/// The host's units and their activation siblings (`mesh-host.service`, `.socket`, `.timer`,
/// `.path`, and the same of `unit_name`).
fn host_units(env: &Env) -> Vec<String> {
    crate::model::selfref::host_units(&env.config.identity)
        .into_iter()
        .map(|(unit, _)| unit)
        .collect()
}

/// A name systemd can describe: a template is none (`show` refuses its name).
fn describable(name: &str) -> bool {
    UnitName::parse(name).is_ok_and(|n| !n.is_template())
}

/// The units a file in a systemd directory is about: `X.d/*.conf` -> X, `X.wants/Y` -> X and Y,
/// a unit file or link `X` -> X.
fn units_of(path: &str) -> Vec<String> {
    let path = Path::new(path);
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string()
    };
    let (file, dir) = (name(Some(path)), name(path.parent()));
    let dir_unit = [".d", ".wants", ".requires", ".upholds"]
        .iter()
        .find_map(|suffix| dir.strip_suffix(suffix));
    match dir_unit {
        Some(unit) if dir.ends_with(".d") => vec![unit.to_string()],
        Some(unit) => vec![unit.to_string(), file],
        None => vec![file],
    }
}

/// What the manager says of these units now, in order: one `systemctl show`. The touched units
/// are asked about for their own dependencies: a unit nothing refers to is unloaded again at
/// once, so its `Wants=` never shows on the host's unit.
fn look(env: &Env, names: &[&str]) -> Result<Vec<Standing>, KindError> {
    let output = env
        .runner
        .run(&env.config.systemctl, &systemctl::show_standing(), names)
        .map_err(|e| KindError::command("confirm", e))?;
    let standing = systemctl::parse_standing(&output.stdout_text());
    if standing.len() != names.len() {
        return Err(format!(
            "`systemctl show` described {} units, asked about {} ({})",
            standing.len(),
            names.len(),
            names.join(" ")
        )
        .into());
    }
    Ok(standing)
}

/// What systemd says before the run touches the `touched` units' files or links, with `files`
/// the files kind changed in systemd's directories: what `check` compares with.
pub fn before(env: &Env, touched: &[&str], files: &BTreeSet<String>) -> Result<Before, KindError> {
    let host = host_units(env);
    let touched: Vec<String> = (touched.iter())
        .filter(|name| describable(name))
        .map(|name| name.to_string())
        .collect();
    let named: BTreeSet<String> = (files.iter())
        .flat_map(|path| units_of(path))
        .filter(|name| describable(name) && !touched.contains(name) && !host.contains(name))
        .collect();
    let mut before = Before {
        touched,
        named: named.into_iter().collect(),
        files: files.iter().cloned().collect(),
        units: Vec::new(),
    };
    before.units = look(env, &before.names(&host))?;
    Ok(before)
}

/// Whether systemd, asked again, says the host's units are as `before` and nothing the run
/// touched acts on them: `Err` with what changed, or why systemd could not be asked (then
/// nothing is taken as confirmed).
pub fn check(env: &Env, before: &Before) -> Result<(), String> {
    let host = host_units(env);
    let after =
        look(env, &before.names(&host)).map_err(|e| format!("systemd could not be asked: {e}"))?;
    let (touched, named) = (before.touched.len(), before.named.len());
    let (touched_was, rest_was) = before.units.split_at(touched);
    let host_was = &rest_was[named..];
    let (touched_now, rest_now) = after.split_at(touched);
    let (named_now, host_now) = rest_now.split_at(named);
    let host_names: BTreeSet<&str> = (host.iter().map(String::as_str))
        .chain(
            host_was
                .iter()
                .flat_map(|s| s.lists["Names"].iter().map(String::as_str)),
        )
        .collect();
    let names_host = |word: &str| host_names.contains(word);
    let mut changed = gained(&host, host_was, host_now, |_| true);
    changed.extend(gained(
        &before.touched,
        touched_was,
        touched_now,
        names_host,
    ));
    // The files kind's files were on disk before `before` was asked, and a unit not loaded then
    // was read with them: whatever those units say of the host's units counts, not only a gain.
    let nothing = vec![Standing::default(); named];
    changed.extend(gained(&before.named, &nothing, named_now, names_host));
    for (unit, now) in host.iter().zip(host_now) {
        let read: Vec<&str> = (["FragmentPath", "SourcePath"].iter().map(|p| now.value(p)))
            .chain(now.lists["DropInPaths"].iter().map(String::as_str))
            .filter(|path| before.files.iter().any(|f| f == path))
            .collect();
        if !read.is_empty() {
            changed.push(format!("{unit} is read from {}", read.join(" ")));
        }
    }
    if changed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "systemd, reloaded, says the host's own units changed: {}",
        changed.join("; ")
    ))
}

/// After the files, the reload and `enable`, before anything starts: unless systemd says the
/// host's units are as `before`, every unit file this run changed is put back (`previous`; a
/// created one removed), every link `enable` said it created is removed (`links`; never
/// `disable`, which follows `Also=` to units whose links were there before), the files kind's
/// files in systemd's directories are put back, the manager is reloaded, and each of those units
/// and files fails with what systemd said (the files through `files::refused`, which
/// `reconcile` turns into their outcomes); the run's notes say it too.
#[allow(clippy::too_many_arguments)]
pub fn after<'a>(
    env: &Env,
    cx: &RunContext,
    ledger: &mut Ledger,
    before: &Before,
    changes: &'a [Change<Op, Original>],
    reloaded: Result<(), String>,
    previous: &[(&'a str, Option<Vec<u8>>)],
    links: &[(String, String)],
    errors: &mut BTreeMap<&'a str, KindError>,
) {
    let verdict = match reloaded {
        Ok(()) => check(env, before),
        Err(e) => Err(format!(
            "the manager's reload failed ({e}), so systemd could not confirm them"
        )),
    };
    let Err(why) = verdict else {
        return;
    };
    let enabled: Vec<&str> = changes
        .iter()
        .filter(|c| c.op.enablement == Enablement::Enable && !errors.contains_key(c.key.as_str()))
        .map(|c| c.key.as_str())
        .collect();
    let undone = put_back(env, cx, ledger, before, links, previous);
    let names: BTreeSet<&str> = previous
        .iter()
        .map(|(name, _)| *name)
        .chain(enabled)
        .collect();
    let files = match before.files.is_empty() {
        true => String::new(),
        false => format!("; files put back: {}", before.files.join(", ")),
    };
    let reason = format!("not applied: {why}; {undone}{files}");
    // Named in the run's notes too, the files kind's files among them.
    let what: Vec<&str> = names
        .iter()
        .copied()
        .chain(before.files.iter().map(String::as_str))
        .collect();
    env.runner.note(format!(
        "rolled back, as systemd said the host's own units changed: {}",
        what.join(", ")
    ));
    for path in &before.files {
        files::refused(cx, path, &reason);
    }
    // A unit that had failed already (its enable refused) keeps that reason before this one.
    for name in names {
        let why = match errors.remove(name) {
            Some(e) => format!("{e}; {reason}"),
            None => reason.clone(),
        };
        errors.insert(name, KindError::Reason(why));
    }
}

/// Undoes the run's unit file and link changes and says how it went, systemd asked once more.
fn put_back(
    env: &Env,
    cx: &RunContext,
    ledger: &mut Ledger,
    before: &Before,
    links: &[(String, String)],
    previous: &[(&str, Option<Vec<u8>>)],
) -> String {
    let mut problems = Vec::new();
    for (link, target) in links {
        if let Err(e) = remove_link(env, link, target) {
            problems.push(e);
        }
    }
    let dir = unit_dir(env);
    for (name, was) in previous {
        let change = match was {
            Some(bytes) => FileChange::Write(bytes.clone()),
            None => FileChange::Remove,
        };
        let secret = cx
            .declaration
            .units
            .get(*name)
            .is_some_and(super::is_secret);
        if let Err(e) = apply_file(env, &dir, name, &change, secret) {
            problems.push(e);
        }
    }
    for path in &before.files {
        if let Err(e) = files::put_back(env, cx, ledger, path) {
            problems.push(e);
        }
    }
    let reload = systemctl::daemon_reload();
    if let Err(e) = env.runner.run(&env.config.systemctl, &reload, &[]) {
        problems.push(format!("daemon-reload: {e}"));
    }
    match (check(env, before), problems.is_empty()) {
        (Ok(()), true) => "its unit file and links were put back as they were, and systemd \
                           confirms the host's units are as before"
            .to_string(),
        (Ok(()), false) => format!(
            "putting its unit file and links back failed ({}), though systemd says the host's \
             units are as before",
            problems.join("; ")
        ),
        (Err(still), _) => format!(
            "its unit file and links were put back{}, yet {still}: a person must look",
            match problems.is_empty() {
                true => String::new(),
                false => format!(" in part ({})", problems.join("; ")),
            }
        ),
    }
}

/// Removes the link `enable` made at `link` to `target`, durably, if it is still that link (a
/// symlink to a file of the same name): anything else there is not this run's to take.
fn remove_link(env: &Env, link: &str, target: &str) -> Result<(), String> {
    let at = |e: &dyn std::fmt::Display| format!("link {link}: {e}");
    let root = Dir::open(env.root).map_err(|e| at(&e))?;
    let Some(parent) = fsutil::walk_to_parent(&root, Path::new(link), false).map_err(|e| at(&e))?
    else {
        return Ok(());
    };
    let Some(found) = parent.dir.read_link(&parent.name).map_err(|e| at(&e))? else {
        return Ok(());
    };
    if found.file_name() != Path::new(target).file_name() {
        return Err(at(&format!(
            "now points to {}, not {target}: left as it is",
            found.display()
        )));
    }
    parent.dir.remove(&parent.name).map_err(|e| at(&e))?;
    parent.dir.sync().map_err(|e| at(&e))
}

/// What each unit gained from `before` to `after`, a line each: another id, fragment, source,
/// load or enablement state, and any name (an alias), drop-in or dependency it had not, of those
/// `counts` (for a unit the run touched, only the host's names: its own file is the run's to
/// change). What it lost is not counted: a unit released or disabled may take a dependency away.
pub fn gained(
    names: &[String],
    before: &[Standing],
    after: &[Standing],
    counts: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for ((name, was), now) in names.iter().zip(before).zip(after) {
        for (property, value) in &now.values {
            let old = was.value(property);
            if old != value && counts(value) {
                out.push(format!("{name} {property}={value} (was {old:?})"));
            }
        }
        for (property, words) in &now.lists {
            let new: Vec<&str> = words
                .iter()
                .filter(|w| !was.lists.get(property).is_some_and(|old| old.contains(*w)))
                .filter(|w| counts(w))
                .map(String::as_str)
                .collect();
            if !new.is_empty() {
                out.push(format!("{name} {property}= gained {}", new.join(" ")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing(text: &str) -> Standing {
        systemctl::parse_standing(text).remove(0)
    }

    fn diff(before: &str, after: &str) -> Vec<String> {
        gained(
            &["mesh-host.service".to_string()],
            &[standing(before)],
            &[standing(after)],
            |_| true,
        )
    }

    const HOST: &str = "Id=mesh-host.service\nNames=mesh-host.service\nLoadState=loaded\n\
        FragmentPath=/usr/lib/systemd/system/mesh-host.service\nUnitFileState=enabled\n\
        WantedBy=multi-user.target\nBefore=foo.service\n";

    #[test]
    fn the_units_a_file_in_a_systemd_directory_is_about() {
        let d = "/etc/systemd/system";
        assert_eq!(units_of(&format!("{d}/a.service.d/x.conf")), ["a.service"]);
        assert_eq!(units_of(&format!("{d}/service.d/x.conf")), ["service"]);
        assert_eq!(
            units_of(&format!("{d}/a.service.wants/b.service")),
            ["a.service", "b.service"]
        );
        assert_eq!(units_of(&format!("{d}/a.service")), ["a.service"]);
        assert!(!describable("service") && !describable("a@.service") && describable("a.path"));
    }

    #[test]
    fn the_same_view_or_what_was_lost_is_confirmed() {
        assert!(diff(HOST, HOST).is_empty());
        let lost = HOST.replace("WantedBy=multi-user.target", "WantedBy=");
        assert!(diff(HOST, &lost).is_empty());
        // Ordering is not asked about (`After=mesh-host.service` elsewhere acts on nothing).
        assert!(diff(HOST, &format!("{HOST}Before=foo.service bar.service\n")).is_empty());
    }

    #[test]
    fn what_the_host_gained_is_named() {
        let alias = "Id=evil.service\nNames=evil.service mesh-host.service\nLoadState=loaded\n\
            FragmentPath=/etc/systemd/system/evil.service\nUnitFileState=enabled\n\
            WantedBy=multi-user.target\n";
        assert_eq!(
            diff(HOST, alias),
            [
                r#"mesh-host.service FragmentPath=/etc/systemd/system/evil.service (was "/usr/lib/systemd/system/mesh-host.service")"#,
                r#"mesh-host.service Id=evil.service (was "mesh-host.service")"#,
                "mesh-host.service Names= gained evil.service",
            ]
        );
        let more = format!(
            "{HOST}DropInPaths=/etc/systemd/system/service.d/x.conf\nConflictedBy=a.service\n\
             TriggeredBy=mesh-host.path\n"
        );
        assert_eq!(
            diff(HOST, &more),
            [
                "mesh-host.service ConflictedBy= gained a.service",
                "mesh-host.service DropInPaths= gained /etc/systemd/system/service.d/x.conf",
                "mesh-host.service TriggeredBy= gained mesh-host.path",
            ]
        );
    }
}
