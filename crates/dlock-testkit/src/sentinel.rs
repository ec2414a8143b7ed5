//! Redis Sentinels watching a master, for failover tests.

use std::time::Duration;

use crate::replicated::online_replicas;
use crate::server::{probe_port, RedisServer, ServerMode, ServerOptions};

/// `down-after-milliseconds`: how long the master may not answer before a sentinel
/// thinks it down. Short so a failover test takes seconds; a healthy server on loopback
/// answers PING in well under a millisecond, so a second is no hair trigger.
const DOWN_AFTER_MS: u64 = 1000;

/// `failover-timeout`: among others, how long a sentinel waits before it tries again a
/// failover that another sentinel started and did not finish (twice this). The default,
/// 3 minutes, would stall a test whose first election splits its votes.
const FAILOVER_TIMEOUT_MS: u64 = 5000;

/// How long the sentinels may take to find each other: they announce themselves every 2 s
/// on the master's `__sentinel__:hello` channel.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Redis Sentinels (`redis-server sentinel.conf --sentinel`), each on its own free
/// loopback port with its own rewritable config file, all monitoring one master under one
/// service name. Dropping it kills every sentinel it started (also when a panic interrupts
/// the start); the monitored servers belong to the caller.
pub struct SentinelGroup {
    service: String,
    sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts `sentinels` sentinels monitoring `master` as `service_name`, with a quorum of
    /// a majority of them, `down-after-milliseconds` 1000, `failover-timeout` 5000 and
    /// `parallel-syncs` 1. Returns once every sentinel sees the master up, every other
    /// sentinel, and each replica the master had online when called.
    pub fn start(master: &RedisServer, service_name: &str, sentinels: usize) -> SentinelGroup {
        SentinelGroup::start_at(master, master.port(), service_name, sentinels)
    }

    /// [`SentinelGroup::start`], the sentinels monitoring `master` at `port` on 127.0.0.1
    /// instead of its own port: the port of a proxy in front of it (see
    /// [`MasterWithReplicas::start_behind_proxies`] and its `known_port`). They then
    /// reach it, and name it to their clients, only through that proxy.
    ///
    /// [`MasterWithReplicas::start_behind_proxies`]: crate::MasterWithReplicas::start_behind_proxies
    pub fn start_at(
        master: &RedisServer,
        port: u16,
        service_name: &str,
        sentinels: usize,
    ) -> SentinelGroup {
        assert!(
            sentinels > 0,
            "a sentinel group needs at least one sentinel"
        );
        let info: String = master.cmd(&["INFO", "replication"]);
        let replicas = online_replicas(&info).len();
        // A majority, so that no minority of sentinels can declare the master down alone.
        let quorum = (sentinels / 2 + 1).to_string();
        let port = port.to_string();

        // Owned by the group from the first sentinel on: a panic below kills them all.
        let mut group = SentinelGroup {
            service: service_name.to_string(),
            sentinels: Vec::new(),
        };
        let options = ServerOptions {
            mode: ServerMode::Sentinel,
            ..ServerOptions::default()
        };
        for _ in 0..sentinels {
            group
                .sentinels
                .push(RedisServer::start_with(options.clone()));
        }
        // Configured at run time rather than in the config file: the same commands as an
        // operator's, and the sentinel persists them in its file itself (so a restarted
        // sentinel still monitors the master).
        let (down_after, failover_timeout) =
            (DOWN_AFTER_MS.to_string(), FAILOVER_TIMEOUT_MS.to_string());
        for sentinel in &group.sentinels {
            let _: () = sentinel.cmd(&[
                "SENTINEL",
                "MONITOR",
                service_name,
                "127.0.0.1",
                &port,
                &quorum,
            ]);
            let _: () = sentinel.cmd(&[
                "SENTINEL",
                "SET",
                service_name,
                "down-after-milliseconds",
                &down_after,
                "failover-timeout",
                &failover_timeout,
                "parallel-syncs",
                "1",
            ]);
        }
        group.wait_until_acquainted(replicas);
        group
    }

