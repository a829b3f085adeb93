//! podman containers as a declaration states them: names, image, command, environment, ports,
//! volumes (mounts of the host's paths refused), network, the digest.

use std::collections::BTreeMap;

use serde_json::Value;

use super::kind::{check_argument, KindSpec, NoOriginal};
use crate::model::config::{Identity, Limits};
use crate::model::digest::Digest;
use crate::model::fields::{FieldDoc, FieldType, Fields, STATE};
use crate::model::selfref::Refusal;
use crate::util::codec;

pub struct Containers;

/// The longest environment value: podman reads `--env-file` a line at a time, in 64 KiB lines.
pub const MAX_ENV_VALUE: usize = 60_000;

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub present: bool,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub ports: Vec<String>,
    pub volumes: Vec<String>,
    pub network: Option<String>,
    /// Run an init process as PID 1 that forwards signals and reaps children (`podman --init`).
    pub init: bool,
    /// Whether it should be running (default) or only exist.
    pub running: bool,
}

impl KindSpec for Containers {
    const ABOUT: &'static str = "podman containers";
    const KEY: &'static str = "a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)";
    const FIELDS: &'static [FieldDoc] = &[
        STATE,
        FieldDoc {
            name: "image",
            ty: FieldType::String,
            default: Some("required unless state is absent"),
            about: "The image, such as localhost/web:1.",
        },
        FieldDoc {
            name: "command",
            ty: FieldType::Strings,
            default: Some("the image's"),
            about: "The command (after the image).",
        },
        FieldDoc {
            name: "env",
            ty: FieldType::StringMap,
            default: Some("none"),
            about: "Environment variables; their values are secret (passed in a 0600 env file).",
        },
        FieldDoc {
            name: "ports",
            ty: FieldType::Strings,
            default: Some("none"),
            about: "--publish values, such as 127.0.0.1:8080:80/tcp.",
        },
        FieldDoc {
            name: "volumes",
            ty: FieldType::Strings,
            default: Some("none"),
            about: "--volume values, such as /srv/data:/data:ro or name:/data.",
        },
        FieldDoc {
            name: "network",
            ty: FieldType::String,
            default: Some("podman's"),
            about: "The --network value (host, none, a network name).",
        },
        FieldDoc {
            name: "init",
            ty: FieldType::Bool,
            default: Some("false"),
            about: "Run an init as PID 1 (podman --init).",
        },
        FieldDoc {
            name: "running",
            ty: FieldType::Bool,
            default: Some("true"),
            about: "false keeps it created but stopped.",
        },
    ];
    const REQUIRED: &'static [&'static [&'static str]] = &[&["image"]];
    type Spec = Spec;
    type Original = NoOriginal;

    fn check_key(key: &str) -> Result<(), String> {
        check_argument("container", key)?;
        let mut chars = key.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            return Err(format!(
                "container name {key:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"
            ));
        }
        Ok(())
    }

    fn parse(_key: &str, fields: &mut Fields, _limits: &Limits) -> Option<Spec> {
        let present = fields.present();
        let image = fields.str("image");
        let command = fields.strings("command").unwrap_or_default();
        let env = fields.string_map("env").unwrap_or_default();
        let ports = fields.strings("ports").unwrap_or_default();
        let volumes = fields.strings("volumes").unwrap_or_default();
        let network = fields.str("network");
        let init = fields.bool("init").unwrap_or(false);
        let running = fields.bool("running").unwrap_or(true);
        if !present {
            for name in [
                "image", "command", "env", "ports", "volumes", "network", "init", "running",
            ] {
                if fields.has(name) {
                    fields.problem(name, "makes no sense for a container declared absent");
                }
            }
            return Some(Spec {
                present,
                image: String::new(),
                command: Vec::new(),
                env,
                ports: Vec::new(),
                volumes: Vec::new(),
                network: None,
                init,
                running: false,
            });
        }
        match image {
            None if !fields.has("image") => fields.problem("image", "missing"),
            Some(i) => {
                if let Err(e) = check_argument("image", i) {
                    fields.problem("image", e);
                }
            }
            None => {}
        }
        check_env(fields, &env);
        check_ports_and_volumes(fields, &ports, &volumes);
        if let Some(n) = network {
            if let Err(e) = check_argument("network", n) {
                fields.problem("network", e);
            }
        }
        Some(Spec {
            present,
            image: image?.to_string(),
            command: command.iter().map(|s| s.to_string()).collect(),
            env,
            ports: ports.iter().map(|s| s.to_string()).collect(),
            volumes: volumes.iter().map(|s| s.to_string()).collect(),
            network: network.map(str::to_string),
            init,
            running,
        })
    }

    fn refuse_self(_key: &str, spec: &Spec, identity: &Identity) -> Option<Refusal> {
        spec.volumes.iter().find_map(|text| {
            let volume = parse_volume(text).ok()?;
            let source = volume.host_path.as_deref();
            let refused = |why| Refusal::Volume {
                volume: text.clone(),
                why,
            };
            if let Some(why) = source.and_then(|s| {
                let writes = !volume.read_only || volume.changes_source.is_some();
                crate::model::selfref::refuse_mount_source(s, writes)
            }) {
                return Some(refused(why));
            }
            let mut writes: Vec<(&str, String)> = Vec::new();
            if let Some(source) = source {
                if !volume.read_only {
                    writes.push((source, "read-write".into()));
                }
                if let Some(option) = volume.changes_source {
                    writes.push((
                        source,
                        format!("with :{option} (podman changes the source)"),
                    ));
                }
            }
            for dir in &volume.overlay_dirs {
                writes.push((dir, "as an overlay's upper or work directory".into()));
            }
            writes.iter().find_map(|(path, how)| {
                crate::model::selfref::refuse_mount(path, how, identity).map(refused)
            })
        })
    }

    fn digest(spec: &Spec) -> Digest {
        digest(spec)
    }
}

