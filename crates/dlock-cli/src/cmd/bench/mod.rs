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
//!   acquisitions per worker; plain vs fair mutex.
//! * herd: waiters on one lock, each taking it once; Redis commands per hand-off (from
//!   INFO commandstats, script-internal commands included); plain vs fair mutex.
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

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use clap::Args;
use dlock::{Client, LockOptions, Owner, Redlock, Wait};

use crate::hold::Locks;

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
    /// Print one JSON object per scenario (scenario, value, unit, baseline, ratio, and the
    /// scenario's own fields) instead of a table
    #[arg(long)]
    json: bool,
    /// Start private redis-servers on free loopback ports for the run (and stop them
    /// after), instead of using --redis: one for every scenario, five for redlock. Not with
    /// --cluster, --sentinel or several --redis URLs
    #[arg(long)]
    pub spawn: bool,
    /// A short run, under a minute: 300ms per throughput scenario, 1000 renewed locks,
    /// 64 herd waiters
    #[arg(long)]
    quick: bool,
}

impl BenchArgs {
    /// Refuses runs that would measure nothing (before any connection).
    pub fn check(&self) -> dlock::Result<()> {
        if self.duration < Duration::from_millis(100) || self.duration > Duration::from_secs(3600) {
            return Err(dlock::Error::InvalidArgument(format!(
                "--duration {} is out of range; use 100ms to 1h",
                dlock::humane(self.duration)
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
    extra: serde_json::Map<String, serde_json::Value>,
}

impl Row {
    fn new(scenario: &'static str, value: f64, unit: &'static str) -> Row {
        Row {
            scenario,
            value,
            unit,
            baseline: None,
            baseline_name: "raw",
            extra: serde_json::Map::new(),
        }
    }

    fn baseline(mut self, baseline: f64) -> Row {
        self.baseline = Some(baseline);
        self
    }

    fn with(mut self, field: &str, value: serde_json::Value) -> Row {
        self.extra.insert(field.to_string(), value);
        self
    }

    fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b)
    }

    fn json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        object.insert("scenario".into(), self.scenario.into());
        object.insert("value".into(), self.value.into());
        object.insert("unit".into(), self.unit.into());
        object.insert("baseline".into(), self.baseline.into());
        object.insert("ratio".into(), self.ratio().into());
        object.extend(self.extra.clone());
        serde_json::Value::Object(object)
    }

    fn line(&self) -> String {
        let mut line = format!(
            "{:<14} {:>10.1} {:<22}",
            self.scenario, self.value, self.unit
        );
        if let (Some(baseline), Some(ratio)) = (self.baseline, self.ratio()) {
            line += &format!(" {} {baseline:>10.1}  ratio {ratio:.2}", self.baseline_name);
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

impl Raw {
    async fn connect(target: &Target) -> dlock::Result<Raw> {
        let client = match target {
            Target::SingleNode(url) => Client::connect(url).await?,
            Target::Cluster(seeds) => Client::cluster_builder(seeds.clone()).connect().await?,
            Target::Sentinel { sentinels, service } => {
                Client::sentinel_builder(sentinels.clone(), service)
                    .connect()
                    .await?
            }
            // The first master (the redlock scenario connects to each itself).
            Target::Redlock(masters) => {
                Client::connect(masters.first().map_or("", String::as_str)).await?
            }
        };
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

pub async fn bench(
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
    let redlock = masters.len() > 1;
    let steps = match locks {
        Locks::Client(_) => 14 + 2 * u64::from(redlock),
        Locks::Redlock(_) => 2,
    };
    let progress = indicatif::ProgressBar::new(steps);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut rows = match locks {
        Locks::Client(client) => {
            let sizes = (duration, renew_locks, herd_waiters);
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
    Ok(crate::exit::emit(&out))
}

/// Every scenario but redlock, against one deployment: (throughput duration, renewed
/// locks, herd waiters).
async fn one_deployment(
    client: &Client,
    target: &Target,
    (duration, renew_locks, herd_waiters): (Duration, usize, usize),
    progress: &indicatif::ProgressBar,
) -> dlock::Result<Vec<Row>> {
    let raw = Raw::connect(target).await?;
    // Keys of the raw baseline carry the client's prefix too, so the bench runs as a user
    // limited to that prefix (the client adds it to dlock's own keys).
    let raw_prefix = format!("{}dlock-bench:{}:", client.prefix(), std::process::id());
    let prefix = format!("dlock-bench:{}:", std::process::id());
    let fixed = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::NoWait);
    let mut rows = Vec::new();
    let step = |what: &str| progress.set_message(what.to_string());

    // Raw and dlock run in alternating slices of the same run (see `interleaved`); the
    // server's time per cycle says where a throughput gap comes from: Redis runs on one
    // thread, so par is bound by it.
    step("seq");
    let seq = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(raw_cycles(&raw, &raw_prefix, 1, slice))),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(dlock_cycles(client, &prefix, 1, slice, fixed, false))),
            ),
        ],
    )
    .await?;
    rows.push(throughput_row("seq", &seq[1], &seq[0]));
    progress.inc(2);

    // What a scheduled job's options cost a hold: --hold-at-least gives it back by the
    // linger script instead of the release; --skip-if-ran-within adds a guarded read and
    // a guarded write; --lock-delay only lengthens what Redis keeps. Fresh names each cycle (a lingering hold keeps its name), against
    // the plain path on fresh names, interleaved.
    step("scheduled");
    let lingering = fixed.hold_at_least(Duration::from_secs(10));
    let delayed = fixed.lock_delay(Duration::from_secs(5));
    let sched = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "plain", slice, fixed, false,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "least", slice, lingering, false,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "skip", slice, fixed, true,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(scheduled_cycles(
                        client, &prefix, "delay", slice, delayed, false,
                    ))
                }),
            ),
        ],
    )
    .await?;
    for (scenario, rate) in [
        ("hold_at_least", &sched[1]),
        ("skip_if_ran", &sched[2]),
        ("lock_delay", &sched[3]),
    ] {
        let mut row = Row::new(scenario, rate.per_second, "cycles/s").baseline(sched[0].per_second);
        row.baseline_name = "plain";
        rows.push(row.with("server_us_per_cycle", rate.server_us_per_cycle.into()));
    }
    // The lingering holds end by themselves; their names' keys go with the run's.
    remove_keys(&raw, &own_keys(client.prefix())).await?;
    progress.inc(1);

    // multi: one multi-lock over two names (one script takes both with their fences, one
    // gives both back) against the same two names taken one by one as plain mutexes (two
    // SET NX, two releases), interleaved.
    step("multi");
    let pairs = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(pair_cycles(client, &prefix, slice, fixed, false))),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(pair_cycles(client, &prefix, slice, fixed, true))),
            ),
        ],
    )
    .await?;
    let mut row = Row::new("multi", pairs[1].per_second, "cycles/s").baseline(pairs[0].per_second);
    row.baseline_name = "two_mutexes";
    rows.push(row.with("server_us_per_cycle", pairs[1].server_us_per_cycle.into()));
    progress.inc(1);

    // par_fenced: what a caller that reads every grant's fence pays, configured as the
    // docs advise (the fence drawn with the grant); the raw pair has no fence.
    step("par, par_fenced, rwlock_read");
    let rw_name = format!("{prefix}rw-read");
    let par = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(raw_cycles(&raw, &raw_prefix, 64, slice))),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| Box::pin(dlock_cycles(client, &prefix, 64, slice, fixed, false))),
            ),
            (
                // With the fence drawn at grant, the acquire is the grant script.
                SCRIPT_ONLY,
                Box::new(|slice| {
                    Box::pin(dlock_cycles(
                        client,
                        &prefix,
                        64,
                        slice,
                        fixed.fence_at_grant(),
                        true,
                    ))
                }),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(rwlock_reads(client, &rw_name, 64, slice))),
            ),
        ],
    )
    .await?;
    rows.push(throughput_row("par", &par[1], &par[0]));
    rows.push(
        Row::new("par_fenced", par[2].per_second, "cycles/s")
            .baseline(par[0].per_second)
            .with("server_us_per_cycle", par[2].server_us_per_cycle.into())
            .with("raw_server_us_per_cycle", par[0].server_us_per_cycle.into()),
    );
    let rwlock_read = Row::new("rwlock_read", par[3].per_second, "cycles/s")
        .baseline(par[0].per_second)
        .with("server_us_per_cycle", par[3].server_us_per_cycle.into());
    progress.inc(2);

    for fair in [false, true] {
        step(if fair { "handoff_fair" } else { "handoff" });
        let h = handoff(client, &format!("{prefix}handoff:{fair}"), fair, duration).await?;
        rows.push(
            Row::new(
                if fair { "handoff_fair" } else { "handoff" },
                h.rate,
                "acquisitions/s",
            )
            .with("busy_fraction", h.busy_fraction.into())
            .with("gap_p50_ms", h.gap_p50_ms.into())
            .with("gap_p99_ms", h.gap_p99_ms.into())
            .with("per_worker", h.per_worker.into()),
        );
        progress.inc(1);
    }

    for fair in [false, true] {
        step(if fair { "herd_fair" } else { "herd" });
        let per = herd(
            client,
            &raw,
            &format!("{prefix}herd:{fair}"),
            fair,
            herd_waiters,
        )
        .await?;
        rows.push(
            Row::new(
                if fair { "herd_fair" } else { "herd" },
                per,
                "commands/hand-off",
            )
            .with("waiters", herd_waiters.into()),
        );
        progress.inc(1);
    }

    rows.push(rwlock_read);

    step("rwlock_writer");
    let w = rwlock_writer(client, &format!("{prefix}rw-write"), duration).await?;
    rows.push(
        Row::new("rwlock_writer", w.rate, "writes/s")
            .with("writer_wait_p50_ms", w.wait_p50_ms.into())
            .with("writer_wait_p99_ms", w.wait_p99_ms.into())
            .with("reads", w.reads.into()),
    );
    progress.inc(1);

    for kind in [Scale::Read, Scale::Permit] {
        step(kind.scenario());
        rows.push(scale(client, &raw, &format!("{prefix}scale:"), kind).await?);
        progress.inc(1);
    }

    step("semaphore_weighted");
    let sem = interleaved(
        std::slice::from_ref(&raw),
        duration,
        &mut [
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(semaphore_cycles(client, &prefix, 1, slice))),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| Box::pin(semaphore_cycles(client, &prefix, 4, slice))),
            ),
        ],
    )
    .await?;
    let mut weighted = Row::new("semaphore_weighted", sem[1].per_second, "cycles/s");
    weighted.baseline_name = "plain";
    rows.push(
        weighted
            .baseline(sem[0].per_second)
            .with("take", 4.into())
            .with("server_us_per_cycle", sem[1].server_us_per_cycle.into())
            .with(
                "plain_server_us_per_cycle",
                sem[0].server_us_per_cycle.into(),
            ),
    );
    progress.inc(1);

    step("renew");
    let (per_s, naive) = renew(client, &raw, &prefix, renew_locks).await?;
    rows.push(
        Row::new("renew", per_s, "script calls/s")
            .baseline(naive)
            .with("locks", renew_locks.into()),
    );
    progress.inc(1);
    // Fence counters never expire: leave nothing of the run behind on a shared server.
    remove_keys(&raw, &own_keys(client.prefix())).await?;
    Ok(rows)
}

