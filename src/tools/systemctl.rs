//! systemctl: the arguments the units kind runs it with, and pure parsers of what `show` and
//! `is-enabled` print into systemd's own states. Words a newer systemd adds parse as `Other`.

use std::collections::BTreeMap;
use std::path::Path;

use super::words;

words! {
    /// Whether systemd found and loaded the unit's configuration (`LoadState`).
    LoadState {
        Stub = "stub",
        Loaded = "loaded",
        NotFound = "not-found",
        BadSetting = "bad-setting",
        Error = "error",
        Merged = "merged",
        Masked = "masked",
    }
}

words! {
    /// Whether the unit runs (`ActiveState`).
    ActiveState {
        Active = "active",
        Reloading = "reloading",
        Inactive = "inactive",
        Failed = "failed",
        Activating = "activating",
        Deactivating = "deactivating",
        Maintenance = "maintenance",
        Refreshing = "refreshing",
    }
}

impl ActiveState {
    /// Running or on its way to it: what `stop` would act on.
    pub fn running(&self) -> bool {
        matches!(
            self,
            ActiveState::Active | ActiveState::Activating | ActiveState::Reloading
        )
    }
}

words! {
    /// Whether the unit is enabled, as its unit files say (`UnitFileState`, and what
    /// `is-enabled` answers).
    UnitFileState {
        Enabled = "enabled",
        EnabledRuntime = "enabled-runtime",
        Linked = "linked",
        LinkedRuntime = "linked-runtime",
        Alias = "alias",
        Masked = "masked",
        MaskedRuntime = "masked-runtime",
        Static = "static",
        Disabled = "disabled",
        Indirect = "indirect",
        Generated = "generated",
        Transient = "transient",
        Bad = "bad",
        NotFound = "not-found",
    }
}

impl UnitFileState {
    pub fn enabled(&self) -> bool {
        matches!(self, UnitFileState::Enabled | UnitFileState::EnabledRuntime)
    }

    pub fn masked(&self) -> bool {
        matches!(self, UnitFileState::Masked | UnitFileState::MaskedRuntime)
    }

    /// Enabled or not by something other than its own `[Install]` section: `enable` has
    /// nothing to do for it.
    pub fn not_enableable(&self) -> bool {
        matches!(
            self,
            UnitFileState::Static
                | UnitFileState::Alias
                | UnitFileState::Indirect
                | UnitFileState::Generated
        )
    }
}

/// What `systemctl` is asked to do to units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Start,
    Stop,
    Restart,
    Reload,
    Enable,
    Disable,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Start => "start",
            Verb::Stop => "stop",
            Verb::Restart => "restart",
            Verb::Reload => "reload",
            Verb::Enable => "enable",
            Verb::Disable => "disable",
        }
    }

    /// Acts on the unit manager, not only on unit files: cannot be done in a mounted root.
    pub fn needs_running_system(self) -> bool {
        !matches!(self, Verb::Enable | Verb::Disable)
    }
}

/// The properties `show` is asked for, and that `parse_show` reads.
const SHOWN: &str = "Id,LoadState,ActiveState,UnitFileState";

/// `show`: the state of each unit named, one block each (`parse_show`). Exits 0 for units that
/// do not exist (`LoadState=not-found`).
pub fn show() -> Vec<String> {
    vec!["show".into(), "-p".into(), SHOWN.into()]
}

/// `is-enabled`, on the running system or offline in a mounted root: one answer a line
/// (`parse_is_enabled`); it stops at the first unit without a file, exiting 1.
pub fn is_enabled(root: Option<&Path>) -> Vec<String> {
    with_root(root, "is-enabled")
}

/// `VERB`; under a mounted root `--root=DIR VERB`, the offline form (unit-file verbs only).
pub fn verb(verb: Verb, root: Option<&Path>) -> Vec<String> {
    with_root(root, verb.as_str())
}

pub fn daemon_reload() -> Vec<String> {
    vec!["daemon-reload".into()]
}

fn with_root(root: Option<&Path>, verb: &str) -> Vec<String> {
    let root = root.map(|r| format!("--root={}", r.display()));
    root.into_iter().chain([verb.to_string()]).collect()
}

