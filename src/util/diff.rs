//! Unified diffs of a resource's content, for a person reviewing a plan: Myers' line diff made
//! into `diff -u`'s hunks (three lines of context), capped per resource; content that is not text
//! is summarised by its sizes and SHA-256s, and content a resource keeps secret by its sizes only.
//! Pure: bytes in, what to show out; `cli::render` prints it.

use std::collections::HashMap;

use serde::Serialize;

use crate::util::codec;

/// Lines of context around each change, as `diff -u`.
pub const CONTEXT: usize = 3;
/// The most lines (context, removed, added) shown of one resource's diff; the rest is counted.
pub const MAX_LINES: usize = 200;
/// The most bytes of line text shown of one resource's diff: a file of few, very long lines
/// must not fill the plan either.
pub const MAX_BYTES: usize = 32 * 1024;
/// The most differing lines the shortest edit is searched for (memory grows with its square);
/// beyond, what lies between the common head and tail is shown removed, then added: still a
/// correct diff, only not the shortest.
const MAX_EDITS: usize = 1000;

/// About what the allocator takes beside each allocation (its header and rounding).
const MALLOC: usize = 16;

/// What a plan shows of a resource's content change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContentDiff {
    /// What the old side is, after the resource's name: `on the machine`, `absent`.
    pub from: &'static str,
    /// What the new side is: `declared`, `absent` (removed), `original` (put back).
    pub to: &'static str,
    pub old_size: usize,
    pub new_size: usize,
    #[serde(flatten)]
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "content", rename_all = "lowercase")]
pub enum Body {
    /// Text on both sides: the hunks, as many as the cap lets through.
    Text {
        hunks: Vec<Hunk>,
        /// Lines of the diff past the cap, not shown.
        omitted_lines: usize,
    },
    /// Not text (not UTF-8, or a NUL byte) on either side: never shown.
    Binary {
        old_sha256: String,
        new_sha256: String,
    },
    /// The resource keeps its content secret: sizes only.
    Secret,
}

/// One `@@ -old_start,old_lines +new_start,new_lines @@` hunk, numbered as `diff -u` does (a
/// range of no lines starts at the line before it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hunk {
    pub old_start: usize,
    pub old_lines: usize,
    pub new_start: usize,
    pub new_lines: usize,
    /// Its lines (fewer than the counts say when the cap cut it).
    pub lines: Vec<Line>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    pub tag: Tag,
    /// The line without its newline.
    pub text: String,
    /// The last line of its side, which has no newline (`\ No newline at end of file`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_newline: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tag {
    Context,
    Removed,
    Added,
}

impl Tag {
    /// Its mark in a unified diff.
    pub fn mark(self) -> char {
        match self {
            Tag::Context => ' ',
            Tag::Removed => '-',
            Tag::Added => '+',
        }
    }
}

impl Hunk {
    /// `@@ -1,3 +1,4 @@`, a count of one left out as `diff -u` does.
    pub fn header(&self) -> String {
        let range = |start: usize, lines: usize| match lines {
            1 => format!("{start}"),
            _ => format!("{start},{lines}"),
        };
        format!(
            "@@ -{} +{} @@",
            range(self.old_start, self.old_lines),
            range(self.new_start, self.new_lines)
        )
    }
}

impl ContentDiff {
    /// The diff from `old` to `new` (`None`: the side is absent, shown as empty). `show` is the
    /// resource's word on whether its content may be shown at all (see the kinds' `shows_content`).
    pub fn new(
        from: &'static str,
        to: &'static str,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        show: bool,
    ) -> ContentDiff {
        let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
        let body = if !show {
            Body::Secret
        } else {
            match (text(old), text(new)) {
                (Some(old), Some(new)) => {
                    let (hunks, omitted_lines) = unified(old, new);
                    Body::Text {
                        hunks,
                        omitted_lines,
                    }
                }
                _ => Body::Binary {
                    old_sha256: codec::sha256_hex(old),
                    new_sha256: codec::sha256_hex(new),
                },
            }
        };
        ContentDiff {
            from,
            to,
            old_size: old.len(),
            new_size: new.len(),
            body,
        }
    }