/// Removes what an interrupted redlock scenario left on `masters` (fence counters never
/// expire); best effort: a master that does not answer keeps them.
pub async fn remove_redlock_keys(masters: &[String], client_prefix: &str) {
    for master in masters {
        if let Ok(raw) = Raw::single(master).await {
            let _ = remove_keys(&raw, &own_keys(client_prefix)).await;
        }
    }
}

/// What every key a run of this process writes starts with, after the client's prefix:
/// its locks' keys, and the locks whose companions [`remove_keys`] also removes.
fn own_keys(client_prefix: &str) -> String {
    format!("{client_prefix}dlock-bench:{}:", std::process::id())
}

/// The redlock and redlock_herd scenarios over `many`, a Redlock over `masters`.
async fn redlock_rows(
    many: &Redlock,
    masters: &[String],
    duration: Duration,
    progress: &indicatif::ProgressBar,
) -> dlock::Result<Vec<Row>> {
    let cycles = redlock_row(many, masters, duration).await?;
    progress.inc(1);
    progress.set_message("redlock_herd");
    let herd = redlock_herd(many, duration).await;
    // Fence counters never expire: leave nothing of the run behind on the masters.
    remove_redlock_keys(masters, many.prefix()).await;
    progress.inc(1);
    Ok(vec![cycles, herd?])
}

