//! The ledger: what the host owns, per kind and key, whether it created or adopted each resource,
//! and the digest of what it last applied. Pruning touches nothing the ledger does not list.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::PathBuf;

use serde::de::{DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use crate::model::digest::Digest;
use crate::model::spec::{self, KindSpec};

const VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// It did not exist; releasing it removes it.
    Created,
    /// It existed; releasing it puts back the original recorded with it.
    Adopted,
}

/// One owned resource; `O` is its kind's `Kind::Original`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "O: Deserialize<'de>"))]
pub struct Entry<O> {
    pub origin: Origin,
    /// Digest of the spec last applied (see `Digest`); `None` while the first apply is in flight
    /// (written ahead, so a crash mid-apply still leaves the resource owned and its original
    /// known).
    pub applied: Option<Digest>,
    /// What the resource was before the host adopted it, in the kind's own type; `None` when
    /// there is nothing to put back (created, or adopted with nothing to restore). Boxed: most
    /// owned resources were created and have none, and a file's original held inline would take
    /// its room in every entry, created or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<Box<O>>,
}

impl<O> Entry<O> {
    /// A resource the host creates: released, it is removed.
    pub fn created() -> Entry<O> {
        Entry {
            origin: Origin::Created,
            applied: None,
            original: None,
        }
    }

    /// A resource the host takes over: released, `original` (if any) is put back.
    pub fn adopted(original: Option<O>) -> Entry<O> {
        Entry {
            origin: Origin::Adopted,
            applied: None,
            original: original.map(Box::new),
        }
    }
}

macro_rules! sections {
    ($($name:ident: $kind:ty,)*) => {
        /// What the host owns of each kind, key -> entry (one field per kind of the registry);
        /// a kind that owns nothing is left out of the file.
        #[derive(Debug, Clone, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Sections {
            $(
                #[serde(
                    default,
                    skip_serializing_if = "BTreeMap::is_empty",
                    deserialize_with = "dense"
                )]
                pub $name: BTreeMap<String, Entry<<$kind as KindSpec>::Original>>,
            )*
        }

        /// Does `visitor`'s work for every kind, in converge order.
        fn each<V: VisitOwned>(visitor: &mut V) -> Vec<V::Out> {
            vec![$(visitor.visit::<$kind>()),*]
        }

        /// Does `visitor`'s work for the kind called `name`, if there is one.
        fn by_name<V: VisitOwned>(name: &str, visitor: &mut V) -> Option<V::Out> {
            match name {
                $(stringify!($name) => Some(visitor.visit::<$kind>()),)*
                _ => None,
            }
        }

        $(impl Owned for $kind {
            fn owned(s: &Sections) -> &BTreeMap<String, Entry<Self::Original>> {
                &s.$name
            }
            fn owned_mut(s: &mut Sections) -> &mut BTreeMap<String, Entry<Self::Original>> {
                &mut s.$name
            }
        })*
    };
}
spec::registry!(sections);

/// Where a kind's entries are in the ledger (given by the registry).
pub trait Owned: KindSpec {
    fn owned(sections: &Sections) -> &BTreeMap<String, Entry<Self::Original>>;
    fn owned_mut(sections: &mut Sections) -> &mut BTreeMap<String, Entry<Self::Original>>;
}

/// Something done once per kind of the ledger.
trait VisitOwned {
    type Out;
    fn visit<K: Owned>(&mut self) -> Self::Out;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    version: u32,
    #[serde(default)]
    resources: Sections,
    /// Directories the host created for the files it wrote (absolute target paths); removed once
    /// empty and no longer needed.
    #[serde(default)]
    pub directories: BTreeSet<PathBuf>,
}

/// Reads a kind's section into a map built at once from its sorted entries, whose nodes are
/// full, rather than by insertions in key order (the file's order), which leave them about half
/// empty, memory a large ledger would keep through every run.
fn dense<'de, D: Deserializer<'de>, V: Deserialize<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, V>, D::Error> {
    Dense::deserialize(deserializer).map(|Dense(map)| map)
}

