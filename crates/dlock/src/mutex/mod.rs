//! The distributed mutex and its fair (FIFO) variant.
//!
//! The plain mutex acquires with the raw `SET key token NX PX lease` (a script runs only
//! when the key is taken) and draws its fencing token on first read, while held
//! (`fence.lua`; or with the grant, with [`LockOptions::fence_at_grant`]). See
//! `docs/decisions.md` for the measurements behind that.
//!
//! Storage: the lock key holds the owner's token as a plain string with a PX expiry — the
//! format of redis-py's `Lock`, redsync and node-redlock, so those clients and dlock exclude
//! each other on the same key. The fencing counter lives beside it (same hash slot), never
//! expires and only grows. The fair mutex adds a queue of leased waiter places.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::queue::QueueKeys;
use crate::raw::{on_one_server, private::KindProtocol, Attempt, HoldKind, LockCore, Waiting};
use crate::script::ScriptCall;

pub(crate) mod scripts;
use scripts::{FairAcquire, FairRelease};
pub(crate) use scripts::{MutexAcquire, MutexRelease};

/// A named distributed mutex: the one [`Lock`] handle over the mutex's protocol. Cheap to
/// clone; made by [`Client::mutex`] (or [`Client::fair_mutex`] for FIFO order).
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use std::time::Duration;
/// use dlock::{LockOptions, Wait};
///
/// let mutex = client.mutex_with(
///     "accounts:42:migrate",
///     LockOptions::default().renewed(Duration::from_secs(10)).wait(Wait::Timeout(Duration::from_secs(5))),
/// )?;
/// let guard = mutex.lock().await?;
/// let fence = guard.fence().await?; // drawn now, while held (one round trip)
/// // ... work, passing `fence` to the storage you write to; the lease is renewed
/// // meanwhile and guard.lost() resolves if the lock is lost ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type Mutex = Lock<RawMutex>;

/// The protocol of the plain or fair mutex: the kind of a [`Mutex`] handle and its
/// [`MutexGuard`].
#[derive(Debug, Clone)]
pub struct RawMutex {
    core: LockCore,
    /// The waiter queue of a fair mutex; `None` for the plain one.
    queue: Option<QueueKeys>,
}

/// Proof of holding a [`Mutex`] (plain or fair). See [`Guard`] for what every guard does.
pub type MutexGuard = Guard<RawMutex>;

impl RawMutex {
    fn new(client: Client, name: &str, options: LockOptions) -> Result<RawMutex> {
        Ok(RawMutex {
            core: LockCore::new(client, name, options)?,
            queue: None,
        })
    }

    /// A fair mutex: granted strictly in arrival order (see [`Client::fair_mutex`]).
    fn new_fair(client: Client, name: &str, options: LockOptions) -> Result<RawMutex> {
        let mut mutex = RawMutex::new(client, name, options)?;
        mutex.queue = Some(QueueKeys::new(&mutex.core.keys));
        Ok(mutex)
    }
}

impl Lock<RawMutex> {
    /// True for a fair (FIFO) mutex.
    pub fn is_fair(&self) -> bool {
        self.raw.queue.is_some()
    }

    /// The token that holds the lock now, if any (a plain `GET`; `None` when free).
    pub async fn holder(&self) -> Result<Option<String>> {
        let core = &self.raw.core;
        core.client.get_string(&core.keys.key, "string").await
    }

    /// The last fencing token drawn for this lock (0 when never drawn). A plain mutex
    /// holder that has not read its fence yet has not drawn one.
    pub async fn last_fence(&self) -> Result<u64> {
        let core = &self.raw.core;
        let value = core.client.get_string(&core.keys.fence, "counter").await?;
        match value {
            None => Ok(0),
            Some(text) => match text.parse() {
                Ok(fence) => Ok(fence),
                Err(_) => Err(core.client.wrong_type(&core.keys.fence, "counter").await),
            },
        }
    }
}

impl RawMutex {
    /// A guard's own release: its kind's script (the plain one is the raw
    /// compare-and-delete; the fair one hands the lock to the next in line).
    async fn release_hold(&self, token: &str) -> Result<()> {
        let released: i64 = match &self.queue {
            None => {
                let keys = &self.core.keys;
                MutexRelease { keys, token }.run(&self.core.client).await?
            }
            Some(queue) => {
                let keys = &self.core.keys;
                FairRelease { keys, queue, token }
                    .run(&self.core.client)
                    .await?
            }
        };
        self.released(released).await
    }

    /// Reads a release script's reply.
    async fn released(&self, released: i64) -> Result<()> {
        match released {
            1 => Ok(()),
            0 => Err(Error::Lost {
                name: self.core.keys.name.clone(),
            }),
            -1 => Err(self
                .core
                .client
                .wrong_type(&self.core.keys.key, "string")
                .await),
            other => Err(Error::unexpected_reply(other)),
        }
    }
}

