//! The semaphore: at most N holders at once, each with its own permit.
//!
//! Permits live in a hash at the semaphore's key, one leased entry per permit (see
//! `entries.lua`): `h:<permit token> = '<end of its lease, server ms>|<fence>'`. Every
//! permit has its own token, lease, renewal and fencing token; a permit whose lease ended
//! is reclaimed by the next acquire, and the hash expires with its last lease. Waiters
//! queue in arrival order, and a freed permit is handed directly to the next one (judged
//! by that waiter's own N, named in its token).
//!
//! A permit may be worth k of the N permits ([`Semaphore::lock_many`]): still one entry,
//! under a token ending in `~w<k>`, and the hash keeps `~extra`, the sum of k - 1 over
//! such permits, so the weight held is read in O(1) (see `permits.lua`). Without weighted
//! permits the hash is exactly as above. Waiters are granted in strict queue order: a
//! waiter is granted only when it fits together with everyone ahead of it.
//!
//! N is not stored: each acquire checks the live permits against the N of the caller.
//! Clients that open the same semaphore with different N each enforce their own: one with
//! N = 5 may take a fifth permit while one with N = 3 waits until fewer than three are
//! held. Keep N in shared configuration.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::lock::Lock;
use crate::options::{LockOptions, Wait};
use crate::queue::QueueKeys;
use crate::raw::{on_one_server, private::KindProtocol, Attempt, HoldKind, LockCore, Waiting};
use crate::script::ScriptCall;

pub(crate) mod scripts;
use scripts::{SemaphoreAcquire, SemaphoreRelease};

/// Most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A named distributed semaphore with `N` permits: the one [`Lock`] handle over the
/// semaphore's protocol, each [`lock`](Lock::lock) taking one permit. Made by
/// [`Client::semaphore`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// let gpus = client.semaphore("gpu-pool", 4)?;
/// let permit = gpus.lock().await?;         // at most 4 holders at once
/// println!("permit fence {}", permit.fence().await?);
/// permit.unlock().await?;
/// # Ok(()) }
/// ```
pub type Semaphore = Lock<RawSemaphore>;

/// The protocol of the semaphore: the kind of a [`Semaphore`] handle and its
/// [`SemaphorePermit`]s.
#[derive(Debug, Clone)]
pub struct RawSemaphore {
    core: LockCore,
    permits: u32,
    queue: QueueKeys,
}

/// One permit of a [`Semaphore`], worth [`weight`](Guard::weight) of its N permits (1
/// but from [`lock_many`](Semaphore::lock_many)). See [`Guard`] for what every guard does.
pub type SemaphorePermit = Guard<RawSemaphore>;

/// How many permits the semaphore token `token` takes: k for a token ending in `~w<k>`
/// (see [`Semaphore::lock_many`]), else 1. What [`Holder::weight`](crate::Holder::weight)
/// reports.
pub(crate) fn permit_weight(token: &str) -> u32 {
    token
        .rsplit_once("~w")
        .and_then(|(_, k)| k.parse().ok())
        .filter(|k| *k > 0)
        .unwrap_or(1)
}

impl RawSemaphore {
    fn new(client: Client, name: &str, permits: u32, options: LockOptions) -> Result<Semaphore> {
        let core = LockCore::new(client, name, options)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidArgument(format!(
                "a semaphore needs between 1 and {MAX_PERMITS} permits, not {permits}"
            )));
        }
        Ok(Lock::of(RawSemaphore {
            queue: scripts::permit_queue(&core.keys, permits),
            core,
            permits,
        }))
    }

    /// Gives back the permit held with `token`; [`Error::Lost`] when its lease had ended.
    async fn release_permit(&self, token: &str) -> Result<()> {
        let released = SemaphoreRelease {
            keys: &self.core.keys,
            queue: &self.queue,
            token,
            permits: self.permits,
        }
        .run(&self.core.client)
        .await?;
        match released {
            1 => Ok(()),
            0 => Err(Error::Lost {
                name: self.core.keys.name.clone(),
            }),
            other => Err(Error::unexpected_reply(other)),
        }
    }
}

impl Lock<RawSemaphore> {
    /// N, the number of permits this client allows.
    pub fn permits(&self) -> u32 {
        self.raw.permits
    }

    /// How many permits each [`lock`](Lock::lock) of this handle takes: 1, or k for a
    /// handle made by [`taking(k)`](Self::taking).
    pub fn weight(&self) -> u32 {
        self.raw.queue.weight
    }

