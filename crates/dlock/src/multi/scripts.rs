//! The multi-lock's scripts, each with its one typed call: taking and giving back a group
//! of names at once (four keys and two arguments a name; see `acquire.lua`).

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static ACQUIRE: LazyLock<LuaScript> =
    lua_script!(grant "multi acquire", "queue/queue.lua", "multi/acquire.lua");
pub(crate) static RELEASE: LazyLock<LuaScript> =
    lua_script!("multi release", "queue/queue.lua", "multi/release.lua");

/// The keys of `names`, four a name: lock key, fencing counter, queue, waiter leases.
fn name_keys<'c>(mut call: Call<'c>, names: &[&LockKeys]) -> Call<'c> {
    for keys in names {
        let queue = QueueKeys::new(keys);
        call = call
            .key(&keys.key)
            .key(&keys.fence)
            .key(queue.queue)
            .key(queue.leases);
    }
    call
}

/// The per-name arguments: release channel, wake prefix.
fn name_args<'c>(mut call: Call<'c>, names: &[&LockKeys]) -> Call<'c> {
    for keys in names {
        call = call
            .arg(&keys.channel)
            .arg(QueueKeys::new(keys).wake_prefix);
    }
    call
}

/// Takes every name of a group at once (`multi/acquire.lua`): `{1, fence...}` (one fence
/// a name, in order), or a busy reply `{0, ...}`.
#[derive(Debug, Clone)]
pub struct MultiAcquire<'a> {
    /// The group's names (on one slot).
    pub names: &'a [&'a LockKeys],
    /// The grant's token.
    pub token: &'a str,
    /// How long each key is kept, in milliseconds.
    pub lease_ms: u64,
}

impl ScriptCall for MultiAcquire<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        let call = name_keys(call, self.names)
            .arg(self.token)
            .arg(self.lease_ms);
        name_args(call, self.names)
    }
}

/// Gives back what `token` holds of a group (`multi/release.lua`): how many of its names
/// it held.
#[derive(Debug, Clone)]
pub struct MultiRelease<'a> {
    /// The group's names (on one slot).
    pub names: &'a [&'a LockKeys],
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for MultiRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        name_args(name_keys(call, self.names).arg(self.token), self.names)
    }
}
