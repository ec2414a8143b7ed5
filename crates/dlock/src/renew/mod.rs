//! The watchdog: one renewal scheduler per lock handle (a [`Client`](crate::Client), a
//! [`Redlock`](crate::Redlock)), batching every held auto-renewed lease into few script
//! calls. Where the leases live is a [`RenewTarget`]: one server (a [`Backend`]), or a
//! Redlock's masters, which renew a lease when a majority of them did.
//!
//! A lease is due for renewal a third of its TTL after its last successful renewal. When
//! the scheduler wakes for the earliest due lease it also renews every lease due within the
//! next sixth of its TTL, so leases drift into a few groups and one round costs a handful of
//! calls (at most [`BATCH`] leases per call), not one per lock. Failed renewals are retried
//! until the lease's local deadline; the lost signal fires by its own timer.
//!
//! Unregistering removes the lease and then waits for any round already in flight, so no
//! renewal is ever sent after [`Registration::cancel`] returns — unlock calls it before
//! releasing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::backend::Backend;
use crate::lease;
use crate::observe;
use crate::options::Replicas;
use crate::script::ScriptCall;
use crate::signal::{self, LeaseCell, LostReason};

pub(crate) mod scripts;
pub(crate) use scripts::{Held, Linger, Renew, Renewal};

/// How a hold is recorded at the lock key, for the renewal and "still held?" scripts
/// (see `renew/holds.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// The key is a string holding the token.
    String,
    /// The key is a reentrant hash with a field per hold; the holds share its expiry.
    Reentrant,
    /// The key is a hash of leased entries (read holds, semaphore permits).
    Entry,
}

impl HoldKind {
    /// What a key holding this kind of hold is, in the words of `DLOCKTYPE` errors.
    pub fn wanted(self) -> &'static str {
        match self {
            HoldKind::String => "string",
            HoldKind::Reentrant => "reentrant",
            HoldKind::Entry => "entries",
        }
    }

    /// How the scripts name this kind of hold (`renew/holds.lua`).
    pub fn code(self) -> &'static str {
        match self {
            HoldKind::String => "s",
            HoldKind::Reentrant => "r",
            HoldKind::Entry => "e",
        }
    }
}

/// Most leases renewed by one script call (keeps each call short on the server).
pub const BATCH: usize = 200;

/// Renewal batches in flight at once (a cluster needs one per slot in use).
const CONCURRENT_BATCHES: usize = 32;

/// What the scheduler needs to renew one lease.
pub(crate) struct RenewalSpec {
    pub key: String,
    pub kind: HoldKind,
    /// Which key of the hold this is, for a hold at several keys (a multi-lock's names;
    /// see `signal::renewed_part`); 0 for a hold at one key.
    pub part: usize,
    pub token: String,
    pub ttl: Duration,
    /// How much longer than `ttl` Redis keeps the hold (`LockOptions::lock_delay`).
    pub delay: Duration,
    /// Stop renewing after this instant (a cap on the total hold time).
    pub hold_until: Option<Instant>,
    /// Renewals must reach this many replicas (`LockOptions::replicas`).
    pub replicas: Option<Replicas>,
    pub cell: LeaseCell,
}

struct Entry {
    spec: RenewalSpec,
    next_due: Instant,
    /// When the next renewal was planned, kept through retries: how late a renewal
    /// lands is measured from here.
    scheduled: Instant,
    /// The last attempt failed: renew exactly at `next_due`, not earlier with the group.
    retrying: bool,
}

struct Shared {
    entries: StdMutex<HashMap<u64, Entry>>,
    /// Held while a round is on the wire; `cancel` takes it to wait out such a round.
    in_flight: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
    /// Set by [`Renewer::stop`]: nothing is renewed any more.
    stopped: std::sync::atomic::AtomicBool,
    /// When the scheduler will next look at the leases on its own (`None`: not before it
    /// is woken). Written under the `entries` lock, so a lease due earlier than this, and
    /// only such a lease, wakes it: with many grants a second, waking for each (and
    /// rescanning every lease) was a wake-up per acquire.
    wake_at: StdMutex<Option<Instant>>,
    wake: mpsc::UnboundedSender<()>,
}