/// How many waiters contend in the redlock_herd scenario.
const REDLOCK_HERD_WAITERS: usize = 8;

/// The redlock_herd scenario: waiters taking one Redlock mutex in turn, holding it 1 ms;
/// what each hand-off costs in rounds and fence draws (see the module docs).
async fn redlock_herd(many: &Redlock, duration: Duration) -> dlock::Result<Row> {
    let name = format!("dlock-bench:{}:redlock-herd", std::process::id());
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::Timeout(duration + Duration::from_secs(10)));
    let mutex = many.mutex_with(&name, options)?;
    let before = many.stats();
    let started = Instant::now();
    let deadline = started + duration;
    // Polled on this task, not spawned: an interrupted run drops them all at once.
    let waiters = (0..REDLOCK_HERD_WAITERS).map(|_| async {
        let mut held = 0u64;
        while Instant::now() < deadline {
            let guard = mutex.lock().await?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            guard.unlock().await?;
            held += 1;
        }
        Ok::<u64, dlock::Error>(held)
    });
    let mut handoffs = 0u64;
    for held in join_all(waiters).await {
        handoffs += held?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = many.stats();
    let grants = (after.grants - before.grants).max(1) as f64;
    let rounds = (after.rounds - before.rounds) as f64;
    let draws = (after.node_grants - before.node_grants) as f64;
    Ok(
        Row::new("redlock_herd", handoffs as f64 / elapsed, "hand-offs/s")
            .with("waiters", REDLOCK_HERD_WAITERS.into())
            .with("masters", many.nodes().into())
            .with("rounds_per_handoff", (rounds / grants).into())
            .with(
                "fence_increments_per_grant",
                (draws / grants / many.nodes() as f64).into(),
            ),
    )
}

