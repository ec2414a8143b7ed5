//! What the Sentinel faults (the failover and the partition) share: their servers, the
//! forced failover, and the wait until the old master is in sync again.

use std::thread;
use std::time::Duration;

use dlock_testkit::{MasterWithReplicas, RedisServer, SentinelGroup, ServerOptions};

use crate::record::mono_ns;
use crate::run::process::interrupted;
use crate::servers::{LockServers, SERVICE};

/// A master and a replica under three sentinels; with `proxied` (the partition), each
/// server behind a proxy of its own, through which the sentinels, the replica and the
/// sentinels' clients reach it (the cut-off clients get a server's own port).
pub(super) fn start(proxied: bool) -> LockServers {
    if proxied {
        let group = MasterWithReplicas::start_behind_proxies(ServerOptions::default(), 1);
        let known = group.known_port(group.master().port());
        let sentinels = SentinelGroup::start_at(group.master(), known, SERVICE, 3);
        return LockServers::Failover { group, sentinels };
    }
    let group = MasterWithReplicas::start(1);
    let sentinels = SentinelGroup::start(group.master(), SERVICE, 3);
    LockServers::Failover { group, sentinels }
}

/// Has the sentinels promote the replica now (`SENTINEL FAILOVER`), rather than after
/// their own detection; retried while a sentinel is not ready for it (10 s at most).
pub(super) fn force_failover(sentinels: &SentinelGroup) {
    let until = mono_ns() + Duration::from_secs(10).as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let mut conn = sentinels.sentinels()[0].connection();
        let forced: redis::RedisResult<()> = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(SERVICE)
            .query(&mut conn);
        match forced {
            Ok(()) => break,
            Err(err) if err.to_string().contains("INPROG") => break,
            Err(_) => thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Waits (30 s at most) until a write on the master `conn` reaches its replica: in sync
/// again before the next round.
pub(super) fn wait_in_sync(conn: &mut redis::Connection) {
    let until = mono_ns() + Duration::from_secs(30).as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let _: redis::RedisResult<()> = redis::cmd("SET").arg("torture:probe").arg(1).query(conn);
        let acknowledged: redis::RedisResult<u32> = redis::cmd("WAIT").arg(1).arg(1000).query(conn);
        if acknowledged.is_ok_and(|n| n >= 1) {
            break;
        }
    }
}

/// The server of `group` on `port` (the roles change with every failover).
pub(super) fn server(group: &mut MasterWithReplicas, port: u16) -> &mut RedisServer {
    if group.master().port() == port {
        group.master_mut()
    } else {
        group.replica_mut(0)
    }
}
