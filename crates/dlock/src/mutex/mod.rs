//! The distributed mutex: `SET NX PX` semantics plus a fencing token, in one script.
//!
//! Storage: the lock key holds the owner's token as a plain string with a PX expiry — the
//! format of redis-py's `Lock`, redsync and node-redlock, so those clients and dlock exclude
//! each other on the same key. The fencing counter lives beside it (same hash slot), never
//! expires and only grows.

use std::future::Future;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;

use crate::client::{Client, RunScript};
use crate::error::{Error, Result};
use crate::guard::GuardCore;
use crate::keys::LockKeys;
use crate::lease::{self, Grant};
use crate::options::LockOptions;
use crate::queue::{busy_remaining, wait_in_line, QueueKeys};
use crate::renew::OwnerField;
use crate::wait::{acquire_waiting, Attempt};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("extend.lua")));
static FAIR_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../queue/queue.lua"),
        include_str!("../fair/acquire.lua")
    ))
});
static FAIR_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../queue/queue.lua"),
        include_str!("../fair/release.lua")
    ))
});

/// A named distributed mutex. Cheap to clone; made by [`Client::mutex`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use std::time::Duration;
/// use dlock::{LockOptions, Wait};
///
/// let mutex = client.mutex_with(
///     "accounts:42:migrate",
///     LockOptions::default().renewed(Duration::from_secs(10)).wait(Wait::Timeout(Duration::from_secs(5))),
/// )?;
/// let guard = mutex.lock().await?;
/// // ... work, passing guard.fence() to the storage you write to; the lease is renewed
/// // meanwhile and guard.lost() resolves if the lock is lost ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Mutex {
    client: Client,
    keys: LockKeys,
    options: LockOptions,
    /// The waiter queue of a fair mutex; `None` for the plain one.
    queue: Option<QueueKeys>,
}

impl Mutex {
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<Mutex> {
        options.validate()?;
        let keys = LockKeys::new(client.prefix(), name)?;
        Ok(Mutex {
            client,
            keys,
            options,
            queue: None,
        })
    }

    /// A fair mutex: granted strictly in arrival order (see [`Client::fair_mutex`]).
    pub(crate) fn new_fair(client: Client, name: &str, options: LockOptions) -> Result<Mutex> {
        let mut mutex = Mutex::new(client, name, options)?;
        mutex.queue = Some(QueueKeys::new(&mutex.keys));
        Ok(mutex)
    }

    /// True for a fair (FIFO) mutex.
    pub fn is_fair(&self) -> bool {
        self.queue.is_some()
    }

