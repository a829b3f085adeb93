//! The toolkit a declaration is read with: its problems, each with its location
//! (`files["/etc/x"].mode`), the fields of one JSON object read with every wrong type and unknown
//! field reported, JSON with duplicate keys refused, and secret content scrubbed from what a
//! refusal quotes. Each kind's spec (`model::spec`) parses its fields with it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

pub mod json;

pub use json::{Json, Object};

/// One thing wrong with a declaration, and where (`files["/etc/x"].mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub location: String,
    pub message: String,
}
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.location, self.message)
        }
    }
}
#[derive(Debug, Default)]
pub struct Problems(pub Vec<Problem>);
impl Problems {
    pub fn push(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}
/// `Declaration::secret_texts` of one secret content: each line, and what follows each `=` or
/// `:` in it (`Environment=TOKEN=x` gives `TOKEN=x` and `x`).
pub fn content_secrets(bytes: &[u8], texts: &mut BTreeSet<String>) {
    for line in String::from_utf8_lossy(bytes).lines() {
        secret_piece(line, texts);
        for (at, _) in line.match_indices(['=', ':']) {
            secret_piece(&line[at + 1..], texts);
        }
    }
}
pub fn secret_piece(text: &str, texts: &mut BTreeSet<String>) {
    let text = text.trim();
    if text.len() >= crate::os::exec::MIN_REDACTED {
        texts.insert(text.to_string());
    }
}
/// Where a resource is, for messages: `files["/etc/x"]`. Formatted only for a problem, never for
/// each of thousands of valid resources.
pub fn resource_location(kind: &str, key: &str) -> String {
    format!("{kind}[{}]", Value::String(key.to_string()))
}
pub fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}
/// Reads the fields of one JSON object, reporting wrong types and, at `finish`, unknown fields
/// (a typo such as `"enabeld"` must never be silently ignored).
pub struct Fields<'a, 'p> {
    object: &'a Object<'a>,
    location: Location<'a>,
    /// The names asked for, for the message of an unknown field.
    known: Asked,
    /// Which of the object's first 64 members were asked for, by index: `finish` finds all of a
    /// resource's members known without comparing a name again.
    found: u64,
    pub problems: &'p mut Problems,
}
/// The names `Fields` was asked for: a kind asks a handful for each of thousands of resources,
/// so the first few are kept in place rather than in a list of their own.
#[derive(Default)]
struct Asked {
    first: [&'static str; 16],
    count: usize,
    more: Vec<&'static str>,
}
impl Asked {
    // Inlined as `Fields::get`, its one caller, is: a handful of calls a resource.
    #[inline]
    fn push(&mut self, name: &'static str) {
        match self.first.get_mut(self.count) {
            Some(slot) => {
                *slot = name;
                self.count += 1;
            }
            None => self.more.push(name),
        }
    }

    fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.first[..self.count].iter().chain(&self.more).copied()
    }

    fn contains(&self, name: &str) -> bool {
        self.names().any(|known| known == name)
    }
}
/// Where the object `Fields` reads is, kept unformatted until a problem needs it.
enum Location<'a> {
    Text(String),
    Resource { kind: &'static str, key: &'a str },
}
impl<'a, 'p> Fields<'a, 'p> {
    pub fn new(object: &'a Object<'a>, location: String, problems: &'p mut Problems) -> Self {
        Fields {
            object,
            location: Location::Text(location),
            known: Asked::default(),
            found: 0,
            problems,
        }
    }

    /// The fields of resource `key` of `kind`.
    pub fn for_resource(
        object: &'a Object<'a>,
        kind: &'static str,
        key: &'a str,
        problems: &'p mut Problems,
    ) -> Self {
        Fields {
            object,
            location: Location::Resource { kind, key },
            known: Asked::default(),
            found: 0,
            problems,
        }
    }

    fn location(&self) -> String {
        match &self.location {
            Location::Text(text) => text.clone(),
            Location::Resource { kind, key } => resource_location(kind, key),
        }
    }

    /// The location of field `name`, for messages.
    pub fn at(&self, name: &str) -> String {
        match self.location() {
            location if location.is_empty() => name.to_string(),
            location => format!("{location}.{name}"),
        }
    }

    pub fn problem(&mut self, name: &str, message: impl Into<String>) {
        let at = self.at(name);
        self.problems.push(at, message);
    }

    pub fn has(&self, name: &str) -> bool {
        self.object.contains_key(name)
    }

    // Inlined (the release build is made for size, and keeps calls) as `typed` and
    // `Object::find` are: each kind asks for its fields, for each of thousands of resources.
    #[inline]
    fn get(&mut self, name: &'static str) -> Option<&'a Json<'a>> {
        self.known.push(name);
        let (at, value) = self.object.find(name)?;
        if let Some(bit) = 1u64.checked_shl(at as u32) {
            self.found |= bit;
        }
        Some(value)
    }

    #[inline]
    fn typed<T>(
        &mut self,
        name: &'static str,
        want: &str,
        pick: impl Fn(&'a Json<'a>) -> Option<T>,
    ) -> Option<T> {
        let value = self.get(name)?;
        let picked = pick(value);
        if picked.is_none() {
            let message = format!("must be {want}, not {}", type_name(value));
            self.problem(name, message);
        }
        picked
    }

