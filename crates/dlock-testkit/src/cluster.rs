//! A Redis Cluster of real `redis-server` processes on loopback.

use std::collections::BTreeSet;
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Duration;

use redis::Value;

use crate::server::{
    info_value, poll, redis_cli_binary, tail, KillOnDrop, RedisServer, ServerMode, ServerOptions,
};

/// Hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// `cluster-node-timeout` of test clusters. Short, so that a killed master is replaced in
/// about two seconds; not shorter, so that a node that a loaded two-core machine leaves
/// unscheduled for a moment is not voted out.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long forming the cluster, a migration or a failover may take before a wait panics:
/// far above what they take (seconds), so that only a real fault trips it.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Keys moved per `MIGRATE` during [`RedisCluster::migrate_slot`].
const MIGRATE_BATCH: usize = 100;

/// How long one `MIGRATE` may wait for the target, in milliseconds.
const MIGRATE_TIMEOUT_MS: u64 = 5000;

/// A Redis Cluster: cluster-enabled servers on free loopback ports, joined with
/// `redis-cli --cluster create`, all slots assigned and every node agreeing on who serves
/// which. Dropping it kills every node it started (also when a panic interrupts
/// [`RedisCluster::start`]).
pub struct RedisCluster {
    /// Masters, in the order of the slots they served when the cluster was formed: master 0
    /// serves slot 0. [`RedisCluster::fail_master`] puts the promoted replica in the place of
    /// the master it replaces.
    masters: Vec<RedisServer>,
    /// Replicas, and masters killed by [`RedisCluster::fail_master`] (not running until
    /// [`RedisCluster::restart_stopped`]).
    replicas: Vec<RedisServer>,
}

/// One row of `CLUSTER SLOTS`, by port, in a form two nodes' answers can be compared in:
/// replicas as a set, because each node lists them in the order it happened to learn them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    start: u16,
    end: u16,
    master: u16,
    replicas: BTreeSet<u16>,
}

