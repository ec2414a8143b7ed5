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
use std::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::queue::QueueKeys;
use crate::raw::{on_one_server, private::KindProtocol, Attempt, HoldKind, LockCore, Waiting};
use crate::reentrant::Owner;
use crate::script::ScriptCall;
use crate::wait::Claim;

pub(crate) mod scripts;
use scripts::{Downgrade, ReadAcquire, ReadRelease, RwKeys, WriteAcquire, WriteRelease};

/// One read hold of a [`RwLock`]. See [`Guard`] for what every guard does.
pub type ReadGuard = Guard<Reading>;
/// The write hold of a [`RwLock`]. See [`Guard`] for what every guard does, and
/// [`Guard::downgrade`].
pub type WriteGuard = Guard<Writing>;

/// A named distributed read-write lock, reading for the [`Owner`] bound to the handle.
/// Made by [`Client::rwlock`] with a fresh owner; a clone reads for a fresh owner too,
/// and [`for_owner`](RwLock::for_owner) makes a handle for a chosen one. Its two sides are
/// [`Lock`] handles of their own: [`reader`](RwLock::reader) and
/// [`writer`](RwLock::writer).
///
/// ```no_run
/// # async fn demo(client: dlock::Client) -> dlock::Result<()> {
/// let config = client.rwlock("shared-config")?;
/// let read = config.read().await?;           // many readers at once
/// read.unlock().await?;
/// let write = config.write().await?;         // one writer, no readers
/// let read = write.downgrade().await?;       // keep reading, let other readers in
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RwLock {
    reader: Lock<Reading>,
    writer: Lock<Writing>,
}

/// A clone reads for a fresh owner, like every owner-bound handle's (see [`Owner`]).
impl Clone for RwLock {
    fn clone(&self) -> RwLock {
        self.for_owner(&Owner::new())
    }
}

/// What both sides of an [`RwLock`] act on.
#[derive(Debug, Clone)]
struct Shared {
    core: LockCore,
    writers: QueueKeys,
}

impl RwLock {
    fn new(client: Client, name: &str, options: LockOptions, owner: Owner) -> Result<RwLock> {
        let core = LockCore::new(client, name, options)?;
        let lock = Shared {
            writers: scripts::writer_queue(&core.keys),
            core,
        };
        Ok(RwLock::of(lock, owner))
    }

    fn of(lock: Shared, owner: Owner) -> RwLock {
        RwLock {
            reader: Lock::of(Reading {
                lock: lock.clone(),
                owner: owner.clone(),
            }),
            writer: Lock::of(Writing { lock, owner }),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.reader.name()
    }

    /// The owner this handle reads for (and a downgraded write lock becomes a read hold
    /// of).
    pub fn owner(&self) -> &Owner {
        &self.reader.raw.owner
    }

    /// A handle on the same lock reading for `owner`.
    pub fn for_owner(&self, owner: &Owner) -> RwLock {
        RwLock::of(self.reader.raw.lock.clone(), owner.clone())
    }

    /// The read side: a [`Lock`] whose holds are read holds of this handle's owner
    /// (re-entered by a second read of the same owner), with every verb of a handle; make
    /// it an [`AnyLock`](crate::AnyLock) with `.into()`.
    pub fn reader(&self) -> Lock<Reading> {
        self.reader.same_owner()
    }

    /// The write side: a [`Lock`] whose hold is the write lock (a downgrade of it becomes
    /// a read hold of this handle's owner).
    pub fn writer(&self) -> Lock<Writing> {
        self.writer.same_owner()
    }

    /// One attempt to take a read hold for the owner.
    pub async fn try_read(&self) -> Result<ReadGuard> {
        self.reader.try_lock().await
    }

    /// Takes a read hold for the owner, waiting per the wait policy. Readers waiting for
    /// a writer are all woken by its release. Cancel-safe like [`Lock::lock`].
    pub async fn read(&self) -> Result<ReadGuard> {
        self.reader.lock().await
    }

    /// One attempt to take the write lock.
    pub async fn try_write(&self) -> Result<WriteGuard> {
        self.writer.try_lock().await
    }

    /// Takes the write lock, waiting per the wait policy. While it waits, new readers wait
    /// behind it; it is woken alone when the last reader or the previous writer leaves.
    /// Cancel-safe: a dropped wait gives its queue place back at once.
    pub async fn write(&self) -> Result<WriteGuard> {
        self.writer.lock().await
    }

    /// The number of readers (distinct owners) holding now.
    pub async fn readers(&self) -> Result<u32> {
        let core = &self.reader.raw.lock.core;
        let entries = core
            .client
            .leased_entries(&core.keys.key, "read", true)
            .await?;
        let owners: HashSet<&str> = entries.iter().map(|(_, data)| data.as_str()).collect();
        Ok(owners.len() as u32)
    }
}

impl Shared {
    /// The keys every script of the lock takes.
    fn rw_keys(&self) -> RwKeys<'_> {
        RwKeys {
            keys: &self.core.keys,
            writers: &self.writers,
        }
    }

