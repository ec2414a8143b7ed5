//! The Redlock mutex: granted when a majority of independent masters grant it within its
//! validity, with a fencing token that stays monotonic across quorums.
//!
//! Storage on each node is the plain [`Mutex`](crate::Mutex)'s (the token in a string key
//! with a PX lease, the fencing counter beside it), so the per-node scripts are the plain
//! mutex's own: a Redlock mutex and a single-node mutex on the same name exclude each
//! other on each node.
//!
//! **The fence.** Each granting node draws from its own counter and returns it; the grant
//! takes the largest, `m`. When fewer than a majority of nodes returned exactly `m`, a
//! second round raises the counter to `m` (only upward, only where the hold is still
//! ours) on enough granting nodes that a majority holds `m` before the grant counts. Any
//! later grant's majority meets that majority in a node where it could only be granted
//! after our hold there ended, so after the raise: its draw there exceeds `m`, and
//! so does its maximum. The common case (counters in step) costs no extra round trip.
//!
//! Fences have a clock floor (see `fencing.lua`): a node draws `max(counter + 1, its clock
//! in µs)`. When `m` is a node's clock, no raise is needed: every later grant draws at
//! least its node's clock at a later time, which exceeds `m` as long as the masters'
//! clocks agree within the time between two grants (the floor's own assumption, in
//! docs/decisions.md). So with counters behind the clocks, as they are, no grant raises.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use rand::Rng;

use super::{Redlock, Rest, Vote};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease;
use crate::notifier::Watch;
use crate::observe;
use crate::options::{jitter, Wait};
use crate::options::{LockOptions, Renewal};
use crate::script::{lua_script, LuaScript};
use crate::signal::{self, LeaseCell, LostReason, LostSignal};

static RAISE: LazyLock<LuaScript> = lua_script!(
    bare "redlock fence raise",
    "mutex/bare.lua",
    "fencing.lua",
    "redlock/raise.lua"
);

/// The bounds of the random delay after a split vote: it starts at the first and doubles
/// up to the second while contenders keep colliding.
const SPLIT_DELAY: std::ops::Range<Duration> =
    Duration::from_millis(10)..Duration::from_millis(200);

/// The kind name in logs and metrics.
const KIND: &str = "redlock";

/// A mutex granted by a majority of a [`Redlock`]'s masters. Cheap to clone; made by
/// [`Redlock::mutex`].
///
/// ```no_run
/// # async fn demo(redlock: dlock::Redlock) -> dlock::Result<()> {
/// use std::time::Duration;
/// use dlock::{LockOptions, Wait};
///
/// let mutex = redlock.mutex_with(
///     "billing:close-month",
///     LockOptions::default().renewed(Duration::from_secs(10)).wait(Wait::Timeout(Duration::from_secs(5))),
/// )?;
/// let guard = mutex.lock().await?;
/// // Pass the fence to the storage you write to; it rejects writes with an older one.
/// let fence = guard.fence();
/// # let _ = fence;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedlockMutex {
    redlock: Redlock,
    keys: Arc<LockKeys>,
    options: LockOptions,
}

/// What one attempt over all nodes came to.
enum Outcome {
    Granted {
        fence: u64,
        sent: Instant,
    },
    /// Held by another owner on enough nodes; `remaining` is the shortest lease among
    /// them; `split` when some nodes granted us (contention: retry after a random delay).
    Busy {
        remaining: Option<Duration>,
        split: bool,
    },
}

/// The votes of one acquire round.
#[derive(Default)]
struct Tally {
    /// (node, counter) of every node that granted.
    granted: Vec<(usize, u64)>,
    /// The largest fence that a node drew from its clock (the floor), if any.
    clock_fence: Option<u64>,
    busy: Vec<Option<Duration>>,
    failures: Vec<(usize, Error)>,
    /// Nodes that answered without granting (held by another, another kind): nothing
    /// of the round is there to give back.
    refused: Vec<usize>,
}

impl RedlockMutex {
    pub(crate) fn new(redlock: Redlock, name: &str, options: LockOptions) -> Result<Self> {
        options.validate()?;
        if options.replicas.is_some() {
            return Err(Error::InvalidArgument(
                "replica acknowledgement does not apply to Redlock: each node is an independent master and the majority is the acknowledgement".into(),
            ));
        }
        redlock.validate_node_timeout(options.ttl)?;
        let keys = Arc::new(LockKeys::new(redlock.prefix(), name)?);
        Ok(RedlockMutex {
            redlock,
            keys,
            options,
        })
    }

    /// The lock name (without the prefix).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key that holds the lock on every node.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// One attempt on every node. Fails with [`Error::Busy`] when another owner holds it
    /// on too many nodes, [`Error::NoQuorum`] when too many nodes did not answer.
    pub async fn try_lock(&self) -> Result<RedlockGuard> {
        self.acquire(Wait::NoWait).await
    }

