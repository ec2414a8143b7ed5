//! A Redis Cluster of three shards, a master and a replica each, whose locks all live on
//! one shard (every lock's slot is moved there at the start): what
//! `cluster-failover-no-ack` and `cluster-failover-ack` run on, and the bounded questions
//! their failover asks its nodes. The failover itself is `fault/cluster.rs`.

use std::time::Duration;

use dlock_testkit::{key_slot, RedisCluster, RedisServer};
use redis::Value;

use crate::client::Primitive;

/// Masters of the cluster (`redis-cli --cluster create` needs three), one replica each.
const MASTERS: usize = 3;

/// How long one question to a node may take: a frozen node must not hang the harness.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A Redis Cluster whose locks all live on one shard, the one the rounds fail over.
pub struct ClusterLocks {
    cluster: RedisCluster,
    /// The shard that serves every lock: its two nodes' ports, master and replica in some
    /// order (the roles swap with every failover).
    pub(crate) shard: [u16; 2],
    /// The slots of the locks' keys, all served by `shard`.
    pub(crate) slots: Vec<u16>,
}

/// The hash slot of every key of the lock the run names `torture:<kind>`: the lock key
/// itself, and its companions (`{torture:<kind>}:fence`, the queues, ...), which dlock
/// keeps in the lock key's slot.
fn lock_slot(primitive: Primitive) -> u16 {
    key_slot(primitive.lock_name())
}

impl ClusterLocks {
    /// Starts the cluster and moves the slot of every lock kind that runs on one
    /// deployment onto master 0: the different names hash to slots all over the cluster,
    /// and one shard to fail over keeps a round's holders, waiters and failover together.
    pub fn start() -> ClusterLocks {
        let cluster = RedisCluster::start(MASTERS, 1);
        let mut slots: Vec<u16> = Primitive::SINGLE.iter().map(|&p| lock_slot(p)).collect();
        slots.sort_unstable();
        slots.dedup();
        for &slot in &slots {
            cluster.migrate_slot(slot, 0);
        }
        let master = cluster.masters()[0].port();
        let replica = cluster
            .replicas()
            .iter()
            .find(|node| {
                let info: String = node.cmd(&["INFO", "replication"]);
                info_value(&info, "master_port") == Some(master.to_string().as_str())
            })
            .expect("the cluster gives every master a replica")
            .port();
        ClusterLocks {
            cluster,
            shard: [master, replica],
            slots,
        }
    }

    /// The clients' arguments: every node of the cluster as a seed (a client that starts
    /// while one of them is frozen learns the slot map from another).
    pub fn topology(&self) -> Vec<String> {
        self.nodes()
            .flat_map(|node| ["--cluster".to_string(), node.url()])
            .collect()
    }

    fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.cluster.masters().iter().chain(self.cluster.replicas())
    }

    pub(crate) fn node(&self, port: u16) -> &RedisServer {
        self.nodes()
            .find(|node| node.port() == port)
            .expect("a port of the cluster")
    }

    /// The shard's master and replica now, as the cluster says: the node that serves the
    /// locks' slots, and the other one. Asked of a node outside the shard, which no round
    /// freezes.
    pub(crate) fn roles(&self) -> Option<(u16, u16)> {
        let owner = self
            .nodes()
            .filter(|node| !self.shard.contains(&node.port()))
            .find_map(|node| {
                owner_of(
                    &ask(node.port(), &["CLUSTER", "SLOTS"]).ok()?,
                    self.slots[0],
                )
            })?;
        let [a, b] = self.shard;
        match owner {
            _ if owner == a => Some((a, b)),
            _ if owner == b => Some((b, a)),
            _ => None,
        }
    }

    /// Whether every node but `skip` says `cluster_state:ok` and that `master` serves every
    /// lock's slot; `Err` says what is not so yet.
    pub(crate) fn agreed(&self, master: u16, skip: Option<u16>) -> Result<(), String> {
        for node in self.nodes().filter(|node| Some(node.port()) != skip) {
            let port = node.port();
            let info: String =
                ask(port, &["CLUSTER", "INFO"]).map_err(|e| format!("port {port}: {e}"))?;
            let state = info_value(&info, "cluster_state");
            if state != Some("ok") {
                return Err(format!("port {port}: cluster_state {state:?}"));
            }
            let map: Value =
                ask(port, &["CLUSTER", "SLOTS"]).map_err(|e| format!("port {port}: {e}"))?;
            for &slot in &self.slots {
                let owner = owner_of(&map, slot);
                if owner != Some(master) {
                    return Err(format!("port {port}: slot {slot} served by {owner:?}"));
                }
            }
        }
        Ok(())
    }
}

