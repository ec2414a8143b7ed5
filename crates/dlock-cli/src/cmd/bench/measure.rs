//! The measuring loops: raw and dlock acquire-release cycles, hand-offs, the server's
//! own time (INFO commandstats), the interleaved throughput slices.

use super::*;

/// Deletes every key of the locks whose keys start with `own` (see [`own_keys`]): the lock
/// keys and their companions (see [`keys_starting`]).
pub(super) async fn remove_keys(raw: &Raw, own: &str) -> dlock::Result<()> {
    for key in keys_starting(raw, own).await? {
        // One key per DEL: on a cluster they live in different slots.
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut raw.conn.clone())
            .await?;
    }
    Ok(())
}

/// Every key of the locks whose keys start with `own`: the lock keys and their companions
/// (told by the library's [`dlock::companion_owner`], not by names written here), found
/// by SCAN on every master with the glob characters of `own` escaped; each once.
pub(super) async fn keys_starting(raw: &Raw, own: &str) -> dlock::Result<Vec<String>> {
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
    let mut found = Vec::new();
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
        found.extend(
            raw.client
                .scan(&escaped)
                .await?
                .into_iter()
                .filter(|key| ours(key)),
        );
    }
    // SCAN may return a key twice, and a key may match two patterns.
    found.sort();
    found.dedup();
    Ok(found)
}

/// Raw baseline: SET NX PX + EVALSHA compare-and-delete, `tasks` tasks on distinct keys.
pub(super) async fn raw_cycles(
    raw: &Raw,
    prefix: &str,
    tasks: usize,
    duration: Duration,
) -> dlock::Result<u64> {
    let keys = |task| vec![format!("{prefix}raw:{task}")];
    grant_release_cycles(raw, keys, tasks, duration, RawGrant::SetNx, RAW_RELEASE).await
}

