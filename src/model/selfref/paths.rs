//! Where a path, a glob or a value with specifiers stands against the host's own paths: the
//! paths systemd itself must leave alone (its store, config, credentials, binary and every unit
//! directory on systemd's search path), each in every spelling Arch's merged-/usr links give it,
//! matched a component at a time, so "at", "inside" and "above" are told apart.

use std::sync::OnceLock;

use crate::model::config::Identity;

/// The system manager's unit search path (systemd.unit(5), `systemd-analyze unit-paths`).
pub const SYSTEM_UNIT_PATH: [&str; 12] = [
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/run/systemd/generator.early",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/run/systemd/generator",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/run/systemd/generator.late",
];

/// Files and directories whose content systemd turns into actions on paths, as root: what
/// writes them writes lines that reach the host's paths, unchecked (a service's output into
/// `/etc/tmpfiles.d/x.conf`, a tmpfiles.d `f` line writing `/etc/fstab`).
pub const SYSTEMD_READS: [(&str, &str); 6] = [
    (
        "/etc/tmpfiles.d",
        "tmpfiles.d directory (systemd-tmpfiles runs its lines as root)",
    ),
    (
        "/run/tmpfiles.d",
        "tmpfiles.d directory (systemd-tmpfiles runs its lines as root)",
    ),
    (
        "/usr/local/lib/tmpfiles.d",
        "tmpfiles.d directory (systemd-tmpfiles runs its lines as root)",
    ),
    (
        "/usr/lib/tmpfiles.d",
        "tmpfiles.d directory (systemd-tmpfiles runs its lines as root)",
    ),
    ("/etc/fstab", "fstab (systemd mounts what it says)"),
    (
        "/etc/crypttab",
        "crypttab (systemd-cryptsetup opens what it says)",
    ),
];

/// The longest path the kernel and systemd take.
const PATH_MAX: usize = 4096;

/// The host's binary, as its package installs it.
pub const BINARY: &str = "/usr/bin/mesh-host";

/// Where a path stands against one of the host's paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The same path.
    Is,
    /// An ancestor of it.
    Holds,
    /// Below it.
    Inside,
}

impl Relation {
    pub fn phrase(self) -> &'static str {
        match self {
            Relation::Is => "which is",
            Relation::Holds => "which holds",
            Relation::Inside => "inside",
        }
    }
}

/// A host path with what it is, in one of its spellings (`/lib/systemd/system` for
/// `/usr/lib/systemd/system`).
#[derive(Debug, Clone)]
pub struct HostPath {
    pub spelled: String,
    pub canonical: String,
    pub what: &'static str,
}

/// The host's paths systemd must not touch on a declaration's behalf, each in every spelling:
/// those the config names, then the binary and the unit search path (the same for every config,
/// spelled once per process: every unit file and tmpfiles.d file checked needs them).
pub struct HostPaths {
    own: Vec<HostPath>,
    system: &'static [HostPath],
}

impl HostPaths {
    pub fn iter(&self) -> impl Iterator<Item = &HostPath> {
        self.own.iter().chain(self.system)
    }
}

/// The host's paths for `identity`: the config's spelled on each call, the binary's and systemd's
/// once per process.
pub fn host_paths(identity: &Identity) -> HostPaths {
    static SYSTEM: OnceLock<Vec<HostPath>> = OnceLock::new();
    let system = SYSTEM.get_or_init(|| {
        let mut out = Vec::new();
        add(&mut out, BINARY, "binary");
        for p in SYSTEM_UNIT_PATH {
            add(&mut out, p, "unit directory");
        }
        for (p, what) in SYSTEMD_READS {
            add(&mut out, p, what);
        }
        out
    });
    let mut own = Vec::new();
    for p in &identity.state_dirs {
        add(&mut own, &p.to_string_lossy(), "store");
    }
    add(
        &mut own,
        &identity.config_dir.to_string_lossy(),
        "configuration",
    );
    for p in &identity.config_files {
        add(
            &mut own,
            &p.to_string_lossy(),
            "configuration or credential file",
        );
    }
    for p in &identity.unit_dirs {
        let p = p.to_string_lossy();
        if !SYSTEM_UNIT_PATH.contains(&&*p) {
            add(&mut own, &p, "unit directory");
        }
    }
    HostPaths { own, system }
}

