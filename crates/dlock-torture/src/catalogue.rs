//! The catalogue: every scenario by name, with what it proves, what it expects (the
//! negative controls included), the fault it injects and the lock kinds it runs.

use crate::client::Primitive;
use crate::fault::{
    Amnesia, ClientPause, ClockJump, ClockOffset, ClusterFailover, Failover, Fault, HolderCrash,
    MinorityDown, NetworkDelay, Partition, PauseAndCrash, ServerPause, ServerRestart,
};
pub use crate::verdict::Expect;

/// One scenario: its name, what it proves and expects, and the fault it injects.
pub struct Scenario {
    pub name: &'static str,
    pub expect: Expect,
    /// What it proves, in one line (for the table and docs/safety.md).
    pub about: &'static str,
    /// What it does to the clients or servers, each round.
    pub(crate) fault: &'static dyn Fault,
    /// The lock servers keep their data across a crash (AOF, appendfsync always).
    pub(crate) durable: bool,
    /// Every grant, extend and renewal waits for the replica (`LockOptions::replicas`).
    pub(crate) acknowledged: bool,
    /// Not runnable yet: what it waits for.
    pub pending: Option<&'static str>,
    /// The lock kinds it runs, when not those of its topology (see [`Scenario::kinds`]).
    pub(crate) runs: Option<&'static [Primitive]>,
}

