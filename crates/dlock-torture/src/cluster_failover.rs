//! The Redis Cluster failover of `cluster-failover-no-ack` and `cluster-failover-ack`: the
//! cluster analogue of the Sentinel failover (`fail_over` in scenario.rs). A cluster of
//! three shards, a master and a replica each; every lock's slot is moved to one shard at
//! the start, and each round that shard's replica is promoted without the last grants.
//!
//! A child module of scenario.rs (declared there), so that it uses the run's own helpers.

use std::thread;
use std::time::Duration;

use dlock_testkit::{key_slot, RedisCluster, RedisServer};
use redis::Value;

use super::{freeze_holders, interrupted, sleep, stop_or_continue, Run};
use crate::check::{Faults, Outage};
use crate::client::Primitive;
use crate::record::mono_ns;

/// The lease of the cluster failover scenarios' locks (at least). A frozen holder believes
/// for at least two thirds of it after its freeze, which must comfortably cover the
/// failover and the waiters' way to the promoted replica: the takeover is agreed within
/// tens of milliseconds here, and the waiters, woken when the old master drops their
/// subscriptions, are granted the locks within about a second on a loaded machine.
pub(super) const TTL: Duration = Duration::from_secs(4);

/// Masters of the cluster (`redis-cli --cluster create` needs three), one replica each.
const MASTERS: usize = 3;

/// How long the cluster may take to agree on a failover, or a replica to catch up, before
/// the round gives up waiting (far above what they take: a second or two).
const SETTLE: Duration = Duration::from_secs(30);

/// How long one question to a node may take: a frozen node must not hang the harness.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A Redis Cluster whose locks all live on one shard, the one the rounds fail over.
pub(super) struct ClusterLocks {
    cluster: RedisCluster,
    /// The shard that serves every lock: its two nodes' ports, master and replica in some
    /// order (the roles swap with every failover).
    shard: [u16; 2],
    /// The slots of the locks' keys, all served by `shard`.
    slots: Vec<u16>,
}

/// The hash slot of every key of the lock the run names `torture:<kind>`: the lock key
/// itself, and its companions (`{torture:<kind>}:fence`, the queues, ...), which dlock
/// keeps in the lock key's slot.
pub(super) fn lock_slot(primitive: Primitive) -> u16 {
    key_slot(primitive.lock_name())
}

impl ClusterLocks {
    /// Starts the cluster and moves the slot of every lock kind that runs on one
    /// deployment onto master 0: the different names hash to slots all over the cluster,
    /// and one shard to fail over keeps a round's holders, waiters and failover together.
    pub(super) fn start() -> ClusterLocks {
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
    pub(super) fn topology(&self) -> Vec<String> {
        self.nodes()
            .flat_map(|node| ["--cluster".to_string(), node.url()])
            .collect()
    }

    fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.cluster.masters().iter().chain(self.cluster.replicas())
    }

    fn node(&self, port: u16) -> &RedisServer {
        self.nodes()
            .find(|node| node.port() == port)
            .expect("a port of the cluster")
    }

