//! The distributed mutex: `SET NX PX` semantics plus a fencing token, in one script.
//!
//! Storage: the lock key holds the owner's token as a plain string with a PX expiry — the
//! format of redis-py's `Lock`, redsync and node-redlock, so those clients and dlock exclude
//! each other on the same key. The fencing counter lives beside it (same hash slot), never
//! expires and only grows.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease::{self, Lease};
use crate::wait::{next_sleep, Backoff};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("extend.lua")));

/// Default lease of a lock.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// How long [`Mutex::lock`] waits for a lock held by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Fail at once with [`Error::Busy`].
    NoWait,
    /// Wait up to this long, then fail with [`Error::TimedOut`].
    Timeout(Duration),
    /// Wait until the lock is acquired.
    #[default]
    Forever,
}

/// Options of a [`Mutex`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutexOptions {
    /// The lease: how long the lock stays held unless extended or released (default 30 s).
    pub ttl: Duration,
    /// How long [`Mutex::lock`] waits (default: forever).
    pub wait: Wait,
    /// Polling bounds used when release notifications are unavailable.
    pub backoff: Backoff,
}

impl Default for MutexOptions {
    fn default() -> Self {
        MutexOptions {
            ttl: DEFAULT_TTL,
            wait: Wait::Forever,
            backoff: Backoff::default(),
        }
    }
}

impl MutexOptions {
    /// Sets the lease.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the wait policy.
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the polling bounds.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = Backoff { min, max };
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        lease::validate_ttl(self.ttl)?;
        if self.backoff.min.is_zero() || self.backoff.min > self.backoff.max {
            return Err(Error::InvalidArgument(format!(
                "backoff bounds {:?}..{:?} are invalid; the minimum must be above zero and at most the maximum",
                self.backoff.min, self.backoff.max
            )));
        }
        if let Wait::Timeout(timeout) = self.wait {
            if timeout > lease::MAX_TTL * 365 {
                return Err(Error::InvalidArgument(format!(
                    "wait timeout {timeout:?} is absurdly long; use Wait::Forever to wait without limit"
                )));
            }
        }
        Ok(())
    }
}

/// What one acquire attempt found.
enum Attempt {
    Granted(Lease),
    Busy { remaining: Option<Duration> },
}

/// A named distributed mutex. Cheap to clone; made by [`Client::mutex`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use std::time::Duration;
/// use dlock::{MutexOptions, Wait};
///
/// let mutex = client.mutex_with(
///     "accounts:42:migrate",
///     MutexOptions::default().ttl(Duration::from_secs(10)).wait(Wait::Timeout(Duration::from_secs(5))),
/// )?;
/// let mut guard = mutex.lock().await?;
/// // ... work, passing guard.fence() to the storage you write to ...
/// guard.extend(Duration::from_secs(10)).await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Mutex {
    client: Client,
    keys: LockKeys,
    options: MutexOptions,
}

impl Mutex {
    pub(crate) fn new(client: Client, name: &str, options: MutexOptions) -> Result<Mutex> {
        options.validate()?;
        let keys = LockKeys::new(client.prefix(), name)?;
        Ok(Mutex {
            client,
            keys,
            options,
        })
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
    pub fn options(&self) -> &MutexOptions {
        &self.options
    }

    /// One attempt to take the lock. Fails with [`Error::Busy`] (telling the holder's
    /// remaining lease) when someone else holds it.
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        let token = lease::new_token();
        match self.attempt(&token).await? {
            Attempt::Granted(lease) => Ok(self.guard(lease)),
            Attempt::Busy { remaining } => Err(Error::Busy {
                name: self.keys.name.clone(),
                remaining,
            }),
        }
    }

    /// Takes the lock, waiting according to the [`Wait`] policy.
    ///
    /// Waiting is notified: a release wakes the waiter at once; an abandoned lock is taken
    /// as soon as its lease runs out. Transient connection errors are retried within the
    /// wait budget. Fails with [`Error::TimedOut`] when the budget is used up
    /// ([`Error::Busy`] for [`Wait::NoWait`]).
    pub async fn lock(&self) -> Result<MutexGuard> {
        let started = Instant::now();
        let deadline = match self.options.wait {
            Wait::NoWait => return self.try_lock().await,
            Wait::Timeout(timeout) => Some(started + timeout),
            Wait::Forever => None,
        };
        // One token for the whole wait: an attempt whose reply was lost but that succeeded
        // is recognised by the next attempt as ours.
        let token = lease::new_token();
        let backoff = self.options.backoff;
        let mut poll = backoff.min;
        let mut watch = None;
        loop {
            if let Some(watch) = watch.as_mut() {
                crate::wait::Watch::mark_seen(watch);
            }
            let remaining = match self.attempt(&token).await {
                Ok(Attempt::Granted(lease)) => return Ok(self.guard(lease)),
                Ok(Attempt::Busy { remaining }) => remaining,
                Err(err) if err.is_transient() => {
                    tracing::debug!(lock = %self.keys.name, error = %err, "acquire attempt failed; retrying");
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(err);
                    }
                    Some(Duration::ZERO)
                }
                Err(err) => return Err(err),
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::TimedOut {
                    name: self.keys.name.clone(),
                    waited: started.elapsed(),
                });
            }
            let Some(active) = watch.as_mut() else {
                // Subscribe, then re-check at once: a release between the failed attempt
                // and the subscription would otherwise go unnoticed.
                watch = Some(self.client.notifier().watch(&self.keys.channel()).await);
                continue;
            };
            let live = active.is_live();
            let sleep = match remaining {
                Some(Duration::ZERO) => crate::wait::jitter(poll),
                _ => next_sleep(remaining, live, poll, backoff.max, deadline),
            };
            if !live || remaining == Some(Duration::ZERO) {
                poll = (poll * 2).min(backoff.max);
            }
            tokio::select! {
                _ = active.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// Releases the lock held with `token` (e.g. a token printed by `dlock acquire`).
    /// Fails with [`Error::Lost`] when that token no longer holds it; the current holder,
    /// if any, is untouched.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        let outcome: i64 = RELEASE
            .key(&self.keys.key)
            .arg(token)
            .arg(self.keys.channel())
            .invoke_async(&mut self.client.conn())
            .await?;
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
            .invoke_async(&mut self.client.conn())
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
        let fence_key = self.keys.fence();
        let value: Option<u64> = redis::cmd("GET")
            .arg(&fence_key)
            .query_async(&mut self.client.conn())
            .await
            .map_err(|e| self.map_wrong_type(e, &fence_key))?;
        Ok(value.unwrap_or(0))
    }

