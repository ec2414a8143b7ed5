//! The raw protocol of a lock kind: what each primitive writes itself — its scripts and how
//! to read their replies. Everything else (waiting, retries, clean-up of cancelled waits,
//! the guard, renewal, the lost signal, release on drop, shutdown) is shared and lives in
//! [`wait`](crate::wait) and [`guard`](crate::guard), in the spirit of `lock_api`'s
//! `RawMutex` under `Mutex<R, T>`.

use std::future::Future;
use std::time::Duration;

use crate::client::Client;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::options::LockOptions;
use crate::queue::QueueKeys;
pub use crate::renew::HoldKind;

/// A kind of lock that [`Guard`](crate::Guard) can hold: the plain or fair
/// [`Mutex`](crate::Mutex), a [`ReentrantMutex`](crate::reentrant::ReentrantMutex) owner,
/// the read or write side of an [`RwLock`](crate::RwLock), a
/// [`Semaphore`](crate::Semaphore).
///
/// Sealed: it is implemented by dlock's primitives only.
pub trait RawLock: private::RawProtocol {}

impl<T: private::RawProtocol> RawLock for T {}

/// Room left between a `WAIT`'s timeout and the client's response timeout, for the round
/// trip around the wait.
const WAIT_MARGIN: Duration = Duration::from_millis(500);

/// What every kind of lock knows about the named lock it acts on.
#[derive(Debug, Clone)]
pub struct LockCore {
    pub(crate) client: Client,
    /// Shared by every clone (waits and guards clone their lock): no string copies.
    pub(crate) keys: std::sync::Arc<LockKeys>,
    pub(crate) options: LockOptions,
}

impl LockCore {
    /// Validates the name and options of a lock made from `client`.
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<LockCore> {
        options.validate()?;
        let keys = std::sync::Arc::new(LockKeys::new(client.prefix(), name)?);
        // A lock whose writes wait for replicas writes on the connection `WAIT` runs on.
        let client = match options.replicas {
            Some(replicas) => {
                let limit = client.response_timeout().saturating_sub(WAIT_MARGIN);
                if replicas.timeout > limit {
                    return Err(crate::Error::InvalidArgument(format!(
                        "the replica timeout {} must be at most {} (the client's response timeout {} less {}), or the response timeout would cut the WAIT off; shorten it or raise ClientBuilder::response_timeout",
                        crate::humane(replicas.timeout),
                        crate::humane(limit),
                        crate::humane(client.response_timeout()),
                        crate::humane(WAIT_MARGIN)
                    )));
                }
                client.acknowledging(replicas)
            }
            None => client,
        };
        Ok(LockCore {
            client,
            keys,
            options,
        })
    }
}

/// What one acquire attempt found.
#[derive(Debug)]
pub enum Attempt {
    /// Granted, with the fencing token when the kind draws it at grant (`None`: drawn
    /// lazily, on first read, while held — the plain mutex); `holds` is the owner's hold
    /// count (1 unless reentrant).
    Granted { fence: Option<u64>, holds: u32 },
    /// Held by others; `remaining` is the blocking lease when known.
    Busy { remaining: Option<Duration> },
}

impl Attempt {
    /// Reads the reply of an acquire script: `{1, fence[, holds]}` granted, `{1}` granted
    /// without a fence (drawn later), `{0, ms[, rank]}` busy (see
    /// [`crate::queue::busy_remaining`]).
    pub fn from_reply(reply: &[i64]) -> Result<Attempt> {
        match reply {
            [1] => Ok(Attempt::Granted {
                fence: None,
                holds: 1,
            }),
            [1, fence] if *fence > 0 => Ok(Attempt::Granted {
                fence: Some(*fence as u64),
                holds: 1,
            }),
            [1, fence, holds] if *fence > 0 && *holds > 0 => Ok(Attempt::Granted {
                fence: Some(*fence as u64),
                holds: u32::try_from(*holds).unwrap_or(u32::MAX),
            }),
            [0, ..] => Ok(Attempt::Busy {
                remaining: crate::queue::busy_remaining(reply),
            }),
            other => Err(crate::Error::unexpected_reply(other)),
        }
    }
}

/// Where the waiters of a lock kind are woken.
pub enum Waiting<'a> {
    /// On the lock's release channel, shared by its waiters (one is woken per release
    /// and client, or all on a broadcast).
    Channel(&'a str),
    /// In line: each waiter has a leased place in a queue and a wake channel of its own.
    Queue(&'a QueueKeys),
}

pub mod private {
    use super::*;

    /// The raw protocol of one lock kind. Every script is safe to run twice with the same
    /// token (see [`crate::script::Call::run`]).
    pub trait RawProtocol: Clone + Send + Sync + std::fmt::Debug + 'static {
        /// How a hold of this kind is recorded at the lock key, for renewal.
        const HOLD: HoldKind;
        /// The named lock this kind acts on.
        fn core(&self) -> &LockCore;
        /// The kind's name in logs and metrics: `mutex`, `fair`, `reentrant`, `read`,
        /// `write`, `semaphore`.
        fn kind_name(&self) -> &'static str;
        fn waiting(&self) -> Waiting<'_>;
        /// One attempt for the hold `token`; with `join_queue`, a queued kind takes (or
        /// refreshes) the waiter's place when not granted. A resend with the same token
        /// that finds the hold granted restarts its lease and answers `Granted` again.
        fn attempt(
            &self,
            token: &str,
            join_queue: bool,
        ) -> impl Future<Output = Result<Attempt>> + Send;
        /// Gives the hold back; [`crate::Error::Lost`] when it was not held (nothing else
        /// is touched).
        fn release(&self, token: &str) -> impl Future<Output = Result<()>> + Send;

        fn client(&self) -> &Client {
            &self.core().client
        }

        /// The lock name (without prefix).
        fn name(&self) -> &str {
            &self.core().keys.name
        }

        fn options(&self) -> &LockOptions {
            &self.core().options
        }

        /// The key every hold lives in (the lock key), and how.
        fn hold_key(&self) -> (&str, HoldKind) {
            (&self.core().keys.key, Self::HOLD)
        }
    }
}
