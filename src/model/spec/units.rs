//! systemd units as a declaration states them: names, content, enabled and active, the files
//! they restart or reload on, what is secret, units that act on the host refused, the digest.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::kind::{check_argument, KindSpec};
use crate::model::config::{Identity, Limits};
use crate::model::digest::Digest;
use crate::model::fields::{FieldDoc, FieldType, Fields, STATE};
use crate::model::selfref::Refusal;
use crate::model::unitfile::UnitName;

pub struct Units;

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub present: bool,
    /// Unmanaged when `None`.
    pub enabled: Option<bool>,
    pub active: Option<bool>,
    /// The unit file, written to the unit directory; `None` for units a package ships.
    pub content: Option<String>,
    pub restart_on: Vec<String>,
    pub reload_on: Vec<String>,
    /// The package that ships the unit: if it fails to install, the unit is skipped.
    pub package: Option<String>,
    /// `"secret": true`: its content is never shown (see `is_secret`), and its file is 0600.
    pub secret: bool,
    /// `"restart_when_stale": true`: restarted, when running, while its processes map files an
    /// upgrade deleted under /usr (`upkeep`): after the run's own transaction, or anyone's.
    pub restart_when_stale: bool,
}

/// Whether a unit's content is secret: only when declared so (a unit file is the manager's to
/// read, with no mode of its own to say so). Never shown, logged, reported or diffed.
pub fn is_secret(spec: &Spec) -> bool {
    spec.secret
}

/// What the unit was before the host adopted it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Original {
    pub enabled: bool,
    pub active: bool,
    /// Backup name of its unit file in the unit directory, if the host overwrote one.
    pub file_backup: Option<String>,
}

