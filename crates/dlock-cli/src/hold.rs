//! Which kind of lock a command acts on (`--fair`, `--read`, `--write`, `--permits N`,
//! default: the plain mutex), where it lives (one deployment, or several independent
//! masters: Redlock), and the verbs every kind has from the shell.

use std::time::Duration;

use clap::Args;
use dlock::{Client, LockOptions, Owner, Redlock};

/// Where the locks live: one deployment (a server, a cluster, a Sentinel master), or
/// several independent masters that grant by majority (Redlock, `--redis` repeated).
pub enum Locks {
    Client(Client),
    Redlock(Redlock),
}

impl Locks {
    /// The prefix in front of every lock name.
    pub fn prefix(&self) -> &str {
        match self {
            Locks::Client(client) => client.prefix(),
            Locks::Redlock(redlock) => redlock.prefix(),
        }
    }

    /// Gives back whatever is still held, then closes the connections.
    pub async fn shutdown(&self) {
        match self {
            Locks::Client(client) => client.shutdown().await,
            Locks::Redlock(redlock) => redlock.shutdown().await,
        }
    }
}

/// The kind flags shared by `run`, `acquire`, `release` and `extend` (at most one).
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct KindArgs {
    /// Fair lock: waiters are served strictly in arrival order
    #[arg(long)]
    pub fair: bool,
    /// Shared read lock of a read-write lock (many readers at once, no writer)
    #[arg(long)]
    pub read: bool,
    /// Exclusive write lock of a read-write lock (no readers, one writer)
    #[arg(long)]
    pub write: bool,
    /// One of N permits of a semaphore (at most N holders at once)
    #[arg(long, value_name = "N")]
    pub permits: Option<u32>,
}

impl KindArgs {
    /// Refuses a permit count out of range (before any connection).
    pub fn check(&self) -> dlock::Result<()> {
        match self.permits {
            Some(n) if n == 0 || n > dlock::semaphore::MAX_PERMITS => {
                Err(dlock::Error::InvalidArgument(format!(
                    "--permits {n} is out of range; use 1 to {}",
                    dlock::semaphore::MAX_PERMITS
                )))
            }
            _ => Ok(()),
        }
    }

    /// The kind flag given, and why that kind cannot run on Redlock; `None` for the plain
    /// mutex, the one kind Redlock has.
    pub fn single_master_only(&self) -> Option<(String, &'static str)> {
        if self.fair {
            Some(("--fair".into(), "a fair lock's queue"))
        } else if self.read || self.write {
            let flag = if self.read { "--read" } else { "--write" };
            Some((flag.into(), "a read-write lock's set of readers"))
        } else {
            self.permits
                .map(|n| (format!("--permits {n}"), "a semaphore's count of holders"))
        }
    }

    /// Refuses a kind other than the plain mutex on Redlock (also checked before any
    /// connection, as a usage error).
    fn redlock_mutex(&self) -> dlock::Result<()> {
        match self.single_master_only() {
            Some((flag, state)) => {
                Err(dlock::Error::InvalidArgument(redlock_refusal(&flag, state)))
            }
            None => Ok(()),
        }
    }

    /// The kind's name, as the library's logs and metrics name it.
    pub fn describe(&self) -> &'static str {
        if self.fair {
            "fair"
        } else if self.read {
            "read"
        } else if self.write {
            "write"
        } else if self.permits.is_some() {
            "semaphore"
        } else {
            "mutex"
        }
    }
}

/// Why the kind of `flag` (whose shared state is `state`) cannot run on several masters.
pub fn redlock_refusal(flag: &str, state: &str) -> String {
    format!(
        "{flag} is single-master only and cannot be used with several --redis URLs (Redlock): {state} must be the same on every master, and independent masters that each grant by majority can disagree on it (two majorities, two different answers); only a consensus protocol settles that. Over several masters only the plain mutex (no kind flag) runs"
    )
}

/// A hold of any kind.
pub enum Hold {
    Mutex(dlock::MutexGuard),
    Read(dlock::ReadGuard),
    Write(dlock::WriteGuard),
    Permit(dlock::SemaphorePermit),
    Redlock(dlock::RedlockGuard),
}

/// Runs `$body` with `$guard` bound to whichever guard `$hold` has.
macro_rules! each {
    ($hold:expr, $guard:ident => $body:expr) => {
        match $hold {
            Hold::Mutex($guard) => $body,
            Hold::Read($guard) => $body,
            Hold::Write($guard) => $body,
            Hold::Permit($guard) => $body,
            Hold::Redlock($guard) => $body,
        }
    };
}

impl Hold {
    pub fn token(&self) -> &str {
        each!(self, g => g.token())
    }

