//! The scripts that look at locks from outside, each with its one typed call: inspecting a
//! lock, an operator's forced release, naming what a key holds (for a wrong-type error),
//! and listing the live entries of a hash of leased entries.

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static INSPECT: LazyLock<LuaScript> =
    lua_script!("inspect", "lua/entries.lua", "inspect/inspect.lua");
pub(crate) static FORCE_RELEASE: LazyLock<LuaScript> = lua_script!(
    "forced release",
    "queue/queue.lua",
    "inspect/force_release.lua"
);
pub(crate) static DESCRIBE: LazyLock<LuaScript> = lua_script!("describe", "inspect/describe.lua");
pub(crate) static LIVE_ENTRIES: LazyLock<LuaScript> = lua_script!(
    "list holders",
    "lua/entries.lua",
    "inspect/entries_live.lua"
);

/// What holds a lock, changing nothing (`inspect/inspect.lua`): the kind, the lease, the
/// last fence, the queue length, then four fields a holder or waiter.
#[derive(Debug, Clone)]
pub struct Inspect<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// Its waiter queue.
    pub queue: &'a QueueKeys,
}

impl ScriptCall for Inspect<'_> {
    // Another client's value need not be text: read as bytes.
    type Reply = Vec<Vec<u8>>;

    fn script(&self) -> &'static LuaScript {
        &INSPECT
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .key(&self.queue.queue)
    }
}

/// An operator's forced release (`inspect/force_release.lua`): the new fence, or 0 when
/// nothing held the name.
#[derive(Debug, Clone)]
pub struct ForceRelease<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// Its waiter queue.
    pub queue: &'a QueueKeys,
    /// The request id that makes a resend of this call a no-op.
    pub request: &'a str,
}

impl ScriptCall for ForceRelease<'_> {
    type Reply = u64;

    fn script(&self) -> &'static LuaScript {
        &FORCE_RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        let keys = self.keys;
        call.key(&keys.key)
            .key(&keys.fence)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(keys.companion(crate::keys::FORCED_RECORD))
            .key(crate::keys::expiry_index_of(&keys.key))
            .arg(&keys.channel)
            .arg(&self.queue.wake_prefix)
            .arg(self.request)
            .arg(keys.companion(crate::keys::LEADER_RECORD))
    }
}

/// What `key` holds, in the words of `DLOCKTYPE` errors (`describe.lua`).
#[derive(Debug, Clone)]
pub struct DescribeKey<'a> {
    /// The key.
    pub key: &'a str,
    /// What was wanted there.
    pub wanted: &'a str,
}

impl ScriptCall for DescribeKey<'_> {
    type Reply = String;

    fn script(&self) -> &'static LuaScript {
        &DESCRIBE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(self.key).arg(self.wanted)
    }
}

/// The live leased entries of a dlock hash of `kind` at `key` (`entries_live.lua`): token
/// and data, flat.
#[derive(Debug, Clone)]
pub struct LiveEntries<'a> {
    /// The key.
    pub key: &'a str,
    /// The hash's kind (`read`, `semaphore`).
    pub kind: &'a str,
    /// A string at the key has no entries (a write-held read-write lock has no readers).
    pub string_is_empty: bool,
}

impl ScriptCall for LiveEntries<'_> {
    type Reply = Vec<String>;

    fn script(&self) -> &'static LuaScript {
        &LIVE_ENTRIES
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(self.key)
            .arg(self.kind)
            .arg(if self.string_is_empty { "1" } else { "0" })
    }
}
