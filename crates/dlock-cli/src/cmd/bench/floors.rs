//! The floors: for an operation, the fastest any correct implementation could go on the
//! same server, measured in the same run with the loop shape, concurrency and duration
//! of the scenario it floors (docs/benchmarks.md says what each one leaves out and why
//! nothing correct can beat it). The raw pair (`raw_cycles`) is the plain mutex's floor;
//! the scripts here are the benchmark's own, beside this file, and no dlock code runs in
//! them.

use super::*;

/// The fenced-grant floor's grant: `SET NX PX`, `TIME` and the fence write.
pub(super) const FENCED_GRANT: &str = include_str!("floor_fenced_grant.lua");
/// The read-hold floor's grant: the hold and its lease end recorded, no writer holding.
pub(super) const READ_HOLD: &str = include_str!("floor_read_hold.lua");
/// The read-hold floor's release: the hold's field removed.
pub(super) const READ_RELEASE: &str = include_str!("floor_read_release.lua");

/// The fenced-grant floor in par_fenced's shape: `tasks` tasks on distinct keys, each
/// cycle the floor's grant (drawing a fence) and the raw compare-and-delete.
pub(super) async fn fenced_grant_cycles(
    raw: &Raw,
    prefix: &str,
    tasks: usize,
    duration: Duration,
) -> dlock::Result<u64> {
    // The counter shares the lock key's hash tag (the prefix's, if it has one, comes
    // first), so the script's two keys are in one slot on a cluster too.
    let keys = |task| {
        let key = format!("{prefix}{{fenced-floor:{task}}}");
        let fence = format!("{key}:fence");
        vec![key, fence]
    };
    let grant = RawGrant::Script(FENCED_GRANT);
    grant_release_cycles(raw, keys, tasks, duration, grant, RAW_RELEASE).await
}

/// The read-hold floor in rwlock_read's shape: `tasks` tasks reading the one lock `key`,
/// each cycle a hold of its own recorded and removed.
pub(super) async fn read_hold_cycles(
    raw: &Raw,
    key: &str,
    tasks: usize,
    duration: Duration,
) -> dlock::Result<u64> {
    let keys = |_| vec![key.to_string()];
    let grant = RawGrant::Script(READ_HOLD);
    grant_release_cycles(raw, keys, tasks, duration, grant, READ_RELEASE).await
}

/// The notification floor, in milliseconds: how soon a waiter can hear of a release.
pub(super) struct Notification {
    /// From a raw `PUBLISH`, sent as the raw release's reply came, to a raw subscriber on
    /// its own connection receiving it (p50).
    pub(super) p50_ms: f64,
    /// The raw `PING` round trip (p50): what a waiter that must ask again once told pays
    /// on top.
    pub(super) ping_p50_ms: f64,
}

/// The notification floor in the hand-off scenarios' shape: one holder at a time takes
/// the raw key (`SET NX PX`), holds it 1 ms, gives it back with the raw compare-and-delete,
/// publishes at once, and times the message to a subscriber of its own connection (a task
/// of its own, so a receipt is stamped when it arrives, not when the publisher looks),
/// then a `PING`, and works 1 ms; for `duration`. `url`: the one server.
pub(super) async fn notification(
    raw: &Raw,
    url: &str,
    key: &str,
    duration: Duration,
) -> dlock::Result<Notification> {
    use futures_util::StreamExt;
    let channel = format!("{key}:floor-channel");
    let mut subscriber = redis::Client::open(url)?.get_async_pubsub().await?;
    subscriber.subscribe(&channel).await?;
    let (heard, mut receipts) = tokio::sync::mpsc::unbounded_channel();
    let listener = tokio::spawn(async move {
        let mut messages = subscriber.into_on_message();
        while messages.next().await.is_some() {
            if heard.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    let release = redis::Script::new(RAW_RELEASE);
    let mut conn = raw.conn.clone();
    let (mut notified, mut pinged) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + duration;
    let measured = async {
        while Instant::now() < deadline {
            let token = format!("{:032x}", rand_token());
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut conn)
                .await?;
            if set.is_none() {
                continue;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _: i64 = release.key(key).arg(&token).invoke_async(&mut conn).await?;
            let published = Instant::now();
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg(&token)
                .query_async(&mut conn)
                .await?;
            // The subscriber's connection ended: the floor keeps what it heard before.
            let Some(received) = receipts.recv().await else {
                break;
            };
            notified.push(received.saturating_duration_since(published).as_secs_f64() * 1000.0);
            let asked = Instant::now();
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            pinged.push(asked.elapsed().as_secs_f64() * 1000.0);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok::<(), dlock::Error>(())
    }
    .await;
    listener.abort();
    measured?;
    Ok(Notification {
        p50_ms: percentiles(notified)(0.5),
        ping_p50_ms: percentiles(pinged)(0.5),
    })
}