    async fn release_read(&self, hold: &str, owner: &str) -> Result<()> {
        let lock = self.rw_keys();
        let released = ReadRelease {
            lock,
            token: hold,
            owner,
        }
        .run(&self.core.client)
        .await?;
        self.released(released)
    }

    async fn release_write(&self, token: &str) -> Result<()> {
        let lock = self.rw_keys();
        let released = WriteRelease { lock, token }.run(&self.core.client).await?;
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

/// The read side of an [`RwLock`] as one [`Owner`] reads it: the kind of a [`ReadGuard`].
#[derive(Debug, Clone)]
pub struct Reading {
    lock: Shared,
    owner: Owner,
}

/// The write side of an [`RwLock`]: the kind of a [`WriteGuard`]. It knows the handle's
/// owner, whose read hold a downgrade makes.
#[derive(Debug, Clone)]
pub struct Writing {
    lock: Shared,
    owner: Owner,
}

/// The owner of a side's holds, and a handle of that side for another owner.
macro_rules! side_owner {
    ($($side:ty),*) => {$(
        impl Lock<$side> {
            /// The owner this handle acts for.
            pub fn owner(&self) -> &Owner {
                &self.raw.owner
            }

            /// A handle on the same side acting for `owner`.
            pub fn for_owner(&self, owner: &Owner) -> Lock<$side> {
                let mut raw = self.raw.clone();
                raw.owner = owner.clone();
                Lock::of(raw)
            }
        }
    )*};
}

side_owner!(Reading, Writing);

impl Guard<Reading> {
    /// The reading owner.
    pub fn owner(&self) -> &Owner {
        &self.raw.owner
    }
}

impl Guard<Writing> {
    /// Turns this write lock into a read hold of the handle's owner without a gap: no other writer
    /// can get in between. Other readers may join afterwards unless writers wait. The read
    /// hold keeps the write grant's fencing token. [`Error::Lost`] when the write lock was
    /// no longer ours.
    ///
    /// The write lock stays renewed until the read hold exists. If this future is
    /// dropped midway, both the write lock and a read hold that may have been made are
    /// given back.
    pub async fn downgrade(self) -> Result<ReadGuard> {
        // Drawn with the write grant: no round trip.
        let fence = self.fence().await?;
        let owner = &self.raw.owner;
        let reading = Reading {
            lock: self.raw.lock.clone(),
            owner: owner.clone(),
        };
        let mut claim = Claim::new(reading.clone(), None);
        let lock = &self.raw.lock;
        let sent = Instant::now();
        claim.sending(false);
        let reply = Downgrade {
            lock: lock.rw_keys(),
            writer: self.token(),
            owner: owner.id(),
            lease_ms: lock.core.options.kept_ms(),
            token: &claim.token,
            fence,
        }
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
            // (A downgrade is never a multi-lock's grant.)
            Attempt::Busy { .. } | Attempt::GrantedAll { .. } => {
                claim.give_back().await;
                Err(Error::Lost {
                    name: lock.core.keys.name.clone(),
                })
            }
        }
    }
}

impl KindProtocol for Reading {
    fn kind_name(&self) -> &'static str {
        crate::kind::READ
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Channel(&self.lock.core.keys.channel)
    }

    async fn attempt(&self, token: &str, _join_queue: bool) -> Result<Attempt> {
        let reply = ReadAcquire {
            lock: self.lock.rw_keys(),
            owner: self.owner.id(),
            lease_ms: self.lock.core.options.kept_ms(),
            token,
        }
        .run(&self.lock.core.client)
        .await?;
        Attempt::from_reply(&reply)
    }

    fn release(&self, token: &str) -> impl std::future::Future<Output = Result<()>> + Send {
        self.lock.release_read(token, self.owner.id())
    }
}

on_one_server!(Reading, hold: HoldKind::Entry, core: lock.core, owner: owner);

impl KindProtocol for Writing {
    fn kind_name(&self) -> &'static str {
        crate::kind::WRITE
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Queue(&self.lock.writers)
    }

    async fn attempt(&self, token: &str, join_queue: bool) -> Result<Attempt> {
        let reply = WriteAcquire {
            lock: self.lock.rw_keys(),
            token,
            lease_ms: self.lock.core.options.kept_ms(),
            waiter_lease_ms: self.lock.core.options.waiter_lease.as_millis() as u64,
            join_queue,
        }
        .run(&self.lock.core.client)
        .await?;
        Attempt::from_reply(&reply)
    }

    fn release(&self, token: &str) -> impl std::future::Future<Output = Result<()>> + Send {
        self.lock.release_write(token)
    }
}

on_one_server!(Writing, hold: HoldKind::String, core: lock.core, owner: owner);

impl Client {
    /// A read-write lock named `name` with default options (30 s leases renewed
    /// automatically, wait forever).
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        RwLock::new(self.clone(), name, LockOptions::default(), Owner::new())
    }

    /// A read-write lock with the given options.
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        RwLock::new(self.clone(), name, options, Owner::new())
    }
}
