//! Signed declarations: the envelope (a declaration's exact text plus ed25519 signatures over
//! those bytes), its parser (every problem located, as `declaration.rs` does), signing, and the
//! checks a declaration from the control plane must pass when the machine trusts keys. Pure: no
//! files, no clock (time is passed in); key files are `keys.rs`'s.

use std::collections::BTreeSet;
use std::fmt;

use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::model::declaration::Declaration;
use crate::model::fields::{type_name, Fields, Json, Problems};
use crate::model::trust::{PublicKey, Trust};
use crate::util::codec;

/// The envelope format's version, the value of its `envelope` member.
pub const VERSION: u64 = 1;
const SIGNATURE_LEN: usize = 64;

/// One signature over the envelope's declaration bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub key: PublicKey,
    pub bytes: Vec<u8>,
}

/// A declaration's exact text and the signatures over it.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub declaration: String,
    pub signatures: Vec<Signature>,
}

/// What the envelope looks like as JSON (written by `sign`; read back through `open`).
#[derive(Serialize)]
struct RawEnvelope<'a> {
    envelope: u64,
    declaration: &'a str,
    signatures: Vec<RawSignature>,
}

#[derive(Serialize)]
struct RawSignature {
    key: String,
    signature: String,
}

impl Envelope {
    /// Wraps a declaration's text, unsigned so far.
    pub fn new(declaration: String) -> Envelope {
        Envelope {
            declaration,
            signatures: Vec::new(),
        }
    }

    /// Adds `key_pair`'s signature over the declaration bytes, replacing a signature by the same
    /// key that no longer verifies. Returns false (and changes nothing) when that key has a valid
    /// signature here already.
    pub fn sign(&mut self, key_pair: &Ed25519KeyPair) -> bool {
        let key = public_key(key_pair);
        let message = self.declaration.as_bytes();
        if self
            .signatures
            .iter()
            .any(|s| s.key == key && key.verifies(message, &s.bytes))
        {
            return false;
        }
        self.signatures.retain(|s| s.key != key);
        self.signatures.push(Signature {
            key,
            bytes: key_pair.sign(message).as_ref().to_vec(),
        });
        true
    }

    pub fn to_json(&self) -> String {
        let raw = RawEnvelope {
            envelope: VERSION,
            declaration: &self.declaration,
            signatures: self
                .signatures
                .iter()
                .map(|s| RawSignature {
                    key: s.key.to_string(),
                    signature: codec::base64_encode(&s.bytes),
                })
                .collect(),
        };
        serde_json::to_string_pretty(&raw).unwrap_or_default() + "\n"
    }

    /// Checks every signature and counts the distinct trusted keys whose signatures verify.
    pub fn verify(&self, trusted: &[PublicKey]) -> Verification {
        let message = self.declaration.as_bytes();
        let mut counted = BTreeSet::new();
        let signatures = self
            .signatures
            .iter()
            .map(|s| {
                let state = if !s.key.verifies(message, &s.bytes) {
                    SignatureState::Bad
                } else if !trusted.contains(&s.key) {
                    SignatureState::Untrusted
                } else if counted.insert(s.key) {
                    SignatureState::Trusted
                } else {
                    SignatureState::Repeated
                };
                (s.key, state)
            })
            .collect();
        Verification { signatures }
    }
}

/// The public key of a key pair.
pub fn public_key(key_pair: &Ed25519KeyPair) -> PublicKey {
    let mut bytes = [0u8; 32];
    bytes.copy_from_slice(key_pair.public_key().as_ref());
    PublicKey::from_bytes(bytes)
}

/// What one signature proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureState {
    /// Valid, by a trusted key, and the first by that key: it counts.
    Trusted,
    /// Valid, by a key this machine does not trust.
    Untrusted,
    /// Valid, by a trusted key that already signed: counts once.
    Repeated,
    /// Does not verify: the bytes or the signature were altered, or it signs other bytes.
    Bad,
}

