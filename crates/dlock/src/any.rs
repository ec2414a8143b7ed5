//! [`AnyLock`]: a lock whose kind is chosen at run time (from a flag, a config file), with
//! the verbs every kind shares written once: take it, take it with a wait of this call's
//! own, give back or extend a hold by its token, run work under it. Its guard is the one
//! [`Guard`], so a program that serves several kinds needs no enum of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::guard::Guard;
use crate::keys::LockKeys;
use crate::mutex::Mutex;
use crate::notifier::{Turnstile, WakeSet};
use crate::options::{LockOptions, Wait};
use crate::queue::QueueKeys;
use crate::raw::{private::RawProtocol, Attempt, HoldKind, Waiting};
use crate::redlock::RedlockMutex;
use crate::reentrant::{OwnedBy, Owner, ReentrantMutex};
use crate::renew::Renewer;
use crate::rwlock::{Reading, RwLock, Writing};
use crate::semaphore::Semaphore;
use crate::session::Session;
use crate::wait::acquire;

/// Proof of holding an [`AnyLock`]: the one [`Guard`], with the same verbs as every
/// kind's.
pub type AnyGuard = Guard<AnyLock>;

/// A lock of any kind, chosen at run time: a plain or fair [`Mutex`], a
/// [`ReentrantMutex`] or the read side of an [`RwLock`] for an [`Owner`] bound here, the
/// write side, a [`Semaphore`], a [`RedlockMutex`]. Cheap to clone.
///
/// ```no_run
/// # async fn demo(client: dlock::Client, fair: bool) -> dlock::Result<()> {
/// use std::time::Duration;
/// use dlock::{AnyLock, Wait};
///
/// let lock: AnyLock = if fair {
///     client.fair_mutex("reports")?.into()
/// } else {
///     client.semaphore("reports", 3)?.into()
/// };
/// // This call's own wait, whatever the lock's options say.
/// let guard = lock.lock_with(Wait::Timeout(Duration::from_secs(2))).await?;
/// println!("{} held with fence {}", guard.name(), guard.fence().await?);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AnyLock(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Mutex(Mutex),
    Reentrant(OwnedBy),
    Read(Reading),
    Write(Writing),
    Semaphore(Semaphore),
    Redlock(RedlockMutex),
}

/// Runs `$body` with `$raw` bound to the kind's own raw protocol.
macro_rules! delegate {
    ($lock:expr, $raw:ident => $body:expr) => {
        match &$lock.0 {
            Kind::Mutex($raw) => $body,
            Kind::Reentrant($raw) => $body,
            Kind::Read($raw) => $body,
            Kind::Write($raw) => $body,
            Kind::Semaphore($raw) => $body,
            Kind::Redlock($raw) => $body,
        }
    };
}

impl AnyLock {
    /// The read side of `rwlock`, held by `owner` (re-entered by a second read of the same
    /// owner).
    pub fn read(rwlock: &RwLock, owner: &Owner) -> AnyLock {
        AnyLock(Kind::Read(rwlock.reading(owner)))
    }

    /// The write side of `rwlock`.
    pub fn write(rwlock: &RwLock) -> AnyLock {
        AnyLock(Kind::Write(rwlock.writing()))
    }

    /// `mutex` held (and re-entered) by `owner`.
    pub fn reentrant(mutex: &ReentrantMutex, owner: &Owner) -> AnyLock {
        AnyLock(Kind::Reentrant(mutex.owned_by(owner)))
    }

    /// The lock name (without the prefix).
    pub fn name(&self) -> &str {
        RawProtocol::name(self)
    }

