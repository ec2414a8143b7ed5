//! Redlock: one lock over N independent Redis masters, granted by a majority.
//!
//! Each master is an ordinary single-node [`Client`] (its own connection, subscriber and
//! scripts); this module adds the fan-out: every request goes to all nodes in parallel,
//! each bounded by a node timeout much shorter than the lease, and a per-node error is a
//! vote against, never an abort. The primitive itself lives in [`mutex`].
//!
//! Only the mutex runs on Redlock. A fair mutex's queue, a semaphore's count and a
//! read-write lock's readers are state that every node must agree on; a majority of
//! independent nodes can disagree on it (two majorities with different queue heads, or
//! permits counted on different quorums), which only consensus resolves. A reentrant
//! mutex is left out too: a re-entry that reaches only some nodes leaves their hold counts
//! apart, and the owner's last release then frees the lock on some nodes only. See
//! `docs/decisions.md`.

mod inspect;
pub mod mutex;
pub(crate) mod scripts;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::client::{Client, ClientBuilder};
use crate::error::{Error, Result};
use crate::lease;
use crate::notifier::Turnstile;
use crate::options::LockOptions;
use crate::renew::{Due, HoldKind, Renew, RenewTarget, Renewal, Renewed, Renewer};
use crate::script::ScriptCall;
use crate::session::{Lane, Session};

pub use inspect::{MasterView, RedlockInfo};
pub use mutex::{RawRedlock, RedlockGuard, RedlockMutex};

/// How long connecting waits for the other masters once a majority is connected.
const CONNECT_GRACE: Duration = Duration::from_millis(250);

/// Most masters one Redlock spans (a larger majority only adds round trips).
pub const MAX_NODES: usize = 15;

/// One master of a Redlock. Connected on first use when it was down at connect time, so
/// a node that comes back later rejoins the vote.
pub(crate) struct Node {
    /// The URL without its password, for messages.
    pub(crate) label: String,
    builder: ClientBuilder,
    client: tokio::sync::OnceCell<Client>,
    /// This node's place among the Redlock's nodes.
    index: usize,
    /// Every node's server (`run_id`) so far, and which node reaches it; shared by the
    /// nodes of one Redlock.
    servers: Arc<StdMutex<HashMap<String, usize>>>,
}

impl Node {
    /// The node's client, connecting it now if it was not connected yet.
    pub(crate) async fn client(&self) -> Result<Client> {
        self.client
            .get_or_try_init(|| async {
                let client = self.builder.clone().connect().await?;
                self.check_independent(&client).await?;
                Ok(client)
            })
            .await
            .cloned()
    }

    /// Refuses a server that another node already reaches (it would vote twice:
    /// `localhost` and `127.0.0.1`, or two databases of one server) and a replica (it
    /// refuses every write: a silent vote against). Such a node is never connected, so
    /// it votes against every lock.
    async fn check_independent(&self, client: &Client) -> Result<()> {
        let info: String = match redis::cmd("INFO").query_async(&mut client.conn()).await {
            Ok(info) => info,
            Err(err) => match Error::from_redis("INFO", err) {
                err @ (Error::Connection(_) | Error::Authentication(_)) => return Err(err),
                // INFO not permitted (an ACL without @dangerous) or renamed: not checked,
                // as at connect.
                other => {
                    tracing::debug!(node = %self.label, error = %other, "INFO refused; whether the Redlock node is an independent master is not checked");
                    return Ok(());
                }
            },
        };
        let field = |name: &str| crate::backend::info_field(&info, name);
        // Valkey reports a replica's role as Redis does.
        if field("role") == Some("slave") {
            return Err(Error::InvalidArgument(format!(
                "{} is a replica: it refuses writes, so it would vote against every lock; Redlock needs independent masters",
                self.label
            )));
        }
        if let Some(run_id) = field("run_id") {
            let mut servers = self.servers.lock().unwrap();
            match servers.get(run_id) {
                Some(&other) if other != self.index => {
                    return Err(Error::InvalidArgument(format!(
                        "Redlock nodes {} and {} ({}) are the same Redis server: it would vote twice; Redlock's masters must be independent servers",
                        other + 1,
                        self.index + 1,
                        self.label
                    )));
                }
                _ => {
                    servers.insert(run_id.to_string(), self.index);
                }
            }
        }
        Ok(())
    }

