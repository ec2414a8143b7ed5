//! The backend seam: every Redis call of the library goes through a [`Backend`] — the
//! scripts and plain commands (through [`Backend::connection`]), acknowledged writes
//! ([`Backend::acknowledged`]), the watchdog's renewal batches ([`Backend::batches`]),
//! commands that concern every master ([`Backend::on_every_master`]) and the notifier's
//! subscriber ([`Backend::subscriber`]). The primitives never see which topology they run
//! on.
//!
//! Three implementations:
//! - **single node**: one multiplexed `ConnectionManager` (reconnecting by itself) and a
//!   dedicated pub/sub connection;
//! - **Redis Cluster**: the redis crate's cluster connection, which routes each request by
//!   its key's slot and follows `MOVED`/`ASK`; notifications over sharded pub/sub;
//! - **Sentinel**: the master the sentinels name, looked up again whenever a request
//!   finds the master gone or demoted (a failover), the subscriber too.
//!
//! Acknowledged writes (`LockOptions::replicas`) go, each with its `WAIT` in one pipeline,
//! over connections of their own, since `WAIT` blocks the connection it is sent on
//! (docs/decisions.md, "One backend seam").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, PushKind, RedisFuture, Value};

use crate::keys::hash_slot;

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

pub(crate) struct SingleNode {
    /// Every request, multiplexed.
    conn: ConnectionManager,
    /// Opens the subscriber's and the acknowledged writes' own connections.
    client: redis::Client,
    config: ConnectionManagerConfig,
    acknowledged: Pool<ConnectionManager>,
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

pub(crate) struct Cluster {
    /// Every request, routed by slot.
    conn: ClusterConnection,
    /// Opens further connections (acknowledged writes).
    client: redis::cluster::ClusterClient,
    /// Makes the builder again, for the subscriber's client (RESP3 with a push channel of
    /// its own).
    builder: ClusterBuilder,
    acknowledged: Pool<ClusterConnection>,
}

/// Makes a configured cluster client builder (the builder itself is not `Clone`).
pub(crate) type ClusterBuilder =
    Arc<dyn Fn() -> redis::cluster::ClusterClientBuilder + Send + Sync>;

pub(crate) struct Sentinel {
    sentinels: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
    config: ConnectionManagerConfig,
    /// The master as last resolved, with its connections.
    master: RwLock<SentinelMaster>,
    /// True while a task asks the sentinels for the master (one at a time).
    resolving: AtomicBool,
}

#[derive(Clone)]
struct SentinelMaster {
    client: redis::Client,
    conn: ConnectionManager,
    acknowledged: Arc<Pool<ConnectionManager>>,
}

impl Backend {
    pub(crate) fn single_node(
        conn: ConnectionManager,
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> Backend {
        Backend::SingleNode(Arc::new(SingleNode {
            conn,
            client,
            config,
            acknowledged: Pool::new(),
        }))
    }

    /// Connects to a cluster through `builder` (its seed nodes answer with the slot map).
    pub(crate) async fn cluster(builder: ClusterBuilder) -> redis::RedisResult<Backend> {
        let client = builder().build()?;
        let conn = client.get_async_connection().await?;
        Ok(Backend::Cluster(Arc::new(Cluster {
            conn,
            client,
            builder,
            acknowledged: Pool::new(),
        })))
    }

    /// Asks the sentinels for the master and connects to it.
    pub(crate) async fn sentinel(
        mut sentinels: redis::sentinel::SentinelClient,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<Backend> {
        let client = sentinels.async_get_client().await?;
        let conn = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Backend::Sentinel(Arc::new(Sentinel {
            sentinels: tokio::sync::Mutex::new(sentinels),
            config,
            master: RwLock::new(SentinelMaster {
                client,
                conn,
                acknowledged: Arc::new(Pool::new()),
            }),
            resolving: AtomicBool::new(false),
        })))
    }

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
    /// Unsorted; a key may appear twice (`SCAN` may return one more than once).
    pub(crate) async fn scan(&self, pattern: &str) -> redis::RedisResult<Vec<String>> {
        let masters = self.cluster_masters().await?;
        let mut keys = Vec::new();
        if masters.is_empty() {
            let mut conn = self.connection();
            let mut found: redis::AsyncIter<'_, String> = redis::AsyncCommands::scan_options(
                &mut conn,
                redis::ScanOptions::default()
                    .with_pattern(pattern)
                    .with_count(500),
            )
            .await?;
            while let Some(key) = found.next().await {
                keys.push(key?);
            }
            return Ok(keys);
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
                let (next, found): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                keys.extend(found);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(keys)
    }

    /// The addresses of the cluster's masters (none on other topologies), from `CLUSTER
    /// SLOTS`: a `SCAN` must visit each.
    async fn cluster_masters(&self) -> redis::RedisResult<Vec<(String, u16)>> {
        let Backend::Cluster(cluster) = self else {
            return Ok(Vec::new());
        };
        let slots: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut cluster.conn.clone())
            .await?;
        let mut masters = Vec::new();
        for range in slots {
            let Value::Array(parts) = range else { continue };
            let Some(Value::Array(master)) = parts.get(2) else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                _ => continue,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            let address = (host, *port as u16);
            if !masters.contains(&address) {
                masters.push(address);
            }
        }
        Ok(masters)
    }