    /// The lock name (without the client prefix).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key that holds the lock.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// One attempt to take the lock. Fails with [`Error::Busy`] (telling the holder's
    /// remaining lease) when someone else holds it.
    ///
    /// A fair mutex grants a single attempt only when nobody is queued ahead.
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        let token = lease::new_token();
        match self.attempt(&token, false).await? {
            Attempt::Granted(grant) => Ok(self.guard(grant)),
            Attempt::Busy { remaining } => Err(Error::Busy {
                name: self.keys.name.clone(),
                remaining,
            }),
        }
    }

    /// Takes the lock, waiting according to the [`Wait`](crate::Wait) policy.
    ///
    /// Waiting is notified: a release wakes the waiter at once; an abandoned lock is taken
    /// as soon as its lease runs out. Transient connection errors are retried within the
    /// wait budget. Fails with [`Error::TimedOut`] when the budget is used up
    /// ([`Error::Busy`] for [`Wait::NoWait`](crate::Wait::NoWait)).
    ///
    /// A fair mutex grants in arrival order: each waiter has a leased place in a queue and
    /// is woken alone when it is its turn. Dropping the future or timing out gives the
    /// place up.
    pub async fn lock(&self) -> Result<MutexGuard> {
        if self.options.wait == crate::Wait::NoWait {
            return self.try_lock().await;
        }
        // One token for the whole wait: an attempt whose reply was lost but that succeeded
        // is recognised by the next attempt as ours.
        let token = lease::new_token();
        let grant = match &self.queue {
            None => {
                acquire_waiting(
                    &self.client,
                    &self.keys.name,
                    &self.keys.channel,
                    self.options.wait,
                    self.options.backoff,
                    self.options.backoff.max,
                    || self.attempt(&token, false),
                )
                .await?
            }
            Some(queue) => {
                wait_in_line(
                    &self.client,
                    queue,
                    &self.keys.name,
                    &token,
                    &self.options,
                    || self.attempt(&token, true),
                )
                .await?
            }
        };
        Ok(self.guard(grant))
    }

    /// Runs `work` while holding the lock (renewed meanwhile) and returns its value.
    ///
    /// `work` receives the fencing token of the grant. If the lock is lost before `work`
    /// finishes, its future is dropped at its next await point and the result is
    /// [`Error::Lost`]; otherwise the lock is released and the value returned.
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// let report = client
    ///     .mutex("nightly-report")?
    ///     .with_lock(|fence| async move { format!("built under fence {fence}") })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock().await?;
        let mut lost = guard.lost_signal();
        tokio::select! {
            value = work(guard.fence()) => {
                guard.unlock().await?;
                Ok(value)
            }
            reason = lost.wait() => {
                tracing::warn!(lock = %self.keys.name, %reason, "lock lost; work cancelled");
                drop(guard);
                Err(Error::Lost { name: self.keys.name.clone() })
            }
        }
    }

    /// Releases the lock held with `token` (e.g. a token printed by `dlock acquire`).
    /// Fails with [`Error::Lost`] when that token no longer holds it; the current holder,
    /// if any, is untouched.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        let outcome: i64 = match &self.queue {
            None => {
                RELEASE
                    .key(&self.keys.key)
                    .arg(token)
                    .arg(&self.keys.channel)
                    .run(&self.client)
                    .await?
            }
            Some(queue) => {
                FAIR_RELEASE
                    .key(&self.keys.key)
                    .key(&queue.queue)
                    .key(&queue.leases)
                    .arg(token)
                    .arg(&queue.wake_prefix)
                    .run(&self.client)
                    .await?
            }
        };
        self.check_owner_outcome(outcome)
    }

    /// Resets the lease of the lock held with `token` to `ttl`. Fails with [`Error::Lost`]
    /// when that token no longer holds it.
    pub async fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        lease::validate_ttl(ttl)?;
        let outcome: i64 = EXTEND
            .key(&self.keys.key)
            .arg(token)
            .arg(ttl.as_millis() as u64)
            .run(&self.client)
            .await?;
        self.check_owner_outcome(outcome)
    }

    /// The token that holds the lock now, if any (a plain `GET`; `None` when free).
    pub async fn holder(&self) -> Result<Option<String>> {
        let value: Option<String> = redis::cmd("GET")
            .arg(&self.keys.key)
            .query_async(&mut self.client.conn())
            .await
            .map_err(|e| self.map_wrong_type(e, &self.keys.key))?;
        Ok(value)
    }

    /// The last fencing token granted for this lock (0 when never granted).
    pub async fn last_fence(&self) -> Result<u64> {
        let fence_key = &self.keys.fence;
        let value: Option<u64> = redis::cmd("GET")
            .arg(fence_key)
            .query_async(&mut self.client.conn())
            .await
            .map_err(|e| self.map_wrong_type(e, fence_key))?;
        Ok(value.unwrap_or(0))
    }

    /// One acquire; a fair mutex also takes (or refreshes) a place in its queue when `queue`
    /// is set and the lock is not granted.
    async fn attempt(&self, token: &str, queue: bool) -> Result<Attempt<Grant>> {
        let sent = Instant::now();
        let mut invocation = match &self.queue {
            None => ACQUIRE.prepare_invoke(),
            Some(_) => FAIR_ACQUIRE.prepare_invoke(),
        };
        invocation
            .key(&self.keys.key)
            .key(&self.keys.fence)
            .arg(token)
            .arg(self.options.ttl.as_millis() as u64);
        if let Some(keys) = &self.queue {
            invocation
                .key(&keys.queue)
                .key(&keys.leases)
                .arg(self.options.waiter_lease.as_millis() as u64)
                .arg(&keys.wake_prefix)
                .arg(if queue { "1" } else { "0" });
        }
        let reply: Result<Vec<i64>> = invocation.run(&self.client).await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(err) => {
                if err.is_transient() {
                    // The grant may have happened with the reply lost: give it back so it
                    // does not block others for a whole lease.
                    self.release_in_background(token.to_string());
                }
                return Err(err);
            }
        };
        match reply.as_slice() {
            [1, fence] => Ok(Attempt::Granted(Grant {
                token: token.to_string(),
                fence: *fence as u64,
                sent,
            })),
            [0, ..] => Ok(Attempt::Busy {
                remaining: busy_remaining(&reply),
            }),
            [-1, 1] => Err(self.wrong_type(&self.keys.key)),
            [-1, _] => Err(self.wrong_type(&self.keys.fence)),
            other => Err(Error::unexpected_reply(other)),
        }
    }

    fn guard(&self, grant: Grant) -> MutexGuard {
        let mutex = self.clone();
        let release = move |token: String| {
            let mutex = mutex.clone();
            async move { mutex.release_token(&token).await }
        };
        MutexGuard {
            mutex: self.clone(),
            core: GuardCore::start(
                &self.client,
                grant,
                &self.keys.key,
                OwnerField::StringValue,
                &self.options,
                release,
            ),
        }
    }

    fn check_owner_outcome(&self, outcome: i64) -> Result<()> {
        match outcome {
            1 => Ok(()),
            0 => Err(Error::Lost {
                name: self.keys.name.clone(),
            }),
            -1 => Err(self.wrong_type(&self.keys.key)),
            other => Err(Error::unexpected_reply(other)),
        }
    }

    fn wrong_type(&self, key: &str) -> Error {
        Error::WrongType {
            key: key.to_string(),
            what: if key == self.keys.key {
                "expected a string holding a lock token".into()
            } else {
                "expected an integer fencing counter".into()
            },
        }
    }

    fn map_wrong_type(&self, err: redis::RedisError, key: &str) -> Error {
        if err.code() == Some("WRONGTYPE") || err.kind() == redis::ErrorKind::UnexpectedReturnType {
            self.wrong_type(key)
        } else {
            err.into()
        }
    }

    /// Releases `token` on the client's runtime without waiting (after an acquire whose
    /// reply was lost).
    fn release_in_background(&self, token: String) {
        let mutex = self.clone();
        self.client.inner.runtime.spawn(async move {
            if let Err(err) = mutex.release_token(&token).await {
                tracing::debug!(lock = %mutex.keys.name, error = %err, "background release failed; the lease will expire");
            }
        });
    }
}

