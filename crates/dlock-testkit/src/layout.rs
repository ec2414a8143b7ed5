//! The two rules every dlock crate's module layout keeps (docs/decisions.md, "Layering"),
//! read from its source files so that a test in each crate can hold them:
//! - **no import cycle** among its modules, so each module can be read, tested and moved
//!   with what it depends on alone;
//! - **no module names an item through the crate root**: each item is named by the
//!   module that defines it, so every dependency is written as one (and seen by the cycle
//!   check), and `lib.rs`/`main.rs` hold only modules, re-exports and entry points: a
//!   helper there would make every module depend on the top.
//!
//! A module is a file (`foo.rs`, or `foo/mod.rs` as `foo`; `foo/bar.rs` as `foo::bar`); an
//! edge A → B is a `crate::B…` path in A's code (not in a comment or a string). Paths into A's own
//! children do not count: a parent may use what it is made of. `super::` and `self::` paths
//! are resolved against the module they are written in (inline `mod name { .. }` blocks
//! included), so a cycle between siblings written with `super::` is seen too. One reading
//! it cannot settle: `use crate::name;` where `name` is both a module and an item the root
//! re-exports imports both; it counts as the module. (The team's `modcycles` tool, which
//! `.ci/run` also runs where it is installed, reads `crate::` paths alone.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's modules, their source, and the `crate::` paths each one names.
#[derive(Debug)]
pub struct Layout {
    /// Module path (`""` for the crate root, else `a::b`) → its file and code lines.
    modules: BTreeMap<String, Module>,
}

#[derive(Debug)]
struct Module {
    file: PathBuf,
    /// The file's code: comments, strings and character literals blanked (line numbers
    /// kept), so that only paths the compiler reads are seen.
    code: String,
}

/// One `crate::` path found in a module's code.
#[derive(Debug)]
struct Mention<'a> {
    from: &'a str,
    line: usize,
    /// The path from the crate root (a `super::` or `self::` path resolved against the
    /// module it is written in, inline `mod name { .. }` blocks included), up to the first
    /// segment that is not an identifier; `*` for a glob on the root itself.
    segments: Vec<String>,
    /// The path is called (`crate::name(..)`, `crate::name!(..)`): a function or macro.
    called: bool,
}

impl Layout {
    /// Reads every `.rs` file under `src` (a crate's source directory).
    ///
    /// # Panics
    /// When `src` or a file in it cannot be read: the check must not pass on nothing.
    pub fn read(src: impl AsRef<Path>) -> Layout {
        let src = src.as_ref();
        let mut files = Vec::new();
        collect_rust_files(src, &mut files);
        assert!(!files.is_empty(), "no .rs file under {}", src.display());
        let modules = files
            .into_iter()
            .map(|file| {
                let text = std::fs::read_to_string(&file)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
                let code = code_only(&text);
                (module_of(src, &file), Module { file, code })
            })
            .collect();
        Layout { modules }
    }

    /// The module paths read (the crate root as `crate`).
    pub fn modules(&self) -> Vec<String> {
        self.modules
            .keys()
            .map(|m| display(m).to_string())
            .collect()
    }

    fn mentions(&self) -> impl Iterator<Item = Mention<'_>> {
        self.modules.iter().flat_map(|(from, module)| {
            crate_paths(&module.code, from)
                .into_iter()
                .map(move |(line, segments, called)| Mention {
                    from,
                    line,
                    segments,
                    called,
                })
        })
    }

    /// The longest module path that `segments` starts with, if any.
    fn target(&self, segments: &[String]) -> Option<String> {
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|candidate| self.modules.contains_key(candidate))
    }

    /// Module → the modules it names (its own descendants and itself left out).
    pub fn edges(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut edges: BTreeMap<String, BTreeSet<String>> = self
            .modules
            .keys()
            .map(|m| (m.clone(), BTreeSet::new()))
            .collect();
        for mention in self.mentions() {
            let Some(to) = self.target(&mention.segments) else {
                continue;
            };
            let own = mention.from.is_empty()
                || to == mention.from
                || to.starts_with(&format!("{}::", mention.from));
            if !own {
                edges
                    .get_mut(mention.from)
                    .expect("a read module")
                    .insert(to);
            }
        }
        edges
    }

    /// Every group of two or more modules that import each other, each sorted, as
    /// printable module paths (Tarjan's strongly connected components).
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let edges = self.edges();
        let names: Vec<&String> = edges.keys().collect();
        let index_of: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let successors: Vec<Vec<usize>> = names
            .iter()
            .map(|n| edges[*n].iter().map(|to| index_of[to]).collect())
            .collect();
        let mut components = Vec::new();
        for group in strongly_connected(&successors) {
            if group.len() > 1 {
                let mut group: Vec<String> = group
                    .into_iter()
                    .map(|i| display(names[i]).to_string())
                    .collect();
                group.sort();
                components.push(group);
            }
        }
        components.sort();
        components
    }

    /// Every place a module other than the root names an item through the crate root
    /// rather than through the module that defines it: a helper defined in `lib.rs`/
    /// `main.rs` (`crate::humane(..)`), or a root re-export (`crate::Error` for
    /// `crate::error::Error`), as `file:line: crate::item`. Named by its module, every
    /// dependency between modules is written as one, so the cycle check sees them all.
    pub fn root_paths(&self) -> Vec<String> {
        self.mentions()
            .filter(|m| !m.from.is_empty())
            .filter(|m| {
                let a_module = self.modules.contains_key(&m.segments[0]);
                // `crate::name(..)` calls a function even where a module has that name too
                // (a root `pub use name::name` makes both).
                !a_module || (m.segments.len() == 1 && m.called)
            })
            .map(|m| {
                format!(
                    "{}:{}: crate::{}",
                    self.modules[m.from].file.display(),
                    m.line,
                    m.segments[0]
                )
            })
            .collect()
    }
}

