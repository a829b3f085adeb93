//! The host's own configuration (`/etc/mesh-host/config.json`): where its store is, what it calls
//! itself (so it can refuse to manage itself), limits, and the tools it drives with their extra
//! arguments and timeouts, so the same binary drives a real machine or a test sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::trust::{PublicKey, Trust};
use crate::os::exec::{Stop, Tool};

mod keys;
mod read;

pub use keys::KEYS;
use read::{RawConfig, RawControlPlane, RawTool};

pub const DEFAULT_CONFIG_PATH: &str = "/etc/mesh-host/config.json";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/mesh-host";
/// The host's own package; always refused, whatever the config says.
pub const OWN_PACKAGE: &str = "nox-mesh-host";
/// The host's own unit; always refused, as is any other name the config gives it.
pub const OWN_UNIT: &str = "mesh-host.service";
/// The host's config directory; always refused.
pub const OWN_CONFIG_DIR: &str = "/etc/mesh-host";
/// The most of a config file read: a config is a few hundred bytes of JSON.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// What `mesh-host join` writes beside the config: `JOIN_KEYS`, each in one of the two files only. A file the package does not own, so removing and
/// reinstalling it (which puts back an empty config.json) never makes the node forget its
/// control plane.
pub const JOIN_FILE: &str = "join.json";
/// The keys join.json may hold.
const JOIN_KEYS: [&str; 2] = ["control_plane", "trusted_keys"];

/// join.json beside the config file at `config_path`.
pub fn join_path(config_path: &Path) -> PathBuf {
    config_path.with_file_name(JOIN_FILE)
}

/// What the host is, so that a declaration naming any of it is refused by name.
#[derive(Debug, Clone)]
pub struct Identity {
    pub unit_names: Vec<String>,
    pub package_names: Vec<String>,
    pub config_dir: PathBuf,
    /// The config file itself (`--config`) and the credentials it names (`ca_file`,
    /// `secret_file`), wherever they are.
    pub config_files: Vec<PathBuf>,
    pub state_dirs: Vec<PathBuf>,
    /// The unit search path under /etc (systemd.unit(5)) and the configured `unit_dir`: where
    /// systemd reads the host's unit file, its drop-ins and links to it.
    pub unit_dirs: Vec<PathBuf>,
}

impl Identity {
    /// The host's own names and directories, with those the config adds (`unit_name`, the
    /// unit and state directories); the credentials the control plane's section names are added
    /// once it is read.
    fn new(
        unit_name: Option<String>,
        unit_dir: &Path,
        state_dir: &Path,
    ) -> Result<Identity, String> {
        let mut unit_names = vec![OWN_UNIT.to_string()];
        if let Some(name) = unit_name {
            crate::model::unitfile::UnitName::parse(&name)
                .map_err(|e| format!("unit_name: {e}"))?;
            unit_names.push(name);
        }
        let mut unit_dirs: Vec<PathBuf> = ETC_UNIT_DIRS.iter().map(PathBuf::from).collect();
        if !unit_dirs.iter().any(|d| d == unit_dir) {
            unit_dirs.push(unit_dir.to_path_buf());
        }
        let mut state_dirs = vec![PathBuf::from(DEFAULT_STATE_DIR)];
        if !state_dirs.iter().any(|d| d == state_dir) {
            state_dirs.push(state_dir.to_path_buf());
        }
        Ok(Identity {
            unit_names,
            package_names: vec![OWN_PACKAGE.to_string()],
            config_dir: PathBuf::from(OWN_CONFIG_DIR),
            config_files: vec![PathBuf::from(DEFAULT_CONFIG_PATH)],
            state_dirs,
            unit_dirs,
        })
    }
}

/// The system unit search path under /etc, highest priority first.
const ETC_UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system.control",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
];

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_file_bytes: u64,
    pub max_declaration_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 8 << 20,
            max_declaration_bytes: 64 << 20,
        }
    }
}

