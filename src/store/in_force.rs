//! The declaration in force: its record (`declaration.json`: where it came from, its digest,
//! since when) and its bytes, kept as received in their own file by digest
//! (`generations/DIGEST.json`, the file its generation keeps), checked against the digest on every
//! read. A store an earlier version wrote kept the text inside the record as a JSON string: it is
//! read as it is, and converted when the store is opened.

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::util::codec;

pub const IN_FORCE: &str = "declaration.json";

/// Where the declaration in force came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Source {
    /// Given by a person with `mesh-host apply FILE`.
    Local { path: String },
    /// Pushed by the control plane.
    ControlPlane,
}

/// The declaration the host holds the machine to, its bytes verbatim so its digest and
/// signatures stay meaningful.
#[derive(Debug, Clone)]
pub struct InForce {
    pub source: Source,
    pub revision: Option<u64>,
    pub digest: String,
    /// Unix seconds when it became the declaration in force.
    pub since: u64,
    pub text: Vec<u8>,
    /// The newest revision accepted from the control plane, kept across local overrides: a
    /// `declare` must be newer than this to be applied.
    pub control_plane_revision: Option<u64>,
    /// The keys (`ed25519:...`) whose signatures over `text` verified when it was put in force,
    /// trusted or not; empty for a plain declaration. `status` says which are trusted now.
    pub signed_by: Vec<String>,
    /// The declaration's `expires` (Unix seconds): past it, it is still held, and said so.
    pub expires: Option<u64>,
}

/// `declaration.json` as it is written: `InForce` without its bytes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    source: Source,
    revision: Option<u64>,
    digest: String,
    since: u64,
    /// Only in a store an earlier version wrote: the declaration itself, as a JSON string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default)]
    control_plane_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    signed_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires: Option<u64>,
}

/// `InForce` without its text: what status, metrics and the choice to replace it need.
#[derive(Debug, Clone, Deserialize)]
pub struct InForceHead {
    pub source: Source,
    pub revision: Option<u64>,
    pub digest: String,
    pub since: u64,
    #[serde(default)]
    pub control_plane_revision: Option<u64>,
    #[serde(default)]
    pub signed_by: Vec<String>,
    #[serde(default)]
    pub expires: Option<u64>,
}

impl Store {
    fn in_force_record(&self) -> Result<Option<Record>, StoreError> {
        self.read_json(IN_FORCE)
    }

    /// The record and the text it names, checked against its digest: a damaged declaration is
    /// refused here, before anyone can apply it.
    pub fn in_force(&self) -> Result<Option<InForce>, StoreError> {
        let Some(record) = self.in_force_record()? else {
            return Ok(None);
        };
        let (text, file) = match record.text {
            Some(text) => (text.into_bytes(), IN_FORCE.to_string()),
            None => (
                self.text(&record.digest)?,
                super::generations::text_name(&record.digest),
            ),
        };
        let found = codec::sha256_hex(&text);
        if found != record.digest {
            return Err(self.error(
                &file,
                format!(
                    "its text does not match its digest (sha256 {} stored, {found} found): it \
                     is damaged, and nothing of it is applied; it was left as it is for you to \
                     inspect (`mesh-host apply` or the control plane puts a declaration in force \
                     again)",
                    record.digest
                ),
            ));
        }
        Ok(Some(InForce {
            source: record.source,
            revision: record.revision,
            digest: record.digest,
            since: record.since,
            text,
            control_plane_revision: record.control_plane_revision,
            signed_by: record.signed_by,
            expires: record.expires,
        }))
    }

    /// The record alone, streamed: an earlier version's record, text inside, is skipped through
    /// without the text being held.
    pub fn in_force_head(&self) -> Result<Option<InForceHead>, StoreError> {
        self.read_json_streamed(IN_FORCE)
    }

    /// Keeps the text by its digest, then the record naming it: a crash between the two leaves
    /// the previous declaration in force, whole.
    pub fn set_in_force(&self, in_force: &InForce) -> Result<(), StoreError> {
        self.save_text(&in_force.digest, &in_force.text)?;
        self.write_in_force_record(in_force)
    }

    /// The record alone; its text is kept already (`save_text`).
    pub(super) fn write_in_force_record(&self, in_force: &InForce) -> Result<(), StoreError> {
        let record = Record {
            source: in_force.source.clone(),
            revision: in_force.revision,
            digest: in_force.digest.clone(),
            since: in_force.since,
            text: None,
            control_plane_revision: in_force.control_plane_revision,
            signed_by: in_force.signed_by.clone(),
            expires: in_force.expires,
        };
        self.write_json(IN_FORCE, &record)
    }