    /// Takes the lock, waiting according to the [`Wait`] policy. Waiting is notified on
    /// every node: any node's release wakes the waiter, and an abandoned lock is taken
    /// when its lease ends. [`Error::NoQuorum`] is retried within the wait budget.
    ///
    /// Cancel-safe: when the returned future is dropped, whatever it may have been
    /// granted on any node is given back.
    pub async fn lock(&self) -> Result<RedlockGuard> {
        self.acquire(self.options.wait).await
    }

    /// Gives back the hold of `token` on every node. Fails with [`Error::Lost`] when no
    /// node held it, and with [`Error::NoQuorum`] when it cannot be told (too many nodes
    /// did not answer; their copies end with the lease).
    pub async fn release_token(&self, token: &str) -> Result<()> {
        self.release_after(token, super::RequestsEnd::default())
            .await
    }

    /// [`release_token`](Self::release_token), each node's release sent once the
    /// request of `after` there ended.
    async fn release_after(&self, token: &str, after: super::RequestsEnd) -> Result<()> {
        let timeout = self.redlock.node_timeout(self.options.ttl);
        let outcome = self
            .redlock
            .release_everywhere(&self.keys, token, timeout, after)
            .await;
        let nodes = self.redlock.nodes();
        if outcome.released > 0 && outcome.released + outcome.failures.len() >= self.quorum() {
            Ok(())
        } else if outcome.not_held > nodes - self.quorum() {
            Err(Error::Lost {
                name: self.keys.name.clone(),
            })
        } else if outcome.released > 0 && outcome.failures.is_empty() {
            Ok(())
        } else {
            Err(self.no_quorum(outcome.released, outcome.failures))
        }
    }

    /// Resets the lease of the hold of `token` to `ttl` on every node that still holds
    /// it; succeeds when a majority did, within the new lease's validity. Fails with
    /// [`Error::Lost`] when too few nodes hold it any more.
    pub async fn extend_token(&self, token: &str, ttl: Duration) -> Result<()> {
        lease::validate_ttl(ttl)?;
        self.redlock.validate_node_timeout(ttl)?;
        extend_on_quorum(&self.redlock, &self.keys, token, ttl)
            .await
            .map(|_| ())
    }

    /// The largest fencing token any node drew for this lock (0 when never drawn;
    /// nodes that do not answer are skipped).
    pub async fn last_fence(&self) -> Result<u64> {
        let timeout = self.redlock.node_timeout(self.options.ttl);
        let mut largest = None;
        let mut failures = Vec::new();
        let fence_key = self.keys.fence.clone();
        self.redlock
            .fan_out(
                timeout,
                Rest::Drop,
                move |client| {
                    let fence_key = fence_key.clone();
                    async move { client.get_string(&fence_key, "counter").await }
                },
                |(index, vote)| {
                    match vote {
                        Ok(value) => {
                            let value = value.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                            largest = Some(largest.unwrap_or(0).max(value));
                        }
                        Err(err) => failures.push((index, err)),
                    }
                    false
                },
            )
            .await;
        largest.ok_or_else(|| self.no_quorum(0, self.describe(failures)))
    }

    fn quorum(&self) -> usize {
        self.redlock.quorum()
    }

    fn describe(&self, failures: Vec<(usize, Error)>) -> Vec<String> {
        failures
            .into_iter()
            .map(|(index, err)| format!("{}: {err}", self.redlock.inner.nodes[index].label))
            .collect()
    }

    fn no_quorum(&self, reached: usize, failures: Vec<String>) -> Error {
        Error::NoQuorum {
            name: Some(self.keys.name.clone()),
            needed: self.quorum(),
            reached,
            nodes: self.redlock.nodes(),
            failures,
        }
    }