/// Panics naming every cycle and every use of a root helper in the crate at `crate_dir`
/// (pass `env!("CARGO_MANIFEST_DIR")`); reads its `src` directory.
pub fn assert_layered(crate_dir: &str) {
    let layout = Layout::read(Path::new(crate_dir).join("src"));
    let cycles = layout.cycles();
    assert!(
        cycles.is_empty(),
        "modules of {crate_dir} import each other (docs/decisions.md, \"Layering\"): {cycles:?}"
    );
    let uses = layout.root_paths();
    assert!(
        uses.is_empty(),
        "modules of {crate_dir} name items through the crate root; name each by the module \
         that defines it, and move a helper of the root into a module of its own \
         (docs/decisions.md, \"Layering\"):\n{}",
        uses.join("\n")
    );
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
}

/// `src/a/b.rs` → `a::b`; `src/a/mod.rs` → `a`; `src/lib.rs` and `src/main.rs` → `""`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

fn display(module: &str) -> &str {
    if module.is_empty() {
        "crate"
    } else {
        module
    }
}

/// `text` with the inside of every comment, string and character literal replaced by
/// spaces (newlines kept, so line numbers stay).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !chars[..i].last().is_some_and(|p| is_ident_char(*p))
        {
            // A raw string: r"..", r#".."#, ...
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            out.push_str(&" ".repeat(2 + hashes));
            i += 2 + hashes;
            while i < chars.len() && !chars[i..].starts_with(&close) {
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push_str(&" ".repeat(close.len()));
            i += close.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                out.extend(
                    chars[i..(i + skip).min(chars.len())]
                        .iter()
                        .map(|c| blank(*c)),
                );
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\''), or else a lifetime ('a).
            let length = match (next, chars.get(i + 2), chars.get(i + 3)) {
                (Some('\\'), _, _) => chars[i + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map(|end| end + 3),
                (Some(_), Some('\''), _) => Some(3),
                _ => None,
            };
            match length {
                Some(length) => {
                    out.push_str(&" ".repeat(length));
                    i += length;
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

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Each path in `code` (the code of `module`) that starts at `crate::`, `super::` or
/// `self::` (not `$crate::`, not `some_crate::`), resolved to a path from the crate root,
/// with the line it starts on and whether it is called; a `use` group
/// (`crate::{a, b::{c, d}}`, over several lines too) gives one path per leaf.
fn crate_paths(code: &str, module: &str) -> Vec<(usize, Vec<String>, bool)> {
    let inline = inline_modules(code);
    let module: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let mut paths = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().next_back();
            // `my_crate::`, `$crate::`, and the second `super` of `super::super::`.
            if before.is_some_and(|c| is_ident_char(c) || c == '$' || c == ':') {
                continue;
            }
            // Where the path is written: the file's module, then the inline modules
            // around it.
            let mut base: Vec<&str> = module.clone();
            base.extend(
                inline
                    .iter()
                    .filter(|(open, close, _)| *open < at && at < *close)
                    .map(|(_, _, name)| *name),
            );
            let mut rest = &code[at + start.len()..];
            match start {
                "crate::" => base.clear(),
                "super::" => {
                    base.pop();
                    while let Some(next) = rest.strip_prefix("super::") {
                        base.pop();
                        rest = next;
                    }
                }
                _ => {}
            }
            let line = code[..at].matches('\n').count() + 1;
            let mut leaves = Vec::new();
            let read = path_tree(rest, base.clone(), &mut leaves);
            if leaves.is_empty() && base.is_empty() && rest.trim_start().starts_with('*') {
                leaves.push(vec!["*"]); // a glob of the root: everything the root has
            }
            let called = leaves.len() == 1
                && matches!(rest[read..].trim_start().chars().next(), Some('(' | '!'));
            paths.extend(leaves.into_iter().map(|segments| {
                let segments = segments.into_iter().map(str::to_string).collect();
                (line, segments, called)
            }));
        }
    }
    paths.sort_by_key(|(line, _, _)| *line);
    paths
}

/// The inline modules of `code` (`mod name { .. }`): where each opens and closes, and its
/// name.
fn inline_modules(code: &str) -> Vec<(usize, usize, &str)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if code[..at].ends_with(is_ident_char) {
            continue;
        }
        let after = &code[at + "mod ".len()..];
        let name_end = after.find(|c| !is_ident_char(c)).unwrap_or(after.len());
        let rest = after[name_end..].trim_start();
        if name_end == 0 || !rest.starts_with('{') {
            continue;
        }
        let open = code.len() - rest.len();
        let mut depth = 0usize;
        let close = code[open..]
            .char_indices()
            .find_map(|(i, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => return None,
                }
                (depth == 0).then_some(open + i)
            })
            .unwrap_or(code.len());
        found.push((open, close, &after[..name_end]));
    }
    found.sort();
    found
}

