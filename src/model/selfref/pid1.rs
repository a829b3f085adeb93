//! What PID 1 itself does to paths on a unit's behalf: mounts (`/etc/fstab`, `.mount`,
//! `.automount` and `.swap` units, whose mount point is also their escaped name) and directives
//! whose path it creates, writes, truncates, chowns or unlinks. Each is refused when the path is
//! one of the host's own, inside one, or (for mounts and directories it makes and chowns) above.

use super::paths::{HostPaths, Pattern, Relation, Seg, ANY, AT_OR_INSIDE};
use crate::model::unitfile::{self, Owner, Piece};

/// Sections holding the execution settings PID 1 acts on (systemd.exec(5)).
const EXEC_SECTIONS: [&str; 4] = ["Service", "Socket", "Mount", "Swap"];

/// `XDirectory=` and the base systemd puts them under for the system manager; state, cache and
/// logs may also go under `private/` (`DynamicUser=`), where an existing directory is moved.
const DIRECTORIES: [(&str, &str, bool); 5] = [
    ("StateDirectory", "/var/lib", true),
    ("CacheDirectory", "/var/cache", true),
    ("LogsDirectory", "/var/log", true),
    ("ConfigurationDirectory", "/etc", false),
    ("RuntimeDirectory", "/run", false),
];

/// `[Socket]` listeners whose path PID 1 creates, binds, opens read-write or unlinks
/// (`RemoveOnStop=`), and `Symlinks=` it makes and unlinks beside them.
const SOCKET_PATHS: [&str; 7] = [
    "ListenStream",
    "ListenDatagram",
    "ListenSequentialPacket",
    "ListenFIFO",
    "ListenSpecial",
    "ListenUSBFunction",
    "Symlinks",
];

/// `[Path]` settings whose directories PID 1 creates when `MakeDirectory=yes`.
const WATCHED_PATHS: [&str; 5] = [
    "PathExists",
    "PathExistsGlob",
    "PathChanged",
    "PathModified",
    "DirectoryNotEmpty",
];

/// Which service manager reads a unit: PID 1, or a user's manager (root's, `user@0.service`,
/// writes absolute paths as root too; its `StateDirectory=` and the like are under the home,
/// and it mounts nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    System,
    User,
}

/// Why `/etc/fstab` with `text` has systemd mount over, or expose, one of `hosts`, if it does.
pub fn refuse_fstab(text: &str, hosts: &HostPaths) -> Option<String> {
    first_refused_line(text, |line| {
        refuse_fstab_line(line, false, hosts).or_else(|| refuse_fstab_line(line, true, hosts))
    })
}

/// The first line of a table (fstab, crypttab; blank lines and `#` comments skipped) that `why`
/// refuses, with its number.
fn first_refused_line(text: &str, why: impl Fn(&str) -> Option<String>) -> Option<String> {
    text.lines().enumerate().find_map(|(index, line)| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        why(line).map(|why| format!("line {} {line:?}: {why}", index + 1))
    })
}

/// One fstab line, its escapes read as libmount 2.38 does (only `\011`, `\012`, `\040` and
/// `\134`, what its `mangle()` writes) or, with `all_octal`, every `\NNN` decoded, as another
/// reader could.
fn refuse_fstab_line(line: &str, all_octal: bool, hosts: &HostPaths) -> Option<String> {
    let fields: Vec<String> = line
        .split_whitespace()
        .map(|f| unmangle(f, all_octal))
        .collect();
    let [what, place, kind, rest @ ..] = fields.as_slice() else {
        return None;
    };
    let options = rest.first().map_or("", String::as_str);
    // fstab's root file system line is never mounted over, only remounted; which one it is is
    // chosen at boot (root-equivalent by design), and every fstab has it.
    let root = Pattern::literal(place).relation("/") == Some(Relation::Is);
    if kind == "swap" {
        swap_what(what, hosts)
    } else {
        mount_paths(
            (!root).then_some(place.as_str()),
            Some(what),
            options,
            hosts,
        )
    }
}

/// Why `/etc/crypttab` with `text` has systemd-cryptsetup open a host path as an encrypted
/// device, if it does: with `swap` or `tmp` it formats the mapping, overwriting the source.
pub fn refuse_crypttab(text: &str, hosts: &HostPaths) -> Option<String> {
    first_refused_line(text, |line| {
        let device = unmangle(line.split_whitespace().nth(1)?, true);
        let hit = Pattern::literal(&device).touches(hosts, &AT_OR_INSIDE)?;
        Some(format!(
            "it opens {device} as an encrypted device (formatted with swap or tmp), {hit}"
        ))
    })
}

