//! The house's rules, checked over the source text of `src/` outside unit tests. Run alone with
//! `cargo test --test layers`; each test prints what it finds.
//!
//! Layers: `src/`'s layers import only downwards, and no file imports, through any chain, a file
//! that imports it. What counts as an import: every `crate::` path (also a macro's `$crate::`) and
//! every `super::` path in a file's code outside its unit tests (`#[cfg(test)] mod tests`, to the
//! end of the file), resolved to the file that defines the module it names. `mod` lines and
//! `pub use` re-exports are not imports: a parent names its children; it does not depend on what
//! they do.
//!
//! Issue 33's rules: the store names nothing of the link; the engine and the service name no
//! kind; `unsafe` and `libc::` only in `os/`; the clock read only in `os/`; no file over 600
//! lines of code, no function over 80 lines. Each rule lists today's offenders, one line each: a
//! new offender fails, and so does a listed one that no longer offends (remove it from the list:
//! the lists only shrink).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a file may import from its own layer and those before it.
const LAYERS: &[&str] = &[
    "util", "os", "tools", "model", "link", "store", "kinds", "engine", "service", "cli",
];

/// One source file: its module path (`["kinds", "units", "confirm"]`) and its code.
struct Source {
    module: Vec<String>,
    code: String,
}

fn sources(dir: &Path, out: &mut BTreeMap<PathBuf, Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let relative = path.strip_prefix("src").expect("under src").to_path_buf();
            let mut module: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            // A unit test module in a file of its own (`#[cfg(test)] mod tests;`) is all tests.
            let code = match text.find("#[cfg(test)]\nmod tests") {
                _ if module.last().is_some_and(|m| m == "tests") => String::new(),
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.insert(relative, Source { module, code });
        }
    }
}

/// `src/`'s files but those of unit tests: a module declared under `#[cfg(test)]` (`mod tests;`
/// in its own file, `pub mod testutil;`) and the modules inside it.
fn crate_sources() -> BTreeMap<PathBuf, Source> {
    let mut files = BTreeMap::new();
    sources(Path::new("src"), &mut files);
    let mut test_modules = Vec::new();
    for (path, source) in &files {
        let text = std::fs::read_to_string(Path::new("src").join(path)).expect("a source file");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0] == "#[cfg(test)]", declared) {
                let mut module = source.module.clone();
                module.push(name.to_string());
                test_modules.push(module);
            }
        }
    }
    files.retain(|_, source| !test_modules.iter().any(|t| source.module.starts_with(t)));
    files
}

/// The paths a file's code names: each `use` tree expanded (`crate::a::{b, c::d}` gives `a::b`
/// and `a::c::d`), and every other `crate::` or `super::` path; `super::` resolved against the
/// file's own module.
fn named_paths(source: &Source) -> Vec<Vec<String>> {
    let code: String = source
        .code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let prefix = before[line_start..].trim();
        let Some(end) = rest[at..].find(';') else {
            break;
        };
        let tree: String = rest[at + 4..at + end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        // A re-export (`pub use`, `pub(crate) use`) is not an import.
        if prefix.is_empty() {
            expand(&tree, &mut Vec::new(), &mut |p| out.push(p));
        }
        rest = &rest[at + end..];
    }
    // Paths written in code: `crate::a::b(..)`, `super::x::Y`.
    for (at, _) in code
        .match_indices("crate::")
        .chain(code.match_indices("super::"))
    {
        let before = &code[..at];
        if before.ends_with("::") || before.ends_with("use ") {
            continue;
        }
        let path: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        out.push(path.split("::").map(str::to_string).collect());
    }
    out.into_iter()
        .filter_map(|p| resolve(&source.module, p))
        .collect()
}