    /// The node's client if it is connected.
    pub(crate) fn connected(&self) -> Option<&Client> {
        self.client.get()
    }
}

/// Configures and opens a [`Redlock`]. Made by [`Client::redlock_builder`].
#[derive(Debug, Clone)]
pub struct RedlockBuilder {
    urls: Vec<String>,
    /// The settings every node's client shares (its URL is replaced per node).
    template: ClientBuilder,
    node_timeout: Option<Duration>,
    raise_fences: bool,
}

impl RedlockBuilder {
    pub(crate) fn new(urls: Vec<String>) -> RedlockBuilder {
        RedlockBuilder {
            urls,
            template: Client::builder(""),
            node_timeout: None,
            raise_fences: true,
        }
    }

    /// Every node's client takes the settings of `builder` (prefix, holder label,
    /// timeouts, TLS certificates for `rediss://` nodes); only its URL is replaced by each
    /// node's.
    pub fn node_settings(mut self, builder: ClientBuilder) -> Self {
        self.template = builder;
        self
    }

    /// A prefix put in front of every lock name to form its Redis key on every node.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.template = self.template.prefix(prefix);
        self
    }

    /// Puts `label` in front of every token (see [`ClientBuilder::holder_label`]).
    pub fn holder_label(mut self, label: impl Into<String>) -> Self {
        self.template = self.template.holder_label(label);
        self
    }

    /// How long opening a connection to one node may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.template = self.template.connect_timeout(timeout);
        self
    }

    /// How long one request to one node may wait for an answer (default 3 s); see also
    /// [`RedlockBuilder::node_timeout`], which bounds lock requests more tightly.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.template = self.template.response_timeout(timeout);
        self
    }

    /// How long an acquire, extend or release waits for one node before counting it as a
    /// vote against. Default: a tenth of the lock's lease, at most the response timeout.
    /// Must be less than half of every lease used with it, so that a slow node cannot eat
    /// the validity of a grant.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// **Unsafe, for tests that prove the fence raise is needed:** takes the largest
    /// per-node counter of a quorum as the fence without raising the others to it.
    /// Fences can then go backwards.
    #[doc(hidden)]
    pub fn without_fence_raise(mut self) -> Self {
        self.raise_fences = false;
        self
    }

    /// Checks the settings and makes the handle, connecting no master yet: each is
    /// connected on first use (a master that cannot be reached is tried again on the next
    /// use). For tools that must see every master whatever its state, such as
    /// `dlock inspect` ([`Redlock::inspect`]); for taking locks use
    /// [`connect`](RedlockBuilder::connect), which waits for a majority: a lazily made
    /// handle connects a master within a lock round's node timeout, which a short node
    /// timeout may not leave room for. Must be called inside a tokio runtime, like
    /// `connect`.
    pub fn connect_lazily(self) -> Result<Redlock> {
        self.build()
    }

    fn build(self) -> Result<Redlock> {
        let count = self.urls.len();
        if count == 0 || count > MAX_NODES {
            return Err(Error::InvalidArgument(format!(
                "Redlock needs between 1 and {MAX_NODES} independent masters, got {count}; an odd number (3 or 5) tolerates the most failures for its size"
            )));
        }
        if let Some(timeout) = self.node_timeout {
            if timeout.is_zero() || timeout > crate::client::MAX_TIMEOUT {
                return Err(Error::InvalidArgument(format!(
                    "the Redlock node timeout {} is out of range; use more than zero and at most {} (and under half of every lease)",
                    crate::duration_text::humane(timeout),
                    crate::duration_text::humane(crate::client::MAX_TIMEOUT)
                )));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for url in &self.urls {
            if !seen.insert(url.as_str()) {
                return Err(Error::InvalidArgument(format!(
                    "{} is named twice: Redlock's masters must be independent servers",
                    crate::redact::redact(url)
                )));
            }
        }
        let servers = Arc::new(StdMutex::new(HashMap::new()));
        let nodes: Arc<Vec<Node>> = Arc::new(
            self.urls
                .iter()
                .enumerate()
                .map(|(index, url)| Node {
                    index,
                    label: crate::redact::redact(url),
                    builder: self.template.clone().url(url),
                    client: tokio::sync::OnceCell::new(),
                    servers: servers.clone(),
                })
                .collect(),
        );
        let quorum = count / 2 + 1;
        // A clone of the template tells the prefix and label every node was given.
        let probe = self.template.clone();
        let redlock = Redlock {
            inner: Arc::new(Inner {
                nodes,
                quorum,
                node_timeout: self.node_timeout,
                raise_fences: self.raise_fences,
                prefix: probe.prefix_str().to_string(),
                session: Session::new(
                    tokio::runtime::Handle::current(),
                    probe.holder_label_str().map(str::to_string),
                ),
                stats: Arc::default(),
                turnstiles: StdMutex::new(HashMap::new()),
                late_requests: StdMutex::new(HashMap::new()),
            }),
        };
        Ok(redlock)
    }

    /// Connects to the masters. Returns once a majority is connected and the others had a
    /// quarter of a second more; those still connecting go on in the background, and a
    /// node that is down is connected on first use (so it rejoins when it is back). Two
    /// URLs that reach one server, or a replica, are refused (a node found so only later
    /// never votes for a lock). Fails with [`Error::NoQuorum`] when
    /// fewer than a majority can be reached, and with the node's own error for a
    /// configuration problem (wrong credentials, a server too old, a cluster node or
    /// sentinel given as a master) on a node that answered before the majority did; one
    /// found later is logged, and that node votes against.
    pub async fn connect(self) -> Result<Redlock> {
        let redlock = self.build()?;
        let (count, quorum) = (redlock.nodes(), redlock.quorum());
        // Ready once a majority is connected: a frozen or black-holed master would
        // otherwise hold every start up for the whole connect timeout. The others go on
        // connecting in the background (or on first use).
        let mut connecting: FuturesUnordered<_> = (0..count)
            .map(|index| {
                let this = redlock.clone();
                async move { (index, this.inner.nodes[index].client().await.map(|_| ())) }
            })
            .collect();
        let (mut connected, mut failures) = (0, Vec::new());
        // Past the majority, the others get a moment more: on a healthy network they
        // answer within it, and a misconfigured one is said at once.
        let mut grace: Option<tokio::time::Instant> = None;
        loop {
            let next = match grace {
                None => connecting.next().await,
                Some(until) => match tokio::time::timeout_at(until, connecting.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            let Some((index, result)) = next else { break };
            let label = &redlock.inner.nodes[index].label;
            match result {
                Ok(()) => connected += 1,
                Err(err) if err.is_transient() => failures.push(format!("{label}: {err}")),
                // Misconfiguration is never a vote: say so at once.
                Err(err) => return Err(err),
            }
            if connected >= quorum && grace.is_none() {
                grace = Some(tokio::time::Instant::now() + CONNECT_GRACE);
            }
        }
        if connected < quorum {
            return Err(Error::NoQuorum {
                name: None,
                needed: quorum,
                reached: connected,
                nodes: count,
                failures,
            });
        }
        for failure in &failures {
            tracing::warn!(node = %failure, "Redlock master unreachable at connect; it joins when it answers");
        }
        if !connecting.is_empty() {
            let labels: Vec<String> = redlock.node_labels();
            redlock.spawn_tracked(async move {
                while let Some((index, result)) = connecting.next().await {
                    if let Err(err) = result {
                        tracing::warn!(node = %labels[index], error = %err, "Redlock master not connected at start; it votes against until it answers");
                    }
                }
            });
        }
        Ok(redlock)
    }
}

pub(crate) struct Inner {
    /// Shared with the renewal scheduler.
    pub(crate) nodes: Arc<Vec<Node>>,
    pub(crate) quorum: usize,
    node_timeout: Option<Duration>,
    pub(crate) raise_fences: bool,
    prefix: String,
    /// The runtime, holds, tokens and closed flag of this handle; its background work is
    /// give-backs and the tails of decided rounds, which shutdown waits for.
    pub(crate) session: Session,
    /// What [`Redlock::stats`] reports.
    pub(crate) stats: Arc<Counters>,
    /// Per lock key, the turn its waiters of this handle take (see [`Turnstile`]).
    turnstiles: StdMutex<HashMap<String, std::sync::Weak<Turnstile>>>,
    /// Per held token, when its granting round's requests end: its release waits for
    /// them, or a late grant of that round on a slow node could land after it.
    late_requests: StdMutex<HashMap<String, RequestsEnd>>,
}

/// The counters behind [`RedlockStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) rounds: std::sync::atomic::AtomicU64,
    pub(crate) node_grants: std::sync::atomic::AtomicU64,
    pub(crate) grants: std::sync::atomic::AtomicU64,
}

/// How contended a [`Redlock`]'s locks have been, since the handle was made: every
/// acquire round costs a request to every master, and every node that grants a round
/// draws a fence there, so rounds and node grants per grant are what contention costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedlockStats {
    /// Acquire rounds sent (each one to every master).
    pub rounds: u64,
    /// Nodes that granted a round (each drew a fence there), granted rounds or not.
    pub node_grants: u64,
    /// Rounds that became a hold (a guard).
    pub grants: u64,
}

/// A handle on N independent Redis masters (no replication between them), on which
/// locks are granted by a majority: the Redlock algorithm, with fencing tokens that stay
/// monotonic across quorums. Cheap to clone. Made by [`Client::redlock`] or
/// [`Client::redlock_builder`].
///
/// ```no_run
/// # async fn demo() -> dlock::Result<()> {
/// let redlock = dlock::Client::redlock([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .await?;
/// let guard = redlock.mutex("nightly-report")?.lock().await?;
/// println!("fencing token {}", guard.fence().await?);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// What it guarantees, and where that ends, is in the safety model (docs/safety-model.md):
/// a grant holds while a majority of the nodes keep their data and clocks advance at about
/// the same rate; a node restarted without persistence (or with `appendfsync everysec`) can
/// grant the lock a second time.
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field(
                "nodes",
                &self
                    .inner
                    .nodes
                    .iter()
                    .map(|n| &n.label)
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.inner.quorum)
            .finish()
    }
}

