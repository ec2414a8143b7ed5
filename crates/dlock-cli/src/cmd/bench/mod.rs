//! `dlock bench`: the performance scenarios, each reported beside a raw baseline measured
//! in the same run against the same server (on a cluster, through a cluster connection
//! routed like dlock's, its server-side figures summed over the masters; through
//! Sentinel, on the master the sentinels name). The throughput scenarios (seq; par,
//! par_fenced and rwlock_read) take turns with their baseline in short alternating slices,
//! so a machine whose speed drifts mid-run skews no ratio (see `interleaved`).
//!
//! * seq: one task, one key; acquire+release cycles/s vs raw `SET NX PX` + `EVALSHA`
//!   compare-and-delete (the same two round trips) on the same kind of connection.
//! * par: 64 tasks on distinct keys over one client, vs the raw pair with 64 tasks.
//! * par_fenced: par, with every cycle also reading its fencing token, drawn with the
//!   grant (`LockOptions::fence_at_grant`: the acquire is a script), vs the same raw pair.
//! * handoff: 4 workers on one key, each holds it 1 ms then works 1 ms outside it;
//!   acquisitions/s, the measured share of wall time the lock was held (`busy_fraction`),
//!   the gap between a release and the next acquisition by another worker (p50/p99),
//!   acquisitions per worker; plain vs fair mutex, and the write side of a read-write lock
//!   (`handoff_write`: 4 writers, so a release finds writers queued). `handoff_semaphore`:
//!   16 workers on a semaphore of 4 permits, `busy_fraction` the share of the permits'
//!   time held (no gap: its holds overlap).
//! * herd: waiters on one lock, each taking it once; Redis commands per hand-off (from
//!   INFO commandstats, script-internal commands included); plain vs fair mutex, a
//!   semaphore of one permit and the write lock.
//! * rwlock_read_scale / semaphore_scale: the server's time per take-and-give-back of one
//!   more holder while 8, 64 and 1024 others hold the same read-write lock (read holds)
//!   or semaphore (permits): `server_us_at` per size, and the growth from 8 to 1024.
//! * semaphore_weighted: 64 tasks each taking 4 permits at once (`lock_many(4)`, CLI
//!   `--take 4`) of one semaphore and giving them back, vs 64 tasks taking one permit
//!   each of another (the plain path), interleaved in the same run; N is large enough
//!   that nobody waits, so the ratio is the weighted scripts' own cost.
//! * rwlock_read: 64 tasks reading one read-write lock (each its own owner), read
//!   acquire+release cycles/s, vs the raw pair with 64 tasks.
//! * rwlock_writer: one writer taking the lock while 8 readers keep reading (each holds
//!   1 ms); writer acquisitions/s and how long the writer waits (p50/p99).
//! * renew: many held, auto-renewed locks; script calls per second spent on renewal, vs
//!   one call per lock per renewal period.
//! * memory_<kind> (capacity): the bytes Redis keeps for one held lock of each kind
//!   (`MEMORY USAGE` summed over every key the lock has, as SCAN and the library's
//!   companion rule find them), held alone and with one waiter.
//! * capacity: one process (a client of its own) holding many auto-renewed mutexes: how
//!   long taking them all takes, the renewal load over two renewal periods (INFO
//!   commandstats), the process's resident memory and Redis's `used_memory` before and
//!   after, how long `Client::shutdown` takes to give them all back, and the keys left.
//! * redlock: one task, one key; Redlock acquire+release cycles/s over several
//!   independent masters (5 with `--spawn`, or every `--redis` URL given), vs the same
//!   client over the first master alone (a 1-master Redlock), interleaved like the
//!   throughput scenarios. The fan-out is parallel, so the ratio should stay near 1; the
//!   server time per cycle is summed over the masters. Beside it, in the same slices, the
//!   raw fan-out (`SET NX PX` to every master at once, then the compare-and-delete to
//!   every master at once) over the same masters vs over the first: what a parallel
//!   fan-out costs on this machine without dlock (`raw_fan_out_ratio`).
//! * redlock_herd: 8 waiters on one Redlock mutex over the same masters (one handle, as
//!   one process's tasks share it), each taking it, holding it 1 ms and giving it back, for
//!   the throughput duration: hand-offs/s, acquire rounds per hand-off
//!   (`rounds_per_handoff`: each round is a request to every master) and how often each
//!   master's fence counter advanced per grant (`fence_increments_per_grant`: every node
//!   that grants a round draws a fence, granted in the end or not; 1 is the floor).
//!
//! Floors (`floors`): beside par, par_fenced, rwlock_read and the hand-offs, the fastest
//! any correct implementation of the operation could go on the same server, measured in
//! the same run with the scenario's own loop shape, concurrency and duration (`floor`,
//! `floor_kind`, `floor_of`, `ratio_to_floor`; docs/benchmarks.md says what each is). The
//! hand-off rows also carry the direct hand-off floor (`floor_direct_handoff_p50_ms`,
//! `gap_to_direct_handoff`): the least script that hands a fenced lock on, release to the
//! next holder's ear; par and par_fenced, their floor with a release that wakes waiters
//! (`notifying_floor`, `ratio_to_notifying_floor`): the raw release and one message.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use clap::Args;
use dlock::{Client, LockOptions, Owner, Redlock, Wait};

