//! The Redis Cluster failover of `cluster-failover-no-ack` and `cluster-failover-ack`: the
//! cluster analogue of the Sentinel failover (failover.rs). Each round the locks' shard's
//! replica is promoted without the last grants; the cluster itself is
//! `servers/cluster.rs`.

use std::thread;
use std::time::Duration;

use redis::Value;

use super::holders::freeze_holders;
use super::{Fault, Setup};
use crate::check::{Faults, Outage};
use crate::client::Primitive;
use crate::record::mono_ns;
use crate::run::clients::Run;
use crate::run::process::{interrupted, sleep, stop_or_continue};
use crate::servers::cluster::{ask, connect, info_value, PROBE_TIMEOUT};
use crate::servers::{ClusterLocks, LockServers};

/// The lease of the cluster failover scenarios' locks (at least). A frozen holder believes
/// for at least two thirds of it after its freeze, which must comfortably cover the
/// failover and the waiters' way to the promoted replica: the takeover is agreed within
/// tens of milliseconds here, and the waiters, woken when the old master drops their
/// subscriptions, are granted the locks within about a second on a loaded machine.
const TTL: Duration = Duration::from_secs(4);

/// How long the cluster may take to agree on a failover, or a replica to catch up, before
/// the round gives up waiting (far above what they take: a second or two).
const SETTLE: Duration = Duration::from_secs(30);

/// A Redis Cluster whose locks all live on one shard: that shard's replica frozen while
/// grants go on, its master frozen, the replica promoted (`CLUSTER FAILOVER TAKEOVER`).
#[derive(Debug)]
pub struct ClusterFailover;

impl Fault for ClusterFailover {
    fn ttl(&self, asked: Duration) -> Duration {
        asked.max(TTL)
    }

    fn servers(&self, _: &Setup) -> Result<LockServers, String> {
        Ok(LockServers::Cluster(ClusterLocks::start()))
    }

    fn inject(&self, _: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        if let LockServers::Cluster(locks) = servers {
            fail_over(locks, run, faults);
        }
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
fn fail_over(locks: &ClusterLocks, run: &Run, faults: &mut Faults) {
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