/// How one node answered a fanned-out request.
pub(crate) type Vote<T> = (usize, Result<T>);

impl Redlock {
    /// A mutex named `name` with default options (30 s lease renewed automatically, wait
    /// forever).
    pub fn mutex(&self, name: &str) -> Result<RedlockMutex> {
        mutex::RawRedlock::new(self.clone(), name, LockOptions::default())
    }

    /// A mutex named `name` with the given options. [`LockOptions::replicas`] does not
    /// apply (each node is its own master) and is refused;
    /// [`LockOptions::fence_at_grant`] is implied (the fence is always drawn with the
    /// grant); the waiter lease is unused (no queue).
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<RedlockMutex> {
        mutex::RawRedlock::new(self.clone(), name, options)
    }

    /// How contended its locks have been so far (see [`RedlockStats`]).
    pub fn stats(&self) -> RedlockStats {
        use std::sync::atomic::Ordering::Relaxed;
        let counters = &self.inner.stats;
        RedlockStats {
            rounds: counters.rounds.load(Relaxed),
            node_grants: counters.node_grants.load(Relaxed),
            grants: counters.grants.load(Relaxed),
        }
    }

    /// The turnstile of the waiters for `key` (made when none is in use).
    pub(crate) fn turnstile(&self, key: &str) -> Arc<Turnstile> {
        let mut turnstiles = self.inner.turnstiles.lock().unwrap();
        if let Some(turnstile) = turnstiles.get(key).and_then(std::sync::Weak::upgrade) {
            return turnstile;
        }
        // Forget the turnstiles nobody waits at any more before adding one.
        turnstiles.retain(|_, turnstile| turnstile.strong_count() > 0);
        let turnstile = Arc::new(Turnstile::new(None));
        turnstiles.insert(key.to_string(), Arc::downgrade(&turnstile));
        turnstile
    }

