//! The session under every handle: its lost signal reports each lost hold of every kind
//! (and of Redlock) once, with the reason, and nothing for holds that are still held or
//! were given back by their owner; shutdown reports what it releases, ends the stream and
//! resolves `done`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{take, Kind, KINDS};
use dlock::{Client, LockOptions, LostHold, LostHolds, LostReason, Wait};
use dlock_testkit::{IndependentMasters, RedisServer};

/// Collects reports from `lost` for `within`, keyed by lock name.
async fn collect(lost: &mut LostHolds, within: Duration) -> BTreeMap<String, Vec<LostHold>> {
    let mut seen: BTreeMap<String, Vec<LostHold>> = BTreeMap::new();
    let until = tokio::time::Instant::now() + within;
    while let Ok(Some(hold)) = tokio::time::timeout_at(until, lost.next()).await {
        seen.entry(hold.name.clone()).or_default().push(hold);
    }
    seen
}

fn name_of(kind: Kind) -> String {
    format!("session-{kind:?}").to_lowercase()
}

/// Every kind, renewed automatically: the holds whose keys are deleted behind their back
/// are each reported once as taken, by their token; the control holds of the same kinds,
/// left alone, and one given back by its owner are not reported at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_reports_each_taken_hold_of_every_kind_and_nothing_else() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut lost = client.session().lost();
    let options = LockOptions::default()
        .renewed(Duration::from_millis(900))
        .wait(Wait::NoWait);
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    for kind in KINDS {
        taken.push((
            kind,
            take(&client, kind, &name_of(kind), options, true)
                .await
                .unwrap(),
        ));
        let control = format!("{}-control", name_of(kind));
        kept.push(take(&client, kind, &control, options, true).await.unwrap());
    }
    let given_back = take(&client, Kind::Mutex, "session-given-back", options, true)
        .await
        .unwrap();
    given_back.unlock().await.unwrap();
    assert_eq!(client.session().holds(), 2 * KINDS.len());
    for (kind, _) in &taken {
        server.cmd::<i64>(&["DEL", &name_of(*kind)]);
    }
    // Renewals run a third of a lease apart: within three leases each deleted hold is found.
    let seen = collect(&mut lost, Duration::from_millis(2700)).await;
    for (kind, held) in &taken {
        let reports = seen.get(&name_of(*kind)).cloned().unwrap_or_default();
        assert_eq!(
            reports,
            vec![LostHold {
                name: name_of(*kind),
                token: held.token().to_string(),
                reason: LostReason::Taken,
            }],
            "{kind:?}: every report {seen:?}"
        );
    }
    assert_eq!(
        seen.len(),
        KINDS.len(),
        "only the deleted holds are reported: {seen:?}"
    );
    for control in &kept {
        assert_eq!(control.lost_signal().lost(), None, "{control:?}");
    }
    client.shutdown().await;
}

/// A hold nobody renews (a fixed lease) is reported expired by the session's own timer, not before its
/// validity ends, while its guard still exists.
#[tokio::test]
async fn a_hold_renewed_by_hand_is_reported_expired_at_its_deadline() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut lost = client.session().lost();
    let options = LockOptions::default()
        .ttl(Duration::from_millis(400))
        .wait(Wait::NoWait);
    let guard = client
        .mutex_with("session-manual", options)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let deadline = guard.valid_until();
    let report = tokio::time::timeout(Duration::from_secs(3), lost.next())
        .await
        .expect("an expiry is reported within the lease and a margin")
        .unwrap();
    let reported_at = Instant::now();
    assert_eq!(report.reason, LostReason::Expired);
    assert_eq!(report.token, guard.token());
    assert!(
        reported_at >= deadline,
        "reported {:?} before the validity ended",
        deadline - reported_at
    );
    // Reported once, however long it stays expired.
    let again = collect(&mut lost, Duration::from_millis(1500)).await;
    assert!(again.is_empty(), "{again:?}");
    drop(guard);
    client.shutdown().await;
}

/// Shutdown reports every hold it gives back as released, then the stream ends and
/// `done` resolves; before the shutdown `done` does not.
#[tokio::test]
async fn shutdown_reports_what_it_releases_ends_the_stream_and_is_done() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut lost = client.session().lost();
    let options = LockOptions::default().wait(Wait::NoWait);
    let a = take(&client, Kind::Mutex, "session-a", options, true)
        .await
        .unwrap();
    let b = take(&client, Kind::Read, "session-b", options, true)
        .await
        .unwrap();
    let session = client.session().clone();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), session.done())
            .await
            .is_err(),
        "done before any shutdown"
    );
    client.shutdown().await;
    tokio::time::timeout(Duration::from_secs(1), session.done())
        .await
        .expect("done once shut down");
    assert!(session.is_closed());
    assert_eq!(session.holds(), 0);
    let mut released = Vec::new();
    while let Some(hold) = tokio::time::timeout(Duration::from_secs(1), lost.next())
        .await
        .expect("the stream ends once the session is done")
    {
        released.push((hold.name, hold.reason));
    }
    released.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        released,
        vec![
            ("session-a".to_string(), LostReason::Released),
            ("session-b".to_string(), LostReason::Released),
        ]
    );
    // The keys are gone: shutdown really gave them back.
    for key in ["session-a", "session-b"] {
        assert_eq!(server.cmd::<i64>(&["EXISTS", key]), 0, "{key}");
    }
    drop((a, b));
}

