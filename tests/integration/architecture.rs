//! The crate's layering rule (DESIGN 10): dependencies point one way, down the pipeline; no
//! folder imports a folder that imports it back.
//!
//! The top-level modules are the files and folders of `src/` (except `main.rs` and `lib.rs`).
//! Module `a` depends on `b` when code of `a` names `crate::b` (also inside `use crate::{b, ..}`
//! groups, and as `super::..::b` climbing out of `a`). Comments, doc comments, string literals
//! and items under `#[cfg(test)]` (inline test modules and the files of `#[cfg(test)] mod x;`)
//! do not count. The resulting graph must have no cycle at all.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::source_path;

/// Cycles tolerated while they are being removed; each entry must still be a cycle (a pair
/// importing each other) or the test asks for it to be deleted from here. Empty: none is allowed.
const KNOWN_CYCLES: &[(&str, &str)] = &[];

/// One reference from a module to another: the target module and where it is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Reference {
    target: String,
    file: PathBuf,
    line: usize,
}

/// The crate's `src/` (under the package root, wherever the test binary runs from).
fn src() -> PathBuf {
    source_path("src")
}

/// Top-level module names: `src/x.rs` and `src/x/` give `x`.
fn top_modules() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            if p.is_dir() {
                Some(name)
            } else {
                let stem = name.strip_suffix(".rs")?;
                (stem != "main" && stem != "lib").then(|| stem.to_string())
            }
        })
        .collect()
}