    /// How many masters this Redlock spans.
    pub fn nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    /// How many masters must grant a lock: a majority, `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The masters' URLs, without passwords.
    pub fn node_labels(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.label.clone()).collect()
    }

    /// The prefix in front of every lock name.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// True once [`Redlock::shutdown`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.session.is_closed()
    }

    /// The session of this handle: its lost signal for every hold, and its end. See
    /// [`Session`].
    pub fn session(&self) -> &Session {
        &self.inner.session
    }

    /// Releases every lock that guards of this handle still hold (their lost signals fire
    /// with [`LostReason::Released`](crate::LostReason::Released)), then shuts each node's client down. Locks acquired
    /// after this fail with [`Error::Closed`].
    pub async fn shutdown(&self) {
        // Give-backs of dropped guards and failed rounds, and requests still out, end
        // with their node timeout, a give-back with its lease. Waiters listen on the
        // masters' clients: they wake when those stop, last.
        let masters = async {
            for node in self.inner.nodes.iter() {
                if let Some(client) = node.connected() {
                    client.shutdown().await;
                }
            }
        };
        self.inner
            .session
            .shutdown(Duration::from_secs(5), masters)
            .await;
    }

    /// The node timeout for a lock with lease `ttl` (see [`RedlockBuilder::node_timeout`]).
    pub(crate) fn node_timeout(&self, ttl: Duration) -> Duration {
        node_timeout(&self.inner.nodes, self.inner.node_timeout, ttl)
    }

    /// The renewal scheduler of this handle's holds (started on first use).
    pub(crate) fn renewer(&self) -> &Renewer {
        self.inner.session.renewer(Lane::Plain, || {
            Arc::new(QuorumRenewal {
                nodes: self.inner.nodes.clone(),
                quorum: self.inner.quorum,
                node_timeout: self.inner.node_timeout,
            })
        })
    }

    /// Keeps the end of a granted round's requests for the release of `token`.
    pub(crate) fn keep_requests(&self, token: &str, mut requests: RequestsEnd) {
        let mut late = self.inner.late_requests.lock().unwrap();
        // Forget the rounds whose requests all ended (holds handed over as tokens, or
        // released by a token elsewhere).
        late.retain(|_, requests| !requests.ended());
        if !requests.ended() {
            late.insert(token.to_string(), requests);
        }
    }

    /// The end of the requests of the round that granted `token` (none left: already ended).
    pub(crate) fn take_requests(&self, token: &str) -> RequestsEnd {
        let mut late = self.inner.late_requests.lock().unwrap();
        late.remove(token).unwrap_or_default()
    }

    /// Checks an explicit node timeout against a lease.
    pub(crate) fn validate_node_timeout(&self, ttl: Duration) -> Result<()> {
        match self.inner.node_timeout {
            Some(timeout) if timeout.is_zero() || timeout >= ttl / 2 => {
                Err(Error::InvalidArgument(format!(
                    "the Redlock node timeout {} must be above zero and under half the lease {}: a slow node would otherwise eat the grant's validity",
                    crate::duration_text::humane(timeout),
                    crate::duration_text::humane(ttl)
                )))
            }
            _ => Ok(()),
        }
    }

    /// Sends `request` to every node at once, each bounded by `timeout`, and hands each
    /// answer to `tally` as it arrives, until `tally` says the outcome is decided. The
    /// requests still out then are driven to their end in the background with
    /// [`Rest::Finish`] (an acquire, release or extend should reach every node that
    /// answers: a hold kept on all of them survives losing part of its quorum), or
    /// dropped with [`Rest::Drop`] (reads).
    ///
    /// Returns when each node's request ends (see [`RequestsEnd`]).
    pub(crate) async fn fan_out<T, F, Fut>(
        &self,
        timeout: Duration,
        rest: Rest,
        request: F,
        tally: impl FnMut(Vote<T>) -> bool,
    ) -> RequestsEnd
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let every = 0..self.inner.nodes.len();
        self.fan_out_to(every, RequestsEnd::default(), timeout, rest, request, tally)
            .await
    }

    /// [`Redlock::fan_out`] to the nodes `targets` only, each request sent only once the
    /// earlier request to its node in `after` ended (see [`Redlock::give_back`]).
    pub(crate) async fn fan_out_to<T, F, Fut>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        after: RequestsEnd,
        timeout: Duration,
        rest: Rest,
        request: F,
        mut tally: impl FnMut(Vote<T>) -> bool,
    ) -> RequestsEnd
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let request = Arc::new(request);
        let mut after = after.0;
        let mut ends = Vec::new();
        let mut pending: FuturesUnordered<_> = targets
            .into_iter()
            .map(|index| {
                let (this, request) = (self.clone(), request.clone());
                let (ended, end) = tokio::sync::oneshot::channel::<()>();
                ends.push((index, end));
                let earlier = after
                    .iter()
                    .position(|(node, _)| *node == index)
                    .map(|at| after.swap_remove(at).1);
                async move {
                    // Dropped when this node's request ends, however it ends.
                    let _ended = ended;
                    if let Some(earlier) = earlier {
                        // Bounded by the earlier request's own node timeout.
                        let _ = earlier.await;
                    }
                    let node = &this.inner.nodes[index];
                    let answer = tokio::time::timeout(timeout, async {
                        let client = node.client().await?;
                        request(client).await
                    })
                    .await
                    .unwrap_or_else(|_| Err(node_timed_out(timeout)));
                    (index, answer)
                }
            })
            .collect();
        while let Some(vote) = pending.next().await {
            if tally(vote) {
                if rest == Rest::Finish && !pending.is_empty() {
                    self.spawn_tracked(async move { while pending.next().await.is_some() {} });
                }
                break;
            }
        }
        RequestsEnd(ends)
    }

    /// Gives a hold back on every node (also those that seemed to fail: a lost reply may
    /// hide a grant). Returns how many released it and the nodes that did not answer, once
    /// every node answered or timed out.
    ///
    /// On each node, the release is sent once the request of `after` there ended.
    pub(crate) async fn release_everywhere(
        &self,
        keys: &crate::keys::LockKeys,
        token: &str,
        timeout: Duration,
        after: RequestsEnd,
    ) -> Releases {
        self.release_on(0..self.inner.nodes.len(), after, keys, token, timeout)
            .await
    }

    /// Gives a hold back on the nodes `targets`.
    async fn release_on(
        &self,
        targets: impl IntoIterator<Item = usize>,
        after: RequestsEnd,
        keys: &crate::keys::LockKeys,
        token: &str,
        timeout: Duration,
    ) -> Releases {
        let mut outcome = Releases::default();
        let (keys, token) = (Arc::new(keys.clone()), Arc::<str>::from(token));
        self.fan_out_to(
            targets,
            after,
            timeout,
            Rest::Finish,
            move |client| {
                let (keys, token) = (keys.clone(), token.clone());
                async move { mutex::release_on(client, &keys, &token).await }
            },
            |(index, vote)| {
                match vote {
                    Ok(true) => outcome.released += 1,
                    Ok(false) => outcome.not_held += 1,
                    Err(err) => {
                        outcome.failed.push(index);
                        outcome
                            .failures
                            .push(format!("{}: {err}", self.inner.nodes[index].label));
                    }
                }
                // Every node is heard (within the timeout): once this returns, no node
                // that answers still holds it, even if the process exits right after.
                false
            },
        )
        .await;
        outcome
    }

    /// Gives a hold back in the background on `targets` (the nodes that may have granted
    /// it), retrying those that do not answer until its lease is over (after that there
    /// is nothing left to give back), or, once the handle is shut down, no more.
    ///
    /// A node's give-back waits until the round's own request there ended (`requests`):
    /// sent before it, a give-back could overtake a request still connecting, or one
    /// resent after NOSCRIPT, and the late grant would then hold that node for a whole
    /// lease under a token nobody holds.
    pub(crate) fn give_back(
        &self,
        keys: Arc<crate::keys::LockKeys>,
        token: String,
        ttl: Duration,
        targets: Vec<usize>,
        requests: RequestsEnd,
    ) {
        if targets.is_empty() {
            return;
        }
        let this = self.clone();
        self.spawn_tracked(async move {
            let mut after = requests;
            let until = std::time::Instant::now() + ttl;
            let timeout = this.node_timeout(ttl).max(Duration::from_millis(200));
            let mut pause = Duration::from_millis(50);
            let mut targets = targets;
            loop {
                targets = this
                    .release_on(targets, std::mem::take(&mut after), &keys, &token, timeout)
                    .await
                    .failed;
                if targets.is_empty()
                    || this.is_closed()
                    || std::time::Instant::now() + pause >= until
                {
                    return;
                }
                tokio::time::sleep(crate::options::jitter(pause)).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        });
    }

    /// Runs `work` on the handle's runtime; [`Redlock::shutdown`] waits for it.
    fn spawn_tracked(&self, work: impl Future<Output = ()> + Send + 'static) {
        drop(self.inner.session.spawn_background(work));
    }
}

