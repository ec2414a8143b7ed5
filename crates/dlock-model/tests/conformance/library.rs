//! The library's scripts exactly as it sends them (`dlock::__library_scripts`), each call
//! noted: the coverage test runs every conformance suite and asks that every script the
//! library sends was called by one.

use std::collections::BTreeSet;
use std::sync::Mutex;

use redis::{ScriptInvocation, ToRedisArgs};

/// The names of the library's scripts this process has called.
static CALLED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// One of the library's scripts, found by the name its errors are reported under.
pub struct LibraryScript {
    name: &'static str,
    script: redis::Script,
}

impl LibraryScript {
    /// The library's script named `name` (panics, naming the others, when there is none).
    pub fn named(name: &str) -> LibraryScript {
        let scripts = dlock::__library_scripts();
        let Some(found) = scripts.iter().find(|script| script.name == name) else {
            let names: Vec<_> = scripts.iter().map(|script| script.name).collect();
            panic!("the library has no script named {name:?}; it has {names:?}");
        };
        LibraryScript {
            name: found.name,
            script: redis::Script::new(&found.code),
        }
    }

    /// A call of it, begun with its first key.
    pub fn key<T: ToRedisArgs>(&self, key: T) -> ScriptInvocation<'_> {
        let mut invocation = self.prepare_invoke();
        invocation.key(key);
        invocation
    }

    /// A call of it, begun with its first argument (a script without keys).
    #[allow(dead_code)]
    pub fn arg<T: ToRedisArgs>(&self, arg: T) -> ScriptInvocation<'_> {
        let mut invocation = self.prepare_invoke();
        invocation.arg(arg);
        invocation
    }

    /// A call of it.
    pub fn prepare_invoke(&self) -> ScriptInvocation<'_> {
        CALLED.lock().unwrap().insert(self.name);
        self.script.prepare_invoke()
    }
}

/// The names of the library's scripts called so far in this process.
pub fn called() -> BTreeSet<&'static str> {
    CALLED.lock().unwrap().clone()
}
