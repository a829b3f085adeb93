//! The ledger: what the host owns, per kind and key, whether it created or adopted each resource,
//! and the digest of what it last applied. Pruning touches nothing the ledger does not list.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

const VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// It did not exist; releasing it removes it.
    Created,
    /// It existed; releasing it puts back the original recorded with it.
    Adopted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub origin: Origin,
    /// Digest of the spec last applied; `None` while the first apply is in flight (written ahead,
    /// so a crash mid-apply still leaves the resource owned and its original known).
    pub applied: Option<String>,
    /// What the resource was before the host adopted it, in the kind's own format.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub original: Value,
}

impl Entry {
    pub fn new(origin: Origin, original: Value) -> Entry {
        Entry {
            origin,
            applied: None,
            original,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    version: u32,
    /// kind -> key -> entry.
    #[serde(default, deserialize_with = "dense_sections")]
    resources: BTreeMap<String, BTreeMap<String, Entry>>,
    /// Directories the host created for the files it wrote (absolute target paths); removed once
    /// empty and no longer needed.
    #[serde(default)]
    pub directories: BTreeSet<PathBuf>,
}

/// Reads each kind's section into a map built at once from its sorted entries, whose nodes are
/// full, rather than by insertions in key order (the file's order), which leave them about half
/// empty: for 20,000 owned files that is about a megabyte kept through every run.
fn dense_sections<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, BTreeMap<String, Entry>>, D::Error> {
    let sections = BTreeMap::<String, Dense<Entry>>::deserialize(deserializer)?;
    Ok(sections
        .into_iter()
        .map(|(kind, Dense(m))| (kind, m))
        .collect())
}

/// A JSON object read as a list first, then made a map (see `dense_sections`). A key given twice
/// keeps its last value, as serde's own map does.
struct Dense<V>(BTreeMap<String, V>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Dense<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Pairs<V> {
            type Value = Dense<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Dense<V>, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(pair) = map.next_entry::<String, V>()? {
                    pairs.push(pair);
                }
                Ok(Dense(pairs.into_iter().collect()))
            }
        }
        deserializer.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            version: VERSION,
            resources: BTreeMap::new(),
            directories: BTreeSet::new(),
        }
    }
}

impl Ledger {
    pub fn check(&self) -> Result<(), String> {
        if self.version != VERSION {
            return Err(format!(
                "ledger version {} is not {VERSION}, the one this host reads",
                self.version
            ));
        }
        Ok(())
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.resources.values().all(BTreeMap::is_empty) && self.directories.is_empty()
    }

    pub fn get(&self, kind: &str, key: &str) -> Option<&Entry> {
        self.resources.get(kind)?.get(key)
    }

    /// Owned keys of `kind`, sorted.
    pub fn keys(&self, kind: &str) -> Vec<String> {
        self.resources
            .get(kind)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every adopted resource as (kind, key): the ones whose originals the store keeps.
    pub fn adopted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.resources.iter().flat_map(|(kind, entries)| {
            entries
                .iter()
                .filter(|(_, e)| e.origin == Origin::Adopted)
                .map(move |(key, _)| (kind.as_str(), key.as_str()))
        })
    }

    pub fn insert(&mut self, kind: &str, key: &str, entry: Entry) {
        self.resources
            .entry(kind.to_string())
            .or_default()
            .insert(key.to_string(), entry);
    }

    pub fn remove(&mut self, kind: &str, key: &str) -> Option<Entry> {
        let section = self.resources.get_mut(kind)?;
        let removed = section.remove(key);
        if section.is_empty() {
            self.resources.remove(kind);
        }
        removed
    }

    /// Records that `digest` is now applied to an owned resource.
    pub fn set_applied(&mut self, kind: &str, key: &str, digest: String) {
        if let Some(entry) = self.resources.get_mut(kind).and_then(|m| m.get_mut(key)) {
            entry.applied = Some(digest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_and_serialise() {
        let mut l = Ledger::default();
        l.insert("files", "/etc/a", Entry::new(Origin::Created, Value::Null));
        l.insert(
            "files",
            "/etc/b",
            Entry::new(Origin::Adopted, serde_json::json!({"mode": 420})),
        );
        l.set_applied("files", "/etc/a", "d1".into());
        assert_eq!(
            l.get("files", "/etc/a").unwrap().applied.as_deref(),
            Some("d1")
        );
        assert_eq!(l.keys("files"), vec!["/etc/a", "/etc/b"]);
        let text = serde_json::to_string(&l).unwrap();
        let back: Ledger = serde_json::from_str(&text).unwrap();
        assert_eq!(back.get("files", "/etc/b"), l.get("files", "/etc/b"));
        l.remove("files", "/etc/a");
        l.remove("files", "/etc/b");
        assert!(l.is_empty());
        assert_eq!(l.keys("files"), Vec::<String>::new());
    }

    #[test]
    fn a_ledger_read_back_is_the_one_written() {
        let mut l = Ledger::default();
        for i in (0..100).rev() {
            l.insert(
                "files",
                &format!("/etc/f{i:03}"),
                Entry::new(Origin::Created, Value::Null),
            );
        }
        l.insert("packages", "vim", Entry::new(Origin::Adopted, Value::Null));
        let text = serde_json::to_string(&l).unwrap();
        let back: Ledger = serde_json::from_str(&text).unwrap();
        assert_eq!(back.keys("files"), l.keys("files"));
        assert_eq!(back.keys("packages"), vec!["vim"]);
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
        let twice = r#"{"version": 1, "resources": {"files": {"/etc/a": {"origin": "created", "applied": "1"}, "/etc/a": {"origin": "created", "applied": "2"}}}}"#;
        let read: Ledger = serde_json::from_str(twice).unwrap();
        assert_eq!(
            read.get("files", "/etc/a").unwrap().applied.as_deref(),
            Some("2")
        );
    }

    #[test]
    fn unknown_version_is_refused() {
        let l: Ledger = serde_json::from_str(r#"{"version": 9}"#).unwrap();
        assert!(l.check().unwrap_err().contains("ledger version 9"));
    }
}
