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
//!         println!("running the report with fencing token {}", guard.fence());
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

#![warn(missing_docs)]

pub mod blocking;
mod client;
mod error;
mod guard;
mod keys;
mod lease;
pub mod mutex;
mod options;
mod queue;
pub mod reentrant;
mod renew;
pub mod rwlock;
pub mod semaphore;
mod wait;

pub use client::{Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};
pub use error::{Error, Result};
pub use keys::MAX_NAME_LEN;
pub use lease::{drift_allowance, LostReason, LostSignal, MAX_TTL, MIN_TTL};
pub use mutex::{Mutex, MutexGuard};
pub use options::{LockOptions, Renewal, DEFAULT_TTL, DEFAULT_WAITER_LEASE};
pub use reentrant::{Owner, ReentrantGuard, ReentrantMutex};
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use wait::{Backoff, Wait};
