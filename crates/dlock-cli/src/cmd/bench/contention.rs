//! The contention scenarios: herds of waiters, renewal cost, many readers or permit
//! holders at once, a writer among readers.

use super::*;

/// `waiters` waiters queued on one lock of `kind` (of one permit: one hand-off per
/// release), each taking it once after the holder lets go: Redis commands per hand-off.
pub(super) async fn herd(
    client: &Client,
    raw: &Raw,
    name: &str,
    kind: Queued,
    waiters: usize,
) -> dlock::Result<f64> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .wait(Wait::Forever)
        .waiter_lease(Duration::from_secs(120));
    let lock = kind.lock(client, name, options)?;
    let holder = lock.try_lock().await?;
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let lock = lock.clone();
        tasks.push(tokio::spawn(
            async move { lock.lock().await?.unlock().await },
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

pub(super) async fn renew(
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
pub(super) async fn rwlock_reads(
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
pub(super) const SCALE_HOLDERS: [usize; 3] = [8, 64, 1024];
/// Take-and-give-back cycles measured at each size.
pub(super) const SCALE_CYCLES: u32 = 200;

/// What a scale scenario holds many of.
#[derive(Clone, Copy)]
pub(super) enum Scale {
    /// Read holds of one read-write lock, each of its own owner.
    Read,
    /// Permits of one semaphore.
    Permit,
}

impl Scale {
    pub(super) fn scenario(self) -> &'static str {
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
pub(super) async fn scale(
    client: &Client,
    raw: &Raw,
    prefix: &str,
    kind: Scale,
) -> dlock::Result<Row> {
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
pub(super) fn percentiles(mut samples: Vec<f64>) -> impl Fn(f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    move |p| {
        samples
            .get(((samples.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    }
}

pub(super) struct WriterUnderReaders {
    pub(super) rate: f64,
    pub(super) wait_p50_ms: f64,
    pub(super) wait_p99_ms: f64,
    pub(super) reads: u64,
}

/// One writer against 8 readers that keep reading (each holds 1 ms): writer preference
/// must let the writer in promptly.
pub(super) async fn rwlock_writer(
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