/// Proof of holding a [`Mutex`] (plain or fair). Dropping it without
/// [`MutexGuard::unlock`] stops renewal and releases the lock in the background.
#[derive(Debug)]
pub struct MutexGuard {
    mutex: Mutex,
    core: GuardCore,
}

impl MutexGuard {
    crate::guard::hold_accessors!("lock");

    /// The lock name.
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the same
    /// lock. Pass it to storage that rejects writes with a smaller one than it has seen.
    pub fn fence(&self) -> u64 {
        self.core.fence()
    }

    /// Resets the lease to `ttl` from now, if this holder still owns the lock.
    /// Fails with [`Error::Lost`] when it does not.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        let sent = Instant::now();
        self.mutex.extend_token(self.core.token(), ttl).await?;
        self.core.held.extended(sent, ttl);
        Ok(())
    }

    /// Asks Redis whether this holder's token still holds the lock.
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.mutex.holder().await?.as_deref() == Some(self.core.token()))
    }

    /// Stops renewal, then releases the lock. Fails with [`Error::Lost`] when the lease had
    /// already expired or another owner holds the lock now (which is left untouched).
    pub async fn unlock(self) -> Result<()> {
        self.core.unlock().await
    }

    /// Gives up the guard without releasing: renewal stops and the lock stays held until
    /// its lease ends or someone releases it with the returned token.
    pub fn into_token(self) -> String {
        self.core.into_token()
    }
}
