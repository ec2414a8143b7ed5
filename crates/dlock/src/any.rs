//! [`AnyLock`]: a lock whose kind is chosen at run time (from a flag, a config file). It is
//! the one [`Lock`] handle over a protocol that sends each verb to the kind's own, and its
//! guard is the one [`Guard`], so a program that serves several kinds needs no enum of its
//! own.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::guard::Guard;
use crate::keys::LockKeys;
use crate::lock::Lock;
use crate::multi::RawMulti;
use crate::mutex::RawMutex;
use crate::notifier::{Turnstile, WakeSet};
use crate::options::LockOptions;
use crate::queue::QueueKeys;
use crate::raw::{
    private::{HandleForms, KindProtocol, Placement, Queueing, RawProtocol, Watching},
    Attempt, HoldKind, Waiting,
};
use crate::redlock::RawRedlock;
use crate::reentrant::OwnedBy;
use crate::renew::Renewer;
use crate::rwlock::{Reading, Writing};
use crate::semaphore::RawSemaphore;
use crate::session::Session;

/// Proof of holding an [`AnyLock`]: the one [`Guard`], with the same verbs as every
/// kind's.
pub type AnyGuard = Guard<AnyKind>;

/// A lock of any kind, chosen at run time: a plain or fair [`Mutex`](crate::Mutex), a
/// [`ReentrantMutex`](crate::ReentrantMutex), the read or the write side of an
/// [`RwLock`](crate::RwLock) (`rwlock.reader().into()`, for that handle's owner), a
/// [`Semaphore`](crate::Semaphore), a [`RedlockMutex`](crate::RedlockMutex). It keeps the
/// owner of the handle it was made from; a clone acts for a fresh one. The one [`Lock`] handle
/// with every verb; made from any kind's handle with `.into()`. Cheap to clone.
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
pub type AnyLock = Lock<AnyKind>;

/// The protocol of a kind chosen at run time: the kind of an [`AnyLock`] handle and its
/// [`AnyGuard`]. Each verb goes to the kind's own protocol.
#[derive(Debug, Clone)]
pub struct AnyKind(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Mutex(RawMutex),
    Reentrant(OwnedBy),
    Read(Reading),
    Write(Writing),
    Semaphore(RawSemaphore),
    Redlock(RawRedlock),
    Multi(RawMulti),
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
            Kind::Multi($raw) => $body,
        }
    };
}

/// Every kind's handle becomes an [`AnyLock`] with `.into()`.
macro_rules! into_any {
    ($($raw:ty => $variant:ident),* $(,)?) => {
        $(impl From<Lock<$raw>> for AnyLock {
            fn from(lock: Lock<$raw>) -> AnyLock {
                Lock::of(AnyKind(Kind::$variant(lock.raw)))
            }
        })*
    };
}

into_any!(
    RawMutex => Mutex,
    OwnedBy => Reentrant,
    Reading => Read,
    Writing => Write,
    RawSemaphore => Semaphore,
    RawRedlock => Redlock,
    RawMulti => Multi,
);

impl KindProtocol for AnyKind {
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
}

impl RawProtocol for AnyKind {
    fn settles_each_attempt(&self) -> bool {
        delegate!(self, raw => raw.settles_each_attempt())
    }

    async fn extend(&self, token: &str, ttl: Duration) -> Result<()> {
        delegate!(self, raw => raw.extend(token, ttl).await)
    }

    async fn linger(&self, token: &str, rest: Duration) -> Result<()> {
        delegate!(self, raw => raw.linger(token, rest).await)
    }

    async fn is_held(&self, token: &str) -> Result<bool> {
        delegate!(self, raw => raw.is_held(token).await)
    }

    async fn draw_fence(&self, token: &str) -> Result<u64> {
        delegate!(self, raw => raw.draw_fence(token).await)
    }
}

impl Placement for AnyKind {
    fn session(&self) -> &Session {
        delegate!(self, raw => raw.session())
    }

    fn keys(&self) -> &Arc<LockKeys> {
        delegate!(self, raw => raw.keys())
    }

    fn options(&self) -> &LockOptions {
        delegate!(self, raw => raw.options())
    }

    fn renewer(&self) -> &Renewer {
        delegate!(self, raw => raw.renewer())
    }

    fn one_server(&self) -> Option<&crate::client::Client> {
        delegate!(self, raw => raw.one_server())
    }

    fn hold_key(&self) -> (&str, HoldKind) {
        delegate!(self, raw => raw.hold_key())
    }

    fn other_holds(&self) -> &[LockKeys] {
        delegate!(self, raw => raw.other_holds())
    }
}

impl Watching for AnyKind {
    async fn watch(&self, channel: &str, token: Option<&str>, budget: Duration) -> WakeSet {
        delegate!(self, raw => raw.watch(channel, token, budget).await)
    }

    fn watch_if_live(&self, channel: &str, token: Option<&str>) -> Option<WakeSet> {
        delegate!(self, raw => raw.watch_if_live(channel, token))
    }
}

impl Queueing for AnyKind {
    async fn leave_queue(&self, queue: &QueueKeys, token: &str) -> Result<()> {
        delegate!(self, raw => raw.leave_queue(queue, token).await)
    }

    fn turnstile(&self) -> Option<Arc<Turnstile>> {
        delegate!(self, raw => raw.turnstile())
    }
}

impl HandleForms for AnyKind {
    async fn release_token(&self, token: &str) -> Result<()> {
        delegate!(self, raw => raw.release_token(token).await)
    }

    fn fence_at_grant(&self) -> Self {
        AnyKind(match &self.0 {
            Kind::Mutex(raw) => Kind::Mutex(raw.fence_at_grant()),
            other => other.clone(),
        })
    }

    fn another_owner(&self) -> Self {
        AnyKind(match &self.0 {
            Kind::Reentrant(raw) => Kind::Reentrant(raw.another_owner()),
            Kind::Read(raw) => Kind::Read(raw.another_owner()),
            Kind::Write(raw) => Kind::Write(raw.another_owner()),
            other => other.clone(),
        })
    }
}