/// Calls `each` with every full path of a `use` tree (without whitespace).
fn expand(tree: &str, prefix: &mut Vec<String>, each: &mut impl FnMut(Vec<String>)) {
    let (head, group) = match tree.find("::{") {
        Some(at) if tree.ends_with('}') => (&tree[..at], Some(&tree[at + 3..tree.len() - 1])),
        _ => (tree, None),
    };
    let head = head.split(" as ").next().unwrap_or(head);
    let head = head
        .split("as")
        .next()
        .filter(|_| !head.contains("::as"))
        .unwrap_or(head);
    let depth = prefix.len();
    prefix.extend(
        head.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    match group {
        None => each(prefix.clone()),
        Some(group) => {
            let mut level = 0;
            let mut from = 0;
            for (i, c) in group.char_indices().chain([(group.len(), ',')]) {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        let member = &group[from..i];
                        if !member.is_empty() && member != "self" {
                            expand(member, prefix, each);
                        } else if member == "self" {
                            each(prefix.clone());
                        }
                        from = i + 1;
                    }
                    _ => {}
                }
            }
        }
    }
    prefix.truncate(depth);
}

/// A path named in `module`'s file, from the crate's root: `None` for one outside the crate.
fn resolve(module: &[String], path: Vec<String>) -> Option<Vec<String>> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("super") => {
            let mut base = module.to_vec();
            let mut rest = &path[..];
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        _ => None,
    }
}

#[test]
fn layers_import_only_downwards_and_files_import_no_cycle() {
    let files = crate_sources();
    let by_module: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|(path, s)| (s.module.clone(), path.clone()))
        .collect();
    let layer = |module: &[String]| -> Option<usize> {
        LAYERS
            .iter()
            .position(|l| module.first().map(String::as_str) == Some(l))
    };
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    let mut upward = Vec::new();
    for (path, source) in &files {
        for named in named_paths(source) {
            // The longest prefix that is a file's module.
            let Some(target) = (1..=named.len())
                .rev()
                .find_map(|n| by_module.get(&named[..n]))
            else {
                continue;
            };
            if target == path {
                continue;
            }
            // A child names its parent's items freely only if the parent does not name it back;
            // the cycle check below says when it does.
            if let (Some(from), Some(to)) = (layer(&source.module), layer(&files[target].module)) {
                if to > from {
                    upward.push(format!(
                        "{} ({}) imports {} ({})",
                        path.display(),
                        LAYERS[from],
                        target.display(),
                        LAYERS[to]
                    ));
                }
            }
            edges
                .entry(path.clone())
                .or_default()
                .insert(target.clone());
        }
    }
    let cycles = cycles(&edges);
    for line in &upward {
        eprintln!("upward: {line}");
    }
    for cycle in &cycles {
        let names: Vec<_> = cycle.iter().map(|p| p.display().to_string()).collect();
        eprintln!("cycle: {}", names.join(" -> "));
    }
    assert!(
        upward.is_empty() && cycles.is_empty(),
        "{} upward imports and {} cycles (listed above)",
        upward.len(),
        cycles.len()
    );
}

/// The strongly connected components of more than one file (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.reverse();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

// Issue 33's rules. Each list holds today's offenders, one line each; the lists only shrink.

/// Files of `store/` naming something of `link/` (an import, or a re-export: `pub use`).
const STORE_NAMES_LINK: &[&str] = &[];

/// Files of `engine/` and `service/` naming a kind: its type, its module, its name.
const NAMES_A_KIND: &[&str] = &[];

/// Files outside `os/` with `unsafe`.
const UNSAFE_OUTSIDE_OS: &[&str] = &[];

/// Files outside `os/` calling `libc::`.
const LIBC_OUTSIDE_OS: &[&str] = &[];

/// Files outside `os/` reading the clock (`SystemTime::now`, `Instant::now`, `unix_now`,
/// `now_ms`) instead of taking the time from `os::clock::Clock`.
const CLOCK_OUTSIDE_OS: &[&str] = &[];

/// Files over `MAX_FILE_LOC` lines of code.
const LONG_FILES: &[&str] = &[];

/// Functions over `MAX_FN_LINES` lines, as `path name`.
const LONG_FNS: &[&str] = &[];

const MAX_FILE_LOC: usize = 600;
const MAX_FN_LINES: usize = 80;

/// Every source file under `src/`, by its path from the repository (`src/store/mod.rs`).
fn all_sources() -> BTreeMap<String, Source> {
    crate_sources()
        .into_iter()
        .map(|(path, source)| (format!("src/{}", path.display()), source))
        .collect()
}