/// How big the store's report outbox may grow.
#[derive(Debug, Clone, Copy)]
pub struct OutboxBounds {
    pub reports: usize,
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub state_dir: PathBuf,
    pub unit_dir: PathBuf,
    pub identity: Identity,
    pub limits: Limits,
    pub pacman: Tool,
    pub systemctl: Tool,
    pub podman: Tool,
    /// How long to wait for someone else's pacman `db.lck` before failing the package resources.
    pub pacman_lock_wait: Duration,
    /// Opt-in: a `db.lck` no process holds and older than this boot is removed (the run says so)
    /// instead of failing the packages as stale. Off by default: pacman never guesses either.
    pub pacman_remove_stale_lock: bool,
    /// Free space kept beyond what a transaction needs on the filesystems of pacman's cache and
    /// root: a transaction that would eat into it is not started.
    pub disk_margin_bytes: u64,
    /// Opt-in: after a transaction, pacman's cache keeps this many versions of each package (as
    /// `paccache -rk N`); `None` leaves the cache to pacman.
    pub cache_keep: Option<usize>,
    /// The service: how often the drift timer reconciles (each wait randomised within ±10%).
    pub interval: Duration,
    /// The service watches what it owns with inotify and repairs drift within about a second;
    /// off, drift waits for the timer.
    pub watch: bool,
    /// `status` says degraded (exit 6) once the link to the control plane has been down this
    /// long: reconnects back off up to 5 minutes, so a shorter outage is not yet news.
    pub link_down_degraded: Duration,
    /// The link: a ping after this long without sending; dead after three of these without a byte.
    pub heartbeat: Duration,
    /// The first reconnect ceiling (full jitter, doubling to 5 minutes); 1 s by default, more for
    /// a large fleet whose returns should spread further.
    pub reconnect_base: Duration,
    /// The largest frame the link reads; by default what a declaration of the limit needs
    /// (`frame_bytes_for`).
    pub max_frame_bytes: usize,
    /// Reports kept while the link is down; the oldest are dropped past this.
    pub outbox_max: usize,
    /// The outbox's size bound in bytes, beside its count: the oldest are dropped past it.
    pub outbox_max_bytes: u64,
    /// `None`: no mesh yet; the service holds the declaration in force on its timer alone.
    pub control_plane: Option<ControlPlane>,
    /// Where to write Prometheus metrics (for node_exporter's textfile collector); off if `None`.
    pub metrics_file: Option<PathBuf>,
    /// `trusted_keys` and `signatures_required`: set, a declaration from the control plane is
    /// applied only when signed by enough of these keys. Only this file sets it, never a
    /// declaration (the config directory is refused to them).
    pub trust: Option<Trust>,
    /// How many declarations once in force the store keeps (generations), for `rollback` and
    /// for reverting an unconfirmed one; at least 2 (the one in force and one to go back to).
    pub generations: usize,
    /// How long a declaration from the control plane stays pending: unless the control plane
    /// acks the report of the run that applied it within this, the host reverts it (0: never).
    pub confirm_secs: u64,
}

/// Where the control plane is and how the host proves itself and checks the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlPlane {
    /// `host:port`.
    pub address: String,
    /// The name the control plane's certificate must carry (default: the host part of `address`).
    pub server_name: String,
    /// The pinned CA (PEM) the control plane's certificate must chain to; never the system roots.
    pub ca_file: PathBuf,
    pub node: String,
    /// A file holding the node's secret (kept out of the config so the config can be read by all).
    pub secret_file: PathBuf,
}

/// The longest duration the config or the link may give (a year): a time computed from one is
/// far from wrapping, and no real interval, timeout or confirmation window comes near it.
pub const MAX_SECS: u64 = 365 * 24 * 3600;
/// The longest `confirm_secs`, from the config, the link or `apply --confirm`.
pub const MAX_CONFIRM_SECS: u64 = MAX_SECS;

