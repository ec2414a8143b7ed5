//! The semaphore: at most N holders at once, each with its own permit.
//!
//! Permits live in a hash at the semaphore's key, one leased entry per permit (see
//! `entries.lua`): `h:<permit token> = '<end of its lease, server ms>|<fence>'`. Every
//! permit has its own token, lease, renewal and fencing token; a permit whose lease ended
//! is reclaimed by the next acquire, and the hash expires with its last lease. Waiters
//! queue in arrival order and a freed permit wakes only the next one.
//!
//! N is not stored: each acquire checks the live permits against the N of the caller.
//! Clients that open the same semaphore with different N each enforce their own: one with
//! N = 5 may take a fifth permit while one with N = 3 waits until fewer than three are
//! held. Keep N in shared configuration.

use std::sync::LazyLock;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::options::LockOptions;
use crate::queue::QueueKeys;
use crate::raw::{private::OnOneServer, Attempt, HoldKind, LockCore, Waiting};
use crate::script::{lua_script, LuaScript};
use crate::wait::acquire;

static ACQUIRE: LazyLock<LuaScript> = lua_script!(
    grant "semaphore acquire",
    "queue/queue.lua",
    "entries.lua",
    "semaphore/acquire.lua"
);
static RELEASE: LazyLock<LuaScript> = lua_script!(
    "semaphore release",
    "queue/queue.lua",
    "entries.lua",
    "semaphore/release.lua"
);

/// Most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// One permit of a [`Semaphore`]. See [`Guard`] for what every guard does.
pub type SemaphorePermit = Guard<Semaphore>;

/// A named distributed semaphore with `N` permits. Made by [`Client::semaphore`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// let gpus = client.semaphore("gpu-pool", 4)?;
/// let permit = gpus.acquire().await?;      // at most 4 holders at once
/// println!("permit fence {}", permit.fence().await?);
/// permit.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    core: LockCore,
    permits: u32,
    queue: QueueKeys,
}

impl Semaphore {
    pub(crate) fn new(
        client: Client,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        let core = LockCore::new(client, name, options)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidArgument(format!(
                "a semaphore needs between 1 and {MAX_PERMITS} permits, not {permits}"
            )));
        }
        Ok(Semaphore {
            queue: QueueKeys::new(&core.keys),
            core,
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.core.keys.name
    }

    /// N, the number of permits this client allows.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// One attempt to take a permit; [`Error::Busy`] when all are held or others are
    /// queued ahead.
    pub async fn try_acquire(&self) -> Result<SemaphorePermit> {
        acquire(self, crate::Wait::NoWait).await
    }

    /// Takes a permit, waiting in arrival order per the wait policy. Cancel-safe: a
    /// dropped wait gives back its queue place (and a permit that may have been granted).
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        acquire(self, self.core.options.wait).await
    }

    /// Gives back the permit held with `token`; [`Error::Lost`] when its lease had ended.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        let released: i64 = RELEASE
            .call()
            .key(&self.core.keys.key)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .arg(token)
            .arg(&self.queue.wake_prefix)
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

    /// Resets the lease of the permit held with `token` to `ttl`; [`Error::Lost`] when its
    /// lease had ended.
    pub async fn extend_token(&self, token: &str, ttl: std::time::Duration) -> Result<()> {
        crate::raw::extend_on_server(self, token, ttl).await
    }

    /// The number of permits held now (leases still running).
    pub async fn held(&self) -> Result<u32> {
        Ok(self
            .core
            .client
            .leased_entries(&self.core.keys.key, "semaphore", false)
            .await?
            .len() as u32)
    }
}

impl OnOneServer for Semaphore {
    const HOLD: HoldKind = HoldKind::Entry;

    fn core(&self) -> &LockCore {
        &self.core
    }

    fn kind_name(&self) -> &'static str {
        "semaphore"
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Queue(&self.queue)
    }

    async fn attempt(&self, token: &str, join_queue: bool) -> Result<Attempt> {
        let reply: Vec<i64> = ACQUIRE
            .call()
            .key(&self.core.keys.key)
            .key(&self.core.keys.fence)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .arg(token)
            .arg(self.core.options.ttl.as_millis() as u64)
            .arg(self.permits)
            .arg(self.core.options.waiter_lease.as_millis() as u64)
            .arg(&self.queue.wake_prefix)
            .arg(if join_queue { "1" } else { "0" })
            .run(&self.core.client)
            .await?;
        Attempt::from_reply(&reply)
    }

    async fn release(&self, token: &str) -> Result<()> {
        self.release_token(token).await
    }
}

impl Client {
    /// A semaphore named `name` allowing `permits` holders at once, with default options
    /// (30 s permit leases renewed automatically, wait forever).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name, permits, LockOptions::default())
    }

    /// A semaphore with the given options.
    pub fn semaphore_with(
        &self,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name, permits, options)
    }
}
