//! The same primitives for programs without an async runtime.
//!
//! A [`blocking::Client`](Client) owns a small tokio runtime (one worker thread) that runs
//! the requests, the release notifier and the renewal watchdog; every call blocks the
//! calling thread until it is done. Guards release on drop (synchronously). Do not use
//! this module from inside an async runtime: use the async API there.
//!
//! ```no_run
//! # fn demo() -> dlock::Result<()> {
//! let client = dlock::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let guard = client.mutex("nightly-report")?.lock()?;
//! println!("fence {}", guard.fence()?);
//! guard.unlock()?;
//! client.shutdown(); // releases whatever is still held
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::raw::RawLock;
use crate::reentrant::Owner;
use crate::rwlock::{Reading, Writing};
use crate::signal::{LostReason, LostSignal};

/// A blocking handle to one Redis deployment. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    inner: crate::Client,
    runtime: Arc<Runtime>,
}

impl Client {
    /// Connects with default options.
    pub fn connect(url: &str) -> Result<Client> {
        Client::connect_with(crate::Client::builder(url))
    }

    /// Connects with the options of an async [`ClientBuilder`](crate::ClientBuilder).
    pub fn connect_with(builder: crate::ClientBuilder) -> Result<Client> {
        let runtime = own_runtime()?;
        let inner = runtime.block_on(builder.connect())?;
        Ok(Client {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// Releases every lock still held through this client and refuses new ones; see
    /// [`crate::Client::shutdown`].
    pub fn shutdown(&self) {
        self.runtime.block_on(self.inner.shutdown())
    }

    /// Every hold of this client that may be lost from now on; see
    /// [`Session::lost`](crate::Session::lost). Read it on a thread of its own.
    pub fn lost(&self) -> LostHolds {
        LostHolds::of(self.inner.session(), &self.runtime)
    }

    /// Blocks until [`shutdown`](Client::shutdown) has given every hold back; see
    /// [`Session::done`](crate::Session::done).
    pub fn done(&self) {
        self.runtime.block_on(self.inner.session().done())
    }

    /// The client's [`Session`](crate::Session): its holds and whether it is closed.
    pub fn session(&self) -> &crate::Session {
        self.inner.session()
    }

    fn wrap<T>(&self, inner: T) -> Blocking<T> {
        Blocking {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// A mutex with default options (30 s lease renewed automatically, wait forever).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.mutex_with(name, LockOptions::default())
    }

    /// A mutex with the given options.
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Ok(self.wrap(self.inner.mutex_with(name, options)?))
    }

    /// A fair (FIFO) mutex with default options.
    pub fn fair_mutex(&self, name: &str) -> Result<Mutex> {
        self.fair_mutex_with(name, LockOptions::default())
    }

    /// A fair (FIFO) mutex with the given options.
    pub fn fair_mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Ok(self.wrap(self.inner.fair_mutex_with(name, options)?))
    }

    /// A semaphore with `permits` permits and default options.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        self.semaphore_with(name, permits, LockOptions::default())
    }

    /// A semaphore with the given options.
    pub fn semaphore_with(
        &self,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        Ok(self.wrap(self.inner.semaphore_with(name, permits, options)?))
    }

    /// A read-write lock with default options.
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        self.rwlock_with(name, LockOptions::default())
    }

    /// A read-write lock with the given options.
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        Ok(self.wrap(self.inner.rwlock_with(name, options)?))
    }

    /// A reentrant mutex with default options.
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        self.reentrant_mutex_with(name, LockOptions::default())
    }

    /// A reentrant mutex with the given options.
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        Ok(self.wrap(self.inner.reentrant_mutex_with(name, options)?))
    }
}

/// The runtime of a blocking handle: one worker thread runs its requests, notifier and
/// renewals. Refused inside an async runtime, where blocking would stall it.
fn own_runtime() -> Result<Runtime> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::InvalidArgument(
            "dlock::blocking cannot be used inside an async runtime; use the async API (dlock::Client, dlock::Redlock) there"
                .into(),
        ));
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("dlock-blocking")
        .enable_all()
        .build()
        .map_err(|e| Error::InvalidArgument(format!("cannot start the dlock runtime: {e}")))
}