    #[inline]
    pub fn str(&mut self, name: &'static str) -> Option<&'a str> {
        self.typed(name, "a string", Json::as_str)
    }

    pub fn bool(&mut self, name: &'static str) -> Option<bool> {
        self.typed(name, "true or false", Json::as_bool)
    }

    pub fn u64(&mut self, name: &'static str) -> Option<u64> {
        self.typed(name, "a non-negative integer", Json::as_u64)
    }

    pub fn object(&mut self, name: &'static str) -> Option<&'a Object<'a>> {
        self.typed(name, "an object", Json::as_object)
    }

    pub fn array(&mut self, name: &'static str) -> Option<&'a [Json<'a>]> {
        self.typed(name, "an array", Json::as_array)
    }

    /// An array of strings; each wrong element is reported with its index.
    pub fn strings(&mut self, name: &'static str) -> Option<Vec<&'a str>> {
        let items = self.typed(name, "an array of strings", Json::as_array)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(s) => out.push(s),
                None => {
                    let at = format!("{}[{i}]", self.at(name));
                    self.problems
                        .push(at, format!("must be a string, not {}", type_name(item)));
                }
            }
        }
        Some(out)
    }

    /// An object whose values are all strings (environment variables, labels).
    pub fn string_map(&mut self, name: &'static str) -> Option<BTreeMap<String, String>> {
        let map = self.object(name)?;
        let mut out = BTreeMap::new();
        for (k, v) in map.sorted() {
            match v.as_str() {
                Some(s) => {
                    out.insert(k.to_string(), s.to_string());
                }
                None => {
                    let at = format!("{}[{}]", self.at(name), Value::String(k.to_string()));
                    self.problems
                        .push(at, format!("must be a string, not {}", type_name(v)));
                }
            }
        }
        Some(out)
    }

    /// `state`: `present` (the default) or `absent`.
    pub fn present(&mut self) -> bool {
        match self.str("state") {
            None | Some("present") => true,
            Some("absent") => false,
            Some(other) => {
                self.problem(
                    "state",
                    format!("{other:?} is not a state (present or absent)"),
                );
                true
            }
        }
    }

    /// Reports every field that was never asked for.
    pub fn finish(self) {
        let members = self.object.count();
        if members < 64 && self.found == (1 << members) - 1 {
            return;
        }
        if self.object.keys().all(|key| self.known.contains(key)) {
            return;
        }
        for (key, _) in self.object.sorted() {
            if !self.known.contains(key) {
                let at = self.location();
                let mut known: Vec<_> = self.known.names().collect();
                known.sort_unstable();
                known.dedup();
                self.problems.push(
                    at,
                    format!("unknown field {key:?} (known fields: {})", known.join(", ")),
                );
            }
        }
    }
}
/// Parses JSON text with duplicate object keys rejected (see `StrictValue`).
pub fn strict_json(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<StrictValue>(bytes).map(|StrictValue(v)| v)
}
/// A JSON value parsed with duplicate object keys rejected: `{"a": 1, "a": 2}` is ambiguous, and
/// serde_json's own `Value` silently keeps the last one.
pub struct StrictValue(pub Value);
impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}
pub struct StrictVisitor;
impl<'de> Visitor<'de> for StrictVisitor {
    type Value = StrictValue;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<StrictValue, E> {
        Ok(StrictValue(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrictValue, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(StrictValue(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictValue, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let StrictValue(v) = map.next_value()?;
            object.insert(key, v);
        }
        Ok(StrictValue(Value::Object(object)))
    }
}

/// A field as the manual (`mesh-host.json(5)`, `mesh-host-config(5)`) and the JSON Schemas
/// describe it. The parsers stay the authority: `tests/it/manual.rs` checks these tables name
/// exactly the fields the parsers know.
pub struct FieldDoc {
    pub name: &'static str,
    pub ty: FieldType,
    /// What leaving it out means (`false`, "not managed"); `None`: it must be given.
    pub default: Option<&'static str>,
    pub about: &'static str,
}

/// A field's JSON type, as far as a schema can say it (the parsers check the rest).
pub enum FieldType {
    String,
    Bool,
    /// An integer of at least this.
    Integer(u64),
    /// Exactly this integer (`schema`).
    Const(u64),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    Strings,
    /// An object whose values are strings.
    StringMap,
    /// An object of exactly these fields.
    Object(&'static [FieldDoc]),
}

impl FieldType {
    /// The type in words, for the manual.
    pub fn words(&self) -> String {
        match self {
            FieldType::String => "string".into(),
            FieldType::Bool => "boolean".into(),
            FieldType::Integer(0) => "integer".into(),
            FieldType::Integer(min) => format!("integer, at least {min}"),
            FieldType::Const(n) => format!("the integer {n}"),
            FieldType::OneOf(words) => format!("one of {}", words.join(", ")),
            FieldType::Strings => "array of strings".into(),
            FieldType::StringMap => "object of strings".into(),
            FieldType::Object(_) => "object".into(),
        }
    }
}

/// Every resource's `state` (`Fields::present`).
pub const STATE: FieldDoc = FieldDoc {
    name: "state",
    ty: FieldType::OneOf(&["present", "absent"]),
    default: Some("present"),
    about: "absent: removed (a file deleted, a package removed, a unit stopped and disabled, a \
            container removed), whether or not the host owns it.",
};