impl Config {
    /// Loads the config. A missing file at the default path means defaults; a missing file the
    /// user named explicitly is an error. join.json beside it is read with it (`JOIN_FILE`).
    pub fn load(path: Option<&Path>, state_dir_override: Option<&Path>) -> Result<Config, String> {
        let (path, explicit) = match path {
            Some(p) => (p, true),
            None => (Path::new(DEFAULT_CONFIG_PATH), false),
        };
        let text = match crate::os::input::read_text(path, MAX_CONFIG_BYTES) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => "{}".to_string(),
            Err(e) => return Err(format!("config {}: {e}", path.display())),
        };
        let join = join_path(path);
        let joined = match crate::os::input::read_text(&join, MAX_CONFIG_BYTES) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("config {}: {e}", join.display())),
        };
        Config::from_texts(path, &text, joined.as_deref(), state_dir_override)
    }

    /// The config at `path` from its text and join.json's (when there is one), each error
    /// naming its file and key.
    pub fn from_texts(
        path: &Path,
        text: &str,
        joined: Option<&str>,
        state_dir_override: Option<&Path>,
    ) -> Result<Config, String> {
        let join = join_path(path);
        let read = |text: &str| {
            crate::model::fields::strict_json(text.as_bytes())
                .map_err(|e| e.to_string())
                .and_then(|value| RawConfig::read(&value))
        };
        let mut raw = read(text).map_err(|e| format!("config {}: {e}", path.display()))?;
        if let Some(joined) = joined {
            let at = |e: String| format!("config {}: {e}", join.display());
            // Read as a config (the same reader), holding only what join writes.
            let keys = crate::model::fields::strict_json(joined.as_bytes())
                .map_err(|e| at(e.to_string()))?;
            if let Some(key) = keys
                .as_object()
                .and_then(|o| o.keys().find(|k| !JOIN_KEYS.contains(&k.as_str())))
            {
                return Err(at(format!(
                    "{key:?} does not belong here: it holds only {} (what mesh-host join writes)",
                    JOIN_KEYS.join(" and ")
                )));
            }
            let from_join = RawConfig::read(&keys).map_err(at)?;
            let both = |key: &str| {
                at(format!(
                    "{key} is also in {}: keep it in one of the two (mesh-host join writes {JOIN_FILE})",
                    path.display()
                ))
            };
            if from_join.control_plane.is_some() {
                if raw.control_plane.is_some() {
                    return Err(both("control_plane"));
                }
                raw.control_plane = from_join.control_plane;
            }
            if from_join.trusted_keys.is_some() {
                if raw.trusted_keys.is_some() {
                    return Err(both("trusted_keys"));
                }
                raw.trusted_keys = from_join.trusted_keys;
            }
        }
        let mut config = Config::from_raw(raw, state_dir_override)
            .map_err(|e| format!("config {}: {e}", path.display()))?;
        // A relative --config is a file all the same; the host refuses it by its absolute path,
        // and join.json beside it, there or not.
        for file in [path, &join] {
            let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
            config.identity.config_files.push(absolute);
        }
        Ok(config)
    }

    /// Parses config text (JSON); unknown fields are errors.
    pub fn parse(text: &str, state_dir_override: Option<&Path>) -> Result<Config, String> {
        let value =
            crate::model::fields::strict_json(text.as_bytes()).map_err(|e| e.to_string())?;
        Config::from_raw(RawConfig::read(&value)?, state_dir_override)
    }

    fn from_raw(raw: RawConfig, state_dir_override: Option<&Path>) -> Result<Config, String> {
        let state_dir = state_dir_override
            .map(Path::to_path_buf)
            .or(raw.state_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        let unit_dir = raw
            .unit_dir
            .unwrap_or_else(|| PathBuf::from("/etc/systemd/system"));
        // An override is checked where it was given (`--state-dir`, in cli/args.rs), so that its
        // error names the flag, not this file's key.
        let from_file = state_dir_override.is_none().then_some(&state_dir);
        for (what, p) in [("state_dir", from_file), ("unit_dir", Some(&unit_dir))] {
            if let Some(p) = p.filter(|p| !p.is_absolute()) {
                return Err(format!("{what}: {} is not an absolute path", p.display()));
            }
        }
        if let Some(p) = &raw.metrics_file {
            if !p.is_absolute() || p.file_name().is_none() {
                return Err(format!(
                    "metrics_file: {} is not an absolute file path",
                    p.display()
                ));
            }
        }
        let mut identity = Identity::new(raw.unit_name, &unit_dir, &state_dir)?;
        let limits = Limits {
            max_file_bytes: raw
                .max_file_bytes
                .unwrap_or(Limits::default().max_file_bytes),
            max_declaration_bytes: raw
                .max_declaration_bytes
                .unwrap_or(Limits::default().max_declaration_bytes),
        };
        let control_plane = raw.control_plane.map(control_plane).transpose()?;
        if let Some(cp) = &control_plane {
            (identity.config_files).extend([cp.ca_file.clone(), cp.secret_file.clone()]);
        }
        Ok(Config {
            identity,
            state_dir,
            unit_dir,
            limits,
            // pacman's grace is long: a commit it was in when interrupted is finished first.
            pacman: tool("pacman", raw.pacman, (900, Stop::Interrupt, 300))?,
            systemctl: tool("systemctl", raw.systemctl, (120, Stop::Terminate, 10))?,
            podman: tool("podman", raw.podman, (300, Stop::Terminate, 30))?,
            pacman_lock_wait: Duration::from_secs(raw.pacman_lock_wait_secs.unwrap_or(120)),
            pacman_remove_stale_lock: raw.pacman_remove_stale_lock.unwrap_or(false),
            disk_margin_bytes: raw.disk_margin_mib.unwrap_or(256).saturating_mul(1 << 20),
            cache_keep: raw.cache_keep,
            interval: Duration::from_secs(raw.interval_secs.unwrap_or(600)),
            watch: raw.watch.unwrap_or(true),
            heartbeat: Duration::from_secs(raw.heartbeat_secs.unwrap_or(30)),
            link_down_degraded: Duration::from_secs(raw.link_down_degraded_secs.unwrap_or(900)),
            reconnect_base: Duration::from_secs(raw.reconnect_base_secs.unwrap_or(1)),
            max_frame_bytes: raw
                .max_frame_bytes
                .unwrap_or_else(|| frame_bytes_for(limits.max_declaration_bytes)),
            outbox_max: raw.outbox_max.unwrap_or(500),
            outbox_max_bytes: raw.outbox_max_bytes.unwrap_or(64 << 20),
            control_plane,
            metrics_file: raw.metrics_file,
            trust: trust(raw.trusted_keys, raw.signatures_required)?,
            generations: raw.generations.unwrap_or(5),
            confirm_secs: raw.confirm_secs.unwrap_or(300),
        })
    }
}