/// A blocking handle on several independent masters that grant locks by majority: the
/// blocking form of [`crate::Redlock`]. Cheap to clone.
///
/// ```no_run
/// # fn demo() -> dlock::Result<()> {
/// let redlock = dlock::blocking::Redlock::connect([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])?;
/// let guard = redlock.mutex("nightly-report")?.lock()?;
/// println!("fence {}", guard.fence()?); // drawn with the grant
/// guard.unlock()?;
/// redlock.shutdown();
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    inner: crate::Redlock,
    runtime: Arc<Runtime>,
}

impl Redlock {
    /// Connects to `urls`, independent masters, with default settings.
    pub fn connect<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> Result<Redlock> {
        Redlock::connect_with(crate::Client::redlock_builder(urls))
    }

    /// Connects with the settings of an async [`RedlockBuilder`](crate::RedlockBuilder).
    pub fn connect_with(builder: crate::RedlockBuilder) -> Result<Redlock> {
        let runtime = own_runtime()?;
        let inner = runtime.block_on(builder.connect())?;
        Ok(Redlock {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// The async handle underneath.
    pub fn get_ref(&self) -> &crate::Redlock {
        &self.inner
    }

    /// A Redlock mutex with default options.
    pub fn mutex(&self, name: &str) -> Result<RedlockMutex> {
        self.mutex_with(name, LockOptions::default())
    }

    /// A Redlock mutex with the given options (see [`crate::Redlock::mutex_with`]).
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<RedlockMutex> {
        Ok(Blocking {
            inner: self.inner.mutex_with(name, options)?,
            runtime: self.runtime.clone(),
        })
    }

    /// Releases every lock still held through this handle and refuses new ones; see
    /// [`crate::Redlock::shutdown`].
    pub fn shutdown(&self) {
        self.runtime.block_on(self.inner.shutdown())
    }

    /// Every hold of this handle that may be lost from now on; see [`Client::lost`].
    pub fn lost(&self) -> LostHolds {
        LostHolds::of(self.inner.session(), &self.runtime)
    }

    /// Blocks until [`shutdown`](Redlock::shutdown) has given every hold back.
    pub fn done(&self) {
        self.runtime.block_on(self.inner.session().done())
    }

    /// The handle's [`Session`](crate::Session).
    pub fn session(&self) -> &crate::Session {
        self.inner.session()
    }
}

/// An async lock handle and the runtime that runs its calls.
#[derive(Clone, Debug)]
pub struct Blocking<T> {
    inner: T,
    runtime: Arc<Runtime>,
}

impl<T> Blocking<T> {
    /// The async handle underneath.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn guard<R: RawLock>(&self, guard: Result<crate::Guard<R>>) -> Result<Guard<R>> {
        Ok(Guard {
            inner: Some(guard?),
            runtime: self.runtime.clone(),
        })
    }

    /// Runs `work` under the hold `taken`, then releases it: the one `with_lock`.
    fn hold_for<R: RawLock, V>(
        &self,
        taken: Result<Guard<R>>,
        work: impl FnOnce(&Guard<R>) -> V,
    ) -> Result<V> {
        let guard = taken?;
        let value = work(&guard);
        if guard.lost().is_some() {
            return Err(Error::Lost {
                name: guard.name().to_string(),
            });
        }
        guard.unlock()?;
        Ok(value)
    }
}

/// Blocking counterpart of [`crate::Mutex`] (plain or fair).
pub type Mutex = Blocking<crate::Mutex>;
/// Blocking counterpart of [`crate::ReentrantMutex`].
pub type ReentrantMutex = Blocking<crate::ReentrantMutex>;
/// Blocking counterpart of [`crate::Semaphore`].
pub type Semaphore = Blocking<crate::Semaphore>;
/// Blocking counterpart of [`crate::RwLock`].
pub type RwLock = Blocking<crate::RwLock>;

/// Blocking counterpart of [`crate::RedlockMutex`].
pub type RedlockMutex = Blocking<crate::RedlockMutex>;
/// Blocking counterpart of [`crate::AnyLock`].
pub type AnyLock = Blocking<crate::AnyLock>;

/// Blocking counterpart of [`crate::MutexGuard`].
pub type MutexGuard = Guard<crate::Mutex>;
/// Blocking counterpart of [`crate::ReentrantGuard`].
pub type ReentrantGuard = Guard<crate::reentrant::OwnedBy>;
/// Blocking counterpart of [`crate::SemaphorePermit`].
pub type SemaphorePermit = Guard<crate::Semaphore>;
/// Blocking counterpart of [`crate::ReadGuard`].
pub type ReadGuard = Guard<Reading>;
/// Blocking counterpart of [`crate::WriteGuard`].
pub type WriteGuard = Guard<Writing>;
/// Blocking counterpart of [`crate::RedlockGuard`].
pub type RedlockGuard = Guard<crate::RedlockMutex>;
/// Blocking counterpart of [`crate::AnyGuard`].
pub type AnyGuard = Guard<crate::AnyLock>;

impl Mutex {
    /// The lock name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// One attempt; [`Error::Busy`] when held by someone else.
    pub fn try_lock(&self) -> Result<MutexGuard> {
        self.guard(self.runtime.block_on(self.inner.try_lock()))
    }

    /// Takes the lock, waiting per the wait policy ([`Error::TimedOut`] past the budget).
    pub fn lock(&self) -> Result<MutexGuard> {
        self.guard(self.runtime.block_on(self.inner.lock()))
    }

    /// Runs `work` while holding the lock (renewed meanwhile). A running closure cannot be
    /// cancelled, so it gets the guard and should check [`Guard::lost`] between steps; if
    /// the lock was lost by the time it returns, the result is [`Error::Lost`].
    pub fn with_lock<T>(&self, work: impl FnOnce(&MutexGuard) -> T) -> Result<T> {
        self.hold_for(self.lock(), work)
    }

    /// Releases the lock held with `token`.
    pub fn release_token(&self, token: &str) -> Result<()> {
        self.runtime.block_on(self.inner.release_token(token))
    }

    /// Resets the lease of the lock held with `token`.
    pub fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.runtime.block_on(self.inner.extend_token(token, ttl))
    }
}

impl RedlockMutex {
    /// The lock name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// One round on every master; [`Error::Busy`] when another owner holds a majority.
    pub fn try_lock(&self) -> Result<RedlockGuard> {
        self.guard(self.runtime.block_on(self.inner.try_lock()))
    }

