//! # dlock: distributed locks on Redis
//!
//! Processes on many machines coordinate through locks kept in Redis. Every grant carries a
//! random 128-bit token (only the owner may release or extend), a lease (a crashed holder
//! frees the lock when it runs out), a local validity deadline, and a **fencing token**
//! that is strictly larger than every earlier grant's, for storage that must reject
//! writes from a holder that paused past its lease.
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
//! # Ok(()) }
//! ```
//!
//! See the README for the safety model: what is guaranteed, under which Redis settings,
//! and where it ends.
//!
//! Observability: every acquire, renewal failure, loss and release is a `tracing` event
//! naming the lock (those the caller is also told of by a value, such as a lost hold,
//! under the target [`OUTCOME_TARGET`]). With the `metrics` feature dlock also records, through the `metrics`
//! facade (labels never carry lock names):
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
