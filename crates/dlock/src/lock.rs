//! [`Lock`]: the one handle on a named lock, whatever its kind. The verbs every kind shares
//! are written here once, over the kind's raw protocol: take it (once, with the options'
//! wait, or with a wait of this call's own), run work under it, give back or extend a hold
//! by its token. What only one kind does (a mutex's holder, a semaphore's count, a
//! reentrant owner's hold count) is an `impl Lock<ThatKind>` block beside the kind.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::guard::Guard;
use crate::options::{LockOptions, Wait};
use crate::raw::RawLock;
use crate::wait::acquire;

/// A handle on one named lock of the kind `R`. Cheap to clone; made by the client's
/// constructors ([`Client::mutex`](crate::Client::mutex),
/// [`Client::semaphore`](crate::Client::semaphore), ...) and usually named by its alias:
/// [`Mutex`](crate::Mutex), [`Semaphore`](crate::Semaphore),
/// [`ReentrantMutex`](crate::ReentrantMutex), [`RedlockMutex`](crate::RedlockMutex),
/// [`AnyLock`](crate::AnyLock), or an [`RwLock`](crate::RwLock)'s
/// [`reader`](crate::RwLock::reader) and [`writer`](crate::RwLock::writer).
///
/// A kind whose holds belong to an owner (a reentrant mutex, a read lock) has it bound
/// here, a fresh one unless the handle was made for a chosen one (`for_owner`). A clone
/// acts for a fresh owner too, so handing clones to tasks keeps them apart; to act for the
/// same owner elsewhere, make the handle with `for_owner(handle.owner())`.
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use std::time::Duration;
/// use dlock::Wait;
///
/// let mutex = client.mutex("accounts:42:migrate")?;
/// match mutex.try_lock().await {
///     Ok(guard) => guard.unlock().await?,
///     Err(dlock::Error::Busy { .. }) => {
///         // This call's own wait, whatever the options say.
///         let guard = mutex.lock_with(Wait::Timeout(Duration::from_secs(2))).await?;
///         guard.unlock().await?;
///     }
///     Err(other) => return Err(other),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Lock<R> {
    pub(crate) raw: R,
}

/// A clone of a handle whose holds have an owner acts for a fresh owner (see
/// [`Owner`](crate::Owner)): a task given a clone is excluded like any other, and does
/// not re-enter the holds of the handle it was cloned from.
impl<R: RawLock> Clone for Lock<R> {
    fn clone(&self) -> Self {
        Lock {
            raw: self.raw.another_owner(),
        }
    }
}

impl<R: RawLock> Lock<R> {
    pub(crate) fn of(raw: R) -> Lock<R> {
        Lock { raw }
    }

    /// A copy acting for the same owner (a clone acts for a fresh one).
    pub(crate) fn same_owner(&self) -> Lock<R> {
        Lock {
            raw: self.raw.clone(),
        }
    }

    /// The lock name (without the client's prefix).
    pub fn name(&self) -> &str {
        self.raw.name()
    }

    /// The kind, as logs and metrics name it: `mutex`, `fair`, `reentrant`, `read`,
    /// `write`, `semaphore`, `redlock`.
    pub fn kind(&self) -> &'static str {
        self.raw.kind_name()
    }

    /// The Redis key that holds the lock (on every master, for Redlock).
    pub fn key(&self) -> &str {
        &self.raw.keys().key
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        self.raw.options()
    }

    /// One attempt. Fails with [`Error::Busy`](crate::Error::Busy) (telling the holder's
    /// remaining lease when known) when others hold it; a queued kind grants a single
    /// attempt only when nobody is queued ahead, and leaves no trace in its queue.
    pub async fn try_lock(&self) -> Result<Guard<R>> {
        acquire(&self.raw, Wait::NoWait).await
    }

    /// Takes the lock, waiting according to the options' [`Wait`] policy.
    ///
    /// Waiting is notified: a release wakes the next waiter at once; an abandoned lock is
    /// taken as soon as its lease runs out. Transient connection errors are retried within
    /// the wait budget. Fails with [`Error::TimedOut`](crate::Error::TimedOut) when the
    /// budget is used up.
    ///
    /// Cancel-safe: when the returned future is dropped (by `timeout`, `select!`, ...) or
    /// the wait fails, anything that may have been granted to it, and its place in a
    /// queue, is given back.
    pub async fn lock(&self) -> Result<Guard<R>> {
        acquire(&self.raw, self.raw.options().wait).await
    }

    /// Takes the lock like [`lock`](Self::lock), waiting per `wait` for this call only
    /// (for example `Wait::Timeout(Duration::from_secs(2))`).
    pub async fn lock_with(&self, wait: Wait) -> Result<Guard<R>> {
        acquire(&self.raw, wait).await
    }

    /// Runs `work` while holding the lock (renewed meanwhile) and returns its value.
    ///
    /// `work` receives the fencing token of the grant (drawn with the grant, no extra
    /// round trip). If the lock is lost before `work` finishes, its future is dropped at
    /// its next await point and the result is [`Error::Lost`](crate::Error::Lost);
    /// otherwise the lock is released and the value returned.
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
        crate::wait::with_lock(&self.raw.fence_at_grant(), work).await
    }

    /// Gives back the hold `token` of this kind (for example one printed by
    /// `dlock acquire`). Fails with [`Error::Lost`](crate::Error::Lost) when that token
    /// no longer holds it; the current holders, if any, are untouched. Whoever waits is
    /// woken the way they wait.
    ///
    /// A mutex's token may have been taken as a plain mutex, a fair mutex or a write lock
    /// (they share the format); a token of another kind fails with
    /// [`Error::WrongType`](crate::Error::WrongType). A reentrant hold is given back only
    /// through a handle of its owner ([`Lock::for_owner`]).
    pub async fn release_token(&self, token: &str) -> Result<()> {
        self.raw.release_token(token).await
    }

    /// Restarts the lease of the hold `token` at `ttl`; [`Error::Lost`](crate::Error::Lost)
    /// when that token no longer holds it.
    pub async fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.raw.extend(token, ttl).await
    }

    /// Applies `batch` while the hold `token` of this kind is held (for example one
    /// printed by `dlock acquire`), as [`Guard::apply`](crate::Guard::apply) does;
    /// [`Error::Lost`](crate::Error::Lost), with nothing applied, when it is not, or
    /// [`Error::WrongType`](crate::Error::WrongType) when another kind holds the name (the
    /// token may have been taken as another kind: a read hold, a permit). Send one batch
    /// at a time per token: a resend after a lost reply is recognised only as the token's
    /// latest batch.
    pub async fn apply_token(
        &self,
        token: &str,
        batch: &crate::guarded::Guarded,
    ) -> Result<Vec<redis::Value>> {
        crate::guarded::apply_for(&self.raw, token, batch).await
    }

    /// The Redis key of this lock's data key `key`: `{NAME}:data:KEY` (for a key with a
    /// hash tag, `{t}:job`: `{t}/4/:job:data:KEY`), in the lock's hash slot (see [`Guarded`](crate::Guarded)), for reading the data outside a hold.
    pub fn data_key(&self, key: &str) -> String {
        crate::guarded::data_key(self.raw.keys(), key)
    }
}