/// `trusted_keys` (distinct public keys) and `signatures_required` (default 1 when keys are set,
/// never more than there are keys, so the threshold can be met).
fn trust(keys: Option<Vec<String>>, required: Option<usize>) -> Result<Option<Trust>, String> {
    let mut parsed = Vec::new();
    for (i, text) in keys.unwrap_or_default().iter().enumerate() {
        let key = PublicKey::parse(text).map_err(|e| format!("trusted_keys[{i}]: {e}"))?;
        if let Some(first) = parsed.iter().position(|k| *k == key) {
            return Err(format!(
                "trusted_keys[{i}]: the same key as trusted_keys[{first}]"
            ));
        }
        parsed.push(key);
    }
    match (parsed.len(), required) {
        (0, None) => Ok(None),
        (0, Some(n)) => Err(format!(
            "signatures_required: {n}, but no trusted_keys to sign with"
        )),
        (_, Some(0)) => Err(
            "signatures_required: must be at least 1 (remove trusted_keys to accept unsigned \
             declarations)"
                .into(),
        ),
        (count, Some(n)) if n > count => Err(format!(
            "signatures_required: {n}, more than the {count} trusted_keys: no declaration could \
             ever be accepted"
        )),
        (_, required) => Ok(Some(Trust {
            keys: parsed,
            required: required.unwrap_or(1),
        })),
    }
}

impl Config {
    /// How big the outbox may grow.
    pub fn outbox_bounds(&self) -> OutboxBounds {
        OutboxBounds {
            reports: self.outbox_max,
            bytes: self.outbox_max_bytes,
        }
    }
}

/// The frame a declaration of `max_declaration_bytes` needs: its bytes as they are, or in a signed
/// envelope, where the declaration is a JSON string whose escaping (`"`, `\\`, control
/// characters) at most doubles it, plus room for the envelope's signatures.
pub fn frame_bytes_for(max_declaration_bytes: u64) -> usize {
    let bytes = max_declaration_bytes
        .saturating_mul(2)
        .saturating_add(64 << 10);
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

fn control_plane(raw: RawControlPlane) -> Result<ControlPlane, String> {
    let Some((host, port)) = raw.address.rsplit_once(':') else {
        return Err(format!(
            "control_plane.address: {:?} is not host:port",
            raw.address
        ));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!(
            "control_plane.address: {:?} is not host:port",
            raw.address
        ));
    }
    let server_name = raw.server_name.unwrap_or_else(|| {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string()
    });
    for (what, p) in [("ca_file", &raw.ca_file), ("secret_file", &raw.secret_file)] {
        if !p.is_absolute() {
            return Err(format!(
                "control_plane.{what}: {} is not an absolute path",
                p.display()
            ));
        }
    }
    if raw.node.is_empty() {
        return Err("control_plane.node: must not be empty".into());
    }
    Ok(ControlPlane {
        address: raw.address,
        server_name,
        ca_file: raw.ca_file,
        node: raw.node,
        secret_file: raw.secret_file,
    })
}

