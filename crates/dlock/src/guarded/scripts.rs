//! The guarded batch's script, with its one typed call.

use std::sync::LazyLock;

use super::{data_key, Guarded};
use crate::keys::LockKeys;
use crate::renew::HoldKind;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static APPLY: LazyLock<LuaScript> = lua_script!(
    "guarded apply",
    "lua/entries.lua",
    "renew/holds.lua",
    "guarded/apply.lua"
);

/// The Redis key of the data key `key` beside the lock `keys` (as a batch names it).
pub fn guarded_data_key(keys: &LockKeys, key: &str) -> String {
    data_key(keys, key)
}

/// The holder `token`'s record of its last batch that wrote (a resend finds its answer
/// there).
pub fn batch_record_key(keys: &LockKeys, token: &str) -> String {
    keys.companion(&format!("applied:{token}"))
}

/// Applies a batch to the lock's data keys only while the hold `token` is held
/// (`guarded/apply.lua`): `{1, replies}`, `{0}` not held, `{3}` another kind at the key,
/// `{2, n, error}` the n-th command refused.
#[derive(Debug, Clone)]
pub struct ApplyBatch<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// How the hold is recorded at the lock key.
    pub kind: HoldKind,
    /// The hold's token.
    pub token: &'a str,
    /// The batch's id (a resend of it finds it in the holder's record).
    pub id: &'a str,
    /// How long the holder's record of a batch that writes is kept, in milliseconds (0:
    /// a batch of reads, not recorded).
    pub record_ms: u64,
    /// The batch.
    pub batch: &'a Guarded,
}

impl ScriptCall for ApplyBatch<'_> {
    type Reply = redis::Value;

    fn script(&self) -> &'static LuaScript {
        &APPLY
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        let commands = &self.batch.commands;
        let mut call = call
            .key(&self.keys.key)
            .key(batch_record_key(self.keys, self.token))
            .arg(self.kind.code())
            .arg(self.token)
            .arg(self.id)
            .arg(self.record_ms)
            .arg(commands.len());
        for command in commands {
            call = call.key(data_key(self.keys, &command.key));
        }
        for command in commands {
            call = call
                .arg(&command.name)
                .arg(command.args.len())
                .arg(&command.args);
        }
        call
    }
}
