//! The host's own configuration (`/etc/mesh-host/config.json`): where its store is, what it calls
//! itself (so it can refuse to manage itself), limits, and the tools it drives with their extra
//! arguments and timeouts, so the same binary drives a real machine or a test sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub const DEFAULT_CONFIG_PATH: &str = "/etc/mesh-host/config.json";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/mesh-host";
/// The host's own package; always refused, whatever the config says.
pub const OWN_PACKAGE: &str = "nox-mesh-host";
/// The host's own unit; always refused, as is any other name the config gives it.
pub const OWN_UNIT: &str = "mesh-host.service";
/// The host's config directory; always refused.
pub const OWN_CONFIG_DIR: &str = "/etc/mesh-host";

/// What the host is, so that a declaration naming any of it is refused by name.
#[derive(Debug, Clone)]
pub struct Identity {
    pub unit_names: Vec<String>,
    pub package_names: Vec<String>,
    pub config_dir: PathBuf,
    pub state_dirs: Vec<PathBuf>,
    /// Directories holding unit files, where the host's unit file and drop-ins live.
    pub unit_dirs: Vec<PathBuf>,
}

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

/// One external tool: its argv prefix and how long any one call may take.
#[derive(Debug, Clone)]
pub struct Tool {
    pub command: Vec<String>,
    pub timeout: Duration,
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
    /// The service: how often the drift timer reconciles (each wait randomised within ±10%).
    pub interval: Duration,
    /// The service watches what it owns with inotify and repairs drift within about a second;
    /// off, drift waits for the timer.
    pub watch: bool,
    /// The link: a ping after this long without sending; dead after three of these without a byte.
    pub heartbeat: Duration,
    /// The first reconnect ceiling (full jitter, doubling to 5 minutes); 1 s by default, more for
    /// a large fleet whose returns should spread further.
    pub reconnect_base: Duration,
    pub max_frame_bytes: usize,
    /// Reports kept while the link is down; the oldest are dropped past this.
    pub outbox_max: usize,
    /// `None`: no mesh yet; the service holds the declaration in force on its timer alone.
    pub control_plane: Option<ControlPlane>,
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<PathBuf>,
    unit_name: Option<String>,
    unit_dir: Option<PathBuf>,
    max_file_bytes: Option<u64>,
    max_declaration_bytes: Option<u64>,
    pacman: Option<RawTool>,
    systemctl: Option<RawTool>,
    podman: Option<RawTool>,
    pacman_lock_wait_secs: Option<u64>,
    interval_secs: Option<u64>,
    watch: Option<bool>,
    heartbeat_secs: Option<u64>,
    reconnect_base_secs: Option<u64>,
    max_frame_bytes: Option<usize>,
    outbox_max: Option<usize>,
    control_plane: Option<RawControlPlane>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawControlPlane {
    address: String,
    server_name: Option<String>,
    ca_file: PathBuf,
    node: String,
    secret_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    command: Option<Vec<String>>,
    timeout_secs: Option<u64>,
}

impl Config {
    /// Loads the config. A missing file at the default path means defaults; a missing file the
    /// user named explicitly is an error.
    pub fn load(path: Option<&Path>, state_dir_override: Option<&Path>) -> Result<Config, String> {
        let (path, explicit) = match path {
            Some(p) => (p, true),
            None => (Path::new(DEFAULT_CONFIG_PATH), false),
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => "{}".to_string(),
            Err(e) => return Err(format!("config {}: {e}", path.display())),
        };
        Config::parse(&text, state_dir_override)
            .map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// Parses config text (JSON); unknown fields are errors.
    pub fn parse(text: &str, state_dir_override: Option<&Path>) -> Result<Config, String> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Config::from_raw(raw, state_dir_override)
    }