/// `p` in each of its spellings.
fn add(out: &mut Vec<HostPath>, p: &str, what: &'static str) {
    let canonical = normal(p);
    for spelled in spellings(&canonical) {
        out.push(HostPath {
            spelled,
            canonical: canonical.clone(),
            what,
        });
    }
}

/// `path` without empty or `.` components, as `/a/b` (`..` kept, as text).
fn normal(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for part in path.split('/').filter(|p| !matches!(*p, "" | ".")) {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// `path` and every other name the merged-/usr links give it (`/usr/bin/x` is also `/bin/x`,
/// `/sbin/x` and `/usr/sbin/x`).
pub fn spellings(path: &str) -> Vec<String> {
    let mut out = vec![path.to_string()];
    for (link, target) in super::WELL_KNOWN_LINKS {
        if let Some(rest) = path.strip_prefix(target) {
            if rest.is_empty() || rest.starts_with('/') {
                out.push([link, rest].concat());
            }
        }
    }
    out
}

/// One piece of a value before it is split into components.
#[derive(Debug, Clone)]
pub enum Seg {
    /// Text taken as it is.
    Lit(String),
    /// Text with shell-glob characters (`*`, `?`, `[...]`, `\` escapes).
    Glob(String),
    /// Something unknown here that stays within one component (a host name, a machine id).
    Wild,
    /// Something unknown that may be any path (`%h`, a user's home), named for the message.
    Open(String),
}

/// What one character of a path component may be.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Char(char),
    /// `*`, or an unknown piece: any text within the component, none included.
    Any,
    /// `?`.
    One,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A path as components of tokens, or one that cannot be known here.
#[derive(Debug, Clone)]
pub struct Pattern {
    parts: Vec<Vec<Tok>>,
    /// The path as normalised text when it is only literal text: compared as text, which every
    /// value checked against every host path pays for.
    text: Option<String>,
    /// Why it could be any path (a `..`), if it could.
    open: Option<String>,
    /// Why any path may follow `parts` (a specifier that may hold a `/`), if one may.
    tail: Option<String>,
}

impl Pattern {
    /// A literal path.
    pub fn literal(path: &str) -> Pattern {
        Pattern::from_segs(&[Seg::Lit(path.to_string())])
    }

    /// A path made of literal text, globs and unknowns, split into components to be matched
    /// one at a time.
    pub fn from_segs(segs: &[Seg]) -> Pattern {
        let length: usize = segs
            .iter()
            .map(|s| match s {
                Seg::Lit(t) | Seg::Glob(t) => t.len(),
                Seg::Wild | Seg::Open(_) => 0,
            })
            .sum();
        if length > PATH_MAX {
            // systemd refuses a path this long, and so never acts on it; nor is a hostile one
            // spelled out here a token per character.
            return Pattern {
                parts: vec![vec![Tok::Class {
                    negated: false,
                    ranges: Vec::new(),
                }]],
                text: None,
                open: None,
                tail: None,
            };
        }
        let mut parts: Vec<Vec<Tok>> = vec![Vec::new()];
        let mut open = None;
        let mut tail = None;
        for seg in segs {
            match seg {
                Seg::Lit(text) => {
                    for c in text.chars() {
                        push_char(&mut parts, c, Tok::Char(c));
                    }
                }
                Seg::Glob(text) => glob_tokens(text, &mut parts),
                Seg::Wild => parts.last_mut().into_iter().for_each(|p| p.push(Tok::Any)),
                Seg::Open(what) => {
                    // Below what is known, any path: systemd refuses a `..` in these values.
                    parts.last_mut().into_iter().for_each(|p| p.push(Tok::Any));
                    tail = Some(format!("{what} cannot be resolved here"));
                    break;
                }
            }
        }
        let parts: Vec<Vec<Tok>> = parts
            .into_iter()
            .filter(|p| !p.is_empty() && *p != [Tok::Char('.')])
            .collect();
        if parts.iter().any(|p| *p == [Tok::Char('.'), Tok::Char('.')]) {
            open.get_or_insert_with(|| {
                "its '..' cannot be resolved without following symlinks".to_string()
            });
        }
        let literal = parts.iter().flatten().all(|t| matches!(t, Tok::Char(_)));
        let text = (literal && open.is_none() && tail.is_none()).then(|| {
            let mut text = String::new();
            for part in &parts {
                text.push('/');
                text.extend(part.iter().filter_map(|t| match t {
                    Tok::Char(c) => Some(*c),
                    _ => None,
                }));
            }
            if text.is_empty() {
                text.push('/');
            }
            text
        });
        Pattern {
            parts,
            text,
            open,
            tail,
        }
    }

    /// Whether it could be any path, or any below a known part.
    pub fn is_open(&self) -> bool {
        self.open.is_some() || self.tail.is_some()
    }

    /// Where this pattern could stand against `host` (a literal absolute path), if anywhere.
    /// Asked of every host path for every value checked: nothing is allocated.
    pub fn relation(&self, host: &str) -> Option<Relation> {
        if let Some(text) = &self.text {
            return text_relation(text, host);
        }
        let mut names = host.split('/').filter(|p| !p.is_empty());
        let mut shared = 0;
        for toks in &self.parts {
            let Some(name) = names.next() else {
                break;
            };
            if !component_matches(toks, name) {
                return None;
            }
            shared += 1;
        }
        let host_len = shared + names.count();
        if self.tail.is_some() && self.parts.len() <= host_len {
            // It may stop there, above, or go on below: say the closest.
            return Some(Relation::Is);
        }
        Some(match self.parts.len().cmp(&host_len) {
            std::cmp::Ordering::Equal => Relation::Is,
            std::cmp::Ordering::Less => Relation::Holds,
            std::cmp::Ordering::Greater => Relation::Inside,
        })
    }

    /// The first of the host's paths this pattern could touch in one of the `relations`, said
    /// as "which holds /var/lib/mesh-host, the host's own store"; an open pattern could touch any.
    pub fn touches(&self, hosts: &HostPaths, relations: &[Relation]) -> Option<String> {
        if let Some(why) = &self.open {
            return Some(format!(
                "{why}, and it could be one of the host's own paths (its store, configuration, \
                 binary or unit directories)"
            ));
        }
        hosts.iter().find_map(|h| {
            let relation = self.relation(&h.spelled)?;
            let could = match &self.tail {
                Some(why) => format!("{why}, and it could reach"),
                None => relation.phrase().to_string(),
            };
            relations.contains(&relation).then(|| {
                let alias = if h.spelled == h.canonical {
                    String::new()
                } else {
                    format!(" ({})", h.canonical)
                };
                format!("{could} {}{alias}, the host's own {}", h.spelled, h.what)
            })
        })
    }
}

/// Where the normalised path `path` stands against `host`, by their text.
fn text_relation(path: &str, host: &str) -> Option<Relation> {
    let below = |inner: &str, outer: &str| {
        outer == "/" || inner.as_bytes().get(outer.len()) == Some(&b'/') && inner.starts_with(outer)
    };
    if path == host {
        Some(Relation::Is)
    } else if below(host, path) {
        Some(Relation::Holds)
    } else if below(path, host) {
        Some(Relation::Inside)
    } else {
        None
    }
}

/// Every relation: a mount or a directory made or chowned reaches what it is on, in or above.
pub const ANY: [Relation; 3] = [Relation::Is, Relation::Holds, Relation::Inside];
/// At or below: writing or unlinking one file does nothing to the directories above it.
pub const AT_OR_INSIDE: [Relation; 2] = [Relation::Is, Relation::Inside];

fn push_char(parts: &mut Vec<Vec<Tok>>, c: char, tok: Tok) {
    if c == '/' {
        parts.push(Vec::new());
    } else if let Some(last) = parts.last_mut() {
        last.push(tok);
    }
}

/// glob(3)'s syntax: `*`, `?`, `[...]` (with `!` or `^` to negate, ranges), `\` escapes.
fn glob_tokens(text: &str, parts: &mut Vec<Vec<Tok>>) {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if i + 1 < chars.len() => {
                i += 1;
                push_char(parts, chars[i], Tok::Char(chars[i]));
            }
            '*' => push_char(parts, c, Tok::Any),
            '?' => push_char(parts, c, Tok::One),
            '[' => match class(&chars[i + 1..]) {
                Some((tok, used)) => {
                    push_char(parts, c, tok);
                    i += used;
                }
                None => push_char(parts, c, Tok::Char(c)),
            },
            _ => push_char(parts, c, Tok::Char(c)),
        }
        i += 1;
    }
}