    /// About the bytes of memory it takes, allocations' overhead counted, for the run's bound
    /// on the diffs it holds.
    pub fn weight(&self) -> usize {
        use std::mem::size_of;
        let body = match &self.body {
            Body::Text { hunks, .. } => hunks
                .iter()
                .map(|h| {
                    let texts: usize = h.lines.iter().map(|l| l.text.capacity() + MALLOC).sum();
                    size_of::<Hunk>() + h.lines.capacity() * size_of::<Line>() + MALLOC + texts
                })
                .sum::<usize>(),
            Body::Binary {
                old_sha256,
                new_sha256,
            } => old_sha256.capacity() + new_sha256.capacity() + 2 * MALLOC,
            Body::Secret => 0,
        };
        size_of::<ContentDiff>() + MALLOC + body
    }
}

/// The text of `bytes`, if it is text: UTF-8 without NUL.
fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|t| !t.contains('\0'))
}

/// One step of an edit script, from the old lines to the new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Same,
    Delete,
    Insert,
}

/// Lines of `text`, each with its newline (the last may have none).
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The hunks of `diff -u old new`, cut at `MAX_LINES` and `MAX_BYTES`, and how many lines were
/// cut.
fn unified(old: &str, new: &str) -> (Vec<Hunk>, usize) {
    let (a, b) = (lines(old), lines(new));
    let script = edit_script(&a, &b);
    let mut hunks = Vec::new();
    let (mut shown, mut bytes, mut omitted) = (0, 0, 0);
    // Old and new line numbers at step `at` of the script, walked forward once.
    let (mut at, mut i, mut j) = (0, 0, 0);
    for (start, end) in hunk_ranges(&script) {
        for &edit in &script[at..start] {
            (i, j) = advance(edit, i, j);
        }
        at = end;
        let (old_from, new_from) = (i, j);
        let mut lines = Vec::with_capacity((end - start).min(MAX_LINES.saturating_sub(shown)));
        for &edit in &script[start..end] {
            let (tag, line) = match edit {
                Edit::Same => (Tag::Context, a[i]),
                Edit::Delete => (Tag::Removed, a[i]),
                Edit::Insert => (Tag::Added, b[j]),
            };
            (i, j) = advance(edit, i, j);
            let text = line.strip_suffix('\n');
            if shown >= MAX_LINES || bytes + line.len() > MAX_BYTES {
                omitted += 1;
                continue;
            }
            shown += 1;
            bytes += line.len();
            lines.push(Line {
                tag,
                text: text.unwrap_or(line).to_string(),
                no_newline: text.is_none(),
            });
        }
        let (old_lines, new_lines) = (i - old_from, j - new_from);
        // `diff -u` numbers an empty range by the line before it.
        let start = |from: usize, count: usize| if count == 0 { from } else { from + 1 };
        hunks.push(Hunk {
            old_start: start(old_from, old_lines),
            old_lines,
            new_start: start(new_from, new_lines),
            new_lines,
            lines,
        });
    }
    // A hunk all of whose lines were cut is not shown at all.
    hunks.retain(|h| !h.lines.is_empty());
    (hunks, omitted)
}

fn advance(edit: Edit, i: usize, j: usize) -> (usize, usize) {
    match edit {
        Edit::Same => (i + 1, j + 1),
        Edit::Delete => (i + 1, j),
        Edit::Insert => (i, j + 1),
    }
}

/// The script's hunks as ranges of its steps: each change with `CONTEXT` unchanged lines around
/// it, changes closer than twice that in one hunk.
fn hunk_ranges(script: &[Edit]) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut at = 0;
    while at < script.len() {
        if script[at] == Edit::Same {
            at += 1;
            continue;
        }
        let mut end = at;
        while end < script.len() && script[end] != Edit::Same {
            end += 1;
        }
        let from = at.saturating_sub(CONTEXT);
        let to = (end + CONTEXT).min(script.len());
        match ranges.last_mut() {
            Some(last) if last.1 >= from => last.1 = to,
            _ => ranges.push((from, to)),
        }
        at = end;
    }
    ranges
}