/// Reads one path tree at the start of `text` (segments, maybe ending in a `{...}` group)
/// below `prefix`, pushing each leaf to `leaves`; returns how many bytes it read.
fn path_tree<'a>(text: &'a str, prefix: Vec<&'a str>, leaves: &mut Vec<Vec<&'a str>>) -> usize {
    let skip_space = |at: usize| at + (text[at..].len() - text[at..].trim_start().len());
    let mut at = skip_space(0);
    if text[at..].starts_with('{') {
        at += 1;
        loop {
            at = skip_space(at);
            match text[at..].chars().next() {
                None => break,
                Some('}') => {
                    at += 1;
                    break;
                }
                Some(',') => at += 1,
                Some(_) => {
                    let read = path_tree(&text[at..], prefix.clone(), leaves);
                    if read == 0 {
                        break;
                    }
                    at += read;
                }
            }
        }
        return at;
    }
    let end = text[at..]
        .find(|c| !is_ident_char(c))
        .map_or(text.len(), |end| at + end);
    if end == at {
        // `*`, or nothing: the prefix itself is the leaf.
        if !prefix.is_empty() {
            leaves.push(prefix);
        }
        return at + usize::from(text[at..].starts_with('*'));
    }
    let mut segments = prefix;
    segments.push(&text[at..end]);
    match text[end..].strip_prefix("::") {
        Some(_) => end + 2 + path_tree(&text[end + 2..], segments, leaves),
        None => {
            leaves.push(segments);
            end
        }
    }
}