    /// The shard's master and replica now, as the cluster says: the node that serves the
    /// locks' slots, and the other one. Asked of a node outside the shard, which no round
    /// freezes.
    fn roles(&self) -> Option<(u16, u16)> {
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
    fn agreed(&self, master: u16, skip: Option<u16>) -> Result<(), String> {
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

/// One round: the cluster analogue of the Sentinel failover. Once a library client holds
/// the mutex or the election (see [`wait_for_library_holder`]; without acknowledgement,
/// only after the next step), the shard's replica is frozen and its link cut by the
/// master, and grants and renewals go on on the master alone for a lease (half a lease
/// with acknowledgement; see below). Then the holders are frozen (as a holder in a long
/// pause would be), the master is frozen, and the replica thawed and promoted at once
/// with `CLUSTER FAILOVER TAKEOVER` (`FORCE` would still ask the frozen master to agree;
/// `TAKEOVER` asks no one). Once
/// every other node agrees that it serves the locks' slots, the old master is thawed: it
/// learns that it was replaced and becomes the new master's replica, drops its clients'
/// sharded subscriptions of those slots (which wakes the waiters) and sends their
/// requests on (`MOVED`). It may still answer, as master, requests that reached it while
/// frozen: with acknowledgement those find no replica and are given back. Two thirds of a
/// lease after their freeze the holders thaw, and the round waits until the old master
/// has the new one's data (a full resync: what only it had is dropped).
///
/// The holders are frozen for the reason `fail_over` gives: otherwise the first renewal a
/// holder sends to the promoted replica tells it the lock is gone, and whether a waiter
/// was granted the lock first is a race.
pub(super) fn fail_over(locks: &ClusterLocks, run: &Run, faults: &mut Faults) {
    let ttl = run.ttl;
    let Some((master, replica)) = locks.roles() else {
        panic!(
            "no node outside the locks' shard {:?} names one of it as the owner of slot {}",
            locks.shard, locks.slots[0]
        );
    };
    if run.acknowledged {
        // Before the replica's freeze: nothing is granted while it is frozen.
        wait_for_library_holder(run);
    }
    // The replica frozen, and its link cut by the master: a frozen replica alone would
    // still find what the master sent meanwhile in its socket's buffer.
    locks.node(replica).pause();
    let replica_from = mono_ns();
    // With acknowledgement, no grant or renewal succeeds from here on.
    let unacknowledged_from = run.acknowledged.then_some(replica_from);
    let _ = ask::<Value>(master, &["CLIENT", "KILL", "TYPE", "replica"]);
    // Without acknowledgement, a whole lease: every lease the replica has has ended by
    // its promotion, so the waiters are granted the locks at once. (After half a lease,
    // as in `fail_over`, it would still have the lease of whoever held a lock as it was
    // frozen, renewed up to then: the waiters would find the lock held there until about
    // when the frozen holders' beliefs end, and whether one of them overlaps would be a
    // race.) With acknowledgement, half a lease, as in `fail_over`: the promoted replica
    // still has the leases of the holders frozen across the failover, as of their last
    // acknowledged renewal, and their beliefs must end before those leases do. (After a
    // whole lease every belief would have ended before the failover.)
    sleep(if run.acknowledged { ttl / 2 } else { ttl });
    if !run.acknowledged {
        // After the replica's freeze: it must lack the hold.
        wait_for_library_holder(run);
    }
    let from = mono_ns();
    let holders = freeze_holders(run, faults, unacknowledged_from);
    locks.node(master).pause();
    let master_from = mono_ns();
    locks.node(replica).resume();
    faults.outages.push(Outage {
        port: replica,
        how: "replica frozen, its link to the master cut",
        from: replica_from,
        to: mono_ns(),
    });
    let until = mono_ns() + SETTLE.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        if ask::<()>(replica, &["CLUSTER", "FAILOVER", "TAKEOVER"]).is_ok() {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    settle(
        &format!(
            "every node but the frozen old master agrees that port {replica} serves the locks"
        ),
        || locks.agreed(replica, Some(master)),
    );
    locks.node(master).resume();
    faults.outages.push(Outage {
        port: master,
        how: "master frozen, its replica promoted (CLUSTER FAILOVER TAKEOVER)",
        from: master_from,
        to: mono_ns(),
    });
    settle(
        &format!("the old master (port {master}) follows port {replica}, which serves the locks"),
        || {
            locks.agreed(replica, None)?;
            let info: String = ask(master, &["INFO", "replication"])?;
            match (info_value(&info, "role"), info_value(&info, "master_port")) {
                (Some("slave"), Some(port)) if port == replica.to_string() => Ok(()),
                seen => Err(format!("port {master}: role and master {seen:?}")),
            }
        },
    );
    if interrupted().is_some() {
        // KillLive ends the frozen holders too.
        return;
    }
    // Waiters (not frozen) meet the promoted replica first. The holders stay frozen for
    // two thirds of a lease, as long as a belief lasts at least (a holder renews every
    // third of a lease): a library holder's belief ends at its deadline, not earlier
    // when a renewal after its thaw is told the lock is gone.
    let thaw = from + (ttl * 2 / 3).as_nanos() as u64;
    sleep(Duration::from_nanos(thaw.saturating_sub(mono_ns())));
    for pids in &holders {
        stop_or_continue(pids, libc::SIGCONT);
    }
    // In sync again before the next round: a write on the new master, in the locks' slot,
    // reaches its replica.
    let probe = format!("{{{}}}:probe", Primitive::Mutex.lock_name());
    settle(
        &format!("the old master (port {master}) has the new master's writes"),
        || {
            let mut conn = connect(replica).map_err(|e| e.to_string())?;
            redis::cmd("SET")
                .arg(&probe)
                .arg(1)
                .query::<()>(&mut conn)
                .map_err(|e| e.to_string())?;
            let acknowledged: u32 = redis::cmd("WAIT")
                .arg(1)
                .arg(PROBE_TIMEOUT.as_millis() as u64 / 2)
                .query(&mut conn)
                .map_err(|e| e.to_string())?;
            if acknowledged >= 1 {
                Ok(())
            } else {
                Err("no replica acknowledged".into())
            }
        },
    );
}

/// Waits (a lease at most, as the partition scenarios wait for their cut-off client's
/// hold) until a library client holds a lock that waiters take as soon as it is free: the
/// mutex or the election (a queue's order may keep them back). Its belief, frozen across
/// the failover, is what the checker judges: its recorded deadline is exact, while a
/// frozen `dlock run` command is known to have believed only until its last sign of life.
fn wait_for_library_holder(run: &Run) {
    let until = mono_ns() + run.ttl.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let library_holder = [Primitive::Mutex, Primitive::Elect]
            .into_iter()
            .filter(|primitive| run.config.primitives.contains(primitive))
            .flat_map(|primitive| run.holders(primitive))
            .any(|(name, _)| !name.contains("_cli-"));
        if library_holder {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until `probe` succeeds (or the run is interrupted); panics after [`SETTLE`],
/// saying what never happened.
fn settle(what: &str, mut probe: impl FnMut() -> Result<(), String>) {
    let until = mono_ns() + SETTLE.as_nanos() as u64;
    loop {
        match probe() {
            Ok(()) => return,
            Err(_) if interrupted().is_some() => return,
            Err(last) if mono_ns() > until => {
                panic!("{what}: not within {SETTLE:?}; last seen: {last}")
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A connection to the node on `port` whose every request is bounded in time.
fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let conn = client.get_connection_with_timeout(PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    Ok(conn)
}

/// One command to the node on `port`, bounded in time.
fn ask<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> Result<T, String> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    connect(port)
        .and_then(|mut conn| cmd.query(&mut conn))
        .map_err(|e| format!("{args:?} on port {port}: {e}"))
}

/// One field of an `INFO` reply.
fn info_value<'a>(info: &'a str, field: &str) -> Option<&'a str> {
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
