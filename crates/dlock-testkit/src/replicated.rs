//! One master and its replicas, for tests of replication (`WAIT`) and Sentinel.

use std::time::Duration;

use crate::proxy::Proxy;
use crate::server::{info_value, poll, RedisServer, ServerMode, ServerOptions};

/// How long replicas may take to complete their first sync (milliseconds, normally).
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// A master and replicas started with `--replicaof` it, each on its own free loopback port.
/// Dropping it kills every server it started (also when a panic interrupts the start).
///
/// The roles are those the servers were started with: after a Sentinel failover the
/// server in [`MasterWithReplicas::master`] may be a replica (or dead), so find the new
/// master with [`MasterWithReplicas::by_port`]. A restarted replica is again told to follow
/// the original master.
///
/// Started with [`MasterWithReplicas::start_behind_proxies`], each server sits behind a
/// [`Proxy`] of its own and is known to its peers by the proxy's port, so that one server
/// can be cut off from everything that found it through replication or Sentinel while a
/// test still reaches it directly.
pub struct MasterWithReplicas {
    // Before the servers: dropped first, so no connection is forwarded to a server that is
    // already gone. Empty unless started behind proxies; else the master's, then each
    // replica's in order.
    proxies: Vec<Proxy>,
    master: RedisServer,
    replicas: Vec<RedisServer>,
}

impl MasterWithReplicas {
    /// Starts a master without persistence and `replicas` replicas of it; returns once each
    /// replica's link is up and the master counts it online (so `WAIT` counts it).
    pub fn start(replicas: usize) -> MasterWithReplicas {
        MasterWithReplicas::start_with(ServerOptions::default(), replicas)
    }

    /// [`MasterWithReplicas::start`] with the given options for every server (e.g.
    /// [`ServerOptions::durable`]). Standalone, plain-TCP servers only.
    pub fn start_with(options: ServerOptions, replicas: usize) -> MasterWithReplicas {
        assert!(
            options.mode == ServerMode::Standalone && !options.tls,
            "replication is supported between standalone, plain-TCP servers"
        );
        // Owned by the group before any replica starts: a panic below kills what started.
        let mut group = MasterWithReplicas {
            proxies: Vec::new(),
            master: RedisServer::start_with(options.clone()),
            replicas: Vec::new(),
        };
        let master_port = group.master.port().to_string();
        for _ in 0..replicas {
            let mut options = options.clone();
            options
                .extra_args
                .extend(["--replicaof", "127.0.0.1", master_port.as_str()].map(String::from));
            group.replicas.push(RedisServer::start_with(options));
        }
        group.wait_for_replicas();
        group
    }