    /// One round on every node with `token`: a grant by a majority within the lease's
    /// validity (fence raised where needed), or why not. Whatever was granted to a round
    /// that does not count is given back by the caller's [`Attempt`].
    async fn attempt(&self, claim: &mut Attempt<'_>) -> Result<Outcome> {
        let token = claim.token.as_str();
        let ttl = self.options.ttl;
        let ttl_ms = ttl.as_millis() as u64;
        let (nodes, quorum) = (self.redlock.nodes(), self.quorum());
        let timeout = self.redlock.node_timeout(ttl);
        let keys = &self.keys;
        let sent = Instant::now();
        let mut tally = Tally::default();
        let stats = self.redlock.inner.stats.clone();
        stats
            .rounds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        claim.requests = self
            .redlock
            .fan_out(
                timeout,
                // The slower nodes' grants still land: the hold then lives on every node
                // that answers, so it survives losing some of the quorum later.
                Rest::Finish,
                {
                    let (keys, token) = (keys.clone(), Arc::<str>::from(token));
                    move |client| {
                        let (keys, token, stats) = (keys.clone(), token.clone(), stats.clone());
                        async move {
                            let reply = acquire_on(client, &keys, &token, ttl_ms).await;
                            // Counted here, not in the tally: the rest of the round's
                            // grants land after the decision, and draw fences too.
                            if matches!(reply.as_deref(), Ok([1, ..])) {
                                stats
                                    .node_grants
                                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            reply
                        }
                    }
                },
                |(index, vote): Vote<Vec<i64>>| {
                    match vote.and_then(|reply| read_acquire(&reply)) {
                        Ok(NodeReply::Granted { fence, clock }) => {
                            tally.granted.push((index, fence));
                            if clock {
                                tally.clock_fence = tally.clock_fence.max(Some(fence));
                            }
                        }
                        Ok(NodeReply::Busy(remaining)) => {
                            tally.busy.push(remaining);
                            tally.refused.push(index);
                        }
                        Ok(NodeReply::WrongType(what)) => {
                            // Another kind at the lock key: nothing of ours there. (A bad
                            // counter, "counter", can come with our own resent grant.)
                            if what == "string" {
                                tally.refused.push(index);
                            }
                            tally.failures.push((
                            index,
                            Error::WrongType {
                                key: match what {
                                    "counter" => keys.fence.clone(),
                                    _ => keys.key.clone(),
                                },
                                what: format!("another kind of value; this Redlock mutex needs a {what} there"),
                            },
                        ));
                        }
                        Err(err) => tally.failures.push((index, err)),
                    }
                    // Decided: a quorum granted; or it cannot be, and why is certain:
                    // another holder has too many nodes, too many nodes failed, or the
                    // votes split between contenders. Otherwise every node is heard
                    // (within the node timeout), to tell a busy lock from unreachable
                    // nodes.
                    let (granted, busy, failed) =
                        (tally.granted.len(), tally.busy.len(), tally.failures.len());
                    let pending = nodes - granted - busy - failed;
                    granted >= quorum
                        || (granted + pending < quorum
                            && (busy > nodes - quorum
                                || failed > nodes - quorum
                                || (granted > 0 && busy > 0)))
                },
            )
            .await;
        claim.refused = std::mem::take(&mut tally.refused);
        if tally.granted.len() >= quorum {
            let fence = self
                .settle_fence(token, &tally.granted, tally.clock_fence)
                .await;
            let valid = Instant::now() < lease::valid_until(sent, ttl);
            match fence {
                Some(fence) if valid => return Ok(Outcome::Granted { fence, sent }),
                Some(_) => tally.failures.push((
                    usize::MAX,
                    Error::Connection(redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the quorum answered after the lease's validity ended",
                    ))),
                )),
                None => tally.failures.push((
                    usize::MAX,
                    Error::Connection(redis::RedisError::from(std::io::Error::other(
                        "the fence could not be raised on a majority",
                    ))),
                )),
            }
        }
        // Not granted. Busy when the other holder's nodes alone keep us out, or every
        // node answered (a split vote); otherwise the nodes that failed are the problem:
        // with them the round could have been granted.
        let failed = tally.failures.len();
        let split = !tally.granted.is_empty() && !tally.busy.is_empty();
        // A majority that granted too late, or could not be fenced, is never "busy".
        let busy = tally.granted.len() < quorum
            && (tally.busy.len() > nodes - quorum
                || failed == 0
                || (split && failed <= nodes - quorum));
        if !busy {
            let configuration = tally
                .failures
                .iter()
                .filter(|(_, err)| !err.is_transient())
                .count();
            if configuration > nodes - quorum {
                // A majority refuses for a reason retrying will not fix (another kind of
                // lock on the name, an ACL, ...): say that, not "unreachable".
                let (_, err) = tally
                    .failures
                    .into_iter()
                    .find(|(_, err)| !err.is_transient())
                    .expect("counted above");
                return Err(err);
            }
            let mut failures: Vec<String> = tally
                .failures
                .into_iter()
                .map(|(index, err)| match self.redlock.inner.nodes.get(index) {
                    Some(node) => format!("{}: {err}", node.label),
                    None => err.to_string(),
                })
                .collect();
            let held_elsewhere = tally.busy.len();
            if held_elsewhere > 0 {
                failures.push(format!("{held_elsewhere} held by another owner"));
            }
            // A majority that granted too late, or could not be fenced, granted nothing.
            let reached = tally.granted.len().min(quorum - 1);
            return Err(self.no_quorum(reached, failures));
        }
        Ok(Outcome::Busy {
            remaining: tally.busy.iter().flatten().min().copied(),
            split: !tally.granted.is_empty(),
        })
    }

    /// The grant's fence: the largest counter of the granting nodes, raised on enough of
    /// them that a majority holds it, unless it is a node's clock (see the module docs).
    /// `None` when that majority cannot be made.
    async fn settle_fence(
        &self,
        token: &str,
        granted: &[(usize, u64)],
        clock_fence: Option<u64>,
    ) -> Option<u64> {
        let fence = granted.iter().map(|&(_, fence)| fence).max()?;
        let in_step = granted.iter().filter(|&&(_, f)| f == fence).count();
        if in_step >= self.quorum()
            || clock_fence == Some(fence)
            || !self.redlock.inner.raise_fences
        {
            return Some(fence);
        }
        let behind: Vec<usize> = granted
            .iter()
            .filter(|&&(_, f)| f < fence)
            .map(|&(index, _)| index)
            .collect();
        let timeout = self.redlock.node_timeout(self.options.ttl);
        let raises = behind.iter().map(|&index| {
            let node = &self.redlock.inner.nodes[index];
            async move {
                let raise = async {
                    let client = node.client().await?;
                    RAISE
                        .call()
                        .key(&self.keys.key)
                        .key(&self.keys.fence)
                        .arg(token)
                        .arg(fence)
                        .run::<i64>(&client)
                        .await
                };
                matches!(tokio::time::timeout(timeout, raise).await, Ok(Ok(1)))
            }
        });
        let raised = futures_util::future::join_all(raises)
            .await
            .into_iter()
            .filter(|&ok| ok)
            .count();
        (in_step + raised >= self.quorum()).then_some(fence)
    }

    async fn acquire(&self, wait: Wait) -> Result<RedlockGuard> {
        let started = Instant::now();
        let deadline = match wait {
            Wait::Timeout(timeout) => started.checked_add(timeout),
            Wait::NoWait | Wait::Forever => None,
        };
        let past_deadline = || deadline.is_some_and(|d| Instant::now() >= d);
        // Waiters of one handle take turns: only the first waits on the masters, the
        // others wait here for their turn (see `Turnstile`). A single attempt does not
        // queue.
        let mut turn = match wait {
            Wait::NoWait => None,
            _ => {
                let turnstile = self.redlock.turnstile(&self.keys.key);
                let turn = match turnstile.clone().try_lock_owned() {
                    Ok(turn) => turn,
                    Err(_) => {
                        let queued = turnstile.lock_owned();
                        match deadline {
                            Some(deadline) => {
                                let until = tokio::time::Instant::from_std(deadline);
                                match tokio::time::timeout_at(until, queued).await {
                                    Ok(turn) => turn,
                                    Err(_) => return Err(self.timed_out(started)),
                                }
                            }
                            None => queued.await,
                        }
                    }
                };
                Some(turn)
            }
        };
        let connected = self
            .redlock
            .inner
            .nodes
            .iter()
            .filter(|node| node.connected().is_some())
            .count();
        // The previous waiter's subscriptions, if it was granted and left them: live since
        // before its grant, so every release after that grant has woken them. Start by
        // waiting on them; the lock was just taken.
        let mut watches: Option<Vec<Watch>> = turn
            .as_mut()
            .and_then(|turn| turn.take())
            .filter(|inherited| inherited.len() == connected);
        let mut wait_first = watches.is_some();
        let mut poll = self.options.backoff.min;
        let mut split_delay = SPLIT_DELAY.start;
        let mut attempts: u32 = 0;
        loop {
            if self.redlock.is_closed() {
                return Err(Error::Closed);
            }
            let (remaining, retry_soon, split) = if std::mem::take(&mut wait_first) {
                (None, false, false)
            } else {
                for watch in watches.iter_mut().flatten() {
                    watch.mark_seen();
                    // A wake left over from a release before this round: the round sees
                    // what that release did.
                    watch.discard_stored_wake();
                }
                attempts += 1;
                // A fresh token per round: a failed round's give-back runs in the
                // background and must not delete a later round's grant.
                let mut claim = Attempt::new(self, self.redlock.new_token());
                let outcome = self.attempt(&mut claim).await;
                for watch in watches.iter_mut().flatten() {
                    watch.wake_used();
                }
                let decided = match outcome {
                    Ok(Outcome::Granted { fence, sent }) => {
                        let token = claim.keep();
                        let requests = std::mem::take(&mut claim.requests);
                        return self.granted(
                            token,
                            fence,
                            sent,
                            requests,
                            attempts,
                            started,
                            || {
                                // Hand the live subscriptions to the next waiter in turn:
                                // any wake they hold now came before this grant.
                                if let (Some(turn), Some(mut watches)) =
                                    (turn.as_mut(), watches.take())
                                {
                                    for watch in &mut watches {
                                        watch.discard_stored_wake();
                                    }
                                    **turn = Some(watches);
                                }
                            },
                        );
                    }
                    // Nodes that answered busy are skipped by the give-back: a round every
                    // node refused gives nothing back.
                    Ok(Outcome::Busy { remaining, split }) => (remaining, false, split),
                    Err(err) if err.is_transient() => {
                        if wait == Wait::NoWait || past_deadline() {
                            return Err(err);
                        }
                        observe::retrying(KIND, self.name(), &err, attempts == 1);
                        (None, true, false)
                    }
                    Err(err) => return Err(err),
                };
                drop(claim);
                if wait == Wait::NoWait {
                    observe::busy(KIND, self.name());
                    return Err(Error::Busy {
                        name: self.name().to_string(),
                        remaining: decided.0,
                    });
                }
                if past_deadline() {
                    return Err(self.timed_out(started));
                }
                decided
            };
            let Some(active) = watches.as_mut() else {
                // Subscribe on every connected node, then re-check at once: a release in
                // between would otherwise go unnoticed.
                // All at once, within what is left of the budget.
                let budget = deadline.map_or(Duration::MAX, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                let subscribing = self
                    .redlock
                    .inner
                    .nodes
                    .iter()
                    .filter_map(|node| node.connected())
                    .map(|client| {
                        tokio::time::timeout(budget, client.notifier().watch(&self.keys.channel))
                    });
                let subscribed = futures_util::future::join_all(subscribing).await;
                watches = Some(subscribed.into_iter().flatten().collect());
                continue;
            };
            let budget_left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if split {
                // Contenders split the votes: retry after a random delay (Redlock's rule,
                // growing while they keep colliding), deaf to releases meanwhile: the
                // give-backs of the split round announce releases, and woken by those the
                // contenders would collide again at once, round after round.
                let delay = rand::rng().random_range(Duration::ZERO..=split_delay);
                split_delay = (split_delay * 2).min(SPLIT_DELAY.end);
                tokio::time::sleep(delay.min(budget_left)).await;
                continue;
            }
            let live = active.iter().any(Watch::is_live);
            // Nodes failed: retry after a random, growing delay. Otherwise sleep until a
            // release is announced or the holder's lease ends.
            let mut sleep = match (retry_soon || !live, remaining) {
                (true, Some(remaining)) => jitter(poll).min(remaining + slack()),
                (true, None) => jitter(poll),
                // Notified, but never longer than the backoff's bound: a wake goes to one
                // waiter per client and node, and one that then loses a split vote does
                // not pass it on (the others' give-backs announce again, but a waiter
                // must not depend on that).
                (false, Some(remaining)) => (remaining + slack()).min(self.options.backoff.max),
                (false, None) => self.options.backoff.max,
            };
            if retry_soon || !live {
                poll = poll.saturating_mul(2).min(self.options.backoff.max);
            }
            if let Some(deadline) = deadline {
                sleep = sleep.min(deadline.saturating_duration_since(Instant::now()));
            }
            if retry_soon {
                tokio::time::sleep(sleep).await;
                continue;
            }
            // A release publishes on each master as it frees the lock there: a round sent
            // on the first one's word could meet the others not yet freed and split.
            // Wait for as many words as a round needs (of the masters that can send them).
            let needed = self
                .quorum()
                .min(active.iter().filter(|w| w.is_live()).count());
            until_heard(active, needed.max(1), sleep).await;
        }
    }

    /// A round granted `token`: starts its guard (and runs `hand_over`, which passes the
    /// waiter's subscriptions on), or gives the grant back when the handle was shut down.
    #[allow(clippy::too_many_arguments)]
    fn granted(
        &self,
        token: String,
        fence: u64,
        sent: Instant,
        requests: super::RequestsEnd,
        attempts: u32,
        started: Instant,
        hand_over: impl FnOnce(),
    ) -> Result<RedlockGuard> {
        match RedlockGuard::start(self.clone(), token.clone(), fence, sent) {
            Some(mut guard) => {
                guard.requests = requests;
                self.redlock
                    .inner
                    .stats
                    .grants
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                hand_over();
                observe::acquired(KIND, self.name(), attempts, started.elapsed());
                Ok(guard)
            }
            None => {
                let every = (0..self.redlock.nodes()).collect();
                self.redlock
                    .give_back(self.keys.clone(), token, self.options.ttl, every, requests);
                Err(Error::Closed)
            }
        }
    }

    fn timed_out(&self, started: Instant) -> Error {
        observe::timed_out(KIND, self.name(), started.elapsed());
        Error::TimedOut {
            name: self.name().to_string(),
            waited: started.elapsed(),
        }
    }
}