/// libmount's unmangling of an fstab field: `\NNN` octal escapes (`\040` is a space); without
/// `all_octal`, only the four libmount 2.38 decodes.
fn unmangle(field: &str, all_octal: bool) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| {
            bytes[i] == b'\\'
                && d.iter().all(|b| (b'0'..=b'7').contains(b))
                && (all_octal || [&b"011"[..], b"012", b"040", b"134"].contains(d))
        });
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, b| n.wrapping_mul(8) + (b - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A mount's point, source and options: the point and a path source (a bind or a loop file
/// exposes it at the point, writable) at, inside or above a host path; an overlay's
/// `upperdir=`/`workdir=`, which the kernel writes.
fn mount_paths(
    place: Option<&str>,
    what: Option<&str>,
    options: &str,
    hosts: &HostPaths,
) -> Option<String> {
    if let Some(place) = place.filter(|p| p.starts_with('/')) {
        if let Some(hit) = Pattern::literal(place).touches(hosts, &ANY) {
            return Some(format!("it mounts over {place}, {hit}"));
        }
    }
    if let Some(what) = what.filter(|w| w.starts_with('/')) {
        if let Some(hit) = Pattern::literal(what).touches(hosts, &ANY) {
            return Some(format!(
                "it mounts {what} elsewhere (a bind or loop mount exposes it writable), {hit}"
            ));
        }
    }
    options.split(',').find_map(|option| {
        let dir = option
            .strip_prefix("upperdir=")
            .or_else(|| option.strip_prefix("workdir="))?;
        let hit = Pattern::literal(dir).touches(hosts, &ANY)?;
        Some(format!("its overlay writes to {dir}, {hit}"))
    })
}

/// A swap area PID 1 activates (and hibernation writes) at or inside a host path.
fn swap_what(what: &str, hosts: &HostPaths) -> Option<String> {
    let hit = Pattern::literal(what).touches(hosts, &AT_OR_INSIDE)?;
    Some(format!("it activates {what} as swap, {hit}"))
}

/// Why a unit file or drop-in of `owner` with `text` has PID 1 touch one of `hosts`: a mount,
/// automount or swap unit's own name, or a directive naming such a path.
pub fn refuse_unit(
    text: &str,
    owner: Owner,
    manager: Manager,
    hosts: &HostPaths,
) -> Option<String> {
    if let (Owner::Unit(name), Manager::System) = (owner, manager) {
        let path = if name.prefix == "-" {
            "/".to_string()
        } else {
            format!("/{}", unitfile::unescape(name.prefix))
        };
        let why = match name.unit_type {
            "mount" | "automount" => mount_paths(Some(&path), None, "", hosts),
            "swap" => swap_what(&path, hosts),
            _ => None,
        };
        if let Some(why) = why {
            return Some(format!(
                "{}.{} names its path {path}: {why}",
                name.prefix, name.unit_type
            ));
        }
    }
    let directives = unitfile::parse(text);
    let make_directory = directives.iter().any(|d| {
        is_key(d, &["Path"], "MakeDirectory")
            && matches!(d.value.as_str(), "1" | "yes" | "true" | "on")
    });
    for d in &directives {
        if let Some(why) = refuse_directive(d, owner, manager, hosts, make_directory) {
            return Some(format!(
                "[{}] {}={} (line {}): {why}",
                d.section, d.key, d.value, d.line
            ));
        }
    }
    None
}

/// Whether `d` is `key` in one of `sections`, in any letter case, as the model reads every
/// directive.
fn is_key(d: &unitfile::Directive, sections: &[&str], key: &str) -> bool {
    sections.iter().any(|s| d.section.eq_ignore_ascii_case(s)) && d.key.eq_ignore_ascii_case(key)
}

/// Why directive `d` of a unit of `owner` has PID 1 touch one of `hosts`, if it does.
fn refuse_directive(
    d: &unitfile::Directive,
    owner: Owner,
    manager: Manager,
    hosts: &HostPaths,
    make_directory: bool,
) -> Option<String> {
    let touches =
        |value: &str, relations: &[Relation]| value_pattern(value, owner).touches(hosts, relations);
    refuse_mount_directive(d, &touches, hosts)
        .or_else(|| refuse_exec_directive(d, &touches, manager))
        .or_else(|| refuse_listener(d, &touches, make_directory))
}

/// What a directive's value touches among the host's paths, in one of the relations.
type Touches<'a> = dyn Fn(&str, &[Relation]) -> Option<String> + 'a;

/// `[Mount]` and `[Automount]` `Where=`, `What=` and `Options=`, and `[Swap]` `What=`.
fn refuse_mount_directive(
    d: &unitfile::Directive,
    touches: &Touches,
    hosts: &HostPaths,
) -> Option<String> {
    if is_key(d, &["Mount", "Automount"], "Where") {
        let hit = touches(&d.value, &ANY)?;
        return Some(format!("it mounts over {}, {hit}", d.value));
    }
    if is_key(d, &["Mount"], "What") && d.value.starts_with(['/', '%']) {
        let hit = touches(&d.value, &ANY)?;
        return Some(format!(
            "it mounts {} elsewhere (a bind or loop mount exposes it writable), {hit}",
            d.value
        ));
    }
    if is_key(d, &["Mount"], "Options") {
        return mount_paths(None, None, &d.value, hosts);
    }
    if is_key(d, &["Swap"], "What") {
        let hit = touches(&d.value, &AT_OR_INSIDE)?;
        return Some(format!("it activates {} as swap, {hit}", d.value));
    }
    None
}

/// The execution settings whose path PID 1 removes, opens or creates and chowns.
fn refuse_exec_directive(
    d: &unitfile::Directive,
    touches: &Touches,
    manager: Manager,
) -> Option<String> {
    if is_key(d, &["Service"], "PIDFile") {
        // A relative PID file is under /run; PID 1 removes it when the service has stopped.
        let value = if d.value.starts_with('/') || d.value.starts_with('%') {
            d.value.clone()
        } else {
            format!("/run/{}", d.value)
        };
        let hit = touches(&value, &AT_OR_INSIDE)?;
        return Some(format!(
            "PID 1 removes this file when the service stops, {hit}"
        ));
    }
    for key in ["StandardOutput", "StandardError"] {
        if is_key(d, &EXEC_SECTIONS, key) {
            let path = ["file:", "append:", "truncate:"]
                .iter()
                .find_map(|p| d.value.strip_prefix(p))?;
            let hit = touches(path, &AT_OR_INSIDE)?;
            return Some(format!("PID 1 opens {path} for writing, {hit}"));
        }
    }
    if is_key(d, &EXEC_SECTIONS, "TTYPath") {
        let hit = touches(&d.value, &AT_OR_INSIDE)?;
        return Some(format!(
            "PID 1 opens it read-write and resets it as a terminal, {hit}"
        ));
    }
    for (key, base, private) in DIRECTORIES {
        if manager == Manager::User || !is_key(d, &EXEC_SECTIONS, key) {
            continue;
        }
        for word in unquoted_words(&d.value) {
            // `NAME:LINK` (systemd 250) makes a symlink LINK beside NAME too.
            for name in word.split(':').filter(|n| !n.is_empty()) {
                let mut places = vec![format!("{base}/{name}")];
                if private {
                    places.push(format!("{base}/private/{name}"));
                }
                for place in places {
                    if let Some(hit) = touches(&place, &ANY) {
                        let moved = if private {
                            format!(" (with DynamicUser=, moved under {base}/private)")
                        } else {
                            String::new()
                        };
                        return Some(format!("PID 1 creates and chowns {place}{moved}, {hit}"));
                    }
                }
            }
        }
    }
    None
}

/// `[Socket]` listeners and links, and `[Path]` directories made with `MakeDirectory=yes`.
fn refuse_listener(
    d: &unitfile::Directive,
    touches: &Touches,
    make_directory: bool,
) -> Option<String> {
    for key in SOCKET_PATHS {
        if !is_key(d, &["Socket"], key) {
            continue;
        }
        for word in unquoted_words(&d.value) {
            if !word.starts_with(['/', '%']) {
                continue; // a port, an address, an abstract socket
            }
            if let Some(hit) = touches(&word, &AT_OR_INSIDE) {
                return Some(format!(
                    "PID 1 creates, opens or (RemoveOnStop=) unlinks {word}, {hit}"
                ));
            }
        }
    }
    if make_directory && WATCHED_PATHS.iter().any(|k| is_key(d, &["Path"], k)) {
        let hit = touches(&d.value, &AT_OR_INSIDE)?;
        return Some(format!("PID 1 creates it (MakeDirectory=yes), {hit}"));
    }
    None
}

fn value_pattern(value: &str, owner: Owner) -> Pattern {
    Pattern::from_segs(&value_segs(value, owner))
}

/// A unit's value as path pieces: the name specifiers `unitfile` resolves, the system manager's
/// directories (`%t` is /run, `%S` /var/lib, ...), and the rest unknown: within one component
/// (a host name, a machine id) or, when it may hold a `/` (a home, an unescaped instance), any
/// path.
fn value_segs(value: &str, owner: Owner) -> Vec<Seg> {
    let value = unitfile::decode_hex_escapes(value);
    unitfile::resolve_specifiers(&value, owner)
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(t) => Seg::Lit(t),
            Piece::Unknown(c) => match c {
                't' => Seg::Lit("/run".into()),
                'S' => Seg::Lit("/var/lib".into()),
                'C' => Seg::Lit("/var/cache".into()),
                'L' => Seg::Lit("/var/log".into()),
                'E' => Seg::Lit("/etc".into()),
                'T' => Seg::Lit("/tmp".into()),
                'V' => Seg::Lit("/var/tmp".into()),
                'h' | 's' | 'y' | 'Y' | 'I' | 'f' | 'J' | 'P' | 'q' | 'd' | '%' => {
                    Seg::Open(format!("%{c}"))
                }
                _ => Seg::Wild,
            },
        })
        .collect()
}