    /// [`MasterWithReplicas::start_with`], but each server behind a [`Proxy`] of its own
    /// and known only by the proxy's port: it announces that port to its master
    /// (`replica-announce-port`, so the master's `INFO` lists it there) and replicates
    /// from its master's proxy. Sentinels started with [`SentinelGroup::start_at`] on the
    /// master's proxy port ([`MasterWithReplicas::known_port`]) then reach every server,
    /// and name it to their clients, through its proxy only, as do the replicas: a test can
    /// black-hole one server's proxy ([`MasterWithReplicas::proxy`]) to cut it off from all
    /// of them while a client given its own URL ([`RedisServer::url`]) still reaches it
    /// (a partitioned old master). Both settings are start arguments too, so a restarted
    /// server keeps them.
    ///
    /// [`SentinelGroup::start_at`]: crate::SentinelGroup::start_at
    pub fn start_behind_proxies(options: ServerOptions, replicas: usize) -> MasterWithReplicas {
        assert!(
            options.mode == ServerMode::Standalone && !options.tls,
            "replication is supported between standalone, plain-TCP servers"
        );
        let mut group = MasterWithReplicas {
            proxies: Vec::new(),
            master: RedisServer::start_with(options.clone()),
            replicas: Vec::new(),
        };
        for _ in 0..replicas {
            group
                .replicas
                .push(RedisServer::start_with(options.clone()));
        }
        // A proxy's port is known only once it runs, and it needs its server's port: so
        // servers first, then proxies, then the settings that name them (at run time, and
        // in the start arguments for a restart).
        let ports: Vec<u16> = group.servers().map(RedisServer::port).collect();
        group.proxies = ports.into_iter().map(Proxy::start).collect();
        let master_proxy = group.proxies[0].port().to_string();
        let announced: Vec<String> = group.proxies.iter().map(|p| p.port().to_string()).collect();
        let servers = std::iter::once(&mut group.master).chain(group.replicas.iter_mut());
        for (index, (server, port)) in servers.zip(&announced).enumerate() {
            let _: () = server.cmd(&["CONFIG", "SET", "replica-announce-port", port]);
            server
                .options
                .extra_args
                .extend(["--replica-announce-port".to_string(), port.clone()]);
            if index > 0 {
                let _: () = server.cmd(&["REPLICAOF", "127.0.0.1", &master_proxy]);
                server
                    .options
                    .extra_args
                    .extend(["--replicaof", "127.0.0.1", master_proxy.as_str()].map(String::from));
            }
        }
        group.wait_for_replicas();
        group
    }

    /// The port by which the server listening on `port` is known to its master, its
    /// replicas, sentinels and their clients: its proxy's when the group was started
    /// behind proxies, else `port` itself.
    pub fn known_port(&self, port: u16) -> u16 {
        self.proxy(port).map_or(port, Proxy::port)
    }

    /// The proxy in front of the server that listens on, or is known by, `port` (`None`
    /// unless the group was started behind proxies), e.g. to black-hole it.
    pub fn proxy(&self, port: u16) -> Option<&Proxy> {
        self.servers()
            .zip(&self.proxies)
            .find(|(server, proxy)| server.port() == port || proxy.port() == port)
            .map(|(_, proxy)| proxy)
    }

    /// The master, then each replica.
    fn servers(&self) -> impl Iterator<Item = &RedisServer> {
        std::iter::once(&self.master).chain(&self.replicas)
    }

    /// The server started as master.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The server started as master, to stop, kill or restart it.
    pub fn master_mut(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// Replica `i`, e.g. to [`RedisServer::pause`] it so that `WAIT` times out.
    pub fn replica(&self, i: usize) -> &RedisServer {
        &self.replicas[i]
    }

    /// Replica `i`, to stop, kill or restart it.
    pub fn replica_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.replicas[i]
    }

    /// All replicas.
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// The server (master or replica) listening on, or known by, `port` (see
    /// [`MasterWithReplicas::known_port`]), e.g. the one a Sentinel failover promoted.
    pub fn by_port(&self, port: u16) -> Option<&RedisServer> {
        self.servers()
            .find(|server| server.port() == port || self.known_port(server.port()) == port)
    }