impl RedisCluster {
    /// Starts `masters` masters (at least 3, as `redis-cli --cluster create` demands) with
    /// `replicas_per_master` replicas each, and returns once every node reports
    /// `cluster_state:ok`, all nodes report the same slot map and every replica's link to
    /// its master is up. The slots are spread evenly over the masters, in order.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters (redis-cli --cluster create refuses fewer)"
        );
        let options = ServerOptions {
            mode: ServerMode::Cluster {
                node_timeout: NODE_TIMEOUT,
            },
            // A replica may take over however long it has been cut off from its master:
            // tests kill masters at any moment and want the failover, not a cluster that
            // waits for a master judged too fresh to replace.
            extra_args: vec!["--cluster-replica-validity-factor".into(), "0".into()],
            ..ServerOptions::default()
        };
        // Owned by the cluster from the first node on: a panic anywhere below drops it,
        // which kills every node started so far.
        let mut cluster = RedisCluster {
            masters: Vec::new(),
            replicas: Vec::new(),
        };
        for _ in 0..masters * (1 + replicas_per_master) {
            cluster
                .replicas
                .push(RedisServer::start_with(options.clone()));
        }
        create_cluster(&cluster.replicas, replicas_per_master);
        let map = cluster.wait_until_stable("the new cluster's nodes agree on its slot map");

        // redis-cli chose the masters; sort the nodes by what they became.
        let mut master_ports: Vec<u16> = Vec::new();
        for range in &map {
            if !master_ports.contains(&range.master) {
                master_ports.push(range.master);
            }
        }
        assert_eq!(
            master_ports.len(),
            masters,
            "redis-cli --cluster create made a different number of masters: {map:?}"
        );
        for port in master_ports {
            let at = cluster
                .replicas
                .iter()
                .position(|node| node.port() == port)
                .expect("a slot owner is one of our nodes");
            let master = cluster.replicas.remove(at);
            cluster.masters.push(master);
        }
        cluster.wait_until_replicas_linked("every replica of the new cluster is in sync");
        cluster
    }

    /// `redis://127.0.0.1:PORT` of each master: the seed nodes for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.masters.iter().map(RedisServer::url).collect()
    }

    /// The masters, master `i` being the one [`RedisCluster::master_for_slot`] names `i`.
    pub fn masters(&self) -> &[RedisServer] {
        &self.masters
    }

    /// The replicas, including killed masters that [`RedisCluster::fail_master`] demoted
    /// here (their [`RedisServer::pid`] is `None` until [`RedisCluster::restart_stopped`]).
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// Which master (index into [`RedisCluster::masters`]) serves `slot`, as the live
    /// cluster says (`CLUSTER SLOTS` of the first node that answers).
    pub fn master_for_slot(&self, slot: u16) -> usize {
        assert!(slot < SLOTS, "slot {slot} is not below {SLOTS}");
        let mut errors = Vec::new();
        for node in self.nodes() {
            match slot_map(node) {
                Ok(map) => {
                    let owner = owner_of(&map, slot).unwrap_or_else(|| {
                        panic!("node {} says no node serves slot {slot}", node.port())
                    });
                    return self.master_index(owner);
                }
                Err(err) => errors.push(err),
            }
        }
        panic!("no node of the cluster answered CLUSTER SLOTS: {errors:?}");
    }

    /// Moves `slot`, keys, values and TTLs, to master `to_master` while the cluster stays
    /// online: the target is set `IMPORTING` and the source `MIGRATING` (so clients are sent
    /// on with `ASK` meanwhile), the keys are moved by `MIGRATE ... KEYS` in batches, then
    /// every master is told the new owner with `CLUSTER SETSLOT ... NODE`. Returns once all
    /// running nodes agree that `to_master` serves the slot. Nothing happens but that wait
    /// when `to_master` serves it already.
    pub fn migrate_slot(&self, slot: u16, to_master: usize) {
        let from = self.master_for_slot(slot);
        let target = &self.masters[to_master];
        if from != to_master {
            let source = &self.masters[from];
            let source_id: String = source.cmd(&["CLUSTER", "MYID"]);
            let target_id: String = target.cmd(&["CLUSTER", "MYID"]);
            let slot_arg = slot.to_string();
            // The target first: as soon as the source is MIGRATING it sends clients that
            // miss a key there on to the target (ASK), which must accept them by then.
            let _: () = target.cmd(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source_id]);
            let _: () = source.cmd(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target_id]);

            let mut conn = source.connection();
            loop {
                let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(MIGRATE_BATCH)
                    .query(&mut conn)
                    .unwrap_or_else(|e| panic!("GETKEYSINSLOT {slot} on {}: {e}", source.url()));
                if keys.is_empty() {
                    break;
                }
                // MIGRATE carries each key as DUMP/RESTORE does, TTL included, and deletes
                // it on the source once the target has it.
                let _: Value = redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(target.port())
                    .arg("")
                    .arg(0)
                    .arg(MIGRATE_TIMEOUT_MS)
                    .arg("KEYS")
                    .arg(&keys)
                    .query(&mut conn)
                    .unwrap_or_else(|e| {
                        panic!(
                            "MIGRATE of {} keys of slot {slot} from {} to {}: {e}",
                            keys.len(),
                            source.url(),
                            target.url()
                        )
                    });
            }

            // Target first: it then serves the slot with a bumped config epoch, which is
            // what makes the rest of the cluster (replicas included) accept the change.
            // The source next, so it stops sending ASK; the other masters only to spare
            // clients a redirection until gossip reaches them.
            let others = self
                .masters
                .iter()
                .enumerate()
                .filter(|&(i, m)| i != from && i != to_master && m.pid().is_some())
                .map(|(_, m)| m);
            for node in [target, source].into_iter().chain(others) {
                let _: () = node.cmd(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &target_id]);
            }
        }
        poll(
            &format!(
                "all nodes agree that master {to_master} (port {}) serves slot {slot}",
                target.port()
            ),
            SETTLE_TIMEOUT,
            || {
                let map = self.agreed_slot_map()?;
                match owner_of(&map, slot) {
                    Some(port) if port == target.port() => Ok(()),
                    owner => Err(format!("slot {slot} is served by port {owner:?}")),
                }
            },
        );
    }

    /// Kills master `master` with SIGKILL and waits until one of its replicas has taken
    /// over: it says `role:master`, serves the dead master's slots, every running node
    /// agrees and reports `cluster_state:ok`, and every running replica is linked to a
    /// live master. The promoted replica then is master `master`; the dead one moves to
    /// [`RedisCluster::replicas`], stopped. Returns the new master's port.
    ///
    /// Panics when the master has no running replica (no failover could happen).
    pub fn fail_master(&mut self, master: usize) -> u16 {
        let old_port = self.masters[master].port();
        let candidates: Vec<u16> = self
            .replicas
            .iter()
            .filter(|replica| {
                replica
                    .info_field("replication", "master_port")
                    .is_ok_and(|port| port == old_port.to_string())
            })
            .map(RedisServer::port)
            .collect();
        assert!(
            !candidates.is_empty(),
            "master {master} (port {old_port}) has no running replica to take over"
        );
        let map = self.wait_until_stable("the cluster is stable before a master is killed");
        let first_slot = map
            .iter()
            .find(|range| range.master == old_port)
            .map(|range| range.start)
            .unwrap_or_else(|| panic!("master {master} (port {old_port}) serves no slot"));

        self.masters[master].kill9();
        let promoted = poll(
            &format!(
                "a replica of killed master {master} (port {old_port}; replicas {candidates:?}) \
                 is master of its slots in the eyes of every node"
            ),
            SETTLE_TIMEOUT,
            || {
                let map = self.agreed_slot_map()?;
                let owner = owner_of(&map, first_slot)
                    .ok_or_else(|| format!("no owner of slot {first_slot}"))?;
                if !candidates.contains(&owner) {
                    return Err(format!("slot {first_slot} is still served by port {owner}"));
                }
                let role = self.node(owner).info_field("replication", "role")?;
                if role != "master" {
                    return Err(format!(
                        "port {owner} serves slot {first_slot} but says {role}"
                    ));
                }
                Ok(owner)
            },
        );
        let at = self
            .replicas
            .iter()
            .position(|node| node.port() == promoted)
            .expect("the promoted replica is one of ours");
        let new_master = self.replicas.remove(at);
        let dead = std::mem::replace(&mut self.masters[master], new_master);
        self.replicas.push(dead);
        self.wait_until_replicas_linked("the remaining replicas follow the new master");
        promoted
    }

    /// Restarts every stopped node (masters killed by [`RedisCluster::fail_master`]) on its
    /// port and data directory; they rejoin as replicas of whoever took their slots.
    /// Returns once all nodes agree again and every replica is linked to its master.
    pub fn restart_stopped(&mut self) {
        for node in self.replicas.iter_mut().filter(|node| node.pid().is_none()) {
            node.restart();
        }
        self.wait_until_stable("restarted nodes are known to the cluster again");
        self.wait_until_replicas_linked("restarted nodes replicate the current masters");
    }

    /// All nodes, masters first.
    fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.masters.iter().chain(&self.replicas)
    }

    fn node(&self, port: u16) -> &RedisServer {
        self.nodes()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("port {port} is none of this cluster's nodes"))
    }

    fn master_index(&self, port: u16) -> usize {
        self.masters
            .iter()
            .position(|master| master.port() == port)
            .unwrap_or_else(|| {
                let ports: Vec<u16> = self.masters.iter().map(RedisServer::port).collect();
                panic!("port {port} serves slots but is none of the masters {ports:?}")
            })
    }

    fn wait_until_stable(&self, what: &str) -> Vec<SlotRange> {
        poll(what, SETTLE_TIMEOUT, || self.agreed_slot_map())
    }

    /// The slot map, if every running node reports `cluster_state:ok`, knows every node
    /// (a dead one stays known) and reports the same map; else what is not so yet.
    fn agreed_slot_map(&self) -> Result<Vec<SlotRange>, String> {
        let all = self.masters.len() + self.replicas.len();
        let mut agreed: Option<(u16, Vec<SlotRange>)> = None;
        for node in self.nodes().filter(|node| node.pid().is_some()) {
            let port = node.port();
            let info: String = node.try_cmd(&["CLUSTER", "INFO"])?;
            let state = info_value(&info, "cluster_state");
            if state != Some("ok") {
                return Err(format!("port {port}: cluster_state {state:?}"));
            }
            let known = info_value(&info, "cluster_known_nodes");
            if known != Some(all.to_string().as_str()) {
                return Err(format!("port {port} knows {known:?} nodes of {all}"));
            }
            let map = slot_map(node)?;
            match &agreed {
                None => agreed = Some((port, map)),
                Some((first, first_map)) if *first_map != map => {
                    return Err(format!(
                        "ports {first} and {port} disagree: {first_map:?} vs {map:?}"
                    ))
                }
                Some(_) => {}
            }
        }
        agreed
            .map(|(_, map)| map)
            .ok_or_else(|| "no node is running".to_string())
    }

    /// Waits until every running replica says `role:slave` with its link up, to one of the
    /// current masters.
    fn wait_until_replicas_linked(&self, what: &str) {
        let masters: Vec<String> = self.masters.iter().map(|m| m.port().to_string()).collect();
        poll(what, SETTLE_TIMEOUT, || {
            for replica in self.replicas.iter().filter(|r| r.pid().is_some()) {
                let info: String = replica.try_cmd(&["INFO", "replication"])?;
                let field = |name| info_value(&info, name).unwrap_or("?");
                let (role, link, master) = (
                    field("role"),
                    field("master_link_status"),
                    field("master_port"),
                );
                if role != "slave" || link != "up" || !masters.iter().any(|m| m == master) {
                    return Err(format!(
                        "port {}: role {role}, link {link}, master port {master}",
                        replica.port()
                    ));
                }
            }
            Ok(())
        });
    }
}

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key modulo
/// 16384, or of its hash tag only when the key has one (the bytes between the first `{`
/// and the first `}` after it, if there are any), so that `{user1}.a` and `{user1}.b` land
/// in the same slot.
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let tag = &key[open + 1..];
            let close = tag.iter().position(|&b| b == b'}')?;
            // "{}" is no tag: the whole key counts.
            (close > 0).then(|| &tag[..close])
        })
        .unwrap_or(key);
    crc16_xmodem(hashed) % SLOTS
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum of cluster key slots.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Joins `nodes` into one cluster with `redis-cli --cluster create`, which assigns the
/// slots and replicas and waits until the nodes have met.
fn create_cluster(nodes: &[RedisServer], replicas_per_master: usize) {
    // Output to a file, not a pipe nobody reads while we wait (a full pipe would block it).
    let log_path = nodes[0].dir().join("cluster-create.log");
    let log = File::create(&log_path).expect("create the redis-cli log file");
    let mut command = Command::new(redis_cli_binary());
    command.args(["--cluster", "create"]);
    command.args(
        nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port())),
    );
    command
        .args(["--cluster-replicas", &replicas_per_master.to_string()])
        // Accept the proposed layout without asking (it warns that replicas share their
        // master's host: on loopback they all do).
        .arg("--cluster-yes")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("share the redis-cli log file"))
        .stderr(log);
    let mut child = KillOnDrop(
        command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn redis-cli --cluster create: {e}")),
    );
    let status = poll(
        "redis-cli --cluster create finishes",
        SETTLE_TIMEOUT,
        || match child.0.try_wait() {
            Ok(Some(status)) => Ok(status),
            Ok(None) => Err("still running".to_string()),
            Err(e) => Err(format!("wait for redis-cli: {e}")),
        },
    );
    if !status.success() {
        let output = std::fs::read_to_string(&log_path).unwrap_or_default();
        panic!(
            "redis-cli --cluster create failed ({status}): {}",
            tail(&output)
        );
    }
}

