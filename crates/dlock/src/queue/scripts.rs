//! The waiter queue's own script, with its one typed call: leaving the queue.

use std::sync::LazyLock;

use super::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static CANCEL: LazyLock<LuaScript> =
    lua_script!("queue leave", "queue/queue.lua", "queue/cancel.lua");

/// Removes a waiter from the queue, waking the next one if it was first
/// (`queue/cancel.lua`).
#[derive(Debug, Clone)]
pub struct LeaveQueue<'a> {
    /// The queue.
    pub queue: &'a QueueKeys,
    /// The waiter's token.
    pub token: &'a str,
}

impl ScriptCall for LeaveQueue<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &CANCEL
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        let call = call
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .arg(self.token)
            .arg(&self.queue.wake_prefix);
        match &self.queue.on_empty {
            Some(channel) => call.arg(channel),
            None => call,
        }
    }
}