impl Shared {
    /// Wakes the scheduler if a lease is now due at `due`, before it would look on its
    /// own. Called with the `entries` lock held.
    fn due_at(&self, due: Instant) {
        let mut wake_at = self.wake_at.lock().unwrap();
        if wake_at.is_none_or(|at| due < at) {
            *wake_at = Some(due);
            let _ = self.wake.send(());
        }
    }
}

/// The renewal scheduler of one client.
pub struct Renewer {
    shared: Arc<Shared>,
}

impl Renewer {
    /// Waits out a renewal round on the wire: one that began before a lease was dropped
    /// from renewal (by unregistering it, or by its lost signal) renews nothing after.
    pub(crate) async fn settled(&self) {
        drop(self.shared.in_flight.lock().await);
    }

    pub(crate) fn start(target: Arc<dyn RenewTarget>, runtime: &tokio::runtime::Handle) -> Renewer {
        let (wake, wakeups) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            entries: StdMutex::new(HashMap::new()),
            in_flight: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
            stopped: std::sync::atomic::AtomicBool::new(false),
            wake_at: StdMutex::new(None),
            wake,
        });
        runtime.spawn(run(target, shared.clone(), wakeups));
        Renewer { shared }
    }

    /// Stops every renewal and waits out a round in flight ([`Client::shutdown`]).
    ///
    /// [`Client::shutdown`]: crate::Client::shutdown
    pub(crate) async fn stop(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.entries.lock().unwrap().clear();
        drop(self.shared.in_flight.lock().await);
        let _ = self.shared.wake.send(());
    }

    /// Starts renewing a lease that was just granted or renewed at `renewed_at`.
    pub(crate) fn register(&self, spec: RenewalSpec, renewed_at: Instant) -> Registration {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let next_due = renewed_at + spec.ttl / 3;
        let mut entries = self.shared.entries.lock().unwrap();
        // Checked under the lock `stop` clears the leases under: a lease registered while
        // it runs is either cleared by it or not added at all.
        if self.shared.stopped.load(Ordering::Acquire) {
            return Registration {
                id,
                shared: self.shared.clone(),
            };
        }
        entries.insert(
            id,
            Entry {
                spec,
                next_due,
                scheduled: next_due,
                retrying: false,
            },
        );
        self.shared.due_at(next_due);
        drop(entries);
        Registration {
            id,
            shared: self.shared.clone(),
        }
    }
}

/// One lease's place in the scheduler. Dropping it stops renewal (without waiting).
pub(crate) struct Registration {
    id: u64,
    shared: Arc<Shared>,
}

impl Registration {
    /// Stops renewal and waits until no renewal of this lease can be on the wire.
    pub(crate) async fn cancel(self) {
        self.shared.entries.lock().unwrap().remove(&self.id);
        // Usually no round is on the wire: taken at once, without a waiter's future (this
        // is every unlock).
        if self.shared.in_flight.try_lock().is_err() {
            drop(self.shared.in_flight.lock().await);
        }
    }
}

impl Registration {
    /// Renew with `ttl` from now on (after a manual extension sent at `extended_at`).
    pub(crate) fn set_ttl(&self, ttl: Duration, extended_at: Instant) {
        let mut entries = self.shared.entries.lock().unwrap();
        if let Some(entry) = entries.get_mut(&self.id) {
            entry.spec.ttl = ttl;
            entry.next_due = extended_at + ttl / 3;
            entry.scheduled = entry.next_due;
            entry.retrying = false;
            // A shorter lease is due before the scheduler would look again.
            self.shared.due_at(entry.next_due);
        }
    }

    /// Holds off renewal rounds until the returned guard is dropped.
    pub(crate) async fn pause(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.shared.in_flight.lock().await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.entries.lock().unwrap().remove(&self.id);
    }
}

