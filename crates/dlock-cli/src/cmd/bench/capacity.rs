//! The capacity scenarios, for an operator's sizing: what Redis keeps per held lock of
//! each kind (`memory_<kind>`), and what one process holding many auto-renewed locks
//! costs both sides (`capacity`).

use futures_util::{StreamExt, TryStreamExt};

use super::*;

/// The size of the capacity scenario: how many locks one process holds, at what lease.
#[derive(Clone, Copy, Debug)]
pub(super) struct Capacity {
    pub(super) locks: usize,
    /// The locks' lease: renewal runs every third of it, so the renewal rate is per lease.
    pub(super) ttl: Duration,
}

/// Acquisitions in flight at once while the capacity scenario takes its locks: one
/// process starting many jobs, not one job after another.
const ACQUIRERS: usize = 64;

/// One held lock of a kind for the memory rows: its holds, and one waiter that cannot get
/// in while they hold.
struct Held {
    scenario: &'static str,
    /// The names whose keys count (two for the multi-lock).
    names: Vec<String>,
    holds: Vec<dlock::AnyLock>,
    waiter: dlock::AnyLock,
    /// What waits, for the row.
    waiter_is: &'static str,
}

/// Readers of the memory_read_8 row: what each further read hold adds.
const READERS: usize = 8;

/// The lock of each kind, named under `prefix`: a handle's clone acts for an owner of its
/// own ([`dlock::AnyLock`]), so every hold and the waiter are distinct owners.
fn kinds(client: &Client, prefix: &str) -> dlock::Result<Vec<Held>> {
    // A fixed lease: no renewal rewrites a key while it is measured.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(60))
        .wait(Wait::Forever);
    let name = |kind: &str| format!("{prefix}{kind}");
    let one = |scenario, kind: &str, lock: dlock::AnyLock, waiter_is| Held {
        scenario,
        names: vec![name(kind)],
        holds: vec![lock.clone()],
        waiter: lock,
        waiter_is,
    };
    let rwlock = |kind: &str| client.rwlock_with(&name(kind), options);
    let semaphore = |kind: &str, permits| client.semaphore_with(&name(kind), permits, options);
    let reader: dlock::AnyLock = rwlock("read-8")?.reader().into();
    let pair = [name("multi-a"), name("multi-b")];
    let multi: dlock::AnyLock = client
        .multi_lock_with(&[&pair[0], &pair[1]], options)?
        .into();
    Ok(vec![
        one(
            "memory_mutex",
            "mutex",
            client.mutex_with(&name("mutex"), options)?.into(),
            "a mutex waiter",
        ),
        one(
            "memory_fair_mutex",
            "fair",
            client.fair_mutex_with(&name("fair"), options)?.into(),
            "a fair mutex waiter",
        ),
        one(
            "memory_reentrant",
            "reentrant",
            client
                .reentrant_mutex_with(&name("reentrant"), options)?
                .into(),
            "another owner",
        ),
        Held {
            scenario: "memory_read",
            names: vec![name("read")],
            holds: vec![rwlock("read")?.reader().into()],
            waiter: rwlock("read")?.writer().into(),
            waiter_is: "a writer",
        },
        Held {
            scenario: "memory_read_8",
            names: vec![name("read-8")],
            holds: vec![reader; READERS],
            waiter: rwlock("read-8")?.writer().into(),
            waiter_is: "a writer",
        },
        one(
            "memory_write",
            "write",
            rwlock("write")?.writer().into(),
            "a writer",
        ),
        Held {
            scenario: "memory_semaphore",
            names: vec![name("semaphore")],
            holds: vec![semaphore("semaphore", 4)?.into()],
            waiter: semaphore("semaphore", 4)?.taking(4)?.into(),
            waiter_is: "one taking all 4 permits",
        },
        Held {
            scenario: "memory_weighted",
            names: vec![name("weighted")],
            holds: vec![semaphore("weighted", 8)?.taking(4)?.into()],
            waiter: semaphore("weighted", 8)?.taking(8)?.into(),
            waiter_is: "one taking all 8 permits",
        },
        Held {
            scenario: "memory_multi",
            names: pair.to_vec(),
            holds: vec![multi.clone()],
            waiter: multi,
            waiter_is: "a multi-lock waiter",
        },
    ])
}

