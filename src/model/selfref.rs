//! The self-refusal model: how systemd finds, loads, enables and starts the host's units, and
//! which paths hold the host's config, credentials, store and binary, so that a declaration that
//! would reach any of them through a unit, a file or a container mount is refused by name. The
//! kinds' `refuse_self` ask it; it is pure (the host's package is checked against pacman's own
//! metadata in `kinds::packages`, before the transaction).

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::model::config::Identity;
use crate::model::unitfile::{self, Owner, UnitName};
use crate::util::sorted;

mod paths;
mod pid1;
mod refusal;
mod tmpfiles;

pub use refusal::{Acting, Mount, Reader, Reason, Refusal};

/// Types whose unit of the host's name starts the host's service by default.
const ACTIVATION_TYPES: [&str; 3] = ["socket", "timer", "path"];

/// Directories systemd reads beside a unit's name: drop-ins and dependency links.
const UNIT_DIR_SUFFIXES: [&str; 4] = [".d", ".wants", ".requires", ".upholds"];

/// `[Section] Key=` directives that tie the units they name to this one: every dependency
/// systemd then lists on the named unit (`systemctl show`: `WantedBy=`, `ConflictedBy=`,
/// `ConsistsOf=`, `TriggeredBy=`, the `After=` a `Before=` gives it, ...), the links and aliases
/// `systemctl enable` makes, and what a timer, path or socket starts. Only `After=` is missing:
/// the unit waits for the host, never the host for it (`Before=` makes the host's start wait for
/// the unit, which can stall it for good).
const ACTING_DIRECTIVES: [(&str, &str); 29] = [
    ("Unit", "Requires"),
    ("Unit", "Requisite"),
    ("Unit", "Wants"),
    ("Unit", "BindsTo"),
    ("Unit", "BindTo"),
    ("Unit", "PartOf"),
    ("Unit", "Upholds"),
    ("Unit", "Conflicts"),
    ("Unit", "Before"),
    ("Unit", "OnFailure"),
    ("Unit", "OnSuccess"),
    ("Unit", "PropagatesReloadTo"),
    ("Unit", "PropagateReloadTo"),
    ("Unit", "ReloadPropagatedFrom"),
    ("Unit", "PropagateReloadFrom"),
    ("Unit", "PropagatesStopTo"),
    ("Unit", "StopPropagatedFrom"),
    ("Unit", "JoinsNamespaceOf"),
    ("Unit", "RequiresOverridable"),
    ("Unit", "RequisiteOverridable"),
    ("Install", "Alias"),
    ("Install", "Also"),
    ("Install", "WantedBy"),
    ("Install", "RequiredBy"),
    ("Install", "UpheldBy"),
    ("Timer", "Unit"),
    ("Path", "Unit"),
    ("Socket", "Service"),
    ("Service", "Sockets"),
];

/// The host's units: its service units and their activation siblings (`mesh-host.socket`,
/// `.timer`, `.path`), each with the service it starts.
pub fn host_units(identity: &Identity) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for service in &identity.unit_names {
        out.push((service.clone(), service.as_str()));
        if let Some((stem, "service")) = service.rsplit_once('.') {
            for t in ACTIVATION_TYPES {
                out.push((format!("{stem}.{t}"), service.as_str()));
            }
        }
    }
    out
}

/// The names whose `.d/`, `.wants/`, `.requires/` and `.upholds/` directories systemd reads for
/// `unit` (systemd.unit(5)): its own, its template's, every prefix of it cut after a dash
/// (`mesh-.service`) and the type itself (`service`).
pub fn lookup_names(unit: &str) -> Vec<String> {
    let mut out = vec![unit.to_string()];
    let Ok(name) = UnitName::parse(unit) else {
        return out;
    };
    out.extend(name.template());
    for (i, _) in name.prefix.match_indices('-') {
        out.push(format!("{}.{}", &name.prefix[..=i], name.unit_type));
    }
    out.push(name.unit_type.to_string());
    out
}

/// Whether the unit model is switched off: only in a build with the `test-no-unit-model` feature
/// and `MESH_TEST_NO_UNIT_MODEL=1`, so a test can show that systemd's confirmation
/// (`kinds::units::confirm`) alone puts back what the model would refuse. A shipped binary is
/// built without the feature: this is then `false` and the variable is never read.
fn unit_model_off() -> bool {
    cfg!(feature = "test-no-unit-model") && std::env::var_os("MESH_TEST_NO_UNIT_MODEL").is_some()
}

/// Why declaring the unit `key` (with `content`, its unit file) reaches the host, if it does.
pub fn refuse_unit(key: &str, content: Option<&str>, identity: &Identity) -> Option<Refusal> {
    if unit_model_off() {
        return None;
    }
    for (unit, service) in host_units(identity) {
        if key == unit && unit == service {
            return Some(Refusal::OwnUnit { unit });
        }
        if key == unit {
            let service = service.to_string();
            return Some(Refusal::Activates { unit, service });
        }
    }
    let name = UnitName::parse(key).ok()?;
    let owner = if name.is_template() {
        Owner::Template(name)
    } else {
        Owner::Unit(name)
    };
    if let Some(acting) = content.and_then(|text| refuse_content(text, owner, identity)) {
        return Some(Refusal::Content(acting));
    }
    // A mount, automount or swap unit's name is its path, whatever file a package ships for it.
    if content.is_some() || ["mount", "automount", "swap"].contains(&name.unit_type) {
        let hosts = paths::host_paths(identity);
        let system = pid1::Manager::System;
        return pid1::refuse_unit(content.unwrap_or(""), owner, system, &hosts).map(|why| {
            Refusal::UnitPath {
                unit: key.to_string(),
                why,
            }
        });
    }
    None
}

/// Why a unit file or drop-in with `text` acts on a host unit, if it does: text systemd may read
/// otherwise than it looks (`unitfile::unplain`), or a directive that ties the units it names to
/// this one names one, or could (a specifier that cannot be resolved here could make it one).
pub fn refuse_content(text: &str, owner: Owner, identity: &Identity) -> Option<Acting> {
    if let Some((line, odd)) = unitfile::unplain(text) {
        return Some(Acting::Unplain { line, odd });
    }
    let units = host_units(identity);
    for directive in unitfile::parse(text) {
        let acting = ACTING_DIRECTIVES.iter().any(|(section, key)| {
            directive.section.eq_ignore_ascii_case(section)
                && directive.key.eq_ignore_ascii_case(key)
        });
        if !acting {
            continue;
        }
        for word in unitfile::unit_words(&directive.value) {
            let pieces = unitfile::resolve_specifiers(&word, owner);
            let Some((unit, _)) = units.iter().find(|(u, _)| unitfile::could_be(&pieces, u)) else {
                continue;
            };
            let at = format!(
                "[{}] {}={} (line {})",
                directive.section, directive.key, directive.value, directive.line
            );
            let unknown: Vec<String> = pieces
                .iter()
                .filter_map(|p| match p {
                    unitfile::Piece::Unknown(c) => Some(format!("%{c}")),
                    unitfile::Piece::Text(_) => None,
                })
                .collect();
            let unit = unit.clone();
            if !unknown.is_empty() {
                return Some(Acting::Unresolved { at, unknown, unit });
            }
            // Read through a backslash, a quote, an escape or a separator: say which name.
            let read_as = (word != directive.value).then_some(word);
            return Some(Acting::Names { at, unit, read_as });
        }
    }
    None
}

