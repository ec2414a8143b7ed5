//! The backend seam: every Redis call of the library goes through a [`Backend`] — the
//! scripts and plain commands (through [`Backend::connection`]), acknowledged writes
//! ([`Backend::acknowledged`]), the watchdog's renewal batches ([`Backend::batches`]),
//! commands that concern every master ([`Backend::on_every_master`]) and the notifier's
//! subscriber ([`Backend::subscriber`]). The primitives never see which topology they run
//! on.
//!
//! Three implementations, each in a file of its own with its connect code and its words
//! for what is wrong with a deployment:
//! - **single node** (`single.rs`): one multiplexed `ConnectionManager` (reconnecting by
//!   itself) and a dedicated pub/sub connection;
//! - **Redis Cluster** (`cluster.rs`): the redis crate's cluster connection, which routes
//!   each request by its key's slot and follows `MOVED`/`ASK`; notifications over sharded
//!   pub/sub;
//! - **Sentinel** (`sentinel.rs`): the master the sentinels name, looked up again whenever
//!   a request finds the master gone or demoted (a failover), the subscriber too.
//!
//! What every topology shares is here: the connection settings, the check of what the
//! servers report at connect ([`Backend::check_server`]), and the dispatch of each request.
//!
//! Acknowledged writes (`LockOptions::replicas`) go, each with its `WAIT` in one pipeline,
//! over connections of their own, since `WAIT` blocks the connection it is sent on
//! (docs/decisions.md, "One backend seam").

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, Pipeline, PushKind, RedisFuture, Value};

use crate::error::{Error, Result};
use crate::keys::hash_slot;
use crate::redact::redact;

mod cluster;
mod sentinel;
mod single;

use cluster::Cluster;
use sentinel::Sentinel;
use single::SingleNode;

/// Where a client's requests go.
#[derive(Clone)]
pub(crate) enum Backend {
    /// One Redis server.
    SingleNode(Arc<SingleNode>),
    /// A Redis Cluster.
    Cluster(Arc<Cluster>),
    /// The master of a Sentinel-monitored group.
    Sentinel(Arc<Sentinel>),
}

/// A few connections of their own for acknowledged writes, opened on first use and used
/// in turn: a `WAIT` blocks the connection it is sent on until the replicas answer, so
/// acknowledged writes of several locks at once would otherwise queue behind each other.
pub(crate) struct Pool<C> {
    connections: tokio::sync::OnceCell<Vec<C>>,
    next: std::sync::atomic::AtomicUsize,
}

