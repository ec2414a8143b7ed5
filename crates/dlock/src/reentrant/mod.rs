//! The reentrant mutex: one owner may hold the same lock many times.
//!
//! Thread identity means nothing in async Rust (a task moves between threads), so the
//! owner is explicit: an [`Owner`] a caller creates and passes to every lock call. The lock
//! is a hash `{owner, count, fence, request}` at the lock key; it is released when the
//! count returns to zero. The fencing token is drawn once per outermost grant; nested holds
//! report the same one.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;

use crate::client::{Client, RunScript};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease::{self, Grant, Held, LostReason, LostSignal};
use crate::options::LockOptions;
use crate::renew::{OwnerField, Registration};
use crate::wait::{acquire_waiting, Attempt};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));

/// The identity that holds a [`ReentrantMutex`]. Clone it to every place that acts for
/// the same owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(String);

impl Owner {
    /// A fresh owner with a random 128-bit id.
    pub fn new() -> Owner {
        Owner(lease::new_token())
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

/// What a reentrant grant returned, beyond the common grant.
struct ReentrantGrant {
    grant: Grant,
    holds: u32,
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
/// assert_eq!(inner.fence(), outer.fence());       // one fence per outermost grant
/// inner.unlock().await?;                          // still held (one hold left)
/// outer.unlock().await?;                          // released
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReentrantMutex {
    client: Client,
    keys: LockKeys,
    options: LockOptions,
}

impl ReentrantMutex {
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<Self> {
        options.validate()?;
        let keys = LockKeys::new(client.prefix(), name)?;
        Ok(ReentrantMutex {
            client,
            keys,
            options,
        })
    }

    /// The lock name (without the client prefix).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// One attempt to take (or re-enter) the lock for `owner`.
    pub async fn try_lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        let request = lease::new_token();
        match self.attempt(owner, &request).await? {
            Attempt::Granted(grant) => Ok(self.guard(owner, grant)),
            Attempt::Busy { remaining } => Err(Error::Busy {
                name: self.keys.name.clone(),
                remaining,
            }),
        }
    }

    /// Takes (or re-enters) the lock for `owner`, waiting per the options' wait policy.
    pub async fn lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        // One request id for the whole wait: a retried attempt never counts twice.
        let request = lease::new_token();
        let grant = acquire_waiting(
            &self.client,
            &self.keys.name,
            &self.keys.channel,
            self.options.wait,
            self.options.backoff,
            self.options.backoff.max,
            || self.attempt(owner, &request),
        )
        .await?;
        Ok(self.guard(owner, grant))
    }

    /// Gives back one hold of `owner` and returns the holds left. Fails with
    /// [`Error::Lost`] when `owner` does not hold the lock (nothing is touched).
    pub async fn release_as(&self, owner: &Owner) -> Result<u32> {
        let left: i64 = RELEASE
            .key(&self.keys.key)
            .arg(owner.id())
            .arg(&self.keys.channel)
            .run(&self.client)
            .await?;
        match left {
            n if n >= 0 => Ok(n as u32),
            -1 => Err(Error::Lost {
                name: self.keys.name.clone(),
            }),
            _ => Err(self.wrong_type(&self.keys.key)),
        }
    }

    /// How many holds `owner` has on the lock now (0 when it does not hold it).
    pub async fn hold_count(&self, owner: &Owner) -> Result<u32> {
        let (holder, count): (Option<String>, Option<u32>) = redis::cmd("HMGET")
            .arg(&self.keys.key)
            .arg("owner")
            .arg("count")
            .query_async(&mut self.client.conn())
            .await
            .map_err(|err| match err.code() {
                Some("WRONGTYPE") => self.wrong_type(&self.keys.key),
                _ => err.into(),
            })?;
        Ok(if holder.as_deref() == Some(owner.id()) {
            count.unwrap_or(0)
        } else {
            0
        })
    }

    async fn attempt(&self, owner: &Owner, request: &str) -> Result<Attempt<ReentrantGrant>> {
        let sent = Instant::now();
        let reply: Vec<i64> = ACQUIRE
            .key(&self.keys.key)
            .key(&self.keys.fence)
            .arg(owner.id())
            .arg(self.options.ttl.as_millis() as u64)
            .arg(request)
            .run(&self.client)
            .await?;
        match reply.as_slice() {
            [1, fence, holds] => Ok(Attempt::Granted(ReentrantGrant {
                grant: Grant {
                    token: owner.id().to_string(),
                    fence: *fence as u64,
                    sent,
                },
                holds: *holds as u32,
            })),
            [0, pttl] => Ok(Attempt::Busy {
                remaining: (*pttl >= 0).then(|| Duration::from_millis(*pttl as u64)),
            }),
            [-1, 1] => Err(self.wrong_type(&self.keys.key)),
            [-1, _] => Err(self.wrong_type(&self.keys.fence)),
            other => Err(Error::unexpected_reply(other)),
        }
    }

    fn guard(&self, owner: &Owner, grant: ReentrantGrant) -> ReentrantGuard {
        let held = Held::start(
            &self.client,
            grant.grant,
            &self.keys.key,
            OwnerField::HashOwner,
            self.options.ttl,
            self.options.renewal,
        );
        ReentrantGuard {
            mutex: self.clone(),
            owner: owner.clone(),
            held,
            holds: grant.holds,
            released: false,
        }
    }

    fn wrong_type(&self, key: &str) -> Error {
        Error::WrongType {
            key: key.to_string(),
            what: if key == self.keys.key {
                "expected a dlock reentrant-lock hash".into()
            } else {
                "expected an integer fencing counter".into()
            },
        }
    }

    fn release_in_background(&self, owner: Owner, renewal: Option<Registration>) {
        let mutex = self.clone();
        self.client.inner.runtime.spawn(async move {
            if let Some(renewal) = renewal {
                renewal.cancel().await;
            }
            if let Err(err) = mutex.release_as(&owner).await {
                tracing::debug!(lock = %mutex.keys.name, error = %err, "background release failed; the lease will expire");
            }
        });
    }
}

/// One hold of a [`ReentrantMutex`]. Dropping it without [`ReentrantGuard::unlock`] gives
/// the hold back in the background.
#[derive(Debug)]
pub struct ReentrantGuard {
    mutex: ReentrantMutex,
    owner: Owner,
    held: Held,
    holds: u32,
    released: bool,
}

impl ReentrantGuard {
    /// The owner of this hold.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The fencing token of the outermost grant this hold belongs to.
    pub fn fence(&self) -> u64 {
        self.held.fence
    }

    /// The owner's number of holds right after this one was granted.
    pub fn holds_at_grant(&self) -> u32 {
        self.holds
    }

    /// Until when this hold may assume ownership, by the local monotonic clock.
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    /// A signal that fires when the owner may have lost the lock.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Resolves when the owner may have lost the lock, with the reason.
    pub async fn lost(&self) -> LostReason {
        self.held.lost_signal().wait().await
    }

    /// Gives this hold back (stopping its renewal first) and returns the holds left;
    /// the lock is released at zero. Fails with [`Error::Lost`] when the owner no longer
    /// holds the lock.
    pub async fn unlock(mut self) -> Result<u32> {
        self.released = true;
        self.held.stop_renewal().await;
        self.mutex.release_as(&self.owner).await
    }
}

impl Drop for ReentrantGuard {
    fn drop(&mut self) {
        if !self.released {
            let (_, renewal) = self.held.detach();
            self.mutex
                .release_in_background(self.owner.clone(), renewal);
        }
    }
}