/// One unit as `show` describes it. A property it did not print, or printed empty (the
/// `UnitFileState` of a unit with no file), is `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub id: String,
    pub load: Option<LoadState>,
    pub active: Option<ActiveState>,
    pub unit_file: Option<UnitFileState>,
}

/// `show` output: one `Shown` per unit, in argument order.
pub fn parse_show(stdout: &str) -> Vec<Shown> {
    blocks(stdout)
        .into_iter()
        .map(|block| {
            let word = |name: &str| block.get(name).copied().filter(|v| !v.is_empty());
            Shown {
                id: word("Id").unwrap_or_default().to_string(),
                load: word("LoadState").map(LoadState::parse),
                active: word("ActiveState").map(ActiveState::parse),
                unit_file: word("UnitFileState").map(UnitFileState::parse),
            }
        })
        .collect()
}

/// `key=value` blocks, blank-line separated.
fn blocks(stdout: &str) -> Vec<BTreeMap<&str, &str>> {
    let mut blocks = Vec::new();
    let mut current = BTreeMap::new();
    for line in stdout.lines() {
        if line.is_empty() {
            if !current.is_empty() {
                blocks.push(std::mem::take(&mut current));
            }
        } else if let Some((k, v)) = line.split_once('=') {
            // A unit's properties never repeat: one seen again starts the next unit, so the
            // outputs of a batch split over several commands join without a blank line.
            if current.contains_key(k) {
                blocks.push(std::mem::take(&mut current));
            }
            current.insert(k, v);
        }
    }
    if !current.is_empty() {
        blocks.push(current);
    }
    blocks
}

/// What systemd says of a unit that its files and links decide, for the host's own units (the
/// units kind's confirmation, `kinds::units::confirm`): `Names` (aliases), where it was loaded
/// from, its drop-ins, its enablement, and every dependency in both directions except ordering
/// (`After=`/`Before=` act on nothing).
const STANDING_SCALARS: [&str; 5] = [
    "Id",
    "LoadState",
    "FragmentPath",
    "SourcePath",
    "UnitFileState",
];
const STANDING_LISTS: [&str; 27] = [
    "Names",
    "DropInPaths",
    "Requires",
    "Requisite",
    "Wants",
    "BindsTo",
    "PartOf",
    "Upholds",
    "RequiredBy",
    "RequisiteOf",
    "WantedBy",
    "BoundBy",
    "UpheldBy",
    "ConsistsOf",
    "Conflicts",
    "ConflictedBy",
    "OnSuccess",
    "OnSuccessOf",
    "OnFailure",
    "OnFailureOf",
    "Triggers",
    "TriggeredBy",
    "PropagatesReloadTo",
    "ReloadPropagatedFrom",
    "PropagatesStopTo",
    "StopPropagatedFrom",
    "JoinsNamespaceOf",
];

/// `show` of the properties `parse_standing` reads, one block per unit named.
pub fn show_standing() -> Vec<String> {
    let properties: Vec<&str> = STANDING_SCALARS
        .iter()
        .chain(&STANDING_LISTS)
        .copied()
        .collect();
    vec!["show".into(), "-p".into(), properties.join(",")]
}

/// A unit as systemd has loaded it (`show_standing`): single values by property name, and the
/// space-separated ones (names, drop-in paths, dependencies) as sets. A property not printed is
/// empty.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Standing {
    pub values: BTreeMap<&'static str, String>,
    pub lists: BTreeMap<&'static str, std::collections::BTreeSet<String>>,
}

impl Standing {
    pub fn value(&self, name: &str) -> &str {
        self.values.get(name).map_or("", String::as_str)
    }
}

/// `show_standing` output: one `Standing` per unit, in argument order.
pub fn parse_standing(stdout: &str) -> Vec<Standing> {
    blocks(stdout)
        .into_iter()
        .map(|block| Standing {
            values: STANDING_SCALARS
                .iter()
                .map(|&name| (name, block.get(name).copied().unwrap_or("").to_string()))
                .collect(),
            lists: STANDING_LISTS
                .iter()
                .map(|&name| {
                    let words = block.get(name).copied().unwrap_or("");
                    (name, words.split_whitespace().map(str::to_string).collect())
                })
                .collect(),
        })
        .collect()
}