impl<C: Clone> Pool<C> {
    fn new() -> Pool<C> {
        Pool {
            connections: tokio::sync::OnceCell::new(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    async fn get<F, Fut>(&self, open: F) -> redis::RedisResult<C>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<C>>,
    {
        let connections = self
            .connections
            .get_or_try_init(|| async {
                let mut connections = Vec::with_capacity(ACKNOWLEDGED_CONNECTIONS);
                for _ in 0..ACKNOWLEDGED_CONNECTIONS {
                    connections.push(open().await?);
                }
                Ok::<_, redis::RedisError>(connections)
            })
            .await?;
        let index = self.next.fetch_add(1, Ordering::Relaxed) % connections.len();
        Ok(connections[index].clone())
    }
}

/// Connections per client for acknowledged writes.
const ACKNOWLEDGED_CONNECTIONS: usize = 4;

impl Backend {
    /// True when release notifications travel over sharded pub/sub (`SPUBLISH`): on a
    /// cluster, where plain `PUBLISH` would be broadcast to every node.
    pub(crate) fn sharded_pubsub(&self) -> bool {
        matches!(self, Backend::Cluster(_))
    }

    /// A handle for requests (cheap: it shares the backend's connections).
    pub(crate) fn connection(&self) -> Connection {
        match self {
            Backend::SingleNode(node) => Connection::Plain(node.conn.clone()),
            Backend::Cluster(cluster) => Connection::Cluster(cluster.conn.clone()),
            Backend::Sentinel(sentinel) => Connection::Sentinel {
                conn: sentinel.master.read().unwrap().conn.clone(),
                sentinel: sentinel.clone(),
            },
        }
    }

    /// A connection for writes that wait for replicas, sent with their `WAIT` in one
    /// pipeline: `WAIT` blocks the connection it is sent on, so these never share the
    /// connection of the client's other requests (one of a small pool; see [`Pool`]).
    pub(crate) async fn acknowledged(&self) -> redis::RedisResult<Connection> {
        match self {
            Backend::SingleNode(node) => {
                let open =
                    || ConnectionManager::new_with_config(node.client.clone(), node.config.clone());
                Ok(Connection::Plain(node.acknowledged.get(open).await?))
            }
            Backend::Cluster(cluster) => {
                let open = || cluster.client.get_async_connection();
                Ok(Connection::Cluster(cluster.acknowledged.get(open).await?))
            }
            Backend::Sentinel(sentinel) => {
                let master = sentinel.master.read().unwrap().clone();
                let open = || {
                    ConnectionManager::new_with_config(
                        master.client.clone(),
                        sentinel.config.clone(),
                    )
                };
                Ok(Connection::Sentinel {
                    conn: master.acknowledged.get(open).await?,
                    sentinel: sentinel.clone(),
                })
            }
        }
    }

    /// A connection of its own, for a program's own commands: a blocking command, a
    /// `SELECT` or a transaction there cannot hold up or redirect the locks' requests.
    /// Through Sentinel it is opened to the current master (and reports a failover like
    /// every request does).
    pub(crate) async fn dedicated(&self) -> redis::RedisResult<Connection> {
        match self {
            Backend::SingleNode(node) => Ok(Connection::Plain(
                ConnectionManager::new_with_config(node.client.clone(), node.config.clone())
                    .await?,
            )),
            Backend::Cluster(cluster) => Ok(Connection::Cluster(
                cluster.client.get_async_connection().await?,
            )),
            Backend::Sentinel(sentinel) => {
                let master = sentinel.master.read().unwrap().client.clone();
                Ok(Connection::Sentinel {
                    conn: ConnectionManager::new_with_config(master, sentinel.config.clone())
                        .await?,
                    sentinel: sentinel.clone(),
                })
            }
        }
    }

    /// Sends `cmd` to every master (one on a single node) and returns each reply.
    pub(crate) async fn on_every_master(&self, cmd: &Cmd) -> redis::RedisResult<Vec<Value>> {
        match self {
            Backend::Cluster(cluster) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = cluster
                    .conn
                    .clone()
                    .route_command(cmd.clone(), routing)
                    .await?;
                Ok(match reply {
                    Value::Map(pairs) => pairs.into_iter().map(|(_, value)| value).collect(),
                    Value::Array(values) => values,
                    other => vec![other],
                })
            }
            _ => Ok(vec![cmd.query_async(&mut self.connection()).await?]),
        }
    }

    /// Every key matching the glob `pattern` (`SCAN ... MATCH`, never `KEYS`), on every
    /// master: a cluster's keys are spread over its masters, and each is scanned in turn.
    /// Unsorted; a key may appear twice (`SCAN` may return one more than once). Keys are
    /// read as bytes: one that is not UTF-8 is no key dlock wrote (lock names are text), so
    /// it is left out and counted, never an error (the count is logged at info level).
    pub(crate) async fn scan(&self, pattern: &str) -> redis::RedisResult<Scanned> {
        let masters = self.cluster_masters().await?;
        let mut raw: Vec<Vec<u8>> = Vec::new();
        if masters.is_empty() {
            let mut conn = self.connection();
            let mut found: redis::AsyncIter<'_, Vec<u8>> = redis::AsyncCommands::scan_options(
                &mut conn,
                redis::ScanOptions::default()
                    .with_pattern(pattern)
                    .with_count(500),
            )
            .await?;
            while let Some(key) = found.next().await {
                raw.push(key?);
            }
        }
        for master in &masters {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(500);
                let reply = self.on_master(master, &scan).await?;
                let (next, found): (u64, Vec<Vec<u8>>) = redis::from_redis_value(reply)?;
                raw.extend(found);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        let scanned = Scanned::from_raw(raw);
        if scanned.skipped > 0 {
            tracing::info!(
                "SCAN {pattern:?} skipped {} key(s) that are not UTF-8 text: no lock's (dlock writes none such)",
                scanned.skipped
            );
        }
        Ok(scanned)
    }

    /// A new subscriber for the notifier: its own connection (a subscribed RESP2
    /// connection can do nothing else); on a cluster, a RESP3 cluster connection whose
    /// sharded subscriptions the redis crate routes by slot and restores after a
    /// reconnect or a slot move.
    pub(crate) async fn subscriber(
        &self,
    ) -> redis::RedisResult<(SubscriberSink, SubscriberStream)> {
        match self {
            Backend::SingleNode(node) => {
                let (sink, stream) = node.client.get_async_pubsub().await?.split();
                Ok((
                    SubscriberSink::Plain(sink),
                    SubscriberStream::Plain(Box::pin(stream)),
                ))
            }
            Backend::Sentinel(sentinel) => {
                // Asked afresh: after a failover the subscriber follows the new master.
                let client = sentinel.sentinels.lock().await.async_get_client().await?;
                let (sink, stream) = client.get_async_pubsub().await?.split();
                Ok((
                    SubscriberSink::Plain(sink),
                    SubscriberStream::Plain(Box::pin(stream)),
                ))
            }
            Backend::Cluster(cluster) => {
                let (pushes, receiver) = tokio::sync::mpsc::unbounded_channel();
                let conn = (cluster.builder)()
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(pushes)
                    .build()?
                    .get_async_connection()
                    .await?;
                Ok((
                    SubscriberSink::Sharded(conn),
                    SubscriberStream::Sharded(receiver),
                ))
            }
        }
    }

    /// Splits work on many keys into batches that one script call may carry: at most
    /// `max` items each and, on a cluster, only items whose `key` is in one hash slot (a
    /// script may not touch two slots).
    pub(crate) fn batches<T>(
        &self,
        items: Vec<T>,
        key: impl Fn(&T) -> &str,
        max: usize,
    ) -> Vec<Vec<T>> {
        let max = max.max(1);
        let mut batches: Vec<Vec<T>> = Vec::new();
        // The batch still filling, per slot.
        let mut open: std::collections::HashMap<u16, usize> = std::collections::HashMap::new();
        for item in items {
            let group = match self {
                Backend::Cluster(_) => hash_slot(key(&item)),
                // One node holds every slot: keys do not split batches.
                _ => 0,
            };
            match open.get(&group) {
                Some(&index) if batches[index].len() < max => batches[index].push(item),
                _ => {
                    open.insert(group, batches.len());
                    batches.push(vec![item]);
                }
            }
        }
        batches
    }
}

/// The oldest Redis dlock's scripts run on (`ZADD GT`, `SET ... GET`-era commands); a
/// cluster needs Redis 7 (sharded pub/sub).
pub const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

/// Which Redis deployment a client connects to.
#[derive(Debug, Clone)]
pub(crate) enum Topology {
    /// The one server of the builder's URL.
    SingleNode,
    /// A Redis Cluster, found through these seed nodes.
    Cluster(Vec<String>),
    /// The master the sentinels name for `service`.
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
}

/// How a client connects, on every topology: its timeouts and TLS certificates.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Certificates for `rediss://` URLs (the system's roots when `None`).
    pub(crate) tls: Option<redis::TlsCertificates>,
}

impl Settings {
    /// The settings of every single-server connection.
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            // Reconnection happens on the next request; a caller waiting on a lock retries
            // by itself, so one quick retry here keeps failures prompt.
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500))
    }

    /// Opens a `redis::Client` for one URL, with the builder's TLS certificates.
    pub(crate) fn open(&self, url: &str) -> Result<redis::Client> {
        let opened = match self.tls.clone() {
            Some(certificates) => redis::Client::build_with_tls(url, certificates),
            None => redis::Client::open(url),
        };
        opened.map_err(|e| {
            Error::InvalidArgument(format!(
                "Redis URL {:?} is not valid ({e}); expected redis://[user:password@]host[:port][/db] or rediss://...",
                redact(url)
            ))
        })
    }

    /// Bounds a connection attempt by the connect timeout, with the errors named.
    pub(crate) async fn within_budget<T>(
        &self,
        what: &str,
        tls: bool,
        connect: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let budget = self.connect_timeout;
        match tokio::time::timeout(budget, connect).await {
            Ok(Ok(connected)) => Ok(connected),
            Ok(Err(err)) => Err(connect_error(what, tls, err)),
            Err(_) => Err(Error::Connection(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no connection to {what} within {}{}",
                        crate::duration_text::humane(budget),
                        if tls {
                            " (a TLS handshake that never completes: is the server serving TLS on this port?)"
                        } else {
                            ""
                        }
                    ),
                ),
            ))),
        }
    }
}