/// Why writing (or removing) the file `path` with `content` reaches the host, if it does: its
/// config, credentials or store, or what systemd reads for one of its units.
pub fn refuse_file(path: &str, content: Option<&[u8]>, identity: &Identity) -> Option<Refusal> {
    if let Some(refusal) = refuse_systemd_file(path, content, identity) {
        return Some(refusal);
    }
    // Each list of the host's own paths on its own, not chained: a chain's state is asked at
    // every step, for every declared file.
    let outside = |own: &std::path::PathBuf| surely_outside(path, own);
    if outside(&identity.config_dir)
        && identity.config_files.iter().all(outside)
        && identity.state_dirs.iter().all(outside)
        && identity.unit_dirs.iter().all(outside)
    {
        return None;
    }
    let path = Path::new(path);
    if path.starts_with(&identity.config_dir) {
        return Some(Refusal::OwnConfig(identity.config_dir.clone()));
    }
    if let Some(file) = identity.config_files.iter().find(|f| path == *f) {
        return Some(Refusal::OwnConfigFile(file.clone()));
    }
    if let Some(store) = identity.state_dirs.iter().find(|d| path.starts_with(d)) {
        return Some(Refusal::OwnStore(store.clone()));
    }
    // (Switched off with the unit model in a test build: drop-ins and links are units to systemd.)
    let mut dirs = identity.unit_dirs.iter().filter(|_| !unit_model_off());
    let parts = dirs.find_map(|dir| {
        let rest = path.strip_prefix(dir).ok()?;
        let parts: Vec<&str> = rest
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => s.to_str(),
                _ => None,
            })
            .collect();
        (!parts.is_empty()).then_some(parts)
    })?;
    refuse_in_unit_dir(&path.display().to_string(), &parts, content, identity)
}

/// Why file `key`, at `parts` below one of the unit directories, reaches the host's units: one
/// of their unit files, drop-ins, dependency directories or links, or a unit file acting on them.
fn refuse_in_unit_dir(
    key: &str,
    parts: &[&str],
    content: Option<&[u8]>,
    identity: &Identity,
) -> Option<Refusal> {
    let first = *parts.first()?;
    let path = key.to_string();
    for (unit, service) in host_units(identity) {
        let own_dirs: Vec<String> = if unit == service {
            lookup_names(service)
        } else {
            vec![unit.clone()]
        };
        if first == unit {
            return Some(Refusal::OwnUnitFile { path, unit });
        }
        for name in &own_dirs {
            if let Some(suffix) = UNIT_DIR_SUFFIXES
                .iter()
                .find(|s| first.strip_suffix(**s) == Some(name.as_str()))
            {
                let dir = first.to_string();
                let drop_ins = suffix == &".d";
                return Some(Refusal::UnitDir {
                    path,
                    dir,
                    drop_ins,
                    unit,
                });
            }
        }
        let in_dependency_dir = UNIT_DIR_SUFFIXES[1..].iter().any(|s| first.ends_with(s));
        if in_dependency_dir && parts.get(1) == Some(&unit.as_str()) {
            let dir = first.to_string();
            return Some(Refusal::UnitLink { path, unit, dir });
        }
    }
    let text = String::from_utf8_lossy(content?);
    let owner = match parts {
        [file] => fragment_owner(file)?,
        [dir, file] if file.ends_with(".conf") => dir.strip_suffix(".d").and_then(drop_in_owner)?,
        _ => return None,
    };
    let acting = refuse_content(&text, owner, identity)?;
    Some(Refusal::ReadBy {
        path,
        reader: Reader::UnitFile,
        why: Reason::Acting(acting),
    })
}

/// The user managers' unit directories outside homes (systemd.unit(5)).
const USER_UNIT_DIRS: [&str; 4] = [
    "/etc/systemd/user",
    "/run/systemd/user",
    "/usr/local/lib/systemd/user",
    "/usr/lib/systemd/user",
];

/// Whether `path` may be a file systemd itself reads: most declared files are elsewhere under
/// /etc, told by their first bytes, as `surely_outside` does for the host's own paths (systemd's
/// own files under /etc by the letter after "/etc/" first).
fn near_systemd(path: &str, identity: &Identity) -> bool {
    let path = path.as_bytes();
    if !is_prefix(b"/etc/", path) {
        return true;
    }
    let systemds = matches!(path.get(5), Some(b's' | b't' | b'f' | b'c'))
        && [
            "/etc/systemd/",
            "/etc/tmpfiles.d/",
            "/etc/fstab",
            "/etc/crypttab",
        ]
        .iter()
        .any(|p| is_prefix(p.as_bytes(), path));
    systemds
        || identity
            .unit_dirs
            .iter()
            .any(|d| is_prefix(d.as_os_str().as_bytes(), path))
}

/// Whether `path` begins with `prefix`, compared eight bytes at a time (musl's `memcmp`, which
/// `starts_with` calls, goes a byte at a time, for every declared file), once the prefix's last
/// byte is where it would be: most prefixes (the unit directories) are told apart by it alone.
fn is_prefix(prefix: &[u8], path: &[u8]) -> bool {
    let last_in_place = match prefix.split_last() {
        Some((last, _)) => path.get(prefix.len() - 1) == Some(last),
        None => true,
    };
    last_in_place && sorted::common_prefix(prefix, path) == prefix.len()
}

/// Why a file systemd itself acts on has it touch one of the host's paths, if it does: a
/// tmpfiles.d file, `/etc/fstab`, or a unit file or drop-in anywhere on the unit search path
/// (mounts by name, and directives whose path PID 1 writes, chowns or unlinks).
fn refuse_systemd_file(path: &str, content: Option<&[u8]>, identity: &Identity) -> Option<Refusal> {
    let content = content?;
    if !near_systemd(path, identity) {
        return None;
    }
    let (dir, name) = path.rsplit_once('/')?;
    let manager = |d: &str| {
        let system = paths::SYSTEM_UNIT_PATH.contains(&d)
            || identity.unit_dirs.iter().any(|u| u.as_os_str() == d);
        if system {
            Some(pid1::Manager::System)
        } else {
            USER_UNIT_DIRS.contains(&d).then_some(pid1::Manager::User)
        }
    };
    let text = || String::from_utf8_lossy(content);
    let hosts = || paths::host_paths(identity);
    let read_by = |reader, why| Refusal::ReadBy {
        path: path.to_string(),
        reader,
        why,
    };
    if name.ends_with(".conf") && tmpfiles::DIRS.contains(&dir) {
        return tmpfiles::refuse(&text(), &hosts())
            .map(|why| read_by(Reader::Tmpfiles, Reason::Touches(why)));
    }
    if path == "/etc/fstab" {
        return pid1::refuse_fstab(&text(), &hosts())
            .map(|why| read_by(Reader::FstabGenerator, Reason::Touches(why)));
    }
    if path == "/etc/crypttab" {
        return pid1::refuse_crypttab(&text(), &hosts())
            .map(|why| read_by(Reader::CryptsetupGenerator, Reason::Touches(why)));
    }
    if unit_model_off() {
        return None;
    }
    // What the system manager reads also acts on the host's units: that reason, more exact,
    // comes first (`refuse_file` would give it after this).
    let acting = |owner, manager| match manager {
        pid1::Manager::System => refuse_content(&text(), owner, identity).map(Reason::Acting),
        pid1::Manager::User => None,
    };
    let touches = |text: &str, owner, manager| {
        pid1::refuse_unit(text, owner, manager, &hosts()).map(Reason::Touches)
    };
    let as_unit = |why| read_by(Reader::UnitFile, why);
    if let Some(manager) = manager(dir) {
        let owner = fragment_owner(name)?;
        return acting(owner, manager)
            .or_else(|| touches(&text(), owner, manager))
            .map(as_unit);
    }
    let (parent, sub) = dir.rsplit_once('/')?;
    let manager = manager(parent)?;
    if let Some(unit) = sub.strip_suffix(".d").filter(|_| name.ends_with(".conf")) {
        let owner = drop_in_owner(unit)?;
        // A mount unit's drop-in: the unit it is for is named, whatever the drop-in says.
        let by_name = || fragment_owner(unit).and_then(|o| touches("", o, manager));
        return acting(owner, manager)
            .or_else(by_name)
            .or_else(|| touches(&text(), owner, manager))
            .map(as_unit);
    }
    // An entry of a `.wants/` (or `.requires/`, `.upholds/`) directory starts the unit it names,
    // whatever file a package ships for it.
    if UNIT_DIR_SUFFIXES[1..].iter().any(|s| sub.ends_with(s)) {
        let why = pid1::refuse_unit("", fragment_owner(name)?, manager, &hosts())?;
        let (path, unit) = (path.to_string(), name.to_string());
        return Some(Refusal::Starts { path, unit, why });
    }
    None
}

