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
use crate::multi::RawMulti;
use crate::mutex::RawMutex;
use crate::options::LockOptions;
use crate::raw::RawLock;
use crate::redlock::RawRedlock;
use crate::reentrant::{OwnedBy, Owner};
use crate::rwlock::{Reading, Writing};
use crate::semaphore::RawSemaphore;
use crate::signal::{LostReason, LostSignal};

/// A blocking handle: the async handle `H` and the runtime that runs its calls, its
/// notifier and its renewals. Made by [`Client::connect`] (one Redis deployment) or
/// [`Redlock::connect`] (independent masters). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Handle<H> {
    inner: H,
    runtime: Arc<Runtime>,
}

mod sealed {
    use std::future::Future;

    /// An async handle with a session: [`crate::Client`] or [`crate::Redlock`].
    pub trait Connected: Clone + Send + Sync + 'static {
        /// What configures and connects it.
        type Builder;
        fn connect(builder: Self::Builder) -> impl Future<Output = crate::error::Result<Self>>;
        fn session(&self) -> &crate::session::Session;
        fn shutdown(&self) -> impl Future<Output = ()> + Send;
    }

    /// The async handle `$handle`, connected by `$builder`, forwards to its own methods.
    macro_rules! connected {
        ($($handle:ty => $builder:ty),*) => {$(
            impl Connected for $handle {
                type Builder = $builder;
                fn connect(builder: $builder) -> impl Future<Output = crate::error::Result<Self>> {
                    builder.connect()
                }
                fn session(&self) -> &crate::session::Session {
                    <$handle>::session(self)
                }
                fn shutdown(&self) -> impl Future<Output = ()> + Send {
                    <$handle>::shutdown(self)
                }
            }
        )*};
    }

    connected!(crate::client::Client => crate::client::ClientBuilder, crate::redlock::Redlock => crate::redlock::RedlockBuilder);
}