/// The shortest edit script from `a` to `b` (Myers), the common head and tail taken off first;
/// in each run of changes, the deletions come before the insertions, as `diff` prints them.
fn edit_script<'t>(a: &[&'t str], b: &[&'t str]) -> Vec<Edit> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    // One side empty (a file created or removed): nothing to search.
    let found = match a.is_empty() || b.is_empty() {
        true => None,
        false => {
            // Lines compared as numbers, one per distinct line.
            let mut ids: HashMap<&'t str, u32> = HashMap::new();
            let mut id = |line: &'t str| {
                let next = ids.len() as u32;
                *ids.entry(line).or_insert(next)
            };
            let a_ids: Vec<u32> = a.iter().map(|l| id(l)).collect();
            let b_ids: Vec<u32> = b.iter().map(|l| id(l)).collect();
            myers(&a_ids, &b_ids)
        }
    };
    let middle = found.unwrap_or_else(|| {
        let mut all = vec![Edit::Delete; a.len()];
        all.resize(a.len() + b.len(), Edit::Insert);
        all
    });
    let mut script = vec![Edit::Same; head];
    script.extend(deletions_first(middle));
    script.resize(script.len() + tail, Edit::Same);
    script
}

/// Each run of changes reordered: its deletions, then its insertions.
fn deletions_first(mut script: Vec<Edit>) -> Vec<Edit> {
    let mut at = 0;
    while at < script.len() {
        let end = (at..script.len())
            .find(|&e| script[e] == Edit::Same)
            .unwrap_or(script.len());
        script[at..end].sort_by_key(|e| *e == Edit::Insert);
        at = end + 1;
    }
    script
}

