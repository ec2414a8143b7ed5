//! The scripts over holds of any kind, each with its one typed call: the renewal of a
//! batch of holds, the "still held?" check and the linger that ends a hold at a set time.

use std::sync::LazyLock;
use std::time::Duration;

use super::HoldKind;
use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static RENEW: LazyLock<LuaScript> =
    lua_script!(grant "renew", "lua/entries.lua", "renew/holds.lua", "renew/renew.lua");
pub(crate) static HELD: LazyLock<LuaScript> = lua_script!(
    "held",
    "lua/entries.lua",
    "renew/holds.lua",
    "renew/held.lua"
);
pub(crate) static LINGER: LazyLock<LuaScript> = lua_script!(
    "linger",
    "queue/queue.lua",
    "lua/entries.lua",
    "renew/holds.lua",
    "renew/linger.lua"
);

/// One hold of a [`Renew`] call.
#[derive(Debug, Clone)]
pub struct Renewal<'a> {
    /// Its lock key.
    pub key: &'a str,
    /// How it is recorded there.
    pub kind: HoldKind,
    /// Its token.
    pub token: &'a str,
    /// Its new lease (what Redis keeps: the lease and any lock-delay), in milliseconds.
    pub lease_ms: u64,
}

/// Restarts the leases of `holds` (`renew/renew.lua`): one status a hold, in order (1
/// renewed, 0 not held, -1 another kind at the key).
#[derive(Debug, Clone)]
pub struct Renew<'a> {
    /// The holds, at most `renew::BATCH` (one slot on a cluster).
    pub holds: &'a [Renewal<'a>],
}

impl ScriptCall for Renew<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &RENEW
    }

    fn compose<'c>(&self, mut call: Call<'c>) -> Call<'c> {
        for hold in self.holds {
            call = call.key(hold.key);
            if hold.kind == HoldKind::Entry {
                call = call.key(crate::keys::expiry_index_of(hold.key));
            }
            call = call
                .arg(hold.kind.code())
                .arg(hold.token)
                .arg(hold.lease_ms);
        }
        call
    }
}

/// Whether a hold is still held (`renew/held.lua`): 1 held, 0 not.
#[derive(Debug, Clone)]
pub struct Held<'a> {
    /// Its lock key.
    pub key: &'a str,
    /// How it is recorded there.
    pub kind: HoldKind,
    /// Its token.
    pub token: &'a str,
}

impl ScriptCall for Held<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &HELD
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(self.key).arg(self.kind.code()).arg(self.token)
    }
}

/// Keeps a hold until `rest` from now, then lets it end by itself, telling whoever waits
/// (`renew/linger.lua`): 1 held until then, 2 given back at once, 0 not held, -1 another
/// kind at the key.
#[derive(Debug, Clone)]
pub struct Linger<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// Its waiter queue.
    pub queue: &'a QueueKeys,
    /// How the hold is recorded.
    pub kind: HoldKind,
    /// Its token.
    pub token: &'a str,
    /// How much longer it stays.
    pub rest: Duration,
}

impl ScriptCall for Linger<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &LINGER
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.queue.queue)
            .key(crate::keys::expiry_index_of(&self.keys.key))
            .arg(self.kind.code())
            .arg(self.token)
            // At least a millisecond: PEXPIRE 0 would end it at once, unannounced.
            .arg(self.rest.as_millis().max(1) as u64)
            .arg(&self.keys.channel)
            .arg(&self.queue.wake_prefix)
    }
}