/// Replaces comments and the contents of string and char literals with spaces, keeping line
/// breaks (so line numbers stay right) and lifetimes (`'a`).
fn blank_comments_and_strings(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string_prefix(&b, i) {
            // Raw string r"..." or r#"..."#: count the hashes, then find `"` + as many hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push_str(&" ".repeat(j + 1 - i));
            i = j + 1;
            while i < b.len() {
                if b[i] == '"' && (0..hashes).all(|k| b.get(i + 1 + k) == Some(&'#')) {
                    out.push_str(&" ".repeat(1 + hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(b[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): a literal closes within a
            // few characters.
            let end = if next == Some('\\') {
                (i + 3..b.len().min(i + 12)).find(|&k| b[k] == '\'')
            } else {
                (b.get(i + 2) == Some(&'\'')).then_some(i + 2)
            };
            match end {
                Some(e) => {
                    out.push_str(&" ".repeat(e + 1 - i));
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `true` when the `r` at `i` starts a raw string literal (`r"`, `r#"`, `br"`), not an identifier.
fn raw_string_prefix(b: &[char], i: usize) -> bool {
    let before = |k: usize| i.checked_sub(k).and_then(|p| b.get(p));
    !ident_char(before(1)) || (before(1) == Some(&'b') && !ident_char(before(2)))
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Removes items under `#[cfg(test)]` (keeping line breaks) and returns the names of the
/// `#[cfg(test)] mod name;` files, which are test code too.
fn strip_test_items(code: &str) -> (String, Vec<String>) {
    let mut out: Vec<char> = code.chars().collect();
    let mut test_mods = Vec::new();
    let text: String = out.iter().collect();
    let mut from = 0;
    while let Some(pos) = text[from..].find("#[cfg(test)]").map(|p| p + from) {
        let start = text[..pos].chars().count();
        let after = pos + "#[cfg(test)]".len();
        // The item ends at its first `;` when that comes before any `{`, else at the brace
        // matching its first `{`.
        let rest = &text[after..];
        let semi = rest.find(';');
        let brace = rest.find('{');
        let end_byte = match (semi, brace) {
            (Some(s), b) if b.is_none_or(|b| s < b) => {
                let item = rest[..s].split_whitespace().collect::<Vec<_>>();
                if let Some(i) = item.iter().position(|w| *w == "mod") {
                    test_mods.push(item[i + 1].to_string());
                }
                after + s + 1
            }
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = rest.len();
                for (k, ch) in rest[b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                after + end
            }
            _ => text.len(),
        };
        let end = text[..end_byte].chars().count();
        for ch in &mut out[start..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        from = end_byte;
    }
    (out.into_iter().collect(), test_mods)
}

/// Module path of a file below `src/`: `runner/session.rs` -> `[runner, session]`,
/// `runner/mod.rs` -> `[runner]`, `cpus.rs` -> `[cpus]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// Identifier starting at char index `i` of `c`, after whitespace.
fn ident_at(c: &[char], mut i: usize) -> (String, usize) {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    let start = i;
    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
        i += 1;
    }
    (c[start..i].iter().collect(), i)
}

/// Top-level modules named from `code` (already without comments, strings and tests) of the
/// file at `module` path: `crate::x`, `crate::{x, y::z}`, and `super::` chains leaving the
/// top-level module. Each with its 1-based line.
fn references(code: &str, module: &[String]) -> Vec<(String, usize)> {
    let c: Vec<char> = code.chars().collect();
    let line_of = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if ident_char(i.checked_sub(1).and_then(|p| c.get(p))) {
            i += 1;
            continue;
        }
        let (word, end) = ident_at(&c, i);
        if word.is_empty() || end == i {
            i += 1;
            continue;
        }
        let path_sep = |k: usize| c.get(k) == Some(&':') && c.get(k + 1) == Some(&':');
        if word == "crate" && path_sep(end) {
            let after = end + 2;
            let k = (after..c.len()).find(|&k| !c[k].is_whitespace()).unwrap_or(after);
            if c.get(k) == Some(&'{') {
                // A group: the first identifier of every top-level entry.
                let mut depth = 0;
                let mut expect = true;
                for (j, &ch) in c.iter().enumerate().skip(k) {
                    match ch {
                        '{' => {
                            depth += 1;
                            expect = depth == 1;
                            continue;
                        }
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => expect = true,
                        ch if expect && depth == 1 && (ch.is_alphanumeric() || ch == '_') => {
                            let (name, _) = ident_at(&c, j);
                            found.push((name, line_of(j)));
                            expect = false;
                        }
                        _ => {}
                    }
                }
            } else {
                let (name, _) = ident_at(&c, after);
                found.push((name, line_of(i)));
            }
            i = end;
        } else if word == "super" && path_sep(end) {
            // Count the chain; it leaves the top-level module when it climbs to the crate root.
            let mut ups = 1;
            let mut k = end + 2;
            loop {
                let (w, e) = ident_at(&c, k);
                if w == "super" && path_sep(e) {
                    ups += 1;
                    k = e + 2;
                } else {
                    if ups >= module.len() {
                        found.push((w, line_of(i)));
                    }
                    break;
                }
            }
            i = k;
        } else {
            i = end;
        }
    }
    found
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if dir.is_file() {
        files.push(dir.to_path_buf());
    } else if dir.is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            files.extend(rust_files(&e.unwrap().path()));
        }
    }
    files.sort();
    files
}

/// The dependency graph: module -> referenced module -> where.
fn graph() -> BTreeMap<String, BTreeMap<String, Vec<Reference>>> {
    let modules = top_modules();
    let root = src();
    let mut graph: BTreeMap<String, BTreeMap<String, Vec<Reference>>> = BTreeMap::new();
    for m in &modules {
        let mut files = rust_files(&root.join(m));
        files.extend(rust_files(&root.join(format!("{m}.rs"))));
        let mut excluded: BTreeSet<PathBuf> = BTreeSet::new();
        let edges = graph.entry(m.clone()).or_default();
        for file in &files {
            if excluded.contains(file) {
                continue;
            }
            let text = std::fs::read_to_string(file).unwrap();
            let (code, test_mods) = strip_test_items(&blank_comments_and_strings(&text));
            // Where the file's child modules live: beside a mod.rs, else in the folder named
            // after the file.
            let dir = if file.file_name().is_some_and(|n| n == "mod.rs") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            for t in test_mods {
                excluded.insert(dir.join(format!("{t}.rs")));
                excluded.extend(rust_files(&dir.join(&t)));
            }
            let rel = file.strip_prefix(&root).unwrap();
            for (target, line) in references(&code, &module_path(rel)) {
                if &target != m && modules.contains(&target) {
                    edges.entry(target.clone()).or_default().push(Reference {
                        target,
                        file: rel.to_path_buf(),
                        line,
                    });
                }
            }
        }
        // Test files are listed before the files they belong to are all read: drop them now.
        for refs in edges.values_mut() {
            refs.retain(|r| !excluded.contains(&root.join(&r.file)));
        }
        edges.retain(|_, refs| !refs.is_empty());
    }
    graph
}

/// Strongly connected components with more than one module (each one is a cycle), by Tarjan's
/// algorithm over `edges`.
fn cycles(nodes: &BTreeSet<String>, edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeSet<(String, String)>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on_stack: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(s: &mut State<'_>, v: &str) {
        let n = s.index.len();
        s.index.insert(v.to_string(), n);
        s.low.insert(v.to_string(), n);
        s.stack.push(v.to_string());
        s.on_stack.insert(v.to_string());
        let next: Vec<String> = s
            .edges
            .iter()
            .filter(|(a, _)| a == v)
            .map(|(_, b)| b.clone())
            .collect();
        for w in next {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let low = s.low[v].min(s.low[&w]);
                s.low.insert(v.to_string(), low);
            } else if s.on_stack.contains(&w) {
                let low = s.low[v].min(s.index[&w]);
                s.low.insert(v.to_string(), low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                let done = w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn edge_set(graph: &BTreeMap<String, BTreeMap<String, Vec<Reference>>>) -> BTreeSet<(String, String)> {
    graph
        .iter()
        .flat_map(|(a, targets)| targets.keys().map(move |b| (a.clone(), b.clone())))
        .collect()
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let graph = graph();
    let all = edge_set(&graph);
    let known = |a: &str, b: &str| {
        KNOWN_CYCLES
            .iter()
            .any(|&(x, y)| (x, y) == (a, b) || (y, x) == (a, b))
    };

    let stale: Vec<String> = KNOWN_CYCLES
        .iter()
        .filter(|(a, b)| {
            !(all.contains(&(a.to_string(), b.to_string())) && all.contains(&(b.to_string(), a.to_string())))
        })
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    assert!(
        stale.is_empty(),
        "no longer cycles, delete them from KNOWN_CYCLES in tests/integration/architecture.rs: {}",
        stale.join(", ")
    );

    let edges: BTreeSet<(String, String)> = all.iter().filter(|(a, b)| !known(a, b)).cloned().collect();
    let nodes: BTreeSet<String> = graph.keys().cloned().collect();
    let found = cycles(&nodes, &edges);
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("cycle among {}:\n", component.join(", ")));
        for a in component {
            for (b, refs) in &graph[a] {
                if component.contains(b) && !known(a, b) {
                    let r = &refs[0];
                    report.push_str(&format!(
                        "  {a} -> {b} ({}:{}{})\n",
                        r.file.display(),
                        r.line,
                        if refs.len() > 1 {
                            format!(" and {} more", refs.len() - 1)
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between top-level modules of src/:\n{report}"
    );
}

/// What the leaves of docs/architecture.md may import: nothing, except `cli`, which takes the
/// value enums it shares with the library from the leaf `choices` (no mirrored enums to map).
const LEAVES: &[(&str, &[&str])] = &[
    ("exit_codes", &[]),
    ("signal", &[]),
    ("cpus", &[]),
    ("memory", &[]),
    ("digest", &[]),
    ("names", &[]),
    ("timestamp", &[]),
    ("table", &["terminal"]),
    ("slurm", &[]),
    ("choices", &[]),
    ("cli", &["choices"]),
];

#[test]
fn leaves_import_only_what_the_map_allows() {
    let graph = graph();
    let mut report = String::new();
    for (leaf, allowed) in LEAVES {
        let targets = graph
            .get(*leaf)
            .unwrap_or_else(|| panic!("{leaf} is not a top-level module of src/"));
        for (target, refs) in targets {
            if !allowed.contains(&target.as_str()) {
                let r = &refs[0];
                report.push_str(&format!(
                    "  {leaf} -> {target} ({}:{})\n",
                    r.file.display(),
                    r.line
                ));
            }
        }
    }
    assert!(
        report.is_empty(),
        "leaves importing modules docs/architecture.md does not allow them:\n{report}"
    );
}

/// The scanner itself: comments, strings and test code do not count; groups and `super` do.
#[test]
fn the_scanner_sees_code_references_only() {
    let text = r##"
//! Uses [`crate::doc_only`].
use crate::{alpha, beta::{X, Y}, gamma::Z};
use super::super::delta::W;
fn f<'a>(x: &'a str) -> char { let _ = "crate::in_string \" crate::escaped"; let _ = r#"crate::raw"#; let _ = br"crate::\"; '\''; 'c' }
/* crate::block_comment */
#[cfg(test)]
mod tests { use crate::test_only; }
#[cfg(test)]
mod more_tests;
fn g() { crate::epsilon::call(); }
"##;
    let (code, test_mods) = strip_test_items(&blank_comments_and_strings(text));
    assert_eq!(code.lines().count(), text.lines().count(), "line breaks are kept");
    let names: Vec<String> = references(&code, &["m".into(), "n".into()])
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma", "delta", "epsilon"]);
    assert_eq!(test_mods, ["more_tests"]);
    // One `super` from a file directly in its module's folder stays inside that module.
    let inside = references("use super::sibling;", &["m".into(), "n".into()]);
    assert!(inside.is_empty(), "{inside:?}");

    let nodes: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let edges: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .map(|(x, y)| (x.into(), y.into()))
        .into();
    assert_eq!(cycles(&nodes, &edges), [vec!["a", "b", "c"]]);
}

/// Paths named from `code` (already without comments, strings and tests) of the file at module
/// path `module`: `crate::a::b`, `super::x::y` and `self::x` (resolved against `module`), with
/// `{..}` groups expanded (`crate::a::{b, c::d}` gives `a::b` and `a::c::d`). Each with its line.
fn full_paths(code: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    /// Reads the path tail at `i` after `prefix`: an identifier chain, or a group.
    fn tail(c: &[char], i: usize, prefix: Vec<String>, line: usize, out: &mut Vec<(Vec<String>, usize)>) {
        let mut k = i;
        while k < c.len() && c[k].is_whitespace() {
            k += 1;
        }
        if c.get(k) == Some(&'{') {
            let mut depth = 0;
            let mut start = k + 1;
            for j in k..c.len() {
                match c[j] {
                    '{' => depth += 1,
                    '}' if depth == 1 => {
                        tail(c, start, prefix.clone(), line, out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        tail(c, start, prefix.clone(), line, out);
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let (word, end) = ident_at(c, k);
        if word.is_empty() || word == "self" {
            out.push((prefix, line));
            return;
        }
        let mut path = prefix;
        path.push(word);
        let mut e = end;
        while e < c.len() && c[e].is_whitespace() {
            e += 1;
        }
        if c.get(e) == Some(&':') && c.get(e + 1) == Some(&':') {
            tail(c, e + 2, path, line, out);
        } else {
            out.push((path, line));
        }
    }
    let c: Vec<char> = code.chars().collect();
    let line_of = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let path_sep = |k: usize| c.get(k) == Some(&':') && c.get(k + 1) == Some(&':');
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if ident_char(i.checked_sub(1).and_then(|p| c.get(p))) || (i > 1 && path_sep(i - 2)) {
            i += 1;
            continue;
        }
        let (word, end) = ident_at(&c, i);
        if end == i || word.is_empty() {
            i += 1;
            continue;
        }
        if !path_sep(end) || !["crate", "super", "self"].contains(&word.as_str()) {
            i = end;
            continue;
        }
        let mut base: Vec<String> = match word.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            _ => module[..module.len().saturating_sub(1)].to_vec(),
        };
        let mut k = end + 2;
        if word == "super" {
            loop {
                let (w, e) = ident_at(&c, k);
                if w == "super" && path_sep(e) {
                    base.pop();
                    k = e + 2;
                } else {
                    break;
                }
            }
        }
        tail(&c, k, base, line_of(i), &mut out);
        i = k;
    }
    out
}

/// Circles between files of `src/` (DESIGN 10): a file that names an item of another file
/// (`crate::a::b::item`, `super::x::item`, `use` groups) depends on it; the files of a strongly
/// connected component of more than one file import each other. There must be none: what two
/// files share goes into a third below both. Test modules (inline or `#[cfg(test)] mod x;`) do
/// not count. `main.rs` and `lib.rs` (the crate root) are left out.
#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let root = src();
    let files: Vec<PathBuf> = rust_files(&root)
        .into_iter()
        .filter(|f| {
            let rel = f.strip_prefix(&root).unwrap();
            rel != Path::new("main.rs") && rel != Path::new("lib.rs")
        })
        .collect();
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&root).unwrap();
            (module_path(rel), rel.display().to_string())
        })
        .collect();
    let mut excluded: BTreeSet<PathBuf> = BTreeSet::new();
    let mut refs: BTreeMap<(String, String), (String, usize)> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let (code, test_mods) = strip_test_items(&blank_comments_and_strings(&text));
        let dir = if file.file_name().is_some_and(|n| n == "mod.rs") {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for t in test_mods {
            excluded.insert(dir.join(format!("{t}.rs")));
            excluded.extend(rust_files(&dir.join(&t)));
        }
        let here = rel.display().to_string();
        for (path, line) in full_paths(&code, &module_path(rel)) {
            let target = (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]));
            if let Some(target) = target
                && *target != here
            {
                refs.entry((here.clone(), target.clone()))
                    .or_insert((here.clone(), line));
            }
        }
    }
    let skip = |f: &str| excluded.contains(&root.join(f));
    let edges: BTreeSet<(String, String)> = refs
        .keys()
        .filter(|(a, b)| !skip(a) && !skip(b))
        .cloned()
        .collect();
    let nodes: BTreeSet<String> = modules.values().filter(|f| !skip(f)).cloned().collect();
    let found = cycles(&nodes, &edges);
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("circle among {}:\n", component.join(", ")));
        for (a, b) in &edges {
            if component.contains(a) && component.contains(b) {
                let (file, line) = &refs[&(a.clone(), b.clone())];
                report.push_str(&format!("  {a} -> {b} (src/{file}:{line})\n"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files of src/ that import each other:\n{report}"
    );
}

/// The file-level scanner reads groups, `super` chains and `self` paths, and only code.
#[test]
fn the_file_scanner_expands_groups_and_climbs_super_chains() {
    let code =
        "use crate::a::{b, c::{d, e}};\nfn f() { super::super::x::y(); self::z::w(); g::crate_like(); }\n";
    let got: Vec<Vec<String>> = full_paths(code, &["m".to_string(), "n".to_string(), "o".to_string()])
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let want: Vec<Vec<String>> = [
        vec!["a", "b"],
        vec!["a", "c", "d"],
        vec!["a", "c", "e"],
        vec!["m", "x", "y"],
        vec!["m", "n", "o", "z", "w"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(got, want);
}
