//! The code's layout, checked: no two modules of a crate import each other, directly or round a
//! loop (each arrow between the modules of a crate runs one way), and no source file is over
//! 800 lines of code.
//!
//! A module is a crate's top-level `mod` (a file or a folder under `src/`), and, inside a
//! folder, each of its own modules. An import is any `crate::NAME` path in code (comments,
//! doc comments, `#[cfg(test)]` modules and test modules' files (`tests.rs`, `*_tests/`) left
//! out: tests may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 5] = ["trainer", "workspaces", "cli", "tui", "kernel"];
const MAX_LINES_OF_CODE: usize = 800;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether a file or folder name is a test module's (`tests.rs`, `app_tests/`, ...): declared
/// `#[cfg(test)] mod tests;`, test code that may reach anywhere.
fn is_test_module(name: &str) -> bool {
    let stem = name.strip_suffix(".rs").unwrap_or(name);
    stem == "tests" || stem.ends_with("_tests")
}

/// Every `.rs` file under `dir` (not `src/bin/`: each binary is a crate of its own), test
/// modules' files left out.
fn code_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    sources(dir, out);
    out.retain(|p| {
        !p.strip_prefix(dir)
            .unwrap_or(p)
            .components()
            .any(|c| is_test_module(&c.as_os_str().to_string_lossy()))
    });
}

/// Every `.rs` file under `dir` (not `src/bin/`: each binary is a crate of its own).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin") && dir.ends_with("src") {
                continue;
            }
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file without comments, string contents and `#[cfg(test)] mod NAME { ... }` blocks.
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
        } else if b[i..].starts_with(b"'\"'") || b[i..].starts_with(b"'\\\"'") {
            // A quote character, not a string.
            i += if b[i + 1] == b'\\' { 4 } else { 3 };
        } else if b[i] == b'"' {
            // Skip a string literal (raw strings with `#` are rare in this code and hold no paths
            // that matter; a `crate::` inside one would only add an arrow, never hide one).
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            code.push(b[i] as char);
            i += 1;
        }
    }
    strip_test_modules(&code)
}

fn strip_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let head = head
            .strip_prefix("pub(crate)")
            .or_else(|| head.strip_prefix("pub"))
            .unwrap_or(head)
            .trim_start();
        let is_mod_block = head.starts_with("mod ")
            && head
                .find(['{', ';'])
                .is_some_and(|k| head.as_bytes()[k] == b'{');
        if !is_mod_block {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = after.find('{').expect("a mod block has a brace");
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The module path of a file of `src` (`a/b/mod.rs` and `a/b.rs` → `[a, b]`; `lib.rs`,
/// `main.rs` → `[]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

/// The module paths named after `crate::` in `code`, as written (`crate::a::b::Item` →
/// `[a, b, Item]`; a `crate::{a, b::c}` group gives each).
fn imports(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `ddp_crate::` or similar
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                found.push(path_words(item.trim()));
            }
        } else {
            found.push(path_words(rest));
        }
    }
    found
}

fn path_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        words.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) if !r.starts_with('{') => rest = r,
            _ => break,
        }
    }
    words
}

/// For every module of `src` with sub-modules (the crate root included), the arrows between
/// its sub-modules: `(parent, from, to)`.
fn arrows(src: &Path) -> BTreeSet<(Vec<String>, String, String)> {
    let mut files = Vec::new();
    code_sources(src, &mut files);
    let mut arrows = BTreeSet::new();
    for file in files {
        let from = module_of(src, &file);
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for to in imports(&code) {
            // The deepest module both paths share; the arrow runs between its children.
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                let parent = from[..common].to_vec();
                let (a, b) = (from[common].clone(), to[common].clone());
                if b.chars().next().is_some_and(|c| c.is_lowercase()) {
                    arrows.insert((parent, a, b));
                }
            }
        }
    }
    arrows
}

/// The loops among `edges` (strongly connected sets of more than one node).
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in edges.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for n in &nodes {
        let set: BTreeSet<String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if set.len() > 1 && !found.contains(&set) {
            found.push(set);
        }
    }
    found
}

#[test]
fn no_two_modules_import_each_other() {
    let mut problems = Vec::new();
    for krate in CRATES {
        let src = repo().join(krate).join("src");
        let mut by_parent: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> =
            BTreeMap::new();
        for (parent, a, b) in arrows(&src) {
            by_parent
                .entry(parent)
                .or_default()
                .entry(a)
                .or_default()
                .insert(b);
        }
        for (parent, edges) in &by_parent {
            for l in loops(edges) {
                let place = if parent.is_empty() {
                    format!("{krate}/src")
                } else {
                    format!("{krate}/src/{}", parent.join("/"))
                };
                let arrows: Vec<String> = l
                    .iter()
                    .flat_map(|a| {
                        edges[a]
                            .iter()
                            .filter(|b| l.contains(*b))
                            .map(move |b| format!("{a} → {b}"))
                    })
                    .collect();
                problems.push(format!("{place}: {}", arrows.join(", ")));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "modules that import each other (move what both need into a module below them):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_sees_a_loop_and_ignores_tests_and_comments() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::x;\n// crate::c::y\n").unwrap();
    std::fs::write(
        src.join("b/mod.rs"),
        "pub mod x;\nfn f() { crate::c::g(); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "/// [`crate::a`]\nuse crate::{b::x, Error};\n#[cfg(test)]\nmod tests { use crate::a::T; }\n",
    )
    .unwrap();
    let edges = arrows(src);
    let root: BTreeMap<String, BTreeSet<String>> =
        edges.iter().fold(BTreeMap::new(), |mut m, (_, a, b)| {
            m.entry(a.clone()).or_default().insert(b.clone());
            m
        });
    assert_eq!(
        root,
        BTreeMap::from([
            ("a".to_string(), BTreeSet::from(["b".to_string()])),
            ("b".to_string(), BTreeSet::from(["c".to_string()])),
            ("c".to_string(), BTreeSet::from(["b".to_string()])),
        ])
    );
    assert_eq!(
        loops(&root),
        [BTreeSet::from(["b".to_string(), "c".to_string()])]
    );
}

#[test]
fn no_source_file_is_over_800_lines_of_code() {
    let mut long = Vec::new();
    for krate in CRATES.iter().chain(&["tests"]) {
        let mut files = Vec::new();
        sources(&repo().join(krate), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("//"))
                .count();
            if code > MAX_LINES_OF_CODE {
                long.push(format!("{}: {code} lines of code", f.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES_OF_CODE} lines of code:\n{}",
        long.join("\n")
    );
}
