//! The Sentinel partition of `sentinel-partition` and `sentinel-partition-ack`: the master
//! cut off from its sentinels, its replica and their clients, the replica promoted, while
//! one client per lock still reaches the old master directly.

use std::thread;
use std::time::Duration;

use dlock_testkit::{MasterWithReplicas, SentinelGroup};

use super::sentinel::{force_failover, start, wait_in_sync};
use super::{Fault, Setup};
use crate::check::{self, Faults, Outage};
use crate::record::mono_ns;
use crate::run::clients::Run;
use crate::run::process::{interrupted, sleep};
use crate::servers::LockServers;
use crate::verdict::{Evidence, Expect};

/// A master and a replica under three sentinels, each server behind a proxy: the master
/// cut off from the sentinels, its replica and every client that found it through them,
/// the replica promoted, while one client per lock still reaches the old master directly.
#[derive(Debug)]
pub struct Partition;

impl Fault for Partition {
    // Its fault outlasts four leases. The next round's lead (or the end of the run) is
    // the calm after it.
    fn round(&self, ttl: Duration) -> Duration {
        partition_lead(ttl) + partition_length(ttl)
    }

    fn servers(&self, _: &Setup) -> Result<LockServers, String> {
        Ok(start(true))
    }

    fn inject(&self, index: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
        if let LockServers::Failover { group, sentinels } = servers {
            partition(index, group, sentinels, run, faults);
        }
    }

    // The negative control is a split brain: two masters grant at once, each from its own
    // counter and clock, and two fences drawn microseconds apart on two masters can reach
    // their clients in the other order.
    fn fences_may_go_back(&self, expect: Expect) -> bool {
        expect == Expect::Violation
    }

    fn judge(&self, evidence: &Evidence) -> Vec<String> {
        judge_partition(
            evidence.expect,
            evidence.ttl,
            evidence.holds,
            evidence.faults,
        )
    }
}

/// How long a partition round waits, at most, for one of its cut-off clients to hold a
/// lock before it cuts: usually about a second (the semaphore of three soon has a permit
/// free, the plain mutex is often free).
fn partition_lead(ttl: Duration) -> Duration {
    ttl * 3
}

/// How long a partition lasts at least. The other clients find the promoted replica only
/// once a request to the old master has timed out (the library's response timeout), and
/// a waiter whose attempt timed out first gives back what it may have been granted, on
/// the old master too, which times out as well; then a lease for them to be granted the
/// lock on the promoted replica while the cut-off clients hold it on the old master. (A
/// new `dlock run` asks the sentinels at once: it is granted the lock there about a
/// second after the cut.) Not long enough for the queued kinds: the places the other
/// clients held in the old master's queue when it was cut off stay at its head for a
/// waiter lease, thirty seconds by default, in front of the cut-off client's.
fn partition_length(ttl: Duration) -> Duration {
    dlock::DEFAULT_RESPONSE_TIMEOUT * 2 + ttl
}

/// The clients cut off with the old master: one per lock, through the library's async API
/// (whose recorded deadlines make the checker exact), named `<lock>/partitioned-<round>.1`.
const PARTITIONED: &str = "partitioned";

