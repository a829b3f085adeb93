//! What one observation of a kind found, key by key.

use std::borrow::Cow;

use crate::kinds::KindError;
use crate::util::sorted::{self, Walk};

/// What observation found of each key: its state, or why that one key could not be observed.
/// A list in ascending key order, not a map: a kind observes its keys in the order asked
/// (ascending), so the list is built as found and walked in step with the run's keys, where a
/// map would cost a sort, a copy of every observation and a tree's nodes per chunk. Its keys are
/// the ones asked (`'k`) where the kind hands them back, so a 20,000-file run copies none.
#[derive(Debug)]
pub struct Observations<'k, O> {
    by_key: Vec<(Cow<'k, str>, Result<O, KindError>)>,
}

impl<'k, O> Observations<'k, O> {
    /// The observation of `key` (one search).
    pub fn get(&self, key: &str) -> Option<&Result<O, KindError>> {
        let at = (self.by_key).binary_search_by(|(k, _)| sorted::compare(k, key));
        at.ok().map(|at| &self.by_key[at].1)
    }

    /// Lookups by keys asked in ascending order (see `Walk`).
    pub fn walk(&self) -> Walk<'_, Result<O, KindError>, Cow<'k, str>, Entries<'_, 'k, O>> {
        Walk::along(self.by_key.iter().map(|(k, v)| (k, v)))
    }

    /// A list of what was found, sorted only when not found in ascending order, a key found
    /// twice keeping its last observation (as a map's insertion would).
    fn of(mut by_key: Vec<(Cow<'k, str>, Result<O, KindError>)>) -> Self {
        let ascending = |v: &[(Cow<str>, _)]| {
            v.windows(2)
                .all(|w| sorted::compare(&w[0].0, &w[1].0).is_lt())
        };
        if !ascending(&by_key) {
            by_key.sort_by(|(a, _), (b, _)| sorted::compare(a, b));
            // Of equal keys (kept in the order found), the last.
            let mut last: Vec<(Cow<str>, Result<O, KindError>)> = Vec::with_capacity(by_key.len());
            for entry in by_key {
                match last.last_mut() {
                    Some(prev) if prev.0 == entry.0 => *prev = entry,
                    _ => last.push(entry),
                }
            }
            by_key = last;
        }
        Observations { by_key }
    }
}

/// `Observations::walk`'s entries.
pub type Entries<'o, 'k, O> = std::iter::Map<
    std::slice::Iter<'o, (Cow<'k, str>, Result<O, KindError>)>,
    for<'e> fn(
        &'e (Cow<'k, str>, Result<O, KindError>),
    ) -> (&'e Cow<'k, str>, &'e Result<O, KindError>),
>;

impl<O> Default for Observations<'_, O> {
    fn default() -> Self {
        Observations { by_key: Vec::new() }
    }
}

/// Found under keys of its own (a tool's output names them).
impl<O> FromIterator<(String, Result<O, KindError>)> for Observations<'_, O> {
    fn from_iter<I: IntoIterator<Item = (String, Result<O, KindError>)>>(iter: I) -> Self {
        Observations::of(iter.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect())
    }
}

/// Found under the keys asked.
impl<'k, O> FromIterator<(&'k str, Result<O, KindError>)> for Observations<'k, O> {
    fn from_iter<I: IntoIterator<Item = (&'k str, Result<O, KindError>)>>(iter: I) -> Self {
        Observations::of(
            iter.into_iter()
                .map(|(k, v)| (Cow::Borrowed(k), v))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(pairs: &[(&str, u32)]) -> Observations<'static, u32> {
        pairs.iter().map(|(k, v)| (k.to_string(), Ok(*v))).collect()
    }

    fn keys<'o>(o: &'o Observations<u32>) -> Vec<(&'o str, u32)> {
        (o.by_key.iter())
            .map(|(k, v)| (k.as_ref(), *v.as_ref().unwrap_or(&0)))
            .collect()
    }

    #[test]
    fn kept_in_key_order_whatever_the_order_found_the_last_of_a_key_winning() {
        let o = found(&[("/b", 1), ("/a", 2), ("/c", 3), ("/a", 4)]);
        assert_eq!(keys(&o), [("/a", 4), ("/b", 1), ("/c", 3)]);
        let ascending = found(&[("/a", 1), ("/b", 2)]);
        assert_eq!(keys(&ascending), [("/a", 1), ("/b", 2)]);
        let asked = ["/y", "/x"];
        let borrowed: Observations<u32> = asked.iter().map(|k| (*k, Ok(1))).collect();
        assert_eq!(keys(&borrowed), [("/x", 1), ("/y", 1)]);
    }

    #[test]
    fn found_by_search_and_by_walk() {
        let o = found(&[("/etc/a", 1), ("/etc/b", 2), ("/etc/d", 3)]);
        assert!(matches!(o.get("/etc/b"), Some(Ok(2))));
        assert!(o.get("/etc/c").is_none());
        let mut walk = o.walk();
        assert!(walk.at("/etc/a").is_some());
        assert!(walk.at("/etc/c").is_none());
        assert!(matches!(walk.at("/etc/d"), Some(Ok(3))));
        assert!(found(&[]).get("/etc/a").is_none());
    }
}
