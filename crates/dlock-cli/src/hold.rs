//! Which kind of lock a command acts on (`--fair`, `--read`, `--write`, `--permits N`,
//! default: the plain mutex), where it lives (one deployment, or several independent
//! masters: Redlock), and the verbs every kind has from the shell.

use std::time::Duration;

use clap::Args;
use dlock::{AnyGuard, AnyLock, Client, LockKind, LockOptions, Redlock, Wait};

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
#[group(multiple = false, args = ["fair", "read", "write", "permits"])]
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
    /// One of N permits of a semaphore (at most N holders at once). N is not stored in
    /// Redis: every caller must pass the same N for the name
    #[arg(long, value_name = "N")]
    pub permits: Option<u64>,
    /// How many of the permits (outside the one-kind group: it goes with --permits).
    #[command(flatten)]
    pub weight: TakeArgs,
}

/// `--take K`, beside `--permits N`.
#[derive(Args, Debug, Clone, Default)]
#[group(skip)]
pub struct TakeArgs {
    /// With --permits N: take K of the N permits at once, as one permit (a job that needs
    /// 4 of 16 GPU slots: --permits 16 --take 4); granted in queue order, given back
    /// together
    #[arg(long, value_name = "K")]
    pub take: Option<u64>,
}

impl KindArgs {
    /// Whether a kind flag was given (none: the plain mutex, or for `release` and `extend`
    /// the kind the key holds).
    pub fn names_a_kind(&self) -> bool {
        self.fair || self.read || self.write || self.permits.is_some()
    }