/// Each env variable's name and value, as podman's `--env-file` carries them.
fn check_env(fields: &mut Fields, env: &BTreeMap<String, String>) {
    for (name, value) in env {
        // What podman's --env-file carries unchanged, in every version.
        let problem = if value.contains(['\n', '\r', '\0']) {
            Some("contains a line break or NUL, which podman's --env-file cannot carry")
        } else if value.starts_with(['"', '\'']) {
            Some("starts with a quote, which newer podman strips from an --env-file value")
        } else if value.len() > MAX_ENV_VALUE {
            Some("is longer than podman's --env-file line limit of 60000 bytes")
        } else {
            None
        };
        if let Some(problem) = problem {
            let at = format!("{}[{}]", fields.at("env"), Value::String(name.clone()));
            fields.problems.push(at, format!("its value {problem}"));
        }
    }
    for name in env.keys() {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            let at = format!("{}[{}]", fields.at("env"), Value::String(name.clone()));
            fields
                .problems
                .push(at, "is not a valid environment variable name");
        }
    }
}

/// Each port mapping and volume of a container's lists, each problem at its index.
fn check_ports_and_volumes(fields: &mut Fields, ports: &[&str], volumes: &[&str]) {
    for (i, port) in ports.iter().enumerate() {
        if !valid_port(port) {
            let at = format!("{}[{i}]", fields.at("ports"));
            fields.problems.push(
                at,
                format!("{port:?} is not a port mapping such as \"8080:80\" or \"127.0.0.1:8080:80/tcp\""),
            );
        }
    }
    for (i, volume) in volumes.iter().enumerate() {
        if let Err(e) = parse_volume(volume) {
            let at = format!("{}[{i}]", fields.at("volumes"));
            fields.problems.push(
                at,
                format!("{volume:?} is not a volume such as \"/srv/data:/data:ro\" or \"name:/data\": {e}"),
            );
        }
    }
}

/// The canonical encoding of a spec (`codec::Canonical`): `containers 0x00 0x01`, then `present`
/// (bool), `image` (str), `command` (list of str), `env` (map), `ports` and `volumes` (list of
/// str), `network` (option of str), `init` (bool). `running` is not in it: a start or a stop
/// changes it, never a recreate.
pub fn encoding(spec: &Spec) -> codec::Canonical {
    let mut encoding = codec::Canonical::new("containers", 1);
    encoding
        .bool(spec.present)
        .str(&spec.image)
        .strs(spec.command.iter().map(String::as_str))
        .map(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .strs(spec.ports.iter().map(String::as_str))
        .strs(spec.volumes.iter().map(String::as_str))
        .option(spec.network.as_deref(), codec::Canonical::str)
        .bool(spec.init);
    encoding
}

/// The digest the ledger keeps of a spec: the SHA-256 of its encoding (internal: the store is
/// 0700).
pub fn digest(spec: &Spec) -> Digest {
    Digest::Sha256(encoding(spec).digest())
}

/// A `--publish` value as podman reads it: `[[IP:][HOST_PORT]:]CONTAINER_PORT[/PROTOCOLS]`, each
/// port a number or a range (`8000-8010`) within 1..=65535 (a host port may be 0 or left out:
/// podman picks one), the IP v4 or `[v6]`, the protocols `tcp`, `udp`, `sctp` joined by commas.
/// Checked whole, so a port past 65535 is refused by field, not by podman at apply.
pub fn valid_port(p: &str) -> bool {
    let (mapping, protocols) = match p.split_once('/') {
        Some((mapping, protocols)) => (mapping, Some(protocols)),
        None => (p, None),
    };
    if let Some(protocols) = protocols {
        if !protocols
            .split(',')
            .all(|p| matches!(p, "tcp" | "udp" | "sctp"))
        {
            return false;
        }
    }
    let (ip_ok, ports) = match mapping.strip_prefix('[') {
        Some(v6) => match v6.split_once("]:") {
            Some((ip, rest)) => (ip.parse::<std::net::Ipv6Addr>().is_ok(), rest),
            None => return false,
        },
        None => match mapping.matches(':').count() {
            2 => match mapping.split_once(':') {
                Some((ip, rest)) => (
                    ip.is_empty() || ip.parse::<std::net::Ipv4Addr>().is_ok(),
                    rest,
                ),
                None => return false,
            },
            _ => (true, mapping),
        },
    };
    let range = |text: &str, lowest: u16| {
        let (low, high) = text.split_once('-').unwrap_or((text, text));
        let port = |t: &str| {
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u16>().ok())
                .flatten()
        };
        matches!((port(low), port(high)), (Some(l), Some(h)) if lowest <= l && l <= h)
    };
    ip_ok
        && match ports.split_once(':') {
            Some((host, container)) => (host.is_empty() || range(host, 0)) && range(container, 1),
            None => range(ports, 1),
        }
}

