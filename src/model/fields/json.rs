//! `Json`, the JSON value a declaration's fields are read from: strings borrowed from the text
//! where they have no escapes, an object kept as its members in order, duplicate keys refused.
//! A resource read this way costs one list and its escaped strings, not a map node and a string
//! for every key and value (`serde_json::Value`), which thousands of resources pay for each run.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Number;

/// A JSON value, its strings borrowed from the text it was read from when they can be.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Object<'a>),
}

/// A JSON object's members in the text's order; no key twice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object<'a>(Vec<(Cow<'a, str>, Json<'a>)>);

impl<'a> Json<'a> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object<'a>> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Json<'a>]> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }
}

impl<'a> Object<'a> {
    pub fn get(&self, name: &str) -> Option<&Json<'a>> {
        self.find(name).map(|(_, v)| v)
    }

    /// Member `name` and its place among the members.
    #[inline]
    pub fn find(&self, name: &str) -> Option<(usize, &Json<'a>)> {
        let at = self.0.iter().position(|(k, _)| k == name)?;
        Some((at, &self.0[at].1))
    }

    /// How many members it has.
    pub fn count(&self) -> usize {
        self.0.len()
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }

    /// Drops every member, keeping the room they took.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Takes member `name` out.
    pub fn remove(&mut self, name: &str) -> Option<Json<'a>> {
        let at = self.0.iter().position(|(k, _)| k == name)?;
        Some(self.0.remove(at).1)
    }

    /// Adds a member; `Err` with the key when it is there already.
    pub fn insert(&mut self, key: Cow<'a, str>, value: Json<'a>) -> Result<(), Cow<'a, str>> {
        if self.contains_key(&key) {
            return Err(key);
        }
        self.0.push((key, value));
        Ok(())
    }

    /// The members by key (as a map holds them), so problems come in the same order whatever
    /// order the text had them in.
    pub fn sorted(&self) -> Vec<(&str, &Json<'a>)> {
        let mut members: Vec<_> = self.0.iter().map(|(k, v)| (k.as_ref(), v)).collect();
        members.sort_unstable_by(|a, b| a.0.cmp(b.0));
        members
    }
}

/// Parses JSON text into `Json` borrowing from it, duplicate keys refused.
pub fn parse(bytes: &[u8]) -> Result<Json<'_>, serde_json::Error> {
    serde_json::from_slice(bytes)
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

/// Builds a `Json`; also what reads a value its caller has begun (`visit_seq`).
pub struct JsonVisitor;

/// Objects up to this many members are checked for a key given twice by looking through them;
/// larger ones (a long `env`, say) also keep a set of their keys.
const SCANNED: usize = 16;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json<'de>, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json<'de>, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json<'de>, E> {
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Json<'de>, A::Error> {
        let mut object = Object::default();
        read_members(map, &mut object)?;
        Ok(Json::Object(object))
    }
}

/// Reads an object's members into `object`, which holds none: a caller reading thousands of
/// resources reuses one list for them all.
pub fn read_members<'de, A: MapAccess<'de>>(
    mut map: A,
    object: &mut Object<'de>,
) -> Result<(), A::Error> {
    let mut keys = BTreeSet::new();
    while let Some(key) = map.next_key_seed(Key)? {
        let twice = match object.0.len() < SCANNED {
            true => object.contains_key(&key),
            false => {
                if keys.is_empty() {
                    keys.extend(object.0.iter().map(|(k, _)| k.to_string()));
                }
                !keys.insert(key.to_string())
            }
        };
        if twice {
            return Err(de::Error::custom(format!("duplicate key {key:?}")));
        }
        let value = map.next_value()?;
        object.0.push((key, value));
    }
    Ok(())
}

/// An object's key, borrowed from the text when it has no escapes.
pub struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let text = br#"{"a": "plain", "b": "line\n", "c": [1, -2, 0.5, true, null]}"#;
        let Json::Object(object) = parse(text).unwrap() else {
            panic!("not an object");
        };
        assert!(matches!(
            object.get("a"),
            Some(Json::String(Cow::Borrowed("plain")))
        ));
        assert!(matches!(object.get("b"), Some(Json::String(Cow::Owned(s))) if s == "line\n"));
        let items = object.get("c").and_then(Json::as_array).unwrap();
        assert_eq!(items[0].as_u64(), Some(1));
        assert_eq!(items[1].as_u64(), None);
        assert_eq!(items[3].as_bool(), Some(true));
        assert_eq!(items[4], Json::Null);
        let keys: Vec<_> = object.sorted().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", "c"]);
    }

    #[test]
    fn a_key_given_twice_is_refused_in_small_and_large_objects() {
        // Where serde_json's `Value` read with duplicates refused (`strict_json`) says it is.
        let text = br#"{"x": {"a": 1, "b": 2, "a": 3}}"#;
        let error = parse(text).unwrap_err().to_string();
        assert_eq!(error, "duplicate key \"a\" at line 1 column 26");
        assert_eq!(
            error,
            crate::model::fields::strict_json(text)
                .unwrap_err()
                .to_string()
        );
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\": {i}")).collect();
        let text = format!("{{{}, \"k3\": 0}}", many.join(", "));
        let error = parse(text.as_bytes()).unwrap_err().to_string();
        assert!(error.starts_with("duplicate key \"k3\""), "{error}");
        let text = format!("{{{}}}", many.join(", "));
        assert!(parse(text.as_bytes()).is_ok());
    }
}
