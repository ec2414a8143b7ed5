//! The read-write lock: many readers or one writer, with every read hold tracked on its
//! own.
//!
//! The common single-hash recipe that stores one `read` timestamp is wrong: readers
//! overwrite each other's lease and one reader's release or expiry can strand another.
//! Here every read hold has its own token and lease in a hash at the lock key (see
//! `rwlock.lua`), so a release or expiry removes only that hold, and the hash expires with
//! its last lease. The writer holds the same key as a string (the Mutex format), so both
//! sides, and every other kind of lock on the name, exclude each other. A writer waits
//! while any valid reader holds; once a writer waits (a leased place in the writer queue),
//! new readers wait behind it, so a stream of readers cannot starve writers. The same
//! owner may re-enter a read lock (even while a writer waits), and a writer may downgrade
//! to a read hold without a gap. All keys share one hash slot.

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::options::LockOptions;
use crate::queue::QueueKeys;
use crate::raw::{private::OnOneServer, Attempt, HoldKind, LockCore, Waiting};
use crate::reentrant::Owner;
use crate::script::{lua_script, LuaScript};
use crate::wait::{acquire, Claim};

macro_rules! rw_script {
    (grant $name:literal, $file:literal) => {
        lua_script!(
            grant $name,
            "queue/queue.lua",
            "entries.lua",
            "rwlock/rwlock.lua",
            $file
        )
    };
    ($name:literal, $file:literal) => {
        lua_script!(
            $name,
            "queue/queue.lua",
            "entries.lua",
            "rwlock/rwlock.lua",
            $file
        )
    };
}

static WRITE_ACQUIRE: LazyLock<LuaScript> =
    rw_script!(grant "write lock acquire", "rwlock/write_acquire.lua");
static WRITE_RELEASE: LazyLock<LuaScript> =
    rw_script!("write lock release", "rwlock/write_release.lua");
static READ_ACQUIRE: LazyLock<LuaScript> =
    rw_script!(grant "read lock acquire", "rwlock/read_acquire.lua");
static READ_RELEASE: LazyLock<LuaScript> =
    rw_script!("read lock release", "rwlock/read_release.lua");
static DOWNGRADE: LazyLock<LuaScript> = rw_script!(grant "downgrade", "rwlock/downgrade.lua");

/// One read hold of a [`RwLock`]. See [`Guard`] for what every guard does.
pub type ReadGuard = Guard<Reading>;
/// The write hold of a [`RwLock`]. See [`Guard`] for what every guard does, and
/// [`Guard::downgrade`].
pub type WriteGuard = Guard<Writing>;

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
    core: LockCore,
    writers: QueueKeys,
}