impl Backend {
    /// Connects to the deployment `topology` names (`url` for a single server), each
    /// topology with its own connect code and its own words for what is wrong, then
    /// checks what the servers report (see [`Backend::check_server`]).
    pub(crate) async fn connect(
        topology: &Topology,
        url: &str,
        settings: &Settings,
    ) -> Result<Backend> {
        let backend = match topology {
            Topology::SingleNode => single::connect(url, settings).await?,
            Topology::Cluster(seeds) => cluster::connect(seeds, settings).await?,
            Topology::Sentinel { sentinels, service } => {
                sentinel::connect(sentinels, service, settings).await?
            }
        };
        backend.check_server().await?;
        Ok(backend)
    }

    /// Checks the server version (every master's, on a cluster); warns when eviction
    /// could drop locks or fences.
    pub(crate) async fn check_server(&self) -> Result<()> {
        let infos = match self.on_every_master(&redis::cmd("INFO")).await {
            Ok(infos) => infos,
            Err(err) if err.code() == Some("NOPERM") => {
                tracing::debug!("INFO is not permitted; the server version is not checked");
                return Ok(());
            }
            Err(err) => return Err(Error::from_redis("INFO", err)),
        };
        for info in infos {
            let info: String = redis::from_redis_value(info)
                .map_err(|e| Error::unexpected_reply(format!("INFO: {e}")))?;
            self.check_info(&info)?;
        }
        Ok(())
    }

