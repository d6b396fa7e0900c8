//! Which way the crate's imports go: the files of `dropscope/src` read as text, their paths
//! (`use crate::…`, `crate::…`, `super::…`, a declared child's) resolved to the file that
//! defines them. No file imports a file that imports it back, and nothing from the model, the
//! ledger or the writers reaches the readers, the probe, the command line or the terminal,
//! not even through a re-export (a path through the model's `pub use` is the model's), with
//! no exception (unit tests' imports left out: a shared fixture builds the model's types for
//! every layer).
//! `cargo test -p dropscope --test imports -- --nocapture` prints the edges between the
//! crate's top-level modules.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// A file of the crate: its module path and the paths it names.
struct File {
    module: Vec<String>,
    text: String,
}

/// The crate's files by module path (`lib.rs` and `main.rs` are the root).
fn files() -> BTreeMap<String, File> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    let mut out = BTreeMap::new();
    for p in paths {
        let rel = p.strip_prefix(&src).expect("under src");
        let name = rel.to_string_lossy().replace('\\', "/");
        let mut module: Vec<String> = name
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_owned)
            .collect();
        if matches!(
            module.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            module.pop();
        }
        let text = fs::read_to_string(&p).expect("read file");
        out.insert(name, File { module, text });
    }
    out
}