async fn run(
    target: Arc<dyn RenewTarget>,
    shared: Arc<Shared>,
    mut wakeups: mpsc::UnboundedReceiver<()>,
) {
    loop {
        if shared.stopped.load(Ordering::Acquire) {
            return;
        }
        let next_wake = {
            let entries = shared.entries.lock().unwrap();
            let next = entries.values().map(|e| e.next_due).min();
            *shared.wake_at.lock().unwrap() = next;
            next
        };
        let sleep = async {
            match next_wake {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            woken = wakeups.recv() => {
                if woken.is_none() {
                    return; // the client is gone
                }
                continue; // a new lease may be due earlier
            }
            _ = sleep => {}
        }
        round(target.as_ref(), &shared).await;
    }
}

/// A lease due for renewal.
pub(crate) struct Due {
    id: u64,
    pub key: String,
    pub kind: HoldKind,
    pub token: String,
    pub ttl: Duration,
    /// How much longer than `ttl` Redis keeps it (`LockOptions::lock_delay`).
    pub delay: Duration,
    pub replicas: Option<Replicas>,
}

impl Due {
    /// What Redis keeps the renewed hold for: the lease and the lock-delay after it.
    pub fn kept_for(&self) -> Duration {
        self.ttl.saturating_add(self.delay)
    }
}

/// What one lease's renewal came to.
pub(crate) enum Renewed {
    /// Renewed by a request sent at this instant.
    Yes(Instant),
    /// Not held any more.
    Gone,
    /// Not renewed this time (retried while the lease lasts).
    Failed(String),
}

/// Where a renewer's leases live, and how one round renews them.
pub(crate) trait RenewTarget: Send + Sync + 'static {
    /// Renews every lease of `due`; what came of each, in order.
    fn renew<'a>(&'a self, due: &'a [Due]) -> BoxFuture<'a, Vec<Renewed>>;
}

impl RenewTarget for Backend {
    /// Batches per slot (and per replica count, each with its `WAIT`), sent concurrently:
    /// on a cluster there is one per slot in use, and waiting for each in turn would make
    /// a round of many locks as slow as their number.
    fn renew<'a>(&'a self, due: &'a [Due]) -> BoxFuture<'a, Vec<Renewed>> {
        Box::pin(async move {
            // Leases whose renewals wait for replicas go in batches of their own, each
            // with its `WAIT`. (A client renews such leases on a scheduler of their own,
            // so a slow replica does not hold up the renewal of its other leases.)
            let mut groups: HashMap<Option<Replicas>, Vec<(usize, String)>> = HashMap::new();
            for (index, lease) in due.iter().enumerate() {
                let entry = (index, lease.key.clone());
                groups.entry(lease.replicas).or_default().push(entry);
            }
            let mut batches: Vec<(Option<Replicas>, Vec<usize>)> = Vec::new();
            for (replicas, leases) in groups {
                for batch in self.batches(leases, |(_, key)| key.as_str(), BATCH) {
                    batches.push((replicas, batch.into_iter().map(|(i, _)| i).collect()));
                }
            }
            let sends = batches.into_iter().map(|(replicas, chunk)| {
                let leases: Vec<&Due> = chunk.iter().map(|&index| &due[index]).collect();
                async move {
                    let sent = Instant::now();
                    let reply = renew_batch(self, &leases, replicas).await;
                    (chunk, sent, reply)
                }
            });
            let replies = futures_util::stream::iter(sends)
                .buffer_unordered(CONCURRENT_BATCHES)
                .collect::<Vec<_>>()
                .await;
            let mut outcomes: Vec<Renewed> = due.iter().map(|_| Renewed::Gone).collect();
            for (chunk, sent, reply) in replies {
                for (position, &index) in chunk.iter().enumerate() {
                    outcomes[index] = match reply.as_ref().map(|r| r.get(position).copied()) {
                        Ok(Some(1)) => Renewed::Yes(sent),
                        Ok(_) => Renewed::Gone,
                        Err(err) => Renewed::Failed(err.to_string()),
                    };
                }
            }
            outcomes
        })
    }
}