    /// Takes the lock on a majority, waiting per the wait policy.
    pub fn lock(&self) -> Result<RedlockGuard> {
        self.guard(self.runtime.block_on(self.inner.lock()))
    }

    /// Runs `work` while holding the lock; see [`Mutex::with_lock`].
    pub fn with_lock<T>(&self, work: impl FnOnce(&RedlockGuard) -> T) -> Result<T> {
        self.hold_for(self.lock(), work)
    }

    /// Gives back the hold of `token` on every master.
    pub fn release_token(&self, token: &str) -> Result<()> {
        self.runtime.block_on(self.inner.release_token(token))
    }

    /// Resets the lease of the hold of `token` on a majority.
    pub fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.runtime.block_on(self.inner.extend_token(token, ttl))
    }
}

impl AnyLock {
    /// The read side of `rwlock`, held by `owner`.
    pub fn read(rwlock: &RwLock, owner: &Owner) -> AnyLock {
        Blocking {
            inner: crate::AnyLock::read(&rwlock.inner, owner),
            runtime: rwlock.runtime.clone(),
        }
    }

    /// The write side of `rwlock`.
    pub fn write(rwlock: &RwLock) -> AnyLock {
        Blocking {
            inner: crate::AnyLock::write(&rwlock.inner),
            runtime: rwlock.runtime.clone(),
        }
    }

