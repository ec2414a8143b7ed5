//! The reentrant mutex: one owner may hold the same lock many times.
//!
//! Thread identity means nothing in async Rust (a task moves between threads), so the
//! owner is explicit: an [`Owner`] a caller creates and passes to every lock call. The lock
//! is a hash at the lock key `{~kind: reentrant, owner, fence, count, h:<hold>...}`: every
//! hold has its own token (so a resent or cancelled acquire is counted exactly once), and
//! the holds share the key's lease. It is released when the last hold is given back. The
//! fencing token is drawn once per outermost grant; nested holds report the same one.

use std::sync::LazyLock;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::options::LockOptions;
use crate::raw::{private::OnOneServer, Attempt, HoldKind, LockCore, Waiting};
use crate::script::{lua_script, LuaScript};
use crate::wait::acquire;

static ACQUIRE: LazyLock<LuaScript> =
    lua_script!(grant "reentrant acquire", "reentrant/acquire.lua");
static RELEASE: LazyLock<LuaScript> = lua_script!("reentrant release", "reentrant/release.lua");

/// One hold of a [`ReentrantMutex`]. See [`Guard`] for what every guard does;
/// [`Guard::holds_at_grant`] tells the owner's hold count.
pub type ReentrantGuard = Guard<OwnedBy>;

/// The identity that holds a [`ReentrantMutex`] or reads a
/// [`RwLock`](crate::RwLock). Clone it to every place that acts for the same owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// A fresh owner with a random 128-bit id.
    pub fn new() -> Owner {
        Owner(crate::session::random_token())
    }

    /// An owner with a chosen id (e.g. to act for the same owner from another process).
    pub fn from_id(id: impl Into<String>) -> Owner {
        Owner(id.into())
    }

    /// The id stored in Redis.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl Default for Owner {
    fn default() -> Self {
        Owner::new()
    }
}

/// A named reentrant distributed mutex. Made by [`Client::reentrant_mutex`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use dlock::reentrant::Owner;
/// let owner = Owner::new();
/// let mutex = client.reentrant_mutex("ledger")?;
/// let outer = mutex.lock(&owner).await?;
/// let inner = mutex.lock(&owner).await?;          // same owner: re-enters
/// assert_eq!(inner.fence().await?, outer.fence().await?); // one fence per outermost grant
/// inner.unlock().await?;                          // still held (one hold left)
/// outer.unlock().await?;                          // released
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReentrantMutex {
    core: LockCore,
}

impl ReentrantMutex {
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<Self> {
        Ok(ReentrantMutex {
            core: LockCore::new(client, name, options)?,
        })
    }

    /// The lock name (without the client prefix).
    pub fn name(&self) -> &str {
        &self.core.keys.name
    }

    pub(crate) fn owned_by(&self, owner: &Owner) -> OwnedBy {
        OwnedBy {
            mutex: self.clone(),
            owner: owner.clone(),
        }
    }

