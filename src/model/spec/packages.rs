//! pacman packages as a declaration states them: names by pacman's rules, `present`, the
//! host's own package refused, the digest.

use super::kind::{check_argument, KindSpec};
use crate::model::config::{Identity, Limits};
use crate::model::digest::Digest;
use crate::model::fields::{FieldDoc, Fields, STATE};
use crate::model::selfref::Refusal;
use crate::tools::pacman::InstallReason;

pub struct Packages;

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub present: bool,
}

impl KindSpec for Packages {
    const ABOUT: &'static str = "pacman packages";
    const KEY: &'static str =
        "a package name (letters, digits and @._+-, not starting with - or .)";
    const FIELDS: &'static [FieldDoc] = &[STATE];
    const REQUIRED: &'static [&'static [&'static str]] = &[];
    type Spec = Spec;
    type Original = InstallReason;

    fn check_key(key: &str) -> Result<(), String> {
        check_argument("package", key)?;
        // pacman's rules: alphanumerics and @._+-, not starting with '-' or '.'.
        if key.starts_with('.') {
            return Err(format!("package name {key:?} starts with '.'"));
        }
        if let Some(c) = key
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "@._+-".contains(*c)))
        {
            return Err(format!(
                "package name {key:?} contains {c:?}; pacman allows letters, digits and @._+-"
            ));
        }
        if key.len() > 255 {
            return Err("package name is longer than 255 bytes".into());
        }
        Ok(())
    }

    fn parse(_key: &str, fields: &mut Fields, _limits: &Limits) -> Option<Spec> {
        Some(Spec {
            present: fields.present(),
        })
    }

    fn refuse_self(key: &str, _spec: &Spec, identity: &Identity) -> Option<Refusal> {
        let package = key.to_string();
        let own = identity.package_names.contains(&package);
        own.then_some(Refusal::OwnPackage { package })
    }

    fn digest(spec: &Spec) -> Digest {
        digest(spec)
    }
}

/// The digest the ledger keeps of a spec: the SHA-256 of its canonical encoding
/// (`codec::Canonical`), `packages 0x00 0x01` then `present` (bool).
pub fn digest(spec: &Spec) -> Digest {
    let mut encoding = crate::util::codec::Canonical::new("packages", 1);
    encoding.bool(spec.present);
    Digest::Sha256(encoding.digest())
}