/// The redlock scenario: one task's acquire+release cycles over `many` (a Redlock over
/// `masters`) vs a Redlock over the first master alone, the same client code, in
/// interleaved slices; server time per cycle summed over the masters.
async fn redlock_row(many: &Redlock, masters: &[String], duration: Duration) -> dlock::Result<Row> {
    let one = Client::redlock_builder(masters.iter().take(1).cloned())
        .prefix(many.prefix())
        .connect()
        .await?;
    let mut raws = Vec::with_capacity(masters.len());
    for master in masters {
        raws.push(Raw::single(master).await?);
    }
    let prefix = format!("dlock-bench:{}:", std::process::id());
    // The raw keys carry the prefix that the Redlock client adds to its own.
    let raw_prefix = format!("{}{prefix}", many.prefix());
    let rates = interleaved(
        &raws,
        duration,
        &mut [
            (
                SCRIPT_ONLY,
                Box::new(|slice| {
                    Box::pin(redlock_cycles(&one, format!("{prefix}redlock-one"), slice))
                }),
            ),
            (
                SCRIPT_ONLY,
                Box::new(|slice| {
                    Box::pin(redlock_cycles(many, format!("{prefix}redlock-many"), slice))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(raw_fan_out(
                        &raws[..1],
                        format!("{raw_prefix}raw-fan-out-one"),
                        slice,
                    ))
                }),
            ),
            (
                SET_AND_SCRIPT,
                Box::new(|slice| {
                    Box::pin(raw_fan_out(
                        &raws,
                        format!("{raw_prefix}raw-fan-out-many"),
                        slice,
                    ))
                }),
            ),
        ],
    )
    .await;
    one.shutdown().await;
    let rates = rates?;
    for raw in &raws {
        remove_keys(raw, &own_keys(many.prefix())).await?;
    }
    let (one, many, raw_one, raw_many) = (&rates[0], &rates[1], &rates[2], &rates[3]);
    let mut row = Row::new("redlock", many.per_second, "cycles/s")
        .baseline(one.per_second)
        .with("masters", masters.len().into())
        .with("baseline_masters", 1.into())
        .with("server_us_per_cycle", many.server_us_per_cycle.into())
        .with(
            "baseline_server_us_per_cycle",
            one.server_us_per_cycle.into(),
        )
        .with("raw_fan_out", raw_many.per_second.into())
        .with("raw_one_master", raw_one.per_second.into())
        .with(
            "raw_fan_out_ratio",
            (raw_many.per_second / raw_one.per_second.max(f64::MIN_POSITIVE)).into(),
        );
    row.baseline_name = "1 master";
    Ok(row)
}

/// What a parallel fan-out costs on this machine without dlock: one task sending `SET NX
/// PX` to every server at once, then the raw compare-and-delete to every server at once.
async fn raw_fan_out(raws: &[Raw], key: String, duration: Duration) -> dlock::Result<u64> {
    let release = redis::Script::new(RAW_RELEASE);
    let deadline = Instant::now() + duration;
    let mut cycles = 0u64;
    while Instant::now() < deadline {
        let token = format!("{:032x}", rand_token());
        let (key, token, release) = (&key, &token, &release);
        let sets = join_all(raws.iter().map(|raw| {
            let mut conn = raw.conn.clone();
            async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            }
        }))
        .await;
        for set in sets {
            set?;
        }
        let releases = join_all(raws.iter().map(|raw| {
            let mut conn = raw.conn.clone();
            async move {
                release
                    .key(key)
                    .arg(token)
                    .invoke_async::<i64>(&mut conn)
                    .await
            }
        }))
        .await;
        for released in releases {
            released?;
        }
        cycles += 1;
    }
    Ok(cycles)
}

/// Polls the futures together on the current task (no spawning) until all are done;
/// their outputs in order.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    use std::task::Poll;
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// One task taking and giving back the Redlock mutex `name` for `duration`: cycles made.
async fn redlock_cycles(redlock: &Redlock, name: String, duration: Duration) -> dlock::Result<u64> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::NoWait);
    let mutex = redlock.mutex_with(&name, options)?;
    let deadline = Instant::now() + duration;
    let mut cycles = 0u64;
    while Instant::now() < deadline {
        mutex.try_lock().await?.unlock().await?;
        cycles += 1;
    }
    Ok(cycles)
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
pub async fn until_signal(
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

/// Deletes every key of the locks whose keys start with `own` (see [`own_keys`]): the lock
/// keys and their companions, found by SCAN with the glob characters of `own` escaped.
async fn remove_keys(raw: &Raw, own: &str) -> dlock::Result<()> {
    // The lock keys, an untagged key's companions (`{K}:…`), and a tagged key's
    // (`A{T}/len/B:…`, listed by the text up to the tag and told by their lock key).
    let mut patterns = vec![format!("{own}*"), format!("{{{own}*")];
    if let Some(open) = own.find('{') {
        if let Some(close) = own[open..].find('}').map(|c| open + c) {
            if close > open + 1 {
                patterns.push(format!("{}/*", &own[..=close]));
            }
        }
    }
    let ours = |key: &str| {
        key.starts_with(own)
            || dlock::companion_owner(key).is_some_and(|lock| lock.starts_with(own))
    };
    for pattern in patterns {
        let escaped: String = pattern
            .char_indices()
            .flat_map(|(i, c)| {
                let literal =
                    matches!(c, '?' | '[' | ']' | '\\') || (c == '*' && i + 1 < pattern.len());
                literal.then_some('\\').into_iter().chain([c])
            })
            .collect();
        // On every master: a cluster's keys are spread over them.
        for key in raw.client.scan(&escaped).await? {
            if !ours(&key) {
                continue;
            }
            // One key per DEL: on a cluster they live in different slots.
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut raw.conn.clone())
                .await?;
        }
    }
    Ok(())
}

