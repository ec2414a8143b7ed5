//! The read-write lock's scripts, each with its one typed call. All five take the same
//! five keys (see `rwlock.lua`): the lock key, the fencing counter, the writer queue and
//! its leases, and the read holds' expiry index.

use std::sync::LazyLock;

use crate::keys::LockKeys;
use crate::queue::QueueKeys;
use crate::script::{lua_script, Call, LuaScript, ScriptCall};

macro_rules! rw_script {
    (grant $name:literal, $file:literal) => {
        lua_script!(
            grant $name,
            "queue/queue.lua",
            "lua/entries.lua",
            "rwlock/rwlock.lua",
            $file
        )
    };
    ($name:literal, $file:literal) => {
        lua_script!(
            $name,
            "queue/queue.lua",
            "lua/entries.lua",
            "rwlock/rwlock.lua",
            $file
        )
    };
}

pub(crate) static WRITE_ACQUIRE: LazyLock<LuaScript> =
    rw_script!(grant "write lock acquire", "rwlock/write_acquire.lua");
pub(crate) static WRITE_RELEASE: LazyLock<LuaScript> =
    rw_script!("write lock release", "rwlock/write_release.lua");
pub(crate) static READ_ACQUIRE: LazyLock<LuaScript> =
    rw_script!(grant "read lock acquire", "rwlock/read_acquire.lua");
pub(crate) static READ_RELEASE: LazyLock<LuaScript> =
    rw_script!("read lock release", "rwlock/read_release.lua");
pub(crate) static DOWNGRADE: LazyLock<LuaScript> =
    rw_script!(grant "downgrade", "rwlock/downgrade.lua");

/// The keys every read-write lock script takes.
#[derive(Debug, Clone, Copy)]
pub struct RwKeys<'a> {
    /// The lock's keys.
    pub keys: &'a LockKeys,
    /// The writer queue.
    pub writers: &'a QueueKeys,
}

impl RwKeys<'_> {
    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        call.key(&self.keys.key)
            .key(&self.keys.fence)
            .key(&self.writers.queue)
            .key(&self.writers.leases)
            .key(crate::keys::expiry_index_of(&self.keys.key))
    }
}

/// The writer queue of the lock `keys`: a writer that leaves it empty tells the readers
/// waiting behind it (on the lock's release channel), since it may have been the last one
/// holding them back.
pub fn writer_queue(keys: &LockKeys) -> QueueKeys {
    QueueKeys {
        on_empty: Some(keys.channel.clone()),
        ..QueueKeys::new(keys)
    }
}

fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}

/// Takes the write lock (`rwlock/write_acquire.lua`): an attempt's reply.
#[derive(Debug, Clone)]
pub struct WriteAcquire<'a> {
    /// The lock's keys.
    pub lock: RwKeys<'a>,
    /// The grant's token.
    pub token: &'a str,
    /// How long the key is kept, in milliseconds.
    pub lease_ms: u64,
    /// The lease of a waiter's place, in milliseconds.
    pub waiter_lease_ms: u64,
    /// Take (or refresh) a place in the writer queue when not granted.
    pub join_queue: bool,
}

impl ScriptCall for WriteAcquire<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &WRITE_ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        self.lock
            .compose(call)
            .arg(self.token)
            .arg(self.lease_ms)
            .arg(self.waiter_lease_ms)
            .arg(&self.lock.writers.wake_prefix)
            .arg(flag(self.join_queue))
    }
}

/// Gives the write lock back (`rwlock/write_release.lua`): 1 released, 0 not held.
#[derive(Debug, Clone)]
pub struct WriteRelease<'a> {
    /// The lock's keys.
    pub lock: RwKeys<'a>,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for WriteRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &WRITE_RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        self.lock
            .compose(call)
            .arg(self.token)
            .arg(&self.lock.writers.wake_prefix)
            .arg(&self.lock.keys.channel)
    }
}

/// Takes a read hold for `owner` (`rwlock/read_acquire.lua`): an attempt's reply.
#[derive(Debug, Clone)]
pub struct ReadAcquire<'a> {
    /// The lock's keys.
    pub lock: RwKeys<'a>,
    /// The reading owner's id.
    pub owner: &'a str,
    /// How long the hold is kept, in milliseconds.
    pub lease_ms: u64,
    /// The hold's token.
    pub token: &'a str,
}

impl ScriptCall for ReadAcquire<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &READ_ACQUIRE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        self.lock
            .compose(call)
            .arg(self.owner)
            .arg(self.lease_ms)
            .arg(self.token)
    }
}

/// Gives a read hold back (`rwlock/read_release.lua`): 1 released, 0 not held.
#[derive(Debug, Clone)]
pub struct ReadRelease<'a> {
    /// The lock's keys.
    pub lock: RwKeys<'a>,
    /// The hold's token.
    pub token: &'a str,
    /// The reading owner's id: its hold count is read with the hold, so an owner's last
    /// hold leaves with its count and fence in the hold's one `HDEL`. Any id is safe: the
    /// hold's own entry names its owner and decides (another id costs the count-down
    /// command only).
    pub owner: &'a str,
}

impl ScriptCall for ReadRelease<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &READ_RELEASE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        self.lock
            .compose(call)
            .arg(self.token)
            .arg(&self.lock.writers.wake_prefix)
            .arg(self.owner)
    }
}

/// Turns the write lock into a read hold of `owner` without a gap
/// (`rwlock/downgrade.lua`): an attempt's reply.
#[derive(Debug, Clone)]
pub struct Downgrade<'a> {
    /// The lock's keys.
    pub lock: RwKeys<'a>,
    /// The write hold's token.
    pub writer: &'a str,
    /// The owner the read hold is for.
    pub owner: &'a str,
    /// How long the read hold is kept, in milliseconds.
    pub lease_ms: u64,
    /// The read hold's token.
    pub token: &'a str,
    /// The write grant's fence, which the read hold keeps.
    pub fence: u64,
}

impl ScriptCall for Downgrade<'_> {
    type Reply = Vec<i64>;

    fn script(&self) -> &'static LuaScript {
        &DOWNGRADE
    }

    fn compose<'c>(&self, call: Call<'c>) -> Call<'c> {
        self.lock
            .compose(call)
            .arg(self.writer)
            .arg(self.owner)
            .arg(self.lease_ms)
            .arg(self.token)
            .arg(self.fence)
            .arg(&self.lock.keys.channel)
    }
}