/// What the keys of the locks `names` take in Redis, as the library finds them: each
/// lock's key (`Client::inspect`, as `dlock inspect` reads it) and its companions (SCAN,
/// told by [`dlock::companion_owner`]).
struct Footprint {
    /// `MEMORY USAGE` (every nested value sampled) summed over the keys.
    bytes: u64,
    keys: usize,
    /// Waiters in the locks' queues, as `inspect` counts them.
    queued: u64,
}

async fn footprint(client: &Client, raw: &Raw, names: &[String]) -> dlock::Result<Footprint> {
    let mut found = Footprint {
        bytes: 0,
        keys: 0,
        queued: 0,
    };
    for name in names {
        let info = client.inspect(name).await?;
        found.queued += info.queued;
        // Keys starting with this lock's key include other locks' (`read` and `read-8`):
        // only this lock's own count.
        let own = |key: &String| {
            *key == info.key || dlock::companion_owner(key).as_deref() == Some(&*info.key)
        };
        for key in keys_starting(raw, &info.key)
            .await?
            .iter()
            .filter(|k| own(k))
        {
            let usage: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut raw.conn.clone())
                .await?;
            // Gone since the SCAN (a lease ended): not part of the lock any more.
            if let Some(bytes) = usage {
                found.bytes += bytes;
                found.keys += 1;
            }
        }
    }
    Ok(found)
}

/// How long a waiter may take to show in the queue: a kind that does not queue (a plain
/// mutex's waiter only listens) never shows, and is measured after this.
const QUEUE_SETTLE: Duration = Duration::from_secs(1);

/// One row per kind: the bytes Redis keeps for one held lock, alone (the value) and with
/// one waiter (`waiter_bytes`), and how many keys each time.
pub(super) async fn memory_rows(
    client: &Client,
    raw: &Raw,
    prefix: &str,
) -> dlock::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for held in kinds(client, prefix)? {
        let mut guards = Vec::with_capacity(held.holds.len());
        for hold in &held.holds {
            guards.push(hold.try_lock().await?);
        }
        let alone = footprint(client, raw, &held.names).await?;
        let waiter = held.waiter.clone();
        // Its own budget: a waiter never granted ends the run with TimedOut, not a hang.
        let budget = Wait::Timeout(Duration::from_secs(30));
        let waiting = tokio::spawn(async move { waiter.lock_with(budget).await?.unlock().await });
        let settle_until = Instant::now() + QUEUE_SETTLE;
        let mut waited = footprint(client, raw, &held.names).await?;
        while waited.queued == 0 && Instant::now() < settle_until {
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited = footprint(client, raw, &held.names).await?;
        }
        for guard in guards {
            guard.unlock().await?;
        }
        // The waiter gets in once the holds are gone, and gives the lock back.
        waiting.await.expect("bench waiter")?;
        // What stays once nobody holds or waits: the fencing counter never expires.
        let after = footprint(client, raw, &held.names).await?;
        rows.push(
            Row::new(held.scenario, alone.bytes as f64, "bytes/lock")
                .with("keys", alone.keys.into())
                .with("holds", held.holds.len().into())
                .with("waiter", held.waiter_is.into())
                .with("queued", waited.queued.into())
                .with("waiter_bytes", waited.bytes.into())
                .with("waiter_keys", waited.keys.into())
                .with("left_bytes", after.bytes.into())
                .with("left_keys", after.keys.into()),
        );
    }
    Ok(rows)
}

/// One process (a client of its own, connected like the bench's with `client_prefix`)
/// holding `capacity.locks` auto-renewed mutexes named under `prefix`: how long taking
/// them takes, the renewal load over two renewal periods, the process's resident memory
/// and Redis's `used_memory` before and after, how long `Client::shutdown` takes to give
/// them all back, and how many of their keys are left after it (none, or the shutdown
/// lost some).
pub(super) async fn held_many(
    target: &Target,
    client_prefix: &str,
    raw: &Raw,
    prefix: &str,
    capacity: Capacity,
) -> dlock::Result<Row> {
    let fleet = target.connect(client_prefix).await?;
    let row = hold_and_give_back(&fleet, raw, prefix, capacity).await;
    // Already done when the scenario ran to its end; gives back what an error left held.
    fleet.shutdown().await;
    let row = row?;
    let left = keys_starting(raw, &format!("{client_prefix}{prefix}"))
        .await?
        .len();
    if left > 0 {
        eprintln!(
            "dlock: note: capacity: {left} keys of the held locks were left after Client::shutdown"
        );
    }
    Ok(row.with("keys_left", left.into()))
}

