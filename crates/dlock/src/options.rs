//! Options shared by the lock primitives.

use std::time::Duration;

use crate::error::{Error, Result};
use rand::Rng;

use crate::lease;

/// Default lease of a lock (renewed automatically unless a fixed lease is chosen).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Whether a held lock's lease is renewed for the holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease is not renewed: it ends after its TTL unless the holder extends it.
    Manual,
    /// The client's watchdog renews the lease every third of its TTL until unlock, drop
    /// or loss. With `max_hold`, renewal stops after that long in total and the lease then
    /// runs out (the lost signal fires).
    Auto {
        /// Cap on the total hold time.
        max_hold: Option<Duration>,
    },
}

/// Options of a lock: lease, renewal, wait policy, polling bounds.
///
/// The default holds a 30 s lease renewed automatically and waits forever.
/// [`LockOptions::ttl`] chooses a *fixed* lease instead (no renewal), like Redisson's
/// `leaseTime`; [`LockOptions::renewed`] chooses the lease of an auto-renewed lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// The lease: how long the lock stays held without renewal.
    pub ttl: Duration,
    /// Whether the lease is renewed automatically.
    pub renewal: Renewal,
    /// How long a lock call waits.
    pub wait: Wait,
    /// Polling bounds used when release notifications are unavailable.
    pub backoff: Backoff,
    /// For queued primitives (fair mutex, semaphore, writers of a read-write lock): the
    /// lease on a waiter's place in the queue. A live waiter refreshes it every third; a
    /// crashed one holds up the queue until it ends (plus at most a third, until the next
    /// waiter re-checks). At least [`MIN_WAITER_LEASE`], at most [`MAX_TTL`](crate::MAX_TTL).
    pub waiter_lease: Duration,
    /// Plain mutex only: draw the fencing token with the grant (one script call per
    /// acquire) instead of on the first [`fence`](crate::Guard::fence) read (a bare
    /// `SET NX` per acquire, and one more round trip for a caller that reads the fence).
    /// For callers that read every grant's fence. Every other kind always draws it with
    /// the grant.
    pub fence_at_grant: bool,
    /// Replica acknowledgement of grants, extends and renewals (see
    /// [`LockOptions::replicas`]); `None` (the default) trusts the master's reply alone.
    pub replicas: Option<Replicas>,
    /// The least time a hold keeps the lock (see [`LockOptions::hold_at_least`]); `None`
    /// (the default): unlock frees it at once.
    pub hold_at_least: Option<Duration>,
    /// How long a lock stays ungrantable after a hold of it ended by expiry (see
    /// [`LockOptions::lock_delay`]); `None` (the default): none.
    pub lock_delay: Option<Duration>,
}

/// How many replicas must acknowledge a lock's writes, and how long to wait for them
/// (`WAIT count timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Replicas {
    /// Replicas that must have the write.
    pub count: u32,
    /// How long to wait for them; must be shorter than the lease.
    pub timeout: Duration,
}

/// Most replicas a lock may ask to acknowledge its writes.
pub const MAX_REPLICAS: u32 = 64;

/// Longest wait timeout accepted: a year.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Longest polling interval accepted in [`Backoff`].
pub const MAX_BACKOFF: Duration = Duration::from_secs(60 * 60);

/// Default lease on a waiter's place in a queue: the default lease of a hold, so that with
/// the defaults a release's direct hand-off is taken as it is, with no command (a direct
/// grant lasts at most the rest of the waiter lease).
pub const DEFAULT_WAITER_LEASE: Duration = DEFAULT_TTL;

/// Shortest waiter lease accepted. A live waiter refreshes its place every third of its
/// waiter lease; much shorter and a loaded machine misses refreshes, so waiters lose their
/// place in line (10 ms was seen to break the order) and refresh hundreds of times a
/// second.
pub const MIN_WAITER_LEASE: Duration = Duration::from_millis(100);

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: DEFAULT_TTL,
            renewal: Renewal::Auto { max_hold: None },
            wait: Wait::Forever,
            backoff: Backoff::default(),
            waiter_lease: DEFAULT_WAITER_LEASE,
            fence_at_grant: false,
            replicas: None,
            hold_at_least: None,
            lock_delay: None,
        }
    }
}

