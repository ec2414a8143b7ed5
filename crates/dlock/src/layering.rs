//! The layering rule, checked: no module but `lib.rs` names an item through the crate
//! root. Each item is named by the module that defines it (`crate::error::Error`, not
//! the root's re-export of it), so every dependency between modules is written as one and
//! `modcycles` sees the real graph; and a helper cannot live in `lib.rs`, where every
//! module would depend on the root (docs/decisions.md, "The crate root holds no helpers").

use std::path::{Path, PathBuf};

/// The modules `lib.rs` declares from files (`mod name;` or `pub mod name;`).
fn file_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .map(str::trim)
        .filter_map(|line| {
            let line = line.strip_prefix("pub ").unwrap_or(line);
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The first names after each root path (`crate::name`, or each name of
/// `crate::{a, b::c}`) in `code`, a line without its comment; with each, whether it is
/// named as a module: a path goes on into it (`crate::name::..`), or a `use` line or
/// group imports it. (`crate::name(..)` calls a function even when a module has that name
/// too: a root re-export `pub use name::name` makes both.)
fn root_names(code: &str) -> Vec<(String, bool)> {
    let root = concat!("crate", "::");
    let mut names = Vec::new();
    for (at, _) in code.match_indices(root) {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `my_crate::`, not the root
        }
        let rest = &code[at + root.len()..];
        let ident = |text: &str| -> String {
            text.trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 0;
                let mut start = 0;
                for (index, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            names.push((ident(&group[start..index]), true));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            names.push((ident(&group[start..index]), true));
                            start = index + 1;
                        }
                        _ => {}
                    }
                }
            }
            None => {
                let name = ident(rest);
                let into = rest[name.len()..].starts_with("::") || is_use_line(code);
                names.push((name, into));
            }
        }
    }
    names.retain(|(name, _)| !name.is_empty());
    names
}

fn is_use_line(code: &str) -> bool {
    let code = code.trim_start();
    let code = code
        .strip_prefix("pub(crate) ")
        .or_else(|| code.strip_prefix("pub "))
        .unwrap_or(code);
    code.starts_with("use ")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// Every `crate::<name>` path outside `lib.rs` whose name is not a module of its own
/// file, as `file:line: path`.
fn violations(src: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules = file_modules(&lib);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for path in files {
        if path.ends_with("lib.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in text.lines().enumerate() {
            // Doc links through the root are the public paths, and fine.
            let code = line.split("//").next().unwrap_or_default();
            for (name, as_module) in root_names(code) {
                if !as_module || !modules.contains(&name) {
                    let file = path.strip_prefix(src).unwrap().display();
                    let root = concat!("crate", "::");
                    found.push(format!("{file}:{}: {root}{name}", number + 1));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_names_an_item_through_the_crate_root() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    assert!(
        file_modules(&lib).len() > 20,
        "the scan of lib.rs found too few modules: it no longer sees the `mod` lines"
    );
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "these paths name an item through the crate root; name it by its own module (docs/decisions.md, \"The crate root holds no helpers\"):\n{}",
        found.join("\n")
    );
}

#[test]
fn root_paths_are_found_alone_and_in_groups() {
    let root = concat!("crate", "::");
    let group = "use ROOT{error::Error, Lock, raw::{a, b}};".replace("ROOT", root);
    let call = "let x = ROOThumane(d); my_ROOTZ".replace("ROOT", root);
    let mut found = root_names(&group);
    found.extend(root_names(&call));
    let named: Vec<(&str, bool)> = found
        .iter()
        .map(|(name, as_module)| (name.as_str(), *as_module))
        .collect();
    assert_eq!(
        named,
        [
            ("error", true),
            ("Lock", true),
            ("raw", true),
            ("humane", false)
        ]
    );
    let import = "use ROOTlease;".replace("ROOT", root);
    assert_eq!(root_names(&import), [("lease".to_string(), true)]);
}