/// What becomes of a fan-out's requests still out once its outcome is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rest {
    /// Driven to their end in the background.
    Finish,
    /// Dropped.
    Drop,
}

/// When each node's request of a fan-out ends (answered, failed, or timed out and
/// dropped): after that, nothing more of it is sent to that node.
#[derive(Default)]
pub(crate) struct RequestsEnd(Vec<(usize, tokio::sync::oneshot::Receiver<()>)>);

impl RequestsEnd {
    /// Forgets the requests that ended; true when none is left.
    fn ended(&mut self) -> bool {
        use tokio::sync::oneshot::error::TryRecvError;
        // A receiver that saw its end must not be awaited again: dropped here.
        self.0
            .retain_mut(|(_, end)| matches!(end.try_recv(), Err(TryRecvError::Empty)));
        self.0.is_empty()
    }
}

/// The node timeout for a lease `ttl`: the configured one, or a tenth of the lease, at
/// most the response timeout.
fn node_timeout(nodes: &[Node], configured: Option<Duration>, ttl: Duration) -> Duration {
    let response = nodes
        .iter()
        .find_map(|n| n.connected().map(Client::response_timeout))
        .unwrap_or(crate::client::DEFAULT_RESPONSE_TIMEOUT);
    configured
        .unwrap_or(ttl / 10)
        .min(response)
        .max(Duration::from_millis(1))
}