    fn check_info(&self, info: &str) -> Result<()> {
        let field = |name: &str| info_field(info, name);
        if !matches!(self, Backend::Cluster(_)) {
            // A server of another deployment answers, but cannot serve these locks as
            // configured: said at connect, not as a MOVED or an unknown command later.
            // Redis says `redis_mode`, Valkey `server_mode`.
            if field("redis_mode").or(field("server_mode")) == Some("sentinel") {
                return Err(misconfigured(
                    "the server is a Redis Sentinel, not a data server: connect through it with Client::sentinel_builder (the CLI's --sentinel with --service)".into(),
                ));
            }
            if field("cluster_enabled") == Some("1") {
                return Err(misconfigured(
                    "the server is a Redis Cluster node: connect with Client::cluster_builder (the CLI's --cluster), which routes every lock to the node of its slot".into(),
                ));
            }
        }
        if let Some(version) = field("redis_version") {
            let needed = match self.sharded_pubsub() {
                // Sharded pub/sub (SPUBLISH/SSUBSCRIBE) came with Redis 7.
                true => (7, 0),
                false => MIN_REDIS_VERSION,
            };
            if older_than(version, needed) {
                return Err(Error::Unsupported(format!(
                    "the server runs Redis {version}; dlock needs Redis {}.{} or newer{}",
                    needed.0,
                    needed.1,
                    if needed == MIN_REDIS_VERSION {
                        ""
                    } else {
                        " on a cluster"
                    }
                )));
            }
        }
        let maxmemory = field("maxmemory").and_then(|v| v.parse::<u64>().ok());
        let policy = field("maxmemory_policy");
        if let (Some(limit), Some(policy)) = (maxmemory, policy) {
            if limit > 0 && policy != "noeviction" {
                tracing::warn!(
                    policy,
                    "Redis may evict keys (maxmemory-policy {policy}): an evicted lock can be granted twice and an evicted fencing counter restarts at zero; set maxmemory-policy noeviction"
                );
            }
        }
        Ok(())
    }
}

