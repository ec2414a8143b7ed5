//! The comparison's Rust peers (scripts/compare.sh): `rslock` and dlock, each run through
//! the loops of `dlock bench` (crates/dlock-cli/src/cmd/bench/measure.rs): seq, the
//! hand-off (4 workers, hold 1 ms, work 1 ms) and the semaphore hand-off (16 workers,
//! 4 permits). Prints one JSON line per loop; a loop the peer cannot express says why.
//!
//! Usage: dlock-compare-peers --url URL --duration SECS --peer rslock|dlock|dlock-fair

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use dlock::{AnyLock, Client, LockOptions, Wait};
use rslock::LockManager;
use serde_json::{json, Value};

/// The lease every peer's lock gets, as in `dlock bench`.
const TTL: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_millis(1);
const WORK: Duration = Duration::from_millis(1);

type Failure = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
enum Peer {
    Rslock(LockManager),
    /// dlock's lock of one kind; `options` waits (hand-offs) or not (seq).
    Dlock {
        client: Client,
        fair: bool,
    },
}

/// What one acquisition holds until it is given back.
enum Held {
    Rslock(LockManager, rslock::Lock),
    Dlock(Box<dlock::AnyGuard>),
}

impl Held {
    async fn release(self) -> Result<(), Failure> {
        match self {
            Held::Rslock(manager, lock) => manager.unlock(&lock).await,
            Held::Dlock(guard) => (*guard).unlock().await?,
        }
        Ok(())
    }
}

/// A handle of `peer` on the lock `name` (`permits` > 1: a semaphore), waiting or not.
#[derive(Clone)]
enum Handle {
    Rslock(LockManager, String),
    Dlock(Box<AnyLock>),
}

impl Handle {
    fn new(peer: &Peer, name: &str, permits: u32, wait: bool) -> Result<Handle, Failure> {
        Ok(match peer {
            Peer::Rslock(manager) => Handle::Rslock(manager.clone(), name.to_string()),
            Peer::Dlock { client, fair } => {
                let options = LockOptions::default().ttl(TTL).wait(if wait {
                    Wait::Forever
                } else {
                    Wait::NoWait
                });
                let lock: AnyLock = if permits > 1 {
                    client.semaphore_with(name, permits, options)?.into()
                } else if *fair {
                    client.fair_mutex_with(name, options)?.into()
                } else {
                    client.mutex_with(name, options)?.into()
                };
                Handle::Dlock(Box::new(lock))
            }
        })
    }

    /// Takes it, waiting as the library waits (`wait`), or one attempt.
    async fn take(&self, wait: bool) -> Result<Held, Failure> {
        Ok(match self {
            Handle::Rslock(manager, name) => {
                let lock = if wait {
                    manager.acquire_no_guard(name.as_bytes(), TTL).await?
                } else {
                    manager.lock(name.as_bytes(), TTL).await?
                };
                Held::Rslock(manager.clone(), lock)
            }
            Handle::Dlock(lock) => Held::Dlock(Box::new(if wait {
                lock.lock().await?
            } else {
                lock.try_lock().await?
            })),
        })
    }
}

const SCRIPT_CALLS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Every command the server ran (script-internal ones included), `INFO` left out, and of
/// them the script calls.
async fn total_calls(conn: &mut redis::aio::MultiplexedConnection) -> Result<(u64, u64), Failure> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let calls: Vec<(&str, u64)> = info
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split("calls=").nth(1)?.split(',').next()?;
            Some((name, calls.parse().ok()?))
        })
        .filter(|(name, _)| *name != "info")
        .collect();
    let scripts = calls
        .iter()
        .filter(|(name, _)| SCRIPT_CALLS.contains(name))
        .map(|(_, n)| n)
        .sum();
    Ok((calls.iter().map(|(_, n)| n).sum(), scripts))
}

/// One task, one key: take (one attempt) and give back, for `duration`.
async fn seq(peer: &Peer, name: &str, duration: Duration) -> Result<Value, Failure> {
    let handle = Handle::new(peer, name, 1, false)?;
    let deadline = Instant::now() + duration;
    let mut cycles = 0u64;
    while Instant::now() < deadline {
        handle.take(false).await?.release().await?;
        cycles += 1;
    }
    Ok(json!({
        "acquisitions": cycles,
        "cycles_per_s": cycles as f64 / duration.as_secs_f64(),
    }))
}