/// A bracket expression after its `[`: the token and how many characters it took (with `]`).
fn class(chars: &[char]) -> Option<(Tok, usize)> {
    let mut i = 0;
    let negated = matches!(chars.first(), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while i < chars.len() {
        let c = chars[i];
        if c == ']' && !first {
            return Some((Tok::Class { negated, ranges }, i + 1));
        }
        if c == '/' {
            return None;
        }
        first = false;
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|e| *e != ']') {
            ranges.push((c, chars[i + 2]));
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
    None
}

fn one_matches(tok: &Tok, c: char) -> bool {
    match tok {
        Tok::Char(t) => *t == c,
        Tok::One => true,
        Tok::Class { negated, ranges } => {
            ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
        }
        Tok::Any => false,
    }
}

/// Whether the tokens match the whole component `name`; linear backtracking on the last `*`,
/// whatever a hostile pattern holds.
fn component_matches(toks: &[Tok], name: &str) -> bool {
    if toks.iter().all(|t| matches!(t, Tok::Char(_))) {
        let mut chars = name.chars();
        let same = toks
            .iter()
            .all(|t| matches!((t, chars.next()), (Tok::Char(a), Some(b)) if *a == b));
        return same && chars.next().is_none();
    }
    let text: Vec<char> = name.chars().collect();
    let (mut t, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < text.len() {
        match toks.get(t) {
            Some(Tok::Any) => {
                star = Some((t, s));
                t += 1;
            }
            Some(tok) if one_matches(tok, text[s]) => {
                t += 1;
                s += 1;
            }
            _ => match star {
                Some((st, ss)) => {
                    t = st + 1;
                    s = ss + 1;
                    star = Some((st, ss + 1));
                }
                None => return false,
            },
        }
    }
    toks[t.min(toks.len())..].iter().all(|tok| *tok == Tok::Any)
}

/// glob(3)'s `GLOB_BRACE`: `{a,b}` expanded into each alternative, at most `limit` results
/// (`None` past it: the caller takes the pattern as open).
pub fn expand_braces(text: &str, limit: usize) -> Option<Vec<String>> {
    // Each group is a level of recursion and a copy of the text: a hostile line of thousands
    // would be deep and quadratic, so past a few the pattern is taken as open.
    if text.matches('{').count() > 8 {
        return None;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut escaped = false;
    let mut open_at = None;
    let mut depth = 0;
    let mut commas = Vec::new();
    for (i, &c) in chars.iter().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '{' => {
                if depth == 0 {
                    open_at = Some(i);
                    commas.clear();
                }
                depth += 1;
            }
            ',' if depth == 1 => commas.push(i),
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let Some(start) = open_at else { continue };
                    if commas.is_empty() {
                        continue;
                    }
                    let head: String = chars[..start].iter().collect();
                    let tail: String = chars[i + 1..].iter().collect();
                    let mut bounds = vec![start];
                    bounds.extend(&commas);
                    bounds.push(i);
                    let mut out = Vec::new();
                    for pair in bounds.windows(2) {
                        let middle: String = chars[pair[0] + 1..pair[1]].iter().collect();
                        for expanded in expand_braces(&format!("{head}{middle}{tail}"), limit)? {
                            out.push(expanded);
                            if out.len() > limit {
                                return None;
                            }
                        }
                    }
                    return Some(out);
                }
            }
            _ => {}
        }
    }
    Some(vec![text.to_string()])
}

