//! The semaphore: at most N holders at once, each with its own permit.
//!
//! Permits live in a sorted set at the semaphore's key: member = the permit's token, score
//! = the end of its lease by Redis's clock. Every permit has its own token, lease, renewal
//! and fencing token; a permit whose lease ended is reclaimed by the next acquire. Waiters
//! queue in arrival order and a freed permit wakes only the next one.
//!
//! N is not stored: each acquire checks the live permits against the N of the caller.
//! Clients that open the same semaphore with different N each enforce their own: one with
//! N = 5 may take a fifth permit while one with N = 3 waits until fewer than three are
//! held. Keep N in shared configuration.

use std::sync::LazyLock;
use std::time::Instant;

use redis::Script;

use crate::client::{Client, RunScript};
use crate::error::{Error, Result};
use crate::guard::GuardCore;
use crate::keys::LockKeys;
use crate::lease::{self, Grant};
use crate::options::LockOptions;
use crate::queue::{busy_remaining, wait_in_line, QueueKeys};
use crate::renew::OwnerField;
use crate::wait::{Attempt, Wait};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../queue/queue.lua"),
        include_str!("acquire.lua")
    ))
});
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../queue/queue.lua"),
        include_str!("release.lua")
    ))
});

/// Most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A named distributed semaphore with `N` permits. Made by [`Client::semaphore`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// let gpus = client.semaphore("gpu-pool", 4)?;
/// let permit = gpus.acquire().await?;      // at most 4 holders at once
/// println!("permit fence {}", permit.fence());
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: Client,
    keys: LockKeys,
    permits: u32,
    options: LockOptions,
    queue: QueueKeys,
    fences: String,
}

impl Semaphore {
    pub(crate) fn new(
        client: Client,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        options.validate()?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidArgument(format!(
                "a semaphore needs between 1 and {MAX_PERMITS} permits, not {permits}"
            )));
        }
        let keys = LockKeys::new(client.prefix(), name)?;
        Ok(Semaphore {
            queue: QueueKeys::new(&keys),
            fences: keys.companion("permit-fences"),
            client,
            keys,
            permits,
            options,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// N, the number of permits this client allows.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// One attempt to take a permit; [`Error::Busy`] when all are held or others are
    /// queued ahead.
    pub async fn try_acquire(&self) -> Result<SemaphorePermit> {
        let token = lease::new_token();
        match self.attempt(&token, false).await? {
            Attempt::Granted(grant) => Ok(self.permit(grant)),
            Attempt::Busy { remaining } => Err(Error::Busy {
                name: self.keys.name.clone(),
                remaining,
            }),
        }
    }

    /// Takes a permit, waiting in arrival order per the wait policy.
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        if self.options.wait == Wait::NoWait {
            return self.try_acquire().await;
        }
        let token = lease::new_token();
        let grant = wait_in_line(
            &self.client,
            &self.queue,
            &self.keys.name,
            &token,
            &self.options,
            || self.attempt(&token, true),
        )
        .await?;
        Ok(self.permit(grant))
    }

    /// Gives back the permit held with `token`; [`Error::Lost`] when its lease had ended.
    pub async fn release_token(&self, token: &str) -> Result<()> {
        let outcome: i64 = RELEASE
            .key(&self.keys.key)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(&self.fences)
            .arg(token)
            .arg(&self.queue.wake_prefix)
            .run(&self.client)
            .await?;
        match outcome {
            1 => Ok(()),
            0 => Err(Error::Lost {
                name: self.keys.name.clone(),
            }),
            _ => Err(self.wrong_type(&self.keys.key)),
        }
    }

    /// The number of permits held now (leases still running).
    pub async fn held(&self) -> Result<u32> {
        let now: (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.client.conn())
            .await?;
        let now_ms = now.0 * 1000 + now.1 / 1000;
        let count: u32 = redis::cmd("ZCOUNT")
            .arg(&self.keys.key)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .query_async(&mut self.client.conn())
            .await
            .map_err(|err| match err.code() {
                Some("WRONGTYPE") => self.wrong_type(&self.keys.key),
                _ => err.into(),
            })?;
        Ok(count)
    }

    /// One acquire; takes (or refreshes) a place in the queue when `queue` is set and no
    /// permit is granted.
    async fn attempt(&self, token: &str, queue: bool) -> Result<Attempt<Grant>> {
        let sent = Instant::now();
        let reply: Vec<i64> = ACQUIRE
            .key(&self.keys.key)
            .key(&self.keys.fence)
            .key(&self.queue.queue)
            .key(&self.queue.leases)
            .key(&self.fences)
            .arg(token)
            .arg(self.options.ttl.as_millis() as u64)
            .arg(self.permits)
            .arg(self.options.waiter_lease.as_millis() as u64)
            .arg(&self.queue.wake_prefix)
            .arg(if queue { "1" } else { "0" })
            .run(&self.client)
            .await?;
        match reply.as_slice() {
            [1, fence] => Ok(Attempt::Granted(Grant {
                token: token.to_string(),
                fence: *fence as u64,
                sent,
            })),
            [0, ..] => Ok(Attempt::Busy {
                remaining: busy_remaining(&reply),
            }),
            [-1, 2] => Err(self.wrong_type(&self.keys.fence)),
            _ => Err(self.wrong_type(&self.keys.key)),
        }
    }

    fn permit(&self, grant: Grant) -> SemaphorePermit {
        let semaphore = self.clone();
        let release = move |token: String| {
            let semaphore = semaphore.clone();
            async move { semaphore.release_token(&token).await }
        };
        SemaphorePermit {
            name: self.keys.name.clone(),
            core: GuardCore::start(
                &self.client,
                grant,
                &self.keys.key,
                OwnerField::SortedSetMember,
                &self.options,
                release,
            ),
        }
    }

    fn wrong_type(&self, key: &str) -> Error {
        Error::WrongType {
            key: key.to_string(),
            what: if key == self.keys.key {
                "expected a sorted set of dlock semaphore permits".into()
            } else {
                "expected an integer fencing counter".into()
            },
        }
    }
}

/// One permit of a [`Semaphore`]. Dropping it without [`SemaphorePermit::release`] gives
/// it back in the background.
#[derive(Debug)]
pub struct SemaphorePermit {
    name: String,
    core: GuardCore,
}

impl SemaphorePermit {
    crate::guard::hold_accessors!("permit");

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This permit's fencing token (from the semaphore's counter, larger than every
    /// earlier permit's).
    pub fn fence(&self) -> u64 {
        self.core.fence()
    }

    /// Gives the permit back (stopping renewal first); [`Error::Lost`] when its lease had
    /// already ended.
    pub async fn release(self) -> Result<()> {
        self.core.unlock().await
    }
}
