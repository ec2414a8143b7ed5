//! The servers the locks live on (one server, a master and a replica under sentinels, a
//! Redis Cluster, or Redlock's independent masters), and what the clients and the judge
//! read of them. Which a scenario starts is its fault's choice (`Fault::servers`).

pub(crate) mod cluster;

use std::collections::HashMap;

use dlock_testkit::{
    IndependentMasters, MasterWithReplicas, Proxy, RedisServer, SentinelGroup, ServerOptions,
};

use crate::client::Primitive;
pub use cluster::ClusterLocks;

/// The service name the sentinels know the lock server by.
pub const SERVICE: &str = "torture";

/// The servers the locks live on.
pub enum LockServers {
    /// One server, and a proxy in front of it for the network-delay scenario.
    Single {
        server: RedisServer,
        proxy: Option<Proxy>,
    },
    /// A master and a replica under three sentinels (for the partition scenarios, each
    /// server behind a proxy of its own).
    Failover {
        group: MasterWithReplicas,
        sentinels: SentinelGroup,
    },
    /// A Redis Cluster whose locks all live on one shard.
    Cluster(ClusterLocks),
    /// A Redlock's independent masters, each behind its own proxy.
    Redlock(IndependentMasters),
}

impl LockServers {
    /// One server (durable: AOF, appendfsync always), behind a proxy if `proxied`.
    pub fn single(durable: bool, proxied: bool) -> LockServers {
        let server = RedisServer::start_with(match durable {
            true => ServerOptions::durable(),
            false => ServerOptions::default(),
        });
        let proxy = proxied.then(|| Proxy::start(server.port()));
        LockServers::Single { server, proxy }
    }

    /// The clients' arguments that say where the locks are.
    pub fn topology(&self) -> Vec<String> {
        match self {
            LockServers::Single { server, proxy } => vec![
                "--redis".into(),
                proxy.as_ref().map_or_else(|| server.url(), |p| p.url()),
            ],
            LockServers::Failover { sentinels, .. } => {
                let mut args: Vec<String> = sentinels
                    .urls()
                    .into_iter()
                    .flat_map(|url| ["--sentinel".to_string(), url])
                    .collect();
                args.extend(["--service".to_string(), SERVICE.to_string()]);
                args
            }
            LockServers::Cluster(locks) => locks.topology(),
            LockServers::Redlock(masters) => masters
                .urls()
                .into_iter()
                .flat_map(|url| ["--redis".to_string(), url])
                .collect(),
        }
    }

    /// The guarded counters beside the locks (library clients keep them on a single lock
    /// server only), per primitive.
    pub fn guarded_counters(&self, primitives: &[Primitive]) -> Option<HashMap<String, u64>> {
        let LockServers::Single { server, .. } = self else {
            return None;
        };
        let counters = primitives.iter().map(|p| {
            let key = format!(
                "{{{}}}:data:{}",
                p.lock_name(),
                crate::client::GUARDED_COUNTER
            );
            let value: Option<u64> = server.cmd(&["GET", &key]);
            (p.name().to_string(), value.unwrap_or(0))
        });
        Some(counters.collect())
    }
}
