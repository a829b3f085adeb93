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
        })
    }
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