/// Waits until `needed` of `watches` were woken (each counts once), or `sleep` passed.
async fn until_heard(watches: &mut [Watch], needed: usize, sleep: Duration) {
    let until = tokio::time::Instant::now() + sleep;
    let mut heard = vec![false; watches.len()];
    let mut count = 0;
    while count < needed {
        let waiting: Vec<_> = watches
            .iter_mut()
            .zip(heard.iter())
            .enumerate()
            .filter(|(_, (_, heard))| !**heard)
            .map(|(index, (watch, _))| {
                Box::pin(async move {
                    watch.notified().await;
                    index
                })
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        match tokio::time::timeout_at(until, futures_util::future::select_all(waiting)).await {
            Ok((index, _, _)) => {
                heard[index] = true;
                count += 1;
            }
            Err(_) => return,
        }
    }
}

/// A little past a holder's expiry, random so that waiters do not all arrive at once.
fn slack() -> Duration {
    Duration::from_micros(rand::rng().random_range(500..2500))
}

/// One round's token until the round is granted: dropping it (a failed round, or the
/// whole wait dropped by `timeout`/`select!` mid-round) gives back whatever any node
/// may have granted to it, on every node, in the background.
struct Attempt<'a> {
    mutex: &'a RedlockMutex,
    token: String,
    /// Nodes that answered without granting: nothing to give back there.
    refused: Vec<usize>,
    /// When the round's requests end: a node's give-back waits for its request.
    requests: super::RequestsEnd,
    armed: bool,
}

impl<'a> Attempt<'a> {
    fn new(mutex: &'a RedlockMutex, token: String) -> Self {
        Attempt {
            mutex,
            token,
            refused: Vec::new(),
            requests: super::RequestsEnd::default(),
            armed: true,
        }
    }

    /// The round was granted: the guard takes the token over.
    fn keep(&mut self) -> String {
        self.armed = false;
        std::mem::take(&mut self.token)
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.armed {
            let targets = (0..self.mutex.redlock.nodes())
                .filter(|node| !self.refused.contains(node))
                .collect();
            self.mutex.redlock.give_back(
                self.mutex.keys.clone(),
                std::mem::take(&mut self.token),
                self.mutex.options.ttl,
                targets,
                std::mem::take(&mut self.requests),
            );
        }
    }
}

enum NodeReply {
    /// Granted with `fence`; `clock`: the fence is the node's clock (the floor).
    Granted {
        fence: u64,
        clock: bool,
    },
    Busy(Option<Duration>),
    /// The lock key (`"string"`) or the counter (`"counter"`) holds another kind.
    WrongType(&'static str),
}

fn read_acquire(reply: &[i64]) -> Result<NodeReply> {
    match reply {
        [1, fence, clock] if *fence > 0 => Ok(NodeReply::Granted {
            fence: *fence as u64,
            clock: *clock == 1,
        }),
        [0, pttl] => Ok(NodeReply::Busy(
            (*pttl >= 0).then(|| Duration::from_millis(*pttl as u64)),
        )),
        [-1] => Ok(NodeReply::WrongType("string")),
        [-2] => Ok(NodeReply::WrongType("counter")),
        other => Err(Error::unexpected_reply(other)),
    }
}

/// The plain mutex's acquire script on one node, drawing the fence with the grant.
async fn acquire_on(client: Client, keys: &LockKeys, token: &str, ttl_ms: u64) -> Result<Vec<i64>> {
    crate::mutex::ACQUIRE
        .call()
        .key(&keys.key)
        .key(&keys.fence)
        .arg(token)
        .arg(ttl_ms)
        .arg("1")
        .arg("1")
        .run(&client)
        .await
}

/// The plain mutex's release on one node: true released, false not held there.
pub(crate) async fn release_on(client: Client, keys: &LockKeys, token: &str) -> Result<bool> {
    let released: i64 = crate::mutex::RELEASE
        .call()
        .key(&keys.key)
        .arg(token)
        .arg(&keys.channel)
        .run(&client)
        .await?;
    match released {
        1 => Ok(true),
        // Another kind on the key (-1) cannot be our hold either.
        0 | -1 => Ok(false),
        other => Err(Error::unexpected_reply(other)),
    }
}

/// Extends `token`'s hold to `ttl` on every node; `Ok(sent)` when a majority extended it
/// within the new validity (`sent`: when the round started).
async fn extend_on_quorum(
    redlock: &Redlock,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
) -> Result<Instant> {
    let ttl_ms = ttl.as_millis() as u64;
    let (nodes, quorum) = (redlock.nodes(), redlock.quorum());
    let timeout = redlock.node_timeout(ttl);
    let sent = Instant::now();
    let (mut extended, mut not_held, mut failures) = (0, 0, Vec::new());
    let (key, token) = (keys.key.clone(), token.to_string());
    redlock
        .fan_out(
            timeout,
            Rest::Finish,
            move |client| {
                let (key, token) = (key.clone(), token.clone());
                async move {
                    let reply: Vec<i64> = crate::renew::RENEW
                        .call()
                        .key(&key)
                        .arg("s")
                        .arg(&token)
                        .arg(ttl_ms)
                        .run(&client)
                        .await?;
                    Ok(reply.first() == Some(&1))
                }
            },
            // Decided once a majority extended it, or too many no longer hold it; the
            // slower nodes' requests still run to their end in the background.
            |(index, vote)| {
                match vote {
                    Ok(true) => extended += 1,
                    Ok(false) => not_held += 1,
                    Err(err) => {
                        failures.push(format!("{}: {err}", redlock.inner.nodes[index].label))
                    }
                }
                extended >= quorum || not_held > nodes - quorum
            },
        )
        .await;
    if extended >= quorum && Instant::now() < lease::valid_until(sent, ttl) {
        Ok(sent)
    } else if not_held > nodes - quorum {
        Err(Error::Lost {
            name: keys.name.clone(),
        })
    } else {
        Err(Error::NoQuorum {
            name: Some(keys.name.clone()),
            needed: quorum,
            reached: extended,
            nodes,
            failures,
        })
    }
}

/// What the guard and its renewal task share.
struct HoldShared {
    cell: LeaseCell,
    /// The lease renewals and extends ask for, in milliseconds (an extend changes it).
    ttl_ms: std::sync::atomic::AtomicU64,
    /// When the last successful round (grant, renewal or extend) started.
    last_round: std::sync::Mutex<Instant>,
    /// Wakes the renewal task after a manual extend, to plan from the new lease.
    extended: tokio::sync::Notify,
    /// Held by a renewal round or a manual extend: they never interleave, so the last
    /// reply is the lease the nodes have.
    round: tokio::sync::Mutex<()>,
}

/// Proof of holding a [`RedlockMutex`] on a majority of its masters.
///
/// **Dropping** it without [`unlock`](RedlockGuard::unlock) stops renewal and releases it
/// on every node in the background.
#[must_use = "dropping a guard releases the lock at once (in the background)"]
pub struct RedlockGuard {
    mutex: RedlockMutex,
    token: String,
    fence: u64,
    shared: Arc<HoldShared>,
    renewal: Option<tokio::task::JoinHandle<()>>,
    /// When the granting round's requests end: a release waits for them, or a late
    /// grant of that round on a slow node could land after it.
    requests: super::RequestsEnd,
    hold_id: u64,
    done: bool,
}

impl std::fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.mutex.name())
            .field("fence", &self.fence)
            .field("state", &self.shared.cell.state())
            .finish()
    }
}

