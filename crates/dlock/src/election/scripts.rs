//! The election's scripts, each with its one typed call: proclaiming a leader, resigning,
//! and looking at who leads.

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static PROCLAIM: LazyLock<LuaScript> =
    lua_script!(bare "election proclaim", "mutex/bare.lua", "election/proclaim.lua");
pub(crate) static RESIGN: LazyLock<LuaScript> =
    lua_script!(bare "election resign", "election/resign.lua");
pub(crate) static LOOK: LazyLock<LuaScript> =
    lua_script!(bare "election leader", "election/leader.lua");

/// The keys and channel of an election: its lock (a mutex), the leader record, and the
/// observers' channel.
#[derive(Clone, Debug)]
pub struct ElectionKeys {
    /// The election's lock key.
    pub lock: String,
    /// The leader record (a hash: value, term, token).
    pub record: String,
    /// Where observers hear of a new leader or a resignation.
    pub channel: String,
}

impl ElectionKeys {
    /// The election keys of the lock `keys`.
    pub fn new(keys: &LockKeys) -> ElectionKeys {
        ElectionKeys {
            lock: keys.key.clone(),
            record: keys.companion(crate::keys::LEADER_RECORD),
            channel: keys.companion(crate::keys::LEADER_RECORD),
        }
    }
}

/// Records the leader while `token` holds the election's lock
/// (`election/proclaim.lua`): 1 recorded, else not held.
#[derive(Debug, Clone)]
pub struct Proclaim<'a> {
    /// The election's keys.
    pub keys: &'a ElectionKeys,
    /// The lock hold's token.
    pub token: &'a str,
    /// What the leader proclaims.
    pub value: &'a str,
    /// The leader's term.
    pub term: u64,
}

impl ScriptCall for Proclaim<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &PROCLAIM
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.lock)
            .key(&self.keys.record)
            .arg(self.token)
            .arg(self.value)
            .arg(self.term)
            .arg(&self.keys.channel)
    }
}

/// Clears the leader record if it is still `token`'s, and tells observers
/// (`election/resign.lua`).
#[derive(Debug, Clone)]
pub struct Resign<'a> {
    /// The election's keys.
    pub keys: &'a ElectionKeys,
    /// The lock hold's token.
    pub token: &'a str,
}

impl ScriptCall for Resign<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RESIGN
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.record)
            .arg(self.token)
            .arg(&self.keys.channel)
    }
}

/// The leader and what is left of its lease (`election/leader.lua`): an array (empty
/// when none leads), or -1 when the lock key holds another kind.
#[derive(Debug, Clone)]
pub struct LookAtLeader<'a> {
    /// The election's keys.
    pub keys: &'a ElectionKeys,
}

impl ScriptCall for LookAtLeader<'_> {
    type Reply = redis::Value;

    fn script(&self) -> &'static LuaScript {
        &LOOK
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.lock).key(&self.keys.record)
    }
}