/// A connection to the node on `port` whose every request is bounded in time.
pub(crate) fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let conn = client.get_connection_with_timeout(PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    Ok(conn)
}

/// One command to the node on `port`, bounded in time.
pub(crate) fn ask<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> Result<T, String> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    connect(port)
        .and_then(|mut conn| cmd.query(&mut conn))
        .map_err(|e| format!("{args:?} on port {port}: {e}"))
}

/// One field of an `INFO` reply.
pub(crate) fn info_value<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)?
            .strip_prefix(':')
            .map(str::trim_end)
    })
}

/// The port of the master that a `CLUSTER SLOTS` reply says serves `slot`: rows of
/// `[start, end, [ip, port, id, ...] (master), [ip, port, ...] (replicas)...]`.
fn owner_of(map: &Value, slot: u16) -> Option<u16> {
    let Value::Array(rows) = map else {
        return None;
    };
    rows.iter().find_map(|row| {
        let Value::Array(fields) = row else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        if !(*start..=*end).contains(&i64::from(slot)) {
            return None;
        }
        match master.get(1) {
            Some(Value::Int(port)) => u16::try_from(*port).ok(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of a lock is in its lock key's slot, so moving that slot moves the lock:
    /// its fence, queues and channel go with it.
    #[test]
    fn a_lock_and_its_companions_share_the_slot_that_is_moved() {
        for primitive in Primitive::SINGLE {
            let name = primitive.lock_name();
            for companion in ["fence", "queue", "released"] {
                assert_eq!(
                    key_slot(format!("{{{name}}}:{companion}")),
                    lock_slot(primitive),
                    "{name}:{companion}"
                );
            }
        }
        // The probe written to check a replica is in sync is in the locks' shard.
        assert_eq!(
            key_slot("{torture:mutex}:probe"),
            lock_slot(Primitive::Mutex)
        );
    }

    /// The topology handed to the clients (`--cluster URL` per node) is what a library
    /// client takes, without `--redis` or `--sentinel` (and not with them).
    #[test]
    fn a_library_client_takes_the_cluster_topology() {
        use clap::Parser;
        #[derive(Parser)]
        struct Client {
            #[command(flatten)]
            args: crate::client::ClientArgs,
        }
        let common = [
            "client",
            "--api",
            "async",
            "--primitive",
            "mutex",
            "--store",
            "redis://s",
            "--lock",
            "torture:mutex",
            "--ttl-ms",
            "4000",
            "--work-ms",
            "2000",
            "--until-ns",
            "1",
            "--client",
            "mutex/lib-async-0.1",
            "--log",
            "l",
            "--holding",
            "h",
        ];
        let topology = [
            "--cluster",
            "redis://127.0.0.1:1",
            "--cluster",
            "redis://127.0.0.1:2",
        ];
        let parsed = Client::try_parse_from(common.iter().chain(&topology)).unwrap();
        assert_eq!(
            parsed.args.cluster,
            vec!["redis://127.0.0.1:1", "redis://127.0.0.1:2"]
        );
        assert!(parsed.args.redis.is_empty() && parsed.args.sentinel.is_empty());
        let both = common
            .iter()
            .chain(&topology)
            .chain(&["--redis", "redis://127.0.0.1:3"]);
        assert!(Client::try_parse_from(both).is_err());
        assert!(
            Client::try_parse_from(common).is_err(),
            "some deployment is required"
        );
    }

    /// `CLUSTER SLOTS` is read for the master of the slot's range, by port.
    #[test]
    fn the_owner_of_a_slot_is_read_from_cluster_slots() {
        let node = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let map = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node(7000),
                node(7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node(7001)]),
        ]);
        assert_eq!(owner_of(&map, 0), Some(7000));
        assert_eq!(owner_of(&map, 5460), Some(7000));
        assert_eq!(owner_of(&map, 5461), Some(7001));
        assert_eq!(owner_of(&map, 16383), Some(7001));
        assert_eq!(owner_of(&Value::Array(vec![]), 1), None);
    }
}