/// Whether `path` is surely neither `own` nor below it, told by text: each check below parses both
/// paths' components, which a declaration of thousands of files would pay for every file, while
/// almost none is near the host's own paths. Where the texts first differ, if neither has a `/`
/// or a `.` there, both are inside a component that starts at the same place and differs, and
/// everything before it is the same text: their components differ there, whatever `Path` leaves
/// out (empty and `.` components). Anything else is left to the checks.
fn surely_outside(path: &str, own: &Path) -> bool {
    let (path, own) = (path.as_bytes(), own.as_os_str().as_bytes());
    let same = sorted::common_prefix(path, own);
    match (path.get(same), own.get(same)) {
        (Some(a), Some(b)) => ![a, b].iter().any(|c| matches!(c, b'/' | b'.')),
        _ => false,
    }
}

/// Which unit a file named `name` directly in a unit directory is the fragment of: any type
/// systemd loads, `.device` and `.scope` too.
fn fragment_owner(name: &str) -> Option<Owner<'_>> {
    let unit = UnitName::parse_loaded(name).ok()?;
    Some(if unit.is_template() {
        Owner::Template(unit)
    } else {
        Owner::Unit(unit)
    })
}

/// Which units read the drop-ins of the directory `name.d/`: those with a name, an alias, a
/// template or a prefix `name` (`dev-sda.device`, `mesh-.service`, `x@.service`), or every unit
/// of the type (`service`, `device`). Only the type is sure: systemd resolves a drop-in's `%p`,
/// `%n`, `%i` ... from the unit's own name, which an alias (or a prefix) does not tell.
fn drop_in_owner(name: &str) -> Option<Owner<'_>> {
    let unit_type = match UnitName::parse_loaded(name) {
        Ok(unit) => unit.unit_type,
        Err(_) => unitfile::LOADED_TYPES.into_iter().find(|t| *t == name)?,
    };
    Some(Owner::Type(unit_type))
}

/// Paths a container may not mount writable (nor have podman relabel or chown), each with what
/// it is: the host's store, config and credentials, its binary, and where systemd reads its unit.
pub fn protected_paths(identity: &Identity) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    let mut add = |p: &Path, what: &'static str| {
        let p = p.display().to_string();
        if !out.iter().any(|(q, _)| *q == p) {
            out.push((p, what));
        }
    };
    for p in &identity.state_dirs {
        add(p, "store");
    }
    add(&identity.config_dir, "configuration");
    for p in &identity.config_files {
        add(p, "configuration or credential file");
    }
    for p in &identity.unit_dirs {
        add(p, "unit directory");
    }
    for p in paths::SYSTEM_UNIT_PATH {
        add(Path::new(p), "unit directory");
    }
    add(Path::new("/run/systemd"), "runtime unit directory");
    for (p, what) in paths::SYSTEMD_READS {
        add(Path::new(p), what);
    }
    add(Path::new(paths::BINARY), "binary");
    out
}

/// Arch's merged /usr and /run: where these lead, a mount of them is a mount of their target.
const WELL_KNOWN_LINKS: [(&str, &str); 8] = [
    ("/bin", "/usr/bin"),
    ("/sbin", "/usr/bin"),
    ("/usr/sbin", "/usr/bin"),
    ("/lib", "/usr/lib"),
    ("/lib64", "/usr/lib"),
    ("/usr/lib64", "/usr/lib"),
    ("/var/run", "/run"),
    ("/var/lock", "/run/lock"),
];

/// Why a container mounting the host directory `source` (normalised) in this way reaches the
/// host, if it does: writable (or relabelled, or chowned) and holding or inside something the
/// host needs.
pub fn refuse_mount(source: &str, writes: &str, identity: &Identity) -> Option<Mount> {
    let source = follow_links(source);
    let writes = writes.to_string();
    if source.split('/').any(|part| part == "..") {
        let writes = Some(writes);
        return Some(Mount::Unresolvable { source, writes });
    }
    let at = Path::new(&source);
    protected_paths(identity)
        .into_iter()
        .find_map(|(path, what)| {
            let protected = Path::new(&path);
            let relation = if protected == at {
                "which is"
            } else if protected.starts_with(at) {
                "which holds"
            } else if at.starts_with(protected) {
                "inside"
            } else {
                return None;
            };
            Some(Mount::Protected {
                source: at.display().to_string(),
                writes: writes.clone(),
                relation,
                path,
                what,
            })
        })
}

/// `source` with the merged-/usr link it starts with, if any, followed.
fn follow_links(source: &str) -> String {
    for (link, target) in WELL_KNOWN_LINKS {
        if let Some(rest) = source.strip_prefix(link) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{target}{rest}");
            }
        }
    }
    source.to_string()
}

/// Host directories holding sockets that hand out control of the host to whoever can
/// `connect()`, which a read-only mount does not stop.
const SOCKET_DIRS: [(&str, &str); 3] = [
    ("/run/systemd", "PID 1's private socket"),
    ("/run/dbus", "the system bus"),
    ("/run/user/0", "root's own service manager and session bus"),
];

/// journald's sockets, the one directory under /run/systemd a read-only mount may hold.
const JOURNAL_SOCKETS: &str = "/run/systemd/journal";

/// Links under /dev into a process's /proc entry: podman resolves them in its own process.
const PROC_LINKS: [(&str, &str); 4] = [
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
];

