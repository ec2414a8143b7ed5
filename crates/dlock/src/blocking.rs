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
        Ok(self.wrap(guard))
    }

    /// Takes the lock, waiting per the wait policy ([`Error::TimedOut`] past the budget).
    pub fn lock(&self) -> Result<MutexGuard> {
        let guard = self.runtime.block_on(self.inner.lock())?;
        Ok(self.wrap(guard))
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

    fn wrap(&self, guard: crate::MutexGuard) -> MutexGuard {
        MutexGuard {
            inner: Some(guard),
            runtime: self.runtime.clone(),
        }
    }
}

/// Blocking counterpart of [`crate::MutexGuard`]. Dropping it releases the lock.
#[derive(Debug)]
pub struct MutexGuard {
    inner: Option<crate::MutexGuard>,
    runtime: Arc<Runtime>,
}

impl MutexGuard {
    fn guard(&self) -> &crate::MutexGuard {
        self.inner.as_ref().expect("guard present until consumed")
    }

    /// The holder's token.
    pub fn token(&self) -> &str {
        self.guard().token()
    }

    /// The fencing token of this grant.
    pub fn fence(&self) -> u64 {
        self.guard().fence()
    }

    /// The local validity deadline.
    pub fn valid_until(&self) -> Instant {
        self.guard().valid_until()
    }

    /// What is left of the validity.
    pub fn remaining(&self) -> Duration {
        self.guard().remaining()
    }

    /// The reason, if the lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.guard().lost_signal().lost()
    }

    /// The lost signal, e.g. to hand to another thread.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard().lost_signal()
    }

    /// Resets the lease to `ttl` from now.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let guard = self.inner.as_mut().expect("guard present until consumed");
        self.runtime.block_on(guard.extend(ttl))
    }

    /// Asks Redis whether this holder still holds the lock.
    pub fn is_held(&self) -> Result<bool> {
        self.runtime.block_on(self.guard().is_held())
    }

    /// Releases the lock ([`Error::Lost`] when it had expired or been taken).
    pub fn unlock(mut self) -> Result<()> {
        let guard = self.inner.take().expect("guard present until consumed");
        self.runtime.block_on(guard.unlock())
    }

    /// Leaves the lock held until its lease ends; returns the token.
    pub fn into_token(mut self) -> String {
        self.inner
            .take()
            .expect("guard present until consumed")
            .into_token()
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            release_on_drop(&self.runtime, guard.unlock());
        }
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
        Ok(self.wrap(guard))
    }

    /// Takes or re-enters the lock for `owner`, waiting per the wait policy.
    pub fn lock(&self, owner: &Owner) -> Result<ReentrantGuard> {
        let guard = self.runtime.block_on(self.inner.lock(owner))?;
        Ok(self.wrap(guard))
    }

    /// Gives back one hold of `owner`; returns the holds left.
    pub fn release_as(&self, owner: &Owner) -> Result<u32> {
        self.runtime.block_on(self.inner.release_as(owner))
    }

    /// How many holds `owner` has now.
    pub fn hold_count(&self, owner: &Owner) -> Result<u32> {
        self.runtime.block_on(self.inner.hold_count(owner))
    }

    fn wrap(&self, guard: crate::ReentrantGuard) -> ReentrantGuard {
        ReentrantGuard {
            inner: Some(guard),
            runtime: self.runtime.clone(),
        }
    }
}

/// Blocking counterpart of [`crate::ReentrantGuard`]. Dropping it gives the hold back.
#[derive(Debug)]
pub struct ReentrantGuard {
    inner: Option<crate::ReentrantGuard>,
    runtime: Arc<Runtime>,
}

impl ReentrantGuard {
    fn guard(&self) -> &crate::ReentrantGuard {
        self.inner.as_ref().expect("guard present until consumed")
    }

    /// The fencing token of the outermost grant.
    pub fn fence(&self) -> u64 {
        self.guard().fence()
    }

    /// The owner's holds right after this one was granted.
    pub fn holds_at_grant(&self) -> u32 {
        self.guard().holds_at_grant()
    }

    /// The reason, if the lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.guard().lost_signal().lost()
    }

    /// Gives this hold back; returns the holds left.
    pub fn unlock(mut self) -> Result<u32> {
        let guard = self.inner.take().expect("guard present until consumed");
        self.runtime.block_on(guard.unlock())
    }
}

impl Drop for ReentrantGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            release_on_drop(&self.runtime, guard.unlock());
        }
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
        Ok(SemaphorePermit {
            inner: Some(permit),
            runtime: self.runtime.clone(),
        })
    }

    /// Takes a permit, waiting in arrival order per the wait policy.
    pub fn acquire(&self) -> Result<SemaphorePermit> {
        let permit = self.runtime.block_on(self.inner.acquire())?;
        Ok(SemaphorePermit {
            inner: Some(permit),
            runtime: self.runtime.clone(),
        })
    }

    /// Permits held now.
    pub fn held(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.held())
    }
}