/// Raw baseline: SET NX PX + EVALSHA compare-and-delete, `tasks` tasks on distinct keys.
async fn raw_cycles(
    raw: &Raw,
    prefix: &str,
    tasks: usize,
    duration: Duration,
) -> dlock::Result<u64> {
    let release = redis::Script::new(RAW_RELEASE);
    let deadline = Instant::now() + duration;
    let loops = (0..tasks).map(|task| {
        let (mut conn, release) = (raw.conn.clone(), release.clone());
        let key = format!("{prefix}raw:{task}");
        async move {
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                let token = format!("{:032x}", rand_token());
                let set: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async(&mut conn)
                    .await?;
                if set.is_some() {
                    let _: i64 = release
                        .key(&key)
                        .arg(&token)
                        .invoke_async(&mut conn)
                        .await?;
                    cycles += 1;
                }
            }
            Ok(cycles)
        }
    });
    run_loops(loops).await
}

/// Runs the loops side by side (each returns how many cycles it made) and returns the
/// cycles they made in all.
async fn run_loops<Loop>(loops: impl IntoIterator<Item = Loop>) -> dlock::Result<u64>
where
    Loop: std::future::Future<Output = dlock::Result<u64>> + Send + 'static,
{
    let handles: Vec<_> = loops.into_iter().map(tokio::spawn).collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("bench task")?;
    }
    Ok(total)
}

fn rand_token() -> u128 {
    // The raw baseline needs unique tokens, not strong ones; the clock is enough.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    nanos ^ (std::process::id() as u128) << 64
}

async fn dlock_cycles(
    client: &Client,
    prefix: &str,
    tasks: usize,
    duration: Duration,
    options: LockOptions,
    read_fence: bool,
) -> dlock::Result<u64> {
    let deadline = Instant::now() + duration;
    let mut loops = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let mutex = client.mutex_with(&format!("{prefix}dlock:{task}"), options)?;
        loops.push(async move {
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                let guard = mutex.try_lock().await?;
                if read_fence {
                    guard.fence().await?;
                }
                guard.unlock().await?;
                cycles += 1;
            }
            Ok(cycles)
        });
    }
    run_loops(loops).await
}

/// Sequential cycles over two names: with `multi`, one multi-lock over both (try, unlock);
/// without, each name's plain mutex taken and given back in turn, both held at once.
async fn pair_cycles(
    client: &Client,
    prefix: &str,
    duration: Duration,
    options: LockOptions,
    multi: bool,
) -> dlock::Result<u64> {
    let deadline = Instant::now() + duration;
    let names = [format!("{prefix}pair:a"), format!("{prefix}pair:b")];
    let both = client.multi_lock_with(&[&names[0], &names[1]], options)?;
    let one = client.mutex_with(&names[0], options)?;
    let other = client.mutex_with(&names[1], options)?;
    let mut cycles = 0u64;
    while Instant::now() < deadline {
        if multi {
            both.try_lock().await?.unlock().await?;
        } else {
            let first = one.try_lock().await?;
            let second = other.try_lock().await?;
            second.unlock().await?;
            first.unlock().await?;
        }
        cycles += 1;
    }
    Ok(cycles)
}

/// Sequential cycles of a scheduled job's lock, a fresh name each: try, (with `record`:
/// read the last success, record one), give back with `options`.
async fn scheduled_cycles(
    client: &Client,
    prefix: &str,
    what: &str,
    duration: Duration,
    options: LockOptions,
    record: bool,
) -> dlock::Result<u64> {
    let deadline = Instant::now() + duration;
    let mut cycles = 0u64;
    while Instant::now() < deadline {
        let name = format!("{prefix}scheduled:{what}:{}", rand_token());
        let guard = client.mutex_with(&name, options)?.try_lock().await?;
        if record && guard.last_success().await?.is_none() {
            guard.record_success(Duration::from_secs(10)).await?;
        }
        guard.unlock().await?;
        cycles += 1;
    }
    Ok(cycles)
}

/// Tasks of the semaphore_weighted scenario.
const SEMAPHORE_TASKS: usize = 64;

