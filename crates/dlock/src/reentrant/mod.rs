//! The reentrant mutex: one owner may hold the same lock many times.
//!
//! Thread identity means nothing in async Rust (a task moves between threads), so the
//! owner is explicit: an [`Owner`] bound to the handle when it is made (a fresh one by
//! default, or one a caller chose with [`Lock::for_owner`]). The lock
//! is a hash at the lock key `{~kind: reentrant, owner, fence, count, h:<hold>...}`: every
//! hold has its own token (so a resent or cancelled acquire is counted exactly once), and
//! the holds share the key's lease. It is released when the last hold is given back. The
//! fencing token is drawn once per outermost grant; nested holds report the same one.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::raw::{on_one_server, private::KindProtocol, Attempt, HoldKind, LockCore, Waiting};
use crate::script::ScriptCall;
pub use crate::session::Owner;

pub(crate) mod scripts;
use scripts::{ReentrantAcquire, ReentrantRelease};

/// A named reentrant distributed mutex, acting for the [`Owner`] bound to the handle: the
/// one [`Lock`] handle over the reentrant protocol. Made by [`Client::reentrant_mutex`]
/// with a fresh owner; a clone acts for a fresh owner too (handed to another task, it is
/// excluded like anyone else), and [`for_owner`](Lock::for_owner) makes a handle for a
/// chosen one: `mutex.for_owner(mutex.owner())` acts for the same.
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// let mutex = client.reentrant_mutex("ledger")?;
/// let outer = mutex.lock().await?;
/// let inner = mutex.lock().await?;                // same owner: re-enters
/// assert_eq!(inner.fence().await?, outer.fence().await?); // one fence per outermost grant
/// inner.unlock().await?;                          // still held (one hold left)
/// outer.unlock().await?;                          // released
/// # Ok(()) }
/// ```
pub type ReentrantMutex = Lock<OwnedBy>;

/// The reentrant protocol as one [`Owner`] acts on a named lock: the kind of a
/// [`ReentrantMutex`] handle and its [`ReentrantGuard`]s.
#[derive(Debug, Clone)]
pub struct OwnedBy {
    core: LockCore,
    owner: Owner,
}

/// One hold of a [`ReentrantMutex`]. See [`Guard`] for what every guard does;
/// [`Guard::holds_at_grant`] tells the owner's hold count.
pub type ReentrantGuard = Guard<OwnedBy>;

impl Lock<OwnedBy> {
    /// The owner this handle acts for.
    pub fn owner(&self) -> &Owner {
        &self.raw.owner
    }

    /// A handle on the same lock acting for `owner` (for example an owner id that another
    /// process passed on).
    pub fn for_owner(&self, owner: &Owner) -> ReentrantMutex {
        Lock::of(OwnedBy {
            core: self.raw.core.clone(),
            owner: owner.clone(),
        })
    }

    /// Gives back one (any) hold of the owner and returns the holds left. Fails with
    /// [`Error::Lost`] when the owner does not hold the lock (nothing is touched), or when
    /// the hold it picked was given back by its guard meanwhile.
    ///
    /// It reads which holds the owner has, then gives back exactly one of them by its
    /// token: a release resent after a lost reply then finds that hold gone and gives back
    /// no second one.
    pub async fn release_one(&self) -> Result<u32> {
        let core = &self.raw.core;
        let key = &core.keys.key;
        let fields: redis::RedisResult<Vec<(String, String)>> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut core.client.conn())
            .await;
        let fields = match fields {
            Ok(fields) => fields,
            Err(err) if err.code() == Some("WRONGTYPE") => {
                return Err(core.client.wrong_type(key, "reentrant").await)
            }
            Err(err) => return Err(Error::from_redis("HGETALL", err)),
        };
        let field = |name: &str| fields.iter().find(|(f, _)| f == name).map(|(_, v)| v);
        match field("~kind").map(String::as_str) {
            Some("reentrant") => {}
            None if fields.is_empty() => return Err(self.raw.lost()),
            _ => return Err(core.client.wrong_type(key, "reentrant").await),
        }
        let hold = fields.iter().find_map(|(f, _)| f.strip_prefix("h:"));
        match (field("owner").map(String::as_str), hold) {
            (Some(holder), Some(hold)) if holder == self.raw.owner.id() => {
                self.raw.release_hold(hold).await
            }
            _ => Err(self.raw.lost()),
        }
    }

    /// How many holds the owner has on the lock now (0 when it does not hold it).
    pub async fn hold_count(&self) -> Result<u32> {
        let core = &self.raw.core;
        let reply: redis::RedisResult<(Option<String>, Option<String>, Option<u32>)> =
            redis::cmd("HMGET")
                .arg(&core.keys.key)
                .arg("~kind")
                .arg("owner")
                .arg("count")
                .query_async(&mut core.client.conn())
                .await;
        match reply {
            Ok((Some(kind), holder, count)) if kind == "reentrant" => {
                Ok(if holder.as_deref() == Some(self.raw.owner.id()) {
                    count.unwrap_or(0)
                } else {
                    0
                })
            }
            Ok((None, None, None)) => Ok(0),
            Ok(_) => Err(core.client.wrong_type(&core.keys.key, "reentrant").await),
            Err(err) if err.code() == Some("WRONGTYPE") => {
                Err(core.client.wrong_type(&core.keys.key, "reentrant").await)
            }
            Err(err) => Err(Error::from_redis("HMGET", err)),
        }
    }
}

impl OwnedBy {
    fn lost(&self) -> Error {
        Error::Lost {
            name: self.core.keys.name.clone(),
        }
    }

    async fn release_hold(&self, hold: &str) -> Result<u32> {
        let left = ReentrantRelease {
            keys: &self.core.keys,
            owner: self.owner.id(),
            token: hold,
        }
        .run(&self.core.client)
        .await?;
        match left {
            n if n >= 0 => Ok(n as u32),
            _ => Err(self.lost()),
        }
    }
}

impl Guard<OwnedBy> {
    /// The owner of this hold.
    pub fn owner(&self) -> &Owner {
        &self.raw.owner
    }
}

impl KindProtocol for OwnedBy {
    fn kind_name(&self) -> &'static str {
        crate::kind::REENTRANT
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Channel(&self.core.keys.channel)
    }

    async fn attempt(&self, token: &str, _join_queue: bool) -> Result<Attempt> {
        let reply = ReentrantAcquire {
            keys: &self.core.keys,
            owner: self.owner.id(),
            lease_ms: self.core.options.kept_ms(),
            token,
        }
        .run(&self.core.client)
        .await?;
        Attempt::from_reply(&reply)
    }

    async fn release(&self, token: &str) -> Result<()> {
        self.release_hold(token).await.map(drop)
    }
}

on_one_server!(OwnedBy, hold: HoldKind::Reentrant, core: core, owner: owner);

impl Client {
    /// A reentrant mutex named `name` with default options (30 s lease renewed
    /// automatically, wait forever), acting for a fresh [`Owner`].
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        self.reentrant_mutex_with(name, LockOptions::default())
    }

    /// A reentrant mutex named `name` with the given options, acting for a fresh
    /// [`Owner`].
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        Ok(Lock::of(OwnedBy {
            core: LockCore::new(self.clone(), name, options)?,
            owner: Owner::new(),
        }))
    }
}