/// Blocking counterpart of [`crate::SemaphorePermit`]. Dropping it gives the permit back.
#[derive(Debug)]
pub struct SemaphorePermit {
    inner: Option<crate::SemaphorePermit>,
    runtime: Arc<Runtime>,
}

impl SemaphorePermit {
    fn permit(&self) -> &crate::SemaphorePermit {
        self.inner.as_ref().expect("permit present until consumed")
    }

    /// This permit's fencing token.
    pub fn fence(&self) -> u64 {
        self.permit().fence()
    }

    /// The reason, if the permit may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.permit().lost_signal().lost()
    }

    /// Gives the permit back.
    pub fn release(mut self) -> Result<()> {
        let permit = self.inner.take().expect("permit present until consumed");
        self.runtime.block_on(permit.release())
    }
}

impl Drop for SemaphorePermit {
    fn drop(&mut self) {
        if let Some(permit) = self.inner.take() {
            release_on_drop(&self.runtime, permit.release());
        }
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
        Ok(ReadGuard {
            inner: Some(guard),
            runtime: self.runtime.clone(),
        })
    }

    /// One attempt at a read hold.
    pub fn try_read(&self, owner: &Owner) -> Result<ReadGuard> {
        let guard = self.runtime.block_on(self.inner.try_read(owner))?;
        Ok(ReadGuard {
            inner: Some(guard),
            runtime: self.runtime.clone(),
        })
    }

    /// Takes the write lock, waiting per the wait policy.
    pub fn write(&self) -> Result<WriteGuard> {
        let guard = self.runtime.block_on(self.inner.write())?;
        Ok(WriteGuard {
            inner: Some(guard),
            runtime: self.runtime.clone(),
        })
    }

    /// One attempt at the write lock.
    pub fn try_write(&self) -> Result<WriteGuard> {
        let guard = self.runtime.block_on(self.inner.try_write())?;
        Ok(WriteGuard {
            inner: Some(guard),
            runtime: self.runtime.clone(),
        })
    }

    /// Readers holding now.
    pub fn readers(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.readers())
    }
}

/// Blocking counterpart of [`crate::ReadGuard`]. Dropping it gives the hold back.
#[derive(Debug)]
pub struct ReadGuard {
    inner: Option<crate::ReadGuard>,
    runtime: Arc<Runtime>,
}

impl ReadGuard {
    /// The fencing token of the owner's outermost read grant.
    pub fn fence(&self) -> u64 {
        self.inner.as_ref().expect("guard present").fence()
    }

    /// The reason, if the hold may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.inner
            .as_ref()
            .expect("guard present")
            .lost_signal()
            .lost()
    }

    /// Gives the hold back.
    pub fn unlock(mut self) -> Result<()> {
        let guard = self.inner.take().expect("guard present");
        self.runtime.block_on(guard.unlock())
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            release_on_drop(&self.runtime, guard.unlock());
        }
    }
}

/// Blocking counterpart of [`crate::WriteGuard`]. Dropping it releases the write lock.
#[derive(Debug)]
pub struct WriteGuard {
    inner: Option<crate::WriteGuard>,
    runtime: Arc<Runtime>,
}

impl WriteGuard {
    /// The fencing token of this write grant.
    pub fn fence(&self) -> u64 {
        self.inner.as_ref().expect("guard present").fence()
    }

    /// The reason, if the write lock may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.inner
            .as_ref()
            .expect("guard present")
            .lost_signal()
            .lost()
    }

    /// Releases the write lock.
    pub fn unlock(mut self) -> Result<()> {
        let guard = self.inner.take().expect("guard present");
        self.runtime.block_on(guard.unlock())
    }

    /// Turns the write lock into a read hold of `owner` without a gap.
    pub fn downgrade(mut self, owner: &Owner) -> Result<ReadGuard> {
        let guard = self.inner.take().expect("guard present");
        let read = self.runtime.block_on(guard.downgrade(owner))?;
        Ok(ReadGuard {
            inner: Some(read),
            runtime: self.runtime.clone(),
        })
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            release_on_drop(&self.runtime, guard.unlock());
        }
    }
}

/// Runs a release to completion on drop; inside an async context (where blocking would
/// panic) it is spawned instead.
fn release_on_drop<T>(
    runtime: &Runtime,
    release: impl std::future::Future<Output = Result<T>> + Send + 'static,
) where
    T: Send + 'static,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        runtime.spawn(release);
    } else if let Err(err) = runtime.block_on(release) {
        tracing::debug!(error = %err, "release on drop failed; the lease will expire");
    }
}