/// `SEMAPHORE_TASKS` tasks each taking `take` permits of one semaphore (its own per
/// `take`) and giving them back, for `duration`; N fits them all, so nobody waits.
async fn semaphore_cycles(
    client: &Client,
    prefix: &str,
    take: u32,
    duration: Duration,
) -> dlock::Result<u64> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::Timeout(Duration::from_secs(10)));
    let permits = SEMAPHORE_TASKS as u32 * take;
    let semaphore = client
        .semaphore_with(&format!("{prefix}semaphore:{take}"), permits, options)?
        .taking(take)?;
    let deadline = Instant::now() + duration;
    let loops = (0..SEMAPHORE_TASKS).map(|_| {
        let semaphore = semaphore.clone();
        async move {
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                semaphore.lock().await?.unlock().await?;
                cycles += 1;
            }
            Ok(cycles)
        }
    });
    run_loops(loops).await
}

struct Handoff {
    rate: f64,
    /// The measured share of wall time some worker held the lock.
    busy_fraction: f64,
    gap_p50_ms: f64,
    gap_p99_ms: f64,
    per_worker: Vec<usize>,
}

async fn handoff(
    client: &Client,
    name: &str,
    fair: bool,
    duration: Duration,
) -> dlock::Result<Handoff> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::Forever);
    let mutex = if fair {
        client.fair_mutex_with(name, options)?
    } else {
        client.mutex_with(name, options)?
    };
    let holds: Arc<StdMutex<Vec<(Instant, Instant, usize)>>> = Arc::default();
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (mutex, holds) = (mutex.clone(), holds.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let guard = mutex.lock().await?;
                let acquired = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await;
                let released = Instant::now();
                guard.unlock().await?;
                holds.lock().unwrap().push((acquired, released, worker));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok::<(), dlock::Error>(())
        }));
    }
    for worker in workers {
        worker.await.expect("bench worker")?;
    }
    let mut holds = holds.lock().unwrap().clone();
    holds.sort_by_key(|h| h.0);
    let gaps: Vec<f64> = holds
        .windows(2)
        .filter(|w| w[0].2 != w[1].2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1).as_secs_f64() * 1000.0)
        .collect();
    let pct = percentiles(gaps);
    let mut per_worker = vec![0; 4];
    for h in &holds {
        per_worker[h.2] += 1;
    }
    // What was held, measured (a 1 ms tokio sleep takes longer than 1 ms).
    let held: f64 = holds
        .iter()
        .map(|h| h.1.saturating_duration_since(h.0).as_secs_f64())
        .sum();
    let wall = started.elapsed().as_secs_f64();
    Ok(Handoff {
        busy_fraction: held / wall,
        rate: holds.len() as f64 / duration.as_secs_f64(),
        gap_p50_ms: pct(0.5),
        gap_p99_ms: pct(0.99),
        per_worker,
    })
}

/// Microseconds the servers spent in the named top-level commands so far (a script's
/// `evalsha` time includes the commands it runs), summed.
async fn server_usec(raws: &[Raw], commands: &[&str]) -> dlock::Result<f64> {
    let mut infos = Vec::new();
    for raw in raws {
        infos.extend(raw.info("commandstats").await?);
    }
    Ok(infos
        .iter()
        .flat_map(|info| info.lines())
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            commands.contains(&name).then_some(())?;
            stats
                .split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum())
}

/// One contender of an [`interleaved`] run: runs its cycles for the given slice of time
/// and returns how many it made.
type Contender<'a> =
    Box<dyn FnMut(Duration) -> Pin<Box<dyn Future<Output = dlock::Result<u64>> + 'a>> + 'a>;

/// A contender's result: cycles per second, and the server's time per cycle.
struct Rate {
    per_second: f64,
    server_us_per_cycle: f64,
}

/// The top-level commands whose server time a cycle costs. Redis counts a script's
/// inner commands under their own names too, so a contender whose `SET` runs inside its
/// script counts only `evalsha`, or that `SET` would count twice.
const SET_AND_SCRIPT: &[&str] = &["set", "evalsha"];
const SCRIPT_ONLY: &[&str] = &["evalsha"];

/// Runs the contenders (each with the commands its cycles send) in turns for `duration`
/// each, over at least 8 slices whose order alternates (A B C, C B A, ...): on shared
/// cores the machine's speed drifts within a run, by half or more here, and a baseline
/// measured in one block before its contender measured the drift instead of the
/// contender. Interleaved, a slow spell weighs on every contender alike. An untimed
/// first slice each loads the scripts and warms the connections. Short runs (`--quick`)
/// still give only indicative ratios: a slice of tens of milliseconds is noisy.
async fn interleaved(
    raws: &[Raw],
    duration: Duration,
    contenders: &mut [(&'static [&'static str], Contender<'_>)],
) -> dlock::Result<Vec<Rate>> {
    let rounds = (duration.as_millis() / 250).clamp(8, 240) as u32;
    let slice = duration / rounds;
    for (_, run) in contenders.iter_mut() {
        run(slice.min(Duration::from_millis(50))).await?;
    }
    let mut cycles = vec![0u64; contenders.len()];
    let mut usec = vec![0.0; contenders.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let (commands, run) = &mut contenders[index];
            let before = server_usec(raws, commands).await?;
            cycles[index] += run(slice).await?;
            usec[index] += server_usec(raws, commands).await? - before;
        }
    }
    let seconds = (slice * rounds).as_secs_f64();
    Ok(cycles
        .iter()
        .zip(usec)
        .map(|(&cycles, usec)| Rate {
            per_second: cycles as f64 / seconds,
            server_us_per_cycle: if cycles > 0 {
                usec / cycles as f64
            } else {
                0.0
            },
        })
        .collect())
}

