//! Redlock's own script, with its one typed call: raising a master's fencing counter to
//! the fence a majority granted. Redlock otherwise sends the mutex's scripts
//! ([`crate::mutex::scripts`]) and the renewal ([`crate::renew::scripts`]).

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static RAISE: LazyLock<LuaScript> = lua_script!(
    bare "redlock fence raise",
    "mutex/bare.lua",
    "lua/fencing.lua",
    "redlock/raise.lua"
);

/// Raises a master's fencing counter to `fence` while `token` holds the lock there
/// (`redlock/raise.lua`): 1 raised.
#[derive(Debug, Clone)]
pub struct RaiseFence<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// The hold's token.
    pub token: &'a str,
    /// The fence to raise the counter to.
    pub fence: u64,
}

impl ScriptCall for RaiseFence<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RAISE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .arg(self.token)
            .arg(self.fence)
    }
}
