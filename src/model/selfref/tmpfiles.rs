//! tmpfiles.d lines as systemd-tmpfiles reads them (tmpfiles.d(5), `tmpfiles.c` `parse_line`):
//! quoted and C-escaped fields, specifiers, globs with braces; a line of any type whose path is
//! at, inside or above one of the host's paths is refused, except the few that only keep an
//! ancestor as it must be (`d /var/lib 0755 - - -`) and the exclusions `x`/`X`.

use super::paths::{self, HostPaths, Pattern, Relation, Seg, ANY};

/// Directories systemd-tmpfiles reads `*.conf` from (`CONF_PATHS("tmpfiles.d")`).
pub const DIRS: [&str; 5] = [
    "/etc/tmpfiles.d",
    "/run/tmpfiles.d",
    "/usr/local/lib/tmpfiles.d",
    "/usr/lib/tmpfiles.d",
    "/lib/tmpfiles.d",
];

/// Every line type systemd-tmpfiles knows.
const TYPES: &str = "fFwdDevqQpLcbCxXrRzZtThHaA";
/// Types that may stand on an existing ancestor of a host path and only adjust its mode and
/// owner (with no age, so nothing below is cleaned).
const ANCESTOR_TYPES: &str = "dvqQez";

/// Why the tmpfiles.d file `text` has systemd-tmpfiles touch one of `hosts`, if it does: the
/// first such line, with its number and what it would touch.
pub fn refuse(text: &str, hosts: &HostPaths) -> Option<String> {
    for (index, raw) in text
        .replace("\r\n", "\n")
        .split(['\n', '\r', '\0'])
        .enumerate()
    {
        // A byte-order mark would make the type unknown (the line skipped); read past it.
        let line = raw.trim_start_matches('\u{feff}').trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(why) = refuse_line(line, hosts) {
            return Some(format!("line {} {:?}: {why}", index + 1, line.trim_end()));
        }
    }
    None
}

/// Why a tmpfiles.d line acts on a host path, read both ways systemd versions read escapes; a
/// line neither reading parses is refused when its path is near the host's paths.
fn refuse_line(line: &str, hosts: &HostPaths) -> Option<String> {
    // systemd 252 keeps the character after a `\` (`\x2d` is `x2d`); later versions decode C
    // escapes (`\x2d` is `-`). Both readings are checked.
    let readings = [fields(line, true), fields(line, false)];
    let mut error = None;
    for reading in readings {
        match reading {
            Ok((fields, argument)) => {
                if let Some(why) = refuse_fields(fields, argument, hosts) {
                    return Some(why);
                }
            }
            Err(e) => error = Some(e),
        }
    }
    let e = error?;
    let path = line.split_whitespace().nth(1)?.trim_matches(['"', '\'']);
    pattern(path).touches(hosts, &ANY)?;
    Some(format!(
        "cannot be read safely ({e}), and its path {path} is near the host's own"
    ))
}

