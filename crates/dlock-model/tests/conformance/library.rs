//! The library's script calls exactly as it composes them (the test door
//! `dlock::__scripts`), each call noted: the coverage test runs every conformance suite and
//! asks that every script the library sends was called by one. The keys a suite reads back
//! come from the door's key types too, so the run checks the names the library uses.

use std::collections::BTreeSet;
use std::sync::Mutex;

use dlock::__scripts::{LibraryCall, LockKeys};

/// The names of the library's scripts this process has called.
static CALLED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// Sends `call` as the library composes it (`EVALSHA`, then `EVAL` on `NOSCRIPT`), noting
/// its script as called.
pub fn try_send<T: redis::FromRedisValue>(
    call: &impl LibraryCall,
    conn: &mut redis::Connection,
) -> redis::RedisResult<T> {
    let composed = call.composed();
    CALLED.lock().unwrap().insert(composed.name);
    composed.run_blocking(conn)
}

/// [`try_send`], for a call whose script must not fail.
pub fn send<T: redis::FromRedisValue>(call: &impl LibraryCall, conn: &mut redis::Connection) -> T {
    let composed = call.composed();
    try_send(call, conn).unwrap_or_else(|err| panic!("{}: {err}", composed.name))
}

/// The keys of the lock `name` (no prefix), as the library names them.
pub fn lock_keys(name: &str) -> LockKeys {
    LockKeys::new("", name).unwrap()
}

/// The key or channel the library names `what` (as `dlock::__lock_names` lists them, e.g.
/// `fenced`, `expiry`, `leader`) for the lock `keys`.
pub fn named_key(keys: &LockKeys, what: &str) -> String {
    dlock::__lock_names("", &keys.name)
        .unwrap()
        .into_iter()
        .find(|(name, _)| *name == what)
        .unwrap_or_else(|| panic!("the library names no {what:?} key"))
        .1
}

/// The names of the library's scripts called so far in this process.
pub fn called() -> BTreeSet<&'static str> {
    CALLED.lock().unwrap().clone()
}
