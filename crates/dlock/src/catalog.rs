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
fn all() -> [&'static LazyLock<LuaScript>; 30] {
    [
        &crate::mutex::scripts::ACQUIRE,
        &crate::mutex::scripts::RELEASE,
        &crate::mutex::scripts::FENCE,
        &crate::renew::scripts::RENEW,
        &crate::renew::scripts::HELD,
        &crate::renew::scripts::LINGER,
        &crate::mutex::scripts::RELEASE_TOKEN,
        &crate::mutex::scripts::FAIR_ACQUIRE,
        &crate::mutex::scripts::FAIR_RELEASE,
        &crate::queue::scripts::CANCEL,
        &crate::reentrant::scripts::ACQUIRE,
        &crate::reentrant::scripts::RELEASE,
        &crate::rwlock::scripts::READ_ACQUIRE,
        &crate::rwlock::scripts::READ_RELEASE,
        &crate::rwlock::scripts::WRITE_ACQUIRE,
        &crate::rwlock::scripts::WRITE_RELEASE,
        &crate::rwlock::scripts::DOWNGRADE,
        &crate::semaphore::scripts::ACQUIRE,
        &crate::semaphore::scripts::RELEASE,
        &crate::redlock::scripts::RAISE,
        &crate::guarded::scripts::APPLY,
        &crate::election::scripts::PROCLAIM,
        &crate::election::scripts::LOOK,
        &crate::election::scripts::RESIGN,
        &crate::inspect::scripts::INSPECT,
        &crate::inspect::scripts::FORCE_RELEASE,
        &crate::inspect::scripts::DESCRIBE,
        &crate::inspect::scripts::LIVE_ENTRIES,
        &crate::multi::scripts::ACQUIRE,
        &crate::multi::scripts::RELEASE,
    ]
}

/// Every Lua script the library sends, as it sends it to a server without sharded
/// pub/sub: for tests that run the real scripts beside a model of them. Not a stable API.
#[doc(hidden)]
pub fn __library_scripts() -> Vec<LibraryScript> {
    all().into_iter().map(|script| script.source()).collect()
}

/// Each of the library's script calls, composed exactly as the library composes it, for a
/// test crate that runs it on a connection of its own: build a call's wrapper (keys from
/// [`LockKeys::new`](crate::keys::LockKeys::new) and
/// [`QueueKeys::new`](crate::queue::QueueKeys::new)), then
/// [`LibraryCall::composed`](crate::script::LibraryCall::composed) gives the script's name
/// and text with its `KEYS` and `ARGV`, which [`Composed::run`](crate::script::Composed::run)
/// (async), [`Composed::run_blocking`](crate::script::Composed::run_blocking) or
/// [`Composed::eval`](crate::script::Composed::eval) send. Not a stable API.
#[doc(hidden)]
pub mod __scripts {
    pub use crate::election::scripts::{ElectionKeys, LookAtLeader, Proclaim, Resign};
    pub use crate::guarded::scripts::{batch_record_key, guarded_data_key, ApplyBatch};
    pub use crate::inspect::scripts::{DescribeKey, ForceRelease, Inspect, LiveEntries};
    pub use crate::keys::LockKeys;
    pub use crate::multi::scripts::{MultiAcquire, MultiRelease};
    pub use crate::mutex::scripts::{
        AcquireReply, DrawFence, FairAcquire, FairRelease, MutexAcquire, MutexRelease, ReleaseToken,
    };
    pub use crate::queue::scripts::LeaveQueue;
    pub use crate::queue::QueueKeys;
    pub use crate::redlock::scripts::RaiseFence;
    pub use crate::reentrant::scripts::{ReentrantAcquire, ReentrantRelease};
    pub use crate::renew::scripts::{Held, Linger, Renew, Renewal};
    pub use crate::renew::HoldKind;
    pub use crate::rwlock::scripts::{
        writer_queue, Downgrade, ReadAcquire, ReadRelease, RwKeys, WriteAcquire, WriteRelease,
    };
    pub use crate::script::{Composed, LibraryCall};
    pub use crate::semaphore::scripts::{permit_queue, SemaphoreAcquire, SemaphoreRelease};
}