impl RedlockGuard {
    /// Starts holding a grant whose round was sent at `sent`; `None` after shutdown began.
    fn start(mutex: RedlockMutex, token: String, fence: u64, sent: Instant) -> Option<Self> {
        let ttl = mutex.options.ttl;
        let shared = Arc::new(HoldShared {
            cell: signal::new_cell(
                lease::valid_until(sent, ttl),
                mutex.keys.clone(),
                &token,
                mutex.redlock.inner.session.sink(),
            ),
            ttl_ms: std::sync::atomic::AtomicU64::new(ttl.as_millis() as u64),
            last_round: std::sync::Mutex::new(sent),
            extended: tokio::sync::Notify::new(),
            round: tokio::sync::Mutex::new(()),
        });
        let renewal = match mutex.options.renewal {
            Renewal::Manual => None,
            Renewal::Auto { max_hold } => Some(mutex.redlock.inner.session.runtime().spawn(renew(
                mutex.clone(),
                token.clone(),
                shared.clone(),
                max_hold.and_then(|cap| sent.checked_add(cap)),
            ))),
        };
        let abort = renewal.as_ref().map(|task| task.abort_handle());
        let Some(hold_id) =
            mutex
                .redlock
                .track_hold(mutex.keys.clone(), &token, &shared.cell, abort)
        else {
            if let Some(task) = renewal {
                task.abort();
            }
            return None;
        };
        Some(RedlockGuard {
            mutex,
            token,
            fence,
            shared,
            renewal,
            requests: super::RequestsEnd::default(),
            hold_id,
            done: false,
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// The random token that identifies this hold on every node.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this grant: larger than that of every earlier grant of the
    /// same lock by a majority of the same masters (see the module's notes on how it
    /// stays monotonic across quorums). Drawn with the grant.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Until when this hold may be assumed held, by the local monotonic clock: the start
    /// of the last successful round (grant, renewal or extend) plus the lease, minus
    /// [`drift_allowance`](crate::drift_allowance).
    pub fn valid_until(&self) -> Instant {
        self.shared.cell.state().valid_until
    }

    /// How much of the validity is left (zero once it passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// A signal that fires when this hold may have been lost: a renewal could not reach
    /// a majority before the validity ended ([`LostReason::Expired`]), or a majority no
    /// longer holds it ([`LostReason::Taken`]).
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(&self.shared.cell)
    }

    /// Resolves when this hold may have been lost, with the reason.
    pub async fn lost(&self) -> LostReason {
        self.lost_signal().wait().await
    }

    /// Resets the lease to `ttl` on every node that still holds it; succeeds when a
    /// majority did within the new validity. [`Error::Lost`] (and the lost signal) when
    /// a majority no longer holds it; [`Error::NoQuorum`] when too many nodes did not
    /// answer (the old validity still stands).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        lease::validate_ttl(ttl)?;
        self.mutex.redlock.validate_node_timeout(ttl)?;
        let _round = self.shared.round.lock().await;
        let sent = Instant::now();
        let extended =
            extend_on_quorum(&self.mutex.redlock, &self.mutex.keys, &self.token, ttl).await;
        match extended {
            Ok(sent) => {
                signal::renewed(&self.shared.cell, lease::valid_until(sent, ttl));
                self.shared
                    .ttl_ms
                    .store(ttl.as_millis() as u64, std::sync::atomic::Ordering::Release);
                *self.shared.last_round.lock().unwrap() = sent;
                self.shared.extended.notify_one();
                Ok(())
            }
            Err(err @ Error::Lost { .. }) => {
                signal::declare_lost(&self.shared.cell, LostReason::Taken);
                Err(err)
            }
            Err(err) => {
                // Nodes that answered (or answer late) did set the new lease, which may be
                // shorter than the old one: assume the shorter of the two, and have the
                // renewal plan from it.
                signal::shortened(&self.shared.cell, lease::valid_until(sent, ttl));
                self.shared.extended.notify_one();
                Err(err)
            }
        }
    }

    /// Stops renewal, then gives the hold back on every node. Fails with [`Error::Lost`]
    /// when a majority no longer held it, with [`Error::NoQuorum`] when too many nodes did
    /// not answer (their copies end with the lease).
    pub async fn unlock(mut self) -> Result<()> {
        self.stop_renewal().await;
        let after = std::mem::take(&mut self.requests);
        let released = self.mutex.release_after(&self.token, after).await;
        self.done = true;
        self.mutex.redlock.untrack_hold(self.hold_id);
        if released.is_ok() {
            observe::released(KIND, self.name());
        }
        released
    }

    /// Gives up the guard without releasing: renewal stops and the lock stays held until
    /// its lease ends or someone releases it with the returned token.
    pub fn into_token(mut self) -> String {
        self.done = true;
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
        self.mutex.redlock.untrack_hold(self.hold_id);
        std::mem::take(&mut self.token)
    }

    async fn stop_renewal(&mut self) {
        if self.renewal.is_some() {
            // Taken so no round is on the wire when the task ends. The task is taken only
            // then: if this future is dropped while waiting, the drop aborts it.
            let _round = self.shared.round.lock().await;
            if let Some(task) = self.renewal.take() {
                task.abort();
            }
        }
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
        if self.mutex.redlock.untrack_hold(self.hold_id) {
            self.mutex.redlock.give_back(
                self.mutex.keys.clone(),
                std::mem::take(&mut self.token),
                Duration::from_millis(
                    self.shared
                        .ttl_ms
                        .load(std::sync::atomic::Ordering::Acquire),
                ),
                (0..self.mutex.redlock.nodes()).collect(),
                std::mem::take(&mut self.requests),
            );
        }
    }
}

/// Keeps a hold renewed on a majority: a round a third of the lease after the last
/// successful one, retried sooner when it fails, until the validity ends (declared
/// [`LostReason::Expired`]; the lost signal fires by its own timer even before) or a
/// majority says the hold is gone.
async fn renew(
    mutex: RedlockMutex,
    token: String,
    shared: Arc<HoldShared>,
    hold_until: Option<Instant>,
) {
    let mut failing = false;
    loop {
        let ttl = Duration::from_millis(shared.ttl_ms.load(std::sync::atomic::Ordering::Acquire));
        let last = *shared.last_round.lock().unwrap();
        let now = Instant::now();
        // A third of the lease after the last round, and no later than a third of the
        // way to the validity's end (which a failed shorter extend may have moved up).
        let left = shared
            .cell
            .state()
            .valid_until
            .saturating_duration_since(now);
        let due = if failing {
            now + (ttl / 10).max(Duration::from_millis(5))
        } else {
            (last + ttl / 3).min(now + left / 3)
        };
        tokio::select! {
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(due)) => {}
            // A manual extend set a new lease: plan again from it.
            _ = shared.extended.notified() => {
                failing = false;
                continue;
            }
        }
        let state = shared.cell.state();
        let now = Instant::now();
        if state.lost.is_some() {
            return;
        }
        if now >= state.valid_until {
            // No majority renewed it in time: declared, as the single-node renewer does.
            signal::declare_lost(&shared.cell, LostReason::Expired);
            return;
        }
        if hold_until.is_some_and(|cap| now >= cap) {
            return; // Capped: the lease runs out and the lost signal fires.
        }
        let _round = shared.round.lock().await;
        let ttl = Duration::from_millis(shared.ttl_ms.load(std::sync::atomic::Ordering::Acquire));
        match extend_on_quorum(&mutex.redlock, &mutex.keys, &token, ttl).await {
            Ok(sent) => {
                signal::renewed(&shared.cell, lease::valid_until(sent, ttl));
                *shared.last_round.lock().unwrap() = sent;
                failing = false;
            }
            Err(Error::Lost { .. }) => {
                signal::declare_lost(&shared.cell, LostReason::Taken);
                return;
            }
            Err(err) => {
                observe::renew_failed(&mutex.keys.key, &err);
                failing = true;
            }
        }
    }
}
