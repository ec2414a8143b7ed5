//! The read-write lock: many readers or one writer, with every reader tracked on its own.
//!
//! The common single-hash recipe that stores one `read` timestamp is wrong: readers
//! overwrite each other's lease and one reader's release or expiry can strand another.
//! Here each reader owner has its own entry (lease, hold count, fencing token) in a sorted
//! set, so a release or expiry removes only that reader's hold. A writer waits while any
//! valid reader holds; once a writer waits (a leased place in the writer queue), new
//! readers wait behind it, so a stream of readers cannot starve writers. The same owner may
//! re-enter a read lock (even while a writer waits), and a writer may downgrade to a read
//! hold without a gap. All keys share one hash slot.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;

use crate::client::{Client, RunScript};
use crate::error::{Error, Result};
use crate::guard::GuardCore;
use crate::keys::LockKeys;
use crate::lease::{self, Grant};
use crate::options::LockOptions;
use crate::queue::{busy_remaining, wait_in_line, QueueKeys};
use crate::reentrant::Owner;
use crate::renew::OwnerField;
use crate::wait::{acquire_waiting, Attempt, Wait};

macro_rules! rw_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../queue/queue.lua"),
                include_str!("readers.lua"),
                include_str!($file)
            ))
        })
    };
}

static WRITE_ACQUIRE: LazyLock<Script> = rw_script!("write_acquire.lua");
static WRITE_RELEASE: LazyLock<Script> = rw_script!("write_release.lua");
static READ_ACQUIRE: LazyLock<Script> = rw_script!("read_acquire.lua");
static READ_RELEASE: LazyLock<Script> = rw_script!("read_release.lua");
static DOWNGRADE: LazyLock<Script> = rw_script!("downgrade.lua");

/// A named distributed read-write lock. Made by [`Client::rwlock`].
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// use dlock::Owner;
/// let config = client.rwlock("shared-config")?;
/// let me = Owner::new();
/// let read = config.read(&me).await?;        // many readers at once
/// read.unlock().await?;
/// let write = config.write().await?;         // one writer, no readers
/// let read = write.downgrade(&me).await?;    // keep reading, let other readers in
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    client: Client,
    keys: LockKeys,
    options: LockOptions,
    readers: String,
    reads: String,
    writers: QueueKeys,
}

/// What a read grant returned.
struct ReadGrant {
    grant: Grant,
    holds: u32,
}