/// A dlock throughput row beside its raw baseline of the same interleaved run.
fn throughput_row(scenario: &'static str, dlock: &Rate, raw: &Rate) -> Row {
    Row::new(scenario, dlock.per_second, "cycles/s")
        .baseline(raw.per_second)
        .with("server_us_per_cycle", dlock.server_us_per_cycle.into())
        .with("raw_server_us_per_cycle", raw.server_us_per_cycle.into())
}

/// Calls per command from INFO commandstats, the INFO calls themselves left out.
async fn command_calls(raw: &Raw) -> dlock::Result<Vec<(String, u64)>> {
    let infos = raw.info("commandstats").await?;
    Ok(infos
        .iter()
        .flat_map(|info| info.lines())
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "info").then(|| (name.to_string(), calls))
        })
        .collect())
}

/// All commands Redis executed, script-internal ones included.
async fn total_calls(raw: &Raw) -> dlock::Result<u64> {
    Ok(command_calls(raw)
        .await?
        .iter()
        .map(|(_, calls)| calls)
        .sum())
}

/// Script calls (one per request that runs a dlock script).
async fn script_calls(raw: &Raw) -> dlock::Result<u64> {
    Ok(command_calls(raw)
        .await?
        .iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum())
}

async fn herd(
    client: &Client,
    raw: &Raw,
    name: &str,
    fair: bool,
    waiters: usize,
) -> dlock::Result<f64> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever)
        .waiter_lease(Duration::from_secs(120));
    let mutex = if fair {
        client.fair_mutex_with(name, options)?
    } else {
        client.mutex_with(name, options)?
    };
    let holder = mutex.try_lock().await?;
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let mutex = mutex.clone();
        tasks.push(tokio::spawn(
            async move { mutex.lock().await?.unlock().await },
        ));
    }
    // Let every waiter subscribe and settle.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let before = total_calls(raw).await?;
    holder.unlock().await?;
    for task in tasks {
        task.await.expect("bench waiter")?;
    }
    // The two INFO calls themselves are not counted (filtered above).
    let after = total_calls(raw).await?;
    Ok((after - before) as f64 / waiters as f64)
}

async fn renew(
    client: &Client,
    raw: &Raw,
    prefix: &str,
    locks: usize,
) -> dlock::Result<(f64, f64)> {
    let ttl = Duration::from_secs(3);
    let options = LockOptions::default().renewed(ttl).wait(Wait::NoWait);
    let mut guards = Vec::with_capacity(locks);
    for i in 0..locks {
        guards.push(
            client
                .mutex_with(&format!("{prefix}renew:{i}"), options)?
                .try_lock()
                .await?,
        );
    }
    // Requests, not the commands inside them: a batch is one script call whatever its
    // size, while one extend per lock would be one call each.
    let window = ttl * 2;
    let before = script_calls(raw).await?;
    tokio::time::sleep(window).await;
    let renewal_calls = (script_calls(raw).await? - before) as f64;
    for guard in guards {
        let _ = guard.unlock().await;
    }
    let naive = locks as f64 / (ttl.as_secs_f64() / 3.0);
    Ok((renewal_calls / window.as_secs_f64(), naive))
}

/// 64 readers (each its own owner) of one read-write lock: read acquire+release cycles/s.
async fn rwlock_reads(
    client: &Client,
    name: &str,
    tasks: usize,
    duration: Duration,
) -> dlock::Result<u64> {
    let lock = client.rwlock_with(
        name,
        LockOptions::default()
            .ttl(Duration::from_secs(10))
            .wait(Wait::Timeout(Duration::from_secs(10))),
    )?;
    let deadline = Instant::now() + duration;
    let loops = (0..tasks).map(|_| {
        let lock = lock.clone();
        async move {
            // A reader of its own in each task.
            let reader = lock.for_owner(&Owner::new());
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                reader.read().await?.unlock().await?;
                cycles += 1;
            }
            Ok(cycles)
        }
    });
    run_loops(loops).await
}

/// How many others hold the lock while the scale scenarios measure one more holder.
const SCALE_HOLDERS: [usize; 3] = [8, 64, 1024];
/// Take-and-give-back cycles measured at each size.
const SCALE_CYCLES: u32 = 200;

/// What a scale scenario holds many of.
#[derive(Clone, Copy)]
enum Scale {
    /// Read holds of one read-write lock, each of its own owner.
    Read,
    /// Permits of one semaphore.
    Permit,
}

impl Scale {
    fn scenario(self) -> &'static str {
        match self {
            Scale::Read => "rwlock_read_scale",
            Scale::Permit => "semaphore_scale",
        }
    }
}

