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
//! so does its maximum, as long as that node kept its counter. (A node restarted without
//! persistence forgets it; then only the clock floor below keeps fences growing, which
//! `dlock-model`'s Redlock models check both ways.) Counters in step on a majority cost no
//! extra round trip.
//!
//! Fences have a clock floor (see `fencing.lua`): a node draws `max(counter + 1, its clock
//! in µs)`. The floor does not replace the raise: a grant whose largest fence is one
//! node's clock still raises the others, because a later majority without that node draws
//! from clocks that may run behind it (by any offset NTP allows) and would come out
//! smaller. Only the counters, kept by a majority, make fences monotonic across quorums
//! without any assumption about the masters' clocks; the floor matters only when a
//! majority forgets its counters (a restart without persistence). `dlock-torture`'s
//! `redlock-clock-offset` and `dlock-model`'s offset clock show both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Redlock, Rest, Vote};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::LockKeys;
use crate::lease;
use crate::lock::Lock;
use crate::mutex::{MutexAcquire, MutexRelease};
use crate::notifier::{Turnstile, WakeSet};
use crate::options::LockOptions;
use crate::raw::{
    private::{HandleForms, KindProtocol, Placement, Queueing, RawProtocol, Watching},
    Attempt, HoldKind, Waiting,
};
use crate::redlock::scripts::RaiseFence;
use crate::renew::Renewer;
use crate::renew::{Renew, Renewal};
use crate::script::ScriptCall;
use crate::session::Session;

/// Proof of holding a [`RedlockMutex`] on a majority of its masters: the one
/// [`Guard`] every kind hands out. Its fence is drawn with the grant; renewal runs on the
/// handle's scheduler, which renews a lease when a majority did; dropping it releases it
/// on every master in the background.
pub type RedlockGuard = Guard<RawRedlock>;

/// A mutex granted by a majority of a [`Redlock`]'s masters: the one [`Lock`] handle over
/// the Redlock protocol. Cheap to clone; made by [`Redlock::mutex`].
///
/// ```no_run
/// # async fn demo(redlock: dlock::Redlock) -> dlock::Result<()> {
/// # async fn close_month(_fence: u64) {}
/// // The fence is drawn with the grant: pass it to the storage you write to, which
/// // rejects writes with an older one.
/// redlock
///     .mutex("billing:close-month")?
///     .with_lock(|fence| close_month(fence))
///     .await?;
/// # Ok(()) }
/// ```
pub type RedlockMutex = Lock<RawRedlock>;

/// The Redlock protocol: the kind of a [`RedlockMutex`] handle and its [`RedlockGuard`].
#[derive(Debug, Clone)]
pub struct RawRedlock {
    redlock: Redlock,
    keys: Arc<LockKeys>,
    options: LockOptions,
}

impl Lock<RawRedlock> {
    /// The largest fencing token any node drew for this lock (0 when never drawn;
    /// nodes that do not answer are skipped).
    pub async fn last_fence(&self) -> Result<u64> {
        let timeout = self.raw.redlock.node_timeout(self.raw.options.ttl);
        let mut largest = None;
        let mut failures = Vec::new();
        let fence_key = self.raw.keys.fence.clone();
        self.raw
            .redlock
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
        largest.ok_or_else(|| self.raw.no_quorum(0, self.raw.describe(failures)))
    }
}

/// What one attempt over all nodes came to.
enum Outcome {
    Granted {
        fence: u64,
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
    busy: Vec<Option<Duration>>,
    failures: Vec<(usize, Error)>,
    /// Nodes that answered without granting (held by another, another kind): nothing
    /// of the round is there to give back.
    refused: Vec<usize>,
}

impl RawRedlock {
    pub(crate) fn new(redlock: Redlock, name: &str, options: LockOptions) -> Result<RedlockMutex> {
        options.validate()?;
        if options.replicas.is_some() {
            return Err(Error::InvalidArgument(
                "replica acknowledgement does not apply to Redlock: each node is an independent master and the majority is the acknowledgement".into(),
            ));
        }
        redlock.validate_node_timeout(options.ttl)?;
        let keys = Arc::new(LockKeys::new(redlock.prefix(), name)?);
        Ok(Lock::of(RawRedlock {
            redlock,
            keys,
            options,
        }))
    }

