//! Sorted key lists and maps walked in step. A run visits a kind's keys in ascending order, and
//! what it looks them up in (the declaration's section, the observations' list, the ledger's
//! section) is sorted the same way: walking each once costs about one string comparison a key,
//! where a search costs one per level of the tree (and musl's `memcmp` goes a byte at a time
//! over the long prefix such keys share).

use std::cmp::Ordering;
use std::collections::btree_map;
use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

/// `a.cmp(b)` for keys, eight bytes at a time: musl's `memcmp`, which `str`'s order calls, goes a
/// byte at a time, and a run's keys share long prefixes (`/etc/app/conf.d/...`).
#[inline]
pub fn compare(a: &str, b: &str) -> Ordering {
    compare_bytes(a.as_bytes(), b.as_bytes())
}

/// `compare` of byte strings.
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    for (p, q) in x.by_ref().zip(y.by_ref()) {
        if p != q {
            let word = |w: &[u8]| u64::from_be_bytes(w.try_into().unwrap_or_default());
            return word(p).cmp(&word(q));
        }
    }
    let at = (a.len().min(b.len()) / 8) * 8;
    a[at..].cmp(&b[at..])
}

/// How many bytes `a` and `b` begin with in common, eight at a time (as `compare_bytes`).
/// Inlined: a few instructions, asked for every declared file against each of the host's paths.
#[inline]
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let mut same = 0;
    for (p, q) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or_default());
        let differ = word(p) ^ word(q);
        if differ != 0 {
            // Little-endian: the first byte that differs is the lowest that does.
            return same + (differ.trailing_zeros() / 8) as usize;
        }
        same += 8;
    }
    let rest = a[same..].iter().zip(&b[same..]);
    same + rest.take_while(|(p, q)| p == q).count()
}

/// The keys of two ascending lists, ascending and each once, in one pass (no sort), as they are
/// asked for: a kind's turn takes them a chunk at a time rather than holding all at once.
pub fn union<'k>(
    a: impl Iterator<Item = &'k str>,
    b: impl Iterator<Item = &'k str>,
) -> impl Iterator<Item = &'k str> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) => match compare(x, y) {
            Ordering::Less => a.next(),
            Ordering::Greater => b.next(),
            Ordering::Equal => {
                b.next();
                a.next()
            }
        },
        (Some(_), None) => a.next(),
        (None, Some(_)) => b.next(),
        (None, None) => None,
    })
}

/// Lookups in a sorted map (or any ascending list of entries, `I`, keyed by `K`) by keys asked
/// in ascending order: the map is walked forward once.
pub struct Walk<'m, V, K = String, I = btree_map::Range<'m, K, V>>
where
    I: Iterator<Item = (&'m K, &'m V)>,
    K: AsRef<str> + 'm,
    V: 'm,
{
    rest: Peekable<I>,
}

impl<'m, V> Walk<'m, V> {
    pub fn new(map: &'m BTreeMap<String, V>) -> Walk<'m, V> {
        Walk::along(map.range::<str, _>(..))
    }

    /// A walk of `map` from `first` on (found by one search): for keys asked from `first` up.
    pub fn from(map: &'m BTreeMap<String, V>, first: &str) -> Walk<'m, V> {
        Walk {
            rest: map
                .range::<str, _>((Bound::Included(first), Bound::Unbounded))
                .peekable(),
        }
    }
}

impl<'m, V, K: AsRef<str>, I: Iterator<Item = (&'m K, &'m V)>> Walk<'m, V, K, I> {
    /// A walk along `entries`, which must be in ascending key order.
    pub fn along(entries: I) -> Walk<'m, V, K, I> {
        Walk {
            rest: entries.peekable(),
        }
    }

    /// The value at `key`. Each key asked must be greater than the one asked before; a key
    /// asked out of order is not found.
    pub fn at(&mut self, key: &str) -> Option<&'m V> {
        while let Some((at, value)) = self.rest.peek() {
            match compare(at.as_ref(), key) {
                Ordering::Less => {
                    self.rest.next();
                }
                Ordering::Equal => {
                    let value = *value;
                    self.rest.next();
                    return Some(value);
                }
                Ordering::Greater => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_as_str_does() {
        let keys = [
            "",
            "a",
            "ab",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "abcdefgi",
            "/etc/app/a",
            "/etc/app/a.d/x",
            "/etc/app/a/x",
            "/etc/app/b",
            "/etc/ünï",
            "/etc/app/abcdefghijklmnop",
            "/etc/app/abcdefghijklmnoq",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(compare(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn common_prefix_counts_what_a_byte_walk_counts() {
        let keys = [
            "",
            "a",
            "/etc/app/a",
            "/etc/app/b",
            "/etc/app/abcdefghijklmnop",
        ];
        for a in keys
            .iter()
            .chain(&["/etc/app/abcdefghijklmnoq", "/etc/ap", "/etc/app/"])
        {
            for b in keys {
                let walked = a.bytes().zip(b.bytes()).take_while(|(p, q)| p == q).count();
                assert_eq!(
                    common_prefix(a.as_bytes(), b.as_bytes()),
                    walked,
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn union_is_ascending_and_each_key_once() {
        let a = ["a", "c", "d", "f"];
        let b = ["b", "c", "f", "g", "h"];
        let union = |a: &[&'static str], b: &[&'static str]| -> Vec<&'static str> {
            union(a.iter().copied(), b.iter().copied()).collect()
        };
        assert_eq!(union(&a, &b), ["a", "b", "c", "d", "f", "g", "h"]);
        assert_eq!(union(&a, &[]), a);
        assert_eq!(union(&[], &b), b);
        assert!(union(&[], &[]).is_empty());
    }

    #[test]
    fn walk_finds_what_a_search_finds_for_ascending_keys() {
        let map: BTreeMap<String, usize> = ["b", "d", "e", "x"]
            .iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), i))
            .collect();
        let mut walk = Walk::new(&map);
        for key in ["a", "b", "c", "d", "e", "f", "x", "y"] {
            assert_eq!(walk.at(key), map.get(key), "{key}");
        }
    }

    #[test]
    fn a_walk_from_a_key_finds_it_and_what_follows() {
        let map: BTreeMap<String, u8> = [("a", 1), ("b", 2), ("d", 4)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let mut walk = Walk::from(&map, "b");
        assert_eq!(walk.at("a"), None);
        let mut walk = Walk::from(&map, "b");
        assert_eq!(
            (walk.at("b"), walk.at("c"), walk.at("d")),
            (Some(&2), None, Some(&4))
        );
        assert_eq!(Walk::from(&map, "c").at("d"), Some(&4));
    }

    #[test]
    fn walk_does_not_go_back() {
        let map: BTreeMap<String, u8> = [("a".to_string(), 1), ("b".to_string(), 2)].into();
        let mut walk = Walk::new(&map);
        assert_eq!(walk.at("b"), Some(&2));
        assert_eq!(walk.at("a"), None);
    }
}