impl SignatureState {
    pub fn name(self) -> &'static str {
        match self {
            SignatureState::Trusted => "trusted",
            SignatureState::Untrusted => "valid, by a key not trusted here",
            SignatureState::Repeated => "trusted, repeated (counts once)",
            SignatureState::Bad => "bad signature",
        }
    }
}

/// Every signature of an envelope with what it proved, in the envelope's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    pub signatures: Vec<(PublicKey, SignatureState)>,
}

impl Verification {
    /// The distinct trusted keys whose signatures verify.
    pub fn trusted(&self) -> Vec<PublicKey> {
        self.keys_in(&[SignatureState::Trusted])
    }

    /// The keys whose signatures verify, trusted here or not (each once): who signed.
    pub fn signers(&self) -> Vec<PublicKey> {
        let mut keys = self.keys_in(&[
            SignatureState::Trusted,
            SignatureState::Untrusted,
            SignatureState::Repeated,
        ]);
        let mut seen = BTreeSet::new();
        keys.retain(|k| seen.insert(*k));
        keys
    }

    fn keys_in(&self, states: &[SignatureState]) -> Vec<PublicKey> {
        self.signatures
            .iter()
            .filter(|(_, s)| states.contains(s))
            .map(|(k, _)| *k)
            .collect()
    }

    pub fn has_bad(&self) -> bool {
        self.signatures
            .iter()
            .any(|(_, s)| *s == SignatureState::Bad)
    }

    /// Why the signatures do not satisfy `trust`, or `None` when they do. A signature that does
    /// not verify refuses the envelope whatever the others prove: its text is not what that
    /// signer signed, and no honest envelope holds one (`sign` replaces its own stale one).
    fn refusal(&self, trust: Option<&Trust>) -> Option<Refusal> {
        let valid = self.trusted().len();
        let required = trust.map_or(0, |t| t.required);
        if valid >= required && !self.has_bad() {
            return None;
        }
        let detail = self.describe();
        let reason = if self.has_bad() {
            Reason::BadSignature
        } else if self.signatures.is_empty() {
            Reason::Unsigned
        } else if valid == 0 && !self.keys_in(&[SignatureState::Untrusted]).is_empty() {
            Reason::UnknownKey
        } else {
            Reason::TooFew
        };
        let detail = match reason {
            Reason::BadSignature => {
                format!("the text is not what every signer signed{detail}")
            }
            _ => format!(
                "{valid} valid signature{} by distinct trusted keys, {required} required{detail}",
                if valid == 1 { "" } else { "s" },
            ),
        };
        Some(Refusal { reason, detail })
    }

    /// `: signatures[0] by KEY: STATE; ...`, or nothing when there are none.
    fn describe(&self) -> String {
        let parts: Vec<String> = self
            .signatures
            .iter()
            .enumerate()
            .map(|(i, (key, state))| format!("signatures[{i}] by {key}: {}", state.name()))
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join("; "))
        }
    }
}

/// The reasons a declaration's signatures are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A plain declaration, or an envelope with no signature.
    Unsigned,
    /// Signatures only by keys this machine does not trust.
    UnknownKey,
    /// A signature that does not verify (what was signed is not these bytes).
    BadSignature,
    /// Valid signatures by fewer distinct trusted keys than required.
    TooFew,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Unsigned => "unsigned",
            Reason::UnknownKey => "unknown key",
            Reason::BadSignature => "bad signature",
            Reason::TooFew => "too few signatures",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: Reason,
    pub detail: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.name(), self.detail)
    }
}

/// Why a declaration is refused for its signatures, or `None`: with `trust`, unless enough
/// distinct trusted keys signed it (a plain declaration is `unsigned`); without, only for a
/// signature that does not verify. `verification` is `None` for a plain declaration.
pub fn refusal(verification: Option<&Verification>, trust: Option<&Trust>) -> Option<Refusal> {
    match (verification, trust) {
        (Some(v), trust) => v.refusal(trust),
        (None, None) => None,
        (None, Some(trust)) => Some(Refusal {
            reason: Reason::Unsigned,
            detail: format!(
                "a plain declaration, and this host needs {} signature{} by its trusted keys",
                trust.required,
                if trust.required == 1 { "" } else { "s" }
            ),
        }),
    }
}