use crate::exit;
use crate::hold::Locks;
use crate::lease::Replication;

mod capacity;
mod contention;
mod floors;
mod measure;
mod redlock;
mod scenarios;
mod spawn;

use capacity::*;
use contention::*;
use floors::*;
use measure::*;
use redlock::*;
use scenarios::*;
pub use spawn::spawn_servers;

/// How many private masters `--spawn` starts: the first serves every scenario, all of
/// them the redlock scenario.
pub const REDLOCK_MASTERS: usize = 5;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// How long each throughput scenario runs
    #[arg(long, value_parser = crate::duration::parse, default_value = "3s")]
    duration: Duration,
    /// Number of locks held in the renew scenario
    #[arg(long, default_value_t = 10_000)]
    renew_locks: usize,
    /// Print one JSON object per scenario (scenario, value, unit, baseline, ratio, floor,
    /// ratio_to_floor, and the scenario's own fields) instead of a table
    #[arg(long)]
    json: bool,
    /// Start private redis-servers on free loopback ports for the run (and stop them
    /// after), instead of using --redis: one for every scenario, five for redlock. Not with
    /// --cluster, --sentinel or several --redis URLs. Built in with the cargo feature
    /// `spawn` only (./scripts/bench.sh has it; an installed dlock does not)
    #[arg(long)]
    pub spawn: bool,
    /// A short run, under a minute: 300ms per throughput scenario, 1000 renewed locks,
    /// 64 herd waiters, 2000 locks held at a 3s lease in the capacity scenario
    #[arg(long)]
    quick: bool,
    /// Locks one process holds at once, auto-renewed, in the capacity scenario [default:
    /// 100000, or 2000 with --quick]
    #[arg(long, value_name = "N")]
    capacity_locks: Option<usize>,
    /// The lease of the capacity scenario's locks, renewed every third of it (the renewal
    /// rate it reports is for this lease) [default: 30s, the library's default lease, or
    /// 3s with --quick]
    #[arg(long, value_parser = crate::duration::parse, value_name = "TTL")]
    capacity_ttl: Option<Duration>,
}

