//! The semaphore's scripts, each with its one typed call. Both take the permits hash, the
//! fencing counter, the queue and its leases, and the permits' expiry index.

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static ACQUIRE: LazyLock<LuaScript> = lua_script!(
    grant "semaphore acquire",
    "queue/queue.lua",
    "lua/entries.lua",
    "semaphore/permits.lua",
    "semaphore/acquire.lua"
);
pub(crate) static RELEASE: LazyLock<LuaScript> = lua_script!(
    "semaphore release",
    "queue/queue.lua",
    "lua/entries.lua",
    "semaphore/permits.lua",
    "semaphore/release.lua"
);

/// The queue of the semaphore `keys` with `permits` permits (its waiters' tokens name N,
/// for a direct hand-off).
pub fn permit_queue(keys: &LockKeys, permits: u32) -> QueueKeys {
    QueueKeys {
        limit: Some(permits),
        ..QueueKeys::new(keys)
    }
}

/// Takes a permit (`semaphore/acquire.lua`): an attempt's reply.
#[derive(Debug, Clone)]
pub struct SemaphoreAcquire<'a> {
    /// The semaphore's keys.
    pub keys: &'a LockKeys,
    /// Its queue (naming N and the weight taken).
    pub queue: &'a QueueKeys,
    /// The permit's token.
    pub token: &'a str,
    /// How long the permit is kept, in milliseconds.
    pub lease_ms: u64,
    /// N: how many permits the semaphore has.
    pub permits: u32,
    /// The lease of a waiter's place, in milliseconds.
    pub waiter_lease_ms: u64,
    /// Take (or refresh) a place in the queue when not granted.
    pub join_queue: bool,
}

impl ScriptCall for SemaphoreAcquire<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(crate::keys::expiry_index_of(&self.keys.key))
            .arg(self.token)
            .arg(self.lease_ms)
            .arg(self.permits)
            .arg(self.waiter_lease_ms)
            .arg(&self.queue.wake_prefix)
            .arg(if self.join_queue { "1" } else { "0" })
    }
}

/// Gives a permit back, handing it to the next in line (`semaphore/release.lua`): 1
/// released, 0 not held.
#[derive(Debug, Clone)]
pub struct SemaphoreRelease<'a> {
    /// The semaphore's keys.
    pub keys: &'a LockKeys,
    /// Its queue.
    pub queue: &'a QueueKeys,
    /// The permit's token.
    pub token: &'a str,
    /// N (for a waiter whose token names none).
    pub permits: u32,
}

impl ScriptCall for SemaphoreRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(crate::keys::expiry_index_of(&self.keys.key))
            .key(&self.keys.fence)
            .arg(self.token)
            .arg(&self.queue.wake_prefix)
            .arg(self.permits)
    }
}
