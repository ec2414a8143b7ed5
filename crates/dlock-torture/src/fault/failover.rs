//! The Sentinel failover of `failover-no-ack` and `failover-ack`: a master and a replica
//! under three sentinels, the replica frozen while grants go on, the master killed, the
//! replica promoted.

use std::time::Duration;

use dlock_testkit::{MasterWithReplicas, SentinelGroup};

use super::holders::freeze_holders;
use super::sentinel::{force_failover, server, start, wait_in_sync};
use super::{Fault, Setup};
use crate::check::Faults;
use crate::record::mono_ns;
use crate::run::clients::Run;
use crate::run::process::{interrupted, sleep, stop_or_continue};
use crate::servers::{LockServers, SERVICE};

/// The lease of the failover scenarios' locks (at least): longer than a failover takes.
const FAILOVER_TTL: Duration = Duration::from_secs(6);

/// A master and a replica under three sentinels: the replica frozen while grants go on,
/// the master killed, the replica promoted.
#[derive(Debug)]
pub struct Failover;

impl Fault for Failover {
    // A holder's belief must outlast a failover (some seconds) for the promoted replica's
    // second grant to overlap it.
    fn ttl(&self, asked: Duration) -> Duration {
        asked.max(FAILOVER_TTL)
    }

    fn servers(&self, _: &Setup) -> Result<LockServers, String> {
        Ok(start(false))
    }

    fn inject(&self, _: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        if let LockServers::Failover { group, sentinels } = servers {
            fail_over(group, sentinels, run, faults);
        }
    }
}

/// One failover: the replica frozen while grants and renewals go on on the master alone,
/// the master killed, the replica thawed and promoted by the sentinels; then the old
/// master restarted (empty: no persistence) as the new master's replica, and in sync.
///
/// The holders are frozen across the failover, as a holder in a long pause would be:
/// otherwise the first renewal a holder sends to the promoted replica tells it the lock
/// is gone, and whether a waiter was granted the lock first is a race. Frozen, they
/// believe until their deadline, and every grant on the promoted replica before it is
/// seen: a double grant when the replica lacked their hold, none when it had it.
fn fail_over(
    group: &mut MasterWithReplicas,
    sentinels: &SentinelGroup,
    run: &Run,
    faults: &mut Faults,
) {
    let ttl = run.ttl;
    let (_, master_port) = sentinels.master_addr();
    let ports = [group.master().port(), group.replica(0).port()];
    let replica_port = if ports[0] == master_port {
        ports[1]
    } else {
        ports[0]
    };
    // The replica frozen and its link cut by the master: a frozen replica alone would
    // still find everything the master sent meanwhile in its socket's buffer. Then grants
    // and renewals the replica never sees: without acknowledgement a whole lease, so that
    // every lease it has has ended by its promotion and the waiters are granted the locks
    // at once (but for a queued kind's stale place at the head of its queue; after half a
    // lease it would still have the lease of whoever held a lock
    // as it was frozen, renewed up to then: the waiters would find the lock held there
    // until about when the frozen holders' beliefs end, and whether one of them overlaps
    // would be a race, which CI once lost in both rounds). With acknowledgement half a
    // lease: the promoted replica still has the leases of the holders frozen across the
    // failover, as of their last acknowledged renewal, and their beliefs must end before
    // those leases do (after a whole lease every belief would have ended before it).
    // The same as the cluster failover (fault/cluster.rs).
    // The sentinels must not count the frozen replica out (after a second, by default):
    // they would refuse to promote it until it answers their pings again, and the
    // failover that follows the freeze would come seconds late.
    for sentinel in sentinels.sentinels() {
        let _: redis::RedisResult<()> = redis::cmd("SENTINEL")
            .arg("SET")
            .arg(SERVICE)
            .arg("down-after-milliseconds")
            .arg(ttl.as_millis() as u64 * 2)
            .query(&mut sentinel.connection());
    }
    server(group, replica_port).pause();
    // With acknowledgement, no renewal succeeds from here on.
    let unacknowledged_from = run.acknowledged.then(mono_ns);
    let mut conn = server(group, master_port).connection();
    let _: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut conn);
    sleep(if run.acknowledged { ttl / 2 } else { ttl });
    let holders = freeze_holders(run, faults, unacknowledged_from);
    server(group, master_port).kill9();
    server(group, replica_port).resume();
    // Forced at once rather than after the sentinels' own detection (which now takes two
    // leases); retried while a sentinel is not ready for it.
    force_failover(sentinels);
    if interrupted().is_some() {
        // KillLive ends the frozen holders too.
        return;
    }
    let promoted = sentinels.wait_for_failover(master_port, Duration::from_secs(30));
    // Waiters (not frozen) meet the promoted replica first.
    sleep(ttl / 4);
    for pids in &holders {
        stop_or_continue(pids, libc::SIGCONT);
    }
    server(group, master_port).restart();
    let mut conn = server(group, master_port).connection();
    let _: redis::RedisResult<()> = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(promoted)
        .query(&mut conn);
    // In sync again before the next round: a write on the new master reaches it.
    wait_in_sync(&mut server(group, promoted).connection());
}