/// Where a Redlock's holds are renewed: every master gets one batch of every due lease,
/// and a lease counts as renewed when a majority renewed it within its new validity.
struct QuorumRenewal {
    nodes: Arc<Vec<Node>>,
    quorum: usize,
    node_timeout: Option<Duration>,
}

impl RenewTarget for QuorumRenewal {
    fn renew<'a>(&'a self, due: &'a [Due]) -> futures_util::future::BoxFuture<'a, Vec<Renewed>> {
        Box::pin(async move {
            let count = self.nodes.len();
            let shortest = due.iter().map(|lease| lease.ttl).min().unwrap_or_default();
            let timeout = node_timeout(&self.nodes, self.node_timeout, shortest);
            let leases: Arc<Vec<(String, String, u64)>> = Arc::new(
                due.iter()
                    .map(|lease| {
                        let ttl_ms = lease.kept_for().as_millis() as u64;
                        (lease.key.clone(), lease.token.clone(), ttl_ms)
                    })
                    .collect(),
            );
            let sent = std::time::Instant::now();
            let mut pending: FuturesUnordered<_> = (0..count)
                .map(|index| {
                    let (nodes, leases) = (self.nodes.clone(), leases.clone());
                    async move {
                        let renewed = tokio::time::timeout(timeout, async {
                            let client = nodes[index].client().await?;
                            let mut replies = Vec::with_capacity(leases.len());
                            for chunk in leases.chunks(crate::renew::BATCH) {
                                let holds: Vec<Renewal> = chunk
                                    .iter()
                                    .map(|(key, token, ttl_ms)| Renewal {
                                        key,
                                        kind: HoldKind::String,
                                        token,
                                        lease_ms: *ttl_ms,
                                    })
                                    .collect();
                                let reply = Renew { holds: &holds }.run(&client).await?;
                                replies.extend(reply);
                            }
                            Ok::<_, Error>(replies)
                        })
                        .await
                        .unwrap_or_else(|_| Err(node_timed_out(timeout)));
                        (index, renewed)
                    }
                })
                .collect();
            let (mut extended, mut gone) = (vec![0usize; due.len()], vec![0usize; due.len()]);
            let mut failures = Vec::new();
            let decided = |extended: &[usize], gone: &[usize]| {
                (0..due.len()).all(|i| extended[i] >= self.quorum || gone[i] > count - self.quorum)
            };
            while let Some((index, renewed)) = pending.next().await {
                match renewed {
                    Ok(replies) => {
                        for (position, reply) in replies.iter().enumerate().take(due.len()) {
                            match *reply {
                                1 => extended[position] += 1,
                                _ => gone[position] += 1,
                            }
                        }
                    }
                    Err(err) => failures.push(format!("{}: {err}", self.nodes[index].label)),
                }
                if decided(&extended, &gone) {
                    // The slower masters' renewals still land, in the background: a hold
                    // kept on every master survives losing part of its quorum.
                    if !pending.is_empty() {
                        tokio::spawn(async move { while pending.next().await.is_some() {} });
                    }
                    break;
                }
            }
            due.iter()
                .enumerate()
                .map(|(i, renewing)| {
                    if extended[i] >= self.quorum
                        && std::time::Instant::now() < lease::valid_until(sent, renewing.ttl)
                    {
                        Renewed::Yes(sent)
                    } else if gone[i] > count - self.quorum {
                        Renewed::Gone
                    } else {
                        Renewed::Failed(format!(
                            "renewed on {} of {count} masters, {} needed ({})",
                            extended[i],
                            self.quorum,
                            failures.join("; ")
                        ))
                    }
                })
                .collect()
        })
    }
}