/// `CLUSTER SLOTS` of one node, sorted by slot.
fn slot_map(node: &RedisServer) -> Result<Vec<SlotRange>, String> {
    let reply: Value = node.try_cmd(&["CLUSTER", "SLOTS"])?;
    parse_slots(&reply).map_err(|e| format!("CLUSTER SLOTS of port {}: {e}", node.port()))
}

/// Rows of `[start, end, [ip, port, id, ...] (master), [ip, port, id, ...] (replica)...]`.
fn parse_slots(reply: &Value) -> Result<Vec<SlotRange>, String> {
    fn number(value: Option<&Value>) -> Result<u16, String> {
        match value {
            Some(Value::Int(n)) => u16::try_from(*n).map_err(|_| format!("{n} is no port/slot")),
            other => Err(format!("expected a number, got {other:?}")),
        }
    }
    fn port(node: &Value) -> Result<u16, String> {
        match node {
            Value::Array(fields) => number(fields.get(1)),
            other => Err(format!("expected a node entry, got {other:?}")),
        }
    }
    let Value::Array(rows) = reply else {
        return Err(format!("expected an array, got {reply:?}"));
    };
    let mut map = rows
        .iter()
        .map(|row| {
            let Value::Array(fields) = row else {
                return Err(format!("expected a slot range, got {row:?}"));
            };
            let nodes = fields.get(2..).unwrap_or_default();
            let (master, replicas) = nodes
                .split_first()
                .ok_or_else(|| format!("slot range without a master: {row:?}"))?;
            Ok(SlotRange {
                start: number(fields.first())?,
                end: number(fields.get(1))?,
                master: port(master)?,
                replicas: replicas.iter().map(port).collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    map.sort_by_key(|range| range.start);
    Ok(map)
}

/// The port of the master serving `slot` in `map`.
fn owner_of(map: &[SlotRange], slot: u16) -> Option<u16> {
    map.iter()
        .find(|range| range.start <= slot && slot <= range.end)
        .map(|range| range.master)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_all_gone, pids};

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        // The standard check input of CRC catalogues, and the example of the cluster spec.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(key_slot("123456789"), 0x31C3 % SLOTS);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}".as_bytes()));
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
    }

    /// Keys whose slots fall to each of the masters, through a cluster client; the slot
    /// function agrees with the server's; a migrated key keeps value and TTL.
    #[test]
    fn cluster_serves_all_masters_hashes_like_redis_and_migrates_slots() {
        let cluster = RedisCluster::start(3, 0);
        let all_pids = pids(cluster.masters());
        assert_eq!(cluster.masters().len(), 3);
        let node = &cluster.masters()[0];

        let keys: Vec<String> = (0..30).map(|i| format!("dlock:key:{i}")).collect();
        let tricky = [
            "",
            "{user1000}.following",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "a{b}{c}",
        ];
        for key in keys.iter().map(String::as_str).chain(tricky) {
            let server: u16 = node.cmd(&["CLUSTER", "KEYSLOT", key]);
            assert_eq!(key_slot(key), server, "slot of {key:?}");
        }

        // The test needs keys on every master: with 30 keys over 3 even ranges, that holds.
        let owners: BTreeSet<usize> = keys
            .iter()
            .map(|key| cluster.master_for_slot(key_slot(key)))
            .collect();
        assert_eq!(owners, BTreeSet::from([0, 1, 2]), "keys span all masters");
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        let mut conn = client.get_connection().unwrap();
        for key in &keys {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(key.as_str())
                .query(&mut conn)
                .unwrap();
        }
        for key in &keys {
            // Each key is on the master the slot map names: asked directly, without
            // redirection, that master has it.
            let owner = &cluster.masters()[cluster.master_for_slot(key_slot(key))];
            let value: String = owner.cmd(&["GET", key]);
            assert_eq!(&value, key);
        }

        let key = "dlock:migrating";
        let slot = key_slot(key);
        let from = cluster.master_for_slot(slot);
        let to = (from + 1) % 3;
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .arg("PX")
            .arg(60_000)
            .query(&mut conn)
            .unwrap();
        cluster.migrate_slot(slot, to);
        assert_eq!(cluster.master_for_slot(slot), to);
        for node in cluster.nodes() {
            let map = slot_map(node).unwrap();
            assert_eq!(owner_of(&map, slot), Some(cluster.masters()[to].port()));
        }
        let target = &cluster.masters()[to];
        let value: String = target.cmd(&["GET", key]);
        assert_eq!(value, "v");
        let ttl: i64 = target.cmd(&["PTTL", key]);
        assert!(
            (50_000..=60_000).contains(&ttl),
            "TTL survives migration: {ttl} ms"
        );
        let left: i64 =
            cluster.masters()[from].cmd(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
        assert_eq!(left, 0, "MIGRATE deleted the key on the source");
        let value: String = redis::cmd("GET").arg(key).query(&mut conn).unwrap();
        assert_eq!(value, "v", "the cluster client follows the moved slot");

        drop(conn);
        drop(cluster);
        assert_all_gone(&all_pids);
    }

    /// A killed master is replaced by its replica, the cluster keeps serving its slots, and
    /// the old master comes back as a replica.
    #[test]
    fn cluster_fails_over_to_a_replica_and_takes_the_old_master_back() {
        let mut cluster = RedisCluster::start(3, 1);
        let all_pids: Vec<u32> = pids(cluster.masters())
            .into_iter()
            .chain(pids(cluster.replicas()))
            .collect();
        assert_eq!((cluster.masters().len(), cluster.replicas().len()), (3, 3));

        let key = "dlock:failover";
        let slot = key_slot(key);
        let master = cluster.master_for_slot(slot);
        let old_port = cluster.masters()[master].port();
        // WAIT on the connection that wrote: it waits for that connection's last write.
        let mut direct = cluster.masters()[master].connection();
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("before")
            .query(&mut direct)
            .unwrap();
        let synced: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut direct)
            .unwrap();
        assert_eq!(synced, 1, "the replica has the key before its master dies");
        drop(direct);

        let new_port = cluster.fail_master(master);
        assert_ne!(new_port, old_port);
        assert_eq!(cluster.masters()[master].port(), new_port);
        assert_eq!(cluster.master_for_slot(slot), master);
        let value: String = cluster.masters()[master].cmd(&["GET", key]);
        assert_eq!(value, "before");
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("after")
            .query(&mut conn)
            .unwrap();

        cluster.restart_stopped();
        let old = cluster
            .replicas()
            .iter()
            .find(|node| node.port() == old_port)
            .unwrap();
        let role: String = old.info_field("replication", "role").unwrap();
        assert_eq!(role, "slave", "the old master rejoins as a replica");
        let restarted_pid = old.pid().unwrap();

        drop(conn);
        drop(cluster);
        assert_all_gone(&all_pids);
        assert_all_gone(&[restarted_pid]);
    }
}