/// A JSON object read as a list first, then made a map (see `dense`). A key given twice
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
            resources: Sections::default(),
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
        self.owned_count() == 0 && self.directories.is_empty()
    }

    /// How many resources the ledger lists, of every kind.
    #[cfg(test)]
    fn owned_count(&self) -> usize {
        struct Count<'l>(&'l Ledger);
        impl VisitOwned for Count<'_> {
            type Out = usize;
            fn visit<K: Owned>(&mut self) -> usize {
                K::owned(&self.0.resources).len()
            }
        }
        each(&mut Count(self)).into_iter().sum()
    }

    pub fn get<K: Owned>(&self, key: &str) -> Option<&Entry<K::Original>> {
        K::owned(&self.resources).get(key)
    }

    /// What the host owns of `K`, by key: for walking in step with sorted keys
    /// (`sorted::Walk`) rather than a search per key.
    pub fn section<K: Owned>(&self) -> &BTreeMap<String, Entry<K::Original>> {
        K::owned(&self.resources)
    }

    /// Owned keys of `K`, sorted.
    #[cfg(test)]
    pub fn keys<K: Owned>(&self) -> Vec<String> {
        K::owned(&self.resources).keys().cloned().collect()
    }

    /// Owned keys of `K`, sorted, borrowed.
    pub fn owned_keys<'l, K: Owned>(&'l self) -> impl Iterator<Item = &'l str> + Clone
    where
        K::Original: 'l,
    {
        K::owned(&self.resources).keys().map(String::as_str)
    }

    /// Every adopted resource as (kind, key): the ones whose originals the store keeps.
    pub fn adopted(&self) -> Vec<(&'static str, String)> {
        struct Adopted<'l>(&'l Ledger);
        impl VisitOwned for Adopted<'_> {
            type Out = Vec<(&'static str, String)>;
            fn visit<K: Owned>(&mut self) -> Self::Out {
                K::owned(&self.0.resources)
                    .iter()
                    .filter(|(_, e)| e.origin == Origin::Adopted)
                    .map(|(key, _)| (K::NAME, key.clone()))
                    .collect()
            }
        }
        each(&mut Adopted(self)).concat()
    }

    #[cfg(test)]
    pub fn insert<K: Owned>(&mut self, key: &str, entry: Entry<K::Original>) {
        K::owned_mut(&mut self.resources).insert(key.to_string(), entry);
    }

    /// Inserts many entries at once: the section is built again with full nodes (see `dense`),
    /// not grown by insertions in key order (a plan's order), which leave them half empty.
    pub fn insert_all<K: Owned>(&mut self, entries: Vec<(String, Entry<K::Original>)>) {
        let mut added: BTreeMap<_, _> = entries.into_iter().collect();
        K::owned_mut(&mut self.resources).append(&mut added);
    }

    pub fn remove<K: Owned>(&mut self, key: &str) -> Option<Entry<K::Original>> {
        K::owned_mut(&mut self.resources).remove(key)
    }

    /// Records that `digest` is now applied to an owned resource.
    pub fn set_applied<K: Owned>(&mut self, key: &str, digest: Digest) {
        if let Some(entry) = K::owned_mut(&mut self.resources).get_mut(key) {
            entry.applied = Some(digest);
        }
    }
}

impl Ledger {
    /// Writes the ledger as the store keeps it: compact JSON with each owned resource on a line
    /// of its own (`EntryPerLine`), which `read_lines` reads back quickly and `grep` still reads.
    pub fn write(&self, out: impl io::Write) -> io::Result<()> {
        let mut json = serde_json::Serializer::with_formatter(out, EntryPerLine::default());
        self.serialize(&mut json).map_err(io::Error::from)
    }

