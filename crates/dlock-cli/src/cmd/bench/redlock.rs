//! The redlock and redlock_herd scenarios over several independent masters, and the
//! clean-up of their keys.

use super::*;

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
pub(super) fn own_keys(client_prefix: &str) -> String {
    format!("{client_prefix}dlock-bench:{}:", std::process::id())
}

/// The redlock and redlock_herd scenarios over `many`, a Redlock over `masters`.
pub(super) async fn redlock_rows(
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
pub(super) const REDLOCK_HERD_WAITERS: usize = 8;

/// The redlock_herd scenario: waiters taking one Redlock mutex in turn, holding it 1 ms;
/// what each hand-off costs in rounds and fence draws (see the module docs).
pub(super) async fn redlock_herd(many: &Redlock, duration: Duration) -> dlock::Result<Row> {
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
pub(super) async fn redlock_row(
    many: &Redlock,
    masters: &[String],
    duration: Duration,
) -> dlock::Result<Row> {
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
pub(super) async fn raw_fan_out(
    raws: &[Raw],
    key: String,
    duration: Duration,
) -> dlock::Result<u64> {
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
pub(super) async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
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
pub(super) async fn redlock_cycles(
    redlock: &Redlock,
    name: String,
    duration: Duration,
) -> dlock::Result<u64> {
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