/// The keys and channels the library names for the lock `name` under `prefix`, each with
/// what it is (its suffix, or `key` for the lock key itself), as the kinds compute them:
/// for the model of two look-alike locks side by side, which must find them disjoint.
/// Refused names are refused here too. Not a stable API.
#[doc(hidden)]
pub fn __lock_names(prefix: &str, name: &str) -> crate::error::Result<Vec<(&'static str, String)>> {
    let keys = crate::keys::LockKeys::new(prefix, name)?;
    let queue = crate::queue::QueueKeys::new(&keys);
    Ok(vec![
        ("key", keys.key.clone()),
        ("fence", keys.fence.clone()),
        ("fenced", keys.companion(crate::keys::FENCE_RECORD)),
        ("forced", keys.companion(crate::keys::FORCED_RECORD)),
        ("queue", queue.queue),
        ("queue-leases", queue.leases),
        ("expiry", crate::keys::expiry_index_of(&keys.key)),
        ("leader", keys.companion(crate::keys::LEADER_RECORD)),
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

    /// The library's sources, this file aside (it names the macros in its own code, not to
    /// make a script), each with its text.
    fn sources() -> Vec<(PathBuf, String)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut paths = Vec::new();
        files_under(&src, "rs", &mut paths);
        paths.retain(|path| !path.ends_with("catalog.rs"));
        paths
            .into_iter()
            .map(|path| {
                let text = std::fs::read_to_string(&path).unwrap();
                (path, text)
            })
            .collect()
    }

    /// The macros that make a script: `lua_script!`, and every macro whose body calls a
    /// script-making macro (such as the read-write lock's `rw_script!`).
    fn script_macros(sources: &[(PathBuf, String)]) -> Vec<String> {
        let mut macros = vec!["lua_script".to_string()];
        loop {
            let mut found = false;
            for (_, text) in sources {
                for (at, _) in text.match_indices("macro_rules!") {
                    let rest = &text[at + "macro_rules!".len()..];
                    let name: String = rest
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    // The macro's body: up to the next definition (a rough end, enough to
                    // see which macros it calls).
                    let body = &rest[..rest.find("macro_rules!").unwrap_or(rest.len())];
                    let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
                    let calls = macros.iter().any(|m| body.contains(&format!("{m}!")));
                    if calls && !macros.contains(&name) {
                        macros.push(name);
                        found = true;
                    }
                }
            }
            if !found {
                return macros;
            }
        }
    }

    /// The name each call of a script-making macro in the sources gives its script, one
    /// entry per call (a name made twice is there twice); the macros' own arms and their
    /// calls inside macro bodies aside.
    fn names_in_sources() -> Vec<String> {
        let sources = sources();
        let macros = script_macros(&sources);
        let mut names = Vec::new();
        for (_, text) in &sources {
            for name in &macros {
                let marker = format!("{name}!");
                for (at, _) in text.match_indices(&marker) {
                    // Any delimiter: `name!(...)`, `name! { ... }`, `name![...]`.
                    let rest = text[at + marker.len()..].trim_start();
                    let Some(rest) = rest.strip_prefix(['(', '{', '[']) else {
                        continue;
                    };
                    // Arms and calls inside macro bodies name no script: only a call
                    // whose first string literal comes before any `$` or `@`.
                    let Some(quote) = rest.find('"') else {
                        continue;
                    };
                    if rest[..quote].contains(['$', '@']) {
                        continue;
                    }
                    let head = rest[..quote].trim();
                    if !head
                        .split_whitespace()
                        .all(|w| ["grant", "bare", "unwrapped"].contains(&w))
                    {
                        continue;
                    }
                    let name = &rest[quote + 1..];
                    names.push(name[..name.find('"').unwrap()].to_string());
                }
            }
        }
        names.sort();
        names
    }

    /// The door composes what the library sends: the keys and arguments in each script's
    /// order, as its `.lua` reads them.
    #[test]
    fn the_door_composes_the_library_calls() {
        use super::__scripts::*;
        let keys = LockKeys::new("p:", "job").unwrap();
        let text = |parts: &[Vec<u8>]| -> Vec<String> {
            parts
                .iter()
                .map(|part| String::from_utf8(part.clone()).unwrap())
                .collect()
        };
        // Redlock's acquire: the fence with the grant, and whether it came from the clock.
        let acquire = MutexAcquire {
            keys: &keys,
            token: "t",
            lease_ms: 1000,
            eager: true,
            tell_clock: true,
        }
        .composed();
        assert_eq!(acquire.name, "mutex acquire");
        assert_eq!(text(&acquire.keys), [keys.key.as_str(), &keys.fence]);
        assert_eq!(text(&acquire.args), ["t", "1000", "1", "1"]);
        let plain = MutexAcquire {
            keys: &keys,
            token: "t",
            lease_ms: 1000,
            eager: false,
            tell_clock: false,
        }
        .composed();
        assert_eq!(text(&plain.args), ["t", "1000", "0"]);
        // A renewal: three arguments a hold; an entry hold's expiry index after its key.
        let holds = [
            Renewal {
                key: "p:job",
                kind: HoldKind::String,
                token: "a",
                lease_ms: 5,
            },
            Renewal {
                key: "p:sem",
                kind: HoldKind::Entry,
                token: "b",
                lease_ms: 6,
            },
        ];
        let renew = Renew { holds: &holds }.composed();
        assert_eq!(
            text(&renew.keys),
            ["p:job", "p:sem", &crate::keys::expiry_index_of("p:sem")]
        );
        assert_eq!(text(&renew.args), ["s", "a", "5", "e", "b", "6"]);
        let listed = super::__library_scripts();
        let script = listed.iter().find(|s| s.name == renew.name).unwrap();
        assert_eq!(script.code, renew.code);
    }

    /// Scripts made without the macros: `LuaScript::new` called outside script.rs. The
    /// only one is the resend check's probe (a caller's script, not the library's).
    #[test]
    fn no_script_is_made_around_the_macros() {
        let mut made: Vec<String> = Vec::new();
        for (path, text) in sources() {
            if path.ends_with("script.rs") {
                continue;
            }
            for (at, _) in text.match_indices("LuaScript::new(") {
                let call = text[at..].lines().next().unwrap_or_default().to_string();
                made.push(call);
            }
        }
        assert_eq!(made.len(), 1, "{made:?}");
        assert!(made[0].contains("\"probe\""), "{made:?}");
    }

    #[test]
    fn every_script_made_in_the_sources_is_in_the_catalogue() {
        let mut listed: Vec<String> = __library_scripts()
            .iter()
            .map(|script| script.name.to_string())
            .collect();
        listed.sort();
        let made = names_in_sources();
        assert!(
            made.len() >= 20,
            "the scan of the sources found only {made:?}: the test no longer sees the macro calls"
        );
        // As lists: a name made twice (two scripts reported alike) shows too.
        assert_eq!(
            made, listed,
            "the scripts made in the sources (left) and the ones catalog.rs lists (right) differ"
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

    /// One Lua layout: the helpers many scripts share in `src/lua/`, every other file
    /// beside the Rust that sends it (a directory with its `scripts.rs`).
    #[test]
    fn every_lua_file_sits_in_lua_or_beside_its_calls() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        files_under(&src, "lua", &mut files);
        for file in files {
            let dir = file.parent().unwrap();
            assert!(
                dir == src.join("lua") || dir.join("scripts.rs").exists(),
                "{} is neither a shared helper in src/lua/ nor beside a scripts.rs",
                file.display()
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
            let sent = match script.wrapped {
                true => crate::script::under_answer(&body),
                false => body,
            };
            assert!(script.code.ends_with(&sent), "{}", script.name);
        }
    }
}
