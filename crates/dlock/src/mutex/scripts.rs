//! The mutex's scripts, each with its one typed call: the plain mutex's slow-path acquire,
//! release and fence draw, the fair mutex's acquire and release, and the release of a
//! string hold by token whatever kind took it.

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

pub(crate) static ACQUIRE: LazyLock<LuaScript> = lua_script!(
    grant unwrapped "mutex acquire",
    "mutex/bare.lua",
    "lua/fencing.lua",
    "mutex/acquire.lua"
);
pub(crate) static RELEASE: LazyLock<LuaScript> =
    lua_script!(unwrapped "mutex release", "mutex/bare.lua", "mutex/release.lua");
pub(crate) static FENCE: LazyLock<LuaScript> =
    lua_script!(bare "fence", "mutex/bare.lua", "lua/fencing.lua", "mutex/fence.lua");
pub(crate) static FAIR_ACQUIRE: LazyLock<LuaScript> =
    lua_script!(grant "fair mutex acquire", "queue/queue.lua", "mutex/fair_acquire.lua");
pub(crate) static FAIR_RELEASE: LazyLock<LuaScript> = lua_script!(
    "fair mutex release",
    "queue/queue.lua",
    "mutex/fair_release.lua"
);
pub(crate) static RELEASE_TOKEN: LazyLock<LuaScript> = lua_script!(
    "release by token",
    "queue/queue.lua",
    "mutex/release_token.lua"
);

fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

/// The plain mutex's acquire script (`mutex/acquire.lua`): `{1}`, `{1, fence}` (with
/// `clock`: `{1, fence, from_clock}`), `{0, pttl}`, `{-1}` or `{-2}` (see [`AcquireReply`]).
#[derive(Debug, Clone)]
pub struct MutexAcquire<'a> {
    /// The lock's keys (its key and fencing counter are used).
    pub keys: &'a LockKeys,
    /// The grant's token.
    pub token: &'a str,
    /// How long the key is kept, in milliseconds.
    pub lease_ms: u64,
    /// Draw the fence with the grant.
    pub eager: bool,
    /// Tell whether the fence came from the clock floor (Redlock).
    pub tell_clock: bool,
}

impl ScriptCall for MutexAcquire<'_> {
    type Reply = AcquireReply;

    fn script(&self) -> &'static LuaScript {
        &ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        let call = call
            .key(&self.keys.key)
            .key(&self.keys.fence)
            .arg(self.token)
            .arg(self.lease_ms)
            .arg(flag(self.eager));
        match self.tell_clock {
            true => call.arg("1"),
            false => call,
        }
    }
}

/// The acquire script's reply as a list, `{1, fence}` included: the script answers that
/// one, a grant with its fence and no clock flag, as the bare fence (a reply table costs
/// the server about a tenth of the grant), read here as `[1, fence]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireReply(pub Vec<i64>);

impl std::ops::Deref for AcquireReply {
    type Target = [i64];

    fn deref(&self) -> &[i64] {
        &self.0
    }
}

impl redis::FromRedisValue for AcquireReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        match value {
            redis::Value::Int(fence) => Ok(AcquireReply(vec![1, fence])),
            other => Vec::<i64>::from_redis_value(other).map(AcquireReply),
        }
    }
}

/// The plain mutex's release (`mutex/release.lua`): 1 released, 0 not held, -1 another
/// kind at the key.
#[derive(Debug, Clone)]
pub struct MutexRelease<'a> {
    /// The lock's keys (its key and release channel are used).
    pub keys: &'a LockKeys,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for MutexRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .arg(self.token)
            .arg(&self.keys.channel)
    }
}

/// Draws the fence of a string hold granted without one (`mutex/fence.lua`): the fence,
/// 0 not held, -2 the counter cannot count.
#[derive(Debug, Clone)]
pub struct DrawFence<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for DrawFence<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &FENCE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .key(self.keys.companion(crate::keys::FENCE_RECORD))
            .arg(self.token)
    }
}

/// The fair mutex's acquire (`fair_acquire.lua`): an attempt's reply (see
/// `Attempt::from_reply` in raw.rs).
#[derive(Debug, Clone)]
pub struct FairAcquire<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// Its waiter queue.
    pub queue: &'a QueueKeys,
    /// The grant's (and the waiter place's) token.
    pub token: &'a str,
    /// How long the key is kept, in milliseconds.
    pub lease_ms: u64,
    /// The lease of a waiter's place, in milliseconds.
    pub waiter_lease_ms: u64,
    /// Take a place in the queue when the lock is held.
    pub join_queue: bool,
}

impl ScriptCall for FairAcquire<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &FAIR_ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .arg(self.token)
            .arg(self.lease_ms)
            .arg(self.waiter_lease_ms)
            .arg(&self.queue.wake_prefix)
            .arg(flag(self.join_queue))
    }
}

/// The fair mutex's release, handing the lock to the next in line
/// (`fair_release.lua`): 1 released, 0 not held, -1 another kind at the key.
#[derive(Debug, Clone)]
pub struct FairRelease<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// Its waiter queue.
    pub queue: &'a QueueKeys,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for FairRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &FAIR_RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(&self.keys.fence)
            .arg(self.token)
            .arg(&self.queue.wake_prefix)
    }
}

/// Releases the string hold `token` whatever kind took it, handing the lock on the way
/// its waiters wait (`release_token.lua`): 1 released, 0 not held.
#[derive(Debug, Clone)]
pub struct ReleaseToken<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// Its waiter queue.
    pub queue: &'a QueueKeys,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for ReleaseToken<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &RELEASE_TOKEN
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(&self.keys.fence)
            .arg(self.token)
            .arg(&self.keys.channel)
            .arg(&self.queue.wake_prefix)
    }
}