    /// `mutex` held (and re-entered) by `owner`.
    pub fn reentrant(mutex: &ReentrantMutex, owner: &Owner) -> AnyLock {
        Blocking {
            inner: crate::AnyLock::reentrant(&mutex.inner, owner),
            runtime: mutex.runtime.clone(),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// One attempt; [`Error::Busy`] when held by others.
    pub fn try_lock(&self) -> Result<AnyGuard> {
        self.guard(self.runtime.block_on(self.inner.try_lock()))
    }

    /// Takes the lock, waiting per its options.
    pub fn lock(&self) -> Result<AnyGuard> {
        self.guard(self.runtime.block_on(self.inner.lock()))
    }

    /// Takes the lock, waiting per `wait` for this call only.
    pub fn lock_with(&self, wait: crate::Wait) -> Result<AnyGuard> {
        self.guard(self.runtime.block_on(self.inner.lock_with(wait)))
    }

    /// Runs `work` while holding the lock; see [`Mutex::with_lock`].
    pub fn with_lock<T>(&self, work: impl FnOnce(&AnyGuard) -> T) -> Result<T> {
        self.hold_for(self.lock(), work)
    }

    /// Gives back the hold `token` (see [`crate::AnyLock::release_token`]).
    pub fn release_token(&self, token: &str) -> Result<()> {
        self.runtime.block_on(self.inner.release_token(token))
    }

    /// Restarts the lease of the hold `token` at `ttl`.
    pub fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.runtime.block_on(self.inner.extend_token(token, ttl))
    }
}

impl<T: Into<crate::AnyLock>> Blocking<T> {
    /// This lock as an [`AnyLock`], for code that serves several kinds.
    pub fn into_any(self) -> AnyLock {
        Blocking {
            inner: self.inner.into(),
            runtime: self.runtime,
        }
    }
}

impl ReentrantMutex {
    /// One attempt for `owner`.
    pub fn try_lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        self.guard(self.runtime.block_on(self.inner.try_lock(owner)))
    }

    /// Takes (or re-enters) the lock for `owner`.
    pub fn lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        self.guard(self.runtime.block_on(self.inner.lock(owner)))
    }

    /// Gives back one hold of `owner`; returns the holds left.
    pub fn release_as(&self, owner: &Owner) -> Result<u32> {
        self.runtime.block_on(self.inner.release_as(owner))
    }

    /// How many holds `owner` has now.
    pub fn hold_count(&self, owner: &Owner) -> Result<u32> {
        self.runtime.block_on(self.inner.hold_count(owner))
    }
}

impl Semaphore {
    /// One attempt to take a permit.
    pub fn try_acquire(&self) -> Result<SemaphorePermit> {
        self.guard(self.runtime.block_on(self.inner.try_acquire()))
    }

    /// Takes a permit, waiting in arrival order.
    pub fn acquire(&self) -> Result<SemaphorePermit> {
        self.guard(self.runtime.block_on(self.inner.acquire()))
    }

    /// The number of permits held now.
    pub fn held(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.held())
    }
}

impl RwLock {
    /// Takes a read hold for `owner`.
    pub fn read(&self, owner: &Owner) -> Result<ReadGuard> {
        self.guard(self.runtime.block_on(self.inner.read(owner)))
    }

    /// One attempt at a read hold.
    pub fn try_read(&self, owner: &Owner) -> Result<ReadGuard> {
        self.guard(self.runtime.block_on(self.inner.try_read(owner)))
    }

    /// Takes the write lock.
    pub fn write(&self) -> Result<WriteGuard> {
        self.guard(self.runtime.block_on(self.inner.write()))
    }

    /// One attempt at the write lock.
    pub fn try_write(&self) -> Result<WriteGuard> {
        self.guard(self.runtime.block_on(self.inner.try_write()))
    }

    /// The number of readers holding now.
    pub fn readers(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.readers())
    }
}

/// Blocking counterpart of [`crate::Guard`]: the same verbs, blocking. Dropping it
/// releases the hold (synchronously; in the background when dropped inside a runtime).
#[must_use = "dropping a guard releases the lock at once"]
#[derive(Debug)]
pub struct Guard<R: RawLock> {
    inner: Option<crate::Guard<R>>,
    runtime: Arc<Runtime>,
}

impl<R: RawLock> Guard<R> {
    fn get(&self) -> &crate::Guard<R> {
        self.inner.as_ref().expect("guard present until consumed")
    }