impl RwLock {
    pub(crate) fn new(client: Client, name: &str, options: LockOptions) -> Result<RwLock> {
        let core = LockCore::new(client, name, options)?;
        Ok(RwLock {
            writers: QueueKeys {
                // A writer that gives up waiting may be the last one holding readers back.
                on_empty: Some(core.keys.channel.clone()),
                ..QueueKeys::new(&core.keys)
            },
            core,
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.core.keys.name
    }

    fn call<'a>(&'a self, script: &'a LuaScript) -> crate::script::Call<'a> {
        script
            .call()
            .key(&self.core.keys.key)
            .key(&self.core.keys.fence)
            .key(&self.writers.queue)
            .key(&self.writers.leases)
    }

    pub(crate) fn reading(&self, owner: &Owner) -> Reading {
        Reading {
            lock: self.clone(),
            owner: owner.clone(),
        }
    }

    pub(crate) fn writing(&self) -> Writing {
        Writing { lock: self.clone() }
    }

    /// One attempt to take a read hold for `owner`.
    pub async fn try_read(&self, owner: &Owner) -> Result<ReadGuard> {
        acquire(&self.reading(owner), crate::Wait::NoWait).await
    }

    /// Takes a read hold for `owner`, waiting per the wait policy. Readers waiting for a
    /// writer are all woken by its release. Cancel-safe like
    /// [`Mutex::lock`](crate::Mutex::lock).
    pub async fn read(&self, owner: &Owner) -> Result<ReadGuard> {
        acquire(&self.reading(owner), self.core.options.wait).await
    }

    /// One attempt to take the write lock.
    pub async fn try_write(&self) -> Result<WriteGuard> {
        acquire(&Writing { lock: self.clone() }, crate::Wait::NoWait).await
    }

    /// Takes the write lock, waiting per the wait policy. While it waits, new readers wait
    /// behind it; it is woken alone when the last reader or the previous writer leaves.
    /// Cancel-safe: a dropped wait gives its queue place back at once.
    pub async fn write(&self) -> Result<WriteGuard> {
        acquire(&Writing { lock: self.clone() }, self.core.options.wait).await
    }

    /// The number of readers (distinct owners) holding now.
    pub async fn readers(&self) -> Result<u32> {
        let entries = self
            .core
            .client
            .leased_entries(&self.core.keys.key, "read", true)
            .await?;
        let owners: HashSet<&str> = entries.iter().map(|(_, data)| data.as_str()).collect();
        Ok(owners.len() as u32)
    }

    /// Gives back the read hold with `token` (e.g. one printed by `dlock acquire --read`);
    /// [`Error::Lost`] when it is not held.
    pub async fn release_read_token(&self, token: &str) -> Result<()> {
        self.release_read(token).await
    }

    /// Releases the write lock held with `token`; [`Error::Lost`] when not ours.
    pub async fn release_write_token(&self, token: &str) -> Result<()> {
        self.release_write(token).await
    }

    /// Resets the lease of the read hold with `token` to `ttl`; [`Error::Lost`] when it
    /// is not held.
    pub async fn extend_read_token(&self, token: &str, ttl: std::time::Duration) -> Result<()> {
        // The owner is not needed to find a hold by its token.
        crate::raw::extend_on_server(&self.reading(&Owner::from_id("")), token, ttl).await
    }

    /// Resets the lease of the write lock held with `token` to `ttl`; [`Error::Lost`] when
    /// not ours.
    pub async fn extend_write_token(&self, token: &str, ttl: std::time::Duration) -> Result<()> {
        crate::raw::extend_on_server(&Writing { lock: self.clone() }, token, ttl).await
    }

    async fn release_read(&self, hold: &str) -> Result<()> {
        let released: i64 = self
            .call(&READ_RELEASE)
            .arg(hold)
            .arg(&self.writers.wake_prefix)
            .run(&self.core.client)
            .await?;
        self.released(released)
    }

    async fn release_write(&self, token: &str) -> Result<()> {
        let released: i64 = self
            .call(&WRITE_RELEASE)
            .arg(token)
            .arg(&self.writers.wake_prefix)
            .arg(&self.core.keys.channel)
            .run(&self.core.client)
            .await?;
        self.released(released)
    }

    fn released(&self, outcome: i64) -> Result<()> {
        match outcome {
            1 => Ok(()),
            0 => Err(Error::Lost {
                name: self.core.keys.name.clone(),
            }),
            other => Err(Error::unexpected_reply(other)),
        }
    }
}

/// An [`RwLock`] as read by one [`Owner`]: the lock kind of a [`ReadGuard`].
#[derive(Debug, Clone)]
pub struct Reading {
    lock: RwLock,
    owner: Owner,
}

/// The write side of an [`RwLock`]: the lock kind of a [`WriteGuard`].
#[derive(Debug, Clone)]
pub struct Writing {
    lock: RwLock,
}

impl Guard<Reading> {
    /// The reading owner.
    pub fn owner(&self) -> &Owner {
        &self.raw.owner
    }

    /// The lock this hold belongs to.
    pub fn lock(&self) -> &RwLock {
        &self.raw.lock
    }
}

impl Guard<Writing> {
    /// Turns this write lock into a read hold of `owner` without a gap: no other writer
    /// can get in between. Other readers may join afterwards unless writers wait. The read
    /// hold keeps the write grant's fencing token. [`Error::Lost`] when the write lock was
    /// no longer ours.
    ///
    /// The write lock stays renewed until the read hold exists. If this future is
    /// dropped midway, both the write lock and a read hold that may have been made are
    /// given back.
    pub async fn downgrade(self, owner: &Owner) -> Result<ReadGuard> {
        // Drawn with the write grant: no round trip.
        let fence = self.fence().await?;
        let reading = self.raw.lock.reading(owner);
        let mut claim = Claim::new(reading.clone(), None);
        let lock = &self.raw.lock;
        let sent = Instant::now();
        claim.sending(false);
        let reply: Result<Vec<i64>> = lock
            .call(&DOWNGRADE)
            .arg(self.token())
            .arg(owner.id())
            .arg(lock.core.options.ttl.as_millis() as u64)
            .arg(&claim.token)
            .arg(fence)
            .arg(&lock.core.keys.channel)
            .run(&lock.core.client)
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(err) => {
                // A read hold the replicas lack (NotReplicated) is given back like one
                // whose reply was lost.
                if err.is_transient() || matches!(err, Error::NotReplicated { .. }) {
                    claim.unknown();
                } else {
                    claim.answered();
                }
                // Dropping `self` releases the write lock if it is still ours.
                claim.give_back().await;
                return Err(err);
            }
        };
        claim.answered();
        match Attempt::from_reply(&reply)? {
            Attempt::Granted { fence, holds } => match claim.into_guard(fence, holds, sent) {
                Ok(read) => {
                    self.retire().await;
                    Ok(read)
                }
                Err(claim) => {
                    claim.give_back().await;
                    Err(Error::Closed)
                }
            },
            Attempt::Busy { .. } => {
                claim.give_back().await;
                Err(Error::Lost {
                    name: lock.core.keys.name.clone(),
                })
            }
        }
    }
}

impl OnOneServer for Reading {
    const HOLD: HoldKind = HoldKind::Entry;