/// A Redlock's session reports the hold its renewal finds gone from a majority, and only
/// that one; its shutdown ends the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_session_reports_the_hold_a_majority_lost() {
    let masters = IndependentMasters::start(3);
    let redlock = Client::redlock(masters.urls()).await.unwrap();
    let mut lost = redlock.session().lost();
    let options = LockOptions::default()
        .renewed(Duration::from_millis(900))
        .wait(Wait::NoWait);
    let gone = redlock
        .mutex_with("session-gone", options)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let kept = redlock
        .mutex_with("session-kept", options)
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    // Deleted from a majority: the next renewal round cannot keep it.
    for node in 0..2 {
        masters.server(node).cmd::<i64>(&["DEL", "session-gone"]);
    }
    let seen = collect(&mut lost, Duration::from_millis(2000)).await;
    assert_eq!(
        seen.get("session-gone"),
        Some(&vec![LostHold {
            name: "session-gone".into(),
            token: gone.token().to_string(),
            reason: LostReason::Taken,
        }]),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 1, "the kept hold is not reported: {seen:?}");
    assert_eq!(kept.lost_signal().lost(), None);
    let session = redlock.session().clone();
    redlock.shutdown().await;
    let rest = collect(&mut lost, Duration::from_secs(2)).await;
    assert_eq!(
        rest.get("session-kept").map(|r| r[0].reason),
        Some(LostReason::Released),
        "{rest:?}"
    );
    assert_eq!(lost.next().await, None);
    tokio::time::timeout(Duration::from_secs(1), session.done())
        .await
        .expect("done once shut down");
}

/// The blocking client reads the same stream: a fixed lease's expiry, then the end after
/// shutdown, and `done` returns.
#[test]
fn the_blocking_client_reads_the_session_too() {
    let server = RedisServer::start();
    let client = dlock::blocking::Client::connect(&server.url()).unwrap();
    let mut lost = client.lost();
    let guard = client
        .mutex_with(
            "session-blocking",
            LockOptions::default()
                .ttl(Duration::from_millis(300))
                .wait(Wait::NoWait),
        )
        .unwrap()
        .try_lock()
        .unwrap();
    let report = lost
        .next_timeout(Duration::from_secs(3))
        .expect("reported within the lease and a margin")
        .unwrap();
    assert_eq!(
        (report.name.as_str(), report.reason),
        ("session-blocking", LostReason::Expired)
    );
    assert_eq!(report.token, guard.token());
    drop(guard);
    client.shutdown();
    client.done();
    assert_eq!(lost.next_timeout(Duration::from_secs(1)).unwrap(), None);
}

/// A watcher of a client dropped without a shutdown sees its stream end, even while a
/// lost signal of one of its holds is still kept somewhere.
#[tokio::test]
async fn the_stream_ends_when_the_client_is_dropped() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut lost = client.session().lost();
    let guard = client
        .mutex_with("session-dropped", LockOptions::default().wait(Wait::NoWait))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    let signal = guard.lost_signal();
    drop(guard);
    drop(client);
    let end = tokio::time::timeout(Duration::from_secs(3), lost.next())
        .await
        .expect("the stream ends once the client is gone");
    assert_eq!(end, None);
    drop(signal);
}

/// A server, a client of it, and twenty mutexes `{prefix}0..19` held through it.
async fn twenty_holds(prefix: &str) -> (RedisServer, Client, Vec<dlock::MutexGuard>) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let options = LockOptions::default().wait(Wait::NoWait);
    let mut guards = Vec::new();
    for index in 0..20 {
        let mutex = client
            .mutex_with(&format!("{prefix}{index}"), options)
            .unwrap();
        guards.push(mutex.try_lock().await.unwrap());
    }
    (server, client, guards)
}

/// Two shutdowns at once: the second waits for the first, both end with every hold given
/// back and the session done.
#[tokio::test]
async fn concurrent_shutdowns_both_end_with_everything_released() {
    let (server, client, _guards) = twenty_holds("s").await;
    tokio::join!(client.shutdown(), client.shutdown());
    let left: Vec<String> = server.cmd(&["KEYS", "s*"]);
    assert!(
        left.is_empty(),
        "a shutdown returned before the holds were given back: {left:?}"
    );
    assert_eq!(client.session().holds(), 0);
    tokio::time::timeout(Duration::from_secs(1), client.session().done())
        .await
        .expect("done once both shutdowns returned");
}

