//! A Redis Cluster: the redis crate's cluster connection, which routes each request by its
//! key's slot and follows `MOVED`/`ASK`; notifications over sharded pub/sub.

use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Value};

use super::{misconfigured, refusal, Backend, Pool, Settings};
use crate::error::{Error, Result};
use crate::redact::describe_urls;

/// A cluster's connections.
pub(crate) struct Cluster {
    /// Every request, routed by slot.
    pub(super) conn: ClusterConnection,
    /// Opens further connections (acknowledged writes).
    pub(super) client: redis::cluster::ClusterClient,
    /// Makes the builder again, for the subscriber's client (RESP3 with a push channel of
    /// its own).
    pub(super) builder: ClusterBuilder,
    pub(super) acknowledged: Pool<ClusterConnection>,
}

/// Makes a configured cluster client builder (the builder itself is not `Clone`).
pub(crate) type ClusterBuilder =
    Arc<dyn Fn() -> redis::cluster::ClusterClientBuilder + Send + Sync>;

impl Backend {
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

    /// The addresses of the cluster's masters (none on other topologies), from `CLUSTER
    /// SLOTS`: a `SCAN` must visit each.
    pub(super) async fn cluster_masters(&self) -> redis::RedisResult<Vec<(String, u16)>> {
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
    pub(super) async fn on_master(
        &self,
        address: &(String, u16),
        cmd: &Cmd,
    ) -> redis::RedisResult<Value> {
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
}

/// Connects to the cluster that `seeds` belong to; a seed that is no cluster node, or a
/// failed login, is named as such.
pub(super) async fn connect(seeds: &[String], settings: &Settings) -> Result<Backend> {
    if seeds.is_empty() {
        return Err(Error::InvalidArgument(
            "a cluster needs at least one seed node URL".into(),
        ));
    }
    for seed in seeds {
        settings.open(seed)?;
    }
    let tls = seeds.iter().any(|seed| seed.starts_with("rediss://"));
    let described = format!("the cluster at {}", describe_urls(seeds));
    let (seeds, certificates) = (seeds.to_vec(), settings.tls.clone());
    let (connect_timeout, response_timeout) = (settings.connect_timeout, settings.response_timeout);
    let builder: ClusterBuilder = Arc::new(move || {
        let builder = redis::cluster::ClusterClientBuilder::new(seeds.clone())
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout)
            // MOVED/ASK and a failed node are retried with a short pause; a lock call
            // that still fails retries by itself.
            .retries(4)
            .min_retry_wait(10)
            .max_retry_wait(500);
        match &certificates {
            Some(certificates) => builder.certs(certificates.clone()),
            None => builder,
        }
    });
    settings
        .within_budget(&described, tls, Backend::cluster(builder))
        .await
        .map_err(|err| match err {
            // The cluster client reports a failed login as a connection failure.
            Error::Connection(inner)
                if inner.to_string().to_ascii_lowercase().contains("authentication failed")
                    || inner.to_string().contains("WRONGPASS") =>
            {
                Error::Authentication(inner)
            }
            err if refusal(&err).is_some_and(|r| r.contains("cluster support disabled")) => {
                misconfigured(format!(
                    "{described} includes a server without cluster support; connect to a single server with Client::builder (the CLI's --redis)"
                ))
            }
            err if refusal(&err).is_some_and(|r| r.contains("unknown command 'CLUSTER'")) => {
                misconfigured(format!(
                    "{described} includes a server that does not know CLUSTER (a Sentinel?); give the cluster's data nodes"
                ))
            }
            err => err,
        })
}