/// The text with comments and string literals blanked (paths in docs are not imports).
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'\'' {
            // A char literal is blanked ('"', '{'); a lifetime is kept.
            let end = if b.get(i + 1) == Some(&b'\\') {
                (i + 3..b.len()).find(|&j| b[j] == b'\'')
            } else {
                (i + 2..(i + 6).min(b.len())).find(|&j| b[j] == b'\'')
            };
            match end {
                Some(e)
                    if b[i + 1] == b'\\' || !(b[i + 1] as char).is_alphanumeric() || e == i + 2 =>
                {
                    out.push(' ');
                    i = e + 1;
                }
                _ => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else if (b[i] == b'"' || (b[i] == b'r' && matches!(b.get(i + 1), Some(b'#' | b'"'))))
            && !(i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') && b[i] == b'r')
        {
            // A string, raw (r#"…"#) or not.
            let mut hashes = 0;
            if b[i] == b'r' {
                i += 1;
                while b.get(i) == Some(&b'#') {
                    hashes += 1;
                    i += 1;
                }
            }
            i += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain((0..hashes).map(|_| b'#'))
                .collect();
            while i < b.len() && !b[i..].starts_with(&close) {
                i += if b[i] == b'\\' && hashes == 0 { 2 } else { 1 };
            }
            i += close.len();
            out.push(' ');
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The inline modules (`mod tests { … }`) of a file's code: where each begins and ends, and
/// its name.
fn inline_mods(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut open: Vec<(usize, Option<(usize, String)>)> = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '{' => {
                let head = text[..i].trim_end();
                let word = head
                    .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next();
                let before = head[..head.len() - word.map_or(0, str::len)].trim_end();
                let m = (before.ends_with("mod") && word.is_some_and(|w| !w.is_empty()))
                    .then(|| (i, word.unwrap_or_default().to_owned()));
                open.push((i, m));
            }
            '}' => {
                if let Some((_, Some((start, name)))) = open.pop() {
                    out.push((start, i, name));
                }
            }
            _ => {}
        }
    }
    out
}

/// Every path a file names, made absolute (from the crate's root), as segments. A `pub use`
/// of the file's own children is what it exports, not an import.
fn paths(file: &File, children: &BTreeSet<String>) -> Vec<(Vec<String>, bool)> {
    let text = code(&file.text);
    let mods = inline_mods(&text);
    let scope = |at: usize| -> Vec<String> {
        let mut m = file.module.clone();
        m.extend((mods.iter().filter(|(s, e, _)| *s < at && at < *e)).map(|(_, _, n)| n.clone()));
        m
    };
    let mut found: Vec<(usize, bool, Vec<String>)> = Vec::new();
    // `use` trees, braces and all.
    let mut from = 0;
    while let Some(at) = text[from..].find("use ") {
        let at = from + at;
        from = at + 4;
        let head = text[..at].trim_end();
        if head
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !head.ends_with("pub")
        {
            continue;
        }
        let export = head.ends_with("pub") || head.ends_with(')');
        let end = text[from..].find(';').map_or(text.len(), |e| from + e);
        let tree: String = (text[from..end].replace(" as ", "@").chars())
            .filter(|c| !c.is_whitespace())
            .collect();
        let mut trees = Vec::new();
        expand(&tree, Vec::new(), &mut trees);
        found.extend(trees.into_iter().map(|t| (at, export, t)));
        from = end;
    }
    // Paths in code: `crate::a::b`, `super::a`.
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            if text[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let path: String = text[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if text[at + path.len()..].starts_with('{') {
                continue; // a `use` tree's, read above
            }
            let segments = path.split("::").filter(|s| !s.is_empty());
            found.push((at, false, segments.map(str::to_owned).collect()));
        }
    }
    found
        .into_iter()
        .filter_map(|(at, export, mut p)| {
            if p.last().is_some_and(|l| l == "self") {
                p.pop();
            }
            if let Some(l) = p.last_mut() {
                l.truncate(l.find('@').unwrap_or(l.len()));
            }
            let here = scope(at);
            let own_child = export && p.first().is_some_and(|c| children.contains(c));
            if own_child && here == file.module {
                return None;
            }
            let test = here.iter().any(|m| is_test(m));
            absolute(&here, children, p).map(|p| (p, test))
        })
        .collect()
}

/// A `use` tree's paths (`a::{b, c::{d, e}}`).
fn expand(tree: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim_start_matches("::");
    match tree.find('{') {
        Some(open) if tree.ends_with('}') => {
            let mut base = prefix;
            base.extend(
                tree[..open]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            let inner = &tree[open + 1..tree.len() - 1];
            let mut depth = 0;
            let mut part = String::new();
            for c in inner.chars().chain([',']) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if c == ',' && depth == 0 {
                    if !part.is_empty() {
                        expand(&part, base.clone(), out);
                    }
                    part.clear();
                } else {
                    part.push(c);
                }
            }
        }
        _ => {
            let mut p = prefix;
            p.extend(
                tree.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
            out.push(p);
        }
    }
}

/// A path from the crate's root, or `None` for another crate's.
fn absolute(module: &[String], children: &BTreeSet<String>, p: Vec<String>) -> Option<Vec<String>> {
    let first = p.first()?.as_str();
    let mut here: Vec<String> = module.to_vec();
    let mut rest = p.as_slice();
    match first {
        "crate" => {
            here.clear();
            rest = &rest[1..];
        }
        "self" => rest = &rest[1..],
        "super" => {
            while rest.first().map(String::as_str) == Some("super") {
                here.pop();
                rest = &rest[1..];
            }
        }
        c if children.contains(c) => {}
        _ => return None,
    }
    here.extend(rest.iter().cloned());
    Some(here)
}

/// What a file re-exports (`pub use`): a name, the path it stands for; `*` for a glob.
fn reexports(file: &File, children: &BTreeSet<String>) -> Vec<(String, Vec<String>)> {
    let text = code(&file.text);
    let mut out = Vec::new();
    for head in ["pub use ", "pub(crate) use ", "pub(super) use "] {
        let mut rest = text.as_str();
        while let Some(at) = rest.find(head) {
            rest = &rest[at + head.len()..];
            let end = rest.find(';').unwrap_or(rest.len());
            let tree: String = (rest[..end].replace(" as ", "@").chars())
                .filter(|c| !c.is_whitespace())
                .collect();
            let mut named = Vec::new();
            expand_named(&tree, Vec::new(), &mut named);
            for (name, p) in named {
                if let Some(abs) = absolute(&file.module, children, p) {
                    out.push((name, abs));
                }
            }
            rest = &rest[end..];
        }
    }
    out
}

/// A `use` tree's paths with the name each brings in (`*` for a glob).
fn expand_named(tree: &str, prefix: Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    let mut plain = Vec::new();
    expand(tree, prefix, &mut plain);
    for p in plain {
        let mut p = p;
        let last = p.last().cloned().unwrap_or_default();
        let (path_last, name) = match last.split_once('@') {
            Some((a, b)) => (a.to_owned(), b.to_owned()),
            None => (last.clone(), last.clone()),
        };
        if let Some(l) = p.last_mut() {
            *l = path_last;
        }
        if name == "*" {
            p.pop();
        }
        out.push((name, p));
    }
}

/// Whether a file defines an item of this name itself.
fn defines(file: &File, name: &str) -> bool {
    let text = code(&file.text);
    [
        "fn", "struct", "enum", "const", "static", "type", "trait", "mod", "union",
    ]
    .iter()
    .any(|kw| {
        let pat = format!("{kw} {name}");
        text.match_indices(&pat).any(|(at, _)| {
            let after = text[at + pat.len()..].chars().next();
            !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    }) || text.contains(&format!("macro_rules! {name}"))
}

/// The crate's files, their modules' re-exports, for resolving paths to files.
struct Index {
    files: BTreeMap<String, File>,
    by_module: BTreeMap<Vec<String>, String>,
    reexports: BTreeMap<String, Vec<(String, Vec<String>)>>,
}

/// The file that defines a path: the longest prefix that is a file of the crate, through its
/// re-exports. `via` gets each file whose re-export the path goes through.
fn defining(ix: &Index, path: &[String], depth: u32, via: &mut Vec<String>) -> Option<String> {
    let n = (1..=path.len())
        .rev()
        .find(|n| ix.by_module.contains_key(&path[..*n]))?;
    let file = ix.by_module[&path[..n]].clone();
    let Some(name) = path.get(n) else {
        return Some(file);
    };
    if depth > 8 || defines(&ix.files[&file], name) {
        return Some(file);
    }
    let re = &ix.reexports[&file];
    if let Some((_, target)) = re.iter().find(|(n, _)| n == name) {
        let mut t = target.clone();
        t.extend(path[n + 1..].iter().cloned());
        via.push(file.clone());
        return defining(ix, &t, depth + 1, via).or(Some(file));
    }
    for (_, target) in re.iter().filter(|(n, _)| n == "*") {
        let mut t = target.clone();
        t.extend(path[n..].iter().cloned());
        let mut hops = Vec::new();
        if let Some(f) = defining(ix, &t, depth + 1, &mut hops)
            && ix.files[&f].module != ix.files[&file].module
        {
            via.push(file.clone());
            via.extend(hops);
            return Some(f);
        }
    }
    Some(file)
}

/// A file's declared children (`mod x;`).
fn children(file: &File) -> BTreeSet<String> {
    code(&file.text)
        .lines()
        .filter_map(|l| {
            let l = l
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            let m = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(m.trim().to_owned())
        })
        .collect()
}

/// Whether a module is a unit test's (`tests`, `tests_x`, `x_tests`).
fn is_test(module: &str) -> bool {
    module == "tests" || module.starts_with("tests_") || module.ends_with("_tests")
}

/// The file-to-file import graph: for each file, the files it imports, each with whether only
/// its unit tests do; with `through`, also the files whose re-exports its paths go through (a
/// path through the model's `pub use` is the model's, wherever the item is defined).
fn graph(through: bool) -> BTreeMap<String, BTreeMap<String, bool>> {
    let files = files();
    let by_module: BTreeMap<Vec<String>, String> = files
        .iter()
        .filter(|(name, _)| name.as_str() != "main.rs")
        .map(|(name, f)| (f.module.clone(), name.clone()))
        .collect();
    let reexports = files
        .iter()
        .map(|(name, f)| (name.clone(), reexports(f, &children(f))))
        .collect();
    let ix = Index {
        files,
        by_module,
        reexports,
    };
    let mut edges = BTreeMap::new();
    for (name, f) in &ix.files {
        let mut to: BTreeMap<String, bool> = BTreeMap::new();
        for (p, test) in paths(f, &children(f)) {
            let mut via = Vec::new();
            let Some(t) = defining(&ix, &p, 0, &mut via) else {
                continue;
            };
            let via = via.into_iter().filter(|_| through);
            for t in std::iter::once(t).chain(via) {
                if &t != name && name != "main.rs" {
                    let test = test || f.module.iter().any(|m| is_test(m));
                    let only_test = to.entry(t).or_insert(true);
                    *only_test &= test;
                }
            }
        }
        edges.insert(name.clone(), to);
    }
    edges
}

/// A file's place in the layers: the top-level module (`cli.rs` and `cli/` alike), or the file
/// for the terminal guard.
fn top(file: &str) -> String {
    if file == "tui/terminal.rs" {
        return "tui/terminal".into();
    }
    let first = file.split('/').next().unwrap_or(file);
    first.trim_end_matches(".rs").to_owned()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let g = graph(false);
    // A file is on a circle when it reaches itself; the first such path is shown.
    let mut circles = Vec::new();
    for start in g.keys() {
        let mut came: BTreeMap<&String, &String> = BTreeMap::new();
        let mut todo: Vec<&String> = vec![start];
        while let Some(f) = todo.pop() {
            // A unit test's imports (a shared fixture that builds the model's types) are not
            // the file's.
            let to = g.get(f).into_iter().flatten();
            for t in to.filter(|(_, only_test)| !**only_test).map(|(t, _)| t) {
                if t == start {
                    let mut path = vec![f.clone()];
                    let mut at = f;
                    while let Some(p) = came.get(at) {
                        path.push((*p).clone());
                        at = p;
                    }
                    path.reverse();
                    circles.push(path.join(" -> "));
                    todo.clear();
                    break;
                }
                if t != start && !came.contains_key(t) {
                    came.insert(t, f);
                    todo.push(t);
                }
            }
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:#?}");
    // The check reads what it must: some known edges are found.
    assert!(
        g["ledger/reconcile.rs"].contains_key("ledger/layers.rs"),
        "{g:?}"
    );
}

#[test]
fn imports_flow_from_the_readers_to_the_views() {
    // A path through a re-export is against the flow where either file is.
    let g = graph(true);
    let mut tops: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in &g {
        for t in to
            .iter()
            .filter(|(_, only_test)| !**only_test)
            .map(|(t, _)| t)
        {
            if top(from) != top(t) {
                tops.entry(top(from)).or_default().insert(top(t));
            }
        }
    }
    for (from, to) in &tops {
        println!(
            "{from} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let upstream = ["kcounters", "probe", "cli", "tui/terminal"];
    let downstream = ["model", "ledger", "output"];
    let against: BTreeSet<String> = g
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |(t, only_test)| (from, t, *only_test)))
        .filter(|(from, t, only_test)| {
            !only_test
                && upstream.contains(&top(from).as_str())
                && downstream.contains(&top(t).as_str())
        })
        .map(|(from, t, _)| format!("{from} -> {t}"))
        .collect();
    assert!(against.is_empty(), "imports against the flow: {against:#?}");
    // The check reads what it must: the views import the model, and a path through the
    // model's re-export (`model::KernelReading`) is both the model's and its defining file's.
    assert!(tops["tui"].contains("model"), "{tops:?}");
    let unseen = &g["ledger/unseen.rs"];
    assert!(
        unseen.contains_key("model/mod.rs") && unseen.contains_key("vocab/reading.rs"),
        "{unseen:?}"
    );
}
