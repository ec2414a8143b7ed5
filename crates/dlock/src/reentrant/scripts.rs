//! The reentrant mutex's scripts, each with its one typed call.

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static ACQUIRE: LazyLock<LuaScript> =
    lua_script!(grant "reentrant acquire", "reentrant/acquire.lua");
pub(crate) static RELEASE: LazyLock<LuaScript> =
    lua_script!("reentrant release", "reentrant/release.lua");

/// Takes (or re-enters) the lock for `owner` (`reentrant/acquire.lua`): an attempt's reply.
#[derive(Debug, Clone)]
pub struct ReentrantAcquire<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// The owner's id.
    pub owner: &'a str,
    /// How long the key is kept, in milliseconds.
    pub lease_ms: u64,
    /// This hold's token.
    pub token: &'a str,
}

impl ScriptCall for ReentrantAcquire<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .arg(self.owner)
            .arg(self.lease_ms)
            .arg(self.token)
    }
}

/// Gives one hold of `owner` back (`reentrant/release.lua`): the holds left (>= 0), or
/// below 0 when it was not held.
#[derive(Debug, Clone)]
pub struct ReentrantRelease<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// The owner's id.
    pub owner: &'a str,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for ReentrantRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .arg(self.owner)
            .arg(&self.keys.channel)
            .arg(self.token)
    }
}
