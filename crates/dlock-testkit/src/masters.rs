//! Independent Redis masters, each behind its own fault-injecting proxy, for Redlock
//! tests (a lock held on a majority of N unrelated servers).

use std::thread;

use crate::proxy::Proxy;
use crate::server::{RedisServer, ServerMode, ServerOptions};

/// `n` standalone servers that know nothing of each other (no replication, no cluster),
/// each on its own free loopback port and each behind its own [`Proxy`], so that a test can
/// partition, stall or refuse one node ([`IndependentMasters::proxy`]) or crash and restart
/// it ([`IndependentMasters::server_mut`]) while the others run on.
///
/// Clients connect through the proxies ([`IndependentMasters::urls`]); set-up and checks
/// can bypass them ([`IndependentMasters::cmd_on`]). Dropping it kills every server it
/// started (also when a panic interrupts the start).
pub struct IndependentMasters {
    // Proxies before servers: dropped first, so no connection is forwarded to a server
    // that is already gone.
    proxies: Vec<Proxy>,
    servers: Vec<RedisServer>,
}

impl IndependentMasters {
    /// Starts `n` servers without persistence.
    pub fn start(n: usize) -> IndependentMasters {
        IndependentMasters::start_with(n, ServerOptions::default())
    }

    /// Starts `n` servers with `options` (e.g. [`ServerOptions::durable`], so that a node
    /// killed with `kill -9` comes back with every write it acknowledged). Standalone,
    /// plain-TCP servers only (the proxies hand out `redis://` URLs).
    pub fn start_with(n: usize, options: ServerOptions) -> IndependentMasters {
        IndependentMasters::start_each(vec![options; n])
    }

    /// Starts one server per entry of `options`, each with its own (for example one
    /// whose clock libfaketime moves among ordinary ones).
    pub fn start_each(options: Vec<ServerOptions>) -> IndependentMasters {
        assert!(!options.is_empty(), "at least one master");
        assert!(
            options
                .iter()
                .all(|o| o.mode == ServerMode::Standalone && !o.tls),
            "independent masters are standalone, plain-TCP servers"
        );
        // In parallel: each start waits for its server to answer, and N of those in a row
        // would add up.
        let started: Vec<thread::Result<RedisServer>> = thread::scope(|scope| {
            let starts: Vec<_> = options
                .into_iter()
                .map(|options| scope.spawn(move || RedisServer::start_with(options)))
                .collect();
            starts.into_iter().map(|start| start.join()).collect()
        });
        let mut servers = Vec::with_capacity(started.len());
        let mut failure = None;
        for result in started {
            match result {
                Ok(server) => servers.push(server),
                Err(panic) => failure = Some(panic),
            }
        }
        if let Some(panic) = failure {
            // The servers that did start are killed as `servers` drops.
            drop(servers);
            std::panic::resume_unwind(panic);
        }
        let proxies = servers.iter().map(|s| Proxy::start(s.port())).collect();
        IndependentMasters { proxies, servers }
    }

    /// How many masters.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Always false: there is at least one master.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// `redis://127.0.0.1:PORT` of each master's proxy, in order: what clients use, so that
    /// the proxies' faults reach them.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(Proxy::url).collect()
    }

    /// Each server's own URL, in order, bypassing the proxies.
    pub fn direct_urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The proxy in front of master `i`, to inject network faults on that node alone.
    pub fn proxy(&self, i: usize) -> &Proxy {
        &self.proxies[i]
    }

    /// Master `i`'s server, e.g. to [`RedisServer::pause`] it.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    /// Master `i`'s server, to [`RedisServer::kill9`] or [`RedisServer::restart`] it. A
    /// restart keeps the port (so its proxy finds it again) and the data directory (so a
    /// node with AOF comes back with its data, one without comes back empty).
    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// Runs one command on master `i` directly (not through its proxy) and returns the
    /// reply; panics on an error.
    pub fn cmd_on<T: redis::FromRedisValue>(&self, i: usize, args: &[&str]) -> T {
        self.servers[i].cmd(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_all_gone, pids};
    use std::time::Duration;

    /// A command through master `i`'s proxy, as a client would send it.
    fn through_proxy<T: redis::FromRedisValue>(
        masters: &IndependentMasters,
        i: usize,
        args: &[&str],
    ) -> T {
        let url = &masters.urls()[i];
        let mut conn = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(10)))
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn)
            .unwrap_or_else(|e| panic!("{args:?} on {url}: {e}"))
    }

    #[test]
    fn five_masters_answer_through_their_proxies_and_share_nothing() {
        let masters = IndependentMasters::start(5);
        assert_eq!(masters.len(), 5);
        let (urls, direct) = (masters.urls(), masters.direct_urls());
        assert_eq!(urls.len(), 5);
        assert_eq!(direct.len(), 5);
        for i in 0..5 {
            assert_ne!(urls[i], direct[i], "clients go through the proxy");
            let pong: String = through_proxy(&masters, i, &["PING"]);
            assert_eq!(pong, "PONG");
            assert!(direct[i].ends_with(&masters.server(i).port().to_string()));
        }
        let _: () = through_proxy(&masters, 0, &["SET", "k", "on 0"]);
        let on_0: Option<String> = masters.cmd_on(0, &["GET", "k"]);
        assert_eq!(
            on_0.as_deref(),
            Some("on 0"),
            "the proxy leads to its own node"
        );
        for i in 1..5 {
            let elsewhere: Option<String> = masters.cmd_on(i, &["GET", "k"]);
            assert_eq!(elsewhere, None, "node {i} is independent of node 0");
        }
        let all = pids(&masters.servers);
        drop(masters);
        assert_all_gone(&all);
    }

    #[test]
    fn a_fault_on_one_proxy_leaves_the_other_nodes_alone() {
        let masters = IndependentMasters::start(3);
        masters.proxy(1).refuse(true);
        let refused = redis::Client::open(masters.urls()[1].as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(10)))
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn));
        assert!(refused.is_err(), "node 1 is cut off: {refused:?}");
        for i in [0, 2] {
            let pong: String = through_proxy(&masters, i, &["PING"]);
            assert_eq!(pong, "PONG", "node {i} is unaffected");
        }
        let pong: String = masters.cmd_on(1, &["PING"]);
        assert_eq!(pong, "PONG", "node 1 itself runs");
        masters.proxy(1).refuse(false);
        let pong: String = through_proxy(&masters, 1, &["PING"]);
        assert_eq!(pong, "PONG");
    }

    #[test]
    fn a_restarted_plain_node_comes_back_empty() {
        let mut masters = IndependentMasters::start(2);
        let _: () = masters.cmd_on(1, &["SET", "k", "v"]);
        masters.server_mut(1).kill9();
        masters.server_mut(1).restart();
        let value: Option<String> = through_proxy(&masters, 1, &["GET", "k"]);
        assert_eq!(value, None, "no persistence: the key is gone");
    }

    #[test]
    fn a_restarted_durable_node_keeps_its_data() {
        let mut masters = IndependentMasters::start_with(2, ServerOptions::durable());
        let _: () = through_proxy(&masters, 1, &["SET", "k", "v"]);
        masters.server_mut(1).kill9();
        masters.server_mut(1).restart();
        let value: Option<String> = through_proxy(&masters, 1, &["GET", "k"]);
        assert_eq!(
            value.as_deref(),
            Some("v"),
            "AOF, fsync always: the key survives"
        );
    }
}