    fn take(&mut self) -> crate::Guard<R> {
        self.inner.take().expect("guard present until consumed")
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.get().name()
    }

    /// The holder's token.
    pub fn token(&self) -> &str {
        self.get().token()
    }

    /// The fencing token of this grant: see [`crate::Guard::fence`] (a plain mutex draws
    /// it on the first call, one round trip).
    pub fn fence(&self) -> Result<u64> {
        self.runtime.block_on(self.get().fence())
    }

    /// The fencing token if it has been drawn (see [`crate::Guard::drawn_fence`]).
    pub fn drawn_fence(&self) -> Option<u64> {
        self.get().drawn_fence()
    }

    /// The owner's holds right after this one was granted.
    pub fn holds_at_grant(&self) -> u32 {
        self.get().holds_at_grant()
    }

    /// The local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.get().valid_until()
    }

    /// What is left of the validity.
    pub fn remaining(&self) -> Duration {
        self.get().remaining()
    }

    /// Whether the lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.get().lost_signal().lost()
    }

    /// The lost signal (to wait on from another thread or runtime).
    pub fn lost_signal(&self) -> LostSignal {
        self.get().lost_signal()
    }

    /// Resets the lease to `ttl` from now; [`Error::Lost`] when no longer held.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let runtime = self.runtime.clone();
        let guard = self.inner.as_mut().expect("guard present until consumed");
        runtime.block_on(guard.extend(ttl))
    }

    /// Asks Redis whether this hold is still held.
    pub fn is_held(&self) -> Result<bool> {
        self.runtime.block_on(self.get().is_held())
    }

    /// Stops renewal, then releases; [`Error::Lost`] when it was no longer held.
    pub fn unlock(mut self) -> Result<()> {
        let guard = self.take();
        self.runtime.block_on(guard.unlock())
    }

    /// Gives up the guard without releasing; returns the token.
    pub fn into_token(mut self) -> String {
        self.take().into_token()
    }
}

impl WriteGuard {
    /// Turns the write lock into a read hold of `owner` without a gap.
    pub fn downgrade(mut self, owner: &Owner) -> Result<ReadGuard> {
        let guard = self.take();
        let read = self.runtime.block_on(guard.downgrade(owner))?;
        Ok(Guard {
            inner: Some(read),
            runtime: self.runtime.clone(),
        })
    }
}

impl<R: RawLock> Drop for Guard<R> {
    fn drop(&mut self) {
        let Some(guard) = self.inner.take() else {
            return;
        };
        let release = guard.unlock();
        if tokio::runtime::Handle::try_current().is_ok() {
            // Blocking here would panic inside an async context: release in the background.
            self.runtime.spawn(release);
        } else if let Err(err) = self.runtime.block_on(release) {
            tracing::debug!(error = %err, "release on drop failed; the lease will expire");
        }
    }
}

/// The blocking form of [`crate::LostHolds`]: every hold of a blocking [`Client`] that may
/// be lost, as an iterator (`for hold in client.lost() { .. }` on a thread of its own).
/// Made by [`Client::lost`].
#[derive(Debug)]
pub struct LostHolds {
    inner: crate::LostHolds,
    runtime: Arc<Runtime>,
}

/// Blocks until the next lost hold; ends once the client is shut down and done.
impl Iterator for LostHolds {
    type Item = crate::LostHold;

    fn next(&mut self) -> Option<crate::LostHold> {
        self.runtime.block_on(self.inner.next())
    }
}

impl LostHolds {
    fn of(session: &crate::Session, runtime: &Arc<Runtime>) -> LostHolds {
        LostHolds {
            inner: session.lost(),
            runtime: runtime.clone(),
        }
    }

    /// Like [`Iterator::next`], but gives up after `timeout` (`Err`).
    pub fn next_timeout(
        &mut self,
        timeout: Duration,
    ) -> std::result::Result<Option<crate::LostHold>, tokio::time::error::Elapsed> {
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, self.inner.next()).await })
    }

    /// How many reports this watcher missed by falling too far behind.
    pub fn missed(&self) -> u64 {
        self.inner.missed()
    }
}