/// Prints every finding, and returns what is wrong against the list: an offender it lacks, an
/// entry that no longer offends.
fn check(rule: &str, found: &BTreeMap<String, Vec<String>>, listed: &[&str]) -> Vec<String> {
    for (key, details) in found {
        for detail in details {
            eprintln!("{rule}: {key}: {detail}");
        }
    }
    let mut problems: Vec<String> = found
        .keys()
        .filter(|key| !listed.contains(&key.as_str()))
        .map(|key| format!("{key}: a new offender ({rule}); fix it, or say in review why not"))
        .collect();
    problems.extend(
        listed
            .iter()
            .filter(|key| !found.contains_key(**key))
            .map(|key| format!("{key}: listed, but no longer offends: remove it from the list")),
    );
    let mut seen = BTreeSet::new();
    problems.extend(
        listed
            .iter()
            .filter(|key| !seen.insert(**key))
            .map(|key| format!("{key}: listed twice")),
    );
    problems
}

/// Fails listing `problems`, if any.
fn verdict(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{} against the lists in tests/layers.rs (the lists only shrink):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// A file's code with comments removed and string and char literals emptied (newlines kept, so
/// lines stay where they were), and the contents of its string literals with their lines.
struct Lexed {
    code: String,
    /// Each string literal's line, contents and where it stands in `code`.
    strings: Vec<(usize, String, usize)>,
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn lex(text: &str) -> Lexed {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut code = String::with_capacity(text.len());
    let mut strings = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Skips to `end` (exclusive), keeping the newlines on the way.
    let skip = |code: &mut String, line: &mut usize, from: usize, end: usize| {
        for &ch in &c[from..end.min(c.len())] {
            if ch == '\n' {
                code.push('\n');
                *line += 1;
            }
        }
    };
    while i < c.len() {
        let before = if i == 0 { ' ' } else { c[i - 1] };
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let (mut depth, mut j) = (0, i);
            while j < c.len() {
                if c[j] == '/' && at(j + 1) == '*' {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && at(j + 1) == '/' {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            skip(&mut code, &mut line, i, j);
            i = j;
        } else if c[i] == 'r'
            && (!is_ident(before) || (before == 'b' && (i < 2 || !is_ident(c[i - 2]))))
            && matches!(at(i + 1), '"' | '#')
        {
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            if at(i + 1 + hashes) != '"' {
                code.push(c[i]);
                i += 1;
                continue;
            }
            let start = i + 2 + hashes;
            let mut j = start;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#')) {
                j += 1;
            }
            strings.push((line, c[start..j.min(c.len())].iter().collect(), code.len()));
            code.push_str("r\"\"");
            skip(&mut code, &mut line, start, j);
            i = j + 1 + hashes;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            strings.push((line, c[i + 1..j.min(c.len())].iter().collect(), code.len()));
            code.push_str("\"\"");
            skip(&mut code, &mut line, i + 1, j);
            i = j + 1;
        } else if c[i] == '\'' && at(i + 1) == '\\' {
            let end = (i + 3..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len());
            code.push_str("' '");
            i = end + 1;
        } else if c[i] == '\'' && at(i + 2) == '\'' {
            code.push_str("' '");
            i += 3;
        } else {
            if c[i] == '\n' {
                line += 1;
            }
            code.push(c[i]);
            i += 1;
        }
    }
    Lexed { code, strings }
}

/// The lines where `pattern` stands in `code` on its own: no identifier character just before
/// it, nor just after it when it ends with one.
fn lines_of(code: &str, pattern: &str) -> Vec<usize> {
    let ends_in_ident = pattern.chars().last().is_some_and(is_ident);
    code.match_indices(pattern)
        .filter(|(at, _)| !code[..*at].chars().next_back().is_some_and(is_ident))
        .filter(|(at, _)| {
            !ends_in_ident
                || !code[at + pattern.len()..]
                    .chars()
                    .next()
                    .is_some_and(is_ident)
        })
        .map(|(at, _)| code[..at].matches('\n').count() + 1)
        .collect()
}

/// Each file of `files` (by path) in which one of `patterns` stands, with where.
fn offenders(files: &BTreeMap<String, Source>, patterns: &[&str]) -> BTreeMap<String, Vec<String>> {
    let mut found = BTreeMap::new();
    for (path, source) in files {
        let lexed = lex(&source.code);
        let mut details = Vec::new();
        for pattern in patterns {
            for line in lines_of(&lexed.code, pattern) {
                details.push(format!("line {line}: {pattern}"));
            }
        }
        if !details.is_empty() {
            found.insert(path.clone(), details);
        }
    }
    found
}

fn outside_os() -> BTreeMap<String, Source> {
    let mut files = all_sources();
    files.retain(|path, _| !path.starts_with("src/os/"));
    files
}

#[test]
fn the_store_imports_nothing_of_the_link() {
    let mut store = all_sources();
    store.retain(|path, _| path.starts_with("src/store/"));
    // Re-exports too: a type the store hands on is one it holds.
    let mut found = offenders(
        &store,
        &["pub use crate::link", "pub(crate) use crate::link"],
    );
    for (path, source) in &store {
        for named in named_paths(source) {
            if named.first().map(String::as_str) == Some("link") {
                found
                    .entry(path.clone())
                    .or_default()
                    .push(named.join("::"));
            }
        }
    }
    verdict(check("the store names the link", &found, STORE_NAMES_LINK));
}

#[test]
fn the_engine_and_the_service_name_no_kind() {
    const KINDS: [&str; 4] = ["files", "units", "packages", "containers"];
    let mut files = all_sources();
    files.retain(|path, _| path.starts_with("src/engine/") || path.starts_with("src/service/"));
    let types = ["Files", "Units", "Packages", "Containers"];
    let modules: Vec<String> = KINDS
        .iter()
        .flat_map(|k| [format!("{k}::"), format!("::{k}")])
        .collect();
    let mut patterns: Vec<&str> = types.to_vec();
    patterns.extend(modules.iter().map(String::as_str));
    let mut found = offenders(&files, &patterns);
    for (path, source) in &files {
        let lexed = lex(&source.code);
        for (line, text, at) in lexed.strings {
            // A path's component (`.join("files")`: pacman's file lists) is not a kind.
            let component = lexed.code[..at].trim_end().ends_with(".join(");
            if KINDS.contains(&text.as_str()) && !component {
                let at = found.entry(path.clone()).or_default();
                at.push(format!("line {line}: \"{text}\""));
            }
        }
    }
    verdict(check(
        "a kind named in the engine or the service",
        &found,
        NAMES_A_KIND,
    ));
}

#[test]
fn unsafe_only_in_os() {
    let found = offenders(&outside_os(), &["unsafe"]);
    verdict(check("unsafe outside os/", &found, UNSAFE_OUTSIDE_OS));
}

#[test]
fn libc_only_in_os() {
    let found = offenders(&outside_os(), &["libc::"]);
    verdict(check("libc outside os/", &found, LIBC_OUTSIDE_OS));
}

#[test]
fn the_clock_is_read_only_in_os() {
    let patterns = ["SystemTime::now", "Instant::now", "unix_now", "now_ms"];
    let found = offenders(&outside_os(), &patterns);
    verdict(check(
        "the clock read outside os/",
        &found,
        CLOCK_OUTSIDE_OS,
    ));
}

/// A line as the shape count reads it: its code before any `//`, without string contents, and
/// char literals skipped (roughly: a quote two characters on, or an escape).
fn shape_strip(line: &str) -> String {
    let c: Vec<char> = line.chars().collect();
    let (mut out, mut i, mut in_str) = (String::new(), 0, false);
    while i < c.len() {
        if in_str {
            if c[i] == '\\' {
                i += 2;
                continue;
            }
            if c[i] == '"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c[i] == '"' {
            in_str = true;
            i += 1;
            continue;
        }
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            break;
        }
        if c[i] == '\'' && i + 2 < c.len() {
            let escaped = c[i + 1] == '\\';
            let quoted =
                c[i + 2] == '\'' || (escaped && c[i + 2..c.len().min(i + 6)].contains(&'\''));
            let from = if escaped { i + 3 } else { i + 2 };
            if let Some(end) = quoted
                .then(|| (from..c.len()).find(|&j| c[j] == '\''))
                .flatten()
            {
                i = end + 1;
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

/// The name of the function a line starts, if it does: `[pub[(..)]] [const] [unsafe]
/// [extern "C"] fn NAME`.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    let word = |rest: &mut &str, word: &str| -> bool {
        match rest.strip_prefix(word) {
            Some(after) if after.starts_with(char::is_whitespace) => {
                *rest = after.trim_start();
                true
            }
            _ => false,
        }
    };
    if let Some(after) = rest.strip_prefix("pub") {
        let after = match after.strip_prefix('(') {
            Some(inside) => inside.split_once(')').map_or(after, |(_, a)| a),
            None => after,
        };
        if after.starts_with(char::is_whitespace) {
            rest = after.trim_start();
        }
    }
    word(&mut rest, "const");
    word(&mut rest, "unsafe");
    if let Some(after) = rest.strip_prefix("extern \"C\"") {
        if after.starts_with(char::is_whitespace) {
            rest = after.trim_start();
        }
    }
    if !word(&mut rest, "fn") {
        return None;
    }
    let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Lines of code of a file (not blank, not only a comment) and each function's length in lines,
/// from its `fn` line to its closing brace's line (by brace depth), with the line it starts on.
fn shape(code: &str) -> (usize, Vec<(String, usize, usize)>) {
    let lines: Vec<&str> = code.split('\n').collect();
    let loc = lines
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.trim().starts_with("//"))
        .count();
    let mut fns = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let (mut depth, mut started, mut j) = (0i64, false, i);
        while j < lines.len() {
            let s = shape_strip(lines[j]);
            if !started && s.contains(';') && !s.contains('{') {
                break;
            }
            depth += s.matches('{').count() as i64 - s.matches('}').count() as i64;
            if s.contains('{') {
                started = true;
            }
            if started && depth <= 0 {
                break;
            }
            j += 1;
        }
        if started {
            fns.push((name.to_string(), j - i + 1, i + 1));
        }
    }
    (loc, fns)
}

#[test]
fn no_file_over_600_lines_of_code_and_no_function_over_80_lines() {
    let (mut long_files, mut long_fns) = (BTreeMap::new(), BTreeMap::new());
    for (path, source) in all_sources() {
        let (loc, fns) = shape(&source.code);
        if loc > MAX_FILE_LOC {
            long_files.insert(path.clone(), vec![format!("{loc} lines of code")]);
        }
        for (name, lines, at) in fns {
            if lines > MAX_FN_LINES {
                let key = format!("{path} {name}");
                let entry: &mut Vec<String> = long_fns.entry(key).or_default();
                entry.push(format!("{lines} lines from line {at}"));
            }
        }
    }
    let mut problems = check("a file over 600 lines of code", &long_files, LONG_FILES);
    problems.extend(check("a function over 80 lines", &long_fns, LONG_FNS));
    verdict(problems);
}

#[test]
fn the_rules_read_code_not_comments_or_strings() {
    let text = "// unsafe in a comment\n/* libc::x /* nested */ Files */ let a = \"unsafe\";\n\
                let b = r#\"Instant::now\"#; let c = '\"'; let d: &'static str = \"files\";\n\
                unsafe { libc::getpid() }; Files::NAME\n";
    let lexed = lex(text);
    assert_eq!(lines_of(&lexed.code, "unsafe"), [4]);
    assert_eq!(lines_of(&lexed.code, "libc::"), [4]);
    assert_eq!(lines_of(&lexed.code, "Instant::now"), Vec::<usize>::new());
    assert_eq!(lines_of(&lexed.code, "Files"), [4]);
    let strings: Vec<_> = lexed
        .strings
        .iter()
        .map(|(l, s, _)| (*l, s.as_str()))
        .collect();
    assert_eq!(strings, [(2, "unsafe"), (3, "Instant::now"), (3, "files")]);
    let (loc, fns) = shape("fn a() {\n    // a comment\n\n    let s = \"}\";\n}\nfn b();\n");
    assert_eq!((loc, fns), (4, vec![("a".to_string(), 5, 1)]));
}