/// `workers` workers on `name` (of `permits`), each holding it 1 ms, giving it back and
/// working 1 ms outside it, for `duration`: measure.rs's `handoff`.
async fn handoff(
    peer: &Peer,
    name: &str,
    workers: usize,
    permits: u32,
    duration: Duration,
) -> Result<Value, Failure> {
    let handle = Handle::new(peer, name, permits, true)?;
    let holds: Arc<StdMutex<Vec<(Instant, Instant, usize)>>> = Arc::default();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let (handle, holds) = (handle.clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let held = handle.take(true).await?;
                let acquired = Instant::now();
                tokio::time::sleep(HOLD).await;
                let released = Instant::now();
                held.release().await?;
                holds.lock().unwrap().push((acquired, released, worker));
                tokio::time::sleep(WORK).await;
            }
            Ok::<(), Failure>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let wall = started.elapsed().as_secs_f64();
    let mut holds = holds.lock().unwrap().clone();
    holds.sort_by_key(|h| h.0);
    let mut per_worker = vec![0u64; workers];
    for h in &holds {
        per_worker[h.2] += 1;
    }
    let held: f64 = holds
        .iter()
        .map(|h| h.1.saturating_duration_since(h.0).as_secs_f64())
        .sum();
    let mut row = json!({
        "acquisitions": holds.len(),
        "acquisitions_per_s": holds.len() as f64 / duration.as_secs_f64(),
        "busy_fraction": held / (wall * f64::from(permits)),
        "per_worker": per_worker,
        "workers": workers,
        "permits": permits,
    });
    if permits == 1 {
        let mut gaps: Vec<f64> = holds
            .windows(2)
            .filter(|w| w[0].2 != w[1].2)
            .map(|w| w[1].0.saturating_duration_since(w[0].1).as_secs_f64() * 1000.0)
            .collect();
        gaps.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| {
            gaps.get(((gaps.len() as f64 - 1.0) * p) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        row["gap_p50_ms"] = pct(0.5).into();
        row["gap_p99_ms"] = pct(0.99).into();
    }
    Ok(row)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(url), Some(peer_name)) = (arg("--url"), arg("--peer")) else {
        eprintln!(
            "usage: dlock-compare-peers --url URL --duration SECS --peer rslock|dlock|dlock-fair"
        );
        std::process::exit(2);
    };
    let duration = Duration::from_secs_f64(
        arg("--duration")
            .and_then(|d| d.parse().ok())
            .unwrap_or(5.0),
    );
    if let Err(err) = run(&url, &peer_name, duration).await {
        eprintln!("{peer_name}: {err}");
        std::process::exit(1);
    }
}

async fn run(url: &str, peer_name: &str, duration: Duration) -> Result<(), Failure> {
    let (peer, label) = match peer_name {
        "rslock" => (Peer::Rslock(LockManager::new(vec![url])), "rslock 0.10.0"),
        "dlock" => (
            Peer::Dlock {
                client: Client::connect(url).await?,
                fair: false,
            },
            "dlock mutex",
        ),
        "dlock-fair" => (
            Peer::Dlock {
                client: Client::connect(url).await?,
                fair: true,
            },
            "dlock fair mutex",
        ),
        other => return Err(format!("unknown peer {other}").into()),
    };
    let mut stats = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let prefix = format!("compare:{peer_name}:{}:", std::process::id());
    for lp in ["seq", "handoff", "semaphore"] {
        let name = format!("{prefix}{lp}");
        let before = total_calls(&mut stats).await?;
        let mut row = match (lp, &peer) {
            ("seq", _) => seq(&peer, &name, duration).await?,
            ("handoff", _) => handoff(&peer, &name, 4, 1, duration).await?,
            (_, Peer::Dlock { fair: false, .. }) => handoff(&peer, &name, 16, 4, duration).await?,
            (_, Peer::Dlock { fair: true, .. }) => {
                json!({"unsupported": "dlock has one semaphore: see the dlock mutex rows"})
            }
            (_, Peer::Rslock(_)) => json!({"unsupported": "the library has no semaphore"}),
        };
        let after = total_calls(&mut stats).await?;
        if let Some(taken) = row.get("acquisitions").and_then(Value::as_u64) {
            let taken = taken.max(1) as f64;
            row["commands_per_acquisition"] = ((after.0 - before.0) as f64 / taken).into();
            row["scripts_per_acquisition"] = ((after.1 - before.1) as f64 / taken).into();
        }
        row["impl"] = label.into();
        row["loop"] = lp.into();
        println!("{row}");
    }
    if let Peer::Dlock { client, .. } = &peer {
        client.shutdown().await;
    }
    Ok(())
}
