//! Guarded writes: the caller's Redis commands on data kept beside a lock, applied by one
//! script that first checks the hold, so they take effect only while it is held.
//!
//! A paused holder whose lease ended meanwhile has its late write refused by Redis
//! itself: Kleppmann's GC-pause case, closed for data kept beside the lock without a
//! fenced store (see `docs/decisions.md`).

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::renew::HoldKind;
use crate::script::ScriptCall;

pub(crate) mod scripts;
use scripts::ApplyBatch;

/// The commands a [`Guarded`] batch may run. Each takes one key, its first argument, and
/// names no other key (the batch's keys must be known before it runs: a cluster routes by
/// them, and the script may touch no others); those that would take more keys (`DEL`,
/// `UNLINK`, `EXISTS`) take no arguments after the key here.
pub const GUARDED_COMMANDS: &[&str] = &[
    "GET",
    "SET",
    "GETDEL",
    "GETEX",
    "APPEND",
    "STRLEN",
    "GETRANGE",
    "SETRANGE",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "DECR",
    "DECRBY",
    "DEL",
    "UNLINK",
    "EXISTS",
    "TYPE",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "PERSIST",
    "TTL",
    "PTTL",
    "HGET",
    "HMGET",
    "HGETALL",
    "HSET",
    "HSETNX",
    "HDEL",
    "HEXISTS",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HKEYS",
    "HVALS",
    "HLEN",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LRANGE",
    "LLEN",
    "LINDEX",
    "LSET",
    "LREM",
    "LTRIM",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SCARD",
    "ZADD",
    "ZREM",
    "ZINCRBY",
    "ZSCORE",
    "ZRANGE",
    "ZCARD",
    "ZRANK",
];

/// The commands of [`GUARDED_COMMANDS`] that take nothing after the key: the multi-key
/// ones (whose further arguments would be keys) and those that take no arguments.
const KEY_ONLY: &[&str] = &[
    "GET", "GETDEL", "STRLEN", "INCR", "DECR", "DEL", "UNLINK", "EXISTS", "TYPE", "PERSIST", "TTL",
    "PTTL", "HGETALL", "HKEYS", "HVALS", "HLEN", "LLEN", "SMEMBERS", "SCARD", "ZCARD",
];

/// The commands of [`GUARDED_COMMANDS`] that only read: a batch of them alone is not
/// recorded for a resend (running it twice changes nothing), so it writes nothing.
const READS: &[&str] = &[
    "GET",
    "STRLEN",
    "GETRANGE",
    "EXISTS",
    "TYPE",
    "TTL",
    "PTTL",
    "HGET",
    "HMGET",
    "HGETALL",
    "HEXISTS",
    "HKEYS",
    "HVALS",
    "HLEN",
    "LRANGE",
    "LLEN",
    "LINDEX",
    "SMEMBERS",
    "SISMEMBER",
    "SCARD",
    "ZSCORE",
    "ZRANGE",
    "ZCARD",
    "ZRANK",
];

/// Most arguments one command of a batch may have after its key (the script passes them
/// on Lua's stack, which holds about 8 000): split a larger `RPUSH` or `HSET`.
pub const MAX_GUARDED_ARGS: usize = 4096;

/// Redis commands on data kept beside a lock, applied together by
/// [`Guard::apply`](crate::Guard::apply) only while the hold is still held, or not at all.
///
/// Each command names a *data key*, which dlock places in the lock's hash slot as
/// `{NAME}:data:KEY` (with the client's prefix in the braces; a name with a hash tag of its
/// own keeps it: `{t}:job` stores `{t}/4/:job:data:KEY`; [`Guard::data_key`](crate::Guard::data_key) gives
/// the whole name),
/// so one script can check the hold and write the data on any deployment, a Redis
/// Cluster included. The commands are those of [`GUARDED_COMMANDS`] (reads too: a read in
/// a batch sees the data as the holder left it).
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use dlock::{redis::Value, Guarded};
///
/// let guard = client.mutex("accounts:42")?.lock().await?;
/// let replies = guard
///     .apply(&Guarded::new().incr_by("balance", -30).rpush("history", "-30"))
///     .await?; // Error::Lost, with nothing applied, if the lease ended meanwhile
/// assert_eq!(replies.len(), 2);
/// if let Value::Int(balance) = replies[0] {
///     println!("balance now {balance}");
/// }
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Guarded {
    commands: Vec<Command>,
}