/// Renews one batch (one slot on a cluster); with `replicas`, in one pipeline with a
/// `WAIT` (see `script::Call::run`): a renewal the replicas do not have fails as a whole
/// (retried while the leases last), since a failover would lose it.
async fn renew_batch(
    backend: &Backend,
    chunk: &[&Due],
    replicas: Option<Replicas>,
) -> redis::RedisResult<Vec<i64>> {
    let holds: Vec<Renewal> = chunk
        .iter()
        .map(|lease| Renewal {
            key: &lease.key,
            kind: lease.kind,
            token: &lease.token,
            lease_ms: lease.kept_for().as_millis() as u64,
        })
        .collect();
    let call = Renew { holds: &holds }.call();
    let Some(replicas) = replicas else {
        return call.run_on(backend).await;
    };
    let (reply, acknowledged) = call.with_wait(backend, replicas).await?;
    if acknowledged < replicas.count {
        let key = chunk.first().map_or("", |lease| lease.key.as_str());
        observe::not_replicated(key, replicas.count, acknowledged);
        return Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "only {acknowledged} of {} replicas acknowledged the renewal",
                replicas.count
            ),
        )));
    }
    Ok(redis::from_redis_value(reply)?)
}

/// Renews every lease that is due now or within the next sixth of its TTL.
async fn round(target: &dyn RenewTarget, shared: &Shared) {
    let in_flight = shared.in_flight.lock().await;
    let now = Instant::now();
    let due: Vec<Due> = {
        let mut entries = shared.entries.lock().unwrap();
        entries.retain(|_, entry| {
            let state = entry.spec.cell.state();
            if state.lost.is_some() || now >= state.valid_until {
                signal::declare_lost(&entry.spec.cell, LostReason::Expired);
                return false;
            }
            // A capped lease is left to run out; its lost signal fires at the deadline.
            entry.spec.hold_until.is_none_or(|cap| now < cap)
        });
        entries
            .iter()
            .filter(|(_, e)| {
                let early = if e.retrying {
                    Duration::ZERO
                } else {
                    e.spec.ttl / 6
                };
                e.next_due <= now + early
            })
            .map(|(id, e)| Due {
                id: *id,
                key: e.spec.key.clone(),
                kind: e.spec.kind,
                token: e.spec.token.clone(),
                ttl: e.spec.ttl,
                delay: e.spec.delay,
                replicas: e.spec.replicas,
            })
            .collect()
    };
    if due.is_empty() {
        return;
    }
    let outcomes = target.renew(&due).await;
    let mut entries = shared.entries.lock().unwrap();
    for (renewing, outcome) in due.iter().zip(outcomes) {
        let Some(entry) = entries.get_mut(&renewing.id) else {
            continue; // unregistered meanwhile
        };
        match outcome {
            Renewed::Yes(sent) => {
                tracing::trace!(lock = %entry.spec.key, "renewed");
                let cell = &entry.spec.cell;
                observe::renewed(entry.scheduled, || cell.state().valid_until, renewing.ttl);
                let until = lease::valid_until(sent, renewing.ttl);
                signal::renewed_part(&entry.spec.cell, entry.spec.part, until);
                entry.next_due = sent + renewing.ttl / 3;
                entry.scheduled = entry.next_due;
                entry.retrying = false;
            }
            Renewed::Gone => {
                signal::declare_lost(&entry.spec.cell, LostReason::Taken);
                entries.remove(&renewing.id);
            }
            Renewed::Failed(err) => {
                observe::renew_failed(&entry.spec.key, &err);
                // Retry soon, but not in a tight loop.
                entry.next_due = Instant::now()
                    + (renewing.ttl / 10)
                        .clamp(Duration::from_millis(5), Duration::from_millis(250));
                entry.retrying = true;
            }
        }
    }
    drop(entries);
    drop(in_flight);
}
