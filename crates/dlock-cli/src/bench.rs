//! `dlock bench`: the performance scenarios, each reported beside a raw baseline measured
//! in the same run against the same server.
//!
//! * seq: one task, one key; acquire+release cycles/s vs raw `SET NX PX` + `EVALSHA`
//!   compare-and-delete (the same two round trips) on the same kind of connection.
//! * par: 64 tasks on distinct keys over one client, vs the raw pair with 64 tasks.
//! * handoff: 4 workers on one key, each holds it 1 ms then works 1 ms outside it;
//!   acquisitions/s, the gap between a release and the next acquisition by another
//!   worker (p50/p99), acquisitions per worker; plain vs fair mutex.
//! * herd: 256 waiters on one lock, each taking it once; Redis commands per hand-off
//!   (from INFO commandstats, script-internal commands included); plain vs fair mutex.
//! * renew: 10 000 held auto-renewed locks; script calls per second spent on renewal,
//!   vs one call per lock per renewal period.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use clap::Args;
use dlock::{Client, LockOptions, Wait};
use redis::aio::ConnectionManager;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// How long each throughput scenario runs
    #[arg(long, value_parser = crate::duration::parse, default_value = "3s")]
    duration: Duration,
    /// Number of locks held in the renew scenario
    #[arg(long, default_value_t = 10_000)]
    renew_locks: usize,
    /// Print one JSON object instead of a table
    #[arg(long)]
    json: bool,
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

struct Report {
    rows: Vec<(String, String)>,
    json: serde_json::Map<String, serde_json::Value>,
}

impl Report {
    fn add(&mut self, key: &str, label: String, value: serde_json::Value) {
        self.rows.push((key.to_string(), label));
        self.json.insert(key.to_string(), value);
    }
}

pub async fn bench(client: &Client, url: &str, args: BenchArgs) -> dlock::Result<i32> {
    let raw_client = redis::Client::open(url).map_err(dlock::Error::from)?;
    let raw = raw_client.get_connection_manager().await?;
    let mut report = Report {
        rows: Vec::new(),
        json: serde_json::Map::new(),
    };
    let prefix = format!("dlock-bench:{}:", std::process::id());
    let fixed = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::NoWait);

    // seq
    let raw_seq = raw_cycles(&raw, &prefix, 1, args.duration).await?;
    let dlock_seq = dlock_cycles(client, &prefix, 1, args.duration, fixed).await?;
    report.add(
        "seq",
        format!(
            "{:>9.0} cycles/s   raw {:>9.0}   ratio {:.2}",
            dlock_seq,
            raw_seq,
            dlock_seq / raw_seq
        ),
        serde_json::json!({"cycles_per_s": dlock_seq, "raw_cycles_per_s": raw_seq, "ratio": dlock_seq / raw_seq}),
    );

    // par
    let raw_par = raw_cycles(&raw, &prefix, 64, args.duration).await?;
    let dlock_par = dlock_cycles(client, &prefix, 64, args.duration, fixed).await?;
    report.add(
        "par",
        format!(
            "{:>9.0} cycles/s   raw {:>9.0}   ratio {:.2}",
            dlock_par,
            raw_par,
            dlock_par / raw_par
        ),
        serde_json::json!({"cycles_per_s": dlock_par, "raw_cycles_per_s": raw_par, "ratio": dlock_par / raw_par}),
    );

    // handoff
    for fair in [false, true] {
        let h = handoff(
            client,
            &format!("{prefix}handoff:{fair}"),
            fair,
            args.duration,
        )
        .await?;
        let key = if fair { "handoff_fair" } else { "handoff" };
        report.add(
            key,
            format!(
                "{:>9.0} acq/s      gap p50 {:.2} ms p99 {:.2} ms   per worker {:?}",
                h.rate, h.gap_p50_ms, h.gap_p99_ms, h.per_worker
            ),
            serde_json::json!({"acquisitions_per_s": h.rate, "gap_p50_ms": h.gap_p50_ms, "gap_p99_ms": h.gap_p99_ms, "per_worker": h.per_worker}),
        );
    }

    // herd
    for fair in [false, true] {
        let per = herd(client, &raw, &format!("{prefix}herd:{fair}"), fair, 256).await?;
        let key = if fair { "herd_fair" } else { "herd" };
        report.add(
            key,
            format!("{per:>9.1} commands per hand-off (256 waiters)"),
            serde_json::json!({"commands_per_handoff": per, "waiters": 256}),
        );
    }

    // renew
    let (per_s, naive) = renew(client, &raw, &prefix, args.renew_locks).await?;
    report.add(
        "renew",
        format!(
            "{per_s:>9.1} script calls/s for {} locks   one-per-lock {naive:.0}/s   ratio {:.4}",
            args.renew_locks,
            per_s / naive
        ),
        serde_json::json!({"calls_per_s": per_s, "locks": args.renew_locks, "one_call_per_lock_per_s": naive, "ratio": per_s / naive}),
    );

    if args.json {
        println!("{}", serde_json::Value::Object(report.json));
    } else {
        for (key, line) in report.rows {
            println!("{key:<13} {line}");
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
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (mut conn, release) = (raw.clone(), release.clone());
        let key = format!("{prefix}raw:{task}");
        handles.push(tokio::spawn(async move {
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
            Ok::<u64, redis::RedisError>(cycles)
        }));
    }
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
) -> dlock::Result<f64> {
    let deadline = Instant::now() + duration;
    let mut handles = Vec::new();
    for task in 0..tasks {
        let mutex = client.mutex_with(&format!("{prefix}dlock:{task}"), options)?;
        handles.push(tokio::spawn(async move {
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                mutex.try_lock().await?.unlock().await?;
                cycles += 1;
            }
            Ok::<u64, dlock::Error>(cycles)
        }));
    }
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("bench task")?;
    }
    Ok(total as f64 / duration.as_secs_f64())
}

struct Handoff {
    rate: f64,
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
    let deadline = Instant::now() + duration;
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
    let mut gaps: Vec<f64> = holds
        .windows(2)
        .filter(|w| w[0].2 != w[1].2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1).as_secs_f64() * 1000.0)
        .collect();
    gaps.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| {
        gaps.get(((gaps.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let mut per_worker = vec![0; 4];
    for h in &holds {
        per_worker[h.2] += 1;
    }
    Ok(Handoff {
        rate: holds.len() as f64 / duration.as_secs_f64(),
        gap_p50_ms: pct(0.5),
        gap_p99_ms: pct(0.99),
        per_worker,
    })
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
