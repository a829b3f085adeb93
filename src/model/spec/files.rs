//! Files under /etc as a declaration states them: paths, content, mode and owner, what is
//! secret, the host's own files refused (what systemd or PID 1 would read of them), the digest.

use super::kind::KindSpec;
use crate::model::config::{Identity, Limits};
use crate::model::digest::Digest;
use crate::model::fields::{FieldDoc, FieldType, Fields, STATE};
use crate::model::selfref::Refusal;
use crate::os::accounts::Account;
use crate::os::fsutil::TEMP_SUFFIX;
use crate::util::codec;

pub struct Files;

#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    Present(Content),
    Absent,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Content {
    /// Exactly the declared bytes (no spare capacity: thousands of files are held at once).
    pub bytes: Box<[u8]>,
    /// Unmanaged when not declared; a new file then gets 0644.
    pub mode: Option<u32>,
    /// Owner and group, when either is declared: boxed, as most files declare neither and a
    /// declaration holds thousands of files.
    pub ownership: Option<Box<Ownership>>,
    /// `secret` as declared; `None` leaves it to the mode (see `is_secret`).
    pub secret: Option<bool>,
}

/// A file's declared owner and group.
#[derive(Debug, Clone, PartialEq)]
pub struct Ownership {
    pub owner: Option<Account>,
    pub group: Option<Account>,
}

/// Whether a file's content is secret: never shown, logged, reported or diffed, only its sizes
/// and keyed digests (`codec::hmac_sha256`). Declared with `"secret"`; by default, a file whose
/// declared mode lets others not read it (0600, 0640, 0400...), since that mode already says
/// its content is not for everyone. A file declared absent has no content to keep.
pub fn is_secret(spec: &Spec) -> bool {
    match spec {
        Spec::Present(c) => c.is_secret(),
        Spec::Absent => false,
    }
}

impl Content {
    /// `is_secret` of this content.
    pub fn is_secret(&self) -> bool {
        (self.secret).unwrap_or_else(|| self.mode.is_some_and(|mode| mode & 0o004 == 0))
    }

    pub fn owner(&self) -> Option<&Account> {
        self.ownership.as_ref()?.owner.as_ref()
    }

    pub fn group(&self) -> Option<&Account> {
        self.ownership.as_ref()?.group.as_ref()
    }
}

pub const DEFAULT_MODE: u32 = 0o644;
/// A new file declared secret with no mode: only its owner reads it.
pub const DEFAULT_SECRET_MODE: u32 = 0o600;

/// The original of an adopted file, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Original {
    pub backup: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl KindSpec for Files {
    const ABOUT: &'static str = "files under /etc";
    const KEY: &'static str = "an absolute path under /etc";
    const FIELDS: &'static [FieldDoc] = &[
        STATE,
        FieldDoc {
            name: "content",
            ty: FieldType::String,
            default: Some("required unless content_base64 is given"),
            about: "The file's content (UTF-8).",
        },
        FieldDoc {
            name: "content_base64",
            ty: FieldType::String,
            default: Some("required unless content is given"),
            about: "The content in base64, for binary files; give exactly one of the two.",
        },
        FieldDoc {
            name: "mode",
            ty: FieldType::String,
            default: Some("not managed (a new file gets 0644, 0600 when secret)"),
            about: "Octal, such as \"0644\" or \"4755\".",
        },
        FieldDoc {
            name: "owner",
            ty: FieldType::String,
            default: Some("not managed (a new file gets root)"),
            about: "A user name or numeric uid.",
        },
        FieldDoc {
            name: "group",
            ty: FieldType::String,
            default: Some("not managed (a new file gets root)"),
            about: "A group name or numeric gid.",
        },
        FieldDoc {
            name: "secret",
            ty: FieldType::Bool,
            default: Some("true when the declared mode lets others not read the file"),
            about: "Its content is never shown, logged or reported: only its size and a keyed \
                    digest.",
        },
    ];
    const REQUIRED: &'static [&'static [&'static str]] = &[&["content", "content_base64"]];
    type Spec = Spec;
    type Original = Original;

    fn check_key(key: &str) -> Result<(), String> {
        check_path(key)
    }

    fn parse(_key: &str, fields: &mut Fields, limits: &Limits) -> Option<Spec> {
        let present = fields.present();
        let text = fields.str("content");
        let base64 = fields.str("content_base64");
        let mode = fields.str("mode");
        let owner = fields.str("owner");
        let group = fields.str("group");
        let secret = fields.bool("secret");
        if !present {
            for (name, given) in [
                ("secret", secret.is_some()),
                ("content", text.is_some()),
                ("content_base64", base64.is_some()),
                ("mode", mode.is_some()),
                ("owner", owner.is_some()),
                ("group", group.is_some()),
            ] {
                if given {
                    fields.problem(name, "makes no sense for a file declared absent");
                }
            }
            return Some(Spec::Absent);
        }
        let bytes = content(fields, text, base64, limits);
        let mode = mode.and_then(|m| match parse_mode(m) {
            Some(mode) => Some(mode),
            None => {
                fields.problem(
                    "mode",
                    format!("{m:?} is not an octal mode (such as \"0644\")"),
                );
                None
            }
        });
        let mut account = |name: &'static str, text: Option<&str>| {
            text.and_then(|t| match Account::parse(t) {
                Ok(a) => Some(a),
                Err(e) => {
                    fields.problem(name, e);
                    None
                }
            })
        };
        let owner = account("owner", owner);
        let group = account("group", group);
        let ownership =
            (owner.is_some() || group.is_some()).then(|| Box::new(Ownership { owner, group }));
        Some(Spec::Present(Content {
            bytes: bytes?.into_boxed_slice(),
            mode,
            ownership,
            secret,
        }))
    }

    fn refuse_self(key: &str, spec: &Spec, identity: &Identity) -> Option<Refusal> {
        let content = match spec {
            Spec::Present(c) => Some(&c.bytes[..]),
            Spec::Absent => None,
        };
        let refusal = crate::model::selfref::refuse_file(key, content, identity)?;
        Some(match (is_secret(spec), content) {
            (true, Some(content)) => refusal.of_secret(content),
            _ => refusal,
        })
    }

    fn digest(spec: &Spec) -> Digest {
        digest(spec)
    }
}