impl BenchArgs {
    /// Refuses runs that would measure nothing, or that this build cannot make (before
    /// any connection). `replication`: the global `--replicas`, which bench refuses.
    pub fn check(&self, replication: Option<Replication>) -> dlock::Result<()> {
        if replication.is_some() {
            return Err(dlock::Error::InvalidArgument(
                "bench measures locks without replica acknowledgement (its raw baseline has no WAIT); leave out --replicas (and unset DLOCK_REPLICAS)".into(),
            ));
        }
        if self.spawn && cfg!(not(feature = "spawn")) {
            return Err(dlock::Error::InvalidArgument(
                "--spawn is not in this build of dlock: it starts servers through the test kit, which the published binary leaves out; build dlock with `--features spawn` (./scripts/bench.sh does), or bench a server you started with --redis URL".into(),
            ));
        }
        if self.duration < Duration::from_millis(100) || self.duration > Duration::from_secs(3600) {
            return Err(dlock::Error::InvalidArgument(format!(
                "--duration {} is out of range; use 100ms to 1h",
                dlock::humane(self.duration)
            )));
        }
        if let Some(locks) = self.capacity_locks.filter(|n| *n == 0 || *n > 1_000_000) {
            return Err(dlock::Error::InvalidArgument(format!(
                "--capacity-locks {locks} is out of range; use 1 to 1000000"
            )));
        }
        if let Some(ttl) = self
            .capacity_ttl
            .filter(|ttl| *ttl < Duration::from_secs(1) || *ttl > Duration::from_secs(300))
        {
            return Err(dlock::Error::InvalidArgument(format!(
                "--capacity-ttl {} is out of range; use 1s to 5m (the scenario watches two renewals)",
                dlock::humane(ttl)
            )));
        }
        if self.renew_locks == 0 || self.renew_locks > 1_000_000 {
            return Err(dlock::Error::InvalidArgument(format!(
                "--renew-locks {} is out of range; use 1 to 1000000",
                self.renew_locks
            )));
        }
        Ok(())
    }
}

const RAW_RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// One scenario's result.
struct Row {
    scenario: &'static str,
    value: f64,
    unit: &'static str,
    /// The raw baseline in the same unit, measured in the same run.
    baseline: Option<f64>,
    /// What the baseline is, in the table ("raw" unless said otherwise).
    baseline_name: &'static str,
    /// The floor of what the row measures, from the same run.
    floor: Option<Floor>,
    extra: serde_json::Map<String, serde_json::Value>,
}

/// A floor beside a row: the fastest any correct implementation of the row's operation
/// could go on this server, measured in the same run with the row's own loop shape.
#[derive(Clone, Copy)]
struct Floor {
    /// Which floor: `raw_pair`, `fenced_grant`, `read_hold` or `notification`.
    kind: &'static str,
    /// The floor, in the unit of what it floors.
    value: f64,
    /// The row's field that the floor is compared to (a time: lower is better, so the
    /// ratio is at least about 1), or `None` for the row's value (a rate: the ratio is
    /// the share of the floor's rate reached, at most about 1).
    of: Option<&'static str>,
}

impl Row {
    fn new(scenario: &'static str, value: f64, unit: &'static str) -> Row {
        Row {
            scenario,
            value,
            unit,
            baseline: None,
            baseline_name: "raw",
            floor: None,
            extra: serde_json::Map::new(),
        }
    }

    fn baseline(mut self, baseline: f64) -> Row {
        self.baseline = Some(baseline);
        self
    }

    /// Puts `floor` beside the row; a floor of 0 or less (nothing measured) is left out.
    fn floor(mut self, floor: Option<Floor>) -> Row {
        self.floor = floor.filter(|floor| floor.value > 0.0);
        self
    }

    fn with(mut self, field: &str, value: serde_json::Value) -> Row {
        self.extra.insert(field.to_string(), value);
        self
    }

    fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b)
    }

    /// What the row reached against its floor: the compared number over the floor.
    fn ratio_to_floor(&self) -> Option<f64> {
        let floor = self.floor?;
        let compared = match floor.of {
            None => self.value,
            Some(field) => self.extra.get(field)?.as_f64()?,
        };
        Some(compared / floor.value)
    }

    fn json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        object.insert("scenario".into(), self.scenario.into());
        object.insert("value".into(), self.value.into());
        object.insert("unit".into(), self.unit.into());
        object.insert("baseline".into(), self.baseline.into());
        object.insert("ratio".into(), self.ratio().into());
        object.insert("floor".into(), self.floor.map(|floor| floor.value).into());
        if let Some(floor) = self.floor {
            object.insert("floor_kind".into(), floor.kind.into());
            object.insert("floor_of".into(), floor.of.unwrap_or("value").into());
        }
        object.insert("ratio_to_floor".into(), self.ratio_to_floor().into());
        object.extend(self.extra.clone());
        serde_json::Value::Object(object)
    }

    fn line(&self) -> String {
        let mut line = format!(
            "{:<18} {:>10.1} {:<22}",
            self.scenario, self.value, self.unit
        );
        if let (Some(baseline), Some(ratio)) = (self.baseline, self.ratio()) {
            line += &format!(" {} {baseline:>10.1}  ratio {ratio:.2}", self.baseline_name);
        }
        if let (Some(floor), Some(ratio)) = (self.floor, self.ratio_to_floor()) {
            line += &match floor.of {
                None => format!("  floor {} {:.1}", floor.kind, floor.value),
                Some(field) => format!("  floor {} {:.3} (of {field})", floor.kind, floor.value),
            };
            line += &format!("  ratio_to_floor {ratio:.2}");
        }
        for (field, value) in &self.extra {
            match value.as_f64().filter(|_| value.is_f64()) {
                Some(number) => line += &format!("  {field} {number:.2}"),
                None => line += &format!("  {field} {value}"),
            }
        }
        line
    }
}

/// The deployment dlock's client talks to, for the raw baseline to talk to the same.
#[derive(Debug, Clone)]
pub enum Target {
    /// One server (`--redis`, or `--spawn`'s).
    SingleNode(String),
    /// A Redis Cluster, by its seed nodes (`--cluster`).
    Cluster(Vec<String>),
    /// The master the sentinels name for the service (`--sentinel`, `--service`).
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
    /// Several independent masters (`--redis` repeated): only the redlock scenario runs.
    Redlock(Vec<String>),
}

/// The raw baseline's connection, to the deployment dlock's client uses: a connection of
/// its own from the library (`Client::connection`, routed as the locks' requests are: by
/// slot on a cluster, to the master the sentinels name), whose commands the baseline
/// sends directly.
#[derive(Clone)]
struct Raw {
    client: Client,
    conn: dlock::RawConnection,
}

impl Target {
    /// A client of its own on this deployment, with `prefix` (the capacity scenario's, to
    /// shut down without the bench's; the raw baseline's, with none).
    async fn connect(&self, prefix: &str) -> dlock::Result<Client> {
        let builder = match self {
            Target::SingleNode(url) => Client::builder(url),
            Target::Cluster(seeds) => Client::cluster_builder(seeds.clone()),
            Target::Sentinel { sentinels, service } => {
                Client::sentinel_builder(sentinels.clone(), service)
            }
            // The first master (the redlock scenario connects to each itself).
            Target::Redlock(masters) => Client::builder(masters.first().map_or("", String::as_str)),
        };
        builder.prefix(prefix).connect().await
    }
}

impl Raw {
    async fn connect(target: &Target) -> dlock::Result<Raw> {
        let client = target.connect("").await?;
        Ok(Raw {
            conn: client.connection().await?,
            client,
        })
    }

    /// One server's connection.
    async fn single(url: &str) -> dlock::Result<Raw> {
        Raw::connect(&Target::SingleNode(url.to_string())).await
    }

    /// `INFO section` of every master (the one server or master, or each of a cluster's).
    async fn info(&self, section: &str) -> dlock::Result<Vec<String>> {
        let mut info = redis::cmd("INFO");
        info.arg(section);
        self.client
            .on_every_master(&info)
            .await?
            .into_iter()
            .map(|reply| {
                redis::from_redis_value(reply)
                    .map_err(|e| dlock::Error::from(redis::RedisError::from(e)))
            })
            .collect()
    }
}

/// Runs the benchmark until it ends or a signal (INT, TERM, HUP) interrupts it (then
/// 128 + the signal, with what an interrupted redlock scenario left removed).
pub async fn run(
    locks: &Locks,
    target: &Target,
    masters: Vec<String>,
    args: &BenchArgs,
    interrupts: Interrupts,
) -> dlock::Result<i32> {
    let redlock_masters = masters.clone();
    let outcome = until_signal(bench(locks, target, masters, args.clone()), interrupts).await;
    if matches!(outcome, Ok(code) if code > 128) {
        // Interrupted mid-scenario: its own clean-up did not run.
        remove_redlock_keys(&redlock_masters, locks.prefix()).await;
    }
    outcome
}

