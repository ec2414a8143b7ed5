//! Every Lua script the library sends, named in one list: the conformance run
//! (`dlock-model`'s `tests/conformance`) takes the scripts from here and must run each one
//! beside the model, so a script added to the library without a conformance run fails a
//! test there, and a script made with `lua_script!` but left out of this list fails the
//! test below.
//!
//! Nothing in the library imports this module: it imports every primitive's scripts.

use std::sync::LazyLock;

use crate::script::{LibraryScript, LuaScript};

/// The library's scripts, in the order of its layout.
fn all() -> [&'static LazyLock<LuaScript>; 27] {
    [
        &crate::mutex::ACQUIRE,
        &crate::mutex::RELEASE,
        &crate::raw::FENCE,
        &crate::renew::RENEW,
        &crate::raw::HELD,
        &crate::raw::RELEASE_TOKEN,
        &crate::mutex::FAIR_ACQUIRE,
        &crate::mutex::FAIR_RELEASE,
        &crate::queue::CANCEL,
        &crate::reentrant::ACQUIRE,
        &crate::reentrant::RELEASE,
        &crate::rwlock::READ_ACQUIRE,
        &crate::rwlock::READ_RELEASE,
        &crate::rwlock::WRITE_ACQUIRE,
        &crate::rwlock::WRITE_RELEASE,
        &crate::rwlock::DOWNGRADE,
        &crate::semaphore::ACQUIRE,
        &crate::semaphore::RELEASE,
        &crate::redlock::mutex::RAISE,
        &crate::guarded::APPLY,
        &crate::election::PROCLAIM,
        &crate::election::LOOK,
        &crate::election::RESIGN,
        &crate::inspect::INSPECT,
        &crate::inspect::FORCE_RELEASE,
        &crate::client::DESCRIBE,
        &crate::client::LIVE_ENTRIES,
    ]
}

/// Every Lua script the library sends, as it sends it to a server without sharded
/// pub/sub: for tests that run the real scripts beside a model of them. Not a stable API.
#[doc(hidden)]
pub fn __library_scripts() -> Vec<LibraryScript> {
    all().into_iter().map(|script| script.source()).collect()
}

/// The keys and channels the library names for the lock `name` under `prefix`, each with
/// what it is (its suffix, or `key` for the lock key itself), as the kinds compute them:
/// for the model of two look-alike locks side by side, which must find them disjoint.
/// Refused names are refused here too. Not a stable API.
#[doc(hidden)]
pub fn __lock_names(prefix: &str, name: &str) -> crate::Result<Vec<(&'static str, String)>> {
    let keys = crate::keys::LockKeys::new(prefix, name)?;
    let queue = crate::queue::QueueKeys::new(&keys);
    Ok(vec![
        ("key", keys.key.clone()),
        ("fence", keys.fence.clone()),
        ("fenced", keys.companion("fenced")),
        ("forced", keys.companion("forced")),
        ("queue", queue.queue),
        ("queue-leases", queue.leases),
        ("expiry", crate::keys::expiry_index_of(&keys.key)),
        ("leader", keys.companion("leader")),
        ("released", keys.channel.clone()),
        ("wake:", queue.wake_prefix),
    ])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::__library_scripts;

    fn files_under(dir: &Path, extension: &str, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files_under(&path, extension, found);
            } else if path.extension().is_some_and(|e| e == extension) {
                found.push(path);
            }
        }
    }

    /// The name each `lua_script!`/`rw_script!` invocation in the sources gives its script
    /// (the macros' own definitions aside).
    fn names_in_sources() -> BTreeSet<String> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut sources = Vec::new();
        files_under(&src, "rs", &mut sources);
        let mut names = BTreeSet::new();
        // This file names the macros in its own code, not to make a script.
        sources.retain(|path| !path.ends_with("catalog.rs"));
        for path in sources {
            let text = std::fs::read_to_string(&path).unwrap();
            for macro_call in ["lua_script!(", "rw_script!("] {
                for (at, _) in text.match_indices(macro_call) {
                    let rest = &text[at + macro_call.len()..];
                    let rest = rest.trim_start();
                    // `(grant ...)`-style arms and calls inside the macro bodies name no
                    // script: only a call whose first string literal comes before any `$`.
                    let Some(quote) = rest.find('"') else {
                        continue;
                    };
                    if rest[..quote].contains(['$', '@']) {
                        continue;
                    }
                    let head = rest[..quote].trim();
                    if !head.split_whitespace().all(|w| w == "grant" || w == "bare") {
                        continue;
                    }
                    let name = &rest[quote + 1..];
                    let name = &name[..name.find('"').unwrap()];
                    names.insert(name.to_string());
                }
            }
        }
        names
    }

    #[test]
    fn every_script_made_in_the_sources_is_in_the_catalogue() {
        let listed: BTreeSet<String> = __library_scripts()
            .iter()
            .map(|script| script.name.to_string())
            .collect();
        assert_eq!(
            listed.len(),
            __library_scripts().len(),
            "two of the library's scripts share a name"
        );
        let made = names_in_sources();
        assert!(
            made.len() >= 20,
            "the scan of the sources found only {made:?}: the test no longer sees the macro calls"
        );
        assert_eq!(
            made, listed,
            "the scripts made with lua_script!/rw_script! (left) and the ones catalog.rs lists (right) differ"
        );
    }

    #[test]
    fn every_lua_file_is_in_a_listed_script() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        files_under(&src, "lua", &mut files);
        let used: BTreeSet<&str> = __library_scripts()
            .iter()
            .flat_map(|script| script.files.iter().copied())
            .collect();
        for file in files {
            let relative = file
                .strip_prefix(&src)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            assert!(
                used.contains(relative.as_str()),
                "{relative} is in no script of the catalogue"
            );
        }
    }

    #[test]
    fn a_listed_script_sends_its_body() {
        for script in __library_scripts() {
            let body = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("src")
                    .join(script.body()),
            )
            .unwrap();
            assert!(script.code.ends_with(&body), "{}", script.name);
        }
    }
}