impl RwLock {
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<RwLock> {
        options.validate()?;
        let keys = LockKeys::new(client.prefix(), name)?;
        Ok(RwLock {
            readers: keys.companion("readers"),
            reads: keys.companion("reads"),
            writers: QueueKeys {
                // A writer that gives up waiting may be the last one holding readers back.
                on_empty: Some(keys.channel.clone()),
                ..QueueKeys::new(&keys)
            },
            client,
            keys,
            options,
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    fn invoke<'a>(&'a self, script: &'a Script) -> redis::ScriptInvocation<'a> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.keys.key)
            .key(&self.keys.fence)
            .key(&self.readers)
            .key(&self.reads)
            .key(&self.writers.queue)
            .key(&self.writers.leases);
        invocation
    }

    /// One attempt to take a read hold for `owner`.
    pub async fn try_read(&self, owner: &Owner) -> Result<ReadGuard> {
        let request = lease::new_token();
        match self.read_attempt(owner, &request).await? {
            Attempt::Granted(grant) => Ok(self.read_guard(owner, grant)),
            Attempt::Busy { remaining } => Err(self.busy(remaining)),
        }
    }

    /// Takes a read hold for `owner`, waiting per the wait policy. Readers waiting for a
    /// writer are all woken by its release.
    pub async fn read(&self, owner: &Owner) -> Result<ReadGuard> {
        let request = lease::new_token();
        let grant = acquire_waiting(
            &self.client,
            &self.keys.name,
            &self.keys.channel,
            self.options.wait,
            self.options.backoff,
            self.options.backoff.max.max(self.options.waiter_lease / 3),
            || self.read_attempt(owner, &request),
        )
        .await?;
        Ok(self.read_guard(owner, grant))
    }

    /// One attempt to take the write lock.
    pub async fn try_write(&self) -> Result<WriteGuard> {
        let token = lease::new_token();
        match self.write_attempt(&token, false).await? {
            Attempt::Granted(grant) => Ok(self.write_guard(grant)),
            Attempt::Busy { remaining } => Err(self.busy(remaining)),
        }
    }

    /// Takes the write lock, waiting per the wait policy. While it waits, new readers wait
    /// behind it; it is woken alone when the last reader or the previous writer leaves.
    pub async fn write(&self) -> Result<WriteGuard> {
        if self.options.wait == Wait::NoWait {
            return self.try_write().await;
        }
        let token = lease::new_token();
        let grant = wait_in_line(
            &self.client,
            &self.writers,
            &self.keys.name,
            &token,
            &self.options,
            || self.write_attempt(&token, true),
        )
        .await?;
        Ok(self.write_guard(grant))
    }

    /// Gives back one read hold of `owner`; returns the holds left.
    /// [`Error::Lost`] when the owner holds no valid read lock.
    pub async fn release_read(&self, owner: &Owner) -> Result<u32> {
        let left: i64 = self
            .invoke(&READ_RELEASE)
            .arg(owner.id())
            .arg(&self.writers.wake_prefix)
            .run(&self.client)
            .await?;
        match left {
            n if n >= 0 => Ok(n as u32),
            -1 => Err(self.lost()),
            _ => Err(self.wrong_type(&self.readers)),
        }
    }

    /// Releases the write lock held with `token`; [`Error::Lost`] when not ours any more.
    pub async fn release_write(&self, token: &str) -> Result<()> {
        let outcome: i64 = self
            .invoke(&WRITE_RELEASE)
            .arg(token)
            .arg(&self.writers.wake_prefix)
            .arg(&self.keys.channel)
            .run(&self.client)
            .await?;
        match outcome {
            1 => Ok(()),
            0 => Err(self.lost()),
            _ => Err(self.wrong_type(&self.keys.key)),
        }
    }

    /// The number of readers (distinct owners) holding now.
    pub async fn readers(&self) -> Result<u32> {
        let now: (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.client.conn())
            .await?;
        let now_ms = now.0 * 1000 + now.1 / 1000;
        Ok(redis::cmd("ZCOUNT")
            .arg(&self.readers)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .query_async(&mut self.client.conn())
            .await?)
    }

    async fn read_attempt(&self, owner: &Owner, request: &str) -> Result<Attempt<ReadGrant>> {
        let sent = Instant::now();
        let reply: Vec<i64> = self
            .invoke(&READ_ACQUIRE)
            .arg(owner.id())
            .arg(self.options.ttl.as_millis() as u64)
            .arg(request)
            .run(&self.client)
            .await?;
        match reply.as_slice() {
            [1, fence, holds] => Ok(Attempt::Granted(ReadGrant {
                grant: Grant {
                    token: owner.id().to_string(),
                    fence: *fence as u64,
                    sent,
                },
                holds: *holds as u32,
            })),
            [0, ..] => Ok(Attempt::Busy {
                remaining: busy_remaining(&reply),
            }),
            [-1, n] => Err(self.wrong_type_at(*n)),
            other => Err(Error::unexpected_reply(other)),
        }
    }

    /// One write acquire; takes (or refreshes) a place in the writer queue when `queue` is
    /// set and the lock is not granted.
    async fn write_attempt(&self, token: &str, queue: bool) -> Result<Attempt<Grant>> {
        let sent = Instant::now();
        let reply: Vec<i64> = self
            .invoke(&WRITE_ACQUIRE)
            .arg(token)
            .arg(self.options.ttl.as_millis() as u64)
            .arg(self.options.waiter_lease.as_millis() as u64)
            .arg(&self.writers.wake_prefix)
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
            [-1, n] => Err(self.wrong_type_at(*n)),
            other => Err(Error::unexpected_reply(other)),
        }
    }

