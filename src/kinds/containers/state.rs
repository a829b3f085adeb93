//! What observing a container finds and what a plan does to one; the labels that mark a
//! container as the host's and carry its spec's digest.

use super::legacy;
use crate::model::spec::containers::{encoding, Spec};
use crate::util::codec;

/// Label marking a container as created by mesh-host.
pub const OWNED_LABEL: &str = "mesh-host.owned";
/// Label holding the digest of the spec a container was created from.
pub const SPEC_LABEL: &str = "mesh-host.spec";

#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub exists: bool,
    pub running: bool,
    /// Paused by someone (`podman pause`): neither `start` nor `stop` accepts it until unpaused.
    pub paused: bool,
    /// Created by mesh-host (it carries the owned label).
    pub ours: bool,
    pub spec_digest: Option<String>,
}

#[derive(Debug, PartialEq)]
pub enum Op {
    /// Create (removing an older one of ours first) and, if it should run, start.
    Create {
        remove_first: bool,
        start: bool,
    },
    Start,
    Stop,
    /// Unpause a paused container, then stop it if it should not run.
    Unpause {
        stop: bool,
    },
    Remove,
    Forget,
}

/// A container podman does not have.
pub(super) fn absent() -> Observed {
    Observed {
        exists: false,
        running: false,
        paused: false,
        ours: false,
        spec_digest: None,
    }
}

/// The digest a container's `mesh-host.spec` label holds, which `podman ps` shows and a create's
/// command line carries (into errors, traces and the debug log): the first 32 hex digits of the
/// SHA-256 of the spec's encoding. Of a spec with an environment, whose values are secret, it is
/// keyed with the host's digest key (the HMAC-SHA256 of the encoding, `codec::hmac_sha256`), so
/// no one can test a guessed value against it.
pub fn label_digest(spec: &Spec, key: Option<&[u8; 32]>) -> String {
    let encoding = encoding(spec);
    let digest = match key.filter(|_| !spec.env.is_empty()) {
        Some(key) => encoding.keyed_digest(key),
        None => encoding.digest(),
    };
    codec::hex(&digest)[..32].to_string()
}

/// Whether a container's label says it was created from `spec`: its label, or the one 21d51db
/// and earlier gave it (`legacy`), which it keeps until it is recreated for another reason.
pub(super) fn label_matches(label: Option<&str>, spec: &Spec, key: Option<&[u8; 32]>) -> bool {
    let Some(label) = label else {
        return false;
    };
    label == label_digest(spec, key) || label == legacy::label_digest(spec, key)
}

/// The labels of a container the host creates: owned, and the digest of its spec.
pub(super) fn labels(spec_digest: &str) -> [(&'static str, &str); 2] {
    [(OWNED_LABEL, "1"), (SPEC_LABEL, spec_digest)]
}
