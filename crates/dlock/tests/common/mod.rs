//! Helpers shared by the integration tests.
#![allow(dead_code)]

/// One of dlock's scripts as the library builds it: the shared libraries
/// (`lua/answer.lua`, `lua/fencing.lua`, `lua/prelude.lua`), then `files` (paths relative
/// to `src/`), read from the source tree so the test runs the library's text (its body
/// not under `answer`, and every helper sent).
pub fn script(files: &[&str]) -> redis::Script {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");
    let mut code = std::fs::read_to_string(format!("{src}lua/answer.lua")).unwrap();
    code += &std::fs::read_to_string(format!("{src}lua/fencing.lua")).unwrap();
    code += &std::fs::read_to_string(format!("{src}lua/prelude.lua")).unwrap();
    for file in files {
        code += &std::fs::read_to_string(format!("{src}{file}")).unwrap();
    }
    redis::Script::new(&code)
}

use dlock::{Client, LockOptions, Owner};

/// A plain connection to `server`, beside dlock (to run its scripts by hand, or to look).
pub async fn raw_conn(server: &dlock_testkit::RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The keys of the read-write lock scripts for the lock `k`, in their KEYS order (see
/// `rwlock/rwlock.lua`); the semaphore's acquire takes the same.
pub const RW_KEYS: &[&str] = &[
    "k",
    "{k}:fence",
    "{k}:queue",
    "{k}:queue-leases",
    "{k}:expiry",
];

/// Every kind of lock dlock has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Mutex,
    Fair,
    Reentrant,
    Read,
    Write,
    Permit,
}

pub const KINDS: [Kind; 6] = [
    Kind::Mutex,
    Kind::Fair,
    Kind::Reentrant,
    Kind::Read,
    Kind::Write,
    Kind::Permit,
];

/// A hold of any kind.
#[derive(Debug)]
pub enum Held {
    Mutex(dlock::MutexGuard),
    Reentrant(dlock::ReentrantGuard),
    Read(dlock::ReadGuard),
    Write(dlock::WriteGuard),
    Permit(dlock::SemaphorePermit),
}

impl Held {
    pub fn token(&self) -> &str {
        match self {
            Held::Mutex(g) => g.token(),
            Held::Reentrant(g) => g.token(),
            Held::Read(g) => g.token(),
            Held::Write(g) => g.token(),
            Held::Permit(g) => g.token(),
        }
    }

    pub fn remaining(&self) -> std::time::Duration {
        match self {
            Held::Mutex(g) => g.remaining(),
            Held::Reentrant(g) => g.remaining(),
            Held::Read(g) => g.remaining(),
            Held::Write(g) => g.remaining(),
            Held::Permit(g) => g.remaining(),
        }
    }

    pub fn lost_signal(&self) -> dlock::LostSignal {
        match self {
            Held::Mutex(g) => g.lost_signal(),
            Held::Reentrant(g) => g.lost_signal(),
            Held::Read(g) => g.lost_signal(),
            Held::Write(g) => g.lost_signal(),
            Held::Permit(g) => g.lost_signal(),
        }
    }

    pub async fn fence(&self) -> dlock::Result<u64> {
        match self {
            Held::Mutex(g) => g.fence().await,
            Held::Reentrant(g) => g.fence().await,
            Held::Read(g) => g.fence().await,
            Held::Write(g) => g.fence().await,
            Held::Permit(g) => g.fence().await,
        }
    }

    pub async fn apply(&self, batch: &dlock::Guarded) -> dlock::Result<Vec<redis::Value>> {
        match self {
            Held::Mutex(g) => g.apply(batch).await,
            Held::Reentrant(g) => g.apply(batch).await,
            Held::Read(g) => g.apply(batch).await,
            Held::Write(g) => g.apply(batch).await,
            Held::Permit(g) => g.apply(batch).await,
        }
    }

    pub async fn unlock(self) -> dlock::Result<()> {
        match self {
            Held::Mutex(g) => g.unlock().await,
            Held::Reentrant(g) => g.unlock().await,
            Held::Read(g) => g.unlock().await,
            Held::Write(g) => g.unlock().await,
            Held::Permit(g) => g.unlock().await,
        }
    }
}

/// Takes `kind` on `name`: one attempt when `single`, else waiting per `options`. Every
/// call uses a fresh owner (reentrant, read) and a semaphore of 2 permits.
pub async fn take(
    client: &Client,
    kind: Kind,
    name: &str,
    options: LockOptions,
    single: bool,
) -> dlock::Result<Held> {
    let owner = Owner::new();
    Ok(match kind {
        Kind::Mutex | Kind::Fair => {
            let mutex = if kind == Kind::Mutex {
                client.mutex_with(name, options)?
            } else {
                client.fair_mutex_with(name, options)?
            };
            Held::Mutex(if single {
                mutex.try_lock().await?
            } else {
                mutex.lock().await?
            })
        }
        Kind::Reentrant => {
            let mutex = client.reentrant_mutex_with(name, options)?;
            Held::Reentrant(if single {
                mutex.for_owner(&owner).try_lock().await?
            } else {
                mutex.for_owner(&owner).lock().await?
            })
        }
        Kind::Read => {
            let lock = client.rwlock_with(name, options)?;
            Held::Read(if single {
                lock.for_owner(&owner).try_read().await?
            } else {
                lock.for_owner(&owner).read().await?
            })
        }
        Kind::Write => {
            let lock = client.rwlock_with(name, options)?;
            Held::Write(if single {
                lock.try_write().await?
            } else {
                lock.write().await?
            })
        }
        Kind::Permit => {
            let semaphore = client.semaphore_with(name, 2, options)?;
            Held::Permit(if single {
                semaphore.try_lock().await?
            } else {
                semaphore.lock().await?
            })
        }
    })
}

/// The keys of lock `name` that would keep others out (the lock key, its queue and the
/// expiry index of leased holds), excluding the fencing counter, which lives forever by
/// design.
pub fn lock_keys(name: &str) -> Vec<String> {
    vec![
        name.to_string(),
        format!("{{{name}}}:queue"),
        format!("{{{name}}}:queue-leases"),
        format!("{{{name}}}:expiry"),
    ]
}