    /// Reads a ledger laid out exactly as `write` lays it out, a line at a time, each resource
    /// parsed from its own line's bytes (where the reader holds them, not copied, unless the
    /// line runs past its buffer): faster than JSON parsed from a stream (which goes a byte at a
    /// time), without the whole file in memory. `None` for any other layout or
    /// anything not valid: the caller then parses it as JSON, which says what is wrong.
    pub fn read_lines(mut input: impl io::BufRead) -> Option<Ledger> {
        let mut line = Vec::new();
        next_line(&mut input, &mut line)?;
        if line != b"{" {
            return None;
        }
        next_line(&mut input, &mut line)?;
        let version = line.strip_prefix(b"\"version\":")?.strip_suffix(b",")?;
        let mut ledger = Ledger {
            version: serde_json::from_slice(version).ok()?,
            ..Ledger::default()
        };
        next_line(&mut input, &mut line)?;
        match line.as_slice() {
            b"\"resources\":{}," => {}
            b"\"resources\":{" => loop {
                next_line(&mut input, &mut line)?;
                let kind = line.strip_prefix(b"\"")?.strip_suffix(b"\":{")?;
                let kind = std::str::from_utf8(kind).ok()?.to_string();
                let mut section = SectionLines {
                    input: &mut input,
                    line: &mut line,
                    sections: &mut ledger.resources,
                };
                match by_name(&kind, &mut section)?? {
                    SectionEnd::MoreKinds => {}
                    SectionEnd::LastKind => break,
                }
            },
            _ => return None,
        }
        next_line(&mut input, &mut line)?;
        let directories = line.strip_prefix(b"\"directories\":")?.strip_suffix(b"}")?;
        ledger.directories = serde_json::from_slice(directories).ok()?;
        // Nothing follows.
        match next_line(&mut input, &mut line) {
            None => Some(ledger),
            Some(()) => None,
        }
    }
}

/// The next line of `input` into `line`, without its line break; `None` at the end (or on an
/// error reading, which the JSON parse that follows reports).
fn next_line(input: &mut impl io::BufRead, line: &mut Vec<u8>) -> Option<()> {
    line.clear();
    match input.read_until(b'\n', line) {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            Some(())
        }
    }
}

/// What follows a kind's last resource: another kind, or the end of the resources.
enum SectionEnd {
    MoreKinds,
    LastKind,
}

/// `Ledger::read_lines` of one kind's resources, a line each, into its section.
struct SectionLines<'r, I> {
    input: &'r mut I,
    line: &'r mut Vec<u8>,
    sections: &'r mut Sections,
}

impl<I: io::BufRead> VisitOwned for SectionLines<'_, I> {
    type Out = Option<SectionEnd>;
    fn visit<K: Owned>(&mut self) -> Option<SectionEnd> {
        let mut entries = Vec::new();
        let end = loop {
            match whole_lines::<K::Original>(self.input, &mut entries)? {
                Lines::End(end) => break end,
                Lines::More => continue,
                Lines::NoneWhole => {}
            }
            // The buffer holds no whole line: the next one copied, across buffers.
            next_line(self.input, self.line)?;
            let line = std::str::from_utf8(self.line).ok()?;
            let (key, entry, after) = entry_line(line)?;
            entries.push((key, entry));
            if let Some(end) = line_end(after)? {
                break end;
            }
        };
        // Full B-tree nodes, a key given twice keeping its last entry, as `dense` does.
        *K::owned_mut(self.sections) = entries.into_iter().collect();
        Some(end)
    }
}

/// What `whole_lines` found in the reader's buffer.
enum Lines {
    /// The kind's last resource, and what follows it.
    End(SectionEnd),
    /// Resources, the kind's next one beyond the buffer's whole lines.
    More,
    /// Not one whole line (a line longer than the buffer, or the end of one the buffer cut).
    NoneWhole,
}

/// Parses the resources on the whole lines `input`'s buffer holds, where it holds them, into
/// `entries`, up to the kind's last. The lines are checked as UTF-8 once, all together (fast on
/// long ASCII), and each parsed from that `str`: serde_json then takes each string as it is,
/// where from bytes it checks every one again. `None` for anything `write` would not write.
fn whole_lines<O: DeserializeOwned>(
    input: &mut impl io::BufRead,
    entries: &mut Vec<(String, Entry<O>)>,
) -> Option<Lines> {
    let buffer = input.fill_buf().ok()?;
    let Some(last_break) = buffer.iter().rposition(|&b| b == b'\n') else {
        return Some(Lines::NoneWhole);
    };
    let text = std::str::from_utf8(&buffer[..=last_break]).ok()?;
    let mut rest = text;
    let found = loop {
        let (key, entry, after) = entry_line(rest)?;
        entries.push((key, entry));
        let (end, next) = after.split_once('\n')?;
        rest = next;
        if let Some(end) = line_end(end)? {
            break Lines::End(end);
        }
        if rest.is_empty() {
            break Lines::More;
        }
    };
    let used = text.len() - rest.len();
    input.consume(used);
    Some(found)
}