    /// `redis://127.0.0.1:PORT` of each sentinel.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The service name the sentinels know the master by.
    pub fn service_name(&self) -> &str {
        &self.service
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Sentinel `i`, to stop, kill, pause or restart it.
    pub fn sentinel_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.sentinels[i]
    }

    /// The master's address as the first answering sentinel gives it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`). During a failover that is the replica being
    /// promoted, which may not act as master yet: see [`SentinelGroup::wait_for_failover`].
    pub fn master_addr(&self) -> (String, u16) {
        let mut errors = Vec::new();
        for sentinel in &self.sentinels {
            match self.master_addr_from(sentinel) {
                Ok(addr) => return addr,
                Err(err) => errors.push(err),
            }
        }
        panic!(
            "no sentinel gave the address of {}: {errors:?}",
            self.service
        );
    }

    /// Waits until every running sentinel names a master other than `old_port`, they all
    /// name the same one, and that server says `role:master`; returns its port. Panics after
    /// `timeout` (a failover takes some seconds: detection after 1 s, agreement, election,
    /// promotion, and the news spreading among sentinels).
    pub fn wait_for_failover(&self, old_port: u16, timeout: Duration) -> u16 {
        crate::server::poll(
            &format!(
                "the sentinels of {} agree on a master other than port {old_port}, which says \
                 role:master",
                self.service
            ),
            timeout,
            || {
                let mut agreed: Option<u16> = None;
                for sentinel in self.sentinels.iter().filter(|s| s.pid().is_some()) {
                    let (_, port) = self.master_addr_from(sentinel)?;
                    if port == old_port {
                        return Err(format!(
                            "sentinel {} still names port {old_port}",
                            sentinel.port()
                        ));
                    }
                    if agreed.is_some_and(|first| first != port) {
                        return Err(format!(
                            "sentinels disagree: port {agreed:?} and port {port}"
                        ));
                    }
                    agreed = Some(port);
                }
                let port = agreed.ok_or_else(|| "no sentinel is running".to_string())?;
                let info: String = probe_port(port, &["INFO", "replication"])?;
                if !info.lines().any(|line| line.trim_end() == "role:master") {
                    return Err(format!("port {port} is named master but is not one yet"));
                }
                Ok(port)
            },
        )
    }

    fn master_addr_from(&self, sentinel: &RedisServer) -> Result<(String, u16), String> {
        let addr: Vec<String> =
            sentinel.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.service])?;
        match addr.as_slice() {
            [ip, port] => port
                .parse()
                .map(|port| (ip.clone(), port))
                .map_err(|_| format!("sentinel {}: bad port {port:?}", sentinel.port())),
            other => Err(format!(
                "sentinel {} answered {other:?} for {}",
                sentinel.port(),
                self.service
            )),
        }
    }

    /// Waits until every sentinel sees the master up, the other sentinels and `replicas`
    /// replicas, none of them down or disconnected: only then can they agree on a failover
    /// and pick a replica for it.
    fn wait_until_acquainted(&self, replicas: usize) {
        let others = self.sentinels.len() - 1;
        crate::server::poll(
            &format!(
                "every sentinel of {} sees the master, {others} other sentinel(s) and \
                 {replicas} replica(s)",
                self.service
            ),
            DISCOVERY_TIMEOUT,
            || {
                for sentinel in &self.sentinels {
                    let port = sentinel.port();
                    let master: Vec<String> =
                        sentinel.try_cmd(&["SENTINEL", "MASTER", &self.service])?;
                    let flags = field(&master, "flags").unwrap_or("?");
                    if flags != "master" {
                        return Err(format!("sentinel {port}: master flags {flags}"));
                    }
                    for (kind, wanted, flag) in [
                        ("SENTINELS", others, "sentinel"),
                        ("REPLICAS", replicas, "slave"),
                    ] {
                        let seen: Vec<Vec<String>> =
                            sentinel.try_cmd(&["SENTINEL", kind, &self.service])?;
                        let healthy = seen
                            .iter()
                            .filter(|entry| field(entry, "flags") == Some(flag))
                            .count();
                        if healthy != wanted {
                            return Err(format!(
                                "sentinel {port}: {healthy} of {wanted} {kind} healthy: {seen:?}"
                            ));
                        }
                    }
                }
                Ok(())
            },
        );
    }
}