    /// The number of permits held now (leases still running), a permit from
    /// [`lock_many(k)`](Self::lock_many) counting k.
    pub async fn held(&self) -> Result<u32> {
        let core = &self.raw.core;
        Ok(core
            .client
            .leased_entries(&core.keys.key, "semaphore", false)
            .await?
            .iter()
            .map(|(token, _)| permit_weight(token))
            .sum())
    }

    /// A handle on the same semaphore whose every acquisition ([`lock`](Lock::lock),
    /// [`try_lock`](Lock::try_lock), [`lock_with`](Lock::lock_with),
    /// [`with_lock`](Lock::with_lock)) takes `k` permits at once, as one
    /// [`SemaphorePermit`]. [`Error::InvalidArgument`] when `k` is 0 or more than N.
    pub fn taking(&self, k: u32) -> Result<Semaphore> {
        if k == 0 || k > self.raw.permits {
            return Err(Error::InvalidArgument(format!(
                "cannot take {k} permits of semaphore {:?}, which has {}: take between 1 and {}",
                self.raw.core.keys.name, self.raw.permits, self.raw.permits
            )));
        }
        let mut raw = self.raw.clone();
        raw.queue.weight = k;
        Ok(Lock::of(raw))
    }

    /// Takes `k` of the N permits at once (tokio's `acquire_many`), waiting per the
    /// options' [`Wait`]: ONE [`SemaphorePermit`] (one token, lease, renewal and fencing
    /// token) worth `k`, given back whole by [`unlock`](Guard::unlock) or drop.
    ///
    /// Granted when `k` permits are free and every waiter ahead of it in line is granted
    /// too: in strict arrival order, so a large request first in line is not starved by a
    /// stream of small ones (they queue behind it). Every client counts the weight (it is
    /// stored with the permit), each against its own N. Fails with
    /// [`Error::InvalidArgument`], before any request, when `k` is 0 or more than N.
    /// Cancel-safe like [`lock`](Lock::lock).
    ///
    /// All clients using weights on one semaphore must be of a dlock that knows them: an
    /// older one counts a weighted permit as one.
    ///
    /// ```no_run
    /// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
    /// let gpus = client.semaphore("gpu-slots", 16)?;
    /// let four = gpus.lock_many(4).await?; // 4 of the 16 slots, one permit
    /// assert_eq!(four.weight(), 4);
    /// println!("fence {}", four.fence().await?);
    /// assert!(gpus.held().await? >= 4);
    /// four.unlock().await?; // all 4 back at once
    /// # Ok(()) }
    /// ```
    pub async fn lock_many(&self, k: u32) -> Result<SemaphorePermit> {
        self.taking(k)?.lock().await
    }

    /// One attempt at `k` permits, as [`try_lock`](Lock::try_lock):
    /// [`Error::Busy`] unless `k` are free with nobody queued ahead.
    pub async fn try_lock_many(&self, k: u32) -> Result<SemaphorePermit> {
        self.taking(k)?.try_lock().await
    }

    /// Takes `k` permits like [`lock_many`](Self::lock_many), waiting per `wait` for this
    /// call only.
    pub async fn lock_many_with(&self, k: u32, wait: Wait) -> Result<SemaphorePermit> {
        self.taking(k)?.lock_with(wait).await
    }
}

impl Guard<RawSemaphore> {
    /// How many of the semaphore's permits this permit is worth (k from
    /// [`lock_many(k)`](Semaphore::lock_many), else 1).
    pub fn weight(&self) -> u32 {
        self.raw.queue.weight
    }
}

impl KindProtocol for RawSemaphore {
    fn kind_name(&self) -> &'static str {
        crate::kind::SEMAPHORE
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Queue(&self.queue)
    }

    async fn attempt(&self, token: &str, join_queue: bool) -> Result<Attempt> {
        let reply = SemaphoreAcquire {
            keys: &self.core.keys,
            queue: &self.queue,
            token,
            lease_ms: self.core.options.kept_ms(),
            permits: self.permits,
            waiter_lease_ms: self.core.options.waiter_lease.as_millis() as u64,
            join_queue,
        }
        .run(&self.core.client)
        .await?;
        Attempt::from_reply(&reply)
    }

    fn release(&self, token: &str) -> impl std::future::Future<Output = Result<()>> + Send {
        self.release_permit(token)
    }
}

on_one_server!(RawSemaphore, hold: HoldKind::Entry, core: core);

impl Client {
    /// A semaphore named `name` allowing `permits` holders at once, with default options
    /// (30 s permit leases renewed automatically, wait forever).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        RawSemaphore::new(self.clone(), name, permits, LockOptions::default())
    }

    /// A semaphore with the given options.
    pub fn semaphore_with(
        &self,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        RawSemaphore::new(self.clone(), name, permits, options)
    }
}
