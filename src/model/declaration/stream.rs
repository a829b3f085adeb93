//! A declaration read as it streams in (serde's seeds and visitors): each kind's section
//! validated resource by resource through its `KindSpec`, duplicate keys refused, everything
//! else at the top kept as values for `parse`'s `Fields`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{by_name, Context, Declaration, Declared, VisitDeclared};
use crate::model::fields::json::{read_members, JsonVisitor, Key};
use crate::model::fields::{resource_location, type_name, Fields, Json, Object, Problems};
use crate::util::sorted;

/// Validates one resource, its value an object's members or (`Err`) another value: its spec if
/// it has no problem.
fn parse_resource<K: Declared>(
    key: &str,
    value: Result<&Object, &Json>,
    cx: &Context,
    problems: &mut Problems,
) -> Option<K::Spec> {
    let before = problems.0.len();
    if let Err(message) = K::check_key(key) {
        problems.push(resource_location(K::NAME, key), message);
    }
    let object = match value {
        Ok(object) => object,
        Err(other) => {
            problems.push(
                resource_location(K::NAME, key),
                format!("must be an object, not {}", type_name(other)),
            );
            return None;
        }
    };
    let mut fields = Fields::for_resource(object, K::NAME, key, problems);
    let spec = K::parse(key, &mut fields, cx.limits);
    fields.finish();
    let spec = spec?;
    if let Some(refusal) = K::refuse_self(key, &spec, cx.identity) {
        problems.push(
            resource_location(K::NAME, key),
            format!("refused: {refusal}; mesh-host never manages itself"),
        );
    }
    (problems.0.len() == before).then_some(spec)
}

/// Reads a declaration's top level from `bytes`. Text, as nearly every declaration is, is read as
/// `str`, whose strings serde_json takes as they are, where from bytes it checks each string
/// again (thousands); bytes that are not text are read as bytes, whose error says where.
pub(super) fn read<'de>(
    bytes: &'de [u8],
    cx: &Context,
) -> Result<Option<Top<'de>>, serde_json::Error> {
    match std::str::from_utf8(bytes) {
        Ok(text) => read_from(serde_json::Deserializer::from_str(text), cx),
        Err(_) => read_from(serde_json::Deserializer::from_slice(bytes), cx),
    }
}

fn read_from<'de, R: serde_json::de::Read<'de>>(
    mut json: serde_json::Deserializer<R>,
    cx: &Context,
) -> Result<Option<Top<'de>>, serde_json::Error> {
    let top = TopSeed { cx }.deserialize(&mut json)?;
    json.end()?;
    Ok(top)
}

/// The top level as it streams in: the kinds' sections are validated resource by resource
/// (`SectionSeed`), so only one resource's JSON value exists at a time and a large declaration
/// costs about its typed model, not a whole document tree besides. Everything else at the top
/// (schema, revision, unknown fields) is kept as values for `Fields`.
pub(super) struct Top<'de> {
    pub(super) fields: Object<'de>,
    /// The valid resources of each kind's section (the other fields are set after).
    pub(super) resources: Declaration,
    /// Each kind's problems, by kind name.
    pub(super) problems: BTreeMap<&'static str, Problems>,
}

/// One kind's section: its valid resources and the problems of the others.
struct Section<S>(BTreeMap<String, S>, Problems);

/// `None` when the document is not an object.
struct TopSeed<'c, 'x> {
    cx: &'c Context<'x>,
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_, '_> {
    type Value = Option<Top<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, '_> {
    type Value = Option<Top<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a declaration")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut top = Top {
            fields: Object::default(),
            resources: Declaration::default(),
            problems: BTreeMap::new(),
        };
        while let Some(key) = map.next_key_seed(Key)? {
            if top.fields.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let mut reader = SectionReader {
                map: &mut map,
                cx: self.cx,
                top: &mut top,
            };
            let value = match by_name(&key, &mut reader) {
                Some(read) => read?,
                None => map.next_value::<Json>()?,
            };
            // Refused above when it was there already.
            let _ = top.fields.insert(key, value);
        }
        Ok(Some(top))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        JsonVisitor.visit_seq(seq).map(|_| None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Reads the section of the kind it is visited with into `top`; returns what `Fields` should see
/// in its place (an empty object when it was one, else the value itself, so its type is reported).
struct SectionReader<'m, 'c, 'x, 't, 'de, A> {
    map: &'m mut A,
    cx: &'c Context<'x>,
    top: &'t mut Top<'de>,
}