/// A present file's content from `content` or `content_base64` (one of the two), within the
/// size limit; `None` after saying what is wrong.
fn content(
    fields: &mut Fields,
    text: Option<&str>,
    base64: Option<&str>,
    limits: &Limits,
) -> Option<Vec<u8>> {
    let bytes = match (text, base64) {
        (Some(t), None) => Some(t.as_bytes().to_vec()),
        (None, Some(b)) => match codec::base64_decode(b) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                fields.problem("content_base64", format!("is not valid base64: {e}"));
                None
            }
        },
        (Some(_), Some(_)) => {
            fields.problem("content", "give either content or content_base64, not both");
            None
        }
        (None, None) => {
            if !fields.has("content") && !fields.has("content_base64") {
                fields.problem("content", "missing (give content or content_base64)");
            }
            None
        }
    };
    if let Some(b) = &bytes {
        if b.len() as u64 > limits.max_file_bytes {
            let name = if text.is_some() {
                "content"
            } else {
                "content_base64"
            };
            fields.problem(
                name,
                format!(
                    "is {} bytes, more than the limit of {} bytes",
                    b.len(),
                    limits.max_file_bytes
                ),
            );
        }
    }
    bytes
}

/// The unit (or drop-in directory's name) a file configures, if systemd would read it as a unit
/// file or drop-in in a directory it searches: a unit's name, or `*.conf` in `NAME.d/`. Judged by
/// the path alone, so a lookalike elsewhere costs no more than a `daemon-reload`.
pub fn configures_unit(path: &str) -> Option<&str> {
    use crate::model::unitfile::{UnitName, DECLARABLE_TYPES};
    let (dir, name) = path.rsplit_once('/')?;
    let is_unit = |name: &str| UnitName::parse(name).is_ok();
    match (name.strip_suffix(".conf"), dir.rsplit_once('/')) {
        (Some(_), Some((_, d))) => d
            .strip_suffix(".d")
            .filter(|unit| is_unit(unit) || DECLARABLE_TYPES.contains(unit)),
        _ => Some(name).filter(|name| is_unit(name)),
    }
}

/// The digest the ledger keeps of an applied spec: the SHA-256 of its canonical encoding
/// (`codec::Canonical`): `files 0x00 0x01`, then `present` (bool); present, the SHA-256 of the
/// content (sha256), `mode` (option of u32), `owner` and `group` (option of str: a name, or an id
/// in decimal). `secret` changes nothing written, so it is not in it.
pub fn digest(spec: &Spec) -> Digest {
    match spec {
        Spec::Absent => {
            let mut encoding = codec::Canonical::new("files", 1);
            encoding.bool(false);
            Digest::Sha256(encoding.digest())
        }
        Spec::Present(c) => content_digest(c),
    }
}

pub fn content_digest(c: &Content) -> Digest {
    Digest::Sha256(content_digest_of(c, &codec::sha256(&c.bytes)))
}

/// `content_digest`'s bytes, given the SHA-256 of the content.
pub fn content_digest_of(c: &Content, sha: &[u8; 32]) -> [u8; 32] {
    fn account<'e>(e: &'e mut codec::Canonical, a: &Account) -> &'e mut codec::Canonical {
        e.str(&a.display())
    }
    let mut encoding = codec::Canonical::new("files", 1);
    encoding
        .bool(true)
        .sha256(sha)
        .option(c.mode, codec::Canonical::u32)
        .option(c.owner(), account)
        .option(c.group(), account);
    encoding.digest()
}

/// Absolute, normalised, under /etc, and not /etc itself.
pub fn check_path(key: &str) -> Result<(), String> {
    if key.contains('\0') {
        return Err("path contains a NUL byte".into());
    }
    if !key.starts_with('/') {
        return Err("path is not absolute".into());
    }
    if key.len() > 4096 {
        return Err("path is longer than 4096 bytes".into());
    }
    if key.len() > 1 && key.ends_with('/') {
        return Err("path ends with '/'".into());
    }
    // Split as bytes: `str`'s split looks for each '/' through a search of its own, a cost
    // every declared file pays.
    for part in key.as_bytes()[1..].split(|b| *b == b'/') {
        match part {
            b"" => return Err("path has an empty component ('//')".into()),
            b"." => return Err(r#"path has a "." component; give it normalised"#.into()),
            b".." => return Err(r#"path has a ".." component; give it normalised"#.into()),
            p if p.len() > 255 => return Err("path has a component longer than 255 bytes".into()),
            _ => {}
        }
    }
    if !key.starts_with("/etc/") {
        return Err("path is not under /etc".into());
    }
    if key.ends_with(TEMP_SUFFIX) {
        return Err(format!(
            "path's file name ends with {TEMP_SUFFIX:?}: mesh-host names its own temp files so, \
             and a declared one could be another file's temp"
        ));
    }
    Ok(())
}

pub fn parse_mode(text: &str) -> Option<u32> {
    let valid = (3..=4).contains(&text.len()) && text.bytes().all(|b| (b'0'..=b'7').contains(&b));
    valid.then(|| u32::from_str_radix(text, 8).ok()).flatten()
}
