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
//! println!("fence {}", guard.fence());
//! guard.unlock()?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::error::{Error, Result};
use crate::lease::{LostReason, LostSignal};
use crate::options::LockOptions;
use crate::reentrant::Owner;

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
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("dlock-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start the dlock runtime: {e}")))?;
        let inner = runtime.block_on(builder.connect())?;
        Ok(Client {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// A mutex with default options (30 s lease renewed automatically, wait forever).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.mutex_with(name, LockOptions::default())
    }

    /// A mutex with the given options.
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Ok(Mutex {
            inner: self.inner.mutex_with(name, options)?,
            runtime: self.runtime.clone(),
        })
    }

    /// A fair (FIFO) mutex with default options.
    pub fn fair_mutex(&self, name: &str) -> Result<Mutex> {
        self.fair_mutex_with(name, LockOptions::default())
    }

    /// A fair (FIFO) mutex with the given options.
    pub fn fair_mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Ok(Mutex {
            inner: self.inner.fair_mutex_with(name, options)?,
            runtime: self.runtime.clone(),
        })
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
        Ok(Semaphore {
            inner: self.inner.semaphore_with(name, permits, options)?,
            runtime: self.runtime.clone(),
        })
    }

    /// A read-write lock with default options.
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        self.rwlock_with(name, LockOptions::default())
    }

    /// A read-write lock with the given options.
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        Ok(RwLock {
            inner: self.inner.rwlock_with(name, options)?,
            runtime: self.runtime.clone(),
        })
    }

    /// A reentrant mutex with default options.
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        self.reentrant_mutex_with(name, LockOptions::default())
    }

    /// A reentrant mutex with the given options.
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        Ok(ReentrantMutex {
            inner: self.inner.reentrant_mutex_with(name, options)?,
            runtime: self.runtime.clone(),
        })
    }
}

/// Blocking counterpart of [`crate::Mutex`].
#[derive(Clone, Debug)]
pub struct Mutex {
    inner: crate::Mutex,
    runtime: Arc<Runtime>,
}

impl Mutex {
    /// The lock name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// One attempt; [`Error::Busy`] when held by someone else.
    pub fn try_lock(&self) -> Result<MutexGuard> {
        let guard = self.runtime.block_on(self.inner.try_lock())?;
        Ok(MutexGuard(Hold::new(guard, &self.runtime)))
    }

    /// Takes the lock, waiting per the wait policy ([`Error::TimedOut`] past the budget).
    pub fn lock(&self) -> Result<MutexGuard> {
        let guard = self.runtime.block_on(self.inner.lock())?;
        Ok(MutexGuard(Hold::new(guard, &self.runtime)))
    }

    /// Runs `work` while holding the lock (renewed meanwhile). A running closure cannot be
    /// cancelled, so it gets the guard and should check [`MutexGuard::lost`] between
    /// steps; if the lock was lost by the time it returns, the result is [`Error::Lost`].
    pub fn with_lock<T>(&self, work: impl FnOnce(&MutexGuard) -> T) -> Result<T> {
        let guard = self.lock()?;
        let value = work(&guard);
        if guard.lost().is_some() {
            return Err(Error::Lost {
                name: self.name().to_string(),
            });
        }
        guard.unlock()?;
        Ok(value)
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

/// Blocking counterpart of [`crate::MutexGuard`]. Dropping it releases the lock.
#[derive(Debug)]
pub struct MutexGuard(Hold<crate::MutexGuard>);

impl MutexGuard {
    /// The holder's token.
    pub fn token(&self) -> &str {
        self.0.get().token()
    }

    /// The fencing token of this grant.
    pub fn fence(&self) -> u64 {
        self.0.get().fence()
    }

    /// The local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.0.get().valid_until()
    }

    /// What is left of the validity.
    pub fn remaining(&self) -> Duration {
        self.0.get().remaining()
    }

    /// The reason, if the lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.0.get().lost_signal().lost()
    }

    /// The lost signal, e.g. to hand to another thread.
    pub fn lost_signal(&self) -> LostSignal {
        self.0.get().lost_signal()
    }