/// Why a container mounting the host directory `source` (normalised) reaches the host even
/// read-only, or through a writable kernel interface, if it does: `/proc/N` (a process's `root`,
/// `cwd` and `fd/` lead into the host's filesystem, past the mount's read-only flag), a writable
/// procfs, sysfs or cgroupfs, and PID 1's and the system bus's sockets with every directory above.
pub fn refuse_mount_source(source: &str, writable: bool) -> Option<Mount> {
    let mut source = follow_links(source);
    for (link, target) in PROC_LINKS {
        if let Some(rest) = source.strip_prefix(link) {
            if rest.is_empty() || rest.starts_with('/') {
                source = format!("{target}{rest}");
                break;
            }
        }
    }
    let parts: Vec<&str> = source.split('/').filter(|p| !p.is_empty()).collect();
    if parts.contains(&"..") {
        let writes = None;
        return Some(Mount::Unresolvable { source, writes });
    }
    let process =
        |p: &str| matches!(p, "self" | "thread-self") || p.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        ["proc", rest @ ..] if rest.first().is_none_or(|p| process(p)) => {
            return Some(Mount::Processes { source });
        }
        ["proc", ..] | ["sys", ..] if writable => {
            return Some(Mount::KernelWritable { source });
        }
        _ => {}
    }
    // journald's sockets only take log lines: a log shipper may mount them.
    let journal = paths::Pattern::literal(&source).relation(JOURNAL_SOCKETS);
    if matches!(journal, Some(paths::Relation::Is | paths::Relation::Inside)) {
        return None;
    }
    SOCKET_DIRS.iter().find_map(|(dir, what)| {
        let relation = paths::Pattern::literal(&source).relation(dir)?.phrase();
        let source = source.clone();
        Some(Mount::Sockets {
            source,
            relation,
            dir,
            what,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surely_outside_only_what_path_says_is_outside() {
        let paths = [
            "/etc/scale/d1/f1.conf",
            "/etc/mesh-host",
            "/etc/mesh-host/",
            "/etc/mesh-host/config.json",
            "/etc//mesh-host/x",
            "/etc/./mesh-host/x",
            "/etc/mesh-hostx/y",
            "/etc/../etc/mesh-host/x",
            "/etc",
            "/",
            "etc/mesh-host/x",
            "./etc/mesh-host",
            "/etc/mesh-host/../x",
            "/etc/mesh-host/.",
            "/etc/mesh-hos",
            "/etc/.mesh-host/x",
            "/etc/mesh-host.d/x",
            ".",
        ];
        for own in [
            "/etc/./mesh-host",
            "/etc/.mesh-host",
            "/etc/mesh-host",
            "/etc/mesh-host/",
            "/etc//mesh-host",
            "/",
            "etc/mesh-host",
        ] {
            for path in paths {
                let under = Path::new(path).starts_with(own);
                if surely_outside(path, Path::new(own)) {
                    assert!(!under, "{path} is under {own}");
                }
            }
        }
        assert!(surely_outside(
            "/etc/scale/f.conf",
            Path::new("/etc/mesh-host")
        ));
        assert!(surely_outside(
            "/etc/scale/f.conf",
            Path::new("/var/lib/mesh-host")
        ));
        assert!(!surely_outside(
            "/etc/mesh-host/a",
            Path::new("/etc/mesh-host")
        ));
    }
    use crate::model::config::Config;
    use crate::model::declaration::tests::{check_refused, problems};
    use crate::model::declaration::{parse, Context};
    use serde_json::json;

    fn unit(name: &str, content: &str) -> String {
        json!({"schema": 1, "units": {name: {"content": content}}}).to_string()
    }

    fn file(path: &str, content: &str) -> String {
        json!({"schema": 1, "files": {path: {"content": content}}}).to_string()
    }

    fn volume(v: &str) -> String {
        json!({"schema": 1, "containers": {"web": {"image": "x", "volumes": [v]}}}).to_string()
    }

    /// Problems of `json` under the config `config_json` loaded from `config_path`.
    fn problems_with(config_json: &str, config_path: &str, json: &str) -> Vec<String> {
        let mut config = Config::parse(config_json, None).unwrap();
        config.identity.config_files.push(config_path.into());
        let cx = Context {
            limits: &config.limits,
            identity: &config.identity,
        };
        match parse(json.as_bytes(), &cx) {
            Ok(_) => Vec::new(),
            Err(p) => p.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn lookup_names_follow_systemds_drop_in_search() {
        assert_eq!(
            lookup_names("mesh-host.service"),
            vec!["mesh-host.service", "mesh-.service", "service"]
        );
        assert_eq!(
            lookup_names("a-b-c.service"),
            vec!["a-b-c.service", "a-.service", "a-b-.service", "service"]
        );
        assert_eq!(
            lookup_names("x-y@i.service"),
            vec!["x-y@i.service", "x-y@.service", "x-.service", "service"]
        );
    }

    #[test]
    fn class_1_every_place_systemd_reads_the_hosts_unit_under_etc() {
        for path in [
            "/etc/systemd/system/mesh-host.service",
            "/etc/systemd/system.control/mesh-host.service",
            "/etc/systemd/system.attached/mesh-host.service",
            "/etc/systemd/system/mesh-host.service.d/override.conf",
            "/etc/systemd/system.control/mesh-host.service.d/50-x.conf",
            "/etc/systemd/system.attached/mesh-host.service.d/50-x.conf",
            "/etc/systemd/system/mesh-host.service.wants/x.service",
            "/etc/systemd/system/mesh-host.service.requires/x.service",
            "/etc/systemd/system/mesh-host.service.upholds/x.service",
            "/etc/systemd/system/multi-user.target.wants/mesh-host.service",
            "/etc/systemd/system.control/x.target.requires/mesh-host.service",
            "/etc/systemd/system/x.service.upholds/mesh-host.service",
            "/etc/systemd/system/service.d/10-every-service.conf",
            "/etc/systemd/system.attached/service.d/10-every-service.conf",
            "/etc/systemd/system/mesh-.service.d/10-prefix.conf",
            "/etc/systemd/system/mesh-.service.wants/x.service",
            "/etc/systemd/system/service.requires/x.service",
            "/etc/systemd/system/agent.service",
            "/etc/systemd/system/agent.service.d/x.conf",
            "/etc/systemd/system/service.d",
        ] {
            check_refused(&file(path, ""), &[path, "refused", "the host's own unit"]);
            let absent = json!({"schema": 1, "files": {path: {"state": "absent"}}}).to_string();
            check_refused(&absent, &["refused", "the host's own unit"]);
        }
        // The configured unit directory is one more place.
        let config = r#"{"unit_dir": "/etc/units"}"#;
        let found = problems_with(
            config,
            "/etc/mesh-host/config.json",
            &file("/etc/units/mesh-.service.d/x.conf", ""),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .contains("where systemd reads drop-ins of the host's own unit mesh-host.service"),
            "{found:?}"
        );
    }

    #[test]
    fn class_2_activation_siblings() {
        for name in [
            "mesh-host.socket",
            "mesh-host.timer",
            "mesh-host.path",
            "agent.socket",
        ] {
            let json = json!({"schema": 1, "units": {name: {"enabled": true}}}).to_string();
            check_refused(&json, &["refused", name, "by default it starts"]);
            let path = format!("/etc/systemd/system/{name}");
            check_refused(&file(&path, ""), &["refused", "the host's own unit"]);
            let path = format!("/etc/systemd/system/{name}.d/x.conf");
            check_refused(&file(&path, ""), &["refused", "the host's own unit"]);
            let path = format!("/etc/systemd/system/sockets.target.wants/{name}");
            check_refused(
                &file(&path, ""),
                &["refused", "a link to the host's own unit"],
            );
        }
    }

    #[test]
    fn class_3_unit_content_that_acts_on_a_host_unit() {
        for (section, key) in ACTING_DIRECTIVES {
            let content = format!("[{section}]\n{key}=mesh-host.service\n");
            check_refused(
                &unit("x.service", &content),
                &[
                    "units[\"x.service\"]: refused: content:",
                    &format!(
                        "[{section}] {key}=mesh-host.service (line 2) names mesh-host.service"
                    ),
                ],
            );
        }
        for (name, content, needle) in [
            // Lists, continuations, comments inside them, odd spacing and case.
            (
                "x.service",
                "[Unit]\nWants=a.service   b.service \\\n  mesh-host.service\n",
                "line 2",
            ),
            (
                "x.service",
                "[Unit]\r\nconflicts = mesh-host.timer",
                "mesh-host.timer",
            ),
            (
                "x.service",
                "[Install]\nWantedBy=\"mesh-host.service\"",
                "WantedBy=",
            ),
            (
                "x.service",
                "[Install]\nRequiredBy=mesh-\"host\".service",
                "RequiredBy=",
            ),
            (
                "x.service",
                "[Unit]\nWants=mesh\\x2dhost.service",
                "names mesh-host.service",
            ),
            (
                "x.timer",
                "[Timer]\nOnCalendar=daily\nUnit=mesh-host.service\n",
                "[Timer] Unit=",
            ),
            (
                "x.path",
                "[Path]\nPathExists=/x\nUnit=agent.service\n",
                "agent.service",
            ),
            (
                "x.socket",
                "[Socket]\nListenStream=1\nService=mesh-host.service\n",
                "[Socket] Service=",
            ),
            (
                "x.service",
                "[Install]\nAlias=mesh-host.service\n",
                "Alias=",
            ),
            ("x.service", "[Install]\nAlso=mesh-host.socket\n", "Also="),
            // Specifiers resolved from the unit's own name.
            (
                "mesh-host@x.service",
                "[Unit]\nConflicts=%p.service\n",
                "names mesh-host.service",
            ),
            (
                "mesh-host.target",
                "[Unit]\nBindsTo=%N.service\n",
                "names mesh-host.service",
            ),
            (
                "mesh@host.service",
                "[Unit]\nRequires=%p-%i.service\n",
                "names mesh-host.service",
            ),
            (
                "mesh@host.service",
                "[Unit]\nRequires=%p-%I.path\n",
                "names mesh-host.path",
            ),
            (
                "a-mesh.service",
                "[Unit]\nOnFailure=%j-host.service\n",
                "names mesh-host.service",
            ),
            // Specifiers that cannot be resolved here.
            (
                "x.service",
                "[Unit]\nConflicts=%H.service\n",
                "%H cannot be resolved safely",
            ),
            (
                "x@.service",
                "[Unit]\nConflicts=%i.service\n",
                "%i cannot be resolved safely",
            ),
            (
                "x@.service",
                "[Install]\nWantedBy=%i.service\n",
                "%i cannot be resolved safely",
            ),
        ] {
            let found = problems(&unit(name, content));
            assert_eq!(found.len(), 1, "{name} {content:?}: {found:?}");
            assert!(found[0].contains(needle), "{name} {content:?}: {found:?}");
        }
        // The same through files systemd reads as units or drop-ins.
        for (path, content) in [
            (
                "/etc/systemd/system/x.service",
                "[Unit]\nConflicts=mesh-host.service",
            ),
            (
                "/etc/systemd/system/x.service.d/y.conf",
                "[Unit]\nConflicts=mesh-host.service",
            ),
            (
                "/etc/systemd/system/socket.d/y.conf",
                "[Socket]\nService=mesh-host.service",
            ),
            (
                "/etc/systemd/system/mesh-.timer.d/y.conf",
                "[Timer]\nUnit=%N.service",
            ),
            (
                "/etc/systemd/system/timer.d/y.conf",
                "[Timer]\nUnit=%N.service",
            ),
            (
                "/etc/systemd/system/x@.service.d/y.conf",
                "[Unit]\nWants=%i.service",
            ),
            (
                "/etc/systemd/system.control/x.service",
                "[Unit]\nPropagatesStopTo=mesh-host.service",
            ),
        ] {
            check_refused(
                &file(path, content),
                &["refused", "is read by systemd as a unit file"],
            );
        }
    }

    #[test]
    fn valid_look_alikes_stay_valid() {
        for (name, content) in [
            ("x.service", "[Unit]\nAfter=mesh-host.service mesh-host.socket\nDescription=Conflicts=mesh-host.service\nDocumentation=man:mesh-host.service(8)\n"),
            ("x.service", "[Unit]\n# Conflicts=mesh-host.service\n; Wants=mesh-host.service\n"),
            ("x.service", "[Service]\nConflicts=mesh-host.service\nExecStart=/usr/bin/systemctl stop mesh-host.service\n"),
            ("x.service", "Conflicts=mesh-host.service\n[Unit]\nDescription=x"),
            ("x.service", "[Unit]\nWants=foo@%H.service mesh-host@%i.service Mesh-Host.service mesh-hostile.service\n"),
            ("x@.service", "[Unit]\nWants=foo@%i.service\n[Service]\nExecStart=/bin/true %i\n"),
            ("mesh-host@x.service", "[Service]\nExecStart=/bin/true\n"),
            ("Mesh-Host.service", "[Service]\nExecStart=/bin/true\n"),
            ("mesh-hostile.service", "[Service]\nExecStart=/bin/true\n"),
            ("mesh-host-helper.service", "[Unit]\nAfter=mesh-host.service\n"),
        ] {
            assert!(problems(&unit(name, content)).is_empty(), "{name} {content:?}: {:?}", problems(&unit(name, content)));
        }
        for (path, content) in [
            (
                "/etc/systemd/system/mesh-hostile.service.d/x.conf",
                "[Service]\nNice=5",
            ),
            (
                "/etc/systemd/system/mesh-hostile.service",
                "[Service]\nExecStart=/bin/true",
            ),
            (
                "/etc/systemd/system/mesh-host-.service.d/x.conf",
                "[Service]\nNice=5",
            ),
            (
                "/etc/systemd/system/mesh-host@.service.d/x.conf",
                "[Service]\nNice=5",
            ),
            (
                "/etc/systemd/system/Mesh-Host.service",
                "[Service]\nExecStart=/bin/true",
            ),
            ("/etc/systemd/system/socket.d/x.conf", "[Socket]\nBacklog=5"),
            (
                "/etc/systemd/system/timer.d/x.conf",
                "[Timer]\nRandomizedDelaySec=5",
            ),
            (
                "/etc/systemd/system/socket.d/x.conf",
                "[Socket]\nService=%N-helper.service",
            ),
            (
                "/etc/systemd/system/multi-user.target.wants/mesh-hostile.service",
                "",
            ),
            ("/etc/systemd/system/mesh-host.service.bak.d/x.conf", ""),
            (
                "/etc/systemd/system/x.service.d/notes.txt",
                "Conflicts=mesh-host.service",
            ),
            ("/etc/motd", "[Unit]\nConflicts=mesh-host.service"),
            ("/etc/mesh-host.conf", "x"),
            (
                "/etc/systemd/user/mesh-host.service.d/x.conf",
                "[Unit]\nConflicts=x.service",
            ),
            (
                "/etc/systemd/system/mesh-host.slice.d/x.conf",
                "[Slice]\nCPUWeight=5",
            ),
            (
                "/etc/systemd/system/mesh-.slice.d/x.conf",
                "[Slice]\nCPUWeight=5",
            ),
            (
                "/etc/systemd/system/mesh-host@.socket",
                "[Socket]\nAccept=yes",
            ),
            ("/etc/systemd/systemd.conf", "x"),
        ] {
            assert!(
                problems(&file(path, content)).is_empty(),
                "{path}: {:?}",
                problems(&file(path, content))
            );
        }
    }

    #[test]
    fn class_5_container_mounts_of_the_hosts_own_paths() {
        for (v, needle) in [
            (
                "/:/host",
                "mounts /, which holds /run/systemd, PID 1's private socket: connect() to a \
                 socket ignores a read-only mount",
            ),
            ("/:/host:ro,rslave", "which holds /run/systemd"),
            ("/:/rootfs:O", "which holds /run/systemd"),
            ("/run:/run:ro", "which holds /run/systemd"),
            ("/var/run:/r:ro", "mounts /run, which holds /run/systemd"),
            ("/run/systemd:/s:ro", "which is /run/systemd"),
            ("/run/systemd/private:/s:ro", "inside /run/systemd"),
            (
                "/run/systemd/journal:/j",
                "the host's own runtime unit directory",
            ),
            ("/run/dbus:/d:ro", "which is /run/dbus, the system bus"),
            ("/var/run/dbus/system_bus_socket:/s:ro", "inside /run/dbus"),
            ("/proc:/host/proc:ro", "/proc/N/root"),
            ("/proc/1/root:/h:ro", "/proc/N/root"),
            ("/proc/self/root/etc:/h:ro", "/proc/N/root"),
            ("/proc/thread-self/cwd:/h:ro", "/proc/N/root"),
            ("/proc/sys:/s", "read-write: procfs"),
            ("/dev/fd/3:/x:ro", "mounts /proc/self/fd/3: /proc/N/root"),
            ("/run/user/0:/u:ro", "root's own service manager"),
            ("/run/user:/u:ro", "which holds /run/user/0"),
            ("/proc/sysrq-trigger:/t", "read-write: procfs"),
            ("/sys:/s", "read-write: procfs, sysfs and cgroupfs"),
            ("/sys/fs/cgroup:/c:rw", "cgroup.kill"),
            ("/sys/fs/cgroup:/c:ro,U", "cgroup.kill"),
            (
                "/srv/../var/lib/mesh-host:/x:ro",
                "its '..' cannot be resolved",
            ),
            (
                "/usr/local:/l",
                "/usr/local/lib/systemd/system, the host's own unit directory",
            ),
            (
                "/usr/lib64:/l",
                "mounts /usr/lib read-write, which holds /usr/lib/systemd/system",
            ),
            ("/lib/systemd:/l", "which holds /usr/lib/systemd/system"),
            (
                "/etc/systemd/system.attached:/l",
                "the host's own unit directory",
            ),
            ("/etc/tmpfiles.d:/t", "the host's own tmpfiles.d directory"),
            ("/etc/fstab:/f", "fstab (systemd mounts what it says)"),
            (
                "/var:/v:rw",
                "which holds /var/lib/mesh-host, the host's own store",
            ),
            (
                "/var/lib/mesh-host:/x",
                "which is /var/lib/mesh-host, the host's own store",
            ),
            (
                "/srv//mesh-store/./runs:/x",
                "inside /srv/mesh-store, the host's own store",
            ),
            ("/srv/mesh-store/:/x:z", "the host's own store"),
            (
                "/etc:/etc",
                "which holds /etc/mesh-host, the host's own configuration",
            ),
            ("/etc/mesh-host:/x", "the host's own configuration"),
            (
                "/etc/mesh-host:/x:ro,U",
                "with :U (podman changes the source)",
            ),
            (
                "/etc/systemd/system:/units",
                "the host's own unit directory",
            ),
            ("/usr:/usr", "mounts /usr read-write, which holds"),
            ("/var/lib/x/../mesh-host:/x", "its '..' cannot be resolved"),
            ("/srv/../etc:/x:U", "its '..' cannot be resolved"),
            ("/usr/bin:/b", "/usr/bin/mesh-host, the host's own binary"),
            ("/bin:/b", "mounts /usr/bin read-write"),
            ("/run:/run", "/run/systemd"),
            (
                "/tmp:/t:O,upperdir=/etc/systemd/system/x,workdir=/tmp/w",
                "as an overlay's upper or work directory",
            ),
        ] {
            check_refused(
                &volume(v),
                &["containers[\"web\"]: refused: volume", needle],
            );
        }
        for (v, needle) in [
            ("./data:/x", "relative"),
            ("/data:x", "not an absolute path"),
            ("/data:/x:ro,rw", "contradicts"),
            ("/data:/x:bogus", "is not a podman volume option"),
            ("/data", "no source"),
            ("a:b:c:d", "more than two ':'"),
            ("-x:/x", "volume name"),
        ] {
            check_refused(&volume(v), &["volumes[0]", needle]);
        }
        for v in [
            "/var/lib/mesh-host:/x:ro",
            "/etc/mesh-host:/x:ro",
            "/sys:/host/sys:ro,rslave",
            "/sys/fs/cgroup:/c:ro",
            "/proc/cpuinfo:/cpuinfo:ro",
            "/run/user/1000/pulse:/p:ro",
            "/run/systemd/journal:/run/systemd/journal:ro",
            "/run/systemd/journal/socket:/s:ro",
            "/run/podman-data:/p",
            "/var/lib/containers-data:/x",
            "/srv/data:/data:rw,z,nocopy,rshared",
            "/srv/data:/data:Z,U,noexec,nodev,nosuid,rbind",
            "/etc/mesh-hostile:/x",
            "/tmp/base:/x:O",
            "cache:/c",
            "cache:/c:U",
            "/srv/x:/x:idmap=uids=0-1-10",
        ] {
            assert!(
                problems(&volume(v)).is_empty(),
                "{v}: {:?}",
                problems(&volume(v))
            );
        }
    }

    #[test]
    fn class_7_files_systemd_itself_acts_on() {
        for (path, content, needle) in [
            (
                "/etc/tmpfiles.d/x.conf",
                "# x\nd /srv/data 0755\nR /srv/mesh-store\n",
                "/etc/tmpfiles.d/x.conf is read by systemd-tmpfiles: line 3 \"R /srv/mesh-store\": \
                 type R would have systemd-tmpfiles touch /srv/mesh-store, which is \
                 /srv/mesh-store, the host's own store",
            ),
            (
                "/etc/tmpfiles.d/x.conf",
                "z /etc 0777",
                "which holds /etc/mesh-host, the host's own configuration",
            ),
            (
                "/etc/fstab",
                "UUID=1 / ext4 defaults 0 1\ntmpfs /etc/systemd/system tmpfs\n",
                "/etc/fstab is read by systemd-fstab-generator: line 2",
            ),
            (
                "/etc/systemd/system/etc-mesh\\x2dhost.mount",
                "[Mount]\nWhat=tmpfs\n",
                "names its path /etc/mesh-host",
            ),
            (
                "/etc/systemd/system/srv-x.mount.d/x.conf",
                "[Mount]\nWhat=/etc/mesh-host\nOptions=bind\n",
                "[Mount] What=/etc/mesh-host (line 2): it mounts /etc/mesh-host elsewhere",
            ),
            (
                "/etc/systemd/system/service.d/x.conf",
                "[Service]\nStateDirectory=mesh-host\n",
                "creates and chowns /var/lib/mesh-host",
            ),
            (
                "/etc/systemd/system/local-fs.target.wants/var.mount",
                "",
                "has systemd start var.mount: var.mount names its path /var",
            ),
            (
                "/etc/systemd/user/x.service.d/x.conf",
                "[Service]\nStandardOutput=append:/etc/mesh-host/config.json\n",
                "opens /etc/mesh-host/config.json for writing",
            ),
            (
                "/etc/tmpfiles.d/x.conf",
                "f /etc/tmpfiles.d/y.conf 0644 - - - R /var/lib/mesh-host",
                "inside /etc/tmpfiles.d, the host's own tmpfiles.d directory",
            ),
            (
                "/etc/tmpfiles.d/x.conf",
                "w+ /etc/fstab - - - - tmpfs\\x20/var/lib\\x20tmpfs",
                "which is /etc/fstab",
            ),
            (
                "/etc/systemd/system/x.service",
                "[Service]\nStandardOutput=append:/etc/tmpfiles.d/x.conf\n",
                "the host's own tmpfiles.d directory",
            ),
            (
                "/etc/systemd/system.attached/x.socket",
                "[Socket]\nListenFIFO=/usr/bin/mesh-host\n",
                "the host's own binary",
            ),
        ] {
            check_refused(&file(path, content), &["refused", needle]);
        }
        for (name, content, needle) in [
            (
                "etc.mount",
                None,
                "etc.mount: etc.mount names its path /etc",
            ),
            ("srv-mesh\\x2dstore.automount", None, "the host's own store"),
            (
                "x.service",
                Some("[Service]\nPIDFile=/etc/mesh-host/config.json\n"),
                "x.service: [Service] PIDFile=",
            ),
            (
                "x.service",
                Some("[Service]\nStandardOutput=truncate:/etc/mesh-host/config.json\n"),
                "opens /etc/mesh-host/config.json for writing",
            ),
        ] {
            let spec = match content {
                Some(c) => json!({"content": c}),
                None => json!({"active": true}),
            };
            let json = json!({"schema": 1, "units": {name: spec}}).to_string();
            check_refused(&json, &["refused", needle]);
        }
        for (path, content) in [
            (
                "/etc/tmpfiles.d/x.conf",
                "d /var/lib 0755 - - -\nL /var/run - - - - ../run\n",
            ),
            ("/etc/tmpfiles.d/x.txt", "R /var/lib/mesh-host\n"),
            (
                "/etc/fstab",
                "UUID=1 / ext4 defaults 0 1\n/dev/sdb /srv/data xfs defaults 0 2\n",
            ),
            (
                "/etc/systemd/system/srv-data.mount",
                "[Mount]\nWhat=/dev/sdb\n",
            ),
            (
                "/etc/systemd/system/x.service",
                "[Service]\nStateDirectory=x\n",
            ),
            (
                "/etc/systemd/user/x.service",
                "[Service]\nStateDirectory=mesh-host\n",
            ),
            ("/etc/systemd/user/etc.mount", "[Mount]\nWhat=tmpfs\n"),
            (
                "/etc/systemd/system/getty@tty1.service.d/autologin.conf",
                "[Service]\r\nExecStart=\r\nExecStart=-/sbin/agetty --autologin root %I $TERM\r\nTTYPath=/dev/%I\r\n",
            ),
            (
                "/etc/systemd/system/sshd.service.d/x.conf",
                "[Unit]\nAfter=mesh-host.service\n[Service]\nRuntimeDirectory=sshd\nPIDFile=/run/sshd.pid\n",
            ),
        ] {
            assert!(
                problems(&file(path, content)).is_empty(),
                "{path}: {:?}",
                problems(&file(path, content))
            );
        }
    }

    #[test]
    fn class_6_the_configs_own_files_wherever_it_puts_them() {
        let config = r#"{"control_plane": {"address": "cp:1", "ca_file": "/etc/pki/mesh-ca.pem",
                         "node": "n", "secret_file": "/etc/keys/mesh-secret"}}"#;
        for path in [
            "/etc/pki/mesh-ca.pem",
            "/etc/keys/mesh-secret",
            "/etc/agent/host.json",
            "/etc/mesh-host/config.json",
        ] {
            let found = problems_with(config, "/etc/agent/host.json", &file(path, "x"));
            assert_eq!(found.len(), 1, "{path}: {found:?}");
            assert!(
                found[0].contains("the host's own configuration"),
                "{found:?}"
            );
        }
        let found = problems_with(config, "/etc/agent/host.json", &volume("/etc/keys:/k"));
        assert!(
            found[0]
                .contains("/etc/keys/mesh-secret, the host's own configuration or credential file"),
            "{found:?}"
        );
        assert!(
            problems_with(config, "/etc/agent/host.json", &volume("/etc/keys:/k:ro")).is_empty()
        );
        assert!(problems_with(
            config,
            "/etc/agent/host.json",
            &file("/etc/pki/other.pem", "x")
        )
        .is_empty());
    }

    /// The one problem of `json`, which must contain each of `needles`.
    fn refused_with(json: &str, needles: &[&str]) {
        let found = problems(json);
        assert_eq!(found.len(), 1, "{json}: {found:?}");
        for needle in needles {
            assert!(found[0].contains(needle), "{needle:?} not in {found:?}");
        }
    }

    #[test]
    fn family_1_text_systemd_reads_otherwise_is_refused_saying_how_to_write_it() {
        // A byte-order mark at the start of a later line: systemd drops it, the line is live.
        for (content, needle) in [
            (
                "[Unit]\nDescription=x\n[X-Hidden]\n\u{feff}[Install]\nAlias=mesh-host.service\n",
                "line 4 has a byte-order mark",
            ),
            (
                "# c\n\u{feff}[Unit]\nDescription=x\n",
                "line 2 has a byte-order mark",
            ),
            (
                "[Unit]\nDescription=x\u{feff}\n",
                "write the file without it",
            ),
            // Two-character line ends systemd takes as one: the continuation carries on.
            (
                "[Unit]\nWants=junk \\\n\rmesh-host.service\n",
                "line 3 has a carriage return",
            ),
            (
                "[Unit]\nWants=junk \\\r\0mesh-host.service\n",
                "line 2 has a carriage return",
            ),
            (
                "[Unit]\nWants=junk \\\n\0mesh-host.service\n",
                "line 3 has a NUL byte",
            ),
            (
                "[Unit]\nWants=junk \\\r\n\0mesh-host.service\n",
                "line 3 has a NUL byte",
            ),
            (
                "[Unit]\nWants=junk \\\rmesh-host.service\n",
                "end lines with \\n or \\r\\n only",
            ),
            // Readers disagree on comments inside a continuation and on `.include`.
            (
                "[Unit]\nWants=junk \\\n# c\n mesh-host.service\n",
                "line 3 has a comment inside",
            ),
            (
                "[Unit]\nWants=junk \\\n  ; c \\\n mesh-host.service\n",
                "comment inside",
            ),
            (
                ".include /etc/systemd/system/x.service\n[Unit]\n",
                "line 1 has `.include`",
            ),
            // Backslashes: plain in [Unit] lists, dropped in Also= and Sockets=.
            (
                "[Unit]\nWants=junk\\ mesh-host.service\n",
                "systemd may read \"mesh-host.service\"",
            ),
            (
                "[Unit]\nRequires=junk\\\tmesh-host.service\n",
                "names mesh-host.service",
            ),
            (
                "[Install]\nAlso=mesh\\-host.service\n",
                "[Install] Also=mesh\\-host.service (line 2) names mesh-host.service",
            ),
            (
                "[Install]\nAlso=/usr/lib/systemd/system/mesh-host.service\n",
                "names mesh-host.service",
            ),
            (
                "[Service]\nSockets=\\m\\e\\s\\h-host.socket\n",
                "names mesh-host.socket",
            ),
            // Quotes, case, whitespace, continuations.
            (
                "[Unit]\nBindsTo='mesh-host.service'\n",
                "names mesh-host.service",
            ),
            (
                "[unit]\nwants = mesh-host.service\n",
                "names mesh-host.service",
            ),
            (
                "[Unit]\nUpholds=\\\n\tmesh-host.service\n",
                "(line 2) names",
            ),
            (
                "[Unit]\r\nConflicts=a.service\\\r\n mesh-host.service\r\n",
                "(line 2) names",
            ),
            // Specifiers a unit's own name cannot resolve.
            ("[Unit]\nWants=%H.service\n", "%H cannot be resolved safely"),
            (
                "[Unit]\nWants=%l-host.service\n",
                "%l cannot be resolved safely",
            ),
        ] {
            refused_with(
                &unit("x.service", content),
                &["units[\"x.service\"]: refused: content:", needle],
            );
            let path = "/etc/systemd/system/x.service.d/y.conf";
            refused_with(
                &file(path, content),
                &["is read by systemd as a unit file", needle],
            );
        }
        // A drop-in of an alias: systemd resolves its specifiers from the unit's own name, which
        // the directory's name does not tell.
        for (dir, value) in [
            ("zalias.service.d", "%p-host.service"),
            ("zalias.service.d", "%n"),
            ("mesh.service.d", "%N-host.service"),
            ("x@y.service.d", "%i.service"),
            ("foo-.timer.d", "%N.service"),
            ("a-mesh.service.d", "%j-host.service"),
        ] {
            let path = format!("/etc/systemd/system/{dir}/x.conf");
            let content = format!("[Unit]\nWants={value}\n");
            refused_with(
                &file(&path, &content),
                &["cannot be resolved safely", "mesh-host."],
            );
        }
        // In a unit file of its own the name is known: nothing is refused that names no host unit.
        for (name, content) in [
            ("zalias.service", "[Unit]\nWants=%p-host.service\n"),
            ("a-b.service", "[Unit]\nWants=%j-host.service\n"),
        ] {
            assert!(problems(&unit(name, content)).is_empty(), "{name}");
        }
    }

    #[test]
    fn family_2_every_unit_type_systemd_loads_is_read() {
        let host_lines = [
            "[Unit]\nWants=mesh-host.service",
            "[Unit]\nRequires=mesh-host.service",
            "[Unit]\nConflicts=mesh-host.service",
            "[Unit]\nPartOf=mesh-host.service",
            "[Unit]\nBindsTo=mesh-host.service",
            "[Unit]\nUpholds=mesh-host.service",
            "[Unit]\nOnFailure=mesh-host.service",
            "[Unit]\nPropagatesStopTo=mesh-host.service",
            "[Unit]\nBefore=mesh-host.service",
        ];
        let mut paths: Vec<String> = Vec::new();
        for name in [
            "dev-sda.device",
            "init.scope",
            "libpod-.scope",
            "x.slice",
            "-.slice",
            "srv.mount",
            "-.mount",
            "srv.automount",
            "dev-sda2.swap",
            "x.target",
            "x.path",
            "x.timer",
            "x.socket",
            "foo-.service",
        ] {
            paths.push(format!("/etc/systemd/system/{name}"));
            paths.push(format!("/etc/systemd/system/{name}.d/x.conf"));
        }
        for t in crate::model::unitfile::LOADED_TYPES {
            paths.push(format!("/etc/systemd/system/{t}.d/x.conf"));
            paths.push(format!("/etc/systemd/system.attached/{t}.d/x.conf"));
        }
        for (i, path) in paths.iter().enumerate() {
            let content = host_lines[i % host_lines.len()];
            refused_with(
                &file(path, content),
                &[path, "refused", "mesh-host.service"],
            );
        }
        // What a device or scope's dependency directories hold.
        for path in [
            "/etc/systemd/system/dev-sda.device.wants/mesh-host.service",
            "/etc/systemd/system/init.scope.requires/mesh-host.socket",
        ] {
            refused_with(&file(path, ""), &["a link to the host's own unit"]);
        }
        // The triggers each type has, as declared units and as files.
        for (name, content) in [
            (
                "x.timer",
                "[Timer]\nOnCalendar=daily\nUnit=mesh-host.service\n",
            ),
            (
                "x.path",
                "[Path]\nPathExists=/x\nUnit=mesh\\-host.service\n",
            ),
            (
                "x.socket",
                "[Socket]\nListenStream=1\nService=mesh-host.service\n",
            ),
            ("x.service", "[Service]\nSockets=mesh-host.socket\n"),
            (
                "x.mount",
                "[Unit]\nWants=mesh-host.service\n[Mount]\nWhat=/dev/sdb\n",
            ),
            ("x.automount", "[Unit]\nBindsTo=mesh-host.service\n"),
            ("x.swap", "[Unit]\nOnSuccess=mesh-host.service\n"),
            ("x.slice", "[Unit]\nConflicts=mesh-host.service\n"),
            ("x.target", "[Unit]\nStopPropagatedFrom=mesh-host.service\n"),
        ] {
            refused_with(
                &unit(name, content),
                &["refused: content:", "names mesh-host."],
            );
            let path = format!("/etc/systemd/system/{name}.d/x.conf");
            refused_with(&file(&path, content), &["names mesh-host."]);
        }
    }

    #[test]
    fn everyday_unit_files_stay_valid() {
        for (path, content) in [
            (
                "/etc/systemd/system/getty@tty1.service.d/autologin.conf",
                "[Service]\nExecStart=\nExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --noclear --autologin root %I $TERM\n",
            ),
            (
                "/etc/systemd/system/sshd.service.d/override.conf",
                "[Unit]\nAfter=mesh-host.service network-online.target\nWants=network-online.target\n[Service]\nExecStart=\nExecStart=/usr/bin/sshd -D -o PermitRootLogin=no\n",
            ),
            (
                "/etc/systemd/system/app.service",
                "\u{feff}[Unit]\r\nDescription=app, edited on Windows\r\nAfter=mesh-host.service\r\n\r\n[Service]\r\nExecStart=/usr/bin/app \\\r\n  --flag\r\n[Install]\r\nWantedBy=multi-user.target\r\n",
            ),
            (
                "/etc/systemd/system/dev-sda.device.d/x.conf",
                "[Unit]\nJobTimeoutSec=5\n",
            ),
            (
                "/etc/systemd/system/srv-www.mount",
                "[Unit]\nAfter=mesh-host.service\n[Mount]\nWhat=/dev/sdb1\nWhere=/srv/www\nType=ext4\n[Install]\nWantedBy=multi-user.target\n",
            ),
            (
                "/etc/systemd/system/backup.timer",
                "[Timer]\nOnCalendar=daily\nUnit=backup.service\n[Install]\nWantedBy=timers.target\n",
            ),
        ] {
            assert!(problems(&file(path, content)).is_empty(), "{path}: {:?}", problems(&file(path, content)));
        }
    }
}