    async fn attempt(&self, token: &str) -> Result<Attempt> {
        let sent = Instant::now();
        let reply: Result<Vec<i64>> = ACQUIRE
            .key(&self.keys.key)
            .key(self.keys.fence())
            .arg(token)
            .arg(self.options.ttl.as_millis() as u64)
            .invoke_async(&mut self.client.conn())
            .await
            .map_err(Error::from);
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
            [1, fence] => Ok(Attempt::Granted(Lease {
                token: token.to_string(),
                fence: *fence as u64,
                valid_until: lease::valid_until(sent, self.options.ttl),
            })),
            [0, pttl] => Ok(Attempt::Busy {
                remaining: (*pttl >= 0).then(|| Duration::from_millis(*pttl as u64)),
            }),
            [-1, 1] => Err(self.wrong_type(&self.keys.key)),
            [-1, _] => Err(self.wrong_type(&self.keys.fence())),
            other => Err(unexpected_reply(&format!("{other:?}"))),
        }
    }

    fn guard(&self, lease: Lease) -> MutexGuard {
        MutexGuard {
            mutex: self.clone(),
            lease,
            released: false,
        }
    }

    fn check_owner_outcome(&self, outcome: i64) -> Result<()> {
        match outcome {
            1 => Ok(()),
            0 => Err(Error::Lost {
                name: self.keys.name.clone(),
            }),
            -1 => Err(self.wrong_type(&self.keys.key)),
            other => Err(unexpected_reply(&other.to_string())),
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

    /// Releases `token` on the client's runtime without waiting (used on drop).
    fn release_in_background(&self, token: String) {
        let mutex = self.clone();
        // Handle::spawn never panics: after runtime shutdown the task is simply dropped and
        // the lease frees the lock.
        self.client.inner.runtime.spawn(async move {
            if let Err(err) = mutex.release_token(&token).await {
                tracing::debug!(lock = %mutex.keys.name, error = %err, "background release failed; the lease will expire");
            }
        });
    }
}

fn unexpected_reply(reply: &str) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply from a dlock script",
        reply.to_string(),
    )))
}

/// Proof of holding a [`Mutex`]. Dropping it without [`MutexGuard::unlock`] releases the
/// lock in the background.
#[derive(Debug)]
pub struct MutexGuard {
    mutex: Mutex,
    lease: Lease,
    released: bool,
}

impl MutexGuard {
    /// The lock name.
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The random token that identifies this holder in Redis.
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the same
    /// lock. Pass it to storage that rejects writes with a smaller one than it has seen.
    pub fn fence(&self) -> u64 {
        self.lease.fence
    }

    /// Until when this holder may assume it owns the lock, by the local monotonic clock:
    /// the request's send time plus the lease minus [`drift_allowance`](crate::drift_allowance).
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until
    }

    /// How much of the validity is left (zero once it passed).
    pub fn remaining(&self) -> Duration {
        self.lease
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Resets the lease to `ttl` from now, if this holder still owns the lock.
    /// Fails with [`Error::Lost`] when it does not.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        let sent = Instant::now();
        self.mutex.extend_token(&self.lease.token, ttl).await?;
        self.lease.valid_until = lease::valid_until(sent, ttl);
        Ok(())
    }

    /// Asks Redis whether this holder's token still holds the lock.
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.mutex.holder().await?.as_deref() == Some(self.lease.token.as_str()))
    }

    /// Releases the lock. Fails with [`Error::Lost`] when the lease had already expired or
    /// another owner holds the lock now (which is left untouched).
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.mutex.release_token(&self.lease.token).await
    }

    /// Gives up the guard without releasing: the lock stays held until its lease ends or
    /// someone releases it with the returned token.
    pub fn into_token(mut self) -> String {
        self.released = true;
        std::mem::take(&mut self.lease.token)
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if !self.released {
            self.mutex
                .release_in_background(std::mem::take(&mut self.lease.token));
        }
    }
}
