//! The config's JSON read into its raw fields, each checked for its type and range, the first
//! wrong one named by its key; what the values mean together is `Config::from_raw`'s.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::{MAX_CONFIRM_SECS, MAX_SECS};

/// The config's fields as found, each checked for its type and range by `RawConfig::read`.
#[derive(Default)]
pub(super) struct RawConfig {
    pub(super) state_dir: Option<PathBuf>,
    pub(super) unit_name: Option<String>,
    pub(super) unit_dir: Option<PathBuf>,
    pub(super) max_file_bytes: Option<u64>,
    pub(super) max_declaration_bytes: Option<u64>,
    pub(super) pacman: Option<RawTool>,
    pub(super) systemctl: Option<RawTool>,
    pub(super) podman: Option<RawTool>,
    pub(super) pacman_lock_wait_secs: Option<u64>,
    pub(super) pacman_remove_stale_lock: Option<bool>,
    pub(super) disk_margin_mib: Option<u64>,
    pub(super) cache_keep: Option<usize>,
    pub(super) interval_secs: Option<u64>,
    pub(super) watch: Option<bool>,
    pub(super) heartbeat_secs: Option<u64>,
    pub(super) link_down_degraded_secs: Option<u64>,
    pub(super) reconnect_base_secs: Option<u64>,
    pub(super) max_frame_bytes: Option<usize>,
    pub(super) outbox_max: Option<usize>,
    pub(super) outbox_max_bytes: Option<u64>,
    pub(super) control_plane: Option<RawControlPlane>,
    pub(super) metrics_file: Option<PathBuf>,
    pub(super) trusted_keys: Option<Vec<String>>,
    pub(super) signatures_required: Option<usize>,
    pub(super) generations: Option<usize>,
    pub(super) confirm_secs: Option<u64>,
}

pub(super) struct RawControlPlane {
    pub(super) address: String,
    pub(super) server_name: Option<String>,
    pub(super) ca_file: PathBuf,
    pub(super) node: String,
    pub(super) secret_file: PathBuf,
}

pub(super) struct RawTool {
    pub(super) command: Option<Vec<String>>,
    pub(super) timeout_secs: Option<u64>,
    pub(super) grace_secs: Option<u64>,
}

/// The largest size in bytes the config may give (1 TiB).
const MAX_BYTES: u64 = 1 << 40;
/// The largest count the config may give (reports kept).
const MAX_COUNT: u64 = 1_000_000;
/// The most generations or cached package versions kept.
const MAX_KEPT: u64 = 1000;

/// The config's keys, as the reader knows them (`KEYS` describes each for the manual; a test
/// checks the two agree).
pub(super) const KEY_NAMES: &[&str] = &[
    "state_dir",
    "unit_name",
    "unit_dir",
    "max_file_bytes",
    "max_declaration_bytes",
    "pacman",
    "systemctl",
    "podman",
    "pacman_lock_wait_secs",
    "pacman_remove_stale_lock",
    "disk_margin_mib",
    "cache_keep",
    "interval_secs",
    "watch",
    "heartbeat_secs",
    "link_down_degraded_secs",
    "reconnect_base_secs",
    "max_frame_bytes",
    "outbox_max",
    "outbox_max_bytes",
    "control_plane",
    "metrics_file",
    "trusted_keys",
    "signatures_required",
    "generations",
    "confirm_secs",
    "$schema",
];
pub(super) const CONTROL_PLANE_KEYS: &[&str] =
    &["address", "server_name", "ca_file", "node", "secret_file"];
pub(super) const TOOL_KEYS: &[&str] = &["command", "timeout_secs", "grace_secs"];