    /// Refuses a permit count out of range (before any connection).
    pub fn check(&self) -> dlock::Result<()> {
        match (self.weight.take, self.permits) {
            (Some(k), None) => {
                return Err(dlock::Error::InvalidArgument(format!(
                    "--take {k} needs --permits N: it takes K of a semaphore's N permits (e.g. --permits 16 --take {k})"
                )))
            }
            (Some(k), Some(n)) if k == 0 || k > n => {
                return Err(dlock::Error::InvalidArgument(format!(
                    "--take {k} is out of range for --permits {n}; use 1 to {n}"
                )))
            }
            _ => {}
        }
        match self.permits {
            Some(n) if n == 0 || n > u64::from(dlock::semaphore::MAX_PERMITS) => {
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
            dlock::kind::FAIR
        } else if self.read {
            dlock::kind::READ
        } else if self.write {
            dlock::kind::WRITE
        } else if self.permits.is_some() {
            dlock::kind::SEMAPHORE
        } else {
            dlock::kind::MUTEX
        }
    }

    /// How a hold of this kind sits in Redis, in `dlock inspect`'s words: a mutex, fair
    /// mutex and write lock all hold the key exclusively (a token string), so inspect
    /// cannot tell them apart; `acquire --json` prints both this and [`describe`].
    ///
    /// [`describe`]: KindArgs::describe
    pub fn hold(&self) -> dlock::LockKind {
        if self.read {
            dlock::LockKind::Read
        } else if self.permits.is_some() {
            dlock::LockKind::Semaphore
        } else {
            dlock::LockKind::Exclusive
        }
    }
}

/// Why the kind of `flag` (whose shared state is `state`) cannot run on several masters.
pub fn redlock_refusal(flag: &str, state: &str) -> String {
    format!(
        "{flag} is single-master only and cannot be used with several --redis URLs (Redlock): {state} must be the same on every master, and independent masters that each grant by majority can disagree on it (two majorities, two different answers); only a consensus protocol settles that. Over several masters only the plain mutex (no kind flag) runs"
    )
}

/// The lock of `kind` named `name`: one [`AnyLock`], whichever kind and topology. A read
/// hold's owner is fresh: the shell's holds are identified by their tokens.
pub fn lock_of(
    locks: &Locks,
    kind: &KindArgs,
    name: &str,
    options: LockOptions,
) -> dlock::Result<AnyLock> {
    let client = match locks {
        Locks::Client(client) => client,
        Locks::Redlock(redlock) => {
            kind.redlock_mutex()?;
            return Ok(redlock.mutex_with(name, options)?.into());
        }
    };
    Ok(if kind.fair {
        client.fair_mutex_with(name, options)?.into()
    } else if kind.read {
        client.rwlock_with(name, options)?.reader().into()
    } else if kind.write {
        client.rwlock_with(name, options)?.writer().into()
    } else if let Some(permits) = kind.permits {
        // Checked to be within 1..=MAX_PERMITS before (KindArgs::check); a library
        // refusal names the count otherwise.
        let permits = u32::try_from(permits).unwrap_or(u32::MAX);
        let semaphore = client.semaphore_with(name, permits, options)?;
        match kind.weight.take {
            Some(k) => semaphore
                .taking(u32::try_from(k).unwrap_or(u32::MAX))?
                .into(),
            None => semaphore.into(),
        }
    } else {
        client.mutex_with(name, options)?.into()
    })
}

/// Takes the lock of `kind` named `name`.
pub async fn take(
    locks: &Locks,
    kind: &KindArgs,
    name: &str,
    options: LockOptions,
) -> dlock::Result<AnyGuard> {
    // Every caller prints or exports the fence: draw it with the grant.
    let options = options.fence_at_grant();
    take_checked(locks, &[name], options, |options| {
        lock_of(locks, kind, name, options)
    })
    .await
}

/// Takes every name of `names` together (a multi-lock) when there are several, else the
/// lock of `kind` named `names[0]`. A multi-lock holds each name as a mutex, a fair mutex
/// or a write lock does, so `--fair` and `--write` take the same hold (it does not queue).
pub async fn take_all(
    locks: &Locks,
    kind: &KindArgs,
    names: &[&str],
    options: LockOptions,
) -> dlock::Result<AnyGuard> {
    let [name] = names else {
        let Locks::Client(client) = locks else {
            // Refused before connecting (see the Redlock usage checks).
            return Err(dlock::Error::InvalidArgument(
                "--also needs one server (or a Cluster, a Sentinel master)".into(),
            ));
        };
        return take_checked(locks, names, options, |options| {
            Ok(client.multi_lock_with(names, options)?.into())
        })
        .await;
    };
    take(locks, kind, name, options).await
}

/// Takes the lock `lock` makes (with the options it is given), of the names `names`. One
/// attempt first: a key found busy with no lease end may be no lock at all, which no wait
/// would ever see released (the library would poll it forever), so each name is looked at
/// then, and one holding no lock is refused.
async fn take_checked(
    locks: &Locks,
    names: &[&str],
    options: LockOptions,
    lock: impl Fn(LockOptions) -> dlock::Result<AnyLock>,
) -> dlock::Result<AnyGuard> {
    match lock(options.wait(Wait::NoWait))?.lock().await {
        Err(
            busy @ dlock::Error::Busy {
                remaining: None, ..
            },
        ) => {
            for name in names {
                match not_a_lock(locks, name).await {
                    Ok(Some(not_a_lock)) => return Err(not_a_lock),
                    Ok(None) => {}
                    // The look only helps: one that met a transient error leaves the busy
                    // answer, or the wait and its retries, to stand.
                    Err(err) if err.is_transient() => {}
                    Err(err) => return Err(err),
                }
            }
            if options.wait == Wait::NoWait {
                return Err(busy);
            }
        }
        Err(busy @ dlock::Error::Busy { .. }) if options.wait == Wait::NoWait => return Err(busy),
        Err(dlock::Error::Busy { .. }) => {}
        // One attempt ends on a transient error (a failover, a dropped connection, no
        // quorum yet); a wait retries it, as it would have without this first look.
        Err(err) if err.is_transient() && options.wait != Wait::NoWait => {}
        taken => return taken,
    }
    lock(options)?.lock().await
}

/// `WrongType` when the key of `name` holds a string without an expiry (on a quorum of
/// Redlock's masters): every dlock lock (and every lock of the clients whose format the
/// mutex shares) has a lease, so this is another tool's data, or a lock that will never
/// be released by expiry.
async fn not_a_lock(locks: &Locks, name: &str) -> dlock::Result<Option<dlock::Error>> {
    let no_lease =
        |info: &dlock::LockInfo| info.kind == LockKind::Exclusive && info.remaining.is_none();
    let key = match locks {
        Locks::Client(client) => {
            let info = client.inspect(name).await?;
            no_lease(&info).then_some(info.key)
        }
        Locks::Redlock(redlock) => {
            let info = redlock.inspect(name).await?;
            let found: Vec<&dlock::LockInfo> = info
                .masters
                .iter()
                .filter_map(|master| master.info.as_ref().ok())
                .filter(|info| no_lease(info))
                .collect();
            (found.len() >= info.quorum).then(|| found[0].key.clone())
        }
    };
    Ok(key.map(|key| dlock::Error::WrongType {
        key,
        what: "a string without an expiry, which is not a dlock lock (every dlock lock has a lease): another tool's data, or another client's lock that never expires; nothing was changed".into(),
    }))
}

/// What a by-token release or extend found, against what the name's key holds.
enum Settled {
    /// The outcome stands.
    Done(dlock::Result<()>),
    /// No kind flag was given, and the key holds this kind: try it as that kind.
    Retry(KindArgs),
}

/// Settles the outcome of a release or extend of `kind` by token: with no kind flag, a
/// name holding read holds or permits says which kind the token's hold is (retry as it);
/// a token not found where the key holds another kind than the flag names is a wrong
/// kind (65), not a lost hold (77), and so is a token not found where the key holds a
/// string without an expiry (no dlock lock, on every topology).
async fn settle(
    locks: &Locks,
    kind: &KindArgs,
    name: &str,
    outcome: dlock::Result<()>,
) -> dlock::Result<Settled> {
    if matches!(outcome, Err(dlock::Error::Lost { .. })) {
        // Only a look that answered changes the outcome: a failed one leaves the hold lost.
        if let Ok(Some(not_a_lock)) = not_a_lock(locks, name).await {
            return Ok(Settled::Done(Err(not_a_lock)));
        }
    }
    let Locks::Client(client) = locks else {
        return Ok(Settled::Done(outcome));
    };
    let flagged = kind.names_a_kind();
    match &outcome {
        Err(dlock::Error::WrongType { .. }) if !flagged => {
            let held = match client.inspect(name).await?.kind {
                LockKind::Read => KindArgs {
                    read: true,
                    ..KindArgs::default()
                },
                // N only decides a hand-off to a waiter whose token names no N of its own
                // (the library's waiters name theirs): 1 never hands out one too many.
                LockKind::Semaphore => KindArgs {
                    permits: Some(1),
                    ..KindArgs::default()
                },
                _ => return Ok(Settled::Done(outcome)),
            };
            Ok(Settled::Retry(held))
        }
        Err(dlock::Error::Lost { .. }) => {
            let info = client.inspect(name).await?;
            let (holds, expected) = match (&info.kind, kind.read, kind.permits.is_some()) {
                (LockKind::Exclusive, true, _) | (LockKind::Exclusive, _, true) => (
                    "a string (a dlock mutex, fair mutex or write lock)",
                    kind.describe(),
                ),
                (LockKind::Read, false, _) => {
                    ("the read holds of a dlock read-write lock", kind.describe())
                }
                (LockKind::Semaphore, _, false) => {
                    ("the permits of a dlock semaphore", kind.describe())
                }
                _ => return Ok(Settled::Done(outcome)),
            };
            Ok(Settled::Done(Err(dlock::Error::WrongType {
                key: info.key,
                what: format!(
                    "{holds}, and no {expected} hold of this token: the token was taken with another kind flag, or its hold ended and another kind took the name"
                ),
            })))
        }
        _ => Ok(Settled::Done(outcome)),
    }
}

/// The hold's fencing token; on failure (the hold already lost, Redis unreachable) the
/// hold is released before the error is returned, so nothing stays held.
pub async fn fenced(guard: AnyGuard) -> dlock::Result<(AnyGuard, u64)> {
    match guard.fence().await {
        Ok(fence) => Ok((guard, fence)),
        Err(err) => {
            let _ = guard.unlock().await;
            Err(err)
        }
    }
}

/// Gives back the hold `token` of `kind` (a token printed by `dlock acquire`); on
/// Redlock, on every master (a majority must answer).
pub async fn release(locks: &Locks, kind: &KindArgs, name: &str, token: &str) -> dlock::Result<()> {
    let release = |kind: KindArgs| async move {
        lock_of(locks, &kind, name, LockOptions::default())?
            .release_token(token)
            .await
    };
    match settle(locks, kind, name, release(kind.clone()).await).await? {
        Settled::Done(outcome) => outcome,
        Settled::Retry(held) => release(held).await,
    }
}

/// The options an extend to `ttl` runs with: the new lease and `--replicas`, checked.
pub fn extend_options(
    ttl: Duration,
    lock_delay: Option<Duration>,
    replication: Option<crate::lease::Replication>,
) -> dlock::Result<LockOptions> {
    let options = crate::lease::with_lock_delay(LockOptions::default().ttl(ttl), lock_delay)?;
    crate::lease::Replication::apply(replication, options, "--ttl")
}

/// Restarts the lease of the hold `token` of `kind` at `ttl`; with `--replicas`, only
/// once the replicas have it (otherwise the hold is given back); on Redlock, when a
/// majority still holds it and extended it in time.
pub async fn extend(
    locks: &Locks,
    kind: &KindArgs,
    name: &str,
    token: &str,
    ttl: Duration,
    lock_delay: Option<Duration>,
    replication: Option<crate::lease::Replication>,
) -> dlock::Result<()> {
    let options = extend_options(ttl, lock_delay, replication)?;
    let extend = |kind: KindArgs| async move {
        lock_of(locks, &kind, name, options)?
            .extend_token(token, ttl)
            .await
    };
    match settle(locks, kind, name, extend(kind.clone()).await).await? {
        Settled::Done(outcome) => outcome,
        Settled::Retry(held) => extend(held).await,
    }
}

/// A token from `dlock acquire`: never empty, no whitespace or control characters.
pub fn check_token(token: Option<&str>) -> dlock::Result<()> {
    match token {
        Some(t) if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err(dlock::Error::InvalidArgument(format!(
                "{t:?} is not a lock token; pass the TOKEN printed by `dlock acquire`"
            )))
        }
        _ => Ok(()),
    }
}