/// A `--volume` value as podman reads it (podman-run(1), `--volume`).
#[derive(Debug, PartialEq)]
pub struct Volume {
    /// The host directory of a bind mount, normalised; `None` for a named volume.
    pub host_path: Option<String>,
    /// `ro`; an overlay (`O`) also leaves its source unchanged.
    pub read_only: bool,
    /// `U` (chown) or `z`/`Z` (relabel): podman changes the source itself, even read-only.
    pub changes_source: Option<&'static str>,
    /// An overlay's `upperdir=` and `workdir=`, normalised: written to.
    pub overlay_dirs: Vec<String>,
}

/// podman's volume options, in groups of which at most one may be given.
pub const VOLUME_OPTIONS: [&[&str]; 11] = [
    &["ro", "rw"],
    &["z", "Z"],
    &["U"],
    &["O"],
    &["exec", "noexec"],
    &["dev", "nodev"],
    &["suid", "nosuid"],
    &["bind", "rbind"],
    &["copy", "nocopy"],
    &[
        "private",
        "rprivate",
        "shared",
        "rshared",
        "slave",
        "rslave",
        "unbindable",
        "runbindable",
    ],
    &["idmap"],
];

/// Parses `SOURCE:DEST[:OPTIONS]`: a host path (absolute; `.`, `//` and a trailing `/` are
/// normalised away) or a volume name, an absolute destination, and
/// comma-separated options podman knows.
pub fn parse_volume(text: &str) -> Result<Volume, String> {
    if text.chars().any(char::is_control) {
        return Err("it contains control characters".into());
    }
    let parts: Vec<&str> = text.split(':').collect();
    let (source, destination, options) = match parts.as_slice() {
        [source, destination] => (*source, *destination, None),
        [source, destination, options] => (*source, *destination, Some(*options)),
        [_] => return Err("it has no source (SOURCE:DEST)".into()),
        _ => return Err("it has more than two ':'".into()),
    };
    if !destination.starts_with('/') {
        return Err(format!(
            "destination {destination:?} is not an absolute path"
        ));
    }
    let host_path = if source.starts_with('/') {
        Some(normalise(source))
    } else if source.starts_with('.') {
        return Err(format!(
            "source {source:?} is relative to podman's working directory; give an absolute path"
        ));
    } else {
        check_volume_name(source)?;
        None
    };
    let mut volume = Volume {
        host_path,
        read_only: false,
        changes_source: None,
        overlay_dirs: Vec::new(),
    };
    let mut seen: Vec<usize> = Vec::new();
    for option in options
        .map(|o| o.split(',').collect())
        .unwrap_or(Vec::new())
    {
        if let Some(dir) = option
            .strip_prefix("upperdir=")
            .or_else(|| option.strip_prefix("workdir="))
        {
            if !dir.starts_with('/') {
                return Err(format!("{option:?} is not an absolute path"));
            }
            volume.overlay_dirs.push(normalise(dir));
            continue;
        }
        let name = option.split_once('=').map_or(option, |(n, _)| n);
        let Some(group) = VOLUME_OPTIONS
            .iter()
            .position(|g| g.contains(&name) && (name == "idmap" || name == option))
        else {
            return Err(format!("{option:?} is not a podman volume option"));
        };
        if seen.contains(&group) {
            return Err(format!(
                "{option:?} repeats or contradicts another option ({})",
                VOLUME_OPTIONS[group].join("/")
            ));
        }
        seen.push(group);
        match name {
            "ro" | "O" => volume.read_only = true,
            "U" => volume.changes_source = Some("U"),
            "z" => volume.changes_source = Some("z"),
            "Z" => volume.changes_source = Some("Z"),
            _ => {}
        }
    }
    Ok(volume)
}

/// A host path without `.`, empty components or a trailing `/`. `..` is kept: it cannot be
/// resolved without following symlinks, so a writable mount through it is refused.
pub fn normalise(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('/') {
        if !matches!(part, "" | ".") {
            out.push('/');
            out.push_str(part);
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

pub fn check_volume_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(format!(
            "volume name {name:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"
        ));
    }
    Ok(())
}