    /// Resets the lease to `ttl` from now.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let (guard, runtime) = self.0.get_mut();
        runtime.block_on(guard.extend(ttl))
    }

    /// Asks Redis whether this holder still holds the lock.
    pub fn is_held(&self) -> Result<bool> {
        self.0.runtime.block_on(self.0.get().is_held())
    }

    /// Releases the lock ([`Error::Lost`] when it had expired or been taken).
    pub fn unlock(mut self) -> Result<()> {
        let (guard, runtime) = self.0.take();
        runtime.block_on(guard.unlock())
    }

    /// Leaves the lock held until its lease ends; returns the token.
    pub fn into_token(mut self) -> String {
        self.0.take().0.into_token()
    }
}

/// Blocking counterpart of [`crate::ReentrantMutex`].
#[derive(Clone, Debug)]
pub struct ReentrantMutex {
    inner: crate::ReentrantMutex,
    runtime: Arc<Runtime>,
}

impl ReentrantMutex {
    /// One attempt to take or re-enter the lock for `owner`.
    pub fn try_lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        let guard = self.runtime.block_on(self.inner.try_lock(owner))?;
        Ok(ReentrantGuard(Hold::new(guard, &self.runtime)))
    }

    /// Takes or re-enters the lock for `owner`, waiting per the wait policy.
    pub fn lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        let guard = self.runtime.block_on(self.inner.lock(owner))?;
        Ok(ReentrantGuard(Hold::new(guard, &self.runtime)))
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

/// Blocking counterpart of [`crate::ReentrantGuard`]. Dropping it gives the hold back.
#[derive(Debug)]
pub struct ReentrantGuard(Hold<crate::ReentrantGuard>);

impl ReentrantGuard {
    /// The fencing token of the outermost grant.
    pub fn fence(&self) -> u64 {
        self.0.get().fence()
    }

    /// The owner's holds right after this one was granted.
    pub fn holds_at_grant(&self) -> u32 {
        self.0.get().holds_at_grant()
    }

    /// The reason, if the lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.0.get().lost_signal().lost()
    }

    /// Gives this hold back; returns the holds left.
    pub fn unlock(mut self) -> Result<u32> {
        let (guard, runtime) = self.0.take();
        runtime.block_on(guard.unlock())
    }
}

/// Blocking counterpart of [`crate::Semaphore`].
#[derive(Clone, Debug)]
pub struct Semaphore {
    inner: crate::Semaphore,
    runtime: Arc<Runtime>,
}

impl Semaphore {
    /// One attempt to take a permit.
    pub fn try_acquire(&self) -> Result<SemaphorePermit> {
        let permit = self.runtime.block_on(self.inner.try_acquire())?;
        Ok(SemaphorePermit(Hold::new(permit, &self.runtime)))
    }

    /// Takes a permit, waiting in arrival order per the wait policy.
    pub fn acquire(&self) -> Result<SemaphorePermit> {
        let permit = self.runtime.block_on(self.inner.acquire())?;
        Ok(SemaphorePermit(Hold::new(permit, &self.runtime)))
    }

    /// Permits held now.
    pub fn held(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.held())
    }
}

/// Blocking counterpart of [`crate::SemaphorePermit`]. Dropping it gives the permit back.
#[derive(Debug)]
pub struct SemaphorePermit(Hold<crate::SemaphorePermit>);

impl SemaphorePermit {
    /// This permit's fencing token.
    pub fn fence(&self) -> u64 {
        self.0.get().fence()
    }

    /// The reason, if the permit may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.0.get().lost_signal().lost()
    }

    /// Gives the permit back.
    pub fn release(mut self) -> Result<()> {
        let (permit, runtime) = self.0.take();
        runtime.block_on(permit.release())
    }
}

/// Blocking counterpart of [`crate::RwLock`].
#[derive(Clone, Debug)]
pub struct RwLock {
    inner: crate::RwLock,
    runtime: Arc<Runtime>,
}

impl RwLock {
    /// Takes a read hold for `owner`, waiting per the wait policy.
    pub fn read(&self, owner: &Owner) -> Result<ReadGuard> {
        let guard = self.runtime.block_on(self.inner.read(owner))?;
        Ok(ReadGuard(Hold::new(guard, &self.runtime)))
    }

    /// One attempt at a read hold.
    pub fn try_read(&self, owner: &Owner) -> Result<ReadGuard> {
        let guard = self.runtime.block_on(self.inner.try_read(owner))?;
        Ok(ReadGuard(Hold::new(guard, &self.runtime)))
    }