    fn from_raw(raw: RawConfig, state_dir_override: Option<&Path>) -> Result<Config, String> {
        let state_dir = state_dir_override
            .map(Path::to_path_buf)
            .or(raw.state_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        let unit_dir = raw
            .unit_dir
            .unwrap_or_else(|| PathBuf::from("/etc/systemd/system"));
        for (what, p) in [("state_dir", &state_dir), ("unit_dir", &unit_dir)] {
            if !p.is_absolute() {
                return Err(format!("{what}: {} is not an absolute path", p.display()));
            }
        }
        let mut unit_names = vec![OWN_UNIT.to_string()];
        if let Some(name) = raw.unit_name {
            if !name.contains('.') {
                return Err(format!("unit_name: {name:?} has no unit suffix"));
            }
            unit_names.push(name);
        }
        let mut unit_dirs = vec![PathBuf::from("/etc/systemd/system")];
        if !unit_dirs.contains(&unit_dir) {
            unit_dirs.push(unit_dir.clone());
        }
        let mut state_dirs = vec![PathBuf::from(DEFAULT_STATE_DIR)];
        if !state_dirs.contains(&state_dir) {
            state_dirs.push(state_dir.clone());
        }
        let limits = Limits {
            max_file_bytes: raw
                .max_file_bytes
                .unwrap_or(Limits::default().max_file_bytes),
            max_declaration_bytes: raw
                .max_declaration_bytes
                .unwrap_or(Limits::default().max_declaration_bytes),
        };
        Ok(Config {
            identity: Identity {
                unit_names,
                package_names: vec![OWN_PACKAGE.to_string()],
                config_dir: PathBuf::from(OWN_CONFIG_DIR),
                state_dirs,
                unit_dirs,
            },
            state_dir,
            unit_dir,
            limits,
            pacman: tool("pacman", raw.pacman, 900)?,
            systemctl: tool("systemctl", raw.systemctl, 120)?,
            podman: tool("podman", raw.podman, 300)?,
            pacman_lock_wait: Duration::from_secs(raw.pacman_lock_wait_secs.unwrap_or(120)),
            interval: Duration::from_secs(at_least_one("interval_secs", raw.interval_secs, 600)?),
            watch: raw.watch.unwrap_or(true),
            heartbeat: Duration::from_secs(at_least_one("heartbeat_secs", raw.heartbeat_secs, 30)?),
            reconnect_base: Duration::from_secs(at_least_one(
                "reconnect_base_secs",
                raw.reconnect_base_secs,
                1,
            )?),
            max_frame_bytes: raw.max_frame_bytes.unwrap_or(128 << 20),
            outbox_max: raw.outbox_max.unwrap_or(500).max(1),
            control_plane: raw.control_plane.map(control_plane).transpose()?,
        })
    }
}

fn at_least_one(name: &str, value: Option<u64>, default: u64) -> Result<u64, String> {
    match value.unwrap_or(default) {
        0 => Err(format!("{name}: must be at least 1")),
        v => Ok(v),
    }
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

fn tool(name: &'static str, raw: Option<RawTool>, default_timeout: u64) -> Result<Tool, String> {
    let (command, timeout) = match raw {
        Some(t) => (t.command, t.timeout_secs),
        None => (None, None),
    };
    let command = command.unwrap_or_else(|| vec![name.to_string()]);
    if command.is_empty() || command[0].is_empty() {
        return Err(format!("{name}.command: must name a program"));
    }
    let timeout = timeout.unwrap_or(default_timeout);
    if timeout == 0 {
        return Err(format!("{name}.timeout_secs: must be at least 1"));
    }
    Ok(Tool {
        command,
        timeout: Duration::from_secs(timeout),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = parse(r#"{"unit_name": "agent.service", "pacman": {"command": ["pacman", "--config", "/x"], "timeout_secs": 5}}"#).unwrap();
        assert_eq!(
            c.identity.unit_names,
            vec!["mesh-host.service", "agent.service"]
        );
        assert_eq!(c.pacman.timeout, Duration::from_secs(5));
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
        assert!(parse(r#"{"interval_secs": 0}"#)
            .unwrap_err()
            .contains("interval_secs: must be at least 1"));
    }

    #[test]
    fn rejects_typos_and_nonsense() {
        assert!(parse(r#"{"state_dri": "/x"}"#)
            .unwrap_err()
            .contains("unknown field"));
        assert!(parse(r#"{"state_dir": "relative"}"#)
            .unwrap_err()
            .contains("absolute"));
        assert!(parse(r#"{"podman": {"command": []}}"#)
            .unwrap_err()
            .contains("podman.command"));
    }
}
