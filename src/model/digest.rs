//! The digest of an applied spec, as the ledger keeps it.

use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::util::codec;

/// The digest of an applied spec, written in the ledger as its hex text: the SHA-256 of the
/// spec's canonical encoding (`codec::Canonical`; each kind's `digest` lists its fields). Held as
/// its 32 bytes, not a 64-character string, as a ledger may list many thousands. Any other
/// text (a container's 32-digit digest written by 21d51db or earlier, or a value a ledger was
/// hand-edited to) is kept as written, so a ledger reads back as it was.
///
/// No plan reads it: a run that finds a resource as declared writes its digest over whatever the
/// ledger held (`reconcile`), so a ledger written before the canonical encoding (its digests
/// hashed Rust's `{:?}` text) is brought up to date by the first run, with nothing applied.
#[derive(Clone, PartialEq, Eq)]
pub enum Digest {
    Sha256([u8; 32]),
    Text(Box<str>),
}
impl Digest {
    /// The SHA-256 of `data`.
    #[cfg(test)]
    pub fn of(data: &[u8]) -> Digest {
        Digest::Sha256(codec::sha256(data))
    }

    /// The digest a ledger's text names: 64 lower-case hex digits are a SHA-256.
    #[inline]
    pub fn parse(text: &str) -> Digest {
        match codec::hex_decode_32(text) {
            Some(bytes) => Digest::Sha256(bytes),
            None => Digest::Text(text.into()),
        }
    }
}
impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Digest::Sha256(bytes) => codec::Hex32(bytes).fmt(f),
            Digest::Text(text) => f.write_str(text),
        }
    }
}
impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        // As the ledger's text, quoted.
        match self {
            Digest::Sha256(bytes) => write!(f, "\"{}\"", codec::Hex32(bytes)),
            Digest::Text(text) => write!(f, "{text:?}"),
        }
    }
}
impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}
impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Digest;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a digest's text")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Digest, E> {
                Ok(Digest::parse(text))
            }
        }
        deserializer.deserialize_str(Text)
    }
}