    /// Waits until every running replica reports `master_link_status:up`, the master lists
    /// it `state=online`, and they acknowledge a write: from then on `WAIT` counts them. Useful after restarting a
    /// replica; meaningless after a failover (see the type's documentation).
    pub fn wait_for_replicas(&self) {
        // As the replicas follow it and the master lists them: by their proxies' ports
        // when behind proxies.
        let master_port = self.known_port(self.master.port()).to_string();
        poll(
            &format!("every replica of port {master_port} is linked and online on the master"),
            SYNC_TIMEOUT,
            || {
                let on_master: String = self.master.try_cmd(&["INFO", "replication"])?;
                for replica in self.replicas.iter().filter(|r| r.pid().is_some()) {
                    let info: String = replica.try_cmd(&["INFO", "replication"])?;
                    let link = info_value(&info, "master_link_status");
                    let following = info_value(&info, "master_port");
                    if link != Some("up") || following != Some(master_port.as_str()) {
                        return Err(format!(
                            "replica port {}: link {link:?} to port {following:?}",
                            replica.port()
                        ));
                    }
                    if !online_replicas(&on_master).contains(&self.known_port(replica.port())) {
                        return Err(format!(
                            "master does not list port {} online yet",
                            replica.port()
                        ));
                    }
                }
                Ok(())
            },
        );
        // Online is not yet acknowledging: a replica just synced acknowledges nothing
        // for up to a second (while it loads what it received). A write and a `WAIT` on
        // one connection (WAIT covers that connection's writes only) show it does.
        let running = self.replicas.iter().filter(|r| r.pid().is_some()).count();
        let mut conn = self.master.connection();
        poll(
            &format!("{running} replicas of port {master_port} acknowledge a write"),
            SYNC_TIMEOUT,
            || {
                redis::cmd("SET")
                    .arg("dlock-testkit-probe")
                    .arg(1)
                    .query::<()>(&mut conn)
                    .map_err(|e| e.to_string())?;
                let acknowledged: usize = redis::cmd("WAIT")
                    .arg(running)
                    .arg(500)
                    .query(&mut conn)
                    .map_err(|e| e.to_string())?;
                if acknowledged < running {
                    return Err(format!("{acknowledged} of {running} acknowledged"));
                }
                redis::cmd("DEL")
                    .arg("dlock-testkit-probe")
                    .query::<()>(&mut conn)
                    .map_err(|e| e.to_string())
            },
        );
    }
}

/// The ports of the replicas a master's `INFO replication` lists as online, from lines
/// like `slave0:ip=127.0.0.1,port=PORT,state=online,offset=...`.
pub(crate) fn online_replicas(info: &str) -> Vec<u16> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim_end().split_once(':')?;
            let index = name.strip_prefix("slave")?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let mut fields = fields.split(',');
            let port = fields.clone().find_map(|f| f.strip_prefix("port="))?;
            fields
                .any(|f| f == "state=online")
                .then(|| port.parse().ok())
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_all_gone, pids};

    #[test]
    fn parses_online_replicas() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
                    slave_read_repl_offset:42\r\n";
        assert_eq!(online_replicas(info), vec![7001]);
    }

    /// A write reaches the replica and WAIT counts its acknowledgement; a paused replica
    /// acknowledges nothing, so WAIT times out with 0.
    #[test]
    fn replica_receives_writes_and_wait_times_out_when_it_is_paused() {
        let group = MasterWithReplicas::start(1);
        let all_pids: Vec<u32> = pids(std::slice::from_ref(group.master()))
            .into_iter()
            .chain(pids(group.replicas()))
            .collect();

        // One connection throughout: WAIT waits for the offset of the last write made on
        // its own connection (a fresh connection's WAIT returns at once).
        let mut conn = group.master().connection();
        let mut set_then_wait = |value: &str, timeout_ms: u64| -> i64 {
            let _: () = redis::cmd("SET")
                .arg("k")
                .arg(value)
                .query(&mut conn)
                .unwrap();
            redis::cmd("WAIT")
                .arg(1)
                .arg(timeout_ms)
                .query(&mut conn)
                .unwrap()
        };
        assert_eq!(set_then_wait("v1", 1000), 1, "the replica acknowledges");
        // Acknowledged means applied: the replica serves it.
        let value: String = group.replica(0).cmd(&["GET", "k"]);
        assert_eq!(value, "v1");

        group.replica(0).pause();
        let started = std::time::Instant::now();
        assert_eq!(
            set_then_wait("v2", 200),
            0,
            "a paused replica acknowledges nothing"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "WAIT timed out"
        );
        group.replica(0).resume();
        assert_eq!(
            set_then_wait("v3", 5000),
            1,
            "the resumed replica catches up"
        );

        drop(group);
        assert_all_gone(&all_pids);
    }
}