impl RawMutex {
    /// The plain mutex's attempt. The fast path is the raw `SET key token NX PX lease`,
    /// the same single command as redis-py's `Lock` or redsync: no Lua and no fencing
    /// counter on the hot path (the fence is drawn on first read; see
    /// [`Guard::fence`]). Only when the key is taken does the slow-path script tell our
    /// own earlier grant (a resend), another holder and a key of another kind apart.
    async fn attempt_plain(&self, token: &str) -> Result<Attempt> {
        let ttl_ms = self.core.options.kept_ms();
        let client = &self.core.client;
        // With replica acknowledgement the fence is drawn with the grant, which the WAIT
        // covers: a fence drawn later, unacknowledged, could be lost in a failover and
        // handed out again.
        if self.core.options.fence_at_grant || self.core.options.replicas.is_some() {
            return self.acquire_script(token, ttl_ms, true).await;
        }
        let key = &self.core.keys.key;
        // Sized up front, as `Call::eval` sizes a script's: this is every free grant.
        let mut set = redis::Cmd::with_capacity(6, key.len() + token.len() + 32);
        set.arg("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        let granted: Option<redis::Value> = crate::script::resent_once("SET NX", None, || async {
            set.query_async(&mut client.conn()).await
        })
        .await
        .map_err(|err| Error::from_redis("SET NX", err))?;
        if granted.is_some() {
            return Ok(Attempt::Granted {
                fence: None,
                holds: 1,
            });
        }
        match self.acquire_script(token, ttl_ms, false).await {
            // A refused slow path (e.g. an ACL without EVALSHA) after a `SET` that was
            // resent: the first one may have granted. A plain GET tells; if the key holds
            // our token, it is our grant (its lease started after this attempt was sent).
            Err(err) if !err.is_transient() => {
                match client.get_string(&self.core.keys.key, "string").await {
                    Ok(Some(holder)) if holder == token => Ok(Attempt::Granted {
                        fence: None,
                        holds: 1,
                    }),
                    _ => Err(err),
                }
            }
            other => other,
        }
    }

    /// The acquire script (see acquire.lua), drawing the fence with a grant when `eager`.
    async fn acquire_script(&self, token: &str, ttl_ms: u64, eager: bool) -> Result<Attempt> {
        let reply = MutexAcquire {
            keys: &self.core.keys,
            token,
            lease_ms: ttl_ms,
            eager,
            tell_clock: false,
        }
        .run(&self.core.client)
        .await?;
        match &reply[..] {
            [-1] => Err(self
                .core
                .client
                .wrong_type(&self.core.keys.key, "string")
                .await),
            [-2] => Err(self
                .core
                .client
                .wrong_type(&self.core.keys.fence, "counter")
                .await),
            _ => Attempt::from_reply(&reply),
        }
    }
}

impl KindProtocol for RawMutex {
    fn kind_name(&self) -> &'static str {
        if self.queue.is_some() {
            crate::kind::FAIR
        } else {
            crate::kind::MUTEX
        }
    }

    fn waiting(&self) -> Waiting<'_> {
        match &self.queue {
            None => Waiting::Channel(&self.core.keys.channel),
            Some(queue) => Waiting::Queue(queue),
        }
    }

    async fn attempt(&self, token: &str, join_queue: bool) -> Result<Attempt> {
        let Some(queue) = &self.queue else {
            return self.attempt_plain(token).await;
        };
        let reply = FairAcquire {
            keys: &self.core.keys,
            queue,
            token,
            lease_ms: self.core.options.kept_ms(),
            waiter_lease_ms: self.core.options.waiter_lease.as_millis() as u64,
            join_queue,
        }
        .run(&self.core.client)
        .await?;
        Attempt::from_reply(&reply)
    }

    // The release's own future, not an `async fn` around it: every layer of future is
    // built and copied on every release.
    fn release(&self, token: &str) -> impl std::future::Future<Output = Result<()>> + Send {
        self.release_hold(token)
    }
}

on_one_server!(RawMutex, hold: HoldKind::String, core: core, releases_any_form: true);

impl Client {
    /// A mutex named `name` with default options (30 s lease renewed automatically,
    /// wait forever).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        Ok(Lock::of(RawMutex::new(
            self.clone(),
            name,
            LockOptions::default(),
        )?))
    }

    /// A mutex named `name` with the given options.
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Ok(Lock::of(RawMutex::new(self.clone(), name, options)?))
    }

    /// A fair mutex named `name` with default options: granted strictly in arrival order;
    /// a release hands the lock directly to the next waiter, which holds it without a
    /// command of its own. Same storage and guard as [`Client::mutex`].
    pub fn fair_mutex(&self, name: &str) -> Result<Mutex> {
        Ok(Lock::of(RawMutex::new_fair(
            self.clone(),
            name,
            LockOptions::default(),
        )?))
    }

    /// A fair mutex named `name` with the given options.
    pub fn fair_mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Ok(Lock::of(RawMutex::new_fair(self.clone(), name, options)?))
    }
}
