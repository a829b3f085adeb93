//! The house's rule, checked over the source text: `src/`'s layers import only downwards, and no
//! file imports, through any chain, a file that imports it. Run alone with
//! `cargo test --test layers`; it prints every upward import and every cycle it finds.
//!
//! What counts as an import: every `crate::` path (also a macro's `$crate::`) and every
//! `super::` path in a file's code outside its unit tests (`#[cfg(test)] mod tests`, to the end
//! of the file), resolved to the file that defines the module it names. `mod` lines and `pub use` re-exports are not imports:
//! a parent names its children; it does not depend on what they do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a file may import from its own layer and those before it.
const LAYERS: &[&str] = &[
    "util", "os", "tools", "model", "link", "store", "kinds", "engine", "service", "cli",
];

/// Layers that keep their own types although one is below the other: the store keeps its own
/// records, the link its wire types, and the engine converts between them (`engine/wire.rs`).
const APART: &[(&str, &str)] = &[("store", "link")];

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
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.insert(relative, Source { module, code });
        }
    }
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
    let mut files = BTreeMap::new();
    sources(Path::new("src"), &mut files);
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
                if APART.contains(&(LAYERS[from], LAYERS[to])) {
                    upward.push(format!(
                        "{} ({}) imports {} ({}), a layer it keeps apart from",
                        path.display(),
                        LAYERS[from],
                        target.display(),
                        LAYERS[to]
                    ));
                }
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