    /// Takes the write lock, waiting per the wait policy.
    pub fn write(&self) -> Result<WriteGuard> {
        let guard = self.runtime.block_on(self.inner.write())?;
        Ok(WriteGuard(Hold::new(guard, &self.runtime)))
    }

    /// One attempt at the write lock.
    pub fn try_write(&self) -> Result<WriteGuard> {
        let guard = self.runtime.block_on(self.inner.try_write())?;
        Ok(WriteGuard(Hold::new(guard, &self.runtime)))
    }

    /// Readers holding now.
    pub fn readers(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.readers())
    }
}

/// Blocking counterpart of [`crate::ReadGuard`]. Dropping it gives the hold back.
#[derive(Debug)]
pub struct ReadGuard(Hold<crate::ReadGuard>);

impl ReadGuard {
    /// The fencing token of the owner's outermost read grant.
    pub fn fence(&self) -> u64 {
        self.0.get().fence()
    }

    /// The reason, if the hold may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.0.get().lost_signal().lost()
    }

    /// Gives the hold back.
    pub fn unlock(mut self) -> Result<()> {
        let (guard, runtime) = self.0.take();
        runtime.block_on(guard.unlock())
    }
}

/// Blocking counterpart of [`crate::WriteGuard`]. Dropping it releases the write lock.
#[derive(Debug)]
pub struct WriteGuard(Hold<crate::WriteGuard>);

impl WriteGuard {
    /// The fencing token of this write grant.
    pub fn fence(&self) -> u64 {
        self.0.get().fence()
    }

    /// The reason, if the write lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.0.get().lost_signal().lost()
    }

    /// Releases the write lock.
    pub fn unlock(mut self) -> Result<()> {
        let (guard, runtime) = self.0.take();
        runtime.block_on(guard.unlock())
    }

    /// Turns the write lock into a read hold of `owner` without a gap.
    pub fn downgrade(mut self, owner: &Owner) -> Result<ReadGuard> {
        let (guard, runtime) = self.0.take();
        let read = runtime.block_on(guard.downgrade(owner))?;
        Ok(ReadGuard(Hold::new(read, &runtime)))
    }
}

/// An async guard the blocking facade gives back when its wrapper is dropped.
trait GiveBack: Send + 'static {
    fn give_back(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>>;
}

impl GiveBack for crate::MutexGuard {
    fn give_back(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(self.unlock())
    }
}

impl GiveBack for crate::ReentrantGuard {
    fn give_back(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(async move { self.unlock().await.map(drop) })
    }
}

impl GiveBack for crate::SemaphorePermit {
    fn give_back(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(self.release())
    }
}

impl GiveBack for crate::ReadGuard {
    fn give_back(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(self.unlock())
    }
}

impl GiveBack for crate::WriteGuard {
    fn give_back(self) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> {
        Box::pin(self.unlock())
    }
}

/// An async guard and the runtime that drives it, until the guard is consumed; what is
/// left unconsumed is given back on drop.
#[derive(Debug)]
struct Hold<G: GiveBack> {
    guard: Option<G>,
    runtime: Arc<Runtime>,
}

impl<G: GiveBack> Hold<G> {
    fn new(guard: G, runtime: &Arc<Runtime>) -> Hold<G> {
        Hold {
            guard: Some(guard),
            runtime: runtime.clone(),
        }
    }

    fn get(&self) -> &G {
        self.guard.as_ref().expect("guard present until consumed")
    }

    fn get_mut(&mut self) -> (&mut G, &Runtime) {
        let guard = self.guard.as_mut().expect("guard present until consumed");
        (guard, &self.runtime)
    }

    /// Consumes the guard (no give-back on drop any more).
    fn take(&mut self) -> (G, Arc<Runtime>) {
        let guard = self.guard.take().expect("guard present until consumed");
        (guard, self.runtime.clone())
    }
}

impl<G: GiveBack> Drop for Hold<G> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let release = guard.give_back();
        if tokio::runtime::Handle::try_current().is_ok() {
            // Blocking here would panic inside an async context: release in the background.
            self.runtime.spawn(release);
        } else if let Err(err) = self.runtime.block_on(release) {
            tracing::debug!(error = %err, "release on drop failed; the lease will expire");
        }
    }
}