/// The server's time per cycle of one more holder taking and giving back its hold while
/// `n` others hold the same lock, for each `n` of [`SCALE_HOLDERS`]: how an operation's
/// cost grows with the holders (constant when it touches only what it needs). Fixed
/// leases, so no renewal runs meanwhile.
async fn scale(client: &Client, raw: &Raw, prefix: &str, kind: Scale) -> dlock::Result<Row> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(120))
        .wait(Wait::NoWait);
    let scripts = ["evalsha", "eval"];
    let mut at = serde_json::Map::new();
    let mut per_cycle = Vec::with_capacity(SCALE_HOLDERS.len());
    for holders in SCALE_HOLDERS {
        let name = format!("{prefix}{}-{holders}", kind.scenario());
        let (lock, others): (dlock::AnyLock, Vec<dlock::AnyLock>) = match kind {
            Scale::Read => {
                let rwlock = client.rwlock_with(&name, options)?;
                let others = (0..holders)
                    .map(|_| rwlock.for_owner(&Owner::new()).reader().into())
                    .collect();
                (rwlock.reader().into(), others)
            }
            Scale::Permit => {
                let semaphore = client.semaphore_with(&name, holders as u32 + 1, options)?;
                let others = (0..holders).map(|_| semaphore.clone().into()).collect();
                (semaphore.into(), others)
            }
        };
        let mut held = Vec::with_capacity(holders);
        for other in &others {
            held.push(other.try_lock().await?);
        }
        let before = server_usec(std::slice::from_ref(raw), &scripts).await?;
        for _ in 0..SCALE_CYCLES {
            lock.try_lock().await?.unlock().await?;
        }
        let spent = server_usec(std::slice::from_ref(raw), &scripts).await? - before;
        let us = spent / f64::from(SCALE_CYCLES);
        at.insert(holders.to_string(), us.into());
        per_cycle.push(us);
        for guard in held {
            guard.unlock().await?;
        }
    }
    let (first, last) = (per_cycle[0], per_cycle[per_cycle.len() - 1]);
    Ok(Row::new(kind.scenario(), last, "server us/cycle")
        .with("holders", SCALE_HOLDERS[SCALE_HOLDERS.len() - 1].into())
        .with("server_us_at", serde_json::Value::Object(at))
        .with("growth", (last / first.max(f64::MIN_POSITIVE)).into()))
}

/// The p-th percentile (0..=1) of `samples` (0 when there are none).
fn percentiles(mut samples: Vec<f64>) -> impl Fn(f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    move |p| {
        samples
            .get(((samples.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    }
}

struct WriterUnderReaders {
    rate: f64,
    wait_p50_ms: f64,
    wait_p99_ms: f64,
    reads: u64,
}

/// One writer against 8 readers that keep reading (each holds 1 ms): writer preference
/// must let the writer in promptly.
async fn rwlock_writer(
    client: &Client,
    name: &str,
    duration: Duration,
) -> dlock::Result<WriterUnderReaders> {
    let lock = client.rwlock_with(
        name,
        LockOptions::default()
            .ttl(Duration::from_secs(10))
            .wait(Wait::Timeout(Duration::from_secs(30))),
    )?;
    let deadline = Instant::now() + duration;
    let mut readers = Vec::new();
    for _ in 0..8 {
        let lock = lock.clone();
        readers.push(tokio::spawn(async move {
            let reader = lock.for_owner(&Owner::new());
            let mut reads = 0u64;
            while Instant::now() < deadline {
                let read = reader.read().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
                read.unlock().await?;
                reads += 1;
            }
            Ok::<u64, dlock::Error>(reads)
        }));
    }
    let mut waits = Vec::new();
    while Instant::now() < deadline {
        let asked = Instant::now();
        let write = lock.write().await?;
        waits.push(asked.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        write.unlock().await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut reads = 0;
    for reader in readers {
        reads += reader.await.expect("bench reader")?;
    }
    let writes = waits.len();
    let pct = percentiles(waits);
    Ok(WriterUnderReaders {
        rate: writes as f64 / duration.as_secs_f64(),
        wait_p50_ms: pct(0.5),
        wait_p99_ms: pct(0.99),
        reads,
    })
}

/// A private redis-server for `bench --spawn`: the test kit's, on a free loopback port in
/// a temp dir of its own, used only once it answers with its own pid, stopped (by that
/// pid) when dropped.
pub struct PrivateServer(dlock_testkit::RedisServer);

impl PrivateServer {
    /// Starts the server; on failure, says why (the caller exits 69: no server to bench).
    pub fn start() -> Result<PrivateServer, String> {
        dlock_testkit::RedisServer::try_start()
            .map(PrivateServer)
            .map_err(|err| format!("--spawn: {err}"))
    }

    /// Starts `count` servers; on failure, those already started are stopped again.
    pub fn start_many(count: usize) -> Result<Vec<PrivateServer>, String> {
        (0..count).map(|_| PrivateServer::start()).collect()
    }

    pub fn url(&self) -> String {
        self.0.url()
    }
}