    /// Gives back the hold of `token` on every node, each node's release sent once the
    /// request of `after` there ended. Fails with [`Error::Lost`] when no node held it,
    /// and with [`Error::NoQuorum`] when it cannot be told (too many nodes did not answer;
    /// their copies end with the lease).
    async fn release_after(&self, token: &str, after: super::RequestsEnd) -> Result<()> {
        let timeout = self.redlock.node_timeout(self.options.ttl);
        let outcome = self
            .redlock
            .release_everywhere(&self.keys, token, timeout, after)
            .await;
        // The nodes that did not answer may still hold it: retried in the background
        // while its lease may last (a node back from a restart answers the retry).
        self.redlock.give_back(
            self.keys.clone(),
            token.to_string(),
            self.options.kept_for(self.options.ttl),
            outcome.failed.clone(),
            super::RequestsEnd::default(),
        );
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
    async fn extend_on_majority(&self, token: &str, ttl: Duration) -> Result<()> {
        lease::validate_ttl(ttl)?;
        self.redlock.validate_node_timeout(ttl)?;
        let kept = self.options.kept_for(ttl);
        extend_on_quorum(&self.redlock, &self.keys, token, ttl, kept)
            .await
            .map(|_| ())
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
    /// that does not count is given back by the caller's [`Round`].
    async fn round(&self, claim: &mut Round<'_>) -> Result<Outcome> {
        let token = claim.token.as_str();
        let ttl = self.options.ttl;
        // Each master keeps it for the lease and the lock-delay; validity counts the lease.
        let ttl_ms = self.options.kept_ms();
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
                        Ok(NodeReply::Granted { fence }) => tally.granted.push((index, fence)),
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
            let fence = self.settle_fence(token, &tally.granted).await;
            let valid = Instant::now() < lease::valid_until(sent, ttl);
            match fence {
                Some(fence) if valid => return Ok(Outcome::Granted { fence }),
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
    /// them that a majority holds it, also when it is a node's clock (see the module
    /// docs). `None` when that majority cannot be made.
    async fn settle_fence(&self, token: &str, granted: &[(usize, u64)]) -> Option<u64> {
        let fence = granted.iter().map(|&(_, fence)| fence).max()?;
        let in_step = granted.iter().filter(|&&(_, f)| f == fence).count();
        if in_step >= self.quorum() || !self.redlock.inner.raise_fences {
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
                    let keys = &*self.keys;
                    RaiseFence { keys, token, fence }.run(&client).await
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
}

/// One round's token until the round is granted: dropping it (a failed round, or the
/// whole wait dropped by `timeout`/`select!` mid-round) gives back whatever any node
/// may have granted to it, on every node, in the background.
struct Round<'a> {
    mutex: &'a RawRedlock,
    token: String,
    /// Nodes that answered without granting: nothing to give back there.
    refused: Vec<usize>,
    /// When the round's requests end: a node's give-back waits for its request.
    requests: super::RequestsEnd,
    armed: bool,
}

impl<'a> Round<'a> {
    fn new(mutex: &'a RawRedlock, token: String) -> Self {
        Round {
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

impl Drop for Round<'_> {
    fn drop(&mut self) {
        if self.armed {
            let targets = (0..self.mutex.redlock.nodes())
                .filter(|node| !self.refused.contains(node))
                .collect();
            self.mutex.redlock.give_back(
                self.mutex.keys.clone(),
                std::mem::take(&mut self.token),
                self.mutex.options.kept_for(self.mutex.options.ttl),
                targets,
                std::mem::take(&mut self.requests),
            );
        }
    }
}

enum NodeReply {
    /// Granted with `fence` (the script also tells whether it is the node's clock: since
    /// a clock fence is raised like any other, nothing here needs that any more).
    Granted {
        fence: u64,
    },
    Busy(Option<Duration>),
    /// The lock key (`"string"`) or the counter (`"counter"`) holds another kind.
    WrongType(&'static str),
}

fn read_acquire(reply: &[i64]) -> Result<NodeReply> {
    match reply {
        [1, fence, _clock] if *fence > 0 => Ok(NodeReply::Granted {
            fence: *fence as u64,
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
    MutexAcquire {
        keys,
        token,
        lease_ms: ttl_ms,
        eager: true,
        tell_clock: true,
    }
    .run(&client)
    .await
    .map(|reply| reply.0)
}

/// The plain mutex's release on one node: true released, false not held there.
pub(crate) async fn release_on(client: Client, keys: &LockKeys, token: &str) -> Result<bool> {
    let released = MutexRelease { keys, token }.run(&client).await?;
    match released {
        1 => Ok(true),
        // Another kind on the key (-1) cannot be our hold either.
        0 | -1 => Ok(false),
        other => Err(Error::unexpected_reply(other)),
    }
}

/// Extends `token`'s hold to `ttl` on every node (each keeps it for `kept`: the lease and
/// its lock-delay); `Ok(sent)` when a majority extended it within the new validity
/// (`sent`: when the round started).
async fn extend_on_quorum(
    redlock: &Redlock,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
    kept: Duration,
) -> Result<Instant> {
    let ttl_ms = kept.as_millis() as u64;
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
                    let hold = Renewal {
                        key: &key,
                        kind: HoldKind::String,
                        token: &token,
                        lease_ms: ttl_ms,
                    };
                    let reply = Renew { holds: &[hold] }.run(&client).await?;
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

impl KindProtocol for RawRedlock {
    fn kind_name(&self) -> &'static str {
        crate::kind::REDLOCK
    }

    fn waiting(&self) -> Waiting<'_> {
        Waiting::Channel(&self.keys.channel)
    }

    /// One round on every master with a token of its own: a round that is not granted
    /// gives back, in the background, whatever any master granted it.
    async fn attempt(&self, token: &str, _join_queue: bool) -> Result<Attempt> {
        let mut round = Round::new(self, token.to_string());
        match self.round(&mut round).await? {
            Outcome::Granted { fence } => {
                round.keep();
                // A release of this hold waits for the round's requests still out.
                self.redlock
                    .keep_requests(token, std::mem::take(&mut round.requests));
                self.redlock
                    .inner
                    .stats
                    .grants
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(Attempt::Granted {
                    fence: Some(fence),
                    holds: 1,
                })
            }
            // Nodes that answered busy are skipped by the give-back: a round every node
            // refused gives nothing back.
            Outcome::Busy { remaining, split } => Ok(Attempt::Busy { remaining, split }),
        }
    }

    async fn release(&self, token: &str) -> Result<()> {
        let after = self.redlock.take_requests(token);
        self.release_after(token, after).await
    }
}

impl RawProtocol for RawRedlock {
    fn settles_each_attempt(&self) -> bool {
        true
    }

    async fn extend(&self, token: &str, ttl: Duration) -> Result<()> {
        self.extend_on_majority(token, ttl).await
    }

    /// Lingers on every master that holds it; done when a majority did (the rest keep
    /// their own lease, which renewal no longer restarts).
    async fn linger(&self, token: &str, rest: Duration) -> Result<()> {
        let timeout = self.redlock.node_timeout(self.options.ttl);
        let (nodes, quorum) = (self.redlock.nodes(), self.quorum());
        let (mut lingered, mut not_held, mut failures) = (0, 0, Vec::new());
        let (keys, token) = (self.keys.clone(), token.to_string());
        self.redlock
            .fan_out(
                timeout,
                Rest::Finish,
                move |client| {
                    let (keys, token) = (keys.clone(), token.clone());
                    async move {
                        crate::raw::linger_on(&client, &keys, HoldKind::String, &token, rest).await
                    }
                },
                |(index, vote)| {
                    match vote {
                        Ok(crate::raw::Lingered::NotHeld) => not_held += 1,
                        Ok(_) => lingered += 1,
                        Err(err) => failures.push((index, err)),
                    }
                    lingered >= quorum || not_held > nodes - quorum
                },
            )
            .await;
        if lingered >= quorum {
            Ok(())
        } else if not_held > nodes - quorum {
            Err(Error::Lost {
                name: self.keys.name.clone(),
            })
        } else {
            Err(self.no_quorum(lingered, self.describe(failures)))
        }
    }

    /// Held when a majority of the masters hold it; [`Error::NoQuorum`] when too few
    /// answered to tell.
    async fn is_held(&self, token: &str) -> Result<bool> {
        let timeout = self.redlock.node_timeout(self.options.ttl);
        let (nodes, quorum) = (self.redlock.nodes(), self.quorum());
        let (mut held, mut not_held, mut failures) = (0, 0, Vec::new());
        let (key, token) = (self.keys.key.clone(), token.to_string());
        self.redlock
            .fan_out(
                timeout,
                Rest::Drop,
                move |client| {
                    let (key, token) = (key.clone(), token.clone());
                    async move { crate::raw::held_on(&client, &key, HoldKind::String, &token).await }
                },
                |(index, vote)| {
                    match vote {
                        Ok(true) => held += 1,
                        Ok(false) => not_held += 1,
                        Err(err) => failures.push((index, err)),
                    }
                    held >= quorum || not_held > nodes - quorum
                },
            )
            .await;
        if held >= quorum {
            Ok(true)
        } else if not_held > nodes - quorum {
            Ok(false)
        } else {
            Err(self.no_quorum(held, self.describe(failures)))
        }
    }

    async fn draw_fence(&self, _token: &str) -> Result<u64> {
        Err(Error::unexpected_reply("a Redlock grant without its fence"))
    }
}

impl Placement for RawRedlock {
    fn hold_key(&self) -> (&str, HoldKind) {
        (&self.keys.key, HoldKind::String)
    }

    fn session(&self) -> &Session {
        self.redlock.session()
    }

    fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    fn options(&self) -> &LockOptions {
        &self.options
    }

    fn renewer(&self) -> &Renewer {
        self.redlock.renewer()
    }
}

impl Watching for RawRedlock {
    /// Subscribes on every connected master at once, within `budget`; woken when a
    /// majority of the live ones announced a release.
    async fn watch(&self, channel: &str, _token: Option<&str>, budget: Duration) -> WakeSet {
        let subscribing = self
            .redlock
            .inner
            .nodes
            .iter()
            .filter_map(|node| node.connected())
            .map(|client| tokio::time::timeout(budget, client.notifier().watch(channel, None)));
        let subscribed = futures_util::future::join_all(subscribing).await;
        WakeSet::quorum(subscribed.into_iter().flatten().collect(), self.quorum())
    }
}

impl Queueing for RawRedlock {
    fn turnstile(&self) -> Option<Arc<Turnstile>> {
        Some(self.redlock.turnstile(&self.keys.key))
    }
}

impl HandleForms for RawRedlock {}
