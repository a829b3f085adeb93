//! Which of the watcher's entries an event touched since the last check: one bit each, so that
//! the mark for every owned file, kept between runs, is an eighth of a byte-per-entry list.

use std::ops::Range;

/// One bit per index, all clear at first.
#[derive(Debug, Default)]
pub struct Marks {
    words: Vec<u64>,
}

impl Marks {
    /// Room for indices below `count`, none marked.
    pub fn new(count: usize) -> Marks {
        Marks {
            words: vec![0; count.div_ceil(64)],
        }
    }

    pub fn mark(&mut self, indices: Range<usize>) {
        for i in indices {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    pub fn is_marked(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn clear(&mut self) {
        self.words.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_a_range_across_words_and_clears() {
        let mut marks = Marks::new(200);
        marks.mark(60..130);
        let marked: Vec<usize> = (0..200).filter(|i| marks.is_marked(*i)).collect();
        assert_eq!(marked, (60..130).collect::<Vec<_>>());
        marks.mark(199..200);
        assert!(marks.is_marked(199));
        marks.clear();
        assert!((0..200).all(|i| !marks.is_marked(i)));
    }
}
