//! The `mesh-host.spec` label digest as 21d51db and earlier wrote it: hashed from Rust's `{:?}`
//! text of the spec, a format no release promises to keep. Kept only so that a container such a
//! release created is still found in sync (a label cannot be rewritten without recreating the
//! container): it keeps its old label until it is recreated for another reason. Remove this
//! module once no host runs a container created by 21d51db or earlier; any still running then is
//! recreated once.

use super::Spec;
use crate::util::codec;

/// The label 21d51db gave `spec`: the first 32 hex digits of the SHA-256 (or, with an
/// environment and the host's digest key, of the HMAC-SHA256) of its `{:?}` text.
pub fn label_digest(spec: &Spec, key: Option<&[u8; 32]>) -> String {
    let text = format!(
        "{}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{}",
        spec.image,
        spec.command,
        spec.env,
        spec.ports,
        spec.volumes,
        spec.network,
        spec.init,
        spec.present
    );
    let digest = match key.filter(|_| !spec.env.is_empty()) {
        Some(key) => codec::hmac_sha256(key, text.as_bytes()),
        None => codec::sha256(text.as_bytes()),
    };
    codec::hex(&digest)[..32].to_string()
}