/// Every scenario, in the order `--list` and the table show them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "client-pause",
        expect: Expect::Safe,
        about: "a holder SIGSTOPped past its lease, then resumed: its belief ends at its deadline, the fenced store and Redis (a guarded write beside the lock) refuse its late write, the unfenced counter loses an update",
        fault: &ClientPause,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "holder-crash",
        expect: Expect::Safe,
        about: "holders kill -9ed while holding (a `dlock run` wrapper: its command dies with it); the lock frees within the lease",
        fault: &HolderCrash,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "server-pause",
        expect: Expect::Safe,
        about: "the lock server SIGSTOPped for 1.5 leases, then resumed",
        fault: &ServerPause,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "server-restart-aof",
        expect: Expect::Safe,
        about: "the lock server kill -9ed and restarted, AOF with appendfsync always",
        fault: &ServerRestart,
        durable: true,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "server-restart-nopersist",
        expect: Expect::Violation,
        about: "the same restart without persistence: the lock is forgotten while held (negative control); fences keep growing by the clock floor",
        fault: &ServerRestart,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "network-delay",
        expect: Expect::Safe,
        about: "every reply of the lock server delayed by 1.5 leases (a TCP proxy), then not",
        fault: &NetworkDelay,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-minority-down",
        expect: Expect::Safe,
        about: "Redlock on 5 masters (AOF, appendfsync always): each round 2 of them out for 1.5 leases (kill -9ed and restarted, SIGSTOPped, black-holed, or answering a lease late); the other 3 go on granting",
        fault: &MinorityDown,
        durable: true,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-restart-nopersist",
        expect: Expect::Violation,
        about: "Redlock on 3 masters without persistence: right after a grant, C killed (the hold now on A and B only), B kill -9ed and restarted empty, C back empty: the waiter gets B and C while the holder believes (negative control); fences keep growing by the clock floor",
        fault: &Amnesia { delayed: false },
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-restart-durable",
        expect: Expect::Safe,
        about: "the same schedule with AOF and appendfsync always: the restarted master still has the hold",
        fault: &Amnesia { delayed: false },
        durable: true,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-delayed-restart",
        expect: Expect::Safe,
        about: "the same schedule without persistence, but B and C kept down 1.5 leases before they return empty (the usual advice): the holder's renewals find no majority and its belief ends first; no double grant, fences keep growing by the clock floor",
        fault: &Amnesia { delayed: true },
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-clock-jump",
        expect: Expect::Violation,
        about: "Redlock on 5 masters (Valkey, 3 s leases), D and E down while a hold is granted by A, B and C, then back, and C's wall clock jumps 3 leases ahead (libfaketime): the hold expires on C and the waiter gets C, D and E while the holder believes (the known Redlock weakness, negative control); its fence, C's jumped clock, refuses the holder's late writes, and is raised on D and E, so grants without C go on above it",
        fault: &ClockJump,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-clock-offset",
        expect: Expect::Safe,
        about: "Redlock on 5 masters (Valkey) whose wall clocks are offset by +1 s, +10 ms, 0, -10 ms and -1 s (libfaketime, from the start); up to two masters at a time held by another token for 20-100 ms, in turn (in the first round A, a second ahead, throughout, so that the 10 ms offsets decide), while two clients take the lock back to back (holds of a few ms), so that majorities leave out the masters ahead: no overlap and no fence going back (a fence drawn from a clock ahead is raised on a majority, which every later one meets)",
        fault: &ClockOffset { raise: true },
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-clock-offset-no-raise",
        expect: Expect::Violation,
        about: "the same with clients that skip the fence raise (the library's hidden `without_fence_raise`): a grant fenced by a clock ahead leaves the other masters' counters behind, and a later majority without that master draws a smaller fence (negative control: fences must go back)",
        fault: &ClockOffset { raise: false },
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "rwlock-readers",
        expect: Expect::Safe,
        about: "readers and writers of one read-write lock; a reader kill -9ed and a writer SIGSTOPped past its lease, then a writer killed and a reader paused, in turn: no reader beside a writer, and no library reader that came a lease after a waiting library writer got in before it (writers not starved)",
        fault: &PauseAndCrash,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: Some(&[Primitive::Write, Primitive::Read]),
    },
    Scenario {
        name: "reentrant",
        expect: Expect::Safe,
        about: "the reentrant mutex, each hold re-entered by its owner and the inner hold given back first; each round a holder kill -9ed, then one SIGSTOPped past its lease: no overlap, the inner hold shares the outer one's fence, and giving it back keeps the outer hold",
        fault: &PauseAndCrash,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: Some(&[Primitive::Reentrant]),
    },
    Scenario {
        name: "failover-no-ack",
        expect: Expect::Violation,
        about: "Sentinel: the replica frozen while grants go on, the master killed, the replica promoted without the grants (negative control); fences keep growing by the clock floor",
        fault: &Failover,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "failover-ack",
        expect: Expect::Safe,
        about: "the same with replica acknowledgement (`--replicas 1`): a grant the replica lacks is given back, so the promoted replica has every lock",
        fault: &Failover,
        durable: false,
        acknowledged: true,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "cluster-failover-no-ack",
        expect: Expect::Violation,
        about: "Redis Cluster (3 shards, the locks on one): the shard's replica frozen while grants go on, its master frozen, the replica promoted (CLUSTER FAILOVER TAKEOVER) without the grants (negative control); fences keep growing by the clock floor",
        fault: &ClusterFailover,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "cluster-failover-ack",
        expect: Expect::Safe,
        about: "the same with replica acknowledgement (`--replicas 1`): a grant the replica lacks is given back, so the promoted replica has every lock",
        fault: &ClusterFailover,
        durable: false,
        acknowledged: true,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "sentinel-partition",
        expect: Expect::Violation,
        about: "Sentinel: the master cut off from its sentinels, its replica and their clients, the replica promoted; one client per lock still reaches the old master, which goes on granting it the lock while the others take it on the new one (negative control)",
        fault: &Partition,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "sentinel-partition-ack",
        expect: Expect::Safe,
        about: "the same with replica acknowledgement (`--replicas 1`): the old master cannot reach its replica, so nothing it grants or renews counts, and the cut-off client's belief ends within a lease",
        fault: &Partition,
        durable: false,
        acknowledged: true,
        pending: None,
        runs: None,
    },
];