impl<'de, A: MapAccess<'de>> VisitDeclared for SectionReader<'_, '_, '_, '_, 'de, A> {
    type Out = Result<Json<'de>, A::Error>;
    fn visit<K: Declared>(&mut self) -> Self::Out {
        let seed = SectionSeed::<K> {
            cx: self.cx,
            kind: PhantomData,
        };
        match self.map.next_value_seed(seed)? {
            Ok(Section(resources, problems)) => {
                *K::desired_mut(&mut self.top.resources) = resources;
                self.top.problems.insert(K::NAME, problems);
                Ok(Json::Object(Object::default()))
            }
            Err(other) => Ok(other),
        }
    }
}

/// A visitor's methods for every value but an object: the value as `JsonVisitor` reads it,
/// wrapped by `$wrap` (what a section, or a resource, that is not an object is taken as).
macro_rules! other_values_as_json {
    ($wrap:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            JsonVisitor.visit_seq(seq).map($wrap)
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            JsonVisitor.visit_bool(v).map($wrap)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            JsonVisitor.visit_i64(v).map($wrap)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            JsonVisitor.visit_u64(v).map($wrap)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            JsonVisitor.visit_f64(v).map($wrap)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            JsonVisitor.visit_str(v).map($wrap)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            JsonVisitor.visit_unit().map($wrap)
        }
    };
}

/// One kind's section, validated resource by resource; `Err` holds a value that is not an object.
struct SectionSeed<'c, 'x, K> {
    cx: &'c Context<'x>,
    kind: PhantomData<K>,
}

impl<'de, K: Declared> DeserializeSeed<'de> for SectionSeed<'_, '_, K> {
    type Value = Result<Section<K::Spec>, Json<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, K: Declared> Visitor<'de> for SectionSeed<'_, '_, K> {
    type Value = Result<Section<K::Spec>, Json<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "the {} of a declaration", K::NAME)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Gathered in a list and built into the map at once: a map filled by insertions in key
        // order (as sections usually come) leaves its nodes about half empty; built from the
        // whole sorted list, they are full.
        let mut resources = Vec::new();
        let mut rejected = BTreeSet::new();
        let mut problems = Problems::default();
        let duplicate = |key: &str| de::Error::custom(format!("duplicate key {key:?}"));
        let mut members = Object::default();
        while let Some(key) = map.next_key::<String>()? {
            members.clear();
            let other = map.next_value_seed(ResourceValue(&mut members))?;
            let value = match &other {
                None => Ok(&members),
                Some(other) => Err(other),
            };
            match parse_resource::<K>(&key, value, self.cx, &mut problems) {
                Some(spec) => resources.push((key, spec)),
                None => {
                    if let Some(key) = rejected.replace(key) {
                        return Err(duplicate(&key));
                    }
                }
            }
        }
        // Duplicates are found once all are read (the error discards the section).
        resources.sort_by(|a, b| sorted::compare(&a.0, &b.0));
        let same = |pair: &&[(String, K::Spec)]| sorted::compare(&pair[0].0, &pair[1].0).is_eq();
        if let Some(pair) = resources.windows(2).find(same) {
            return Err(duplicate(&pair[0].0));
        }
        let sorted = |key: &String| resources.binary_search_by(|(k, _)| k.cmp(key)).is_ok();
        if let Some(key) = rejected.iter().find(|key| sorted(key)) {
            return Err(duplicate(key));
        }
        let resources: BTreeMap<String, K::Spec> = resources.into_iter().collect();
        Ok(Ok(Section(resources, problems)))
    }
    other_values_as_json!(Err);
}

/// A resource's value: an object's members read into the list it holds (one list for every
/// resource of a section, not one each), or (`Some`) any other value as it is.
struct ResourceValue<'o, 'de>(&'o mut Object<'de>);

impl<'de> DeserializeSeed<'de> for ResourceValue<'_, 'de> {
    type Value = Option<Json<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ResourceValue<'_, 'de> {
    type Value = Option<Json<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        JsonVisitor.expecting(f)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        read_members(map, self.0).map(|()| None)
    }
    other_values_as_json!(Some);
}
