//! # dlock: distributed locks on Redis
//!
//! Processes on many machines coordinate through locks kept in Redis. Every grant carries a
//! random 128-bit token (only the owner may release or extend), a lease (a crashed holder
//! frees the lock when it runs out), a local validity deadline, and a **fencing token**
//! that is strictly larger than every earlier grant's, for storage that must reject
//! writes from a holder that paused past its lease.
//!
//! The package is `dlock-redis` (`cargo add dlock-redis`; the registry's `dlock` is an
//! unrelated crate), used in code as `dlock`. It is async on tokio; [`blocking`] has the same
//! locks for programs without a runtime. The `dlock` command-line tool (package
//! `dlock-redis-cli`) runs a command under any of these locks from a shell.
//!
//! ```no_run
//! use std::time::Duration;
//! use dlock::{Client, LockOptions, Wait};
//!
//! # async fn demo() -> dlock::Result<()> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let mutex = client.mutex_with(
//!     "nightly-report",
//!     LockOptions::default().wait(Wait::Timeout(Duration::from_secs(10))),
//! )?;
//! match mutex.lock().await {
//!     Ok(guard) => {
//!         // The lease is renewed while we work; guard.lost() resolves if it is lost.
//!         println!("running the report with fencing token {}", guard.fence().await?);
//!         guard.unlock().await?;
//!     }
//!     Err(dlock::Error::TimedOut { .. }) => println!("another replica is running it"),
//!     Err(other) => return Err(other),
//! }
//! client.shutdown().await; // gives back whatever is still held before the runtime ends
//! # Ok(()) }
//! ```
//!
//! # One handle, one guard
//!
//! Every kind of lock is a [`Lock`] with the same verbs: [`lock`](Lock::lock) (waits as its
//! [`LockOptions`] say), [`try_lock`](Lock::try_lock) (one attempt, [`Error::Busy`] when
//! held), [`lock_with`](Lock::lock_with) (a wait for this call), [`with_lock`](Lock::with_lock)
//! (runs a closure under the lock), and acting on a token from elsewhere. Every grant is a
//! [`Guard`] with the same verbs: [`fence`](Guard::fence), [`lost`](Guard::lost),
//! [`extend`](Guard::extend), [`is_held`](Guard::is_held), [`unlock`](Guard::unlock). A lock's
//! lease (30 s by default) is renewed every third of it until the guard is unlocked or
//! dropped; [`Guard::lost`] resolves, by a local timer, no later than the moment another
//! client could take the lock. A kind chosen at run time is an [`AnyLock`]. Waits are
//! cancel-safe: a `lock()` dropped by `timeout` or `select!` gives back whatever it was
//! granted. Call [`Client::shutdown`] before `main` returns.
//!
//! The snippets below assume a `client: dlock::Client` as above.
//!
//! ## Mutex and fair mutex
//!
//! [`Client::mutex`]: one holder at a time, stored as redis-py's and redsync's
//! `SET key token NX PX`. [`Client::fair_mutex`]: the same lock, with waiters granted in
//! arrival order; a release hands the lock directly to the next waiter.
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let guard = client.fair_mutex("migrations")?.lock().await?;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! ## Reentrant mutex
//!
//! [`Client::reentrant_mutex`] gives a [`ReentrantMutex`] acting for an explicit [`Owner`]
//! (thread identity means nothing in async Rust); the owner may lock again, and the lock is
//! free once every hold is given back.
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let ledger = client.reentrant_mutex("ledger")?;
//! let outer = ledger.lock().await?;
//! let inner = ledger.lock().await?; // re-enters: same fencing token
//! inner.unlock().await?;
//! outer.unlock().await?;            // free at zero holds
//! # Ok(()) }
//! ```
//!
//! ## Read-write lock
//!
//! [`Client::rwlock`] gives an [`RwLock`]: many readers or one writer. Once a writer waits,
//! new readers wait behind it; a writer may [`downgrade`](WriteGuard::downgrade) to a read
//! hold without a gap.
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let config = client.rwlock("shared-config")?;
//! let read = config.read().await?;
//! read.unlock().await?;
//! let write = config.write().await?;
//! write.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! ## Semaphore
//!
//! [`Client::semaphore`] gives a [`Semaphore`] of N permits, each with its own token, lease
//! and fence; waiters are served in arrival order. [`lock_many`](Semaphore::lock_many) takes
//! several permits as one.
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let slots = client.semaphore("gpu-slots", 16)?;
//! let four = slots.lock_many(4).await?; // 4 of 16 at once, in line order
//! four.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! ## Multi-lock
//!
//! [`Client::multi_lock`] holds several names, all or none, and never waits holding a part,
//! so two callers naming them in opposite orders cannot deadlock. Each name has its own
//! fence ([`MultiGuard`]).
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let guard = client.multi_lock(&["account:42", "account:17"])?.lock().await?;
//! for (account, fence) in guard.fences().await? {
//!     println!("{account}: {fence}");
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! ## Guarded writes
//!
//! [`Guard::apply`] runs a [`Guarded`] batch of commands on data kept beside the lock in one
//! script that first checks the hold: once the hold is gone, nothing is applied and the
//! call fails with [`Error::Lost`], so Redis itself refuses a paused holder's late write.
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let guard = client.mutex("account:42")?.lock().await?;
//! guard.apply(&dlock::Guarded::new().incr_by("balance", -30).rpush("history", "-30")).await?;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! ## Leader election
//!
//! [`Client::election`] gives an [`Election`]: one leader at a time, with a term (the grant's
//! fencing token) that grows with every new leader, a value anyone can read, and changes
//! pushed to observers ([`Election::observe`]).
//!
//! ```no_run
//! # async fn demo(client: dlock::Client) -> dlock::Result<()> {
//! let election = client.election("scheduler")?;
//! let leading = election.campaign("10.0.0.7:8080").await?; // waits until it leads
//! println!("leading in term {}", leading.term());
//! leading.resign().await?;
//! # Ok(()) }
//! ```
//!
//! ## Scheduled jobs
//!
//! [`LockOptions::hold_at_least`] keeps a lock held for a while after a short job ends, so
//! replicas whose timers fire later find it held; [`Guard::record_success`] and
//! [`Guard::last_success`] let a replica whose schedule is far off skip a job made lately.
//!
//! ## Blocking API
//!
//! ```no_run
//! # fn demo() -> dlock::Result<()> {
//! let client = dlock::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let guard = client.mutex("nightly-report")?.lock()?;
//! guard.unlock()?;
//! client.shutdown();
//! # Ok(()) }
//! ```
//!
//! # Deployments
//!
//! One server ([`Client::connect`], [`Client::builder`] for a prefix, timeouts and TLS), a
//! Redis Cluster ([`Client::cluster_builder`]) or a master under Sentinel
//! ([`Client::sentinel_builder`]) run every kind unchanged. [`LockOptions::replicas`] makes
//! every grant, extend and renewal wait for replica acknowledgement. [`Client::redlock`]
//! spans independent masters ([`Redlock`], the plain mutex only): a grant needs a majority,
//! and fences stay monotonic across quorums.
//!
//! ```no_run
//! # async fn demo() -> dlock::Result<()> {
//! let redlock = dlock::Client::redlock([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//!     "redis://10.0.0.3:6379",
//! ])
//! .await?;
//! let guard = redlock.mutex("billing:close-month")?.lock().await?;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! [`Error`] is one enum: [`Busy`](Error::Busy) and [`TimedOut`](Error::TimedOut) (someone
//! else holds it), [`Lost`](Error::Lost) (the token no longer holds the lock),
//! [`Connection`](Error::Connection) and [`NoQuorum`](Error::NoQuorum) (transient,
//! [`Error::is_transient`]), [`Refused`](Error::Refused) (an ACL, `maxmemory`, a read-only
//! replica: the server's own words), [`WrongType`](Error::WrongType) (another kind of lock or
//! other data on the name), [`InvalidArgument`](Error::InvalidArgument) (refused before
//! anything is sent; no input panics), and a few more.
//!
//! # The safety model in brief
//!
//! * While its lease is valid a lock has one holder (a semaphore of N, at most N); only the
//!   owner releases or extends; a crashed holder frees the lock when its lease ends.
//! * The holder's validity deadline is counted from before the request was sent, minus a
//!   drift allowance ([`drift_allowance`]), so it ends no later than the lease in Redis.
//! * Fences only grow: one counter per name, with the server's clock as a floor, so they keep
//!   growing across a restart without persistence too.
//! * It needs Redis 6.2 or newer ([`MIN_REDIS_VERSION`]), `maxmemory-policy noeviction`, and
//!   AOF `appendfsync always` for locks that survive a crash. Replication is asynchronous: a
//!   failover can grant a held lock again ([`LockOptions::replicas`] narrows that; it is not
//!   consensus). A holder paused past its lease is protected against only by fencing
//!   tokens or guarded writes.
//!
//! # Feature flags
//!
//! * `metrics`: records counters and histograms through the [`metrics`](https://docs.rs/metrics)
//!   facade (below). Off by default. Without it, every acquire, renewal failure, loss and
//!   release is still a `tracing` event naming the lock; the events that repeat what the
//!   caller is also told by a value or an error (a lost hold, a forced release, too few
//!   replicas) have the target [`OUTCOME_TARGET`], so an application that reports them
//!   itself can leave them out of its log.
//!
//! # Metrics
//!
//! With the `metrics` feature dlock records (labels never carry lock names):
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `dlock_acquired_total`, `dlock_busy_total`, `dlock_timed_out_total` | `kind` | grants; single attempts that found the lock held; waits that used up their budget |
//! | `dlock_lost_total` | `reason` | holds that may have been lost (`expired`, `taken`, `released`) |
//! | `dlock_renew_failures_total`, `dlock_not_replicated_total` | | failed renewal calls; writes too few replicas acknowledged |
//! | `dlock_wait_seconds` (histogram) | `kind` | first attempt to grant |
//! | `dlock_hold_seconds` (histogram) | `kind`, `outcome` | from the guard's start to its unlock or drop (`released`), or to the loss (`lost`); a hold handed on with `into_token` is not counted |
//! | `dlock_renew_lag_seconds` (histogram) | | how late a renewal's reply came against its schedule (a third of the lease after the last) |
//! | `dlock_renew_margin_ratio` (histogram) | | the share of the lease left when a renewal's reply came |
//! | `dlock_lost_signal_seconds` (histogram) | `reason` | from a loss that came while [`Guard::lost`] (or a [`LostSignal`]) waited, to the waiter woken; once per hold |
//! | `dlock_waiters` (gauge) | `kind` | this process's acquires that found the lock held and wait now |
//! | `dlock_waiters_per_lock` (histogram) | `kind` | this process's waiters on the same lock, each time one starts to wait |
//!
//! Each is described to the recorder (help text, and the unit where it has one) when the
//! first of them is recorded, so install the recorder before taking locks.
//! `examples/prometheus.rs` serves them to Prometheus; `dlock inspect --prometheus` reports
//! each lock's holders, lease, queue and fence from Redis itself.
//!
//! # Further reading
//!
//! The repository's `docs/` directory is the guide, in reading order (start at
//! `docs/README.md`): the library guide (every option of every kind), the command line,
//! deployments, operations (inspection, Prometheus, a least-privilege ACL user), the full
//! safety model with the fault-injection and model-checking evidence, and the storage format
//! (interoperability with redis-py, redsync and node-redlock).