/// Tarjan's algorithm, iteratively: the strongly connected components of a graph given
/// as each node's successors.
fn strongly_connected(successors: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = successors.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut components = Vec::new();
    let mut next_index = 0;
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        // (node, next successor to look at)
        let mut work = vec![(start, 0)];
        index[start] = next_index;
        low[start] = next_index;
        next_index += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (node, ref mut next)) = work.last_mut() {
            if let Some(&to) = successors[node].get(*next) {
                *next += 1;
                if index[to] == usize::MAX {
                    index[to] = next_index;
                    low[to] = next_index;
                    next_index += 1;
                    stack.push(to);
                    on_stack[to] = true;
                    work.push((to, 0));
                } else if on_stack[to] {
                    low[node] = low[node].min(index[to]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == index[node] {
                let mut component = Vec::new();
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component.push(member);
                    if member == node {
                        break;
                    }
                }
                components.push(component);
            }
        }
    }
    components
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway crate source tree: (relative path, contents) pairs.
    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn two_modules_naming_each_other_are_a_cycle_and_a_parent_using_its_child_is_not() {
        let dir = tree(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::Thing;\n"),
            (
                "b.rs",
                "fn f() { crate::a::g() }\n// crate::c::only_in_a_comment\n",
            ),
            ("c/mod.rs", "mod inner;\nuse crate::c::inner::X;\n"),
            ("c/inner.rs", "pub struct X;\n"),
        ]);
        let layout = Layout::read(dir.path());
        assert_eq!(
            layout.cycles(),
            vec![vec!["a".to_string(), "b".to_string()]]
        );
        let edges = layout.edges();
        assert!(
            edges["c"].is_empty(),
            "a parent may use its child: {edges:?}"
        );
        assert!(
            !edges["b"].contains("c"),
            "comments are not imports: {edges:?}"
        );
    }

    #[test]
    fn every_leaf_of_a_use_group_is_an_import_over_several_lines_too() {
        let code =
            "use crate::{\n    a::{self, B},\n    c::*,\n    d,\n};\nfn f() { crate::e::g() }";
        let paths = crate_paths(code, "");
        let leaves: Vec<String> = paths.iter().map(|(_, s, _)| s.join("::")).collect();
        assert_eq!(leaves, ["a::self", "a::B", "c", "d", "e::g"]);
        assert_eq!(paths.last().map(|(line, _, _)| *line), Some(6));
        assert_eq!(paths.last().map(|(_, _, called)| *called), Some(true));
        let dir = tree(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::{\n    b::{X, Y},\n};\n"),
            ("b.rs", "use crate::a;\n"),
        ]);
        assert_eq!(
            Layout::read(dir.path()).cycles(),
            vec![vec!["a".to_string(), "b".to_string()]]
        );
    }

    #[test]
    fn paths_in_comments_strings_and_char_literals_are_not_code() {
        let text = "let a = \"crate::x\"; // crate::y\n/* crate::z\n */ let q = '\"';\n\
                    let r = r#\"crate::w\"#; fn f<'a>(s: &'a str) { crate::v::g(s) }";
        let code = code_only(text);
        assert_eq!(code.lines().count(), text.lines().count());
        let leaves: Vec<String> = crate_paths(&code, "")
            .into_iter()
            .map(|(line, s, _)| format!("{line}:{}", s.join("::")))
            .collect();
        assert_eq!(leaves, ["4:v::g"]);
    }

    #[test]
    fn super_and_self_paths_are_resolved_inline_modules_included() {
        let dir = tree(&[
            ("lib.rs", "mod m;\npub fn helper() {}\n"),
            ("m/mod.rs", "mod x;\nmod y;\n"),
            ("m/x.rs", "use super::y::Y;\npub struct X;\n"),
            (
                "m/y.rs",
                "use super::super::m::x::X;\npub struct Y;\n\
                 #[cfg(test)]\nmod tests {\n    use super::*;\n    use self::inner::Z;\n}\n",
            ),
        ]);
        let layout = Layout::read(dir.path());
        assert_eq!(
            layout.cycles(),
            vec![vec!["m::x".to_string(), "m::y".to_string()]],
            "{:?}",
            layout.edges()
        );
        assert!(
            layout.edges()["m::y"].len() == 1,
            "a test module's super is its file: {:?}",
            layout.edges()
        );
        let top = tree(&[
            ("lib.rs", "mod a;\npub fn helper() {}\n"),
            ("a.rs", "fn f() { super::helper() }\nuse crate::*;\n"),
        ]);
        let uses = Layout::read(top.path()).root_paths();
        assert_eq!(uses.len(), 2, "{uses:?}");
        assert!(uses[0].ends_with("a.rs:1: crate::helper"), "{uses:?}");
        assert!(uses[1].ends_with("a.rs:2: crate::*"), "{uses:?}");
    }

    #[test]
    fn a_chain_without_a_way_back_is_no_cycle() {
        let dir = tree(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::B;\n"),
            ("b.rs", "use crate::c::C;\nuse crate::c;\n"),
            (
                "c.rs",
                "use other_crate::a;\nmacro_rules! m { () => { $crate::a::A } }\n",
            ),
        ]);
        assert_eq!(Layout::read(dir.path()).cycles(), Vec::<Vec<String>>::new());
    }

    #[test]
    fn a_low_module_naming_an_item_through_the_root_is_named_and_one_through_its_module_is_not() {
        let dir = tree(&[
            (
                "lib.rs",
                "mod low;\nmod error;\nmod humane;\npub use error::Error;\n\
                 pub use humane::humane;\npub const LIMIT: u32 = 1;\n",
            ),
            ("error.rs", "pub struct Error;\n"),
            ("humane.rs", "pub fn humane() {}\n"),
            (
                "low.rs",
                "use crate::Error;\nuse crate::error::Error as E;\nuse crate::humane;\n\
                 fn f() {\n    crate::humane();\n    let _ = crate::LIMIT;\n    \
                 crate::humane::humane();\n}\n",
            ),
        ]);
        let uses = Layout::read(dir.path()).root_paths();
        assert_eq!(uses.len(), 3, "{uses:?}");
        assert!(uses[0].ends_with("low.rs:1: crate::Error"), "{uses:?}");
        assert!(uses[1].ends_with("low.rs:5: crate::humane"), "{uses:?}");
        assert!(uses[2].ends_with("low.rs:6: crate::LIMIT"), "{uses:?}");
    }

    #[test]
    fn this_crate_keeps_its_own_rules() {
        assert_layered(env!("CARGO_MANIFEST_DIR"));
    }
}
