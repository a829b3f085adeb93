//! systemd's unit-file syntax, read the way systemd reads it (systemd.syntax(7), systemd.unit(5)):
//! unit names and their parts, sections and `Key=value` directives with comments and `\`
//! continuations, space-separated lists, and the specifiers (`%n`, `%i`, ...) a value may carry.
//! Pure; the self-refusal model (`selfref`) asks it what a unit file orders systemd to do.

/// Every unit type systemd loads a fragment or drop-ins for: the declarable ones, then `device`
/// and `scope` units, which systemd makes at runtime but still reads files for
/// (`dev-sda.device.d/`, `init.scope.d/`).
pub const LOADED_TYPES: [&str; 11] = [
    "service",
    "socket",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "slice",
    "device",
    "scope",
];

/// Unit types a declaration may name: all but the last two loaded ones (`device` and `scope`
/// units are made by systemd itself).
pub const DECLARABLE_TYPES: &[&str] = LOADED_TYPES.split_at(LOADED_TYPES.len() - 2).0;

/// systemd's limit on a unit name (`UNIT_NAME_MAX` less its NUL).
const MAX_NAME_BYTES: usize = 255;

/// A unit name split as systemd splits it: `PREFIX[@INSTANCE].TYPE`. A template has an empty
/// instance (`getty@.service`); the instance is everything after the first `@`, so it may hold
/// further `@`s (`foo@bar@baz.service`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitName<'a> {
    pub prefix: &'a str,
    pub instance: Option<&'a str>,
    pub unit_type: &'a str,
}