impl LockOptions {
    /// A fixed lease of `ttl`, not renewed: the lock frees after `ttl` unless extended.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.renewal = Renewal::Manual;
        self
    }

    /// A lease of `ttl`, renewed every `ttl / 3` by the client until unlock.
    pub fn renewed(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        if self.renewal == Renewal::Manual {
            self.renewal = Renewal::Auto { max_hold: None };
        }
        self
    }

    /// Renew automatically, but hold for at most `max_hold` in total (a cap too long to
    /// matter is no cap).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.renewal = Renewal::Auto {
            max_hold: Some(max_hold),
        };
        self
    }

    /// Sets the wait policy.
    pub fn wait(mut self, wait: Wait) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the lease on a waiter's place in a queue (queued primitives only).
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.waiter_lease = lease;
        self
    }

    /// Plain mutex: draws the fencing token with the grant (see
    /// [`LockOptions::fence_at_grant`](LockOptions#structfield.fence_at_grant)), so that
    /// [`fence`](crate::Guard::fence) costs no round trip. Worth it when every grant's
    /// fence is read; the lazy default is cheaper for everyone else.
    pub fn fence_at_grant(mut self) -> Self {
        self.fence_at_grant = true;
        self
    }

    /// Waits, after every grant, extend and renewal, until `count` replicas have the write
    /// (`WAIT count timeout` on the connection that wrote it; a connection of its own, so
    /// the client's other requests do not wait behind it). Too few acknowledgements within
    /// `timeout`: a grant or extend is given back and fails with
    /// [`Error::NotReplicated`]; a renewal counts as failed (retried while the lease
    /// lasts, then the lost signal fires). The plain mutex then draws its fencing token
    /// with the grant, so the acknowledgement covers it too. Narrows the hole a failover to a replica that
    /// never received the grant opens; it does not close it (docs/safety.md).
    pub fn replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some(Replicas { count, timeout });
        self
    }

    /// Keeps every hold at least `least` from its grant: an earlier
    /// [`unlock`](crate::Guard::unlock), drop of the guard, or
    /// [`Client::shutdown`](crate::Client::shutdown) stops renewal and shortens the lease to
    /// end `least` after the grant instead of freeing the lock at once; it then frees by
    /// itself, and whoever waits is told when. A hold that lasts longer is given back as
    /// usual. ShedLock's `lockAtLeastFor`: a job started by cron on every replica runs
    /// once, because a replica whose timer fires a little later than another's still finds
    /// the lock held although the job took less time than the drift.
    ///
    /// The grant's moment is when its reply arrived, so the lock is held at least `least`
    /// (by the local clock) from any point at which the holder knew it held it. At most
    /// [`MAX_TTL`](crate::MAX_TTL): the rest becomes a lease. A reentrant hold whose owner
    /// holds others is given back at once (the last of them keeps the lock). When Redis
    /// cannot be reached at unlock the lock keeps the lease it had, which may end
    /// sooner; a failover to a replica that missed the shortened lease may too.
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// use std::time::Duration;
    /// use dlock::LockOptions;
    ///
    /// // Every replica's cron fires at 03:00, give or take a few minutes: the report runs
    /// // on the first, and the lock stays held for 10 minutes whatever the report takes.
    /// let options = LockOptions::default()
    ///     .wait(dlock::Wait::NoWait)
    ///     .hold_at_least(Duration::from_secs(600));
    /// match client.mutex_with("nightly-report", options)?.lock().await {
    ///     Ok(guard) => {
    ///         // ... make the report ...
    ///         guard.unlock().await?; // still held until 10 minutes after the grant
    ///     }
    ///     Err(dlock::Error::Busy { .. }) => {} // another replica has it, or had it lately
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn hold_at_least(mut self, least: Duration) -> Self {
        self.hold_at_least = Some(least);
        self
    }

    /// Keeps the lock ungrantable for `delay` after a hold ends by expiry (its holder
    /// crashed, or paused past its lease) rather than by a release: Chubby's and Consul's
    /// lock-delay, for data that cannot check a [fence](crate::Guard::fence). A paused
    /// holder's writes already on their way then land before the next holder begins. A
    /// clean release ([`unlock`](crate::Guard::unlock), a dropped guard, shutdown, a
    /// release by token) and a forced release free the lock at once.
    ///
    /// Redis keeps each hold `delay` longer than its lease (every grant, renewal and
    /// extend writes the lease plus `delay`), while the holder counts only the lease: its
    /// [validity](crate::Guard::valid_until) and lost signal end with the lease, as
    /// without the option. So a crashed or paused holder blocks the lock for its lease
    /// plus `delay`; the lock's own leftovers show that much more in `dlock inspect`.
    /// Every kind and Redlock; a semaphore's permit or a read hold that ends by expiry
    /// keeps its own place for `delay`. A queued waiter (fair mutex, writer, semaphore)
    /// handed the lock directly makes one attempt more to take it, unless its
    /// [`waiter_lease`](LockOptions::waiter_lease) is at least the lease plus `delay`
    /// (a direct grant lasts at most the rest of the waiter lease, which could cut the
    /// delay short).
    ///
    /// It narrows the window in which a holder that lost its lock still writes; it does
    /// not close it: a holder paused longer than its lease plus `delay` still writes late.
    /// Fencing tokens close it, where the storage can check them (docs/safety.md).
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// use std::time::Duration;
    /// let options = dlock::LockOptions::default().lock_delay(Duration::from_secs(5));
    /// let guard = client.mutex_with("legacy-nfs-share", options)?.lock().await?;
    /// // ... writes to storage that cannot check a fence ...
    /// guard.unlock().await?; // free at once; had this process died, 5 s after its lease
    /// # Ok(()) }
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }

    /// What Redis keeps a hold for when it is granted, renewed or extended to `ttl`: the
    /// lease, and the [`lock_delay`](LockOptions::lock_delay) after it.
    pub(crate) fn kept_for(&self, ttl: Duration) -> Duration {
        ttl.saturating_add(self.lock_delay.unwrap_or_default())
    }

    /// [`kept_for`](LockOptions::kept_for) this lock's lease, in milliseconds, as the
    /// scripts take it.
    pub(crate) fn kept_ms(&self) -> u64 {
        self.kept_for(self.ttl).as_millis() as u64
    }

    /// Sets the polling bounds.
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = Backoff { min, max };
        self
    }

    /// Checks the options the way every lock constructor does, without a client: a lease
    /// within [`MIN_TTL`](crate::MIN_TTL)..=[`MAX_TTL`](crate::MAX_TTL), sane backoff and
    /// waits. [`Error::InvalidArgument`] says what is wrong.
    pub fn validate(&self) -> Result<()> {
        lease::validate_ttl(self.ttl)?;
        if !(MIN_WAITER_LEASE..=lease::MAX_TTL).contains(&self.waiter_lease) {
            return Err(Error::InvalidArgument(format!(
                "the waiter lease {} is out of range; use between {} and {} (a waiter refreshes its place every third of it)",
                crate::duration_text::humane(self.waiter_lease),
                crate::duration_text::humane(MIN_WAITER_LEASE),
                crate::duration_text::humane(lease::MAX_TTL)
            )));
        }
        if self.backoff.min.is_zero()
            || self.backoff.min > self.backoff.max
            || self.backoff.max > MAX_BACKOFF
        {
            return Err(Error::InvalidArgument(format!(
                "backoff bounds {}..{} are invalid; the minimum must be above zero and at most the maximum, which is at most {}",
                crate::duration_text::humane(self.backoff.min),
                crate::duration_text::humane(self.backoff.max),
                crate::duration_text::humane(MAX_BACKOFF)
            )));
        }
        if let Renewal::Auto {
            max_hold: Some(cap),
        } = self.renewal
        {
            if cap.is_zero() {
                return Err(Error::InvalidArgument(
                    "max_hold must be greater than zero".into(),
                ));
            }
        }
        if let Some(least) = self.hold_at_least {
            if least.is_zero() || least > lease::MAX_TTL {
                return Err(Error::InvalidArgument(format!(
                    "hold_at_least {} is out of range; use above zero and at most {} (it becomes the lock's lease)",
                    crate::duration_text::humane(least),
                    crate::duration_text::humane(lease::MAX_TTL)
                )));
            }
        }
        if let Some(delay) = self.lock_delay {
            let room = lease::MAX_TTL.saturating_sub(self.ttl);
            if delay.is_zero() || delay > room {
                return Err(Error::InvalidArgument(format!(
                    "lock_delay {} is out of range; use above zero and at most {} with the lease {} (Redis keeps a hold the lease plus the delay, at most {})",
                    crate::duration_text::humane(delay),
                    crate::duration_text::humane(room),
                    crate::duration_text::humane(self.ttl),
                    crate::duration_text::humane(lease::MAX_TTL)
                )));
            }
        }
        if let Some(replicas) = self.replicas {
            if replicas.count == 0 || replicas.count > MAX_REPLICAS {
                return Err(Error::InvalidArgument(format!(
                    "replicas {} is out of range; ask for 1 to {MAX_REPLICAS} replicas (or none, to trust the master alone)",
                    replicas.count
                )));
            }
            if replicas.timeout.is_zero() || replicas.timeout >= self.ttl {
                return Err(Error::InvalidArgument(format!(
                    "the replica timeout {} must be above zero and shorter than the lease {}: an acknowledgement after the lease is worthless",
                    crate::duration_text::humane(replicas.timeout),
                    crate::duration_text::humane(self.ttl)
                )));
            }
        }
        if let Wait::Timeout(timeout) = self.wait {
            if timeout > MAX_WAIT {
                return Err(Error::InvalidArgument(format!(
                    "wait timeout {} is longer than the {} dlock accepts; to wait without limit, wait forever",
                    crate::duration_text::humane(timeout),
                    crate::duration_text::humane(MAX_WAIT)
                )));
            }
        }
        Ok(())
    }
}

/// `base` scaled by a random factor in [0.5, 1.0], so waiters woken together spread out.
pub(crate) fn jitter(base: Duration) -> Duration {
    let factor = rand::rng().random_range(0.5..=1.0);
    Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(base)
}

/// Backoff bounds for polling when notifications are unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first polling interval.
    pub min: Duration,
    /// The largest polling interval (also how often a waiter re-checks a lock whose
    /// holder has no expiry, e.g. another tool's key without TTL).
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            min: Duration::from_millis(10),
            max: Duration::from_millis(500),
        }
    }
}

/// How long a lock call waits for a lock held by someone else.
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
