//! Names one after another in one buffer: what the watcher's targets keep instead of an
//! allocation per name.

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;

/// Names one after another in one buffer, with where each ends.
#[derive(Debug, Default, PartialEq)]
pub struct Packed {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Packed {
    /// Room for exactly `count` names of `bytes` in all.
    pub fn with_capacity(count: usize, bytes: usize) -> Packed {
        Packed {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(count),
        }
    }

    pub fn push(&mut self, name: &[u8]) {
        self.bytes.extend_from_slice(name);
        // The declaration and the ledger are far below 4 GiB, so their names are.
        self.ends.push(self.bytes.len() as u32);
    }

    pub fn get(&self, i: usize) -> &OsStr {
        let start = i
            .checked_sub(1)
            .map_or(0, |before| self.ends[before] as usize);
        OsStr::from_bytes(&self.bytes[start..self.ends[i] as usize])
    }

    /// Binary search among the names `within`, which are sorted.
    pub fn find(&self, within: Range<usize>, name: &OsStr) -> Option<usize> {
        let (mut low, mut high) = (within.start, within.end);
        while low < high {
            let mid = low + (high - low) / 2;
            match self.get(mid).as_bytes().cmp(name.as_bytes()) {
                Ordering::Less => low = mid + 1,
                Ordering::Greater => high = mid,
                Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}