    /// Sends `cmd` to the cluster master at `address`.
    async fn on_master(&self, address: &(String, u16), cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            Backend::Cluster(cluster) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: address.0.clone(),
                    port: address.1,
                });
                cluster
                    .conn
                    .clone()
                    .route_command(cmd.clone(), routing)
                    .await
            }
            _ => cmd.query_async(&mut self.connection()).await,
        }
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

impl Sentinel {
    /// Looks for a new master when `err` may mean a failover. A READONLY reply means the
    /// master we write to was demoted: reported as a dropped connection, so waiters retry
    /// (on the new master, once found) instead of failing for good.
    fn after_error(self: &Arc<Self>, err: redis::RedisError) -> redis::RedisError {
        self.check_master(&err);
        if is_readonly(&err) {
            return redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the master was demoted to a replica (READONLY); following the failover",
            ));
        }
        err
    }

    /// After a request failed in a way a failover explains (the master unreachable, or a
    /// replica now: READONLY), asks the sentinels for the master in the background and
    /// switches to it when it changed. One lookup at a time.
    fn check_master(self: &Arc<Self>, err: &redis::RedisError) {
        let failover_sign = err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_io_error()
            || err.is_timeout()
            || is_readonly(err);
        if !failover_sign || self.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        let sentinel = self.clone();
        tokio::spawn(async move {
            let found = sentinel.sentinels.lock().await.async_get_client().await;
            match found {
                Ok(client) => {
                    let current = sentinel
                        .master
                        .read()
                        .unwrap()
                        .client
                        .get_connection_info()
                        .addr()
                        .clone();
                    if *client.get_connection_info().addr() != current {
                        match ConnectionManager::new_with_config(
                            client.clone(),
                            sentinel.config.clone(),
                        )
                        .await
                        {
                            Ok(conn) => {
                                tracing::warn!(
                                    master = %client.get_connection_info().addr(),
                                    "the sentinels name a new master; following it"
                                );
                                *sentinel.master.write().unwrap() = SentinelMaster {
                                    client,
                                    conn,
                                    acknowledged: Arc::new(Pool::new()),
                                };
                            }
                            Err(err) => {
                                tracing::debug!(error = %err, "the new master does not answer yet")
                            }
                        }
                    }
                }
                Err(err) => tracing::debug!(error = %err, "no sentinel named the master"),
            }
            // Not more than a few lookups a second while the failover is under way.
            tokio::time::sleep(Duration::from_millis(100)).await;
            sentinel.resolving.store(false, Ordering::Release);
        });
    }
}

/// A write refused by a replica (also when raised inside a script).
fn is_readonly(err: &redis::RedisError) -> bool {
    err.code() == Some("READONLY") || err.to_string().contains("READONLY")
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