/// One field of an `INFO` reply (`name:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// True when a `redis_version` is older than `needed` (major, minor).
fn older_than(version: &str, needed: (u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) < needed
}

/// Classifies a failure to connect, naming TLS when the handshake is what failed.
fn connect_error(url: &str, tls: bool, err: redis::RedisError) -> Error {
    if err.kind() == redis::ErrorKind::Parse {
        // Something answered, but not in the Redis protocol (e.g. an HTTP server).
        return misconfigured(format!(
            "{} answers, but not in the Redis protocol; check the host and port",
            redact(url)
        ));
    }
    let text = err.to_string();
    let tls_failure = tls
        && [
            "tls",
            "certificate",
            "handshake",
            "corrupt message",
            "InvalidContentType",
        ]
        .iter()
        .any(|word| text.contains(word));
    if tls_failure {
        return misconfigured(format!(
            "the TLS handshake with {} failed ({text}); check that the server serves TLS on this port and that --tls-ca names the CA that signed its certificate",
            redact(url)
        ));
    }
    Error::from_redis("connect", err)
}

/// The server's words when `err` is a refusal.
pub(crate) fn refusal(err: &Error) -> Option<&str> {
    match err {
        Error::Refused { reason, .. } => Some(reason),
        _ => None,
    }
}

/// A deployment that cannot serve locks as configured: not worth retrying.
pub(crate) fn misconfigured(why: String) -> Error {
    Error::Misconfigured(why)
}

