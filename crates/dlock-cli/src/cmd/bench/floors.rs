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
/// The notifying release floor: the raw compare-and-delete and one message on the lock's
/// channel (what a release that wakes waiters adds to the raw pair).
pub(super) const NOTIFYING_RELEASE: &str = include_str!("floor_notifying_release.lua");
/// The direct hand-off floor's release: the lock written to the next in line with a fence,
/// and one message to it.
pub(super) const DIRECT_HANDOFF: &str = include_str!("floor_direct_handoff.lua");

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

/// A notifying floor in par's shape (`fenced`: par_fenced's): `tasks` tasks on distinct
/// keys, each cycle the raw pair's `SET NX PX` (the fenced-grant floor's grant) and the
/// notifying release. `sharded`: the deployment is a cluster, where the message goes by
/// `SPUBLISH`, as dlock's scripts send it there.
pub(super) async fn notifying_cycles(
    raw: &Raw,
    prefix: &str,
    tasks: usize,
    duration: Duration,
    fenced: bool,
    sharded: bool,
) -> dlock::Result<u64> {
    // Hash-tagged, so the channel named after the key is in the key's slot.
    let keys = |task| {
        let key = format!("{prefix}{{notifying-floor:{fenced}:{task}}}");
        let fence = format!("{key}:fence");
        vec![key, fence]
    };
    let grant = match fenced {
        true => RawGrant::Script(FENCED_GRANT),
        false => RawGrant::SetNx,
    };
    let release = match sharded {
        true => NOTIFYING_RELEASE.replace("'PUBLISH'", "'SPUBLISH'"),
        false => NOTIFYING_RELEASE.to_string(),
    };
    grant_release_cycles(raw, keys, tasks, duration, grant, &release).await
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
    let channel = format!("{key}:floor-channel");
    let (listener, mut receipts) = raw_listener(url, &channel).await?;
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

/// A raw subscriber of `channel` on a connection of its own to `url`, in a task of its
/// own: the instant each message arrives, stamped as it arrives (not when the measuring
/// loop looks). Abort the task when done.
async fn raw_listener(
    url: &str,
    channel: &str,
) -> dlock::Result<(
    tokio::task::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<Instant>,
)> {
    use futures_util::StreamExt;
    let mut subscriber = redis::Client::open(url)?.get_async_pubsub().await?;
    subscriber.subscribe(channel).await?;
    let (heard, receipts) = tokio::sync::mpsc::unbounded_channel();
    let listener = tokio::spawn(async move {
        let mut messages = subscriber.into_on_message();
        while messages.next().await.is_some() {
            if heard.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    Ok((listener, receipts))
}

/// The direct hand-off floor in the hand-off scenarios' shape, in milliseconds (p50): two
/// raw owners take turns; the waiting one queues its token, the holder holds 1 ms, then
/// hands the lock on with the floor's one script (`floor_direct_handoff.lua`: compare,
/// the next in line off a list, the lock and a fence written for it, one message), and the
/// time runs from sending that script to the new holder's subscriber (a connection of its
/// own) hearing it. What any release that hands a fenced lock on can do at best: one trip
/// to the server, one script, one message out. `url`: the one server.
pub(super) async fn direct_handoff(
    raw: &Raw,
    url: &str,
    key: &str,
    duration: Duration,
) -> dlock::Result<f64> {
    let channel = format!("{key}:floor-channel");
    let (fence_key, queue) = (format!("{key}:fence"), format!("{key}:queue"));
    let (listener, mut receipts) = raw_listener(url, &channel).await?;
    let hand_off = redis::Script::new(DIRECT_HANDOFF);
    let mut conn = raw.conn.clone();
    let mut owners = [
        format!("{:032x}", rand_token()),
        format!("{:032x}", rand_token() ^ 1),
    ];
    let mut gaps = Vec::new();
    let deadline = Instant::now() + duration;
    let measured = async {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(&owners[0])
            .arg("PX")
            .arg(10_000)
            .query_async(&mut conn)
            .await?;
        while Instant::now() < deadline {
            let _: i64 = redis::cmd("RPUSH")
                .arg(&queue)
                .arg(&owners[1])
                .query_async(&mut conn)
                .await?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            let sent = Instant::now();
            let fence: i64 = hand_off
                .key(key)
                .key(&fence_key)
                .key(&queue)
                .arg(&owners[0])
                .arg(10_000)
                .arg(&channel)
                .invoke_async(&mut conn)
                .await?;
            if fence <= 0 {
                return Err(dlock::Error::UnexpectedReply {
                    command: "the direct hand-off floor's script".into(),
                    reply: fence.to_string(),
                });
            }
            // The subscriber's connection ended: the floor keeps what it heard before.
            let Some(received) = receipts.recv().await else {
                break;
            };
            gaps.push(received.saturating_duration_since(sent).as_secs_f64() * 1000.0);
            owners.swap(0, 1);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok::<(), dlock::Error>(())
    }
    .await;
    listener.abort();
    measured?;
    Ok(percentiles(gaps)(0.5))
}