    /// One attempt to take (or re-enter) the lock for `owner`.
    pub async fn try_lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        acquire(&self.owned_by(owner), crate::Wait::NoWait).await
    }

    /// Takes (or re-enters) the lock for `owner`, waiting per the options' wait policy.
    /// Cancel-safe like [`Mutex::lock`](crate::Mutex::lock).
    pub async fn lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        acquire(&self.owned_by(owner), self.core.options.wait).await
    }

    /// Gives back one (any) hold of `owner` and returns the holds left. Fails with
    /// [`Error::Lost`] when `owner` does not hold the lock (nothing is touched), or when
    /// the hold it picked was given back by its guard meanwhile.
    ///
    /// It reads which holds the owner has, then gives back exactly one of them by its
    /// token: a release resent after a lost reply then finds that hold gone and gives back
    /// no second one.
    pub async fn release_as(&self, owner: &Owner) -> Result<u32> {
        let key = &self.core.keys.key;
        let fields: redis::RedisResult<Vec<(String, String)>> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.core.client.conn())
            .await;
        let fields = match fields {
            Ok(fields) => fields,
            Err(err) if err.code() == Some("WRONGTYPE") => {
                return Err(self.core.client.wrong_type(key, "reentrant").await)
            }
            Err(err) => return Err(Error::from_redis("HGETALL", err)),
        };
        let field = |name: &str| fields.iter().find(|(f, _)| f == name).map(|(_, v)| v);
        match field("~kind").map(String::as_str) {
            Some("reentrant") => {}
            None if fields.is_empty() => {
                return Err(Error::Lost {
                    name: self.core.keys.name.clone(),
                })
            }
            _ => return Err(self.core.client.wrong_type(key, "reentrant").await),
        }
        let hold = fields.iter().find_map(|(f, _)| f.strip_prefix("h:"));
        match (field("owner").map(String::as_str), hold) {
            (Some(holder), Some(hold)) if holder == owner.id() => {
                self.release_hold(owner, hold).await
            }
            _ => Err(Error::Lost {
                name: self.core.keys.name.clone(),
            }),
        }
    }

    async fn release_hold(&self, owner: &Owner, hold: &str) -> Result<u32> {
        let left: i64 = RELEASE
            .call()
            .key(&self.core.keys.key)
            .arg(owner.id())
            .arg(&self.core.keys.channel)
            .arg(hold)
            .run(&self.core.client)
            .await?;
        match left {
            n if n >= 0 => Ok(n as u32),
            _ => Err(Error::Lost {
                name: self.core.keys.name.clone(),
            }),
        }
    }

    /// How many holds `owner` has on the lock now (0 when it does not hold it).
    pub async fn hold_count(&self, owner: &Owner) -> Result<u32> {
        let reply: redis::RedisResult<(Option<String>, Option<String>, Option<u32>)> =
            redis::cmd("HMGET")
                .arg(&self.core.keys.key)
                .arg("~kind")
                .arg("owner")
                .arg("count")
                .query_async(&mut self.core.client.conn())
                .await;
        match reply {
            Ok((Some(kind), holder, count)) if kind == "reentrant" => {
                Ok(if holder.as_deref() == Some(owner.id()) {
                    count.unwrap_or(0)
                } else {
                    0
                })
            }
            Ok((None, None, None)) => Ok(0),
            Ok(_) => Err(self
                .core
                .client
                .wrong_type(&self.core.keys.key, "reentrant")
                .await),
            Err(err) if err.code() == Some("WRONGTYPE") => Err(self
                .core
                .client
                .wrong_type(&self.core.keys.key, "reentrant")
                .await),
            Err(err) => Err(Error::from_redis("HMGET", err)),
        }
    }
}

/// A [`ReentrantMutex`] as held by one [`Owner`]: the lock kind of a [`ReentrantGuard`].
#[derive(Debug, Clone)]
pub struct OwnedBy {
    mutex: ReentrantMutex,
    owner: Owner,
}

impl OwnedBy {
    /// The owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The mutex.
    pub fn mutex(&self) -> &ReentrantMutex {
        &self.mutex
    }
}

impl Guard<OwnedBy> {
    /// The owner of this hold.
    pub fn owner(&self) -> &Owner {
        &self.raw.owner
    }
}

impl OnOneServer for OwnedBy {
    const HOLD: HoldKind = HoldKind::Reentrant;

    fn core(&self) -> &LockCore {
        &self.mutex.core
    }

    fn kind_name(&self) -> &'static str {
        "reentrant"
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Channel(&self.mutex.core.keys.channel)
    }

    async fn attempt(&self, token: &str, _join_queue: bool) -> Result<Attempt> {
        let reply: Vec<i64> = ACQUIRE
            .call()
            .key(&self.mutex.core.keys.key)
            .key(&self.mutex.core.keys.fence)
            .arg(self.owner.id())
            .arg(self.mutex.core.options.ttl.as_millis() as u64)
            .arg(token)
            .run(&self.mutex.core.client)
            .await?;
        Attempt::from_reply(&reply)
    }

    async fn release(&self, token: &str) -> Result<()> {
        self.mutex.release_hold(&self.owner, token).await.map(drop)
    }
}

impl Client {
    /// A reentrant mutex named `name` with default options (30 s lease renewed
    /// automatically, wait forever).
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        ReentrantMutex::new(self.clone(), name, LockOptions::default())
    }

    /// A reentrant mutex named `name` with the given options.
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        ReentrantMutex::new(self.clone(), name, options)
    }
}