impl<H: sealed::Connected> Handle<H> {
    /// Connects with the settings of an async builder ([`ClientBuilder`](crate::ClientBuilder)
    /// for a [`Client`], [`RedlockBuilder`](crate::RedlockBuilder) for a [`Redlock`]), on a
    /// runtime of its own.
    pub fn connect_with(builder: H::Builder) -> Result<Handle<H>> {
        let runtime = own_runtime()?;
        let inner = runtime.block_on(H::connect(builder))?;
        Ok(Handle {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// The async handle underneath.
    pub fn get_ref(&self) -> &H {
        &self.inner
    }

    /// Releases every lock still held through this handle and refuses new ones; see
    /// [`crate::Client::shutdown`].
    pub fn shutdown(&self) {
        self.runtime.block_on(self.inner.shutdown())
    }

    /// Every hold of this handle that may be lost from now on; see
    /// [`Session::lost`](crate::Session::lost). Read it on a thread of its own.
    pub fn lost(&self) -> LostHolds {
        LostHolds::of(self.inner.session(), &self.runtime)
    }

    /// Blocks until [`shutdown`](Handle::shutdown) has given every hold back; see
    /// [`Session::done`](crate::Session::done).
    pub fn done(&self) {
        self.runtime.block_on(self.inner.session().done())
    }

    /// The handle's [`Session`](crate::Session): its holds and whether it is closed.
    pub fn session(&self) -> &crate::session::Session {
        self.inner.session()
    }

    fn wrap<A: Blocks>(&self, inner: A) -> A::Blocking {
        inner.blocking(self.runtime.clone())
    }
}

/// An async handle that has a blocking form.
trait Blocks {
    type Blocking;
    fn blocking(self, runtime: Arc<Runtime>) -> Self::Blocking;
}

impl<R> Blocks for crate::lock::Lock<R> {
    type Blocking = Lock<R>;
    fn blocking(self, runtime: Arc<Runtime>) -> Lock<R> {
        Lock {
            inner: self,
            runtime,
        }
    }
}

impl Blocks for crate::rwlock::RwLock {
    type Blocking = RwLock;
    fn blocking(self, runtime: Arc<Runtime>) -> RwLock {
        RwLock {
            inner: self,
            runtime,
        }
    }
}

/// A blocking handle's constructors, each pair (default options, given options) making
/// the async handle and wrapping it.
macro_rules! blocking_constructors {
    ($($(#[$doc:meta])* $name:ident / $with:ident ($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self, name: &str $(, $arg: $ty)*) -> Result<$out> {
            self.$with(name $(, $arg)*, LockOptions::default())
        }

        #[doc = concat!("[`", stringify!($name), "`](Self::", stringify!($name), ") with the given options.")]
        pub fn $with(&self, name: &str $(, $arg: $ty)*, options: LockOptions) -> Result<$out> {
            Ok(self.wrap(self.inner.$with(name $(, $arg)*, options)?))
        }
    )*};
}

/// A blocking handle to one Redis deployment.
pub type Client = Handle<crate::client::Client>;

/// A blocking handle on several independent masters that grant locks by majority: the
/// blocking form of [`crate::Redlock`].
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
pub type Redlock = Handle<crate::redlock::Redlock>;

impl Client {
    /// Connects with default options.
    pub fn connect(url: &str) -> Result<Client> {
        Client::connect_with(crate::client::Client::builder(url))
    }

    /// The leader election `name` with default options (see [`crate::Client::election`]).
    pub fn election(&self, name: &str) -> Result<Election> {
        self.election_with(
            name,
            LockOptions::default().wait(crate::options::Wait::Forever),
        )
    }

    /// The leader election `name` with `options` for its leaders' lock.
    pub fn election_with(&self, name: &str, options: LockOptions) -> Result<Election> {
        Ok(Election {
            inner: self.inner.election_with(name, options)?,
            runtime: self.runtime.clone(),
        })
    }

    /// A multi-lock over `names`: every name held or none (see
    /// [`crate::Client::multi_lock`]).
    ///
    /// ```no_run
    /// # fn demo(client: dlock::blocking::Client) -> dlock::Result<()> {
    /// let guard = client.multi_lock(&["account:17", "account:42"])?.lock()?;
    /// let fences = guard.fences()?;
    /// # let _ = fences;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock(&self, names: &[&str]) -> Result<MultiLock> {
        self.multi_lock_with(names, LockOptions::default())
    }

    /// [`multi_lock`](Self::multi_lock) with the given options.
    pub fn multi_lock_with(&self, names: &[&str], options: LockOptions) -> Result<MultiLock> {
        Ok(self.wrap(self.inner.multi_lock_with(names, options)?))
    }

    blocking_constructors! {
        /// A mutex with default options (30 s lease renewed automatically, wait forever).
        mutex / mutex_with () -> Mutex;
        /// A fair (FIFO) mutex with default options.
        fair_mutex / fair_mutex_with () -> Mutex;
        /// A semaphore with `permits` permits and default options.
        semaphore / semaphore_with (permits: u32) -> Semaphore;
        /// A read-write lock with default options, reading for a fresh owner.
        rwlock / rwlock_with () -> RwLock;
        /// A reentrant mutex with default options, acting for a fresh owner.
        reentrant_mutex / reentrant_mutex_with () -> ReentrantMutex;
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

impl Redlock {
    /// Connects to `urls`, independent masters, with default settings.
    pub fn connect<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> Result<Redlock> {
        Redlock::connect_with(crate::client::Client::redlock_builder(urls))
    }

    blocking_constructors! {
        /// A Redlock mutex with default options.
        mutex / mutex_with () -> RedlockMutex;
    }
}

/// The blocking form of the one [`crate::Lock`] handle: the same verbs, each blocking
/// until it is done. Cheap to clone (a clone of an owner-bound handle acts for a fresh
/// owner, as [`crate::Lock`]'s does).
#[derive(Debug)]
pub struct Lock<R> {
    inner: crate::lock::Lock<R>,
    runtime: Arc<Runtime>,
}

impl<R: RawLock> Clone for Lock<R> {
    fn clone(&self) -> Self {
        Lock {
            inner: self.inner.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

impl<R: RawLock> Lock<R> {
    /// The async handle underneath.
    pub fn get_ref(&self) -> &crate::lock::Lock<R> {
        &self.inner
    }

    fn guard(&self, guard: Result<crate::guard::Guard<R>>) -> Result<Guard<R>> {
        Ok(Guard {
            inner: Some(guard?),
            runtime: self.runtime.clone(),
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The kind, as logs and metrics name it (see [`crate::Lock::kind`]).
    pub fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        self.inner.options()
    }

    /// One attempt; [`Error::Busy`] when held by others.
    pub fn try_lock(&self) -> Result<Guard<R>> {
        self.guard(self.runtime.block_on(self.inner.try_lock()))
    }

    /// Takes the lock, waiting per the options' wait policy ([`Error::TimedOut`] past the
    /// budget).
    pub fn lock(&self) -> Result<Guard<R>> {
        self.guard(self.runtime.block_on(self.inner.lock()))
    }

    /// Takes the lock, waiting per `wait` for this call only.
    pub fn lock_with(&self, wait: crate::options::Wait) -> Result<Guard<R>> {
        self.guard(self.runtime.block_on(self.inner.lock_with(wait)))
    }

    /// Runs `work` while holding the lock (renewed meanwhile). A running closure cannot be
    /// cancelled, so it gets the guard and should check [`Guard::lost`] between steps; if
    /// the lock was lost by the time it returns, the result is [`Error::Lost`].
    pub fn with_lock<T>(&self, work: impl FnOnce(&Guard<R>) -> T) -> Result<T> {
        let guard = self.lock()?;
        let value = work(&guard);
        if guard.lost().is_some() {
            return Err(Error::Lost {
                name: guard.name().to_string(),
            });
        }
        guard.unlock()?;
        Ok(value)
    }

    /// Gives back the hold `token` (see [`crate::Lock::release_token`]).
    pub fn release_token(&self, token: &str) -> Result<()> {
        self.runtime.block_on(self.inner.release_token(token))
    }

    /// Restarts the lease of the hold `token` at `ttl`.
    pub fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        self.runtime.block_on(self.inner.extend_token(token, ttl))
    }

    /// Applies `batch` while the hold `token` is held (see [`crate::Lock::apply_token`]).
    pub fn apply_token(
        &self,
        token: &str,
        batch: &crate::guarded::Guarded,
    ) -> Result<Vec<redis::Value>> {
        self.runtime.block_on(self.inner.apply_token(token, batch))
    }

    /// The Redis key of this lock's data key `key` (see [`crate::Lock::data_key`]).
    pub fn data_key(&self, key: &str) -> String {
        self.inner.data_key(key)
    }
}

impl<R: RawLock> Lock<R>
where
    crate::lock::Lock<R>: Into<crate::any::AnyLock>,
{
    /// This lock as an [`AnyLock`], for code that serves several kinds.
    pub fn into_any(self) -> AnyLock {
        Lock {
            inner: self.inner.into(),
            runtime: self.runtime,
        }
    }
}

/// Blocking counterpart of [`crate::Mutex`] (plain or fair).
pub type Mutex = Lock<RawMutex>;
/// Blocking counterpart of [`crate::ReentrantMutex`].
pub type ReentrantMutex = Lock<OwnedBy>;
/// Blocking counterpart of [`crate::Semaphore`].
pub type Semaphore = Lock<RawSemaphore>;
/// Blocking counterpart of [`crate::RedlockMutex`].
pub type RedlockMutex = Lock<RawRedlock>;
/// Blocking counterpart of [`crate::MultiLock`].
pub type MultiLock = Lock<RawMulti>;
/// Blocking counterpart of [`crate::AnyLock`].
pub type AnyLock = Lock<crate::any::AnyKind>;

/// Blocking counterpart of [`crate::MutexGuard`].
pub type MutexGuard = Guard<RawMutex>;
/// Blocking counterpart of [`crate::ReentrantGuard`].
pub type ReentrantGuard = Guard<OwnedBy>;
/// Blocking counterpart of [`crate::SemaphorePermit`].
pub type SemaphorePermit = Guard<RawSemaphore>;
/// Blocking counterpart of [`crate::ReadGuard`].
pub type ReadGuard = Guard<Reading>;
/// Blocking counterpart of [`crate::WriteGuard`].
pub type WriteGuard = Guard<Writing>;
/// Blocking counterpart of [`crate::RedlockGuard`].
pub type RedlockGuard = Guard<RawRedlock>;
/// Blocking counterpart of [`crate::MultiGuard`].
pub type MultiGuard = Guard<RawMulti>;
/// Blocking counterpart of [`crate::AnyGuard`].
pub type AnyGuard = Guard<crate::any::AnyKind>;

impl ReentrantMutex {
    /// The owner this handle acts for.
    pub fn owner(&self) -> &Owner {
        self.inner.owner()
    }

    /// A handle on the same lock acting for `owner`.
    pub fn for_owner(&self, owner: &Owner) -> ReentrantMutex {
        Lock {
            inner: self.inner.for_owner(owner),
            runtime: self.runtime.clone(),
        }
    }

    /// Gives back one hold of the owner; returns the holds left.
    pub fn release_one(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.release_one())
    }

    /// How many holds the owner has now.
    pub fn hold_count(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.hold_count())
    }
}

impl Semaphore {
    /// N, the number of permits this client allows.
    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }

    /// The number of permits held now (a weighted permit counting its weight).
    pub fn held(&self) -> Result<u32> {
        self.runtime.block_on(self.inner.held())
    }

    /// How many permits each acquisition of this handle takes (see [`Self::taking`]).
    pub fn weight(&self) -> u32 {
        self.inner.weight()
    }

    /// A handle whose every acquisition takes `k` permits at once (see
    /// [`crate::Semaphore::taking`]).
    pub fn taking(&self, k: u32) -> Result<Semaphore> {
        Ok(Lock {
            inner: self.inner.taking(k)?,
            runtime: self.runtime.clone(),
        })
    }

    /// Takes `k` permits at once as one permit, in queue order (see
    /// [`crate::Semaphore::lock_many`]).
    ///
    /// ```no_run
    /// # fn demo(client: dlock::blocking::Client) -> dlock::Result<()> {
    /// let slots = client.semaphore("gpu-slots", 16)?;
    /// let four = slots.lock_many(4)?;
    /// four.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock_many(&self, k: u32) -> Result<SemaphorePermit> {
        self.taking(k)?.lock()
    }

    /// One attempt at `k` permits ([`Error::Busy`] unless free with nobody ahead).
    pub fn try_lock_many(&self, k: u32) -> Result<SemaphorePermit> {
        self.taking(k)?.try_lock()
    }

    /// Takes `k` permits, waiting per `wait` for this call only.
    pub fn lock_many_with(&self, k: u32, wait: crate::options::Wait) -> Result<SemaphorePermit> {
        self.taking(k)?.lock_with(wait)
    }
}

impl SemaphorePermit {
    /// How many permits this permit is worth.
    pub fn weight(&self) -> u32 {
        self.get().weight()
    }
}

/// Blocking counterpart of [`crate::RwLock`], reading for the owner bound to it.
#[derive(Clone, Debug)]
pub struct RwLock {
    inner: crate::rwlock::RwLock,
    runtime: Arc<Runtime>,
}

impl RwLock {
    /// The async handle underneath.
    pub fn get_ref(&self) -> &crate::rwlock::RwLock {
        &self.inner
    }

    fn side<R: RawLock>(&self, inner: crate::lock::Lock<R>) -> Lock<R> {
        Lock {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The owner this handle reads for.
    pub fn owner(&self) -> &Owner {
        self.inner.owner()
    }

    /// A handle on the same lock reading for `owner`.
    pub fn for_owner(&self, owner: &Owner) -> RwLock {
        RwLock {
            inner: self.inner.for_owner(owner),
            runtime: self.runtime.clone(),
        }
    }

    /// The read side, a blocking [`Lock`] of its own.
    pub fn reader(&self) -> Lock<Reading> {
        self.side(self.inner.reader())
    }

    /// The write side, a blocking [`Lock`] of its own.
    pub fn writer(&self) -> Lock<Writing> {
        self.side(self.inner.writer())
    }

    /// Takes a read hold for the owner.
    pub fn read(&self) -> Result<ReadGuard> {
        self.reader().lock()
    }

    /// One attempt at a read hold.
    pub fn try_read(&self) -> Result<ReadGuard> {
        self.reader().try_lock()
    }

    /// Takes the write lock.
    pub fn write(&self) -> Result<WriteGuard> {
        self.writer().lock()
    }

    /// One attempt at the write lock.
    pub fn try_write(&self) -> Result<WriteGuard> {
        self.writer().try_lock()
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
    inner: Option<crate::guard::Guard<R>>,
    runtime: Arc<Runtime>,
}

impl<R: RawLock> Guard<R> {
    fn get(&self) -> &crate::guard::Guard<R> {
        self.inner.as_ref().expect("guard present until consumed")
    }

    fn take(&mut self) -> crate::guard::Guard<R> {
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

    /// Every name's fencing token (see [`crate::Guard::fences`]).
    pub fn fences(&self) -> Result<Vec<(String, u64)>> {
        self.runtime.block_on(self.get().fences())
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

    /// Applies `batch` only while this hold is held (see [`crate::Guard::apply`]).
    pub fn apply(&self, batch: &crate::guarded::Guarded) -> Result<Vec<redis::Value>> {
        self.runtime.block_on(self.get().apply(batch))
    }

    /// The Redis key of the lock's data key `key` (see [`crate::Guard::data_key`]).
    pub fn data_key(&self, key: &str) -> String {
        self.get().data_key(key)
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
    /// Turns the write lock into a read hold of the handle's owner without a gap.
    pub fn downgrade(mut self) -> Result<ReadGuard> {
        let guard = self.take();
        let read = self.runtime.block_on(guard.downgrade())?;
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
    inner: crate::session::LostHolds,
    runtime: Arc<Runtime>,
}

/// Blocks until the next lost hold; ends once the client is shut down and done.
impl Iterator for LostHolds {
    type Item = crate::signal::LostHold;

    fn next(&mut self) -> Option<crate::signal::LostHold> {
        self.runtime.block_on(self.inner.next())
    }
}

impl LostHolds {
    fn of(session: &crate::session::Session, runtime: &Arc<Runtime>) -> LostHolds {
        LostHolds {
            inner: session.lost(),
            runtime: runtime.clone(),
        }
    }

    /// Like [`Iterator::next`], but gives up after `timeout` (`Err`).
    pub fn next_timeout(
        &mut self,
        timeout: Duration,
    ) -> std::result::Result<Option<crate::signal::LostHold>, tokio::time::error::Elapsed> {
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, self.inner.next()).await })
    }

    /// How many reports this watcher missed by falling too far behind.
    pub fn missed(&self) -> u64 {
        self.inner.missed()
    }
}

/// A leader election: the blocking form of [`crate::Election`].
#[derive(Clone, Debug)]
pub struct Election {
    inner: crate::election::Election,
    runtime: Arc<Runtime>,
}

impl Election {
    /// Waits to become leader, then proclaims `value` (see [`crate::Election::campaign`]).
    pub fn campaign(&self, value: &str) -> Result<Leadership> {
        Ok(Leadership {
            inner: Some(self.runtime.block_on(self.inner.campaign(value))?),
            runtime: self.runtime.clone(),
        })
    }

    /// The current leader, without campaigning.
    pub fn leader(&self) -> Result<Option<crate::election::Leader>> {
        self.runtime.block_on(self.inner.leader())
    }

    /// A cursor over the leader's changes (see [`crate::Election::observe`]).
    pub fn observe(&self) -> Observer {
        Observer {
            inner: self.inner.observe(),
            runtime: self.runtime.clone(),
        }
    }
}

/// Leading an election: the blocking form of [`crate::Leadership`]. Dropping it resigns
/// in the background.
#[must_use = "dropping a leadership resigns at once (in the background)"]
pub struct Leadership {
    inner: Option<crate::election::Leadership>,
    runtime: Arc<Runtime>,
}

impl Leadership {
    fn get(&self) -> &crate::election::Leadership {
        self.inner.as_ref().expect("held until resign")
    }

    /// The term: this leadership's fencing token.
    pub fn term(&self) -> u64 {
        self.get().term()
    }

    /// The value last proclaimed.
    pub fn value(&self) -> &str {
        self.get().value()
    }

    /// Whether the leadership may have been lost by now (does not block).
    pub fn lost(&self) -> Option<LostReason> {
        self.get().lost_signal().lost()
    }

    /// The local validity deadline (see [`crate::Leadership::valid_until`]).
    pub fn valid_until(&self) -> Instant {
        self.get().valid_until()
    }

    /// A guarded write under the leadership (see [`crate::Leadership::apply`]).
    pub fn apply(&self, batch: &crate::guarded::Guarded) -> Result<Vec<redis::Value>> {
        self.runtime.block_on(self.get().apply(batch))
    }

    /// The lost signal (to wait on from another thread or runtime).
    pub fn lost_signal(&self) -> LostSignal {
        self.get().lost_signal()
    }

    /// Records a new value (see [`crate::Leadership::proclaim`]).
    pub fn proclaim(&mut self, value: &str) -> Result<()> {
        let runtime = self.runtime.clone();
        let inner = self.inner.as_mut().expect("held until resign");
        runtime.block_on(inner.proclaim(value))
    }

    /// Steps down (see [`crate::Leadership::resign`]).
    pub fn resign(mut self) -> Result<()> {
        let inner = self.inner.take().expect("held until resign");
        self.runtime.block_on(inner.resign())
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // Its drop resigns on the client's runtime, in the background.
            let _enter = self.runtime.enter();
            drop(inner);
        }
    }
}

/// Follows an election's leader: the blocking form of [`crate::Observer`], an endless
/// iterator whose first item is the leader now and each next one the leader after a
/// change (blocking until then).
pub struct Observer {
    inner: crate::election::Observer,
    runtime: Arc<Runtime>,
}

impl Iterator for Observer {
    type Item = Result<Option<crate::election::Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.runtime.block_on(self.inner.next()))
    }
}