/// A shutdown whose future is dropped midway (by `timeout`, `select!`) is finished by the
/// next one: every hold is given back and the session ends.
#[tokio::test]
async fn a_shutdown_dropped_midway_is_finished_by_the_next() {
    let (server, client, _guards) = twenty_holds("d").await;
    // Polled once, then dropped: closed, releases sent but not awaited.
    let _ = tokio::time::timeout(Duration::ZERO, client.shutdown()).await;
    tokio::time::timeout(Duration::from_secs(10), client.shutdown())
        .await
        .expect("the second shutdown finishes what the first began");
    let left: Vec<String> = server.cmd(&["KEYS", "d*"]);
    assert!(left.is_empty(), "holds left behind: {left:?}");
    tokio::time::timeout(Duration::from_secs(1), client.session().done())
        .await
        .expect("done");
}

/// `count` mutexes `{prefix}:0`, `{prefix}:1`, ... held through `client` (60 s leases),
/// 64 acquires at a time. With a wait, not one attempt: an acquire that meets a stall of
/// the shared machine longer than a short response timeout is retried (and recognised if
/// it had landed).
async fn hold_many(client: &Client, prefix: &str, count: usize) -> Vec<dlock::MutexGuard> {
    let options = LockOptions::default()
        .ttl(Duration::from_secs(60))
        .wait(Wait::Timeout(Duration::from_secs(60)));
    let mut guards = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(64) {
        let taken = futures_util::future::join_all(chunk.iter().map(|i| {
            let mutex = client
                .mutex_with(&format!("{prefix}:{i}"), options)
                .unwrap();
            async move { mutex.lock().await }
        }))
        .await;
        guards.extend(taken.into_iter().map(Result::unwrap));
    }
    guards
}

/// Thousands of holds at shutdown, with a short response timeout: every one is given
/// back. Sent all at once, the later give-backs waited behind the earlier ones on the one
/// connection past the response timeout and were never sent again (`dlock bench`'s
/// capacity scenario left 56 of 100,000 locks behind; this test, before the fix, 262 of
/// 6,000 at 150 ms); shutdown now keeps a bounded number in flight and resends a
/// timed-out one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_back_thousands_of_holds_within_a_short_response_timeout() {
    const HOLDS: usize = 10_000;
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(250))
        .connect()
        .await
        .unwrap();
    let guards = hold_many(&client, "many", HOLDS).await;
    let held: usize = server.cmd::<Vec<String>>(&["KEYS", "many:*"]).len();
    assert_eq!(held, HOLDS, "every lock is held before the shutdown");
    client.shutdown().await;
    let left: Vec<String> = server.cmd(&["KEYS", "many:*"]);
    assert!(
        left.is_empty(),
        "{} of {HOLDS} holds left behind by shutdown, e.g. {:?}",
        left.len(),
        left.first()
    );
    drop(guards);
}

/// A Redis that stops answering while thousands of holds wait to be given back: shutdown
/// gives up once none lands for its bound (the locks free when their leases end) instead
/// of sending every give-back twice into the silence, 128 at a time, for minutes (here:
/// 4,000 holds × 2 sends × 1 s / 128 ≈ 60 s). The bound is generous: only a shutdown that
/// kept on sending takes this long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_against_a_silent_redis_gives_up_instead_of_sending_every_give_back() {
    const HOLDS: usize = 4_000;
    let server = RedisServer::start();
    let proxy = dlock_testkit::Proxy::start(server.port());
    let client = Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let guards = hold_many(&client, "silent", HOLDS).await;
    proxy.black_hole(true);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(45), client.shutdown())
        .await
        .expect("shutdown gave up on a silent Redis instead of sending every give-back");
    assert_eq!(client.session().holds(), 0);
    // The control: the locks were not given back (Redis never heard), so nothing here
    // passed by releasing them quickly.
    let left: Vec<String> = server.cmd(&["KEYS", "silent:*"]);
    assert!(
        left.len() > HOLDS / 2,
        "the silent Redis released {} of {HOLDS} in {:?}",
        HOLDS - left.len(),
        started.elapsed()
    );
    proxy.black_hole(false);
    drop(guards);
}

/// A Redis that answers every give-back with a refusal (here: each lock found gone) is
/// answering: shutdown keeps giving back while the answers come, however slowly, rather
/// than counting only the give-backs that released something and abandoning the rest
/// after one bound. 1,000 holds, replies 1.2 s late, 128 in flight: about 9.6 s of
/// answers against a bound of 5 s (the least there is), so a shutdown that abandoned after
/// one bound would send only about 640 of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_keeps_giving_back_while_redis_answers_with_refusals() {
    const HOLDS: usize = 1_000;
    let server = RedisServer::start();
    let proxy = dlock_testkit::Proxy::start(server.port());
    let client = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(1_600))
        .connect()
        .await
        .unwrap();
    let guards = hold_many(&client, "refused", HOLDS).await;
    let _: () = server.cmd(&["FLUSHALL"]);
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    proxy.delay_replies(Duration::from_millis(1_200));
    client.shutdown().await;
    let calls = server.command_calls();
    let sent: u64 = ["evalsha", "eval"]
        .iter()
        .filter_map(|c| calls.get(*c))
        .sum();
    assert!(
        sent >= HOLDS as u64,
        "only {sent} of {HOLDS} give-backs were sent: shutdown stopped while Redis answered"
    );
    proxy.delay_replies(Duration::ZERO);
    drop(guards);
}