    fn read_guard(&self, owner: &Owner, grant: ReadGrant) -> ReadGuard {
        let lock = self.clone();
        let release = move |owner_id: String| {
            let lock = lock.clone();
            async move { lock.release_read(&Owner::from_id(owner_id)).await.map(drop) }
        };
        ReadGuard {
            lock: self.clone(),
            owner: owner.clone(),
            holds: grant.holds,
            core: GuardCore::start(
                &self.client,
                grant.grant,
                &self.readers,
                OwnerField::SortedSetMember,
                &self.options,
                release,
            ),
        }
    }

    fn write_guard(&self, grant: Grant) -> WriteGuard {
        let lock = self.clone();
        let release = move |token: String| {
            let lock = lock.clone();
            async move { lock.release_write(&token).await }
        };
        WriteGuard {
            lock: self.clone(),
            core: GuardCore::start(
                &self.client,
                grant,
                &self.keys.key,
                OwnerField::StringValue,
                &self.options,
                release,
            ),
        }
    }

    fn busy(&self, remaining: Option<Duration>) -> Error {
        Error::Busy {
            name: self.keys.name.clone(),
            remaining,
        }
    }

    fn lost(&self) -> Error {
        Error::Lost {
            name: self.keys.name.clone(),
        }
    }

    fn wrong_type_at(&self, index: i64) -> Error {
        match index {
            1 => self.wrong_type(&self.keys.key),
            2 => self.wrong_type(&self.keys.fence),
            _ => self.wrong_type(&self.readers),
        }
    }

    fn wrong_type(&self, key: &str) -> Error {
        Error::WrongType {
            key: key.to_string(),
            what: "expected a dlock read-write lock key".into(),
        }
    }
}

/// One read hold of a [`RwLock`]. Dropping it gives the hold back in the background.
#[derive(Debug)]
pub struct ReadGuard {
    lock: RwLock,
    owner: Owner,
    holds: u32,
    core: GuardCore,
}

impl ReadGuard {
    crate::guard::hold_accessors!("read hold");

    /// The reading owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The fencing token of the owner's outermost read grant.
    pub fn fence(&self) -> u64 {
        self.core.fence()
    }

    /// The owner's read holds right after this one was granted.
    pub fn holds_at_grant(&self) -> u32 {
        self.holds
    }

    /// Gives this hold back; [`Error::Lost`] when the owner's read lease had ended.
    pub async fn unlock(self) -> Result<()> {
        self.core.unlock().await
    }

    /// The lock this hold belongs to.
    pub fn lock(&self) -> &RwLock {
        &self.lock
    }
}

/// The write hold of a [`RwLock`]. Dropping it releases in the background.
#[derive(Debug)]
pub struct WriteGuard {
    lock: RwLock,
    core: GuardCore,
}

impl WriteGuard {
    crate::guard::hold_accessors!("write lock");

    /// The fencing token of this write grant.
    pub fn fence(&self) -> u64 {
        self.core.fence()
    }

    /// Releases the write lock; [`Error::Lost`] when it had expired or been taken.
    pub async fn unlock(self) -> Result<()> {
        self.core.unlock().await
    }

    /// Turns this write lock into a read hold of `owner` without a gap: no other writer
    /// can get in between. Other readers may join afterwards unless writers wait. The read
    /// hold keeps the write grant's fencing token. [`Error::Lost`] when the write lock was
    /// no longer ours.
    pub async fn downgrade(self, owner: &Owner) -> Result<ReadGuard> {
        let lock = self.lock.clone();
        let fence = self.core.fence();
        let request = lease::new_token();
        let token = self.core.into_token();
        let sent = Instant::now();
        let holds: i64 = lock
            .invoke(&DOWNGRADE)
            .arg(&token)
            .arg(owner.id())
            .arg(lock.options.ttl.as_millis() as u64)
            .arg(&request)
            .arg(fence)
            .arg(&lock.keys.channel)
            .run(&lock.client)
            .await?;
        if holds <= 0 {
            return Err(lock.lost());
        }
        let grant = ReadGrant {
            grant: Grant {
                token: owner.id().to_string(),
                fence,
                sent,
            },
            holds: holds as u32,
        };
        Ok(lock.read_guard(owner, grant))
    }
}