impl RawConfig {
    /// Every field of `value` checked for its type and range, the first wrong one named by its
    /// key (`pacman.timeout_secs: expected a whole number from 1 to 31536000, found -1`).
    pub(super) fn read(value: &Value) -> Result<RawConfig, String> {
        let c = Section::new(String::new(), value, KEY_NAMES)?;
        // An editor's JSON Schema, ignored once it is a string.
        c.text("$schema")?;
        Ok(RawConfig {
            state_dir: c.path("state_dir")?,
            unit_name: c.text("unit_name")?,
            unit_dir: c.path("unit_dir")?,
            max_file_bytes: c.whole("max_file_bytes", 0, MAX_BYTES)?,
            max_declaration_bytes: c.whole("max_declaration_bytes", 0, MAX_BYTES)?,
            pacman: c
                .section("pacman", TOOL_KEYS)?
                .map(RawTool::read)
                .transpose()?,
            systemctl: c
                .section("systemctl", TOOL_KEYS)?
                .map(RawTool::read)
                .transpose()?,
            podman: c
                .section("podman", TOOL_KEYS)?
                .map(RawTool::read)
                .transpose()?,
            pacman_lock_wait_secs: c.whole("pacman_lock_wait_secs", 0, MAX_SECS)?,
            pacman_remove_stale_lock: c.flag("pacman_remove_stale_lock")?,
            disk_margin_mib: c.whole("disk_margin_mib", 0, MAX_BYTES >> 20)?,
            cache_keep: c.count("cache_keep", 1, MAX_KEPT)?,
            interval_secs: c.whole("interval_secs", 1, MAX_SECS)?,
            watch: c.flag("watch")?,
            heartbeat_secs: c.whole("heartbeat_secs", 1, MAX_SECS)?,
            link_down_degraded_secs: c.whole("link_down_degraded_secs", 1, MAX_SECS)?,
            // The backoff's cap is 5 minutes (service/backoff.rs): a larger base would be cut.
            reconnect_base_secs: c.whole("reconnect_base_secs", 1, 300)?,
            max_frame_bytes: c.count("max_frame_bytes", 1, MAX_BYTES)?,
            outbox_max: c.count("outbox_max", 1, MAX_COUNT)?,
            outbox_max_bytes: c.whole("outbox_max_bytes", 1, MAX_BYTES)?,
            control_plane: (c.section("control_plane", CONTROL_PLANE_KEYS)?)
                .map(RawControlPlane::read)
                .transpose()?,
            metrics_file: c.path("metrics_file")?,
            trusted_keys: c.texts("trusted_keys")?,
            signatures_required: c.count("signatures_required", 0, MAX_KEPT)?,
            generations: c.count("generations", 2, MAX_KEPT)?,
            confirm_secs: c.whole("confirm_secs", 0, MAX_CONFIRM_SECS)?,
        })
    }
}

impl RawControlPlane {
    fn read(c: Section) -> Result<RawControlPlane, String> {
        Ok(RawControlPlane {
            address: c.required(c.text("address")?, "address")?,
            server_name: c.text("server_name")?,
            ca_file: c.required(c.path("ca_file")?, "ca_file")?,
            node: c.required(c.text("node")?, "node")?,
            secret_file: c.required(c.path("secret_file")?, "secret_file")?,
        })
    }
}

impl RawTool {
    fn read(c: Section) -> Result<RawTool, String> {
        Ok(RawTool {
            command: c.texts("command")?,
            timeout_secs: c.whole("timeout_secs", 1, MAX_SECS)?,
            grace_secs: c.whole("grace_secs", 0, MAX_SECS)?,
        })
    }
}

/// One JSON object of the config: its members read by key, each error naming the key as the
/// config spells it (`control_plane.node`), as a declaration's problems name their location.
struct Section<'a> {
    /// `""`, or the section's key and a dot.
    at: String,
    map: &'a Map<String, Value>,
}

impl<'a> Section<'a> {
    /// `value` as an object whose every key is one of `known`.
    fn new(at: String, value: &'a Value, known: &[&str]) -> Result<Section<'a>, String> {
        let Value::Object(map) = value else {
            let whole = at.trim_end_matches('.');
            let what = if whole.is_empty() {
                "the config"
            } else {
                whole
            };
            return Err(format!(
                "{what}: expected an object, found {}",
                shown(value)
            ));
        };
        if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
            let within = at.trim_end_matches('.');
            let within = if within.is_empty() {
                String::new()
            } else {
                format!("{within}: ")
            };
            return Err(format!(
                "{within}unknown field {unknown:?} (known fields: {})",
                known.join(", ")
            ));
        }
        Ok(Section { at, map })
    }

    /// The member `key`; `null` is as if it were left out.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, expected: &str, found: &Value) -> String {
        format!(
            "{}{key}: expected {expected}, found {}",
            self.at,
            shown(found)
        )
    }

    fn required<T>(&self, value: Option<T>, key: &str) -> Result<T, String> {
        value.ok_or_else(|| format!("{}{key}: missing", self.at))
    }

    fn whole(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(self.wrong(key, &format!("a whole number from {min} to {max}"), v)),
        }
    }

    fn count(&self, key: &str, min: u64, max: u64) -> Result<Option<usize>, String> {
        let max = max.min(usize::MAX as u64);
        Ok(self.whole(key, min, max)?.map(|n| n as usize))
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "true or false", v)),
        }
    }

    fn text(&self, key: &str) -> Result<Option<String>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    fn path(&self, key: &str) -> Result<Option<PathBuf>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(PathBuf::from(s))),
            Some(v) => Err(self.wrong(key, "a path (a string)", v)),
        }
    }

    fn texts(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(self.wrong(key, "an array of strings", v));
        };
        let mut texts = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => texts.push(s.clone()),
                other => return Err(self.wrong(&format!("{key}[{i}]"), "a string", other)),
            }
        }
        Ok(Some(texts))
    }

    fn section(&self, key: &str, known: &[&str]) -> Result<Option<Section<'a>>, String> {
        self.get(key)
            .map(|v| Section::new(format!("{}{key}.", self.at), v, known))
            .transpose()
    }
}

/// A value as the config has it, cut short when long.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}