async fn hold_and_give_back(
    fleet: &Client,
    raw: &Raw,
    prefix: &str,
    Capacity { locks, ttl }: Capacity,
) -> dlock::Result<Row> {
    let options = LockOptions::default().renewed(ttl).wait(Wait::NoWait);
    let rss_before = resident_bytes();
    let redis_before = used_memory(raw).await?;
    let started = Instant::now();
    let guards: Vec<_> = futures_util::stream::iter(0..locks)
        .map(|i| {
            let mutex = fleet.mutex_with(&format!("{prefix}{i}"), options);
            async move { mutex?.try_lock().await }
        })
        .buffer_unordered(ACQUIRERS)
        .try_collect()
        .await?;
    let acquired_in = started.elapsed();
    let redis_held = used_memory(raw).await?;
    let rss_held = resident_bytes();

    // Two renewal periods: every lock is renewed about twice, whatever its phase.
    let window = ttl * 2 / 3;
    let scripts = ["evalsha", "eval"];
    let (commands, requests) = (total_calls(raw).await?, script_calls(raw).await?);
    let server_us = server_usec(std::slice::from_ref(raw), &scripts).await?;
    tokio::time::sleep(window).await;
    let commands = total_calls(raw).await? - commands;
    let requests = script_calls(raw).await? - requests;
    let server_us = server_usec(std::slice::from_ref(raw), &scripts).await? - server_us;
    let rss_after = resident_bytes();

    let shutting = Instant::now();
    fleet.shutdown().await;
    let shutdown_in = shutting.elapsed();
    drop(guards);

    let seconds = window.as_secs_f64();
    let commands_per_s = commands as f64 / seconds;
    let per_lock = |bytes: Option<u64>, before: Option<u64>| match (bytes, before) {
        (Some(after), Some(before)) => {
            serde_json::Value::from((after as f64 - before as f64) / locks as f64)
        }
        _ => serde_json::Value::Null,
    };
    let mb = |bytes: Option<u64>| bytes.map(|b| b as f64 / 1e6).into();
    Ok(Row::new("capacity", commands_per_s, "renewal commands/s")
        .with("locks", locks.into())
        .with("ttl_ms", (ttl.as_millis() as u64).into())
        .with("window_s", seconds.into())
        .with("acquire_s", acquired_in.as_secs_f64().into())
        .with("acquirers", ACQUIRERS.into())
        .with("renewal_requests_per_s", (requests as f64 / seconds).into())
        // Per lock per renewal period: the scale-free number a sizing multiplies.
        .with(
            "renewal_commands_per_lock",
            (commands_per_s * ttl.as_secs_f64() / 3.0 / locks as f64).into(),
        )
        // The share of Redis's one command thread the renewals take, and the server's
        // time per lock renewed (each lock is renewed every third of its lease).
        .with("renewal_server_busy", (server_us / 1e6 / seconds).into())
        .with(
            "renewal_server_us_per_lock",
            (server_us / (locks as f64 * seconds / (ttl.as_secs_f64() / 3.0))).into(),
        )
        .with("redis_bytes_per_lock", per_lock(redis_held, redis_before))
        .with("rss_bytes_per_lock", per_lock(rss_held, rss_before))
        .with("rss_before_mb", mb(rss_before))
        .with("rss_held_mb", mb(rss_held))
        .with("rss_after_window_mb", mb(rss_after))
        .with("shutdown_s", shutdown_in.as_secs_f64().into()))
}

/// This process's resident memory (`VmRSS` of /proc/self/status); `None` where there is
/// no such file.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `used_memory` of INFO memory, summed over the masters; `None` if no master says.
async fn used_memory(raw: &Raw) -> dlock::Result<Option<u64>> {
    let used: Vec<u64> = raw
        .info("memory")
        .await?
        .iter()
        .filter_map(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("used_memory:"))
                .and_then(|bytes| bytes.trim().parse().ok())
        })
        .collect();
    Ok((!used.is_empty()).then(|| used.iter().sum()))
}