    /// An earlier version's record, its text inside, is converted: the text to its own file,
    /// the record written without it. Only under the store's lock, not waiting for it (whoever
    /// holds it converts on their next open); until then the record reads as it is. A text that
    /// does not match its digest is left for `in_force` to report.
    pub(super) fn upgrade_in_force(&self) {
        match self.in_force_record() {
            Ok(Some(record)) if record.text.is_some() => {}
            _ => return,
        }
        let Ok(_lock) = self.lock(false, "converting the declaration in force") else {
            return;
        };
        // Read again under the lock: its holder may have replaced it meanwhile.
        let converted = match self.in_force() {
            Ok(Some(in_force)) => self.set_in_force(&in_force).map(|()| true),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        match converted {
            Ok(true) => log::info!(
                "store {}: the declaration in force is now kept in its own file, by its digest",
                self.path().display()
            ),
            Ok(false) => {}
            Err(e) => {
                log::warn!("{e}; the declaration in force stays as an earlier version wrote it")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    fn in_force(text: &str) -> InForce {
        InForce {
            source: Source::Local {
                path: "/srv/d.json".into(),
            },
            revision: Some(4),
            digest: codec::sha256_hex(text.as_bytes()),
            since: 17,
            text: text.as_bytes().to_vec(),
            control_plane_revision: Some(3),
            signed_by: vec!["ed25519:k".into()],
            expires: Some(99),
        }
    }

    /// The record names the text by its digest; the text is its own file, the bytes as given.
    #[test]
    fn the_record_and_its_text_are_two_files_read_back_whole() {
        let tmp = TempDir::new("store-in-force");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        assert!(store.in_force_head().unwrap().is_none());
        assert!(store.in_force().unwrap().is_none());
        // Bytes a JSON string holds only escaped: quotes, backslashes, a NUL, a newline.
        let text = "{\"text\": \"x\", \"digest\": \"forged\", \"a\": \"\\\"\\\\/\"}\u{0}\n";
        let given = in_force(text);
        store.set_in_force(&given).unwrap();
        let head = store.in_force_head().unwrap().unwrap();
        assert_eq!(
            (head.revision, &head.digest, head.since, head.expires),
            (Some(4), &given.digest, 17, Some(99))
        );
        assert_eq!(
            (head.control_plane_revision, head.signed_by),
            (Some(3), vec!["ed25519:k".to_string()])
        );
        let file = tmp
            .path()
            .join(super::super::generations::text_name(&given.digest));
        assert_eq!(std::fs::read(&file).unwrap(), text.as_bytes());
        let record = std::fs::read_to_string(tmp.path().join(IN_FORCE)).unwrap();
        assert!(!record.contains("forged"), "{record}");
        let back = store.in_force().unwrap().unwrap();
        assert_eq!((back.text, back.source), (given.text, given.source));
        // A record that is not one is refused by name, as any store file is.
        for (changed, why) in [
            (
                record.replacen("\"since\"", "\"sinse\"", 1),
                "unknown field `sinse`",
            ),
            (record[..record.len() / 2].to_string(), "EOF"),
        ] {
            std::fs::write(tmp.path().join(IN_FORCE), &changed).unwrap();
            let e = store.in_force().unwrap_err().to_string();
            assert!(
                e.contains(&format!("declaration.json: cannot be read ({why}")),
                "{e}"
            );
        }
    }

    /// One byte of the text changed: refused by name, the file left as it is; the record alone
    /// (status, the hello) still reads.
    #[test]
    fn a_text_that_is_not_its_digest_is_refused() {
        let tmp = TempDir::new("store-digest");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        let given =
            in_force("{\"schema\": 1, \"files\": {\"/etc/motd\": {\"content\": \"held\"}}}");
        store.set_in_force(&given).unwrap();
        let file = tmp
            .path()
            .join(super::super::generations::text_name(&given.digest));
        let damaged = std::fs::read_to_string(&file)
            .unwrap()
            .replace("held", "helD");
        std::fs::write(&file, &damaged).unwrap();
        let e = store.in_force().unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "generations/{}.json: its text does not match its digest (sha256 {} stored",
                given.digest, given.digest
            )),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), damaged);
        assert_eq!(store.in_force_head().unwrap().unwrap().digest, given.digest);
        std::fs::remove_file(&file).unwrap();
        let e = store.in_force().unwrap_err().to_string();
        assert!(e.contains(".json: is missing"), "{e}");
    }

    /// A store the previous version wrote, the text inside the record as a JSON string: read as
    /// it is while its lock is held by another, converted by the next open that can take it, and
    /// a damaged one left for `in_force` to refuse.
    #[test]
    fn a_record_with_its_text_inside_is_read_and_converted_on_open() {
        let tmp = TempDir::new("store-upgrade");
        let text = "{\"schema\": 1, \"a\": \"\\\"quoted\\\" é\"}";
        let digest = codec::sha256_hex(text.as_bytes());
        // As the previous version wrote it (pretty, its members in this order).
        let old = serde_json::to_string_pretty(&serde_json::json!({
            "source": {"kind": "control-plane"}, "revision": 2, "digest": digest, "since": 5,
            "text": text, "control_plane_revision": 2}))
        .unwrap();
        std::fs::write(tmp.path().join(IN_FORCE), &old).unwrap();
        let held = super::super::Lock::acquire(&tmp.path().join("lock"), false, "test").unwrap();
        let again = Store::open(tmp.path(), false).unwrap().unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(IN_FORCE)).unwrap(),
            old
        );
        assert_eq!(again.in_force().unwrap().unwrap().text, text.as_bytes());
        assert_eq!(again.in_force_head().unwrap().unwrap().digest, digest);
        drop(held);
        let store = Store::open(tmp.path(), false).unwrap().unwrap();
        let record = std::fs::read_to_string(tmp.path().join(IN_FORCE)).unwrap();
        assert!(!record.contains("text"), "{record}");
        let file = tmp
            .path()
            .join(super::super::generations::text_name(&digest));
        assert_eq!(std::fs::read(&file).unwrap(), text.as_bytes());
        let back = store.in_force().unwrap().unwrap();
        assert_eq!(
            (
                back.text,
                back.revision,
                back.since,
                back.control_plane_revision
            ),
            (text.as_bytes().to_vec(), Some(2), 5, Some(2))
        );
        // Damaged: not converted, refused as it is.
        let damaged = old.replace("quoted", "quoteD");
        std::fs::write(tmp.path().join(IN_FORCE), &damaged).unwrap();
        let store = Store::open(tmp.path(), false).unwrap().unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(IN_FORCE)).unwrap(),
            damaged
        );
        let e = store.in_force().unwrap_err().to_string();
        assert!(
            e.contains("declaration.json: its text does not match its digest"),
            "{e}"
        );
    }
}
