//! The backend seam: every Redis call of the library goes through a [`Backend`] — the
//! scripts and plain commands (through [`Backend::connection`]), the watchdog's renewal
//! batches ([`Backend::batches`]) and the notifier's subscriber
//! ([`Backend::subscriber`]). The primitives never see which topology they run on.
//!
//! One implementation so far: a single node, over one multiplexed `ConnectionManager`
//! (reconnecting by itself) and a dedicated pub/sub connection. Redis Cluster and a
//! Sentinel-resolved master plug in here as further variants (docs/decisions.md, "One
//! backend seam").

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Where a client's requests go.
#[derive(Clone)]
pub(crate) enum Backend {
    /// One Redis server.
    SingleNode {
        /// Every request, multiplexed.
        conn: ConnectionManager,
        /// Opens the subscriber's own connection (a subscribed connection can do nothing
        /// else).
        client: redis::Client,
    },
}

impl Backend {
    pub(crate) fn single_node(conn: ConnectionManager, client: redis::Client) -> Backend {
        Backend::SingleNode { conn, client }
    }

    /// A handle for requests (cheap: it shares the backend's connections).
    pub(crate) fn connection(&self) -> Connection {
        match self {
            Backend::SingleNode { conn, .. } => Connection::SingleNode(conn.clone()),
        }
    }

    /// A new connection for the notifier to subscribe on.
    pub(crate) async fn subscriber(&self) -> redis::RedisResult<redis::aio::PubSub> {
        match self {
            Backend::SingleNode { client, .. } => client.get_async_pubsub().await,
        }
    }

    /// Splits work on many keys into batches that one script call may carry: at most
    /// `max` items each (on a cluster, also only items whose `key` is in one hash slot: a
    /// script may not touch two slots).
    pub(crate) fn batches<T>(
        &self,
        items: Vec<T>,
        key: impl Fn(&T) -> &str,
        max: usize,
    ) -> Vec<Vec<T>> {
        match self {
            Backend::SingleNode { .. } => {
                // One node holds every slot: keys do not split batches.
                let _ = key;
                let mut batches = Vec::with_capacity(items.len().div_ceil(max.max(1)));
                let mut items = items.into_iter().peekable();
                while items.peek().is_some() {
                    batches.push(items.by_ref().take(max.max(1)).collect());
                }
                batches
            }
        }
    }
}

/// A request handle of a [`Backend`]; `query_async` and script invocations take it like
/// any redis connection.
#[derive(Clone)]
pub(crate) enum Connection {
    SingleNode(ConnectionManager),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::SingleNode(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::SingleNode(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::SingleNode(conn) => conn.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn batches_hold_at_most_max_items_in_order() {
        // A client that never connects: batching needs no server.
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let config = redis::aio::ConnectionManagerConfig::new().set_number_of_retries(0);
        let Ok(conn) = ConnectionManager::new_lazy_with_config(client.clone(), config) else {
            panic!("a lazy connection manager needs no server");
        };
        let backend = Backend::single_node(conn, client);
        let batches = backend.batches((0..450).collect::<Vec<_>>(), |_| "k", 200);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [200, 200, 50]);
        assert_eq!(batches.concat(), (0..450).collect::<Vec<_>>());
        assert!(backend.batches(Vec::<u8>::new(), |_| "k", 200).is_empty());
    }
}