/// The value of `name` in a Sentinel reply given as `[name, value, name, value, ...]`.
fn field<'a>(pairs: &'a [String], name: &str) -> Option<&'a str> {
    pairs
        .chunks_exact(2)
        .find(|pair| pair[0] == name)
        .map(|pair| pair[1].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicated::MasterWithReplicas;
    use crate::test_support::{assert_all_gone, pids};

    /// Sentinels replace a killed master with its replica, which then takes writes.
    #[test]
    fn sentinels_fail_over_a_killed_master() {
        let mut servers = MasterWithReplicas::start(1);
        let sentinels = SentinelGroup::start(servers.master(), "dlock-test", 3);
        let all_pids: Vec<u32> = pids(sentinels.sentinels())
            .into_iter()
            .chain(pids(servers.replicas()))
            .collect();
        assert_eq!(sentinels.urls().len(), 3);
        let old_port = servers.master().port();
        assert_eq!(sentinels.master_addr(), ("127.0.0.1".to_string(), old_port));

        servers.master_mut().kill9();
        let new_port = sentinels.wait_for_failover(old_port, Duration::from_secs(30));
        assert_eq!(new_port, servers.replica(0).port(), "the only replica");
        assert_eq!(sentinels.master_addr().1, new_port);
        let _: () = servers
            .by_port(new_port)
            .unwrap()
            .cmd(&["SET", "k", "after failover"]);

        drop(sentinels);
        drop(servers);
        assert_all_gone(&all_pids);
    }

    /// Behind proxies the sentinels know every server by its proxy's port: black-holing
    /// the master's proxy cuts it off from them and from its replica, which they promote,
    /// while a client that reaches the old master directly can still write to it.
    #[test]
    fn a_master_cut_off_behind_its_proxy_is_replaced_but_still_takes_direct_writes() {
        let servers = MasterWithReplicas::start_behind_proxies(ServerOptions::default(), 1);
        let old = servers.master().port();
        let old_known = servers.known_port(old);
        let replica_known = servers.known_port(servers.replica(0).port());
        assert_ne!(old_known, old, "known by its proxy");
        let info: String = servers.master().cmd(&["INFO", "replication"]);
        assert_eq!(
            online_replicas(&info),
            vec![replica_known],
            "the replica announces its proxy"
        );
        let sentinels = SentinelGroup::start_at(servers.master(), old_known, "dlock-test", 3);
        let all_pids: Vec<u32> = pids(sentinels.sentinels())
            .into_iter()
            .chain(pids(std::slice::from_ref(servers.master())))
            .chain(pids(servers.replicas()))
            .collect();
        assert_eq!(sentinels.master_addr().1, old_known);

        servers.proxy(old).unwrap().black_hole(true);
        let new = sentinels.wait_for_failover(old_known, Duration::from_secs(30));
        assert_eq!(new, replica_known, "named by its proxy");
        assert_eq!(
            servers.by_port(new).unwrap().port(),
            servers.replica(0).port()
        );
        let _: () = servers.master().cmd(&["SET", "k", "on the old master"]);
        let on_new: Option<String> = servers.replica(0).cmd(&["GET", "k"]);
        assert_eq!(on_new, None, "the promoted replica never hears of it");

        drop(sentinels);
        drop(servers);
        assert_all_gone(&all_pids);
    }
}