/// One round of the partition scenarios. One client per lock is started on the current
/// master's own port (the others found it through the sentinels, at its proxy). Once one
/// of them holds a lock (or after [`partition_lead`]), the master's proxy is black-holed: the
/// sentinels, the replica and every other client lose it, and the sentinels promote the
/// replica, forced at once (they would do it themselves after `down-after-milliseconds`;
/// forcing it keeps the round short and the same every time). The cut-off clients still
/// reach the old master and go on taking their locks there. When the partition heals,
/// the old master is made the new one's replica (what the sentinels would tell it once
/// they reach it again) before its proxy lets anyone through, and the round waits until
/// it is in sync. Its cut-off clients stop taking locks when the partition heals (it
/// refuses their writes from then on: `READONLY`).
///
/// The roles swap every round; the next round cuts off the new master.
fn partition(
    index: u32,
    group: &MasterWithReplicas,
    sentinels: &SentinelGroup,
    run: &Run,
    faults: &mut Faults,
) {
    let ttl = run.ttl;
    let (_, known) = sentinels.master_addr();
    let Some(master) = group.by_port(known) else {
        return;
    };
    let (port, direct) = (master.port(), master.url());
    let lead = partition_lead(ttl);
    // The cut-off clients stop at the heal; the partition lasts from the cut to here.
    let heal_ns = mono_ns() + (lead + partition_length(ttl)).as_nanos() as u64;
    for &primitive in &run.config.primitives {
        run.spawn_one(
            primitive,
            (PARTITIONED, index as usize),
            vec!["--redis".into(), direct.clone()],
            heal_ns,
        );
    }
    // A cut-off client holding a lock as the partition begins shows its belief ending
    // (or not) when its renewals stop counting. One of this round's: the last round's
    // may still believe in a hold on what is now a replica.
    let ours = format!("_{PARTITIONED}-{index}.");
    let until = mono_ns() + lead.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let holding = run.config.primitives.iter().any(|&primitive| {
            run.holders(primitive)
                .iter()
                .any(|(name, _)| name.contains(&ours))
        });
        if holding {
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    if interrupted().is_some() {
        return;
    }
    let Some(proxy) = group.proxy(port) else {
        return;
    };
    proxy.black_hole(true);
    // After the black hole is in place: whatever the replica acknowledged was sent to
    // the old master before this.
    let from = mono_ns();
    force_failover(sentinels);
    if interrupted().is_some() {
        return;
    }
    let promoted = sentinels.wait_for_failover(known, Duration::from_secs(30));
    sleep(Duration::from_nanos(heal_ns.saturating_sub(mono_ns())));
    if interrupted().is_some() {
        return;
    }
    let _: redis::RedisResult<()> = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(promoted)
        .query(&mut master.connection());
    proxy.black_hole(false);
    faults.outages.push(Outage {
        port,
        how: "cut off from its sentinels, its replica and their clients",
        from,
        to: mono_ns(),
    });
    // In sync again before the next round: a write on the new master reaches it.
    let Some(new_master) = group.by_port(promoted) else {
        return;
    };
    wait_in_sync(&mut new_master.connection());
}

/// What the partition scenarios must show besides overlaps and fences, about the clients
/// cut off with the old master (`faults.outages`: one per partition).
///
/// Without acknowledgement (the negative control), the old master must have granted one
/// of them a lock after the cut: the hole itself. With it, one of them must have held a
/// lock as it was cut off (or nothing was at stake), and none may have believed a hold
/// more than a lease past the cut: every grant or renewal the replica acknowledged was
/// sent before the cut, and a holder's deadline is at most a lease after it sent one. (The
/// other clients could not take the lock on the promoted replica meanwhile: with one
/// replica, cut off too, none of their grants is acknowledged until the old master
/// rejoins. So the overlap check alone would not see a cut-off client believing too long.)
fn judge_partition(
    expect: Expect,
    ttl: Duration,
    holds: &[check::Hold],
    faults: &Faults,
) -> Vec<String> {
    if faults.outages.is_empty() {
        return vec!["no partition took place".to_string()];
    }
    // Each cut-off hold with its own partition: the first to heal after the hold began.
    // (A round's cut-off clients start after the last partition healed, and one of them
    // may still believe in a hold on that old master as the next round cuts the new one.)
    let infix = format!("/{PARTITIONED}-");
    let cut_off: Vec<(&check::Hold, &Outage)> = holds
        .iter()
        .filter(|h| h.client.contains(&infix))
        .filter_map(|h| Some((h, faults.outages.iter().find(|o| o.to > h.start)?)))
        .collect();
    let mut problems = Vec::new();
    match expect {
        Expect::Violation => {
            if !cut_off.iter().any(|(h, o)| h.start > o.from) {
                problems.push(
                    "the old master granted the cut-off clients nothing after the cut: the hole was not shown"
                        .into(),
                );
            }
        }
        Expect::Safe => {
            if !cut_off
                .iter()
                .any(|(h, o)| h.start < o.from && h.end > o.from)
            {
                problems.push(
                    "no cut-off client held a lock when it was cut off: the partition proved nothing"
                        .into(),
                );
            }
            let ttl_ns = ttl.as_nanos() as u64;
            for (hold, outage) in &cut_off {
                if hold.end > outage.from + ttl_ns {
                    problems.push(format!(
                        "{} believed its hold {} ms after it was cut off, more than a lease: a grant or renewal the replica never had was counted",
                        hold.client,
                        (hold.end - outage.from) / 1_000_000
                    ));
                }
            }
        }
    }
    problems
}