#![warn(missing_docs)]

mod any;
mod backend;
pub mod blocking;
mod catalog;
mod client;
mod duration_text;
mod election;
mod error;
mod guard;
mod guarded;
pub mod inspect;
mod keys;
pub mod kind;
mod lease;
mod lock;
pub mod multi;
pub mod mutex;
mod notifier;
mod observe;
mod options;
mod queue;
mod raw;
mod redact;
pub mod redlock;
pub mod reentrant;
mod renew;
mod resend_check;
pub mod rwlock;
mod script;
pub mod semaphore;
mod session;
mod signal;
mod success;
mod wait;

pub use any::{AnyGuard, AnyKind, AnyLock};
pub use backend::MIN_REDIS_VERSION;
#[doc(hidden)]
pub use catalog::{__library_scripts, __lock_names, __scripts};
pub use client::{
    Client, ClientBuilder, RawConnection, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
    MAX_HOLDER_LABEL, MAX_TIMEOUT,
};
pub use duration_text::humane;
pub use election::{Election, Leader, Leadership, Observer};
pub use error::{Error, Result};
pub use guard::Guard;
pub use guarded::{Guarded, GUARDED_COMMANDS, MAX_GUARDED_ARGS};
pub use inspect::{Holder, LockInfo, LockKind};
pub use keys::{check_name, companion_owner, MAX_NAME_LEN};
pub use lease::{drift_allowance, MAX_TTL, MIN_TTL};
pub use lock::Lock;
pub use multi::{MultiGuard, MultiLock, MAX_MULTI_NAMES};
pub use mutex::{Mutex, MutexGuard};
pub use observe::OUTCOME_TARGET;
pub use options::{
    Backoff, LockOptions, Renewal, Replicas, Wait, DEFAULT_TTL, DEFAULT_WAITER_LEASE, MAX_BACKOFF,
    MAX_REPLICAS, MIN_WAITER_LEASE,
};
pub use raw::RawLock;
pub use redact::redact as redact_url;
/// The `redis` crate dlock is built on, for commands of your own over
/// [`Client::connection`] (`dlock::redis::cmd(..)`) without a dependency of your own.
pub use redis;
pub use redlock::{
    MasterView, Redlock, RedlockBuilder, RedlockGuard, RedlockInfo, RedlockMutex, RedlockStats,
};
pub use reentrant::{Owner, ReentrantGuard, ReentrantMutex};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
#[doc(hidden)]
pub use script::LibraryScript;
pub use semaphore::{Semaphore, SemaphorePermit};
pub use session::{token_tag_and_random, LostHolds, Session};
pub use signal::{LostHold, LostReason, LostSignal};
pub use success::{Success, MAX_SUCCESS_MEMORY, SUCCESS_RECORD};

/// A test hook, not part of the API: runs every script twice and checks the second run
/// changes nothing (see `tests/resend.rs`).
#[doc(hidden)]
pub mod __resend_check {
    pub use crate::client::probe;
    pub use crate::resend_check::{enable, report, Report};
}

/// The README's Rust snippets, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeSnippets;

/// The registry README's example (this package's README.md, which crates.io shows),
/// compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct RegistryReadmeSnippets;

/// The library guide's Rust snippets (`docs/library.md`), compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryGuideSnippets;

/// The deployments guide's Rust snippets (`docs/deployments.md`), compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/deployments.md")]
pub struct DeploymentsGuideSnippets;
