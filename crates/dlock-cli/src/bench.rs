//! `dlock bench`: the performance scenarios, each reported beside a raw baseline measured
//! in the same run against the same server.
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
//! * rwlock_read: 64 tasks reading one read-write lock (each its own owner), read
//!   acquire+release cycles/s, vs the raw pair with 64 tasks.
//! * rwlock_writer: one writer taking the lock while 8 readers keep reading (each holds
//!   1 ms); writer acquisitions/s and how long the writer waits (p50/p99).
//! * renew: many held, auto-renewed locks; script calls per second spent on renewal, vs
//!   one call per lock per renewal period.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use clap::Args;
use dlock::{Client, LockOptions, Owner, Wait};
use redis::aio::ConnectionManager;

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
    /// Start a private redis-server on a free loopback port for the run (and stop it
    /// after), instead of using --redis
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
    extra: serde_json::Map<String, serde_json::Value>,
}

impl Row {
    fn new(scenario: &'static str, value: f64, unit: &'static str) -> Row {
        Row {
            scenario,
            value,
            unit,
            baseline: None,
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
            line += &format!(" raw {baseline:>10.1}  ratio {ratio:.2}");
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

pub async fn bench(client: &Client, url: &str, args: BenchArgs) -> dlock::Result<i32> {
    let raw_client = redis::Client::open(url).map_err(dlock::Error::from)?;
    let raw = raw_client.get_connection_manager().await?;
    let (duration, renew_locks, herd_waiters) = if args.quick {
        (Duration::from_millis(300), args.renew_locks.min(1_000), 64)
    } else {
        (args.duration, args.renew_locks, 256)
    };
    // Keys of the raw baseline carry the client's prefix too, so the bench runs as a user
    // limited to that prefix (the client adds it to dlock's own keys).
    let raw_prefix = format!("{}dlock-bench:{}:", client.prefix(), std::process::id());
    let prefix = format!("dlock-bench:{}:", std::process::id());
    let fixed = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::NoWait);
    let progress = indicatif::ProgressBar::new(12);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut rows = Vec::new();
    let step = |what: &str| progress.set_message(what.to_string());

    // The server's time per cycle says where a throughput gap comes from: Redis runs on
    // one thread, so par is bound by it.
    const RAW_COMMANDS: &[&str] = &["set", "evalsha"];
    const DLOCK_COMMANDS: &[&str] = &["set", "evalsha"];
    let mut raw_par = 0.0;
    for (scenario, tasks) in [("seq", 1), ("par", 64)] {
        step(scenario);
        let (raw_rate, raw_us) = measured(
            &raw,
            RAW_COMMANDS,
            duration,
            raw_cycles(&raw, &raw_prefix, tasks, duration),
        )
        .await?;
        let (rate, us) = measured(
            &raw,
            DLOCK_COMMANDS,
            duration,
            dlock_cycles(client, &prefix, tasks, duration, fixed, false),
        )
        .await?;
        rows.push(
            Row::new(scenario, rate, "cycles/s")
                .baseline(raw_rate)
                .with("server_us_per_cycle", us.into())
                .with("raw_server_us_per_cycle", raw_us.into()),
        );
        if tasks > 1 {
            raw_par = raw_rate;
        }
        progress.inc(2);
    }

    // What a caller that reads every grant's fence pays, configured as the docs advise
    // (the fence drawn with the grant); the raw pair has no fence.
    step("par_fenced");
    let (rate, us) = measured(
        &raw,
        DLOCK_COMMANDS,
        duration,
        dlock_cycles(client, &prefix, 64, duration, fixed.fence_at_grant(), true),
    )
    .await?;
    rows.push(
        Row::new("par_fenced", rate, "cycles/s")
            .baseline(raw_par)
            .with("server_us_per_cycle", us.into()),
    );
    progress.inc(1);

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

    step("rwlock_read");
    let reads = rwlock_reads(client, &format!("{prefix}rw-read"), 64, duration).await?;
    rows.push(Row::new("rwlock_read", reads, "cycles/s").baseline(raw_par));
    progress.inc(1);

    step("rwlock_writer");
    let w = rwlock_writer(client, &format!("{prefix}rw-write"), duration).await?;
    rows.push(
        Row::new("rwlock_writer", w.rate, "writes/s")
            .with("writer_wait_p50_ms", w.wait_p50_ms.into())
            .with("writer_wait_p99_ms", w.wait_p99_ms.into())
            .with("reads", w.reads.into()),
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
    progress.finish_and_clear();

    for row in &rows {
        if args.json {
            println!("{}", row.json());
        } else {
            println!("{}", row.line());
        }
    }
    Ok(0)
}

/// Raw baseline: SET NX PX + EVALSHA compare-and-delete, `tasks` tasks on distinct keys.
async fn raw_cycles(
    raw: &ConnectionManager,
    prefix: &str,
    tasks: usize,
    duration: Duration,
) -> dlock::Result<f64> {
    let release = redis::Script::new(RAW_RELEASE);
    let deadline = Instant::now() + duration;
    let loops = (0..tasks).map(|task| {
        let (mut conn, release) = (raw.clone(), release.clone());
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
    per_second(loops, duration).await
}

/// Runs the loops side by side (each returns how many cycles it made) and returns the
/// cycles per second of them all.
async fn per_second<Loop>(
    loops: impl IntoIterator<Item = Loop>,
    duration: Duration,
) -> dlock::Result<f64>
where
    Loop: std::future::Future<Output = dlock::Result<u64>> + Send + 'static,
{
    let handles: Vec<_> = loops.into_iter().map(tokio::spawn).collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("bench task")?;
    }
    Ok(total as f64 / duration.as_secs_f64())
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
) -> dlock::Result<f64> {
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
    per_second(loops, duration).await
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

/// Microseconds the server spent in the named top-level commands so far (a script's
/// `evalsha` time includes the commands it runs).
async fn server_usec(raw: &ConnectionManager, commands: &[&str]) -> dlock::Result<f64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw.clone())
        .await?;
    Ok(info
        .lines()
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

/// Cycles/s of `run`, and the server's microseconds per cycle in `commands`.
async fn measured<F>(
    raw: &ConnectionManager,
    commands: &[&str],
    duration: Duration,
    run: F,
) -> dlock::Result<(f64, f64)>
where
    F: std::future::Future<Output = dlock::Result<f64>>,
{
    let before = server_usec(raw, commands).await?;
    let rate = run.await?;
    let spent = server_usec(raw, commands).await? - before;
    let cycles = rate * duration.as_secs_f64();
    Ok((rate, if cycles > 0.0 { spent / cycles } else { 0.0 }))
}

/// Calls per command from INFO commandstats, the INFO calls themselves left out.
async fn command_calls(raw: &ConnectionManager) -> dlock::Result<Vec<(String, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw.clone())
        .await?;
    Ok(info
        .lines()
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
async fn total_calls(raw: &ConnectionManager) -> dlock::Result<u64> {
    Ok(command_calls(raw)
        .await?
        .iter()
        .map(|(_, calls)| calls)
        .sum())
}

/// Script calls (one per request that runs a dlock script).
async fn script_calls(raw: &ConnectionManager) -> dlock::Result<u64> {
    Ok(command_calls(raw)
        .await?
        .iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum())
}

async fn herd(
    client: &Client,
    raw: &ConnectionManager,
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
    raw: &ConnectionManager,
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
) -> dlock::Result<f64> {
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
            let owner = Owner::new();
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                lock.read(&owner).await?.unlock().await?;
                cycles += 1;
            }
            Ok(cycles)
        }
    });
    per_second(loops, duration).await
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
            let owner = Owner::new();
            let mut reads = 0u64;
            while Instant::now() < deadline {
                let read = lock.read(&owner).await?;
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

/// A private redis-server for `bench --spawn`: its own temp dir and a free loopback port,
/// used only once it answers with its own pid, stopped (by that pid) when dropped.
pub struct PrivateServer {
    child: std::process::Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl PrivateServer {
    pub fn start() -> dlock::Result<PrivateServer> {
        let failed = |what: String| dlock::Error::InvalidArgument(format!("--spawn: {what}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| failed(format!("no free loopback port ({e})")))?
            .port();
        let dir = std::env::temp_dir().join(format!("dlock-bench-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                failed(format!(
                    "cannot start redis-server ({e}); install the Debian package redis-server"
                ))
            })?;
        let server = PrivateServer { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answered = redis::Client::open(server.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
            if let Ok(info) = answered {
                let pid = info
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .map(str::trim);
                if pid == Some(server.child.id().to_string().as_str()) {
                    return Ok(server);
                }
                return Err(failed(format!(
                    "port {port} answers, but not from the server we started"
                )));
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "redis-server on port {port} did not answer within 10s"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
