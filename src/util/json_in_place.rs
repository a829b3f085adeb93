//! JSON strings read where they lie: a top-level member found in a JSON text, a string
//! unescaped in place in the buffer that holds it, which becomes the `String`, and a JSON text
//! copied from a stream without one member's string. For the large strings (a declaration in a
//! `declare` frame, in an envelope, in the store's file) that serde would hold three times: the
//! bytes, its scratch buffer for the unescaped string, and the copy it makes of that.

use std::io::{self, Read};
use std::ops::Range;

/// Where the value of the top-level member `name` of the JSON object `json` is, or `None` when
/// it has none or is not an object. Only for text serde has checked: it skips values by their
/// shape (strings by their quotes, nesting by brackets) and never fails on any input.
pub fn member(json: &[u8], name: &str) -> Option<Range<usize>> {
    let mut at = skip_space(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        let key_start = skip_space(json, at);
        if json.get(key_start) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(json, key_start)?;
        let colon = skip_space(json, key_end);
        if json.get(colon) != Some(&b':') {
            return None;
        }
        let value_start = skip_space(json, colon + 1);
        let value_end = value_end(json, value_start)?;
        if string_is(&json[key_start..key_end], name) {
            return Some(value_start..value_end);
        }
        at = skip_space(json, value_end);
        if json.get(at) != Some(&b',') {
            return None;
        }
        at += 1;
    }
}

fn skip_space(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(|b| b" \t\r\n".contains(b)) {
        at += 1;
    }
    at
}

/// Just past the string that starts (with its quote) at `start`.
pub fn string_end(json: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        at += json
            .get(at..)?
            .iter()
            .position(|&b| b == b'"' || b == b'\\')?;
        match json[at] {
            b'"' => return Some(at + 1),
            _ => at += 2,
        }
    }
}

/// Just past the value that starts at `start`.
fn value_end(json: &[u8], start: usize) -> Option<usize> {
    match json.get(start)? {
        b'"' => string_end(json, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = start;
            loop {
                match json.get(at)? {
                    b'"' => at = string_end(json, at)?,
                    b'{' | b'[' => {
                        depth += 1;
                        at += 1;
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        at += 1;
                        if depth == 0 {
                            return Some(at);
                        }
                    }
                    _ => at += 1,
                }
            }
        }
        _ => {
            let len = json[start..]
                .iter()
                .position(|b| b",}] \t\r\n".contains(b))
                .unwrap_or(json.len() - start);
            Some(start + len)
        }
    }
}

/// Whether the JSON string `quoted` (with its quotes) says `text`, however it is escaped.
pub fn string_is(quoted: &[u8], text: &str) -> bool {
    if !quoted.contains(&b'\\') {
        return quoted.get(1..quoted.len().saturating_sub(1)) == Some(text.as_bytes());
    }
    let span = 0..quoted.len();
    unescape_in_place(quoted.to_vec(), span).is_ok_and(|s| s == text)
}

/// The JSON string at `span` of `buf` (its quotes included), unescaped and moved to the front of
/// `buf`, which becomes it: unescaping only ever shortens, so it writes behind where it reads.
pub fn unescape_in_place(mut buf: Vec<u8>, span: Range<usize>) -> Result<String, String> {
    let end = span.end - 1; // the closing quote
    let mut read = span.start + 1;
    let mut write = 0;
    while read < end {
        // Byte by byte: the runs between escapes are short (a few bytes in a declaration's
        // JSON), and a `memmove` call for each costs more than it moves (musl's most of all).
        let b = buf[read];
        if b != b'\\' && b >= 0x20 {
            buf[write] = b;
            read += 1;
            write += 1;
            continue;
        }
        if b != b'\\' {
            return Err(format!(
                "a control character (0x{:02x}) in a string",
                buf[read]
            ));
        }
        if read + 1 == end {
            return Err("a string that ends in \\".into());
        }
        let escape = buf[read + 1];
        read += 2;
        let byte = match escape {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (c, used) = unicode_escape(&buf[read..end])?;
                read += used;
                let mut utf8 = [0u8; 4];
                let encoded = c.encode_utf8(&mut utf8).as_bytes();
                buf[write..write + encoded.len()].copy_from_slice(encoded);
                write += encoded.len();
                continue;
            }
            other => return Err(format!("\\{} is not an escape", other as char)),
        };
        buf[write] = byte;
        write += 1;
    }
    buf.truncate(write);
    buf.shrink_to_fit();
    String::from_utf8(buf).map_err(|e| format!("not UTF-8: {e}"))
}

/// The character of a `\u` escape, `after` starting just past the `\u`, and how many bytes of
/// `after` it took: 4, or 10 for a surrogate pair (`\ud83d\ude00`).
fn unicode_escape(after: &[u8]) -> Result<(char, usize), String> {
    let hex = |at: usize| -> Result<u32, String> {
        let digits = after.get(at..at + 4).ok_or("a \\u escape cut short")?;
        match std::str::from_utf8(digits) {
            Ok(d) if digits.iter().all(u8::is_ascii_hexdigit) => {
                Ok(u32::from_str_radix(d, 16).unwrap_or_default())
            }
            _ => Err(format!(
                "\\u{} is not an escape",
                String::from_utf8_lossy(digits)
            )),
        }
    };
    let first = hex(0)?;
    if !(0xd800..0xdc00).contains(&first) {
        return char::from_u32(first)
            .map(|c| (c, 4))
            .ok_or_else(|| format!("\\u{first:04x}: a lone surrogate"));
    }
    let second = match after.get(4..6) {
        Some(b"\\u") => hex(6)?,
        _ => return Err(format!("\\u{first:04x}: a lone surrogate")),
    };
    if !(0xdc00..0xe000).contains(&second) {
        return Err(format!("\\u{first:04x}: a lone surrogate"));
    }
    let c = 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00);
    char::from_u32(c)
        .map(|c| (c, 10))
        .ok_or_else(|| format!("\\u{first:04x}\\u{second:04x} is not a character"))
}

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

    #[test]
    fn only_a_top_level_member_is_found() {
        let json = br#" { "a": {"text": "no"}, "b" : [1, "]", {"}": 2}], "c": -1.5e3, "text" : "yes\"" } "#;
        let at = |name| member(json, name).map(|r| String::from_utf8_lossy(&json[r]).into_owned());
        assert_eq!(at("text").as_deref(), Some(r#""yes\"""#));
        assert_eq!(at("c").as_deref(), Some("-1.5e3"));
        assert_eq!(at("b").as_deref(), Some(r#"[1, "]", {"}": 2}]"#));
        assert_eq!(at("d"), None);
        for not_an_object in [
            &br#"["text", "a"]"#[..],
            b"",
            b"{",
            br#"{"text""#,
            br#"{"text": "cut"#,
        ] {
            assert_eq!(member(not_an_object, "text"), None);
        }
        assert!(string_is(br#""te\u0078t""#, "text"));
        assert!(!string_is(br#""tex""#, "text"));
    }

    #[test]
    fn a_string_is_unescaped_to_the_front_of_its_buffer() {
        let buf = br#"{"x": "a\"b\\c\/d\b\f\n\r\t\u00e9\ud83e\udd80"}"#.to_vec();
        let span = member(&buf, "x").unwrap();
        let text = unescape_in_place(buf, span).unwrap();
        assert_eq!(text, "a\"b\\c/d\u{8}\u{c}\n\r\t\u{e9}\u{1f980}");
        assert_eq!(text.capacity(), text.len());
    }

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