/// A tool from its config section; `defaults` are its timeout, how it is stopped and its grace.
fn tool(
    name: &'static str,
    raw: Option<RawTool>,
    defaults: (u64, Stop, u64),
) -> Result<Tool, String> {
    let (default_timeout, stop, default_grace) = defaults;
    let (command, timeout, grace) = match raw {
        Some(t) => (t.command, t.timeout_secs, t.grace_secs),
        None => (None, None, None),
    };
    let command = command.unwrap_or_else(|| vec![name.to_string()]);
    if command.is_empty() || command[0].is_empty() {
        return Err(format!("{name}.command: must name a program"));
    }
    let timeout = timeout.unwrap_or(default_timeout);
    Ok(Tool {
        command,
        timeout: Duration::from_secs(timeout),
        stop,
        grace: Duration::from_secs(grace.unwrap_or(default_grace)),
    })
}

#[cfg(test)]
mod tests {
    use super::read::{CONTROL_PLANE_KEYS, KEY_NAMES, TOOL_KEYS};
    use super::*;
    use serde_json::Value;

    fn parse(json: &str) -> Result<Config, String> {
        Config::parse(json, None)
    }

    #[test]
    fn the_watcher_is_on_by_default() {
        assert!(parse("{}").unwrap().watch);
        assert!(!parse(r#"{"watch": false}"#).unwrap().watch);
    }

    #[test]
    fn defaults_and_overrides() {
        let c = parse("{}").unwrap();
        assert_eq!(c.state_dir, Path::new(DEFAULT_STATE_DIR));
        assert_eq!(c.pacman.command, vec!["pacman"]);
        assert_eq!(c.metrics_file, None, "metrics are off by default");
        let c = parse(r#"{"unit_name": "agent.service", "pacman": {"command": ["pacman", "--config", "/x"], "timeout_secs": 5}}"#).unwrap();
        assert_eq!(
            c.identity.unit_names,
            vec!["mesh-host.service", "agent.service"]
        );
        assert_eq!(c.pacman.timeout, Duration::from_secs(5));
    }

    #[test]
    fn disk_margin_and_cache_keep() {
        let c = parse("{}").unwrap();
        assert_eq!(c.disk_margin_bytes, 256 << 20);
        assert_eq!(c.cache_keep, None, "the cache is pacman's by default");
        let c = parse(r#"{"disk_margin_mib": 0, "cache_keep": 2}"#).unwrap();
        assert_eq!((c.disk_margin_bytes, c.cache_keep), (0, Some(2)));
        assert_eq!(
            parse(r#"{"cache_keep": 0}"#).unwrap_err(),
            "cache_keep: expected a whole number from 1 to 1000, found 0"
        );
    }

    #[test]
    fn the_frame_limit_follows_the_declaration_limit() {
        let c = parse("{}").unwrap();
        assert_eq!(c.max_frame_bytes, (128 << 20) + (64 << 10));
        let c = parse(r#"{"max_declaration_bytes": 1000}"#).unwrap();
        assert_eq!(c.max_frame_bytes, 2000 + (64 << 10));
        assert_eq!(
            parse(r#"{"max_frame_bytes": 5}"#).unwrap().max_frame_bytes,
            5
        );
        // The worst a declaration can be for escaping in a signed envelope: all quotes,
        // backslashes and newlines.
        let text = "\"\\\n".repeat(1000);
        let frame = crate::model::envelope::Envelope::new(text.clone()).to_json();
        assert!(frame.len() <= frame_bytes_for(text.len() as u64));
        assert!(frame.len() > 2 * text.len());
    }

    #[test]
    fn control_plane_section() {
        let c = parse(r#"{"control_plane": {"address": "cp.example:7443", "ca_file": "/etc/mesh-host/ca.pem", "node": "n1", "secret_file": "/etc/mesh-host/secret"}}"#).unwrap();
        let cp = c.control_plane.unwrap();
        assert_eq!(cp.server_name, "cp.example");
        assert_eq!(c.interval, Duration::from_secs(600));
        let bad = parse(
            r#"{"control_plane": {"address": "cp.example", "ca_file": "/x", "node": "n", "secret_file": "/s"}}"#,
        );
        assert!(bad.unwrap_err().contains("is not host:port"));
        assert_eq!(
            parse(r#"{"interval_secs": 0}"#).unwrap_err(),
            "interval_secs: expected a whole number from 1 to 31536000, found 0"
        );
    }

    #[test]
    fn trusted_keys_and_signatures_required() {
        let (a, b) = (
            "ed25519:iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=",
            "ed25519:PUAXw+hDiVqStwqnTRt+vJyYLM8uxJaMwM1V8Sr0Zgw=",
        );
        assert_eq!(parse("{}").unwrap().trust, None);
        let c = parse(&format!(r#"{{"trusted_keys": ["{a}", "{b}"]}}"#)).unwrap();
        let trust = c.trust.unwrap();
        assert_eq!(trust.required, 1);
        assert_eq!(trust.keys[1].to_string(), b);
        let c = parse(&format!(
            r#"{{"trusted_keys": ["{a}", "{b}"], "signatures_required": 2}}"#
        ));
        assert_eq!(c.unwrap().trust.unwrap().required, 2);
        for (json, want) in [
            (
                format!(r#"{{"trusted_keys": ["{a}", "x"]}}"#),
                "trusted_keys[1]: \"x\" is not a public key",
            ),
            (
                format!(r#"{{"trusted_keys": ["{a}", "{a}"]}}"#),
                "trusted_keys[1]: the same key as trusted_keys[0]",
            ),
            (
                r#"{"signatures_required": 1}"#.to_string(),
                "no trusted_keys",
            ),
            (
                format!(r#"{{"trusted_keys": ["{a}"], "signatures_required": 0}}"#),
                "must be at least 1",
            ),
            (
                format!(r#"{{"trusted_keys": ["{a}"], "signatures_required": 2}}"#),
                "more than the 1 trusted_keys",
            ),
        ] {
            let err = parse(&json).unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
        }
    }

    #[test]
    fn a_relative_state_dir_is_named_by_its_key_only_when_the_config_gave_it() {
        assert_eq!(
            parse(r#"{"state_dir": "state"}"#).unwrap_err(),
            "state_dir: state is not an absolute path"
        );
        let overridden = Config::parse(r#"{"state_dir": "state"}"#, Some(Path::new("/srv/s")));
        assert_eq!(overridden.unwrap().state_dir, Path::new("/srv/s"));
    }

    /// Every key, given each wrong type, is named with what it expects and what it found; a
    /// number out of its range too (issue 32: serde's "expected u64 at line 1 column 20").
    #[test]
    fn every_wrong_value_names_its_key() {
        let cp = |member: &str| {
            let mut section = serde_json::json!({"address": "cp:1", "ca_file": "/c",
                "node": "n", "secret_file": "/s"});
            section[member] = Value::Null;
            section
        };
        type Placed = Box<dyn Fn(Value) -> Value>;
        let mut keys: Vec<(String, Placed)> = Vec::new();
        for key in KEY_NAMES {
            keys.push((
                key.to_string(),
                Box::new(move |v| serde_json::json!({*key: v})),
            ));
        }
        for tool in ["pacman", "systemctl", "podman"] {
            for key in TOOL_KEYS {
                let at = format!("{tool}.{key}");
                keys.push((at, Box::new(move |v| serde_json::json!({tool: {*key: v}}))));
            }
        }
        for key in CONTROL_PLANE_KEYS {
            keys.push((
                format!("control_plane.{key}"),
                Box::new(move |v| {
                    let mut section = cp(key);
                    section[*key] = v;
                    serde_json::json!({ "control_plane": section })
                }),
            ));
        }
        let wrong = [
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!("5"),
            serde_json::json!(true),
            serde_json::json!([1]),
            serde_json::json!({"a": 1}),
            serde_json::json!(u64::MAX),
        ];
        for (key, config) in &keys {
            for value in &wrong {
                let json = config(value.clone()).to_string();
                match parse(&json) {
                    Ok(_) => assert!(
                        matches!(value, Value::String(_))
                            || (value.is_boolean()
                                && ["watch", "pacman_remove_stale_lock"].contains(&key.as_str())),
                        "{json} accepted"
                    ),
                    Err(e) => assert!(
                        [": ", "[", "."]
                            .iter()
                            .any(|s| e.starts_with(&format!("{key}{s}")))
                            || e.starts_with(&format!("{key}: unknown field")),
                        "{json}: {e}"
                    ),
                }
            }
        }
        assert_eq!(
            parse(r#"{"max_file_bytes": -1}"#).unwrap_err(),
            "max_file_bytes: expected a whole number from 0 to 1099511627776, found -1"
        );
        assert_eq!(
            parse(r#"{"max_file_bytes": "8M"}"#).unwrap_err(),
            "max_file_bytes: expected a whole number from 0 to 1099511627776, found \"8M\""
        );
        assert_eq!(
            parse(r#"{"confirm_secs": 18446744073709551615}"#).unwrap_err(),
            "confirm_secs: expected a whole number from 0 to 31536000, found 18446744073709551615"
        );
        assert_eq!(
            parse(r#"{"watch": "yes"}"#).unwrap_err(),
            "watch: expected true or false, found \"yes\""
        );
        assert_eq!(
            parse(r#"{"trusted_keys": ["ed25519:x", 5]}"#).unwrap_err(),
            "trusted_keys[1]: expected a string, found 5"
        );
        assert_eq!(
            parse(r#"{"control_plane": {"address": "cp:1"}}"#).unwrap_err(),
            "control_plane.ca_file: missing"
        );
        assert_eq!(
            parse("[]").unwrap_err(),
            "the config: expected an object, found []"
        );
    }

    #[test]
    fn rejects_typos_and_nonsense() {
        assert!(parse(r#"{"state_dri": "/x"}"#)
            .unwrap_err()
            .starts_with("unknown field \"state_dri\" (known fields: state_dir, unit_name, "));
        assert_eq!(
            parse(r#"{"pacman": {"timeout": 5}}"#).unwrap_err(),
            "pacman: unknown field \"timeout\" (known fields: command, timeout_secs, grace_secs)"
        );
        assert!(parse(r#"{"watch": true, "watch": false}"#)
            .unwrap_err()
            .contains("duplicate"));
        assert!(parse(r#"{"state_dir": "relative"}"#)
            .unwrap_err()
            .contains("absolute"));
        assert!(parse(r#"{"podman": {"command": []}}"#)
            .unwrap_err()
            .contains("podman.command"));
        assert!(parse(r#"{"metrics_file": "mesh_host.prom"}"#)
            .unwrap_err()
            .contains("metrics_file: mesh_host.prom is not an absolute file path"));
        assert!(parse(r#"{"unit_name": "@agent.service"}"#)
            .unwrap_err()
            .contains("unit_name: unit name \"@agent.service\" starts with '@'"));
    }

    #[test]
    fn join_json_adds_what_join_wrote_and_each_key_is_in_one_file_only() {
        let path = Path::new("/etc/mesh-host/config.json");
        let cp = r#"{"control_plane": {"address": "cp:1", "ca_file": "/etc/mesh-host/ca.pem",
                     "node": "n1", "secret_file": "/etc/mesh-host/secret"}}"#;
        let c = Config::from_texts(path, r#"{"interval_secs": 60}"#, Some(cp), None).unwrap();
        assert_eq!(c.control_plane.unwrap().node, "n1");
        assert_eq!(c.interval, Duration::from_secs(60));
        assert!(c
            .identity
            .config_files
            .contains(&PathBuf::from("/etc/mesh-host/join.json")));
        // Written by an older join into config.json, it still counts.
        let c = Config::from_texts(path, cp, None, None).unwrap();
        assert_eq!(c.control_plane.unwrap().node, "n1");
        for (config, joined, want) in [
            (cp, cp, "config /etc/mesh-host/join.json: control_plane is also in /etc/mesh-host/config.json"),
            (
                r#"{"trusted_keys": []}"#,
                r#"{"trusted_keys": []}"#,
                "join.json: trusted_keys is also in",
            ),
            (
                "{}",
                r#"{"interval_secs": 5}"#,
                "join.json: \"interval_secs\" does not belong here",
            ),
            (r#"{"watch": 1}"#, "{}", "config /etc/mesh-host/config.json: watch: expected true or false"),
        ] {
            let err = Config::from_texts(path, config, Some(joined), None).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }
}