/// A request handle of a [`Backend`]; `query_async` and script invocations take it like
/// any redis connection.
#[derive(Clone)]
pub(crate) enum Connection {
    Plain(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel {
        conn: ConnectionManager,
        sentinel: Arc<Sentinel>,
    },
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Plain(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
            Connection::Sentinel { conn, sentinel } => Box::pin(async move {
                conn.req_packed_command(cmd)
                    .await
                    .map_err(|err| sentinel.after_error(err))
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Plain(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Sentinel { conn, sentinel } => Box::pin(async move {
                conn.req_packed_commands(pipeline, offset, count)
                    .await
                    .map_err(|err| sentinel.after_error(err))
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Plain(conn) | Connection::Sentinel { conn, .. } => conn.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}

/// Where the notifier sends (un)subscriptions.
pub(crate) enum SubscriberSink {
    Plain(redis::aio::PubSubSink),
    Sharded(ClusterConnection),
}

impl SubscriberSink {
    pub(crate) async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            SubscriberSink::Plain(sink) => sink.subscribe(channel).await,
            SubscriberSink::Sharded(conn) => conn.ssubscribe(channel).await,
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            SubscriberSink::Plain(sink) => sink.unsubscribe(channel).await,
            SubscriberSink::Sharded(conn) => conn.sunsubscribe(channel).await,
        }
    }

    /// True when one channel's failure says nothing about the others (each shard is
    /// its own connection, restored by the redis crate).
    pub(crate) fn is_sharded(&self) -> bool {
        matches!(self, SubscriberSink::Sharded(_))
    }
}

/// What the subscriber hears.
pub(crate) enum Heard {
    /// A release announced on `channel`.
    Message { channel: String, payload: Vec<u8> },
    /// The server ended our subscription to `channel` (its slot moved to another shard).
    Dropped(String),
    /// A shard's connection dropped (the redis crate reconnects and resubscribes):
    /// releases may have been missed.
    Interrupted,
}

/// Where the notifier hears releases.
pub(crate) enum SubscriberStream {
    Plain(std::pin::Pin<Box<redis::aio::PubSubStream>>),
    Sharded(tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>),
}

impl SubscriberStream {
    /// The next thing heard; `None` when the connection ended.
    pub(crate) async fn next(&mut self) -> Option<Heard> {
        match self {
            SubscriberStream::Plain(stream) => stream.next().await.map(|message| Heard::Message {
                channel: message.get_channel_name().to_string(),
                payload: message.get_payload_bytes().to_vec(),
            }),
            SubscriberStream::Sharded(pushes) => loop {
                let push = pushes.recv().await?;
                let text = |index: usize| match push.data.get(index) {
                    Some(Value::BulkString(bytes)) => Some(bytes.clone()),
                    _ => None,
                };
                match push.kind {
                    PushKind::SMessage | PushKind::Message => {
                        if let (Some(channel), Some(payload)) = (text(0), text(1)) {
                            return Some(Heard::Message {
                                channel: String::from_utf8_lossy(&channel).into_owned(),
                                payload,
                            });
                        }
                    }
                    PushKind::SUnsubscribe => {
                        if let Some(channel) = text(0) {
                            return Some(Heard::Dropped(
                                String::from_utf8_lossy(&channel).into_owned(),
                            ));
                        }
                    }
                    PushKind::Disconnection => return Some(Heard::Interrupted),
                    // Subscription confirmations (also the redis crate's resubscriptions).
                    _ => {}
                }
            },
        }
    }
}

/// What a `SCAN` found ([`Backend::scan`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// The keys that are UTF-8 text, as found (unsorted, possibly repeated).
    pub keys: Vec<String>,
    /// How many distinct keys were left out for not being UTF-8.
    pub skipped: usize,
}

impl Scanned {
    /// Sorts the keys `SCAN` returned as bytes into text keys and skipped ones.
    fn from_raw(raw: Vec<Vec<u8>>) -> Scanned {
        let mut keys = Vec::with_capacity(raw.len());
        let mut skipped = std::collections::HashSet::new();
        for key in raw {
            match String::from_utf8(key) {
                Ok(key) => keys.push(key),
                Err(not_text) => {
                    skipped.insert(not_text.into_bytes());
                }
            }
        }
        Scanned {
            keys,
            skipped: skipped.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_before_6_2_are_too_old() {
        for old in ["5.0.14", "6.0.20", "6.1.9", "2.8"] {
            assert!(older_than(old, MIN_REDIS_VERSION), "{old}");
        }
        for new in ["6.2.0", "7.0.15", "7.4.2", "10.0.0"] {
            assert!(!older_than(new, MIN_REDIS_VERSION), "{new}");
        }
    }

    fn offline() -> Backend {
        // A client that never connects: batching needs no server.
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let config = ConnectionManagerConfig::new().set_number_of_retries(0);
        let Ok(conn) = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
        else {
            panic!("a lazy connection manager needs no server");
        };
        Backend::single_node(conn, client, config)
    }

    #[tokio::test]
    async fn batches_hold_at_most_max_items_in_order() {
        let backend = offline();
        let batches = backend.batches((0..450).collect::<Vec<_>>(), |_| "k", 200);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [200, 200, 50]);
        assert_eq!(batches.concat(), (0..450).collect::<Vec<_>>());
        assert!(backend.batches(Vec::<u8>::new(), |_| "k", 200).is_empty());
    }

    #[test]
    fn keys_that_are_not_utf8_are_counted_once_and_left_out() {
        let raw = vec![
            b"job".to_vec(),
            b"odd:bin\xff".to_vec(),
            "caf\u{e9}".as_bytes().to_vec(),
            b"odd:bin\xff".to_vec(), // SCAN may return a key twice
            b"\xc3(".to_vec(),
        ];
        let scanned = Scanned::from_raw(raw);
        assert_eq!(scanned.keys, ["job", "caf\u{e9}"]);
        assert_eq!(scanned.skipped, 2);
    }
}