/// Words as `extract_first_word(EXTRACT_UNQUOTE)` gives them: blanks split, quotes removed, a
/// backslash keeps the character after it.
fn unquoted_words(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => word.get_or_insert_with(String::new).extend(chars.next()),
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, ' ' | '\t' | '\n' | '\r') => out.extend(word.take()),
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

#[cfg(test)]
mod tests {
    use super::super::paths::host_paths;
    use super::*;
    use crate::model::config::Config;
    use crate::model::unitfile::UnitName;

    fn hosts() -> HostPaths {
        let config = Config::parse(r#"{"state_dir": "/srv/mesh-store"}"#, None).unwrap();
        host_paths(&config.identity)
    }

    fn unit(name: &str, text: &str) -> Option<String> {
        let name = UnitName::parse(name).unwrap();
        let owner = if name.is_template() {
            Owner::Template(name)
        } else {
            Owner::Unit(name)
        };
        refuse_unit(text, owner, Manager::System, &hosts())
    }

    #[test]
    fn fstab_lines_over_or_exposing_host_paths_are_refused() {
        let hosts = hosts();
        for (text, needle) in [
            (
                "tmpfs /var/lib/mesh-host tmpfs defaults 0 0",
                "mounts over /var/lib/mesh-host",
            ),
            ("/dev/sdb1 /etc ext4 defaults", "which holds /etc/mesh-host"),
            (
                "tmpfs /etc/mesh-host/config.json tmpfs",
                "inside /etc/mesh-host",
            ),
            (
                "/dev/sdb1 /etc/mesh\\055host ext4",
                "mounts over /etc/mesh-host",
            ),
            ("/dev/sdb1 /etc/x\\040y/../mesh-host ext4", "'..'"),
            ("/dev/sdb1 /usr/lib/systemd/system ext4", "unit directory"),
            ("/dev/sdb1 /usr/local ext4", "/usr/local/lib/systemd/system"),
            (
                "/dev/sdb1 /lib/systemd ext4",
                "which holds /lib/systemd/system",
            ),
            (
                "/etc/mesh-host /srv/cfg none bind",
                "mounts /etc/mesh-host elsewhere",
            ),
            ("/etc /srv/etc none bind,ro", "which holds /etc/mesh-host"),
            (
                "/var/lib/mesh-host/img /mnt auto loop",
                "the host's own store",
            ),
            (
                "overlay /mnt overlay lowerdir=/usr,upperdir=/srv/mesh-store/u,workdir=/tmp/w",
                "its overlay writes to /srv/mesh-store/u",
            ),
            ("/srv/mesh-store/swapfile none swap sw 0 0", "as swap"),
            ("# comment\n\n/dev/sdb1 /var ext4 defaults", "line 3"),
        ] {
            let found = refuse_fstab(text, &hosts);
            assert!(
                found.as_deref().is_some_and(|f| f.contains(needle)),
                "{text}: {found:?}"
            );
        }
        let everyday = "# /etc/fstab\nUUID=1234 / ext4 defaults 0 1\n\
            /dev/sda2 /srv/data xfs defaults,noatime 0 2\n\
            /dev/sda3 none swap sw 0 0\n\
            tmpfs /tmp tmpfs mode=1777 0 0\n\
            server:/export /mnt/nfs nfs defaults 0 0\n\
            /srv/data/www /var/www none bind 0 0\n\
            /dev/sdc1 /var/lib/mesh-hostile ext4 defaults 0 2\n";
        assert_eq!(refuse_fstab(everyday, &hosts), None);
    }

    #[test]
    fn crypttab_devices_in_host_paths_are_refused() {
        let hosts = hosts();
        let found = refuse_crypttab("# x\nswap /srv/mesh-store/img /dev/urandom swap\n", &hosts);
        assert!(found.is_some_and(|f| f.contains("line 2") && f.contains("store")));
        let everyday = "home UUID=1 none luks\nswap /dev/sda3 /dev/urandom swap,cipher=aes\n";
        assert_eq!(refuse_crypttab(everyday, &hosts), None);
    }

    #[test]
    fn mount_automount_and_swap_units_by_name_and_content() {
        for (name, text, needle) in [
            (
                "var-lib-mesh\\x2dhost.mount",
                "[Mount]\nWhat=tmpfs",
                "names its path /var/lib/mesh-host",
            ),
            ("etc.mount", "", "which holds /etc/mesh-host"),
            (
                "-.mount",
                "[Mount]\nWhat=tmpfs\n",
                "names its path /: it mounts over /",
            ),
            (
                "x.mount",
                "[Mount]\nWhere=/\n",
                "mounts over /, which holds",
            ),
            ("usr-lib-systemd-system.automount", "", "unit directory"),
            (
                "srv-mesh\\x2dstore-swap.swap",
                "",
                "activates /srv/mesh-store/swap as swap",
            ),
            (
                "srv-cfg.mount",
                "[Mount]\nWhat=/etc/mesh-host\nOptions=bind",
                "mounts /etc/mesh-host elsewhere",
            ),
            (
                "srv-x.mount",
                "[Mount]\nWhat=overlay\nOptions=upperdir=/etc/mesh-host/u,workdir=/w",
                "overlay writes",
            ),
            ("srv-x.mount", "[Mount]\nWhere=/etc", "mounts over /etc"),
            ("srv-x.mount", "[Mount]\nWhere=%h", "%h cannot be resolved"),
            (
                "srv-x.mount",
                "[Mount]\nWhat=%S/mesh-host\nOptions=bind",
                "/var/lib/mesh-host",
            ),
            ("x.swap", "[Swap]\nWhat=/var/lib/mesh-host/s", "as swap"),
        ] {
            let found = unit(name, text);
            assert!(
                found.as_deref().is_some_and(|f| f.contains(needle)),
                "{name}: {found:?}"
            );
        }
        for (name, text) in [
            (
                "srv-data.mount",
                "[Mount]\nWhat=/dev/sdb1\nWhere=/srv/data\nType=xfs\n",
            ),
            (
                "var-lib-machines.mount",
                "[Mount]\nWhat=/var/lib/machines.raw\nType=btrfs\nOptions=loop",
            ),
            ("tmp.mount", "[Mount]\nWhat=tmpfs\nWhere=/tmp\nType=tmpfs\n"),
            ("dev-sda3.swap", "[Swap]\nWhat=/dev/sda3\n"),
            (
                "proc-sys-fs-binfmt_misc.automount",
                "[Automount]\nWhere=/proc/sys/fs/binfmt_misc\n",
            ),
            ("var-lib-mesh\\x2dhostile.mount", "[Mount]\nWhat=tmpfs\n"),
        ] {
            assert_eq!(unit(name, text), None, "{name}");
        }
    }

    #[test]
    fn directives_whose_path_pid1_writes() {
        for (name, text, needle) in [
            (
                "x.service",
                "[Service]\nPIDFile=/var/lib/mesh-host/ledger.json",
                "removes this file",
            ),
            (
                "x.service",
                "[Service]\nPIDFile=../var/lib/mesh-host/x",
                "'..'",
            ),
            (
                "x.service",
                "[Service]\nPIDFile=%S/mesh-host/x.pid",
                "/var/lib/mesh-host",
            ),
            (
                "x.service",
                "[Service]\nPIDFile=%h/x.pid",
                "%h cannot be resolved",
            ),
            (
                "x.service",
                "[Service]\nStandardOutput=truncate:/etc/mesh-host/config.json",
                "opens /etc/mesh-host/config.json for writing",
            ),
            (
                "x.service",
                "[Service]\nStandardError=append:/usr/bin/mesh-host",
                "binary",
            ),
            (
                "x.service",
                "[Service]\nStandardOutput=file:%E/mesh-host/config.json",
                "configuration",
            ),
            (
                "x.service",
                "[Service]\nTTYPath=/etc/mesh-host/config.json",
                "as a terminal",
            ),
            (
                "x.service",
                "[Service]\nStateDirectory=mesh-host",
                "creates and chowns /var/lib/mesh-host",
            ),
            (
                "x.service",
                "[Service]\nStateDirectory=a mesh-host",
                "/var/lib/mesh-host",
            ),
            (
                "x.service",
                "[Service]\nStateDirectory=x:mesh-host",
                "/var/lib/mesh-host",
            ),
            (
                "x.service",
                "[Service]\nConfigurationDirectory=mesh-host",
                "/etc/mesh-host",
            ),
            (
                "x.service",
                "[Service]\nConfigurationDirectory=systemd",
                "which holds /etc/systemd/system",
            ),
            (
                "x.service",
                "[Service]\nRuntimeDirectory=systemd/transient",
                "/run/systemd/transient",
            ),
            (
                "x.service",
                "[Service]\nRuntimeDirectory=\"systemd\"",
                "which holds",
            ),
            (
                "x.service",
                "[Service]\nLogsDirectory=../lib/mesh-host",
                "'..'",
            ),
            ("x.service", "[Service]\nCacheDirectory=../../etc", "'..'"),
            (
                "mesh-host@x.service",
                "[Service]\nStateDirectory=%p",
                "/var/lib/mesh-host",
            ),
            (
                "x@.service",
                "[Service]\nStateDirectory=%I",
                "%I cannot be resolved",
            ),
            (
                "x.socket",
                "[Socket]\nListenStream=/etc/mesh-host/sock\nRemoveOnStop=yes",
                "unlinks /etc/mesh-host/sock",
            ),
            (
                "x.socket",
                "[Socket]\nListenFIFO=/var/lib/mesh-host/ledger.json",
                "store",
            ),
            (
                "x.socket",
                "[Socket]\nListenSpecial=/etc/mesh-host/config.json",
                "configuration",
            ),
            (
                "x.socket",
                "[Socket]\nListenStream=/run/x\nSymlinks=/run/y /etc/systemd/system/x.service",
                "unit directory",
            ),
            (
                "x.path",
                "[Path]\nMakeDirectory=yes\nDirectoryNotEmpty=/etc/mesh-host/x",
                "MakeDirectory",
            ),
            (
                "x.mount",
                "[Mount]\nStandardOutput=file:/etc/mesh-host/x",
                "for writing",
            ),
            (
                "x.service",
                "[service]\npidfile=/etc/mesh-host/x",
                "removes",
            ),
        ] {
            let found = unit(name, text);
            assert!(
                found.as_deref().is_some_and(|f| f.contains(needle)),
                "{text}: {found:?}"
            );
        }
        for text in [
            "[Service]\nPIDFile=/run/x.pid\nStandardOutput=journal\nStateDirectory=x systemd/timesync\n",
            "[Service]\nPIDFile=mesh-host.pid\nRuntimeDirectory=mesh-host\nLogsDirectory=mesh-host\n",
            "[Service]\nStandardInput=file:/etc/mesh-host/config.json\nReadWritePaths=/var/lib/mesh-host\n",
            "[Service]\nStateDirectory=mesh-hostile\nConfigurationDirectory=systemd/network\n",
            "[Socket]\nListenStream=/run/dbus/system_bus_socket\nListenStream=80\nListenStream=@abstract\n",
            "[Socket]\nListenStream=/run/systemd/journal/stdout\nSymlinks=/dev/log\n",
            "[Path]\nDirectoryNotEmpty=/etc/mesh-host\n",
            "[Unit]\nPIDFile=/etc/mesh-host/x\n",
        ] {
            assert_eq!(unit("x.service", text), None, "{text}");
        }
    }
}