/// Myers' O((N+M)D) search for the shortest edit script, keeping each round's frontier to walk
/// back along; `None` past `MAX_EDITS` differing lines.
fn myers(a: &[u32], b: &[u32]) -> Option<Vec<Edit>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (a.len() + b.len()).min(MAX_EDITS) as isize;
    // The furthest x on each diagonal k = x - y, at v[k + offset].
    let offset = max + 1;
    let mut v = vec![0isize; 2 * max as usize + 3];
    // Before round d, the frontier over diagonals -d-1..=d+1 (as u32: half the memory).
    let mut trace: Vec<Vec<u32>> = Vec::new();
    for d in 0..=max {
        let frontier = &v[(offset - d - 1) as usize..=(offset + d + 1) as usize];
        trace.push(frontier.iter().map(|&x| x as u32).collect());
        for k in (-d..=d).step_by(2) {
            let at = (k + offset) as usize;
            let mut x = if k == -d || (k != d && v[at - 1] < v[at + 1]) {
                v[at + 1]
            } else {
                v[at - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[at] = x;
            if x >= n && y >= m {
                return Some(walk_back(&trace, n, m));
            }
        }
    }
    None
}

/// The edit script the frontiers in `trace` lead along, from (0, 0) to (n, m).
fn walk_back(trace: &[Vec<u32>], n: isize, m: isize) -> Vec<Edit> {
    let mut script = Vec::new();
    let (mut x, mut y) = (n, m);
    for (d, v) in trace.iter().enumerate().rev() {
        let d = d as isize;
        // The frontier before round d, indexed by k + d + 1.
        let at = |k: isize| v[(k + d + 1) as usize] as isize;
        let k = x - y;
        let prev_k = if k == -d || (k != d && at(k - 1) < at(k + 1)) {
            k + 1
        } else {
            k - 1
        };
        let prev_x = if d == 0 { 0 } else { at(prev_k) };
        let prev_y = if d == 0 { 0 } else { prev_x - prev_k };
        while x > prev_x && y > prev_y {
            script.push(Edit::Same);
            x -= 1;
            y -= 1;
        }
        if d > 0 {
            script.push(if x == prev_x {
                Edit::Insert
            } else {
                Edit::Delete
            });
        }
        (x, y) = (prev_x, prev_y);
    }
    script.reverse();
    script
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::testutil::TempDir;

    /// The unified text of `hunks`, as `diff -u` prints it after its two header lines.
    fn render(hunks: &[Hunk]) -> String {
        let mut out = String::new();
        for h in hunks {
            out += &h.header();
            out += "\n";
            for l in &h.lines {
                out.push(l.tag.mark());
                out += &l.text;
                out += "\n";
                if l.no_newline {
                    out += "\\ No newline at end of file\n";
                }
            }
        }
        out
    }

    fn diff_text(old: &str, new: &str) -> String {
        match ContentDiff::new("a", "b", Some(old.as_bytes()), Some(new.as_bytes()), true).body {
            Body::Text { hunks, .. } => render(&hunks),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_changed_line_is_one_hunk_with_three_lines_of_context() {
        let old = "1\n2\n3\n4\nport = 80\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nport = 8080\n6\n7\n8\n9\n";
        assert_eq!(
            diff_text(old, new),
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-port = 80\n+port = 8080\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn added_and_removed_content_is_all_one_sign() {
        assert_eq!(diff_text("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
        assert_eq!(diff_text("a\n", ""), "@@ -1 +0,0 @@\n-a\n");
        assert_eq!(diff_text("", ""), "");
        assert_eq!(
            diff_text("a", "a\n"),
            "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n"
        );
    }

    #[test]
    fn binary_and_secret_content_is_never_shown() {
        let d = ContentDiff::new(
            "on the machine",
            "declared",
            Some(b"a\0b"),
            Some(b"ab"),
            true,
        );
        assert_eq!((d.old_size, d.new_size), (3, 2));
        assert_eq!(
            d.body,
            Body::Binary {
                old_sha256: codec::sha256_hex(b"a\0b"),
                new_sha256: codec::sha256_hex(b"ab"),
            }
        );
        let d = ContentDiff::new("absent", "declared", None, Some(&[0xff, 0xfe]), true);
        assert!(matches!(d.body, Body::Binary { .. }), "{d:?}");
        let d = ContentDiff::new("absent", "declared", None, Some(b"pw=hunter2\n"), false);
        assert_eq!((d.body, d.old_size, d.new_size), (Body::Secret, 0, 11));
    }

    #[test]
    fn a_long_diff_is_cut_and_says_how_much() {
        let new: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let Body::Text {
            hunks,
            omitted_lines,
        } = ContentDiff::new("a", "b", None, Some(new.as_bytes()), true).body
        else {
            panic!()
        };
        assert_eq!(hunks.len(), 1);
        assert_eq!((hunks[0].new_lines, hunks[0].lines.len()), (500, MAX_LINES));
        assert_eq!(omitted_lines, 500 - MAX_LINES);
        // Few lines, too long to show whole: cut by bytes.
        let long = "x".repeat(MAX_BYTES);
        let Body::Text {
            hunks,
            omitted_lines,
        } = ContentDiff::new("a", "b", Some(b"a\n"), Some(long.as_bytes()), true).body
        else {
            panic!()
        };
        assert_eq!((hunks[0].lines.len(), omitted_lines), (1, 1));
    }

    #[test]
    fn the_json_carries_the_hunks() {
        let d = ContentDiff::new(
            "on the machine",
            "declared",
            Some(b"a\nb"),
            Some(b"a\nc"),
            true,
        );
        assert_eq!(
            serde_json::to_value(&d).unwrap().to_string(),
            concat!(
                r#"{"content":"text","from":"on the machine","hunks":[{"lines":["#,
                r#"{"tag":"context","text":"a"},{"no_newline":true,"tag":"removed","text":"b"},"#,
                r#"{"no_newline":true,"tag":"added","text":"c"}],"new_lines":2,"new_start":1,"#,
                r#""old_lines":2,"old_start":1}],"new_size":3,"old_size":3,"omitted_lines":0,"#,
                r#""to":"declared"}"#
            )
        );
    }

    /// A small deterministic generator (xorshift), so a failing pair can be made again.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A file of short lines from a small alphabet (so lines repeat, as in real configs), and an
    /// edit of it: lines changed, deleted, inserted; the last newline sometimes dropped.
    fn pair(rng: &mut Rng) -> (String, String) {
        let words = ["a", "b", "c", "port = 80", "", "[Service]", "x y"];
        let mut old: Vec<String> = (0..rng.below(40))
            .map(|_| words[rng.below(words.len() as u64) as usize].to_string())
            .collect();
        let mut new = old.clone();
        for _ in 0..rng.below(8) {
            let at = rng.below(new.len() as u64 + 1) as usize;
            let word = words[rng.below(words.len() as u64) as usize].to_string();
            match rng.below(3) {
                0 if at < new.len() => new[at] = word,
                1 if at < new.len() => drop(new.remove(at)),
                _ => new.insert(at, word),
            }
        }
        if rng.below(10) == 0 {
            old.clear();
        }
        let join = |lines: &[String], rng: &mut Rng| {
            let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            if rng.below(5) == 0 {
                text.pop();
            }
            text
        };
        (join(&old, rng), join(&new, rng))
    }

    /// The lines removed and added in a unified diff's body.
    fn changed_lines(unified: &str) -> usize {
        unified
            .lines()
            .filter(|l| l.starts_with(['-', '+']) && !l.starts_with("---") && !l.starts_with("+++"))
            .count()
    }

    /// Differential test against GNU diff and patch: over many generated pairs, our hunks applied
    /// by the real `patch` make the new file, and change no more lines than `diff -u`'s (Myers
    /// is minimal; hunk boundaries may differ between equally short scripts). Where the two
    /// agree line for line, the text is the same.
    #[test]
    fn agrees_with_gnu_diff_and_patch() {
        let dir = TempDir::new("diff");
        let (old_path, new_path) = (dir.path().join("old"), dir.path().join("new"));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut same_text = 0;
        for round in 0..300 {
            let (old, new) = pair(&mut rng);
            std::fs::write(&old_path, &old).unwrap();
            std::fs::write(&new_path, &new).unwrap();
            let theirs = std::process::Command::new("diff")
                .args(["-u", "--label", "old", "--label", "new"])
                .arg(&old_path)
                .arg(&new_path)
                .output()
                .expect("GNU diff runs");
            let theirs = String::from_utf8(theirs.stdout).unwrap();
            let theirs_body = theirs.splitn(3, '\n').nth(2).unwrap_or_default();
            let ours = diff_text(&old, &new);
            assert_eq!(ours.is_empty(), theirs.is_empty(), "round {round}");
            assert!(
                changed_lines(&ours) <= changed_lines(theirs_body),
                "round {round}: ours\n{ours}theirs\n{theirs}"
            );
            if ours == theirs_body {
                same_text += 1;
            }
            if ours.is_empty() {
                continue;
            }
            let patch = format!("--- old\n+++ new\n{ours}");
            let mut child = std::process::Command::new("patch")
                .args(["-s", "-f", "-o", "-"])
                .arg(&old_path)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("GNU patch runs");
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(patch.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}\n{patch}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                new,
                "round {round}:\n{patch}"
            );
        }
        // Most pairs come out identical to GNU diff's text, hunks and numbers alike.
        eprintln!("{same_text} of 300 diffs identical to GNU diff's");
        assert!(same_text > 200, "{same_text} of 300 identical");
    }

    #[test]
    fn past_the_edit_bound_the_diff_is_still_correct() {
        let old: String = (0..3000).map(|i| format!("{i}\n")).collect();
        let new: String = (0..3000).map(|i| format!("{}\n", i * 7)).collect();
        let (a, b) = (lines(&old), lines(&new));
        let script = edit_script(&a, &b);
        let (mut i, mut j) = (0, 0);
        let mut rebuilt = String::new();
        for e in script {
            match e {
                Edit::Same => rebuilt += a[i],
                Edit::Insert => rebuilt += b[j],
                Edit::Delete => {}
            }
            (i, j) = advance(e, i, j);
        }
        assert_eq!((i, j), (a.len(), b.len()));
        assert_eq!(rebuilt, new);
    }
}