impl KindSpec for Units {
    const ABOUT: &'static str = "systemd units";
    const KEY: &'static str =
        "a unit name with its suffix (nginx.service, backup.timer, getty@.service)";
    const FIELDS: &'static [FieldDoc] = &[
        STATE,
        FieldDoc {
            name: "enabled",
            ty: FieldType::Bool,
            default: Some("not managed"),
            about: "Enabled (systemctl enable) or not.",
        },
        FieldDoc {
            name: "active",
            ty: FieldType::Bool,
            default: Some("not managed"),
            about: "Running or stopped.",
        },
        FieldDoc {
            name: "content",
            ty: FieldType::String,
            default: Some("the unit a package ships"),
            about: "The unit file, written to the unit directory (config unit_dir); a running \
                    unit whose file changed is restarted.",
        },
        FieldDoc {
            name: "restart_on",
            ty: FieldType::Strings,
            default: Some("none"),
            about: "Files of this declaration whose change restarts the unit.",
        },
        FieldDoc {
            name: "reload_on",
            ty: FieldType::Strings,
            default: Some("none"),
            about: "Files of this declaration whose change reloads the unit (systemctl reload).",
        },
        FieldDoc {
            name: "package",
            ty: FieldType::String,
            default: Some("none"),
            about: "The declared package that ships the unit: if it fails to install, the unit \
                    is skipped with that reason.",
        },
        FieldDoc {
            name: "secret",
            ty: FieldType::Bool,
            default: Some("false"),
            about: "Its content is never shown, logged or reported, and its file is 0600.",
        },
        FieldDoc {
            name: "restart_when_stale",
            ty: FieldType::Bool,
            default: Some("false"),
            about: "Restart it while it runs with processes mapping files an upgrade deleted \
                    under /usr.",
        },
    ];
    const REQUIRED: &'static [&'static [&'static str]] = &[];
    type Spec = Spec;
    type Original = Original;

    fn check_key(key: &str) -> Result<(), String> {
        check_unit_name(key)
    }

    fn parse(key: &str, fields: &mut Fields, limits: &Limits) -> Option<Spec> {
        let present = fields.present();
        let enabled = fields.bool("enabled");
        let active = fields.bool("active");
        // A template is a file to ship; systemd enables and starts its instances, never it.
        if UnitName::parse(key).is_ok_and(|name| name.is_template()) {
            for (name, given) in [("enabled", enabled.is_some()), ("active", active.is_some())] {
                if given {
                    fields.problem(
                        name,
                        format!("{key} is a template: declare its instances to enable or start them (such as {})", key.replacen("@.", "@NAME.", 1)),
                    );
                }
            }
        }
        let content = fields.str("content").map(str::to_string);
        // The same bound as files: what the host writes it must be able to read back.
        if let Some(c) = content
            .as_ref()
            .filter(|c| c.len() as u64 > limits.max_file_bytes)
        {
            fields.problem(
                "content",
                format!(
                    "is {} bytes, more than the limit of {} bytes",
                    c.len(),
                    limits.max_file_bytes
                ),
            );
        }
        let mut paths = |name: &'static str| -> Vec<String> {
            let list = fields.strings(name).unwrap_or_default();
            let mut out = Vec::new();
            for (i, path) in list.into_iter().enumerate() {
                match super::files::check_path(path) {
                    Ok(()) => out.push(path.to_string()),
                    Err(e) => {
                        let at = format!("{}[{i}]", fields.at(name));
                        fields.problems.push(at, e);
                    }
                }
            }
            out
        };
        let restart_on = paths("restart_on");
        let reload_on = paths("reload_on");
        let package = fields.str("package").map(str::to_string);
        let secret = fields.bool("secret").unwrap_or(false);
        let restart_when_stale = fields.bool("restart_when_stale").unwrap_or(false);
        if !present {
            for (name, given) in [
                ("enabled", enabled.is_some()),
                ("active", active.is_some()),
                ("content", content.is_some()),
                ("secret", secret),
                ("restart_when_stale", restart_when_stale),
            ] {
                if given {
                    fields.problem(name, "makes no sense for a unit declared absent (it is stopped, disabled and its file removed)");
                }
            }
        }
        Some(Spec {
            present,
            enabled,
            active,
            content,
            restart_on,
            reload_on,
            package,
            secret,
            restart_when_stale,
        })
    }

    fn refuse_self(key: &str, spec: &Spec, identity: &Identity) -> Option<Refusal> {
        let refusal = crate::model::selfref::refuse_unit(key, spec.content.as_deref(), identity)?;
        Some(match (is_secret(spec), &spec.content) {
            (true, Some(content)) => refusal.of_secret(content.as_bytes()),
            _ => refusal,
        })
    }

    fn digest(spec: &Spec) -> Digest {
        digest(spec)
    }
}

/// The digest the ledger keeps of a spec: the SHA-256 of its canonical encoding
/// (`codec::Canonical`): `units 0x00 0x01`, then `present` (bool), `enabled` and `active`
/// (option of bool), the SHA-256 of `content` (option of sha256), `restart_on` and `reload_on`
/// (list of str, as declared). The package, `secret` and `restart_when_stale` change nothing
/// applied to the unit, so they are not in it.
pub fn digest(spec: &Spec) -> Digest {
    use crate::util::codec::Canonical;
    let mut encoding = Canonical::new("units", 1);
    let content = spec.content.as_deref();
    encoding
        .bool(spec.present)
        .option(spec.enabled, Canonical::bool)
        .option(spec.active, Canonical::bool)
        .option(
            content.map(|c| crate::util::codec::sha256(c.as_bytes())),
            |e, sha| e.sha256(&sha),
        )
        .strs(spec.restart_on.iter().map(String::as_str))
        .strs(spec.reload_on.iter().map(String::as_str));
    Digest::Sha256(encoding.digest())
}

/// systemd's rules: a name prefix of letters, digits and `:-_.\@`, a known suffix, at most 255 bytes.
pub fn check_unit_name(name: &str) -> Result<(), String> {
    check_argument("unit", name)?;
    UnitName::parse(name).map(|_| ())
}

/// Files named by `restart_on`/`reload_on` must be files this declaration manages.
pub fn watched_files(spec: &Spec) -> BTreeSet<&str> {
    spec.restart_on
        .iter()
        .chain(&spec.reload_on)
        .map(String::as_str)
        .collect()
}