#[derive(Debug, Clone)]
struct Command {
    name: String,
    key: String,
    args: Vec<Vec<u8>>,
}

impl Guarded {
    /// An empty batch (applying it only checks that the hold is held).
    pub fn new() -> Guarded {
        Guarded::default()
    }

    /// Adds the command `name` on the data key `key` with `args` after the key, e.g.
    /// `.command("HSET", "user", ("name", "ada"))` (no arguments: `&[] as &[&str]`). The name is checked against
    /// [`GUARDED_COMMANDS`] when the batch is applied.
    pub fn command(mut self, name: &str, key: &str, args: impl redis::ToRedisArgs) -> Guarded {
        self.commands.push(Command {
            name: name.to_ascii_uppercase(),
            key: key.to_string(),
            args: args.to_redis_args(),
        });
        self
    }

    /// `GET key`.
    pub fn get(self, key: &str) -> Guarded {
        self.command("GET", key, &[] as &[&str])
    }

    /// `SET key value`.
    pub fn set(self, key: &str, value: impl redis::ToRedisArgs) -> Guarded {
        self.command("SET", key, value)
    }

    /// `DEL key`.
    pub fn del(self, key: &str) -> Guarded {
        self.command("DEL", key, &[] as &[&str])
    }

    /// `INCRBY key by`: answers the new value.
    pub fn incr_by(self, key: &str, by: i64) -> Guarded {
        self.command("INCRBY", key, by)
    }

    /// `HSET key field value`.
    pub fn hset(
        self,
        key: &str,
        field: impl redis::ToRedisArgs,
        value: impl redis::ToRedisArgs,
    ) -> Guarded {
        self.command("HSET", key, (field, value))
    }

    /// `HGET key field`.
    pub fn hget(self, key: &str, field: impl redis::ToRedisArgs) -> Guarded {
        self.command("HGET", key, field)
    }

    /// `RPUSH key value`.
    pub fn rpush(self, key: &str, value: impl redis::ToRedisArgs) -> Guarded {
        self.command("RPUSH", key, value)
    }

    /// `SADD key member`.
    pub fn sadd(self, key: &str, member: impl redis::ToRedisArgs) -> Guarded {
        self.command("SADD", key, member)
    }

    /// `PEXPIRE key ms`: the data key ends `expiry` from now.
    pub fn expire(self, key: &str, expiry: std::time::Duration) -> Guarded {
        self.command("PEXPIRE", key, expiry.as_millis().max(1) as u64)
    }

    /// How many commands the batch holds.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// True for a batch without commands.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Refuses what cannot run, before anything is sent: a command outside
    /// [`GUARDED_COMMANDS`], an empty data key ([`Error::InvalidArgument`]). Applying a
    /// batch checks it first; call this to check one earlier.
    pub fn check(&self) -> Result<()> {
        for command in &self.commands {
            if !GUARDED_COMMANDS.contains(&command.name.as_str()) {
                return Err(Error::InvalidArgument(format!(
                    "{} cannot run in a guarded batch; use one of the commands that take a single key: {}",
                    command.name,
                    GUARDED_COMMANDS.join(", ")
                )));
            }
            if command.key.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "{} in a guarded batch names an empty data key",
                    command.name
                )));
            }
            if KEY_ONLY.contains(&command.name.as_str()) && !command.args.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "{} in a guarded batch takes only its data key; for several keys, use one {} per key",
                    command.name, command.name
                )));
            }
            if command.args.len() > MAX_GUARDED_ARGS {
                return Err(Error::InvalidArgument(format!(
                    "{} in a guarded batch has {} arguments after its key; the most is {MAX_GUARDED_ARGS}: split it into several commands",
                    command.name,
                    command.args.len()
                )));
            }
        }
        Ok(())
    }

    /// True when a command writes (a batch of reads alone needs no resend record).
    fn writes(&self) -> bool {
        self.commands
            .iter()
            .any(|command| !READS.contains(&command.name.as_str()))
    }
}