/// Only the member that tells an envelope from a plain declaration (other members skipped).
#[derive(Deserialize)]
struct Probe {
    envelope: Option<IgnoredAny>,
}

/// Reads bytes that are an envelope or a plain declaration: `Ok(None)` for anything that is not
/// a JSON object with an `envelope` member (a plain declaration, or bytes the declaration parser
/// will explain), the envelope when it is one, or every problem with it, each located.
pub fn open(bytes: &[u8]) -> Result<Option<Envelope>, Problems> {
    if is_envelope(bytes) {
        parse(bytes).map(Some)
    } else {
        Ok(None)
    }
}

/// Whether `bytes` are a JSON object with an `envelope` member (else a plain declaration, or
/// bytes the declaration parser will explain).
pub fn is_envelope(bytes: &[u8]) -> bool {
    may_name_envelope(bytes)
        && matches!(
            serde_json::from_slice::<Probe>(bytes),
            Ok(Probe { envelope: Some(_) })
        )
}

/// Whether the text could have an `envelope` member: its name spelled out, or a `\u` escape that
/// could spell it. Without either, a plain declaration (megabytes, for a large one) is not read a
/// second time to find that it is not an envelope.
fn may_name_envelope(bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.contains("envelope") || text.contains("\\u"),
        // Not text: the declaration parser says so.
        Err(_) => false,
    }
}

/// Parses an envelope through serde: the declaration is copied out of the bytes once, as any
/// string member is.
fn parse(bytes: &[u8]) -> Result<Envelope, Problems> {
    let mut problems = Problems::default();
    // Duplicate keys are refused: two `declaration` members could be read differently by two
    // parsers, and the bytes verified must be the bytes applied.
    let mut top = match crate::model::fields::json::parse(bytes) {
        Ok(Json::Object(top)) => top,
        Ok(other) => {
            problems.push(
                "",
                format!(
                    "an envelope must be a JSON object, not {}",
                    type_name(&other)
                ),
            );
            return Err(problems);
        }
        Err(e) => {
            problems.push("", format!("envelope: not valid JSON: {e}"));
            return Err(problems);
        }
    };
    let mut fields = Fields::new(&top, String::new(), &mut problems);
    let version = fields.u64("envelope");
    let text = fields.str("declaration").is_some();
    let items = fields.array("signatures");
    fields.finish();
    match version {
        Some(VERSION) | None => {}
        Some(other) => problems.push(
            "envelope",
            format!("{other} is not a supported envelope version (this host reads {VERSION})"),
        ),
    }
    if !text && !top.contains_key("declaration") {
        problems.push(
            "declaration",
            "missing (the declaration's text, as a string)",
        );
    }
    if items.is_none() && !top.contains_key("signatures") {
        problems.push(
            "signatures",
            "missing (an array of {\"key\", \"signature\"})",
        );
    }
    let signatures = (items.into_iter().flatten().enumerate())
        .filter_map(|(i, item)| signature(i, item, &mut problems))
        .collect();
    if !text || !problems.is_empty() {
        return Err(problems);
    }
    // Moved out rather than copied: a declaration may be tens of MiB.
    match top.remove("declaration") {
        Some(Json::String(declaration)) => Ok(Envelope {
            declaration: declaration.into_owned(),
            signatures,
        }),
        _ => Err(problems),
    }
}