fn refuse_fields(
    fields: Vec<String>,
    argument: Option<String>,
    hosts: &HostPaths,
) -> Option<String> {
    let mut fields = fields.into_iter();
    let (Some(kind), Some(path)) = (fields.next(), fields.next()) else {
        return None;
    };
    let [mode, user, group, age] = [0; 4].map(|_| fields.next().unwrap_or_default());
    let mut letters = kind.chars();
    let type_char = letters.next()?;
    let modifiers: String = letters.collect();
    // `^` reads the argument from a credential, `~` decodes it: the path is what matters.
    if modifiers.chars().any(|m| !"!-=~^+".contains(m)) {
        return None; // systemd-tmpfiles refuses the line
    }
    if "xX".contains(type_char) {
        return None; // exclusions from cleaning only keep things
    }
    let patterns = match paths::expand_braces(&path, 64) {
        Some(expanded) => expanded.iter().map(|p| pattern(p)).collect(),
        None => vec![Pattern::from_segs(&[Seg::Open(
            "a glob with that many braces".into(),
        )])],
    };
    for pattern in &patterns {
        let Some(hit) = pattern.touches(hosts, &ANY) else {
            continue;
        };
        let above = pattern_holds_only(pattern, hosts);
        if above && type_char == 'L' && !modifiers.contains('+') && known_link(&path, &argument) {
            continue;
        }
        if above && ancestor_kept(type_char, &modifiers, &mode, &user, &group, &age) {
            continue;
        }
        let what = if !TYPES.contains(type_char) {
            "a line of a type this check does not know".to_string()
        } else if above {
            format!(
                "type {kind} on an ancestor (only d, v, q, Q, e or z with a mode that is not \
                 group- or world-writable, owner and group root and no age may stand there)"
            )
        } else {
            format!("type {kind}")
        };
        return Some(format!(
            "{what} would have systemd-tmpfiles touch {path}, {hit}"
        ));
    }
    if type_char == 'L' && !modifiers.contains(['~', '^']) {
        let target = argument.as_deref()?;
        let (resolved, hit) = match link_target(&path, target) {
            Some(resolved) => {
                let hit = Pattern::literal(&resolved).touches(hosts, &ANY)?;
                (resolved, hit)
            }
            // A specifier with no fixed value (a host name) may spell a host path, relative to
            // the link's directory when the target is relative.
            None => {
                let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
                let mut segs = vec![Seg::Lit(format!("{parent}/"))];
                segs.extend(specifiers(&cunescape(target).unwrap_or_default(), false));
                if target.starts_with('/') {
                    segs.remove(0);
                }
                let hit = Pattern::from_segs(&segs).touches(hosts, &ANY)?;
                (target.to_string(), hit)
            }
        };
        if !known_link(&path, &argument) {
            return Some(format!(
                "type {kind} makes {path} a symlink to {resolved}, {hit}: a path through the \
                 link would reach it"
            ));
        }
    }
    None
}

/// Whether every host path `pattern` touches, it touches from above.
fn pattern_holds_only(pattern: &Pattern, hosts: &HostPaths) -> bool {
    !pattern.is_open()
        && hosts
            .iter()
            .filter_map(|h| pattern.relation(&h.spelled))
            .all(|r| r == Relation::Holds)
        && pattern.touches(hosts, &[Relation::Holds]).is_some()
}

/// A line on an ancestor that leaves it a directory owned by root that only root can write.
fn ancestor_kept(
    type_char: char,
    modifiers: &str,
    mode: &str,
    user: &str,
    group: &str,
    age: &str,
) -> bool {
    let root = |s: &str| matches!(s, "" | "-" | "root" | "0") || s.starts_with(':');
    let mode_ok = match mode.trim_start_matches('~') {
        "" | "-" => true,
        m if m.starts_with(':') => true,
        m => u32::from_str_radix(m, 8).is_ok_and(|bits| bits & 0o022 == 0),
    };
    ANCESTOR_TYPES.contains(type_char)
        && !modifiers.contains('+')
        && matches!(age, "" | "-")
        && mode_ok
        && root(user)
        && root(group)
}

/// `L /var/run - - - - ../run`: a line recreating one of the merged-/usr links the host already
/// follows in every check.
fn known_link(path: &str, argument: &Option<String>) -> bool {
    let Some(target) = argument.as_deref().and_then(|t| link_target(path, t)) else {
        return false;
    };
    super::WELL_KNOWN_LINKS
        .iter()
        .any(|(link, to)| paths::lexical(path) == *link && target == *to)
}

/// Where a symlink at `path` with `target` (as written) leads, as text; `None` when a specifier
/// makes it unknown (then `touches` of the link's own path has decided).
fn link_target(path: &str, target: &str) -> Option<String> {
    let target = cunescape(target).ok()?;
    let resolved = resolve(&target)?;
    Some(if resolved.starts_with('/') {
        paths::lexical(&resolved)
    } else {
        let parent = path.rsplit_once('/').map_or("/", |(p, _)| p);
        paths::lexical(&format!("{parent}/{resolved}"))
    })
}

/// Specifiers with a fixed value for the system's systemd-tmpfiles, as text; `None` if any has
/// none.
fn resolve(text: &str) -> Option<String> {
    let mut out = String::new();
    for seg in specifiers(text, false) {
        match seg {
            Seg::Lit(t) => out.push_str(&t),
            _ => return None,
        }
    }
    Some(out)
}