async fn bench(
    locks: &Locks,
    target: &Target,
    masters: Vec<String>,
    args: BenchArgs,
) -> dlock::Result<i32> {
    let (duration, renew_locks, herd_waiters) = if args.quick {
        (Duration::from_millis(300), args.renew_locks.min(1_000), 64)
    } else {
        (args.duration, args.renew_locks, 256)
    };
    let capacity = Capacity {
        locks: (args.capacity_locks).unwrap_or(if args.quick { 2_000 } else { 100_000 }),
        ttl: (args.capacity_ttl).unwrap_or(Duration::from_secs(if args.quick { 3 } else { 30 })),
    };
    let redlock = masters.len() > 1;
    let steps = match locks {
        Locks::Client(_) => 22 + 2 * u64::from(redlock),
        Locks::Redlock(_) => 2,
    };
    let progress = indicatif::ProgressBar::new(steps);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut rows = match locks {
        Locks::Client(client) => {
            let sizes = (duration, renew_locks, herd_waiters, capacity);
            one_deployment(client, target, sizes, &progress).await?
        }
        // Several --redis masters: only the scenario that needs them.
        Locks::Redlock(_) => Vec::new(),
    };
    if redlock {
        progress.set_message("redlock");
        let both = match locks {
            Locks::Redlock(many) => redlock_rows(many, &masters, duration, &progress).await,
            Locks::Client(client) => {
                let many = Client::redlock_builder(masters.iter().cloned())
                    .prefix(client.prefix())
                    .connect()
                    .await?;
                let rows = redlock_rows(&many, &masters, duration, &progress).await;
                many.shutdown().await;
                rows
            }
        };
        rows.extend(both?);
    } else {
        progress.suspend(|| {
            eprintln!("dlock: note: the redlock scenario needs several independent masters and was left out; bench --spawn starts {REDLOCK_MASTERS} private ones, or name them with --redis URL repeated (then only redlock runs)");
        });
    }
    progress.finish_and_clear();

    let mut out = String::new();
    for row in &rows {
        out += &if args.json {
            row.json().to_string()
        } else {
            row.line()
        };
        out.push('\n');
    }
    Ok(exit::emit(&out))
}

/// INT, TERM and HUP, caught from before `--spawn` starts its server: from then on a
/// signal must not kill the process, or the server and its directory would be left.
pub struct Interrupts {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// Installs the handlers (within the runtime).
    pub fn catch() -> dlock::Result<Interrupts> {
        use tokio::signal::unix::{signal, SignalKind};
        let watch = |kind| {
            signal(kind).map_err(|e| {
                dlock::Error::InvalidArgument(format!("cannot watch for signals: {e}"))
            })
        };
        Ok(Interrupts {
            interrupt: watch(SignalKind::interrupt())?,
            terminate: watch(SignalKind::terminate())?,
            hangup: watch(SignalKind::hangup())?,
        })
    }
}

/// Runs the benchmark until it ends or a signal (INT, TERM, HUP) interrupts it, then
/// returns 128 + the signal: the caller's clean-up (the `--spawn` server, the client's
/// locks) runs either way, where dying on the signal would skip it.
async fn until_signal(
    work: impl Future<Output = dlock::Result<i32>>,
    mut signals: Interrupts,
) -> dlock::Result<i32> {
    let number = tokio::select! {
        outcome = work => return outcome,
        _ = signals.interrupt.recv() => libc::SIGINT,
        _ = signals.terminate.recv() => libc::SIGTERM,
        _ = signals.hangup.recv() => libc::SIGHUP,
    };
    eprintln!("dlock: bench interrupted by signal {number}; nothing was measured");
    Ok(128 + number)
}
