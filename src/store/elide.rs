//! A JSON object read from a stream with the characters of one top-level string member left out:
//! the head of the declaration in force read without its text, in a buffer of the head's size.

use std::io::{self, Read};

/// The JSON `reader` holds, with the string value of its top-level member `name` emptied (`""`)
/// and everything else copied as it is, for serde to parse or refuse. A key spelled with escapes
/// is not recognised, and its value is copied: the result is the same, only larger.
pub fn without_member(mut reader: impl Read, name: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut scan = Scan::default();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        scan.feed(&buf[..n], name, &mut out);
    }
}

/// Where the copy is, between one read and the next.
#[derive(Default)]
struct Scan {
    /// Nesting: 1 inside the top-level object.
    depth: u32,
    in_string: bool,
    /// The last byte was a backslash inside a string.
    escaped: bool,
    /// Inside the string left out.
    skipping: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// Where the key being read starts in the copy.
    key_start: Option<usize>,
    /// The last key was `name`, and its value has not started.
    after_name: bool,
}

impl Scan {
    fn feed(&mut self, bytes: &[u8], name: &[u8], out: &mut Vec<u8>) {
        let mut at = 0;
        while at < bytes.len() {
            if self.skipping {
                if std::mem::take(&mut self.escaped) {
                    at += 1;
                    continue;
                }
                match bytes[at..].iter().position(|&b| b == b'"' || b == b'\\') {
                    None => at = bytes.len(),
                    Some(k) if bytes[at + k] == b'\\' => {
                        self.escaped = true;
                        at += k + 1;
                    }
                    Some(k) => {
                        out.push(b'"');
                        self.skipping = false;
                        self.in_string = false;
                        at += k + 1;
                    }
                }
                continue;
            }
            let b = bytes[at];
            at += 1;
            out.push(b);
            if self.in_string {
                if std::mem::take(&mut self.escaped) {
                    continue;
                }
                match b {
                    b'\\' => self.escaped = true,
                    b'"' => {
                        self.in_string = false;
                        if let Some(start) = self.key_start.take() {
                            self.after_name = out[start..out.len() - 1] == *name;
                        }
                    }
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && std::mem::take(&mut self.expect_key) {
                        self.key_start = Some(out.len());
                    } else if self.depth == 1 && std::mem::take(&mut self.after_name) {
                        self.skipping = true;
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    self.expect_key = self.depth == 1 && b == b'{';
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 1 => {
                    self.expect_key = true;
                    self.after_name = false;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out its bytes `piece` at a time, as reads that end anywhere would.
    struct Pieces<'a> {
        bytes: &'a [u8],
        piece: usize,
    }

    impl Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.piece.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn only_the_top_level_members_string_is_left_out_wherever_the_reads_end() {
        let cases = [
            (
                r#"{"a": 1, "text": "x\"y\\", "b": {"text": "kept"}, "c": ["text", "s"], "d": "text"}"#,
                r#"{"a": 1, "text": "", "b": {"text": "kept"}, "c": ["text", "s"], "d": "text"}"#,
            ),
            (
                "{\n  \"text\" :\n \"{\\\"text\\\": \\\"\\\\\\\"\\\"}\",\n  \"z\": [{\"text\": \"t\"}]\n}",
                "{\n  \"text\" :\n \"\",\n  \"z\": [{\"text\": \"t\"}]\n}",
            ),
            (r#"{"text": 5, "x": "y"}"#, r#"{"text": 5, "x": "y"}"#),
            (r#"{"tex": "a", "textx": "b"}"#, r#"{"tex": "a", "textx": "b"}"#),
            (r#"["text", "a"]"#, r#"["text", "a"]"#),
            (r#"{"text": "cut short"#, r#"{"text": ""#),
        ];
        for (json, expected) in cases {
            for piece in 1..=json.len() {
                let reader = Pieces {
                    bytes: json.as_bytes(),
                    piece,
                };
                let out = without_member(reader, b"text").unwrap();
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    expected,
                    "pieces of {piece}"
                );
            }
        }
    }
}