impl Scenario {
    /// The lock kinds this scenario can run: the Redlock mutex on independent masters,
    /// every other kind on one server (or one master and its replica), unless the
    /// scenario is about some kinds of its own (readers and writers, the reentrant mutex).
    pub fn kinds(&self) -> &'static [Primitive] {
        if let Some(kinds) = self.runs {
            kinds
        } else {
            self.fault.kinds()
        }
    }

    /// It runs masters under libfaketime (on Valkey): `ClockTools` must be found.
    pub fn moves_clocks(&self) -> bool {
        self.fault.moves_clocks()
    }

    /// The kinds it runs when `chosen` were asked for (none: it is skipped). A scenario
    /// about kinds of its own runs all of them or none: readers without writers would
    /// leave its checks nothing to judge.
    pub fn kinds_of(&self, chosen: &[Primitive]) -> Vec<Primitive> {
        if let Some(own) = self.runs {
            return match own.iter().all(|kind| chosen.contains(kind)) {
                true => own.to_vec(),
                false => Vec::new(),
            };
        }
        self.kinds()
            .iter()
            .copied()
            .filter(|kind| chosen.contains(kind))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(name: &str) -> &'static Scenario {
        SCENARIOS.iter().find(|s| s.name == name).unwrap()
    }

    /// `--primitive` applies per scenario: Redlock only on its masters, the other kinds
    /// only on theirs; a filter that leaves a scenario nothing skips it.
    #[test]
    fn each_scenario_runs_only_the_kinds_it_can() {
        let all = Primitive::ALL;
        assert_eq!(
            scenario("redlock-minority-down").kinds_of(&all),
            vec![Primitive::Redlock]
        );
        assert_eq!(
            scenario("client-pause").kinds_of(&all),
            Primitive::SINGLE.to_vec()
        );
        assert!(scenario("redlock-restart-nopersist")
            .kinds_of(&[Primitive::Mutex])
            .is_empty());
        assert!(scenario("holder-crash")
            .kinds_of(&[Primitive::Redlock])
            .is_empty());
        // A Redis Cluster runs every kind of one deployment, on one shard; not Redlock.
        for name in ["cluster-failover-no-ack", "cluster-failover-ack"] {
            assert_eq!(scenario(name).kinds_of(&all), Primitive::SINGLE.to_vec());
            assert!(scenario(name).kinds_of(&[Primitive::Redlock]).is_empty());
        }
        // The scenarios about kinds of their own run those only.
        assert_eq!(
            scenario("rwlock-readers").kinds_of(&all),
            vec![Primitive::Write, Primitive::Read]
        );
        assert_eq!(
            scenario("reentrant").kinds_of(&all),
            vec![Primitive::Reentrant]
        );
        assert!(!Primitive::SINGLE.contains(&Primitive::Read));
        // All of its own kinds or none: readers alone would leave its checks nothing.
        assert!(scenario("rwlock-readers")
            .kinds_of(&[Primitive::Read, Primitive::Mutex])
            .is_empty());
        for name in [
            "redlock-clock-jump",
            "redlock-clock-offset",
            "redlock-clock-offset-no-raise",
        ] {
            assert_eq!(scenario(name).kinds_of(&all), vec![Primitive::Redlock]);
        }
        // The read side takes the write side's lock.
        assert_eq!(Primitive::Read.lock_name(), Primitive::Write.lock_name());
    }

    /// The cluster failover twins: the negative control without acknowledgement, the safe
    /// one with it, on the same fault; both listed with what they prove.
    #[test]
    fn the_cluster_failover_twins_differ_only_in_acknowledgement() {
        let (no_ack, ack) = (
            scenario("cluster-failover-no-ack"),
            scenario("cluster-failover-ack"),
        );
        assert_eq!(
            (no_ack.expect, ack.expect),
            (Expect::Violation, Expect::Safe)
        );
        assert_eq!((no_ack.acknowledged, ack.acknowledged), (false, true));
        assert_eq!(format!("{:?}", no_ack.fault), "ClusterFailover");
        assert_eq!(format!("{:?}", ack.fault), "ClusterFailover");
        assert!(!no_ack.durable && !ack.durable);
        assert!(no_ack.pending.is_none() && ack.pending.is_none());
        assert!(no_ack.about.contains("negative control"));
        assert!(ack.about.contains("--replicas 1"));
    }
}