    /// The fencing token; on failure (the hold already lost, Redis unreachable) the
    /// hold is released before the error is returned, so nothing stays held.
    pub async fn fence(self) -> dlock::Result<(Hold, u64)> {
        let fence = match &self {
            // Drawn with the grant, on a majority.
            Hold::Redlock(g) => Ok(g.fence()),
            Hold::Mutex(g) => g.fence().await,
            Hold::Read(g) => g.fence().await,
            Hold::Write(g) => g.fence().await,
            Hold::Permit(g) => g.fence().await,
        };
        match fence {
            Ok(fence) => Ok((self, fence)),
            Err(err) => {
                let _ = self.unlock().await;
                Err(err)
            }
        }
    }

    pub fn lost_signal(&self) -> dlock::LostSignal {
        each!(self, g => g.lost_signal())
    }

    pub async fn unlock(self) -> dlock::Result<()> {
        each!(self, g => g.unlock().await)
    }

    pub fn into_token(self) -> String {
        each!(self, g => g.into_token())
    }
}

/// Takes the lock of `kind` named `name`.
pub async fn take(
    locks: &Locks,
    kind: &KindArgs,
    name: &str,
    options: LockOptions,
) -> dlock::Result<Hold> {
    // Every caller prints or exports the fence: draw it with the grant.
    let options = options.fence_at_grant();
    let client = match locks {
        Locks::Client(client) => client,
        Locks::Redlock(redlock) => {
            kind.redlock_mutex()?;
            return Ok(Hold::Redlock(
                redlock.mutex_with(name, options)?.lock().await?,
            ));
        }
    };
    Ok(if kind.fair {
        Hold::Mutex(client.fair_mutex_with(name, options)?.lock().await?)
    } else if kind.read {
        Hold::Read(
            client
                .rwlock_with(name, options)?
                .read(&Owner::new())
                .await?,
        )
    } else if kind.write {
        Hold::Write(client.rwlock_with(name, options)?.write().await?)
    } else if let Some(permits) = kind.permits {
        Hold::Permit(
            client
                .semaphore_with(name, permits, options)?
                .acquire()
                .await?,
        )
    } else {
        Hold::Mutex(client.mutex_with(name, options)?.lock().await?)
    })
}

/// Gives back the hold `token` of `kind` (a token printed by `dlock acquire`).
pub async fn release(locks: &Locks, kind: &KindArgs, name: &str, token: &str) -> dlock::Result<()> {
    let client = match locks {
        Locks::Client(client) => client,
        Locks::Redlock(redlock) => {
            kind.redlock_mutex()?;
            // On every master; a majority must answer.
            return redlock.mutex(name)?.release_token(token).await;
        }
    };
    if kind.fair {
        client.fair_mutex(name)?.release_token(token).await
    } else if kind.read {
        client.rwlock(name)?.release_read_token(token).await
    } else if kind.write {
        client.rwlock(name)?.release_write_token(token).await
    } else if let Some(permits) = kind.permits {
        client.semaphore(name, permits)?.release_token(token).await
    } else {
        client.mutex(name)?.release_token(token).await
    }
}

/// The options an extend to `ttl` runs with: the new lease and `--replicas`, checked.
pub fn extend_options(
    ttl: Duration,
    replication: Option<crate::Replication>,
) -> dlock::Result<LockOptions> {
    crate::Replication::apply(replication, LockOptions::default().ttl(ttl), "--ttl")
}

/// Restarts the lease of the hold `token` of `kind` at `ttl`; with `--replicas`, only
/// once the replicas have it (otherwise the hold is given back).
pub async fn extend(
    locks: &Locks,
    kind: &KindArgs,
    name: &str,
    token: &str,
    ttl: Duration,
    replication: Option<crate::Replication>,
) -> dlock::Result<()> {
    let options = extend_options(ttl, replication)?;
    let client = match locks {
        Locks::Client(client) => client,
        Locks::Redlock(redlock) => {
            kind.redlock_mutex()?;
            // Succeeds when a majority still holds it and extended it in time.
            return redlock
                .mutex_with(name, options)?
                .extend_token(token, ttl)
                .await;
        }
    };
    if kind.read {
        client
            .rwlock_with(name, options)?
            .extend_read_token(token, ttl)
            .await
    } else if kind.write {
        client
            .rwlock_with(name, options)?
            .extend_write_token(token, ttl)
            .await
    } else if let Some(permits) = kind.permits {
        client
            .semaphore_with(name, permits, options)?
            .extend_token(token, ttl)
            .await
    } else {
        // Plain and fair mutexes keep the same string: one extend serves both.
        client
            .mutex_with(name, options)?
            .extend_token(token, ttl)
            .await
    }
}