/// `signatures[i]`, or its problems.
fn signature(i: usize, item: &Json, problems: &mut Problems) -> Option<Signature> {
    let location = format!("signatures[{i}]");
    let Json::Object(object) = item else {
        problems.push(
            location,
            format!("must be an object, not {}", type_name(item)),
        );
        return None;
    };
    let mut fields = Fields::new(object, location, problems);
    let key = fields.str("key");
    let signature = fields.str("signature");
    let key = key.and_then(|k| match PublicKey::parse(k) {
        Ok(key) => Some(key),
        Err(e) => {
            fields.problem("key", e);
            None
        }
    });
    let signature = signature.and_then(|s| match codec::base64_decode(s) {
        Ok(bytes) if bytes.len() == SIGNATURE_LEN => Some(bytes),
        Ok(bytes) => {
            let message = format!(
                "{} bytes, an ed25519 signature is {SIGNATURE_LEN}",
                bytes.len()
            );
            fields.problem("signature", message);
            None
        }
        Err(e) => {
            fields.problem("signature", format!("not base64: {e}"));
            None
        }
    });
    for (name, given) in [
        ("key", object.contains_key("key")),
        ("signature", object.contains_key("signature")),
    ] {
        if !given {
            fields.problem(name, "missing");
        }
    }
    fields.finish();
    Some(Signature {
        key: key?,
        bytes: signature?,
    })
}

/// What the host knows when a `declare` frame arrives.
pub struct Arrival<'a> {
    /// The frame's `revision`.
    pub revision: u64,
    /// The newest revision accepted from the control plane so far.
    pub newest: Option<u64>,
    /// Unix seconds.
    pub now: u64,
    /// `None`: the machine trusts no keys, and any valid declaration is accepted.
    pub trust: Option<&'a Trust>,
}

/// A declaration from the control plane that passed every check.
#[derive(Debug)]
pub struct Accepted {
    pub declaration: Declaration,
    /// The declaration's own bytes (inside the envelope, if it came in one): what is stored.
    pub text: Vec<u8>,
    /// Who signed it (each signature valid; trusted or not).
    pub signed_by: Vec<PublicKey>,
}

/// Why a declaration from the control plane is not applied.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// Not newer than the newest accepted: nothing to do (reported as `ignored`).
    Stale(String),
    /// Invalid, badly signed, mismatched or expired (reported as `rejected`).
    Rejected(String),
}