/// What a release on every node found.
#[derive(Debug, Default)]
pub(crate) struct Releases {
    pub released: usize,
    pub not_held: usize,
    /// The nodes that did not answer, and each one's error.
    pub failed: Vec<usize>,
    pub failures: Vec<String>,
}

/// The error of a node that did not answer within the node timeout.
fn node_timed_out(timeout: Duration) -> Error {
    Error::Connection(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no answer within the node timeout {}",
            crate::duration_text::humane(timeout)
        ),
    )))
}

impl Client {
    /// Connects to `urls`, independent Redis masters, for locks granted by a majority of
    /// them (Redlock). See [`Client::redlock_builder`] to configure it, and [`Redlock`].
    pub async fn redlock<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> Result<Redlock> {
        Client::redlock_builder(urls).connect().await
    }

    /// Starts configuring a [`Redlock`] over `urls`, independent Redis masters (not a
    /// cluster, not replicas of each other). Use an odd number: 3 tolerate one node down,
    /// 5 tolerate two.
    ///
    /// ```no_run
    /// # async fn demo() -> dlock::Result<()> {
    /// use std::time::Duration;
    /// let redlock = dlock::Client::redlock_builder([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    ///     "redis://10.0.0.4:6379",
    ///     "redis://10.0.0.5:6379",
    /// ])
    /// .prefix("jobs:")
    /// .node_timeout(Duration::from_millis(50))
    /// .connect()
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub fn redlock_builder<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> RedlockBuilder {
        RedlockBuilder::new(urls.into_iter().map(Into::into).collect())
    }
}