/// A path field: its specifiers resolved, the rest a glob (`w`, `r`, `R`, `z`, `Z`, ... take
/// globs; for the other types the same characters are literal, so this matches more, never less).
fn pattern(path: &str) -> Pattern {
    Pattern::from_segs(&specifiers(path, true))
}

/// tmpfiles.d(5)'s specifiers for the system instance: directories are known; `%h` (root's home
/// from the target's passwd) may be any path; host names, ids and versions stay in one component.
fn specifiers(text: &str, glob: bool) -> Vec<Seg> {
    let mut out = Vec::new();
    let mut plain = String::new();
    let flush = |plain: &mut String, out: &mut Vec<Seg>| {
        if !plain.is_empty() {
            let text = std::mem::take(plain);
            out.push(if glob {
                Seg::Glob(text)
            } else {
                Seg::Lit(text)
            });
        }
    };
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            plain.push(c);
            continue;
        }
        let spec = chars.next();
        let fixed = match spec {
            Some('%') => Some("%"),
            Some('t') => Some("/run"),
            Some('S') => Some("/var/lib"),
            Some('C') => Some("/var/cache"),
            Some('L') => Some("/var/log"),
            Some('E') => Some("/etc"),
            Some('T') => Some("/tmp"),
            Some('V') => Some("/var/tmp"),
            Some('u' | 'g') => Some("root"),
            Some('U' | 'G') => Some("0"),
            _ => None,
        };
        flush(&mut plain, &mut out);
        match (fixed, spec) {
            (Some(text), _) => out.push(Seg::Lit(text.into())),
            (None, Some('h')) => out.push(Seg::Open("%h (the home directory in passwd)".into())),
            (None, Some(s)) => {
                if s.is_ascii_alphabetic() {
                    out.push(Seg::Wild)
                } else {
                    out.push(Seg::Open(format!("%{s}")))
                }
            }
            (None, None) => out.push(Seg::Open("a trailing %".into())),
        }
    }
    flush(&mut plain, &mut out);
    out
}

/// The first six fields as `extract_many_words(EXTRACT_UNQUOTE | EXTRACT_CUNESCAPE)` gives them,
/// then the argument (the rest, `-` for none).
fn fields(line: &str, c_escapes: bool) -> Result<(Vec<String>, Option<String>), String> {
    let mut rest = line;
    let mut out = Vec::new();
    while out.len() < 6 {
        rest = rest.trim_start_matches(is_blank);
        if rest.is_empty() {
            break;
        }
        let (word, after) = first_word(rest, c_escapes)?;
        out.push(word);
        rest = after;
    }
    let argument = rest.trim_start_matches(is_blank);
    let argument = (!matches!(argument, "" | "-")).then(|| argument.to_string());
    Ok((out, argument))
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// One word: quotes removed, C escapes decoded (or, without `c_escapes`, the character after a
/// backslash kept as it is); the rest after it.
fn first_word(text: &str, c_escapes: bool) -> Result<(String, &str), String> {
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (_, '\\') if !c_escapes => match chars.next() {
                Some((_, next)) => word.push(next),
                None => return Err("a trailing backslash".into()),
            },
            (_, '\\') => {
                let rest = &text[i + 1..];
                let (decoded, used) = escape(rest)?;
                word.push(decoded);
                for _ in 0..used {
                    chars.next();
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, c) if is_blank(c) => return Ok((word, &text[i..])),
            (None, c) => word.push(c),
        }
    }
    match quote {
        Some(q) => Err(format!("an unterminated {q}")),
        None => Ok((word, "")),
    }
}

