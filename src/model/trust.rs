//! Whom a machine trusts to sign its declarations: ed25519 public keys and how many of them
//! must have signed. The config sets it; envelopes are checked against it.

use std::fmt;

use ring::signature::{UnparsedPublicKey, ED25519};

use crate::util::codec;

const KEY_PREFIX: &str = "ed25519:";

/// An ed25519 public key; in text `ed25519:` and the base64 of its 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    pub fn from_bytes(bytes: [u8; 32]) -> PublicKey {
        PublicKey(bytes)
    }

    pub fn parse(text: &str) -> Result<PublicKey, String> {
        let encoded = text
            .strip_prefix(KEY_PREFIX)
            .ok_or_else(|| format!("{text:?} is not a public key (ed25519:BASE64)"))?;
        let bytes = codec::base64_decode(encoded)
            .map_err(|e| format!("{text:?} is not a public key (ed25519:BASE64): {e}"))?;
        let bytes = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
            format!(
                "{text:?} is not a public key: {} bytes, an ed25519 key is 32",
                bytes.len()
            )
        })?;
        Ok(PublicKey(bytes))
    }

    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, self.0)
            .verify(message, signature)
            .is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{KEY_PREFIX}{}", codec::base64_encode(&self.0))
    }
}

/// The keys a machine trusts and how many of them must have signed (config `trusted_keys`,
/// `signatures_required`; never set by a declaration).
#[derive(Debug, Clone, PartialEq)]
pub struct Trust {
    pub keys: Vec<PublicKey>,
    /// At least 1 and at most `keys.len()`.
    pub required: usize,
}