/// How a raw loop's cycle takes its hold.
pub(super) enum RawGrant {
    /// `SET key token NX PX lease`: the raw pair's grant.
    SetNx,
    /// A script over the task's keys, with ARGV token and lease, answering a number
    /// above 0 when granted.
    Script(&'static str),
}

/// `tasks` loops side by side for `duration`, task `i` on the keys `keys(i)`: each cycle a
/// fresh token granted as `grant` says and, if granted, released by the script `release`
/// (KEYS[1] the first key, ARGV[1] the token); returns the cycles granted and released.
/// The one loop shape of the raw baseline and the floors, so their ratios compare alike.
pub(super) async fn grant_release_cycles(
    raw: &Raw,
    keys: impl Fn(usize) -> Vec<String>,
    tasks: usize,
    duration: Duration,
    grant: RawGrant,
    release: &str,
) -> dlock::Result<u64> {
    let grant = match grant {
        RawGrant::SetNx => None,
        RawGrant::Script(code) => Some(redis::Script::new(code)),
    };
    let release = redis::Script::new(release);
    let deadline = Instant::now() + duration;
    let loops = (0..tasks).map(|task| {
        let (mut conn, grant, release) = (raw.conn.clone(), grant.clone(), release.clone());
        let keys = keys(task);
        async move {
            let mut cycles = 0u64;
            while Instant::now() < deadline {
                let token = format!("{:032x}", rand_token());
                let granted = match &grant {
                    None => redis::cmd("SET")
                        .arg(&keys[0])
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async::<Option<String>>(&mut conn)
                        .await?
                        .is_some(),
                    Some(script) => {
                        let mut call = script.prepare_invoke();
                        for key in &keys {
                            call.key(key);
                        }
                        call.arg(&token).arg(10_000);
                        call.invoke_async::<i64>(&mut conn).await? > 0
                    }
                };
                if granted {
                    let _: i64 = release
                        .key(&keys[0])
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
pub(super) async fn run_loops<Loop>(loops: impl IntoIterator<Item = Loop>) -> dlock::Result<u64>
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

pub(super) fn rand_token() -> u128 {
    // The raw baseline needs unique tokens, not strong ones; the clock is enough.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    nanos ^ (std::process::id() as u128) << 64
}

pub(super) async fn dlock_cycles(
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
pub(super) async fn pair_cycles(
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
pub(super) async fn scheduled_cycles(
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
pub(super) const SEMAPHORE_TASKS: usize = 64;

/// `SEMAPHORE_TASKS` tasks each taking `take` permits of one semaphore (its own per
/// `take`) and giving them back, for `duration`; N fits them all, so nobody waits.
pub(super) async fn semaphore_cycles(
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

/// A lock kind whose release hands it to someone waiting: the hand-off and herd
/// scenarios run over each.
#[derive(Clone, Copy)]
pub(super) enum Queued {
    Plain,
    Fair,
    /// A semaphore of this many permits.
    Semaphore(u32),
    /// The write side of a read-write lock.
    Write,
}

impl Queued {
    /// The lock `name` of this kind, as an [`AnyLock`](dlock::AnyLock) whose clones act for
    /// owners of their own (so writers queue behind each other, not re-enter).
    pub(super) fn lock(
        self,
        client: &Client,
        name: &str,
        options: LockOptions,
    ) -> dlock::Result<dlock::AnyLock> {
        Ok(match self {
            Queued::Plain => client.mutex_with(name, options)?.into(),
            Queued::Fair => client.fair_mutex_with(name, options)?.into(),
            Queued::Semaphore(permits) => client.semaphore_with(name, permits, options)?.into(),
            Queued::Write => client.rwlock_with(name, options)?.writer().into(),
        })
    }

    /// How many can hold it at once.
    pub(super) fn permits(self) -> u32 {
        match self {
            Queued::Semaphore(permits) => permits,
            _ => 1,
        }
    }
}

pub(super) struct Handoff {
    pub(super) rate: f64,
    /// The measured share of the permits' wall time held (of the lock's, for one).
    pub(super) busy_fraction: f64,
    /// The gap between a release and the next acquisition by another worker, p50 and p99
    /// (only with one permit: a semaphore's holds overlap).
    pub(super) gap_ms: Option<(f64, f64)>,
    pub(super) per_worker: Vec<usize>,
}

/// `workers` workers on the lock `name` of `kind`, each holding it 1 ms, giving it back and
/// working 1 ms outside it, for `duration`.
pub(super) async fn handoff(
    client: &Client,
    name: &str,
    kind: Queued,
    workers: usize,
    duration: Duration,
) -> dlock::Result<Handoff> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .wait(Wait::Forever);
    let lock = kind.lock(client, name, options)?;
    let holds: Arc<StdMutex<Vec<(Instant, Instant, usize)>>> = Arc::default();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let (lock, holds) = (lock.clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let guard = lock.lock().await?;
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
    for task in tasks {
        task.await.expect("bench worker")?;
    }
    let mut holds = holds.lock().unwrap().clone();
    holds.sort_by_key(|h| h.0);
    let gap_ms = (kind.permits() == 1).then(|| {
        let gaps: Vec<f64> = holds
            .windows(2)
            .filter(|w| w[0].2 != w[1].2)
            .map(|w| w[1].0.saturating_duration_since(w[0].1).as_secs_f64() * 1000.0)
            .collect();
        let pct = percentiles(gaps);
        (pct(0.5), pct(0.99))
    });
    let mut per_worker = vec![0; workers];
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
        busy_fraction: held / (wall * f64::from(kind.permits())),
        rate: holds.len() as f64 / duration.as_secs_f64(),
        gap_ms,
        per_worker,
    })
}

/// Microseconds the servers spent in the named top-level commands so far (a script's
/// `evalsha` time includes the commands it runs), summed.
pub(super) async fn server_usec(raws: &[Raw], commands: &[&str]) -> dlock::Result<f64> {
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
pub(super) type Contender<'a> =
    Box<dyn FnMut(Duration) -> Pin<Box<dyn Future<Output = dlock::Result<u64>> + 'a>> + 'a>;

/// A contender's result: cycles per second, and the server's time per cycle.
pub(super) struct Rate {
    pub(super) per_second: f64,
    pub(super) server_us_per_cycle: f64,
}

/// The top-level commands whose server time a cycle costs. Redis counts a script's
/// inner commands under their own names too, so a contender whose `SET` runs inside its
/// script counts only `evalsha`, or that `SET` would count twice.
pub(super) const SET_AND_SCRIPT: &[&str] = &["set", "evalsha"];
pub(super) const SCRIPT_ONLY: &[&str] = &["evalsha"];

/// Runs the contenders (each with the commands its cycles send) in turns for `duration`
/// each, over at least 8 slices whose order alternates (A B C, C B A, ...): on shared
/// cores the machine's speed drifts within a run, by half or more here, and a baseline
/// measured in one block before its contender measured the drift instead of the
/// contender. Interleaved, a slow spell weighs on every contender alike. An untimed
/// first slice each loads the scripts and warms the connections. Short runs (`--quick`)
/// still give only indicative ratios: a slice of tens of milliseconds is noisy.
pub(super) async fn interleaved(
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
pub(super) fn throughput_row(scenario: &'static str, dlock: &Rate, raw: &Rate) -> Row {
    Row::new(scenario, dlock.per_second, "cycles/s")
        .baseline(raw.per_second)
        .with("server_us_per_cycle", dlock.server_us_per_cycle.into())
        .with("raw_server_us_per_cycle", raw.server_us_per_cycle.into())
}

/// Calls per command from INFO commandstats, the INFO calls themselves left out.
pub(super) async fn command_calls(raw: &Raw) -> dlock::Result<Vec<(String, u64)>> {
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
pub(super) async fn total_calls(raw: &Raw) -> dlock::Result<u64> {
    Ok(command_calls(raw)
        .await?
        .iter()
        .map(|(_, calls)| calls)
        .sum())
}

/// Script calls (one per request that runs a dlock script).
pub(super) async fn script_calls(raw: &Raw) -> dlock::Result<u64> {
    Ok(command_calls(raw)
        .await?
        .iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum())
}