impl<'a> UnitName<'a> {
    /// Validates `name` by systemd's rules (`unit_name_is_valid`) for a declarable type.
    pub fn parse(name: &'a str) -> Result<UnitName<'a>, String> {
        Self::parse_with(name, DECLARABLE_TYPES)
    }

    /// Validates `name` for any type systemd loads files for (`LOADED_TYPES`).
    pub fn parse_loaded(name: &'a str) -> Result<UnitName<'a>, String> {
        Self::parse_with(name, &LOADED_TYPES)
    }

    fn parse_with(name: &'a str, types: &[&str]) -> Result<UnitName<'a>, String> {
        if name.len() > MAX_NAME_BYTES {
            return Err(format!(
                "unit name is longer than {MAX_NAME_BYTES} bytes (systemd's limit)"
            ));
        }
        let known = || {
            types
                .iter()
                .map(|t| format!(".{t}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let Some((stem, unit_type)) = name.rsplit_once('.').filter(|(_, t)| types.contains(t))
        else {
            return Err(format!(
                "unit name {name:?} has no known suffix ({})",
                known()
            ));
        };
        if stem.is_empty() {
            return Err(format!("unit name {name:?} has nothing before its suffix"));
        }
        if stem.starts_with('@') {
            return Err(format!(
                "unit name {name:?} starts with '@' (systemd needs a prefix before it)"
            ));
        }
        let (prefix, instance) = match stem.split_once('@') {
            Some((prefix, instance)) => (prefix, Some(instance)),
            None => (stem, None),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || ":-_.\\".contains(c);
        if let Some(c) = prefix.chars().find(|c| !valid(*c)) {
            return Err(format!("unit name {name:?} contains {c:?}"));
        }
        if let Some(c) = instance
            .unwrap_or_default()
            .chars()
            .find(|c| !(valid(*c) || *c == '@'))
        {
            return Err(format!("unit name {name:?} contains {c:?}"));
        }
        Ok(UnitName {
            prefix,
            instance,
            unit_type,
        })
    }

    pub fn is_template(&self) -> bool {
        self.instance == Some("")
    }

    /// The template an instance is made from (`x@i.service` -> `x@.service`).
    pub fn template(&self) -> Option<String> {
        match self.instance {
            Some(i) if !i.is_empty() => Some(format!("{}@.{}", self.prefix, self.unit_type)),
            _ => None,
        }
    }
}

/// One `Key=value` assignment, with the section it is in and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub section: String,
    pub key: String,
    pub value: String,
    pub line: usize,
}

/// The directives of a unit file or drop-in, in order, as systemd's config parser
/// (`config_parse`) reads them: lines end as `read_line` ends them (see `lines`); a line whose
/// first non-blank character is `#` or `;` is a comment, even inside a continuation; the first
/// U+FEFF met at the very start of a line that is not a comment is dropped, once per file; a line
/// ending in an unescaped `\` continues on the next (the `\` becomes a space); `[Section]`
/// starts a section; keys and values are trimmed. Assignments before any section and lines
/// without `=` are ignored, as systemd ignores them.
pub fn parse(text: &str) -> Vec<Directive> {
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    let mut continuation: Option<(String, usize)> = None;
    let mut bom_seen = false;
    for (index, raw) in lines(text).enumerate() {
        let number = index + 1;
        if raw.trim_start_matches(is_blank).starts_with(['#', ';']) {
            continue;
        }
        let raw = match raw.strip_prefix('\u{feff}') {
            Some(rest) if !bom_seen => {
                bom_seen = true;
                rest
            }
            _ => raw,
        };
        let (mut line, start) = match continuation.take() {
            Some((mut joined, start)) => {
                joined.push_str(raw);
                (joined, start)
            }
            None => (raw.to_string(), number),
        };
        // The part before `raw` ended in a continuation, now a space: only `raw` can escape.
        if ends_in_unescaped_backslash(raw) {
            line.pop();
            line.push(' ');
            continuation = Some((line, start));
            continue;
        }
        directive(&line, start, &mut section, &mut out);
    }
    // systemd parses a continuation still open at the end of the file as a last line.
    if let Some((line, start)) = continuation {
        directive(&line, start, &mut section, &mut out);
    }
    out
}

/// One logical line: a section header, an assignment in a section, or nothing.
fn directive(line: &str, start: usize, section: &mut Option<String>, out: &mut Vec<Directive>) {
    let line = line.trim_matches(is_blank);
    if line.is_empty() {
        return;
    }
    if let Some(name) = line.strip_prefix('[') {
        *section = name.strip_suffix(']').map(str::to_string);
        return;
    }
    let (Some(section), Some((key, value))) = (section.as_ref(), line.split_once('=')) else {
        return;
    };
    out.push(Directive {
        section: section.clone(),
        key: key.trim_matches(is_blank).to_string(),
        value: value.trim_matches(is_blank).to_string(),
        line: start,
    });
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Splits where systemd's `read_line` ends lines: at `\n`, `\r` or NUL, a run of them being one
/// line end while no kind repeats and no NUL came before (`\n`, `\r\n`, `\n\r`, `\r\0`,
/// `\n\r\0`, ... are each one; `\n\n` and `\0\n` are two).
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        let Some(at) = current.find(['\n', '\r', '\0']) else {
            rest = None;
            return (!current.is_empty()).then_some(current);
        };
        let mut seen = 0u8;
        let mut end = at;
        for byte in current[at..].bytes() {
            let kind = match byte {
                b'\n' => 1,
                b'\r' => 2,
                0 => 4,
                _ => break,
            };
            if seen & (kind | 4) != 0 {
                break;
            }
            seen |= kind;
            end += 1;
        }
        rest = Some(&current[end..]);
        Some(&current[..at])
    })
}

/// Where `text` holds something systemd may read otherwise than it looks (or than this reader,
/// or another version of systemd, does): the line (as an editor counts them) and what it is,
/// with how to write it plainly. A unit file or drop-in with any of these is refused whatever
/// it says, so the rest of the model reads only plain text.
pub fn unplain(text: &str) -> Option<(usize, &'static str)> {
    let mut line = 1;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let odd = match c {
            '\n' => {
                line += 1;
                None
            }
            '\0' => Some("a NUL byte: systemd ends a line there; write the file without NUL bytes"),
            '\r' if chars.peek().map(|(_, c)| *c) != Some('\n') => Some(
                "a carriage return not followed by a line feed: systemd ends a line there, and \
                 takes \\n\\r as one line end (which carries a `\\` continuation on); end lines \
                 with \\n or \\r\\n only",
            ),
            '\u{feff}' if at > 0 => Some(
                "a byte-order mark (U+FEFF) after the start of the file: systemd drops the first \
                 one it meets at the start of any line, which makes a hidden line live; write the \
                 file without it",
            ),
            _ => None,
        };
        if let Some(odd) = odd {
            return Some((line, odd));
        }
    }
    let mut in_continuation = false;
    for (index, raw) in text.split('\n').enumerate() {
        let trimmed = raw.trim_start_matches(is_blank);
        if trimmed.starts_with(".include") {
            return Some((
                index + 1,
                "`.include`: older systemd reads the file it names into this one; write its \
                 content here or in a drop-in",
            ));
        }
        if trimmed.starts_with(['#', ';']) {
            if in_continuation {
                return Some((
                    index + 1,
                    "a comment inside a `\\` continuation: systemd skips it and carries the \
                     directive on past it, older versions end the directive there; write the \
                     directive without comments in it",
                ));
            }
            continue;
        }
        in_continuation = ends_in_unescaped_backslash(raw.trim_end_matches('\r'));
    }
    None
}

fn ends_in_unescaped_backslash(line: &str) -> bool {
    let mut escaped = false;
    for c in line.chars() {
        escaped = !escaped && c == '\\';
    }
    escaped
}

/// Every word systemd could take for a unit name from `value`, whichever way it reads it:
/// `[Unit]` lists keep a backslash as a plain character and split at blanks (`junk\ x.service` is
/// two words), `Also=` and `Sockets=` drop a backslash before any character (`x\-y` is `x-y`),
/// `[Install]` lists are unquoted, a single-valued `Unit=` takes the whole value; a `\xNN` escape
/// is also taken decoded (stricter than systemd). Each reading is cut at every character a unit
/// name cannot hold (a specifier, `%` and the character after it, stays in its word), so the
/// words hold every name any of these readings gives, and more.
pub fn unit_words(value: &str) -> Vec<String> {
    let mut readings = vec![value.to_string(), value.replace(['"', '\''], "")];
    for i in 0..readings.len() {
        readings.push(drop_backslashes(&readings[i]));
    }
    for i in 0..readings.len() {
        readings.push(decode_hex_escapes(&readings[i]));
    }
    let mut out: Vec<String> = Vec::new();
    for reading in &readings {
        let mut word = String::new();
        let mut chars = reading.chars();
        while let Some(c) = chars.next() {
            if c == '%' {
                word.push(c);
                word.extend(chars.next());
            } else if c.is_ascii_alphanumeric() || ":-_.\\@".contains(c) {
                word.push(c);
            } else if !word.is_empty() && !out.contains(&word) {
                out.push(std::mem::take(&mut word));
            } else {
                word.clear();
            }
        }
        if !word.is_empty() && !out.contains(&word) {
            out.push(word);
        }
    }
    out
}

/// A backslash dropped and the character after it kept, as `extract_first_word` does without
/// flags.
fn drop_backslashes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// What is known of the unit a file belongs to, for resolving its specifiers.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// A unit file or drop-in of one unit (an instance's own, or a plain unit's).
    Unit(UnitName<'a>),
    /// A template's file or drop-in: it applies to every instance, so the instance is unknown.
    Template(UnitName<'a>),
    /// A drop-in: it applies to the units with the name of its directory as their own or as an
    /// alias, or a prefix of it (`foo-.service.d/`), or every unit of the type (`service.d/`),
    /// and systemd resolves its specifiers from the unit's own name: only the type is sure.
    Type(&'a str),
}

/// A value with its specifiers resolved: literal text and the pieces that cannot be known here
/// (the host name, an instance of a template, ...), each of which may stand for any text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Unknown(char),
}

/// Resolves the specifiers of `value` (systemd.unit(5), "Specifiers") that depend only on the
/// unit's name: `%n %N %p %P %i %I %j %J %f %%`. Every other specifier, and a name specifier of
/// an unknown name, is left as `Piece::Unknown`: the caller decides whether that is safe.
pub fn resolve_specifiers(value: &str, owner: Owner) -> Vec<Piece> {
    let mut pieces: Vec<Piece> = Vec::new();
    let push_text = |pieces: &mut Vec<Piece>, text: &str| match pieces.last_mut() {
        Some(Piece::Text(t)) => t.push_str(text),
        _ => pieces.push(Piece::Text(text.to_string())),
    };
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            push_text(&mut pieces, c.encode_utf8(&mut [0; 4]));
            continue;
        }
        let Some(spec) = chars.next() else {
            pieces.push(Piece::Unknown('%'));
            break;
        };
        if let (Owner::Type(unit_type), 'n') = (owner, spec) {
            // Some name, then the type.
            pieces.push(Piece::Unknown(spec));
            push_text(&mut pieces, &format!(".{unit_type}"));
            continue;
        }
        match name_specifier(spec, owner) {
            Some(text) => push_text(&mut pieces, &text),
            None => pieces.push(Piece::Unknown(spec)),
        }
    }
    pieces
}

/// The value of a name specifier, if it is one and the name is known well enough.
fn name_specifier(spec: char, owner: Owner) -> Option<String> {
    if spec == '%' {
        return Some("%".into());
    }
    let (name, instance_known) = match owner {
        Owner::Unit(name) => (name, true),
        Owner::Template(name) => (name, false),
        Owner::Type(_) => return None,
    };
    let stem = match name.instance {
        Some(i) => format!("{}@{i}", name.prefix),
        None => name.prefix.to_string(),
    };
    let last = name.prefix.rsplit('-').next().unwrap_or(name.prefix);
    let instance = name.instance.unwrap_or_default();
    match spec {
        'p' => Some(name.prefix.to_string()),
        'P' => Some(unescape(name.prefix)),
        'j' => Some(last.to_string()),
        'J' => Some(unescape(last)),
        'n' if instance_known => Some(format!("{stem}.{}", name.unit_type)),
        'N' if instance_known => Some(stem),
        'i' if instance_known => Some(instance.to_string()),
        'I' if instance_known => Some(unescape(instance)),
        'f' if instance_known => Some(match name.instance {
            Some(i) => format!("/{}", unescape(i)),
            None => format!("/{}", unescape(name.prefix)),
        }),
        _ => None,
    }
}

/// `\xNN` escapes decoded, nothing else changed.
pub fn decode_hex_escapes(text: &str) -> String {
    if !text.contains("\\x") {
        return text.to_string();
    }
    unescape_with(text, false)
}

/// systemd's unit-name unescaping (`systemd-escape -u`): `-` is `/`, `\xNN` is that byte.
pub fn unescape(text: &str) -> String {
    unescape_with(text, true)
}

fn unescape_with(text: &str, dash_is_slash: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if dash_is_slash => out.push(b'/'),
            b'\\' if bytes.get(i + 1) == Some(&b'x') => {
                let hex = bytes
                    .get(i + 2..i + 4)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => out.push(b'\\'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `pieces` could be `name`: the text must match exactly, and each unknown piece may
/// stand for any text (including none). Linear in the pieces, whatever a hostile value holds: the
/// texts between unknowns are matched as a glob's literals, leftmost first.
pub fn could_be(pieces: &[Piece], name: &str) -> bool {
    // Literal segments between unknowns; consecutive unknowns are one.
    let mut segments: Vec<String> = vec![String::new()];
    for piece in pieces {
        match (piece, segments.last_mut()) {
            (Piece::Text(text), Some(last)) => last.push_str(text),
            _ => segments.push(String::new()),
        }
    }
    let (first, rest) = match segments.split_first() {
        Some((first, rest)) => (first.as_str(), rest),
        None => ("", &[][..]),
    };
    let Some(mut tail) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for segment in middle {
        match tail.find(segment.as_str()) {
            Some(at) => tail = &tail[at + segment.len()..],
            None => return false,
        }
    }
    tail.ends_with(last.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directives(text: &str) -> Vec<(String, String, String, usize)> {
        parse(text)
            .into_iter()
            .map(|d| (d.section, d.key, d.value, d.line))
            .collect()
    }

    fn d(section: &str, key: &str, value: &str, line: usize) -> (String, String, String, usize) {
        (section.into(), key.into(), value.into(), line)
    }

    #[test]
    fn unit_names_follow_systemds_rules() {
        fn ok(name: &str) -> UnitName<'_> {
            UnitName::parse(name).unwrap()
        }
        assert_eq!(
            ok("foo@bar@baz.service"),
            UnitName {
                prefix: "foo",
                instance: Some("bar@baz"),
                unit_type: "service"
            }
        );
        assert!(ok("getty@.service").is_template());
        assert_eq!(
            ok("getty@tty1.service").template().as_deref(),
            Some("getty@.service")
        );
        assert_eq!(
            ok("dbus-org.freedesktop.x.service").prefix,
            "dbus-org.freedesktop.x"
        );
        assert_eq!(ok("a\\x2db.mount").unit_type, "mount");
        for (name, message) in [
            ("@x.service", "starts with '@'"),
            ("@.service", "starts with '@'"),
            ("x.scope", "no known suffix"),
            ("x.device", "no known suffix"),
            ("x.service.bak", "no known suffix"),
            (".service", "nothing before its suffix"),
            ("a b.service", "contains ' '"),
            ("a@b/c.service", "contains '/'"),
            ("ä.service", "contains 'ä'"),
        ] {
            let err = UnitName::parse(name).unwrap_err();
            assert!(err.contains(message), "{name}: {err}");
        }
        let long = format!("{}.service", "a".repeat(247));
        assert_eq!(long.len(), 255);
        assert!(UnitName::parse(&long).is_ok());
        let too_long = format!("{}.service", "a".repeat(248));
        assert!(UnitName::parse(&too_long)
            .unwrap_err()
            .contains("longer than 255 bytes"));
    }

    #[test]
    fn sections_comments_and_continuations() {
        let text = "# comment\nIgnored=outside\n[Unit]\nDescription = a \\\n  b\n; c\n  # d\n\
                    Wants=x.service \\\n# inside a continuation\n y.service\nnoequals\n\
                    [Install]\r\nWantedBy=multi-user.target\rAlias=z.service\0Also=q.service";
        assert_eq!(
            directives(text),
            vec![
                d("Unit", "Description", "a    b", 4),
                d("Unit", "Wants", "x.service   y.service", 8),
                d("Install", "WantedBy", "multi-user.target", 13),
                d("Install", "Alias", "z.service", 14),
                d("Install", "Also", "q.service", 15),
            ]
        );
        // An escaped backslash does not continue; a continuation open at the end still counts.
        assert_eq!(
            directives("[Unit]\nA=x\\\\\nB=y \\"),
            vec![d("Unit", "A", "x\\\\", 2), d("Unit", "B", "y", 3)]
        );
        assert_eq!(
            directives("\u{feff}[Unit]\nA=1"),
            vec![d("Unit", "A", "1", 2)]
        );
        // A long chain of continuations is read in linear time.
        let chain = format!("[Unit]\nWants=a{}", " x\\\n".repeat(200_000));
        assert_eq!(parse(&chain).len(), 1);
    }

    #[test]
    fn line_ends_and_byte_order_marks_as_systemd_reads_them() {
        // One line end each, so the continuation carries on to `b`.
        for eol in [
            "\n", "\r", "\r\n", "\n\r", "\n\0", "\r\0", "\r\n\0", "\n\r\0", "\0",
        ] {
            assert_eq!(
                directives(&format!("[Unit]{eol}Wants=a \\{eol}b")),
                vec![d("Unit", "Wants", "a  b", 2)],
                "{eol:?}"
            );
        }
        // Two line ends: an empty line ends the continuation.
        for eol in ["\n\n", "\0\n", "\r\r", "\n\r\n", "\n\0\n"] {
            assert_eq!(
                directives(&format!("[Unit]\nWants=a \\{eol}b=c")),
                vec![d("Unit", "Wants", "a", 2), d("Unit", "b", "c", 4)],
                "{eol:?}"
            );
        }
        // The first U+FEFF at the start of a line that is not a comment is dropped, once.
        assert_eq!(
            directives("# c\n[X]\n\u{feff}[Unit]\n\u{feff}Wants=a\n"),
            vec![d("Unit", "\u{feff}Wants", "a", 4)]
        );
        assert_eq!(
            directives("\u{feff}# not a comment=1\n[Unit]\n\u{feff}Wants=a\n"),
            vec![d("Unit", "\u{feff}Wants", "a", 3)]
        );
    }

    #[test]
    fn unplain_text_is_found_with_its_line() {
        for (text, line, what) in [
            ("[Unit]\nA=\0", 2, "NUL byte"),
            ("[Unit]\r\nA=1\r\n\r", 3, "carriage return"),
            ("[Unit]\n\rA=1", 2, "carriage return"),
            ("\u{feff}[Unit]\n\u{feff}A=1", 2, "byte-order mark"),
            ("[Unit]\nA=1 \\\r\n# c\r\n b", 3, "comment inside"),
            ("[Unit]\n  .include /x\n", 2, "`.include`"),
        ] {
            let (found, odd) = unplain(text).unwrap_or_else(|| panic!("{text:?}"));
            assert_eq!(found, line, "{text:?}");
            assert!(odd.contains(what), "{text:?}: {odd}");
        }
        for text in [
            "\u{feff}[Unit]\r\nA=1 \\\r\n  b\r\n# c \\\r\nB=2",
            "[Unit]\nA=x\\\\\n# c\n",
            "",
        ] {
            assert_eq!(unplain(text), None, "{text:?}");
        }
    }

    #[test]
    fn unit_words_hold_every_reading() {
        let has = |value: &str, word: &str| unit_words(value).iter().any(|w| w == word);
        assert_eq!(
            unit_words(" a.service\tb.service  "),
            vec!["a.service", "b.service"]
        );
        assert!(unit_words("").is_empty());
        // [Unit] lists: a backslash is plain, a blank still splits.
        assert!(has("junk\\ mesh-host.service", "mesh-host.service"));
        // Also=, Sockets=: a backslash before any character is dropped.
        assert!(has("mesh\\-host.service", "mesh-host.service"));
        assert!(has("\\m\\e\\s\\h-host.service", "mesh-host.service"));
        // Quotes (unquoted by [Install]), hex escapes, paths (Also=/path/NAME).
        assert!(has("\"mesh-host.service\"", "mesh-host.service"));
        assert!(has("mesh-\"host\".service", "mesh-host.service"));
        assert!(has("mesh\\x2dhost.service", "mesh-host.service"));
        assert!(has(
            "/etc/systemd/system/mesh-host.service",
            "mesh-host.service"
        ));
        assert!(has("a,mesh-host.service", "mesh-host.service"));
        // A specifier stays in its word, whatever follows its `%`.
        assert!(has("%H.service", "%H.service"));
        assert!(has("x%\"y", "x%\"y"));
        assert!(!has("mesh-hostile.service", "mesh-host.service"));
    }

    /// A drop-in's: nothing of the name is known but its type.
    const ANY: Owner = Owner::Type("service");

    fn resolved(value: &str, owner: Owner) -> Vec<Piece> {
        resolve_specifiers(value, owner)
    }

    #[test]
    fn name_specifiers_resolve_from_the_unit_name() {
        let name = UnitName::parse("mesh-host@a\\x2db.socket").unwrap();
        let text = |s: &str| vec![Piece::Text(s.into())];
        assert_eq!(
            resolved("%n|%N|%p|%P|%i|%I|%j|%J|%f|%%", Owner::Unit(name)),
            text("mesh-host@a\\x2db.socket|mesh-host@a\\x2db|mesh-host|mesh/host|a\\x2db|a-b|host|host|/a-b|%")
        );
        assert_eq!(
            resolved("%p.service", Owner::Unit(name)),
            text("mesh-host.service")
        );
        let template = UnitName::parse("x@.service").unwrap();
        assert_eq!(
            resolved("%p-%i.service", Owner::Template(template)),
            vec![
                Piece::Text("x-".into()),
                Piece::Unknown('i'),
                Piece::Text(".service".into())
            ]
        );
        assert_eq!(
            resolved("%H%", ANY),
            vec![Piece::Unknown('H'), Piece::Unknown('%')]
        );
        assert_eq!(
            resolved("%n=%N", Owner::Type("timer")),
            vec![
                Piece::Unknown('n'),
                Piece::Text(".timer=".into()),
                Piece::Unknown('N')
            ]
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape("a-b\\x2dc\\x"), "a/b-c\\x");
        assert_eq!(decode_hex_escapes("a-b\\x2dc"), "a-b-c");
    }

    #[test]
    fn unknown_pieces_match_any_text() {
        let pieces = resolved("%H.service", ANY);
        assert!(could_be(&pieces, "mesh-host.service"));
        assert!(!could_be(&pieces, "mesh-host.socket"));
        let pieces = resolved("foo@%H.service", ANY);
        assert!(!could_be(&pieces, "mesh-host.service"));
        let pieces = resolved("mesh-%i%j.service", ANY);
        assert!(could_be(&pieces, "mesh-host.service"));
        assert!(could_be(&resolved("%i", ANY), ""));
        assert!(could_be(&resolved("%a-%b.%c", ANY), "mesh-host.service"));
        assert!(!could_be(&resolved("%a-%b.%cx", ANY), "mesh-host.service"));
        assert!(could_be(&resolved("m%a%b%ce", ANY), "mesh-host.service"));
        // A hostile value of many unknowns is matched in linear time.
        let many = "%H".repeat(100_000) + "x";
        assert!(!could_be(&resolved(&many, ANY), "mesh-host.service"));
        let split = vec![
            Piece::Text("mesh-".into()),
            Piece::Text("host.service".into()),
        ];
        assert!(could_be(&split, "mesh-host.service"));
    }
}