/// What follows a resource on its line: another resource (`None`) or the end of its kind.
fn line_end(after: &str) -> Option<Option<SectionEnd>> {
    match after {
        "," => Some(None),
        "}," => Some(Some(SectionEnd::MoreKinds)),
        "}}," => Some(Some(SectionEnd::LastKind)),
        _ => None,
    }
}

/// One resource's line, `"key":{entry}` and what follows it on the line (and past it).
fn entry_line<O: DeserializeOwned>(line: &str) -> Option<(String, Entry<O>, &str)> {
    if !line.starts_with('"') {
        return None;
    }
    let mut keys = serde_json::Deserializer::from_str(line).into_iter::<String>();
    let key = keys.next()?.ok()?;
    let rest = line[keys.byte_offset()..].strip_prefix(':')?;
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Entry<O>>();
    let entry = values.next()?.ok()?;
    Some((key, entry, &rest[values.byte_offset()..]))
}

/// Compact JSON with a line break before each key of the outer three levels of objects: the
/// ledger's top, its kinds and each kind's resources, so each owned resource is one line.
#[derive(Default)]
struct EntryPerLine {
    depth: usize,
}

impl serde_json::ser::Formatter for EntryPerLine {
    fn begin_object<W: ?Sized + io::Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.depth += 1;
        out.write_all(b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.depth -= 1;
        out.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        out: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if !first {
            out.write_all(b",")?;
        }
        if self.depth <= 3 {
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::spec::containers::Containers;
    use crate::model::spec::files::Files;
    use crate::model::spec::packages::Packages;
    use crate::model::spec::units::Units;
    use crate::tools::pacman::InstallReason;

    /// A ledger as the previous version wrote it (originals as untyped JSON values), with one
    /// entry of each kind and each shape of original: a node upgraded in place must keep it.
    const PREVIOUS_FORMAT: &str = r#"{
      "version": 1,
      "resources": {
        "containers": {"web": {"origin": "created", "applied": "c1"}},
        "files": {
          "/etc/hosts.allow": {"origin": "adopted", "applied": "f1",
            "original": {"backup": "b0", "mode": 420, "uid": 0, "gid": 0}},
          "/etc/new.conf": {"origin": "created", "applied": null}
        },
        "packages": {
          "vim": {"origin": "adopted", "applied": "p1", "original": "dependency"},
          "nano": {"origin": "adopted", "applied": "p1"},
          "htop": {"origin": "created", "applied": "p1"}
        },
        "units": {
          "sshd.service": {"origin": "adopted", "applied": "u1",
            "original": {"enabled": true, "active": false, "file_backup": null}}
        }
      },
      "directories": ["/etc/app"]
    }"#;

    #[test]
    fn a_ledger_in_the_previous_format_loads_typed() {
        let l: Ledger = serde_json::from_str(PREVIOUS_FORMAT).unwrap();
        l.check().unwrap();
        assert_eq!(
            l.get::<Packages>("vim").unwrap().original,
            Some(Box::new(InstallReason::Dependency))
        );
        assert_eq!(l.get::<Packages>("nano").unwrap().original, None);
        assert_eq!(l.get::<Packages>("htop").unwrap().origin, Origin::Created);
        assert!(l
            .get::<Files>("/etc/hosts.allow")
            .unwrap()
            .original
            .is_some());
        assert_eq!(l.get::<Files>("/etc/new.conf").unwrap().applied, None);
        assert!(l.get::<Units>("sshd.service").unwrap().original.is_some());
        assert_eq!(l.keys::<Containers>(), vec!["web"]);
        assert_eq!(
            l.adopted(),
            vec![
                ("packages", "nano".to_string()),
                ("packages", "vim".to_string()),
                ("files", "/etc/hosts.allow".to_string()),
                ("units", "sshd.service".to_string()),
            ]
        );
        // Written back, it is the same ledger: what the previous version reads too.
        let again: serde_json::Value = serde_json::to_value(&l).unwrap();
        let before: serde_json::Value = serde_json::from_str(PREVIOUS_FORMAT).unwrap();
        // `"applied": null` is kept, `original` is left out when there is none, as before.
        assert_eq!(again, before);
    }

    #[test]
    fn an_unknown_kind_or_original_is_refused_not_dropped() {
        let unknown_kind = r#"{"version": 1, "resources": {"mounts": {}}}"#;
        let e = serde_json::from_str::<Ledger>(unknown_kind).unwrap_err();
        assert!(e.to_string().contains("unknown field `mounts`"), "{e}");
        let bad = r#"{"version": 1, "resources": {"packages": {"vim": {"origin": "adopted", "applied": null, "original": "asdeps"}}}}"#;
        let e = serde_json::from_str::<Ledger>(bad).unwrap_err();
        assert!(e.to_string().contains("unknown variant `asdeps`"), "{e}");
        let containers = r#"{"version": 1, "resources": {"containers": {"web": {"origin": "adopted", "applied": null, "original": {}}}}}"#;
        assert!(serde_json::from_str::<Ledger>(containers).is_err());
    }

    #[test]
    fn insert_remove_and_serialise() {
        let mut l = Ledger::default();
        l.insert::<Packages>("a", Entry::created());
        l.insert::<Packages>("b", Entry::adopted(Some(InstallReason::Dependency)));
        l.set_applied::<Packages>("a", Digest::parse("d1"));
        assert_eq!(
            l.get::<Packages>("a").unwrap().applied,
            Some(Digest::parse("d1"))
        );
        assert_eq!(l.keys::<Packages>(), vec!["a", "b"]);
        assert_eq!(l.keys::<Files>(), Vec::<String>::new());
        let text = serde_json::to_string(&l).unwrap();
        assert_eq!(
            text,
            r#"{"version":1,"resources":{"packages":{"a":{"origin":"created","applied":"d1"},"b":{"origin":"adopted","applied":null,"original":"dependency"}}},"directories":[]}"#
        );
        let back: Ledger = serde_json::from_str(&text).unwrap();
        assert_eq!(back.get::<Packages>("b"), l.get::<Packages>("b"));
        l.remove::<Packages>("a");
        l.remove::<Packages>("b");
        assert!(l.is_empty());
        assert_eq!(
            serde_json::to_string(&l).unwrap(),
            r#"{"version":1,"resources":{},"directories":[]}"#
        );
    }

    #[test]
    fn a_ledger_read_back_is_the_one_written() {
        let mut l = Ledger::default();
        for i in (0..100).rev() {
            l.insert::<Files>(&format!("/etc/f{i:03}"), Entry::created());
        }
        l.insert::<Packages>("vim", Entry::adopted(None));
        let text = serde_json::to_string(&l).unwrap();
        let back: Ledger = serde_json::from_str(&text).unwrap();
        assert_eq!(back.keys::<Files>(), l.keys::<Files>());
        assert_eq!(back.keys::<Packages>(), vec!["vim"]);
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
        let twice = r#"{"version": 1, "resources": {"files": {"/etc/a": {"origin": "created", "applied": "1"}, "/etc/a": {"origin": "created", "applied": "2"}}}}"#;
        let read: Ledger = serde_json::from_str(twice).unwrap();
        assert_eq!(
            read.get::<Files>("/etc/a").unwrap().applied,
            Some(Digest::parse("2"))
        );
    }

    #[test]
    fn a_sha256_is_held_as_bytes_and_written_as_its_hex() {
        let hex = crate::util::codec::sha256_hex(b"present");
        let d = Digest::parse(&hex);
        assert_eq!(d, Digest::of(b"present"));
        assert!(matches!(d, Digest::Sha256(_)));
        assert_eq!(d.to_string(), hex);
        assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{hex}\""));
        // Upper case, the wrong length or not hex: kept as written, and written back so.
        for text in [
            hex.to_uppercase(),
            hex[..32].to_string(),
            "c1".into(),
            "".into(),
        ] {
            let d = Digest::parse(&text);
            assert!(matches!(d, Digest::Text(_)), "{text}");
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{text}\""));
        }
        assert!(serde_json::from_str::<Digest>("42").is_err());
    }

    /// Many entries put in at once are the ones put in one by one, a key given again keeping
    /// the newer entry.
    #[test]
    fn entries_inserted_at_once_are_as_inserted_one_by_one() {
        let mut at_once = Ledger::default();
        let mut one_by_one = Ledger::default();
        for l in [&mut at_once, &mut one_by_one] {
            l.insert::<Files>("/etc/b", Entry::created());
            l.insert::<Files>("/etc/d", Entry::created());
        }
        let added: Vec<_> = ["/etc/a", "/etc/b", "/etc/c"]
            .into_iter()
            .map(|k| (k.to_string(), Entry::adopted(None)))
            .collect();
        for (key, entry) in added.clone() {
            one_by_one.insert::<Files>(&key, entry);
        }
        at_once.insert_all::<Files>(added);
        assert_eq!(
            serde_json::to_string(&at_once).unwrap(),
            serde_json::to_string(&one_by_one).unwrap()
        );
        assert_eq!(
            at_once.get::<Files>("/etc/b").unwrap().origin,
            Origin::Adopted
        );
        let keys: Vec<&str> = at_once.owned_keys::<Files>().collect();
        assert_eq!(keys, ["/etc/a", "/etc/b", "/etc/c", "/etc/d"]);
        assert_eq!(at_once.owned_count(), 4);
    }

    fn written(l: &Ledger) -> Vec<u8> {
        let mut out = Vec::new();
        l.write(&mut out).unwrap();
        out
    }

    /// Every shape the ledger takes (each kind, each kind of original, odd keys, directories,
    /// nothing owned) is read back line by line as it was written.
    #[test]
    fn what_write_writes_read_lines_reads_back() {
        let mut full: Ledger = serde_json::from_str(PREVIOUS_FORMAT).unwrap();
        for key in ["/etc/a \"quoted\"", "/etc/back\\slash", "/etc/ünï\u{7}"] {
            full.insert::<Files>(key, Entry::created());
        }
        let mut only_files = Ledger::default();
        only_files.insert::<Files>("/etc/x", Entry::created());
        let mut only_directories = Ledger::default();
        only_directories.directories.insert("/etc/app".into());
        for ledger in [full, only_files, only_directories, Ledger::default()] {
            let bytes = written(&ledger);
            let text = String::from_utf8_lossy(&bytes);
            let back = Ledger::read_lines(&bytes[..]).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(written(&back), bytes, "{text}");
            // Lines cut by the reader's buffer, down to a byte at a time.
            for capacity in [1, 7, 64, 200] {
                let reader = io::BufReader::with_capacity(capacity, &bytes[..]);
                let back = Ledger::read_lines(reader).unwrap_or_else(|| panic!("{text}"));
                assert_eq!(written(&back), bytes, "{capacity}: {text}");
            }
            let parsed: Ledger = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(written(&parsed), bytes, "{text}");
        }
    }

    /// Anything `write` would not have written is left to the JSON parser: other layouts,
    /// unknown kinds or fields, a cut or lengthened file.
    #[test]
    fn read_lines_takes_only_what_write_writes() {
        let ledger: Ledger = serde_json::from_str(PREVIOUS_FORMAT).unwrap();
        let text = String::from_utf8(written(&ledger)).unwrap();
        let cut = &text[..text.len() - 30];
        let kinds_renamed = text.replace("\"units\":{", "\"unicorns\":{");
        let field_added = text.replacen("\"origin\"", "\"extra\":1,\"origin\"", 1);
        for other in [
            PREVIOUS_FORMAT.to_string(),
            serde_json::to_string(&ledger).unwrap(),
            cut.to_string(),
            format!("{text}\n{{}}"),
            kinds_renamed,
            field_added,
            text.replace(",\n\"/etc/new.conf\"", ",\n\"/etc/new.conf"),
        ] {
            assert!(Ledger::read_lines(other.as_bytes()).is_none(), "{other}");
            let reader = io::BufReader::with_capacity(64, other.as_bytes());
            assert!(Ledger::read_lines(reader).is_none(), "{other}");
        }
    }

    #[test]
    fn unknown_version_is_refused() {
        let l: Ledger = serde_json::from_str(r#"{"version": 9}"#).unwrap();
        assert!(l.check().unwrap_err().contains("ledger version 9"));
    }
}