/// Decides on the declaration a `declare` brought (the bytes of the frame after it): newer than
/// the newest accepted; a well-formed envelope if it is one; with trusted keys set, signed by
/// enough of them, carrying its own revision equal to the frame's; valid (`validate`, the
/// declaration parser); and not expired.
pub fn accept(
    text: Vec<u8>,
    arrival: &Arrival,
    validate: impl FnOnce(&[u8]) -> Result<Declaration, Problems>,
) -> Result<Accepted, Refused> {
    let revision = arrival.revision;
    if let Some(newest) = arrival.newest.filter(|n| revision <= *n) {
        return Err(Refused::Stale(format!(
            "ignored: revision {revision} is not newer than {newest}, the newest accepted"
        )));
    }
    let located = |problems: &Problems| {
        let count = problems.0.len();
        Refused::Rejected(format!(
            "revision {revision}: {count} problem{}; nothing was applied:\n{problems}",
            if count == 1 { "" } else { "s" }
        ))
    };
    let (text, verification) = if is_envelope(&text) {
        let envelope = parse(&text).map_err(|p| located(&p))?;
        drop(text);
        let trusted = arrival.trust.map_or(&[][..], |t| &t.keys);
        let verification = envelope.verify(trusted);
        (envelope.declaration.into_bytes(), Some(verification))
    } else {
        (text, None)
    };
    if let Some(refusal) = refusal(verification.as_ref(), arrival.trust) {
        return Err(Refused::Rejected(format!(
            "revision {revision} refused: {refusal}; the previous declaration stays in force"
        )));
    }
    let declaration = validate(&text).map_err(|p| located(&p))?;
    if arrival.trust.is_some() && declaration.revision != Some(revision) {
        let inner = match declaration.revision {
            Some(r) => format!("the signed text carries revision {r}"),
            None => "the signed text carries no revision".to_string(),
        };
        return Err(Refused::Rejected(format!(
            "revision {revision} refused: {inner}, not the declare frame's {revision} (a signed \
             declaration must carry its own revision, so an old one cannot be replayed under a \
             new number); the previous declaration stays in force"
        )));
    }
    if let Some(expires) = declaration.expires.filter(|e| *e <= arrival.now) {
        return Err(Refused::Rejected(format!(
            "revision {revision} refused: expired {} ({} ago); the previous declaration stays \
             in force",
            crate::util::words::utc(expires),
            crate::util::words::age(arrival.now - expires)
        )));
    }
    Ok(Accepted {
        declaration,
        text,
        signed_by: verification.map(|v| v.signers()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::declaration::tests::parse_with_defaults;

    const NOW: u64 = 1_800_000_000;

    /// A deterministic key pair (test seed `n`), so tests need no randomness.
    fn key(n: u8) -> Ed25519KeyPair {
        Ed25519KeyPair::from_seed_unchecked(&[n; 32]).expect("seed")
    }

    fn signed(text: &str, keys: &[&Ed25519KeyPair]) -> Envelope {
        let mut envelope = Envelope::new(text.to_string());
        for k in keys {
            envelope.sign(k);
        }
        envelope
    }

    fn trust(keys: &[&Ed25519KeyPair], required: usize) -> Trust {
        Trust {
            keys: keys.iter().map(|k| public_key(k)).collect(),
            required,
        }
    }

    fn decl(revision: u64) -> String {
        format!(
            r#"{{"schema": 1, "revision": {revision}, "files": {{"/etc/motd": {{"content": "hi\n"}}}}}}"#
        )
    }

    /// Runs `accept` on `text` under frame `revision`, newest accepted `newest`.
    fn arrive(
        text: &str,
        revision: u64,
        newest: Option<u64>,
        trust: Option<&Trust>,
    ) -> Result<Accepted, Refused> {
        let arrival = Arrival {
            revision,
            newest,
            now: NOW,
            trust,
        };
        accept(text.as_bytes().to_vec(), &arrival, |bytes| {
            parse_with_defaults(std::str::from_utf8(bytes).unwrap_or(""))
        })
    }

    fn rejected(result: Result<Accepted, Refused>) -> String {
        match result {
            Err(Refused::Rejected(message)) => message,
            other => panic!("not rejected: {other:?}"),
        }
    }

    #[test]
    fn public_keys_round_trip_and_bad_ones_are_named() {
        let k = public_key(&key(1));
        assert_eq!(PublicKey::parse(&k.to_string()), Ok(k));
        assert!(k.to_string().starts_with("ed25519:"));
        for (text, want) in [
            ("rsa:AAAA", "is not a public key (ed25519:BASE64)"),
            ("ed25519:****", "invalid base64"),
            ("ed25519:AAAA", "3 bytes, an ed25519 key is 32"),
        ] {
            let err = PublicKey::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn valid_envelope_is_accepted_and_the_inner_bytes_are_applied() {
        let (a, b) = (key(1), key(2));
        let t = trust(&[&a, &b], 1);
        let text = decl(7);
        let envelope = signed(&text, &[&a]);
        let accepted = arrive(&envelope.to_json(), 7, Some(6), Some(&t)).unwrap();
        assert_eq!(accepted.text, text.as_bytes());
        assert_eq!(
            accepted.declaration.digest,
            codec::sha256_hex(text.as_bytes())
        );
        assert_eq!(accepted.signed_by, vec![public_key(&a)]);
        // Round trip through JSON: what `sign` prints is what `open` reads.
        assert_eq!(open(envelope.to_json().as_bytes()).unwrap(), Some(envelope));
    }

    #[test]
    fn unsigned_is_refused_when_keys_are_trusted_and_accepted_when_not() {
        let a = key(1);
        let t = trust(&[&a], 1);
        let plain = rejected(arrive(&decl(3), 3, None, Some(&t)));
        assert!(
            plain.contains("refused: unsigned: a plain declaration"),
            "{plain}"
        );
        let empty = rejected(arrive(&signed(&decl(3), &[]).to_json(), 3, None, Some(&t)));
        assert!(
            empty.contains("refused: unsigned: 0 valid signatures"),
            "{empty}"
        );
        assert!(arrive(&decl(3), 3, None, None).is_ok());
        // Without trusted keys an envelope is unwrapped and its signers recorded.
        let accepted = arrive(&signed(&decl(3), &[&a]).to_json(), 3, None, None).unwrap();
        assert_eq!(accepted.signed_by, vec![public_key(&a)]);
    }

    #[test]
    fn unknown_key_is_refused() {
        let (a, stranger) = (key(1), key(9));
        let t = trust(&[&a], 1);
        let message = rejected(arrive(
            &signed(&decl(3), &[&stranger]).to_json(),
            3,
            None,
            Some(&t),
        ));
        assert!(
            message.contains("refused: unknown key: 0 valid signatures"),
            "{message}"
        );
        assert!(
            message.contains(&format!(
                "signatures[0] by {}: valid, by a key not trusted here",
                public_key(&stranger)
            )),
            "{message}"
        );
    }

    #[test]
    fn a_tampered_byte_breaks_the_signature() {
        let a = key(1);
        let t = trust(&[&a], 1);
        let mut envelope = signed(&decl(3), &[&a]);
        envelope.declaration = envelope.declaration.replace("hi", "ho");
        let message = rejected(arrive(&envelope.to_json(), 3, None, Some(&t)));
        assert!(message.contains("refused: bad signature"), "{message}");
        // A flipped bit in the signature itself, likewise.
        let mut envelope = signed(&decl(3), &[&a]);
        envelope.signatures[0].bytes[10] ^= 1;
        let message = rejected(arrive(&envelope.to_json(), 3, None, Some(&t)));
        assert!(message.contains("bad signature"), "{message}");
        // With the threshold met by another key, and with no keys trusted at all, likewise.
        let (b, t2) = (key(2), trust(&[&a, &key(2)], 1));
        let mut envelope = signed(&decl(3), &[&a, &b]);
        envelope.signatures[1].bytes[0] ^= 1;
        let message = rejected(arrive(&envelope.to_json(), 3, None, Some(&t2)));
        assert!(
            message.contains("refused: bad signature: the text is not what every signer signed"),
            "{message}"
        );
        assert!(
            message.contains(&format!(
                "signatures[1] by {}: bad signature",
                public_key(&b)
            )),
            "{message}"
        );
        assert!(
            rejected(arrive(&envelope.to_json(), 3, None, None)).contains("refused: bad signature")
        );
    }

    #[test]
    fn a_signature_over_other_bytes_does_not_count() {
        let a = key(1);
        let t = trust(&[&a], 1);
        let other = signed(&decl(2), &[&a]);
        let mut envelope = Envelope::new(decl(3));
        envelope.signatures = other.signatures;
        let message = rejected(arrive(&envelope.to_json(), 3, None, Some(&t)));
        assert!(message.contains("refused: bad signature"), "{message}");
        // Whitespace is bytes too: the same JSON re-indented is not what was signed.
        let mut envelope = signed(&decl(3), &[&a]);
        envelope.declaration.push('\n');
        assert!(rejected(arrive(&envelope.to_json(), 3, None, Some(&t))).contains("bad signature"));
    }

    #[test]
    fn below_the_threshold_with_one_key_signing_twice_counting_once() {
        let (a, b, c) = (key(1), key(2), key(3));
        let t = trust(&[&a, &b, &c], 2);
        let once = rejected(arrive(
            &signed(&decl(3), &[&a]).to_json(),
            3,
            None,
            Some(&t),
        ));
        assert!(once.contains("refused: too few signatures: 1 valid signature by distinct trusted keys, 2 required"), "{once}");
        // The same key twice (`sign` would not add it again; a hand-made envelope can).
        let mut twice = signed(&decl(3), &[&a]);
        twice.signatures.push(twice.signatures[0].clone());
        let message = rejected(arrive(&twice.to_json(), 3, None, Some(&t)));
        assert!(message.contains("too few signatures: 1 valid"), "{message}");
        assert!(message.contains("signatures[1] by"), "{message}");
        assert!(message.contains("repeated (counts once)"), "{message}");
        let accepted = arrive(&signed(&decl(3), &[&a, &c]).to_json(), 3, None, Some(&t)).unwrap();
        assert_eq!(accepted.signed_by, vec![public_key(&a), public_key(&c)]);
    }

    #[test]
    fn signing_again_with_the_same_key_adds_nothing() {
        let a = key(1);
        let mut envelope = signed(&decl(3), &[&a]);
        assert!(!envelope.sign(&a));
        assert_eq!(envelope.signatures.len(), 1);
        assert!(envelope.sign(&key(2)));
        assert_eq!(envelope.signatures.len(), 2);
        // After the text changed, signing again replaces that key's stale signature.
        envelope.declaration = decl(4);
        assert!(envelope.sign(&a));
        let states: Vec<_> = envelope
            .verify(&[])
            .signatures
            .iter()
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(states, [SignatureState::Bad, SignatureState::Untrusted]);
    }

    #[test]
    fn the_signed_revision_must_be_the_frames() {
        let a = key(1);
        let t = trust(&[&a], 1);
        let message = rejected(arrive(
            &signed(&decl(4), &[&a]).to_json(),
            5,
            None,
            Some(&t),
        ));
        assert!(
            message.contains("the signed text carries revision 4, not the declare frame's 5"),
            "{message}"
        );
        let bare = r#"{"schema": 1}"#;
        let message = rejected(arrive(&signed(bare, &[&a]).to_json(), 5, None, Some(&t)));
        assert!(
            message.contains("the signed text carries no revision"),
            "{message}"
        );
    }

    #[test]
    fn an_older_signed_revision_cannot_be_replayed() {
        let a = key(1);
        let t = trust(&[&a], 1);
        let old = signed(&decl(3), &[&a]).to_json();
        // Under its own number: not newer than the newest accepted.
        match arrive(&old, 3, Some(5), Some(&t)) {
            Err(Refused::Stale(message)) => assert!(message.contains("not newer than 5")),
            other => panic!("{other:?}"),
        }
        // Under a new number: the number inside the signed text gives it away.
        let message = rejected(arrive(&old, 6, Some(5), Some(&t)));
        assert!(
            message.contains("carries revision 3, not the declare frame's 6"),
            "{message}"
        );
    }

    #[test]
    fn an_expired_declaration_is_refused_on_arrival() {
        let a = key(1);
        let t = trust(&[&a], 1);
        let text =
            |expires: u64| format!(r#"{{"schema": 1, "revision": 3, "expires": {expires}}}"#);
        let message = rejected(arrive(
            &signed(&text(NOW - 60), &[&a]).to_json(),
            3,
            None,
            Some(&t),
        ));
        assert!(
            message.contains(&format!(
                "expired {} (60 s ago)",
                crate::util::words::utc(NOW - 60)
            )),
            "{message}"
        );
        assert!(rejected(arrive(
            &signed(&text(NOW), &[&a]).to_json(),
            3,
            None,
            Some(&t)
        ))
        .contains("expired"));
        let accepted = arrive(&signed(&text(NOW + 1), &[&a]).to_json(), 3, None, Some(&t)).unwrap();
        assert_eq!(accepted.declaration.expires, Some(NOW + 1));
    }

    #[test]
    fn an_envelope_reads_back_its_text_however_its_members_are_laid_out() {
        let texts = [
            decl(3),
            "{\"a\": \"quote \\\" backslash \\\\ é 🦀 \\u0000\"}".to_string(),
            String::new(),
        ];
        for text in texts {
            let json = signed(&text, &[&key(1), &key(2)]).to_json();
            let opened = open(json.as_bytes()).unwrap().unwrap();
            assert_eq!(opened.declaration, text);
            // Members in another order, the declaration's name escaped.
            let json = format!(
                r#" {{ "signatures": [], "decl\u0061ration": {}, "envelope": 1 }} "#,
                serde_json::to_string(&text).unwrap()
            );
            assert_eq!(open(json.as_bytes()).unwrap().unwrap().declaration, text);
        }
    }

    #[test]
    fn malformed_envelopes_have_every_problem_located() {
        let good_key = public_key(&key(1)).to_string();
        let cases: &[(&str, &[&str])] = &[
            (
                r#"{"envelope": 1}"#,
                &["declaration: missing", "signatures: missing"],
            ),
            (
                r#"{"envelope": 2, "declaration": "{}", "signatures": []}"#,
                &["envelope: 2 is not a supported envelope version"],
            ),
            (
                r#"{"envelope": 1, "declaration": {}, "signatures": {}}"#,
                &[
                    "declaration: must be a string, not an object",
                    "signatures: must be an array, not an object",
                ],
            ),
            (
                r#"{"envelope": 1, "declaration": "x", "signatures": [], "extra": 1}"#,
                &["unknown field \"extra\""],
            ),
            (
                r#"{"envelope": 1, "declaration": "x", "declaration": "y", "signatures": []}"#,
                &["duplicate key \"declaration\""],
            ),
            (
                r#"{"envelope": 1, "declaration": "x", "signatures": [7]}"#,
                &["signatures[0]: must be an object, not a number"],
            ),
            (
                r#"{"envelope": 1, "declaration": "x", "signatures": [{}]}"#,
                &[
                    "signatures[0].key: missing",
                    "signatures[0].signature: missing",
                ],
            ),
            (
                r#"{"envelope": 1, "declaration": "x", "signatures": [{"key": "k", "signature": "AAAA", "by": "me"}]}"#,
                &[
                    "signatures[0].key: \"k\" is not a public key",
                    "signatures[0].signature: 3 bytes, an ed25519 signature is 64",
                    "signatures[0]: unknown field \"by\"",
                ],
            ),
        ];
        for (json, wants) in cases {
            let problems: Vec<String> = open(json.as_bytes())
                .unwrap_err()
                .0
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(problems.len(), wants.len(), "{json}: {problems:#?}");
            for (problem, want) in problems.iter().zip(wants.iter()) {
                assert!(problem.contains(want), "{json}: {problem:?} lacks {want:?}");
            }
        }
        let bad_signature = format!(
            r#"{{"envelope": 1, "declaration": "x", "signatures": [{{"key": "{good_key}", "signature": "%%%%"}}]}}"#
        );
        let problems = open(bad_signature.as_bytes()).unwrap_err().to_string();
        assert!(
            problems.contains("signatures[0].signature: not base64"),
            "{problems}"
        );
        // Through `accept`, a malformed envelope is rejected with its problems, trust or not.
        let message = rejected(arrive(r#"{"envelope": 1}"#, 1, None, None));
        assert!(
            message.contains("revision 1: 2 problems; nothing was applied"),
            "{message}"
        );
        // Plain declarations, and what is not JSON at all, are left to the declaration parser.
        assert_eq!(open(br#"{"schema": 1}"#).unwrap(), None);
        assert_eq!(open(b"not json").unwrap(), None);
        assert!(rejected(arrive("not json", 1, None, None)).contains("not valid JSON"));
    }

    /// Told apart without a second parse when the name is nowhere in the text, but an envelope
    /// whose member's name is spelled with an escape is still one.
    #[test]
    fn an_envelope_is_found_however_its_member_is_spelled() {
        let plain = br#"{"schema": 1, "files": {"/etc/a": {"content": "x\n"}}}"#;
        assert!(!may_name_envelope(plain));
        assert_eq!(open(plain).unwrap(), None);
        let mentions = br#"{"schema": 1, "files": {"/etc/a": {"content": "envelope"}}}"#;
        assert_eq!(open(mentions).unwrap(), None);
        let escaped = r#"{"\u0065nvelope": 9}"#;
        let problems = open(escaped.as_bytes()).unwrap_err().to_string();
        assert!(
            problems.contains("9 is not a supported envelope version"),
            "{problems}"
        );
    }
}