/// `path` with `.`, empty and `..` components resolved as text, for a symlink's target that
/// the kernel resolves from the link's directory.
pub fn lexical(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> Pattern {
        Pattern::from_segs(&[Seg::Glob(text.into())])
    }

    #[test]
    fn relations_of_literal_paths_and_globs() {
        for (pattern, host, expected) in [
            (
                "/var/lib/mesh-host",
                "/var/lib/mesh-host",
                Some(Relation::Is),
            ),
            (
                "/var//lib/./mesh-host/",
                "/var/lib/mesh-host",
                Some(Relation::Is),
            ),
            ("/var/lib", "/var/lib/mesh-host", Some(Relation::Holds)),
            ("/", "/var/lib/mesh-host", Some(Relation::Holds)),
            (
                "/var/lib/mesh-host/x",
                "/var/lib/mesh-host",
                Some(Relation::Inside),
            ),
            ("/var/lib/mesh-hostile", "/var/lib/mesh-host", None),
            ("/var/lib/*", "/var/lib/mesh-host", Some(Relation::Is)),
            ("/var/*/mesh-*", "/var/lib/mesh-host", Some(Relation::Is)),
            ("/v?r", "/var/lib/mesh-host", Some(Relation::Holds)),
            (
                "/[a-z]ar/l[!x]b",
                "/var/lib/mesh-host",
                Some(Relation::Holds),
            ),
            ("/[!v]ar", "/var/lib/mesh-host", None),
            ("/var/lib/\\*", "/var/lib/mesh-host", None),
            ("/var/lib/m*h*t", "/var/lib/mesh-host", Some(Relation::Is)),
            ("/var/lib/m*x*t", "/var/lib/mesh-host", None),
            ("/tmp/*", "/var/lib/mesh-host", None),
            ("/.#machine.*", "/var/lib/mesh-host", None),
        ] {
            assert_eq!(glob(pattern).relation(host), expected, "{pattern} {host}");
        }
        let wild = Pattern::from_segs(&[Seg::Lit("/var/lib/mesh-".into()), Seg::Wild]);
        assert_eq!(wild.relation("/var/lib/mesh-host"), Some(Relation::Is));
        let hosts = host_paths(
            &crate::model::config::Config::parse("{}", None)
                .unwrap()
                .identity,
        );
        let dotdot = Pattern::literal("/srv/../etc/mesh-host");
        assert!(dotdot.touches(&hosts, &ANY).unwrap().contains("'..'"));
        let open = Pattern::from_segs(&[Seg::Open("%h".into()), Seg::Lit("/x".into())]);
        let found = open.touches(&hosts, &AT_OR_INSIDE).unwrap();
        assert!(
            found.contains("%h cannot be resolved here, and it could reach /var/lib/mesh-host"),
            "{found}"
        );
        let dev = Pattern::from_segs(&[Seg::Lit("/dev/".into()), Seg::Open("%I".into())]);
        assert!(dev.touches(&hosts, &ANY).is_none());
        for prefix in ["/var/lib/mesh-host/", "/var/l"] {
            let below = Pattern::from_segs(&[Seg::Lit(prefix.into()), Seg::Open("%I".into())]);
            assert!(below.touches(&hosts, &AT_OR_INSIDE).is_some(), "{prefix}");
        }
    }

    #[test]
    fn braces_expand_and_stop_at_the_limit() {
        assert_eq!(
            expand_braces("/var/{lib,log}/x", 10).unwrap(),
            vec!["/var/lib/x", "/var/log/x"]
        );
        assert_eq!(
            expand_braces("/{a,{b,c}}", 10).unwrap(),
            vec!["/a", "/b", "/c"]
        );
        assert_eq!(expand_braces("/{a}", 10).unwrap(), vec!["/{a}"]);
        assert!(expand_braces("/{a,b}{c,d}{e,f}", 4).is_none());
        assert!(expand_braces(&"{a,b}".repeat(100_000), 64).is_none());
        let hosts = host_paths(
            &crate::model::config::Config::parse("{}", None)
                .unwrap()
                .identity,
        );
        let long = format!("/var/lib/mesh-host/{}", "x".repeat(PATH_MAX));
        assert!(Pattern::literal(&long).touches(&hosts, &ANY).is_none());
    }

    #[test]
    fn spellings_follow_merged_usr() {
        let s = spellings("/usr/lib/systemd/system");
        for expected in [
            "/lib/systemd/system",
            "/lib64/systemd/system",
            "/usr/lib64/systemd/system",
        ] {
            assert!(s.iter().any(|x| x == expected), "{s:?}");
        }
        assert!(spellings("/run/systemd/system").contains(&"/var/run/systemd/system".into()));
        assert!(spellings("/usr/bin/mesh-host").contains(&"/sbin/mesh-host".into()));
        assert_eq!(lexical("/var/../run"), "/run");
        assert_eq!(lexical("/etc/./../../x/"), "/x");
    }
}