/// The Redis key of the data key `key` of the lock with `keys`.
pub(crate) fn data_key(keys: &LockKeys, key: &str) -> String {
    keys.companion(&format!("data:{key}"))
}

/// Applies `batch` for the hold `token` of `raw`'s kind (see [`apply`]); refused for a
/// kind whose holds span several servers.
pub(crate) async fn apply_for<R: crate::raw::private::Placement>(
    raw: &R,
    token: &str,
    batch: &Guarded,
) -> Result<Vec<redis::Value>> {
    let Some(client) = raw.one_server() else {
        return Err(Error::InvalidArgument(
            "guarded writes need a lock held at one key on one server (a single node, a Cluster or a Sentinel master): a Redlock hold spans several masters, a multi-lock several names (perhaps on several Cluster shards), and no one script can check it".into(),
        ));
    };
    let (_, kind) = raw.hold_key();
    let record_ms = raw.options().ttl.as_millis() as u64;
    apply(client, raw.keys(), kind, token, batch, record_ms).await
}

/// Applies `batch` on `client`'s server if the hold `token` (recorded as `kind` at the lock
/// key) is held; [`Error::Lost`] with nothing applied when it is not. `record_ms`: how
/// long the holder's record of the batch is kept, for a resend after a lost reply.
pub(crate) async fn apply(
    client: &Client,
    keys: &LockKeys,
    kind: HoldKind,
    token: &str,
    batch: &Guarded,
    record_ms: u64,
) -> Result<Vec<redis::Value>> {
    batch.check()?;
    // A fresh id per batch: a resend of this one finds it in the record.
    let id = format!("{:016x}", rand::random::<u64>());
    let record_ms = if batch.writes() { record_ms.max(1) } else { 0 };
    let mut call = ApplyBatch {
        keys,
        kind,
        token,
        id: &id,
        record_ms,
        batch,
    }
    .call();
    if batch.writes() {
        // The record lives `record_ms` from when the script ran, so at least that long
        // from now: a resend later than that (a reconnect slower than a lease) could find
        // no record and apply the batch again, or answer "not held" though it applied.
        call = call.resend_within(Duration::from_millis(record_ms));
    }
    let reply: redis::Value = call.run(client).await?;
    let items = match reply {
        redis::Value::Array(items) => items,
        other => return Err(Error::unexpected_reply(other)),
    };
    match items.as_slice() {
        [redis::Value::Int(0)] => Err(Error::Lost {
            name: keys.name.clone(),
        }),
        // Named by the caller: for a guard, the hold is simply gone; for a token, the
        // kind it was taken as may differ from the handle's.
        [redis::Value::Int(3)] => Err(client.wrong_type(&keys.key, kind.wanted()).await),
        [redis::Value::Int(1), redis::Value::Array(replies)] => Ok(replies.clone()),
        [redis::Value::Int(2), redis::Value::Int(n), reason] => {
            let n = *n as usize;
            let command = batch.commands.get(n.wrapping_sub(1));
            let Some(command) = command else {
                return Err(Error::unexpected_reply(&items));
            };
            let reason = match reason {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                redis::Value::SimpleString(text) => text.clone(),
                other => format!("{other:?}"),
            };
            let before = match n {
                1 => "nothing was applied".to_string(),
                2 => "the command before it was applied".to_string(),
                _ => format!("the {} commands before it were applied", n - 1),
            };
            Err(Error::Refused {
                command: format!(
                    "{} on {} (command {n} of {} in a guarded batch; {before})",
                    command.name,
                    data_key(keys, &command.key),
                    batch.commands.len(),
                ),
                reason,
            })
        }
        _ => Err(Error::unexpected_reply(&items)),
    }
}