/// `cunescape` of a whole argument.
fn cunescape(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            let (decoded, used) = escape(&text[i + 1..])?;
            out.push(decoded);
            for _ in 0..used {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// systemd's `cunescape_one`: the character an escape stands for and how many characters after
/// the `\` it took. NUL is refused, as systemd refuses it.
fn escape(rest: &str) -> Result<(char, usize), String> {
    let chars: Vec<char> = rest.chars().take(9).collect();
    let Some(&first) = chars.first() else {
        return Err("a trailing backslash".into());
    };
    let simple = match first {
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\u{b}'),
        's' => Some(' '),
        '\\' | '"' | '\'' => Some(first),
        _ => None,
    };
    if let Some(c) = simple {
        return Ok((c, 1));
    }
    let number = |digits: usize, radix: u32, skip: usize| -> Result<(char, usize), String> {
        let text: String = chars.iter().skip(skip).take(digits).collect();
        let value = (text.chars().count() == digits)
            .then(|| u32::from_str_radix(&text, radix).ok())
            .flatten()
            .filter(|v| *v != 0)
            .and_then(char::from_u32)
            .ok_or_else(|| format!("a bad escape \\{first}{text}"))?;
        Ok((value, digits + skip))
    };
    match first {
        'x' => number(2, 16, 1),
        'u' => number(4, 16, 1),
        'U' => number(8, 16, 1),
        '0'..='7' => number(3, 8, 0),
        _ => Err(format!("an unknown escape \\{first}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Config;

    fn hosts() -> HostPaths {
        let config = Config::parse(r#"{"state_dir": "/srv/mesh-store"}"#, None).unwrap();
        paths::host_paths(&config.identity)
    }

    #[test]
    fn fields_are_unquoted_and_unescaped_as_systemd_does() {
        let (f, arg) = fields("f  \"/etc/mesh host\" 0644 - - - some text", true).unwrap();
        assert_eq!(f, ["f", "/etc/mesh host", "0644", "-", "-", "-"]);
        assert_eq!(arg.as_deref(), Some("some text"));
        let (f, _) = fields("R /var/lib/mesh\\x2dhost", true).unwrap();
        assert_eq!(f[1], "/var/lib/mesh-host");
        let (f, _) = fields("R '/var/lib/mesh'-\"host\"", true).unwrap();
        assert_eq!(f[1], "/var/lib/mesh-host");
        let (f, _) = fields("R /var/lib/mesh\\055host", true).unwrap();
        assert_eq!(f[1], "/var/lib/mesh-host");
        assert!(fields("R \"/var", true).is_err());
        assert!(fields("R /var\\x00", true).is_err());
        assert!(fields("R /var\\q", true).is_err());
        let (f, _) = fields("R /var/lib/mesh\\x2dhost", false).unwrap();
        assert_eq!(f[1], "/var/lib/meshx2dhost");
        let (f, _) = fields("R /var/lib/mesh\\-host", false).unwrap();
        assert_eq!(f[1], "/var/lib/mesh-host");
    }

    #[test]
    fn lines_that_touch_a_host_path_are_refused() {
        let hosts = hosts();
        for (line, needle) in [
            (
                "R /var/lib/mesh-host",
                "which is /var/lib/mesh-host, the host's own store",
            ),
            (
                "r /var/lib/mesh-host/ledger.json",
                "inside /var/lib/mesh-host",
            ),
            (
                "f+ /etc/mesh-host/config.json 0644 - - - {}",
                "the host's own configuration",
            ),
            ("w /etc/mesh-host/config.json - - - - {}", "type w"),
            ("F /etc/mesh-host/x", "configuration"),
            ("d /srv/mesh-store 0777 nobody", "the host's own store"),
            ("D /srv 0755 root root -", "type D on an ancestor"),
            ("R /srv", "which holds /srv/mesh-store"),
            ("R! /var/lib/*", "which is /var/lib/mesh-host"),
            ("R /var/{cache,lib}/mesh-*", "/var/lib/mesh-host"),
            ("Z /etc 0777 nobody nobody", "which holds /etc/mesh-host"),
            ("z /var/lib 0777 - -", "on an ancestor"),
            ("d /var/lib 0755 nobody -", "on an ancestor"),
            ("d /var/lib 0755 - - 1d", "on an ancestor"),
            ("e /var/lib - - - 10d", "on an ancestor"),
            ("a+ /var/lib - - - - u:nobody:rwx", "type a+ on an ancestor"),
            ("h /var/lib/mesh-host - - - - +i", "type h"),
            ("L+ /var/lib/mesh-host - - - - /tmp/x", "type L+"),
            ("L+ /var/lib - - - - /tmp/x", "type L+ on an ancestor"),
            (
                "L /srv/link - - - - /etc/mesh-host",
                "a symlink to /etc/mesh-host",
            ),
            (
                "L /srv/link - - - - ../etc",
                "a symlink to /etc, which holds /etc/mesh-host",
            ),
            (
                "L /etc/x - - - - ../usr/bin/mesh-host",
                "the host's own binary",
            ),
            ("p /etc/systemd/system/x.service", "unit directory"),
            (
                "c /run/systemd/system/x 0666 - - - 1:3",
                "/run/systemd/system",
            ),
            (
                "C /usr/local/lib/systemd/system/x.service",
                "/usr/local/lib/systemd/system",
            ),
            (
                "R /lib/systemd/system/x",
                "/lib/systemd/system (/usr/lib/systemd/system)",
            ),
            (
                "R /usr/lib64/systemd",
                "which holds /usr/lib64/systemd/system",
            ),
            ("f /var/run/systemd/system/x", "/var/run/systemd/system"),
            ("R /usr/sbin/mesh-host", "binary"),
            ("R %S/mesh-host", "which is /var/lib/mesh-host"),
            ("R %E/mesh-host/config.json", "the host's own configuration"),
            ("R %t/systemd/transient", "/run/systemd/transient"),
            ("R %h/x", "%h"),
            ("R /var/lib/mesh-%H", "which is /var/lib/mesh-host"),
            ("R /srv/x/../mesh-store", "'..'"),
            ("\u{feff}R /var/lib/mesh-host", "which is"),
            ("R /var/lib/mesh\\x2dhost", "which is"),
            ("Y /var/lib/mesh-host", "a type this check does not know"),
            ("R \"/var/lib/mesh-host", "cannot be read safely"),
        ] {
            let found = refuse(line, &hosts);
            assert!(
                found.as_deref().is_some_and(|f| f.contains(needle)),
                "{line}: {found:?}"
            );
        }
    }

    #[test]
    fn hostile_lines_end_quickly_and_never_panic() {
        let hosts = hosts();
        let long = format!("R /var/{}\n", "{a,b}".repeat(200_000));
        assert!(refuse(&long, &hosts).is_some_and(|f| f.contains("that many braces")));
        let stars = format!("R /var/lib/{}x\n", "*".repeat(4000));
        assert_eq!(refuse(&stars, &hosts), None);
        let stars = format!("R /var/lib/{}t\n", "*".repeat(4000));
        assert!(refuse(&stars, &hosts).is_some());
        let huge = format!("R /var/lib/mesh-host/{}\n", "x".repeat(1 << 20));
        assert_eq!(refuse(&huge, &hosts), None);
        for line in [
            "R \\",
            "R \\u12",
            "R \"",
            "\\x",
            "R /\u{e9}\\\u{e9}",
            "R [",
            "R /[!]",
            "R /[]-]x",
        ] {
            let _ = refuse(line, &hosts);
        }
    }

    #[test]
    fn everyday_lines_and_safe_ancestors_stay_valid() {
        let hosts = hosts();
        let text = "# comment\n\
            q /var 0755 - - -\n\
            d /var/lib 0755 - - -\n\
            Q /srv 0755 - - -\n\
            d /run/systemd 0755 root root -\n\
            d /etc ~0755 :nobody :nobody -\n\
            L /var/run - - - - ../run\n\
            L /var/lock - - - - ../run/lock\n\
            L /run/shm - - - - /dev/shm\n\
            L /srv/x - - - - /opt/%H\n\
            L+ /etc/mtab - - - - ../proc/self/mounts\n\
            d /run/systemd/netif 0755 systemd-network systemd-network -\n\
            x /var/lib/mesh-host\n\
            X /etc/mesh-host/*\n\
            R! /tmp/systemd-private-*\n\
            r! /tmp/.X[0-9]*-lock\n\
            x /tmp/systemd-private-%b-*\n\
            d /var/lib/mesh-hostile 0755\n\
            f /var/log/wtmp 0664 root utmp -\n\
            R! /.#machine.*\n\
            R /var/lib/%q-x\n";
        assert_eq!(refuse(text, &hosts), None);
    }
}