/// The links `enable` says it created (`Created symlink LINK -> TARGET.`, or with quotes and an
/// arrow as newer systemd and UTF-8 locales print it), as (link, target), in order: exactly what
/// the run's enable made, to take back without `disable` (which follows `Also=` and takes the
/// links of every unit named there, though this run made none of them).
pub fn parse_created_links(output: &str) -> Vec<(String, String)> {
    let unquote = |s: &str| {
        let s = s.trim();
        s.strip_prefix('\'')
            .and_then(|s| s.strip_suffix('\''))
            .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
            .unwrap_or(s)
            .to_string()
    };
    output
        .lines()
        .filter_map(|line| line.trim().strip_prefix("Created symlink "))
        .filter_map(|rest| {
            let rest = rest.strip_suffix('.').unwrap_or(rest);
            let (link, target) = rest
                .split_once(" -> ")
                .or_else(|| rest.split_once(" \u{2192} "))?;
            Some((unquote(link), unquote(target)))
        })
        .collect()
}

/// `is-enabled` output: one state per line, in argument order (short when it stopped early).
pub fn parse_is_enabled(stdout: &str) -> Vec<UnitFileState> {
    stdout
        .lines()
        .map(|line| UnitFileState::parse(line.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{assert_recorded, generations};

    const SYSTEMCTL: &[&str] = &["systemctl", "--user"];

    fn shown(id: &str, load: &str, active: &str, unit_file: &str) -> Shown {
        Shown {
            id: id.into(),
            load: Some(LoadState::parse(load)),
            active: Some(ActiveState::parse(active)),
            unit_file: (!unit_file.is_empty()).then(|| UnitFileState::parse(unit_file)),
        }
    }

    #[test]
    fn parses_saved_show_output() {
        for g in generations("systemd") {
            let names = ["a.service", "b.service", "nonexistent.service"];
            assert_recorded(&g.read("systemctl-show.cmd"), SYSTEMCTL, &show(), &names);
            assert_eq!(
                parse_show(&g.read("systemctl-show.txt")),
                [
                    shown("a.service", "loaded", "active", "enabled"),
                    shown("b.service", "loaded", "inactive", "disabled"),
                    shown("nonexistent.service", "not-found", "inactive", ""),
                ]
            );
            // A name without a suffix comes back mangled, exit 0: why names are checked first.
            assert_recorded(
                &g.read("systemctl-show-nosuffix.cmd"),
                SYSTEMCTL,
                &show(),
                &["foo"],
            );
            let mangled = parse_show(&g.read("systemctl-show-nosuffix.txt"));
            assert_eq!(mangled, [shown("foo.service", "not-found", "inactive", "")]);
        }
    }

    #[test]
    fn show_blocks_split_where_a_property_repeats() {
        // Two commands' outputs joined with no blank line between them (a batch split under the
        // argument limit) still give one block per unit.
        let joined = "Id=a.service\nLoadState=loaded\nId=b.service\nLoadState=not-found\n";
        let blocks = parse_show(joined);
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert_eq!(blocks[1].id, "b.service");
        assert_eq!(blocks[1].active, None);
        // A word this version does not know is kept.
        assert_eq!(
            parse_show("Id=a.service\nActiveState=hibernating\n")[0].active,
            Some(ActiveState::Other("hibernating".into()))
        );
    }

    #[test]
    fn parses_saved_standing_output() {
        for g in generations("systemd") {
            assert_recorded(
                &g.read("systemctl-show-standing.cmd"),
                SYSTEMCTL,
                &show_standing(),
                &["mesh-host.service", "mesh-host.socket", "a.service"],
            );
            let units = parse_standing(&g.read("systemctl-show-standing.txt"));
            assert_eq!(units.len(), 3, "{units:?}");
            // Not found, yet loaded as a stub because a.service wants it: what it gains shows.
            let host = &units[0];
            assert_eq!(host.value("Id"), "mesh-host.service");
            assert_eq!(host.value("LoadState"), "not-found");
            assert_eq!(host.value("FragmentPath"), "");
            assert_eq!(
                host.lists["WantedBy"].iter().collect::<Vec<_>>(),
                ["a.service"]
            );
            assert!(units[1].lists["WantedBy"].is_empty());
            let a = &units[2];
            assert_eq!(a.value("UnitFileState"), "enabled");
            assert!(a.value("FragmentPath").ends_with("/a.service"), "{a:?}");
            assert!(a.lists["Wants"].contains("mesh-host.service"), "{a:?}");
            assert_eq!(a.lists["DropInPaths"].len(), 1, "{a:?}");
            assert!(a.lists["WantedBy"].contains("default.target"), "{a:?}");
        }
    }

    #[test]
    fn parses_saved_is_enabled_output() {
        for g in generations("systemd") {
            assert_recorded(
                &g.read("systemctl-is-enabled.cmd"),
                SYSTEMCTL,
                &is_enabled(None),
                &["a.service", "b.service"],
            );
            assert_eq!(
                parse_is_enabled(&g.read("systemctl-is-enabled.txt")),
                [UnitFileState::Enabled, UnitFileState::Disabled]
            );
            // systemd 252 exits 1 at the first unit without a file (the answer is short from
            // there on); 262 says `not-found` for it and goes on.
            assert_recorded(
                &g.read("systemctl-is-enabled-missing.cmd"),
                SYSTEMCTL,
                &is_enabled(None),
                &["a.service", "nonexistent.service", "b.service"],
            );
            let states = parse_is_enabled(&g.read("systemctl-is-enabled-missing.txt"));
            let whole = [
                UnitFileState::Enabled,
                UnitFileState::NotFound,
                UnitFileState::Disabled,
            ];
            assert!(
                states[..] == whole[..1] || states[..] == whole,
                "{}: {states:?}",
                g.name
            );
        }
    }

    #[test]
    fn parses_saved_offline_is_enabled_output() {
        for g in generations("systemd") {
            let root = Path::new("/tmp/mesh-sandbox/systemd/offline-root");
            assert_recorded(
                &g.read("systemctl-offline-is-enabled.cmd"),
                &["systemctl"],
                &is_enabled(Some(root)),
                &["c.service"],
            );
            assert_eq!(
                parse_is_enabled(&g.read("systemctl-offline-is-enabled.txt")),
                [UnitFileState::Enabled]
            );
            // No file: 252 exits 1 with nothing on stdout (the reason on stderr only); 262
            // exits 4 and says `not-found`. Not enabled either way.
            assert_recorded(
                &g.read("systemctl-offline-is-enabled-missing.cmd"),
                &["systemctl"],
                &is_enabled(Some(root)),
                &["nonexistent.service"],
            );
            let states = parse_is_enabled(&g.read("systemctl-offline-is-enabled-missing.txt"));
            assert!(
                states.is_empty() || states == [UnitFileState::NotFound],
                "{}: {states:?}",
                g.name
            );
        }
    }

    #[test]
    fn parses_saved_enable_output() {
        for g in generations("systemd") {
            assert_recorded(
                &g.read("systemctl-enable.cmd"),
                SYSTEMCTL,
                &verb(Verb::Enable, None),
                &["a.service"],
            );
            let dir = "/tmp/mesh-sandbox/systemd/config/systemd/user";
            let made = |link: &str| (format!("{dir}/{link}"), format!("{dir}/a.service"));
            assert_eq!(
                parse_created_links(&g.read("systemctl-enable.stderr")),
                [
                    made("a-alias.service"),
                    made("default.target.wants/a.service")
                ]
            );
            // Newer systemd quotes the paths; a UTF-8 locale prints an arrow.
            let quoted = "Created symlink '/etc/x.wants/a.service' \u{2192} '/etc/a.service'.\n";
            assert_eq!(
                parse_created_links(quoted),
                [("/etc/x.wants/a.service".into(), "/etc/a.service".into())]
            );
            assert!(parse_created_links("Unit a.service has no [Install] section.\n").is_empty());
        }
    }

    #[test]
    fn offline_verbs_name_the_root() {
        let root = Path::new("/mnt");
        assert_eq!(verb(Verb::Enable, Some(root)), ["--root=/mnt", "enable"]);
        assert_eq!(is_enabled(Some(root)), ["--root=/mnt", "is-enabled"]);
        assert_eq!(verb(Verb::Restart, None), ["restart"]);
        assert!(Verb::Restart.needs_running_system() && !Verb::Disable.needs_running_system());
    }
}