    fn core(&self) -> &LockCore {
        &self.lock.core
    }

    fn kind_name(&self) -> &'static str {
        "read"
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Channel(&self.lock.core.keys.channel)
    }

    async fn attempt(&self, token: &str, _join_queue: bool) -> Result<Attempt> {
        let reply: Vec<i64> = self
            .lock
            .call(&READ_ACQUIRE)
            .arg(self.owner.id())
            .arg(self.lock.core.options.ttl.as_millis() as u64)
            .arg(token)
            .run(&self.lock.core.client)
            .await?;
        Attempt::from_reply(&reply)
    }

    async fn release(&self, token: &str) -> Result<()> {
        self.lock.release_read(token).await
    }
}

impl OnOneServer for Writing {
    const HOLD: HoldKind = HoldKind::String;

    fn core(&self) -> &LockCore {
        &self.lock.core
    }

    fn kind_name(&self) -> &'static str {
        "write"
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Queue(&self.lock.writers)
    }

    async fn attempt(&self, token: &str, join_queue: bool) -> Result<Attempt> {
        let reply: Vec<i64> = self
            .lock
            .call(&WRITE_ACQUIRE)
            .arg(token)
            .arg(self.lock.core.options.ttl.as_millis() as u64)
            .arg(self.lock.core.options.waiter_lease.as_millis() as u64)
            .arg(&self.lock.writers.wake_prefix)
            .arg(if join_queue { "1" } else { "0" })
            .run(&self.lock.core.client)
            .await?;
        Attempt::from_reply(&reply)
    }

    async fn release(&self, token: &str) -> Result<()> {
        self.lock.release_write(token).await
    }
}

impl Client {
    /// A read-write lock named `name` with default options (30 s leases renewed
    /// automatically, wait forever).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        RwLock::new(self.clone(), name, LockOptions::default())
    }

    /// A read-write lock with the given options.
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        RwLock::new(self.clone(), name, options)
    }
}