    /// The kind, as logs and metrics name it: `mutex`, `fair`, `reentrant`, `read`,
    /// `write`, `semaphore`, `redlock`.
    pub fn kind(&self) -> &'static str {
        self.kind_name()
    }

    /// The options in force.
    pub fn lock_options(&self) -> &LockOptions {
        self.options()
    }

    /// One attempt; [`Error::Busy`](crate::Error::Busy) when held by others.
    pub async fn try_lock(&self) -> Result<AnyGuard> {
        acquire(self, Wait::NoWait).await
    }

    /// Takes the lock, waiting per its options' [`Wait`]. Cancel-safe like
    /// [`Mutex::lock`].
    pub async fn lock(&self) -> Result<AnyGuard> {
        acquire(self, self.options().wait).await
    }

    /// Takes the lock, waiting per `wait` for this call only.
    pub async fn lock_with(&self, wait: Wait) -> Result<AnyGuard> {
        acquire(self, wait).await
    }

    /// Runs `work` with the grant's fence while holding the lock; see
    /// [`Mutex::with_lock`].
    pub async fn with_lock<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::wait::with_lock(self, work).await
    }

    /// Gives back the hold `token` of this kind (for example one printed by
    /// `dlock acquire`); [`Error::Lost`](crate::Error::Lost) when it is not held. For a
    /// mutex this also takes a write lock's or a fair mutex's token (they share the
    /// format) and wakes whoever waits, the way they wait.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        match &self.0 {
            Kind::Mutex(mutex) => mutex.release_token(token).await,
            _ => self.release(token).await,
        }
    }

    /// Restarts the lease of the hold `token` at `ttl`;
    /// [`Error::Lost`](crate::Error::Lost) when it is not held.
    pub async fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.extend(token, ttl).await
    }
}

impl From<Mutex> for AnyLock {
    fn from(mutex: Mutex) -> AnyLock {
        AnyLock(Kind::Mutex(mutex))
    }
}

impl From<Semaphore> for AnyLock {
    fn from(semaphore: Semaphore) -> AnyLock {
        AnyLock(Kind::Semaphore(semaphore))
    }
}

impl From<RedlockMutex> for AnyLock {
    fn from(mutex: RedlockMutex) -> AnyLock {
        AnyLock(Kind::Redlock(mutex))
    }
}

impl RawProtocol for AnyLock {
    fn settles_each_attempt(&self) -> bool {
        delegate!(self, raw => raw.settles_each_attempt())
    }

    fn session(&self) -> &Session {
        delegate!(self, raw => raw.session())
    }

    fn keys(&self) -> &Arc<LockKeys> {
        delegate!(self, raw => raw.keys())
    }

    fn options(&self) -> &LockOptions {
        delegate!(self, raw => raw.options())
    }

    fn kind_name(&self) -> &'static str {
        delegate!(self, raw => raw.kind_name())
    }

    fn waiting(&self) -> Waiting<'_> {
        delegate!(self, raw => raw.waiting())
    }

    async fn attempt(&self, token: &str, join_queue: bool) -> Result<Attempt> {
        delegate!(self, raw => raw.attempt(token, join_queue).await)
    }

    async fn release(&self, token: &str) -> Result<()> {
        delegate!(self, raw => raw.release(token).await)
    }

    async fn extend(&self, token: &str, ttl: Duration) -> Result<()> {
        delegate!(self, raw => raw.extend(token, ttl).await)
    }

    async fn is_held(&self, token: &str) -> Result<bool> {
        delegate!(self, raw => raw.is_held(token).await)
    }

    async fn draw_fence(&self, token: &str) -> Result<u64> {
        delegate!(self, raw => raw.draw_fence(token).await)
    }

    async fn watch(&self, channel: &str, budget: Duration) -> WakeSet {
        delegate!(self, raw => raw.watch(channel, budget).await)
    }

    async fn leave_queue(&self, queue: &QueueKeys, token: &str) -> Result<()> {
        delegate!(self, raw => raw.leave_queue(queue, token).await)
    }

    fn renewer(&self) -> &Renewer {
        delegate!(self, raw => raw.renewer())
    }

    fn turnstile(&self) -> Option<Arc<Turnstile>> {
        delegate!(self, raw => raw.turnstile())
    }

    fn hold_key(&self) -> (&str, HoldKind) {
        delegate!(self, raw => raw.hold_key())
    }
}
