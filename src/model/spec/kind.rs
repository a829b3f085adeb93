//! What a resource kind is before anything is observed or applied: its name, the rules for its
//! keys, the typed spec its fields parse into, what the ledger keeps of an adopted resource, why a
//! resource would be the host itself, and the digest of a spec. Every item is required (no
//! defaults), so a new kind that forgets one does not compile.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::model::config::{Identity, Limits};
use crate::model::digest::Digest;
use crate::model::fields::{FieldDoc, Fields};
use crate::model::selfref::Refusal;

/// The kind's name, given by the registry (`model::spec::registry!`): the declaration's key for
/// the kind and its section of the ledger.
pub trait Named {
    const NAME: &'static str;
}

/// A resource kind's pure part; `kinds::Kind` adds what observing and applying it takes.
pub trait KindSpec: Named {
    /// What it manages, for the usage text: `files under /etc`.
    const ABOUT: &'static str;
    /// What a resource's key is, for the manual: `an absolute path under /etc`.
    const KEY: &'static str;
    /// Its fields, for the manual and the JSON Schema (`state` first); `parse` is the authority.
    const FIELDS: &'static [FieldDoc];
    /// The fields a present resource needs, as alternatives: one of each group must be given.
    const REQUIRED: &'static [&'static [&'static str]];
    type Spec: std::fmt::Debug + Clone;
    /// What the ledger keeps of an adopted resource, to put it back on release (`NoOriginal` for
    /// a kind that adopts nothing). Serialised in the ledger as the `original` of its entry.
    type Original: std::fmt::Debug + Clone + PartialEq + Serialize + DeserializeOwned + 'static;

    /// Validates a resource's identity (a path, a package or unit name).
    fn check_key(key: &str) -> Result<(), String>;
    /// Validates one resource's fields; problems go to `fields`.
    fn parse(key: &str, fields: &mut Fields, limits: &Limits) -> Option<Self::Spec>;
    /// Why this resource is the host itself, if it is.
    fn refuse_self(key: &str, spec: &Self::Spec, identity: &Identity) -> Option<Refusal>;
    /// The digest the ledger keeps of an applied spec.
    fn digest(spec: &Self::Spec) -> Digest;
}

/// The original of a kind that keeps none (nothing of it is adopted): no value exists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NoOriginal {}

/// Checks names that end up as arguments of a tool: never empty, never option-like.
pub fn check_argument(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} name is empty"));
    }
    if name.starts_with('-') {
        return Err(format!(
            "{what} name {name:?} starts with '-' and could be taken for an option"
        ));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "{what} name {name:?} contains whitespace or control characters"
        ));
    }
    Ok(())
}
